//! The compute server's side of the metaserver loop (the metaserver paper steps 0 and 1): register with
//! the benchmark figures and interfaces, then send heartbeats carrying load samples and,
//! less often, measure the network to every peer the metaserver lists and report it. If the
//! metaserver is unreachable the server keeps serving and retries with back-off, moving on
//! down its list of metaservers (`host:port,host:port`: a standby answers UNAVAILABLE); if
//! the metaserver has forgotten it (a fresh DB), it registers again.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use ninf_proto::net::auth::{Authorized, authorized};
use ninf_proto::net::failover::{Failover, try_next};

use ninf_proto::probe;
use ninf_proto::v1;

use crate::state::ServerState;

/// How a server keeps in touch with its metaserver.
#[derive(Debug, Clone)]
pub struct RegistrationConfig {
    /// `host:port` of the metaserver, or several separated by commas.
    pub metaserver: String,
    /// Payload of throughput probes to peers.
    pub probe_bytes: usize,
}

/// The registry client, presenting the grid's token.
type Registry = v1::registry_client::RegistryClient<Authorized>;

/// Longest wait between attempts to reach an unreachable metaserver.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

fn registration(state: &ServerState) -> v1::RegisterRequest {
    let catalog = state.catalog();
    v1::RegisterRequest {
        address: state.advertise.clone(),
        info: Some(state.info.clone()),
        modules: catalog
            .modules
            .iter()
            .map(|m| (&m.interface).into())
            .collect(),
        failed_modules: catalog
            .failed
            .iter()
            .map(|f| v1::FailedModule {
                executable: f.executable.display().to_string(),
                reason: f.reason.clone(),
            })
            .collect(),
    }
}

/// The metaservers of the list, presenting the grid's token.
struct Metaservers {
    list: Failover,
    state: Arc<ServerState>,
}

impl Metaservers {
    /// The registry of the metaserver in use, and its place in the list.
    fn client(&self) -> (usize, Registry) {
        let (index, channel) = self.list.channel();
        let client = v1::registry_client::RegistryClient::new(authorized(
            channel,
            &self.state.credentials(),
        ));
        (index, client)
    }

    /// Moves on down the list if `status` says the metaserver at `index` cannot answer.
    fn failed(&self, index: usize, status: &tonic::Status) {
        if try_next(status) {
            self.list.failed(index);
        }
    }
}

/// Registers, retrying with back-off until a metaserver answers; returns its intervals.
async fn register(metaservers: &Metaservers, state: &ServerState) -> v1::RegisterReply {
    let mut backoff = Duration::from_millis(100);
    loop {
        let (index, mut client) = metaservers.client();
        match client.register(registration(state)).await {
            Ok(reply) => {
                let reply = reply.into_inner();
                tracing::info!(
                    server_id = reply.server_id,
                    "registered with the metaserver"
                );
                return reply;
            }
            Err(status) => {
                tracing::warn!(error = %status.message(), retry_in = ?backoff, "cannot register");
                metaservers.failed(index, &status);
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
    }
}

/// Measures the path to every peer; failures are logged and skipped.
async fn measure_peers(
    state: &ServerState,
    peers: &[String],
    probe_bytes: usize,
) -> Vec<v1::NetworkSample> {
    let mut samples = Vec::new();
    for peer in peers {
        let channel = match state.peer(peer).await {
            Ok(c) => c,
            Err(e) => {
                tracing::debug!(%peer, error = %e, "peer unreachable");
                continue;
            }
        };
        match probe::measure(authorized(channel, &state.credentials()), probe_bytes).await {
            Ok(m) => samples.push(v1::NetworkSample {
                from: state.advertise.clone(),
                to: peer.clone(),
                throughput_bytes_per_second: m.throughput_bytes_per_second,
                latency_seconds: m.latency_seconds,
                measured_unix_ms: ninf_proto::clock::unix_ms(),
            }),
            Err(status) => {
                tracing::debug!(%peer, error = %status.message(), "probe failed");
            }
        }
    }
    samples
}

/// Measures the paths to `peers` with probes of `probe_bytes` and reports them, off the
/// heartbeat loop: a peer cut off holds its probe until it times out, and the heartbeats
/// must go on meanwhile, or the metaserver marks this server down too. `measuring` is
/// cleared at the end, so that measurements never overlap.
fn spawn_measurement(
    state: Arc<ServerState>,
    mut client: Registry,
    (peers, probe_bytes): (Vec<String>, usize),
    measuring: Arc<AtomicBool>,
) {
    tokio::spawn(async move {
        let samples = measure_peers(&state, &peers, probe_bytes).await;
        if !samples.is_empty()
            && let Err(status) = client.report_network(v1::NetworkReport { samples }).await
        {
            tracing::warn!(error = %status.message(), "network report refused");
        }
        measuring.store(false, Ordering::Release);
    });
}

/// Keeps the server registered for as long as the returned task runs.
pub fn spawn(state: Arc<ServerState>, config: RegistrationConfig) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let list = match Failover::connect_lazy(
            &config.metaserver,
            state.tls.as_ref(),
            ninf_proto::net::ConnectionSettings::default(),
        ) {
            Ok(list) => list,
            Err(e) => {
                tracing::error!(metaserver = %config.metaserver, error = %e, "bad metaserver address");
                return;
            }
        };
        let metaservers = Metaservers {
            list,
            state: state.clone(),
        };
        let mut reply = register(&metaservers, &state).await;
        let mut next_network = tokio::time::Instant::now();
        let measuring = Arc::new(AtomicBool::new(false));
        let mut backoff = Duration::from_millis(100);
        loop {
            let heartbeat = Duration::from_secs_f64(reply.heartbeat_seconds.clamp(0.01, 3600.0));
            let network = Duration::from_secs_f64(reply.network_seconds.clamp(0.01, 86400.0));
            let sample = state.sample_load();
            let (index, mut client) = metaservers.client();
            let answer = client
                .heartbeat(v1::HeartbeatRequest {
                    address: state.advertise.clone(),
                    load: Some(sample),
                })
                .await;
            match answer {
                Ok(answer) => {
                    backoff = Duration::from_millis(100);
                    let answer = answer.into_inner();
                    if !answer.registered {
                        tracing::info!("the metaserver does not know this server; registering");
                        reply = register(&metaservers, &state).await;
                        next_network = tokio::time::Instant::now();
                        continue;
                    }
                    if tokio::time::Instant::now() >= next_network
                        && !answer.peers.is_empty()
                        && !measuring.swap(true, Ordering::AcqRel)
                    {
                        next_network = tokio::time::Instant::now() + network;
                        let peers = (answer.peers, config.probe_bytes);
                        spawn_measurement(state.clone(), client, peers, measuring.clone());
                    }
                    tokio::select! {
                        () = tokio::time::sleep(heartbeat) => {}
                        () = state.reregister.notified() => {
                            tracing::info!("modules reloaded; registering them");
                            reply = register(&metaservers, &state).await;
                        }
                    }
                }
                Err(status) => {
                    tracing::warn!(error = %status.message(), retry_in = ?backoff, "heartbeat failed");
                    metaservers.failed(index, &status);
                    tokio::time::sleep(backoff.min(heartbeat)).await;
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
            }
        }
    })
}

/// Tells the metaserver that the server is leaving: `draining` (no new tasks, it finishes
/// its calls), then gone. Each member of the list is tried once, within `patience` in all:
/// a metaserver that cannot be reached learns it from the heartbeats that stop.
pub async fn leave(
    state: &Arc<ServerState>,
    metaserver: &str,
    draining: bool,
    reason: &str,
    patience: Duration,
) {
    let list = match Failover::connect_lazy(
        metaserver,
        state.tls.as_ref(),
        ninf_proto::net::ConnectionSettings::default(),
    ) {
        Ok(list) => list,
        Err(e) => {
            tracing::warn!(%metaserver, error = %e, "bad metaserver address; leaving unannounced");
            return;
        }
    };
    let metaservers = Metaservers {
        list,
        state: state.clone(),
    };
    let request = v1::LeaveRequest {
        address: state.advertise.clone(),
        draining,
        reason: reason.to_string(),
    };
    let attempts = async {
        for _ in 0..metaservers.list.len() {
            let (index, mut client) = metaservers.client();
            match client.leave(request.clone()).await {
                Ok(_) => return true,
                Err(status) => {
                    tracing::warn!(error = %status.message(), "the metaserver did not take the leave");
                    metaservers.failed(index, &status);
                }
            }
        }
        false
    };
    if !matches!(tokio::time::timeout(patience, attempts).await, Ok(true)) {
        tracing::warn!(draining, "leaving without the metaserver's word");
    }
}
