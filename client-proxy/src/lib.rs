//! The client proxy: one per site, on behalf of every client there (the metaserver paper, steps 2-6). It
//! measures the paths to the servers, takes a whole Network Task graph with its input data
//! from a client, passes graph and measurements to the metaserver for a placement, issues the
//! tasks to the chosen servers in dependency order (independent ones in parallel) with
//! intermediate data flowing server to server through their storage roles, returns only what
//! the client asked for, deletes every intermediate it created, and reports what actually
//! happened to the metaserver.
//!
//! [`Proxy`] holds the state and runs graphs; [`service`] is its gRPC shell; [`bind`] starts
//! and serves it.

pub mod admission;
mod batching;
mod bulk;
pub mod cluster;
pub mod config;
pub mod connections;
mod data;
mod execution;
#[cfg(test)]
mod fake;
#[cfg(test)]
mod fake_cluster_tests;
#[cfg(test)]
mod fake_metaserver;
pub mod journal;
mod leftovers;
mod lending;
pub mod links;
pub mod memory;
pub mod metaserver;
pub mod metrics;
mod placement;
pub mod progress;
pub mod recovery;
#[cfg(test)]
mod run_graph_tests;
pub mod run_state;
pub mod same_host;
pub mod service;
mod staging;
pub mod suspects;
mod turns;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

pub use cluster::{Cluster, GrpcCluster};
use ninf_proto::net::auth::CheckToken;
use ninf_proto::net::tls::GridTls;
use ninf_proto::net::{ConnectionSettings, Keepalive, ServeError, Serving};
use ninf_proto::v1;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tonic::Status;
use tonic::service::interceptor::InterceptedService;

pub use config::ProxyConfig;
use links::LinkRecord;
pub use metaserver::{GrpcMetaserver, Metaserver};
use placement::{journal_key, placed_servers, placed_turns, staging_within_quota};

/// How long a suspect server's health check may take before it counts as no answer.
const HEALTH_TIMEOUT: Duration = Duration::from_secs(2);

/// The proxy's state.
pub struct Proxy {
    pub config: ProxyConfig,
    /// Name under which graphs and measurements are recorded.
    pub name: String,
    /// The metaservers (one answers at a time, moved down on failure), or a fake.
    metaserver: Arc<dyn Metaserver>,
    links: Mutex<LinkRecord>,
    /// Every call to a compute server goes through it.
    cluster: Arc<dyn Cluster>,
    /// What it counts for Prometheus, and the registry it is served from.
    metrics: metrics::ProxyMetrics,
    metrics_registry: Arc<ninf_telemetry::Registry>,
    /// Transactions running per client.
    pub admission: Arc<admission::ClientAdmission>,
    /// Graphs placed and running at once, over all clients.
    run_slots: admission::RunSlots,
    /// The grid's token, if clients must present it (and for the metaserver).
    token: Option<String>,
    /// TLS material, when the grid runs over TLS.
    tls: Option<GridTls>,
    /// Servers recently seen failing, for every graph; times on [`Proxy::clock`]. Shared
    /// with the tasks that watch suspects' health.
    suspects: Arc<Mutex<suspects::SuspectBoard>>,
    /// Where [`Proxy::clock`] counts from.
    epoch: Instant,
    /// Each transaction and its progress, for a restarted proxy (off unless configured).
    pub journal: journal::Journal,
    /// Memory clients on this host shared with the proxy, for their arrays.
    pub shared_regions: Arc<same_host::SharedRegions>,
    /// The abstract socket those clients hand it over on, once listening.
    same_host_socket: std::sync::OnceLock<String>,
    /// The servers as the metaserver last listed them, with the list's `servers_changes`:
    /// asked again before every graph, and sent again only when it changed.
    servers_known: Mutex<(u64, Arc<Vec<v1::ServerStatus>>)>,
    /// The list (by its count of changes) whose servers never measured were all tried, so
    /// that a graph's placement does not look through 10,000 servers again to find none.
    first_use_probed: Mutex<u64>,
}

impl Proxy {
    /// The abstract socket clients on this host hand shared regions over on, if any.
    pub fn same_host_socket(&self) -> Option<&str> {
        self.same_host_socket.get().map(String::as_str)
    }

    pub fn new(config: ProxyConfig, name: String) -> Result<Arc<Proxy>, Status> {
        let precondition = |e: &dyn std::fmt::Display| Status::failed_precondition(e.to_string());
        let token = ninf_proto::net::auth::load_configured(config.auth_token_file.as_deref())
            .map_err(|e| precondition(&e))?;
        let tls = GridTls::load_configured(config.tls.as_ref()).map_err(|e| precondition(&e))?;
        let settings = ConnectionSettings {
            keepalive: Keepalive::from_seconds(
                config.keepalive_seconds,
                config.keepalive_timeout_seconds,
            ),
            ..ConnectionSettings::default()
        };
        let metaservers = ninf_proto::net::failover::Failover::connect_lazy(
            &config.metaserver,
            tls.as_ref(),
            settings,
        )
        .map_err(|e| Status::invalid_argument(e.to_string()))?;
        let metaserver: Arc<dyn Metaserver> =
            Arc::new(GrpcMetaserver::new(metaservers, token.as_deref()));
        let shared_regions = Arc::new(same_host::SharedRegions::default());
        let cluster = Arc::new(GrpcCluster::new(
            &config,
            token.as_deref(),
            tls.clone(),
            (metaserver.clone(), shared_regions.clone()),
        ));
        let parts = (cluster as Arc<dyn Cluster>, metaserver);
        Proxy::assemble(config, name, parts, (token, tls), shared_regions)
    }

    /// A proxy whose calls go through `cluster` to the compute servers and `metaserver` to
    /// the metaserver (tests give it fakes).
    pub fn with_parts(
        config: ProxyConfig,
        name: String,
        (cluster, metaserver): (Arc<dyn Cluster>, Arc<dyn Metaserver>),
        token: Option<String>,
        tls: Option<GridTls>,
    ) -> Result<Arc<Proxy>, Status> {
        let shared_regions = Arc::default();
        Proxy::assemble(
            config,
            name,
            (cluster, metaserver),
            (token, tls),
            shared_regions,
        )
    }

    /// A proxy of these parts, taking clients' regions into `shared_regions` (which the
    /// cluster lends on from).
    fn assemble(
        config: ProxyConfig,
        name: String,
        (cluster, metaserver): (Arc<dyn Cluster>, Arc<dyn Metaserver>),
        (token, tls): (Option<String>, Option<GridTls>),
        shared_regions: Arc<same_host::SharedRegions>,
    ) -> Result<Arc<Proxy>, Status> {
        let (metrics, metrics_registry) = metrics::ProxyMetrics::new();
        let admission = admission::ClientAdmission::new(admission::ClientLimits {
            transactions: config.max_transactions_per_client,
            stored_bytes: config.max_stored_bytes_per_client,
            queued: config.max_queued_transactions,
        });
        let run_slots = admission::RunSlots::new(
            config.max_running_transactions,
            metrics.waiting_to_run.clone(),
        );
        let idle_cluster = Arc::downgrade(&cluster);
        admission.trimmer().release_connections_after(
            config.idle_connection_seconds,
            Box::new(move || {
                if let Some(cluster) = idle_cluster.upgrade() {
                    cluster.release_connections();
                }
            }),
        );
        Ok(Arc::new(Proxy {
            metrics,
            metrics_registry: Arc::new(metrics_registry),
            cluster,
            suspects: Arc::new(Mutex::new(suspects::SuspectBoard::new(
                config.suspect_seconds,
            ))),
            epoch: Instant::now(),
            journal: journal::Journal::default(),
            shared_regions,
            same_host_socket: std::sync::OnceLock::new(),
            servers_known: Mutex::default(),
            first_use_probed: Mutex::default(),
            token,
            tls,
            links: Mutex::new(LinkRecord::new(config.link_history)),
            admission,
            run_slots,
            config,
            name,
            metaserver,
        }))
    }

    /// Seconds since the proxy started: the suspect board's clock.
    fn clock(&self) -> f64 {
        self.epoch.elapsed().as_secs_f64()
    }

    /// Puts `server` on the suspect board. If it was not there, a task watches it: every
    /// `suspect_recheck_seconds` it asks the server to list its modules, and the first
    /// answer that began after the failure takes the server off the board. A dead or hung
    /// server stays on until it answers or the suspicion expires.
    fn suspect(&self, server: &str) {
        let fresh = Self::lock(&self.suspects).suspect(server, self.clock());
        if !fresh {
            return;
        }
        let (board, epoch, server) = (self.suspects.clone(), self.epoch, server.to_string());
        let cluster = self.cluster.clone();
        let interval = Duration::from_secs_f64(self.config.suspect_recheck_seconds.max(0.05));
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(interval).await;
                let began = epoch.elapsed().as_secs_f64();
                if !Self::lock(&board).is_suspect(&server, began) {
                    return;
                }
                let health = cluster.health(&server);
                if let Ok(Ok(())) = tokio::time::timeout(HEALTH_TIMEOUT, health).await {
                    let mut board = Self::lock(&board);
                    board.worked(&server, began);
                    if !board.is_suspect(&server, began) {
                        tracing::info!(%server, "a suspect server answers again");
                    }
                }
            }
        });
    }

    /// Servers suspect for a graph: those it saw fail itself, and those on the board.
    fn suspects_with(&self, own: &HashMap<String, f64>) -> HashSet<String> {
        let mut all = self.still_suspect(own);
        all.extend(Self::lock(&self.suspects).current(self.clock()));
        all
    }

    /// Of the servers a graph saw fail (with when), those not seen working since.
    fn still_suspect(&self, own: &HashMap<String, f64>) -> HashSet<String> {
        let board = Self::lock(&self.suspects);
        own.iter()
            .filter(|&(server, &failed)| !board.worked_since(server, failed))
            .map(|(server, _)| server.clone())
            .collect()
    }

    /// Servers whose storage a graph must not rely on: every one it saw fail (a restart
    /// loses what a server held), and those suspect now.
    fn distrusted(&self, own: &HashMap<String, f64>) -> HashSet<String> {
        let mut all: HashSet<String> = own.keys().cloned().collect();
        all.extend(Self::lock(&self.suspects).current(self.clock()));
        all
    }

    fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
        ninf_proto::sync::lock(mutex)
    }

    /// Runs `call` against the metaserver, waiting for a restarting one for up to
    /// `metaserver_retry_seconds` ([`metaserver::retrying`]).
    async fn with_metaserver<T, F, Fut>(&self, call: F) -> Result<T, Status>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, Status>>,
    {
        let patience = Duration::from_secs_f64(self.config.metaserver_retry_seconds.max(0.0));
        metaserver::retrying(&*self.metaserver, patience, call).await
    }

    /// Step 2: measures the path to every server the metaserver lists as up whose latest
    /// measurement is `max_age` old or older (never measured counts as too old), up to
    /// `probe_per_site` of each site ([`LinkRecord::to_probe`]); returns how many it
    /// measured.
    pub async fn probe_servers(&self, max_age: Duration) -> Result<usize, Status> {
        self.probe_servers_within(max_age, Duration::MAX).await
    }

    /// [`Proxy::probe_servers`], one server after another (probes at once would share a
    /// site's link and measure less than it carries), starting no probe after `budget`: the
    /// rest wait for the next round of the background probes.
    pub async fn probe_servers_within(
        &self,
        max_age: Duration,
        budget: Duration,
    ) -> Result<usize, Status> {
        let began = std::time::Instant::now();
        let servers = self.grid_servers().await?;
        let list = Self::lock(&self.servers_known).0;
        let first_use_only = max_age == Duration::MAX;
        if first_use_only && list != 0 && *Self::lock(&self.first_use_probed) == list {
            return Ok(0);
        }
        let up: Vec<(&str, &str)> = servers
            .iter()
            .filter(|s| s.up)
            .map(|s| (s.address.as_str(), s.site.as_str()))
            .collect();
        let max_age_ms = i64::try_from(max_age.as_millis()).unwrap_or(i64::MAX);
        let chosen = Self::lock(&self.links).to_probe(
            &up,
            unix_ms(),
            max_age_ms,
            self.config.probe_per_site,
        );
        let mut measured = 0;
        let mut cut_short = false;
        for address in &chosen {
            if began.elapsed() >= budget {
                cut_short = true;
                break;
            }
            let began = self.clock();
            match self.cluster.probe(address, self.config.probe_bytes).await {
                Ok(m) => {
                    Self::lock(&self.suspects).worked(address, began);
                    Self::lock(&self.links).add(address, m, unix_ms());
                    measured += 1;
                }
                Err(status) => {
                    tracing::debug!(server = %address, error = %status.message(), "probe failed")
                }
            }
        }
        Self::lock(&self.links).retain(up.iter().map(|&(address, _)| address));
        if first_use_only && !cut_short {
            *Self::lock(&self.first_use_probed) = list;
        }
        Ok(measured)
    }

    /// The routine's interface, from the metaserver (waiting for it if it is restarting).
    pub async fn describe(&self, function: String) -> Result<v1::FunctionInterface, Status> {
        self.with_metaserver(|| self.metaserver.describe(&function))
            .await
    }

    /// The metaserver's servers, waiting for it if it is restarting; the list held is
    /// reused when the metaserver says it has not changed.
    async fn grid_servers(&self) -> Result<Arc<Vec<v1::ServerStatus>>, Status> {
        let (seen, known) = Self::lock(&self.servers_known).clone();
        let status = self
            .with_metaserver(|| self.metaserver.status(seen))
            .await?;
        if status.servers_unchanged && seen != 0 {
            return Ok(known);
        }
        let servers = Arc::new(status.servers);
        *Self::lock(&self.servers_known) = (status.servers_changes, Arc::clone(&servers));
        Ok(servers)
    }

    /// The routines some server that is up serves, sorted, each once.
    pub async fn functions(&self) -> Result<Vec<String>, Status> {
        let servers = self.grid_servers().await?;
        let names: BTreeSet<String> = servers
            .iter()
            .filter(|s| s.up)
            .flat_map(|s| s.functions.iter().cloned())
            .collect();
        Ok(names.into_iter().collect())
    }

    /// Steps 3-6 for one graph, admitted for its client as `admitted`. When `cancel` fires
    /// (its client went away) the graph stops where it is and is cleaned up as a failed
    /// one: calls in flight are abandoned (their servers kill the executables), and every
    /// intermediate it stored is deleted. With `max_running_transactions` set, the graph
    /// first waits for a run slot, unplaced. A transaction its client sends again after the
    /// proxy restarted is picked up from the journal where it stopped.
    pub async fn run_graph(
        &self,
        request: v1::RunRequest,
        admitted: &mut admission::Admitted,
        progress: &progress::ProgressSink,
        cancel: &CancellationToken,
    ) -> Result<v1::RunReply, Status> {
        let v1::RunRequest {
            graph,
            arguments,
            scheduler,
            label,
            transaction_id,
            // Leased by the gRPC shell before the run (`service.rs`).
            output_region,
        } = request;
        let mut graph = graph.unwrap_or_default();
        let mut arguments = arguments;
        let n = graph.tasks.len();
        if arguments.len() != n {
            return Err(Status::invalid_argument(format!(
                "the graph has {n} tasks but {} argument lists",
                arguments.len()
            )));
        }
        let key = journal_key(admitted.client(), &transaction_id).filter(|_| self.journal.is_on());
        // The graph as the client sent it: the handles' copies, added next, move between
        // the first try and a resend (the first try's writes among them).
        let hash = key.as_ref().map_or(0, |_| journal::graph_hash(&graph));
        let mut data = self
            .resolve_data_and_probe(admitted.client(), &mut graph, &arguments)
            .await?;
        // A resend waits for the run it replaces (its client went away) to clean up.
        let _exclusive = match &key {
            Some(key) => self.journal.exclusive(key).await,
            None => None,
        };
        let found = self.journal.take(key.as_deref(), admitted.client(), hash);
        if let (Some(key), journal::Found::Answered) = (&key, &found) {
            return self.answer_again(key, &graph).await;
        }
        // Taken after the exclusive hold, so a resend never holds a slot its predecessor
        // needs to finish.
        let slot = tokio::select! {
            slot = self.run_slots.take() => slot,
            () = cancel.cancelled() => return Err(Status::cancelled(
                "the client cancelled the transaction while it waited for a run slot",
            )),
        };
        let placed = self
            .place_or_resume(
                &graph,
                (key.as_deref(), hash, found),
                admitted.client(),
                (scheduler, label),
            )
            .await?;
        let placement = &placed.placement;
        tracing::Span::current().record("graph_id", placement.graph_id);
        progress.placed(placement.graph_id, n);
        let (mut servers, predicted) = placed_servers(placement, n)?;
        data::bind_data(&mut data, &mut arguments, &servers);
        let staging = staging_within_quota(placement, admitted);
        let used: UsedServers = Arc::new(Mutex::new(servers.iter().cloned().collect()));
        Self::lock(&used).extend(placed.also_used.iter().cloned());
        let renewals = self.spawn_renewals(used.clone(), &placed.owner);
        let started = Instant::now();
        let journaling = execution::Journaling {
            key: key.as_deref(),
            restored: placed.restored,
        };
        let outcome = match placed.committed {
            // It ran to its end before the restart: its writes are finished, nothing runs.
            Some(commit) => Ok(Executed::committed(commit)),
            None => tokio::select! {
                outcome = self.execute(
                    (&graph, &arguments, Some(output_region.as_str()).filter(|r| !r.is_empty())),
                    (&mut servers, staging, placed_turns(placement, n, self.config.wait_to_borrow_cores)),
                    (&placed.owner, &used),
                    progress,
                    journaling,
                    &data,
                ) => outcome,
                () = cancel.cancelled() => Err(Failed {
                    status: Status::cancelled("the client cancelled the transaction"),
                    actuals: Vec::new(),
                    makespan: started.elapsed().as_secs_f64(),
                    incidents: Vec::new(),
                }),
            },
        };
        renewals.abort();
        let outcome = self
            .keep_data_outputs(key.as_deref(), admitted.client(), &data, outcome)
            .await;
        // Its writes are done: a resend is answered from its commit, not run over them.
        let answered = outcome.is_ok() && !data.writes.is_empty();
        // Clean-up and the report need no core: the next graph starts meanwhile.
        drop(slot);
        // Whatever happened, nothing the graph stored may stay behind, on the servers first
        // chosen or on those that took over after a fault. The servers are asked at once,
        // and the metaserver told the outcome meanwhile: the client's reply waits for the
        // slowest of them, not for their sum.
        let used: Vec<String> = Self::lock(&used).iter().cloned().collect();
        let clean_up = async {
            futures_util::future::join_all(
                used.iter()
                    .map(|server| self.delete_owner(server, &placed.owner)),
            )
            .await;
            if let Some(key) = &key {
                self.journal.ended(key, (admitted.client(), hash), answered);
            }
        };
        let report = self.report_outcome(&graph, &placed.placement, predicted, outcome);
        let ((), reply) = tokio::join!(clean_up, report);
        let mut reply = reply?;
        reply.schedule_seconds = placed.schedule_seconds;
        Ok(reply)
    }

    /// Deletes what `owner` stored on `server`, now or, while the server cannot be
    /// reached, in the background ([`leftovers`]).
    async fn delete_owner(&self, server: &str, owner: &str) {
        self.delete_leftover(leftovers::Leftover::owner(server, owner))
            .await;
    }

    /// Renews `owner`'s leases on the servers in `used` (which grows when a server takes
    /// over after a fault) every `lease_renew_seconds` until aborted, so a long graph keeps
    /// its intermediates while one whose proxy died loses them.
    fn spawn_renewals(&self, used: UsedServers, owner: &str) -> tokio::task::JoinHandle<()> {
        let cluster = self.cluster.clone();
        let owner = owner.to_string();
        let period = Duration::from_secs_f64(self.config.lease_renew_seconds.max(0.01));
        tokio::spawn(async move {
            let mut ticker = tokio::time::interval(period);
            // The first tick is now; the calls themselves renew at the start.
            ticker.tick().await;
            loop {
                ticker.tick().await;
                let addresses: Vec<String> = Self::lock(&used).iter().cloned().collect();
                for address in addresses {
                    if let Err(status) = cluster.renew(&address, &owner).await {
                        tracing::debug!(server = %address, %owner, error = %status.message(), "lease renewal failed");
                    }
                }
            }
        })
    }
}

/// The servers a graph has used so far.
type UsedServers = Arc<Mutex<BTreeSet<String>>>;

/// A graph that ran to the end.
#[derive(Debug)]
struct Executed {
    /// Where the outputs that become data handles' values were kept: (task, parameter,
    /// object).
    data_objects: Vec<(usize, u32, v1::ObjectRef)>,
    /// Copies of replicated handles' new values made before the commit: (task, parameter,
    /// object).
    written_copies: Vec<(usize, u32, v1::ObjectRef)>,
    /// Inputs the servers kept to become replicas of the handles read: (task, parameter,
    /// object).
    data_replicas: Vec<(usize, u32, v1::ObjectRef)>,
    reports: Vec<v1::TaskReport>,
    actuals: Vec<v1::TaskActual>,
    makespan: f64,
    counts: RunCounts,
    incidents: Vec<v1::GraphIncident>,
    /// The journaled commit of a transaction resumed after it had run to its end: its data
    /// writes to finish ([`Proxy::keep_data_outputs`]).
    commit: Option<v1::JournaledCommit>,
}

impl Executed {
    /// A transaction resumed from its journaled `commit`: its reply as journaled, nothing run.
    fn committed(commit: v1::JournaledCommit) -> Executed {
        Executed {
            data_objects: Vec::new(),
            written_copies: Vec::new(),
            data_replicas: Vec::new(),
            reports: commit.tasks.clone(),
            actuals: Vec::new(),
            makespan: commit.makespan,
            counts: RunCounts {
                resumed: commit.tasks.len() as u32,
                ..RunCounts::default()
            },
            incidents: Vec::new(),
            commit: Some(commit),
        }
    }

    /// The run failed after all, for `status`.
    fn failed(self, status: Status) -> Failed {
        Failed {
            status,
            actuals: self.actuals,
            makespan: self.makespan,
            incidents: self.incidents,
        }
    }
}

/// What a graph that ran to the end did beyond its calls.
#[derive(Debug, Default, Clone, Copy)]
struct RunCounts {
    /// Calls issued again after a fault.
    retried: u32,
    /// Finished tasks run again because their outputs were lost.
    regenerated: u32,
    /// Client arrays uploaded ahead of their calls.
    staged_uploads: u32,
    /// Seconds those uploads took, summed.
    staged_upload_seconds: f64,
    /// Tasks done before the proxy restarted and not run again.
    resumed: u32,
}

/// A graph that stopped.
#[derive(Debug)]
struct Failed {
    status: Status,
    actuals: Vec<v1::TaskActual>,
    makespan: f64,
    incidents: Vec<v1::GraphIncident>,
}

use ninf_proto::clock::unix_ms;

/// Measures the path to each server every `probe_seconds` for as long as the task runs, and
/// a newly registered server's within a second.
pub fn spawn_probes(proxy: Arc<Proxy>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let period = Duration::from_secs_f64(proxy.config.probe_seconds.max(0.05));
        let mut ticker = tokio::time::interval(period.min(Duration::from_secs(1)));
        loop {
            ticker.tick().await;
            if let Err(status) = proxy.probe_servers(period).await {
                tracing::debug!(error = %status.message(), "cannot probe servers");
            }
        }
    })
}

/// A proxy serving in this process.
pub struct Running {
    /// The address it listens on.
    pub address: String,
    pub proxy: Arc<Proxy>,
    /// Where its metrics are served, when `metrics_listen` is set.
    pub metrics: Option<ninf_telemetry::MetricsEndpoint>,
    serving: Serving,
}

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Listen(#[from] ninf_proto::net::NetError),
    #[error("no local address: {0}")]
    Address(std::io::Error),
    #[error("{}", .0.message())]
    Setup(Status),
    #[error(transparent)]
    Journal(#[from] journal::JournalError),
}

/// Starts a proxy as `config` says: listens on `config.listen`, named `config.name` (or its
/// address), probes the servers and serves.
pub async fn bind(config: ProxyConfig) -> Result<Running, StartError> {
    let listener = ninf_proto::net::listen(&config.listen).await?;
    let address = listener
        .local_addr()
        .map_err(StartError::Address)?
        .to_string();
    let name = config.name.clone().unwrap_or_else(|| address.clone());
    let metrics_listen = config.metrics_listen.clone();
    let journal_url = config.journal_url();
    let proxy = Proxy::new(config, name).map_err(StartError::Setup)?;
    if let Some(url) = journal_url {
        open_journal(&proxy, &url).await?;
    }
    let metrics = match metrics_listen {
        Some(listen) => Some(ninf_telemetry::serve(&listen, proxy.metrics_registry.clone()).await?),
        None => None,
    };
    let same_host = listen_same_host(&proxy);
    let serving = {
        let proxy = proxy.clone();
        Serving::spawn(move |shutdown| run(listener, same_host, proxy, shutdown))
    };
    Ok(Running {
        address,
        proxy,
        metrics,
        serving,
    })
}

/// The same-host socket for clients' shared regions, unless the configuration or TLS rules
/// it out or it cannot be opened (clients then send every array by gRPC).
fn listen_same_host(proxy: &Arc<Proxy>) -> Option<tokio::net::UnixListener> {
    if !proxy.config.same_host_uploads || proxy.tls.is_some() {
        return None;
    }
    match same_host::listen() {
        Ok((name, listener)) => {
            let _ = proxy.same_host_socket.set(name);
            Some(listener)
        }
        Err(e) => {
            tracing::warn!(error = %e, "no same-host socket; clients send arrays by gRPC");
            None
        }
    }
}

/// Starts journaling at `url`, with what the journal holds from the proxy's previous life
/// kept for its clients ([`journal::restart`]).
async fn open_journal(proxy: &Arc<Proxy>, url: &str) -> Result<(), journal::JournalError> {
    let store = journal::JournalStore::open(url, &proxy.name).await?;
    let runs = store.load().await?;
    let keep = Duration::from_secs_f64(proxy.config.answer_keep_seconds.max(0.0));
    proxy.journal.start(store, runs, keep);
    let orphans = proxy.journal.orphans().len();
    tracing::info!(journal = %ninf_db::redact(url), transactions = orphans, "journal opened");
    if orphans > 0 {
        journal::restart::spawn_orphan_keeper(proxy.clone());
    }
    Ok(())
}

impl Running {
    /// Stops serving (gracefully).
    pub async fn stop(self) -> Result<(), ServeError> {
        if let Some(metrics) = self.metrics {
            metrics.stop().await;
        }
        self.serving.stop().await
    }

    /// Serves until `signal` completes, then stops.
    pub async fn until(self, signal: impl Future<Output = ()>) -> Result<(), ServeError> {
        let _metrics = self.metrics;
        self.serving.until(signal).await
    }
}

/// Serves the proxy on `listener` until `shutdown` completes.
async fn run(
    listener: TcpListener,
    same_host: Option<tokio::net::UnixListener>,
    proxy: Arc<Proxy>,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), tonic::transport::Error> {
    let mut builder = ninf_proto::net::server(proxy.tls.as_ref())?;
    let probes = spawn_probes(proxy.clone());
    let same_host = same_host.map(|l| tokio::spawn(proxy.shared_regions.clone().serve(l)));
    let (health, health_service) = tonic_health::server::health_reporter();
    health
        .set_serving::<v1::proxy_server::ProxyServer<service::ProxyService>>()
        .await;
    let limit = proxy.config.max_request_bytes;
    let result = builder
        .add_service(health_service)
        .add_service(InterceptedService::new(
            v1::proxy_server::ProxyServer::new(service::ProxyService(proxy.clone()))
                .max_decoding_message_size(limit)
                .max_encoding_message_size(limit),
            CheckToken::new("proxy", proxy.token.as_deref()),
        ))
        .serve_with_incoming_shutdown(ninf_proto::net::incoming(listener), shutdown)
        .await;
    probes.abort();
    if let Some(task) = same_host {
        task.abort();
    }
    result
}
