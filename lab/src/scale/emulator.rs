//! One emulator process: `count` compute servers that register with a real metaserver, send
//! heartbeats with load samples every `heartbeat_seconds` (spread evenly over the interval)
//! and network reports every `network_seconds` of every peer the metaserver names, and answer
//! calls with no compute (`services.rs`). They share one listener on every address: server `i`
//! of the grid is `127.B.C.D:PORT`, its own loopback address ([`address`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use ninf_proto::net::{ConnectionSettings, connect_lazy};
use ninf_proto::v1;
use ninf_proto::v1::registry_client::RegistryClient;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use super::services::{self, Emulated, Services};

/// Registrations in flight at once, per process.
const REGISTERING_AT_ONCE: usize = 64;

pub struct EmulatorOptions {
    pub metaserver: String,
    /// The grid-wide index of its first server, and how many it plays.
    pub first: usize,
    pub count: usize,
    pub port: u16,
    pub heartbeat_seconds: f64,
    pub network_seconds: f64,
    pub call_ms: u64,
}

/// What one emulator process saw, printed as JSON when it is told to stop.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct EmulatorReport {
    pub registered: usize,
    /// Seconds from its first registration sent to its last answered.
    pub registration_seconds: f64,
    pub heartbeats_sent: u64,
    /// Heartbeats not answered as recorded within their interval (failed, or late).
    pub heartbeats_missed: u64,
    pub network_reports: u64,
    pub calls: u64,
    /// Seconds from its last registration to the stop: how long its servers beat.
    pub beating_seconds: f64,
}

/// Server `index`'s address: one of 127.0.0.0/8, 250 per /24 (no .0 or .255), on `port`.
pub fn address(index: usize, port: u16) -> String {
    let (b, c, d) = (1 + index / 62_500, 1 + (index / 250) % 250, 1 + index % 250);
    format!("127.{b}.{c}.{d}:{port}")
}

/// The routines every emulated server lists: the self-test module's.
fn modules() -> anyhow::Result<Vec<v1::ModuleInterface>> {
    let source = ninf_idl::SourceFile::new("selftest.idl", ninf_routines::idl::SELFTEST);
    let module = ninf_idl::compile(&source)
        .map_err(|d| anyhow::anyhow!("the self-test IDL does not compile: {d:?}"))?;
    Ok(vec![(&module).into()])
}

#[derive(Default)]
struct Counts {
    sent: AtomicU64,
    missed: AtomicU64,
    network: AtomicU64,
}

/// Plays the servers until `stop` is cancelled.
pub async fn run(
    options: EmulatorOptions,
    stop: CancellationToken,
) -> anyhow::Result<EmulatorReport> {
    let emulated = Arc::new(Emulated {
        modules: modules()?,
        call_ms: options.call_ms,
        calls: AtomicU64::new(0),
    });
    let listener = tokio::net::TcpListener::bind(("0.0.0.0", options.port))
        .await
        .with_context(|| format!("cannot listen on port {}", options.port))?;
    let serving = serve(listener, Services(emulated.clone()), stop.clone());
    let channel = connect_lazy(&options.metaserver, None, ConnectionSettings::default())
        .context("the metaserver's address")?;
    let registry = RegistryClient::new(channel);
    let started = Instant::now();
    let registered = register_all(&registry, &options, &emulated.modules).await?;
    let registration_seconds = started.elapsed().as_secs_f64();
    let counts = Arc::new(Counts::default());
    let beating_since = Instant::now();
    let beating: Vec<_> = (0..options.count)
        .map(|i| {
            let beat = Beat {
                registry: registry.clone(),
                address: address(options.first + i, options.port),
                modules: emulated.modules.clone(),
                counts: counts.clone(),
                period: Duration::from_secs_f64(options.heartbeat_seconds.max(0.05)),
                network: Duration::from_secs_f64(options.network_seconds.max(0.05)),
            };
            let offset = beat.period.mul_f64(i as f64 / options.count.max(1) as f64);
            tokio::spawn(beat.run(offset, stop.clone()))
        })
        .collect();
    stop.cancelled().await;
    for task in beating {
        task.abort();
    }
    serving.await.context("the emulated servers' listener")??;
    Ok(EmulatorReport {
        registered,
        registration_seconds,
        heartbeats_sent: counts.sent.load(Ordering::Relaxed),
        heartbeats_missed: counts.missed.load(Ordering::Relaxed),
        network_reports: counts.network.load(Ordering::Relaxed),
        calls: emulated.calls.load(Ordering::Relaxed),
        beating_seconds: beating_since.elapsed().as_secs_f64(),
    })
}

fn serve(
    listener: tokio::net::TcpListener,
    services: Services,
    stop: CancellationToken,
) -> tokio::task::JoinHandle<Result<(), tonic::transport::Error>> {
    tokio::spawn(async move {
        ninf_proto::net::server(None)?
            .add_service(v1::interface_server::InterfaceServer::new(services.clone()))
            .add_service(v1::invoke_server::InvokeServer::new(services.clone()))
            .add_service(v1::monitor_server::MonitorServer::new(services.clone()))
            .add_service(v1::storage_server::StorageServer::new(services))
            .serve_with_incoming_shutdown(
                ninf_proto::net::incoming(listener),
                stop.cancelled_owned(),
            )
            .await
    })
}

fn registration(
    address: String,
    modules: &[v1::ModuleInterface],
) -> anyhow::Result<v1::RegisterRequest> {
    Ok(v1::RegisterRequest {
        address,
        info: Some(v1::ServerInfo {
            instance: ninf_proto::net::local::random_name("")?,
            ..services::info()
        }),
        modules: modules.to_vec(),
        failed_modules: Vec::new(),
    })
}

/// Registers every server, [`REGISTERING_AT_ONCE`] at a time; how many were accepted.
async fn register_all(
    registry: &RegistryClient<tonic::transport::Channel>,
    options: &EmulatorOptions,
    modules: &[v1::ModuleInterface],
) -> anyhow::Result<usize> {
    let gate = Arc::new(tokio::sync::Semaphore::new(REGISTERING_AT_ONCE));
    let mut registering = tokio::task::JoinSet::new();
    for i in 0..options.count {
        let request = registration(address(options.first + i, options.port), modules)?;
        let mut registry = registry.clone();
        let permit = gate.clone().acquire_owned().await?;
        registering.spawn(async move {
            let answered = registry.register(request).await;
            drop(permit);
            answered
        });
    }
    let mut registered = 0;
    while let Some(answered) = registering.join_next().await {
        match answered? {
            Ok(_) => registered += 1,
            Err(status) => tracing::warn!(error = %status.message(), "a registration failed"),
        }
    }
    Ok(registered)
}

/// One emulated server's heartbeats and network reports.
struct Beat {
    registry: RegistryClient<tonic::transport::Channel>,
    address: String,
    modules: Vec<v1::ModuleInterface>,
    counts: Arc<Counts>,
    period: Duration,
    network: Duration,
}

impl Beat {
    async fn run(mut self, offset: Duration, stop: CancellationToken) {
        tokio::time::sleep(offset).await;
        let mut ticker = tokio::time::interval(self.period);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // The first report with the first heartbeat (the heartbeats are spread over their
        // interval), as a server that measures the peers its first reply names.
        let mut last_report = Instant::now()
            .checked_sub(self.network)
            .unwrap_or_else(Instant::now);
        while !stop.is_cancelled() {
            ticker.tick().await;
            let peers = self.heartbeat().await;
            if last_report.elapsed() >= self.network && !peers.is_empty() {
                last_report = Instant::now();
                self.report_network(&peers).await;
            }
        }
    }

    /// One heartbeat, registering again if the metaserver asks; the peers it named.
    async fn heartbeat(&mut self) -> Vec<String> {
        let request = v1::HeartbeatRequest {
            address: self.address.clone(),
            load: Some(services::sample()),
        };
        self.counts.sent.fetch_add(1, Ordering::Relaxed);
        let sent = Instant::now();
        let reply = self.registry.heartbeat(request).await;
        let late = sent.elapsed() > self.period;
        match reply {
            Ok(reply) => {
                let reply = reply.into_inner();
                if late || !reply.registered {
                    self.counts.missed.fetch_add(1, Ordering::Relaxed);
                }
                if !reply.registered
                    && let Ok(request) = registration(self.address.clone(), &self.modules)
                {
                    let _ = self.registry.register(request).await;
                }
                reply.peers
            }
            Err(_) => {
                self.counts.missed.fetch_add(1, Ordering::Relaxed);
                Vec::new()
            }
        }
    }

    async fn report_network(&mut self, peers: &[String]) {
        let samples = peers
            .iter()
            .filter(|p| **p != self.address)
            .map(|peer| v1::NetworkSample {
                from: self.address.clone(),
                to: peer.clone(),
                throughput_bytes_per_second: 1.0e9,
                latency_seconds: 1.0e-4,
                measured_unix_ms: ninf_proto::clock::unix_ms(),
            })
            .collect();
        if self
            .registry
            .report_network(v1::NetworkReport { samples })
            .await
            .is_ok()
        {
            self.counts.network.fetch_add(1, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_server_gets_a_loopback_address_of_its_own() {
        let addresses: std::collections::HashSet<String> =
            (0..70_000).map(|i| address(i, 7000)).collect();
        assert_eq!(addresses.len(), 70_000);
        assert_eq!(address(0, 7000), "127.1.1.1:7000");
        assert_eq!(address(249, 7000), "127.1.1.250:7000");
        assert_eq!(address(250, 7000), "127.1.2.1:7000");
        assert_eq!(address(62_500, 7000), "127.2.1.1:7000");
        assert!(
            addresses
                .iter()
                .all(|a| !a.contains(".0:") && !a.contains(".255"))
        );
    }
}
