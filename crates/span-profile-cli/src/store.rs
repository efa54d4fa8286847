//! Reading the file store: listing by file name, then decoding on several threads, each
//! thread folding the windows it decodes into its own accumulator, so that a query over a
//! day of windows never holds the day in memory.
//!
//! Queries that a window summary can answer (no span, no trace) read each window's summary
//! instead of decoding it, and decode the window only when its summary is missing, corrupt or
//! stale (ADR 0006). `SPAN_PROFILE_NO_SUMMARY=1` turns summaries off (to compare, or to rule
//! them out).

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use anyhow::Context as _;
use span_profile_core::query::{Filter, SummaryScope, WindowInfo, WindowSummary};
use span_profile_core::Profile;
use span_profile_export::store::{
    self, SkippedFile, StoreError, StoreFilter, StoreListing, StoredFile,
};

const MS_PER_HOUR: u64 = 3_600_000;
const MS_PER_DAY: u64 = 24 * MS_PER_HOUR;
const NS_PER_MS: u64 = 1_000_000;

/// The environment variable that turns window summaries off when set to anything but `0`.
const NO_SUMMARY_VAR: &str = "SPAN_PROFILE_NO_SUMMARY";

/// A store directory and how many threads decode it.
#[derive(Debug)]
pub(crate) struct Store<'a> {
    pub(crate) dir: &'a Path,
    pub(crate) threads: usize,
    /// Whether window summaries may answer in place of the windows.
    summaries: bool,
    skipped: Mutex<Vec<SkippedFile>>,
    /// Summaries that could not be used (corrupt, cut short, stale); their windows were decoded.
    bad_summaries: Mutex<Vec<StoreError>>,
}

/// One stored window, as a fold step receives it.
#[derive(Debug)]
pub(crate) enum Window {
    /// The window's summary: the step returns `false` if it cannot answer from it, and is then
    /// called again with the decoded window.
    Summary(Box<WindowSummary>),
    /// The decoded window.
    Profile(Box<Profile>),
}

impl Window {
    /// What the window filters look at.
    pub(crate) fn info(&self) -> WindowInfo<'_> {
        match self {
            Window::Summary(s) => s.info(),
            Window::Profile(p) => p.info(),
        }
    }
}

impl<'a> Store<'a> {
    pub(crate) fn new(dir: &'a Path, threads: usize) -> Self {
        let off = std::env::var_os(NO_SUMMARY_VAR).is_some_and(|v| !v.is_empty() && v != "0");
        Self {
            dir,
            threads: threads.max(1),
            summaries: !off,
            skipped: Mutex::new(Vec::new()),
            bad_summaries: Mutex::new(Vec::new()),
        }
    }

    /// The files that can hold windows passing `filter`'s service and time range, judged
    /// from their names. A raw window is at most an hour long and a roll-up at most a day, so
    /// before `since` only files up to an hour earlier, or starting on a UTC day boundary
    /// (a daily roll-up) up to a day earlier, can overlap.
    pub(crate) fn list(&self, filter: &Filter) -> anyhow::Result<Vec<StoredFile>> {
        let store_filter = StoreFilter {
            service: filter.service.clone(),
            since_unix_ns: filter
                .since_unix_ns
                .map(|t| t.saturating_sub(MS_PER_DAY * NS_PER_MS)),
            until_unix_ns: filter.until_unix_ns,
        };
        let StoreListing { mut files, skipped } = store::list(self.dir, &store_filter)
            .with_context(|| format!("cannot list the store {}", self.dir.display()))?;
        self.note_skipped(skipped);
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
    /// accumulators come back in no particular order. Unreadable files are skipped and noted.
    pub(crate) fn fold<A: Send>(
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
    pub(crate) fn fold_windows<A: Send>(
        &self,
        files: &[StoredFile],
        summaries_for: Option<(&Filter, bool)>,
        init: impl Fn() -> A + Sync,
        step: impl Fn(&mut A, usize, Window) -> bool + Sync,
    ) -> Vec<A> {
        let scope = summaries_for
            .filter(|(f, _)| self.summaries && WindowSummary::answers(f))
            .map(|(f, by_route)| SummaryScope::needed(f, by_route));
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
                if let Some(scope) = &scope {
                    match store::read_summary(f, scope) {
                        Ok(Some(s)) => {
                            if step(&mut acc, i, Window::Summary(Box::new(s))) {
                                continue;
                            }
                        }
                        Ok(None) => {}
                        Err(e) => bad.push(e),
                    }
                }
                match store::read_window(f) {
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

    fn note_skipped(&self, mut skipped: Vec<SkippedFile>) {
        if skipped.is_empty() {
            return;
        }
        // A poisoned lock still holds a valid list.
        let mut all = self
            .skipped
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        all.append(&mut skipped);
    }

    /// Prints one warning for the skipped files on stderr (the first few with their reason),
    /// and one note for the summaries that could not be used.
    pub(crate) fn warn_skipped(&self) {
        let bad = self
            .bad_summaries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if !bad.is_empty() {
            eprintln!(
                "note: {} window summary file(s) in {} could not be used; those windows were decoded instead (the answer is complete)",
                bad.len(),
                self.dir.display()
            );
            for e in bad.iter().take(3) {
                eprintln!("  {e}");
            }
        }
        let all = self
            .skipped
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if all.is_empty() {
            return;
        }
        eprintln!(
            "warning: skipped {} unreadable file(s) in {} (corrupt, truncated or unreadable); the answer leaves them out",
            all.len(),
            self.dir.display()
        );
        for s in all.iter().take(5) {
            eprintln!("  {}", s.error);
        }
        if all.len() > 5 {
            eprintln!("  … and {} more", all.len() - 5);
        }
    }
}
