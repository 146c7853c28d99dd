//! The Ninf compute server (the metaserver paper, step 0 onwards): it benchmarks itself at start-up,
//! serves its modules' routines through warm pools of generated executables, holds
//! intermediate arrays in its storage role for calls here or elsewhere, and samples its load.
//!
//! [`bind`] is the one way to start a server: it binds the gRPC and bulk-data ports, starts
//! the state (pools, storage, gang master), serves, and registers with the metaserver when
//! one is configured. The `ninf-server` binary, the embedded grid, tests and benchmarks all
//! start servers with it. With a grid token, every service but health refuses requests
//! without it (the bulk-data port checks it per request).

pub mod batch_job;
pub mod benchmark;
pub mod bulk;
pub mod config;
pub mod detached;
pub mod drain;
pub mod gang;
pub mod invoke;
pub mod metrics;
pub mod monitor;
pub mod peers;
pub mod pipeline;
pub mod pool;
pub mod registration;
pub mod services;
pub mod state;
pub mod storage;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use ninf_proto::net::{ServeError, Serving};
use ninf_proto::v1;
use tokio::net::TcpListener;
use tonic::service::interceptor::InterceptedService;

pub use config::ServerConfig;
pub use ninf_executable::keep_freed_memory;
pub use state::{ServerState, StartError};

/// Largest probe payload a peer may send (network measurements use about 1 MiB).
const PROBE_LIMIT: usize = 64 << 20;

/// A compute server serving in this process.
pub struct Running {
    /// The address it is known by (`advertise`, or the bound address).
    pub address: String,
    pub state: Arc<ServerState>,
    /// Where its metrics are served, when `metrics_listen` is set.
    pub metrics: Option<ninf_telemetry::MetricsEndpoint>,
    serving: Serving,
    registration: Option<tokio::task::JoinHandle<()>>,
    /// The metaservers it registers with, told when it leaves ([`drain`]).
    metaserver: Option<String>,
}

/// Starts a server as `config` says: listens on `config.listen` and a bulk-data port beside
/// it, starts the state with `info`'s figures (its processors and bulk address are filled
/// in), serves, and keeps it registered with `config.metaserver` when one is given.
pub async fn bind(config: &ServerConfig, info: v1::ServerInfo) -> Result<Running, StartError> {
    config.check().map_err(StartError::Config)?;
    let listener = ninf_proto::net::listen(&config.listen).await?;
    let bound = listener.local_addr().map_err(StartError::Io)?;
    let advertise = match (&config.advertise, &config.advertise_host) {
        (Some(advertise), _) => advertise.clone(),
        (None, Some(host)) => format!("{host}:{}", bound.port()),
        (None, None) => bound.to_string(),
    };
    // Bulk calls (large arrays) come on a second port of the same host.
    let bulk_listen = config
        .bulk_listen
        .clone()
        .unwrap_or_else(|| format!("{}:0", bound.ip()));
    let bulk = ninf_proto::net::listen(&bulk_listen).await?;
    let bulk_port = bulk.local_addr().map_err(StartError::Io)?.port();
    let bulk_host = match advertise.rsplit_once(':') {
        Some((host, _)) => host.to_string(),
        None => bound.ip().to_string(),
    };
    // Clients on this host reach the same calls through shared memory.
    let local_name = ninf_proto::net::local::socket_name().map_err(StartError::Io)?;
    let local = ninf_proto::net::local::listen(&local_name).map_err(StartError::Io)?;
    // The host's other servers borrow stored arrays where they lie (storage::lending).
    let store_name = ninf_proto::net::local::random_name("ninf-store-").map_err(StartError::Io)?;
    let store = ninf_proto::net::local::listen(&store_name).map_err(StartError::Io)?;
    let info = v1::ServerInfo {
        processors: config.processors() as u32,
        bulk_address: format!("{bulk_host}:{bulk_port}"),
        bulk_local: local_name,
        store_local: store_name,
        quantum_seconds: config.gang.core(1).quantum,
        data_cap_bytes: config.storage.data_cap_bytes,
        instance: ninf_proto::net::local::random_name("").map_err(StartError::Io)?,
        site: config.site.clone().unwrap_or_default(),
        host: ninf_proto::net::local::host_identity(),
        ..info
    };
    let state = ServerState::start(config, advertise.clone(), info).await?;
    let interval = Duration::from_secs_f64(config.load_interval_seconds.max(0.01));
    let serving = {
        let state = state.clone();
        let bulk = BulkListeners {
            tcp: bulk,
            local,
            store,
        };
        Serving::spawn(move |shutdown| run(listener, Some(bulk), state, interval, shutdown))
    };
    let registration = config.metaserver.clone().map(|metaserver| {
        registration::spawn(
            state.clone(),
            registration::RegistrationConfig {
                metaserver,
                probe_bytes: config.probe_bytes,
            },
        )
    });
    let metrics = match &config.metrics_listen {
        Some(listen) => Some(ninf_telemetry::serve(listen, state.metrics_registry.clone()).await?),
        None => None,
    };
    Ok(Running {
        address: advertise,
        state,
        metrics,
        serving,
        registration,
        metaserver: config.metaserver.clone(),
    })
}

impl Running {
    /// Stops its heartbeats (it keeps serving): the metaserver will mark it down.
    pub fn silence(&self) {
        if let Some(task) = &self.registration {
            task.abort();
        }
    }

    /// Stops serving (gracefully: calls in progress finish) and stops the pools.
    pub async fn stop(self) -> Result<(), ServeError> {
        self.silence();
        if let Some(metrics) = self.metrics {
            metrics.stop().await;
        }
        self.serving.stop().await
    }

    /// Serves until `signal` completes, then stops as [`Running::stop`] does.
    pub async fn until(self, signal: impl Future<Output = ()>) -> Result<(), ServeError> {
        let Running {
            serving,
            registration,
            metrics,
            ..
        } = self;
        // Served until the server ends.
        let _metrics = metrics;
        let result = serving.until(signal).await;
        if let Some(task) = registration {
            task.abort();
        }
        result
    }
}

/// The bulk-data listeners: the TCP port, and the same-host socket.
struct BulkListeners {
    tcp: TcpListener,
    local: tokio::net::UnixListener,
    store: tokio::net::UnixListener,
}

/// Marks every service of the server as serving on the health service.
async fn report_serving(health: &tonic_health::server::HealthReporter) {
    health
        .set_serving::<v1::interface_server::InterfaceServer<services::InterfaceService>>()
        .await;
    health
        .set_serving::<v1::invoke_server::InvokeServer<services::InvokeService>>()
        .await;
    health
        .set_serving::<v1::storage_server::StorageServer<services::StorageService>>()
        .await;
    health
        .set_serving::<v1::monitor_server::MonitorServer<services::MonitorService>>()
        .await;
    health
        .set_serving::<v1::gang_control_server::GangControlServer<gang::service::GangControlService>>()
        .await;
}

/// The server's periodic tasks: the load sampler and the sweeper of expired leases.
fn spawn_upkeep(
    state: &Arc<ServerState>,
    load_interval: Duration,
) -> [tokio::task::JoinHandle<()>; 2] {
    let sampler = {
        let state = state.clone();
        tokio::spawn(async move {
            let mut ticker = tokio::time::interval(load_interval.max(Duration::from_millis(10)));
            loop {
                ticker.tick().await;
                state.sample_load();
            }
        })
    };
    let sweeper = {
        let state = state.clone();
        tokio::spawn(async move {
            let period = (state.lease / 4).clamp(Duration::from_millis(10), Duration::from_secs(5));
            let mut ticker = tokio::time::interval(period);
            loop {
                ticker.tick().await;
                state.expire_leases();
            }
        })
    };
    [sampler, sweeper]
}

/// The node agents, which reach the gang service on this server's own listener.
fn start_agents(listener: &TcpListener, state: &ServerState) -> Option<gang::Agents> {
    match listener.local_addr() {
        Ok(address) => Some(gang::spawn_agents(
            &state.gang.settings,
            state.gang.processors,
            &address.to_string(),
            gang::AgentCredentials {
                token: state.token.clone(),
                token_file: state.token_file.clone(),
                tls: state.tls.clone(),
                tls_files: state.tls_files.clone(),
            },
        )),
        Err(e) => {
            tracing::error!(error = %e, "no address to give node agents; jobs are not time-shared");
            None
        }
    }
}

/// Serves every gRPC service on `listener` (and bulk calls on `bulk`, when given) until
/// `shutdown` completes, then stops the pools.
async fn run(
    listener: TcpListener,
    bulk: Option<BulkListeners>,
    state: Arc<ServerState>,
    load_interval: Duration,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), tonic::transport::Error> {
    let mut builder = ninf_proto::net::server(state.tls.as_ref())?;
    // The bulk-data port is plain TCP: a TLS server keeps its data on TLS.
    let bulk = bulk.filter(|_| state.tls.is_none());
    let (health, health_service) = tonic_health::server::health_reporter();
    report_serving(&health).await;

    // Messages carry whole arrays; allow the configured request size plus framing.
    let limit =
        usize::try_from(state.max_request_bytes.saturating_add(1 << 20)).unwrap_or(usize::MAX);
    let upkeep = spawn_upkeep(&state, load_interval);
    let bulk_task = bulk.map(|listeners| {
        let local = tokio::spawn(bulk::local::serve(listeners.local, state.clone()));
        let store = tokio::spawn(storage::lending::serve(listeners.store, state.clone()));
        (
            tokio::spawn(bulk::serve(listeners.tcp, state.clone())),
            local,
            store,
        )
    });
    let agents = start_agents(&listener, &state);
    let watchdog = gang::spawn_watchdog(state.gang.clone());
    let table_sender = gang::spawn_table_sender(&state.gang);
    // Agents hold a stream open, which a graceful shutdown would wait for: stop them first.
    let shutdown = async move {
        shutdown.await;
        if let Some(agents) = agents {
            agents.stop().await;
        }
    };
    let result = builder
        .add_service(health_service)
        .add_service(InterceptedService::new(
            v1::interface_server::InterfaceServer::new(services::InterfaceService(state.clone())),
            state.check(),
        ))
        .add_service(InterceptedService::new(
            v1::invoke_server::InvokeServer::new(services::InvokeService(state.clone()))
                .max_decoding_message_size(limit)
                .max_encoding_message_size(limit),
            state.check(),
        ))
        .add_service(InterceptedService::new(
            v1::storage_server::StorageServer::new(services::StorageService(state.clone()))
                .max_decoding_message_size(limit)
                .max_encoding_message_size(limit),
            state.check(),
        ))
        .add_service(InterceptedService::new(
            v1::monitor_server::MonitorServer::new(services::MonitorService(state.clone()))
                .max_decoding_message_size(PROBE_LIMIT),
            state.check(),
        ))
        .add_service(InterceptedService::new(
            v1::gang_control_server::GangControlServer::new(gang::service::GangControlService(
                state.gang.clone(),
            ))
            .max_decoding_message_size(limit)
            .max_encoding_message_size(limit),
            state.check(),
        ))
        .serve_with_incoming_shutdown(ninf_proto::net::incoming(listener), shutdown)
        .await;
    for task in upkeep {
        task.abort();
    }
    watchdog.abort();
    table_sender.abort();
    if let Some((tcp, local, store)) = bulk_task {
        tcp.abort();
        local.abort();
        store.abort();
    }
    state.shutdown().await;
    result
}
