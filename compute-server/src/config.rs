//! Server configuration: a TOML file (`--config FILE`) overridden by command-line flags.
//!
//! ```toml
//! listen = "127.0.0.1:7001"
//! processors = 2
//! max_request_bytes = 1073741824
//! call_timeout_seconds = 600
//! metaserver = "127.0.0.1:7000"
//!
//! [[modules]]
//! executable = "/opt/ninf/bin/ninf-exec-linpack"
//! idl = "/opt/ninf/idl/linpack.idl"
//!
//! [storage]
//! memory_limit_bytes = 268435456
//! spill_dir = "/var/tmp/ninf-spill"
//! data_cap_bytes = 17179869184
//!
//! [executable_limits]
//! memory_bytes = 8589934592
//! open_files = 1024
//! cpu_seconds_per_call = 3600
//! ```

use std::path::{Path, PathBuf};

use serde::Deserialize;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    /// Address to listen on, `host:port` (port 0 picks a free one).
    #[serde(default = "default_listen")]
    pub listen: String,
    /// Address other servers and clients use to reach this one; defaults to the bound address.
    #[serde(default)]
    pub advertise: Option<String>,
    /// Advertise this host with the bound port (when `advertise` is not set): a server that
    /// listens on all interfaces of a cluster node, on a port it picked, advertises the
    /// node's name (`ninf-server --advertise-host`).
    #[serde(default)]
    pub advertise_host: Option<String>,
    /// Address of the bulk-data port (calls with large arrays, docs/bulk-protocol.md);
    /// default: a free port on the listening address's host. Set it where a firewall must
    /// know the port (docs/deploy.md).
    #[serde(default)]
    pub bulk_listen: Option<String>,
    /// The site (network neighbourhood) this server is in: servers measure their paths to
    /// the others of their site, and one per site those to the other sites (docs/metaserver.md,
    /// "Sites"). Default: the metaserver places it by its address (the /24 of an IPv4
    /// address, the /64 of an IPv6 one, else its host name).
    #[serde(default)]
    pub site: Option<String>,
    /// Processors offered to jobs; also the warm pool size of each module. Default: all cores.
    #[serde(default)]
    pub processors: Option<usize>,
    /// Modules served; empty means the standard modules installed next to `ninf-server`.
    #[serde(default)]
    pub modules: Vec<ModuleConfig>,
    /// Modules served beside `modules` (or beside the standard modules when `modules` is
    /// empty): `ninf-server --module IDL=EXECUTABLE`, `ninf up --module`.
    #[serde(skip)]
    pub extra_modules: Vec<ModuleConfig>,
    #[serde(default)]
    pub storage: StorageConfig,
    /// Largest total of IN array bytes one call may move (1 GiB by default).
    #[serde(default = "default_max_request_bytes")]
    pub max_request_bytes: u64,
    /// Calls running longer are killed and reported; a call may ask for less.
    #[serde(default = "default_call_timeout")]
    pub call_timeout_seconds: f64,
    /// Load sampling period.
    #[serde(default = "default_load_interval")]
    pub load_interval_seconds: f64,
    /// Metaserver to register with (`host:port`), or several separated by commas
    /// (metaservers sharing one PostgreSQL; the server moves on down the list when the one
    /// it uses is unreachable or a standby); none: the server runs on its own.
    #[serde(default)]
    pub metaserver: Option<String>,
    /// Where to serve Prometheus metrics (`GET /metrics`, `host:port`); none: not served.
    #[serde(default)]
    pub metrics_listen: Option<String>,
    /// Payload of the throughput probes sent to peers.
    #[serde(default = "default_probe_bytes")]
    pub probe_bytes: usize,
    /// How the processors are time-shared among jobs.
    #[serde(default)]
    pub gang: GangSettings,
    /// Emulate processors this many times slower than the host's (1: the host's speed).
    /// Every call holds its processor for the extra time and the benchmark reports the
    /// emulated speed; testbeds use it to model slower machines (see
    /// `ninf_executable::slowdown`).
    #[serde(default = "default_cpu_slowdown")]
    pub cpu_slowdown: f64,
    /// Resource limits every executable runs under.
    #[serde(default)]
    pub executable_limits: ExecutableLimits,
    /// The grid's token file (mode 0600): presented to the metaserver when registering and
    /// to peer servers when fetching from their storage; every request to this server must
    /// carry it.
    #[serde(default)]
    pub auth_token_file: Option<PathBuf>,
    /// TLS (`[tls]`: ca, certificate, key): the server's port serves TLS and requires client
    /// certificates from the grid's authority (unless `require_client_certificates =
    /// false`); it presents its own to the metaserver and its peers. The bulk-data port is
    /// plain TCP, so a TLS server offers none and large calls go over gRPC.
    #[serde(default)]
    pub tls: Option<ninf_proto::net::tls::TlsFiles>,
}

/// The `[executable_limits]` section: what one executable may use. A call that goes over
/// its CPU budget or runs out of address space dies, its caller gets the signal or the
/// allocation failure, and the server starts a fresh executable.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ExecutableLimits {
    /// Address space, bytes (unset: the server's own limit).
    #[serde(default)]
    pub memory_bytes: Option<u64>,
    /// Open files.
    #[serde(default = "default_open_files")]
    pub open_files: Option<u64>,
    /// CPU seconds one call may use (unset: only `call_timeout_seconds` bounds a call).
    #[serde(default)]
    pub cpu_seconds_per_call: Option<u64>,
}

fn default_open_files() -> Option<u64> {
    Some(1024)
}

impl Default for ExecutableLimits {
    fn default() -> Self {
        ExecutableLimits {
            memory_bytes: None,
            open_files: default_open_files(),
            cpu_seconds_per_call: None,
        }
    }
}

impl ExecutableLimits {
    pub fn process_limits(&self) -> ninf_executable::rlimits::ProcessLimits {
        ninf_executable::rlimits::ProcessLimits {
            memory_bytes: self.memory_bytes,
            open_files: self.open_files,
            cpu_seconds_per_call: self.cpu_seconds_per_call,
        }
    }
}

fn default_cpu_slowdown() -> f64 {
    1.0
}

/// The `[gang]` section: the time table, admission, and the node agents that follow it.
///
/// ```toml
/// [gang]
/// quantum_ms = 100
/// max_rows = 4
/// policy = "fpfs"
/// wait_limit_seconds = 600
/// stop_grace_seconds = 10
/// nodes = 1
/// ```
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GangSettings {
    /// Slot length.
    pub quantum_ms: f64,
    /// Multiprogramming level: rows of the time table.
    pub max_rows: usize,
    /// Admission policy: `fcfs`, `fpfs` or `fpmpfs` (the FPMPFS paper).
    pub policy: ninf_gang::Policy,
    pub wait_limit_seconds: f64,
    /// A deadlocked job is killed this long after it was detected.
    pub stop_grace_seconds: f64,
    /// Node agents; the processors are split among them in contiguous blocks. Each follows
    /// the table by its own clock.
    pub nodes: usize,
    /// Pin each process to its column's core.
    pub pin: bool,
    /// The cores the columns are pinned to: column `c` on `cores[c % len]`. Empty: the cores
    /// this server may run on, in order. Servers sharing a host need lists that start on
    /// different cores (`ninf up` and the other local grids give each its own).
    pub cores: Vec<u32>,
    /// A directory every server on this host names, where each claims the cores it computes
    /// on (a file per core): with it, this server's calls hold its cores, and it may lend
    /// them to the other servers while it runs nothing (`gang/claims.rs`, docs/gang.md).
    pub core_claims: Option<PathBuf>,
    /// Other servers' cores on this host that this server's calls of `Threads` routines may
    /// compute on while their owners run nothing (needs `core_claims`).
    pub spare_cores: Vec<u32>,
    /// Calls of fewer flops (their `CalcOrder`) are not lent cores: under about 6 ms of
    /// compute on one core (16-18 Gflop/s), what a second thread could save is small beside
    /// the neighbour's next call waiting for its core. Chosen, not tuned.
    pub lend_min_flops: f64,
    /// Run agents as `ninf-gang-agent` processes (found next to this program unless given);
    /// otherwise, or when the program is missing, as threads of the server.
    pub agent_processes: bool,
    pub agent_executable: Option<PathBuf>,
    /// Give the agents an emulated clock of their own (offset and rate), as agents on other
    /// hosts would have: for testing the clock checks.
    pub agent_clock_offset_ms: f64,
    pub agent_clock_rate_ppm: f64,
    /// Adaptive clock checks (the time-sync paper): first and longest interval, and the offset change
    /// that counts as drift.
    pub sync_min_interval_seconds: f64,
    pub sync_max_interval_seconds: f64,
    pub drift_threshold_us: f64,
    /// Also estimate the clocks' rate difference between checks.
    pub compensate_rate: bool,
    /// Where the ranks of parallel jobs send their messages: one broker in the server
    /// (`server`), or a broker in each node's agent, talking to the others over TCP
    /// (`nodes`: what processors spread over several hosts need).
    pub broker: BrokerPlacement,
    /// Who starts the rank processes of parallel jobs: this server (`server`), or the agent
    /// of the node holding each rank's column (`nodes`: what nodes on other hosts need;
    /// takes `broker = "nodes"`). Sequential calls always run in the server's own pool.
    pub ranks: RankPlacement,
    /// With node brokers: hold a job's messages outside its slots, by each node's clock, and
    /// hand them over at its next slot (the gang thesis's network preemption).
    pub network_preemption: bool,
    /// Start the node agents (as processes or threads of this server). `false`: they run on
    /// other hosts (`ninf-gang-agent --server ...`) and attach over the network.
    pub spawn_agents: bool,
    /// The address spawned agents' node brokers listen on for each other (port 0: any).
    pub node_broker_listen: std::net::SocketAddr,
    /// The time table's shape: the Ousterhout matrix (`matrix`) or the gang thesis's Distributed
    /// Queue Tree (`dqt`; the processors must be a power of `dqt_width`).
    pub layout: TableLayout,
    pub dqt_width: u32,
    /// How the DQT places a job among partitions of its size: max, min, apa, ff or ff-apa.
    pub dqt_allocation: String,
    /// Fair-DQT: every job runs exactly once per round.
    pub dqt_fair: bool,
}

/// The time table's shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TableLayout {
    Matrix,
    Dqt,
}

/// Who starts the rank processes of parallel jobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RankPlacement {
    Server,
    Nodes,
}

/// Where the brokers of parallel jobs run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BrokerPlacement {
    Server,
    Nodes,
}

impl Default for GangSettings {
    fn default() -> Self {
        GangSettings {
            quantum_ms: 100.0,
            max_rows: 4,
            policy: ninf_gang::Policy::Fpfs,
            wait_limit_seconds: 600.0,
            stop_grace_seconds: 10.0,
            nodes: 1,
            pin: true,
            cores: Vec::new(),
            core_claims: None,
            spare_cores: Vec::new(),
            lend_min_flops: 1e8,
            agent_processes: true,
            agent_executable: None,
            agent_clock_offset_ms: 0.0,
            agent_clock_rate_ppm: 0.0,
            sync_min_interval_seconds: 0.5,
            sync_max_interval_seconds: 3600.0,
            drift_threshold_us: 200.0,
            compensate_rate: true,
            broker: BrokerPlacement::Server,
            ranks: RankPlacement::Server,
            network_preemption: true,
            spawn_agents: true,
            node_broker_listen: std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
            layout: TableLayout::Matrix,
            dqt_width: 2,
            dqt_allocation: "apa".into(),
            dqt_fair: false,
        }
    }
}

impl GangSettings {
    /// The gang core's configuration for `processors` columns.
    pub fn core(&self, processors: u32) -> ninf_gang::GangConfig {
        ninf_gang::GangConfig {
            processors,
            max_rows: self.max_rows.max(1),
            quantum: (self.quantum_ms / 1000.0).max(0.001),
            policy: self.policy,
            wait_limit: self.wait_limit_seconds,
            stop_grace: self.stop_grace_seconds.max(0.0),
            layout: match self.layout {
                TableLayout::Matrix => ninf_gang::Layout::Matrix,
                TableLayout::Dqt => ninf_gang::Layout::Dqt {
                    width: self.dqt_width,
                    allocation: self
                        .dqt_allocation
                        .parse()
                        .unwrap_or(ninf_gang::Allocation::Apa),
                    fair: self.dqt_fair,
                },
            },
        }
    }

    /// Checks the settings against each other and the processors: ranks on nodes need node
    /// brokers; spare cores need a claims directory; the DQT needs a width of 2-64, a known
    /// allocation policy, and processors that are a power of the width.
    pub fn check(&self, processors: u32) -> Result<(), String> {
        self.check_lending()?;
        if self.ranks == RankPlacement::Nodes && self.broker != BrokerPlacement::Nodes {
            return Err(
                "gang.ranks = \"nodes\" needs gang.broker = \"nodes\": ranks on other hosts \
                 cannot reach the server's broker socket"
                    .into(),
            );
        }
        if self.layout == TableLayout::Matrix {
            return Ok(());
        }
        let allocation: ninf_gang::Allocation = self
            .dqt_allocation
            .parse()
            .map_err(|e| format!("gang.dqt_allocation: {e}"))?;
        ninf_gang::DqtConfig::for_processors(processors, self.dqt_width, allocation, self.dqt_fair)
            .map(|_| ())
            .map_err(|e| format!("gang.layout = \"dqt\": {e}"))
    }

    /// Spare cores are borrowed through the claims directory, so without one they would be
    /// used with nobody's consent; a threshold must be a number a call's flops can meet.
    fn check_lending(&self) -> Result<(), String> {
        if !self.spare_cores.is_empty() && self.core_claims.is_none() {
            return Err(format!(
                "gang.spare_cores = {:?} needs gang.core_claims: a server borrows another's \
                 cores only through the claims directory they share",
                self.spare_cores
            ));
        }
        if !(self.lend_min_flops.is_finite() && self.lend_min_flops >= 0.0) {
            return Err(format!(
                "gang.lend_min_flops is {}; it must be a number of flops of at least 0",
                self.lend_min_flops
            ));
        }
        Ok(())
    }

    pub fn sync(&self) -> ninf_gang::SyncConfig {
        ninf_gang::SyncConfig {
            min_interval: self.sync_min_interval_seconds.max(0.01),
            max_interval: self
                .sync_max_interval_seconds
                .max(self.sync_min_interval_seconds.max(0.01)),
            drift_threshold: self.drift_threshold_us.max(0.0) * 1e-6,
            compensate_rate: self.compensate_rate,
        }
    }

    /// The columns of each node: `processors` split into `nodes` contiguous blocks.
    pub fn node_columns(&self, processors: u32) -> Vec<Vec<u32>> {
        let nodes = (self.nodes.max(1) as u32).min(processors.max(1));
        (0..nodes)
            .map(|k| (k * processors / nodes..(k + 1) * processors / nodes).collect())
            .collect()
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModuleConfig {
    /// The module's executable (`ninf-gen build`, or a Rust build through `ninf-gen rust`).
    pub executable: PathBuf,
    /// The module's IDL file (its interface descriptors are published from it).
    pub idl: PathBuf,
}

impl ModuleConfig {
    /// A module as a flag names it: `IDL=EXECUTABLE`, paths relative to the working folder.
    pub fn from_flag(flag: &str) -> Result<ModuleConfig, String> {
        let (idl, executable) = flag
            .split_once('=')
            .filter(|(i, e)| !i.is_empty() && !e.is_empty())
            .ok_or_else(|| format!("--module takes IDL=EXECUTABLE, got `{flag}`"))?;
        let absolute =
            |p: &str| std::path::absolute(p).map_err(|e| format!("--module {flag}: {p}: {e}"));
        Ok(ModuleConfig {
            idl: absolute(idl)?,
            executable: absolute(executable)?,
        })
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StorageConfig {
    /// Bytes of stored objects kept in memory; beyond it objects go to `spill_dir`.
    #[serde(default = "default_memory_limit")]
    pub memory_limit_bytes: u64,
    /// Where spilled objects go; default: a fresh folder under the system temp directory.
    #[serde(default)]
    pub spill_dir: Option<PathBuf>,
    /// An owner's objects are deleted when no call, put or renewal has touched the owner for
    /// this long: a proxy renews its running transactions, so only the intermediates of a
    /// proxy or client that disappeared run out.
    #[serde(default = "default_lease")]
    pub lease_seconds: f64,
    /// The most bytes of data kept on the grid (handles' copies, docs/data.md) this server
    /// holds; 0 (the default): no cap but its memory. The metaserver evicts replicas, least
    /// recently used first, to stay under it, and refuses a put that fits under no cap.
    #[serde(default)]
    pub data_cap_bytes: u64,
}

fn default_lease() -> f64 {
    120.0
}

impl Default for StorageConfig {
    fn default() -> Self {
        StorageConfig {
            memory_limit_bytes: default_memory_limit(),
            spill_dir: None,
            lease_seconds: default_lease(),
            data_cap_bytes: 0,
        }
    }
}

fn default_listen() -> String {
    "127.0.0.1:0".to_string()
}

fn default_max_request_bytes() -> u64 {
    1 << 30
}

fn default_call_timeout() -> f64 {
    600.0
}

fn default_load_interval() -> f64 {
    2.0
}

fn default_probe_bytes() -> usize {
    1 << 20
}

fn default_memory_limit() -> u64 {
    256 << 20
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: default_listen(),
            advertise: None,
            advertise_host: None,
            bulk_listen: None,
            site: None,
            processors: None,
            modules: Vec::new(),
            extra_modules: Vec::new(),
            storage: StorageConfig::default(),
            max_request_bytes: default_max_request_bytes(),
            call_timeout_seconds: default_call_timeout(),
            load_interval_seconds: default_load_interval(),
            metaserver: None,
            metrics_listen: None,
            probe_bytes: default_probe_bytes(),
            gang: GangSettings::default(),
            cpu_slowdown: default_cpu_slowdown(),
            executable_limits: ExecutableLimits::default(),
            auth_token_file: None,
            tls: None,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Invalid { path: PathBuf, message: String },
}

impl ServerConfig {
    /// Reads a TOML configuration; module paths are relative to the file's folder.
    pub fn load(path: &Path) -> Result<ServerConfig, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let mut config: ServerConfig = toml::from_str(&text).map_err(|e| ConfigError::Invalid {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        config.check().map_err(|message| ConfigError::Invalid {
            path: path.to_path_buf(),
            message,
        })?;
        let base = path.parent().unwrap_or(Path::new("."));
        for module in &mut config.modules {
            module.executable = base.join(&module.executable);
            module.idl = base.join(&module.idl);
        }
        Ok(config)
    }

    /// Checks the values serde cannot: the slowdown is a finite number of at least 1.
    pub fn check(&self) -> Result<(), String> {
        if !(self.storage.lease_seconds.is_finite() && self.storage.lease_seconds > 0.0) {
            return Err(format!(
                "storage.lease_seconds is {}; it must be a positive number of seconds",
                self.storage.lease_seconds
            ));
        }
        if !(self.cpu_slowdown.is_finite() && self.cpu_slowdown >= 1.0) {
            return Err(format!(
                "cpu_slowdown is {}; it must be a number of at least 1",
                self.cpu_slowdown
            ));
        }
        self.gang.check(self.processors() as u32)
    }

    /// Processors offered: the configured number or the machine's cores.
    pub fn processors(&self) -> usize {
        self.processors
            .filter(|&p| p > 0)
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |p| p.get()))
    }

    /// The standard modules: their executables are installed next to `ninf-server` by
    /// `cargo build`, and their IDL is compiled into this binary.
    pub fn standard_modules() -> Vec<(PathBuf, &'static str, &'static str)> {
        let dir = std::env::current_exe()
            .ok()
            .and_then(|exe| exe.parent().map(Path::to_path_buf))
            .unwrap_or_default();
        vec![
            (
                dir.join("ninf-exec-linpack"),
                "linpack.idl",
                ninf_routines::idl::LINPACK,
            ),
            (
                dir.join("ninf-exec-vector"),
                "vector.idl",
                ninf_routines::idl::VECTOR,
            ),
        ]
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn parse(text: &str) -> ServerConfig {
        toml::from_str(text).unwrap()
    }

    #[test]
    fn the_gang_section_takes_node_brokers_and_the_dqt_layout_as_the_docs_write_them() {
        let config = parse(
            "processors = 4\n[gang]\nbroker = \"nodes\"\nnetwork_preemption = false\n\
             spawn_agents = false\nnode_broker_listen = \"0.0.0.0:7300\"\nlayout = \"dqt\"\n\
             dqt_allocation = \"ff-apa\"\ndqt_fair = true\nranks = \"nodes\"\n",
        );
        assert_eq!(config.gang.broker, BrokerPlacement::Nodes);
        assert_eq!(config.gang.ranks, RankPlacement::Nodes);
        assert!(!config.gang.network_preemption && !config.gang.spawn_agents);
        assert_eq!(config.gang.node_broker_listen.port(), 7300);
        assert_eq!(config.check(), Ok(()));
        assert_eq!(
            config.gang.core(4).layout,
            ninf_gang::Layout::Dqt {
                width: 2,
                allocation: ninf_gang::Allocation::FirstFitApa,
                fair: true
            }
        );
        let defaults = parse("");
        assert_eq!(defaults.gang.broker, BrokerPlacement::Server);
        assert_eq!(defaults.gang.ranks, RankPlacement::Server);
        assert_eq!(defaults.gang.core(3).layout, ninf_gang::Layout::Matrix);
    }

    #[test]
    fn the_lending_keys_read_as_the_docs_write_them_and_bad_ones_are_refused_by_name() {
        let config = parse(
            "processors = 1\n[gang]\ncores = [1]\ncore_claims = \"/run/ninf/cores\"\n\
             spare_cores = [0]\nlend_min_flops = 1e8\n",
        );
        assert_eq!(config.check(), Ok(()));
        assert_eq!(
            config.gang.core_claims.as_deref(),
            Some(Path::new("/run/ninf/cores"))
        );
        assert_eq!(config.gang.spare_cores, vec![0]);
        assert_eq!(config.gang.lend_min_flops, 1e8);
        let defaults = parse("");
        assert_eq!(defaults.gang.core_claims, None);
        assert!(defaults.gang.spare_cores.is_empty());
        assert_eq!(defaults.gang.lend_min_flops, 1e8);

        let unclaimed = parse("processors = 1\n[gang]\nspare_cores = [0, 2]\n");
        assert_eq!(
            unclaimed.check(),
            Err(
                "gang.spare_cores = [0, 2] needs gang.core_claims: a server borrows another's \
                 cores only through the claims directory they share"
                    .to_string()
            )
        );
        let negative = parse("processors = 1\n[gang]\nlend_min_flops = -1.0\n");
        assert_eq!(
            negative.check(),
            Err(
                "gang.lend_min_flops is -1; it must be a number of flops of at least 0".to_string()
            )
        );
        let unknown: Result<ServerConfig, _> = toml::from_str("[gang]\nspare_core = [0]\n");
        let error = unknown.unwrap_err().to_string();
        assert!(error.contains("unknown field `spare_core`"), "{error}");
    }

    #[test]
    fn ranks_on_nodes_without_node_brokers_are_refused_by_name() {
        let config = parse("processors = 2\n[gang]\nranks = \"nodes\"\n");
        let error = config.check().unwrap_err();
        assert!(
            error.starts_with("gang.ranks = \"nodes\" needs gang.broker = \"nodes\""),
            "{error}"
        );
    }

    #[test]
    fn a_dqt_on_processors_that_are_no_power_of_its_width_is_refused_by_name() {
        let config = parse("processors = 3\n[gang]\nlayout = \"dqt\"\n");
        assert_eq!(
            config.check(),
            Err(
                "gang.layout = \"dqt\": 3 processors are not a power of 2; a DQT needs width^height"
                    .to_string()
            )
        );
        let config = parse("processors = 4\n[gang]\nlayout = \"dqt\"\ndqt_allocation = \"best\"\n");
        let error = config.check().unwrap_err();
        assert!(
            error.starts_with("gang.dqt_allocation: unknown DQT allocation policy `best`"),
            "{error}"
        );
    }
}

/// What a server takes from a grid file (`DATA_DIR/grid.toml`, which `ninf up` writes):
/// where the metaserver is and the grid's credentials.
#[derive(Debug, Deserialize)]
struct GridFile {
    metaserver: String,
    #[serde(default)]
    token_file: Option<PathBuf>,
    #[serde(default)]
    tls_dir: Option<PathBuf>,
}

impl ServerConfig {
    /// Joins the grid a grid file describes (`ninf-server --grid FILE`): its metaserver,
    /// its token and, when it runs over TLS, the `server` certificate of its folder.
    pub fn join_grid(&mut self, path: &Path) -> Result<(), ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let grid: GridFile = toml::from_str(&text).map_err(|e| ConfigError::Invalid {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        self.metaserver = Some(grid.metaserver);
        if grid.token_file.is_some() {
            self.auth_token_file = grid.token_file;
        }
        if let Some(dir) = grid.tls_dir {
            self.tls = Some(ninf_proto::net::tls::files_in(&dir, "server", true));
        }
        Ok(())
    }
}
