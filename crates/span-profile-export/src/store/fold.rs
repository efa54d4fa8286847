//! The parallel fold over stored windows: a listing by file name, then decoding on several
//! threads, each thread folding the windows it reads into its own accumulator, so that a
//! question over a day of windows never holds the day in memory.
//!
//! Questions that a window summary can answer (no span, no trace) read each window's summary
//! instead of decoding it, and decode the window only when its summary is missing, corrupt or
//! stale (ADR 0006). What could not be read is kept for the caller to report
//! ([`Store::take_skipped`], [`Store::take_unusable_summaries`]); the answer leaves it out.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use span_profile_core::{Profile, WindowInfo};

use crate::decode::DecodeBudget;
use crate::layout::sanitize_component;
use crate::store::error::{SkippedFile, StoreError};
use crate::store::list::{list, StoreFilter, StoreListing, StoredFile};
use crate::store::query::Filter;
use crate::store::read::{read_summary_within, read_window_within};
use crate::store::summary::{SummaryScope, WindowSummary};
use crate::MAX_DECOMPRESSED_LEN;

const MS_PER_HOUR: u64 = 3_600_000;
const MS_PER_DAY: u64 = 24 * MS_PER_HOUR;
const NS_PER_MS: u64 = 1_000_000;

/// A store directory, read on some threads, and what could not be read so far.
///
/// ```
/// use span_profile_export::store::query::{report, Filter, Report};
/// use span_profile_export::store::summary::WindowSummary;
/// use span_profile_export::store::Store;
///
/// let dir = std::env::temp_dir().join(format!("span-profile-fold-doc-{}", std::process::id()));
/// std::fs::create_dir_all(&dir).unwrap();
/// let store = Store::new(&dir).with_threads(4);
/// let f = Filter::default().route("/checkout");
/// let r: Report = store
///     .stream_summarized(&f, false, report, WindowSummary::report, Report::merge)
///     .unwrap();
/// assert_eq!((r.windows, r.samples), (0, 0));
/// assert!(store.take_skipped().is_empty());
/// # std::fs::remove_dir_all(&dir).unwrap();
/// ```
#[derive(Debug)]
pub struct Store {
    dir: PathBuf,
    threads: usize,
    /// Whether window summaries may answer in place of the windows.
    summaries: bool,
    skipped: Mutex<Vec<SkippedFile>>,
    /// The memory all of its threads' decodes may take at once (ADR 0031).
    budget: DecodeBudget,
    /// Summaries that could not be used (corrupt, cut short, stale); their windows were decoded.
    bad_summaries: Mutex<Vec<StoreError>>,
}

/// One stored window, as a fold step receives it.
#[derive(Debug)]
pub enum Window {
    /// The window's summary: the step returns `false` if it cannot answer from it, and is then
    /// called again with the decoded window.
    Summary(Box<WindowSummary>),
    /// The decoded window.
    Profile(Box<Profile>),
}

impl Window {
    /// What the window filters look at.
    pub fn info(&self) -> WindowInfo<'_> {
        match self {
            Window::Summary(s) => s.info(),
            Window::Profile(p) => p.info(),
        }
    }
}

/// Why a question over the store has no answer. Files that cannot be read are not errors:
/// they are skipped and kept ([`Store::take_skipped`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum QueryError {
    /// The store's root directory cannot be listed.
    #[error("cannot list the store {}", dir.display())]
    List {
        /// The store's root.
        dir: PathBuf,
        /// What went wrong.
        #[source]
        source: StoreError,
    },
    /// A selection by span id found no ended span with that id.
    #[error("no ended span {span_id} in the selected windows ({windows} read); `span-profile spans DIR` lists the spans")]
    NoSpan {
        /// The span id asked for.
        span_id: span_profile_core::SpanId,
        /// Windows whose span tables were read.
        windows: usize,
    },
    /// A selection by span name (the slowest span of a name) found no ended span of it.
    #[error("no ended span named {name:?} in the selected windows ({windows} read)")]
    NoSpanNamed {
        /// The span name asked for.
        name: String,
        /// Windows whose span tables were read.
        windows: usize,
        /// The distinct names of the ended spans in them, sorted.
        known: Vec<String>,
    },
}

impl Store {
    /// The store rooted at `dir`, read on one thread, with window summaries on.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self {
            dir: dir.into(),
            threads: 1,
            summaries: true,
            skipped: Mutex::new(Vec::new()),
            budget: DecodeBudget::new(MAX_DECOMPRESSED_LEN),
            bad_summaries: Mutex::new(Vec::new()),
        }
    }

    /// The memory that decoding may take at once, in bytes, across all the store's threads
    /// (default [`MAX_DECOMPRESSED_LEN`]): each file and its decompressed form are reserved
    /// from it, a file that does not fit beside the other threads' is decoded alone, and one
    /// that does not fit alone is skipped as too large (ADR 0031).
    pub fn with_decode_memory(mut self, bytes: u64) -> Self {
        self.budget = DecodeBudget::new(bytes);
        self
    }

    /// Reads and decodes one stored window within the store's decode memory
    /// ([`Store::with_decode_memory`]); `None` if it cannot be read, and then the file and
    /// why are kept for [`Store::take_skipped`].
    pub fn read_window(&self, f: &StoredFile) -> Option<Profile> {
        match read_window_within(f, &self.budget) {
            Ok(p) => Some(p),
            Err(error) => {
                self.note_skipped(vec![SkippedFile {
                    path: f.path.clone(),
                    error,
                }]);
                None
            }
        }
    }

    /// Reads windows on `threads` threads (at least one).
    pub fn with_threads(mut self, threads: usize) -> Self {
        self.threads = threads.max(1);
        self
    }

    /// Whether window summaries may answer in place of the windows (default: yes). Off, every
    /// window is decoded (to compare, or to rule summaries out).
    pub fn with_summaries(mut self, on: bool) -> Self {
        self.summaries = on;
        self
    }

    /// The store's root directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// How many threads read windows.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// The files that can hold windows passing `filter`'s service, instance and time range,
    /// judged from their names. A raw window is at most an hour long and a roll-up at most a day, so
    /// before `since` only files up to an hour earlier, or starting on a UTC day boundary
    /// (a daily roll-up) up to a day earlier, can overlap.
    pub fn list(&self, filter: &Filter) -> Result<Vec<StoredFile>, QueryError> {
        let store_filter = StoreFilter {
            service: filter.service.clone(),
            since_unix_ns: filter
                .since_unix_ns
                .map(|t| t.saturating_sub(MS_PER_DAY * NS_PER_MS)),
            until_unix_ns: filter.until_unix_ns,
        };
        let StoreListing { mut files, skipped } =
            list(&self.dir, &store_filter).map_err(|source| QueryError::List {
                dir: self.dir.clone(),
                source,
            })?;
        self.note_skipped(skipped);
        // A window's file is named after its sanitized instance label (`unknown` without one).
        if let Some(instance) = &filter.instance {
            let named = sanitize_component(instance);
            files.retain(|f| f.instance == named);
        }
        if let Some(since) = filter.since_unix_ns {
            let since_ms = since / NS_PER_MS;
            files.retain(|f| {
                f.start_unix_ms + MS_PER_HOUR > since_ms || f.start_unix_ms % MS_PER_DAY == 0
            });
        }
        Ok(files)
    }

    /// Decodes `files` on the store's threads. Each thread starts from `init()` and calls
    /// `step(acc, index, window)` for every window it decodes (`index` into `files`); the
    /// accumulators come back in no particular order. Unreadable files are skipped and kept.
    pub fn fold<A: Send>(
        &self,
        files: &[StoredFile],
        init: impl Fn() -> A + Sync,
        step: impl Fn(&mut A, usize, Profile) + Sync,
    ) -> Vec<A> {
        self.fold_windows(files, None, init, |acc, i, w| {
            if let Window::Profile(p) = w {
                step(acc, i, *p);
            }
            true
        })
    }

    /// [`Store::fold`], offering each window's summary first when summaries can answer
    /// `summaries_for` (a filter, and whether the question is by route) and are not turned
    /// off: `step` gets [`Window::Summary`] and returns whether it could answer from it. Only
    /// the part of each summary the question needs is decoded. A window without a usable
    /// summary, or whose summary `step` declined, is decoded and passed as
    /// [`Window::Profile`].
    pub fn fold_windows<A: Send>(
        &self,
        files: &[StoredFile],
        summaries_for: Option<(&Filter, bool)>,
        init: impl Fn() -> A + Sync,
        step: impl Fn(&mut A, usize, Window) -> bool + Sync,
    ) -> Vec<A> {
        let scope = summaries_for
            .filter(|(f, _)| self.summaries && WindowSummary::answers(f))
            .map(|(f, by_route)| (f, SummaryScope::needed(f, by_route)));
        self.fold_scoped(files, scope, init, step)
    }

    /// [`Store::fold_windows`] with the part of each summary to decode given: `scope` is the
    /// filter the summaries must be able to answer ([`WindowSummary::can_answer`]; a summary
    /// that cannot is not offered) and the part to decode. `None` decodes every window.
    pub(crate) fn fold_scoped<A: Send>(
        &self,
        files: &[StoredFile],
        scope: Option<(&Filter, SummaryScope)>,
        init: impl Fn() -> A + Sync,
        step: impl Fn(&mut A, usize, Window) -> bool + Sync,
    ) -> Vec<A> {
        let scope = scope.filter(|_| self.summaries);
        let next = AtomicUsize::new(0);
        let threads = self.threads.min(files.len()).max(1);
        let work = || {
            let mut acc = init();
            let mut skipped = Vec::new();
            let mut bad = Vec::new();
            loop {
                // Relaxed: the counter only hands out distinct indices; the files are shared
                // read-only and results are joined through the scope.
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(f) = files.get(i) else { break };
                if let Some((filter, scope)) = &scope {
                    match read_summary_within(f, scope, &self.budget) {
                        Ok(Some(s)) => {
                            if s.can_answer(filter)
                                && step(&mut acc, i, Window::Summary(Box::new(s)))
                            {
                                continue;
                            }
                        }
                        Ok(None) => {}
                        Err(e) => bad.push(e),
                    }
                }
                match read_window_within(f, &self.budget) {
                    Ok(p) => {
                        step(&mut acc, i, Window::Profile(Box::new(p)));
                    }
                    Err(error) => skipped.push(SkippedFile {
                        path: f.path.clone(),
                        error,
                    }),
                }
            }
            self.note_bad_summaries(bad);
            (acc, skipped)
        };
        let results: Vec<(A, Vec<SkippedFile>)> = if threads == 1 {
            vec![work()]
        } else {
            std::thread::scope(|s| {
                let handles: Vec<_> = (0..threads).map(|_| s.spawn(work)).collect();
                handles
                    .into_iter()
                    .map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
                    .collect()
            })
        };
        results
            .into_iter()
            .map(|(acc, skipped)| {
                self.note_skipped(skipped);
                acc
            })
            .collect()
    }

    /// Answers `q` window by window over the windows that pass `filter`, merging the answers.
    pub fn stream<A: Send + Default>(
        &self,
        filter: &Filter,
        q: impl Fn(&[Profile], &Filter) -> A + Sync,
        merge: impl Fn(&mut A, A) + Sync,
    ) -> Result<A, QueryError> {
        self.stream_with(
            filter,
            q,
            None::<(fn(&WindowSummary, &Filter) -> Option<A>, bool)>,
            merge,
        )
    }

    /// [`Store::stream`] for a question that window summaries also answer: a window is
    /// answered by `qs` from its summary when it has a usable one, else by `q` from the
    /// decoded window. `qs` must give what `q` gives on the same window (or `None` when it
    /// cannot); `by_route` for a question by route (it needs every route of a summary).
    pub fn stream_summarized<A: Send + Default>(
        &self,
        filter: &Filter,
        by_route: bool,
        q: impl Fn(&[Profile], &Filter) -> A + Sync,
        qs: impl Fn(&WindowSummary, &Filter) -> Option<A> + Sync,
        merge: impl Fn(&mut A, A) + Sync,
    ) -> Result<A, QueryError> {
        self.stream_with(filter, q, Some((qs, by_route)), merge)
    }

    /// [`Store::stream`], with summaries when `qs` is given.
    pub(crate) fn stream_with<A: Send + Default>(
        &self,
        filter: &Filter,
        q: impl Fn(&[Profile], &Filter) -> A + Sync,
        qs: Option<(impl Fn(&WindowSummary, &Filter) -> Option<A> + Sync, bool)>,
        merge: impl Fn(&mut A, A) + Sync,
    ) -> Result<A, QueryError> {
        let files = self.list(filter)?;
        let summaries = qs.as_ref().map(|&(_, by_route)| (filter, by_route));
        let parts = self.fold_windows(&files, summaries, A::default, |acc, _, w| {
            if !filter.matches(&w.info()) {
                return true;
            }
            let answer = match (&w, &qs) {
                (Window::Summary(s), Some((qs, _))) => qs(s, filter),
                (Window::Summary(_), None) => None,
                (Window::Profile(p), _) => Some(q(std::slice::from_ref(p), filter)),
            };
            match answer {
                Some(a) => {
                    merge(acc, a);
                    true
                }
                None => false,
            }
        });
        let mut answer = A::default();
        for part in parts {
            merge(&mut answer, part);
        }
        Ok(answer)
    }

    /// The files skipped so far (unreadable, corrupt or truncated), with their reasons, each
    /// once however often it was met, by path; they are handed out once.
    pub fn take_skipped(&self) -> Vec<SkippedFile> {
        // A poisoned lock still holds a valid list.
        std::mem::take(
            &mut *self
                .skipped
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }

    /// The files skipped so far, as [`Store::take_skipped`] would hand them out: each path
    /// once, with its reason, by path. They are kept, to be taken later.
    pub fn skipped(&self) -> Vec<(PathBuf, String)> {
        // A poisoned lock still holds a valid list.
        self.skipped
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .map(|s| (s.path.clone(), s.error.to_string()))
            .collect()
    }

    /// The summaries that could not be used so far (corrupt, cut short, stale); their windows
    /// were decoded instead, so the answers are complete. Handed out once.
    pub fn take_unusable_summaries(&self) -> Vec<StoreError> {
        // A poisoned lock still holds a valid list.
        std::mem::take(
            &mut *self
                .bad_summaries
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }

    fn note_bad_summaries(&self, mut bad: Vec<StoreError>) {
        if bad.is_empty() {
            return;
        }
        // A poisoned lock still holds a valid list.
        self.bad_summaries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .append(&mut bad);
    }

    /// Keeps `skipped`, each path once (the first reason met), sorted by path.
    fn note_skipped(&self, skipped: Vec<SkippedFile>) {
        if skipped.is_empty() {
            return;
        }
        // A poisoned lock still holds a valid list.
        let mut all = self
            .skipped
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for s in skipped {
            if let Err(at) = all.binary_search_by(|k| k.path.cmp(&s.path)) {
                all.insert(at, s);
            }
        }
    }
}
