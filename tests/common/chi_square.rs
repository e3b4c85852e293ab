//! Pearson's chi-square goodness-of-fit test, for the sampler's statistical tests.

/// ln Γ(x) for x > 0 (Lanczos, g = 7, 9 terms; relative error ~1e-15).
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
    let t = x + 7.5;
    let sum = G[1..]
        .iter()
        .enumerate()
        .fold(G[0], |acc, (i, g)| acc + g / (x + i as f64 + 1.0));
    0.5 * (2.0 * std::f64::consts::PI).ln() + (x + 0.5) * t.ln() - t + sum.ln()
}

/// The regularised upper incomplete gamma function Q(a, x) = Γ(a, x) / Γ(a): by its series
/// for x < a + 1, else by its continued fraction (modified Lentz), as in Numerical Recipes.
fn gamma_q(a: f64, x: f64) -> f64 {
    if x <= 0.0 {
        return 1.0;
    }
    let front = (-x + a * x.ln() - ln_gamma(a)).exp();
    if x < a + 1.0 {
        let (mut term, mut sum, mut n) = (1.0 / a, 1.0 / a, a);
        for _ in 0..10_000 {
            n += 1.0;
            term *= x / n;
            sum += term;
            if term.abs() < sum.abs() * 1e-16 {
                break;
            }
        }
        1.0 - sum * front
    } else {
        let tiny = 1e-300;
        let mut b = x + 1.0 - a;
        let mut c = 1.0 / tiny;
        let mut d = 1.0 / b;
        let mut h = d;
        for i in 1..10_000 {
            let an = -(i as f64) * (i as f64 - a);
            b += 2.0;
            d = an * d + b;
            if d.abs() < tiny {
                d = tiny;
            }
            c = b + an / c;
            if c.abs() < tiny {
                c = tiny;
            }
            d = 1.0 / d;
            let delta = d * c;
            h *= delta;
            if (delta - 1.0).abs() < 1e-16 {
                break;
            }
        }
        front * h
    }
}

/// The chi-square statistic of `counts` against `expected` (bins with expected < 5 pooled
/// into one, itself merged with the smallest other bin while below 5), its degrees of
/// freedom and its p-value Q(df / 2, chi2 / 2).
pub fn chi_square(counts: &[u64], expected: &[f64]) -> (f64, usize, f64) {
    let mut bins: Vec<(f64, f64)> = Vec::new();
    let mut pool = (0.0, 0.0);
    for (&o, &e) in counts.iter().zip(expected) {
        if e < 5.0 {
            pool = (pool.0 + o as f64, pool.1 + e);
        } else {
            bins.push((o as f64, e));
        }
    }
    if pool.1 > 0.0 || pool.0 > 0.0 {
        bins.sort_by(|a, b| a.1.total_cmp(&b.1));
        while pool.1 < 5.0 && !bins.is_empty() {
            let (o, e) = bins.remove(0);
            pool = (pool.0 + o, pool.1 + e);
        }
        bins.push(pool);
    }
    let chi2: f64 = bins.iter().map(|(o, e)| (o - e) * (o - e) / e).sum();
    let df = bins.len().saturating_sub(1).max(1);
    (chi2, df, gamma_q(df as f64 / 2.0, chi2 / 2.0))
}
