//! What a sample is taken of: a thread, or a task running on it.

use std::num::NonZeroU64;
use std::sync::atomic::{AtomicU64, Ordering};

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
/// // Each thread has its own key, the same every time it asks.
/// let here = ExecutionKey::current_thread();
/// assert_eq!(here, ExecutionKey::current_thread());
/// let there = std::thread::spawn(ExecutionKey::current_thread).join().unwrap();
/// assert_ne!(here, there);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ExecutionKey {
    /// Thread identity.
    pub thread: u64,
    /// Task identity on that thread, if any.
    pub task: Option<NonZeroU64>,
}

static NEXT_THREAD_KEY: AtomicU64 = AtomicU64::new(1);
thread_local! {
    static THREAD_KEY: u64 = NEXT_THREAD_KEY.fetch_add(1, Ordering::Relaxed);
}

impl ExecutionKey {
    /// The calling thread's key: a number of its own, given on first use and never reused in
    /// the process (`thread` 0 only while the thread is being torn down). The span hooks of
    /// OpenTelemetry-Rust (`otel`) and the native walker key threads by it. Async-signal-safe
    /// once the thread has asked for it (a signal handler reads what is already there).
    pub fn current_thread() -> Self {
        Self::thread(THREAD_KEY.try_with(|k| *k).unwrap_or(0))
    }

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
