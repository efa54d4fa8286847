//! Per-thread CPU time: where it is read from, and how much of it each sample stands for.
//!
//! A sample's CPU weight is the CPU time its thread consumed since that thread's previous
//! sample (ADR 0019). The walker reads each thread's CPU clock once per walk; [`CpuTracker`]
//! keeps the reading of each thread's last sample and returns the difference.

use std::fmt::Write as _;

use super::namebuf::NameBuf;

/// Where per-thread CPU time comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CpuTimeSource {
    /// The thread's CPU clock (`clock_gettime` on the per-thread clock id); only works for
    /// threads of the calling process (the in-process profiler).
    ThreadClock,
    /// `/proc/<pid>/task/<tid>/schedstat` (another process: tests, out-of-process use).
    ProcFs {
        /// The target process.
        pid: u32,
    },
    /// Never measure; every sample has `cpu_ns = 0`.
    Disabled,
}

/// CPU time of `tid` in nanoseconds, or `None` if the thread is gone or the source refuses.
pub(crate) fn cpu_time_ns(source: CpuTimeSource, tid: u32) -> Option<u64> {
    match source {
        CpuTimeSource::Disabled => None,
        CpuTimeSource::ThreadClock => {
            let tid = i32::try_from(tid).ok()?;
            // Linux per-thread CPU clock id (include/linux/posix-timers.h):
            // MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED) = (~tid << 3) | PERTHREAD(4) | SCHED(2).
            // The kernel accepts it only for threads of the calling process.
            let clock: libc::clockid_t = ((!tid) << 3) | 6;
            let mut ts = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            // SAFETY: (1) `ts` is a valid, exclusively borrowed timespec. (2) An invalid clock
            // id (the thread exited) is reported as EINVAL, not undefined behaviour.
            let rc = unsafe { libc::clock_gettime(clock, &mut ts) };
            if rc != 0 {
                return None;
            }
            Some((ts.tv_sec as u64).saturating_mul(1_000_000_000) + ts.tv_nsec as u64)
        }
        CpuTimeSource::ProcFs { pid } => proc_schedstat_ns(pid, tid),
    }
}

/// Reads the first field of `/proc/<pid>/task/<tid>/schedstat` (ns on CPU) without allocating.
fn proc_schedstat_ns(pid: u32, tid: u32) -> Option<u64> {
    let mut path = NameBuf::new();
    write!(path, "/proc/{pid}/task/{tid}/schedstat\0").ok()?;
    let path = path.as_str();
    if !path.ends_with('\0') {
        return None;
    }
    // SAFETY: (1) `path` is NUL-terminated (checked above) and lives across the call.
    let fd = unsafe { libc::open(path.as_ptr().cast(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return None;
    }
    let mut buf = [0u8; 64];
    // SAFETY: (1) `buf` is valid for writes of its length. (2) `fd` is the descriptor we just
    // opened.
    let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
    // SAFETY: (1) `fd` is ours and closed exactly once.
    unsafe { libc::close(fd) };
    let n = usize::try_from(n).ok()?;
    let text = buf.get(..n)?;
    let digits = text.iter().take_while(|b| b.is_ascii_digit());
    let mut v: u64 = 0;
    let mut any = false;
    for d in digits {
        v = v.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
        any = true;
    }
    any.then_some(v)
}

/// The CPU clock reading of one thread's last sample.
#[derive(Debug, Clone, Copy)]
struct Baseline {
    thread_id: u64,
    /// The OS tid the reading was taken under: a new thread reusing the `thread_id` has a new
    /// tid, so it starts from a fresh baseline instead of inheriting a stale one.
    tid: u32,
    cpu_ns: u64,
    /// Monotonic time of the reading.
    at_ns: u64,
}

/// Remembers each thread's CPU clock at its last sample, and turns each new reading into the
/// CPU time consumed since then.
///
/// The baselines persist across ticks, so a thread that a tick skipped (the thread cap, a
/// failed read) is charged on its next sample with everything it used in between: the weights
/// stay unbiased whatever the rate or the subset walked. The table has a fixed capacity,
/// allocated once; when it is full, a new thread takes the slot of the one sampled longest ago.
#[derive(Debug)]
pub(crate) struct CpuTracker {
    /// Sorted by `thread_id`.
    table: Vec<Baseline>,
    cap: usize,
    /// Monotonic time of the walker's previous tick (0 before the first).
    prev_tick_ns: u64,
    /// Monotonic time of the current tick.
    now_ns: u64,
}

impl CpuTracker {
    /// A tracker for at most `cap` threads.
    pub(crate) fn new(cap: usize) -> Self {
        let cap = cap.max(1);
        Self {
            table: Vec::with_capacity(cap),
            cap,
            prev_tick_ns: 0,
            now_ns: 0,
        }
    }

    /// Starts a tick at monotonic time `now_ns`.
    pub(crate) fn begin_tick(&mut self, now_ns: u64) {
        self.prev_tick_ns = self.now_ns;
        self.now_ns = now_ns;
    }

    /// Wall time between the previous tick and this one (0 on the first).
    pub(crate) fn since_previous_tick(&self) -> u64 {
        if self.prev_tick_ns == 0 {
            0
        } else {
            self.now_ns.saturating_sub(self.prev_tick_ns)
        }
    }

    /// Records the reading `cpu_ns` of thread `thread_id` (OS tid `tid`) and returns the CPU
    /// time it consumed since its previous reading.
    ///
    /// - A thread with a baseline is charged the difference, at most the wall time since that
    ///   baseline (a clock cannot run faster than time).
    /// - A thread seen for the first time on a later tick is new since the previous tick: it
    ///   is charged its whole clock, at most the wall time since the previous tick.
    /// - On the first tick every thread is charged 0: what they used before the profiler
    ///   started is not the profile's.
    pub(crate) fn observe(&mut self, thread_id: u64, tid: u32, cpu_ns: u64) -> u64 {
        let now = self.now_ns;
        let found = self.table.binary_search_by_key(&thread_id, |b| b.thread_id);
        let fresh = Baseline {
            thread_id,
            tid,
            cpu_ns,
            at_ns: now,
        };
        match found {
            Ok(i) => {
                let b = self.table[i];
                let delta = if b.tid == tid {
                    cpu_ns
                        .saturating_sub(b.cpu_ns)
                        .min(now.saturating_sub(b.at_ns))
                } else {
                    self.new_thread(cpu_ns)
                };
                self.table[i] = fresh;
                delta
            }
            Err(_) => {
                let delta = self.new_thread(cpu_ns);
                if self.table.len() >= self.cap {
                    // Full: the thread sampled longest ago gives up its slot.
                    if let Some(oldest) = (0..self.table.len()).min_by_key(|&j| self.table[j].at_ns)
                    {
                        self.table.remove(oldest);
                    }
                }
                // The removal may have moved the insertion point: search again.
                let at = match self.table.binary_search_by_key(&thread_id, |b| b.thread_id) {
                    Ok(j) | Err(j) => j,
                };
                self.table.insert(at, fresh);
                delta
            }
        }
    }

    /// What a thread without a baseline is charged.
    fn new_thread(&self, cpu_ns: u64) -> u64 {
        if self.prev_tick_ns == 0 {
            0
        } else {
            cpu_ns.min(self.now_ns.saturating_sub(self.prev_tick_ns))
        }
    }
}

/// Monotonic time in nanoseconds (`CLOCK_MONOTONIC`, a vDSO read).
pub(crate) fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: (1) `ts` is a valid, exclusively borrowed timespec; CLOCK_MONOTONIC always
    // exists on Linux.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    if rc != 0 {
        return 0;
    }
    (ts.tv_sec as u64).saturating_mul(1_000_000_000) + ts.tv_nsec as u64
}

#[cfg(test)]
mod tests {
    use super::CpuTracker;

    const MS: u64 = 1_000_000;

    #[test]
    fn the_first_tick_charges_nothing() {
        let mut t = CpuTracker::new(8);
        t.begin_tick(1_000 * MS);
        // However much CPU a thread used before the profiler started, none of it is the
        // first sample's.
        assert_eq!(t.observe(1, 100, 5_000 * MS), 0);
    }

    #[test]
    fn a_sample_is_charged_what_its_thread_used_since_its_previous_sample() {
        let mut t = CpuTracker::new(8);
        t.begin_tick(1_000 * MS);
        t.observe(1, 100, 50 * MS);
        t.observe(2, 200, 50 * MS);
        t.begin_tick(1_010 * MS);
        assert_eq!(t.observe(1, 100, 52 * MS), 2 * MS, "a thread at 20%");
        assert_eq!(t.observe(2, 200, 50 * MS), 0, "a thread that only waited");
    }

    #[test]
    fn a_thread_left_out_of_ticks_is_charged_the_whole_gap_on_its_next_sample() {
        let mut t = CpuTracker::new(8);
        t.begin_tick(1_000 * MS);
        t.observe(1, 100, 0);
        // Three ticks skip thread 1 (the thread cap, a failed read).
        for k in 1..=3 {
            t.begin_tick((1_000 + 10 * k) * MS);
            t.observe(2, 200, 0);
        }
        t.begin_tick(1_040 * MS);
        assert_eq!(t.observe(1, 100, 40 * MS), 40 * MS);
    }

    #[test]
    fn no_sample_is_charged_more_than_the_wall_time_since_its_baseline() {
        let mut t = CpuTracker::new(8);
        t.begin_tick(1_000 * MS);
        t.observe(1, 100, 0);
        t.begin_tick(1_010 * MS);
        assert_eq!(t.observe(1, 100, 900 * MS), 10 * MS);
    }

    #[test]
    fn a_new_thread_is_charged_its_clock_up_to_the_time_since_the_previous_tick() {
        let mut t = CpuTracker::new(8);
        t.begin_tick(1_000 * MS);
        t.observe(1, 100, 0);
        t.begin_tick(1_010 * MS);
        assert_eq!(
            t.observe(2, 200, 3 * MS),
            3 * MS,
            "started since the last tick"
        );
        t.begin_tick(1_020 * MS);
        assert_eq!(
            t.observe(3, 300, 700 * MS),
            10 * MS,
            "capped at one interval"
        );
    }

    #[test]
    fn a_reused_thread_id_with_a_new_tid_starts_from_a_fresh_baseline() {
        let mut t = CpuTracker::new(8);
        t.begin_tick(1_000 * MS);
        t.observe(1, 100, 500 * MS);
        t.begin_tick(1_010 * MS);
        // Thread 1 ended and a new OS thread got its id: its clock starts near 0, so the old
        // baseline would charge nothing (or, the other way round, a huge difference).
        assert_eq!(t.observe(1, 101, 4 * MS), 4 * MS);
        t.begin_tick(1_020 * MS);
        assert_eq!(t.observe(1, 101, 6 * MS), 2 * MS);
    }

    #[test]
    fn a_full_table_gives_the_slot_of_the_thread_sampled_longest_ago() {
        let mut t = CpuTracker::new(2);
        t.begin_tick(1_000 * MS);
        t.observe(1, 100, 0);
        t.begin_tick(1_010 * MS);
        t.observe(2, 200, 0);
        t.begin_tick(1_020 * MS);
        t.observe(3, 300, 0); // evicts thread 1
        t.begin_tick(1_030 * MS);
        assert_eq!(t.observe(2, 200, 5 * MS), 5 * MS);
        assert_eq!(t.observe(3, 300, 5 * MS), 5 * MS);
        // Thread 1 lost its baseline: it is charged as a new thread, at most one interval.
        assert_eq!(t.observe(1, 100, 500 * MS), 10 * MS);
    }
}
