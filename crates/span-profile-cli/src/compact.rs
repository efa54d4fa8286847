//! `span-profile compact`: the retention policy. Windows older than `--full` are rolled up
//! into one window per hour, older than `--hourly` into one per day, and what is older than
//! `--daily` is deleted. Aggregate answers stay the same; roll-ups drop trace and span ids.
//!
//! A roll-up replaces its sources without a moment where both or neither count:
//! 1. the merged windows are written with `FileStore::write` into a staging store under
//!    `DIR/.compact/` (readers ignore names starting with `.`), then read back and checked;
//! 2. a journal naming each staged file, its final path and the sources is written and synced;
//! 3. the staged files are renamed into the store, then the sources are deleted, then the
//!    journal. A run that finds a journal first finishes that work; staged files without a
//!    journal are discarded (their sources were never touched).
//!
//! Window summaries (`<window>.summary`, ADR 0006) go with their windows: `FileStore::write`
//! stages a roll-up's summary beside it, a staged summary is moved just before its window, and
//! a source's summary is deleted just before the source. The journal names windows only.
//! Before it starts, compaction removes the `.tmp-*` files and window-less summaries that
//! killed writers left (older than `STALE_AFTER`).

use std::collections::BTreeMap;
use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use anyhow::{bail, Context as _};
use serde::{Deserialize, Serialize};
use span_profile_core::{Profile, Resource, WindowMerger};
use span_profile_export::store::query::Filter;
use span_profile_export::store::{format_rfc3339, Store, StoredFile};
use span_profile_export::{summary_path, FileStore, STALE_AFTER};

use crate::args::{parse_duration, parse_time};
use crate::Usage;

const NS_PER_MS: u64 = 1_000_000;
const HOUR_MS: u64 = 3_600_000;
const DAY_MS: u64 = 24 * HOUR_MS;
const WORK_DIR: &str = ".compact";

/// Arguments of `compact`.
#[derive(Debug, clap::Args)]
pub(crate) struct CompactArgs {
    /// Keep windows at full resolution for this long (e.g. 14d).
    #[arg(long, value_parser = parse_duration, default_value = "14d", value_name = "DURATION")]
    pub(crate) full: u64,
    /// Then keep hourly roll-ups until this age (e.g. 90d).
    #[arg(long, value_parser = parse_duration, default_value = "90d", value_name = "DURATION")]
    pub(crate) hourly: u64,
    /// Then keep daily roll-ups until this age (e.g. 400d); older data is deleted.
    #[arg(long, value_parser = parse_duration, default_value = "400d", value_name = "DURATION")]
    pub(crate) daily: u64,
    /// Measure ages from this time instead of now: RFC 3339 or relative (-2h, +30d).
    #[arg(long, value_parser = parse_time, value_name = "TIME")]
    pub(crate) now: Option<u64>,
    /// Print what would be done, change nothing.
    #[arg(long)]
    pub(crate) dry_run: bool,
}

/// What happens to a stored file, by the UTC hour or day its window starts in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Tier {
    Hourly(u64),
    Daily(u64),
    Delete,
}

impl Tier {
    fn bucket_ms(self) -> (u64, u64) {
        match self {
            Tier::Hourly(h) => (h, HOUR_MS),
            Tier::Daily(d) => (d, DAY_MS),
            Tier::Delete => (0, 0),
        }
    }

    /// The tier's name in the dry run's report.
    fn name(self) -> &'static str {
        match self {
            Tier::Hourly(_) => "hourly",
            Tier::Daily(_) => "daily",
            Tier::Delete => "delete",
        }
    }
}

/// The tier of a window starting at `start_ms`, or `None` to keep it as it is. A bucket moves
/// to the next tier only once all of it is past the horizon.
fn tier(start_ms: u64, now_ms: u64, a: &CompactArgs) -> Option<Tier> {
    let day = start_ms - start_ms % DAY_MS;
    let hour = start_ms - start_ms % HOUR_MS;
    let past =
        |horizon_ns: u64, end_ms: u64| end_ms <= now_ms.saturating_sub(horizon_ns / NS_PER_MS);
    if past(a.daily, day + DAY_MS) {
        Some(Tier::Delete)
    } else if past(a.hourly, day + DAY_MS) {
        Some(Tier::Daily(day))
    } else if past(a.full, hour + HOUR_MS) {
        Some(Tier::Hourly(hour))
    } else {
        None
    }
}

/// Staged roll-ups, their final paths, and the sources they replace.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Journal {
    moves: Vec<(PathBuf, PathBuf)>,
    sources: Vec<PathBuf>,
}

#[derive(Debug, Default)]
struct Totals {
    rolled: usize,
    hourly: usize,
    daily: usize,
    deleted: usize,
    unreadable: usize,
}

pub(crate) fn run(store: &Store, args: &CompactArgs, json: bool) -> anyhow::Result<()> {
    if !(args.full < args.hourly && args.hourly < args.daily) {
        return Err(Usage(
            "the horizons must grow: --full < --hourly < --daily (e.g. --full 14d --hourly 90d --daily 400d)"
                .into(),
        )
        .into());
    }
    let started = Instant::now();
    let work = store.dir().join(WORK_DIR);
    let mut stale = 0;
    if !args.dry_run {
        recover(&work)?;
        let removed = FileStore::new(store.dir()).remove_stale_files(STALE_AFTER);
        stale = removed.temp_files + removed.orphan_summaries;
    }
    let before = store.list(&Filter::default())?;
    let bytes_before = stored_bytes(&before);
    let now_ms = args
        .now
        .unwrap_or_else(span_profile_core::internal::now_unix_ns)
        / NS_PER_MS;
    let mut groups: BTreeMap<(String, Tier), Vec<StoredFile>> = BTreeMap::new();
    for f in &before {
        if let Some(t) = tier(f.start_unix_ms, now_ms, args) {
            groups
                .entry((f.service.clone(), t))
                .or_default()
                .push(f.clone());
        }
    }
    let mut totals = Totals::default();
    let (deletes, rollups): (Vec<_>, Vec<_>) = groups
        .into_iter()
        .partition(|((_, t), _)| *t == Tier::Delete);
    if args.dry_run {
        let n: usize = deletes.iter().map(|(_, f)| f.len()).sum();
        if json {
            let planned: Vec<_> = rollups
                .iter()
                .map(|((service, t), files)| {
                    serde_json::json!({
                        "service": service,
                        "tier": t.name(),
                        "bucket_start": format_rfc3339(t.bucket_ms().0 * NS_PER_MS),
                        "files": files.len(),
                    })
                })
                .collect();
            let out =
                serde_json::json!({ "dry_run": true, "roll_ups": planned, "would_delete": n });
            crate::json_out(store, &out)?;
            return Ok(());
        }
        for ((service, t), files) in &rollups {
            let (b, _) = t.bucket_ms();
            outln!(
                "{service}: {} file(s) -> {} roll-up at {}",
                files.len(),
                t.name(),
                format_rfc3339(b * NS_PER_MS)
            );
        }
        outln!("{n} file(s) past the --daily horizon would be deleted");
        return Ok(());
    }
    for (_, files) in &deletes {
        for f in files {
            remove_window(&f.path)?;
            totals.deleted += 1;
        }
    }
    let totals = Mutex::new(totals);
    let errors = Mutex::new(Vec::new());
    let next = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..store.threads().min(rollups.len()).max(1) {
            s.spawn(|| loop {
                // Relaxed: the counter only hands out distinct group indices.
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(((_, t), files)) = rollups.get(i) else {
                    break;
                };
                let r = roll_up(store, &work, i, *t, files);
                let mut tot = totals
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                match r {
                    Ok(o) => {
                        tot.rolled += o.sources;
                        tot.unreadable += o.unreadable;
                        match t {
                            Tier::Hourly(_) => tot.hourly += o.written,
                            _ => tot.daily += o.written,
                        }
                    }
                    Err(e) => errors
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .push(e),
                }
            });
        }
    });
    remove_empty_dirs(store.dir());
    let _ = fs::remove_dir(&work);
    let totals = totals
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let after = store.list(&Filter::default())?;
    let bytes_after = stored_bytes(&after);
    let secs = started.elapsed().as_secs_f64();
    if json {
        let out = serde_json::json!({
            "files_before": before.len(), "bytes_before": bytes_before,
            "files_after": after.len(), "bytes_after": bytes_after,
            "rolled_up": totals.rolled, "hourly_written": totals.hourly,
            "daily_written": totals.daily, "deleted": totals.deleted,
            "unreadable_left": totals.unreadable, "stale_files_removed": stale,
            "seconds": secs,
        });
        crate::json_out(store, &out)?;
    } else {
        outln!(
            "compacted {} in {secs:.1} s: {} file(s), {} -> {} file(s), {}; {} window(s) rolled into {} hourly and {} daily; {} file(s) past the last horizon deleted",
            store.dir().display(), before.len(), mib(bytes_before), after.len(), mib(bytes_after),
            totals.rolled, totals.hourly, totals.daily, totals.deleted
        );
        if stale > 0 {
            outln!("removed {stale} file(s) left by killed writers (.tmp-* files and summaries without a window)");
        }
    }
    let errors = errors
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(e) = errors.into_iter().next() {
        return Err(e.context("a roll-up failed; its sources were kept"));
    }
    Ok(())
}

/// Bytes of the windows and their summaries.
fn stored_bytes(files: &[StoredFile]) -> u64 {
    files
        .iter()
        .map(|f| f.len + fs::metadata(summary_path(&f.path)).map_or(0, |m| m.len()))
        .sum()
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

#[derive(Debug)]
struct RollUp {
    sources: usize,
    written: usize,
    unreadable: usize,
}

/// Merges one service's files of one bucket into one roll-up per resource.
fn roll_up(
    store: &Store,
    work: &Path,
    i: usize,
    t: Tier,
    files: &[StoredFile],
) -> anyhow::Result<RollUp> {
    let (bucket_ms, len_ms) = t.bucket_ms();
    let (bucket, len) = (bucket_ms * NS_PER_MS, len_ms * NS_PER_MS);
    let mut mergers: Vec<(Resource, u64, WindowMerger)> = Vec::new();
    let mut sources = Vec::new();
    let mut unreadable = 0;
    for f in files {
        // An unreadable file (zero bytes, cut short, not pprof, a gzip bomb) is left in place
        // and never rolled up: the store keeps it to report, and deleting it would lose
        // evidence.
        let Some(p) = store.read_window(f) else {
            unreadable += 1;
            continue;
        };
        if files.len() == 1
            && p.start_unix_ns == bucket
            && p.duration_ns >= len
            && p.spans.is_empty()
        {
            return Ok(RollUp {
                sources: 0,
                written: 0,
                unreadable,
            });
        }
        let at = match mergers
            .iter()
            .position(|(r, period, _)| *r == p.resource && *period == p.period_ns)
        {
            Some(at) => at,
            None => {
                mergers.push((p.resource.clone(), p.period_ns, WindowMerger::new(false)));
                mergers.len() - 1
            }
        };
        mergers[at].2.add(&p)?;
        sources.push(f.path.clone());
    }
    if sources.is_empty() {
        return Ok(RollUp {
            sources: 0,
            written: 0,
            unreadable,
        });
    }
    let stage_root = work.join(format!("stage-{}-{i}", std::process::id()));
    let stage = FileStore::new(&stage_root);
    let mut journal = Journal {
        moves: Vec::new(),
        sources,
    };
    for (_, _, m) in mergers {
        let Some(mut merged) = m.finish() else {
            continue;
        };
        let end = merged.start_unix_ns + merged.duration_ns;
        merged.start_unix_ns = bucket;
        merged.duration_ns = len.max(end.saturating_sub(bucket));
        let staged = stage.write(&merged).map_err(|e| anyhow::anyhow!("{e}"))?;
        check_written(&staged, &merged)?;
        let rel = staged
            .strip_prefix(&stage_root)
            .context("staged file outside the staging store")?;
        let chosen: Vec<&Path> = journal.moves.iter().map(|(_, f)| f.as_path()).collect();
        let target = free_path(&store.dir().join(rel), &chosen)?;
        journal.moves.push((staged, target));
    }
    let written = journal.moves.len();
    let sources = journal.sources.len();
    let journal_path = work.join(format!("{}-{i}.journal", std::process::id()));
    write_journal(&journal_path, &journal)?;
    finish(&journal)?;
    fs::remove_file(&journal_path)
        .with_context(|| format!("cannot remove {}", journal_path.display()))?;
    let _ = fs::remove_dir_all(&stage_root);
    Ok(RollUp {
        sources,
        written,
        unreadable,
    })
}

/// Reads a written roll-up back and checks that it holds the merged samples.
fn check_written(path: &Path, merged: &Profile) -> anyhow::Result<()> {
    let back = span_profile_export::decode_pprof(&fs::read(path)?)
        .with_context(|| format!("the roll-up {} does not read back", path.display()))?;
    if back.total_wall_samples() != merged.total_wall_samples()
        || back.total_cpu_samples() != merged.total_cpu_samples()
    {
        bail!(
            "the roll-up {} reads back with different sample counts",
            path.display()
        );
    }
    Ok(())
}

/// `want`, or the same name with the next free sequence number (`<start>-<instance>-<seq>`).
fn free_path(want: &Path, taken: &[&Path]) -> anyhow::Result<PathBuf> {
    let name = want
        .file_name()
        .and_then(|n| n.to_str())
        .context("roll-up without a file name")?;
    let stem = name
        .strip_suffix(span_profile_export::FILE_SUFFIX)
        .context("roll-up name")?;
    let (head, seq) = stem
        .rsplit_once('-')
        .context("roll-up name without a sequence number")?;
    let mut seq: u64 = seq.parse().context("roll-up sequence number")?;
    let mut p = want.to_path_buf();
    while p.exists() || taken.contains(&p.as_path()) {
        seq += 1;
        p = want.with_file_name(format!("{head}-{seq}{}", span_profile_export::FILE_SUFFIX));
    }
    Ok(p)
}

fn write_journal(path: &Path, j: &Journal) -> anyhow::Result<()> {
    let tmp = path.with_extension("tmp");
    let mut f =
        fs::File::create(&tmp).with_context(|| format!("cannot write {}", tmp.display()))?;
    f.write_all(&serde_json::to_vec(j)?)?;
    f.sync_all()?;
    fs::rename(&tmp, path)?;
    sync_dir(path.parent());
    Ok(())
}

/// Moves the staged roll-ups into place (each summary just before its window), then deletes
/// the sources. Safe to repeat.
fn finish(j: &Journal) -> anyhow::Result<()> {
    for (staged, target) in &j.moves {
        if staged.exists() && !target.exists() {
            if let Some(parent) = target.parent() {
                fs::create_dir_all(parent)?;
            }
            let (staged_summary, target_summary) = (summary_path(staged), summary_path(target));
            if staged_summary.exists() {
                // Replaces a summary a killed writer may have left without its window.
                fs::rename(&staged_summary, &target_summary).with_context(|| {
                    format!(
                        "cannot move {} to {}",
                        staged_summary.display(),
                        target_summary.display()
                    )
                })?;
            }
            fs::rename(staged, target).with_context(|| {
                format!("cannot move {} to {}", staged.display(), target.display())
            })?;
            sync_dir(target.parent());
        }
    }
    for s in &j.sources {
        remove_window(s)?;
    }
    Ok(())
}

/// Deletes a window and its summary (the summary first, so that no summary outlives its
/// window); either may already be gone.
fn remove_window(path: &Path) -> anyhow::Result<()> {
    for p in [summary_path(path), path.to_path_buf()] {
        match fs::remove_file(&p) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).with_context(|| format!("cannot delete {}", p.display())),
        }
    }
    Ok(())
}

/// Finishes the roll-ups an interrupted run journaled, and discards unjournaled staging.
fn recover(work: &Path) -> anyhow::Result<()> {
    let Ok(entries) = fs::read_dir(work) else {
        return Ok(());
    };
    let mut stages = Vec::new();
    for e in entries.flatten() {
        let p = e.path();
        if p.extension().is_some_and(|x| x == "journal") {
            let j: Journal = serde_json::from_slice(&fs::read(&p)?)
                .with_context(|| format!("cannot read the journal {}", p.display()))?;
            finish(&j)?;
            fs::remove_file(&p)?;
        } else {
            stages.push(p);
        }
    }
    for p in stages {
        // Staged roll-ups without a journal: their sources were never touched.
        let _ = if p.is_dir() {
            fs::remove_dir_all(&p)
        } else {
            fs::remove_file(&p)
        };
    }
    Ok(())
}

fn sync_dir(dir: Option<&Path>) {
    // Not every platform can sync a directory; the files themselves are already synced.
    if let Some(d) = dir.and_then(|d| fs::File::open(d).ok()) {
        let _ = d.sync_all();
    }
}

/// Removes day and service directories that compaction emptied.
fn remove_empty_dirs(dir: &Path) {
    let Ok(services) = fs::read_dir(dir) else {
        return;
    };
    for s in services.flatten().map(|e| e.path()).filter(|p| p.is_dir()) {
        if s.file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with('.'))
        {
            continue;
        }
        if let Ok(days) = fs::read_dir(&s) {
            for d in days.flatten() {
                // remove_dir fails on a directory that is not empty, which is what we want.
                let _ = fs::remove_dir(d.path());
            }
        }
        let _ = fs::remove_dir(&s);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args() -> CompactArgs {
        let d = 86_400_000_000_000;
        CompactArgs {
            full: 14 * d,
            hourly: 90 * d,
            daily: 400 * d,
            now: None,
            dry_run: false,
        }
    }

    #[test]
    fn tiers_follow_the_horizons() {
        let now = 1_000 * DAY_MS + 5 * HOUR_MS;
        let a = args();
        assert_eq!(tier(now - HOUR_MS, now, &a), None);
        assert_eq!(
            tier(now - 14 * DAY_MS, now, &a),
            None,
            "its hour is not all past"
        );
        let h = now - 15 * DAY_MS + 1234;
        assert_eq!(tier(h, now, &a), Some(Tier::Hourly(h - 1234)));
        let d = now - 91 * DAY_MS;
        assert_eq!(tier(d, now, &a), Some(Tier::Daily(d - d % DAY_MS)));
        assert_eq!(tier(now - 402 * DAY_MS, now, &a), Some(Tier::Delete));
    }

    #[test]
    fn an_interrupted_roll_up_is_finished() {
        let dir = std::env::temp_dir().join(format!("span-profile-recover-{}", std::process::id()));
        let work = dir.join(WORK_DIR);
        fs::create_dir_all(work.join("stage-1")).unwrap();
        let staged = work.join("stage-1/r.pb.gz");
        fs::write(&staged, b"merged").unwrap();
        fs::write(summary_path(&staged), b"merged summary").unwrap();
        let source = dir.join("s.pb.gz");
        fs::write(&source, b"source").unwrap();
        fs::write(summary_path(&source), b"source summary").unwrap();
        let target = dir.join("svc/day/r.pb.gz");
        let j = Journal {
            moves: vec![(staged.clone(), target.clone())],
            sources: vec![source.clone()],
        };
        write_journal(&work.join("1-0.journal"), &j).unwrap();
        // An orphan staging directory (no journal) is discarded.
        fs::create_dir_all(work.join("stage-2")).unwrap();
        recover(&work).unwrap();
        assert_eq!(fs::read(&target).unwrap(), b"merged");
        assert_eq!(fs::read(summary_path(&target)).unwrap(), b"merged summary");
        assert!(!source.exists() && !staged.exists());
        assert!(!summary_path(&source).exists());
        assert_eq!(fs::read_dir(&work).unwrap().count(), 0);
        fs::remove_dir_all(&dir).unwrap();
    }
}
