//! Golden tests: the generated client stubs, executable and interface JSON of the shipped
//! examples must match the files in `tests/golden/`. After an intended change, regenerate
//! them with `NINF_BLESS=1 cargo test -p ninf-idl --test integration golden::` and review the diff.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf()
}

#[track_caller]
fn check_golden(name: &str, actual: &str) {
    let path = root().join("tests/golden").join(name);
    if std::env::var_os("NINF_BLESS").is_some() {
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (run with NINF_BLESS=1 to create it)",
            path.display()
        )
    });
    if expected != actual {
        let line = expected
            .lines()
            .zip(actual.lines())
            .position(|(a, b)| a != b)
            .map_or(
                expected.lines().count().min(actual.lines().count()) + 1,
                |i| i + 1,
            );
        panic!(
            "{} differs from the generated text at line {line}:\n  golden:    {:?}\n  generated: {:?}\n\
             (run with NINF_BLESS=1 to accept the new output)",
            path.display(),
            expected.lines().nth(line - 1),
            actual.lines().nth(line - 1),
        );
    }
}

fn golden_module(example: &str) {
    let module = ninf_idl::compile_file(
        &root()
            .join("../routines/idl")
            .join(format!("{example}.idl")),
    )
    .unwrap();
    let generated = ninf_idl::codegen::rust::generate(&module);
    check_golden(&format!("{example}_client.rs"), &generated.client);
    check_golden(&format!("{example}_executable.rs"), &generated.executable);
    check_golden(
        &format!("{example}.interface.json"),
        &format!("{}\n", serde_json::to_string_pretty(&module).unwrap()),
    );
}

#[test]
fn linpack_generated_code_and_interface() {
    golden_module("linpack");
}

#[test]
fn vector_generated_code_and_interface() {
    golden_module("vector");
}
