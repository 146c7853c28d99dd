//! The `ninf` command's library: the embedded local grid ([`embedded`]), the seed's workloads
//! ([`workloads`]), the demo that runs them under several schedulers ([`demo`]), and the
//! shell-friendly call ([`quick_call`]), the gang scheduler's benchmarks ([`gang_bench`]), and
//! the scheduling simulator's front end ([`simulate`]), the testbed ([`testbed`]) and its
//! user-space latency ([`latency`]), the benchmark of the metaserver's
//! schedulers on random task graphs ([`dag_bench`]), and fault injection ([`chaos`]).

pub mod chaos;
pub mod dag_bench;
pub mod demo;
pub mod embedded;
pub mod experiment;
pub mod gang_bench;
pub mod latency;
pub mod processes;
pub mod quick_call;
pub mod simulate;
pub mod testbed;
pub mod workloads;

use std::path::PathBuf;

/// Where `ninf up` keeps its database and `ninf status` looks for a running grid, unless
/// `--data-dir` says otherwise: `$XDG_DATA_HOME/ninf`, `$HOME/.local/share/ninf`, or a folder
/// under the system temporary directory.
pub fn default_data_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("XDG_DATA_HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir).join("ninf");
    }
    if let Some(home) = std::env::var_os("HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(home).join(".local/share/ninf");
    }
    std::env::temp_dir().join("ninf")
}
