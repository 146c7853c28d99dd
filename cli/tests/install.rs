//! `scripts/install` as a user meets it: the tree it installs, moved to a fresh folder, with
//! only its `bin/` (and the system's) on `PATH`, no source tree, no Cargo and no
//! `LD_LIBRARY_PATH`, runs `ninf up` with an outsider's module `ninf-gen build` made there,
//! answers calls of a standard routine and of that module, builds and runs the C example with
//! `pkg-config` and the Fortran one with gfortran, and runs `ninf demo`; `--archive` writes the same tree as a tarball.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::common::{Up, programs};

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn profile() -> &'static str {
    if programs::released() {
        "release"
    } else {
        "debug"
    }
}

fn show(output: &Output) -> String {
    format!(
        "{}\n{}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// A command run in `work` as on a machine with only the installed tree: `PATH` is its
/// `bin/` and the system's, and nothing else of this build's environment is passed.
fn installed(tree: &Path, work: &Path, program: &str) -> Command {
    let mut command = Command::new(program);
    command
        .env_clear()
        .env(
            "PATH",
            format!("{}:/usr/bin:/bin", tree.join("bin").display()),
        )
        .env("HOME", work)
        .current_dir(work);
    command
}

fn succeeds(command: &mut Command) -> String {
    let output = command.output().unwrap();
    assert!(output.status.success(), "{command:?}: {}", show(&output));
    String::from_utf8(output.stdout).unwrap()
}

/// An outsider's module: a C routine and its IDL, as `docs/authors.md` has them.
fn write_module(work: &Path) {
    std::fs::write(
        work.join("scale.c"),
        "void scale_add(int n, double alpha, const double *x, double *y) {\n    \
         for (int i = 0; i < n; i++) y[i] = alpha * x[i] + y[i];\n}\n",
    )
    .unwrap();
    std::fs::write(
        work.join("mine.idl"),
        "Module mine;\n\nDefine scale_add(IN int n, IN double alpha, IN double x[n], INOUT double y[n])\n    \
         \"y = alpha x + y\"\n    CalcOrder 2 * n\n    Required \"scale.c\"\n    \
         Calls \"C\" scale_add(n, alpha, x, y);\n",
    )
    .unwrap();
}

/// `ninf up` of the installed tree, stopped with SIGINT when dropped.
fn up(tree: &Path, work: &Path) -> Up {
    let child = installed(tree, work, "ninf")
        .args([
            "up",
            "--servers",
            "2",
            "--module",
            "mine.idl=./ninf-exec-mine",
        ])
        .args(["--data-dir", "grid"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let grid = Up(child);
    let deadline = Instant::now() + Duration::from_secs(60);
    while !work.join("grid/grid.toml").exists() {
        assert!(Instant::now() < deadline, "ninf up wrote no grid file");
        std::thread::sleep(Duration::from_millis(100));
    }
    grid
}

fn outputs(json: &str) -> serde_json::Value {
    serde_json::from_str::<serde_json::Value>(json).unwrap()["outputs"].clone()
}

#[test]
fn the_installed_tree_runs_a_grid_builds_a_module_and_a_c_program_with_nothing_else() {
    programs::build();
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("prefix");
    succeeds(
        Command::new(repository().join("scripts/install"))
            .args(["--no-build", "--profile", profile()])
            .arg(&prefix),
    );
    // Moved: nothing may point back at where it was installed.
    let tree = dir.path().join("moved");
    succeeds(Command::new("cp").arg("-a").arg(&prefix).arg(&tree));
    std::fs::remove_dir_all(&prefix).unwrap();
    let work = dir.path().join("work");
    std::fs::create_dir_all(&work).unwrap();

    write_module(&work);
    let built = succeeds(installed(&tree, &work, "ninf-gen").args(["build", "mine.idl"]));
    assert!(work.join("ninf-exec-mine").is_file(), "{built}");

    let _grid = up(&tree, &work);
    let call = |values: &[&str]| {
        succeeds(
            installed(&tree, &work, "ninf")
                .args(["call", "--data-dir", "grid", "--wait", "60"])
                .args(values),
        )
    };
    let mmul = outputs(&call(&["mmul", "2", "[1,2,3,4]", "[1,0,0,1]"]));
    assert_eq!(mmul["C"], serde_json::json!([1.0, 2.0, 3.0, 4.0]));
    let mine = outputs(&call(&["scale_add", "3", "2.0", "[1,2,3]", "[10,10,10]"]));
    assert_eq!(mine["y"], serde_json::json!([12.0, 14.0, 16.0]));

    let solve = work.join("solve");
    let cflags = succeeds(
        installed(&tree, &work, "pkg-config")
            .args(["--cflags", "--libs", "ninf"])
            .env("PKG_CONFIG_PATH", tree.join("lib/pkgconfig")),
    );
    succeeds(
        installed(&tree, &work, "cc")
            .args(["-std=c11", "-Wall", "-Werror", "-o"])
            .arg(&solve)
            .arg(tree.join("share/ninf/examples/c/solve.c"))
            .args(cflags.split_whitespace())
            .arg("-lm"),
    );
    let solved = succeeds(
        installed(&tree, &work, solve.to_str().unwrap())
            .arg("100")
            .env("NINF_GRID", work.join("grid/grid.toml")),
    );
    assert!(solved.contains("largest relative error of x"), "{solved}");

    // The Fortran module and example, compiled by gfortran from the tree.
    let solve_f = work.join("solve_f");
    let libs = succeeds(
        installed(&tree, &work, "pkg-config")
            .args(["--libs", "ninf"])
            .env("PKG_CONFIG_PATH", tree.join("lib/pkgconfig")),
    );
    succeeds(
        installed(&tree, &work, "gfortran")
            .args(["-std=f2018", "-Wall", "-Werror", "-o"])
            .arg(&solve_f)
            .arg(tree.join("include/ninf.f90"))
            .arg(tree.join("share/ninf/examples/fortran/solve.f90"))
            .args(libs.split_whitespace()),
    );
    let solved = succeeds(
        installed(&tree, &work, solve_f.to_str().unwrap())
            .arg("80")
            .env("NINF_GRID", work.join("grid/grid.toml")),
    );
    assert!(
        solved.contains("n = 80: largest relative error of x")
            && solved.contains("A x through Ninf_call(mmul) matches the local product"),
        "{solved}"
    );

    let demo = succeeds(installed(&tree, &work, "ninf").args([
        "demo",
        "--json",
        "--trials",
        "1",
        "--pairs-n",
        "60",
        "--cascade-n",
        "40",
    ]));
    let rows: Vec<serde_json::Value> = demo
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 4, "{demo}");
    for row in &rows {
        assert!(row["max_abs_error"].as_f64().unwrap() < 1e-6, "{row}");
    }
}

#[test]
fn the_archive_holds_the_same_tree() {
    programs::build();
    let dir = tempfile::tempdir().unwrap();
    succeeds(
        Command::new(repository().join("scripts/install"))
            .args(["--archive", "--no-build", "--profile", profile()])
            .arg(dir.path()),
    );
    let name = format!(
        "ninf-{}-{}-linux",
        env!("CARGO_PKG_VERSION"),
        std::env::consts::ARCH
    );
    let archive = dir.path().join(format!("{name}.tar.gz"));
    let listing = succeeds(Command::new("tar").arg("tzf").arg(&archive));
    for file in [
        "bin/ninf",
        "bin/ninf-server",
        "bin/ninf-metaserver",
        "bin/ninf-proxy",
        "bin/ninf-gen",
        "bin/ninf-gang-agent",
        "bin/ninf-exec-linpack",
        "lib/libninf.so",
        "lib/libninf.a",
        "lib/libninf_exec.a",
        "lib/pkgconfig/ninf.pc",
        "include/grpc.h",
        "include/ninf_exec.h",
        "include/ninf.f90",
        "share/ninf/examples/fortran/solve.f90",
        "share/ninf/idl/linpack.idl",
        "share/ninf/examples/c/solve.c",
    ] {
        assert!(
            listing.lines().any(|l| l == format!("{name}/{file}")),
            "{file} missing from {listing}"
        );
    }
}
