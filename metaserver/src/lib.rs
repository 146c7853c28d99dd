//! The metaserver (seed 004): compute servers register with it and report load and network
//! measurements; client proxies ask it to place Network Task graphs and report what actually
//! happened. It keeps everything in the resource DB ([`db::ResourceDb`], SQLite by default) and
//! decides with the pure code of `ninf-scheduling`: the predictor and the scheduler chosen in
//! its configuration.
//!
//! [`Metaserver`] holds the state and implements each request; [`service`] is the thin gRPC
//! shell around it; [`run`] serves it on a listener until shutdown, like every Ninf server.

pub mod config;
pub mod db;
pub mod graph;
pub mod planner;
pub mod registry;
pub mod service;

use ninf_proto::auth::CheckToken;
use std::collections::HashSet;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tonic::service::interceptor::InterceptedService;

use ninf_proto::v1;
use ninf_scheduling::Link;
use tokio::net::TcpListener;
use tokio_stream::wrappers::TcpListenerStream;

pub use config::MetaserverConfig;
use db::{ActualRecord, DbError, GraphRecord, PlacementRecord, ResourceDb, StoredLink, StoredLoad};
use graph::GraphRejection;
use planner::Planner;
pub use registry::{CLIENT, Registry};

/// Unix seconds now.
pub fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

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
}

impl From<MetaserverError> for tonic::Status {
    fn from(error: MetaserverError) -> tonic::Status {
        let message = error.to_string();
        match error {
            MetaserverError::Db(_) | MetaserverError::Config(_) => {
                tracing::error!(%message, "metaserver error");
                tonic::Status::internal(message)
            }
            MetaserverError::Graph(GraphRejection::Structure(
                ninf_scheduling::GraphError::Unimplemented { .. },
            )) => tonic::Status::failed_precondition(message),
            MetaserverError::Graph(_) | MetaserverError::BadRequest(_) => {
                tonic::Status::invalid_argument(message)
            }
            MetaserverError::UnknownServer(_) | MetaserverError::UnknownGraph(_) => {
                tonic::Status::not_found(message)
            }
        }
    }
}

/// What the metaserver keeps in memory, under one lock.
struct State {
    registry: Registry,
    planner: Planner,
    /// Servers the DB records as down.
    down: HashSet<i64>,
    /// Graphs scheduled and not yet reported.
    running: HashSet<u64>,
    /// Graphs scheduled since start-up (varies the random scheduler's seed).
    scheduled: u64,
}

/// The metaserver's state and operations.
pub struct Metaserver {
    pub config: MetaserverConfig,
    db: ResourceDb,
    state: Mutex<State>,
    /// One schedule at a time, so each sees the placements of the one before.
    scheduling: tokio::sync::Mutex<()>,
    /// The grid's token, if requests must carry it.
    token: Option<String>,
    /// TLS material for the port, if it serves TLS.
    tls: Option<ninf_proto::tls::GridTls>,
}

impl Metaserver {
    /// Opens the resource DB and rebuilds the registry from it: a restarted metaserver knows
    /// every server that registered before (they stay up if they keep sending heartbeats).
    pub async fn open(config: MetaserverConfig) -> Result<Arc<Metaserver>, MetaserverError> {
        config.check()?;
        let invalid = |e: &dyn std::fmt::Display| config::ConfigError::Invalid(e.to_string());
        let token = ninf_proto::auth::load_configured(config.auth_token_file.as_deref())
            .map_err(|e| invalid(&e))?;
        let tls = ninf_proto::tls::GridTls::load_configured(config.tls.as_ref())
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
        tracing::info!(
            servers = registry.servers().len(),
            database = %config.database_url(),
            scheduler = %config.scheduler,
            "resource DB opened"
        );
        let planner = Planner::new(
            config.predictor_kind()?,
            Link {
                throughput: config.default_throughput_bytes_per_second,
                latency: config.default_latency_seconds.max(0.0),
            },
        );
        Ok(Arc::new(Metaserver {
            config,
            db,
            state: Mutex::new(State {
                registry,
                planner,
                down: HashSet::new(),
                running: HashSet::new(),
                scheduled: 0,
            }),
            scheduling: tokio::sync::Mutex::new(()),
            token,
            tls,
        }))
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves plain data behind; keep serving.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Step 0: a compute server registers.
    pub async fn register(
        &self,
        request: v1::RegisterRequest,
    ) -> Result<v1::RegisterReply, MetaserverError> {
        if request.address.is_empty() {
            return Err(MetaserverError::BadRequest(
                "a registration needs the server's address".into(),
            ));
        }
        let info = request.info.unwrap_or_default();
        let routines: Vec<v1::FunctionInterface> = request
            .modules
            .iter()
            .flat_map(|m| m.functions.iter().cloned())
            .collect();
        let now = unix_now();
        let id = self
            .db
            .register(&request.address, &info, &routines, now)
            .await?;
        let rejected = {
            let mut state = self.state();
            state.down.remove(&id);
            state
                .registry
                .register(id, &request.address, info.clone(), &routines, now)
        };
        for (routine, reason) in &rejected {
            tracing::warn!(server = %request.address, %routine, %reason, "routine refused");
        }
        tracing::info!(
            server = %request.address,
            id,
            routines = routines.len() - rejected.len(),
            mflops = info.mflops,
            processors = info.processors,
            "server registered"
        );
        Ok(v1::RegisterReply {
            server_id: u64::try_from(id).unwrap_or(0),
            heartbeat_seconds: self.config.heartbeat_seconds,
            network_seconds: self.config.network_seconds,
        })
    }

    /// Step 1: a heartbeat with a load sample.
    pub async fn heartbeat(
        &self,
        request: v1::HeartbeatRequest,
    ) -> Result<v1::HeartbeatReply, MetaserverError> {
        let now = unix_now();
        let (id, peers, was_down) = {
            let mut state = self.state();
            if !state
                .registry
                .heartbeat(&request.address, request.load.as_ref(), now)
            {
                return Ok(v1::HeartbeatReply {
                    registered: false,
                    peers: Vec::new(),
                });
            }
            let id = state.registry.get(&request.address).map_or(0, |s| s.id);
            let was_down = state.down.remove(&id);
            (id, state.registry.peers(&request.address, now), was_down)
        };
        if was_down {
            tracing::info!(server = %request.address, "server is back up");
        }
        let load = request.load.unwrap_or_default();
        self.db
            .heartbeat(
                id,
                StoredLoad {
                    time: now,
                    load: registry::demand(&load),
                    load_average: load.load_average_1m,
                    free_memory_bytes: load.free_memory_bytes,
                    stored_bytes: load.stored_bytes,
                },
            )
            .await?;
        Ok(v1::HeartbeatReply {
            registered: true,
            peers,
        })
    }

    /// Step 1: server-to-server network samples.
    pub async fn report_network(&self, report: v1::NetworkReport) -> Result<(), MetaserverError> {
        let now = unix_now();
        let samples = {
            let mut state = self.state();
            let mut samples = Vec::new();
            for s in &report.samples {
                if state.registry.get(&s.from).is_none() {
                    return Err(MetaserverError::UnknownServer(s.from.clone()));
                }
                let link = Link {
                    throughput: s.throughput_bytes_per_second,
                    latency: s.latency_seconds,
                };
                state.registry.add_link(&s.from, &s.to, link);
                samples.push(stored_link(s, now));
            }
            samples
        };
        self.db.add_links(&samples).await?;
        Ok(())
    }

    /// Steps 4-5: checks and places a graph, records the placements.
    pub async fn schedule(
        &self,
        request: v1::ScheduleRequest,
    ) -> Result<v1::ScheduleReply, MetaserverError> {
        let _one_at_a_time = self.scheduling.lock().await;
        let graph = request.graph.unwrap_or_default();
        let scheduler_name = if request.scheduler.is_empty() {
            self.config.scheduler.clone()
        } else {
            request.scheduler.clone()
        };
        let client_links: Vec<(String, Link)> = request
            .client_links
            .iter()
            .map(|s| {
                (
                    s.to.clone(),
                    Link {
                        throughput: s.throughput_bytes_per_second,
                        latency: s.latency_seconds,
                    },
                )
            })
            .collect();
        let now = unix_now();
        let (tasks, schedule, placements, staging) = {
            let mut state = self.state();
            state.scheduled += 1;
            let scheduled = state.scheduled;
            let mut scheduler = ninf_scheduling::by_name(
                &scheduler_name,
                self.config.random_seed ^ scheduled.wrapping_mul(0x9e37_79b9_7f4a_7c15),
            )
            .map_err(|e| MetaserverError::BadRequest(e.to_string()))?;
            let tasks = graph::check_graph(&graph, self.config.max_graph_tasks, |f| {
                state.registry.describe(f, now)
            })?;
            let schedule = state
                .planner
                .plan_avoiding(
                    &state.registry,
                    &tasks,
                    &client_links,
                    &request.avoid,
                    scheduler.as_mut(),
                    now,
                )
                .map_err(GraphRejection::from)?;
            let servers = state.registry.servers();
            let placements: Vec<PlacementRecord> = schedule
                .servers
                .iter()
                .zip(&schedule.timings)
                .enumerate()
                .map(|(task, (&server, timing))| PlacementRecord {
                    task: task as u32,
                    label: tasks.tasks[task].label.clone(),
                    function: tasks.tasks[task].function.clone(),
                    server_address: servers
                        .get(server)
                        .map_or_else(String::new, |s| s.address.clone()),
                    processors: tasks.tasks[task].processors,
                    predicted_start: timing.start,
                    predicted_finish: timing.finish,
                })
                .collect();
            let staging: Vec<v1::StagedInput> = schedule
                .staging
                .iter()
                .filter_map(|s| {
                    Some(v1::StagedInput {
                        task: s.task as u32,
                        parameter: s.parameter,
                        server: servers.get(s.via)?.address.clone(),
                        bytes: s.bytes,
                    })
                })
                .collect();
            (tasks, schedule, placements, staging)
        };
        let inter_server_ratio = schedule.inter_server_ratio(&tasks);
        let record = GraphRecord {
            label: request.label.clone(),
            proxy: request.proxy.clone(),
            scheduler: scheduler_name.clone(),
            predictor: self.config.predictor.clone(),
            tasks: tasks.tasks.len() as u32,
            edges: tasks.edges.len() as u32,
            created: now,
            predicted_makespan: schedule.makespan,
            inter_server_ratio,
        };
        let graph_id = self.db.record_graph(&record, &placements).await?;
        // The proxy's measurements enter the DB only now that it asks for a schedule.
        let proxy_links: Vec<StoredLink> = request
            .client_links
            .iter()
            .map(|s| StoredLink {
                from: format!("{CLIENT}:{}", request.proxy),
                ..stored_link(s, now)
            })
            .collect();
        self.db.add_links(&proxy_links).await?;
        {
            let mut state = self.state();
            let State {
                planner,
                registry,
                running,
                ..
            } = &mut *state;
            planner.record(graph_id, &tasks, &schedule, registry, now);
            running.insert(graph_id);
        }
        tracing::info!(
            graph = graph_id,
            label = %request.label,
            tasks = tasks.tasks.len(),
            scheduler = %scheduler_name,
            predicted_makespan = schedule.makespan,
            inter_server_ratio,
            "graph scheduled"
        );
        Ok(v1::ScheduleReply {
            graph_id,
            scheduler: scheduler_name,
            predictor: self.config.predictor.clone(),
            placements: placements
                .into_iter()
                .map(|p| v1::TaskPlacement {
                    task: p.task,
                    server: p.server_address,
                    predicted_start: p.predicted_start,
                    predicted_finish: p.predicted_finish,
                })
                .collect(),
            predicted_makespan: schedule.makespan,
            inter_server_ratio,
            staging,
        })
    }

    /// What happened to a graph: stored, and its placements stop counting as load.
    pub async fn report_actuals(&self, report: v1::ActualsReport) -> Result<(), MetaserverError> {
        let now = unix_now();
        {
            let mut state = self.state();
            if !state.running.remove(&report.graph_id) {
                return Err(MetaserverError::UnknownGraph(report.graph_id));
            }
            let times: Vec<(usize, f64, f64)> = report
                .tasks
                .iter()
                .map(|t| (t.task as usize, t.start, t.finish))
                .collect();
            state.planner.finish(report.graph_id, now, &times);
        }
        let actuals: Vec<ActualRecord> = report
            .tasks
            .iter()
            .map(|t| ActualRecord {
                task: t.task,
                start: t.start,
                finish: t.finish,
                compute_seconds: t.timing.map_or(0.0, |t| t.compute_seconds),
            })
            .collect();
        self.db
            .record_actuals(report.graph_id, report.makespan, &report.error, &actuals)
            .await?;
        Ok(())
    }

    pub fn describe(&self, function: &str) -> Option<v1::FunctionInterface> {
        let state = self.state();
        state
            .registry
            .describe(function, unix_now())
            .map(v1::FunctionInterface::from)
    }

    pub async fn status(&self, recent_graphs: u32) -> Result<v1::GridStatus, MetaserverError> {
        let now = unix_now();
        let (servers, network) = {
            let state = self.state();
            let servers = state
                .registry
                .servers()
                .iter()
                .map(|s| v1::ServerStatus {
                    address: s.address.clone(),
                    up: state.registry.is_up(s, now),
                    mflops: s.info.mflops,
                    processors: s.info.processors,
                    cpus: s.info.cpus,
                    load: s.load.back().copied().unwrap_or(0.0),
                    stored_bytes: s.latest.map_or(0, |l| l.stored_bytes),
                    seconds_since_heartbeat: (now - s.last_heartbeat).max(0.0),
                    functions: s.routines.keys().cloned().collect(),
                })
                .collect();
            let network = state
                .registry
                .latest_links()
                .into_iter()
                .map(|(from, to, link)| v1::NetworkSample {
                    from,
                    to,
                    throughput_bytes_per_second: link.throughput,
                    latency_seconds: link.latency,
                    measured_unix_ms: 0,
                })
                .collect();
            (servers, network)
        };
        Ok(v1::GridStatus {
            scheduler: self.config.scheduler.clone(),
            predictor: self.config.predictor.clone(),
            servers,
            network,
            graphs: self.db.recent_graphs(recent_graphs).await?,
        })
    }

    /// The resource DB, for tools and tests.
    pub fn db(&self) -> &ResourceDb {
        &self.db
    }

    /// Periodic upkeep: records servers that stopped sending heartbeats as down.
    pub async fn mark_down(&self) -> Result<(), MetaserverError> {
        let now = unix_now();
        let newly_down: Vec<(i64, String)> = {
            let mut state = self.state();
            let silent: Vec<(i64, String)> = state
                .registry
                .servers()
                .iter()
                .filter(|s| !state.registry.is_up(s, now) && !state.down.contains(&s.id))
                .map(|s| (s.id, s.address.clone()))
                .collect();
            state.down.extend(silent.iter().map(|(id, _)| *id));
            silent
        };
        for (id, address) in newly_down {
            tracing::warn!(server = %address, "no heartbeat: marked down");
            self.db.set_state(id, "down").await?;
        }
        Ok(())
    }

    /// Periodic upkeep: deletes history beyond the retention bounds.
    pub async fn prune(&self) -> Result<u64, MetaserverError> {
        Ok(self
            .db
            .prune(
                db::Retention {
                    samples: Duration::from_secs_f64(self.config.retention_seconds),
                    graphs: self.config.retention_graphs,
                },
                unix_now(),
            )
            .await?)
    }
}

fn stored_link(s: &v1::NetworkSample, now: f64) -> StoredLink {
    StoredLink {
        from: s.from.clone(),
        to: s.to.clone(),
        throughput: s.throughput_bytes_per_second,
        latency: s.latency_seconds,
        time: if s.measured_unix_ms > 0 {
            s.measured_unix_ms as f64 / 1000.0
        } else {
            now
        },
    }
}

/// How often history is pruned.
const PRUNE_EVERY: Duration = Duration::from_secs(60);

/// Serves the metaserver on `listener` until `shutdown` completes.
pub async fn run(
    listener: TcpListener,
    metaserver: Arc<Metaserver>,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), tonic::transport::Error> {
    let builder = ninf_proto::tls::server(metaserver.tls.as_ref())?;
    let upkeep = {
        let metaserver = metaserver.clone();
        tokio::spawn(async move {
            let period = Duration::from_secs_f64(metaserver.config.heartbeat_seconds.max(0.05));
            let mut ticker = tokio::time::interval(period);
            let mut last_prune = tokio::time::Instant::now();
            loop {
                ticker.tick().await;
                if let Err(e) = metaserver.mark_down().await {
                    tracing::error!(error = %e, "marking silent servers down failed");
                }
                if last_prune.elapsed() >= PRUNE_EVERY {
                    last_prune = tokio::time::Instant::now();
                    match metaserver.prune().await {
                        Ok(rows) if rows > 0 => tracing::info!(rows, "history pruned"),
                        Ok(_) => {}
                        Err(e) => tracing::error!(error = %e, "pruning history failed"),
                    }
                }
            }
        })
    };
    let (health, health_service) = tonic_health::server::health_reporter();
    health
        .set_serving::<v1::scheduling_server::SchedulingServer<service::SchedulingService>>()
        .await;
    let limit = service::MESSAGE_LIMIT;
    let result = builder
        .tcp_nodelay(true)
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
        .serve_with_incoming_shutdown(TcpListenerStream::new(listener), shutdown)
        .await;
    upkeep.abort();
    metaserver.db.close().await;
    result
}
