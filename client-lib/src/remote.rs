//! Calls to a compute server over gRPC. [`NinfClient`] is the async core: it fetches a
//! routine's interface descriptor the first time (then caches it), checks the arguments
//! against it before sending anything, and writes results back into the caller's arrays.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ninf_idl::FunctionInterface;
use ninf_proto::v1::{self, call_argument::Source};
use tonic::transport::{Channel, Endpoint};

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

/// A connection to one compute server.
#[derive(Clone)]
pub struct NinfClient {
    address: String,
    channel: Channel,
    descriptors: Arc<Mutex<HashMap<String, Arc<FunctionInterface>>>>,
    timeout: Option<Duration>,
}

impl NinfClient {
    /// Connects to `host:port` (or `ninf://host:port`).
    pub async fn connect(url: &str) -> Result<NinfClient, CallError> {
        let address = server_address(url)?;
        let endpoint = Endpoint::from_shared(format!("http://{address}"))
            .map_err(|e| {
                CallError::new(
                    ErrorKind::ServerNotFound,
                    format!("bad address `{address}`: {e}"),
                )
            })?
            .connect_timeout(Duration::from_secs(5))
            .tcp_nodelay(true)
            .initial_stream_window_size(ninf_proto::HTTP2_WINDOW)
            .initial_connection_window_size(ninf_proto::HTTP2_WINDOW)
            .max_frame_size(ninf_proto::HTTP2_FRAME);
        let channel = endpoint.connect().await.map_err(|e| {
            CallError::new(
                ErrorKind::ServerNotFound,
                format!("cannot connect to {address}: {e}"),
            )
        })?;
        Ok(NinfClient {
            address,
            channel,
            descriptors: Arc::default(),
            timeout: None,
        })
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

    fn invoke(&self) -> v1::invoke_client::InvokeClient<Channel> {
        v1::invoke_client::InvokeClient::new(self.channel.clone())
            .max_decoding_message_size(usize::MAX)
            .max_encoding_message_size(usize::MAX)
    }

    /// The routine's interface descriptor, fetched once per client.
    pub async fn describe(&self, function: &str) -> Result<Arc<FunctionInterface>, CallError> {
        if let Some(found) = self
            .descriptors
            .lock()
            .ok()
            .and_then(|d| d.get(function).cloned())
        {
            return Ok(found);
        }
        let mut client = v1::interface_client::InterfaceClient::new(self.channel.clone());
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
        if let Ok(mut cache) = self.descriptors.lock() {
            cache.insert(function.to_string(), interface.clone());
        }
        Ok(interface)
    }

    /// Every module the server serves.
    pub async fn list(&self) -> Result<Vec<ninf_idl::ModuleInterface>, CallError> {
        let mut client = v1::interface_client::InterfaceClient::new(self.channel.clone());
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
        let values = encode_arguments(&interface, args)?;
        let request = v1::CallRequest {
            function: function.to_string(),
            arguments: values
                .into_iter()
                .map(|v| v1::CallArgument {
                    source: v.value.is_some().then_some(Source::Value(v)),
                })
                .collect(),
            keep: Vec::new(),
            owner: String::new(),
            timeout_seconds: self.timeout.map_or(0.0, |t| t.as_secs_f64()),
        };
        let reply = self.call_request(request).await?;
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
        decode_outputs(&interface, outputs, reply.status, args)
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

    /// The underlying channel, for the storage and monitor services.
    pub fn channel(&self) -> Channel {
        self.channel.clone()
    }
}
