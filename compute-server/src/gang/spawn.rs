//! What a server starts for gang scheduling: one node agent per node (a `ninf-gang-agent`
//! process, or a thread of this one), and the watchdog that kills deadlocked jobs.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::master::GangMaster;
use super::node_broker::NodeBrokerOptions;
use super::signal::signal;
use super::{agent, clock};
use crate::config::{BrokerPlacement, GangSettings};

/// Numbers as `ninf-gang-agent` takes a list: `0,1,2`.
fn comma_list(numbers: &[u32]) -> String {
    numbers
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// The node agents a server started; dropping it stops them.
pub struct Agents {
    processes: Vec<tokio::process::Child>,
    threads: Vec<tokio::sync::oneshot::Sender<()>>,
}

impl Agents {
    /// Stops every agent (each continues the processes it had stopped on the way out).
    pub async fn stop(mut self) {
        for child in &mut self.processes {
            if let Some(pid) = child.id() {
                signal(pid, libc::SIGTERM);
            }
        }
        for child in &mut self.processes {
            if tokio::time::timeout(Duration::from_secs(2), child.wait())
                .await
                .is_err()
            {
                let _ = child.start_kill();
            }
        }
        for stop in self.threads.drain(..) {
            let _ = stop.send(());
        }
    }
}

/// Where `ninf-gang-agent` is: configured, next to this program, or (for test binaries in
/// `target/<profile>/deps`) one folder up.
fn agent_executable(settings: &GangSettings) -> Option<PathBuf> {
    if let Some(path) = &settings.agent_executable {
        return path.is_file().then(|| path.clone());
    }
    let exe = std::env::current_exe().ok()?;
    let dir = exe.parent()?;
    [dir.to_path_buf(), dir.parent()?.to_path_buf()]
        .into_iter()
        .map(|d| d.join("ninf-gang-agent"))
        .find(|p| p.is_file())
}

/// What node agents present to the server's gang service: agents in this process get the
/// token, agent processes the file holding it (not the token itself, which their command
/// line would show to everyone).
#[derive(Debug, Clone, Default)]
pub struct AgentCredentials {
    pub token: Option<String>,
    pub token_file: Option<std::path::PathBuf>,
    /// The same for TLS: the material for threads, the files for processes.
    pub tls: Option<ninf_proto::net::tls::GridTls>,
    pub tls_files: Option<ninf_proto::net::tls::TlsFiles>,
}

/// Starts one agent per node for the server at `server` (`host:port`).
pub fn spawn_agents(
    settings: &GangSettings,
    processors: u32,
    server: &str,
    credentials: AgentCredentials,
) -> Agents {
    let mut agents = Agents {
        processes: Vec::new(),
        threads: Vec::new(),
    };
    let executable = settings
        .agent_processes
        .then(|| agent_executable(settings))
        .flatten();
    if settings.agent_processes && executable.is_none() {
        tracing::warn!(
            "ninf-gang-agent not found next to this program; running node agents as threads"
        );
    }
    if !settings.spawn_agents {
        tracing::info!("node agents are started elsewhere (spawn_agents = false)");
        return agents;
    }
    let sync = settings.sync();
    let broker = (settings.broker == BrokerPlacement::Nodes).then_some(NodeBrokerOptions {
        listen: settings.node_broker_listen,
        advertise: None,
        preempt: settings.network_preemption,
    });
    for (k, columns) in settings.node_columns(processors).into_iter().enumerate() {
        let node = format!("node-{k}");
        if let Some(exe) = &executable {
            let mut command = agent_command(exe, settings, server, &node, k, &columns);
            credentials.add_to(&mut command);
            if let Some(broker) = &broker {
                command
                    .arg("--broker-listen")
                    .arg(broker.listen.to_string());
                if !broker.preempt {
                    command.arg("--no-network-preemption");
                }
            }
            match command.spawn() {
                Ok(child) => {
                    agents.processes.push(child);
                    continue;
                }
                Err(e) => {
                    tracing::warn!(error = %e, path = %exe.display(), "cannot start ninf-gang-agent; running the agent as a thread")
                }
            }
        }
        let options = agent::AgentOptions {
            server: server.to_string(),
            node,
            columns,
            pin: settings.pin,
            cores: settings.cores.clone(),
            clock: clock::AgentClock {
                offset: settings.agent_clock_offset_ms * 1e-3 * (k as f64 + 1.0),
                rate_ppm: settings.agent_clock_rate_ppm * (k as f64 + 1.0),
            },
            sync,
            report_interval: Duration::from_secs(1),
            token: credentials.token.clone(),
            tls: credentials.tls.clone(),
            broker: broker.clone(),
            executables: None,
        };
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(async move {
            let shutdown = async {
                let _ = stopped.await;
            };
            if let Err(e) = agent::run(options, shutdown).await {
                tracing::error!(error = %e, "node agent stopped");
            }
        });
        agents.threads.push(stop);
    }
    agents
}

/// The command line of node `k`'s agent process, for `columns` of the server at `server`
/// (its credentials and broker added by the caller).
fn agent_command(
    exe: &std::path::Path,
    settings: &GangSettings,
    server: &str,
    node: &str,
    k: usize,
    columns: &[u32],
) -> tokio::process::Command {
    let sync = settings.sync();
    let mut command = tokio::process::Command::new(exe);
    command
        .arg("--server")
        .arg(server)
        .arg("--node")
        .arg(node)
        .arg("--columns")
        .arg(comma_list(columns))
        .arg("--clock-offset-ms")
        .arg((settings.agent_clock_offset_ms * (k as f64 + 1.0)).to_string())
        .arg("--clock-rate-ppm")
        .arg((settings.agent_clock_rate_ppm * (k as f64 + 1.0)).to_string())
        .arg("--sync-min-interval")
        .arg(sync.min_interval.to_string())
        .arg("--sync-max-interval")
        .arg(sync.max_interval.to_string())
        .arg("--drift-threshold-us")
        .arg((sync.drift_threshold * 1e6).to_string())
        .kill_on_drop(true);
    if !settings.pin {
        command.arg("--no-pin");
    }
    if !settings.cores.is_empty() {
        command.arg("--cores").arg(comma_list(&settings.cores));
    }
    if !sync.compensate_rate {
        command.arg("--no-rate-estimate");
    }
    command
}

impl AgentCredentials {
    /// Names the files an agent process reads its credentials from.
    fn add_to(&self, command: &mut tokio::process::Command) {
        let credentials = self;
        if let Some(file) = &credentials.token_file {
            command.arg("--token-file").arg(file);
        }
        if let Some(files) = &credentials.tls_files {
            command
                .arg("--tls-ca")
                .arg(&files.ca)
                .arg("--tls-certificate")
                .arg(&files.certificate)
                .arg("--tls-key")
                .arg(&files.key);
        }
    }
}

/// Kills deadlocked jobs past their grace, checking a few times per second.
pub fn spawn_watchdog(master: Arc<GangMaster>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut ticker = tokio::time::interval(Duration::from_millis(100));
        loop {
            ticker.tick().await;
            master.confirm_spread_deadlocks();
            master.kill_deadlocked();
        }
    })
}
