//! `ninf demo`: the seed's two workloads under several schedulers on an embedded grid of
//! three servers, with the results checked against a local computation and a table shaped
//! like the metaserver paper's Tables 2-5.

use indicatif::{HumanBytes, ProgressBar, ProgressStyle};
use ninf::grid::{GridClient, Progress};

use crate::workloads::{self, Summary};

/// What the demo runs.
#[derive(Debug, Clone)]
pub struct DemoOptions {
    pub schedulers: Vec<String>,
    pub pairs_n: usize,
    pub cascade_n: usize,
    pub trials: usize,
}

/// Runs every workload under every scheduler through the proxy at `proxy`. Blocking: call it
/// from a thread outside any async runtime.
pub fn run(proxy: &str, options: &DemoOptions) -> anyhow::Result<Vec<Summary>> {
    warm_up(proxy, options)?;
    let mut summaries = Vec::new();
    for scheduler in &options.schedulers {
        let bar = progress_bar(scheduler);
        let grid = GridClient::connect(proxy)?
            .with_scheduler(scheduler)
            .with_progress(follow(bar.clone()));
        // Each trial gets its own seed; every scheduler sees the same seeds.
        let trials = |run: &dyn Fn(u64) -> Result<workloads::WorkloadRun, ninf::CallError>| {
            (0..options.trials as u64)
                .map(run)
                .collect::<Result<Vec<_>, _>>()
        };
        let runs = trials(&|trial| workloads::pairs(&grid, options.pairs_n, 5, 11 + trial))?;
        summaries.push(Summary::of(scheduler, "pairs", options.pairs_n, &runs));
        let runs = trials(&|trial| workloads::cascade(&grid, options.cascade_n, 23 + trial))?;
        summaries.push(Summary::of(scheduler, "cascade", options.cascade_n, &runs));
        bar.finish_and_clear();
    }
    Ok(summaries)
}

/// One transaction of each workload, not reported: the first calls of a fresh grid pay for
/// cold servers (connections, page faults, loading the routines) and would count against
/// whichever scheduler runs first; they also give the metaserver one run of each routine
/// to calibrate its predictions from.
fn warm_up(proxy: &str, options: &DemoOptions) -> anyhow::Result<()> {
    let grid = GridClient::connect(proxy)?;
    if let Some(scheduler) = options.schedulers.first() {
        let grid = grid.with_scheduler(scheduler);
        workloads::pairs(&grid, options.pairs_n, 5, 1)?;
        workloads::cascade(&grid, options.cascade_n, 2)?;
    }
    Ok(())
}

/// A bar on standard error for the transactions run under `scheduler` (drawn only when it is
/// a terminal).
fn progress_bar(scheduler: &str) -> ProgressBar {
    let style = ProgressStyle::with_template("{prefix:>12} [{bar:30}] {pos}/{len} tasks {msg}")
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ");
    ProgressBar::new(0)
        .with_style(style)
        .with_prefix(scheduler.to_string())
}

/// Shows a transaction's progress on `bar`.
fn follow(bar: ProgressBar) -> impl Fn(&Progress) + Send + Sync + 'static {
    move |p| {
        bar.set_length(u64::from(p.tasks_total));
        bar.set_position(u64::from(p.tasks_done));
        let retries = match p.retries {
            0 => String::new(),
            n => format!(", {n} retried"),
        };
        bar.set_message(format!(
            "graph #{}, {} moved{retries}",
            p.graph_id,
            HumanBytes(p.bytes_moved)
        ));
    }
}

/// The tables, as text.
pub fn render(summaries: &[Summary], servers: &[String]) -> String {
    let mut out = String::new();
    out.push_str("Execution, communication and computation time (s), as in the metaserver paper Tables 2-3\n");
    out.push_str(&format!(
        "{:<12} {:<8} {:>5} {:>10} {:>8} {:>10} {:>10} {:>10} {:>10}\n",
        "scheduler", "workload", "n", "exec", "sd", "comm", "comp", "predicted", "max error"
    ));
    for s in summaries {
        out.push_str(&format!(
            "{:<12} {:<8} {:>5} {:>10.3} {:>8.3} {:>10.3} {:>10.3} {:>10.3} {:>10.1e}\n",
            s.scheduler,
            s.workload,
            s.n,
            s.exec_s,
            s.exec_sd_s,
            s.comm_total_s,
            s.comp_total_s,
            s.predicted_s,
            s.max_abs_error
        ));
    }
    out.push_str(
        "\nServer invocation ratio and inter-server communication ratio, as in Tables 4-5\n",
    );
    out.push_str(&format!("{:<12} {:<8}", "scheduler", "workload"));
    for (i, _) in servers.iter().enumerate() {
        out.push_str(&format!(" {:>9}", format!("server {i}")));
    }
    out.push_str(&format!(" {:>13}\n", "inter-server"));
    for s in summaries {
        out.push_str(&format!("{:<12} {:<8}", s.scheduler, s.workload));
        for server in servers {
            let share = s.server_ratio.get(server).copied().unwrap_or(0.0);
            out.push_str(&format!(" {:>8.0}%", share * 100.0));
        }
        out.push_str(&format!(" {:>12.0}%\n", s.inter_server_ratio * 100.0));
    }
    out.push_str(
        "\nPrediction errors, per task (median) and per graph (mean), beside the trials' \
         spread: the errors of the best prediction the same for every trial\n",
    );
    out.push_str(&format!(
        "{:<12} {:<8} {:>9} {:>11} {:>10} {:>12}\n",
        "scheduler", "workload", "per task", "its spread", "per graph", "its spread"
    ));
    for s in summaries {
        out.push_str(&format!(
            "{:<12} {:<8} {:>8.0}% {:>10.0}% {:>9.0}% {:>11.0}%\n",
            s.scheduler,
            s.workload,
            s.prediction_error_median * 100.0,
            s.spread_error_median * 100.0,
            s.graph_prediction_error * 100.0,
            s.graph_spread_error * 100.0
        ));
    }
    out
}
