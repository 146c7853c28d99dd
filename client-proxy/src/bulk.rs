//! Calls with large arrays go to a server's bulk-data port instead of gRPC
//! (docs/bulk-protocol.md): the request frame, then each array's raw bytes; back come the
//! reply frame and each output's raw bytes. A unary gRPC call copies every array about four
//! times on each side (encoding, HTTP/2 framing, reassembly); on the bulk port the server
//! reads the arrays straight into the executable's region and writes the outputs straight
//! from it. Each connection carries one call at a time; idle ones wait in a pool per server.

use std::collections::HashMap;
use std::io;
use std::sync::Mutex;

use bytes::Bytes;
use ninf_proto::v1::{self, argument_value::Value as WireValue, call_argument::Source};
use prost::Message;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tonic::Status;

use crate::cluster::CALL_LIMIT;

/// Calls carrying at least this many bytes of arrays take the bulk port (as the client
/// library's direct calls do).
pub(crate) const BULK_THRESHOLD: usize = 1 << 20;

/// Bytes of arrays `call` carries with it.
pub(crate) fn inline_bytes(call: &v1::CallRequest) -> usize {
    call.arguments
        .iter()
        .map(|a| match &a.source {
            Some(Source::Value(v1::ArgumentValue {
                value: Some(WireValue::Array(array)),
            })) => array.data.len(),
            _ => 0,
        })
        .sum()
}

/// How a bulk call failed.
#[derive(Debug)]
pub(crate) enum BulkFailure {
    /// Nothing was sent: the call may go by gRPC instead.
    Connect(io::Error),
    /// The server answered with an error, or the exchange broke after the request went out.
    Call(Status),
}

/// Each server's bulk port, as the metaserver lists it, and idle connections to it.
#[derive(Default)]
pub(crate) struct BulkPorts {
    /// gRPC address to bulk address; empty: the server has none.
    routes: Mutex<HashMap<String, String>>,
    idle: Mutex<HashMap<String, Vec<TcpStream>>>,
}

impl BulkPorts {
    /// The bulk address of `server`; `None` when it is not known yet.
    pub(crate) fn route(&self, server: &str) -> Option<String> {
        ninf_proto::sync::lock(&self.routes).get(server).cloned()
    }

    /// Learns the servers' bulk ports from the metaserver's status, and returns `server`'s
    /// (empty, and recorded so, when the status does not list it).
    pub(crate) fn learn(&self, status: &[v1::ServerStatus], server: &str) -> String {
        let mut routes = ninf_proto::sync::lock(&self.routes);
        for s in status {
            routes.insert(s.address.clone(), s.bulk_address.clone());
        }
        routes.entry(server.to_string()).or_default().clone()
    }

    /// Forgets a route that no longer answers: the next call asks the metaserver again.
    fn forget(&self, server: &str) {
        ninf_proto::sync::lock(&self.routes).remove(server);
    }

    /// Closes every idle connection.
    pub(crate) fn release(&self) {
        ninf_proto::sync::lock(&self.idle).clear();
    }

    /// Runs `call` on `server`'s bulk port at `address`, presenting `authorization`.
    pub(crate) async fn call(
        &self,
        server: &str,
        address: &str,
        mut call: v1::CallRequest,
        authorization: String,
    ) -> Result<v1::CallReply, BulkFailure> {
        call.authorization = authorization;
        let pooled = ninf_proto::sync::lock(&self.idle)
            .get_mut(server)
            .and_then(Vec::pop);
        if let Some(mut stream) = pooled {
            match exchange(&mut stream, call.clone()).await {
                Ok(answer) => return self.finish(server, stream, answer),
                // Closed while idle (the server restarted, or dropped it): a fresh one.
                Err(Broken::Io(_)) => {}
                Err(broken) => return Err(BulkFailure::Call(broken.status(server))),
            }
        }
        let mut stream = connect(address).await.map_err(|e| {
            self.forget(server);
            BulkFailure::Connect(e)
        })?;
        let answer = exchange(&mut stream, call)
            .await
            .map_err(|e| BulkFailure::Call(e.status(server)))?;
        self.finish(server, stream, answer)
    }

    /// Keeps the connection for the next call, unless the server answered with an error
    /// (it may close the connection after some).
    fn finish(
        &self,
        server: &str,
        stream: TcpStream,
        answer: Result<v1::CallReply, Status>,
    ) -> Result<v1::CallReply, BulkFailure> {
        if answer.is_ok() {
            ninf_proto::sync::lock(&self.idle)
                .entry(server.to_string())
                .or_default()
                .push(stream);
        }
        answer.map_err(BulkFailure::Call)
    }
}

async fn connect(address: &str) -> io::Result<TcpStream> {
    let stream = tokio::time::timeout(
        ninf_proto::net::CONNECT_TIMEOUT,
        TcpStream::connect(address),
    )
    .await
    .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "connect timed out"))??;
    stream.set_nodelay(true)?;
    Ok(stream)
}

/// A broken exchange: the connection is out of step and is dropped.
#[derive(Debug)]
enum Broken {
    Io(io::Error),
    Protocol(String),
}

impl From<io::Error> for Broken {
    fn from(e: io::Error) -> Self {
        Broken::Io(e)
    }
}

impl Broken {
    /// The call's failure: like a gRPC transport error, the server counts as failed.
    fn status(self, server: &str) -> Status {
        match self {
            Broken::Io(e) => Status::unavailable(format!("bulk connection to {server}: {e}")),
            Broken::Protocol(m) => Status::internal(format!("bulk reply from {server}: {m}")),
        }
    }
}

/// One call on a connection: `Ok(Err(status))` when the server answered with an error
/// and the connection is still in step.
async fn exchange(
    stream: &mut TcpStream,
    mut call: v1::CallRequest,
) -> Result<Result<v1::CallReply, Status>, Broken> {
    let payloads = take_arrays(&mut call);
    let body = call.encode_to_vec();
    stream.write_all(&(body.len() as u32).to_le_bytes()).await?;
    stream.write_all(&body).await?;
    for payload in &payloads {
        stream.write_all(payload).await?;
    }
    stream.flush().await?;

    let mut header = [0u8; 4];
    stream.read_exact(&mut header).await?;
    let len = u32::from_le_bytes(header) as usize;
    if len > ninf_proto::net::BULK_MAX_FRAME {
        return Err(Broken::Protocol(format!(
            "a frame of {len} bytes exceeds {}",
            ninf_proto::net::BULK_MAX_FRAME
        )));
    }
    let mut body = vec![0u8; len];
    stream.read_exact(&mut body).await?;
    let reply = v1::BulkReply::decode(&body[..])
        .map_err(|e| Broken::Protocol(format!("undecodable: {e}")))?;
    let mut reply = match reply.result {
        Some(v1::bulk_reply::Result::Reply(reply)) => reply,
        Some(v1::bulk_reply::Result::Error(e)) => {
            return Ok(Err(Status::new(tonic::Code::from(e.code), e.message)));
        }
        None => return Err(Broken::Protocol("empty".into())),
    };
    read_outputs(stream, &mut reply).await?;
    Ok(Ok(reply))
}

/// Replaces each array the call carries by its description, and returns their bytes in
/// parameter order, as they follow the frame.
fn take_arrays(call: &mut v1::CallRequest) -> Vec<Bytes> {
    let mut payloads = Vec::new();
    for argument in &mut call.arguments {
        if let Some(Source::Value(v1::ArgumentValue {
            value: Some(WireValue::Array(array)),
        })) = &argument.source
        {
            let bulk = v1::BulkArray {
                element_type: array.element_type,
                bytes: array.data.len() as u64,
            };
            payloads.push(array.data.clone());
            argument.source = Some(Source::Bulk(bulk));
        }
    }
    payloads
}

/// Reads the raw bytes of each `bulk` output into an array, in order; at most
/// [`CALL_LIMIT`] bytes in all, as a gRPC reply may carry.
async fn read_outputs(stream: &mut TcpStream, reply: &mut v1::CallReply) -> Result<(), Broken> {
    let mut total = 0u64;
    for output in &mut reply.outputs {
        let Some(v1::call_output::Result::Bulk(bulk)) = &output.result else {
            continue;
        };
        total += bulk.bytes;
        if total > CALL_LIMIT as u64 {
            return Err(Broken::Protocol(format!(
                "outputs of {total} bytes or more exceed {CALL_LIMIT}"
            )));
        }
        let mut data = Vec::with_capacity(bulk.bytes as usize);
        let read = (&mut *stream)
            .take(bulk.bytes)
            .read_to_end(&mut data)
            .await?;
        if read as u64 != bulk.bytes {
            return Err(Broken::Io(io::ErrorKind::UnexpectedEof.into()));
        }
        output.result = Some(v1::call_output::Result::Array(v1::Array {
            element_type: bulk.element_type,
            data: data.into(),
        }));
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn array(bytes: usize) -> v1::CallArgument {
        v1::CallArgument {
            source: Some(Source::Value(v1::ArgumentValue {
                value: Some(WireValue::Array(v1::Array {
                    element_type: v1::ElementType::Double.into(),
                    data: Bytes::from(vec![7u8; bytes]),
                })),
            })),
        }
    }

    #[test]
    fn the_arrays_a_call_carries_become_bulk_payloads_in_parameter_order() {
        let scalar = v1::CallArgument {
            source: Some(Source::Value(v1::ArgumentValue {
                value: Some(WireValue::IntValue(3)),
            })),
        };
        let mut call = v1::CallRequest {
            function: "mmul".into(),
            arguments: vec![
                scalar.clone(),
                array(16),
                array(8),
                v1::CallArgument::default(),
            ],
            ..Default::default()
        };
        assert_eq!(inline_bytes(&call), 24);
        let payloads = take_arrays(&mut call);
        assert_eq!(payloads.iter().map(Bytes::len).collect::<Vec<_>>(), [16, 8]);
        assert_eq!(call.arguments[0], scalar);
        assert_eq!(
            call.arguments[1].source,
            Some(Source::Bulk(v1::BulkArray {
                element_type: v1::ElementType::Double.into(),
                bytes: 16
            }))
        );
        assert_eq!(call.arguments[3].source, None);
        assert_eq!(inline_bytes(&call), 0);
    }

    #[test]
    fn a_route_the_status_does_not_list_is_none_and_a_listed_one_is_learned() {
        let ports = BulkPorts::default();
        assert_eq!(ports.route("a:1"), None);
        let listed = v1::ServerStatus {
            address: "a:1".into(),
            bulk_address: "a:2".into(),
            ..Default::default()
        };
        assert_eq!(ports.learn(&[listed], "b:1"), "");
        assert_eq!(ports.route("a:1").as_deref(), Some("a:2"));
        assert_eq!(ports.route("b:1").as_deref(), Some(""));
        ports.forget("a:1");
        assert_eq!(ports.route("a:1"), None);
    }
}
