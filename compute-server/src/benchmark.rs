//! The LINPACK-style start-up benchmark: factor and solve a random system with the server's
//! own `dgefa`/`dgesl`, and report MFLOPS with the machine's processors and memory. The
//! residual check makes sure the speed was measured on a correct solve.

use std::time::{Duration, Instant};

use ninf_routines::linpack::{dgefa, dgesl};
use serde::Serialize;

/// What a server registers about its own performance.
#[derive(Debug, Clone, Serialize)]
pub struct BenchmarkReport {
    pub mflops: f64,
    pub cpus: usize,
    pub memory_bytes: u64,
    pub benchmark_n: usize,
    pub seconds: f64,
    /// LINPACK's normalised residual `|Ax - b| / (n |A| |x| eps)`; O(1) for a correct solve.
    pub normalized_residual: f64,
}

#[derive(Debug, thiserror::Error)]
pub enum BenchmarkError {
    #[error("the benchmark matrix of order {0} was singular (status {1})")]
    Singular(usize, i32),
    #[error("{0}")]
    Routine(String),
    #[error("the solve was wrong: normalised residual {0}")]
    Inaccurate(f64),
}

/// LINPACK's floating-point operations for one factor and solve of order n.
pub fn linpack_flops(n: usize) -> f64 {
    let n = n as f64;
    2.0 / 3.0 * n * n * n + 2.0 * n * n
}

/// A reproducible matrix with entries in [-0.5, 0.5), as LINPACK's `matgen`.
pub fn random_matrix(n: usize, seed: u64) -> Vec<f64> {
    let mut state = seed.max(1);
    (0..n * n)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 11) as f64 / (1u64 << 53) as f64 - 0.5
        })
        .collect()
}

/// Runs one factor-and-solve of order `n` and times it.
pub fn run(n: usize) -> Result<BenchmarkReport, BenchmarkError> {
    let order =
        i32::try_from(n).map_err(|_| BenchmarkError::Routine(format!("n = {n} is too large")))?;
    let a0 = random_matrix(n, 1325);
    // b = A * ones, so the exact solution is all ones.
    let mut b = vec![0.0; n];
    for j in 0..n {
        for (i, bi) in b.iter_mut().enumerate() {
            *bi += a0[i + j * n];
        }
    }
    let b0 = b.clone();
    let mut a = a0.clone();
    let mut ipvt = vec![0i32; n];
    let start = Instant::now();
    let info = dgefa(&mut a, order, &mut ipvt).map_err(BenchmarkError::Routine)?;
    if info != 0 {
        return Err(BenchmarkError::Singular(n, info));
    }
    dgesl(&a, order, &ipvt, &mut b).map_err(BenchmarkError::Routine)?;
    let seconds = start.elapsed().as_secs_f64().max(1e-9);

    let mut residual = 0.0f64;
    let mut norm_a = 0.0f64;
    for i in 0..n {
        let mut r = -b0[i];
        for j in 0..n {
            r += a0[i + j * n] * b[j];
            norm_a = norm_a.max(a0[i + j * n].abs());
        }
        residual = residual.max(r.abs());
    }
    let norm_x = b.iter().fold(0.0f64, |m, x| m.max(x.abs()));
    let normalized_residual = residual / (n as f64 * norm_a * norm_x * f64::EPSILON);
    if !normalized_residual.is_finite() || normalized_residual > 1e3 {
        return Err(BenchmarkError::Inaccurate(normalized_residual));
    }
    Ok(BenchmarkReport {
        mflops: linpack_flops(n) / seconds / 1e6,
        cpus: std::thread::available_parallelism().map_or(1, |p| p.get()),
        memory_bytes: total_memory_bytes().unwrap_or(0),
        benchmark_n: n,
        seconds,
        normalized_residual,
    })
}

/// Grows n from 100 until one run takes at least `target` (or n reaches `max_n`). Each step
/// picks the next n from the cubic cost of LU, so the last run lands near `target` instead of
/// overshooting it eightfold as doubling would: the whole benchmark stays well under a second
/// for a target of a quarter second.
pub fn run_adaptive(target: Duration, max_n: usize) -> Result<BenchmarkReport, BenchmarkError> {
    let mut n = 100;
    loop {
        let report = run(n)?;
        if report.seconds >= target.as_secs_f64() * 0.7 || n >= max_n {
            return Ok(report);
        }
        let scale = (target.as_secs_f64() / report.seconds)
            .cbrt()
            .clamp(1.2, 4.0);
        n = ((n as f64 * scale) as usize).min(max_n);
    }
}

/// `MemTotal` from `/proc/meminfo`.
pub fn total_memory_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn benchmark_solves_correctly_and_reports_the_machine() {
        let report = run(120).unwrap();
        assert_eq!(report.benchmark_n, 120);
        assert!(
            report.normalized_residual < 100.0,
            "{}",
            report.normalized_residual
        );
        assert!(report.mflops > 0.0);
        assert!(report.cpus >= 1);
        assert!(report.memory_bytes > 0);
    }

    #[test]
    fn flop_count_is_linpacks() {
        assert_eq!(linpack_flops(3), 18.0 + 18.0);
    }
}
