//! [`Profile`] → pprof.

use std::collections::HashMap;
use std::io::Write;

use flate2::write::GzEncoder;
use flate2::Compression;
use prost::Message;
use span_profile_core::{Profile, SpanContext};

use crate::meta::{stack_override, MetaOut, META_PREFIX, META_VERSION};
use crate::pprof;

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
}

/// Encodes one window as gzip-compressed pprof (a `.pb.gz`), readable by `go tool pprof`.
///
/// Everything pprof has no field for (the resource, the window stats, the span table) travels
/// in one `comment` starting with `span-profile.meta=`, so [`crate::decode_pprof`] gives back
/// an equal [`Profile`].
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
    gzip(&encode_pprof_raw(profile))
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
    to_message(profile).encode_to_vec()
}

/// Gzip at a fast level: pprof compresses well even so, and export time matters more.
pub(crate) fn gzip(raw: &[u8]) -> Vec<u8> {
    let mut enc = GzEncoder::new(Vec::with_capacity(raw.len() / 4 + 64), Compression::fast());
    // Writing to a Vec<u8> cannot fail: its Write impl only grows the buffer.
    let _ = enc.write_all(raw);
    enc.finish().unwrap_or_default()
}

/// Interns strings into a pprof string table (entry 0 is `""`).
#[derive(Debug)]
struct Strings<'a> {
    table: Vec<String>,
    index: HashMap<&'a str, i64>,
    /// Strings that are not borrowed from the profile (formatted ids, the meta comment).
    owned: HashMap<String, i64>,
}

impl<'a> Strings<'a> {
    fn new() -> Self {
        let mut index = HashMap::new();
        index.insert("", 0);
        Self {
            table: vec![String::new()],
            index,
            owned: HashMap::new(),
        }
    }

    fn get(&mut self, s: &'a str) -> i64 {
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        let i = self.push(s.to_owned());
        self.index.insert(s, i);
        i
    }

    fn get_owned(&mut self, s: String) -> i64 {
        if let Some(&i) = self.index.get(s.as_str()).or_else(|| self.owned.get(&s)) {
            return i;
        }
        let i = self.push(s.clone());
        self.owned.insert(s, i);
        i
    }

    fn push(&mut self, s: String) -> i64 {
        let i = self.table.len() as i64;
        self.table.push(s);
        i
    }
}

/// The pprof form of u64 counters and times. Values above `i64::MAX` (292 years of
/// nanoseconds) wrap; the decoder reverses the cast, so the round trip stays exact.
fn signed(v: u64) -> i64 {
    v as i64
}

/// Builds the pprof message for a window.
pub(crate) fn to_message(profile: &Profile) -> pprof::Profile {
    let mut strings = Strings::new();
    let sample_type = SAMPLE_TYPES
        .iter()
        .map(|(t, u)| pprof::ValueType {
            r#type: strings.get(t),
            unit: strings.get(u),
        })
        .collect();

    // One Function per distinct (function, file); one Location per Frame, id = index + 1.
    let mut function = Vec::new();
    let mut function_ids: HashMap<(&str, &str), u64> = HashMap::new();
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

    let k_trace = strings.get(keys::TRACE_ID);
    let k_span = strings.get(keys::SPAN_ID);
    let k_root = strings.get(keys::LOCAL_ROOT_SPAN_ID);
    let k_route = strings.get(keys::ROUTE);
    let k_thread = strings.get(keys::THREAD_NAME);
    let k_task = strings.get(keys::TASK_NAME);
    let label = |key, str| pprof::Label {
        key,
        str,
        num: 0,
        num_unit: 0,
    };
    let mut span_strings: HashMap<SpanContext, [i64; 3]> = HashMap::new();
    let n_frames = profile.frames.len();
    let sample = profile
        .samples
        .iter()
        .map(|s| {
            let stack = profile.stacks.get(s.stack as usize);
            let mut location_id: Vec<u64> = stack
                .map(|st| st.frames.as_slice())
                .unwrap_or(&[])
                .iter()
                .filter(|&&f| (f as usize) < n_frames)
                .map(|&f| u64::from(f) + 1)
                .collect();
            if let (Some(id), Some(true)) = (truncated_location, stack.map(|st| st.truncated)) {
                location_id.push(id);
            }
            let mut labels = Vec::with_capacity(6);
            if let Some(ctx) = &s.span {
                let [t, sp, r] = *span_strings.entry(*ctx).or_insert_with(|| {
                    [
                        strings.get_owned(ctx.trace_id.to_string()),
                        strings.get_owned(ctx.span_id.to_string()),
                        strings.get_owned(ctx.local_root_span_id.to_string()),
                    ]
                });
                labels.push(label(k_trace, t));
                labels.push(label(k_span, sp));
                labels.push(label(k_root, r));
            }
            labels.push(label(k_route, strings.get(&s.route)));
            labels.push(label(k_thread, strings.get(&s.thread_name)));
            if let Some(task) = &s.task_name {
                labels.push(label(k_task, strings.get(task)));
            }
            pprof::Sample {
                location_id,
                value: vec![
                    signed(s.wall_samples),
                    signed(s.cpu_ns),
                    signed(s.wall_ns),
                    signed(s.cpu_samples),
                ],
                label: labels,
            }
        })
        .collect();

    let sample_stacks = stack_override(profile);
    let meta = MetaOut {
        v: META_VERSION,
        resource: &profile.resource,
        stats: &profile.stats,
        spans: &profile.spans,
        truncated_location,
        stacks: sample_stacks.as_ref().map(|_| profile.stacks.as_slice()),
        sample_stacks,
    };
    // Serializing plain data (strings, integers, ids that print as hex) into a String
    // cannot fail; an empty comment would only lose the meta, never corrupt the file.
    let meta_json = serde_json::to_string(&meta).unwrap_or_default();
    let comment = vec![strings.get_owned(format!("{META_PREFIX}{meta_json}"))];
    let period_type = Some(pprof::ValueType {
        r#type: strings.get("cpu"),
        unit: strings.get("nanoseconds"),
    });
    let default_sample_type = strings.get("cpu");

    pprof::Profile {
        sample_type,
        sample,
        mapping: Vec::new(),
        location,
        function,
        string_table: strings.table,
        drop_frames: 0,
        keep_frames: 0,
        time_nanos: signed(profile.start_unix_ns),
        duration_nanos: signed(profile.duration_ns),
        period_type,
        period: signed(profile.period_ns),
        comment,
        default_sample_type,
        doc_url: 0,
    }
}
