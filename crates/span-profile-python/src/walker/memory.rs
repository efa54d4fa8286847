//! Reading interpreter memory: the [`MemoryReader`] trait, the `process_vm_readv` reader (the
//! fallback of the in-process `GuardedReader`, and the reader of other processes), and a sparse
//! fake used by tests.
//!
//! Every read copies into a caller-owned buffer; nothing here hands out references into foreign
//! memory, so a torn or freed object can only produce wrong bytes (which the walker validates),
//! never a fault in this process.

use std::collections::BTreeMap;
use std::fmt;

/// Why a read of interpreter memory failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReadError {
    /// The address range is not mapped (or only partly mapped) in the target.
    Fault {
        /// Start of the requested range.
        addr: u64,
        /// Length of the requested range.
        len: usize,
    },
    /// The kernel refused the read (seccomp, ptrace scope, capabilities): `errno`.
    Denied(i32),
    /// The target process does not exist any more.
    NoProcess,
    /// A null pointer or a length beyond the reader's per-read cap.
    Invalid,
    /// Another OS error: `errno`.
    Os(i32),
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Fault { addr, len } => write!(f, "unmapped memory at {addr:#x} (+{len})"),
            Self::Denied(e) => write!(
                f,
                "process_vm_readv denied (errno {e}); seccomp or permissions block it"
            ),
            Self::NoProcess => f.write_str("the target process does not exist"),
            Self::Invalid => f.write_str("null address or oversized read"),
            Self::Os(e) => write!(f, "process_vm_readv failed (errno {e})"),
        }
    }
}

impl std::error::Error for ReadError {}

/// The largest single read any reader accepts; the walker never needs more than this at once
/// (line tables and strings are capped well below).
pub(crate) const MAX_READ: usize = 1 << 20;

/// Reads bytes of the interpreter's address space.
///
/// Implementations must be safe to call with any address: a bad address is an `Err`, never a
/// fault in the calling process.
pub trait MemoryReader {
    /// Fills `buf` with the bytes at `addr..addr + buf.len()`, entirely or not at all (on `Err`
    /// the contents of `buf` are unspecified).
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), ReadError>;

    /// Two independent reads; readers that can batch them (one syscall) override this.
    fn read_pair(
        &self,
        a: u64,
        abuf: &mut [u8],
        b: u64,
        bbuf: &mut [u8],
    ) -> (Result<(), ReadError>, Result<(), ReadError>) {
        (self.read(a, abuf), self.read(b, bbuf))
    }

    /// Reads `len` bytes at each of `addrs` into consecutive `len`-byte slots of `out`
    /// (`out[i * len..][..len]`) and sets `ok[i]` to whether read `i` succeeded. Entries past
    /// `out.len() / len` or `ok.len()` are not read. Readers that can batch (one syscall for
    /// many) override this.
    fn read_scatter(&self, addrs: &[u64], len: usize, out: &mut [u8], ok: &mut [bool]) {
        scatter_one_by_one(self, addrs, len, out, ok);
    }

    /// Reads each of `reqs` (an address and a length) into consecutive ranges of `out` (request
    /// `i` starts where request `i - 1` ends) and sets `ok[i]` to whether it succeeded.
    /// Requests that do not fit in `out` or `ok` are not read. Readers that can batch override
    /// this.
    fn read_vectored(&self, reqs: &[(u64, usize)], out: &mut [u8], ok: &mut [bool]) {
        vectored_one_by_one(self, reqs, out, ok);
    }

    /// Called by the walker before each tick's reads; a reader that decides once per tick how
    /// to read (see `GuardedReader`) decides here. Returns true if this tick's reads are
    /// in-process copies rather than system calls (false by default).
    fn begin_tick(&self) -> bool {
        false
    }
}

/// [`MemoryReader::read_scatter`] as one `read` per address (for readers with nothing to batch).
pub(crate) fn scatter_one_by_one<R: MemoryReader + ?Sized>(
    reader: &R,
    addrs: &[u64],
    len: usize,
    out: &mut [u8],
    ok: &mut [bool],
) {
    if len == 0 {
        return;
    }
    for ((&a, slot), flag) in addrs
        .iter()
        .zip(out.chunks_exact_mut(len))
        .zip(ok.iter_mut())
    {
        *flag = reader.read(a, slot).is_ok();
    }
}

/// [`MemoryReader::read_vectored`] as one `read` per request.
pub(crate) fn vectored_one_by_one<R: MemoryReader + ?Sized>(
    reader: &R,
    reqs: &[(u64, usize)],
    out: &mut [u8],
    ok: &mut [bool],
) {
    let mut at = 0usize;
    for (&(addr, len), flag) in reqs.iter().zip(ok.iter_mut()) {
        let Some(slot) = at.checked_add(len).and_then(|end| out.get_mut(at..end)) else {
            *flag = false;
            continue;
        };
        *flag = reader.read(addr, slot).is_ok();
        at += len;
    }
}

impl<R: MemoryReader + ?Sized> MemoryReader for &R {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), ReadError> {
        (**self).read(addr, buf)
    }
    fn read_pair(
        &self,
        a: u64,
        abuf: &mut [u8],
        b: u64,
        bbuf: &mut [u8],
    ) -> (Result<(), ReadError>, Result<(), ReadError>) {
        (**self).read_pair(a, abuf, b, bbuf)
    }
    fn read_scatter(&self, addrs: &[u64], len: usize, out: &mut [u8], ok: &mut [bool]) {
        (**self).read_scatter(addrs, len, out, ok)
    }
    fn read_vectored(&self, reqs: &[(u64, usize)], out: &mut [u8], ok: &mut [bool]) {
        (**self).read_vectored(reqs, out, ok)
    }
    fn begin_tick(&self) -> bool {
        (**self).begin_tick()
    }
}

/// Most iovecs passed to one `process_vm_readv` by [`MemoryReader::read_scatter`] (the kernel
/// accepts up to `IOV_MAX` = 1024; the arrays live on the sampler's stack).
const SCATTER_BATCH: usize = 64;

/// Typed reads on top of any [`MemoryReader`] (little-endian x86_64 values).
pub trait ReadExt: MemoryReader {
    /// Reads a `u64`.
    fn read_u64(&self, addr: u64) -> Result<u64, ReadError> {
        let mut b = [0u8; 8];
        self.read(addr, &mut b)?;
        Ok(u64::from_le_bytes(b))
    }
    /// Reads a pointer; a null pointer is [`ReadError::Invalid`].
    fn read_ptr(&self, addr: u64) -> Result<u64, ReadError> {
        match self.read_u64(addr)? {
            0 => Err(ReadError::Invalid),
            p => Ok(p),
        }
    }
    /// Reads an `i64`.
    fn read_i64(&self, addr: u64) -> Result<i64, ReadError> {
        let mut b = [0u8; 8];
        self.read(addr, &mut b)?;
        Ok(i64::from_le_bytes(b))
    }
    /// Reads an `i32`.
    fn read_i32(&self, addr: u64) -> Result<i32, ReadError> {
        let mut b = [0u8; 4];
        self.read(addr, &mut b)?;
        Ok(i32::from_le_bytes(b))
    }
    /// Reads a `u8`.
    fn read_u8(&self, addr: u64) -> Result<u8, ReadError> {
        let mut b = [0u8; 1];
        self.read(addr, &mut b)?;
        Ok(b[0])
    }
}

impl<R: MemoryReader + ?Sized> ReadExt for R {}

/// Asks the CPU to start bringing the cache line at `addr` of this process into its caches, and
/// returns without waiting: lines that many reads will each need are asked for together, so
/// that their misses overlap instead of following one another. It reads nothing and never
/// faults, whatever the address (mapped, freed or garbage), so any address may be passed.
#[inline]
pub(crate) fn prefetch(addr: u64) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: (1) PREFETCHT0 is in SSE, which every x86-64 CPU has. (2) It is a hint: it loads
    // no register and writes no memory, and an address that is not mapped raises no fault (it
    // is dropped; Intel SDM vol. 2B, "PREFETCHh"; AMD APM vol. 3, "PREFETCHlevel").
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
            addr as usize as *const i8,
        );
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = addr;
}

/// Field accessors over a buffer that holds a copied struct. Out-of-range offsets read as 0,
/// which every caller treats as "null / invalid", so a layout bug cannot panic.
pub(crate) fn field_u64(buf: &[u8], off: usize) -> u64 {
    buf.get(off..off + 8)
        .and_then(|s| <[u8; 8]>::try_from(s).ok())
        .map_or(0, u64::from_le_bytes)
}

/// See [`field_u64`].
pub(crate) fn field_i64(buf: &[u8], off: usize) -> i64 {
    field_u64(buf, off) as i64
}

/// See [`field_u64`].
pub(crate) fn field_i32(buf: &[u8], off: usize) -> i32 {
    buf.get(off..off + 4)
        .and_then(|s| <[u8; 4]>::try_from(s).ok())
        .map_or(0, i32::from_le_bytes)
}

/// See [`field_u64`].
pub(crate) fn field_u32(buf: &[u8], off: usize) -> u32 {
    field_i32(buf, off) as u32
}

/// See [`field_u64`].
pub(crate) fn field_u8(buf: &[u8], off: usize) -> u8 {
    buf.get(off).copied().unwrap_or(0)
}

/// Reads another process's (or this process's own) memory with `process_vm_readv(2)`.
///
/// The kernel copies the bytes and reports unmapped ranges as `EFAULT`, so reading a freed or
/// garbage address is safe. Blocked by some seccomp profiles (Docker's default allows it on
/// recent kernels) and by ptrace restrictions for other processes; construction probes once and
/// returns a clear error.
#[derive(Debug, Clone, Copy)]
pub struct ProcessVmReader {
    pid: libc::pid_t,
}

impl ProcessVmReader {
    /// A reader of the current process, probed by reading a local variable back.
    pub fn new() -> Result<Self, ReadError> {
        // SAFETY: (1) getpid has no preconditions and cannot fail.
        let pid = unsafe { libc::getpid() };
        let reader = Self { pid };
        let probe: u64 = 0x5eed_cafe_f00d_d00d;
        let addr = std::ptr::addr_of!(probe) as u64;
        let got = reader.read_u64(addr)?;
        if got != probe {
            return Err(ReadError::Os(0));
        }
        Ok(reader)
    }

    /// A reader of process `pid` (tests, or an out-of-process agent), probed by reading address
    /// 0: `EFAULT` means the call is allowed; `EPERM`/`ENOSYS` mean it is blocked.
    pub fn for_pid(pid: u32) -> Result<Self, ReadError> {
        let pid = libc::pid_t::try_from(pid).map_err(|_| ReadError::NoProcess)?;
        let reader = Self { pid };
        let mut b = [0u8; 8];
        match reader.raw_read(8, &mut b) {
            Ok(()) | Err(ReadError::Fault { .. }) => Ok(reader),
            Err(e) => Err(e),
        }
    }

    /// The process this reader reads.
    pub fn pid(&self) -> u32 {
        self.pid as u32
    }

    fn errno_to_error(errno: i32, addr: u64, len: usize) -> ReadError {
        match errno {
            libc::EFAULT => ReadError::Fault { addr, len },
            libc::EPERM | libc::EACCES | libc::ENOSYS => ReadError::Denied(errno),
            libc::ESRCH => ReadError::NoProcess,
            e => ReadError::Os(e),
        }
    }

    fn raw_read(&self, addr: u64, buf: &mut [u8]) -> Result<(), ReadError> {
        if buf.is_empty() {
            return Ok(());
        }
        let local = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        let remote = libc::iovec {
            iov_base: addr as usize as *mut libc::c_void,
            iov_len: buf.len(),
        };
        // SAFETY: (1) `local` describes `buf`, which is valid for writes of `buf.len()` bytes
        // and exclusively borrowed for the call. (2) The remote iovec is only an address for the
        // kernel to copy from; an unmapped range is reported as EFAULT, not accessed by us.
        let n = unsafe { libc::process_vm_readv(self.pid, &local, 1, &remote, 1, 0) };
        if n < 0 {
            return Err(Self::errno_to_error(last_errno(), addr, buf.len()));
        }
        if n as usize != buf.len() {
            return Err(ReadError::Fault {
                addr,
                len: buf.len(),
            });
        }
        Ok(())
    }
}

fn last_errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

impl MemoryReader for ProcessVmReader {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), ReadError> {
        if addr == 0 || buf.len() > MAX_READ {
            return Err(ReadError::Invalid);
        }
        self.raw_read(addr, buf)
    }

    fn read_pair(
        &self,
        a: u64,
        abuf: &mut [u8],
        b: u64,
        bbuf: &mut [u8],
    ) -> (Result<(), ReadError>, Result<(), ReadError>) {
        if a == 0 || b == 0 || abuf.len() > MAX_READ || bbuf.len() > MAX_READ {
            return (self.read(a, abuf), self.read(b, bbuf));
        }
        let (alen, blen) = (abuf.len(), bbuf.len());
        let local = [
            libc::iovec {
                iov_base: abuf.as_mut_ptr().cast(),
                iov_len: alen,
            },
            libc::iovec {
                iov_base: bbuf.as_mut_ptr().cast(),
                iov_len: blen,
            },
        ];
        let remote = [
            libc::iovec {
                iov_base: a as usize as *mut libc::c_void,
                iov_len: alen,
            },
            libc::iovec {
                iov_base: b as usize as *mut libc::c_void,
                iov_len: blen,
            },
        ];
        // SAFETY: (1) Both local iovecs describe distinct, exclusively borrowed buffers valid
        // for writes of their lengths. (2) Remote iovecs are addresses for the kernel to copy
        // from; unmapped ranges come back as EFAULT or a short count.
        let n =
            unsafe { libc::process_vm_readv(self.pid, local.as_ptr(), 2, remote.as_ptr(), 2, 0) };
        if n >= 0 && n as usize == alen + blen {
            return (Ok(()), Ok(()));
        }
        // Partial transfers stop at an iovec boundary; redo the reads one by one so each gets
        // its own precise result.
        (self.raw_read(a, abuf), self.raw_read(b, bbuf))
    }

    fn read_scatter(&self, addrs: &[u64], len: usize, out: &mut [u8], ok: &mut [bool]) {
        if len == 0 || len > MAX_READ {
            ok.iter_mut().for_each(|f| *f = false);
            return;
        }
        let n = addrs.len().min(ok.len()).min(out.len() / len);
        let mut start = 0;
        while start < n {
            let end = (start + SCATTER_BATCH).min(n);
            let count = end - start;
            let empty = libc::iovec {
                iov_base: std::ptr::null_mut(),
                iov_len: 0,
            };
            let mut local = [empty; SCATTER_BATCH];
            let mut remote = [empty; SCATTER_BATCH];
            let slots = out
                .get_mut(start * len..end * len)
                .unwrap_or_default()
                .chunks_exact_mut(len);
            for ((slot, &a), (l, r)) in slots
                .zip(addrs.get(start..end).unwrap_or_default())
                .zip(local.iter_mut().zip(remote.iter_mut()))
            {
                *l = libc::iovec {
                    iov_base: slot.as_mut_ptr().cast(),
                    iov_len: len,
                };
                *r = libc::iovec {
                    // A null address is sent as is: the kernel reports EFAULT for it.
                    iov_base: a as usize as *mut libc::c_void,
                    iov_len: len,
                };
            }
            // SAFETY: (1) The first `count` local iovecs describe distinct `len`-byte chunks of
            // `out`, exclusively borrowed for the call; `count <= SCATTER_BATCH`, the arrays'
            // length. (2) Remote iovecs are only addresses for the kernel to copy from;
            // unmapped ranges end the transfer (a short count or EFAULT), never a fault here.
            let got = unsafe {
                libc::process_vm_readv(
                    self.pid,
                    local.as_ptr(),
                    count as libc::c_ulong,
                    remote.as_ptr(),
                    count as libc::c_ulong,
                    0,
                )
            };
            // The kernel copies iovecs in order and stops at the first fault: every whole slot
            // before that point is good; the faulting one is retried alone (it may be only
            // partly unmapped) and the batch resumes after it.
            let whole = usize::try_from(got).map_or(0, |g| g / len).min(count);
            for f in ok.get_mut(start..start + whole).unwrap_or_default() {
                *f = true;
            }
            start += whole;
            if whole < count {
                let ok_one = match (
                    addrs.get(start),
                    out.get_mut(start * len..(start + 1) * len),
                ) {
                    (Some(&a), Some(slot)) => self.read(a, slot).is_ok(),
                    _ => false,
                };
                if let Some(f) = ok.get_mut(start) {
                    *f = ok_one;
                }
                start += 1;
            }
        }
    }

    fn read_vectored(&self, reqs: &[(u64, usize)], out: &mut [u8], ok: &mut [bool]) {
        let n = reqs.len().min(ok.len());
        let empty = libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        };
        let (mut start, mut at) = (0usize, 0usize);
        while start < n {
            let mut local = [empty; SCATTER_BATCH];
            let mut remote = [empty; SCATTER_BATCH];
            let mut count = 0usize;
            let mut end_at = at;
            let mut rest = out.get_mut(at..).unwrap_or_default();
            for (&(addr, len), (l, r)) in reqs[start..n]
                .iter()
                .take(SCATTER_BATCH)
                .zip(local.iter_mut().zip(remote.iter_mut()))
            {
                if len > MAX_READ || len > rest.len() {
                    break;
                }
                let (slot, tail) = std::mem::take(&mut rest).split_at_mut(len);
                rest = tail;
                *l = libc::iovec {
                    iov_base: slot.as_mut_ptr().cast(),
                    iov_len: len,
                };
                *r = libc::iovec {
                    iov_base: addr as usize as *mut libc::c_void,
                    iov_len: len,
                };
                count += 1;
                end_at += len;
            }
            if count == 0 {
                let len = reqs[start].1;
                if len > MAX_READ && at.checked_add(len).is_some_and(|end| end <= out.len()) {
                    // Refused alone, as `read` refuses it; the rest go on.
                    ok[start] = false;
                    at += len;
                    start += 1;
                    continue;
                }
                // The next request does not fit in `out`: neither do the ones after it.
                for f in ok.get_mut(start..n).unwrap_or_default() {
                    *f = false;
                }
                return;
            }
            // SAFETY: (1) The first `count` local iovecs describe distinct, consecutive ranges
            // of `out` (split off one after another), exclusively borrowed for the call;
            // `count <= SCATTER_BATCH`, the arrays' length. (2) Remote iovecs are only
            // addresses for the kernel to copy from; unmapped ranges end the transfer (a short
            // count or EFAULT), never a fault here.
            let got = unsafe {
                libc::process_vm_readv(
                    self.pid,
                    local.as_ptr(),
                    count as libc::c_ulong,
                    remote.as_ptr(),
                    count as libc::c_ulong,
                    0,
                )
            };
            // Whole requests before the first fault are good; the faulting one is retried
            // alone (it may be only partly unmapped) and the batch resumes after it.
            let mut got = usize::try_from(got).unwrap_or(0);
            let mut done = 0usize;
            while done < count {
                let len = reqs[start + done].1;
                if got < len {
                    break;
                }
                got -= len;
                ok[start + done] = true;
                at += len;
                done += 1;
            }
            start += done;
            if done < count {
                let len = reqs[start].1;
                ok[start] = match out.get_mut(at..at + len) {
                    Some(slot) => self.read(reqs[start].0, slot).is_ok(),
                    None => false,
                };
                at += len;
                start += 1;
            }
            debug_assert!(at <= end_at);
        }
    }
}

/// A sparse, in-memory address space for tests and fuzzing: regions of bytes at addresses.
/// A read succeeds only if it lies entirely inside one region.
#[derive(Debug, Default, Clone)]
pub struct FakeMemory {
    regions: BTreeMap<u64, Vec<u8>>,
}

impl FakeMemory {
    /// An empty address space (every read faults).
    pub fn new() -> Self {
        Self::default()
    }

    /// Maps `bytes` at `addr`, replacing any region that starts there.
    pub fn insert(&mut self, addr: u64, bytes: Vec<u8>) {
        self.regions.insert(addr, bytes);
    }

    /// Overwrites bytes inside an existing region; returns false if the range is not mapped.
    pub fn write(&mut self, addr: u64, bytes: &[u8]) -> bool {
        let Some((&start, region)) = self.regions.range_mut(..=addr).next_back() else {
            return false;
        };
        let off = (addr - start) as usize;
        match region.get_mut(off..off + bytes.len()) {
            Some(dst) => {
                dst.copy_from_slice(bytes);
                true
            }
            None => false,
        }
    }

    /// Writes a little-endian `u64` at `addr` (see [`FakeMemory::write`]).
    pub fn write_u64(&mut self, addr: u64, v: u64) -> bool {
        self.write(addr, &v.to_le_bytes())
    }
}

impl MemoryReader for FakeMemory {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), ReadError> {
        if addr == 0 || buf.len() > MAX_READ {
            return Err(ReadError::Invalid);
        }
        let fault = ReadError::Fault {
            addr,
            len: buf.len(),
        };
        let (&start, region) = self.regions.range(..=addr).next_back().ok_or(fault)?;
        let off = usize::try_from(addr - start).map_err(|_| fault)?;
        let end = off.checked_add(buf.len()).ok_or(fault)?;
        let src = region.get(off..end).ok_or(fault)?;
        buf.copy_from_slice(src);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn self_reader_reads_own_memory() {
        let r = ProcessVmReader::new().expect("process_vm_readv allowed in tests");
        let v: [u64; 2] = [7, 9];
        let a = v.as_ptr() as u64;
        assert_eq!(r.read_u64(a).unwrap(), 7);
        let (mut x, mut y) = ([0u8; 8], [0u8; 8]);
        let (ra, rb) = r.read_pair(a + 8, &mut x, a, &mut y);
        assert!(ra.is_ok() && rb.is_ok());
        assert_eq!((u64::from_le_bytes(x), u64::from_le_bytes(y)), (9, 7));
        assert!(matches!(r.read_u64(8), Err(ReadError::Fault { .. })));
        assert_eq!(r.read_u64(0), Err(ReadError::Invalid));
        let (ra, rb) = r.read_pair(16, &mut x, a, &mut y);
        assert!(ra.is_err());
        assert!(rb.is_ok());
    }

    #[test]
    fn scatter_reads_batch_and_isolate_faults() {
        let r = ProcessVmReader::new().expect("process_vm_readv allowed in tests");
        let v: Vec<u64> = (0..200).collect();
        let base = v.as_ptr() as u64;
        // 150 addresses (three batches), with unmapped ones in the middle and at a boundary.
        let mut addrs: Vec<u64> = (0..150).map(|i| base + 8 * i).collect();
        addrs[5] = 16;
        addrs[64] = 0;
        addrs[149] = 24;
        let mut out = vec![0u8; 150 * 8];
        let mut ok = vec![false; 150];
        r.read_scatter(&addrs, 8, &mut out, &mut ok);
        let fake = {
            let mut m = FakeMemory::new();
            let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
            m.insert(base, bytes);
            m
        };
        let mut out2 = vec![0u8; 150 * 8];
        let mut ok2 = vec![false; 150];
        fake.read_scatter(&addrs, 8, &mut out2, &mut ok2);
        for i in 0..150 {
            let bad = i == 5 || i == 64 || i == 149;
            assert_eq!(ok[i], !bad, "slot {i}");
            assert_eq!(ok2[i], !bad, "fake slot {i}");
            if !bad {
                let got = u64::from_le_bytes(out[i * 8..i * 8 + 8].try_into().unwrap());
                assert_eq!(got, i as u64);
                assert_eq!(&out[i * 8..i * 8 + 8], &out2[i * 8..i * 8 + 8]);
            }
        }
    }

    #[test]
    fn vectored_reads_batch_and_isolate_faults() {
        let r = ProcessVmReader::new().expect("process_vm_readv allowed in tests");
        let v: Vec<u8> = (0..=255u8).cycle().take(64 * 1024).collect();
        let base = v.as_ptr() as u64;
        // 100 reads of varied lengths (two batches), unmapped ones among them.
        let mut reqs: Vec<(u64, usize)> = (0..100u64)
            .map(|i| (base + 7 * i, 1 + (i as usize * 13) % 300))
            .collect();
        reqs[3].0 = 16;
        reqs[63].0 = 0;
        reqs[99].0 = 24;
        let total: usize = reqs.iter().map(|r| r.1).sum();
        let (mut out, mut ok) = (vec![0u8; total], vec![false; 100]);
        r.read_vectored(&reqs, &mut out, &mut ok);
        let (mut out2, mut ok2) = (vec![0u8; total], vec![false; 100]);
        vectored_one_by_one(&r, &reqs, &mut out2, &mut ok2);
        let mut at = 0;
        for (i, &(addr, len)) in reqs.iter().enumerate() {
            let bad = matches!(i, 3 | 63 | 99);
            assert_eq!((ok[i], ok2[i]), (!bad, !bad), "read {i}");
            if !bad {
                let from = (addr - base) as usize;
                assert_eq!(&out[at..at + len], &v[from..from + len], "read {i}");
            }
            at += len;
        }
        // A request over MAX_READ is refused alone, as `read` refuses it.
        let mut big = vec![0u8; MAX_READ + 1 + 8];
        let mut ok4 = vec![true; 2];
        r.read_vectored(&[(base, MAX_READ + 1), (base, 8)], &mut big, &mut ok4);
        assert_eq!(ok4, vec![false, true]);
        // Requests beyond the buffer are not read.
        let mut small = vec![0u8; 10];
        let mut ok3 = vec![true; 2];
        r.read_vectored(&[(base, 8), (base, 8)], &mut small, &mut ok3);
        assert_eq!(ok3, vec![true, false]);
    }

    #[test]
    fn fake_memory_bounds() {
        let mut m = FakeMemory::new();
        m.insert(0x1000, vec![1, 2, 3, 4]);
        let mut b = [0u8; 2];
        assert!(m.read(0x1002, &mut b).is_ok());
        assert_eq!(b, [3, 4]);
        assert!(m.read(0x1003, &mut b).is_err());
        assert!(m.read(0xfff, &mut b).is_err());
        assert!(m.read(u64::MAX, &mut b).is_err());
        assert!(m.write(0x1000, &[9]));
        assert!(!m.write(0x1003, &[9, 9]));
        assert_eq!(field_u64(&[1, 2], 0), 0);
        assert_eq!(field_i32(&[1, 0, 0, 0], 0), 1);
    }
}
