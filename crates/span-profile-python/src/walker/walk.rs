//! [`PythonWalker`]: walks every Python thread's stack by reading interpreter memory, without
//! the GIL.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use span_profile_core::{
    ExecutionKey, Frame, RawFrame, RawSample, StackSink, StackWalker, WalkError,
};

use super::code::{CodeCache, CopyLimits, Resolved, UNKNOWN_CODE_ID};
use super::context::ContextReader;
use super::layout::{check_debug_offsets, FrameKind, Layout, LayoutError, PythonVersion};
use super::memory::{field_i32, field_u64, field_u8, MemoryReader, ProcessVmReader, ReadError};
use super::objects::{type_matches, ObjectError, TypeAddresses};
use super::threads::{
    cpu_time_ns, tid_from_pthread, verify_pthread_tid_offset, CpuTimeSource, CpuTracker, NameBuf,
    ThreadRegistry,
};

/// Where the interpreter lives: what the caller must supply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Target {
    /// The running interpreter's `sys.version_info[:2]`.
    pub version: PythonVersion,
    /// The address of `_PyRuntime` (see [`find_runtime`]).
    pub runtime: u64,
    /// The address of the (main) `PyInterpreterState` to walk, or 0 to follow
    /// `_PyRuntime.interpreters.head` and every interpreter after it.
    pub interpreter: u64,
    /// Type objects used to validate reads (0 disables a check).
    pub types: TypeAddresses,
}

impl Target {
    /// The interpreter that this process runs: `_PyRuntime` and the type objects found with
    /// `dlsym(RTLD_DEFAULT, ...)`. Requires libpython's symbols to be globally visible (true
    /// for the `python` executable and for extension modules loaded into it).
    pub fn current_process(version: PythonVersion) -> Result<Self, SetupError> {
        let sym = |name: &'static str| dlsym(name).ok_or(SetupError::SymbolNotFound(name));
        Ok(Self {
            version,
            runtime: sym("_PyRuntime\0")?,
            interpreter: 0,
            types: TypeAddresses {
                code: sym("PyCode_Type\0")?,
                unicode: sym("PyUnicode_Type\0")?,
                bytes: sym("PyBytes_Type\0")?,
                frame: sym("PyFrame_Type\0")?,
            },
        })
    }
}

/// Looks a NUL-terminated symbol up in the global scope.
pub(crate) fn dlsym(name: &'static str) -> Option<u64> {
    if !name.ends_with('\0') {
        return None;
    }
    // SAFETY: (1) `name` is a NUL-terminated static string. (2) RTLD_DEFAULT is a valid pseudo
    // handle; dlsym only looks the name up and returns an address (or null), which we do not
    // dereference here.
    let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr().cast()) };
    (!p.is_null()).then_some(p as u64)
}

/// The address of `_PyRuntime` in this process, if libpython's symbols are visible.
pub fn find_runtime() -> Option<u64> {
    dlsym("_PyRuntime\0")
}

/// Why a walker could not be built.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SetupError {
    /// `process_vm_readv` is unavailable (seccomp, permissions) or the runtime is unreadable.
    Read(ReadError),
    /// The version is unsupported or its layout disagrees with the interpreter's.
    Layout(LayoutError),
    /// A symbol the walker needs is not visible.
    SymbolNotFound(&'static str),
    /// `_PyRuntime` has no interpreter (not initialized, or the address is wrong).
    NoInterpreter,
}

impl std::fmt::Display for SetupError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Read(e) => write!(f, "cannot read interpreter memory: {e}"),
            Self::Layout(e) => e.fmt(f),
            Self::SymbolNotFound(s) => {
                write!(f, "symbol {} not found", s.trim_end_matches('\0'))
            }
            Self::NoInterpreter => f.write_str("_PyRuntime has no interpreter"),
        }
    }
}

impl std::error::Error for SetupError {}

impl From<ReadError> for SetupError {
    fn from(e: ReadError) -> Self {
        Self::Read(e)
    }
}

impl From<LayoutError> for SetupError {
    fn from(e: LayoutError) -> Self {
        Self::Layout(e)
    }
}

/// Caps and options of a [`PythonWalker`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct WalkerConfig {
    /// Frames per stack; deeper stacks are cut (outer frames dropped) and marked truncated.
    pub max_depth: usize,
    /// Threads walked per tick; the rest are reported as skipped.
    pub max_threads: usize,
    /// Interpreters followed per tick.
    pub max_interpreters: usize,
    /// Characters kept of a function or file name.
    pub max_string_chars: usize,
    /// Largest line table copied.
    pub max_linetable_bytes: usize,
    /// Most distinct code objects remembered; later ones are reported as `<unknown>`.
    pub code_cache_capacity: usize,
    /// How on-CPU is decided.
    pub cpu_time: CpuTimeSource,
}

impl Default for WalkerConfig {
    fn default() -> Self {
        Self {
            max_depth: 128,
            max_threads: 256,
            max_interpreters: 16,
            max_string_chars: 1024,
            max_linetable_bytes: 256 * 1024,
            code_cache_capacity: 64 * 1024,
            cpu_time: CpuTimeSource::ThreadClock,
        }
    }
}

impl WalkerConfig {
    /// Sets [`WalkerConfig::max_depth`] (at least 1).
    pub fn with_max_depth(mut self, depth: usize) -> Self {
        self.max_depth = depth.max(1);
        self
    }
    /// Sets [`WalkerConfig::max_threads`] (at least 1).
    pub fn with_max_threads(mut self, threads: usize) -> Self {
        self.max_threads = threads.max(1);
        self
    }
    /// Sets [`WalkerConfig::max_string_chars`].
    pub fn with_max_string_chars(mut self, chars: usize) -> Self {
        self.max_string_chars = chars.max(1);
        self
    }
    /// Sets [`WalkerConfig::code_cache_capacity`].
    pub fn with_code_cache_capacity(mut self, entries: usize) -> Self {
        self.code_cache_capacity = entries;
        self
    }
    /// Sets [`WalkerConfig::cpu_time`].
    pub fn with_cpu_time(mut self, source: CpuTimeSource) -> Self {
        self.cpu_time = source;
        self
    }
}

/// Running totals of a walker, readable from any thread while it samples.
///
/// All counters use `Relaxed` ordering: each is an independent statistic, no other memory is
/// published through them, and a reader only needs an eventually-current value.
#[derive(Debug, Default)]
pub struct WalkerCounters {
    ticks: AtomicU64,
    samples: AtomicU64,
    frames: AtomicU64,
    truncated: AtomicU64,
    idle_threads: AtomicU64,
    skipped_threads: AtomicU64,
    invalid_reads: AtomicU64,
    cycles: AtomicU64,
    shim_frames: AtomicU64,
    code_misses: AtomicU64,
    code_replaced: AtomicU64,
    code_cache_full: AtomicU64,
}

/// A snapshot of [`WalkerCounters`].
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct WalkerStats {
    /// `walk` calls.
    pub ticks: u64,
    /// Stacks reported.
    pub samples: u64,
    /// Frames reported.
    pub frames: u64,
    /// Stacks cut at the depth cap.
    pub truncated: u64,
    /// Threads with no Python frame (not reported).
    pub idle_threads: u64,
    /// Threads beyond the per-tick cap (reported as `WalkError::Skipped`).
    pub skipped_threads: u64,
    /// Threads or interpreters that failed a read or validation (`WalkError::InvalidRead`).
    pub invalid_reads: u64,
    /// Frame chains that looped back on themselves (also counted in `invalid_reads`).
    pub cycles: u64,
    /// C-stack shim frames skipped (3.12+).
    pub shim_frames: u64,
    /// Code objects resolved on first sight (warm-up work).
    pub code_misses: u64,
    /// Cached code addresses found holding a different code object.
    pub code_replaced: u64,
    /// Frames reported as `<unknown>` because the code cache was full.
    pub code_cache_full: u64,
}

impl WalkerCounters {
    /// Current values.
    pub fn snapshot(&self) -> WalkerStats {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        WalkerStats {
            ticks: g(&self.ticks),
            samples: g(&self.samples),
            frames: g(&self.frames),
            truncated: g(&self.truncated),
            idle_threads: g(&self.idle_threads),
            skipped_threads: g(&self.skipped_threads),
            invalid_reads: g(&self.invalid_reads),
            cycles: g(&self.cycles),
            shim_frames: g(&self.shim_frames),
            code_misses: g(&self.code_misses),
            code_replaced: g(&self.code_replaced),
            code_cache_full: g(&self.code_cache_full),
        }
    }
}

fn bump(c: &AtomicU64, n: u64) {
    if n != 0 {
        c.fetch_add(n, Ordering::Relaxed);
    }
}

/// How many skipped threads are counted one by one past the cap (each costs a read).
const MAX_SKIPPED_COUNTED: usize = 1024;
/// Largest struct copy (thread state, frame, code header).
const BUF: usize = 256;

/// Why one thread's walk stopped early.
enum ThreadFailure {
    Invalid,
    Cycle,
}

impl From<ReadError> for ThreadFailure {
    fn from(_: ReadError) -> Self {
        Self::Invalid
    }
}

impl From<ObjectError> for ThreadFailure {
    fn from(_: ObjectError) -> Self {
        Self::Invalid
    }
}

/// Walks the Python threads of one CPython interpreter (3.9–3.13, GIL builds, x86_64 Linux) by
/// copying its memory through a [`MemoryReader`]. See the [module docs](super) for the contract.
#[derive(Debug)]
pub struct PythonWalker<R> {
    reader: R,
    layout: &'static Layout,
    target: Target,
    config: WalkerConfig,
    cache: CodeCache,
    registry: ThreadRegistry,
    counters: Arc<WalkerCounters>,
    cpu: CpuTracker,
    pthread_tid_ok: bool,
    frames: Vec<RawFrame>,
    name: NameBuf,
    /// The running context's span and task (`super::context`).
    pub(crate) ctx: ContextReader,
}

impl PythonWalker<ProcessVmReader> {
    /// A walker of the interpreter this process runs (the PyO3 module calls this with
    /// `sys.version_info[:2]`). Probes `process_vm_readv` and, on 3.13, `_Py_DebugOffsets`.
    pub fn for_current_process(
        version: PythonVersion,
        config: WalkerConfig,
    ) -> Result<Self, SetupError> {
        let reader = ProcessVmReader::new()?;
        let target = Target::current_process(version)?;
        Self::new(
            reader,
            target,
            config.with_cpu_time(CpuTimeSource::ThreadClock),
        )
    }
}

impl<R: MemoryReader> PythonWalker<R> {
    /// A walker over `reader` for the interpreter described by `target`. Fails if the version is
    /// unsupported, the 3.13 debug offsets disagree with ours, or no interpreter is found.
    pub fn new(reader: R, target: Target, config: WalkerConfig) -> Result<Self, SetupError> {
        let layout = Layout::for_version(target.version)
            .ok_or(LayoutError::UnsupportedVersion(target.version))?;
        check_debug_offsets(&reader, target.runtime, layout)?;
        let head = if target.interpreter != 0 {
            target.interpreter
        } else {
            let mut b = [0u8; 8];
            reader.read(
                target.runtime + layout.runtime_interpreters_head as u64,
                &mut b,
            )?;
            u64::from_le_bytes(b)
        };
        if head == 0 {
            return Err(SetupError::NoInterpreter);
        }
        let pthread_tid_ok = match config.cpu_time {
            // The tid offset is checked on this process's own pthread; for another process it
            // is assumed to be the same glibc (the tests' case).
            CpuTimeSource::ThreadClock | CpuTimeSource::ProcFs { .. } => {
                ProcessVmReader::new().is_ok_and(|me| verify_pthread_tid_offset(&me))
            }
            _ => false,
        };
        Ok(Self {
            reader,
            layout,
            target,
            cache: CodeCache::new(config.code_cache_capacity),
            registry: ThreadRegistry::new(),
            counters: Arc::new(WalkerCounters::default()),
            cpu: CpuTracker::new(config.max_threads),
            pthread_tid_ok,
            frames: Vec::with_capacity(config.max_depth),
            name: NameBuf::new(),
            ctx: ContextReader::new(layout.version),
            config,
        })
    }

    /// Shares a thread registry (names, native ids) filled by the Python side.
    pub fn with_registry(mut self, registry: ThreadRegistry) -> Self {
        self.registry = registry;
        self
    }

    /// The thread registry; clone it to name threads from other threads.
    pub fn registry(&self) -> &ThreadRegistry {
        &self.registry
    }

    /// The counters; clone the `Arc` to read them while the walker samples elsewhere.
    pub fn counters(&self) -> &Arc<WalkerCounters> {
        &self.counters
    }

    /// The version being walked.
    pub fn version(&self) -> PythonVersion {
        self.layout.version
    }

    /// Distinct code objects resolved so far.
    pub fn code_cache_len(&self) -> usize {
        self.cache.len()
    }

    fn fail(&self, sink: &mut dyn StackSink, f: ThreadFailure) {
        if let ThreadFailure::Cycle = f {
            bump(&self.counters.cycles, 1);
        }
        bump(&self.counters.invalid_reads, 1);
        sink.error(WalkError::InvalidRead);
    }

    fn walk_all(&mut self, sink: &mut dyn StackSink) {
        let l = self.layout;
        let mut interp = if self.target.interpreter != 0 {
            self.target.interpreter
        } else {
            let mut b = [0u8; 8];
            match self.reader.read(
                self.target.runtime + l.runtime_interpreters_head as u64,
                &mut b,
            ) {
                Ok(()) => u64::from_le_bytes(b),
                Err(_) => return self.fail(sink, ThreadFailure::Invalid),
            }
        };
        let mut walked = 0usize;
        let mut tbuf = [0u8; BUF];
        for _ in 0..self.config.max_interpreters {
            if interp == 0 {
                break;
            }
            let mut b = [0u8; 8];
            if self
                .reader
                .read(interp + l.interp_threads_head as u64, &mut b)
                .is_err()
            {
                return self.fail(sink, ThreadFailure::Invalid);
            }
            let mut tstate = u64::from_le_bytes(b);
            let mut prev_tstate = 0u64;
            while tstate != 0 {
                if walked >= self.config.max_threads {
                    self.count_skipped(sink, tstate);
                    return;
                }
                let tb = tbuf.get_mut(..l.tstate_read_size()).unwrap_or_default();
                if self.reader.read(tstate, tb).is_err() {
                    return self.fail(sink, ThreadFailure::Invalid);
                }
                if field_u64(tb, l.tstate_interp) != interp {
                    // Torn list or a wrong offset: do not follow `next` from garbage.
                    return self.fail(sink, ThreadFailure::Invalid);
                }
                walked += 1;
                let next = field_u64(tb, l.tstate_next);
                let thread_id = field_u64(tb, l.tstate_thread_id);
                let frame_field = field_u64(tb, l.tstate_frame);
                let native = l.tstate_native_thread_id.map_or(0, |o| field_u64(tb, o));
                self.walk_thread(sink, tstate, thread_id, native, frame_field);
                if next != 0 && (next == tstate || next == prev_tstate) {
                    return self.fail(sink, ThreadFailure::Cycle);
                }
                prev_tstate = tstate;
                tstate = next;
            }
            if self.target.interpreter != 0 {
                break;
            }
            match self.reader.read(interp + l.interp_next as u64, &mut b) {
                Ok(()) => interp = u64::from_le_bytes(b),
                Err(_) => return self.fail(sink, ThreadFailure::Invalid),
            }
        }
    }

    /// Reports every thread from `tstate` on as skipped (up to a bound).
    fn count_skipped(&mut self, sink: &mut dyn StackSink, mut tstate: u64) {
        let next_off = self.layout.tstate_next as u64;
        for _ in 0..MAX_SKIPPED_COUNTED {
            if tstate == 0 {
                break;
            }
            bump(&self.counters.skipped_threads, 1);
            sink.error(WalkError::Skipped);
            let mut b = [0u8; 8];
            match self.reader.read(tstate + next_off, &mut b) {
                Ok(()) if u64::from_le_bytes(b) != tstate => tstate = u64::from_le_bytes(b),
                _ => break,
            }
        }
    }

    fn walk_thread(
        &mut self,
        sink: &mut dyn StackSink,
        tstate: u64,
        thread_id: u64,
        native: u64,
        frame_field: u64,
    ) {
        let l = self.layout;
        let mut frame = frame_field;
        if let Some(off) = l.cframe_current_frame {
            if frame != 0 {
                let mut b = [0u8; 8];
                if self.reader.read(frame + off as u64, &mut b).is_err() {
                    return self.fail(sink, ThreadFailure::Invalid);
                }
                frame = u64::from_le_bytes(b);
            }
        }
        if frame == 0 {
            bump(&self.counters.idle_threads, 1);
            return;
        }
        let truncated = match self.walk_frames(frame) {
            Ok(t) => t,
            Err(f) => return self.fail(sink, f),
        };
        if self.frames.is_empty() {
            bump(&self.counters.idle_threads, 1);
            return;
        }
        let registered_native = self.registry.lookup(thread_id, &mut self.name);
        let on_cpu = self.on_cpu(thread_id, native, registered_native);
        bump(&self.counters.samples, 1);
        bump(&self.counters.frames, self.frames.len() as u64);
        if truncated {
            bump(&self.counters.truncated, 1);
        }
        let sample = RawSample {
            key: ExecutionKey::thread(thread_id),
            frames: &self.frames,
            truncated,
            on_cpu,
            thread_name: self.name.as_str(),
            task_name: None,
            span: None,
            weight: 1,
        };
        self.ctx.emit(&self.reader, tstate, sink, sample);
    }

    fn on_cpu(&mut self, thread_id: u64, native: u64, registered: u32) -> bool {
        if self.config.cpu_time == CpuTimeSource::Disabled {
            return false;
        }
        let tid = match u32::try_from(native) {
            Ok(t) if t != 0 => t,
            _ if registered != 0 => registered,
            _ if self.pthread_tid_ok => match tid_from_pthread(&self.reader, thread_id) {
                Ok(t) => t,
                Err(_) => return false,
            },
            _ => return false,
        };
        match cpu_time_ns(self.config.cpu_time, tid) {
            Some(ns) => self.cpu.observe(thread_id, ns),
            None => false,
        }
    }

    /// Walks the frame chain from `frame` into `self.frames`, leaf first. Returns whether the
    /// depth cap cut it. One batched read per frame in the steady state: the code header of
    /// this frame together with the next frame.
    fn walk_frames(&mut self, frame: u64) -> Result<bool, ThreadFailure> {
        let l = self.layout;
        self.frames.clear();
        let fsize = l.frame_read_size.min(BUF);
        let csize = l.code_read_size().min(BUF);
        let mut fbuf = [0u8; BUF];
        let mut nbuf = [0u8; BUF];
        let mut cbuf = [0u8; BUF];
        self.reader.read(frame, &mut fbuf[..fsize])?;
        let mut cur = frame;
        let mut last = 0u64;
        // Shim frames do not count towards the depth; bound the total work anyway.
        let max_steps = self.config.max_depth.saturating_mul(2).saturating_add(8);
        for _ in 0..max_steps {
            if self.frames.len() >= self.config.max_depth {
                return Ok(true);
            }
            let f = &fbuf[..fsize];
            let code = field_u64(f, l.frame_code);
            let previous = field_u64(f, l.frame_previous);
            if previous != 0 && (previous == cur || previous == last) {
                return Err(ThreadFailure::Cycle);
            }
            if l.frame_kind == FrameKind::FrameObject && !type_matches(self.target.types.frame, f) {
                return Err(ThreadFailure::Invalid);
            }
            let owner = l.frame_owner.map(|o| field_u8(f, o));
            let is_shim = l.owner_cstack.is_some() && owner == l.owner_cstack;
            if is_shim || code == 0 {
                bump(&self.counters.shim_frames, u64::from(is_shim));
                if code == 0 && !is_shim {
                    return Err(ThreadFailure::Invalid);
                }
                if previous == 0 {
                    return Ok(false);
                }
                self.reader.read(previous, &mut fbuf[..fsize])?;
                last = cur;
                cur = previous;
                continue;
            }
            let (rc, rn) = if previous != 0 {
                self.reader
                    .read_pair(code, &mut cbuf[..csize], previous, &mut nbuf[..fsize])
            } else {
                (self.reader.read(code, &mut cbuf[..csize]), Ok(()))
            };
            rc?;
            let limits = CopyLimits {
                max_string_chars: self.config.max_string_chars,
                max_linetable_bytes: self.config.max_linetable_bytes,
            };
            let resolved = self.cache.resolve(
                &self.reader,
                l,
                &self.target.types,
                limits,
                code,
                &cbuf[..csize],
            );
            self.flush_cache_events();
            let raw = match resolved {
                Ok(Resolved::Entry(idx)) => {
                    let lasti = self.lasti(f, code);
                    let line = match self.explicit_line(f) {
                        Some(line) => line,
                        None => self.cache.line(idx, l.linetable_kind, lasti),
                    };
                    Some(RawFrame {
                        id: u64::from(idx),
                        line,
                    })
                }
                Ok(Resolved::Full) => Some(RawFrame {
                    id: UNKNOWN_CODE_ID,
                    line: 0,
                }),
                // 3.13's `f_executable` may hold a non-code object for frames that run no
                // Python code; skip those rather than failing the whole stack.
                Err(ObjectError::WrongType) if l.frame_kind == FrameKind::InstrPtr => None,
                Err(e) => return Err(e.into()),
            };
            if let Some(raw) = raw {
                self.frames.push(raw);
            }
            if previous == 0 {
                return Ok(false);
            }
            rn?;
            std::mem::swap(&mut fbuf, &mut nbuf);
            last = cur;
            cur = previous;
        }
        Ok(true)
    }

    /// The frame's instruction offset in the unit [`super::linetable`] expects.
    fn lasti(&self, f: &[u8], code: u64) -> i64 {
        let l = self.layout;
        match l.frame_kind {
            FrameKind::FrameObject => i64::from(field_i32(f, l.frame_instr)),
            FrameKind::PrevInstr | FrameKind::InstrPtr => {
                let instr = field_u64(f, l.frame_instr);
                let base = code.wrapping_add(l.code_code_adaptive.unwrap_or(0) as u64);
                // Code units are 2 bytes; a pointer before the start (-1 unit on 3.11/3.12 for
                // a frame that has not started) yields a negative offset.
                (instr.wrapping_sub(base) as i64).div_euclid(2)
            }
        }
    }

    /// On 3.9/3.10 the frame's own `f_lineno` is authoritative while tracing.
    fn explicit_line(&self, f: &[u8]) -> Option<u32> {
        let l = self.layout;
        let lineno = field_i32(f, l.frame_lineno?);
        let valid = match l.frame_trace {
            Some(t) => field_u64(f, t) != 0,
            None => lineno != 0,
        };
        if valid {
            u32::try_from(lineno).ok()
        } else {
            None
        }
    }

    fn flush_cache_events(&mut self) {
        let ev = std::mem::take(&mut self.cache.events);
        bump(&self.counters.code_misses, ev.misses);
        bump(&self.counters.code_replaced, ev.replaced);
        bump(&self.counters.code_cache_full, ev.full);
    }
}

impl<R: MemoryReader + Send + 'static> StackWalker for PythonWalker<R> {
    fn walk(&mut self, sink: &mut dyn StackSink) {
        bump(&self.counters.ticks, 1);
        self.walk_all(sink);
        self.cpu.end_tick();
    }

    fn symbolize(&mut self, raw: RawFrame) -> Frame {
        self.cache.symbolize(raw.id, raw.line)
    }
}
