//! Test fakes for span-profile: a [`FakeWalker`], an [`InMemoryExporter`] and a
//! [`CountingAllocator`]. Not part of the public default path: depend on it only in tests,
//! benches and examples.
#![forbid(unsafe_code)]

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use span_profile_core::{
    ActiveSpanRegistry, ExecutionKey, ExportError, Exporter, Frame, Profile, RawFrame, RawSample,
    SpanScope, SpanSource, StackSink, StackWalker,
};

/// A walker that reports `threads` threads, each with a fixed stack of `depth` frames.
/// Thread `i` has key `ExecutionKey::thread(i + 1)` and is named `worker-i`; frame `d` of
/// thread `i` is function `fn_<d>` in `fake.py` (leaf `leaf_<i>`), so stacks are distinct per
/// thread. With [`FakeWalker::with_registry`], each sample carries the span the hooks
/// entered for its thread in that registry; without, no span ([`SpanSource::Unknown`]).
#[derive(Debug, Clone)]
pub struct FakeWalker {
    threads: usize,
    frames: Vec<Vec<RawFrame>>,
    names: Vec<String>,
    /// CPU time each thread used per walk (a full nominal tick: busy threads).
    cpu_ns: u64,
    /// Per-thread overrides of the thread key (e.g. to use real thread ids).
    keys: Vec<ExecutionKey>,
    walks: Arc<AtomicU64>,
    registry: Option<Arc<ActiveSpanRegistry>>,
}

impl FakeWalker {
    /// `threads` threads with stacks `depth` deep, all on CPU.
    pub fn threads(threads: usize, depth: usize) -> Self {
        let frames = (0..threads)
            .map(|t| {
                (0..depth.max(1))
                    .map(|d| RawFrame {
                        id: if d == 0 {
                            1_000_000 + t as u64
                        } else {
                            d as u64
                        },
                        line: d as u32 + 1,
                    })
                    .collect()
            })
            .collect();
        Self {
            threads,
            frames,
            names: (0..threads).map(|t| format!("worker-{t}")).collect(),
            cpu_ns: 10_000_000,
            keys: (0..threads)
                .map(|t| ExecutionKey::thread(t as u64 + 1))
                .collect(),
            walks: Arc::new(AtomicU64::new(0)),
            registry: None,
        }
    }

    /// Reports the threads as idle (off CPU).
    pub fn idle(mut self) -> Self {
        self.cpu_ns = 0;
        self
    }

    /// Uses the given keys for the threads (one per thread).
    pub fn with_keys(mut self, keys: Vec<ExecutionKey>) -> Self {
        self.threads = self.threads.min(keys.len());
        self.keys = keys;
        self
    }

    /// Reads each thread's span from `registry` as it reports the thread's stack (usually
    /// `ProfilerBuilder::registry()`, which the span hooks feed).
    pub fn with_registry(mut self, registry: Arc<ActiveSpanRegistry>) -> Self {
        self.registry = Some(registry);
        self
    }

    /// How many times `walk` ran (shared between clones).
    pub fn walk_count(&self) -> Arc<AtomicU64> {
        self.walks.clone()
    }
}

impl StackWalker for FakeWalker {
    fn walk(&mut self, sink: &mut dyn StackSink) {
        self.walks.fetch_add(1, Ordering::Relaxed);
        for t in 0..self.threads {
            let key = self.keys[t];
            let span = self
                .registry
                .as_deref()
                .map_or(SpanSource::Unknown, |r| SpanSource::current_in(r, key));
            sink.sample(
                &RawSample::new(key, &self.frames[t], &self.names[t])
                    .with_cpu_ns(self.cpu_ns)
                    .with_span(span),
            );
        }
    }

    fn symbolize(&mut self, raw: RawFrame) -> Frame {
        let name = if raw.id >= 1_000_000 {
            format!("leaf_{}", raw.id - 1_000_000)
        } else {
            format!("fn_{}", raw.id)
        };
        Frame::new(name, "fake.py", raw.line)
    }
}

/// An exporter that keeps every window in memory. Clones share the windows.
#[derive(Debug, Clone, Default)]
pub struct InMemoryExporter {
    profiles: Arc<Mutex<Vec<Arc<Profile>>>>,
    fail: Arc<AtomicBool>,
    hang: Arc<Mutex<Option<Duration>>>,
    shutdowns: Arc<AtomicUsize>,
    /// Says it stores samples under local roots, as Pyroscope does by default.
    local_roots: bool,
}

impl InMemoryExporter {
    /// States `scope` as the exporter's [`Exporter::span_scope`] (default
    /// [`SpanScope::All`]: the windows are kept as they come), to stand in for a backend
    /// that keeps samples under local roots.
    pub fn with_span_scope(mut self, scope: SpanScope) -> Self {
        self.local_roots = scope == SpanScope::LocalRoot;
        self
    }
    /// The windows received so far.
    pub fn profiles(&self) -> Vec<Arc<Profile>> {
        self.profiles.lock().map(|p| p.clone()).unwrap_or_default()
    }
    /// Makes every later export fail (true) or succeed (false).
    pub fn set_failing(&self, fail: bool) {
        self.fail.store(fail, Ordering::Relaxed);
    }
    /// Makes every later export block its thread for `d` before returning.
    pub fn set_hang(&self, d: Option<Duration>) {
        if let Ok(mut h) = self.hang.lock() {
            *h = d;
        }
    }
    /// How many times shutdown was called.
    pub fn shutdowns(&self) -> usize {
        self.shutdowns.load(Ordering::Relaxed)
    }
}

impl Exporter for InMemoryExporter {
    fn export(&self, profile: Arc<Profile>) -> Result<(), ExportError> {
        let hang = self.hang.lock().ok().and_then(|h| *h);
        if let Some(d) = hang {
            std::thread::sleep(d);
        }
        if self.fail.load(Ordering::Relaxed) {
            return Err(ExportError::InternalFailure("configured to fail".into()));
        }
        if let Ok(mut p) = self.profiles.lock() {
            p.push(profile);
        }
        Ok(())
    }
    fn shutdown_with_timeout(&self, _timeout: Duration) -> Result<(), ExportError> {
        self.shutdowns.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
    fn span_scope(&self) -> SpanScope {
        if self.local_roots {
            SpanScope::LocalRoot
        } else {
            SpanScope::All
        }
    }
}

/// A global allocator wrapper that counts allocations made by threads that opted in, for tests
/// that prove a path does not allocate. Install it in a test binary with
/// `#[global_allocator] static A: CountingAllocator = CountingAllocator::new();`.
#[derive(Debug)]
pub struct CountingAllocator {
    count: AtomicU64,
}

impl CountingAllocator {
    /// A counter at zero.
    pub const fn new() -> Self {
        Self {
            count: AtomicU64::new(0),
        }
    }
    /// Allocations counted so far (on threads inside [`CountingAllocator::track`]).
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }
}

impl Default for CountingAllocator {
    fn default() -> Self {
        Self::new()
    }
}

thread_local! {
    static TRACKING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// Allocations of this thread while tracking: other threads' tracked allocations (tests
    /// run in parallel) must not be counted against this one.
    static THREAD_COUNT: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    /// Bytes this thread allocated minus bytes it freed while tracking, and the most that
    /// difference reached.
    static LIVE: std::cell::Cell<(i64, i64)> = const { std::cell::Cell::new((0, 0)) };
}

impl CountingAllocator {
    /// Runs `f` with counting on for this thread; returns its result and the allocations this
    /// thread made meanwhile.
    pub fn track<R>(&self, f: impl FnOnce() -> R) -> (R, u64) {
        let before = THREAD_COUNT.with(|c| c.get());
        TRACKING.with(|t| t.set(true));
        let r = f();
        TRACKING.with(|t| t.set(false));
        (r, THREAD_COUNT.with(|c| c.get()) - before)
    }

    /// Runs `f` with counting on for this thread; returns its result and the most bytes its
    /// allocations held at once beyond what was live when it began (frees of older memory
    /// lower the level, so they make room). Only allocations and frees of this thread count.
    /// A `realloc` counts as its change in size: the moment a moving one holds both blocks is
    /// not seen.
    pub fn peak_bytes<R>(&self, f: impl FnOnce() -> R) -> (R, u64) {
        LIVE.with(|l| l.set((0, 0)));
        let (r, _) = self.track(f);
        (r, LIVE.with(|l| l.get().1).max(0) as u64)
    }
}

// The allocator impl needs `unsafe impl GlobalAlloc`; this crate forbids unsafe, so the
// impl lives in the test binaries that use it via the `counting_allocator!` macro below.

/// Defines a counting global allocator named `$name` in the calling test binary.
///
/// The expansion contains the `unsafe impl GlobalAlloc` (delegating to the system allocator),
/// so it lives in the test crate, not in a library.
#[macro_export]
macro_rules! counting_allocator {
    ($name:ident) => {
        struct __CountingSystem;
        // SAFETY: every method delegates to `std::alloc::System` with the caller's arguments
        // unchanged; counting only touches an atomic and a thread-local `Cell`.
        unsafe impl ::std::alloc::GlobalAlloc for __CountingSystem {
            unsafe fn alloc(&self, layout: ::std::alloc::Layout) -> *mut u8 {
                $crate::__note_alloc(&$name);
                $crate::__note_bytes(layout.size() as i64);
                // SAFETY: forwarded contract of GlobalAlloc::alloc.
                unsafe { ::std::alloc::System.alloc(layout) }
            }
            unsafe fn dealloc(&self, ptr: *mut u8, layout: ::std::alloc::Layout) {
                $crate::__note_bytes(-(layout.size() as i64));
                // SAFETY: forwarded contract of GlobalAlloc::dealloc.
                unsafe { ::std::alloc::System.dealloc(ptr, layout) }
            }
            unsafe fn realloc(
                &self,
                ptr: *mut u8,
                layout: ::std::alloc::Layout,
                new: usize,
            ) -> *mut u8 {
                $crate::__note_alloc(&$name);
                $crate::__note_bytes(new as i64 - layout.size() as i64);
                // SAFETY: forwarded contract of GlobalAlloc::realloc.
                unsafe { ::std::alloc::System.realloc(ptr, layout, new) }
            }
        }
        #[global_allocator]
        static __GLOBAL: __CountingSystem = __CountingSystem;
        static $name: $crate::CountingAllocator = $crate::CountingAllocator::new();
    };
}

#[doc(hidden)]
pub fn __note_alloc(a: &CountingAllocator) {
    // `try_with`: during thread teardown the thread-local may be gone; then do not count.
    if TRACKING.try_with(|t| t.get()).unwrap_or(false) {
        a.count.fetch_add(1, Ordering::Relaxed);
        let _ = THREAD_COUNT.try_with(|c| c.set(c.get() + 1));
    }
}

#[doc(hidden)]
pub fn __note_bytes(delta: i64) {
    if TRACKING.try_with(|t| t.get()).unwrap_or(false) {
        let _ = LIVE.try_with(|l| {
            let (live, peak) = l.get();
            let live = live + delta;
            l.set((live, peak.max(live)));
        });
    }
}

/// xorshift64*: a deterministic, dependency-free generator for generated test inputs, so that a
/// failure reproduces from its seed (the workspace's one generator).
///
/// ```
/// let mut rng = span_profile_test::XorShift(42);
/// assert!(rng.below(10) < 10);
/// assert_eq!(rng.below(0), 0);
/// ```
pub use span_profile_core::internal::XorShift;

/// Where pyenv keeps its interpreters: `$PYENV_ROOT/versions`, else `~/.pyenv/versions` (the
/// specs and benches that run a CPython find each version there, as `.ci/run` installs them).
///
/// ```
/// assert!(span_profile_test::pyenv_versions().ends_with("versions"));
/// ```
pub fn pyenv_versions() -> std::path::PathBuf {
    let root = std::env::var_os("PYENV_ROOT")
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| std::path::Path::new(&h).join(".pyenv")))
        .unwrap_or_else(|| std::path::PathBuf::from(".pyenv"));
    root.join("versions")
}

/// A Python of this checkout's venvs (`target/venvs/*`, which `scripts/test-python.sh` builds)
/// or `$SPAN_PROFILE_PYTHON` that imports `span_profile`, for the specs that run the agent. None
/// means skip the test, with a note; on CI (`CI` set) a missing one is a failure instead.
///
/// ```no_run
/// let Some(python) = span_profile_test::python_with_agent() else { return };
/// assert!(python.exists());
/// ```
pub fn python_with_agent() -> Option<std::path::PathBuf> {
    let mut candidates: Vec<std::path::PathBuf> = std::env::var_os("SPAN_PROFILE_PYTHON")
        .map(std::path::PathBuf::from)
        .into_iter()
        .collect();
    let venvs = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/venvs");
    if let Ok(dir) = std::fs::read_dir(&venvs) {
        let mut found: Vec<std::path::PathBuf> = dir
            .filter_map(|e| e.ok())
            .map(|e| e.path().join("bin/python"))
            .filter(|p| p.exists())
            .collect();
        found.sort();
        candidates.extend(found);
    }
    let found = candidates.into_iter().find(|p| {
        std::process::Command::new(p)
            .args(["-c", "import span_profile"])
            .output()
            .is_ok_and(|o| o.status.success())
    });
    if found.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "a Python with span_profile installed is required in CI (scripts/test-python.sh builds one)"
        );
        eprintln!("note: skipping: no Python with span_profile under target/venvs (run scripts/test-python.sh)");
    }
    found
}

/// Whether `go` can run. If not, a test that needs `go tool pprof` is skipped, except on CI
/// (`CI` set), where the suite installs Go (Debian: golang-go) and a missing `go` is a
/// failure.
pub fn go_available() -> bool {
    if std::process::Command::new("go")
        .arg("version")
        .output()
        .is_ok()
    {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "`go` is not on PATH; CI must install Go (Debian: golang-go) for this test"
    );
    eprintln!("skipping: `go` is not on PATH (install golang-go to run this test)");
    false
}

/// Runs `go tool pprof ARGS` with a throwaway HOME/GOCACHE/GOPATH under `home` and returns its
/// standard output; fails the test if it fails. Call [`go_available`] first.
pub fn go_pprof(home: &std::path::Path, args: &[&str]) -> String {
    let out = std::process::Command::new("go")
        .arg("tool")
        .arg("pprof")
        .args(args)
        .env("HOME", home)
        .env("GOCACHE", home.join("gocache"))
        .env("GOPATH", home.join("gopath"))
        .env("PPROF_TMPDIR", home)
        .output()
        .expect("go runs: go_available was checked");
    assert!(
        out.status.success(),
        "go tool pprof {args:?} failed: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}
