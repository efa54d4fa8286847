//! pprof → [`Profile`].

use std::io::Read;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

use flate2::read::GzDecoder;
use prost::Message;
use span_profile_core::labels::BACKGROUND_ROUTE;
use span_profile_core::{
    Frame, FrameIndex, ParseIdError, Profile, ProfileSample, Resource, SpanContext, SpanId, Stack,
    TraceId,
};

use crate::encode::{keys, SAMPLE_TYPES};
use crate::meta::{MetaField, MetaIn, META_PREFIX, META_VERSION};
use crate::pprof;
use rustc_hash::FxHashMap;

/// The largest decompressed profile [`decode_pprof`] accepts: 256 MiB.
pub const MAX_DECOMPRESSED_LEN: u64 = 256 << 20;

/// Why bytes could not be decoded as a profile.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The data starts like gzip but does not decompress.
    #[error("the data starts with a gzip header but does not decompress ({0}); the file is probably truncated or corrupt")]
    Gzip(#[source] std::io::Error),
    /// Decompressed, the data is larger than the memory a decode may take:
    /// [`MAX_DECOMPRESSED_LEN`], which the store's readers share across their threads.
    #[error("the profile decompresses to more than {limit} bytes, the memory a decode may take; refusing to decode it (a gzip bomb? a span-profile window is far smaller)")]
    TooLarge {
        /// The limit in bytes.
        limit: u64,
    },
    /// The bytes are not a pprof `Profile` message.
    #[error("not a pprof profile: protobuf decoding failed ({0}); the file may be truncated, or not pprof")]
    Protobuf(#[source] prost::DecodeError),
    /// No string table at all: every pprof profile has one, starting with `""`. What decodes
    /// to this is a zero-byte file, a gzip stream of nothing, or bytes that are not a profile.
    #[error("not a pprof profile: it has no string table (a zero-byte or cut-off file?)")]
    Empty,
    /// `string_table[0]` is not the empty string, as pprof requires.
    #[error("string_table[0] must be the empty string, found {0:?}")]
    StringTableStart(String),
    /// A field refers to a string past the end of the string table.
    #[error("{field} refers to string {index}, but the string table has {len} entries")]
    StringIndex {
        /// The field, e.g. `function 3 name`.
        field: String,
        /// The index found.
        index: i64,
        /// The string table's length.
        len: usize,
    },
    /// A sample refers to a location id that no location has.
    #[error("sample {sample} refers to location id {id}, which no location has")]
    UnknownLocation {
        /// Sample index.
        sample: usize,
        /// Location id.
        id: u64,
    },
    /// A location's line refers to a function id that no function has.
    #[error("location {location} refers to function id {id}, which no function has")]
    UnknownFunction {
        /// Location id.
        location: u64,
        /// Function id.
        id: u64,
    },
    /// A sample has a different number of values than the profile has sample types.
    #[error("sample {sample} has {got} values, but the profile declares {expected} sample types")]
    ValueCount {
        /// Sample index.
        sample: usize,
        /// Values found.
        got: usize,
        /// Sample types declared.
        expected: usize,
    },
    /// A `trace_id`, `span_id` or `local_root_span_id` label is not a valid id.
    #[error("sample {sample}: label {key} = {value:?} is not a valid id: {source}")]
    BadId {
        /// Sample index.
        sample: usize,
        /// Label key.
        key: &'static str,
        /// Label value.
        value: String,
        /// What is wrong with it.
        source: ParseIdError,
    },
    /// The span-profile metadata (resource, window stats, span table: a field of its own, or a
    /// `span-profile.meta=` comment in files written before ADR 0024) is not valid JSON of a
    /// known layout.
    #[error("the span-profile metadata (span table) is malformed ({0}); the file was not written by a compatible span-profile")]
    Meta(#[source] serde_json::Error),
    /// The metadata's contents contradict the samples.
    #[error("the span-profile metadata (span table) does not match the samples: {0}")]
    MetaMismatch(String),
}

/// Decodes a pprof profile, gzip-compressed or not, into a [`Profile`]: the inverse of
/// [`crate::encode_pprof`]. Never panics, whatever the bytes.
///
/// The resource, window stats and span table are read from the field the encoder writes them
/// to (ADR 0024), or, in files written before it, from the `span-profile.meta=` comment.
///
/// Profiles that other tools wrote (for example Go's `runtime/pprof`) decode with defaults:
/// a default [`Resource`], no spans, and samples typed by name (`samples/count`,
/// `cpu/nanoseconds`, `wall/nanoseconds`, `cpu_samples/count`; others are ignored).
///
/// ```
/// use span_profile_export::{decode_pprof, DecodeError};
/// assert!(matches!(decode_pprof(&[0x1f, 0x8b, 0x08]), Err(DecodeError::Gzip(_))));
/// assert!(decode_pprof(b"\xff\xff\xff").is_err());
/// ```
pub fn decode_pprof(data: &[u8]) -> Result<Profile, DecodeError> {
    let budget = DecodeBudget::new(MAX_DECOMPRESSED_LEN);
    let mut lease = budget.lease(Access::Alone);
    decode_leased(data, &mut lease)
}

/// [`decode_pprof`], decompressing into memory reserved from `lease`. A refusal is
/// [`DecodeError::TooLarge`]; [`Lease::refused`] then says whether the data could fit in the
/// whole budget, once the other leases are gone.
pub(crate) fn decode_leased(data: &[u8], lease: &mut Lease<'_>) -> Result<Profile, DecodeError> {
    let msg = if data.starts_with(&[0x1f, 0x8b]) {
        let raw = inflate(data, lease)?;
        decode_message(&raw)
    } else {
        decode_message(data)
    }?;
    from_message(&msg.0, msg.1.meta.as_deref())
}

/// Decompresses gzip `data` into a buffer whose every byte of capacity is reserved from
/// `lease` first, so that no decode, on any thread, takes memory the budget has not granted.
fn inflate(data: &[u8], lease: &mut Lease<'_>) -> Result<Vec<u8>, DecodeError> {
    const CHUNK: usize = 64 << 10;
    let too_large = |lease: &Lease<'_>| DecodeError::TooLarge {
        limit: lease.limit(),
    };
    // The gzip trailer holds the length mod 2^32: the exact capacity for an honest file, so it
    // is read without a reallocation (which holds two buffers at once). It is only a hint.
    let hint = data
        .len()
        .checked_sub(4)
        .and_then(|i| data.get(i..))
        .and_then(|t| <[u8; 4]>::try_from(t).ok())
        .map_or(0, u32::from_le_bytes);
    let first = u64::from(hint).clamp(CHUNK as u64, lease.limit().max(CHUNK as u64));
    let mut raw: Vec<u8> = Vec::new();
    if !lease.reserve(first) {
        return Err(too_large(lease));
    }
    raw.reserve_exact(first as usize);
    let mut reserved = first;
    let mut chunk = vec![0u8; CHUNK];
    let mut gz = GzDecoder::new(data);
    loop {
        let n = match gz.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(DecodeError::Gzip(e)),
        };
        let need = (raw.len() + n) as u64;
        if need > reserved {
            // Growing copies the buffer: the old and the new one are both held for a moment.
            let grown = (reserved * 2).max(need);
            let to = if lease.reserve(grown) {
                grown
            } else if lease.reserve(need) {
                need
            } else {
                return Err(too_large(lease));
            };
            raw.reserve_exact((to as usize).saturating_sub(raw.len()));
            lease.release(reserved);
            reserved = to;
        }
        raw.extend_from_slice(chunk.get(..n).unwrap_or_default());
    }
    Ok(raw)
}

/// How a [`Lease`] shares its [`DecodeBudget`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    /// Beside other shared leases.
    Shared,
    /// The only lease: it waits for the others to end, and new ones wait for it.
    Alone,
}

/// Memory that decoding may take at once, shared by every thread of one command (ADR 0031):
/// each decode reserves the bytes it decompresses into before it allocates them, and gives
/// them back when it ends. A decode that does not fit beside the others is tried again
/// alone ([`Access::Alone`]), with the whole budget; what does not fit then is too large.
#[derive(Debug)]
pub(crate) struct DecodeBudget {
    limit: u64,
    state: Mutex<BudgetState>,
    changed: Condvar,
}

#[derive(Debug, Default)]
struct BudgetState {
    /// Bytes reserved by all leases.
    used: u64,
    /// The most `used` has been.
    peak: u64,
    /// Shared leases held.
    shared: usize,
    /// Whether a lease alone is held.
    alone: bool,
    /// Leases alone that wait; shared leases wait while there are any, so these get their turn.
    waiting_alone: usize,
}

impl DecodeBudget {
    /// A budget of `limit` bytes.
    pub(crate) fn new(limit: u64) -> Self {
        Self {
            limit,
            state: Mutex::new(BudgetState::default()),
            changed: Condvar::new(),
        }
    }

    /// The budget's size in bytes.
    pub(crate) fn limit(&self) -> u64 {
        self.limit
    }

    fn lock(&self) -> MutexGuard<'_, BudgetState> {
        // A poisoned lock still holds valid counts: every change is one statement.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn wait<'a>(&self, g: MutexGuard<'a, BudgetState>) -> MutexGuard<'a, BudgetState> {
        self.changed.wait(g).unwrap_or_else(PoisonError::into_inner)
    }

    /// A lease on the budget, once `access` allows: a shared lease waits while a lease alone is
    /// held or waited for, a lease alone until no other lease is held. A thread must not
    /// hold a lease while it takes another.
    pub(crate) fn lease(&self, access: Access) -> Lease<'_> {
        let mut g = self.lock();
        match access {
            Access::Shared => {
                while g.alone || g.waiting_alone > 0 {
                    g = self.wait(g);
                }
                g.shared += 1;
            }
            Access::Alone => {
                g.waiting_alone += 1;
                while g.alone || g.shared > 0 {
                    g = self.wait(g);
                }
                g.waiting_alone -= 1;
                g.alone = true;
            }
        }
        Lease {
            budget: self,
            access,
            held: 0,
            refused: None,
        }
    }
}

/// Why a [`Lease`] refused a reservation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// Other leases hold the rest of the budget: a lease alone may succeed.
    Busy,
    /// More than the whole budget.
    TooLarge,
}

/// A share of a [`DecodeBudget`]; what it reserved goes back when it is dropped.
#[derive(Debug)]
pub(crate) struct Lease<'a> {
    budget: &'a DecodeBudget,
    access: Access,
    held: u64,
    refused: Option<Refusal>,
}

impl Lease<'_> {
    /// The whole budget's size.
    pub(crate) fn limit(&self) -> u64 {
        self.budget.limit
    }

    /// Reserves `n` more bytes; `false` (and [`Lease::refused`] says why) if the budget has not
    /// got them.
    pub(crate) fn reserve(&mut self, n: u64) -> bool {
        let mut g = self.budget.lock();
        let mine = self.held.saturating_add(n);
        if g.used.saturating_add(n) <= self.budget.limit {
            g.used += n;
            g.peak = g.peak.max(g.used);
            self.held = mine;
            return true;
        }
        self.refused = Some(
            if mine > self.budget.limit || self.access == Access::Alone {
                Refusal::TooLarge
            } else {
                Refusal::Busy
            },
        );
        false
    }

    /// Gives back `n` of the bytes reserved.
    pub(crate) fn release(&mut self, n: u64) {
        let n = n.min(self.held);
        self.held -= n;
        let mut g = self.budget.lock();
        g.used = g.used.saturating_sub(n);
        drop(g);
        self.budget.changed.notify_all();
    }

    /// Why the last refused reservation was refused; `None` if none was.
    pub(crate) fn refused(&self) -> Option<Refusal> {
        self.refused
    }
}

impl Drop for Lease<'_> {
    fn drop(&mut self) {
        let mut g = self.budget.lock();
        g.used = g.used.saturating_sub(self.held);
        match self.access {
            Access::Shared => g.shared = g.shared.saturating_sub(1),
            Access::Alone => g.alone = false,
        }
        drop(g);
        self.budget.changed.notify_all();
    }
}

/// The pprof message, and its meta field on its own (prost skips a field a message does not
/// declare, so each decode skips what the other reads).
fn decode_message(raw: &[u8]) -> Result<(pprof::Profile, MetaField), DecodeError> {
    let msg = pprof::Profile::decode(raw).map_err(DecodeError::Protobuf)?;
    let meta = MetaField::decode(raw).map_err(DecodeError::Protobuf)?;
    Ok((msg, meta))
}

/// Looks strings up with bounds checks.
struct Strings<'a>(&'a [String]);

impl<'a> Strings<'a> {
    fn get(&self, index: i64, field: impl FnOnce() -> String) -> Result<&'a str, DecodeError> {
        if index == 0 {
            return Ok("");
        }
        usize::try_from(index)
            .ok()
            .and_then(|i| self.0.get(i))
            .map(String::as_str)
            .ok_or_else(|| DecodeError::StringIndex {
                field: field(),
                index,
                len: self.0.len(),
            })
    }
}

/// The inverse of the encoder's cast.
fn unsigned(v: i64) -> u64 {
    v as u64
}

/// The profile in `msg`, with the meta document `meta` (the field's bytes) if there is one,
/// else the one in a `span-profile.meta=` comment.
pub(crate) fn from_message(
    msg: &pprof::Profile,
    meta: Option<&[u8]>,
) -> Result<Profile, DecodeError> {
    if msg.string_table.is_empty() {
        return Err(DecodeError::Empty);
    }
    if let Some(first) = msg.string_table.first().filter(|s| !s.is_empty()) {
        return Err(DecodeError::StringTableStart(first.clone()));
    }
    let strings = Strings(&msg.string_table);

    let mut meta: Option<MetaIn> = match meta {
        Some(json) => Some(serde_json::from_slice(json).map_err(DecodeError::Meta)?),
        None => None,
    };
    // Files written before ADR 0024 carry it in a comment.
    if meta.is_none() {
        for (i, &c) in msg.comment.iter().enumerate() {
            let text = strings.get(c, || format!("comment {i}"))?;
            if let Some(json) = text.strip_prefix(META_PREFIX) {
                meta = Some(serde_json::from_str(json).map_err(DecodeError::Meta)?);
                break;
            }
        }
    }
    if let Some(m) = &meta {
        if m.v > META_VERSION {
            return Err(DecodeError::MetaMismatch(format!(
                "meta version {} is newer than this decoder understands ({META_VERSION}); upgrade span-profile",
                m.v
            )));
        }
    }
    let truncated_location = meta.as_ref().and_then(|m| m.truncated_location);

    // Functions by id.
    let mut functions: FxHashMap<u64, (&str, &str)> =
        FxHashMap::with_capacity_and_hasher(msg.function.len(), Default::default());
    for f in &msg.function {
        let name = strings.get(f.name, || format!("function {} name", f.id))?;
        let file = strings.get(f.filename, || format!("function {} filename", f.id))?;
        functions.insert(f.id, (name, file));
    }

    // Frames: one per line of each location, in location order; lines are innermost first.
    let mut frames: Vec<Frame> = Vec::with_capacity(msg.location.len());
    let mut location_frames: FxHashMap<u64, (usize, usize)> =
        FxHashMap::with_capacity_and_hasher(msg.location.len(), Default::default());
    for loc in &msg.location {
        if Some(loc.id) == truncated_location {
            continue;
        }
        let start = frames.len();
        if loc.line.is_empty() {
            frames.push(Frame::new(format!("0x{:x}", loc.address), "", 0));
        }
        for line in &loc.line {
            let &(name, file) =
                functions
                    .get(&line.function_id)
                    .ok_or(DecodeError::UnknownFunction {
                        location: loc.id,
                        id: line.function_id,
                    })?;
            let line_no = u32::try_from(line.line).unwrap_or(0);
            frames.push(Frame::new(name, file, line_no));
        }
        location_frames.insert(loc.id, (start, frames.len()));
    }

    // Which value goes where.
    let mut columns: [Option<usize>; 4] = [None; 4];
    for (i, vt) in msg.sample_type.iter().enumerate() {
        let t = strings.get(vt.r#type, || format!("sample_type {i} type"))?;
        let u = strings.get(vt.unit, || format!("sample_type {i} unit"))?;
        if let Some(col) = SAMPLE_TYPES.iter().position(|&(st, su)| st == t && su == u) {
            if let Some(slot) = columns.get_mut(col) {
                slot.get_or_insert(i);
            }
        }
    }

    let mut stacks: Vec<Stack> = Vec::new();
    let mut stack_index: FxHashMap<&[u64], u32> =
        FxHashMap::with_capacity_and_hasher(msg.sample.len(), Default::default());
    // Parsed span contexts by their label strings' indices: each id is parsed once.
    let mut span_cache: FxHashMap<[i64; 3], Option<SpanContext>> = FxHashMap::default();
    let mut interned: FxHashMap<&str, Arc<str>> = FxHashMap::default();
    let mut samples = Vec::with_capacity(msg.sample.len());
    for (si, s) in msg.sample.iter().enumerate() {
        if s.value.len() != msg.sample_type.len() {
            return Err(DecodeError::ValueCount {
                sample: si,
                got: s.value.len(),
                expected: msg.sample_type.len(),
            });
        }
        // Samples that share a location list share a stack. Distinct lists give distinct
        // stacks, except in hand-made files with the truncation marker not outermost, where
        // the table may then hold a duplicate: harmless, as every index stays valid.
        let stack = match stack_index.get(s.location_id.as_slice()) {
            Some(&i) => i,
            None => {
                let mut stack = Stack::default();
                for &id in &s.location_id {
                    if Some(id) == truncated_location {
                        stack.truncated = true;
                        continue;
                    }
                    let &(a, b) = location_frames
                        .get(&id)
                        .ok_or(DecodeError::UnknownLocation { sample: si, id })?;
                    stack.frames.extend((a..b).map(|f| f as FrameIndex));
                }
                let i = stacks.len() as u32;
                stacks.push(stack);
                stack_index.insert(&s.location_id, i);
                i
            }
        };

        let value = |col: usize| {
            columns
                .get(col)
                .copied()
                .flatten()
                .and_then(|i| s.value.get(i))
                .map_or(0, |&v| unsigned(v))
        };
        let mut labels: [Option<&str>; 6] = [None; 6];
        // -1 for an absent label: no valid string index, so the key is exact.
        let mut span_key = [-1i64; 3];
        for (li, l) in s.label.iter().enumerate() {
            let key = strings.get(l.key, || format!("sample {si} label {li} key"))?;
            if let Some(k) = keys::ALL.iter().position(|&k| k == key) {
                let v = strings.get(l.str, || format!("sample {si} label {key}"))?;
                if let Some(slot) = labels.get_mut(k) {
                    if slot.is_none() {
                        *slot = Some(v);
                        if let Some(sk) = span_key.get_mut(k) {
                            *sk = l.str;
                        }
                    }
                }
            }
        }
        let [trace, span, root, route, thread, task] = labels;
        let span = match span_cache.get(&span_key) {
            Some(&c) => c,
            None => {
                let c = span_context(si, trace, span, root)?;
                span_cache.insert(span_key, c);
                c
            }
        };
        let route = route.unwrap_or(BACKGROUND_ROUTE);
        let route = arc_of(&mut interned, route);
        let thread_name = arc_of(&mut interned, thread.unwrap_or(""));
        let task_name = task.map(|t| arc_of(&mut interned, t));
        samples.push(
            ProfileSample::new(stack, route, thread_name)
                .with_span(span)
                .with_task_name(task_name)
                .with_wall(value(0), value(2))
                .with_cpu(value(3), value(1)),
        );
    }

    let (resource, stats, spans, requests) = match meta {
        None => (Resource::default(), Default::default(), Vec::new(), None),
        Some(m) => {
            if let (Some(table), Some(indices)) = (m.stacks.as_ref(), m.sample_stacks.as_ref()) {
                if indices.len() != samples.len() {
                    return Err(DecodeError::MetaMismatch(format!(
                        "it lists stacks for {} samples, the profile has {}",
                        indices.len(),
                        samples.len()
                    )));
                }
                stacks = table.clone();
                for (s, &i) in samples.iter_mut().zip(indices) {
                    s.stack = i;
                }
            }
            let stats = m.stats().map_err(DecodeError::Meta)?;
            (m.resource.unwrap_or_default(), stats, m.spans, m.requests)
        }
    };

    let mut p = Profile::empty(
        resource,
        unsigned(msg.time_nanos),
        unsigned(msg.duration_nanos),
        unsigned(msg.period),
    );
    p.frames = frames;
    p.stacks = stacks;
    p.samples = samples;
    p.spans = spans;
    p.requests = requests;
    p.stats = stats;
    Ok(p)
}

/// Shares one `Arc<str>` per distinct label value.
fn arc_of<'a>(interned: &mut FxHashMap<&'a str, Arc<str>>, s: &'a str) -> Arc<str> {
    interned.entry(s).or_insert_with(|| Arc::from(s)).clone()
}

/// The sample's span: needs both `trace_id` and `span_id`; the local root defaults to the span.
fn span_context(
    sample: usize,
    trace: Option<&str>,
    span: Option<&str>,
    root: Option<&str>,
) -> Result<Option<SpanContext>, DecodeError> {
    let (Some(trace), Some(span)) = (trace, span) else {
        return Ok(None);
    };
    let bad = |key: &'static str, value: &str, source| DecodeError::BadId {
        sample,
        key,
        value: value.to_owned(),
        source,
    };
    let trace_id: TraceId = trace.parse().map_err(|e| bad(keys::TRACE_ID, trace, e))?;
    let span_id: SpanId = span.parse().map_err(|e| bad(keys::SPAN_ID, span, e))?;
    let local_root_span_id = match root {
        Some(r) => r.parse().map_err(|e| bad(keys::LOCAL_ROOT_SPAN_ID, r, e))?,
        None => span_id,
    };
    Ok(Some(SpanContext {
        trace_id,
        span_id,
        local_root_span_id,
    }))
}

#[cfg(test)]
mod tests {
    use super::{inflate, Access, DecodeBudget, DecodeError, Refusal};
    use std::io::Write as _;

    fn gzip(len: usize, honest_trailer: bool) -> Vec<u8> {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&vec![7u8; len]).unwrap();
        let mut out = gz.finish().unwrap();
        if !honest_trailer {
            let n = out.len();
            out[n - 4..].copy_from_slice(&10u32.to_le_bytes());
        }
        out
    }

    #[test]
    fn what_fits_alone_is_inflated_and_what_does_not_is_refused() {
        let budget = DecodeBudget::new(1 << 20);
        let mut lease = budget.lease(Access::Shared);
        assert_eq!(
            inflate(&gzip(300 << 10, true), &mut lease).unwrap().len(),
            300 << 10
        );
        drop(lease);
        // A trailer that states a small length is no help to a bomb: the buffer grows only
        // as far as the budget.
        for honest in [true, false] {
            let mut lease = budget.lease(Access::Shared);
            let r = inflate(&gzip(3 << 20, honest), &mut lease);
            assert!(matches!(r, Err(DecodeError::TooLarge { limit }) if limit == 1 << 20));
            assert_eq!(lease.refused(), Some(Refusal::TooLarge));
        }
        assert_eq!(budget.lock().used, 0, "every lease gave its bytes back");
    }

    #[test]
    fn a_decode_that_does_not_fit_beside_another_is_busy_and_fits_alone() {
        let budget = DecodeBudget::new(1 << 20);
        let mut other = budget.lease(Access::Shared);
        assert!(other.reserve(700 << 10));
        let mut lease = budget.lease(Access::Shared);
        let data = gzip(600 << 10, true);
        assert!(inflate(&data, &mut lease).is_err());
        assert_eq!(lease.refused(), Some(Refusal::Busy));
        drop(lease);
        std::thread::scope(|s| {
            let alone = s.spawn(|| {
                let mut lease = budget.lease(Access::Alone);
                inflate(&data, &mut lease).map(|raw| raw.len())
            });
            // The lease alone waits for `other`; new shared leases wait for it.
            std::thread::sleep(std::time::Duration::from_millis(50));
            assert!(!alone.is_finished());
            drop(other);
            assert_eq!(alone.join().unwrap().unwrap(), 600 << 10);
        });
        assert_eq!(budget.lock().used, 0);
    }

    #[test]
    fn threads_never_hold_more_than_the_budget() {
        let budget = DecodeBudget::new(1 << 20);
        let files: Vec<Vec<u8>> = (0..16).map(|i| gzip((100 + 50 * i) << 10, true)).collect();
        std::thread::scope(|s| {
            for t in 0..4 {
                let (budget, files) = (&budget, &files);
                s.spawn(move || {
                    for f in files.iter().skip(t).step_by(4) {
                        for access in [Access::Shared, Access::Alone] {
                            let mut lease = budget.lease(access);
                            let r = inflate(f, &mut lease);
                            if r.is_ok() || lease.refused() != Some(Refusal::Busy) {
                                assert!(r.is_ok(), "every file fits alone");
                                break;
                            }
                        }
                    }
                });
            }
        });
        let g = budget.lock();
        // The files are 100 KiB to 850 KiB: four threads at once pass the budget unless they
        // share it.
        assert!(g.peak <= 1 << 20 && g.peak > 1 << 19, "{}", g.peak);
        assert_eq!(g.used, 0);
    }
}
