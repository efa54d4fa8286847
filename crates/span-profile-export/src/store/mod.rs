//! The read path: one home for everything that reads the file store back.
//!
//! - [`list`]: which stored windows can hold a selection, from their paths alone
//!   ([`StoreFilter`], [`StoredFile`], [`StoreListing`]).
//! - [`read`], [`read_window`], [`read_summary`]: decoding stored windows, and reading the
//!   summary beside each one (ADR 0006); [`StoreError`] and [`SkippedFile`] say what could not
//!   be read.
//! - [`Store`]: the parallel fold over a store's windows, each window's summary first when the
//!   question allows it ([`Store::fold_windows`], [`Store::stream_summarized`]), all of its
//!   threads decoding within one memory budget ([`Store::with_decode_memory`], ADR 0031), and
//!   every file it skipped kept once ([`Store::take_skipped`]).
//! - [`select`], [`select_summarized`], [`span_windows`]: any selection answered, a span or a
//!   trace in two passes (its span tables, then the windows of its time).
//! - [`parse_rfc3339`], [`format_rfc3339`]: times as the store's users write and read them.
//! - [`Selection`]: a selection's samples gathered into one profile, to be exported.
//! - [`encode_summary`], [`decode_summary`], [`decode_summary_scoped`]: the summary sidecar's
//!   binary form (its writer is [`FileStore::write`](crate::FileStore::write)).
//!
//! The questions, each over a slice of [`Profile`](span_profile_core::Profile)s however they
//! were read, are modules of their own:
//! - [`query`]: [`Filter`](query::Filter), reports, routes, the spans of some windows, and the
//!   counting rules every answer shares;
//! - [`frames`]: how a frame is named and matched (function and file, shown as
//!   `module:function`), and how reports group frames;
//! - [`span_name`]: every span of one name in aggregate (count, durations, samples against
//!   what the durations predict), for spans shorter than the sampling interval;
//! - [`diff`]: deploy-to-deploy diffs of self CPU by frame, with a significance test
//!   (ADR 0023), and CPU per request by route;
//! - [`peers`]: one span against the other spans of its name;
//! - [`summary`]: [`WindowSummary`](summary::WindowSummary), a window's counts made when it is
//!   written, which answers as [`query`] and [`diff`] do for selections without a span or trace;
//! - [`inventory`]: what a store holds (services, versions, environments, instances, routes),
//!   and the existing names nearest one that matched nothing.
//!
//! The writer of the store is [`FileStore`](crate::FileStore); both follow the same layout.

pub mod diff;
mod error;
mod fold;
pub mod frames;
pub mod inventory;
mod list;
pub mod peers;
pub mod query;
mod read;
mod selection;
mod sidecar;
pub mod span_name;
mod spans;
pub mod stats;
pub mod summary;
mod time;

pub use error::{SkippedFile, StoreError};
pub use fold::{QueryError, Store, Window};
pub use list::{list, StoreFilter, StoreListing, StoredFile};
pub use read::{read, read_summary, read_window, StoreRead};
pub use selection::Selection;
pub use sidecar::{
    decode_summary, decode_summary_scoped, encode_summary, StoredSummary, SummaryError,
    MAX_SUMMARY_LEN,
};
pub use spans::{select, select_summarized, span_windows};
pub use time::{format_rfc3339, parse_rfc3339};
