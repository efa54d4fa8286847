//! [`NameBuf`]: the fixed-capacity buffer that thread and task names (and the `/proc` paths of
//! [`super::cpu`]) are copied into on the sampling path, without allocating.

/// Longest thread name kept (bytes, cut at a character boundary).
pub(crate) const MAX_THREAD_NAME: usize = 64;

/// A fixed-capacity string buffer for a thread name.
#[derive(Debug)]
pub(crate) struct NameBuf {
    bytes: [u8; MAX_THREAD_NAME],
    len: usize,
}

impl NameBuf {
    pub(crate) const fn new() -> Self {
        Self {
            bytes: [0; MAX_THREAD_NAME],
            len: 0,
        }
    }
    pub(crate) fn clear(&mut self) {
        self.len = 0;
    }
    /// Appends as much of `s` as fits, cut at a character boundary.
    pub(crate) fn push_str(&mut self, s: &str) {
        let room = MAX_THREAD_NAME - self.len;
        let mut end = s.len().min(room);
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        let src = s.as_bytes().get(..end).unwrap_or_default();
        if let Some(dst) = self.bytes.get_mut(self.len..self.len + end) {
            dst.copy_from_slice(src);
            self.len += end;
        }
    }
    /// The name. Not validated again: it is read for every sample, and validating a name's
    /// UTF-8 each time was about 6% of the instructions a waiting thread cost the sampler
    /// (docs/benchmarks.md, "The sampler's instructions per tick").
    pub(crate) fn as_str(&self) -> &str {
        let bytes = self.bytes.get(..self.len).unwrap_or_default();
        debug_assert!(std::str::from_utf8(bytes).is_ok());
        // SAFETY: `bytes` is UTF-8. Only `push_str` writes into the buffer, and it copies whole
        // characters of a `str` (cut at a character boundary) after the `len` bytes already
        // there, which are themselves such characters; `clear` empties it.
        unsafe { std::str::from_utf8_unchecked(bytes) }
    }
}

impl std::fmt::Write for NameBuf {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.push_str(s);
        Ok(())
    }
}
