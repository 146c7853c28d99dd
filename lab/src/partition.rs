//! `ninf experiment partition`: partitions, not only kills. A grid runs in the testbed
//! ([`crate::bed_grid`]) while one server site is cut off again and again: the router drops
//! its traffic both ways, silently, for some seconds, then lets it through again
//! ([`crate::testbed::Testbed::cut`]). The client runs the chaos test's transaction mix
//! meanwhile; calls on the cut site must fail over (the proxy's keepalive notices the silent
//! path), the site rejoins, and every transaction must complete bit-exact with nothing left on
//! the servers.
//!
//! The client part (`ninf partition-client`, hidden) runs inside the client's site and prints
//! its counts as one JSON object.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};

use crate::bed_grid::{Binaries, Settings, start_grid};
use crate::testbed::{Profile, Testbed};

/// What the partition run does.
#[derive(Debug, Clone)]
pub struct PartitionOptions {
    pub profile: String,
    /// Namespace prefix.
    pub prefix: String,
    /// Where `ninf-metaserver`, `ninf-proxy`, `ninf-server` and `ninf` are.
    pub bin_dir: PathBuf,
    pub transactions: usize,
    /// Transactions in flight at once.
    pub concurrency: usize,
    /// The site cut off; default: the first server site.
    pub site: Option<String>,
    /// Seconds of connectivity before each cut.
    pub up_seconds: f64,
    /// Seconds each cut lasts.
    pub cut_seconds: f64,
    /// A factor on the profile's processor slowdowns, so that calls last long enough to be
    /// caught by a cut.
    pub slowdown: f64,
}

/// What the client part counted.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ClientCounts {
    pub completed: usize,
    pub lost: usize,
    pub mismatched: usize,
    pub tasks_retried: u64,
    pub regenerated: u64,
    /// Bytes the servers still held once the cuts were over and the proxy's deletions
    /// were given time to land.
    pub leaked_bytes: u64,
    pub errors: Vec<String>,
}

/// What happened.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct PartitionReport {
    pub profile: String,
    pub site: String,
    pub transactions: usize,
    pub cuts: usize,
    pub cut_seconds: f64,
    pub seconds: f64,
    #[serde(flatten)]
    pub counts: ClientCounts,
}

impl PartitionReport {
    /// Nothing was lost, wrong or left behind.
    pub fn clean(&self) -> bool {
        self.counts.completed == self.transactions
            && self.counts.lost == 0
            && self.counts.mismatched == 0
            && self.counts.leaked_bytes == 0
    }
}

/// The proxy notices a silent path within 3 s (a ping every second, 2 s to answer), and
/// tries a task up to 8 times; the metaserver marks a silent server down after 3 s.
const PROXY_SETTINGS: &str = "probe_seconds = 30.0\nprobe_bytes = 262144\nkeepalive_seconds = 1.0\n\
     keepalive_timeout_seconds = 2.0\nretry_backoff_seconds = 0.2\nretry_backoff_max_seconds = 2.0\n\
     task_retries = 8\njournal = \"off\"\n";
const METASERVER_SETTINGS: &str =
    "heartbeat_seconds = 0.5\nheartbeat_timeout_seconds = 3.0\nnetwork_seconds = 30.0\n";

/// Builds the testbed, starts the grid, runs the client part while cutting the site off
/// and letting it back in turn, and tears everything down.
pub fn run(options: &PartitionOptions) -> anyhow::Result<PartitionReport> {
    let profile = Profile::load(&options.profile)?;
    let site = match &options.site {
        Some(site) if profile.servers().any(|s| &s.name == site) => site.clone(),
        Some(site) => bail!("profile `{}` has no server site `{site}`", profile.name),
        None => match profile.servers().next() {
            Some(s) => s.name.clone(),
            None => bail!("profile `{}` has no server site", profile.name),
        },
    };
    let binaries = Binaries::find(&options.bin_dir)?;
    let bed = Testbed::new(&options.prefix, profile)
        .with_forwarder(&binaries.ninf)
        .up()?;
    let work = crate::bed_grid::work_dir("partition")?;
    let settings = Settings {
        metaserver: METASERVER_SETTINGS,
        proxy: PROXY_SETTINGS,
        slowdown_factor: options.slowdown.max(1.0),
    };
    let outcome = start_grid(&bed, &work, &binaries, &settings)
        .and_then(|grid| run_with_cuts(&bed, &grid, &binaries, options, &site));
    let _ = std::fs::remove_dir_all(&work);
    outcome
}

/// Runs the client part and cuts `site` off in turns until it is done.
fn run_with_cuts(
    bed: &Testbed,
    grid: &crate::bed_grid::BedGrid,
    binaries: &Binaries,
    options: &PartitionOptions,
    site: &str,
) -> anyhow::Result<PartitionReport> {
    let servers: Vec<&str> = grid.servers.iter().map(|(_, a)| a.as_str()).collect();
    let client = bed.profile.client().name.clone();
    let mut command = bed.command(&client, &binaries.ninf);
    command
        .arg("partition-client")
        .args(["--proxy", &grid.proxy, "--metaserver", &grid.metaserver])
        .args(["--servers", &servers.join(",")])
        .args(["--transactions", &options.transactions.to_string()])
        .args(["--concurrency", &options.concurrency.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    let started = Instant::now();
    let mut child = command.spawn().context("cannot start the client part")?;
    let mut cuts = 0;
    while child.try_wait()?.is_none() {
        if wait_for_exit(&mut child, options.up_seconds)? {
            break;
        }
        bed.cut(site)?;
        cuts += 1;
        tracing::info!(site, cut = cuts, "cut the site off");
        let cut_done = wait_for_exit(&mut child, options.cut_seconds);
        bed.heal()?;
        if cut_done? {
            break;
        }
    }
    let output = child.wait_with_output()?;
    if !output.status.success() {
        bail!("the client part failed ({})", output.status);
    }
    let text = String::from_utf8_lossy(&output.stdout);
    let counts: ClientCounts = serde_json::from_str(text.trim())
        .with_context(|| format!("bad client report `{}`", text.trim()))?;
    Ok(PartitionReport {
        profile: bed.profile.name.clone(),
        site: site.to_string(),
        transactions: options.transactions,
        cuts,
        cut_seconds: options.cut_seconds,
        seconds: started.elapsed().as_secs_f64(),
        counts,
    })
}

/// Waits up to `seconds` for `child` to exit; true if it did.
fn wait_for_exit(child: &mut std::process::Child, seconds: f64) -> anyhow::Result<bool> {
    let until = Instant::now() + Duration::from_secs_f64(seconds.max(0.0));
    while Instant::now() < until {
        if child.try_wait()?.is_some() {
            return Ok(true);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(child.try_wait()?.is_some())
}

/// The client part, inside the client's site: waits for the servers, runs the transactions,
/// then waits up to 30 s for the servers' storage to drain, and prints its counts.
pub fn client(
    proxy: &str,
    metaserver: &str,
    servers: &[String],
    transactions: usize,
    concurrency: usize,
) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(ninf_grid::chaos::wait_until_up(metaserver, servers.len()))?;
    let report = ninf_grid::chaos::run_transactions(
        proxy,
        ninf_grid::chaos::Quota::exactly(transactions),
        concurrency,
    );
    let mut leaked_bytes = u64::MAX;
    for _ in 0..60 {
        leaked_bytes = runtime.block_on(ninf_grid::chaos::stored_bytes(servers))?;
        if leaked_bytes == 0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let counts = ClientCounts {
        completed: report.completed,
        lost: report.lost,
        mismatched: report.mismatched,
        tasks_retried: report.tasks_retried,
        regenerated: report.regenerated,
        leaked_bytes,
        errors: report.errors,
    };
    println!("{}", serde_json::to_string(&counts)?);
    Ok(())
}

/// The report as text.
pub fn render(report: &PartitionReport) -> String {
    let c = &report.counts;
    let mut out = format!(
        "profile          {}\nsite cut off     {} ({} cuts of {:.1} s)\ntransactions     {}\ncompleted        {}\ntasks_retried    {}\nregenerated      {}\nlost             {}\nmismatched       {}\nleaked_bytes     {}\nseconds          {:.1}\n",
        report.profile,
        report.site,
        report.cuts,
        report.cut_seconds,
        report.transactions,
        c.completed,
        c.tasks_retried,
        c.regenerated,
        c.lost,
        c.mismatched,
        c.leaked_bytes,
        report.seconds
    );
    for e in &c.errors {
        out.push_str(&format!("error: {e}\n"));
    }
    out
}
