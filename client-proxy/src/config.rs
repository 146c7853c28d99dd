//! Proxy configuration: a TOML file (`--config FILE`) overridden by command-line flags.
//!
//! ```toml
//! listen = "127.0.0.1:7100"
//! metaserver = "127.0.0.1:7000"
//! probe_seconds = 5.0
//! probe_before_placement_seconds = 1.0
//! probe_bytes = 1048576
//! probe_per_site = 8
//! max_in_flight_per_server = 16
//! max_calls_per_batch = 64
//! max_transactions_per_client = 32
//! max_queued_transactions = 1024
//! max_running_transactions = 0
//! max_stored_bytes_per_client = 8589934592
//! task_retries = 4
//! retry_backoff_seconds = 0.25
//! suspect_seconds = 30.0
//! suspect_recheck_seconds = 0.5
//! keepalive_seconds = 5.0
//! keepalive_timeout_seconds = 10.0
//! idle_connection_seconds = 5
//! max_connected_servers = 1000
//! bulk_calls = true
//! same_host_calls = true
//! same_host_uploads = true
//! wait_to_borrow_cores = false
//! journal = "ninf-proxy-journal.sqlite"
//! journal_wait_seconds = 60.0
//! answer_keep_seconds = 600.0
//! ```

use std::path::Path;

use serde::Deserialize;

/// Largest reply a server may send the proxy (the outputs of one call), on gRPC and on the
/// bulk ports alike; not configurable.
pub(crate) const CALL_LIMIT: usize = 1 << 30;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProxyConfig {
    /// Address to listen on, `host:port` (port 0 picks a free one).
    #[serde(default = "default_listen")]
    pub listen: String,
    /// The metaserver, `host:port`, or several separated by commas (metaservers sharing
    /// one PostgreSQL, of which one answers at a time): the proxy moves on down the list
    /// when the one it uses is unreachable or a standby.
    pub metaserver: String,
    /// Name under which the proxy's graphs and measurements are recorded; default: its
    /// address.
    #[serde(default)]
    pub name: Option<String>,
    /// Where to serve Prometheus metrics (`GET /metrics`, `host:port`); none: not served.
    #[serde(default)]
    pub metrics_listen: Option<String>,
    /// How often the paths to the servers are measured.
    #[serde(default = "default_probe_seconds")]
    pub probe_seconds: f64,
    /// How long a graph's placement waits, at most, for the paths of servers never
    /// measured to be measured first (0: the background rounds measure them).
    #[serde(default = "default_probe_before_placement")]
    pub probe_before_placement_seconds: f64,
    /// Payload of a throughput probe.
    #[serde(default = "default_probe_bytes")]
    pub probe_bytes: usize,
    /// Servers of one site whose paths are measured per `probe_seconds`; the site's others
    /// are estimated from them (the metaserver's site series). 0: every server.
    #[serde(default = "default_probe_per_site")]
    pub probe_per_site: usize,
    /// Measurements per server sent with a schedule request.
    #[serde(default = "default_link_history")]
    pub link_history: usize,
    /// Calls outstanding at once on one server; the rest of a graph's ready tasks wait here.
    #[serde(default = "default_in_flight")]
    pub max_in_flight_per_server: usize,
    /// Small calls that wait together for a slot on one server leave in one `CallBatch`
    /// of at most this many (`batching`); 1: every call alone.
    #[serde(default = "default_calls_per_batch")]
    pub max_calls_per_batch: usize,
    /// HTTP/2 connections the proxy keeps to each server.
    #[serde(default = "default_connections")]
    pub connections_per_server: usize,
    /// Servers the proxy keeps connections to at once; past it the least recently used
    /// are closed (their calls finish first) and connected again when next called.
    #[serde(default = "default_connected_servers")]
    pub max_connected_servers: usize,
    /// Largest request a client may send (a graph with its input data).
    #[serde(default = "default_max_request")]
    pub max_request_bytes: usize,
    /// How often the leases of a running graph's intermediates are renewed on its servers;
    /// well under the servers' `storage.lease_seconds`.
    #[serde(default = "default_renew_seconds")]
    pub lease_renew_seconds: f64,
    /// Transactions one client (its library's identity on its address) may run at once;
    /// more wait in the proxy's queue.
    #[serde(default = "default_per_client")]
    pub max_transactions_per_client: usize,
    /// Transactions of all clients that may wait for a place at once; more are refused
    /// (RESOURCE_EXHAUSTED). Each waiting transaction holds its request in memory.
    #[serde(default = "default_queued")]
    pub max_queued_transactions: usize,
    /// Transactions of all clients placed and running at once; more wait at the proxy,
    /// admitted, in arrival order, before the metaserver places them (see
    /// [`crate::admission::RunSlots`]). 0: no limit.
    #[serde(default)]
    pub max_running_transactions: usize,
    /// Bytes of intermediate data one client's running transactions may keep on the
    /// servers at once (each transaction counts every output it keeps for a consumer, as
    /// the IDL sizes it); a transaction that would go over is refused before it starts.
    #[serde(default = "default_stored_per_client")]
    pub max_stored_bytes_per_client: u64,
    /// Times one task is issued again after its server failed or lost one of its inputs,
    /// before its transaction fails.
    #[serde(default = "default_task_retries")]
    pub task_retries: u32,
    /// Wait before a task's first retry; it doubles with each further retry.
    #[serde(default = "default_retry_backoff")]
    pub retry_backoff_seconds: f64,
    /// Longest wait between retries.
    #[serde(default = "default_retry_backoff_max")]
    pub retry_backoff_max_seconds: f64,
    /// How long a server that failed a call stays suspect for every graph the proxy runs,
    /// unless a call or probe started after the failure succeeds on it first (see
    /// [`crate::suspects`]); 0 turns the shared suspicion off.
    #[serde(default = "default_suspect_seconds")]
    pub suspect_seconds: f64,
    /// How often a suspect server is asked whether it answers again (`Interface.List`); the
    /// first answer takes it off the board.
    #[serde(default = "default_suspect_recheck")]
    pub suspect_recheck_seconds: f64,
    /// How often the proxy pings each connection (to the servers and the metaserver), so a
    /// peer that hangs or a path that silently drops is noticed while calls wait on it.
    #[serde(default = "default_keepalive")]
    pub keepalive_seconds: f64,
    /// A ping unanswered this long drops the connection: its calls fail as a server fault
    /// and are retried elsewhere. Calls themselves may take any time; only the peer's
    /// silence counts.
    #[serde(default = "default_keepalive_timeout")]
    pub keepalive_timeout_seconds: f64,
    /// A proxy with no transaction running for this many seconds closes its connections to
    /// the compute servers, which keep buffers sized for the most calls they ever carried,
    /// and gives the memory back; its next call opens them again. 0 keeps them open.
    #[serde(default = "default_idle_connection_seconds")]
    pub idle_connection_seconds: u64,
    /// Calls carrying 1 MiB of arrays or more go to the server's bulk-data port (the
    /// request frame, then the arrays' raw bytes; docs/bulk-protocol.md) instead of gRPC,
    /// when the server has one and the grid runs without TLS. false: every call by gRPC.
    #[serde(default = "default_true")]
    pub bulk_calls: bool,
    /// Those calls, to a server on the proxy's host, go through the server's same-host
    /// socket with their arrays in a memory file the proxy shares with it, instead of its
    /// TCP bulk port (docs/bulk-protocol.md, "From the proxy"). A server the socket does not
    /// reach (another host, another network namespace) gets them on its TCP port. false:
    /// always the TCP port.
    #[serde(default = "default_true")]
    pub same_host_calls: bool,
    /// A client on the proxy's host may pass its large arrays in memory it shares with the
    /// proxy (a sealed memory file handed over on an abstract Unix socket) instead of
    /// sending their bytes (docs/bulk-protocol.md). Never with TLS. false: always by gRPC.
    #[serde(default = "default_true")]
    pub same_host_uploads: bool,
    /// The grid's servers lend each other the cores they leave idle (one host, `[gang]
    /// core_claims`): a graph's last long call then waits for its other calls to end, when
    /// the model says they end within a quarter of its own time (waiting at most a third of
    /// it), so that it leaves alone and
    /// borrows their cores (docs/scheduling.md, "Turns"). `ninf up` and `local_grid` set it
    /// when their servers lend cores; elsewhere the wait would buy nothing.
    #[serde(default)]
    pub wait_to_borrow_cores: bool,
    /// How long a transaction waits for an unreachable (restarting) metaserver to place it.
    #[serde(default = "default_metaserver_retry")]
    pub metaserver_retry_seconds: f64,
    /// The grid's token file (mode 0600): clients must present its token, and the proxy
    /// presents it to the metaserver.
    #[serde(default)]
    pub auth_token_file: Option<std::path::PathBuf>,
    /// TLS (`[tls]`: ca, certificate, key): the proxy's port serves TLS, and it connects to
    /// the metaserver and the servers over TLS, presenting its certificate. Clients that
    /// authenticate by the grid token alone need `require_client_certificates = false`.
    #[serde(default)]
    pub tls: Option<ninf_proto::net::tls::TlsFiles>,
    /// Where the proxy journals its transactions, so that a restarted proxy finishes them
    /// for the clients that send them again: a SQLite file (a path, or `sqlite://PATH`), or
    /// `postgres://USER:PASSWORD@HOST/DB` (rows are per proxy name, so proxies may share
    /// one); `"off"`: no journal. `ninf-proxy` journals to `ninf-proxy-journal.sqlite`
    /// beside its configuration file (or in its working folder) when this is not set; a
    /// proxy started in a program (`ProxyConfig::new`) journals nothing unless told.
    #[serde(default)]
    pub journal: Option<String>,
    /// How long a restarted proxy waits for the clients of the transactions in its journal
    /// to send them again, keeping their intermediates; then it deletes them.
    #[serde(default = "default_journal_wait")]
    pub journal_wait_seconds: f64,
    /// How long the journal keeps the answer of a transaction that wrote data handles: a
    /// client whose reply was lost and that sends it again within this time is answered
    /// from it, never run again over the values it wrote. Longer than the clients'
    /// `NINF_RECONNECT_SECONDS` (60 s by default).
    #[serde(default = "default_answer_keep")]
    pub answer_keep_seconds: f64,
}

fn default_journal_wait() -> f64 {
    60.0
}

fn default_answer_keep() -> f64 {
    600.0
}

fn default_metaserver_retry() -> f64 {
    30.0
}

fn default_keepalive() -> f64 {
    ninf_proto::net::KEEPALIVE_INTERVAL.as_secs_f64()
}

fn default_idle_connection_seconds() -> u64 {
    5
}

fn default_true() -> bool {
    true
}
fn default_keepalive_timeout() -> f64 {
    ninf_proto::net::KEEPALIVE_TIMEOUT.as_secs_f64()
}

fn default_suspect_recheck() -> f64 {
    0.5
}

fn default_suspect_seconds() -> f64 {
    30.0
}

fn default_calls_per_batch() -> usize {
    64
}

fn default_task_retries() -> u32 {
    4
}

fn default_retry_backoff() -> f64 {
    0.25
}

fn default_retry_backoff_max() -> f64 {
    5.0
}

fn default_stored_per_client() -> u64 {
    8 << 30
}

fn default_per_client() -> usize {
    32
}

fn default_queued() -> usize {
    1024
}

fn default_renew_seconds() -> f64 {
    20.0
}

fn default_listen() -> String {
    "127.0.0.1:0".to_string()
}
fn default_probe_before_placement() -> f64 {
    1.0
}
fn default_probe_seconds() -> f64 {
    5.0
}
fn default_probe_bytes() -> usize {
    1 << 20
}
fn default_probe_per_site() -> usize {
    8
}
fn default_link_history() -> usize {
    8
}
fn default_in_flight() -> usize {
    16
}
fn default_connections() -> usize {
    4
}
fn default_connected_servers() -> usize {
    1000
}
fn default_max_request() -> usize {
    1 << 30
}

impl ProxyConfig {
    /// A configuration with every default, for the given metaserver.
    pub fn new(metaserver: impl Into<String>) -> ProxyConfig {
        ProxyConfig {
            listen: default_listen(),
            metaserver: metaserver.into(),
            name: None,
            metrics_listen: None,
            probe_seconds: default_probe_seconds(),
            probe_before_placement_seconds: default_probe_before_placement(),
            probe_bytes: default_probe_bytes(),
            probe_per_site: default_probe_per_site(),
            link_history: default_link_history(),
            max_in_flight_per_server: default_in_flight(),
            max_calls_per_batch: default_calls_per_batch(),
            connections_per_server: default_connections(),
            max_connected_servers: default_connected_servers(),
            max_request_bytes: default_max_request(),
            lease_renew_seconds: default_renew_seconds(),
            max_transactions_per_client: default_per_client(),
            max_queued_transactions: default_queued(),
            max_running_transactions: 0,
            max_stored_bytes_per_client: default_stored_per_client(),
            task_retries: default_task_retries(),
            retry_backoff_seconds: default_retry_backoff(),
            retry_backoff_max_seconds: default_retry_backoff_max(),
            suspect_seconds: default_suspect_seconds(),
            suspect_recheck_seconds: default_suspect_recheck(),
            keepalive_seconds: default_keepalive(),
            keepalive_timeout_seconds: default_keepalive_timeout(),
            idle_connection_seconds: default_idle_connection_seconds(),
            bulk_calls: true,
            same_host_calls: true,
            same_host_uploads: true,
            wait_to_borrow_cores: false,
            metaserver_retry_seconds: default_metaserver_retry(),
            auth_token_file: None,
            tls: None,
            journal: None,
            journal_wait_seconds: default_journal_wait(),
            answer_keep_seconds: default_answer_keep(),
        }
    }

    /// The journal's database URL, if the proxy journals: a bare path is a SQLite file.
    pub fn journal_url(&self) -> Option<String> {
        let journal = self.journal.as_deref()?.trim();
        if journal.is_empty() || journal == "off" {
            None
        } else if journal.contains("://") || journal.starts_with("sqlite:") {
            Some(journal.to_string())
        } else {
            Some(format!("sqlite://{journal}"))
        }
    }

    pub fn load(path: &Path) -> Result<ProxyConfig, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn run_slots_are_off_unless_max_running_transactions_sets_them() {
        let defaults: ProxyConfig = toml::from_str("metaserver = \"m:1\"").unwrap();
        assert_eq!(defaults.max_running_transactions, 0);
        let set: ProxyConfig =
            toml::from_str("metaserver = \"m:1\"\nmax_running_transactions = 3\n").unwrap();
        assert_eq!(set.max_running_transactions, 3);
        let negative =
            toml::from_str::<ProxyConfig>("metaserver = \"m:1\"\nmax_running_transactions = -1\n")
                .unwrap_err();
        assert!(
            negative.to_string().contains("max_running_transactions"),
            "{negative}"
        );
    }

    #[test]
    fn the_connection_keys_parse_from_toml_and_a_misspelt_key_is_refused_by_name() {
        let defaults: ProxyConfig = toml::from_str("metaserver = \"m:1\"").unwrap();
        assert_eq!(defaults.idle_connection_seconds, 5);
        assert!(defaults.bulk_calls);
        assert!(defaults.same_host_uploads);
        assert!(defaults.same_host_calls);
        assert!(!defaults.wait_to_borrow_cores);
        let lending: ProxyConfig =
            toml::from_str("metaserver = \"m:1\"\nwait_to_borrow_cores = true\n").unwrap();
        assert!(lending.wait_to_borrow_cores);
        assert_eq!(defaults.answer_keep_seconds, 600.0);
        let keeping: ProxyConfig =
            toml::from_str("metaserver = \"m:1\"\nanswer_keep_seconds = 120.0\n").unwrap();
        assert_eq!(keeping.answer_keep_seconds, 120.0);
        let text = "metaserver = \"m:1\"\nidle_connection_seconds = 0\nbulk_calls = false\n\
                    same_host_uploads = false\nsame_host_calls = false\n";
        let set: ProxyConfig = toml::from_str(text).unwrap();
        assert!(!set.same_host_uploads);
        assert!(!set.same_host_calls);
        assert_eq!(set.idle_connection_seconds, 0);
        assert!(!set.bulk_calls);
        let error = toml::from_str::<ProxyConfig>("metaserver = \"m:1\"\nbulk_call = false\n")
            .unwrap_err()
            .to_string();
        assert!(error.contains("unknown field `bulk_call`"), "{error}");
    }

    #[test]
    fn probe_per_site_reads_as_the_docs_write_it() {
        let defaults: ProxyConfig = toml::from_str("metaserver = \"m:1\"").unwrap();
        assert_eq!(defaults.probe_per_site, 8);
        let text = "metaserver = \"m:1\"\nprobe_per_site = 0\n";
        let set: ProxyConfig = toml::from_str(text).unwrap();
        assert_eq!(set.probe_per_site, 0, "0: every server");
    }
}
