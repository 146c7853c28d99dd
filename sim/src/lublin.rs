//! The Lublin-Feitelson workload model (Lublin and Feitelson, "The workload on parallel
//! supercomputers: modeling the characteristics of rigid jobs", JPDC 63(11), 2003; the model
//! of their 1999 report), with its published constants for the whole sample (no split into
//! batch and interactive jobs):
//!
//! - **Size**: serial with probability 0.244; otherwise log2(size) is two-stage uniform
//!   (0.8..UMed with probability 0.86, UMed..UHi otherwise, UHi = log2 of the machine,
//!   UMed = UHi − 2.5), rounded to a power of two with probability 0.576.
//! - **Run time**: ln(run time) is hyper-gamma: gamma(4.2, 0.94) with probability
//!   p = −0.0054 × size + 0.78 (kept in [0, 1]), else gamma(312, 0.03); values above 12 are
//!   drawn again (no run longer than e^12 s, about 45 hours).
//! - **Arrivals**: a daily cycle of 48 half-hour buckets weighted by the gamma(8.1737, 3.9631)
//!   density (the day starting at bucket 11), spent by inter-arrival "points" e^g with
//!   g ~ gamma(10.2303 × 1.0225, 0.4871).
//!
//! To offer a given load, arrival times are then scaled so that Σ run × size / (P × last
//! arrival) equals it, the model's own load formula.

use crate::random::Random;
use crate::workload::Job;

const SERIAL_PROBABILITY: f64 = 0.244;
const POWER_OF_TWO_PROBABILITY: f64 = 0.576;
const U_LOW: f64 = 0.8;
const U_PROBABILITY: f64 = 0.86;
const RUN_A1: f64 = 4.2;
const RUN_B1: f64 = 0.94;
const RUN_A2: f64 = 312.0;
const RUN_B2: f64 = 0.03;
const RUN_PA: f64 = -0.0054;
const RUN_PB: f64 = 0.78;
const TOO_LONG_LOG_RUN: f64 = 12.0;
const ARRIVAL_A: f64 = 10.2303 * 1.0225;
const ARRIVAL_B: f64 = 0.4871;
const TOO_LONG_LOG_INTERVAL: f64 = 13.0;
const BUCKET_A: f64 = 8.1737;
const BUCKET_B: f64 = 3.9631;
const BUCKETS: usize = 48;
const SECONDS_PER_BUCKET: f64 = 86_400.0 / BUCKETS as f64;
const DAY_START_BUCKET: usize = 11;

/// A standard normal variate (Box-Muller).
fn normal(random: &mut Random) -> f64 {
    let u1 = 1.0 - random.uniform();
    let u2 = random.uniform();
    (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
}

/// A gamma(shape, scale) variate (Marsaglia and Tsang; shapes below 1 by boosting).
pub fn gamma(random: &mut Random, shape: f64, scale: f64) -> f64 {
    if shape < 1.0 {
        let boost = (1.0 - random.uniform()).powf(1.0 / shape);
        return gamma(random, shape + 1.0, scale) * boost;
    }
    let d = shape - 1.0 / 3.0;
    let c = 1.0 / (9.0 * d).sqrt();
    loop {
        let x = normal(random);
        let v = (1.0 + c * x).powi(3);
        if v <= 0.0 {
            continue;
        }
        let u = 1.0 - random.uniform();
        if u.ln() < 0.5 * x * x + d - d * v + d * v.ln() {
            return d * v * scale;
        }
    }
}

/// ln Γ(x) for x > 0 (Lanczos approximation, g = 7).
fn ln_gamma(x: f64) -> f64 {
    const COEFFICIENTS: [f64; 9] = [
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
    let mut sum = COEFFICIENTS[0];
    for (i, c) in COEFFICIENTS.iter().enumerate().skip(1) {
        sum += c / (x + i as f64);
    }
    let t = x + 7.5;
    0.5 * (2.0 * std::f64::consts::PI).ln() + (x + 0.5) * t.ln() - t + sum.ln()
}

/// The gamma(shape, scale) distribution function at `x`: the regularised lower incomplete
/// gamma function, by its series below shape + 1 and its continued fraction above.
pub fn gamma_cdf(x: f64, shape: f64, scale: f64) -> f64 {
    let x = x / scale;
    if x <= 0.0 {
        return 0.0;
    }
    let log_prefix = -x + shape * x.ln() - ln_gamma(shape);
    if x < shape + 1.0 {
        let mut term = 1.0 / shape;
        let mut sum = term;
        let mut a = shape;
        for _ in 0..1_000 {
            a += 1.0;
            term *= x / a;
            sum += term;
            if term < sum * 1e-15 {
                break;
            }
        }
        (sum * log_prefix.exp()).clamp(0.0, 1.0)
    } else {
        // Lentz's method for the continued fraction of the upper function.
        let tiny = 1e-300;
        let mut b = x + 1.0 - shape;
        let mut c = 1.0 / tiny;
        let mut d = 1.0 / b;
        let mut h = d;
        for i in 1..1_000 {
            let an = -(i as f64) * (i as f64 - shape);
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
            if (delta - 1.0).abs() < 1e-15 {
                break;
            }
        }
        (1.0 - log_prefix.exp() * h).clamp(0.0, 1.0)
    }
}

/// `jobs` jobs for a machine of `processors` at `load` (≤ 0: the model's own arrival rate).
pub fn lublin(processors: u32, jobs: usize, load: f64, seed: u64) -> Vec<Job> {
    let mut random = Random::new(seed);
    let u_high = f64::from(processors.max(2)).log2();
    let u_medium = (u_high - 2.5).max(U_LOW);
    // The daily cycle: each bucket's share of arrivals, normalised to mean 1.
    let mut weights = [0.0; BUCKETS];
    for i in DAY_START_BUCKET..BUCKETS + DAY_START_BUCKET {
        let t = i as f64;
        weights[(i - 1) % BUCKETS] =
            gamma_cdf(t + 0.5, BUCKET_A, BUCKET_B) - gamma_cdf(t - 0.5, BUCKET_A, BUCKET_B);
    }
    let mean = weights.iter().sum::<f64>() / BUCKETS as f64;
    for w in &mut weights {
        *w = (*w / mean).max(1e-9);
    }
    let mut bucket = 0;
    let mut clock = 0.0;
    let mut remainder = 0.0;
    let mut out: Vec<Job> = Vec::with_capacity(jobs);
    for i in 0..jobs {
        // Arrival: spend the interval's points on the buckets it crosses.
        let g = loop {
            let g = gamma(&mut random, ARRIVAL_A, ARRIVAL_B);
            if g <= TOO_LONG_LOG_INTERVAL {
                break g;
            }
        };
        let mut points = g.exp() / SECONDS_PER_BUCKET;
        let mut interval = 0.0;
        points += remainder * weights[bucket];
        while points > weights[bucket] {
            points -= weights[bucket];
            bucket = (bucket + 1) % BUCKETS;
            interval += SECONDS_PER_BUCKET;
        }
        let new_remainder = points / weights[bucket];
        interval += SECONDS_PER_BUCKET * (new_remainder - remainder);
        remainder = new_remainder;
        clock += interval.max(0.0);
        // Size.
        let u = random.uniform();
        let size = if u <= SERIAL_PROBABILITY {
            1
        } else {
            let (low, high) = if random.uniform() <= U_PROBABILITY {
                (U_LOW, u_medium)
            } else {
                (u_medium, u_high)
            };
            let mut exponent = low + random.uniform() * (high - low);
            if u <= SERIAL_PROBABILITY + POWER_OF_TWO_PROBABILITY {
                exponent = exponent.round();
            }
            (2f64.powf(exponent).round() as u32).clamp(1, processors.max(1))
        };
        // Run time.
        let p = (RUN_PA * f64::from(size) + RUN_PB).clamp(0.0, 1.0);
        let log_run = loop {
            let g = if random.uniform() <= p {
                gamma(&mut random, RUN_A1, RUN_B1)
            } else {
                gamma(&mut random, RUN_A2, RUN_B2)
            };
            if g <= TOO_LONG_LOG_RUN {
                break g;
            }
        };
        let run = log_run.exp().floor().max(1.0);
        out.push(Job {
            id: i as u64 + 1,
            submit: clock,
            run,
            processors: size,
            requested: run,
        });
    }
    if load > 0.0 {
        let last = out.last().map_or(0.0, |j| j.submit);
        let work: f64 = out.iter().map(|j| j.run * f64::from(j.processors)).sum();
        if last > 0.0 {
            let offered = work / (f64::from(processors.max(1)) * last);
            let stretch = offered / load;
            for job in &mut out {
                job.submit *= stretch;
            }
        }
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn gamma_cdf_matches_known_values() {
        // Shape 1 is the exponential: 1 - e^-x.
        assert!((gamma_cdf(2.0, 1.0, 1.0) - (1.0 - (-2.0f64).exp())).abs() < 1e-12);
        // Shape 3, scale 2 at 4: 1 - e^-2 (1 + 2 + 2).
        let expected = 1.0 - (-2.0f64).exp() * 5.0;
        assert!((gamma_cdf(4.0, 3.0, 2.0) - expected).abs() < 1e-12);
        // Above shape + 1 (the continued fraction): 1 - e^-20 (1 + 20 + 200).
        let expected = 1.0 - (-20.0f64).exp() * 221.0;
        assert!((gamma_cdf(40.0, 3.0, 2.0) - expected).abs() < 1e-12);
        assert!((ln_gamma(5.0) - 24f64.ln()).abs() < 1e-12);
    }

    #[test]
    fn gamma_variates_have_the_right_mean() {
        let mut random = Random::new(7);
        for (shape, scale) in [(4.2, 0.94), (312.0, 0.03), (0.5, 2.0)] {
            let n = 20_000;
            let mean = (0..n)
                .map(|_| gamma(&mut random, shape, scale))
                .sum::<f64>()
                / n as f64;
            let expected = shape * scale;
            assert!(
                (mean - expected).abs() < 0.03 * expected,
                "{shape} {scale}: {mean}"
            );
        }
    }

    #[test]
    fn the_model_has_its_published_shape_and_the_asked_load() {
        let jobs = lublin(128, 20_000, 0.7, 1);
        let serial = jobs.iter().filter(|j| j.processors == 1).count() as f64 / 20_000.0;
        // 0.244 serial, plus parallel draws that round down to one processor.
        assert!((0.24..0.30).contains(&serial), "{serial}");
        let powers = jobs
            .iter()
            .filter(|j| j.processors.is_power_of_two())
            .count() as f64;
        assert!(powers / 20_000.0 > 0.244 + 0.576 - 0.02);
        assert!(jobs.iter().all(|j| (1..=128).contains(&j.processors)));
        assert!(jobs.iter().all(|j| j.run >= 1.0 && j.run <= 12f64.exp()));
        assert!(jobs.windows(2).all(|w| w[0].submit <= w[1].submit));
        let last = jobs.last().unwrap().submit;
        let work: f64 = jobs.iter().map(|j| j.run * f64::from(j.processors)).sum();
        assert!((work / (128.0 * last) - 0.7).abs() < 1e-9);
        // Same seed, same workload.
        assert_eq!(lublin(128, 100, 0.7, 1), lublin(128, 100, 0.7, 1));
    }
}
