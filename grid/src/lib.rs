//! A whole Ninf grid to run, for `ninf up`, the demo, chaos, tests and benchmarks: the
//! embedded grid in one process ([`embedded`]), grids of real processes ([`processes`]), the
//! seed's workloads as transactions ([`workloads`]), the demo that runs them under several
//! schedulers ([`demo`]) and fault injection ([`chaos`]).

pub mod chaos;
pub mod demo;
pub mod embedded;
pub mod processes;
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
