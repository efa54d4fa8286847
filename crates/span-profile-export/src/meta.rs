//! What a [`Profile`] holds that pprof has no field for: one JSON document in a field of the
//! pprof message that pprof does not define, so standard readers skip it (ADR 0024). Files
//! written before that carried the same document in the profile's `comment`.

use serde::{Deserialize, Serialize};

use rustc_hash::FxHashSet;
use span_profile_core::{Profile, Resource, RouteRequests, SpanRecord, Stack, WindowStats};

/// The prefix of the comment that carried the meta document in files written before ADR 0024;
/// the decoder still reads it.
pub(crate) const META_PREFIX: &str = "span-profile.meta=";

/// The field number of `perftools.profiles.Profile` that carries the meta document (JSON,
/// length-delimited). pprof's own fields are 1 to 15; this one, `0x5350` ("SP"), is far past
/// them and outside protobuf's reserved 19000-19999. Protobuf readers skip a field they do
/// not know, so `go tool pprof` and other standard tools never show it (ADR 0024).
pub(crate) const META_FIELD: u32 = 0x5350;

/// Only the meta field of a pprof message: decoding the message as this skips everything
/// else.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct MetaField {
    /// The meta document, JSON, as written.
    #[prost(bytes = "vec", optional, tag = "21328")]
    pub(crate) meta: Option<Vec<u8>>,
}

/// Version of the meta layout; bumped on incompatible changes.
pub(crate) const META_VERSION: u32 = 1;

/// Written by the encoder, read by the decoder ([`MetaIn`]).
#[derive(Debug, Serialize)]
pub(crate) struct MetaOut<'a> {
    pub(crate) v: u32,
    pub(crate) resource: &'a Resource,
    pub(crate) stats: &'a WindowStats,
    pub(crate) spans: &'a [SpanRecord],
    /// The window's request counts by route (ADR 0032); absent when it did not count them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) requests: Option<&'a [RouteRequests]>,
    /// Id of the synthetic `[truncated]` location, when one was written.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) truncated_location: Option<u64>,
    /// The stack table, only when the decoder could not rebuild it from the samples
    /// (duplicate, unused or out-of-order stacks, or out-of-range frame indices).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) stacks: Option<&'a [Stack]>,
    /// Each sample's stack index, written together with `stacks`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) sample_stacks: Option<Vec<u32>>,
}

/// The decoder's view of the meta document (field or, in older files, comment). `stats` stays JSON so that counters added to
/// [`WindowStats`] later, or missing from older files, fall back to their defaults.
#[derive(Debug, Deserialize)]
pub(crate) struct MetaIn {
    #[serde(default)]
    pub(crate) v: u32,
    #[serde(default)]
    pub(crate) resource: Option<Resource>,
    #[serde(default)]
    pub(crate) stats: Option<serde_json::Value>,
    #[serde(default)]
    pub(crate) spans: Vec<SpanRecord>,
    /// Absent in files written before requests were counted.
    #[serde(default)]
    pub(crate) requests: Option<Vec<RouteRequests>>,
    #[serde(default)]
    pub(crate) truncated_location: Option<u64>,
    #[serde(default)]
    pub(crate) stacks: Option<Vec<Stack>>,
    #[serde(default)]
    pub(crate) sample_stacks: Option<Vec<u32>>,
}

impl MetaIn {
    /// The window stats, with any counter the file lacks at its default.
    pub(crate) fn stats(&self) -> Result<WindowStats, serde_json::Error> {
        let Some(serde_json::Value::Object(stored)) = &self.stats else {
            return Ok(WindowStats::default());
        };
        let mut merged = serde_json::to_value(WindowStats::default())?;
        if let serde_json::Value::Object(m) = &mut merged {
            for (k, v) in stored {
                if m.contains_key(k) {
                    m.insert(k.clone(), v.clone());
                }
            }
        }
        serde_json::from_value(merged)
    }
}

/// The stack table and per-sample stack indices that the decoder rebuilds from the pprof
/// samples alone: stacks interned in order of first use, out-of-range frames left out.
/// Returns `None` when that equals what `profile` holds, so the meta need not carry them.
pub(crate) fn stack_override(profile: &Profile) -> Option<Vec<u32>> {
    let n_frames = profile.frames.len();
    let mut seen = FxHashSet::with_capacity_and_hasher(profile.stacks.len(), Default::default());
    let mut next: u32 = 0;
    let mut canonical = true;
    for s in &profile.samples {
        let Some(stack) = profile.stacks.get(s.stack as usize) else {
            canonical = false;
            break;
        };
        if s.stack == next {
            if stack.frames.iter().any(|&f| f as usize >= n_frames) || !seen.insert(stack) {
                canonical = false;
                break;
            }
            next += 1;
        } else if s.stack > next {
            canonical = false;
            break;
        }
    }
    if canonical && next as usize == profile.stacks.len() {
        None
    } else {
        Some(profile.samples.iter().map(|s| s.stack).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_meta_fields_tag_is_the_constant() {
        use prost::Message;
        let bytes = MetaField {
            meta: Some(b"{}".to_vec()),
        }
        .encode_to_vec();
        let mut key = Vec::new();
        prost::encoding::encode_key(
            META_FIELD,
            prost::encoding::WireType::LengthDelimited,
            &mut key,
        );
        assert!(bytes.starts_with(&key));
        assert_eq!(META_FIELD, 21328);
    }

    #[test]
    fn stats_missing_or_unknown_counters_fall_back_to_defaults() {
        let m: MetaIn =
            serde_json::from_str(r#"{"v":1,"stats":{"ticks":7,"from_the_future":1}}"#).unwrap();
        let stats = m.stats().unwrap();
        assert_eq!(stats.ticks, 7);
        assert_eq!(stats.dropped_samples, 0);
        let m: MetaIn = serde_json::from_str("{}").unwrap();
        assert_eq!(m.stats().unwrap(), WindowStats::default());
        assert!(m.resource.is_none() && m.spans.is_empty());
    }
}
