//! [`Profile`] → pprof.

use std::io::Write;

use flate2::write::GzEncoder;
use flate2::Compression;
use prost::Message;
use span_profile_core::{Profile, SpanContext, SpanId, TraceId};

use crate::meta::{stack_override, MetaOut, META_FIELD, META_VERSION};
use crate::pprof;
use rustc_hash::FxHashMap;

/// Function name of the synthetic outermost frame added to stacks cut at the depth cap.
pub const TRUNCATED_FRAME: &str = "[truncated]";

/// The sample types written, in order, as (type, unit).
pub(crate) const SAMPLE_TYPES: [(&str, &str); 4] = [
    ("samples", "count"),
    ("cpu", "nanoseconds"),
    ("wall", "nanoseconds"),
    ("cpu_samples", "count"),
];

/// Per-sample label keys.
pub(crate) mod keys {
    pub(crate) const TRACE_ID: &str = "trace_id";
    pub(crate) const SPAN_ID: &str = "span_id";
    pub(crate) const LOCAL_ROOT_SPAN_ID: &str = "local_root_span_id";
    pub(crate) const ROUTE: &str = "route";
    pub(crate) const THREAD_NAME: &str = "thread_name";
    pub(crate) const TASK_NAME: &str = "task_name";
    /// All of them, in the order samples write them.
    pub(crate) const ALL: [&str; 6] = [
        TRACE_ID,
        SPAN_ID,
        LOCAL_ROOT_SPAN_ID,
        ROUTE,
        THREAD_NAME,
        TASK_NAME,
    ];
}

/// Encodes one window as gzip-compressed pprof (a `.pb.gz`), readable by `go tool pprof`.
///
/// Everything pprof has no field for (the resource, the window stats, the span table) travels
/// as one JSON document in a field that pprof does not define (ADR 0024), so
/// [`crate::decode_pprof`] gives back an equal [`Profile`], while `go tool pprof` and other
/// standard readers skip it: the profile has no comment, and shows as plain pprof.
///
/// ```
/// use span_profile_core::{Profile, Resource};
/// use span_profile_export::{decode_pprof, encode_pprof};
///
/// let p = Profile::empty(Resource::default(), 1_700_000_000_000_000_000, 10_000_000_000, 10_000_000);
/// let bytes = encode_pprof(&p);
/// assert_eq!(&bytes[..2], &[0x1f, 0x8b]); // gzip
/// assert_eq!(decode_pprof(&bytes).unwrap(), p);
/// ```
pub fn encode_pprof(profile: &Profile) -> Vec<u8> {
    let gzip_with = |meta: MetaMode| {
        let mut enc = GzEncoder::new(Vec::new(), Compression::fast());
        write_pprof_with(profile, &EncodeOptions::FILE, meta, &mut enc)?;
        enc.finish()
    };
    // Writing to a Vec<u8>, through gzip or not, cannot fail: only a streamed meta document
    // can (see `MetaString::write`), and the held form cannot.
    gzip_with(MetaMode::Streamed)
        .or_else(|_| gzip_with(MetaMode::Held))
        .unwrap_or_default()
}

/// Writes one window to `out` as [`encode_pprof`] encodes it, without holding the file in
/// memory, and returns `out`. A busy window's file is megabytes; the file store streams it to
/// disk this way.
///
/// On an error `out` may hold part of a file, so write to a temporary file and rename it
/// once this returns. The meta document is serialized twice (to learn its length, then to
/// write it); if the two passes ever disagreed this fails with [`std::io::ErrorKind::Other`],
/// and [`encode_pprof`], which can hold it, still encodes the window.
///
/// ```
/// use span_profile_core::{Profile, Resource};
/// use span_profile_export::{encode_pprof, write_pprof};
///
/// let p = Profile::empty(Resource::default(), 1_700_000_000_000_000_000, 10_000_000_000, 10_000_000);
/// let file = write_pprof(&p, Vec::new()).unwrap();
/// assert_eq!(file, encode_pprof(&p));
/// ```
pub fn write_pprof<W: Write>(profile: &Profile, out: W) -> std::io::Result<W> {
    let mut enc = GzEncoder::new(out, Compression::fast());
    write_pprof_with(profile, &EncodeOptions::FILE, MetaMode::Streamed, &mut enc)?;
    enc.finish()
}

/// Like [`encode_pprof`], without gzip: the bare protobuf message.
///
/// ```
/// use span_profile_core::{Profile, Resource};
/// use span_profile_export::{decode_pprof, encode_pprof_raw};
///
/// let p = Profile::empty(Resource::default(), 0, 1_000, 10);
/// assert_eq!(decode_pprof(&encode_pprof_raw(&p)).unwrap(), p);
/// ```
pub fn encode_pprof_raw(profile: &Profile) -> Vec<u8> {
    encode_pprof_with(profile, &EncodeOptions::FILE)
}

/// Which values a pprof carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(not(feature = "pyroscope"), allow(dead_code))]
pub(crate) enum ValueSet {
    /// The file store's four sample types ([`SAMPLE_TYPES`]), every sample.
    All,
    /// `samples/count` and `cpu/nanoseconds` (a Go CPU profile's types), rows with CPU time only.
    Cpu,
    /// `samples/count` and `wall/nanoseconds`, every sample.
    Wall,
}

impl ValueSet {
    /// Whether a sample has anything to say in this set.
    pub(crate) fn keeps(self, s: &span_profile_core::ProfileSample) -> bool {
        match self {
            ValueSet::All | ValueSet::Wall => true,
            ValueSet::Cpu => s.cpu_samples > 0 || s.cpu_ns > 0,
        }
    }
}

/// What [`encode_pprof_with`] writes. The file store writes everything; backends such as
/// Pyroscope, which turn every sample label but `span_id`/`trace_id` into a series label,
/// write only the low-cardinality ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct EncodeOptions {
    pub(crate) values: ValueSet,
    /// Write the local root's id as `span_id` (Pyroscope's convention) instead of the
    /// innermost span's.
    pub(crate) span_id_is_local_root: bool,
    pub(crate) local_root_label: bool,
    pub(crate) route_label: bool,
    pub(crate) thread_label: bool,
    pub(crate) task_label: bool,
    /// The meta document (resource, stats, span table) that makes the file lossless.
    pub(crate) meta: bool,
}

impl EncodeOptions {
    /// The lossless file-store form.
    pub(crate) const FILE: EncodeOptions = EncodeOptions {
        values: ValueSet::All,
        span_id_is_local_root: false,
        local_root_label: true,
        route_label: true,
        thread_label: true,
        task_label: true,
        meta: true,
    };
}

/// Encodes a window as bare pprof with `options`.
pub(crate) fn encode_pprof_with(profile: &Profile, options: &EncodeOptions) -> Vec<u8> {
    let raw_with = |meta: MetaMode| {
        let mut buf = Vec::new();
        write_pprof_with(profile, options, meta, &mut buf).map(|()| buf)
    };
    // As in `encode_pprof`: only the streamed meta document can fail.
    raw_with(MetaMode::Streamed)
        .or_else(|_| raw_with(MetaMode::Held))
        .unwrap_or_default()
}

/// How the meta document reaches the output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MetaMode {
    /// Serialized twice, to count its length and then straight to the output: never held.
    Streamed,
    /// Serialized once into memory, then written: the fallback if the two passes disagree.
    Held,
}

/// Bytes gathered before each write to the output.
const CHUNK: usize = 64 * 1024;

/// Writes a window as bare pprof with `options` to `out`, a piece at a time: the message
/// without its strings, each string, then each sample (protobuf fields may come in any
/// order, and a repeated field's entries may be spread). What is held meanwhile is the
/// string table's plan ([`StringTable`]): each distinct id once, as an id, and the other
/// strings borrowed from the profile. Neither the message nor a row per sample is ever built:
/// a busy window has tens of thousands of samples, each with an id of its own, and the export
/// runs while that window and the next one's buffers are both live.
fn write_pprof_with<W: Write>(
    profile: &Profile,
    options: &EncodeOptions,
    meta_mode: MetaMode,
    out: &mut W,
) -> std::io::Result<()> {
    let (head, strings, keys, meta) = to_head(profile, options);
    let mut buf = Vec::with_capacity(CHUNK);
    // Encoding into a Vec<u8> cannot fail: it grows as needed.
    let _ = head.encode(&mut buf);
    drop(head);
    strings.write(&mut buf, out)?;
    if let Some(meta) = &meta {
        meta.write(meta_mode, &mut buf, out)?;
    }
    write_samples(profile, options, &keys, &strings, &mut buf, out)
}

/// Gzip at a fast level: pprof compresses well even so, and export time matters more.
pub(crate) fn gzip(raw: &[u8]) -> Vec<u8> {
    let mut enc = GzEncoder::new(Vec::with_capacity(raw.len() / 4 + 64), Compression::fast());
    // Writing to a Vec<u8> cannot fail: its Write impl only grows the buffer.
    let _ = enc.write_all(raw);
    enc.finish().unwrap_or_default()
}

/// The pprof string table of one window, planned before anything is written. Its entries are,
/// in order: `""`; the trace ids; the span ids (each sorted and held once, as ids, and
/// printed only as they are written); then the other strings, borrowed from the profile, in
/// the order they were interned. The ids are gathered from the samples first, so every index
/// is known before the table is written, and the samples after it find theirs by binary
/// search instead of a hash map of formatted strings.
#[derive(Debug)]
struct StringTable<'a> {
    trace_ids: Vec<TraceId>,
    span_ids: Vec<SpanId>,
    text: Vec<&'a str>,
    text_index: FxHashMap<&'a str, i64>,
}

impl<'a> StringTable<'a> {
    /// The table of the ids that the samples kept by `options` write, and no other string yet.
    fn with_ids_of(profile: &Profile, options: &EncodeOptions) -> Self {
        let with_span = || {
            profile
                .samples
                .iter()
                .filter(|s| options.values.keeps(s))
                .filter_map(|s| s.span)
        };
        // Sized exactly: doubling would leave up to half as much again unused, at the peak.
        let n = with_span().count();
        let roots = options.local_root_label && !options.span_id_is_local_root;
        let mut trace_ids = Vec::with_capacity(n);
        let mut span_ids = Vec::with_capacity(if roots { 2 * n } else { n });
        for ctx in with_span() {
            trace_ids.push(ctx.trace_id);
            span_ids.push(labelled_span(&ctx, options));
            if roots {
                span_ids.push(ctx.local_root_span_id);
            }
        }
        span_ids.sort_unstable();
        span_ids.dedup();
        span_ids.shrink_to_fit();
        trace_ids.sort_unstable();
        trace_ids.dedup();
        trace_ids.shrink_to_fit();
        Self {
            trace_ids,
            span_ids,
            text: Vec::new(),
            text_index: FxHashMap::default(),
        }
    }

    /// Index of the first text entry.
    fn text_base(&self) -> i64 {
        1 + self.trace_ids.len() as i64 + self.span_ids.len() as i64
    }

    /// Index of `s`, interning it.
    fn get(&mut self, s: &'a str) -> i64 {
        if s.is_empty() {
            return 0;
        }
        if let Some(&i) = self.text_index.get(s) {
            return i;
        }
        let i = self.text_base() + self.text.len() as i64;
        self.text.push(s);
        self.text_index.insert(s, i);
        i
    }

    /// Index of a text interned before, 0 (`""`) if it was not. The plan gathers every string
    /// the samples write, with the same filters as the writer, so a miss is a bug: debug
    /// builds (the tests, the fuzz targets) panic on one.
    fn find(&self, s: &str) -> i64 {
        let i = self.text_index.get(s).copied();
        debug_assert!(
            i.is_some() || s.is_empty(),
            "{s:?} is not in the string table"
        );
        i.unwrap_or(0)
    }

    /// Index of a trace id gathered by [`StringTable::with_ids_of`], 0 (`""`) if it was not
    /// (a bug, as for [`StringTable::find`]).
    fn trace_id(&self, id: TraceId) -> i64 {
        let i = self.trace_ids.binary_search(&id);
        debug_assert!(i.is_ok(), "trace id {id} is not in the string table");
        i.map_or(0, |i| 1 + i as i64)
    }

    /// Index of a span id gathered by [`StringTable::with_ids_of`], 0 (`""`) if it was not
    /// (a bug, as for [`StringTable::find`]).
    fn span_id(&self, id: SpanId) -> i64 {
        let i = self.span_ids.binary_search(&id);
        debug_assert!(i.is_ok(), "span id {id} is not in the string table");
        i.map_or(0, |i| 1 + self.trace_ids.len() as i64 + i as i64)
    }

    /// Writes every entry in order as `Profile.string_table` (field 6, length-delimited; an
    /// empty string is written too, since its place is its index), through `buf`.
    fn write<W: Write>(&self, buf: &mut Vec<u8>, out: &mut W) -> std::io::Result<()> {
        buf.extend_from_slice(&[0x32, 0]);
        let ids = (self.trace_ids.iter().map(|id| (id.to_u128(), 32)))
            .chain(self.span_ids.iter().map(|id| (u128::from(id.to_u64()), 16)));
        for (id, digits) in ids {
            buf.extend_from_slice(&[0x32, digits as u8]);
            put_hex(buf, id, digits);
            if buf.len() >= CHUNK {
                out.write_all(buf)?;
                buf.clear();
            }
        }
        for s in &self.text {
            buf.push(0x32);
            put_varint(buf, s.len() as u64);
            if buf.len() + s.len() > CHUNK {
                out.write_all(buf)?;
                buf.clear();
                out.write_all(s.as_bytes())?;
            } else {
                buf.extend_from_slice(s.as_bytes());
            }
            if buf.len() >= CHUNK {
                out.write_all(buf)?;
                buf.clear();
            }
        }
        Ok(())
    }
}

/// The span id a sample's `span_id` label carries.
fn labelled_span(ctx: &SpanContext, options: &EncodeOptions) -> SpanId {
    if options.span_id_is_local_root {
        ctx.local_root_span_id
    } else {
        ctx.span_id
    }
}

/// Appends the `digits` low hex digits of `v`, lowercase: what the ids' `Display` prints.
fn put_hex(buf: &mut Vec<u8>, v: u128, digits: u32) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    buf.extend(
        (0..digits)
            .rev()
            .map(|d| HEX[((v >> (4 * d)) & 0xf) as usize]),
    );
}

/// The pprof form of u64 counters and times. Values above `i64::MAX` (292 years of
/// nanoseconds) wrap; the decoder reverses the cast, so the round trip stays exact.
fn signed(v: u64) -> i64 {
    v as i64
}

/// Appends the samples kept by `options` as field 2 of `Profile`, one message each, writing
/// `buf` out to `out` whenever it passes [`CHUNK`], and at the end. Protobuf concatenation is
/// merging, so appending them equals encoding them in the message, without building ten
/// thousand `Vec`s.
fn write_samples<W: Write>(
    profile: &Profile,
    options: &EncodeOptions,
    keys: &LabelKeys,
    strings: &StringTable<'_>,
    buf: &mut Vec<u8>,
    out: &mut W,
) -> std::io::Result<()> {
    let [k_trace, k_span, k_root, k_route, k_thread, k_task] = keys.keys;
    let o = options;
    let n_frames = profile.frames.len();
    let mut w = SampleWriter::default();
    let mut locations: Vec<u64> = Vec::new();
    let mut labels: Vec<(i64, i64)> = Vec::with_capacity(6);
    for s in profile.samples.iter().filter(|s| o.values.keeps(s)) {
        locations.clear();
        labels.clear();
        let stack = profile.stacks.get(s.stack as usize);
        locations.extend(
            stack
                .map(|st| st.frames.as_slice())
                .unwrap_or(&[])
                .iter()
                .filter(|&&f| (f as usize) < n_frames)
                .map(|&f| u64::from(f) + 1),
        );
        if let (Some(id), Some(true)) = (keys.truncated_location, stack.map(|st| st.truncated)) {
            locations.push(id);
        }
        let all;
        let values: &[i64] = match o.values {
            ValueSet::All => {
                all = [
                    signed(s.wall_samples),
                    signed(s.cpu_ns),
                    signed(s.wall_ns),
                    signed(s.cpu_samples),
                ];
                &all
            }
            ValueSet::Cpu => {
                all = [signed(s.cpu_samples), signed(s.cpu_ns), 0, 0];
                &all[..2]
            }
            ValueSet::Wall => {
                all = [signed(s.wall_samples), signed(s.wall_ns), 0, 0];
                &all[..2]
            }
        };
        if let Some(ctx) = &s.span {
            labels.extend([
                (k_trace, strings.trace_id(ctx.trace_id)),
                (k_span, strings.span_id(labelled_span(ctx, o))),
            ]);
            if o.local_root_label {
                labels.push((k_root, strings.span_id(ctx.local_root_span_id)));
            }
        }
        if o.route_label {
            labels.push((k_route, strings.find(&s.route)));
        }
        if o.thread_label {
            labels.push((k_thread, strings.find(&s.thread_name)));
        }
        if let Some(task) = s.task_name.as_deref().filter(|_| o.task_label) {
            labels.push((k_task, strings.find(task)));
        }
        w.put_sample(buf, &locations, values, &labels);
        if buf.len() >= CHUNK {
            out.write_all(buf)?;
            buf.clear();
        }
    }
    out.write_all(buf)?;
    buf.clear();
    Ok(())
}

/// The string indices of the label keys, and the id of the `[truncated]` location.
#[derive(Debug)]
struct LabelKeys {
    keys: [i64; 6],
    truncated_location: Option<u64>,
}

/// Writes `Profile.sample` entries straight to bytes: exactly what prost writes for a
/// [`pprof::Sample`] with string labels (checked by a test), without building ten thousand
/// messages and walking each packed field three times. The window's samples are the bulk of
/// the file, so this is the encoder's hot loop.
#[derive(Debug, Default)]
struct SampleWriter {
    body: Vec<u8>,
}

impl SampleWriter {
    fn put_sample(
        &mut self,
        out: &mut Vec<u8>,
        location_id: &[u64],
        value: &[i64],
        label: &[(i64, i64)],
    ) {
        let body = &mut self.body;
        body.clear();
        // Sample.location_id = 1, packed.
        if !location_id.is_empty() {
            body.push(0x0a);
            put_varint(
                body,
                location_id.iter().map(|&v| varint_len(v)).sum::<usize>() as u64,
            );
            location_id.iter().for_each(|&v| put_varint(body, v));
        }
        // Sample.value = 2, packed int64 (negative values take ten bytes, as in protobuf).
        if !value.is_empty() {
            body.push(0x12);
            put_varint(
                body,
                value.iter().map(|&v| varint_len(v as u64)).sum::<usize>() as u64,
            );
            value.iter().for_each(|&v| put_varint(body, v as u64));
        }
        // Sample.label = 3: Label{key = 1, str = 2}, zero fields omitted.
        for &(key, str) in label {
            let field = |v: i64| if v == 0 { 0 } else { 1 + varint_len(v as u64) };
            body.push(0x1a);
            put_varint(body, (field(key) + field(str)) as u64);
            if key != 0 {
                body.push(0x08);
                put_varint(body, key as u64);
            }
            if str != 0 {
                body.push(0x10);
                put_varint(body, str as u64);
            }
        }
        // Profile.sample = 2.
        out.push(0x12);
        put_varint(out, body.len() as u64);
        out.extend_from_slice(body);
    }
}

fn varint_len(v: u64) -> usize {
    // Bits used, rounded up to 7-bit groups; 1 for zero.
    ((64 - (v | 1).leading_zeros()) as usize).div_ceil(7)
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Builds the pprof message for a window without its samples and strings; the plan of its
/// string table, with every string the samples write; the label keys; and the meta document,
/// written by [`MetaString::write`] as a field of its own.
fn to_head<'a>(
    profile: &'a Profile,
    options: &EncodeOptions,
) -> (
    pprof::Profile,
    StringTable<'a>,
    LabelKeys,
    Option<MetaString<'a>>,
) {
    let mut strings = StringTable::with_ids_of(profile, options);
    let types: &[(&str, &str)] = match options.values {
        ValueSet::All => &SAMPLE_TYPES,
        ValueSet::Cpu => &[("samples", "count"), ("cpu", "nanoseconds")],
        ValueSet::Wall => &[("samples", "count"), ("wall", "nanoseconds")],
    };
    let sample_type = types
        .iter()
        .map(|(t, u)| pprof::ValueType {
            r#type: strings.get(t),
            unit: strings.get(u),
        })
        .collect();

    // One Function per distinct (function, file); one Location per Frame, id = index + 1.
    let mut function = Vec::new();
    let mut function_ids: FxHashMap<(&str, &str), u64> = FxHashMap::default();
    let mut location = Vec::with_capacity(profile.frames.len() + 1);
    for (i, frame) in profile.frames.iter().enumerate() {
        let key = (frame.function.as_str(), frame.file.as_str());
        let function_id = match function_ids.get(&key) {
            Some(&id) => id,
            None => {
                let id = function.len() as u64 + 1;
                function.push(pprof::Function {
                    id,
                    name: strings.get(key.0),
                    system_name: strings.get(key.0),
                    filename: strings.get(key.1),
                    start_line: 0,
                });
                function_ids.insert(key, id);
                id
            }
        };
        location.push(pprof::Location {
            id: i as u64 + 1,
            mapping_id: 0,
            address: 0,
            line: vec![pprof::Line {
                function_id,
                line: i64::from(frame.line),
                column: 0,
            }],
            is_folded: false,
        });
    }
    let truncated_location = profile.stacks.iter().any(|s| s.truncated).then(|| {
        let function_id = function.len() as u64 + 1;
        let name = strings.get(TRUNCATED_FRAME);
        function.push(pprof::Function {
            id: function_id,
            name,
            system_name: name,
            filename: 0,
            start_line: 0,
        });
        let id = location.len() as u64 + 1;
        location.push(pprof::Location {
            id,
            line: vec![pprof::Line {
                function_id,
                line: 0,
                column: 0,
            }],
            ..Default::default()
        });
        id
    });

    let keys = keys::ALL.map(|k| strings.get(k));
    let o = *options;
    for s in profile.samples.iter().filter(|s| o.values.keeps(s)) {
        if o.route_label {
            strings.get(&s.route);
        }
        if o.thread_label {
            strings.get(&s.thread_name);
        }
        if let Some(task) = s.task_name.as_deref().filter(|_| o.task_label) {
            strings.get(task);
        }
    }

    let (period_name, default_name) = match o.values {
        ValueSet::All | ValueSet::Cpu => ("cpu", "cpu"),
        ValueSet::Wall => ("wall", "wall"),
    };
    let meta = o.meta.then(|| meta_document(profile, truncated_location));
    let period_type = Some(pprof::ValueType {
        r#type: strings.get(period_name),
        unit: strings.get("nanoseconds"),
    });
    let default_sample_type = strings.get(default_name);

    let head = pprof::Profile {
        sample_type,
        sample: Vec::new(),
        mapping: Vec::new(),
        location,
        function,
        string_table: Vec::new(),
        drop_frames: 0,
        keep_frames: 0,
        time_nanos: signed(profile.start_unix_ns),
        duration_nanos: signed(profile.duration_ns),
        period_type,
        period: signed(profile.period_ns),
        // No comment: `go tool pprof` prints comments above every report (ADR 0024).
        comment: Vec::new(),
        default_sample_type,
        doc_url: 0,
    };
    let keys = LabelKeys {
        keys,
        truncated_location,
    };
    (head, strings, keys, meta)
}

/// The lossless meta document (see the crate docs), written as field [`META_FIELD`] of the
/// pprof message.
struct MetaString<'a> {
    meta: MetaOut<'a>,
}

impl MetaString<'_> {
    /// Writes the field (`buf` first, with what it holds). The span table makes it a busy
    /// window's largest field, megabytes of JSON, so [`MetaMode::Streamed`] serializes it
    /// twice, to count its length and then straight to `out`, rather than hold it; that fails
    /// if the two passes disagree. [`MetaMode::Held`] serializes it once, into memory.
    fn write<W: Write>(
        &self,
        mode: MetaMode,
        buf: &mut Vec<u8>,
        out: &mut W,
    ) -> std::io::Result<()> {
        if mode == MetaMode::Held {
            // Serializing plain data (strings, integers, ids that print as hex) does not
            // fail; if it ever did, the field would be left out: the meta lost, never the
            // file corrupted.
            let json = serde_json::to_vec(&self.meta).unwrap_or_default();
            if !json.is_empty() {
                put_meta_key(buf, json.len());
                out.write_all(buf)?;
                buf.clear();
                out.write_all(&json)?;
            }
            return Ok(());
        }
        let mut count = Counted {
            inner: std::io::sink(),
            written: 0,
        };
        // Serializing plain data (strings, integers, ids that print as hex) does not fail;
        // if it ever did, the field would be left out: the meta lost, never the file
        // corrupted.
        let json_len = match serde_json::to_writer(&mut count, &self.meta) {
            Ok(()) => count.written,
            Err(_) => return Ok(()),
        };
        put_meta_key(buf, json_len);
        out.write_all(buf)?;
        buf.clear();
        let mut w = std::io::BufWriter::with_capacity(
            CHUNK,
            Counted {
                inner: &mut *out,
                written: 0,
            },
        );
        serde_json::to_writer(&mut w, &self.meta)?;
        let w = w.into_inner().map_err(|e| e.into_error())?;
        if w.written != json_len {
            // The length is already written: a different second pass would corrupt the
            // message, so this attempt fails, and the caller writes the held form instead.
            return Err(std::io::Error::other(
                "the meta document serialized to a different length twice",
            ));
        }
        Ok(())
    }
}

/// A writer that counts the bytes it passes on.
struct Counted<W> {
    inner: W,
    written: usize,
}

impl<W: Write> Write for Counted<W> {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(b)?;
        self.written += n;
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// Appends the key and length of field [`META_FIELD`] (length-delimited) for `len` bytes.
fn put_meta_key(buf: &mut Vec<u8>, len: usize) {
    put_varint(buf, (u64::from(META_FIELD) << 3) | 2);
    put_varint(buf, len as u64);
}

fn meta_document(profile: &Profile, truncated_location: Option<u64>) -> MetaString<'_> {
    let sample_stacks = stack_override(profile);
    let meta = MetaOut {
        v: META_VERSION,
        resource: &profile.resource,
        stats: &profile.stats,
        spans: &profile.spans,
        requests: profile.requests.as_deref(),
        truncated_location,
        stacks: sample_stacks.as_ref().map(|_| profile.stacks.as_slice()),
        sample_stacks,
    };
    MetaString { meta }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_streamed_meta_document_writes_the_same_bytes_as_the_held_one() {
        let mut p = Profile::empty(span_profile_core::Resource::default(), 7, 1_000, 10);
        p.spans = (1..=300u64)
            .map(|i| {
                span_profile_core::SpanRecord::new(
                    TraceId::from_u128(u128::from(i)).unwrap(),
                    SpanId::from_u64(i).unwrap(),
                    SpanId::from_u64(1).unwrap(),
                    "pricing \"calculate\" ✓".into(),
                    i,
                )
                .with_parent_span_id(SpanId::from_u64(i / 2))
                .with_route((i % 3 == 0).then(|| "/orders/{id}".into()))
                .with_end_unix_ns(Some(i + 5))
            })
            .collect();
        let write = |mode| {
            let mut out = Vec::new();
            write_pprof_with(&p, &EncodeOptions::FILE, mode, &mut out).unwrap();
            out
        };
        let streamed = write(MetaMode::Streamed);
        assert_eq!(streamed, write(MetaMode::Held));
        assert_eq!(crate::decode_pprof(&streamed).unwrap(), p);
    }

    #[test]
    fn sample_writer_matches_prost() {
        type Case<'a> = (&'a [u64], &'a [i64], &'a [(i64, i64)]);
        let cases: &[Case<'_>] = &[
            (&[], &[], &[]),
            (
                &[1, 127, 128, 300, u64::MAX],
                &[0, 1, -1, i64::MAX, i64::MIN],
                &[(1, 2)],
            ),
            (
                &[5],
                &[10_000_000, 0, 3, 0],
                &[(0, 7), (7, 0), (0, 0), (200_000, 1 << 40)],
            ),
        ];
        for &(location_id, value, label) in cases {
            let sample = pprof::Sample {
                location_id: location_id.to_vec(),
                value: value.to_vec(),
                label: label
                    .iter()
                    .map(|&(key, str)| pprof::Label {
                        key,
                        str,
                        num: 0,
                        num_unit: 0,
                    })
                    .collect(),
            };
            let mut expected = Vec::new();
            prost::encoding::message::encode(2, &sample, &mut expected);
            let mut got = Vec::new();
            SampleWriter::default().put_sample(&mut got, location_id, value, label);
            assert_eq!(got, expected, "{sample:?}");
        }
        for v in [0u64, 1, 127, 128, 16_383, 16_384, u64::MAX] {
            assert_eq!(varint_len(v), prost::encoding::encoded_len_varint(v));
        }
    }
}
