//! Holding the agent's CPU budget: the sampling interval stretches when the sampler's own CPU
//! use is over budget and shrinks back to the configured rate when there is room.

use std::fs::File;
use std::time::{Duration, Instant};

/// How often the controller looks at the CPU clock.
const CHECK_EVERY: Duration = Duration::from_millis(250);
/// The interval never stretches beyond this many times the configured one.
const MAX_SLOWDOWN: u32 = 50;

/// Adjusts the sampling interval so that the sampler's CPU stays within `budget` (a fraction of
/// one core, 0.01 = 1%).
///
/// ```
/// use std::time::{Duration, Instant};
/// use span_profile_core::internal::BudgetController;
///
/// let t0 = Instant::now();
/// let mut b = BudgetController::new(0.01, Duration::from_millis(10), t0);
/// // 250 ms of wall time in which the sampler used 10 ms of CPU: 4%, four times the budget.
/// let slower = b.observe(t0 + Duration::from_millis(250), 10_000_000).unwrap();
/// assert!(slower > Duration::from_millis(10));
/// ```
#[derive(Debug, Clone)]
pub struct BudgetController {
    budget: f64,
    nominal: Duration,
    current: Duration,
    last_check: Instant,
    last_cpu_ns: u64,
    /// CPU share measured over the last check period.
    last_usage: f64,
    /// The share of the budget taken by costs the interval does not scale
    /// ([`BudgetController::reserve`]).
    reserved: f64,
}

/// At most this fraction of the budget is reserved, so that sampling always keeps a share.
const MAX_RESERVED: f64 = 0.8;

impl BudgetController {
    /// A controller for `budget` (fraction of one core) around the `nominal` interval.
    pub fn new(budget: f64, nominal: Duration, now: Instant) -> Self {
        Self {
            budget,
            nominal,
            current: nominal,
            last_check: now,
            last_cpu_ns: 0,
            last_usage: 0.0,
            reserved: 0.0,
        }
    }

    /// Takes `share` (a fraction of one core) off what the ticks may use, so that the agent as
    /// a whole holds the budget: the runtime reserves the export thread's CPU rate and its own
    /// cost of closing windows, which the interval does not scale, and passes `observe` the
    /// CPU of the ticks alone. At most 80% of the budget is reserved.
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// use span_profile_core::internal::BudgetController;
    ///
    /// let t0 = Instant::now();
    /// let mut b = BudgetController::new(0.01, Duration::from_millis(10), t0);
    /// // The sampler alone used 0.8%: within 1%, unless the exporter used 0.5% more.
    /// assert!(b.clone().observe(t0 + Duration::from_millis(250), 2_000_000).is_none());
    /// b.reserve(0.005);
    /// assert!(b.observe(t0 + Duration::from_millis(250), 2_000_000).is_some());
    /// ```
    pub fn reserve(&mut self, share: f64) {
        self.reserved = share.clamp(0.0, self.budget * MAX_RESERVED);
    }

    /// The interval to sample at now.
    pub fn interval(&self) -> Duration {
        self.current
    }

    /// The CPU share measured over the last check period.
    pub fn usage(&self) -> f64 {
        self.last_usage
    }

    /// Whether it is time to read the CPU clock and call [`BudgetController::observe`].
    pub fn due(&self, now: Instant) -> bool {
        now.saturating_duration_since(self.last_check) >= CHECK_EVERY
    }

    /// Feeds the sampler thread's cumulative CPU time. Returns the new interval when it changed.
    pub fn observe(&mut self, now: Instant, cpu_ns: u64) -> Option<Duration> {
        if !self.due(now) {
            return None;
        }
        let wall = now.saturating_duration_since(self.last_check);
        let used = cpu_ns.saturating_sub(self.last_cpu_ns);
        self.last_check = now;
        self.last_cpu_ns = cpu_ns;
        let usage = used as f64 / wall.as_nanos().max(1) as f64;
        self.last_usage = usage;
        let ratio = usage / (self.budget - self.reserved);
        let next = if ratio > 1.05 {
            // Over budget: CPU per tick is roughly constant, so stretching the interval by the
            // overshoot lands near the budget; cap each step so one noisy period cannot swing it.
            self.current.mul_f64(ratio.min(2.0))
        } else if ratio < 0.7 && self.current > self.nominal {
            // Room to spare: come back gradually.
            self.current.mul_f64((ratio / 0.85).max(0.5))
        } else {
            return None;
        };
        let next = next.clamp(self.nominal, self.nominal * MAX_SLOWDOWN);
        (next != self.current).then(|| {
            self.current = next;
            next
        })
    }
}

/// The calling thread's CPU clock, read without allocating: `/proc/thread-self/schedstat`
/// kept open and re-read in place. Must be created on the thread it measures.
#[derive(Debug)]
pub(crate) struct ThreadCpuClock {
    file: Option<File>,
}

impl ThreadCpuClock {
    pub(crate) fn for_current_thread() -> Self {
        Self {
            file: File::open("/proc/thread-self/schedstat").ok(),
        }
    }

    /// Cumulative CPU nanoseconds of the thread; 0 where unavailable.
    pub(crate) fn now_ns(&self) -> u64 {
        #[cfg(unix)]
        {
            use std::os::unix::fs::FileExt;
            let Some(f) = &self.file else { return 0 };
            let mut buf = [0u8; 64];
            let Ok(n) = f.read_at(&mut buf, 0) else {
                return 0;
            };
            buf[..n]
                .iter()
                .take_while(|b| b.is_ascii_digit())
                .fold(0u64, |acc, &b| {
                    acc.saturating_mul(10).saturating_add(u64::from(b - b'0'))
                })
        }
        #[cfg(not(unix))]
        {
            let _ = &self.file;
            0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    /// Simulates a sampler whose ticks cost `tick_cost` of CPU each.
    fn settle(budget: f64, tick_cost: Duration) -> (Duration, f64) {
        let t0 = Instant::now();
        let mut b = BudgetController::new(budget, 10 * MS, t0);
        let (mut now, mut cpu) = (t0, 0u64);
        for _ in 0..4_000 {
            now += b.interval();
            cpu += tick_cost.as_nanos() as u64;
            b.observe(now, cpu);
        }
        (b.interval(), b.usage())
    }

    #[test]
    fn an_expensive_sampler_is_slowed_to_within_its_budget() {
        // 256 threads at 200 µs per tick would be 2% of a core at 100 Hz.
        let (interval, usage) = settle(0.005, Duration::from_micros(200));
        assert!(interval > 30 * MS, "{interval:?}");
        assert!(
            (usage - 0.005).abs() / 0.005 < 0.2,
            "usage {usage} should be 0.5% ± 20%"
        );
    }

    #[test]
    fn the_export_threads_share_is_taken_off_the_samplers_budget() {
        let t0 = Instant::now();
        let mut b = BudgetController::new(0.005, 10 * MS, t0);
        b.reserve(0.002); // the exporter used 0.2% of a core over the last window
        let (mut now, mut cpu) = (t0, 0u64);
        for _ in 0..4_000 {
            now += b.interval();
            cpu += 200_000; // 200 µs per tick
            b.observe(now, cpu);
        }
        let usage = b.usage();
        assert!(
            (usage - 0.003).abs() / 0.003 < 0.2,
            "sampler usage {usage} should be 0.3% ± 20%, leaving 0.2% to the exporter"
        );
        b.reserve(1.0);
        assert!(
            b.reserved <= 0.005 * MAX_RESERVED,
            "sampling always keeps a share"
        );
    }

    #[test]
    fn a_cheap_sampler_keeps_the_configured_rate() {
        let (interval, _) = settle(0.01, Duration::from_micros(20));
        assert_eq!(interval, 10 * MS);
    }

    #[test]
    fn the_rate_comes_back_when_the_load_goes() {
        let t0 = Instant::now();
        let mut b = BudgetController::new(0.01, 10 * MS, t0);
        assert!(b.observe(t0 + 250 * MS, 20_000_000).is_some());
        let slowed = b.interval();
        let mut now = t0 + 250 * MS;
        let mut cpu = 20_000_000;
        for _ in 0..100 {
            now += 250 * MS;
            cpu += 100_000; // 0.04%
            b.observe(now, cpu);
        }
        assert!(slowed > 10 * MS);
        assert_eq!(b.interval(), 10 * MS);
    }

    #[test]
    fn the_thread_clock_advances_with_work() {
        let c = ThreadCpuClock::for_current_thread();
        let a = c.now_ns();
        let mut x = 0u64;
        for i in 0..5_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        if cfg!(target_os = "linux") {
            assert!(c.now_ns() > a);
        }
    }
}
