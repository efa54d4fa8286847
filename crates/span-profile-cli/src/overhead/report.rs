//! The comparison's figures: per arm the median, min and max of each measure, its ratio to
//! the baseline, and the text table with the budget verdict.

use std::fmt::Write as _;

use serde::Serialize;

use super::measure::RunResult;

/// Median, min and max of one measure of one arm.
#[derive(Debug, Clone, Copy, Serialize)]
pub(super) struct Spread {
    pub(super) median: f64,
    pub(super) min: f64,
    pub(super) max: f64,
}

impl Spread {
    pub(super) fn of(values: &[f64]) -> Option<Self> {
        let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Some(Self {
            median,
            min: v[0],
            max: v[n - 1],
        })
    }
}

#[derive(Debug, Serialize)]
pub(super) struct ArmSummary {
    pub(super) arm: &'static str,
    pub(super) runs: usize,
    pub(super) throughput: Option<Spread>,
    pub(super) throughput_ratio: Option<f64>,
    pub(super) cpu_s: Option<Spread>,
    pub(super) cpu_ratio: Option<f64>,
    pub(super) peak_rss_mb: Option<Spread>,
    pub(super) rss_ratio: Option<f64>,
    pub(super) agent_cpu_pct: Option<Spread>,
}

#[derive(Debug, Serialize)]
pub(super) struct Report {
    pub(super) command: Vec<String>,
    pub(super) budget: f64,
    pub(super) rate: u32,
    pub(super) throughput_unit: &'static str,
    pub(super) arms: Vec<ArmSummary>,
    pub(super) runs: Vec<RunResult>,
    pub(super) budget_held: Option<bool>,
}

pub(super) fn ratio(a: Option<Spread>, base: Option<Spread>) -> Option<f64> {
    match (a, base) {
        (Some(a), Some(b)) if b.median != 0.0 => Some(a.median / b.median),
        _ => None,
    }
}

fn fmt_spread(s: Option<Spread>, prec: usize) -> String {
    s.map_or("n/a".into(), |s| {
        format!("{:.p$} [{:.p$}–{:.p$}]", s.median, s.min, s.max, p = prec)
    })
}

fn fmt_ratio(r: Option<f64>) -> String {
    r.map_or("n/a".into(), |r| format!("{r:.3}"))
}

pub(super) fn render(r: &Report) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "overhead of span-profile at {} Hz, budget {:.2}% of a core; medians [min–max] of {} alternating runs per arm",
        r.rate,
        r.budget * 100.0,
        r.arms.first().map_or(0, |a| a.runs)
    );
    let _ = writeln!(s, "throughput: {}", r.throughput_unit);
    let _ = writeln!(
        s,
        "{:<13} {:>26} {:>7} {:>24} {:>7} {:>24} {:>7} {:>24}",
        "arm",
        "throughput",
        "ratio",
        "CPU s",
        "ratio",
        "peak RSS MB",
        "ratio",
        "agent CPU % of a core"
    );
    for a in &r.arms {
        let _ = writeln!(
            s,
            "{:<13} {:>26} {:>7} {:>24} {:>7} {:>24} {:>7} {:>24}",
            a.arm,
            fmt_spread(a.throughput, 2),
            fmt_ratio(a.throughput_ratio),
            fmt_spread(a.cpu_s, 2),
            fmt_ratio(a.cpu_ratio),
            fmt_spread(a.peak_rss_mb, 1),
            fmt_ratio(a.rss_ratio),
            fmt_spread(a.agent_cpu_pct, 3),
        );
    }
    match r.budget_held {
        Some(true) => {
            let _ = writeln!(
                s,
                "budget held: agent CPU within {:.2}% of a core (+20%)",
                r.budget * 100.0
            );
        }
        Some(false) => {
            let _ = writeln!(
                s,
                "budget NOT held: agent CPU above {:.2}% of a core (+20%)",
                r.budget * 100.0
            );
        }
        None => {
            let _ = writeln!(s, "budget: unknown (the agent reported no CPU)");
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spreads() {
        let s = Spread::of(&[3.0, 1.0, 2.0, f64::NAN]).unwrap();
        assert_eq!((s.median, s.min, s.max), (2.0, 1.0, 3.0));
        assert_eq!(Spread::of(&[1.0, 2.0]).unwrap().median, 1.5);
        assert!(Spread::of(&[]).is_none());
    }
}
