//! `cargo xtask TASK`: the project's own tasks behind one cargo command (the cargo-xtask
//! convention), so that every one is started the same way on any machine with a Rust
//! toolchain. `cargo xtask test [ARGS]` runs every test of the project: `scripts/test`,
//! which installs what a fresh Debian machine lacks, runs `cargo test --workspace` (ARGS go
//! to it) and then the Python client's pytest suite.

use std::process::{Command, ExitCode};

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    match args.next().as_deref() {
        Some("test") => {
            let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
            match Command::new("bash")
                .arg(root.join("scripts/test"))
                .args(args)
                .current_dir(&root)
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
        other => {
            eprintln!(
                "xtask: unknown task {}; known: test (every test of the project)",
                other.map_or("(none)".to_string(), |t| format!("`{t}`"))
            );
            ExitCode::from(2)
        }
    }
}
