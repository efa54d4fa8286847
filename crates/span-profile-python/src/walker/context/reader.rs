//! [`ContextReader`]: the per-walker state that reads the running context's span and task
//! around each thread's walk, what a lookup found ([`ContextSpan`], `Resolution`), what it
//! reads ([`ContextTarget`]) and what it counts ([`ContextCounters`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use span_profile_core::{ActiveSpan, RawSample, SpanSource, StackSink, WalkError};

use super::dict::{otel_span_object, DictLayout, OtelTarget};
use super::error::ContextError;
use super::hamt::{hamt_find, hamt_hash, HamtTypes};
use super::slot::{read_slot, SlotVar, TaskNames, SPAN_MAGIC, TASK_MAGIC};
use crate::walker::layout::{tstate_context, PythonVersion, CONTEXT_VARS, HAMT_ROOT, OB_TYPE};
use crate::walker::memory::{field_u64, MemoryReader};
use crate::walker::namebuf::NameBuf;
use crate::walker::object_table::SpanObjectTable;

/// What the walker needs to read spans and task names from thread contexts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ContextTarget {
    /// Node types for validation.
    pub types: HamtTypes,
    /// OpenTelemetry's context variable (`var == 0`: not read).
    pub otel: OtelTarget,
    /// The span slot ContextVar, set only around `run_in_executor` calls, where the worker
    /// does not run in the submitter's context (`var == 0`: not read).
    pub span: SlotVar,
    /// The task tag ContextVar (`var == 0`: task names are not read).
    pub task: SlotVar,
}

span_profile_core::counters! {
    /// Counters of context reads (`Relaxed`: independent statistics, nothing is published
    /// through them).
    pub struct ContextCounters(pub) {
        /// Threads whose context was looked at.
        lookups,
        /// Samples whose span came from the context.
        spans,
        /// Contexts (or threads without one) that hold no span.
        no_span,
        /// Contexts whose current span is one our span processor did not start (another
        /// tracer provider's, or a sampled-out `NonRecordingSpan`): not attributed.
        untracked,
        /// Samples that carried a task name.
        tasks,
        /// Failed reads or validations (the sample carries no span).
        invalid,
        /// Samples dropped because another context was entered (an asyncio task switch), or a
        /// variable of the entered context was set (a span entered or left), while the stack
        /// was copied: their frames and span could disagree.
        switched,
    }
    /// A snapshot of [`ContextCounters`].
    #[non_exhaustive]
    pub struct ContextStats
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

fn type_ok(expected: u64, actual: u64) -> bool {
    expected == 0 || expected == actual
}

/// What one context lookup found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ContextSpan {
    /// The context could not be read (or context reading is off): the sample has no span.
    Unknown,
    /// The span current in the running context (`None`: no span).
    Known(Option<ActiveSpan>),
    /// Another context was entered, or a variable of the entered one was set, while the
    /// stack was copied: the sample is dropped and counted in [`ContextCounters::switched`].
    Switched,
}

/// What a context lookup found, kept with a thread's cached stack
/// ([`crate::walker::threads::CachedStack::resolution`]) and reused while the thread does not run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Resolution {
    /// [`ContextSpan::Known`] or [`ContextSpan::Unknown`] (never `Switched`).
    span: ContextSpan,
    /// The task name id, if the context had a task tag.
    task: Option<u32>,
}

impl Resolution {
    /// Whether the context had a task tag (its name is looked up when the sample is built).
    pub(crate) fn has_task(&self) -> bool {
        self.task.is_some()
    }
}

#[cfg(test)]
impl Resolution {
    /// A context that held `task` and could not be read for a span.
    pub(crate) fn unknown_with_task(task: Option<u32>) -> Self {
        Self {
            span: ContextSpan::Unknown,
            task,
        }
    }
}

/// Per-walker state of context reading: the target, a buffer for the task name, counters.
#[derive(Debug)]
pub(crate) struct ContextReader {
    tstate_context: Option<usize>,
    dict_layout: DictLayout,
    target: Option<ContextTarget>,
    /// The span-object table the span processor fills, by object address.
    span_objects: Option<Arc<SpanObjectTable>>,
    names: TaskNames,
    counters: Arc<ContextCounters>,
    task: NameBuf,
    has_task: bool,
    /// The name id behind `task`.
    task_id: Option<u32>,
    /// `tstate->context` read before the thread's frames ([`NOT_READ`] if not read).
    before: u64,
    /// That context's `ctx_vars` (its HAMT), read in the same syscall when the context was
    /// the one last seen on the thread ([`NOT_READ`] otherwise).
    before_vars: u64,
    /// The span and task found by a full lookup before the frames were copied
    /// ([`ContextReader::look_before`]); the lookup after the copy must find the same.
    before_found: Option<(Option<ActiveSpan>, Option<u32>)>,
    /// The thread's span-boundary count read before its frames were copied
    /// ([`SpanObjectTable::span_boundaries`]): the thread id and the count.
    before_boundaries: Option<(u64, u64)>,
    /// Set while [`ContextReader::look_before`] looks up: its misses are not counted twice.
    quiet: bool,
    /// The context last seen on each thread state, direct-mapped: lets [`ContextReader::before`]
    /// read `tstate->context` and that context's `ctx_vars` in one batched read.
    last_ctx: Box<[(u64, u64); CTX_CACHE]>,
}

/// Entries of [`ContextReader::last_ctx`] (a miss only costs the `ctx_vars` check).
const CTX_CACHE: usize = 256;

fn ctx_slot(tstate: u64) -> usize {
    (tstate.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 56) as usize % CTX_CACHE
}

/// [`ContextReader::before`] did not read the context pointer.
const NOT_READ: u64 = u64::MAX;

impl ContextReader {
    pub(crate) fn new(version: PythonVersion) -> Self {
        Self {
            tstate_context: tstate_context(version),
            dict_layout: DictLayout::for_version(version),
            target: None,
            span_objects: None,
            names: TaskNames::default(),
            counters: Arc::default(),
            task: NameBuf::new(),
            has_task: false,
            task_id: None,
            before: NOT_READ,
            before_vars: NOT_READ,
            before_found: None,
            before_boundaries: None,
            quiet: false,
            last_ctx: Box::new([(0, 0); CTX_CACHE]),
        }
    }

    /// Remembers which context is entered on the thread, and which variables it holds,
    /// before its frames are copied, so that [`ContextReader::emit`] can drop a sample whose
    /// span or task changed during the walk: another context entered (an asyncio task
    /// switch) or a variable set in the same context (a span entered or left on a thread).
    ///
    /// One syscall: `tstate->context` and the `ctx_vars` of the context last seen on the
    /// thread are read together; the second is used only if the first matches it.
    pub(crate) fn before(&mut self, reader: &dyn MemoryReader, tstate: u64) {
        self.forget_before();
        let Some(off) = self.context_offset() else {
            return;
        };
        let mut b = [0u8; 8];
        match self.last_context(tstate) {
            Some(seen) => {
                let mut v = [0u8; 8];
                let (ctx_read, vars_read) = reader.read_pair(
                    tstate.wrapping_add(off as u64),
                    &mut b,
                    seen.wrapping_add(CONTEXT_VARS as u64),
                    &mut v,
                );
                if ctx_read.is_ok() {
                    let vars = vars_read.is_ok().then(|| u64::from_le_bytes(v));
                    self.observe_before(tstate, u64::from_le_bytes(b), vars);
                }
            }
            None => {
                if reader.read(tstate.wrapping_add(off as u64), &mut b).is_ok() {
                    self.observe_before(tstate, u64::from_le_bytes(b), None);
                }
            }
        }
    }

    /// Where `tstate->context` is, when contexts are read (`None`: they are not).
    pub(crate) fn context_offset(&self) -> Option<usize> {
        self.target.and(self.tstate_context)
    }

    /// The context last seen entered on `tstate`, whose `ctx_vars` a caller of
    /// [`ContextReader::observe_before`] may read in the same syscall as the thread state.
    pub(crate) fn last_context(&self, tstate: u64) -> Option<u64> {
        let (seen_ts, seen_ctx) = self.last_ctx[ctx_slot(tstate)];
        (seen_ts == tstate && seen_ctx != 0).then_some(seen_ctx)
    }

    /// Records what the caller read before copying the frames: `ctx`, the thread's
    /// `tstate->context`, and `vars`, the `ctx_vars` of [`ContextReader::last_context`] read at
    /// the same time (used only if `ctx` is that context).
    pub(crate) fn observe_before(&mut self, tstate: u64, ctx: u64, vars: Option<u64>) {
        self.before = ctx;
        self.before_vars = match vars {
            Some(v) if self.last_context(tstate) == Some(ctx) => v,
            _ => NOT_READ,
        };
    }

    /// Nothing was read before the frames: no switch can be detected for this sample.
    pub(crate) fn forget_before(&mut self) {
        self.before = NOT_READ;
        self.before_vars = NOT_READ;
        self.before_found = None;
        self.before_boundaries = None;
    }

    /// The span boundaries counted so far on the thread whose `tstate->thread_id` is
    /// `thread_id`, if the span processor counts them; hand it to
    /// [`ContextReader::expect_after`] with what [`ContextReader::look_before`] found.
    pub(crate) fn span_boundaries(&self, thread_id: u64) -> Option<(u64, u64)> {
        let table = self.span_objects.as_ref()?;
        Some((thread_id, table.span_boundaries(thread_id)))
    }

    /// Looks the thread's span and task up in full, before its frame pointer is read and its
    /// frames are copied; hand the result to [`ContextReader::expect_after`]. Addresses alone
    /// cannot prove that the context did not change during the copy: a span's exit frees the
    /// variables' HAMT and the next entry may get the same address (ADR 0020). A span is
    /// current on a thread over one stretch of time, so finding the same span before the
    /// frame pointer was read and after the frames were copied proves it was current
    /// throughout.
    pub(crate) fn look_before(
        &mut self,
        reader: &dyn MemoryReader,
        tstate: u64,
    ) -> Option<(Option<ActiveSpan>, Option<u32>)> {
        let (Some(off), Some(target)) = (self.tstate_context, self.target) else {
            return None;
        };
        let t = &target.types;
        if t.bitmap == 0 || t.array == 0 || t.collision == 0 {
            return None;
        }
        let saved = (self.before, self.before_vars);
        (self.before, self.before_vars) = (NOT_READ, NOT_READ);
        self.quiet = true;
        let found = self.lookup(reader, tstate, off, &target);
        self.quiet = false;
        (self.before, self.before_vars) = saved;
        found.ok()
    }

    /// The lookup after the copy must find what [`ContextReader::look_before`] found, and no
    /// span may have started or ended on the thread since `boundaries` was read
    /// ([`ContextReader::span_boundaries`]), or the sample is dropped as switched. The second
    /// catches what the first cannot: a span that started and ended during the copy leaves
    /// the same span (or none) current on both sides, but its frames may be in the copy.
    pub(crate) fn expect_after(
        &mut self,
        found: Option<(Option<ActiveSpan>, Option<u32>)>,
        boundaries: Option<(u64, u64)>,
    ) {
        self.before_found = found;
        self.before_boundaries = boundaries;
    }

    /// A span started or ended on the thread since `before` ([`ContextReader::span_boundaries`]).
    fn crossed_boundary(&self, before: Option<(u64, u64)>) -> bool {
        match (before, &self.span_objects) {
            (Some((thread_id, n)), Some(table)) => table.span_boundaries(thread_id) != n,
            _ => false,
        }
    }

    /// The span and task of the context entered on the thread state at `tstate`. Never
    /// fails: what cannot be read is counted and reported as [`ContextSpan::Unknown`].
    pub(crate) fn resolve(&mut self, reader: &dyn MemoryReader, tstate: u64) -> ContextSpan {
        self.has_task = false;
        self.task_id = None;
        let boundaries = self.before_boundaries.take();
        let (Some(off), Some(target)) = (self.tstate_context, self.target) else {
            return ContextSpan::Unknown;
        };
        let t = &target.types;
        if t.bitmap == 0 || t.array == 0 || t.collision == 0 {
            // Node kinds cannot be told apart: do not guess.
            return ContextSpan::Unknown;
        }
        bump(&self.counters.lookups);
        let before = self.before_found.take();
        let found = self.lookup(reader, tstate, off, &target);
        // Read after the lookup: a span that ends while it reads is seen.
        let crossed = self.crossed_boundary(boundaries);
        match found {
            Ok(found) if crossed || before.is_some_and(|b| b != found) => {
                bump(&self.counters.switched);
                ContextSpan::Switched
            }
            Ok((span, task)) => {
                match span {
                    Some(_) => bump(&self.counters.spans),
                    None => bump(&self.counters.no_span),
                }
                if let Some(id) = task {
                    bump(&self.counters.tasks);
                    self.set_task(id);
                }
                ContextSpan::Known(span)
            }
            Err(ContextError::Switched) => {
                bump(&self.counters.switched);
                ContextSpan::Switched
            }
            // Read whole before the copy and torn after it: changed while it was read (a
            // HAMT freed under the reader) rather than never readable.
            Err(_) if before.is_some() || crossed => {
                bump(&self.counters.switched);
                ContextSpan::Switched
            }
            Err(_) => {
                bump(&self.counters.invalid);
                ContextSpan::Unknown
            }
        }
    }

    fn lookup(
        &mut self,
        reader: &dyn MemoryReader,
        tstate: u64,
        off: usize,
        target: &ContextTarget,
    ) -> Result<(Option<ActiveSpan>, Option<u32>), ContextError> {
        let mut b = [0u8; 8];
        reader.read(tstate.wrapping_add(off as u64), &mut b)?;
        let ctx = u64::from_le_bytes(b);
        // A thread's first context is created lazily (null before): not a switch.
        if self.before != NOT_READ && self.before != 0 && self.before != ctx {
            return Err(ContextError::Switched);
        }
        if ctx == 0 {
            // No context was ever entered or created on this thread: no ContextVar is set.
            return Ok((None, None));
        }
        let mut c = [0u8; CONTEXT_VARS + 8];
        reader.read(ctx, &mut c)?;
        if !type_ok(target.types.context, field_u64(&c, OB_TYPE)) {
            return Err(ContextError::Invalid);
        }
        let hamt = field_u64(&c, CONTEXT_VARS);
        if hamt == 0 {
            return Err(ContextError::Invalid);
        }
        self.last_ctx[ctx_slot(tstate)] = (tstate, ctx);
        // A variable was set in this context while the frames were copied (the HAMT is
        // immutable, so every set installs a new one): the span may not match the frames.
        if self.before_vars != NOT_READ && self.before_vars != hamt {
            return Err(ContextError::Switched);
        }
        let mut h = [0u8; HAMT_ROOT + 8];
        reader.read(hamt, &mut h)?;
        if !type_ok(target.types.hamt, field_u64(&h, OB_TYPE)) {
            return Err(ContextError::Invalid);
        }
        let root = field_u64(&h, HAMT_ROOT);
        if root == 0 {
            return Err(ContextError::Invalid);
        }
        // OpenTelemetry's own context first: its span, if our processor started it.
        let mut span = None;
        if target.otel.var != 0 {
            let found = hamt_find(
                reader,
                &target.types,
                root,
                target.otel.var,
                hamt_hash(target.otel.hash),
            )?;
            if let Some(context) = found {
                if let Some(obj) =
                    otel_span_object(reader, self.dict_layout, &target.otel, context)?
                {
                    span = self.span_objects.as_ref().and_then(|t| t.get(obj));
                    if span.is_none() && !self.quiet {
                        bump(&self.counters.untracked);
                    }
                }
            }
        }
        // Else the span a `run_in_executor` worker was handed.
        if span.is_none() && target.span.var != 0 {
            span = read_slot(reader, &target.types, root, &target.span, SPAN_MAGIC)?
                .and_then(|s| s.active_span());
        }
        let task = if target.task.var != 0 {
            read_slot(reader, &target.types, root, &target.task, TASK_MAGIC)?.map(|s| s.name_id)
        } else {
            None
        };
        Ok((span, task))
    }

    /// Hands `sample` to `sink` with the span and task name of the context running on the
    /// thread state at `tstate` (no span when that context cannot be read).
    /// Returns what was found, unless the context changed while the frames were copied.
    pub(crate) fn emit(
        &mut self,
        reader: &dyn MemoryReader,
        tstate: u64,
        sink: &mut dyn StackSink,
        sample: RawSample<'_>,
    ) -> Option<Resolution> {
        let span = self.resolve(reader, tstate);
        self.hand(span, sink, sample);
        (span != ContextSpan::Switched).then_some(Resolution {
            span,
            task: self.task_id,
        })
    }

    /// Hands `sample` to `sink` with what an earlier [`ContextReader::emit`] found, without
    /// reading memory: for a thread that has not run since.
    pub(crate) fn emit_resolved(
        &mut self,
        r: Resolution,
        sink: &mut dyn StackSink,
        sample: RawSample<'_>,
    ) {
        self.has_task = false;
        self.task_id = None;
        if let Some(id) = r.task {
            self.set_task(id);
        }
        self.hand(r.span, sink, sample);
    }

    fn set_task(&mut self, id: u32) {
        self.names.lookup(id, &mut self.task);
        self.has_task = true;
        self.task_id = Some(id);
    }

    fn hand(&self, span: ContextSpan, sink: &mut dyn StackSink, sample: RawSample<'_>) {
        match span {
            ContextSpan::Known(span) => sink.sample(
                &sample
                    .with_task_name(self.task_name())
                    .with_span(SpanSource::Resolved(span)),
            ),
            ContextSpan::Unknown => sink.sample(&sample),
            // Counted in `ContextCounters::switched` (`stats()["context_switched"]`) and, as a
            // torn sample, in the window's stats.
            ContextSpan::Switched => sink.error(WalkError::Torn),
        }
    }

    /// The task name found by the last [`ContextReader::resolve`].
    pub(crate) fn task_name(&self) -> Option<&str> {
        self.has_task.then(|| self.task.as_str())
    }

    /// Reads contexts as `target` describes ([`crate::walker::PythonWalker::with_context`]).
    pub(crate) fn set_target(&mut self, target: ContextTarget) {
        self.target = Some(target);
    }

    /// Resolves span objects in `table` ([`crate::walker::PythonWalker::with_span_objects`]).
    pub(crate) fn set_span_objects(&mut self, table: Arc<SpanObjectTable>) {
        self.span_objects = Some(table);
    }

    /// The task-name table the task factory fills.
    pub(crate) fn names(&self) -> &TaskNames {
        &self.names
    }

    /// Counters of context reads.
    pub(crate) fn counters(&self) -> &Arc<ContextCounters> {
        &self.counters
    }
}
