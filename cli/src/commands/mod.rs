//! One module per `ninf` subcommand, each a `clap` `Args` struct and its `run`.

pub mod alloc;
pub mod call;
pub mod certs;
pub mod chaos;
pub mod dag_bench;
pub mod demo;
pub mod experiment;
pub mod gang_alloc;
pub mod gang_bench;
pub mod load;
pub mod scale;
pub mod sim;
pub mod status;
pub mod testbed;
pub mod up;

use std::path::PathBuf;

/// The metaserver's predictors by the names `--predictor` takes (docs/scheduling.md).
const PREDICTORS: [&str; 3] = ["latest", "forecast", "capacity"];

/// The folder of this program, where the other grid binaries are installed beside it.
fn bin_dir() -> anyhow::Result<PathBuf> {
    Ok(std::env::current_exe()?
        .parent()
        .map(std::path::Path::to_path_buf)
        .unwrap_or_default())
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}

/// Where a benchmark keeps its files: `--data-dir`, or a fresh folder for this run.
fn bench_dir(data_dir: Option<PathBuf>) -> PathBuf {
    data_dir
        .unwrap_or_else(|| std::env::temp_dir().join(format!("ninf-bench-{}", std::process::id())))
}

/// For the commands that start grids of processes: SIGINT or SIGTERM stops every process
/// they started (5 s to stop gracefully, then SIGKILL) before `ninf` exits with 130.
fn end_children_on_signal() -> anyhow::Result<()> {
    ninf_grid::processes::end_children_on_signal(std::time::Duration::from_secs(5))
}
