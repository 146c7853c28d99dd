//! One release for the whole grid: every program says it with `--version`, as
//! `NAME VERSION`, and the routines' executables name their module and the release.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

use crate::common::{ninf, programs};

#[test]
fn every_program_says_the_one_release() {
    programs::build();
    let bin = ninf().parent().unwrap();
    let version = env!("CARGO_PKG_VERSION");
    let servers = [
        "ninf",
        "ninf-server",
        "ninf-metaserver",
        "ninf-proxy",
        "ninf-gen",
        "ninf-gang-agent",
    ]
    .map(|program| (program.to_string(), format!("{program} {version}")));
    let executables = ["linpack", "vector", "selftest"].map(|module| {
        (
            format!("ninf-exec-{module}"),
            format!("module `{module}` ({module}.idl), ninf {version}"),
        )
    });
    for (program, expected) in servers.into_iter().chain(executables) {
        let output = Command::new(bin.join(&program))
            .arg("--version")
            .output()
            .unwrap();
        assert!(output.status.success(), "{program}: {output:?}");
        let shown = String::from_utf8(output.stdout).unwrap();
        assert_eq!(shown.trim(), expected);
    }
}
