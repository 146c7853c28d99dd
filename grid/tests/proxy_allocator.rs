//! `ninf-proxy` runs with glibc's per-thread caches off (they keep freed chunks the idle
//! trim cannot return, and a burst left a few MiB resident through them): it starts itself
//! again with `GLIBC_TUNABLES` naming the cache, keeping whatever tunables were set, and
//! leaves a setting of the cache's length that the user chose alone.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

use crate::common::{binaries, ensure_executables};
use ninf_grid::processes::{free_address, start, write};

/// Starts `ninf-proxy` with `GLIBC_TUNABLES` set to `tunables` (unset: `None`) and returns
/// the variable as the running proxy sees it.
fn tunables_seen_by_the_proxy(tunables: Option<&str>) -> Option<String> {
    ensure_executables();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("proxy.toml");
    let text = format!(
        "listen = \"{}\"\nmetaserver = \"127.0.0.1:1\"\njournal = \"off\"\nmetaserver_retry_seconds = 0.0\n",
        free_address().unwrap()
    );
    write(&config, &text).unwrap();
    let mut command = Command::new(binaries().join("ninf-proxy"));
    command.arg("--config").arg(&config);
    match tunables {
        Some(value) => command.env("GLIBC_TUNABLES", value),
        None => command.env_remove("GLIBC_TUNABLES"),
    };
    // `start` returns once the proxy printed `listening on`: it parsed its arguments again.
    let proxy = start(command, "proxy").unwrap();
    let environ = std::fs::read(format!("/proc/{}/environ", proxy.0.id())).unwrap();
    environ
        .split(|&b| b == 0)
        .filter_map(|entry| std::str::from_utf8(entry).ok())
        .find_map(|entry| entry.strip_prefix("GLIBC_TUNABLES="))
        .map(str::to_string)
}

#[test]
fn the_proxy_runs_without_glibc_thread_caches() {
    assert_eq!(
        tunables_seen_by_the_proxy(None).as_deref(),
        Some("glibc.malloc.tcache_count=0")
    );
}

#[test]
fn the_proxy_keeps_the_tunables_it_was_given() {
    // The proxy puts its setting first. glibc parses the variable in place and cuts it at
    // the first `:`, so the process shows only the first tunable: the proxy's when it
    // started itself again, the user's when it did not.
    assert_eq!(
        tunables_seen_by_the_proxy(Some("glibc.malloc.mxfast=64")).as_deref(),
        Some("glibc.malloc.tcache_count=0")
    );
}

#[test]
fn a_cache_length_the_user_chose_is_left_alone() {
    assert_eq!(
        tunables_seen_by_the_proxy(Some("glibc.malloc.tcache_count=7")).as_deref(),
        Some("glibc.malloc.tcache_count=7")
    );
}
