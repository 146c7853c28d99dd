//! How fast a large copy and fill are on one thread and spread over the cores
//! (`ninf_proto::copy`), into memory already touched and into fresh memory:
//!
//!     cargo run --release -p ninf-proto --example copy_speed [MIB]
//!
//! Prints the fastest of 15 runs of each, in milliseconds.

use std::time::Instant;

fn fastest(mut run: impl FnMut()) -> f64 {
    (0..15)
        .map(|_| {
            let started = Instant::now();
            run();
            started.elapsed().as_secs_f64() * 1e3
        })
        .fold(f64::INFINITY, f64::min)
}

fn main() {
    let mib: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(64);
    let len = mib << 20;
    let source: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
    let mut target = vec![1u8; len];
    let one = fastest(|| target.copy_from_slice(&source));
    let spread = fastest(|| ninf_proto::copy::copy(&mut target, &source));
    println!("copy of {mib} MiB, touched memory: one thread {one:.1} ms, spread {spread:.1} ms");
    let one = fastest(|| target.fill(0));
    let spread = fastest(|| ninf_proto::copy::zero(&mut target));
    println!("zero of {mib} MiB: one thread {one:.1} ms, spread {spread:.1} ms");
    let fresh = |spread: bool| {
        fastest(|| {
            // Zeroed by the allocator's fresh mapping: its pages are touched first by the copy.
            let mut fresh = vec![0u8; len];
            if spread {
                ninf_proto::copy::copy(&mut fresh, &source);
            } else {
                fresh.copy_from_slice(&source);
            }
            std::hint::black_box(&fresh);
        })
    };
    let (one, spread) = (fresh(false), fresh(true));
    println!("copy of {mib} MiB, fresh memory: one thread {one:.1} ms, spread {spread:.1} ms");
}
