//! One release for the whole grid: every program says it with `--version`, as
//! `NAME VERSION`, and the routines' executables name their module and the release.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::Command;

use common::{ninf, programs};

#[test]
fn every_program_says_the_one_release() {
    programs::build();
    let bin = ninf().parent().unwrap();
    let version = env!("CARGO_PKG_VERSION");
    let programs = [
        "ninf",
        "ninf-server",
        "ninf-metaserver",
        "ninf-proxy",
        "ninf-gen",
        "ninf-gang-agent",
    ];
    for program in programs {
        let output = Command::new(bin.join(program))
            .arg("--version")
            .output()
            .unwrap();
        assert!(output.status.success(), "{program}: {output:?}");
        let shown = String::from_utf8(output.stdout).unwrap();
        assert_eq!(shown.trim(), format!("{program} {version}"));
    }
    for (program, module) in [
        ("ninf-exec-linpack", "linpack"),
        ("ninf-exec-vector", "vector"),
        ("ninf-exec-selftest", "selftest"),
    ] {
        let output = Command::new(bin.join(program))
            .arg("--version")
            .output()
            .unwrap();
        assert!(output.status.success(), "{program}: {output:?}");
        let shown = String::from_utf8(output.stdout).unwrap();
        assert_eq!(
            shown.trim(),
            format!("module `{module}` ({module}.idl), ninf {version}")
        );
    }
}
