//! Frames and stacks, and the raw form in which walkers report them.

use serde::{Deserialize, Serialize};

/// A resolved frame: a function, its file and the line being executed.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Frame {
    /// Function name, possibly qualified (`Pricing.calculate`).
    pub function: String,
    /// Source file; empty when unknown.
    pub file: String,
    /// 1-based line; 0 when unknown.
    pub line: u32,
}

impl Frame {
    /// A frame with the given function, file and line.
    pub fn new(function: impl Into<String>, file: impl Into<String>, line: u32) -> Self {
        Self {
            function: function.into(),
            file: file.into(),
            line,
        }
    }
}

/// A frame as a walker reports it on the sampling path: an opaque id that only the walker
/// understands (a code object address, an instruction pointer, an index in its own cache),
/// plus a line. The aggregator interns it and asks [`crate::StackWalker::symbolize`] for the
/// [`Frame`] once per distinct raw frame, off the per-sample path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RawFrame {
    /// Walker-defined identity.
    pub id: u64,
    /// Line, or any walker-defined discriminator (0 if unused).
    pub line: u32,
}

/// Index of a frame in a [`crate::Profile`]'s frame table.
pub type FrameIndex = u32;

/// An interned stack: frame indices, **leaf first**.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct Stack {
    /// Frame indices into the owning profile's `frames`, innermost first.
    pub frames: Vec<FrameIndex>,
    /// The walker stopped at its depth cap: outer frames are missing.
    pub truncated: bool,
}
