//! [`ContextError`]: why a context read stopped, shared by the HAMT, dict, slot and reader
//! code.

use crate::walker::memory::ReadError;

/// Why a context read stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContextError {
    /// A read failed.
    Read(ReadError),
    /// An object had an unexpected type or an implausible size.
    Invalid,
    /// Deeper than a HAMT can be.
    TooDeep,
    /// The thread entered another context, or a span started or ended on it, while its frames
    /// were copied.
    Switched,
}

impl From<ReadError> for ContextError {
    fn from(e: ReadError) -> Self {
        Self::Read(e)
    }
}
