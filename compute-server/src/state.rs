//! Everything a running server shares between its services: the modules it serves (their
//! interfaces and executable pools, as a [`Catalog`] a reload swaps whole), the storage
//! role, its benchmark figures and limits.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use ninf_executable::rlimits::ProcessLimits;
use ninf_idl::{FunctionInterface, ModuleInterface, SourceFile};
use ninf_proto::net::auth::{AttachToken, CheckToken};
use ninf_proto::net::tls::{GridTls, TlsFiles};
use ninf_proto::v1;
use tonic::transport::Channel;

use crate::config::ServerConfig;
use crate::gang::claims::{CoreClaims, OwnHeld};
use crate::gang::{GangMaster, SpmdBroker};
use crate::peers::Peers;
use crate::pool::{ExecutablePool, PoolOptions};
use crate::storage::ObjectStore;
use crate::storage::region::StoreRegion;

/// A module this server serves.
pub struct ServedModule {
    pub interface: ModuleInterface,
    pub pool: Arc<ExecutablePool>,
    /// What it was started from: a reload keeps the module (and its warm pool) when this
    /// is unchanged.
    pub source: ModuleSource,
}

/// A module's executable and IDL, as a configuration names them.
#[derive(Debug, Clone, PartialEq)]
pub struct ModuleSource {
    pub executable: PathBuf,
    pub idl_name: String,
    pub idl_text: String,
    /// The executable's modification time: a rebuilt executable is a changed module.
    pub modified: Option<std::time::SystemTime>,
}

/// A module that could not be started, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct FailedModule {
    pub executable: PathBuf,
    pub reason: String,
}

/// What the server serves at one moment. A reload builds a new catalog and swaps it in; a
/// call keeps the [`Routine`] it started with, so calls in flight finish on the old one.
#[derive(Default)]
pub struct Catalog {
    pub modules: Vec<Arc<ServedModule>>,
    /// Function name to (module, function) indices.
    functions: HashMap<String, (usize, usize)>,
    /// Modules named by the configuration that could not be started.
    pub failed: Vec<FailedModule>,
}

impl Catalog {
    pub fn function(&self, name: &str) -> Option<Routine> {
        let &(module, index) = self.functions.get(name)?;
        Some(Routine {
            module: self.modules.get(module)?.clone(),
            index,
        })
    }
}

/// A routine found in a catalog; it keeps its module (and warm pool) alive.
#[derive(Clone)]
pub struct Routine {
    module: Arc<ServedModule>,
    index: usize,
}

impl Routine {
    pub fn interface(&self) -> &FunctionInterface {
        &self.module.interface.functions[self.index]
    }

    pub fn pool(&self) -> &Arc<ExecutablePool> {
        &self.module.pool
    }
}

pub struct ServerState {
    /// Address under which this server's stored objects are known (`host:port`).
    pub advertise: String,
    /// What the server counts for Prometheus, and the registry it is served from.
    pub metrics: crate::metrics::ServerMetrics,
    pub metrics_registry: Arc<ninf_telemetry::Registry>,
    /// The modules served now (swapped whole by [`ServerState::reload`]).
    catalog: RwLock<Arc<Catalog>>,
    /// What starts a module's pool: processors, pool sizes, slowdown, limits, broker.
    pool_settings: PoolSettings,
    /// Told after a reload, so that the registration task registers the new catalog.
    pub reregister: tokio::sync::Notify,
    /// The server is leaving (its batch job ends, or it was told to stop): it admits no new
    /// calls and finishes those it has ([`crate::drain`]).
    pub draining: std::sync::atomic::AtomicBool,
    pub store: ObjectStore,
    /// Keyed calls, which outlive a caller that goes away ([`crate::detached`]).
    pub detached: Arc<crate::detached::Detached>,
    /// Where large stored arrays live, shared with the executables (`None` without memfd).
    pub store_region: Option<Arc<StoreRegion>>,
    pub info: v1::ServerInfo,
    pub max_request_bytes: u64,
    pub call_timeout: Duration,
    pub last_load: RwLock<v1::LoadSample>,
    /// The gang scheduler every call goes through.
    pub gang: Arc<GangMaster>,
    /// Messages between the ranks of parallel jobs.
    pub broker: Arc<SpmdBroker>,
    /// The cores this server holds while it computes and may borrow from its host's other
    /// servers (`[gang] core_claims`); `None`: it neither lends nor borrows.
    pub claims: Option<CoreClaims>,
    /// Connections to other servers' storage, for arguments held elsewhere.
    peers: Peers,
    /// Stored arrays borrowed from the other servers of this host, read where they lie.
    pub borrowing: crate::storage::borrowing::Borrowing,
    /// How long an owner's objects outlive its last touch (see [`ObjectStore::renew`]).
    pub lease: Duration,
    /// The clock leases are measured on.
    started: std::time::Instant,
    /// The grid's token, which every request here must carry and which this server presents
    /// to the metaserver and its peers; `None`: an open server.
    pub token: Option<String>,
    /// Where the token came from, for node agents started as processes.
    pub token_file: Option<PathBuf>,
    /// TLS material, when the grid runs over TLS.
    pub tls: Option<GridTls>,
    /// Where it came from, for node agents started as processes.
    pub tls_files: Option<TlsFiles>,
}

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("{0}")]
    Idl(String),
    #[error("function `{function}` is served by both module `{first}` and module `{second}`")]
    DuplicateFunction {
        function: String,
        first: String,
        second: String,
    },
    #[error(transparent)]
    Pool(#[from] crate::pool::PoolError),
    #[error("cannot open the message broker's socket: {0}")]
    Broker(std::io::Error),
    #[error(transparent)]
    Token(#[from] ninf_proto::net::auth::TokenError),
    #[error(transparent)]
    Tls(#[from] ninf_proto::net::tls::TlsError),
    #[error(transparent)]
    Listen(#[from] ninf_proto::net::NetError),
    #[error("{0}")]
    Io(std::io::Error),
    #[error("invalid configuration: {0}")]
    Config(String),
}

impl ServerState {
    /// Compiles the modules' IDL and starts their warm pools.
    pub async fn start(
        config: &ServerConfig,
        advertise: String,
        info: v1::ServerInfo,
    ) -> Result<Arc<ServerState>, StartError> {
        let sources = module_sources(config)?;
        let token = ninf_proto::net::auth::load_configured(config.auth_token_file.as_deref())?;
        let tls = GridTls::load_configured(config.tls.as_ref())?;
        // The bulk-data port is plain TCP, and the same-host socket checks no certificate:
        // a TLS server advertises neither (`run` closes both).
        let info = if tls.is_some() {
            v1::ServerInfo {
                bulk_address: String::new(),
                bulk_local: String::new(),
                store_local: String::new(),
                ..info
            }
        } else {
            info
        };
        let processors = config.processors();
        let gang = GangMaster::new(config.gang.clone(), processors as u32);
        let broker = SpmdBroker::start(gang.clone()).map_err(StartError::Broker)?;
        let claims = core_claims(config, processors).map_err(StartError::Io)?;
        // Without a store region (no memfd) stored arrays stay on the heap and are copied
        // into each call's request region, as before there was one.
        let store_region = match StoreRegion::create(config.storage.memory_limit_bytes) {
            Ok(region) => Some(region),
            Err(e) => {
                tracing::warn!(error = %e, "no store region: stored arrays are copied for each call");
                None
            }
        };
        let pool_settings = PoolSettings {
            keep: processors * config.gang.max_rows.max(1),
            broker: broker.path().to_path_buf(),
            cpu_slowdown: config.cpu_slowdown,
            limits: config.executable_limits.process_limits(),
            store: store_region.clone(),
        };
        let catalog = Catalog::build(sources, &pool_settings, &Catalog::default()).await?;
        let spill_dir = config.storage.spill_dir.clone().unwrap_or_else(|| {
            std::env::temp_dir().join(format!("ninf-spill-{}", std::process::id()))
        });
        let store = ObjectStore::new(config.storage.memory_limit_bytes, spill_dir);
        let (metrics, registry) = crate::metrics::ServerMetrics::new(&advertise);
        let state = ServerState {
            metrics,
            metrics_registry: Arc::new(registry),
            advertise,
            catalog: RwLock::new(Arc::new(catalog)),
            pool_settings,
            reregister: tokio::sync::Notify::new(),
            draining: std::sync::atomic::AtomicBool::new(false),
            store,
            detached: Arc::new(crate::detached::Detached::new(Duration::from_secs_f64(
                config.storage.lease_seconds.max(0.001),
            ))),
            store_region,
            info,
            max_request_bytes: config.max_request_bytes,
            call_timeout: Duration::from_secs_f64(config.call_timeout_seconds.max(0.001)),
            last_load: RwLock::new(crate::monitor::sample(0, 0, 0)),
            gang,
            broker,
            claims,
            peers: Peers::default(),
            borrowing: Default::default(),
            lease: Duration::from_secs_f64(config.storage.lease_seconds.max(0.001)),
            started: std::time::Instant::now(),
            token,
            token_file: config.auth_token_file.clone(),
            tls,
            tls_files: config.tls.clone(),
        };
        Ok(Arc::new(state))
    }

    /// Holds this server's own cores for a call (see [`CoreClaims`]); nothing without
    /// `[gang] core_claims`.
    pub async fn hold_own_cores(&self, function: &str) -> Result<OwnHeld, tonic::Status> {
        match &self.claims {
            Some(claims) => claims.own().await.map_err(|e| {
                tonic::Status::unavailable(format!(
                    "`{function}`: cannot claim this server's cores: {e}"
                ))
            }),
            None => Ok(OwnHeld::default()),
        }
    }

    /// Seconds on the lease clock.
    pub fn lease_clock(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }

    /// Renews `owner`'s lease (a call, put or renewal touched it); returns its objects.
    pub fn touch(&self, owner: &str) -> u64 {
        if owner.is_empty() {
            return 0;
        }
        self.store
            .renew(owner, self.lease_clock(), self.lease.as_secs_f64())
    }

    /// Deletes the objects of owners whose lease ran out, and logs each.
    pub fn expire_leases(&self) {
        for (owner, objects, bytes) in self
            .store
            .expire(self.lease_clock(), self.lease.as_secs_f64())
        {
            tracing::warn!(
                %owner,
                objects,
                bytes,
                lease_seconds = self.lease.as_secs_f64(),
                "lease ran out: deleted the owner's objects"
            );
        }
    }

    /// The modules served now.
    pub fn catalog(&self) -> Arc<Catalog> {
        ninf_proto::sync::read(&self.catalog).clone()
    }

    /// The routine `name`, as served now.
    pub fn function(&self, name: &str) -> Option<Routine> {
        self.catalog().function(name)
    }

    /// Serves the modules `config` names from now on: unchanged modules keep their warm
    /// pools, new and changed ones start, removed ones stop once their calls in flight end.
    /// A configuration that cannot be served (an IDL error, a routine in two modules) changes
    /// nothing and is returned as the error.
    pub async fn reload(&self, config: &ServerConfig) -> Result<Arc<Catalog>, StartError> {
        let sources = module_sources(config)?;
        let current = self.catalog();
        let catalog = Arc::new(Catalog::build(sources, &self.pool_settings, &current).await?);
        *ninf_proto::sync::write(&self.catalog) = catalog.clone();
        self.reregister.notify_one();
        for module in &current.modules {
            if !catalog.modules.iter().any(|m| Arc::ptr_eq(m, module)) {
                // Its idle executables stop now; checked-out ones when their calls end.
                module.pool.shutdown().await;
            }
        }
        Ok(catalog)
    }

    /// Takes a fresh load sample and remembers it.
    pub fn sample_load(&self) -> v1::LoadSample {
        let (running, queued, rows, expected_wait) = self.gang.load();
        let (memory, spilled) = self.store.usage();
        self.metrics
            .sample(queued, memory + spilled, self.gang.switches());
        let mut sample = crate::monitor::sample(running, queued, memory + spilled);
        sample.processors = self.gang.processors;
        sample.busy_rows = rows as u32;
        sample.max_rows = self.gang.settings.max_rows as u32;
        sample.expected_wait_seconds = expected_wait;
        {
            let mut last = ninf_proto::sync::write(&self.last_load);
            *last = sample;
        }
        sample
    }

    /// What this server presents to the metaserver and its peers.
    pub fn credentials(&self) -> AttachToken {
        AttachToken::new(self.token.as_deref())
    }

    /// What requests to this server must present.
    pub fn check(&self) -> CheckToken {
        CheckToken::new("compute server", self.token.as_deref())
    }

    /// A channel to another server, reused across calls.
    pub async fn peer(&self, server: &str) -> Result<Channel, String> {
        self.peers.channel(server, self.tls.as_ref()).await
    }

    pub async fn shutdown(&self) {
        for module in &self.catalog().modules {
            module.pool.shutdown().await;
        }
    }
}

/// What starting a module's warm pool takes.
struct PoolSettings {
    /// Executables of each module started with it and kept warm: one for every job the
    /// time table can hold at once (processors x rows), about 3 MB each while idle. Started
    /// when a call found none idle, each cost its call 6-8 ms, paid by the first graphs to
    /// reach each new number of jobs at once (docs/performance.md, "An executable for every
    /// job the time table holds").
    keep: usize,
    broker: PathBuf,
    cpu_slowdown: f64,
    limits: ProcessLimits,
    store: Option<Arc<StoreRegion>>,
}

/// The modules `config` names: the standard ones when it names none, then its own, then
/// those added by flags.
fn module_sources(config: &ServerConfig) -> Result<Vec<ModuleSource>, StartError> {
    let mut sources = Vec::new();
    let modified = |path: &Path| std::fs::metadata(path).and_then(|m| m.modified()).ok();
    if config.modules.is_empty() {
        for (executable, name, text) in ServerConfig::standard_modules() {
            sources.push(ModuleSource {
                modified: modified(&executable),
                executable,
                idl_name: name.to_string(),
                idl_text: text.to_string(),
            });
        }
    }
    for module in config.modules.iter().chain(&config.extra_modules) {
        let text = std::fs::read_to_string(&module.idl)
            .map_err(|e| StartError::Idl(format!("cannot read {}: {e}", module.idl.display())))?;
        sources.push(ModuleSource {
            modified: modified(&module.executable),
            executable: module.executable.clone(),
            idl_name: module.idl.display().to_string(),
            idl_text: text,
        });
    }
    Ok(sources)
}

/// How long a new module's executables must stay up to count as started.
const START_CHECK: Duration = Duration::from_millis(150);

impl Catalog {
    /// A catalog of `sources`: modules unchanged from `previous` are kept as they are (their
    /// pools warm), the others started. A module whose executable cannot be started or exits
    /// at once is left out and listed as failed; the others are served.
    async fn build(
        sources: Vec<ModuleSource>,
        settings: &PoolSettings,
        previous: &Catalog,
    ) -> Result<Catalog, StartError> {
        let mut catalog = Catalog::default();
        let mut started = Vec::new();
        for source in sources {
            let interface = ninf_idl::compile(&SourceFile::new(&source.idl_name, &source.idl_text))
                .map_err(|d| StartError::Idl(d.to_string()))?;
            if let Some(kept) = previous.modules.iter().find(|m| m.source == source) {
                catalog.add(kept.clone())?;
                continue;
            }
            let options = PoolOptions {
                warm: settings.keep,
                size: settings.keep,
                spmd_socket: Some(settings.broker.clone()),
                cpu_slowdown: settings.cpu_slowdown,
                limits: settings.limits,
                die_with_parent: false,
                store: settings.store.clone(),
            };
            let pool = ExecutablePool::start(&interface.module, &source.executable, options).await;
            match pool {
                Ok(pool) => started.push(ServedModule {
                    interface,
                    pool,
                    source,
                }),
                Err(e) => catalog.fail(&source, e.to_string()),
            }
        }
        if !started.is_empty() {
            tokio::time::sleep(START_CHECK).await;
        }
        for module in started {
            match module.pool.check_started() {
                Ok(()) => catalog.add(Arc::new(module))?,
                Err(e) => {
                    module.pool.shutdown().await;
                    catalog.fail(&module.source, e.to_string());
                }
            }
        }
        Ok(catalog)
    }

    fn fail(&mut self, source: &ModuleSource, reason: String) {
        tracing::error!(executable = %source.executable.display(), %reason, "module not served");
        self.failed.push(FailedModule {
            executable: source.executable.clone(),
            reason,
        });
    }

    fn add(&mut self, module: Arc<ServedModule>) -> Result<(), StartError> {
        for (index, f) in module.interface.functions.iter().enumerate() {
            if let Some(&(other, _)) = self.functions.get(&f.name) {
                return Err(StartError::DuplicateFunction {
                    function: f.name.clone(),
                    first: self.modules[other].interface.module.clone(),
                    second: module.interface.module.clone(),
                });
            }
            self.functions
                .insert(f.name.clone(), (self.modules.len(), index));
        }
        self.modules.push(module);
        Ok(())
    }
}

/// The server's core claims, when `[gang] core_claims` names a directory: its own cores are
/// those its columns are pinned to.
fn core_claims(config: &ServerConfig, processors: usize) -> std::io::Result<Option<CoreClaims>> {
    let Some(dir) = &config.gang.core_claims else {
        return Ok(None);
    };
    let cores = if config.gang.cores.is_empty() {
        crate::gang::cores::allowed()
    } else {
        config.gang.cores.clone()
    };
    let own = (0..processors as u32)
        .filter_map(|column| crate::gang::cores::core_of(column, &cores))
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    CoreClaims::new(dir, own, config.gang.spare_cores.clone()).map(Some)
}
