//! The read path: one home for everything that reads the file store back.
//!
//! - [`list`]: which stored windows can hold a selection, from their paths alone
//!   ([`StoreFilter`], [`StoredFile`], [`StoreListing`]).
//! - [`read`], [`read_window`], [`read_summary`]: decoding stored windows, and reading the
//!   summary beside each one (ADR 0006); [`StoreError`] and [`SkippedFile`] say what could not
//!   be read.
//! - [`Store`]: the parallel fold over a store's windows, each window's summary first when the
//!   question allows it ([`Store::fold_windows`], [`Store::stream_summarized`]).
//! - [`select`], [`select_summarized`], [`span_windows`]: any selection answered, a span or a
//!   trace in two passes (its span tables, then the windows of its time).
//! - [`parse_rfc3339`], [`format_rfc3339`]: times as the store's users write and read them.
//!
//! The writer of the store is [`FileStore`](crate::FileStore); both follow the same layout.

mod error;
mod fold;
mod list;
mod read;
mod spans;
mod time;

pub use error::{SkippedFile, StoreError};
pub use fold::{QueryError, Store, Window};
pub use list::{list, StoreFilter, StoreListing, StoredFile};
pub use read::{read, read_summary, read_window, StoreRead};
pub use spans::{select, select_summarized, span_windows};
pub use time::{format_rfc3339, parse_rfc3339};
