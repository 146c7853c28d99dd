//! The grid's one network layer: how every gRPC connection and every gRPC server of the grid
//! is built. HTTP/2 windows and frame sizes, TCP_NODELAY, keepalive pings, the connect
//! timeout and TLS are set here and nowhere else, so a client and the server it talks to
//! always agree, and a fix (a ping, a timeout) reaches every connection at once. The grid's
//! token ([`auth`]) and TLS material ([`tls`]) live beside it.

pub mod auth;
pub mod bulk;
pub mod crash;
pub mod failover;
pub mod local;
pub mod tls;
pub mod trace;

use std::time::Duration;

use tonic::transport::{Channel, Endpoint, Server};

use tls::GridTls;

/// HTTP/2 flow-control window every Ninf server and client uses (bytes). HTTP/2's defaults
/// (64 KiB windows, 16 KiB frames) make a large array crawl through thousands of
/// flow-control round trips; moving arrays is what Ninf does.
pub const HTTP2_WINDOW: u32 = 16 << 20;
/// HTTP/2 frame size every Ninf server and client uses (the protocol allows up to 16 MiB - 1).
pub const HTTP2_FRAME: u32 = 1 << 20;
/// How often a connection between grid components is pinged (HTTP/2 PING) by default.
pub const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(5);
/// A ping unanswered this long drops the connection. A hung peer, or a path that silently
/// drops packets, keeps the TCP connection open; without pings a call to it waits forever.
pub const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long establishing a connection (TCP and, with TLS, the handshake) may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// HTTP/2 pings on a connection: every `interval`, and a ping unanswered for `timeout`
/// drops the connection, so a call to a hung server fails as a server fault instead of
/// waiting forever.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Keepalive {
    pub interval: Duration,
    pub timeout: Duration,
}

impl Default for Keepalive {
    fn default() -> Keepalive {
        Keepalive {
            interval: KEEPALIVE_INTERVAL,
            timeout: KEEPALIVE_TIMEOUT,
        }
    }
}

impl Keepalive {
    /// From configured seconds, clamped to 0.1 s .. 1 h (a zero interval would ping
    /// continuously; a huge one overflows the timer).
    pub fn from_seconds(interval: f64, timeout: f64) -> Keepalive {
        let seconds = |s: f64| Duration::from_secs_f64(s.clamp(0.1, 3600.0));
        Keepalive {
            interval: seconds(interval),
            timeout: seconds(timeout),
        }
    }
}

/// How connections to one kind of peer behave. The default suits every grid connection;
/// the proxy configures its keepalive.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ConnectionSettings {
    pub connect_timeout: Duration,
    pub keepalive: Keepalive,
}

impl Default for ConnectionSettings {
    fn default() -> ConnectionSettings {
        ConnectionSettings {
            connect_timeout: CONNECT_TIMEOUT,
            keepalive: Keepalive::default(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum NetError {
    #[error("bad address `{address}`: {reason}")]
    BadAddress { address: String, reason: String },
    #[error("bad TLS settings for {address}: {reason}")]
    Tls { address: String, reason: String },
    #[error("cannot connect to {address}: {reason}")]
    Connect { address: String, reason: String },
    #[error("cannot listen on {address}: {reason}")]
    Listen { address: String, reason: String },
}

/// An endpoint for `address` (`host:port`) with the grid's settings: `https` checked against
/// the grid's authority when `tls` is given, plain `http` otherwise.
pub fn endpoint(
    address: &str,
    tls: Option<&GridTls>,
    settings: ConnectionSettings,
) -> Result<Endpoint, NetError> {
    let scheme = if tls.is_some() { "https" } else { "http" };
    let endpoint = Endpoint::from_shared(format!("{scheme}://{address}")).map_err(|e| {
        NetError::BadAddress {
            address: address.to_string(),
            reason: e.to_string(),
        }
    })?;
    let endpoint = match tls {
        Some(tls) => endpoint
            .tls_config(tls.client_config())
            .map_err(|e| NetError::Tls {
                address: address.to_string(),
                reason: e.to_string(),
            })?,
        None => endpoint,
    };
    Ok(endpoint
        .connect_timeout(settings.connect_timeout)
        .http2_keep_alive_interval(settings.keepalive.interval)
        .keep_alive_timeout(settings.keepalive.timeout)
        .keep_alive_while_idle(true)
        .tcp_nodelay(true)
        .initial_stream_window_size(HTTP2_WINDOW)
        .initial_connection_window_size(HTTP2_WINDOW)
        .max_frame_size(HTTP2_FRAME))
}

/// A channel to `address` that connects on first use (and again after a failure).
pub fn connect_lazy(
    address: &str,
    tls: Option<&GridTls>,
    settings: ConnectionSettings,
) -> Result<Channel, NetError> {
    Ok(endpoint(address, tls, settings)?.connect_lazy())
}

/// A channel to `address`, connected now; the error names the address and every cause
/// (refused, timed out, the TLS handshake's complaint).
pub async fn connect(
    address: &str,
    tls: Option<&GridTls>,
    settings: ConnectionSettings,
) -> Result<Channel, NetError> {
    endpoint(address, tls, settings)?
        .connect()
        .await
        .map_err(|e| NetError::Connect {
            address: address.to_string(),
            reason: with_causes(&e),
        })
}

/// A gRPC server builder with the grid's settings, serving TLS when `tls` holds a
/// certificate. Servers ping their clients too, so a call from a client that vanished is
/// dropped rather than held.
pub fn server(tls: Option<&GridTls>) -> Result<Server, tonic::transport::Error> {
    let builder = Server::builder()
        .tcp_nodelay(true)
        .initial_stream_window_size(Some(HTTP2_WINDOW))
        .initial_connection_window_size(Some(HTTP2_WINDOW))
        .max_frame_size(Some(HTTP2_FRAME))
        .http2_keepalive_interval(Some(KEEPALIVE_INTERVAL))
        .http2_keepalive_timeout(Some(KEEPALIVE_TIMEOUT))
        .trace_fn(trace::request_span);
    match tls.and_then(GridTls::server_config) {
        Some(config) => builder.tls_config(config),
        None => Ok(builder),
    }
}

/// Metadata a proxy sets on a refusal that lifts when the client's running transactions
/// end (too many at once, or over its storage quota only with them): the client waits and
/// sends the graph again.
pub const BUSY_METADATA: &str = "ninf-busy";

/// Metadata a proxy sets on a refusal of a run naming a shared region it does not hold (it
/// restarted since the client handed it over): the client connects again and resends.
pub const REGION_UNKNOWN_METADATA: &str = "ninf-region-unknown";

/// Metadata naming the client program a request comes from (its library makes one identity
/// per client it opens): the proxy counts its per-client limits by it, on the caller's
/// address, so programs sharing a host are counted apart.
pub const CLIENT_ID_METADATA: &str = "ninf-client-id";

/// Longest client identity a proxy takes; a longer one is cut.
pub const CLIENT_ID_MAX: usize = 64;

/// Metadata a proxy sets on every error it answers with itself, so that a client tells the
/// proxy's verdict on a transaction (final) from a connection that broke under it (the proxy
/// died or restarts: the client sends the transaction again, by its id).
pub const ANSWER_METADATA: &str = "ninf-answer";

/// Metadata on a NOT_FOUND that names a data handle (docs/data.md) no longer on the grid:
/// freed, expired or never made. Its value is the handle's id.
pub const DATA_NOT_FOUND_METADATA: &str = "ninf-data-not-found";

/// NOT_FOUND for the data handle `id`, marked so that clients raise their `DataNotFound`.
pub fn data_not_found(message: impl Into<String>, id: &str) -> tonic::Status {
    let mut status = tonic::Status::not_found(message);
    if let Ok(value) = id.parse() {
        status.metadata_mut().insert(DATA_NOT_FOUND_METADATA, value);
    }
    status
}

/// The data handle a NOT_FOUND names, if it is about one.
pub fn missing_data(status: &tonic::Status) -> Option<String> {
    let value = status.metadata().get(DATA_NOT_FOUND_METADATA)?;
    value.to_str().ok().map(str::to_string)
}

/// Whether `status` is the proxy's own answer rather than a broken connection.
pub fn is_answer(status: &tonic::Status) -> bool {
    status.metadata().contains_key(ANSWER_METADATA)
}

/// `status` marked as the proxy's own answer ([`ANSWER_METADATA`]).
pub fn answer(mut status: tonic::Status) -> tonic::Status {
    status.metadata_mut().insert(
        ANSWER_METADATA,
        tonic::metadata::AsciiMetadataValue::from_static("1"),
    );
    status
}

/// The connections a grid server's `listener` accepts, with Nagle's algorithm off. tonic
/// applies its own `tcp_nodelay` only to listeners it binds itself; without this, a reply's
/// last small frame waited for the caller's delayed ACK, 40 ms per call through the proxy.
pub fn incoming(listener: tokio::net::TcpListener) -> tonic::transport::server::TcpIncoming {
    tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true))
}

/// A listener bound for a grid server: `listen` (`host:port`, port 0 for any), with the error
/// naming the address.
pub async fn listen(listen: &str) -> Result<tokio::net::TcpListener, NetError> {
    tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| NetError::Listen {
            address: listen.to_string(),
            reason: e.to_string(),
        })
}

/// A gRPC server running in a task until it is stopped: what each component's start
/// function (`ninf_metaserver::bind`, `ninf_client_proxy::bind`, `ninf_compute_server::bind`)
/// holds, so that binaries, the embedded grid, tests and benchmarks stop them the same way.
/// Dropping it shuts the server down as well (without waiting).
pub struct Serving {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<Result<(), tonic::transport::Error>>,
}

/// A graceful-shutdown signal handed to a server's serve loop.
pub type Shutdown = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("the server failed: {}", with_causes(.0))]
    Transport(#[from] tonic::transport::Error),
    #[error("the server's task ended abnormally: {0}")]
    Task(String),
}

impl Serving {
    /// Runs `serve` in a task, handing it the shutdown signal that [`Serving::stop`] fires.
    pub fn spawn<F>(serve: impl FnOnce(Shutdown) -> F) -> Serving
    where
        F: std::future::Future<Output = Result<(), tonic::transport::Error>> + Send + 'static,
    {
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let shutdown: Shutdown = Box::pin(async move {
            let _ = stopped.await;
        });
        Serving {
            stop: Some(stop),
            task: tokio::spawn(serve(shutdown)),
        }
    }

    /// Shuts the server down gracefully and waits until it has.
    pub async fn stop(mut self) -> Result<(), ServeError> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.join().await
    }

    /// Serves until `signal` completes (then stops gracefully), or until the server ends.
    pub async fn until(
        mut self,
        signal: impl std::future::Future<Output = ()>,
    ) -> Result<(), ServeError> {
        tokio::select! {
            () = signal => self.stop().await,
            ended = &mut self.task => Self::ended(ended),
        }
    }

    async fn join(self) -> Result<(), ServeError> {
        Self::ended(self.task.await)
    }

    fn ended(
        ended: Result<Result<(), tonic::transport::Error>, tokio::task::JoinError>,
    ) -> Result<(), ServeError> {
        ended.map_err(|e| ServeError::Task(e.to_string()))??;
        Ok(())
    }
}

/// An error and its chain of causes, each once (tonic's transport errors say only
/// "transport error" at the top).
pub fn with_causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(inner) = cause {
        let inner_text = inner.to_string();
        if !text.ends_with(&inner_text) {
            text.push_str(": ");
            text.push_str(&inner_text);
        }
        cause = inner.source();
    }
    text
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn bad_addresses_are_named() {
        let e = endpoint("not an address", None, ConnectionSettings::default()).unwrap_err();
        assert!(
            e.to_string().starts_with("bad address `not an address`"),
            "{e}"
        );
    }

    #[tokio::test]
    async fn a_refused_connection_names_the_address_and_cause() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap().to_string();
        drop(listener);
        let e = connect(&address, None, ConnectionSettings::default())
            .await
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with(&format!("cannot connect to {address}: ")),
            "{e}"
        );
        assert!(e.contains("refused"), "{e}");
    }

    #[test]
    fn keepalive_seconds_are_clamped() {
        let k = Keepalive::from_seconds(0.0, 1e9);
        assert_eq!(k.interval, Duration::from_millis(100));
        assert_eq!(k.timeout, Duration::from_secs(3600));
    }
}
