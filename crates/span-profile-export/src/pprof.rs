//! The messages of pprof's `profile.proto` (package `perftools.profiles`), written by hand
//! from the documented field numbers, as prost messages.
//!
//! Every `int64` that names a string is an index into [`Profile::string_table`], whose entry 0
//! is always the empty string. Every `id` is nonzero; `0` in a reference means "none".
//!
//! ```
//! use prost::Message;
//! use span_profile_export::pprof;
//!
//! let p = pprof::Profile {
//!     string_table: vec![String::new(), "samples".into(), "count".into()],
//!     sample_type: vec![pprof::ValueType { r#type: 1, unit: 2 }],
//!     ..Default::default()
//! };
//! let bytes = p.encode_to_vec();
//! assert_eq!(pprof::Profile::decode(bytes.as_slice()).unwrap(), p);
//! ```

/// A whole profile: sample types, samples, and the tables they index.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Profile {
    /// What each entry of [`Sample::value`] measures, in the same order.
    #[prost(message, repeated, tag = "1")]
    pub sample_type: Vec<ValueType>,
    /// The samples.
    #[prost(message, repeated, tag = "2")]
    pub sample: Vec<Sample>,
    /// Binary mappings (unused by span-profile, kept for foreign profiles).
    #[prost(message, repeated, tag = "3")]
    pub mapping: Vec<Mapping>,
    /// Locations, referenced by [`Sample::location_id`].
    #[prost(message, repeated, tag = "4")]
    pub location: Vec<Location>,
    /// Functions, referenced by [`Line::function_id`].
    #[prost(message, repeated, tag = "5")]
    pub function: Vec<Function>,
    /// All strings; entry 0 is `""`.
    #[prost(string, repeated, tag = "6")]
    pub string_table: Vec<String>,
    /// Regex (string index) of frames to drop when displaying.
    #[prost(int64, tag = "7")]
    pub drop_frames: i64,
    /// Regex (string index) of frames to keep when displaying.
    #[prost(int64, tag = "8")]
    pub keep_frames: i64,
    /// Collection start, Unix nanoseconds.
    #[prost(int64, tag = "9")]
    pub time_nanos: i64,
    /// Collection length in nanoseconds.
    #[prost(int64, tag = "10")]
    pub duration_nanos: i64,
    /// What the period counts.
    #[prost(message, optional, tag = "11")]
    pub period_type: Option<ValueType>,
    /// Events between samples, in `period_type` units.
    #[prost(int64, tag = "12")]
    pub period: i64,
    /// Free-form comments (string indices).
    #[prost(int64, repeated, tag = "13")]
    pub comment: Vec<i64>,
    /// The sample type shown by default (string index of its `type`).
    #[prost(int64, tag = "14")]
    pub default_sample_type: i64,
    /// Documentation link (string index).
    #[prost(int64, tag = "15")]
    pub doc_url: i64,
}

/// A measurement's type and unit, both string indices (`cpu`/`nanoseconds`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, prost::Message)]
pub struct ValueType {
    /// Type, e.g. `cpu` (string index).
    #[prost(int64, tag = "1")]
    pub r#type: i64,
    /// Unit, e.g. `nanoseconds` (string index).
    #[prost(int64, tag = "2")]
    pub unit: i64,
}

/// One stack with its values and labels.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Sample {
    /// Location ids, **leaf first**.
    #[prost(uint64, repeated, tag = "1")]
    pub location_id: Vec<u64>,
    /// One value per [`Profile::sample_type`].
    #[prost(int64, repeated, tag = "2")]
    pub value: Vec<i64>,
    /// Labels; each has either `str` or `num`.
    #[prost(message, repeated, tag = "3")]
    pub label: Vec<Label>,
}

/// A sample label: a string or a number under a key.
#[derive(Clone, Copy, PartialEq, Eq, Hash, prost::Message)]
pub struct Label {
    /// Key (string index).
    #[prost(int64, tag = "1")]
    pub key: i64,
    /// String value (string index), or 0.
    #[prost(int64, tag = "2")]
    pub str: i64,
    /// Numeric value, when `str` is 0.
    #[prost(int64, tag = "3")]
    pub num: i64,
    /// Unit of `num` (string index).
    #[prost(int64, tag = "4")]
    pub num_unit: i64,
}

/// A mapped binary.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Mapping {
    /// Nonzero id.
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// Start address.
    #[prost(uint64, tag = "2")]
    pub memory_start: u64,
    /// End address.
    #[prost(uint64, tag = "3")]
    pub memory_limit: u64,
    /// File offset of `memory_start`.
    #[prost(uint64, tag = "4")]
    pub file_offset: u64,
    /// Binary path (string index).
    #[prost(int64, tag = "5")]
    pub filename: i64,
    /// Build id (string index).
    #[prost(int64, tag = "6")]
    pub build_id: i64,
    /// Locations in this mapping have function names.
    #[prost(bool, tag = "7")]
    pub has_functions: bool,
    /// Locations in this mapping have file names.
    #[prost(bool, tag = "8")]
    pub has_filenames: bool,
    /// Locations in this mapping have line numbers.
    #[prost(bool, tag = "9")]
    pub has_line_numbers: bool,
    /// Locations in this mapping have inline frames.
    #[prost(bool, tag = "10")]
    pub has_inline_frames: bool,
}

/// A code location: an address, and the source lines it stands for (innermost first).
#[derive(Clone, PartialEq, prost::Message)]
pub struct Location {
    /// Nonzero id.
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// Mapping id, or 0.
    #[prost(uint64, tag = "2")]
    pub mapping_id: u64,
    /// Instruction address, or 0.
    #[prost(uint64, tag = "3")]
    pub address: u64,
    /// Lines; more than one when functions were inlined, the last being the caller.
    #[prost(message, repeated, tag = "4")]
    pub line: Vec<Line>,
    /// The location stands for several folded frames.
    #[prost(bool, tag = "5")]
    pub is_folded: bool,
}

/// A source line in a function.
#[derive(Clone, Copy, PartialEq, Eq, Hash, prost::Message)]
pub struct Line {
    /// Function id.
    #[prost(uint64, tag = "1")]
    pub function_id: u64,
    /// Line number, or 0.
    #[prost(int64, tag = "2")]
    pub line: i64,
    /// Column number, or 0.
    #[prost(int64, tag = "3")]
    pub column: i64,
}

/// A function.
#[derive(Clone, Copy, PartialEq, Eq, Hash, prost::Message)]
pub struct Function {
    /// Nonzero id.
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// Human-readable name (string index).
    #[prost(int64, tag = "2")]
    pub name: i64,
    /// Symbol name (string index).
    #[prost(int64, tag = "3")]
    pub system_name: i64,
    /// Source file (string index).
    #[prost(int64, tag = "4")]
    pub filename: i64,
    /// First line of the function, or 0.
    #[prost(int64, tag = "5")]
    pub start_line: i64,
}
