//! The Ninf compute server (seed 004, step 0 onwards): it benchmarks itself at start-up,
//! serves its modules' routines through warm pools of generated executables, holds
//! intermediate arrays in its storage role for calls here or elsewhere, and samples its load.
//!
//! [`run`] takes a bound listener, the shared state and a shutdown signal, so tests and the
//! `ninf-server` binary start it the same way. With a grid token, every service but health
//! refuses requests without it (the bulk-data port checks it per request).

pub mod benchmark;
pub mod bulk;
pub mod config;
pub mod gang;
pub mod invoke;
pub mod monitor;
pub mod peers;
pub mod pool;
pub mod registration;
pub mod services;
pub mod state;
pub mod storage;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use ninf_proto::v1;
use tokio::net::TcpListener;
use tokio_stream::wrappers::TcpListenerStream;
use tonic::service::interceptor::InterceptedService;

pub use config::ServerConfig;
pub use ninf_executable::keep_freed_memory;
pub use state::ServerState;

/// Largest probe payload a peer may send (network measurements use about 1 MiB).
const PROBE_LIMIT: usize = 64 << 20;

/// Serves every gRPC service on `listener` (and bulk calls on `bulk`, when given) until
/// `shutdown` completes, then stops the pools.
pub async fn run(
    listener: TcpListener,
    bulk: Option<TcpListener>,
    state: Arc<ServerState>,
    load_interval: Duration,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), tonic::transport::Error> {
    let mut builder = ninf_proto::net::server(state.tls.as_ref())?;
    // The bulk-data port is plain TCP: a TLS server keeps its data on TLS.
    let bulk = bulk.filter(|_| state.tls.is_none());
    let (health, health_service) = tonic_health::server::health_reporter();
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

    // Messages carry whole arrays; allow the configured request size plus framing.
    let limit =
        usize::try_from(state.max_request_bytes.saturating_add(1 << 20)).unwrap_or(usize::MAX);
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
    let bulk_task = bulk.map(|listener| tokio::spawn(bulk::serve(listener, state.clone())));
    // Agents reach the gang service on this server's own listener.
    let agents = match listener.local_addr() {
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
    };
    let watchdog = gang::spawn_watchdog(state.gang.clone());
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
            )),
            state.check(),
        ))
        .serve_with_incoming_shutdown(TcpListenerStream::new(listener), shutdown)
        .await;
    sampler.abort();
    sweeper.abort();
    watchdog.abort();
    if let Some(task) = bulk_task {
        task.abort();
    }
    state.shutdown().await;
    result
}
