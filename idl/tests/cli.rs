//! The `ninf-gen` command line: exit codes, JSON on stdout, diagnostics on stderr.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn ninf_gen(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ninf-gen"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("ninf-gen runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ninf-gen-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn check_accepts_the_examples() {
    for example in ["../routines/idl/linpack.idl", "../routines/idl/vector.idl"] {
        let o = ninf_gen(&["check", example]);
        assert!(o.status.success(), "{}", stderr(&o));
    }
}

#[test]
fn check_reports_every_error_and_exits_1() {
    let dir = temp_dir("check");
    let file = dir.join("bad.idl");
    std::fs::write(
        &file,
        "Module m;\nDefine f(IN doubel x) Calls \"C\" f(x);\nDefine g(OUT int k) Calls \"C\" g(k);\n",
    )
    .unwrap();
    let o = ninf_gen(&["check", file.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    let name = file.display();
    assert!(
        err.contains(&format!(
            "{name}:2:13: error: unknown type `doubel`; did you mean `double`?"
        )),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "{name}:3:10: error: OUT scalar `k` is not allowed"
        )),
        "{err}"
    );
    assert!(stdout(&o).is_empty());
}

#[test]
fn cost_prints_the_issue_example() {
    let o = ninf_gen(&["cost", "../routines/idl/linpack.idl", "dgefa", "n=700"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["bytes_in"], 3_920_000);
    assert_eq!(v["bytes_out"], 3_922_800);
    assert_eq!(v["scalar_bytes_in"], 4);
    assert_eq!(v["processors"], 1);
    let flops = v["flops"].as_f64().unwrap();
    assert!((flops - 2.0 / 3.0 * 700f64.powi(3)).abs() < 1e-3);
}

#[test]
fn cost_explains_bad_requests() {
    let cases: [(&[&str], &str); 5] = [
        (
            &["cost", "../routines/idl/linpack.idl", "dgetrf", "n=7"],
            "module `linpack` has no function `dgetrf` (it has: dgefa, dgesl, dgesv, mmul, pmmul)",
        ),
        (
            &["cost", "../routines/idl/linpack.idl", "dgefa", "m=7"],
            "`dgefa` has no parameter `m`",
        ),
        (
            &["cost", "../routines/idl/linpack.idl", "dgefa", "a=7"],
            "`a` is `INOUT double a[n][n]`; only IN integer scalars take a value",
        ),
        (
            &["cost", "../routines/idl/linpack.idl", "dgefa", "n=seven"],
            "value of `n` must be an integer, got `seven`",
        ),
        (
            &["cost", "../routines/idl/linpack.idl", "dgefa"],
            "cannot compute the cost of `dgefa`: cannot evaluate dimension 1 of `a`: no value for `n`",
        ),
    ];
    for (args, message) in cases {
        let o = ninf_gen(args);
        assert_eq!(o.status.code(), Some(1), "{args:?}");
        assert!(stderr(&o).contains(message), "{args:?}: {}", stderr(&o));
    }
}

#[test]
fn interface_prints_the_descriptors_as_json() {
    let o = ninf_gen(&["interface", "../routines/idl/linpack.idl"]);
    assert!(o.status.success());
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["module"], "linpack");
    let dgesl = &v["functions"][1];
    assert_eq!(dgesl["name"], "dgesl");
    assert_eq!(dgesl["calc_order"], "2 * n ^ 2");
    assert_eq!(dgesl["parameters"][0]["mode"], "IN");
    assert_eq!(dgesl["parameters"][0]["type"], "double");
    assert_eq!(
        dgesl["parameters"][0]["dimensions"],
        serde_json::json!(["n", "n"])
    );
    assert_eq!(dgesl["parameters"][3]["mode"], "INOUT");
    assert_eq!(dgesl["callee"]["language"], "Rust");
    assert_eq!(dgesl["callee"]["path"], "ninf_routines::linpack::dgesl");
    assert_eq!(dgesl["parallelism"]["kind"], "sequential");
    let o = ninf_gen(&["interface", "../routines/idl/vector.idl"]);
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let pscale = &v["functions"][3];
    assert_eq!(
        pscale["parallelism"],
        serde_json::json!({"kind": "parallel", "processors": "p", "backend": "MPI"})
    );
    assert_eq!(v["libraries"], serde_json::json!(["-lm"]));
}

#[test]
fn rust_writes_the_same_files_as_the_library() {
    let dir = temp_dir("rust");
    let o = ninf_gen(&[
        "rust",
        "../routines/idl/linpack.idl",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let golden = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden");
    for file in ["linpack_client.rs", "linpack_executable.rs"] {
        assert_eq!(
            std::fs::read_to_string(dir.join(file)).unwrap(),
            std::fs::read_to_string(golden.join(file)).unwrap(),
            "{file}"
        );
    }
}

#[test]
fn unreadable_file_is_a_clear_error() {
    let o = ninf_gen(&["check", "examples/no-such.idl"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).starts_with("ninf-gen: error: cannot read examples/no-such.idl:"),
        "{}",
        stderr(&o)
    );
}
