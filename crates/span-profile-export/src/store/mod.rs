//! The read path: one home for everything that reads the file store back.
//!
//! - [`list`]: which stored windows can hold a selection, from their paths alone
//!   ([`StoreFilter`], [`StoredFile`], [`StoreListing`]).
//! - [`read`], [`read_window`], [`read_summary`]: decoding stored windows, and reading the
//!   summary beside each one (ADR 0006); [`StoreError`] and [`SkippedFile`] say what could not
//!   be read.
//! - [`parse_rfc3339`], [`format_rfc3339`]: times as the store's users write and read them.
//!
//! The writer of the store is [`FileStore`](crate::FileStore); both follow the same layout.

mod error;
mod list;
mod read;
mod time;

pub use error::{SkippedFile, StoreError};
pub use list::{list, StoreFilter, StoreListing, StoredFile};
pub use read::{read, read_summary, read_window, StoreRead};
pub use time::{format_rfc3339, parse_rfc3339};
