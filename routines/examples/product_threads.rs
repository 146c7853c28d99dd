//! One n-by-n product on one thread and on two, as `mmul` computes it on two (a block of C's
//! columns per thread) and as faer splits it itself, best of five each:
//!
//!     cargo run --release -p ninf-routines --example product_threads [N]
//!
//! docs/performance.md, "The products' kernel", records what it printed.

use faer::{Accum, MatMut, MatRef, Par};
use ninf_executable::threads;

fn best_of_five(mut run: impl FnMut()) -> f64 {
    run();
    (0..5)
        .map(|_| {
            let started = std::time::Instant::now();
            run();
            started.elapsed().as_secs_f64()
        })
        .fold(f64::MAX, f64::min)
}

fn faer_product(n: usize, a: &[f64], b: &[f64], c: &mut [f64], par: Par) {
    let (a, b) = (
        MatRef::from_column_major_slice(a, n, n),
        MatRef::from_column_major_slice(b, n, n),
    );
    let c = MatMut::from_column_major_slice_mut(c, n, n);
    faer::linalg::matmul::matmul(c, Accum::Replace, a, b, 1.0, par);
}

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(2000);
    let a: Vec<f64> = (0..n * n).map(|i| (i % 17) as f64 * 0.1).collect();
    let b: Vec<f64> = (0..n * n).map(|i| (i % 13) as f64 * 0.2).collect();
    let mut c = vec![0.0; n * n];
    let one = best_of_five(|| faer_product(n, &a, &b, &mut c, Par::Seq));
    let faer_two = threads::run(2, &[], || {
        best_of_five(|| faer_product(n, &a, &b, &mut c, Par::rayon(2)))
    });
    let blocks_two = threads::run(2, &[], || {
        best_of_five(|| ninf_routines::blas::mmul(n as i32, &a, &b, &mut c).expect("sizes match"))
    });
    println!("n = {n}: one thread {one:.4} s");
    println!(
        "two threads, faer's split: {faer_two:.4} s ({:.2}x)",
        one / faer_two
    );
    println!(
        "two threads, mmul's column blocks: {blocks_two:.4} s ({:.2}x)",
        one / blocks_two
    );
}
