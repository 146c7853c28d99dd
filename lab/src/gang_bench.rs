//! `ninf gang-bench` and `ninf gang-alloc`: measurements of the gang scheduler on a real
//! compute server of this machine, with its node agents as processes.
//!
//! - The overhead benchmark runs K CPU-bound jobs, each using every processor (`pspin`), once
//!   one after another (T_batch) and once all at the same time, time-shared by the gang
//!   scheduler (T_gang): O = (T_gang − T_batch) / T_batch. It also reports switches, table
//!   messages, clock checks and the switch skew between a job's processes.
//! - The allocation benchmark submits a few hundred short jobs of random sizes with Poisson
//!   arrivals to a space-shared table (one row, as in the FPMPFS paper) under one admission policy,
//!   and reports utilisation and mean response time.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use ninf::{Arg, NinfClient};
pub use ninf_compute_server::config::{BrokerPlacement, RankPlacement};
use ninf_compute_server::config::{GangSettings, ModuleConfig};
use ninf_compute_server::{ServerConfig, ServerState};
use ninf_grid::processes::Started;
use ninf_proto::v1;
use ninf_sim::SlotEnd;
use ninf_sim::random::Random;
use serde::Serialize;

use crate::gang_nodes::{AgentSpec, NodeBed};

/// A compute server serving `selftest` inside this process (its executables and agents are
/// processes), for benchmarks.
pub struct BenchServer {
    pub address: String,
    pub state: Arc<ServerState>,
    running: ninf_compute_server::Running,
    /// Node agents started outside the server (in the node testbed's namespaces).
    agents: Vec<Started>,
}

impl BenchServer {
    pub async fn start(
        processors: u32,
        gang: GangSettings,
        data_dir: &Path,
    ) -> anyhow::Result<BenchServer> {
        let server = BenchServer::bind(processors, gang, data_dir, "127.0.0.1:0").await?;
        server.wait_for_agents().await?;
        Ok(server)
    }

    /// A server whose node agents run in the node testbed, one per node, each with its
    /// clock `offset_ms` × (k + 1) ahead of the machine's.
    pub async fn start_on_nodes(
        processors: u32,
        gang: GangSettings,
        data_dir: &Path,
        bed: &NodeBed,
        offset_ms: f64,
    ) -> anyhow::Result<BenchServer> {
        let preempt = gang.network_preemption;
        let columns = gang.node_columns(processors);
        let listen = format!("{}:0", bed.server_host());
        let mut server = BenchServer::bind(processors, gang, data_dir, &listen).await?;
        let program = std::env::current_exe()?
            .parent()
            .context("the program has no folder")?
            .join("ninf-gang-agent");
        for (k, columns) in columns.iter().enumerate() {
            server.agents.push(bed.start_agent(&AgentSpec {
                program: &program,
                node: k,
                columns,
                server: &server.address,
                offset_ms: offset_ms * (k as f64 + 1.0),
                preempt,
            })?);
        }
        server.wait_for_agents().await?;
        Ok(server)
    }

    async fn bind(
        processors: u32,
        gang: GangSettings,
        data_dir: &Path,
        listen: &str,
    ) -> anyhow::Result<BenchServer> {
        let exe = std::env::current_exe()?;
        let bin = exe.parent().context("the program has no folder")?;
        std::fs::create_dir_all(data_dir)
            .with_context(|| format!("cannot create {}", data_dir.display()))?;
        let idl = data_dir.join("selftest.idl");
        std::fs::write(&idl, ninf_routines::idl::SELFTEST)?;
        let config = ServerConfig {
            processors: Some(processors as usize),
            modules: vec![ModuleConfig {
                executable: bin.join("ninf-exec-selftest"),
                idl,
            }],
            gang,
            listen: listen.into(),
            ..ServerConfig::default()
        };
        let info = v1::ServerInfo::default();
        let running = ninf_compute_server::bind(&config, info)
            .await
            .context("starting the benchmark server")?;
        Ok(BenchServer {
            address: running.address.clone(),
            state: running.state.clone(),
            running,
            agents: Vec::new(),
        })
    }

    /// Waits until every node agent has attached and applied a table.
    async fn wait_for_agents(&self) -> anyhow::Result<()> {
        let expected = self
            .state
            .gang
            .settings
            .node_columns(self.state.gang.processors)
            .len();
        for _ in 0..500 {
            let status = self.state.gang.status();
            if status.nodes.len() == expected && status.nodes.iter().all(|n| n.applied_version > 0)
            {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        anyhow::bail!("the node agents did not attach within 10 s")
    }

    pub async fn stop(self) {
        // Agents first, gently: each continues the processes it holds stopped.
        for agent in &self.agents {
            ninf_compute_server::gang::signal(agent.0.id(), libc::SIGTERM);
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        drop(self.agents);
        if let Err(e) = self.running.stop().await {
            tracing::error!(error = %e, "benchmark server stopped");
        }
    }
}

/// One setting of the overhead benchmark.
#[derive(Debug, Clone)]
pub struct OverheadOptions {
    pub quantum_ms: f64,
    pub jobs: usize,
    /// Seconds one job takes alone (the work is calibrated to it).
    pub job_seconds: f64,
    /// Processors of the server (default: the machine's cores).
    pub processors: Option<u32>,
    /// Node agents (default: one per processor, so a job's processes span agents).
    pub nodes: Option<usize>,
    /// Batch and gang runs alternate this many times; times are medians.
    pub trials: usize,
    pub data_dir: PathBuf,
    pub workload: Workload,
    /// Where the ranks' messages go: the server's broker or the nodes' brokers.
    pub broker: BrokerPlacement,
    /// Who starts the ranks: the server, or the agent of each rank's node.
    pub ranks: RankPlacement,
    pub network_preemption: bool,
    /// Node k's agent clock is (k + 1) × this ahead of the machine's.
    pub clock_offset_ms: f64,
}

/// What each job does.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "lowercase", tag = "kind")]
pub enum Workload {
    /// CPU only (`pspin`): every rank burns its share, then all meet at a barrier.
    Spin,
    /// Communicating (`pexchange`): rounds of computing, then sending `bytes` to the next
    /// rank and receiving from the previous, every message checked.
    Exchange { bytes: u32, rounds_per_second: f64 },
}

#[derive(Debug, Clone, Serialize)]
pub struct OverheadResult {
    pub quantum_ms: f64,
    pub jobs: usize,
    pub processors: u32,
    pub nodes: usize,
    pub trials: usize,
    /// Iterations of `pspin` per rank in each job.
    pub work: i64,
    /// Mean time of one job run alone (from the batch run).
    pub solo_s: f64,
    pub t_batch_s: f64,
    pub t_gang_s: f64,
    pub overhead: f64,
    /// Mean time from submission to completion of a job under time sharing, over its solo
    /// time (2 jobs: ideally a little under 2.0, as the first ends a slot early).
    pub slowdown: f64,
    /// The same for the last job to finish (2 jobs: ideally 2.0).
    pub slowdown_max: f64,
    /// Boundaries at which the agents stopped or continued processes (summed over agents).
    pub switches: u64,
    /// Time tables received by the agents (summed over agents).
    pub table_messages: u64,
    pub table_messages_per_switch: f64,
    /// What a design sending one message per switch to each agent would have sent.
    pub centralised_messages: u64,
    pub clock_checks: u64,
    pub clock_checks_per_hour: f64,
    pub skew_samples: u64,
    pub skew_p50_us: f64,
    pub skew_p99_us: f64,
    pub skew_max_us: f64,
    /// Continues caused by a table arriving mid-slot, not by a boundary.
    pub install_skew_samples: u64,
    pub install_skew_p99_us: f64,
    pub workload: Workload,
    pub broker: String,
    /// Who started the ranks: `server` or `nodes` (their agents).
    pub ranks: String,
    /// Ranks the node agents started, over the whole run (the calibrating calls too).
    pub ranks_run_by_agents: u64,
    /// Whether the nodes ran in the node testbed's namespaces (else on loopback).
    pub namespaces: bool,
    pub clock_offset_ms: f64,
    /// Rounds of each `pexchange` job, and the messages its ranks checked in all runs.
    pub rounds: u64,
    pub messages_checked: u64,
    /// What the node brokers handed to ranks during the timed runs (zero with the server's
    /// broker).
    pub network: NetworkFigures,
    /// With --namespaces: bytes the router carried into the nodes' sites during the timed
    /// runs (the messages between nodes, plus the agents' gRPC with the server).
    pub routed_bytes: u64,
}

/// The node brokers' ledgers, summed over nodes, over the timed runs.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct NetworkFigures {
    pub preempts: bool,
    pub messages: u64,
    pub bytes: u64,
    pub messages_outside_slot: u64,
    pub bytes_outside_slot: u64,
    pub messages_held: u64,
    pub most_held: u64,
}

fn ranks_run(status: &v1::GangStatus) -> u64 {
    status.nodes.iter().map(|n| n.ranks_run).sum()
}

fn network(status: &v1::GangStatus) -> NetworkFigures {
    status
        .nodes
        .iter()
        .filter_map(|n| n.network)
        .fold(NetworkFigures::default(), |sum, l| NetworkFigures {
            preempts: sum.preempts || l.preempts,
            messages: sum.messages + l.messages,
            bytes: sum.bytes + l.bytes,
            messages_outside_slot: sum.messages_outside_slot + l.messages_outside_slot,
            bytes_outside_slot: sum.bytes_outside_slot + l.bytes_outside_slot,
            messages_held: sum.messages_held + l.messages_held,
            most_held: sum.most_held.max(l.most_held),
        })
}

impl NetworkFigures {
    fn since(self, before: NetworkFigures) -> NetworkFigures {
        NetworkFigures {
            preempts: self.preempts,
            messages: self.messages.saturating_sub(before.messages),
            bytes: self.bytes.saturating_sub(before.bytes),
            messages_outside_slot: self
                .messages_outside_slot
                .saturating_sub(before.messages_outside_slot),
            bytes_outside_slot: self
                .bytes_outside_slot
                .saturating_sub(before.bytes_outside_slot),
            messages_held: self.messages_held.saturating_sub(before.messages_held),
            most_held: self.most_held,
        }
    }
}

/// One job of the benchmark: its routine, its arguments, and the messages it checks.
#[derive(Debug, Clone, Copy)]
struct JobSpec {
    processors: u32,
    work: i64,
    exchange: Option<(u32, i32)>,
}

impl JobSpec {
    /// Runs the job; returns its time and the messages its ranks checked.
    async fn run(self, client: &NinfClient) -> anyhow::Result<(f64, u64)> {
        let Some((bytes, rounds)) = self.exchange else {
            return Ok((spin(client, self.processors, self.work).await?, 0));
        };
        let start = Instant::now();
        let mut checked = vec![0i32; 1];
        let per_round = self.work / i64::from(rounds.max(1));
        client
            .call(
                "pexchange",
                &mut [
                    Arg::Integer(i64::from(self.processors)),
                    Arg::Integer(i64::from(rounds)),
                    Arg::Integer(i64::from(bytes)),
                    Arg::Integer(per_round),
                    Arg::from(&mut checked),
                ],
            )
            .await
            .map_err(|e| anyhow::anyhow!("pexchange: {e}"))?;
        let expected = i64::from(self.processors) * i64::from(rounds);
        if i64::from(checked[0]) != expected {
            anyhow::bail!(
                "pexchange: the ranks checked {} messages, expected {expected}",
                checked[0]
            );
        }
        Ok((start.elapsed().as_secs_f64(), expected as u64))
    }
}

fn counters(status: &v1::GangStatus) -> (u64, u64, u64) {
    status.nodes.iter().fold((0, 0, 0), |(s, t, c), n| {
        (s + n.switches, t + n.table_messages, c + n.clock_checks)
    })
}

async fn spin(client: &NinfClient, processors: u32, work: i64) -> anyhow::Result<f64> {
    let start = Instant::now();
    client
        .call(
            "pspin",
            &mut [Arg::Integer(i64::from(processors)), Arg::Integer(work)],
        )
        .await
        .map_err(|e| anyhow::anyhow!("pspin: {e}"))?;
    Ok(start.elapsed().as_secs_f64())
}

/// Runs the overhead benchmark; with `bed`, the server's nodes are the node testbed's
/// namespaces (call it from [`NodeBed::in_server_namespace`]).
pub async fn overhead(
    options: OverheadOptions,
    bed: Option<Arc<NodeBed>>,
) -> anyhow::Result<OverheadResult> {
    let processors = options
        .processors
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |p| p.get()) as u32);
    let nodes = bed
        .as_ref()
        .map_or(options.nodes.unwrap_or(processors as usize), |b| b.nodes)
        .max(1);
    let jobs = options.jobs.max(1);
    let gang = GangSettings {
        quantum_ms: options.quantum_ms,
        max_rows: jobs,
        nodes,
        broker: options.broker,
        ranks: options.ranks,
        network_preemption: options.network_preemption,
        agent_clock_offset_ms: options.clock_offset_ms,
        spawn_agents: bed.is_none(),
        ..GangSettings::default()
    };
    let server = match &bed {
        Some(bed) => {
            BenchServer::start_on_nodes(
                processors,
                gang,
                &options.data_dir,
                bed,
                options.clock_offset_ms,
            )
            .await?
        }
        None => BenchServer::start(processors, gang, &options.data_dir).await?,
    };
    let client = NinfClient::connect(&server.address).await?;
    let started = Instant::now();

    let job = calibrated_job(&client, processors, &options).await?;
    let (work, exchange) = (job.work, job.exchange);

    let before = server.state.gang.status();
    server.state.gang.reset_skews();
    let (switches0, tables0, checks0) = counters(&before);
    let network0 = network(&before);
    let routed0 = match &bed {
        Some(bed) => bed.bytes_into_nodes()?,
        None => 0,
    };
    let trials = options.trials.max(1);
    let trial = trials_of(&client, job, jobs, trials).await?;
    let (t_batch, t_gang, checked) = (trial.t_batch, trial.t_gang, trial.checked);
    let routed = match &bed {
        Some(bed) => bed.bytes_into_nodes()?.saturating_sub(routed0),
        None => 0,
    };
    // Let the agents' next reports (once a second) carry the last switches and skews.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let after = server.state.gang.status();
    let (switches1, tables1, checks1) = counters(&after);
    let elapsed_hours = started.elapsed().as_secs_f64() / 3600.0;
    server.stop().await;

    let network = network(&after).since(network0);
    if network.preempts && network.bytes_outside_slot > 0 {
        anyhow::bail!(
            "network preemption failed: {} messages ({} bytes) were handed to a job outside its slots",
            network.messages_outside_slot,
            network.bytes_outside_slot
        );
    }
    let solo = t_batch / jobs as f64;
    let switches = switches1.saturating_sub(switches0);
    let table_messages = tables1.saturating_sub(tables0);
    Ok(OverheadResult {
        quantum_ms: options.quantum_ms,
        jobs,
        processors,
        nodes,
        trials,
        work,
        solo_s: solo,
        t_batch_s: t_batch,
        t_gang_s: t_gang,
        overhead: (t_gang - t_batch) / t_batch,
        slowdown: trial.slowdown,
        slowdown_max: trial.slowdown_max,
        switches,
        table_messages,
        table_messages_per_switch: if switches == 0 {
            0.0
        } else {
            table_messages as f64 / switches as f64
        },
        centralised_messages: switches,
        clock_checks: checks1.saturating_sub(checks0),
        clock_checks_per_hour: checks1 as f64 / elapsed_hours.max(1e-9),
        skew_samples: after.skew_samples,
        skew_p50_us: after.skew_p50_us,
        skew_p99_us: after.skew_p99_us,
        skew_max_us: after.skew_max_us,
        install_skew_samples: after.install_skew_samples,
        install_skew_p99_us: after.install_skew_p99_us,
        workload: options.workload,
        broker: format!("{:?}", options.broker).to_lowercase(),
        ranks: match options.ranks {
            RankPlacement::Server => "server".into(),
            RankPlacement::Nodes => "nodes".into(),
        },
        ranks_run_by_agents: ranks_run(&after),
        namespaces: bed.is_some(),
        clock_offset_ms: options.clock_offset_ms,
        rounds: exchange.map_or(0, |(_, rounds)| rounds as u64),
        messages_checked: checked,
        network,
        routed_bytes: routed,
    })
}

/// The benchmark's job, its work calibrated so that it takes about `job_seconds` alone.
async fn calibrated_job(
    client: &NinfClient,
    processors: u32,
    options: &OverheadOptions,
) -> anyhow::Result<JobSpec> {
    spin(client, processors, 1_000_000).await?;
    let probe = 50_000_000;
    let took = spin(client, processors, probe).await?;
    let work = ((probe as f64) * options.job_seconds / took.max(1e-3)).max(1000.0) as i64;
    let exchange = match options.workload {
        Workload::Spin => None,
        Workload::Exchange {
            bytes,
            rounds_per_second,
        } => Some((
            bytes.max(16),
            (options.job_seconds * rounds_per_second).clamp(1.0, 1e8) as i32,
        )),
    };
    Ok(JobSpec {
        processors,
        work,
        exchange,
    })
}

/// The medians over the trials: the batch's and the gang's times, and the jobs' slowdowns
/// under the gang (mean and worst, against a job alone).
struct Trials {
    t_batch: f64,
    t_gang: f64,
    slowdown: f64,
    slowdown_max: f64,
    /// Messages the jobs' ranks checked, over every trial.
    checked: u64,
}

/// Runs `jobs` copies of `job` one after another, then all at once, `trials` times.
async fn trials_of(
    client: &NinfClient,
    job: JobSpec,
    jobs: usize,
    trials: usize,
) -> anyhow::Result<Trials> {
    let (mut batches, mut gangs, mut means, mut maxima) = (vec![], vec![], vec![], vec![]);
    let mut checked = 0;
    for _ in 0..trials {
        let batch_start = Instant::now();
        for _ in 0..jobs {
            checked += job.run(client).await?.1;
        }
        let t_batch = batch_start.elapsed().as_secs_f64();
        let gang_start = Instant::now();
        let mut tasks = Vec::new();
        for _ in 0..jobs {
            let client = client.clone();
            tasks.push(tokio::spawn(async move { job.run(&client).await }));
        }
        let mut job_times = Vec::new();
        for task in tasks {
            let (time, messages) = task.await??;
            job_times.push(time);
            checked += messages;
        }
        let t_gang = gang_start.elapsed().as_secs_f64();
        let solo = t_batch / jobs as f64;
        batches.push(t_batch);
        gangs.push(t_gang);
        means.push(job_times.iter().sum::<f64>() / job_times.len() as f64 / solo);
        maxima.push(job_times.iter().copied().fold(0.0, f64::max) / solo);
    }
    Ok(Trials {
        t_batch: median(&batches),
        t_gang: median(&gangs),
        slowdown: median(&means),
        slowdown_max: median(&maxima),
        checked,
    })
}

fn median(values: &[f64]) -> f64 {
    ninf_scheduling::stats::median(values.to_vec()).unwrap_or(0.0)
}

/// How the allocation benchmark's server places jobs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum AllocationPolicy {
    /// Space sharing (one row) under an admission policy of the FPMPFS paper.
    Admission(ninf_gang::Policy),
    /// Time-space sharing by the gang thesis's Distributed Queue Tree (binary partitions).
    Dqt {
        allocation: ninf_gang::Allocation,
        fair: bool,
    },
}

impl std::str::FromStr for AllocationPolicy {
    type Err = String;
    /// `fcfs`, `fpfs`, `fpmpfs`, `dqt-ALLOCATION` or `fair-dqt-ALLOCATION`.
    fn from_str(s: &str) -> Result<AllocationPolicy, String> {
        let (fair, rest) = match s.strip_prefix("fair-") {
            Some(rest) => (true, rest),
            None => (false, s),
        };
        match rest.strip_prefix("dqt-") {
            Some(allocation) => Ok(AllocationPolicy::Dqt {
                allocation: allocation.parse()?,
                fair,
            }),
            None if !fair => Ok(AllocationPolicy::Admission(s.parse()?)),
            None => Err(format!("unknown policy `{s}` (fair- goes with dqt-...)")),
        }
    }
}

impl AllocationPolicy {
    fn name(self) -> String {
        match self {
            AllocationPolicy::Admission(policy) => format!("{policy:?}").to_lowercase(),
            AllocationPolicy::Dqt { allocation, fair } => format!(
                "{}dqt-{}",
                if fair { "fair-" } else { "" },
                allocation.name()
            ),
        }
    }
}

/// The allocation benchmark's setting.
#[derive(Debug, Clone)]
pub struct AllocationOptions {
    pub policy: AllocationPolicy,
    /// Slot length of the DQT layout, seconds.
    pub quantum: f64,
    pub jobs: usize,
    /// Offered load: mean processor demand × mean run time / (processors × mean interarrival).
    pub load: f64,
    /// Mean run time of a job alone, seconds.
    pub mean_seconds: f64,
    pub processors: Option<u32>,
    pub seed: u64,
    pub data_dir: PathBuf,
}

#[derive(Debug, Clone, Serialize)]
pub struct AllocationResult {
    pub policy: String,
    pub jobs: usize,
    pub processors: u32,
    pub load: f64,
    pub makespan_s: f64,
    /// Processor-seconds of the jobs' run times over processors × makespan.
    pub utilization: f64,
    pub mean_response_s: f64,
    pub mean_wait_s: f64,
    /// The same job stream (arrivals, sizes, nominal run times) through the simulator with
    /// the same policy code: how far the live run is from the model.
    pub sim_utilization: f64,
    pub sim_mean_response_s: f64,
    /// (live − simulated) / simulated mean response time.
    pub response_gap: f64,
}

/// The same stream of jobs (arrival, size, seconds) under the simulator, for the gap
/// between the live server and the model.
fn simulated_outcomes(
    stream: &[(f64, u32, f64)],
    processors: u32,
    options: &AllocationOptions,
) -> anyhow::Result<Vec<ninf_sim::Outcome>> {
    let jobs: Vec<ninf_sim::Job> = stream
        .iter()
        .enumerate()
        .map(|(i, &(arrival, size, seconds))| ninf_sim::Job {
            id: i as u64 + 1,
            submit: arrival,
            run: seconds,
            processors: size,
            requested: seconds,
        })
        .collect();
    let outcomes = match options.policy {
        AllocationPolicy::Admission(_) => {
            let mut policy = ninf_sim::policy_by_name(&options.policy.name(), processors, 600.0)
                .map_err(|e| anyhow::anyhow!(e))?;
            ninf_sim::simulate(&jobs, processors, policy.as_mut())?
        }
        AllocationPolicy::Dqt { allocation, fair } => {
            let config = ninf_gang::DqtConfig::for_processors(processors, 2, allocation, fair)?;
            // The live master starts the next slot as soon as a slot's jobs have all ended.
            ninf_sim::simulate_dqt_with(&jobs, config, options.quantum, SlotEnd::WhenItsJobsEnd)?
                .outcomes
        }
    };
    Ok(outcomes)
}

pub async fn allocation(options: AllocationOptions) -> anyhow::Result<AllocationResult> {
    let processors = options
        .processors
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |p| p.get()) as u32);
    let mut gang = GangSettings {
        max_rows: 1,
        nodes: 1,
        quantum_ms: options.quantum * 1000.0,
        ..GangSettings::default()
    };
    match options.policy {
        AllocationPolicy::Admission(policy) => gang.policy = policy,
        AllocationPolicy::Dqt { allocation, fair } => {
            gang.layout = ninf_compute_server::config::TableLayout::Dqt;
            gang.dqt_allocation = allocation.name().to_string();
            gang.dqt_fair = fair;
        }
    }
    let server = BenchServer::start(processors, gang, &options.data_dir).await?;
    let client = NinfClient::connect(&server.address).await?;
    spin(&client, 1, 1_000_000).await?;
    let probe = 20_000_000;
    let took = spin(&client, 1, probe).await?;
    let per_second = probe as f64 / took.max(1e-3);

    // Sizes uniform over 1..=P, run times exponential, arrivals Poisson at the offered load.
    let mut random = Random::new(options.seed);
    let mean_size = (1.0 + f64::from(processors)) / 2.0;
    let interarrival =
        mean_size * options.mean_seconds / (f64::from(processors) * options.load.max(1e-3));
    let mut at = 0.0;
    let mut stream = Vec::with_capacity(options.jobs);
    for _ in 0..options.jobs {
        at += random.exponential(interarrival);
        let size = random.integer(1, processors);
        let seconds = random.exponential(options.mean_seconds).max(0.005);
        stream.push((at, size.min(processors), seconds));
    }
    let start = Instant::now();
    let mut tasks = Vec::new();
    for &(arrival, size, seconds) in &stream {
        let delay = Duration::from_secs_f64(arrival).saturating_sub(start.elapsed());
        tokio::time::sleep(delay).await;
        let client = client.clone();
        let work = (seconds * per_second) as i64;
        tasks.push(tokio::spawn(async move {
            let submitted = Instant::now();
            let reply = client
                .call_request(v1::CallRequest {
                    function: "pspin".into(),
                    arguments: [i64::from(size), work]
                        .into_iter()
                        .map(|v| v1::CallArgument {
                            source: Some(v1::call_argument::Source::Value(v1::ArgumentValue {
                                value: Some(v1::argument_value::Value::IntValue(v)),
                            })),
                        })
                        .collect(),
                    ..Default::default()
                })
                .await
                .map_err(|e| anyhow::anyhow!("pspin: {e}"))?;
            let timing = reply.timing.unwrap_or_default();
            anyhow::Ok((
                submitted.elapsed().as_secs_f64(),
                timing.queue_seconds,
                timing.compute_seconds,
            ))
        }));
    }
    let mut responses = Vec::new();
    let mut waits = Vec::new();
    let mut busy = 0.0;
    for (task, &(_, size, seconds)) in tasks.into_iter().zip(&stream) {
        let (response, wait, compute) = task.await??;
        responses.push(response);
        waits.push(wait);
        // Time-shared, a call's compute time includes the slots it spent stopped: count
        // its nominal run time instead.
        let ran = match options.policy {
            AllocationPolicy::Admission(_) => compute,
            AllocationPolicy::Dqt { .. } => seconds,
        };
        busy += f64::from(size) * ran;
    }
    let makespan = start.elapsed().as_secs_f64();
    server.stop().await;
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    let policy_name = options.policy.name();
    let outcomes = simulated_outcomes(&stream, processors, &options)?;
    let simulated = ninf_sim::Metrics::of(&outcomes, processors);
    let live_response = mean(&responses);
    Ok(AllocationResult {
        policy: policy_name,
        jobs: options.jobs,
        processors,
        load: options.load,
        makespan_s: makespan,
        utilization: busy / (f64::from(processors) * makespan),
        mean_response_s: live_response,
        mean_wait_s: mean(&waits),
        sim_utilization: simulated.utilization,
        sim_mean_response_s: simulated.mean_response_s,
        response_gap: (live_response - simulated.mean_response_s)
            / simulated.mean_response_s.max(1e-9),
    })
}
