//! Calls to a compute server over gRPC. [`NinfClient`] is the async core: it fetches a
//! routine's interface descriptor the first time (then caches it), checks the arguments
//! against it before sending anything, and writes results back into the caller's arrays.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ninf_idl::FunctionInterface;
use ninf_proto::net::auth::{AttachToken, Authorized, authorized};
use ninf_proto::net::tls::GridTls;
use ninf_proto::v1::{self, call_argument::Source};
use tonic::transport::Channel;

use ninf_proto::net::bulk;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::args::{Encoded, check_and_encode};
use crate::bulk_reply::{BulkFailure, call_reply, receive_outputs};
use crate::same_host::SameHostConnection;
use crate::{Arg, CallError, CallOutcome, ErrorKind, decode_outputs, encode_arguments};

/// `host:port` from `host:port`, `ninf://host:port` or `ninf://host:port/function`.
pub fn server_address(url: &str) -> Result<String, CallError> {
    let rest = url.strip_prefix("ninf://").unwrap_or(url);
    let address = rest.split('/').next().unwrap_or("");
    if address.is_empty() || !address.contains(':') {
        return Err(CallError::new(
            ErrorKind::ServerNotFound,
            format!("`{url}` does not name a server as host:port"),
        ));
    }
    Ok(address.to_string())
}

/// Splits `ninf://host:port/function` into the server address and the function.
pub fn parse_url(url: &str) -> Result<(String, String), CallError> {
    let Some(rest) = url.strip_prefix("ninf://") else {
        return Err(CallError::new(
            ErrorKind::ServerNotFound,
            format!("`{url}` is not a ninf:// URL (ninf://host:port/function)"),
        ));
    };
    match rest.split_once('/') {
        Some((address, function)) if !function.is_empty() && !function.contains('/') => {
            Ok((server_address(address)?, function.to_string()))
        }
        _ => Err(CallError::new(
            ErrorKind::FunctionNotFound,
            format!("`{url}` names no function (ninf://host:port/function)"),
        )),
    }
}

/// Calls moving at least this many array bytes use the server's bulk-data connection.
pub const BULK_THRESHOLD: u64 = 1 << 20;

/// The server's bulk-data routes (looked up once) and idle connections on them.
#[derive(Default)]
struct BulkConnections {
    routes: tokio::sync::OnceCell<BulkRoutes>,
    idle: Mutex<Vec<TcpStream>>,
    idle_same_host: Mutex<Vec<SameHostConnection>>,
    /// Set once the server's same-host socket could not be reached: it is on another host.
    elsewhere: std::sync::atomic::AtomicBool,
}

/// Where a server takes bulk calls: its TCP port and its same-host socket, when it has them.
#[derive(Debug, Clone, Default)]
struct BulkRoutes {
    address: Option<String>,
    same_host: Option<String>,
}

/// A connection to one compute server.
#[derive(Clone)]
pub struct NinfClient {
    address: String,
    channel: Channel,
    descriptors: Arc<Mutex<HashMap<String, Arc<FunctionInterface>>>>,
    timeout: Option<Duration>,
    bulk: Arc<BulkConnections>,
    /// Whether bulk calls may go through memory shared with a server on this host.
    same_host: bool,
    /// The grid's token, presented with every request.
    token: AttachToken,
}

impl NinfClient {
    /// Connects to `host:port` (or `ninf://host:port`), over TLS when
    /// [`crate::grid::TLS_CA_ENV`] names the grid's certificate authority.
    pub async fn connect(url: &str) -> Result<NinfClient, CallError> {
        NinfClient::connect_with_tls(url, crate::environment::tls_from_env()?.as_ref()).await
    }

    /// Connects over TLS checked against the grid's authority when `tls` is given,
    /// presenting its certificate (which servers require) if it holds one.
    pub async fn connect_with_tls(
        url: &str,
        tls: Option<&GridTls>,
    ) -> Result<NinfClient, CallError> {
        let address = server_address(url)?;
        let channel = ninf_proto::net::connect(
            &address,
            tls,
            ninf_proto::net::ConnectionSettings::default(),
        )
        .await
        .map_err(crate::error::connect_error)?;
        Ok(NinfClient {
            address,
            channel,
            descriptors: Arc::default(),
            timeout: None,
            bulk: Arc::default(),
            same_host: true,
            token: crate::environment::token_from_env()?,
        })
    }

    /// Presents this token to the server (the grid's `token` file holds it).
    pub fn with_token(mut self, token: &str) -> NinfClient {
        self.token = AttachToken::new(Some(token));
        self
    }

    /// The channel, presenting the token.
    fn authorized(&self) -> Authorized {
        authorized(self.channel.clone(), &self.token)
    }

    /// Whether calls with large arrays to a server on this host pass them through shared
    /// memory (the default) or, with `false`, over its TCP bulk port like a remote client.
    pub fn with_same_host_bulk(mut self, enabled: bool) -> NinfClient {
        self.same_host = enabled;
        self
    }

    pub fn address(&self) -> &str {
        &self.address
    }

    /// Limits each call to `timeout`: the server kills a routine that runs longer, and the
    /// client gives up (TIMEOUT) if no reply comes shortly after.
    pub fn with_timeout(mut self, timeout: Duration) -> NinfClient {
        self.timeout = Some(timeout);
        self
    }

    fn invoke(&self) -> v1::invoke_client::InvokeClient<Authorized> {
        v1::invoke_client::InvokeClient::new(self.authorized())
            .max_decoding_message_size(usize::MAX)
            .max_encoding_message_size(usize::MAX)
    }

    /// The routine's interface descriptor, fetched once per client.
    pub async fn describe(&self, function: &str) -> Result<Arc<FunctionInterface>, CallError> {
        if let Some(found) = ninf_proto::sync::lock(&self.descriptors)
            .get(function)
            .cloned()
        {
            return Ok(found);
        }
        let mut client = v1::interface_client::InterfaceClient::new(self.authorized());
        let reply = client
            .describe(v1::DescribeRequest {
                function: function.to_string(),
            })
            .await
            .map_err(|status| {
                let mut error = CallError::from(status);
                if error.kind == ErrorKind::FunctionNotFound {
                    error.message = format!("{} (server {})", error.message, self.address);
                }
                error
            })?
            .into_inner();
        let interface = Arc::new(FunctionInterface::try_from(&reply).map_err(|e| {
            CallError::new(
                ErrorKind::CommunicationFailed,
                format!("server {}: {e}", self.address),
            )
        })?);
        {
            let mut cache = ninf_proto::sync::lock(&self.descriptors);
            cache.insert(function.to_string(), interface.clone());
        }
        Ok(interface)
    }

    /// Every module the server serves.
    pub async fn list(&self) -> Result<Vec<ninf_idl::ModuleInterface>, CallError> {
        let mut client = v1::interface_client::InterfaceClient::new(self.authorized());
        let reply = client.list(v1::ListRequest {}).await?.into_inner();
        let mut modules = Vec::new();
        for m in &reply.modules {
            let functions = m
                .functions
                .iter()
                .map(FunctionInterface::try_from)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| CallError::new(ErrorKind::CommunicationFailed, e.to_string()))?;
            modules.push(ninf_idl::ModuleInterface {
                module: m.name.clone(),
                libraries: m.libraries.clone(),
                required: m.required.clone(),
                functions,
            });
        }
        Ok(modules)
    }

    /// Calls `function` with positional arguments; OUT and INOUT arrays are written back.
    pub async fn call(
        &self,
        function: &str,
        args: &mut [Arg<'_>],
    ) -> Result<CallOutcome, CallError> {
        let interface = self.describe(function).await?;
        // Large arrays go over the server's bulk-data connection when it has one (for
        // routines of one process: the ranks of a parallel one all need the arguments).
        if array_bytes(args) >= BULK_THRESHOLD
            && !matches!(
                interface.parallelism,
                ninf_idl::Parallelism::Parallel { .. }
            )
        {
            let routes = self.bulk_routes().await;
            if let Some(name) = routes.same_host.filter(|_| self.same_host)
                && let Some(connection) = self.same_host_connection(&name)
            {
                return self.call_same_host(&interface, args, connection).await;
            }
            if let Some(address) = routes.address {
                return self.call_bulk(&interface, args, &address).await;
            }
        }
        let request = self.request_for(&interface, args)?;
        let reply = self.call_request(request).await?;
        decode_reply(&interface, reply, args)
    }

    /// The request calling `interface` with `args` (checked and encoded now), as this
    /// client sends it: values inline, nothing kept, its timeout.
    pub fn request_for(
        &self,
        interface: &FunctionInterface,
        args: &[Arg<'_>],
    ) -> Result<v1::CallRequest, CallError> {
        let values = encode_arguments(interface, args)?;
        Ok(v1::CallRequest {
            function: interface.name.clone(),
            arguments: values
                .into_iter()
                .map(|v| v1::CallArgument {
                    source: v.value.is_some().then_some(Source::Value(v)),
                })
                .collect(),
            keep: Vec::new(),
            owner: String::new(),
            timeout_seconds: self.timeout.map_or(0.0, |t| t.as_secs_f64()),
            authorization: String::new(),
            // A direct call cannot tell what else its caller runs at the same time.
            alone: false,
            call_key: String::new(),
            keep_inputs: Vec::new(),
            ..Default::default()
        })
    }

    /// Sends a prepared request (arguments may reference storage objects, outputs may be kept
    /// on the server); the transaction layer builds these.
    pub async fn call_request(&self, request: v1::CallRequest) -> Result<v1::CallReply, CallError> {
        let mut grpc = tonic::Request::new(request);
        if let Some(t) = self.timeout {
            // A little slack so the server's own kill-and-report wins the race.
            grpc.set_timeout(t + Duration::from_secs(2));
        }
        Ok(self.invoke().call(grpc).await?.into_inner())
    }

    /// The server's bulk-data routes, asked once; none if it has none.
    async fn bulk_routes(&self) -> BulkRoutes {
        self.bulk
            .routes
            .get_or_init(|| async {
                let mut monitor = v1::monitor_client::MonitorClient::new(self.authorized());
                match monitor.info(v1::InfoRequest {}).await {
                    Ok(info) => {
                        let info = info.into_inner();
                        BulkRoutes {
                            address: (!info.bulk_address.is_empty()).then_some(info.bulk_address),
                            same_host: (!info.bulk_local.is_empty()).then_some(info.bulk_local),
                        }
                    }
                    Err(_) => BulkRoutes::default(),
                }
            })
            .await
            .clone()
    }

    /// An idle same-host connection, or a new one; `None` when the server is not on this
    /// host (its socket cannot be reached from here), which is then remembered.
    fn same_host_connection(&self, name: &str) -> Option<SameHostConnection> {
        use std::sync::atomic::Ordering;
        if self.bulk.elsewhere.load(Ordering::Relaxed) {
            return None;
        }
        if let Some(idle) = ninf_proto::sync::lock(&self.bulk.idle_same_host).pop() {
            return Some(idle);
        }
        match SameHostConnection::connect(name) {
            Ok(connection) => Some(connection),
            Err(e) => {
                tracing::debug!(server = %self.address, error = %e, "no same-host bulk socket; using TCP");
                self.bulk.elsewhere.store(true, Ordering::Relaxed);
                None
            }
        }
    }

    /// A bulk call through memory shared with a server on this host.
    async fn call_same_host(
        &self,
        interface: &FunctionInterface,
        args: &mut [Arg<'_>],
        mut connection: SameHostConnection,
    ) -> Result<CallOutcome, CallError> {
        let (request, encoded) = self.bulk_request(interface, args)?;
        let exchange = connection.exchange(interface, &request, &encoded, args);
        let result = self.within_timeout(exchange).await;
        if result.is_ok() {
            ninf_proto::sync::lock(&self.bulk.idle_same_host).push(connection);
        }
        self.bulk_outcome(result)
    }

    /// The request of a bulk call and its checked arguments (arrays described, not copied).
    fn bulk_request(
        &self,
        interface: &FunctionInterface,
        args: &[Arg<'_>],
    ) -> Result<(v1::CallRequest, Vec<Encoded>), CallError> {
        let encoded = check_and_encode(interface, args, true)?;
        let request = v1::CallRequest {
            function: interface.name.clone(),
            arguments: encoded
                .iter()
                .map(|e| v1::CallArgument {
                    source: match e {
                        Encoded::Bulk(b) => Some(Source::Bulk(*b)),
                        Encoded::Value(v) if v.value.is_some() => Some(Source::Value(v.clone())),
                        Encoded::Value(_) => None,
                    },
                })
                .collect(),
            keep: Vec::new(),
            owner: String::new(),
            timeout_seconds: self.timeout.map_or(0.0, |t| t.as_secs_f64()),
            authorization: self.token.header(),
            alone: false,
            call_key: String::new(),
            keep_inputs: Vec::new(),
            ..Default::default()
        };
        Ok((request, encoded))
    }

    /// Waits for a bulk exchange, for at most the call's time limit and a little slack.
    async fn within_timeout(
        &self,
        exchange: impl std::future::Future<Output = Result<CallOutcome, BulkFailure>>,
    ) -> Result<CallOutcome, BulkFailure> {
        match self.timeout {
            Some(t) => match tokio::time::timeout(t + Duration::from_secs(2), exchange).await {
                Ok(r) => r,
                Err(_) => Err(BulkFailure::Call(CallError::new(
                    ErrorKind::Timeout,
                    format!(
                        "no reply from {} within {:.3} s",
                        self.address,
                        t.as_secs_f64()
                    ),
                ))),
            },
            None => exchange.await,
        }
    }

    /// A bulk exchange's result as the caller sees it. The connection of a failed exchange
    /// is in an unknown state: the callers drop it rather than reuse it.
    fn bulk_outcome(
        &self,
        result: Result<CallOutcome, BulkFailure>,
    ) -> Result<CallOutcome, CallError> {
        match result {
            Ok(outcome) => Ok(outcome),
            Err(BulkFailure::Call(e)) => Err(e),
            Err(BulkFailure::Io(e)) => Err(CallError::new(
                ErrorKind::CommunicationFailed,
                format!("bulk connection to {} failed: {e}", self.address),
            )),
        }
    }

    /// A call whose arrays travel as raw bytes on a bulk connection, straight from and into
    /// the caller's slices.
    async fn call_bulk(
        &self,
        interface: &FunctionInterface,
        args: &mut [Arg<'_>],
        address: &str,
    ) -> Result<CallOutcome, CallError> {
        let (request, encoded) = self.bulk_request(interface, args)?;
        let reused = ninf_proto::sync::lock(&self.bulk.idle).pop();
        let mut stream = match reused {
            Some(s) => s,
            None => {
                let s = TcpStream::connect(address).await.map_err(|e| {
                    CallError::new(
                        ErrorKind::CommunicationFailed,
                        format!("cannot open a bulk connection to {address}: {e}"),
                    )
                })?;
                let _ = s.set_nodelay(true);
                s
            }
        };
        let exchange = bulk_exchange(&mut stream, interface, &request, &encoded, args);
        let result = self.within_timeout(exchange).await;
        if result.is_ok() {
            ninf_proto::sync::lock(&self.bulk.idle).push(stream);
        }
        self.bulk_outcome(result)
    }

    /// The underlying channel, for the storage and monitor services.
    pub fn channel(&self) -> Channel {
        self.channel.clone()
    }
}

/// Bytes of the array arguments of a call (what decides between gRPC and bulk).
fn array_bytes(args: &[Arg<'_>]) -> u64 {
    args.iter()
        .map(|a| match a {
            Arg::In(x) => (x.len() as u64) * x.element_type().size_bytes().unwrap_or(1),
            Arg::Out(x) => {
                let x = x.as_ref();
                (x.len() as u64) * x.element_type().size_bytes().unwrap_or(1)
            }
            _ => 0,
        })
        .sum()
}

/// One request and reply on a bulk connection (docs/bulk-protocol.md).
async fn bulk_exchange(
    stream: &mut TcpStream,
    interface: &FunctionInterface,
    request: &v1::CallRequest,
    encoded: &[Encoded],
    args: &mut [Arg<'_>],
) -> Result<CallOutcome, BulkFailure> {
    bulk::write_frame(stream, request).await?;
    for (arg, e) in args.iter().zip(encoded) {
        if let Encoded::Bulk(_) = e {
            let bytes = match arg {
                Arg::In(a) => a.le_bytes(),
                Arg::Out(a) => std::borrow::Cow::Owned(a.as_ref().le_bytes().into_owned()),
                _ => continue,
            };
            stream.write_all(&bytes).await?;
        }
    }
    stream.flush().await?;

    let (reply, _) = call_reply(bulk::read_answer(stream).await?)?;
    receive_outputs(interface, reply, args, stream).await
}

/// Writes a reply's outputs into the call's OUT and INOUT arrays, checked against the
/// interface.
pub fn decode_reply(
    interface: &FunctionInterface,
    reply: v1::CallReply,
    args: &mut [Arg<'_>],
) -> Result<CallOutcome, CallError> {
    let outputs = reply
        .outputs
        .into_iter()
        .map(|o| v1::ExecOutput {
            parameter: o.parameter,
            value: match o.result {
                Some(v1::call_output::Result::Array(array)) => Some(v1::ArgumentValue {
                    value: Some(v1::argument_value::Value::Array(array)),
                }),
                _ => None,
            },
        })
        .collect();
    decode_outputs(interface, outputs, reply.status, args)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_bulk_reply_frame_over_the_cap_is_refused_before_it_is_allocated() {
        let (mut client, mut server) = tokio::io::duplex(64);
        let len = (bulk::MAX_FRAME + 1) as u32;
        server.write_all(&len.to_le_bytes()).await.unwrap();
        let read = bulk::read_answer(&mut client)
            .await
            .map_err(BulkFailure::from);
        let Err(BulkFailure::Call(e)) = read else {
            panic!("a frame over the cap was accepted");
        };
        assert_eq!(e.kind, ErrorKind::CommunicationFailed);
        assert_eq!(
            e.message,
            format!(
                "bulk reply: a frame of {len} bytes exceeds {}",
                bulk::MAX_FRAME
            )
        );
    }
}
