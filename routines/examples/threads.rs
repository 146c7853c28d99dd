//! How much a second thread buys the standard routines, and which kernels compute them
//! faster: `mmul` and `dgefa` at size n on one thread and on two (as a call lent an idle
//! core computes them), with faer and with the host's OpenBLAS when it loads, best of five
//! each.
//!
//!     cargo run --release -p ninf-routines --example threads -- [n]

use std::time::Instant;

use ninf_executable::threads;
use std::sync::Arc;

use ninf_routines::blas::mmul_with;
use ninf_routines::kernels::{Kernels, OPENBLAS_SONAME};
use ninf_routines::linpack::dgefa_with;
use ninf_routines::openblas::OpenBlas;

/// The least of five runs' times, each run timing itself (so that setup is not counted).
fn best_of_five(mut run: impl FnMut() -> f64) -> f64 {
    (0..5).map(|_| run()).fold(f64::INFINITY, f64::min)
}

fn timed(work: impl FnOnce()) -> f64 {
    let started = Instant::now();
    work();
    started.elapsed().as_secs_f64()
}

fn main() -> Result<(), String> {
    let n: usize = match std::env::args().nth(1) {
        Some(text) => text.parse().map_err(|e| format!("n = {text:?}: {e}"))?,
        None => 1000,
    };
    let a: Vec<f64> = (0..n * n)
        .map(|i| {
            ((i * 7 + i / n * 13) % 101) as f64 + if i % (n + 1) == 0 { n as f64 } else { 0.0 }
        })
        .collect();
    let mut kernels = vec![Kernels::Faer];
    match OpenBlas::load(OPENBLAS_SONAME) {
        Ok(lib) => kernels.push(Kernels::OpenBlas(Arc::new(lib))),
        Err(why) => eprintln!("no OpenBLAS: {why}"),
    }
    println!("| kernels | threads | mmul n={n} (ms) | dgefa n={n} (ms) |");
    println!("|---|---|---|---|");
    for kernels in &kernels {
        for count in [1u32, 2] {
            let (product, factor) = time_both(kernels, count, n, &a);
            let name = kernels.name();
            println!("| {name} | {count} | {product:.1} | {factor:.1} |");
        }
    }
    Ok(())
}

/// `mmul` and `dgefa` of `a` with `kernels` on `count` threads, best of five each (ms).
fn time_both(kernels: &Kernels, count: u32, n: usize, a: &[f64]) -> (f64, f64) {
    let mut c = vec![0.0; n * n];
    let product = best_of_five(|| {
        timed(|| {
            let _ = threads::run(count, &[], || mmul_with(kernels, n as i32, a, a, &mut c));
        })
    });
    let mut ipvt = vec![0; n];
    let factor = best_of_five(|| {
        let mut lu = a.to_vec();
        timed(|| {
            let _ = threads::run(count, &[], || {
                dgefa_with(kernels, &mut lu, n as i32, &mut ipvt)
            });
        })
    });
    (product * 1e3, factor * 1e3)
}
