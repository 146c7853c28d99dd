//! Everything a running server shares between its services: the modules it serves (their
//! interfaces and executable pools), the storage role, its benchmark figures and limits.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use ninf_idl::{FunctionInterface, ModuleInterface, SourceFile};
use ninf_proto::net::auth::{AttachToken, CheckToken};
use ninf_proto::net::tls::{GridTls, TlsFiles};
use ninf_proto::v1;
use tonic::transport::Channel;

use crate::config::ServerConfig;
use crate::gang::{GangMaster, SpmdBroker};
use crate::peers::Peers;
use crate::pool::ExecutablePool;
use crate::storage::ObjectStore;

/// A module this server serves.
pub struct ServedModule {
    pub interface: ModuleInterface,
    pub pool: Arc<ExecutablePool>,
}

pub struct ServerState {
    /// Address under which this server's stored objects are known (`host:port`).
    pub advertise: String,
    /// What the server counts for Prometheus, and the registry it is served from.
    pub metrics: crate::metrics::ServerMetrics,
    pub metrics_registry: Arc<ninf_telemetry::Registry>,
    pub modules: Vec<ServedModule>,
    /// Function name to index in `modules`.
    functions: HashMap<String, usize>,
    pub store: ObjectStore,
    pub info: v1::ServerInfo,
    pub max_request_bytes: u64,
    pub call_timeout: Duration,
    pub last_load: RwLock<v1::LoadSample>,
    /// The gang scheduler every call goes through.
    pub gang: Arc<GangMaster>,
    /// Messages between the ranks of parallel jobs.
    pub broker: Arc<SpmdBroker>,
    /// Connections to other servers' storage, for arguments held elsewhere.
    peers: Peers,
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
}

impl ServerState {
    /// Compiles the modules' IDL and starts their warm pools.
    pub async fn start(
        config: &ServerConfig,
        advertise: String,
        info: v1::ServerInfo,
    ) -> Result<Arc<ServerState>, StartError> {
        let mut sources: Vec<(PathBuf, SourceFile)> = Vec::new();
        if config.modules.is_empty() {
            for (executable, name, text) in ServerConfig::standard_modules() {
                sources.push((executable, SourceFile::new(name, text)));
            }
        }
        for module in config.modules.iter().chain(&config.extra_modules) {
            let text = std::fs::read_to_string(&module.idl).map_err(|e| {
                StartError::Idl(format!("cannot read {}: {e}", module.idl.display()))
            })?;
            sources.push((
                module.executable.clone(),
                SourceFile::new(module.idl.display().to_string(), text),
            ));
        }
        let token = ninf_proto::net::auth::load_configured(config.auth_token_file.as_deref())?;
        let tls = GridTls::load_configured(config.tls.as_ref())?;
        // The bulk-data port is plain TCP: a TLS server advertises none (`run` closes it).
        let info = if tls.is_some() {
            v1::ServerInfo {
                bulk_address: String::new(),
                ..info
            }
        } else {
            info
        };
        let processors = config.processors();
        let gang = GangMaster::new(config.gang.clone(), processors as u32);
        let broker = SpmdBroker::start(gang.clone()).map_err(StartError::Broker)?;
        let keep = processors * config.gang.max_rows.max(1);
        let mut modules = Vec::new();
        let mut functions = HashMap::new();
        for (executable, source) in sources {
            let interface =
                ninf_idl::compile(&source).map_err(|d| StartError::Idl(d.to_string()))?;
            for f in &interface.functions {
                if let Some(&other) = functions.get(&f.name) {
                    let first: &ServedModule = &modules[other];
                    return Err(StartError::DuplicateFunction {
                        function: f.name.clone(),
                        first: first.interface.module.clone(),
                        second: interface.module.clone(),
                    });
                }
                functions.insert(f.name.clone(), modules.len());
            }
            let pool = ExecutablePool::start(
                &interface.module,
                Path::new(&executable),
                processors,
                keep,
                Some(broker.path()),
                config.cpu_slowdown,
                config.executable_limits.process_limits(),
            )
            .await?;
            modules.push(ServedModule { interface, pool });
        }
        let spill_dir = config.storage.spill_dir.clone().unwrap_or_else(|| {
            std::env::temp_dir().join(format!("ninf-spill-{}", std::process::id()))
        });
        let store = ObjectStore::new(config.storage.memory_limit_bytes, spill_dir);
        let (metrics, registry) = crate::metrics::ServerMetrics::new(&advertise);
        let state = ServerState {
            metrics,
            metrics_registry: Arc::new(registry),
            advertise,
            modules,
            functions,
            store,
            info,
            max_request_bytes: config.max_request_bytes,
            call_timeout: Duration::from_secs_f64(config.call_timeout_seconds.max(0.001)),
            last_load: RwLock::new(crate::monitor::sample(0, 0, 0)),
            gang,
            broker,
            peers: Peers::default(),
            lease: Duration::from_secs_f64(config.storage.lease_seconds.max(0.001)),
            started: std::time::Instant::now(),
            token,
            token_file: config.auth_token_file.clone(),
            tls,
            tls_files: config.tls.clone(),
        };
        Ok(Arc::new(state))
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

    pub fn function(&self, name: &str) -> Option<(&FunctionInterface, &ServedModule)> {
        let module = &self.modules[*self.functions.get(name)?];
        Some((module.interface.function(name)?, module))
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
        for module in &self.modules {
            module.pool.shutdown().await;
        }
    }
}
