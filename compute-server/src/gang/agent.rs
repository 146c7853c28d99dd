//! The node agent (the time-sync paper): it attaches to its server's `GangControl` service, receives a
//! time table whenever jobs arrive or leave, and follows the table's cycle by its own clock,
//! stopping and continuing its node's processes (SIGSTOP/SIGCONT) at slot boundaries and
//! pinning each to its column's core ([`super::cores`]). Its clock's offset from the server's is checked with the
//! adaptive interval of [`ninf_gang::ClockSync`]. It talks to the server only over gRPC, so an
//! agent on another host works the same way; on one machine it runs as a `ninf-gang-agent`
//! process or, failing that, as a thread of the server.
//!
//! The switching itself happens on a dedicated thread with 1 µs timer slack, which sleeps
//! until the next boundary or the next table, whichever comes first.

use std::future::Future;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ninf_gang::{ClockSample, ClockSync, NodeAgent, ProcessSwitch, SyncConfig, TimeTable};
use ninf_proto::net::auth::{AttachToken, Authorized, authorized};
use ninf_proto::v1::{self, gang_control_client::GangControlClient};
use tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::transport::Channel;

use super::clock::{AgentClock, MachineClock, NodeTime, monotonic_ns};
use super::node_broker::{NodeBroker, NodeBrokerError, NodeBrokerOptions};
use super::node_ranks::{NodeRanks, NodeRanksOptions};
use super::wire::table_from_proto;
use ninf_gang::Clock;

/// How one agent runs.
#[derive(Debug, Clone)]
pub struct AgentOptions {
    /// The server's gRPC address, `host:port`.
    pub server: String,
    pub node: String,
    pub columns: Vec<u32>,
    pub pin: bool,
    /// The cores columns are pinned to (column `c` on `cores[c % len]`); empty: the cores
    /// this process may run on ([`super::cores`]).
    pub cores: Vec<u32>,
    pub clock: AgentClock,
    pub sync: SyncConfig,
    /// How often counters and continue times are reported (applied tables at once).
    pub report_interval: Duration,
    /// The grid's token, presented to the server.
    pub token: Option<String>,
    /// TLS material, when the server's port serves TLS.
    pub tls: Option<ninf_proto::net::tls::GridTls>,
    /// Run this node's SPMD broker (the server's `broker = "nodes"`).
    pub broker: Option<NodeBrokerOptions>,
    /// Where the ranks the server sends this node (`ranks = "nodes"`) find their
    /// executables: a directory holding them under the server's file names; `None`: the
    /// server's own paths.
    pub executables: Option<std::path::PathBuf>,
}

#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("cannot reach the server at {server}: {reason}")]
    Connect { server: String, reason: String },
    #[error("the server refused the agent: {0}")]
    Refused(String),
    #[error("the switching thread could not start: {0}")]
    Thread(std::io::Error),
    #[error(transparent)]
    Broker(#[from] NodeBrokerError),
}

/// What the switching thread shares with the reporting task.
#[derive(Default)]
struct Shared {
    applied: u64,
    resumes: Vec<v1::ResumeSample>,
    switches: u64,
    table_messages: u64,
    signal_failures: u64,
}

const MAX_PENDING_RESUMES: usize = 200_000;

enum ThreadCommand {
    Install(TimeTable),
    Stop,
}

/// Runs the agent until the server ends the stream or `shutdown` completes. On the way out
/// every process it stopped is continued, so nothing stays frozen without its agent.
pub async fn run(
    options: AgentOptions,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), AgentError> {
    let channel = connect(&options.server, options.tls.as_ref()).await?;
    // Ranks run on the node carry their calls' arrays over this stream.
    let mut client = GangControlClient::new(authorized(
        channel,
        &AttachToken::new(options.token.as_deref()),
    ))
    .max_decoding_message_size(usize::MAX)
    .max_encoding_message_size(usize::MAX);
    let sync = Arc::new(Mutex::new(ClockSync::new(options.sync)));
    check_clock(&mut client, &options.clock, &sync).await;

    let shared = Arc::new(Mutex::new(Shared::default()));
    let (applied_tx, mut applied_rx) = tokio::sync::mpsc::unbounded_channel::<()>();
    let (commands, thread_rx) = mpsc::channel::<ThreadCommand>();
    let thread = {
        let (options, sync, shared) = (options.clone(), sync.clone(), shared.clone());
        std::thread::Builder::new()
            .name(format!("gang-{}", options.node))
            .spawn(move || switching_thread(options, sync, shared, thread_rx, applied_tx))
            .map_err(AgentError::Thread)?
    };

    let (outgoing, outgoing_rx) = tokio::sync::mpsc::unbounded_channel();
    let broker = match &options.broker {
        Some(broker_options) => {
            let time = NodeTime {
                clock: options.clock,
                sync: sync.clone(),
            };
            Some(NodeBroker::start(broker_options, &options.node, time, outgoing.clone()).await?)
        }
        None => None,
    };
    let ranks = NodeRanks::new(
        NodeRanksOptions {
            executables: options.executables.clone(),
            broker_socket: broker.as_ref().map(|b| b.socket().to_path_buf()),
            keep: options.columns.len(),
        },
        outgoing.clone(),
    );
    let _ = outgoing.send(hello(&options, broker.as_deref()));
    let mut inbound = client
        .attach(UnboundedReceiverStream::new(outgoing_rx))
        .await
        .map_err(|s| AgentError::Refused(s.message().to_string()))?
        .into_inner();
    tracing::info!(node = %options.node, columns = ?options.columns, "node agent attached");

    let report = |shared: &Mutex<Shared>, sync: &Mutex<ClockSync>| {
        report(shared, sync, broker.as_deref(), &ranks)
    };

    let mut ticker = tokio::time::interval(options.report_interval.max(Duration::from_millis(10)));
    tokio::pin!(shutdown);
    let mut failed_check = false;
    loop {
        let next_check = if failed_check {
            Duration::from_secs(1)
        } else {
            let local = ninf_proto::sync::lock(&sync).next_check();
            let machine = options.clock.machine_at(local);
            Duration::from_secs_f64((machine - MachineClock.now()).clamp(0.0, 3600.0))
        };
        tokio::select! {
            message = inbound.message() => match message {
                Ok(Some(command)) => {
                    if !obey(command, broker.as_deref(), &ranks, &commands) {
                        break;
                    }
                }
                Ok(None) => break,
                Err(status) => {
                    // What a server that shuts down or dies looks like from here.
                    tracing::info!(node = %options.node, error = %status.message(), "the server ended the agent's stream");
                    break;
                }
            },
            Some(()) = applied_rx.recv() => {
                while applied_rx.try_recv().is_ok() {}
                let _ = outgoing.send(report(&shared, &sync));
            }
            _ = ticker.tick() => {
                let _ = outgoing.send(report(&shared, &sync));
            }
            _ = tokio::time::sleep(next_check) => {
                failed_check = !check_clock(&mut client, &options.clock, &sync).await;
            }
            _ = &mut shutdown => break,
        }
    }
    let _ = commands.send(ThreadCommand::Stop);
    let _ = tokio::task::spawn_blocking(move || thread.join()).await;
    ranks.shutdown().await;
    Ok(())
}

/// The agent's first message: its node, its columns and its broker.
fn hello(options: &AgentOptions, broker: Option<&NodeBroker>) -> v1::AgentMessage {
    v1::AgentMessage {
        kind: Some(v1::agent_message::Kind::Hello(v1::AgentHello {
            node: options.node.clone(),
            columns: options.columns.clone(),
            broker_socket: broker
                .map(|b| b.socket().display().to_string())
                .unwrap_or_default(),
            broker_address: broker.map(|b| b.address().to_string()).unwrap_or_default(),
        })),
    }
}

/// The agent's report: the table it applied, its switches and clock, its broker's traffic.
fn report(
    shared: &Mutex<Shared>,
    sync: &Mutex<ClockSync>,
    broker: Option<&NodeBroker>,
    ranks: &NodeRanks,
) -> v1::AgentMessage {
    let (checks, drifts, offset) = {
        let s = ninf_proto::sync::lock(sync);
        (s.checks(), s.drifts(), s.offset().unwrap_or(0.0))
    };
    let mut shared = ninf_proto::sync::lock(shared);
    v1::AgentMessage {
        kind: Some(v1::agent_message::Kind::Report(v1::AgentReport {
            applied_version: shared.applied,
            resumes: std::mem::take(&mut shared.resumes),
            table_messages: shared.table_messages,
            switches: shared.switches,
            clock_checks: checks,
            clock_drifts: drifts,
            clock_offset: offset,
            signal_failures: shared.signal_failures,
            network: broker.map(|b| b.ledger()),
            ranks_run: ranks.ranks_run(),
        })),
    }
}

/// Carries out one command of the server; `false` once the switching thread is gone.
fn obey(
    command: v1::AgentCommand,
    broker: Option<&NodeBroker>,
    ranks: &Arc<NodeRanks>,
    commands: &mpsc::Sender<ThreadCommand>,
) -> bool {
    use v1::agent_command::Kind;
    match command.kind {
        Some(Kind::Table(table)) => match table_from_proto(table) {
            Ok(table) => {
                if let Some(broker) = broker {
                    broker.set_table(table.clone());
                }
                return commands.send(ThreadCommand::Install(table)).is_ok();
            }
            Err(e) => tracing::warn!(error = %e, "ignored a malformed time table"),
        },
        Some(Kind::OpenJob(open)) => {
            if let Some(broker) = broker {
                broker.open(open);
            }
        }
        Some(Kind::CloseJob(close)) => {
            ranks.close(close.job);
            if let Some(broker) = broker {
                broker.close(close);
            }
        }
        Some(Kind::RunRank(run)) => ranks.run(run),
        Some(Kind::StartRanks(job)) => ranks.start(job),
        None => {}
    }
    true
}

async fn connect(
    server: &str,
    tls: Option<&ninf_proto::net::tls::GridTls>,
) -> Result<Channel, AgentError> {
    let settings = ninf_proto::net::ConnectionSettings {
        connect_timeout: Duration::from_secs(2),
        ..Default::default()
    };
    let endpoint =
        ninf_proto::net::endpoint(server, tls, settings).map_err(|e| AgentError::Connect {
            server: server.to_string(),
            reason: e.to_string(),
        })?;
    let mut last = String::new();
    // The server may still be starting its listener.
    for _ in 0..50 {
        match endpoint.connect().await {
            Ok(channel) => return Ok(channel),
            Err(e) => last = e.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(AgentError::Connect {
        server: server.to_string(),
        reason: last,
    })
}

/// One clock check of three exchanges; the shortest round trip is kept. `false` if the
/// server could not be asked.
async fn check_clock(
    client: &mut GangControlClient<Authorized>,
    clock: &AgentClock,
    sync: &Mutex<ClockSync>,
) -> bool {
    let mut samples = Vec::with_capacity(3);
    for _ in 0..3 {
        let sent = clock.now();
        match client.clock(v1::ClockRequest {}).await {
            Ok(reply) => samples.push(ClockSample {
                sent,
                master: reply.into_inner().server_seconds,
                received: clock.now(),
            }),
            Err(status) => {
                tracing::debug!(error = %status.message(), "clock check failed");
                break;
            }
        }
    }
    if samples.is_empty() {
        return false;
    }
    if let Some(outcome) = ninf_proto::sync::lock(sync).record(&samples)
        && outcome.drift
    {
        tracing::info!(
            offset_us = outcome.offset * 1e6,
            change_us = outcome.change * 1e6,
            next_check_s = outcome.interval,
            "clock drift corrected"
        );
    }
    true
}

fn switching_thread(
    options: AgentOptions,
    sync: Arc<Mutex<ClockSync>>,
    shared: Arc<Mutex<Shared>>,
    commands: mpsc::Receiver<ThreadCommand>,
    applied: tokio::sync::mpsc::UnboundedSender<()>,
) {
    // SAFETY: PR_SET_TIMERSLACK only changes how precisely this thread's timed sleeps end.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1u64, 0u64, 0u64, 0u64);
    }
    real_time_priority();
    let cores = if options.cores.is_empty() {
        super::cores::allowed()
    } else {
        options.cores.clone()
    };
    let time = NodeTime {
        clock: options.clock,
        sync,
    };
    let master_now = || time.master_now();
    let mut core = NodeAgent::new(options.columns.iter().copied());
    loop {
        let wait = core
            .next_change(master_now())
            .map(|boundary| time.until(boundary));
        let command = match wait {
            Some(wait) => commands.recv_timeout(wait),
            None => commands.recv().map_err(|_| RecvTimeoutError::Disconnected),
        };
        match command {
            Ok(ThreadCommand::Install(table)) => {
                let version = table.version;
                let switch = core.install(table, master_now());
                apply(&options, &cores, &switch, &shared, false);
                {
                    let mut s = ninf_proto::sync::lock(&shared);
                    s.applied = version;
                    s.table_messages = core.counters().table_messages;
                    s.switches = core.counters().switches;
                }
                let _ = applied.send(());
            }
            Err(RecvTimeoutError::Timeout) => {
                if let Some(switch) = core.follow(master_now()) {
                    apply(&options, &cores, &switch, &shared, true);
                    ninf_proto::sync::lock(&shared).switches = core.counters().switches;
                }
            }
            Ok(ThreadCommand::Stop) | Err(RecvTimeoutError::Disconnected) => break,
        }
    }
    for &pid in core.stopped() {
        super::signal(pid, libc::SIGCONT);
    }
}

/// The switching thread must run the moment a boundary comes, even when every core is busy
/// with the jobs it time-shares: ask for a real-time priority (it sleeps nearly all the
/// time, so it cannot starve anyone). Without the privilege it stays a normal thread and
/// switches later under load.
fn real_time_priority() {
    let param = libc::sched_param { sched_priority: 50 };
    // SAFETY: pthread_self is always valid for the calling thread and `param` outlives the
    // call.
    let result =
        unsafe { libc::pthread_setschedparam(libc::pthread_self(), libc::SCHED_FIFO, &param) };
    if result != 0 {
        tracing::info!(
            error = %std::io::Error::from_raw_os_error(result),
            "no real-time priority for the switching thread; switches may lag under load"
        );
    }
}

fn apply(
    options: &AgentOptions,
    cores: &[u32],
    switch: &ProcessSwitch,
    shared: &Mutex<Shared>,
    at_boundary: bool,
) {
    let mut failures = 0;
    if options.pin {
        for &(pid, column) in &switch.pin {
            if let Some(core) = super::cores::core_of(column, cores) {
                super::cores::pin(pid, core);
            }
        }
    }
    for &pid in &switch.stop {
        if !super::signal(pid, libc::SIGSTOP) {
            failures += 1;
        }
    }
    let mut resumed = Vec::with_capacity(switch.resume.len());
    for &(pid, job) in &switch.resume {
        if !super::signal(pid, libc::SIGCONT) {
            failures += 1;
            continue;
        }
        if let Some(job) = job {
            resumed.push(v1::ResumeSample {
                version: switch.version,
                slot: switch.slot,
                job,
                process: pid,
                resumed_ns: monotonic_ns(),
                at_boundary,
            });
        }
    }
    let mut shared = ninf_proto::sync::lock(shared);
    shared.signal_failures += failures;
    if shared.resumes.len() + resumed.len() <= MAX_PENDING_RESUMES {
        shared.resumes.extend(resumed);
    }
}
