//! The sidecar's protobuf messages: hand-made prost types, our own field numbers.

use prost::bytes::Bytes;

#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct SummaryMsg {
    #[prost(uint32, tag = "1")]
    pub(super) format: u32,
    #[prost(uint64, tag = "2")]
    pub(super) pprof_len: u64,
    #[prost(string, tag = "3")]
    pub(super) service: String,
    #[prost(string, optional, tag = "4")]
    pub(super) version: Option<String>,
    #[prost(uint64, tag = "5")]
    pub(super) start_unix_ns: u64,
    #[prost(uint64, tag = "6")]
    pub(super) duration_ns: u64,
    #[prost(uint64, tag = "7")]
    pub(super) wall_samples: u64,
    #[prost(uint64, tag = "8")]
    pub(super) cpu_samples: u64,
    #[prost(string, repeated, tag = "9")]
    pub(super) strings: Vec<String>,
    /// Each a [`RouteMsg`], kept as bytes so that routes are decoded only when wanted.
    #[prost(bytes = "bytes", repeated, tag = "10")]
    pub(super) routes: Vec<Bytes>,
    /// All routes added up (a [`RouteMsg`] whose `route` is unused); absent in a summary
    /// without it.
    #[prost(bytes = "bytes", optional, tag = "11")]
    pub(super) all_routes: Option<Bytes>,
    /// `deployment.environment`.
    #[prost(string, optional, tag = "12")]
    pub(super) environment: Option<String>,
    /// The instance label.
    #[prost(string, optional, tag = "13")]
    pub(super) instance: Option<String>,
    /// True when tags 12 and 13 were written (their absence then means unset); false in a
    /// summary from before they were.
    #[prost(bool, tag = "14")]
    pub(super) deployment: bool,
    /// Always true; the last field of format 1 (prost writes fields by tag): a format 1
    /// summary cut anywhere lacks it.
    #[prost(bool, tag = "15")]
    pub(super) complete: bool,
    /// The window's sampling period (format 2).
    #[prost(uint64, tag = "16")]
    pub(super) period_ns: u64,
    /// Spans the window left out for having no sample (format 2).
    #[prost(uint64, tag = "17")]
    pub(super) unsampled_spans: u64,
    /// CPU time and requests by route (format 2).
    #[prost(message, optional, tag = "18")]
    pub(super) costs: Option<CostsMsg>,
    /// Each a [`SpanNameMsg`], kept as bytes so that only the name asked about is decoded
    /// (format 2).
    #[prost(bytes = "bytes", repeated, tag = "19")]
    pub(super) span_names: Vec<Bytes>,
    /// True when tag 19 holds every span name of the window (its absence then means none).
    #[prost(bool, tag = "20")]
    pub(super) has_span_names: bool,
    /// Always true in format 2, and its last field: a format 2 summary cut anywhere lacks it.
    #[prost(bool, tag = "21")]
    pub(super) complete_2: bool,
}

/// [`WindowCosts`] as parallel columns.
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct CostsMsg {
    #[prost(uint32, repeated, tag = "1")]
    pub(super) route: Vec<u32>,
    #[prost(uint64, repeated, tag = "2")]
    pub(super) cpu_samples: Vec<u64>,
    #[prost(uint64, repeated, tag = "3")]
    pub(super) cpu_ns: Vec<u64>,
    #[prost(bool, repeated, tag = "4")]
    pub(super) requests_unknown: Vec<bool>,
    #[prost(uint32, repeated, tag = "5")]
    pub(super) request_route: Vec<u32>,
    #[prost(fixed64, repeated, tag = "6")]
    pub(super) request_span: Vec<u64>,
    /// True when tags 8 and 9 hold the window's request counts (format 3).
    #[prost(bool, tag = "7")]
    pub(super) counted: bool,
    #[prost(uint32, repeated, tag = "8")]
    pub(super) counted_route: Vec<u32>,
    #[prost(uint64, repeated, tag = "9")]
    pub(super) counted_requests: Vec<u64>,
}

/// The first field of a [`SpanNameMsg`]: decoding its bytes as this skips the rest.
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct SpanNameHead {
    #[prost(uint32, tag = "1")]
    pub(super) name: u32,
}

/// A [`SpanNameSummary`] as parallel columns.
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct SpanNameMsg {
    #[prost(uint32, tag = "1")]
    pub(super) name: u32,
    #[prost(fixed64, repeated, tag = "2")]
    pub(super) span_id: Vec<u64>,
    #[prost(uint64, repeated, tag = "3")]
    pub(super) start_unix_ns: Vec<u64>,
    #[prost(uint64, repeated, tag = "4")]
    pub(super) end_unix_ns: Vec<u64>,
    #[prost(bool, repeated, tag = "5")]
    pub(super) ended: Vec<bool>,
    #[prost(uint64, repeated, tag = "6")]
    pub(super) samples: Vec<u64>,
    #[prost(uint64, repeated, tag = "7")]
    pub(super) own_samples: Vec<u64>,
    #[prost(message, optional, tag = "8")]
    pub(super) with_descendants: Option<SelectionMsg>,
    #[prost(message, optional, tag = "9")]
    pub(super) own: Option<SelectionMsg>,
}

/// A [`SelectionSummary`] as parallel columns.
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct SelectionMsg {
    #[prost(uint64, tag = "1")]
    pub(super) wall_samples: u64,
    #[prost(uint64, tag = "2")]
    pub(super) cpu_samples: u64,
    #[prost(uint32, repeated, tag = "3")]
    pub(super) frame_function: Vec<u32>,
    #[prost(uint32, repeated, tag = "4")]
    pub(super) frame_file: Vec<u32>,
    #[prost(uint64, repeated, tag = "5")]
    pub(super) frame_self_wall: Vec<u64>,
    #[prost(uint64, repeated, tag = "6")]
    pub(super) frame_total_wall: Vec<u64>,
}

/// The first fields of a [`RouteMsg`]: decoding a route's bytes as this skips its columns.
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct RouteHead {
    #[prost(uint32, tag = "1")]
    pub(super) route: u32,
    #[prost(uint64, tag = "2")]
    pub(super) wall_samples: u64,
    #[prost(uint64, tag = "3")]
    pub(super) cpu_samples: u64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct RouteMsg {
    #[prost(uint32, tag = "1")]
    pub(super) route: u32,
    #[prost(uint64, tag = "2")]
    pub(super) wall_samples: u64,
    #[prost(uint64, tag = "3")]
    pub(super) cpu_samples: u64,
    #[prost(uint32, repeated, tag = "4")]
    pub(super) frame_function: Vec<u32>,
    #[prost(uint32, repeated, tag = "5")]
    pub(super) frame_file: Vec<u32>,
    #[prost(uint64, repeated, tag = "6")]
    pub(super) frame_self_wall: Vec<u64>,
    #[prost(uint64, repeated, tag = "7")]
    pub(super) frame_total_wall: Vec<u64>,
    #[prost(uint32, repeated, tag = "8")]
    pub(super) cpu_function: Vec<u32>,
    #[prost(uint64, repeated, tag = "9")]
    pub(super) cpu_samples_by_function: Vec<u64>,
    #[prost(uint32, repeated, tag = "10")]
    pub(super) root_function: Vec<u32>,
    #[prost(uint64, repeated, tag = "11")]
    pub(super) root_cpu: Vec<u64>,
    #[prost(uint32, repeated, tag = "12")]
    pub(super) self_function: Vec<u32>,
    #[prost(uint32, repeated, tag = "13")]
    pub(super) self_file: Vec<u32>,
    #[prost(uint64, repeated, tag = "14")]
    pub(super) self_cpu: Vec<u64>,
}
