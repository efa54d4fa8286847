//! The span-object table (ADR 0011): which SDK span objects our span processor started, by
//! address, with what the sampler labels their samples with.
//!
//! The sampler finds the current span object in OpenTelemetry's own context (no hook on
//! `attach`/`detach`) and looks its address up here, lock-free. So that an address here can
//! only ever be that span, the table holds a reference to each object it lists: the address
//! cannot be reused while it is listed. A listed object that nothing else references any more
//! (its reference count is our one) can never become current again and is let go. The sweep
//! runs a few entries at a time inside `on_start`, which holds the GIL.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use pyo3::prelude::*;

use crate::walker::{current_thread_id, Insert, SpanObjectTable};
use span_profile_core::ActiveSpan;

/// Most span objects listed at once; a span started beyond it is not listed (its samples carry
/// no span) and is counted in [`SpanObjectStats::full`], as is one the table found no slot for
/// (it probes [`crate::walker::OBJECT_PROBE`] slots from the address's home).
pub(crate) const MAX_SPAN_OBJECTS: usize = 8192;
/// Above this many listed objects, objects listed longer than [`EVICT_AFTER`] are let go even
/// if something still references them (a reference cycle, spans kept in a list), counted in
/// [`SpanObjectStats::evicted`]: the table stays small and cycles stay collectable.
const EVICT_ABOVE: usize = 2048;
const EVICT_AFTER: Duration = Duration::from_secs(60);
/// Entries the sweep looks at per span start: more than one, so the table shrinks as fast as
/// spans start.
const SWEEP_PER_START: usize = 3;

/// Span objects by address, for the sampler; the references that keep them listed, for us.
#[derive(Debug)]
pub(crate) struct SpanObjects {
    table: Arc<SpanObjectTable>,
    held: Mutex<Held>,
    full: AtomicU64,
    evicted: AtomicU64,
}

#[derive(Debug)]
struct Entry {
    addr: u64,
    object: Py<PyAny>,
    listed_at: Instant,
}

#[derive(Debug, Default)]
struct Held {
    objects: Vec<Entry>,
    /// Where the sweep goes on from.
    hand: usize,
}

/// The references a sweep lets go of, released once the lock is dropped.
#[derive(Default)]
struct Released([Option<Py<PyAny>>; SWEEP_PER_START]);

/// Counters of the table (`stats()`).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct SpanObjectStats {
    pub(crate) listed: u64,
    pub(crate) full: u64,
    pub(crate) evicted: u64,
    /// Sampler lookups that gave no span because a writer kept the entry busy.
    pub(crate) contended: u64,
}

impl Default for SpanObjects {
    fn default() -> Self {
        Self {
            // Twice the entries: a lookup probes a few slots from each address's home. The
            // slots' pages become resident as they are first written (ADR 0011).
            table: Arc::new(SpanObjectTable::with_slots(2 * MAX_SPAN_OBJECTS)),
            held: Mutex::default(),
            full: AtomicU64::new(0),
            evicted: AtomicU64::new(0),
        }
    }
}

impl SpanObjects {
    /// The lock-free table the walker reads.
    pub(crate) fn table(&self) -> Arc<SpanObjectTable> {
        self.table.clone()
    }

    /// Counts a span starting or ending on this thread, for the sampler
    /// ([`SpanObjectTable::span_boundary`]). The SDK calls `on_start` before the span becomes
    /// current and `_on_ending`/`on_end` after it stops being current.
    pub(crate) fn span_boundary(&self) {
        self.table.span_boundary(current_thread_id());
    }

    fn held(&self) -> std::sync::MutexGuard<'_, Held> {
        // Poisoned only by a panic between two Vec operations; the Vec is still coherent.
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Lists `span` (just started by our processor) as `active`, after a short sweep.
    pub(crate) fn insert(&self, span: &Bound<'_, PyAny>, active: ActiveSpan) {
        let py = span.py();
        let addr = span.as_ptr() as u64;
        let mut held = self.held();
        let released = self.sweep(py, &mut held);
        // A listed object being started again only has its entry updated; a new one is
        // listed below the cap, and held exactly when listed.
        let new = held.objects.len() < MAX_SPAN_OBJECTS;
        match self.table.insert(addr, active, new) {
            Insert::Updated => {}
            Insert::Listed => held.objects.push(Entry {
                addr,
                object: span.clone().unbind(),
                listed_at: Instant::now(),
            }),
            // The cap, or no free slot near the address's home.
            Insert::Full => {
                self.full.fetch_add(1, Ordering::Relaxed);
            }
        }
        // Released after the lock: freeing a span may run Python code (weakref callbacks)
        // that starts another span.
        drop(held);
        drop(released);
    }

    /// What `span` is listed as, if our processor started it.
    pub(crate) fn get(&self, span: &Bound<'_, PyAny>) -> Option<ActiveSpan> {
        self.table.get(span.as_ptr() as u64)
    }

    /// Looks at [`SWEEP_PER_START`] entries from the hand and unlists those that nothing else
    /// references (and, while the table is large, those listed for long). Calls no Python
    /// code; returns the references to release once the lock is dropped.
    fn sweep(&self, py: Python<'_>, held: &mut Held) -> Released {
        // On the stack: a span start usually lets one object go, and a heap buffer for it
        // would be one allocation and one free per span.
        let mut released = Released::default();
        let large = held.objects.len() > EVICT_ABOVE;
        for n in 0..SWEEP_PER_START.min(held.objects.len()) {
            if held.hand >= held.objects.len() {
                held.hand = 0;
            }
            let i = held.hand;
            let e = &held.objects[i];
            let unreferenced = e.object.get_refcnt(py) <= 1;
            let evict = !unreferenced && large && e.listed_at.elapsed() > EVICT_AFTER;
            if unreferenced || evict {
                self.table.remove(e.addr);
                if evict {
                    self.evicted.fetch_add(1, Ordering::Relaxed);
                }
                // The swapped-in last entry is looked at next.
                released.0[n] = Some(held.objects.swap_remove(i).object);
            } else {
                held.hand += 1;
            }
        }
        released
    }

    /// Unlists every object (the agent stopped, or a forked child drops the parent's table).
    pub(crate) fn clear(&self) {
        let objects = std::mem::take(&mut self.held().objects);
        for e in &objects {
            self.table.remove(e.addr);
        }
        drop(objects);
    }

    pub(crate) fn stats(&self) -> SpanObjectStats {
        SpanObjectStats {
            listed: self.held().objects.len() as u64,
            full: self.full.load(Ordering::Relaxed),
            evicted: self.evicted.load(Ordering::Relaxed),
            contended: self.table.contended(),
        }
    }
}
