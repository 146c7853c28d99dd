//! An embedded local grid in one process tree: a metaserver on SQLite in a data directory, one
//! client proxy and N compute servers, each on its own loopback port, all in this process
//! (their executables are child processes). `ninf up`, `ninf demo` and the end-to-end tests
//! start grids this way. Relative server speeds are the processors each server offers.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use ninf_client_proxy::{Proxy, ProxyConfig};
use ninf_compute_server::config::GangSettings;
pub use ninf_compute_server::config::ModuleConfig;
use ninf_compute_server::gang::cores;
use ninf_compute_server::{ServerConfig, ServerState};
use ninf_metaserver::config::AllocationConfig;
use ninf_metaserver::{Metaserver, MetaserverConfig};
use ninf_proto::net::tls::{GridTls, TlsFiles};
use ninf_proto::v1;
use serde::{Deserialize, Serialize};

/// What to start.
#[derive(Debug, Clone)]
pub struct GridOptions {
    /// Processors offered by each server (their relative speeds); one entry per server.
    pub processors: Vec<u32>,
    pub scheduler: String,
    pub predictor: String,
    /// Whether the metaserver's predictions learn from finished graphs (its `calibrate`).
    pub calibrate: bool,
    /// Whether what the metaserver expects of a graph comes from like graphs (its
    /// `templates`).
    pub templates: bool,
    pub data_dir: PathBuf,
    /// Modules every server serves; empty: the standard modules next to this program.
    pub modules: Vec<ModuleConfig>,
    /// Modules every server serves beside those (`ninf up --module`).
    pub extra_modules: Vec<ModuleConfig>,
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
    /// The metaserver's resource DB (`postgres://...`); `None`: SQLite under `data_dir`.
    pub database_url: Option<String>,
    /// The proxy's limit of running transactions per client, and its waiting room.
    pub max_transactions_per_client: usize,
    pub max_queued_transactions: usize,
    /// The proxy's run slots over all clients (`max_running_transactions`; 0: no limit).
    pub max_running_transactions: usize,
    /// Whether the proxy sends calls with large arrays to the servers' bulk ports (its
    /// `bulk_calls`).
    pub bulk_calls: bool,
    /// Whether those calls go through the servers' same-host sockets, with the arrays in
    /// shared memory (the proxy's `same_host_calls`); otherwise their TCP bulk ports.
    pub same_host_calls: bool,
    /// Whether a client on this host may pass its large arrays to the proxy in shared
    /// memory (the proxy's `same_host_uploads`).
    pub same_host_uploads: bool,
    /// Whether servers with cores of their own lend them to each other's lone calls while
    /// they run nothing (`[gang] core_claims`; see [`lending_cores`]).
    pub lend_cores: bool,
    /// Whether a graph's long calls take turns on their server (the metaserver's
    /// `turns_min_seconds`; docs/scheduling.md, "Turns"); `false`: every call is issued
    /// when ready, as before turns.
    pub turns: bool,
    /// The least flops of a call lent cores (the servers' `[gang] lend_min_flops`).
    pub lend_min_flops: f64,
    /// Run every connection over TLS: a new certificate authority and certificates in
    /// `DATA_DIR/tls` (see [`tls_files`]); the metaserver and servers require client
    /// certificates, the proxy accepts clients without (they present the token).
    pub tls: bool,
    /// The `ninf-server` program allocation queues' jobs start (docs/slurm.md); default:
    /// the one beside this program.
    pub server_program: Option<PathBuf>,
    /// `SLURM_CONF` for the metaserver's Slurm commands; `None`: Slurm's own.
    pub slurm_conf: Option<PathBuf>,
    /// Seconds before a server's batch job ends by which its tasks must be predicted to end.
    pub walltime_margin_seconds: f64,
    /// How long data kept on the grid outlives its client's last renewal (the metaserver's
    /// `data_lease_seconds`), and the servers' storage leases with it; `None`: the defaults.
    /// The proxy renews its running transactions four times per lease.
    pub data_lease_seconds: Option<f64>,
    /// Every server's cap on data kept on the grid (`[storage] data_cap_bytes`); 0: none.
    pub data_cap_bytes: u64,
}

impl GridOptions {
    pub fn new(processors: Vec<u32>, data_dir: &Path) -> GridOptions {
        GridOptions {
            processors,
            scheduler: "flow".into(),
            predictor: "latest".into(),
            calibrate: true,
            templates: true,
            data_dir: data_dir.to_path_buf(),
            modules: Vec::new(),
            extra_modules: Vec::new(),
            mflops: None,
            heartbeat_seconds: 0.5,
            heartbeat_timeout_seconds: 2.0,
            network_seconds: 5.0,
            probe_seconds: 5.0,
            auth: false,
            max_stored_bytes_per_client: ProxyConfig::new("").max_stored_bytes_per_client,
            database_url: None,
            max_transactions_per_client: ProxyConfig::new("").max_transactions_per_client,
            max_queued_transactions: ProxyConfig::new("").max_queued_transactions,
            max_running_transactions: ProxyConfig::new("").max_running_transactions,
            bulk_calls: true,
            same_host_calls: true,
            same_host_uploads: true,
            lend_cores: true,
            turns: true,
            lend_min_flops: GangSettings::default().lend_min_flops,
            tls: false,
            server_program: None,
            slurm_conf: None,
            walltime_margin_seconds: AllocationConfig::default().walltime_margin_seconds,
            data_lease_seconds: None,
            data_cap_bytes: 0,
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
    /// Where each service serves its Prometheus metrics (`GET /metrics`): `metaserver`,
    /// `proxy`, and `server-0`, `server-1`, ... in the order of `servers`.
    #[serde(default)]
    pub metrics: std::collections::BTreeMap<String, String>,
    /// The metaserver's dashboard (`http://...` or `https://...`), without the token.
    #[serde(default)]
    pub dashboard: Option<String>,
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

    /// A channel to the metaserver with the grid's TLS, and the interceptor that presents
    /// its token: what every tool that talks to the metaserver needs.
    pub async fn metaserver_channel(
        &self,
    ) -> anyhow::Result<(
        tonic::transport::Channel,
        ninf_proto::net::auth::AttachToken,
    )> {
        let tls = self.tls()?;
        let channel = ninf_proto::net::connect(
            &self.metaserver,
            tls.as_ref(),
            ninf_proto::net::ConnectionSettings::default(),
        )
        .await
        .with_context(|| format!("cannot reach the metaserver at {}", self.metaserver))?;
        let token = ninf_proto::net::auth::AttachToken::new(self.token()?.as_deref());
        Ok((channel, token))
    }

    /// The dashboard's address to open: with `?token=...` when the grid has a token, so one
    /// click opens it (the dashboard then keeps the token in a cookie).
    pub fn dashboard_link(&self) -> anyhow::Result<Option<String>> {
        let Some(url) = &self.dashboard else {
            return Ok(None);
        };
        Ok(Some(match self.token()? {
            Some(token) => format!("{url}/?token={token}"),
            None => format!("{url}/"),
        }))
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

    /// Reads the grid file at `path` (`--grid FILE`).
    pub fn read_file(path: &Path) -> anyhow::Result<Endpoints> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the grid file {}", path.display()))?;
        toml::from_str(&text).with_context(|| format!("{} is not a grid file", path.display()))
    }
}

/// One compute server of the grid.
pub struct GridServer {
    pub address: String,
    pub state: Arc<ServerState>,
    running: ninf_compute_server::Running,
}

impl GridServer {
    /// Stops its heartbeats (it keeps serving): the metaserver will mark it down.
    pub fn silence(&self) {
        self.running.silence();
    }
}

/// A running embedded grid.
pub struct EmbeddedGrid {
    pub options: GridOptions,
    pub endpoints: Endpoints,
    pub metaserver: Arc<Metaserver>,
    pub proxy: Arc<Proxy>,
    pub servers: Vec<GridServer>,
    metaserver_service: Option<ninf_metaserver::Running>,
    proxy_service: ninf_client_proxy::Running,
}

/// The standard modules and `selftest` (`noop`, `echo`, `sleep_ms`, `fail`, ...: for
/// checking and benchmarking a grid), served from the executables beside this program, with
/// their IDL written into `data_dir`.
pub fn modules_with_selftest(data_dir: &Path) -> anyhow::Result<Vec<ModuleConfig>> {
    let bin = std::env::current_exe()?
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default();
    std::fs::create_dir_all(data_dir)?;
    let idl = ninf_routines::idl::LINPACK;
    let texts = [
        ("linpack", idl),
        ("vector", ninf_routines::idl::VECTOR),
        ("selftest", ninf_routines::idl::SELFTEST),
    ];
    let mut modules = Vec::new();
    for (name, text) in texts {
        let path = data_dir.join(format!("{name}.idl"));
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
        modules.push(ModuleConfig {
            executable: bin.join(format!("ninf-exec-{name}")),
            idl: path,
        });
    }
    Ok(modules)
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
        database_url: options.database_url.clone(),
        scheduler: options.scheduler.clone(),
        predictor: options.predictor.clone(),
        calibrate: options.calibrate,
        templates: options.templates,
        turns_min_seconds: if options.turns {
            MetaserverConfig::default().turns_min_seconds
        } else {
            f64::INFINITY
        },
        heartbeat_seconds: options.heartbeat_seconds,
        heartbeat_timeout_seconds: options.heartbeat_timeout_seconds,
        network_seconds: options.network_seconds,
        auth_token_file: options.auth.then(|| token_file(&options.data_dir)),
        tls: component_tls(options, "metaserver"),
        metrics_listen: Some("127.0.0.1:0".into()),
        dashboard_listen: Some("127.0.0.1:0".into()),
        // Servers from allocation queues join this loopback grid through its grid file.
        allocation: AllocationConfig {
            interval_seconds: 1.0,
            grid_file: Some(Endpoints::file(&options.data_dir)),
            server_host: Some("127.0.0.1".into()),
            server_program: options.server_program.clone(),
            slurm_conf: options.slurm_conf.clone(),
            walltime_margin_seconds: options.walltime_margin_seconds,
            ..AllocationConfig::default()
        },
        data_lease_seconds: options
            .data_lease_seconds
            .unwrap_or(MetaserverConfig::default().data_lease_seconds),
        ..MetaserverConfig::default()
    }
}

async fn start_metaserver(
    options: &GridOptions,
    listen: &str,
) -> anyhow::Result<ninf_metaserver::Running> {
    ninf_metaserver::bind(metaserver_config(options, listen))
        .await
        .with_context(|| format!("starting the metaserver on {listen}"))
}

/// Every service's metrics address, by name.
fn metrics_addresses(
    metaserver: &ninf_metaserver::Running,
    proxy: &ninf_client_proxy::Running,
    servers: &[GridServer],
) -> std::collections::BTreeMap<String, String> {
    let mut addresses = std::collections::BTreeMap::new();
    let mut add = |name: String, endpoint: Option<&ninf_telemetry::MetricsEndpoint>| {
        if let Some(endpoint) = endpoint {
            addresses.insert(name, endpoint.address.clone());
        }
    };
    add("metaserver".into(), metaserver.metrics.as_ref());
    add("proxy".into(), proxy.metrics.as_ref());
    for (i, server) in servers.iter().enumerate() {
        add(format!("server-{i}"), server.running.metrics.as_ref());
    }
    addresses
}

impl EmbeddedGrid {
    /// Starts everything and waits until every server has registered and the proxy has
    /// measured its paths to them.
    pub async fn start(options: GridOptions) -> anyhow::Result<EmbeddedGrid> {
        // The servers in this process move arrays as `ninf-server`'s do: keep freed memory
        // mapped, or every large array is a fresh mapping faulted in page by page.
        ninf_compute_server::keep_freed_memory();
        std::fs::create_dir_all(&options.data_dir)
            .with_context(|| format!("cannot create {}", options.data_dir.display()))?;
        if options.auth {
            ninf_proto::net::auth::generate_token(&token_file(&options.data_dir))?;
        }
        if options.tls {
            let hosts = ["127.0.0.1".to_string(), "localhost".to_string()];
            ninf_proto::net::tls::generate(&tls_dir(&options.data_dir), &TLS_NAMES, &hosts)?;
        }
        let metaserver_service = start_metaserver(&options, "127.0.0.1:0").await?;
        let metaserver_address = metaserver_service.address.clone();
        let mflops = match options.mflops {
            Some(m) => m,
            // Servers of allocation queues benchmark themselves.
            None if options.processors.is_empty() => 0.0,
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
        let proxy_service = ninf_client_proxy::bind(ProxyConfig {
            listen: "127.0.0.1:0".into(),
            metrics_listen: Some("127.0.0.1:0".into()),
            probe_seconds: options.probe_seconds,
            auth_token_file: options.auth.then(|| token_file(&options.data_dir)),
            max_stored_bytes_per_client: options.max_stored_bytes_per_client,
            max_transactions_per_client: options.max_transactions_per_client,
            max_queued_transactions: options.max_queued_transactions,
            max_running_transactions: options.max_running_transactions,
            bulk_calls: options.bulk_calls,
            same_host_calls: options.same_host_calls,
            same_host_uploads: options.same_host_uploads,
            wait_to_borrow_cores: servers_lend_cores(&options),
            tls: component_tls(&options, "proxy"),
            lease_renew_seconds: options
                .data_lease_seconds
                .map_or(ProxyConfig::new("").lease_renew_seconds, |lease| {
                    lease / 4.0
                }),
            ..ProxyConfig::new(metaserver_address.clone())
        })
        .await
        .context("starting the proxy")?;
        let proxy_address = proxy_service.address.clone();
        let endpoints = Endpoints {
            metaserver: metaserver_address,
            proxy: proxy_address,
            servers: servers.iter().map(|s| s.address.clone()).collect(),
            pid: std::process::id(),
            token_file: options.auth.then(|| token_file(&options.data_dir)),
            tls_dir: options.tls.then(|| tls_dir(&options.data_dir)),
            metrics: metrics_addresses(&metaserver_service, &proxy_service, &servers),
            dashboard: metaserver_service.dashboard.as_ref().map(|d| d.url()),
        };
        let grid = EmbeddedGrid {
            options,
            endpoints,
            metaserver: metaserver_service.metaserver.clone(),
            proxy: proxy_service.proxy.clone(),
            servers,
            metaserver_service: Some(metaserver_service),
            proxy_service,
        };
        grid.wait_until_up(grid.servers.len()).await?;
        grid.proxy
            .probe_servers(std::time::Duration::ZERO)
            .await
            .map_err(|s| anyhow::anyhow!("probing servers: {}", s.message()))?;
        // Written whole, then renamed: a client polling for the file never reads half of it.
        let file = Endpoints::file(&grid.options.data_dir);
        let partial = file.with_extension("toml.partial");
        std::fs::write(&partial, toml::to_string(&grid.endpoints)?)?;
        std::fs::rename(&partial, &file)?;
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
        self.stop_metaserver().await?;
        self.start_metaserver().await
    }

    /// Stops the metaserver (until [`EmbeddedGrid::start_metaserver`]): the grid's address
    /// for it answers nothing meanwhile.
    pub async fn stop_metaserver(&mut self) -> anyhow::Result<()> {
        if let Some(service) = self.metaserver_service.take() {
            service.stop().await?;
        }
        Ok(())
    }

    /// Starts a new metaserver on the grid's metaserver address and database, after
    /// [`EmbeddedGrid::stop_metaserver`].
    pub async fn start_metaserver(&mut self) -> anyhow::Result<()> {
        let service = start_metaserver(&self.options, &self.endpoints.metaserver).await?;
        self.metaserver = service.metaserver.clone();
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
        let mut stopped = vec![("proxy".to_string(), self.proxy_service.stop().await)];
        for server in self.servers {
            stopped.push((server.address, server.running.stop().await));
        }
        if let Some(service) = self.metaserver_service {
            stopped.push(("metaserver".to_string(), service.stop().await));
        }
        for (what, result) in stopped {
            if let Err(e) = result {
                tracing::error!(%what, error = %e, "stopped with an error");
            }
        }
        let _ = std::fs::remove_file(Endpoints::file(&self.options.data_dir));
    }
}

/// Whether the servers lend each other the cores they leave idle: asked to, several, and
/// each with cores of its own (no more processors in all than the host's cores).
fn servers_lend_cores(options: &GridOptions) -> bool {
    let processors: usize = options.processors.iter().map(|&p| p.max(1) as usize).sum();
    options.lend_cores && options.processors.len() > 1 && processors <= cores::allowed().len()
}

/// Server `index`'s cores: the servers share this host's cores, each starting after the
/// ones before it. When each has cores of its own (no more processors in all than cores),
/// they lend each other the cores they leave idle (`[gang] core_claims`, docs/gang.md).
fn lending_cores(options: &GridOptions, index: usize) -> GangSettings {
    let processors: Vec<usize> = options
        .processors
        .iter()
        .map(|&p| p.max(1) as usize)
        .collect();
    let host = cores::allowed();
    let own = cores::spread(processors.iter().take(index).sum());
    let mine = processors.get(index).copied().unwrap_or(1);
    let (core_claims, spare_cores) = if servers_lend_cores(options) {
        let taken: Vec<u32> = own.iter().take(mine).copied().collect();
        let spare = host.into_iter().filter(|c| !taken.contains(c)).collect();
        (Some(options.data_dir.join("cores")), spare)
    } else {
        (None, Vec::new())
    };
    GangSettings {
        cores: own,
        core_claims,
        spare_cores,
        lend_min_flops: options.lend_min_flops,
        ..GangSettings::default()
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
        listen: "127.0.0.1:0".into(),
        metrics_listen: Some("127.0.0.1:0".into()),
        load_interval_seconds: 1.0,
        processors: Some(processors.max(1) as usize),
        modules: options.modules.clone(),
        extra_modules: options.extra_modules.clone(),
        storage: ninf_compute_server::config::StorageConfig {
            spill_dir: Some(options.data_dir.join(format!("spill-{index}"))),
            lease_seconds: options
                .data_lease_seconds
                .unwrap_or(ninf_compute_server::config::StorageConfig::default().lease_seconds),
            data_cap_bytes: options.data_cap_bytes,
            ..Default::default()
        },
        metaserver: Some(metaserver.to_string()),
        auth_token_file: options.auth.then(|| token_file(&options.data_dir)),
        tls: component_tls(options, "server"),
        gang: lending_cores(options, index),
        ..ServerConfig::default()
    };
    let info = v1::ServerInfo {
        mflops,
        cpus: std::thread::available_parallelism().map_or(1, |p| p.get()) as u32,
        memory_bytes: ninf_compute_server::benchmark::total_memory_bytes().unwrap_or(0),
        ..Default::default()
    };
    let running = ninf_compute_server::bind(&config, info)
        .await
        .with_context(|| format!("starting server {index}"))?;
    Ok(GridServer {
        address: running.address.clone(),
        state: running.state.clone(),
        running,
    })
}
