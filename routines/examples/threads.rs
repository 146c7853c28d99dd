//! How much a second thread buys the standard routines: `mmul` and `dgefa` at size n on one
//! thread and on two (as a call lent an idle core computes them), best of five each.
//!
//!     cargo run --release -p ninf-routines --example threads -- [n]

use std::time::Instant;

use ninf_executable::threads;
use ninf_routines::{blas::mmul, linpack::dgefa};

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
    println!("| threads | mmul n={n} (ms) | dgefa n={n} (ms) |");
    println!("|---|---|---|");
    for count in [1u32, 2] {
        let mut c = vec![0.0; n * n];
        let product = best_of_five(|| {
            timed(|| {
                let _ = threads::run(count, &[], || mmul(n as i32, &a, &a, &mut c));
            })
        });
        let mut ipvt = vec![0; n];
        let factor = best_of_five(|| {
            let mut lu = a.clone();
            timed(|| {
                let _ = threads::run(count, &[], || dgefa(&mut lu, n as i32, &mut ipvt));
            })
        });
        println!("| {count} | {:.1} | {:.1} |", product * 1e3, factor * 1e3);
    }
    Ok(())
}
