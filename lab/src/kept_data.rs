//! `ninf experiment kept-data`: factor once, solve many across the testbed's links (issue 61's
//! benchmark where the issue means it: data that would otherwise cross a network each time).
//! A grid runs in the testbed ([`crate::bed_grid`]: the proxy in the client's site, each server
//! in its own); the client part runs [`ninf_grid::workloads::factor_solves`] with the matrix
//! kept on the grid and with the factors sent with every solve, in turn, and prints the times.
//!
//! The client part (`ninf kept-data-client`, hidden) runs inside the client's site and prints
//! its figures as one JSON object.

use std::process::Stdio;

use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};

use crate::bed_grid::{BedOptions, Binaries, Settings, run_in_testbed};
use crate::testbed::Testbed;

/// What the run does.
#[derive(Debug, Clone)]
pub struct KeptDataOptions {
    pub bed: BedOptions,
    /// The matrix's order.
    pub n: usize,
    pub solves: usize,
    pub trials: usize,
}

/// What the client part measured: seconds per trial, kept and resent, and the largest
/// difference of any solution from the local computation's.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ClientFigures {
    pub kept_seconds: Vec<f64>,
    pub resent_seconds: Vec<f64>,
    pub max_abs_error: f64,
}

/// What happened: the client's figures with their medians and the ratio.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct KeptDataReport {
    pub profile: String,
    pub n: usize,
    pub solves: usize,
    pub kept_median_seconds: f64,
    pub resent_median_seconds: f64,
    /// Resent over kept: how many times faster keeping the matrix is.
    pub speedup: f64,
    #[serde(flatten)]
    pub figures: ClientFigures,
}

/// The metaserver and proxy measure the links soon, so the predictor weighs transfers.
const PROXY_SETTINGS: &str = "probe_seconds = 5.0\nprobe_bytes = 1048576\njournal = \"off\"\n";
const METASERVER_SETTINGS: &str = "heartbeat_seconds = 0.5\nnetwork_seconds = 5.0\n";

/// Builds the testbed, starts the grid, runs the client part and tears everything down.
pub fn run(options: &KeptDataOptions) -> anyhow::Result<KeptDataReport> {
    let settings = Settings::lines(METASERVER_SETTINGS, PROXY_SETTINGS);
    run_in_testbed(&options.bed, "kept-data", &settings, |run| {
        run_client(run.bed, &run.grid, run.binaries, options)
    })
}

fn run_client(
    bed: &Testbed,
    grid: &crate::bed_grid::BedGrid,
    binaries: &Binaries,
    options: &KeptDataOptions,
) -> anyhow::Result<KeptDataReport> {
    let client = bed.profile.client().name.clone();
    let mut command = bed.command(&client, &binaries.ninf);
    command
        .arg("kept-data-client")
        .args(["--proxy", &grid.proxy, "--metaserver", &grid.metaserver])
        .args(["--servers", &grid.servers.len().to_string()])
        .args(["--n", &options.n.to_string()])
        .args(["--solves", &options.solves.to_string()])
        .args(["--trials", &options.trials.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    let output = command.output().context("cannot start the client part")?;
    if !output.status.success() {
        bail!("the client part failed ({})", output.status);
    }
    let text = String::from_utf8_lossy(&output.stdout);
    let figures: ClientFigures = serde_json::from_str(text.trim())
        .with_context(|| format!("bad client report `{}`", text.trim()))?;
    let kept = median(&figures.kept_seconds);
    let resent = median(&figures.resent_seconds);
    Ok(KeptDataReport {
        profile: bed.profile.name.clone(),
        n: options.n,
        solves: options.solves,
        kept_median_seconds: kept,
        resent_median_seconds: resent,
        speedup: resent / kept,
        figures,
    })
}

/// The client part, inside the client's site: waits for the servers and a measured network,
/// then runs kept and resent in turn, `trials` times each, and prints the figures.
pub fn client(
    proxy: &str,
    metaserver: &str,
    servers: usize,
    (n, solves, trials): (usize, usize, usize),
) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(ninf_grid::chaos::wait_until_up(metaserver, servers))?;
    // The proxy's first probes of the links (probe_seconds above), so placements weigh them.
    std::thread::sleep(std::time::Duration::from_secs(6));
    let grid = ninf::grid::GridClient::connect(proxy)?;
    let mut figures = ClientFigures::default();
    for trial in 0..trials {
        for kept in [true, false] {
            let seed = 61 + trial as u64;
            let (seconds, error) =
                ninf_grid::workloads::factor_solves(&grid, n, solves, kept, seed)?;
            figures.max_abs_error = figures.max_abs_error.max(error);
            if kept {
                figures.kept_seconds.push(seconds);
            } else {
                figures.resent_seconds.push(seconds);
            }
        }
    }
    println!("{}", serde_json::to_string(&figures)?);
    Ok(())
}

fn median(values: &[f64]) -> f64 {
    ninf_scheduling::stats::median(values.to_vec()).unwrap_or(f64::NAN)
}

/// The report as text.
pub fn render(report: &KeptDataReport) -> String {
    format!(
        "profile          {}\nworkload         dgefa n={} then {} dgesl at once\nkept (median)    {:.3} s\nresent (median)  {:.3} s\nkept is faster   {:.1}x\nmax_abs_error    {:e}\n",
        report.profile,
        report.n,
        report.solves,
        report.kept_median_seconds,
        report.resent_median_seconds,
        report.speedup,
        report.figures.max_abs_error
    )
}
