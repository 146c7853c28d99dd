//! The async connection to a client proxy, [`AsyncGridClient`]: the core the blocking API,
//! async programs and the C and Python bindings share (descriptors, running a graph).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use ninf_idl::FunctionInterface;
use ninf_proto::net::BUSY_METADATA;
use ninf_proto::net::auth::AttachToken;
use ninf_proto::net::tls::GridTls;
use ninf_proto::v1;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;
use tracing::Instrument;

use super::progress::{Progress, ProgressCallback};
use crate::environment::{tls_from_env, token_from_env};
use crate::remote::server_address;
use crate::{CallError, ErrorKind};

/// An async connection to a client proxy.
#[derive(Clone)]
pub struct AsyncGridClient {
    address: String,
    channel: Channel,
    descriptors: Arc<Mutex<HashMap<String, Arc<FunctionInterface>>>>,
    scheduler: Option<String>,
    /// The grid's token, presented with every request.
    token: AttachToken,
    /// Called as a followed transaction's tasks end.
    progress: Option<ProgressCallback>,
    /// Who this client is to the proxy, which counts its per-client limits by it.
    identity: tonic::metadata::AsciiMetadataValue,
    /// How long a transaction is sent again while the proxy is unreachable.
    reconnect: std::time::Duration,
    /// Memory shared with a proxy on this host, for runs' large arrays.
    uploads: Arc<super::same_host::SharedUploads>,
    /// Renews this client's data handles while it lives.
    renewal: super::renewal::SharedRenewal,
}

/// A new transaction id, unique to this client: its identity, a number, the time (so a
/// process that reuses a dead one's pid makes other ids) and 64 random bits (so that nobody
/// else can guess it and pick up the transaction from a restarted proxy's journal).
fn new_transaction_id(identity: &str) -> String {
    use std::hash::{BuildHasher, Hasher};
    static STARTED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let number = STARTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    // The standard library seeds each `RandomState` from the operating system's generator.
    let mut random = std::collections::hash_map::RandomState::new().build_hasher();
    random.write_u64(number);
    format!("{identity}-{number}-{nanos:x}-{:016x}", random.finish())
}

/// Whether a failed run should be sent again: the connection broke or could not be made (the
/// proxy died or restarts), as opposed to an answer of the proxy's own.
pub(crate) fn proxy_unreachable(status: &tonic::Status) -> bool {
    !ninf_proto::net::is_answer(status)
        && matches!(
            status.code(),
            tonic::Code::Unavailable
                | tonic::Code::Unknown
                | tonic::Code::Internal
                | tonic::Code::Cancelled
        )
}

/// Whether the connection broke while the proxy may have had the request (so it may have
/// been carried out), as opposed to an answer of the proxy's or no connection at all.
pub(crate) fn broke_midway(status: &tonic::Status) -> bool {
    proxy_unreachable(status) && !not_connected(status)
}

/// The wait before the `attempt`th try to reach a proxy again: doubling from 100 ms to 1.6 s.
fn reconnect_wait(attempt: u32) -> std::time::Duration {
    std::time::Duration::from_millis(50 << attempt.min(5))
}

/// Whether the connection to the proxy could not be made at all (refused, timed out,
/// unreachable), as opposed to one that broke while the proxy had the transaction.
pub(crate) fn not_connected(status: &tonic::Status) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(status);
    while let Some(error) = source {
        if let Some(io) = error.downcast_ref::<std::io::Error>() {
            return matches!(
                io.kind(),
                std::io::ErrorKind::ConnectionRefused
                    | std::io::ErrorKind::TimedOut
                    | std::io::ErrorKind::HostUnreachable
                    | std::io::ErrorKind::NetworkUnreachable
                    | std::io::ErrorKind::AddrNotAvailable
            );
        }
        source = error.source();
    }
    false
}

/// An identity for a new client: the process and the client's number in it, so that each
/// program (and each client one program opens) has its own limits at the proxy.
fn new_identity() -> tonic::metadata::AsciiMetadataValue {
    static OPENED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let number = OPENED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let identity = format!("pid{}-{number}", std::process::id());
    tonic::metadata::AsciiMetadataValue::try_from(identity)
        .unwrap_or_else(|_| tonic::metadata::AsciiMetadataValue::from_static("unnamed"))
}

impl AsyncGridClient {
    /// Connects to the proxy at `host:port` (or `ninf://host:port`), over TLS when
    /// [`super::TLS_CA_ENV`] names the grid's certificate authority, presenting the token
    /// [`super::TOKEN_FILE_ENV`] names.
    pub async fn connect(url: &str) -> Result<AsyncGridClient, CallError> {
        AsyncGridClient::connect_with_tls(url, tls_from_env()?.as_ref()).await
    }

    /// Connects to the proxy, over TLS checked against the grid's authority when `tls` is
    /// given (and presenting its certificate, if it holds one). The connection has the
    /// grid's connect timeout and keepalive pings.
    pub async fn connect_with_tls(
        url: &str,
        tls: Option<&GridTls>,
    ) -> Result<AsyncGridClient, CallError> {
        let address = server_address(url)?;
        let settings = ninf_proto::net::ConnectionSettings::default();
        let channel = ninf_proto::net::connect(&address, tls, settings)
            .await
            .map_err(crate::error::connect_error)?;
        Ok(AsyncGridClient {
            address,
            channel,
            descriptors: Arc::default(),
            scheduler: None,
            token: token_from_env()?,
            progress: None,
            identity: new_identity(),
            reconnect: crate::environment::reconnect_from_env()?,
            uploads: Arc::new(super::same_host::SharedUploads::from_env()?),
            renewal: Arc::default(),
        })
    }

    /// Sends a transaction again for up to `window` while the proxy is unreachable (the
    /// default is [`super::DEFAULT_RECONNECT_SECONDS`], or [`super::RECONNECT_SECONDS_ENV`]).
    pub fn with_reconnect(mut self, window: std::time::Duration) -> AsyncGridClient {
        self.reconnect = window;
        self
    }

    /// Presents this token to the proxy (the grid's `token` file holds it).
    pub fn with_token(mut self, token: &str) -> AsyncGridClient {
        self.token = AttachToken::new(Some(token));
        self
    }

    /// Asks for this scheduler instead of the metaserver's configured one (experiments).
    pub fn with_scheduler(mut self, scheduler: &str) -> AsyncGridClient {
        self.scheduler = Some(scheduler.to_string());
        self
    }

    /// Follows every transaction: `callback` gets its progress as its tasks end (on the
    /// library's runtime; keep it short).
    pub fn with_progress(mut self, callback: ProgressCallback) -> AsyncGridClient {
        self.progress = Some(callback);
        self
    }

    pub fn address(&self) -> &str {
        &self.address
    }

    /// A routine's descriptor without asking the proxy, if it was fetched before; else the
    /// blocking API's one round trip.
    pub(crate) fn describe_blocking(
        &self,
        function: &str,
    ) -> Result<Arc<FunctionInterface>, CallError> {
        match self.cached(function) {
            Some(found) => Ok(found),
            None => crate::runtime::runtime()?.block_on(self.describe(function)),
        }
    }

    /// The scheduler asked for, if not the metaserver's own.
    pub fn scheduler(&self) -> Option<&str> {
        self.scheduler.as_deref()
    }

    /// `message` as a request that says which client sends it.
    pub(crate) fn identified<T>(&self, message: T) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        request
            .metadata_mut()
            .insert(ninf_proto::net::CLIENT_ID_METADATA, self.identity.clone());
        request
    }

    pub(crate) fn renewal(&self) -> &super::renewal::Renewal {
        &self.renewal
    }

    /// What the background renewal of data handles sends with.
    pub(crate) fn renewal_parts(
        &self,
    ) -> (Channel, AttachToken, tonic::metadata::AsciiMetadataValue) {
        (
            self.channel.clone(),
            self.token.clone(),
            self.identity.clone(),
        )
    }

    pub(crate) fn proxy(
        &self,
    ) -> v1::proxy_client::ProxyClient<InterceptedService<Channel, AttachToken>> {
        v1::proxy_client::ProxyClient::with_interceptor(self.channel.clone(), self.token.clone())
            .max_decoding_message_size(usize::MAX)
            .max_encoding_message_size(usize::MAX)
    }

    /// A routine's descriptor if this client fetched it before; no I/O.
    pub fn cached(&self, function: &str) -> Option<Arc<FunctionInterface>> {
        let cache = ninf_proto::sync::lock(&self.descriptors);
        cache.get(function).cloned()
    }

    /// A routine's interface descriptor, fetched once per client.
    pub async fn describe(&self, function: &str) -> Result<Arc<FunctionInterface>, CallError> {
        if let Some(found) = self.cached(function) {
            return Ok(found);
        }
        let reply = self
            .while_unreachable(|| {
                let request = v1::DescribeRequest {
                    function: function.to_string(),
                };
                let mut proxy = self.proxy();
                async move { proxy.describe(request).await }
            })
            .await?
            .into_inner();
        let interface = Arc::new(
            FunctionInterface::try_from(&reply)
                .map_err(|e| CallError::new(ErrorKind::CommunicationFailed, e.to_string()))?,
        );
        let mut cache = ninf_proto::sync::lock(&self.descriptors);
        cache.insert(function.to_string(), interface.clone());
        Ok(interface)
    }

    /// The proxy's socket for shared regions, if it offers one (an older proxy does not).
    /// The routines some server that is up serves, sorted.
    pub async fn functions(&self) -> Result<Vec<String>, CallError> {
        let reply = self
            .while_unreachable(|| {
                let mut proxy = self.proxy();
                async move { proxy.functions(v1::FunctionsRequest {}).await }
            })
            .await?;
        Ok(reply.into_inner().functions)
    }

    /// Runs `call`, asking again while the proxy cannot be reached (it restarts), for up to
    /// the reconnect window. For requests that may be made twice (lookups, a handle's data,
    /// a free, a put under its name).
    pub(crate) async fn while_unreachable<T, F, Fut>(&self, call: F) -> Result<T, tonic::Status>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, tonic::Status>>,
    {
        self.asking_again(proxy_unreachable, call).await
    }

    async fn asking_again<T, F, Fut>(
        &self,
        again: impl Fn(&tonic::Status) -> bool,
        mut call: F,
    ) -> Result<T, tonic::Status>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, tonic::Status>>,
    {
        let since = std::time::Instant::now();
        let mut attempt = 0;
        loop {
            match call().await {
                Err(status) if again(&status) && since.elapsed() < self.reconnect => {
                    attempt += 1;
                    tokio::time::sleep(reconnect_wait(attempt)).await;
                }
                other => return other,
            }
        }
    }

    /// Runs a recorded graph (see [`super::Recording::into_request`]) and waits for it,
    /// following its progress when the client has a progress callback. While the proxy is
    /// busy with this client's other transactions (its per-client limits), waits and asks
    /// again.
    ///
    /// The run is a `transaction` span (its tasks and label; the graph's id once placed): the
    /// root of the transaction's trace when the program exports traces.
    pub async fn run(&self, request: v1::RunRequest) -> Result<v1::RunReply, CallError> {
        let span = tracing::info_span!(
            "transaction",
            tasks = request.graph.as_ref().map_or(0, |g| g.tasks.len()),
            label = %request.label,
            graph_id = tracing::field::Empty,
        );
        let reply = self
            .run_until_admitted(request)
            .instrument(span.clone())
            .await;
        if let Ok(reply) = &reply {
            span.record("graph_id", reply.graph_id);
        }
        reply
    }

    /// [`Self::run`], asking again while the proxy is busy with this client, and sending the
    /// transaction again (by its id) while the proxy is unreachable, for up to the
    /// reconnect window: a restarted proxy finishes it from its journal.
    async fn run_until_admitted(
        &self,
        mut request: v1::RunRequest,
    ) -> Result<v1::RunReply, CallError> {
        if request.transaction_id.is_empty() {
            request.transaction_id = new_transaction_id(self.identity.to_str().unwrap_or(""));
        }
        let mut busy_wait = std::time::Duration::from_millis(1);
        let mut unreachable_since: Option<std::time::Instant> = None;
        let mut attempt = 0;
        loop {
            // A clone per attempt, so a refusal can be sent again: array data is `Bytes`
            // (shared, not copied); only the graph's small fields are.
            let status = match self.run_once(request.clone()).await {
                Ok(reply) => return reply,
                Err(status) => status,
            };
            if status.metadata().contains_key(BUSY_METADATA) {
                tokio::time::sleep(busy_wait).await;
                busy_wait = (busy_wait * 2).min(std::time::Duration::from_millis(100));
                continue;
            }
            if !proxy_unreachable(&status) {
                return Err(status.into());
            }
            if !not_connected(&status) {
                // The proxy had the transaction and went away: the window starts again.
                unreachable_since = None;
                attempt = 0;
            }
            let since = *unreachable_since.get_or_insert_with(std::time::Instant::now);
            if since.elapsed() >= self.reconnect {
                return Err(status.into());
            }
            attempt += 1;
            let wait = reconnect_wait(attempt);
            tracing::warn!(error = %status.message(), retry_in = ?wait, "the proxy is unreachable; sending the transaction again");
            tokio::time::sleep(wait).await;
        }
    }

    /// Where a new foreign transaction records its large inputs, if this client shares
    /// memory with its proxy (docs/bulk-protocol.md, "From a client on the proxy's host").
    /// The regions this client shares with a proxy on its host.
    pub(crate) fn shared_uploads(&self) -> &super::same_host::SharedUploads {
        &self.uploads
    }

    pub(crate) fn recorder(&self) -> Option<super::same_host::Recorder> {
        self.uploads.recorder()
    }

    /// One attempt: the proxy's refusal as it came, or the run's outcome. Large arrays go
    /// in memory shared with a proxy on this host when it offers that; a proxy that no
    /// longer knows the region (it restarted) gets them in the request.
    async fn run_once(
        &self,
        request: v1::RunRequest,
    ) -> Result<Result<v1::RunReply, CallError>, tonic::Status> {
        let mut shared = request.clone();
        if let Some(run) = self.uploads.share(self, &mut shared).await {
            match self.send_run(shared).await {
                Err(status) if super::same_host::region_unknown(&status) => {
                    self.uploads.reconnect().await;
                }
                Ok(Ok(reply)) => return Ok(run.receive(reply)),
                outcome => return outcome,
            }
        }
        self.send_run(request).await
    }

    async fn send_run(
        &self,
        request: v1::RunRequest,
    ) -> Result<Result<v1::RunReply, CallError>, tonic::Status> {
        let mut request = tonic::Request::new(request);
        request
            .metadata_mut()
            .insert(ninf_proto::net::CLIENT_ID_METADATA, self.identity.clone());
        let Some(callback) = &self.progress else {
            return Ok(Ok(self.proxy().run(request).await?.into_inner()));
        };
        let mut updates = self.proxy().run_with_progress(request).await?.into_inner();
        while let Some(update) = updates.message().await? {
            match update.update {
                Some(v1::run_update::Update::Progress(p)) => callback(&Progress::from(&p)),
                Some(v1::run_update::Update::Reply(reply)) => return Ok(Ok(reply)),
                None => {}
            }
        }
        Ok(Err(CallError::new(
            ErrorKind::CommunicationFailed,
            "the proxy ended the run's updates without a reply",
        )))
    }
}

impl super::same_host::ProxySocket for AsyncGridClient {
    async fn same_host_socket(&self) -> Result<Option<String>, tonic::Status> {
        match self.proxy().same_host(v1::SameHostRequest {}).await {
            Ok(reply) => Ok(Some(reply.into_inner().socket).filter(|s| !s.is_empty())),
            Err(status) if status.code() == tonic::Code::Unimplemented => Ok(None),
            Err(status) => Err(status),
        }
    }
}
