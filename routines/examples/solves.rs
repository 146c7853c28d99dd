//! How long `dgesl` takes to solve with factors already made, with faer's triangular solves
//! and with the host's OpenBLAS when it loads: the median and the least of 20 solves at
//! size n, in three rounds that alternate the two. A solve reads the whole matrix once, so
//! it measures how each streams memory as much as its arithmetic.
//!
//!     cargo run --release -p ninf-routines --example solves -- [n]

use std::sync::Arc;
use std::time::Instant;

use ninf_routines::kernels::{Kernels, OPENBLAS_SONAME};
use ninf_routines::linpack::{dgefa_with, dgesl_with};
use ninf_routines::openblas::OpenBlas;

/// The median and the least of 20 solves' times, in milliseconds.
fn solves(kernels: &Kernels, lu: &[f64], ipvt: &[i32], n: usize) -> Result<(f64, f64), String> {
    let rhs: Vec<f64> = (0..n).map(|i| i as f64).collect();
    let mut times = Vec::with_capacity(20);
    for _ in 0..20 {
        let mut x = rhs.clone();
        let started = Instant::now();
        dgesl_with(kernels, lu, n as i32, ipvt, &mut x)?;
        times.push(started.elapsed().as_secs_f64() * 1e3);
    }
    times.sort_by(f64::total_cmp);
    Ok((times[times.len() / 2], times[0]))
}

fn main() -> Result<(), String> {
    let n: usize = match std::env::args().nth(1) {
        Some(text) => text.parse().map_err(|e| format!("n = {text:?}: {e}"))?,
        None => 2000,
    };
    let mut lu: Vec<f64> = (0..n * n)
        .map(|i| {
            ((i * 7 + i / n * 13) % 101) as f64 + if i % (n + 1) == 0 { n as f64 } else { 0.0 }
        })
        .collect();
    let mut ipvt = vec![0; n];
    dgefa_with(&Kernels::Faer, &mut lu, n as i32, &mut ipvt)?;
    let mut kernels = vec![Kernels::Faer];
    match OpenBlas::load(OPENBLAS_SONAME) {
        Ok(lib) => kernels.push(Kernels::OpenBlas(Arc::new(lib))),
        Err(e) => println!("OpenBLAS: {e}"),
    }
    println!("dgesl at n = {n}, milliseconds (median, least of 20):");
    for round in 1..=3 {
        for k in &kernels {
            let (median, least) = solves(k, &lu, &ipvt, n)?;
            println!("  round {round} {:<22} {median:6.2} {least:6.2}", k.name());
        }
    }
    Ok(())
}
