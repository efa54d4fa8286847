//! The statistics of the deploy diff (ADR 0023): Welch's t-test on two ratio estimates whose
//! unit is the window, and Holm's correction across frames. [`t_critical`], Student's t
//! quantile, is public for the other places that build an interval (`span-profile overhead`'s
//! fixed-load decision, ADR 0030).

/// A share estimated from windows: `Σ k_i / Σ n_i` over the windows `(k_i, n_i)` of one
/// side, with the variance of that ratio estimator (cluster sampling, the window as the
/// cluster: `m/(m-1) · Σ (k_i - p·n_i)² / (Σ n_i)²`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct WindowedShare {
    pub(crate) share: f64,
    pub(crate) variance: f64,
    /// Windows (clusters).
    pub(crate) windows: usize,
    /// `Σ n_i`.
    pub(crate) total: u64,
}

impl WindowedShare {
    /// From `(k_i, n_i)` per window; windows with `n_i = 0` hold no information and are left
    /// out.
    pub(crate) fn new(windows: impl IntoIterator<Item = (u64, u64)> + Clone) -> Self {
        let (mut k, mut n, mut m) = (0u64, 0u64, 0usize);
        for (ki, ni) in windows.clone() {
            if ni > 0 {
                k += ki;
                n += ni;
                m += 1;
            }
        }
        if n == 0 {
            return Self {
                share: 0.0,
                variance: 0.0,
                windows: 0,
                total: 0,
            };
        }
        let p = k as f64 / n as f64;
        let mut ss = 0.0;
        for (ki, ni) in windows {
            if ni > 0 {
                let e = ki as f64 - p * ni as f64;
                ss += e * e;
            }
        }
        let variance = if m > 1 {
            m as f64 / (m - 1) as f64 * ss / (n as f64 * n as f64)
        } else {
            0.0
        };
        Self {
            share: p,
            variance,
            windows: m,
            total: n,
        }
    }
}

/// Two-sided p-value of Welch's t-test for `new.share - old.share`. Each side's variance is
/// at least the binomial variance of the pooled share over its samples, so a side of few,
/// alike windows cannot make a difference look more certain than independent samples would.
/// `None` when a side has fewer than 2 windows (its variance cannot be estimated).
pub(crate) fn welch_p(old: &WindowedShare, new: &WindowedShare) -> Option<f64> {
    if old.windows < 2 || new.windows < 2 {
        return None;
    }
    let pooled = (old.share * old.total as f64 + new.share * new.total as f64)
        / (old.total + new.total) as f64;
    let floor = |s: &WindowedShare| {
        s.variance
            .max(pooled * (1.0 - pooled) / s.total as f64)
            .max(f64::MIN_POSITIVE)
    };
    let (v1, v2) = (floor(old), floor(new));
    let se2 = v1 + v2;
    let t = (new.share - old.share) / se2.sqrt();
    let df = se2 * se2 / (v1 * v1 / (old.windows - 1) as f64 + v2 * v2 / (new.windows - 1) as f64);
    Some(t_two_sided(t, df))
}

/// `P(|T| >= |t|)` for Student's t with `df` degrees of freedom.
pub(crate) fn t_two_sided(t: f64, df: f64) -> f64 {
    if !t.is_finite() {
        return if t.is_nan() { 1.0 } else { 0.0 };
    }
    let x = df / (df + t * t);
    incomplete_beta(df / 2.0, 0.5, x).clamp(0.0, 1.0)
}

/// The `t` for which `P(|T| >= t)` is `two_sided_p` under Student's t with `df` degrees of
/// freedom: the half-width of a `1 - two_sided_p` interval in standard errors (df 7, 5%:
/// 2.365). `NaN` when `df` is not above 0 or `two_sided_p` is not inside (0, 1).
///
/// ```
/// use span_profile_export::store::stats::t_critical;
/// assert!((t_critical(0.05, 7.0) - 2.365).abs() < 1e-3);
/// assert!((t_critical(0.05, 1e9) - 1.960).abs() < 1e-3);
/// ```
pub fn t_critical(two_sided_p: f64, df: f64) -> f64 {
    if !(df > 0.0 && two_sided_p > 0.0 && two_sided_p < 1.0) {
        return f64::NAN;
    }
    // `t_two_sided` falls from 1 at t = 0 towards 0: bisect on it. 1e6 bounds every quantile
    // asked for here (df 1 at 1e-6 is 2 / (π · 1e-6), about 6.4e5).
    let (mut lo, mut hi) = (0.0f64, 1e6f64);
    for _ in 0..200 {
        let mid = 0.5 * (lo + hi);
        if t_two_sided(mid, df) > two_sided_p {
            lo = mid;
        } else {
            hi = mid;
        }
        if hi - lo < 1e-12 * hi.max(1.0) {
            break;
        }
    }
    0.5 * (lo + hi)
}

/// Holm's step-down adjustment: adjusted p-values in the input's order, each to be compared
/// with the family-wise level directly.
pub(crate) fn holm(p: &[f64]) -> Vec<f64> {
    let m = p.len();
    let mut order: Vec<usize> = (0..m).collect();
    order.sort_by(|&a, &b| p[a].total_cmp(&p[b]));
    let mut out = vec![1.0; m];
    let mut running: f64 = 0.0;
    for (rank, &i) in order.iter().enumerate() {
        let adj = ((m - rank) as f64 * p[i]).min(1.0);
        running = running.max(adj);
        out[i] = running;
    }
    out
}

/// The regularized incomplete beta function `I_x(a, b)` (continued fraction, Lentz).
fn incomplete_beta(a: f64, b: f64, x: f64) -> f64 {
    if x <= 0.0 {
        return 0.0;
    }
    if x >= 1.0 {
        return 1.0;
    }
    let ln_front = ln_gamma(a + b) - ln_gamma(a) - ln_gamma(b) + a * x.ln() + b * (1.0 - x).ln();
    let front = ln_front.exp();
    if x < (a + 1.0) / (a + b + 2.0) {
        front * beta_fraction(a, b, x) / a
    } else {
        1.0 - front * beta_fraction(b, a, 1.0 - x) / b
    }
}

fn beta_fraction(a: f64, b: f64, x: f64) -> f64 {
    const TINY: f64 = 1e-300;
    let (qab, qap, qam) = (a + b, a + 1.0, a - 1.0);
    let mut c = 1.0;
    let mut d = 1.0 - qab * x / qap;
    if d.abs() < TINY {
        d = TINY;
    }
    d = 1.0 / d;
    let mut h = d;
    for m in 1..300 {
        let m = m as f64;
        let m2 = 2.0 * m;
        let aa = m * (b - m) * x / ((qam + m2) * (a + m2));
        d = 1.0 + aa * d;
        if d.abs() < TINY {
            d = TINY;
        }
        c = 1.0 + aa / c;
        if c.abs() < TINY {
            c = TINY;
        }
        d = 1.0 / d;
        h *= d * c;
        let aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2));
        d = 1.0 + aa * d;
        if d.abs() < TINY {
            d = TINY;
        }
        c = 1.0 + aa / c;
        if c.abs() < TINY {
            c = TINY;
        }
        d = 1.0 / d;
        let del = d * c;
        h *= del;
        if (del - 1.0).abs() < 1e-12 {
            break;
        }
    }
    h
}

/// `ln Γ(x)` for `x > 0` (Lanczos, g = 7).
fn ln_gamma(x: f64) -> f64 {
    const G: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    if x < 0.5 {
        let pi = std::f64::consts::PI;
        return (pi / (pi * x).sin()).ln() - ln_gamma(1.0 - x);
    }
    let x = x - 1.0;
    let mut a = G[0];
    let t = x + 7.5;
    for (i, g) in G.iter().enumerate().skip(1) {
        a += g / (x + i as f64);
    }
    0.5 * (2.0 * std::f64::consts::PI).ln() + (x + 0.5) * t.ln() - t + a.ln()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn t_distribution_matches_the_tables() {
        // Two-sided 5% critical values: df 10 → 2.228, df 30 → 2.042; 1% at df 5 → 4.032.
        assert!((t_two_sided(2.228, 10.0) - 0.05).abs() < 1e-3);
        assert!((t_two_sided(2.042, 30.0) - 0.05).abs() < 1e-3);
        assert!((t_two_sided(4.032, 5.0) - 0.01).abs() < 1e-3);
        assert!((t_two_sided(0.0, 7.0) - 1.0).abs() < 1e-12);
        assert!(t_two_sided(40.0, 20.0) < 1e-15);
    }

    #[test]
    fn t_critical_matches_the_tables() {
        // Two-sided 5%: df 1 → 12.706, 2 → 4.303, 7 → 2.365, 29 → 2.045; 1% at df 5 → 4.032.
        for (df, want) in [(1.0, 12.706), (2.0, 4.303), (7.0, 2.365), (29.0, 2.045)] {
            let t = t_critical(0.05, df);
            assert!((t - want).abs() < 1e-3, "df {df}: {t}");
        }
        assert!((t_critical(0.01, 5.0) - 4.032).abs() < 1e-3);
        assert!(t_critical(0.05, 0.0).is_nan());
        assert!(t_critical(1.0, 5.0).is_nan());
    }

    #[test]
    fn holm_steps_down() {
        let adj = holm(&[0.01, 0.04, 0.03, 0.5]);
        // Sorted 0.01, 0.03, 0.04, 0.5 → ×4, ×3, ×2, ×1 → 0.04, 0.09, 0.09 (monotone), 0.5.
        let want = [0.04, 0.09, 0.09, 0.5];
        for (a, w) in adj.iter().zip(want) {
            assert!((a - w).abs() < 1e-12, "{adj:?}");
        }
    }

    #[test]
    fn the_window_is_the_unit() {
        // The same 40% share, but one side's windows disagree wildly: much larger variance.
        let steady = WindowedShare::new([(400, 1000), (400, 1000), (400, 1000), (400, 1000)]);
        let wild = WindowedShare::new([(80, 100), (0, 100), (80, 100), (0, 100)]);
        assert!((steady.share - 0.4).abs() < 1e-12 && (wild.share - 0.4).abs() < 1e-12);
        assert_eq!(steady.variance, 0.0);
        assert!(wild.variance > 0.01);
        let more = WindowedShare::new([(90, 100), (10, 100), (90, 100), (10, 100)]);
        // 40% → 50% is significant between steady windows, not between wild ones.
        let up = WindowedShare::new([(500, 1000), (510, 1000), (490, 1000), (500, 1000)]);
        assert!(welch_p(&steady, &up).unwrap() < 0.01);
        assert!(welch_p(&wild, &more).unwrap() > 0.2);
        assert!(welch_p(&WindowedShare::new([(1, 10)]), &up).is_none());
    }
}
