//! What a sample is taken of: a thread, or a task running on it.

use std::num::NonZeroU64;

/// Identifies the unit of execution that spans are entered on and samples are taken of.
///
/// `thread` is the walker's thread identity (for CPython, `threading.get_ident()`; for native
/// threads, the OS thread id). `task` is set when the work runs as a task on that thread
/// (an asyncio task, a tokio task); spans of a task follow the task, not the thread.
///
/// ```
/// use span_profile_core::ExecutionKey;
/// let k = ExecutionKey::thread(42);
/// assert_eq!(k.task, None);
/// assert_ne!(k, ExecutionKey::task(42, 7));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ExecutionKey {
    /// Thread identity.
    pub thread: u64,
    /// Task identity on that thread, if any.
    pub task: Option<NonZeroU64>,
}

impl ExecutionKey {
    /// The key of a plain thread.
    pub const fn thread(thread: u64) -> Self {
        Self { thread, task: None }
    }
    /// The key of a task; a zero task id means "no task".
    pub const fn task(thread: u64, task: u64) -> Self {
        Self {
            thread,
            task: NonZeroU64::new(task),
        }
    }
}
