//! An embedded local grid in one process tree: a metaserver on SQLite in a data directory, one
//! client proxy and N compute servers, each on its own loopback port, all in this process
//! (their executables are child processes). `ninf up`, `ninf demo` and the end-to-end tests
//! start grids this way. Relative server speeds are the processors each server offers.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use ninf_client_proxy::{Proxy, ProxyConfig};
use ninf_compute_server::config::ModuleConfig;
use ninf_compute_server::registration::{self, RegistrationConfig};
use ninf_compute_server::{ServerConfig, ServerState};
use ninf_metaserver::{Metaserver, MetaserverConfig};
use ninf_proto::net::tls::{GridTls, TlsFiles};
use ninf_proto::v1;
use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// What to start.
#[derive(Debug, Clone)]
pub struct GridOptions {
    /// Processors offered by each server (their relative speeds); one entry per server.
    pub processors: Vec<u32>,
    pub scheduler: String,
    pub predictor: String,
    pub data_dir: PathBuf,
    /// Modules every server serves; empty: the standard modules next to this program.
    pub modules: Vec<ModuleConfig>,
    /// MFLOPS per processor every server reports; `None` runs the start-up benchmark once.
    pub mflops: Option<f64>,
    pub heartbeat_seconds: f64,
    pub heartbeat_timeout_seconds: f64,
    pub network_seconds: f64,
    pub probe_seconds: f64,
    /// Generate a grid token (`DATA_DIR/token`, mode 0600) that every request must carry:
    /// servers present it to the metaserver and to each other, the proxy to the metaserver
    /// and the servers, clients to the proxy (or to a server they call directly).
    pub auth: bool,
    /// The proxy's per-client quota of intermediate bytes kept on the servers.
    pub max_stored_bytes_per_client: u64,
    /// Run every connection over TLS: a new certificate authority and certificates in
    /// `DATA_DIR/tls` (see [`tls_files`]); the metaserver and servers require client
    /// certificates, the proxy accepts clients without (they present the token).
    pub tls: bool,
}

impl GridOptions {
    pub fn new(processors: Vec<u32>, data_dir: &Path) -> GridOptions {
        GridOptions {
            processors,
            scheduler: "flow".into(),
            predictor: "latest".into(),
            data_dir: data_dir.to_path_buf(),
            modules: Vec::new(),
            mflops: None,
            heartbeat_seconds: 0.5,
            heartbeat_timeout_seconds: 2.0,
            network_seconds: 5.0,
            probe_seconds: 5.0,
            auth: false,
            max_stored_bytes_per_client: ProxyConfig::new("").max_stored_bytes_per_client,
            tls: false,
        }
    }
}

/// Where a running grid is, written to `DATA_DIR/grid.toml` so `ninf status` finds it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Endpoints {
    pub metaserver: String,
    pub proxy: String,
    pub servers: Vec<String>,
    /// The process that runs the grid.
    pub pid: u32,
    /// The grid's token file, when clients must present its token.
    #[serde(default)]
    pub token_file: Option<PathBuf>,
    /// The folder of the grid's TLS material, when it runs over TLS.
    #[serde(default)]
    pub tls_dir: Option<PathBuf>,
}

impl Endpoints {
    /// The grid's token, if it has one.
    pub fn token(&self) -> anyhow::Result<Option<String>> {
        match &self.token_file {
            Some(path) => Ok(Some(ninf_proto::net::auth::load_token(path)?)),
            None => Ok(None),
        }
    }

    /// TLS material for the grid's own tools (`ninf status`, `ninf call`), if it runs over
    /// TLS: the authority and the `client` certificate.
    pub fn tls(&self) -> anyhow::Result<Option<GridTls>> {
        match &self.tls_dir {
            Some(dir) => Ok(Some(GridTls::load(&tls_files(dir, "client"))?)),
            None => Ok(None),
        }
    }

    pub fn file(data_dir: &Path) -> PathBuf {
        data_dir.join("grid.toml")
    }

    pub fn read(data_dir: &Path) -> anyhow::Result<Endpoints> {
        let path = Endpoints::file(data_dir);
        let text = std::fs::read_to_string(&path).with_context(|| {
            format!(
                "no grid is running with data directory {} (start one with `ninf up`)",
                data_dir.display()
            )
        })?;
        toml::from_str(&text).with_context(|| format!("{} is not a grid file", path.display()))
    }
}

/// A task serving until its shutdown signal fires.
struct Service {
    shutdown: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
}

impl Service {
    fn spawn<F>(serve: impl FnOnce(oneshot::Receiver<()>) -> F) -> Service
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        Service {
            shutdown: Some(tx),
            task: tokio::spawn(serve(rx)),
        }
    }

    async fn stop(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        let _ = self.task.await;
    }
}

/// One compute server of the grid.
pub struct GridServer {
    pub address: String,
    pub state: Arc<ServerState>,
    service: Service,
    registration: JoinHandle<()>,
}

impl GridServer {
    /// Stops its heartbeats (it keeps serving): the metaserver will mark it down.
    pub fn silence(&self) {
        self.registration.abort();
    }
}

/// A running embedded grid.
pub struct EmbeddedGrid {
    pub options: GridOptions,
    pub endpoints: Endpoints,
    pub metaserver: Arc<Metaserver>,
    pub proxy: Arc<Proxy>,
    pub servers: Vec<GridServer>,
    metaserver_service: Option<Service>,
    proxy_service: Service,
}

fn token_file(data_dir: &Path) -> PathBuf {
    data_dir.join("token")
}

fn tls_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("tls")
}

/// The names [`EmbeddedGrid::start`] and `ninf certs` generate certificates for.
pub const TLS_NAMES: [&str; 4] = ["metaserver", "proxy", "server", "client"];

/// A component's TLS files in `dir`; only the proxy lets clients in without a certificate.
pub fn tls_files(dir: &Path, name: &str) -> TlsFiles {
    ninf_proto::net::tls::files_in(dir, name, name != "proxy")
}

/// The component's TLS settings when the grid runs over TLS.
fn component_tls(options: &GridOptions, name: &str) -> Option<TlsFiles> {
    options
        .tls
        .then(|| tls_files(&tls_dir(&options.data_dir), name))
}

fn metaserver_config(options: &GridOptions, listen: &str) -> MetaserverConfig {
    MetaserverConfig {
        listen: listen.to_string(),
        data_dir: options.data_dir.clone(),
        scheduler: options.scheduler.clone(),
        predictor: options.predictor.clone(),
        heartbeat_seconds: options.heartbeat_seconds,
        heartbeat_timeout_seconds: options.heartbeat_timeout_seconds,
        network_seconds: options.network_seconds,
        auth_token_file: options.auth.then(|| token_file(&options.data_dir)),
        tls: component_tls(options, "metaserver"),
        ..MetaserverConfig::default()
    }
}

async fn start_metaserver(
    options: &GridOptions,
    listen: &str,
) -> anyhow::Result<(Arc<Metaserver>, Service, String)> {
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("cannot listen on {listen}"))?;
    let address = listener.local_addr()?.to_string();
    let metaserver = Metaserver::open(metaserver_config(options, &address)).await?;
    let service = {
        let metaserver = metaserver.clone();
        Service::spawn(move |rx| async move {
            let shutdown = async {
                let _ = rx.await;
            };
            if let Err(e) = ninf_metaserver::run(listener, metaserver, shutdown).await {
                tracing::error!(error = %e, "metaserver stopped");
            }
        })
    };
    Ok((metaserver, service, address))
}

impl EmbeddedGrid {
    /// Starts everything and waits until every server has registered and the proxy has
    /// measured its paths to them.
    pub async fn start(options: GridOptions) -> anyhow::Result<EmbeddedGrid> {
        if options.processors.is_empty() {
            anyhow::bail!("a grid needs at least one server");
        }
        std::fs::create_dir_all(&options.data_dir)
            .with_context(|| format!("cannot create {}", options.data_dir.display()))?;
        if options.auth {
            ninf_proto::net::auth::generate_token(&token_file(&options.data_dir))?;
        }
        if options.tls {
            let hosts = ["127.0.0.1".to_string(), "localhost".to_string()];
            ninf_proto::net::tls::generate(&tls_dir(&options.data_dir), &TLS_NAMES, &hosts)?;
        }
        let (metaserver, metaserver_service, metaserver_address) =
            start_metaserver(&options, "127.0.0.1:0").await?;
        let mflops = match options.mflops {
            Some(m) => m,
            None => {
                tokio::task::spawn_blocking(|| {
                    ninf_compute_server::benchmark::run_adaptive(Duration::from_millis(200), 3000)
                })
                .await??
                .mflops
            }
        };
        let mut servers = Vec::new();
        for (i, &processors) in options.processors.iter().enumerate() {
            servers.push(start_server(&options, i, processors, mflops, &metaserver_address).await?);
        }
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let proxy_address = listener.local_addr()?.to_string();
        let proxy = Proxy::new(
            ProxyConfig {
                probe_seconds: options.probe_seconds,
                auth_token_file: options.auth.then(|| token_file(&options.data_dir)),
                max_stored_bytes_per_client: options.max_stored_bytes_per_client,
                tls: component_tls(&options, "proxy"),
                ..ProxyConfig::new(metaserver_address.clone())
            },
            proxy_address.clone(),
        )
        .map_err(|s| anyhow::anyhow!("{}", s.message()))?;
        let proxy_service = {
            let proxy = proxy.clone();
            Service::spawn(move |rx| async move {
                let shutdown = async {
                    let _ = rx.await;
                };
                if let Err(e) = ninf_client_proxy::run(listener, proxy, shutdown).await {
                    tracing::error!(error = %e, "proxy stopped");
                }
            })
        };
        let endpoints = Endpoints {
            metaserver: metaserver_address,
            proxy: proxy_address,
            servers: servers.iter().map(|s| s.address.clone()).collect(),
            pid: std::process::id(),
            token_file: options.auth.then(|| token_file(&options.data_dir)),
            tls_dir: options.tls.then(|| tls_dir(&options.data_dir)),
        };
        let grid = EmbeddedGrid {
            options,
            endpoints,
            metaserver,
            proxy,
            servers,
            metaserver_service: Some(metaserver_service),
            proxy_service,
        };
        grid.wait_until_up(grid.servers.len()).await?;
        grid.proxy
            .probe_servers(std::time::Duration::ZERO)
            .await
            .map_err(|s| anyhow::anyhow!("probing servers: {}", s.message()))?;
        std::fs::write(
            Endpoints::file(&grid.options.data_dir),
            toml::to_string(&grid.endpoints)?,
        )?;
        Ok(grid)
    }

    /// Waits until the metaserver lists `count` servers as up.
    pub async fn wait_until_up(&self, count: usize) -> anyhow::Result<()> {
        for _ in 0..400 {
            let status = self.metaserver.status(0).await?;
            if status.servers.iter().filter(|s| s.up).count() >= count {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        anyhow::bail!("the servers did not register with the metaserver in 10 s")
    }

    /// Stops the metaserver and starts a new one on the same address and database.
    pub async fn restart_metaserver(&mut self) -> anyhow::Result<()> {
        if let Some(service) = self.metaserver_service.take() {
            service.stop().await;
        }
        let (metaserver, service, _) =
            start_metaserver(&self.options, &self.endpoints.metaserver).await?;
        self.metaserver = metaserver;
        self.metaserver_service = Some(service);
        Ok(())
    }

    /// Bytes every server holds in its storage role.
    pub fn stored_bytes(&self) -> Vec<u64> {
        self.servers
            .iter()
            .map(|s| {
                let (memory, spilled) = s.state.store.usage();
                memory + spilled
            })
            .collect()
    }

    /// Stops everything.
    pub async fn stop(self) {
        self.proxy_service.stop().await;
        for server in self.servers {
            server.registration.abort();
            server.service.stop().await;
        }
        if let Some(service) = self.metaserver_service {
            service.stop().await;
        }
        let _ = std::fs::remove_file(Endpoints::file(&self.options.data_dir));
    }
}

async fn start_server(
    options: &GridOptions,
    index: usize,
    processors: u32,
    mflops: f64,
    metaserver: &str,
) -> anyhow::Result<GridServer> {
    let config = ServerConfig {
        processors: Some(processors.max(1) as usize),
        modules: options.modules.clone(),
        storage: ninf_compute_server::config::StorageConfig {
            spill_dir: Some(options.data_dir.join(format!("spill-{index}"))),
            ..Default::default()
        },
        metaserver: Some(metaserver.to_string()),
        auth_token_file: options.auth.then(|| token_file(&options.data_dir)),
        tls: component_tls(options, "server"),
        ..ServerConfig::default()
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?.to_string();
    let bulk = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let info = v1::ServerInfo {
        mflops,
        cpus: std::thread::available_parallelism().map_or(1, |p| p.get()) as u32,
        memory_bytes: ninf_compute_server::benchmark::total_memory_bytes().unwrap_or(0),
        benchmark_n: 0,
        processors: config.processors() as u32,
        bulk_address: bulk.local_addr()?.to_string(),
    };
    let state = ServerState::start(&config, address.clone(), info)
        .await
        .with_context(|| format!("starting server {index}"))?;
    let service = {
        let state = state.clone();
        Service::spawn(move |rx| async move {
            let shutdown = async {
                let _ = rx.await;
            };
            let interval = Duration::from_secs(1);
            if let Err(e) =
                ninf_compute_server::run(listener, Some(bulk), state, interval, shutdown).await
            {
                tracing::error!(error = %e, "compute server stopped");
            }
        })
    };
    let registration = registration::spawn(
        state.clone(),
        RegistrationConfig {
            metaserver: metaserver.to_string(),
            probe_bytes: config.probe_bytes,
        },
    );
    Ok(GridServer {
        address,
        state,
        service,
        registration,
    })
}
