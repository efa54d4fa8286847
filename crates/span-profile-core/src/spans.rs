//! The span table: each span's metadata (name, parent, local root, route, start, end), kept
//! by the span hooks and drained into every window, so a query can find any span's samples.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};

use crate::labels::{truncate_label, LabelId, LabelValues, BACKGROUND_ROUTE, OTHER_VALUE};
use crate::mixhash::MixBuild;
use crate::registry::ActiveSpan;
use crate::sampled::SampledSpans;
use crate::{RouteRequests, SpanContext, SpanId, SpanRecord, TraceId};

/// What a span hook knows when a span starts.
#[derive(Debug, Clone, Copy)]
pub struct SpanStart<'a> {
    /// The span's trace.
    pub trace_id: TraceId,
    /// The span.
    pub span_id: SpanId,
    /// Its parent, if it has one.
    pub parent_span_id: Option<SpanId>,
    /// The parent lives in another process: this span starts a new local root.
    pub parent_is_remote: bool,
    /// The span's name.
    pub name: &'a str,
    /// Its `http.route` attribute, if set at start.
    pub route: Option<&'a str>,
    /// Start time, Unix nanoseconds.
    pub start_unix_ns: u64,
}

/// What [`SpanTable::end`] found out about a span that ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SpanEnd {
    /// The span may have samples (one named it, or a child with samples ended first), or a
    /// window closed while it was open. Its record is kept for the window (counted in
    /// `dropped_spans` if the window's cap is reached), and a link to its profile is worth
    /// setting.
    Sampled,
    /// No sample named the span yet: its record waits among the latest unsampled ends for the
    /// window's close to decide.
    Unsampled,
    /// The table did not know the span open: it was not started through
    /// [`SpanTable::start`], was past [`SpanTableLimits::max_open`], or had ended already.
    NotOpen,
}

/// Limits of the span table.
#[derive(Debug, Clone, Copy)]
pub struct SpanTableLimits {
    /// Open spans tracked at once; more are not tracked (their samples still carry ids).
    pub max_open: usize,
    /// Ended spans with samples kept per window.
    pub max_ended_per_window: usize,
    /// Ended spans with no sample yet, kept until the window closes: the latest this many.
    /// A sample can still name such a span (it is recorded after the span ended, or the span is
    /// the parent of a sampled span that ends later); older ones are left out and counted as
    /// unsampled.
    pub max_ended_unsampled: usize,
    /// Distinct route values, of the route labels and of the request counts of a window
    /// (requests of further routes count under `_other`).
    pub max_routes: usize,
    /// Distinct span names and routes whose text the records share; beyond it, each record
    /// holds its own copy.
    pub max_shared_names: usize,
}

impl Default for SpanTableLimits {
    fn default() -> Self {
        Self {
            max_open: 100_000,
            max_ended_per_window: 100_000,
            max_ended_unsampled: 8_192,
            max_routes: 1_000,
            max_shared_names: 4_096,
        }
    }
}

#[derive(Debug)]
struct Open {
    record: SpanRecord,
    route: LabelId,
    /// A window closed while the span was open: its earlier samples are in an earlier window,
    /// so its record (with its end) is kept whether or not it has samples in this one.
    crossed_window: bool,
}

/// Span names and routes, shared by the records that carry them, so that recording a span
/// copies no text.
#[derive(Debug)]
struct Names {
    set: HashSet<Arc<str>, MixBuild>,
    cap: usize,
}

impl Names {
    fn get(&mut self, s: &str) -> Arc<str> {
        let s = truncate_label(s);
        if let Some(a) = self.set.get(s) {
            return a.clone();
        }
        let a: Arc<str> = Arc::from(s);
        if self.set.len() < self.cap {
            self.set.insert(a.clone());
        }
        a
    }
}

#[derive(Debug)]
struct Inner {
    /// Keyed with the aggregator's hasher, not SipHash (which showed in the span hooks'
    /// profile): span ids are made in this process, not chosen by a client.
    open: HashMap<SpanId, Open, MixBuild>,
    /// Ended spans with samples (or that crossed a window), for this window.
    ended: Vec<SpanRecord>,
    /// Ended spans with no sample yet, the latest [`SpanTableLimits::max_ended_unsampled`].
    unsampled: VecDeque<SpanRecord>,
    names: Names,
    routes: LabelValues,
    /// Local-root spans with a route that ended since the last drain, by route: every
    /// request, sampled or not (ADR 0032).
    requests: HashMap<Arc<str>, u64, MixBuild>,
    limits: SpanTableLimits,
    dropped: u64,
    left_out: u64,
}

impl Inner {
    /// Counts one request of `route` (an ended local root). Routes past
    /// [`SpanTableLimits::max_routes`] count under `_other`, as their labels do.
    fn count_request(&mut self, route: &Arc<str>) {
        if let Some(n) = self.requests.get_mut(route) {
            *n += 1;
            return;
        }
        if self.requests.len() < self.limits.max_routes {
            self.requests.insert(route.clone(), 1);
        } else if let Some(n) = self.requests.get_mut(OTHER_VALUE) {
            // No allocation under the hooks' lock once `_other` is there.
            *n += 1;
        } else {
            self.requests.insert(Arc::from(OTHER_VALUE), 1);
        }
    }
}

/// The table of spans. The one owner of local-root and route logic: span hooks report starts
/// and ends, and get back the [`ActiveSpan`] to enter in the registry.
///
/// Hook-side only: it takes a mutex, so the sampler never calls it per sample.
///
/// ```
/// use span_profile_core::{SpanId, SpanStart, SpanTable, TraceId};
/// let table = SpanTable::default();
/// let trace_id = TraceId::from_u128(7).unwrap();
/// let root = table.start(SpanStart {
///     trace_id, span_id: SpanId::from_u64(1).unwrap(), parent_span_id: None,
///     parent_is_remote: false, name: "GET /orders/{id}", route: Some("/orders/{id}"),
///     start_unix_ns: 0,
/// });
/// let child = table.start(SpanStart {
///     trace_id, span_id: SpanId::from_u64(2).unwrap(), parent_span_id: Some(SpanId::from_u64(1).unwrap()),
///     parent_is_remote: false, name: "pricing.calculate", route: None, start_unix_ns: 10,
/// });
/// assert_eq!(child.ctx.local_root_span_id, root.ctx.span_id);
/// assert_eq!(table.route_name(child.route).as_ref(), "/orders/{id}");
/// ```
#[derive(Debug)]
pub struct SpanTable {
    inner: Mutex<Inner>,
    sampled: SampledSpans,
}

impl Default for SpanTable {
    fn default() -> Self {
        Self::with_limits(SpanTableLimits::default())
    }
}

impl SpanTable {
    /// A table with the given limits.
    pub fn with_limits(limits: SpanTableLimits) -> Self {
        Self {
            inner: Mutex::new(Inner {
                open: HashMap::default(),
                ended: Vec::new(),
                unsampled: VecDeque::new(),
                names: Names {
                    set: HashSet::default(),
                    cap: limits.max_shared_names,
                },
                routes: LabelValues::with_cap(limits.max_routes),
                requests: HashMap::default(),
                limits,
                dropped: 0,
                left_out: 0,
            }),
            sampled: SampledSpans::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // Every mutation below leaves the table coherent, so a poisoned lock is still usable.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records a span start. Returns what to enter in the registry when the span becomes
    /// current: its local root is the parent's local root when the parent is a known local
    /// span, the parent itself when the parent is local but unknown, and the span itself when
    /// it has no parent or a remote one. Its route is the local root's.
    pub fn start(&self, s: SpanStart<'_>) -> ActiveSpan {
        let mut inner = self.lock();
        let parent = match (s.parent_span_id, s.parent_is_remote) {
            (Some(p), false) => Some(p),
            _ => None,
        };
        let (local_root, inherited_route) = match parent.and_then(|p| inner.open.get(&p)) {
            Some(o) => (o.record.local_root_span_id, Some(o.route)),
            None => (parent.unwrap_or(s.span_id), None),
        };
        let route = match (s.route, inherited_route) {
            (Some(r), None) => inner.routes.intern(r),
            (_, Some(r)) => r,
            (None, None) => LabelValues::BACKGROUND,
        };
        let active = ActiveSpan {
            ctx: SpanContext {
                trace_id: s.trace_id,
                span_id: s.span_id,
                local_root_span_id: local_root,
            },
            route,
        };
        if inner.open.len() >= inner.limits.max_open {
            inner.dropped += 1;
            return active;
        }
        let record = SpanRecord {
            trace_id: s.trace_id,
            span_id: s.span_id,
            parent_span_id: s.parent_span_id,
            local_root_span_id: local_root,
            name: inner.names.get(s.name),
            route: s.route.map(|r| inner.names.get(r)),
            start_unix_ns: s.start_unix_ns,
            end_unix_ns: None,
        };
        inner.open.insert(
            s.span_id,
            Open {
                record,
                route,
                crossed_window: false,
            },
        );
        active
    }

    /// Records a span end. `route` is the span's `http.route` at end, if it has one (some
    /// instrumentations set it only once routing is done).
    ///
    /// A span with samples (see [`SpanTable::mark_sampled`]) is kept for the window, and so
    /// is its parent when that ends. One with none yet is kept only among the latest
    /// [`SpanTableLimits::max_ended_unsampled`]: the window's close decides on those, and the
    /// older ones are counted as unsampled. So memory follows the sampled spans, not the
    /// request rate. Returns which of these the span was.
    ///
    /// ```
    /// use span_profile_core::{SpanContext, SpanEnd, SpanId, SpanStart, SpanTable, TraceId};
    /// let table = SpanTable::default();
    /// let (trace_id, quiet, busy) =
    ///     (TraceId::from_u128(7).unwrap(), SpanId::from_u64(1).unwrap(), SpanId::from_u64(2).unwrap());
    /// for span_id in [quiet, busy] {
    ///     table.start(SpanStart { trace_id, span_id, parent_span_id: None, parent_is_remote: false,
    ///                             name: "op", route: None, start_unix_ns: 0 });
    /// }
    /// table.mark_sampled(&SpanContext { trace_id, span_id: busy, local_root_span_id: busy });
    /// assert_eq!(table.end(quiet, 10, None), SpanEnd::Unsampled);
    /// assert_eq!(table.end(busy, 10, None), SpanEnd::Sampled);
    /// assert_eq!(table.end(busy, 11, None), SpanEnd::NotOpen); // ended already
    /// ```
    pub fn end(&self, span_id: SpanId, end_unix_ns: u64, route: Option<&str>) -> SpanEnd {
        let mut inner = self.lock();
        let inner = &mut *inner;
        let Some(mut open) = inner.open.remove(&span_id) else {
            return SpanEnd::NotOpen;
        };
        open.record.end_unix_ns = Some(end_unix_ns.max(open.record.start_unix_ns));
        if let Some(r) = route {
            open.record.route = Some(inner.names.get(r));
        }
        if open.record.span_id == open.record.local_root_span_id {
            if let Some(route) = &open.record.route {
                inner.count_request(route);
            }
        }
        if open.crossed_window || self.sampled.may_contain(span_id) {
            if let Some(parent) = open.record.parent_span_id {
                self.sampled.mark(parent);
            }
            if inner.ended.len() >= inner.limits.max_ended_per_window {
                inner.dropped += 1;
            } else {
                inner.ended.push(open.record);
            }
            SpanEnd::Sampled
        } else {
            if inner.limits.max_ended_unsampled > 0 {
                if inner.unsampled.len() >= inner.limits.max_ended_unsampled {
                    inner.unsampled.pop_front();
                    inner.left_out += 1;
                }
                inner.unsampled.push_back(open.record);
            } else {
                inner.left_out += 1;
            }
            SpanEnd::Unsampled
        }
    }

    /// Notes that a sample was attributed to `ctx`: its span and local root are then kept
    /// when they end. Lock-free and allocation-free, for the sampler's per-sample path.
    #[inline]
    pub fn mark_sampled(&self, ctx: &SpanContext) {
        self.sampled.mark(ctx.span_id);
        if ctx.local_root_span_id != ctx.span_id {
            self.sampled.mark(ctx.local_root_span_id);
        }
    }

    /// The registry entry of an open span started through [`SpanTable::start`].
    pub fn active(&self, span_id: SpanId) -> Option<ActiveSpan> {
        let inner = self.lock();
        let o = inner.open.get(&span_id)?;
        Some(ActiveSpan {
            ctx: SpanContext {
                trace_id: o.record.trace_id,
                span_id,
                local_root_span_id: o.record.local_root_span_id,
            },
            route: o.route,
        })
    }

    /// Interns a route value (capped; overflow becomes `_other` and is counted).
    pub fn intern_route(&self, route: &str) -> LabelId {
        self.lock().routes.intern(route)
    }

    /// The value of an interned route.
    pub fn route_name(&self, id: LabelId) -> Arc<str> {
        self.lock().routes.get_arc(id)
    }

    /// Gives back a window's span buffer once the window is built, so that the next window
    /// fills it instead of growing a new one. The buffer of a busy service holds up to
    /// [`SpanTableLimits::max_ended_per_window`] records (megabytes); grown anew every window,
    /// by whichever application thread ends a span when it fills, it would leave its high-water
    /// mark in several of malloc's per-thread arenas. The table keeps the largest buffer it was
    /// given, so its capacity stays at the busiest window's. Optional: without it, buffers are
    /// freed. For the sampler and the window specs; not a stable API.
    #[doc(hidden)]
    pub fn recycle(&self, window: WindowSpans) {
        let mut buffer = window.spans;
        // The records are dropped here, outside the lock.
        buffer.clear();
        let mut inner = self.lock();
        if buffer.capacity() > inner.ended.capacity() {
            // Spans that ended since the drain move into the larger buffer.
            buffer.append(&mut inner.ended);
            std::mem::swap(&mut inner.ended, &mut buffer);
        }
        drop(inner);
        // The smaller buffer, now empty, is freed outside the lock.
        drop(buffer);
    }

    /// Closes a window: returns the spans that ended since the last drain plus those still
    /// open that started or were current during it, the route table and the count of span
    /// records dropped since the last drain. For the sampler, the window specs and fuzz; not
    /// a stable API.
    #[doc(hidden)]
    pub fn drain_window(&self) -> WindowSpans {
        // Marks from two windows back are forgotten: their spans have ended or crossed. This
        // clears 128 KiB, so it is done before taking the lock the span hooks wait on.
        self.sampled.rotate();
        let inner = &mut *self.lock();
        let mut spans = std::mem::take(&mut inner.ended);
        // Exactly: this buffer is recycled, and doubling it would keep the slack for good.
        spans.reserve_exact(inner.unsampled.len() + inner.open.len());
        spans.extend(inner.unsampled.drain(..));
        // Open spans go into every window they overlap, so a window alone can answer for a
        // span that is still running; the query keeps the record with an end time.
        spans.extend(inner.open.values_mut().map(|o| {
            o.crossed_window = true;
            o.record.clone()
        }));
        let dropped = std::mem::take(&mut inner.dropped);
        let left_out = std::mem::take(&mut inner.left_out);
        let route_overflow = inner.routes.overflowed();
        let mut requests: Vec<RouteRequests> = inner
            .requests
            .drain()
            .map(|(route, requests)| RouteRequests { route, requests })
            .collect();
        requests.sort_unstable_by(|a, b| a.route.cmp(&b.route));
        WindowSpans {
            spans,
            requests,
            routes: inner.routes.clone(),
            dropped,
            left_out,
            route_overflow,
        }
    }
}

/// A window's share of the span table.
#[derive(Debug, Clone)]
pub struct WindowSpans {
    /// Span records.
    pub spans: Vec<SpanRecord>,
    /// The requests that ended since the last window, by route, sorted by route: every
    /// local-root span with a route, sampled or not (ADR 0032).
    pub requests: Vec<RouteRequests>,
    /// A snapshot of the route values, to resolve [`ActiveSpan::route`] ids.
    pub routes: LabelValues,
    /// Span records dropped since the last window.
    pub dropped: u64,
    /// Ended spans left out as unsampled before the window closed (see
    /// [`SpanTableLimits::max_ended_unsampled`]).
    pub left_out: u64,
    /// Route values replaced by `_other`, in total.
    pub route_overflow: u64,
}

impl WindowSpans {
    /// The route name of `id`, [`BACKGROUND_ROUTE`] when out of range.
    pub fn route(&self, id: LabelId) -> &str {
        if (id.0 as usize) < self.routes.len() {
            self.routes.get(id)
        } else {
            BACKGROUND_ROUTE
        }
    }
}

/// Which span a sample is linked to, when a backend keeps one span per sample, and so which
/// spans carry the `pyroscope.profile.id` link ([`SpanScope::links`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum SpanScope {
    /// The local root span: the first span of the trace in this process (Pyroscope's and
    /// Grafana's convention).
    #[default]
    LocalRoot,
    /// The innermost span active when the sample was taken.
    All,
}

impl SpanScope {
    /// `local_root` (or `root`) and `all` (or `innermost`), in any case.
    ///
    /// ```
    /// use span_profile_core::SpanScope;
    /// assert_eq!(SpanScope::parse("ALL"), Some(SpanScope::All));
    /// assert_eq!(SpanScope::parse("spans"), None);
    /// ```
    pub fn parse(s: &str) -> Option<Self> {
        match s.to_ascii_lowercase().as_str() {
            "local_root" | "root" => Some(SpanScope::LocalRoot),
            "all" | "innermost" => Some(SpanScope::All),
            _ => None,
        }
    }

    /// Whether a span's own id is the one its samples are stored under, so that a link from
    /// the span to its profile (`pyroscope.profile.id`) finds them. `is_local_root`: the span
    /// has no parent in this process (none, or a remote one).
    ///
    /// ```
    /// use span_profile_core::SpanScope;
    /// assert!(SpanScope::LocalRoot.links(true) && !SpanScope::LocalRoot.links(false));
    /// assert!(SpanScope::All.links(false));
    /// ```
    pub fn links(self, is_local_root: bool) -> bool {
        is_local_root || self == SpanScope::All
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn start(
        t: &SpanTable,
        id: u64,
        parent: Option<u64>,
        remote: bool,
        route: Option<&str>,
    ) -> ActiveSpan {
        t.start(SpanStart {
            trace_id: TraceId::from_u128(1).unwrap(),
            span_id: SpanId::from_u64(id).unwrap(),
            parent_span_id: parent.and_then(SpanId::from_u64),
            parent_is_remote: remote,
            name: "s",
            route,
            start_unix_ns: id * 10,
        })
    }

    #[test]
    fn a_remote_parent_starts_a_new_local_root() {
        let t = SpanTable::default();
        let a = start(&t, 5, Some(99), true, Some("/x"));
        assert_eq!(a.ctx.local_root_span_id.to_u64(), 5);
        let b = start(&t, 6, Some(5), false, None);
        assert_eq!(b.ctx.local_root_span_id.to_u64(), 5);
        let c = start(&t, 7, Some(6), false, Some("/ignored-child-route"));
        assert_eq!(c.ctx.local_root_span_id.to_u64(), 5);
        assert_eq!(&*t.route_name(c.route), "/x");
    }

    #[test]
    fn ended_spans_reach_exactly_one_window_and_open_ones_every_window() {
        let t = SpanTable::default();
        start(&t, 1, None, false, None);
        start(&t, 2, Some(1), false, None);
        t.end(SpanId::from_u64(2).unwrap(), 100, None);
        let w1 = t.drain_window();
        assert_eq!(w1.spans.len(), 2);
        let w2 = t.drain_window();
        assert_eq!(w2.spans.len(), 1);
        assert_eq!(w2.spans[0].span_id.to_u64(), 1);
        assert_eq!(w2.spans[0].end_unix_ns, None);
    }

    fn id(v: u64) -> SpanId {
        SpanId::from_u64(v).unwrap()
    }

    /// What the sampler does when a sample is attributed to span `span` under root `root`.
    fn sample(t: &SpanTable, span: u64, root: u64) {
        t.mark_sampled(&SpanContext {
            trace_id: TraceId::from_u128(1).unwrap(),
            span_id: id(span),
            local_root_span_id: id(root),
        });
    }

    fn ids(w: &WindowSpans) -> Vec<u64> {
        let mut v: Vec<u64> = w.spans.iter().map(|s| s.span_id.to_u64()).collect();
        v.sort_unstable();
        v
    }

    #[test]
    fn unsampled_spans_wait_for_the_close_only_among_the_latest_and_the_rest_are_counted() {
        let t = SpanTable::with_limits(SpanTableLimits {
            max_ended_unsampled: 3,
            ..Default::default()
        });
        for i in 1..=5 {
            start(&t, i, None, false, None);
            t.end(id(i), i * 10 + 5, None);
        }
        let w = t.drain_window();
        assert_eq!(ids(&w), [3, 4, 5]);
        assert_eq!(w.left_out, 2, "the two oldest were left out, and counted");
        assert_eq!(w.dropped, 0, "leaving out an unsampled span is not a drop");
    }

    #[test]
    fn a_sampled_span_its_parent_and_its_root_are_kept_however_many_others_end() {
        let t = SpanTable::with_limits(SpanTableLimits {
            max_ended_unsampled: 2,
            ..Default::default()
        });
        start(&t, 1, None, false, Some("/checkout"));
        start(&t, 2, Some(1), false, None);
        start(&t, 3, Some(2), false, None);
        sample(&t, 3, 1);
        t.end(id(3), 100, None);
        for i in 10..110 {
            start(&t, i, None, false, None);
            t.end(id(i), i * 10 + 5, None);
        }
        // 2 has no sample of its own: it is kept because its child 3 was.
        t.end(id(2), 1200, None);
        for i in 200..300 {
            start(&t, i, None, false, None);
            t.end(id(i), i * 10 + 5, None);
        }
        t.end(id(1), 3100, None);
        let w = t.drain_window();
        assert_eq!(ids(&w), [1, 2, 3, 298, 299]);
        assert_eq!(w.left_out, 198);
    }

    #[test]
    fn a_span_open_when_a_window_closes_is_kept_when_it_ends_sampled_or_not() {
        let t = SpanTable::with_limits(SpanTableLimits {
            max_ended_unsampled: 0,
            ..Default::default()
        });
        start(&t, 1, None, false, None);
        assert_eq!(ids(&t.drain_window()), [1]);
        t.end(id(1), 500, None);
        let w = t.drain_window();
        assert_eq!(ids(&w), [1]);
        assert_eq!(w.spans[0].end_unix_ns, Some(500));
        assert_eq!(w.left_out, 0);
    }

    #[test]
    fn an_end_says_whether_the_span_may_have_samples() {
        let t = SpanTable::default();
        // 1 is a root; 2 its child, with a sample; 3 a child with none; 4 crosses a window.
        start(&t, 1, None, false, None);
        start(&t, 2, Some(1), false, None);
        start(&t, 3, Some(1), false, None);
        sample(&t, 2, 1);
        assert_eq!(t.end(id(3), 10, None), SpanEnd::Unsampled);
        assert_eq!(t.end(id(2), 20, None), SpanEnd::Sampled);
        // The root: its child's sample named it, and the child's end marked it too.
        assert_eq!(t.end(id(1), 30, None), SpanEnd::Sampled);
        start(&t, 4, None, false, None);
        t.drain_window();
        assert_eq!(
            t.end(id(4), 40, None),
            SpanEnd::Sampled,
            "open across a close"
        );
        assert_eq!(t.end(id(4), 41, None), SpanEnd::NotOpen, "ended already");
        assert_eq!(t.end(id(99), 50, None), SpanEnd::NotOpen, "never started");
    }

    #[test]
    fn a_parent_is_sampled_through_a_child_that_ends_first_with_samples() {
        let t = SpanTable::default();
        // The sample names the child and its local root (1), not the middle span (2).
        start(&t, 1, None, false, None);
        start(&t, 2, Some(1), false, None);
        start(&t, 3, Some(2), false, None);
        sample(&t, 3, 1);
        assert_eq!(t.end(id(3), 10, None), SpanEnd::Sampled);
        assert_eq!(t.end(id(2), 20, None), SpanEnd::Sampled);
    }

    #[test]
    fn records_share_the_text_of_names_and_routes() {
        let t = SpanTable::default();
        start(&t, 1, None, false, Some("/orders/{id}"));
        start(&t, 2, None, false, Some("/orders/{id}"));
        let w = t.drain_window();
        let (a, b) = (&w.spans[0], &w.spans[1]);
        assert!(Arc::ptr_eq(&a.name, &b.name));
        assert!(Arc::ptr_eq(
            a.route.as_ref().unwrap(),
            b.route.as_ref().unwrap()
        ));
    }

    #[test]
    fn a_recycled_buffer_takes_the_next_windows_spans_and_loses_none() {
        let t = SpanTable::default();
        for i in 1..=1000 {
            start(&t, i, None, false, None);
            sample(&t, i, i);
            t.end(SpanId::from_u64(i).unwrap(), i * 10 + 5, None);
        }
        let w1 = t.drain_window();
        assert_eq!(w1.spans.len(), 1000);
        let capacity = w1.spans.capacity();
        // A span that ends between the drain and the recycle moves into the recycled buffer.
        start(&t, 5000, None, false, None);
        t.end(SpanId::from_u64(5000).unwrap(), 50_005, None);
        t.recycle(w1);
        start(&t, 5001, None, false, None);
        t.end(SpanId::from_u64(5001).unwrap(), 50_015, None);
        let w2 = t.drain_window();
        let ids: Vec<u64> = w2.spans.iter().map(|s| s.span_id.to_u64()).collect();
        assert_eq!(ids, [5000, 5001]);
        assert!(
            w2.spans.capacity() >= capacity,
            "the next window filled the recycled buffer"
        );
        // A buffer no larger than the one in use is not taken, and costs no span either.
        start(&t, 6000, None, false, None);
        t.end(SpanId::from_u64(6000).unwrap(), 60_005, None);
        t.recycle(SpanTable::default().drain_window());
        let w3 = t.drain_window();
        assert_eq!(w3.spans.len(), 1);
        assert_eq!(w3.spans[0].span_id.to_u64(), 6000);
    }

    #[test]
    fn the_open_span_cap_is_counted() {
        let t = SpanTable::with_limits(SpanTableLimits {
            max_open: 10,
            ..Default::default()
        });
        for i in 1..=20 {
            start(&t, i, None, false, None);
        }
        assert_eq!(t.drain_window().dropped, 10);
    }
}
