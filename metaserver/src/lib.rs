//! The metaserver (the metaserver paper): compute servers register with it and report load and network
//! measurements; client proxies ask it to place Network Task graphs and report what actually
//! happened. It keeps everything in the resource DB ([`db::ResourceDb`], SQLite by default) and
//! decides with the pure code of `ninf-scheduling`: the predictor and the scheduler chosen in
//! its configuration.
//!
//! [`Metaserver`] holds the state; [`operations`] implements each request, one module per
//! operation; [`service`] is the thin gRPC shell around them; [`run`] serves it on a listener
//! until shutdown, like every Ninf server.

pub mod allocation;
pub mod config;
pub mod dashboard;
pub mod data;
pub mod db;
pub mod events;
pub mod graph;
pub mod group_commit;
pub mod leadership;
pub mod metrics;
pub mod operations;
pub mod planner;
pub mod registry;
pub mod service;
pub mod shortlist;
pub mod sites;
pub mod turns;

use ninf_proto::net::auth::CheckToken;
use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use tonic::service::interceptor::InterceptedService;

use ninf_proto::net::{ServeError, Serving};
use ninf_proto::v1;
use ninf_scheduling::Link;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

pub use config::MetaserverConfig;
use db::{DbError, ResourceDb};
use graph::GraphRejection;
use planner::Planner;
pub use registry::{CLIENT, Registry};

pub use ninf_proto::clock::unix_now;

/// Heartbeats written in one transaction at most.
const HEARTBEATS_PER_COMMIT: usize = 2048;
/// Network reports written in one transaction at most: a report carries up to 32 samples,
/// and a placement's rows wait behind the transaction under way (on SQLite, its one
/// writer). At 10,000 servers 128 reports a commit left p99 at 54-57 ms, 32 at 42-43 ms.
const NETWORK_REPORTS_PER_COMMIT: usize = 32;
/// Graphs' records written in one transaction at most. Graphs are placed one at a time and
/// recorded after, together: a one-call graph's rows took 1.1 ms to commit (median, 50
/// calls at once on SQLite) against 0.3 ms to plan, and recorded while the next graph
/// waited to be planned, the fiftieth waited for 49 commits.
const GRAPHS_PER_COMMIT: usize = 64;
/// Data handles' use marks written in one transaction at most.
const USE_MARKS_PER_COMMIT: usize = 256;

#[derive(Debug, thiserror::Error)]
pub enum MetaserverError {
    #[error(transparent)]
    Db(#[from] DbError),
    #[error("graph refused: {0}")]
    Graph(#[from] GraphRejection),
    #[error("{0}")]
    Config(#[from] config::ConfigError),
    #[error("unknown server `{0}`: it has not registered")]
    UnknownServer(String),
    #[error("{0}")]
    BadRequest(String),
    #[error("no graph {0} is running")]
    UnknownGraph(u64),
    #[error("planning the graph failed: {0}")]
    Planning(String),
    #[error("{0}")]
    Allocation(String),
    #[error("an allocation queue named `{0}` exists")]
    QueueExists(String),
    #[error("no allocation queue is named `{0}`")]
    UnknownQueue(String),
    #[error("{0}")]
    NoCapacity(String),
    #[error(
        "graph refused for now: every server that implements `{function}` (task `{label}`) is \
         down ({servers}); it can run once one of them is back"
    )]
    ServersDown {
        label: String,
        function: String,
        /// The servers, by address, up to a few.
        servers: String,
    },
    #[error(
        "data handle `{0}` is not on the grid: it was freed, its lease ran out, or it never \
         existed"
    )]
    DataNotFound(String),
    #[error(transparent)]
    Listen(#[from] ninf_proto::net::NetError),
    #[error("resource DB: {0}")]
    Recording(String),
}

impl From<MetaserverError> for tonic::Status {
    fn from(error: MetaserverError) -> tonic::Status {
        let message = error.to_string();
        match error {
            MetaserverError::Db(_)
            | MetaserverError::Recording(_)
            | MetaserverError::Config(_)
            | MetaserverError::Planning(_)
            | MetaserverError::Listen(_) => {
                tracing::error!(%message, "metaserver error");
                tonic::Status::internal(message)
            }
            MetaserverError::Graph(GraphRejection::Structure(
                ninf_scheduling::GraphError::Unimplemented { .. },
            )) => tonic::Status::failed_precondition(message),
            // No server serves it (any more): the client's FUNCTION_NOT_FOUND.
            MetaserverError::Graph(GraphRejection::UnknownRoutine { .. }) => {
                tonic::Status::not_found(message)
            }
            MetaserverError::Graph(_) | MetaserverError::BadRequest(_) => {
                tonic::Status::invalid_argument(message)
            }
            MetaserverError::UnknownServer(_)
            | MetaserverError::UnknownGraph(_)
            | MetaserverError::UnknownQueue(_) => tonic::Status::not_found(message),
            MetaserverError::DataNotFound(id) => data_not_found(message, &id),
            MetaserverError::Allocation(_) => tonic::Status::failed_precondition(message),
            MetaserverError::QueueExists(_) => tonic::Status::already_exists(message),
            MetaserverError::NoCapacity(_) => tonic::Status::resource_exhausted(message),
            // Transient: a proxy asks again with back-off, as it does a restarting metaserver.
            MetaserverError::ServersDown { .. } => tonic::Status::unavailable(message),
        }
    }
}

fn data_not_found(message: String, id: &str) -> tonic::Status {
    ninf_proto::net::data_not_found(message, id)
}

/// A graph scheduled and not yet reported: what its report is measured against.
struct RunningGraph {
    scheduler: String,
    predicted_makespan: f64,
}

/// What the metaserver keeps in memory, under one lock.
struct State {
    registry: Registry,
    planner: Planner,
    /// Servers the DB records as down.
    down: HashSet<i64>,
    /// Graphs scheduled and not yet reported.
    running: HashMap<u64, RunningGraph>,
    /// Graphs scheduled since start-up (varies the random scheduler's seed).
    scheduled: u64,
    /// Recent events, for people.
    events: events::EventLog,
    /// The newest client-link sample stored, by (proxy, server), in Unix milliseconds.
    client_links_stored: operations::network::StoredSamples,
}

/// The metaserver's state and operations.
pub struct Metaserver {
    pub config: MetaserverConfig,
    db: ResourceDb,
    state: Mutex<State>,
    /// One schedule at a time, so each sees the placements of the one before.
    scheduling: tokio::sync::Mutex<()>,
    /// Handles whose copies are being stored, held while a handle is placed or a copy
    /// recorded so that evictions see each other ([`data::room`]).
    data_room: tokio::sync::Mutex<data::room::Reserved>,
    /// Graphs being planned off the lock (see [`operations::schedule`]).
    planning: std::sync::atomic::AtomicU64,
    /// The id the next graph placed gets: one past the highest the resource DB held when
    /// this metaserver opened it or became active.
    next_graph_id: std::sync::atomic::AtomicU64,
    /// Placed graphs' records on their way to the resource DB, written in batches.
    graph_log: group_commit::GroupCommit<db::NewGraph>,
    /// When data handles were last read ([`operations::data`]), on their way to the
    /// resource DB, likewise; nothing waits for them.
    use_marks: group_commit::GroupCommit<(String, f64)>,
    /// What it counts for Prometheus, and the registry it is served from.
    metrics: metrics::MetaserverMetrics,
    metrics_registry: Arc<ninf_telemetry::Registry>,
    /// The grid's token, if requests must carry it.
    token: Option<String>,
    /// TLS material for the port, if it serves TLS.
    tls: Option<ninf_proto::net::tls::GridTls>,
    /// Tells live views what changed.
    changes: tokio::sync::broadcast::Sender<events::Change>,
    /// Whether this metaserver schedules: always with SQLite; with PostgreSQL, while it
    /// holds the resource DB's lock ([`leadership`]).
    active: std::sync::atomic::AtomicBool,
    /// Allocation queues ([`allocation`]).
    alloc: allocation::run::Allocations,
    /// The address it serves on, as servers started by a queue reach it.
    address: Mutex<String>,
    /// Heartbeats' load samples on their way to the resource DB, written in batches.
    heartbeat_log: group_commit::GroupCommit<(i64, db::StoredLoad)>,
    /// The servers' network reports on their way to the resource DB, likewise.
    network_log: group_commit::GroupCommit<Vec<db::StoredLink>>,
    /// Registrations writing to the resource DB at once: one with SQLite (whose writes take
    /// turns anyway), a few with PostgreSQL. The others wait here, not holding one of the
    /// pool's connections, so that a storm of registrations (a metaserver restarted under
    /// thousands of servers) leaves connections for every other request.
    registering: tokio::sync::Semaphore,
    /// A server holding data copies was lost (or a write found no room for a replica): the
    /// upkeep looks for persistent handles short of their replicas ([`operations::data_repair`]).
    data_repair_wanted: std::sync::atomic::AtomicBool,
    /// Drawn at start and added to the registry's count of changes, so that a status's
    /// `servers_changes` names one metaserver's list: a proxy that moves to another
    /// metaserver, or sees this one restart, is sent the whole list again.
    servers_epoch: u64,
}

/// A number no other process draws alike, from the standard library's hashing keys.
fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish()
}

/// The registry as the resource DB records it: every server that registered, its recent
/// load and the network samples within the retention time.
async fn restore_registry(
    db: &ResourceDb,
    config: &MetaserverConfig,
) -> Result<Registry, MetaserverError> {
    let mut registry = Registry::new(
        config.history_samples,
        config.heartbeat_timeout_seconds,
        config.default_mflops,
    );
    for server in db.servers().await? {
        let rejected = registry.register(
            server.id,
            &server.address,
            server.info,
            &server.routines,
            server.last_heartbeat,
        );
        for (routine, reason) in rejected {
            tracing::warn!(server = %server.address, %routine, %reason, "stored routine skipped");
        }
        let load = db
            .recent_load(server.id, config.history_samples as u32)
            .await?;
        registry.restore_load(&server.address, load.iter().map(|s| s.load));
    }
    let since = unix_now() - config.retention_seconds;
    for link in db.links_since(since).await? {
        registry.add_link(
            &link.from,
            &link.to,
            Link {
                throughput: link.throughput,
                latency: link.latency,
            },
        );
    }
    Ok(registry)
}

impl Metaserver {
    /// Opens the resource DB and rebuilds the registry from it: a restarted metaserver knows
    /// every server that registered before (they stay up if they keep sending heartbeats).
    pub async fn open(config: MetaserverConfig) -> Result<Arc<Metaserver>, MetaserverError> {
        config.check()?;
        let invalid = |e: &dyn std::fmt::Display| config::ConfigError::Invalid(e.to_string());
        let token = ninf_proto::net::auth::load_configured(config.auth_token_file.as_deref())
            .map_err(|e| invalid(&e))?;
        let tls = ninf_proto::net::tls::GridTls::load_configured(config.tls.as_ref())
            .map_err(|e| invalid(&e))?;
        if config.database_url.is_none() {
            std::fs::create_dir_all(&config.data_dir).map_err(|e| {
                config::ConfigError::Invalid(format!(
                    "cannot create the data directory {}: {e}",
                    config.data_dir.display()
                ))
            })?;
        }
        let db = ResourceDb::open(&config.database_url()).await?;
        let registry = restore_registry(&db, &config).await?;
        tracing::info!(
            servers = registry.servers().len(),
            database = %db::redact(&config.database_url()),
            scheduler = %config.scheduler,
            "resource DB opened"
        );
        let mut planner = Planner::new(
            config.predictor_kind()?,
            Link {
                throughput: config.default_throughput_bytes_per_second,
                latency: config.default_latency_seconds.max(0.0),
            },
        );
        planner.calibrate = config.calibrate;
        planner.templates_on = config.templates;
        planner.turns_min_seconds = config.turns_min_seconds;
        planner.walltime_margin = config.allocation.walltime_margin_seconds;
        // Samples of servers still up are at most a heartbeat timeout old.
        planner.ended_memory_seconds = planner
            .ended_memory_seconds
            .max(2.0 * config.heartbeat_timeout_seconds);
        let (metrics, metrics_registry) = metrics::MetaserverMetrics::new();
        let batch = Arc::new(allocation::batch::Slurm {
            bin_dir: config.allocation.slurm_bin_dir.clone(),
            conf: config.allocation.slurm_conf.clone(),
        });
        let metaserver = Arc::new(Metaserver {
            config,
            state: Mutex::new(State {
                registry,
                planner,
                down: HashSet::new(),
                running: HashMap::new(),
                scheduled: 0,
                events: events::EventLog::new(events::EVENTS_KEPT),
                client_links_stored: Default::default(),
            }),
            scheduling: tokio::sync::Mutex::new(()),
            data_room: tokio::sync::Mutex::new(data::room::Reserved::default()),
            planning: std::sync::atomic::AtomicU64::new(0),
            next_graph_id: std::sync::atomic::AtomicU64::new(db.last_graph_id().await? + 1),
            graph_log: group_commit::GroupCommit::start(
                db.clone(),
                "graphs",
                GRAPHS_PER_COMMIT,
                |db, graphs| async move { db.record_graphs(&graphs).await },
            ),
            use_marks: group_commit::GroupCommit::start(
                db.clone(),
                "data handles' use marks",
                USE_MARKS_PER_COMMIT,
                |db, marks| async move { db.touch_data_all(&marks).await },
            ),
            data_repair_wanted: std::sync::atomic::AtomicBool::new(false),
            heartbeat_log: group_commit::GroupCommit::start(
                db.clone(),
                "heartbeats",
                HEARTBEATS_PER_COMMIT,
                |db, beats| async move { db.heartbeats(&beats).await },
            ),
            network_log: group_commit::GroupCommit::start(
                db.clone(),
                "network reports",
                NETWORK_REPORTS_PER_COMMIT,
                |db, reports| async move {
                    let samples: Vec<db::StoredLink> = reports.into_iter().flatten().collect();
                    db.add_links(&samples).await
                },
            ),
            registering: tokio::sync::Semaphore::new(match db.backend() {
                db::Backend::Sqlite => 1,
                db::Backend::Postgres => 4,
            }),
            metrics,
            metrics_registry: Arc::new(metrics_registry),
            token,
            tls,
            changes: tokio::sync::broadcast::channel(256).0,
            active: std::sync::atomic::AtomicBool::new(db.backend() == db::Backend::Sqlite),
            db,
            alloc: allocation::run::Allocations::new(batch),
            address: Mutex::new(String::new()),
            servers_epoch: random_u64(),
        });
        metaserver.restore_queues().await?;
        Ok(metaserver)
    }

    /// Whether this metaserver schedules (see [`leadership`]).
    pub fn is_active(&self) -> bool {
        self.active.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Refuses a request while this metaserver is a standby: UNAVAILABLE, so that servers
    /// and proxies move on to the next metaserver of their list.
    pub(crate) fn serving(&self) -> Result<(), tonic::Status> {
        if self.is_active() {
            Ok(())
        } else {
            Err(tonic::Status::unavailable(
                "this metaserver is a standby: another holds the resource DB's lock",
            ))
        }
    }

    /// Becomes the active metaserver: takes the registry the resource DB records (the
    /// servers that registered with the metaserver before it), then serves.
    pub(crate) async fn promote(&self) -> Result<(), MetaserverError> {
        let registry = restore_registry(&self.db, &self.config).await?;
        self.restore_queues().await?;
        // The metaserver active before numbered graphs on from where this one left off.
        let last_graph = self.db.last_graph_id().await?;
        self.next_graph_id
            .fetch_max(last_graph + 1, std::sync::atomic::Ordering::SeqCst);
        let servers = registry.servers().len();
        {
            let mut state = self.state();
            state.registry = registry;
            state.down.clear();
            state.running.clear();
        }
        self.active.store(true, std::sync::atomic::Ordering::SeqCst);
        tracing::info!(
            servers,
            "active: this metaserver holds the resource DB's lock"
        );
        self.log_event("active", "metaserver", None, "took over scheduling".into());
        Ok(())
    }

    /// Becomes a standby (the resource DB's lock was lost).
    pub(crate) fn demote(&self) {
        if self.active.swap(false, std::sync::atomic::Ordering::SeqCst) {
            tracing::warn!("standby: this metaserver lost the resource DB's lock");
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves plain data behind; keep serving.
        ninf_proto::sync::lock(&self.state)
    }

    /// The resource DB, for tools and tests.
    pub fn db(&self) -> &ResourceDb {
        &self.db
    }
}

/// A metaserver serving in this process.
pub struct Running {
    /// The address it listens on.
    pub address: String,
    pub metaserver: Arc<Metaserver>,
    /// Where its metrics are served, when `metrics_listen` is set.
    pub metrics: Option<ninf_telemetry::MetricsEndpoint>,
    /// Where its dashboard is served, when `dashboard_listen` is set.
    pub dashboard: Option<ninf_telemetry::HttpEndpoint>,
    serving: Serving,
}

/// Starts a metaserver as `config` says: listens on `config.listen`, opens the resource DB
/// and serves.
pub async fn bind(config: MetaserverConfig) -> Result<Running, MetaserverError> {
    let listener = ninf_proto::net::listen(&config.listen).await?;
    let address = listener
        .local_addr()
        .map_err(|e| MetaserverError::BadRequest(format!("no local address: {e}")))?
        .to_string();
    let metrics_listen = config.metrics_listen.clone();
    let dashboard_listen = config.dashboard_listen.clone();
    let metaserver = Metaserver::open(config).await?;
    *ninf_proto::sync::lock(&metaserver.address) = address.clone();
    let metrics = match metrics_listen {
        Some(listen) => {
            Some(ninf_telemetry::serve(&listen, metaserver.metrics_registry.clone()).await?)
        }
        None => None,
    };
    let dashboard = match dashboard_listen {
        Some(listen) => Some(dashboard::serve(metaserver.clone(), &listen).await?),
        None => None,
    };
    let serving = {
        let metaserver = metaserver.clone();
        Serving::spawn(move |shutdown| run(listener, metaserver, shutdown))
    };
    Ok(Running {
        address,
        metaserver,
        metrics,
        dashboard,
        serving,
    })
}

impl Running {
    /// Stops serving (gracefully) and closes the resource DB.
    pub async fn stop(self) -> Result<(), ServeError> {
        if let Some(metrics) = self.metrics {
            metrics.stop().await;
        }
        if let Some(dashboard) = self.dashboard {
            dashboard.stop().await;
        }
        self.serving.stop().await
    }

    /// Serves until `signal` completes, then stops.
    pub async fn until(self, signal: impl Future<Output = ()>) -> Result<(), ServeError> {
        let _endpoints = (self.metrics, self.dashboard);
        self.serving.until(signal).await
    }
}

/// Serves the metaserver on `listener` until `shutdown` completes.
async fn run(
    listener: TcpListener,
    metaserver: Arc<Metaserver>,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), tonic::transport::Error> {
    let mut builder = ninf_proto::net::server(metaserver.tls.as_ref())?;
    let upkeep = operations::upkeep::spawn(metaserver.clone());
    let allocation = allocation::run::spawn(metaserver.clone());
    let leadership = CancellationToken::new();
    let leader = (metaserver.db.backend() == db::Backend::Postgres).then(|| {
        tokio::spawn(leadership::run(
            metaserver.clone(),
            metaserver.config.database_url(),
            leadership.clone(),
        ))
    });
    let (health, health_service) = tonic_health::server::health_reporter();
    health
        .set_serving::<v1::scheduling_server::SchedulingServer<service::SchedulingService>>()
        .await;
    let limit = service::MESSAGE_LIMIT;
    let result = builder
        .add_service(health_service)
        .add_service(InterceptedService::new(
            v1::registry_server::RegistryServer::new(service::RegistryService(metaserver.clone()))
                .max_decoding_message_size(limit),
            CheckToken::new("metaserver", metaserver.token.as_deref()),
        ))
        .add_service(InterceptedService::new(
            v1::scheduling_server::SchedulingServer::new(service::SchedulingService(
                metaserver.clone(),
            ))
            .max_decoding_message_size(limit)
            .max_encoding_message_size(limit),
            CheckToken::new("metaserver", metaserver.token.as_deref()),
        ))
        .add_service(InterceptedService::new(
            v1::allocation_server::AllocationServer::new(service::AllocationService(
                metaserver.clone(),
            )),
            CheckToken::new("metaserver", metaserver.token.as_deref()),
        ))
        .add_service(InterceptedService::new(
            v1::data_records_server::DataRecordsServer::new(service::DataRecordsService(
                metaserver.clone(),
            )),
            CheckToken::new("metaserver", metaserver.token.as_deref()),
        ))
        .serve_with_incoming_shutdown(ninf_proto::net::incoming(listener), shutdown)
        .await;
    upkeep.abort();
    allocation.abort();
    leadership.cancel();
    if let Some(leader) = leader {
        let _ = leader.await;
    }
    metaserver.db.close().await;
    result
}
