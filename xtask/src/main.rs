//! `cargo xtask TASK`: the project's own tasks behind one cargo command (the cargo-xtask
//! convention), so that every one is started the same way on any machine with a Rust
//! toolchain.
//! - `cargo xtask test [ARGS]` runs every test of the project: `scripts/test`, which installs
//!   what a fresh Debian machine lacks, runs `cargo test --workspace` (ARGS go to it) and then
//!   the Python client's pytest suite.
//! - `cargo xtask lint` checks the layering rules of `docs/architecture.md` (import circles,
//!   function length, crate dependencies); `.ci/run` runs it.

mod lint;

use std::path::PathBuf;
use std::process::{Command, ExitCode};

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    match args.next().as_deref() {
        Some("test") => test(&root, args.collect()),
        Some("lint") => lint(&root),
        other => {
            eprintln!(
                "xtask: unknown task {}; known: test (every test of the project), \
                 lint (the layering rules of docs/architecture.md)",
                other.map_or("(none)".to_string(), |t| format!("`{t}`"))
            );
            ExitCode::from(2)
        }
    }
}

fn test(root: &std::path::Path, args: Vec<String>) -> ExitCode {
    match Command::new("bash")
        .arg(root.join("scripts/test"))
        .args(args)
        .current_dir(root)
        .status()
    {
        Ok(status) if status.success() => ExitCode::SUCCESS,
        Ok(status) => ExitCode::from(status.code().map_or(1, |c| c.clamp(1, 255) as u8)),
        Err(e) => {
            eprintln!("xtask: cannot run scripts/test with bash: {e}");
            ExitCode::FAILURE
        }
    }
}

fn lint(root: &std::path::Path) -> ExitCode {
    let root = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
    match lint::run(&root) {
        Ok(errors) if errors.is_empty() => ExitCode::SUCCESS,
        Ok(errors) => {
            for e in &errors {
                eprintln!("{e}");
            }
            eprintln!(
                "xtask lint: {} breach(es) of docs/architecture.md's rules",
                errors.len()
            );
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("xtask lint: {e}");
            ExitCode::FAILURE
        }
    }
}
