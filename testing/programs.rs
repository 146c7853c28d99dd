//! The grid's programs, built for the tests that start them: included by path
//! (`#[path = ".../testing/programs.rs"] mod programs;`) into every test crate that runs
//! `ninf`, `ninf-server`, `ninf-proxy`, the routines' executables or the C libraries.
//!
//! One command for all of them, and the same as `scripts/test-python` and `.ci/run`: Cargo
//! resolves the dependencies' features over the packages a build names, so a build of fewer
//! packages compiles about 90 of them again with other features, and the next build of the
//! whole workspace compiles them back.

#![allow(dead_code, clippy::expect_used)]

use std::process::Command;

/// `cargo build -q --workspace --lib --bins --examples`, with `--release` when the test
/// itself is a release build (a no-op when everything is up to date).
pub fn build() {
    let mut cargo = Command::new(env!("CARGO"));
    cargo.args([
        "build",
        "-q",
        "--workspace",
        "--lib",
        "--bins",
        "--examples",
    ]);
    if released() {
        cargo.arg("--release");
    }
    let status = cargo.status().expect("cargo runs");
    assert!(status.success(), "building the grid's programs failed");
}

/// Whether this test was built in release mode: it runs from `target/release/deps`.
pub fn released() -> bool {
    std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.parent()?.ends_with("release")))
        .unwrap_or(false)
}
