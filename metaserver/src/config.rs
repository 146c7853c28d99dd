//! Metaserver configuration: a TOML file (`--config FILE`) overridden by command-line flags.
//! Choosing the scheduler is one line, as in the paper's configuration file.
//!
//! ```toml
//! listen = "127.0.0.1:7000"
//! data_dir = "/var/lib/ninf"
//! scheduler = "flow"          # any of ninf_scheduling::SCHEDULERS (docs/scheduling.md)
//! predictor = "latest"        # latest (the paper's) or forecast (NWS-style)
//! calibrate = true            # learn routines' speeds and per-call costs from what ran
//! turns_min_seconds = 0.1     # a graph's calls this long take turns on their server
//! heartbeat_seconds = 1.0
//! heartbeat_timeout_seconds = 5.0
//! network_seconds = 10.0
//! retention_seconds = 3600
//! retention_graphs = 1000
//! metrics_listen = "127.0.0.1:9100"    # Prometheus text at /metrics
//! dashboard_listen = "127.0.0.1:7080"  # the dashboard (docs/observability.md)
//! ```

use std::path::{Path, PathBuf};

use serde::Deserialize;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetaserverConfig {
    /// Address to listen on, `host:port` (port 0 picks a free one).
    #[serde(default = "default_listen")]
    pub listen: String,
    /// Where the SQLite resource DB lives (`metaserver.db`).
    #[serde(default = "default_data_dir")]
    pub data_dir: PathBuf,
    /// A database URL instead of the file under `data_dir` (e.g. `sqlite::memory:`).
    #[serde(default)]
    pub database_url: Option<String>,
    /// The scheduler every graph gets unless a request names another.
    #[serde(default = "default_scheduler")]
    pub scheduler: String,
    /// Where to serve Prometheus metrics (`GET /metrics`, `host:port`); none: not served.
    #[serde(default)]
    pub metrics_listen: Option<String>,
    /// Where to serve the dashboard (`host:port`, e.g. `127.0.0.1:7080`; keep it on loopback
    /// unless the grid has a token); none: not served.
    #[serde(default)]
    pub dashboard_listen: Option<String>,
    /// How long data kept on the grid (docs/data.md) lives unless its client renews it: the
    /// client library renews its handles every quarter of this, so a handle outlives its
    /// client by at most this long.
    #[serde(default = "default_data_lease")]
    pub data_lease_seconds: f64,
    /// How monitoring history becomes a prediction: `latest` or `forecast`.
    #[serde(default = "default_predictor")]
    pub predictor: String,
    /// Whether predictions learn from finished graphs: each routine's speed on each server
    /// relative to the server's benchmark, and each server's cost per call
    /// (`ninf_scheduling::calibration`). `false` predicts with the model alone, as the seed did.
    #[serde(default = "default_calibrate")]
    pub calibrate: bool,
    /// Whether the times the metaserver expects of a graph (its predicted makespan and task
    /// finishes, stored and sent to the proxy) come from graphs of the same shape that ran
    /// under the same load, once enough have (`ninf_scheduling::templates`). The placement
    /// is the model's either way. `false`: the model's predictions alone.
    #[serde(default = "default_templates")]
    pub templates: bool,
    /// A call the model gives at least this long alone on its server takes turns there
    /// with its graph's other such calls (`crate::turns`): the proxy issues at most as many
    /// of them as the server has processors. The default is the servers' default gang
    /// quantum: a shorter call runs to its end in its first slot, so its graph's calls do
    /// not share the processor anyway, and a turn would only add the wait between calls.
    /// `inf`: every call is issued when ready.
    #[serde(default = "default_turns_min_seconds")]
    pub turns_min_seconds: f64,
    /// Seed of the `random` scheduler (combined with each graph's id).
    #[serde(default)]
    pub random_seed: u64,
    /// How often servers send heartbeats with load samples (the paper sampled load every
    /// 200 s; a local grid wants far more often).
    #[serde(default = "default_heartbeat")]
    pub heartbeat_seconds: f64,
    /// A server silent for this long is down and gets no tasks.
    #[serde(default = "default_heartbeat_timeout")]
    pub heartbeat_timeout_seconds: f64,
    /// How often servers measure the network to their peers (the paper: 100 s).
    #[serde(default = "default_network")]
    pub network_seconds: f64,
    /// Load and network samples older than this are deleted.
    #[serde(default = "default_retention_seconds")]
    pub retention_seconds: f64,
    /// Graphs (with their placements) kept in the DB.
    #[serde(default = "default_retention_graphs")]
    pub retention_graphs: u32,
    /// Samples per series the predictor looks at.
    #[serde(default = "default_history")]
    pub history_samples: usize,
    /// Largest graph accepted.
    #[serde(default = "default_max_tasks")]
    pub max_graph_tasks: usize,
    /// Assumed for a server that reports no benchmark figure.
    #[serde(default = "default_mflops")]
    pub default_mflops: f64,
    /// Assumed for a path nobody has measured.
    #[serde(default = "default_throughput")]
    pub default_throughput_bytes_per_second: f64,
    #[serde(default = "default_latency")]
    pub default_latency_seconds: f64,
    /// The grid's token file (mode 0600): when set, servers registering and proxies asking
    /// for placements must present its token; see `ninf_proto::net::auth`.
    #[serde(default)]
    pub auth_token_file: Option<PathBuf>,
    /// TLS for the metaserver's port (`[tls]`: ca, certificate, key); servers and proxies
    /// must then present certificates from the grid's authority. See `ninf_proto::net::tls`.
    #[serde(default)]
    pub tls: Option<ninf_proto::net::tls::TlsFiles>,
    /// Allocation queues (`[allocation]`, docs/slurm.md).
    #[serde(default)]
    pub allocation: AllocationConfig,
    /// Which servers a graph on a large grid is planned on (`[shortlist]`,
    /// [`crate::shortlist::Shortlist`]).
    #[serde(default)]
    pub shortlist: crate::shortlist::Shortlist,
}

/// How the metaserver runs allocation queues: compute servers as batch jobs.
///
/// ```toml
/// [allocation]
/// interval_seconds = 2.0          # how often each queue is looked at
/// wait_seconds = 600.0            # how long a request waits for a queue's servers
/// walltime_margin_seconds = 30.0  # a task must be predicted to end this long before its server's job
/// server_program = "/usr/local/bin/ninf-server"  # default: beside the metaserver's program
/// grid_file = "/var/lib/ninf/grid.toml"  # what servers read the grid's address and credentials from
/// server_host = "127.0.0.1"       # default: all interfaces, advertised by the node's host name
/// slurm_bin_dir = "/usr/bin"      # default: Slurm's commands on the PATH
/// slurm_conf = "/etc/slurm/slurm.conf"  # SLURM_CONF for Slurm's commands; default: theirs
/// ```
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct AllocationConfig {
    #[serde(default = "default_allocation_interval")]
    pub interval_seconds: f64,
    #[serde(default = "default_allocation_wait")]
    pub wait_seconds: f64,
    #[serde(default = "default_walltime_margin")]
    pub walltime_margin_seconds: f64,
    #[serde(default)]
    pub server_program: Option<PathBuf>,
    #[serde(default)]
    pub grid_file: Option<PathBuf>,
    #[serde(default)]
    pub server_host: Option<String>,
    #[serde(default)]
    pub slurm_bin_dir: Option<PathBuf>,
    #[serde(default)]
    pub slurm_conf: Option<PathBuf>,
}

fn default_allocation_interval() -> f64 {
    2.0
}
fn default_allocation_wait() -> f64 {
    600.0
}
fn default_walltime_margin() -> f64 {
    30.0
}

impl Default for AllocationConfig {
    fn default() -> Self {
        AllocationConfig {
            interval_seconds: default_allocation_interval(),
            wait_seconds: default_allocation_wait(),
            walltime_margin_seconds: default_walltime_margin(),
            server_program: None,
            grid_file: None,
            server_host: None,
            slurm_bin_dir: None,
            slurm_conf: None,
        }
    }
}

fn default_listen() -> String {
    "127.0.0.1:0".to_string()
}
fn default_data_dir() -> PathBuf {
    PathBuf::from("ninf-data")
}
fn default_scheduler() -> String {
    "flow".to_string()
}
fn default_predictor() -> String {
    "latest".to_string()
}
fn default_calibrate() -> bool {
    true
}
fn default_templates() -> bool {
    true
}
fn default_turns_min_seconds() -> f64 {
    0.1
}
fn default_heartbeat() -> f64 {
    1.0
}
fn default_heartbeat_timeout() -> f64 {
    5.0
}
fn default_network() -> f64 {
    10.0
}
fn default_retention_seconds() -> f64 {
    3600.0
}
fn default_retention_graphs() -> u32 {
    1000
}
fn default_history() -> usize {
    32
}
fn default_max_tasks() -> usize {
    100_000
}
fn default_mflops() -> f64 {
    1000.0
}
fn default_data_lease() -> f64 {
    120.0
}
fn default_throughput() -> f64 {
    100e6
}
fn default_latency() -> f64 {
    0.001
}

impl Default for MetaserverConfig {
    fn default() -> Self {
        MetaserverConfig {
            listen: default_listen(),
            data_dir: default_data_dir(),
            database_url: None,
            scheduler: default_scheduler(),
            metrics_listen: None,
            dashboard_listen: None,
            data_lease_seconds: default_data_lease(),
            predictor: default_predictor(),
            calibrate: default_calibrate(),
            templates: default_templates(),
            turns_min_seconds: default_turns_min_seconds(),
            random_seed: 0,
            heartbeat_seconds: default_heartbeat(),
            heartbeat_timeout_seconds: default_heartbeat_timeout(),
            network_seconds: default_network(),
            retention_seconds: default_retention_seconds(),
            retention_graphs: default_retention_graphs(),
            history_samples: default_history(),
            max_graph_tasks: default_max_tasks(),
            default_mflops: default_mflops(),
            default_throughput_bytes_per_second: default_throughput(),
            default_latency_seconds: default_latency(),
            auth_token_file: None,
            tls: None,
            allocation: AllocationConfig::default(),
            shortlist: crate::shortlist::Shortlist::default(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Parse { path: String, message: String },
    #[error("{0}")]
    Invalid(String),
}

impl MetaserverConfig {
    pub fn load(path: &Path) -> Result<MetaserverConfig, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        let config: MetaserverConfig = toml::from_str(&text).map_err(|e| ConfigError::Parse {
            path: path.display().to_string(),
            message: e.to_string(),
        })?;
        config.check()?;
        Ok(config)
    }

    /// Refuses values the metaserver cannot work with, naming the setting.
    pub fn check(&self) -> Result<(), ConfigError> {
        ninf_scheduling::by_name(&self.scheduler, 0)
            .map_err(|e| ConfigError::Invalid(format!("scheduler: {e}")))?;
        self.predictor_kind()?;
        for (name, value) in [
            ("heartbeat_seconds", self.heartbeat_seconds),
            ("heartbeat_timeout_seconds", self.heartbeat_timeout_seconds),
            ("network_seconds", self.network_seconds),
            ("retention_seconds", self.retention_seconds),
            ("default_mflops", self.default_mflops),
            (
                "allocation.interval_seconds",
                self.allocation.interval_seconds,
            ),
            ("allocation.wait_seconds", self.allocation.wait_seconds),
            (
                "default_throughput_bytes_per_second",
                self.default_throughput_bytes_per_second,
            ),
        ] {
            if !(value.is_finite() && value > 0.0) {
                return Err(ConfigError::Invalid(format!(
                    "{name} must be a positive number, not {value}"
                )));
            }
        }
        if self.heartbeat_timeout_seconds < self.heartbeat_seconds {
            return Err(ConfigError::Invalid(format!(
                "heartbeat_timeout_seconds ({}) must be at least heartbeat_seconds ({})",
                self.heartbeat_timeout_seconds, self.heartbeat_seconds
            )));
        }
        Ok(())
    }

    pub fn predictor_kind(&self) -> Result<ninf_scheduling::PredictorKind, ConfigError> {
        self.predictor
            .parse()
            .map_err(|e| ConfigError::Invalid(format!("predictor: {e}")))
    }

    /// The resource DB's URL.
    pub fn database_url(&self) -> String {
        match &self.database_url {
            Some(url) => url.clone(),
            None => format!("sqlite://{}", self.data_dir.join("metaserver.db").display()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calibration_is_on_unless_the_file_turns_it_off() {
        let parse = |text: &str| toml::from_str::<MetaserverConfig>(text).map(|c| c.calibrate);
        assert_eq!(parse("listen = \"127.0.0.1:7000\"\n").ok(), Some(true));
        assert_eq!(parse("calibrate = false\n").ok(), Some(false));
        assert!(parse("calibrate = \"no\"\n").is_err());
    }

    #[test]
    fn templates_are_on_unless_the_file_turns_them_off() {
        let parse = |text: &str| toml::from_str::<MetaserverConfig>(text).map(|c| c.templates);
        assert_eq!(parse("calibrate = false\n").ok(), Some(true));
        assert_eq!(parse("templates = false\n").ok(), Some(false));
        let e = parse("templates = 1\n").err().map(|e| e.to_string());
        assert!(e.is_some_and(|e| e.contains("templates")), "names the key");
    }

    #[test]
    fn turns_start_at_a_quantum_and_inf_turns_them_off_as_the_docs_write_it() {
        let parse =
            |text: &str| toml::from_str::<MetaserverConfig>(text).map(|c| c.turns_min_seconds);
        assert_eq!(parse("calibrate = true\n").ok(), Some(0.1));
        assert_eq!(parse("turns_min_seconds = 0.005\n").ok(), Some(0.005));
        assert_eq!(parse("turns_min_seconds = inf\n").ok(), Some(f64::INFINITY));
        let e = parse("turns_min_seconds = \"never\"\n")
            .err()
            .map(|e| e.to_string());
        assert!(
            e.is_some_and(|e| e.contains("turns_min_seconds")),
            "names the key"
        );
    }
}
