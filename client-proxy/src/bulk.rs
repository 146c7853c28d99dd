//! Calls with large arrays go to a server's bulk-data port instead of gRPC
//! (docs/bulk-protocol.md): the request frame, then each array's raw bytes; back come the
//! reply frame and each output's raw bytes. A unary gRPC call copies every array about four
//! times on each side (encoding, HTTP/2 framing, reassembly); on the bulk port the server
//! reads the arrays straight into the executable's region and writes the outputs straight
//! from it. Each connection carries one call at a time; idle ones wait in a pool per server.
//!
//! A server on the proxy's host gets those calls on its same-host socket instead
//! ([`LocalConnection`]): the proxy copies the arrays into a memory file it shares with the
//! server, and the outputs come back through it, so no array crosses a socket. The proxy
//! cannot size the file for outputs it does not know: a call whose outputs do not fit gets
//! them after the reply frame on the socket, and the file grows for the next call.

use std::collections::HashMap;
use std::io;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use ninf_proto::net::bulk::{self, Answer, FrameError, ReadError};
use ninf_proto::net::local::{self, SharedRegion};
use ninf_proto::v1::{self, argument_value::Value as WireValue, call_argument::Source};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UnixStream};
use tonic::Status;

use crate::config::CALL_LIMIT;
use crate::lending::{self, Handed};
use crate::same_host::{OutputLoan, SharedRegions};

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

/// Each server's bulk port and same-host socket, as the metaserver lists them, and idle
/// connections to them.
#[derive(Default)]
pub(crate) struct BulkPorts {
    /// gRPC address to bulk address; empty: the server has none.
    routes: Mutex<HashMap<String, String>>,
    /// gRPC address to same-host socket name; empty: none, or it cannot be reached from here.
    local_routes: Mutex<HashMap<String, String>>,
    /// Whether calls may take the same-host sockets (`same_host_calls`).
    same_host: bool,
    idle: Mutex<HashMap<String, Vec<TcpStream>>>,
    idle_local: Mutex<HashMap<String, Vec<LocalConnection>>>,
    /// The regions clients on this host share with the proxy: inputs that lie there are
    /// lent on to same-host servers rather than copied ([`crate::lending`]).
    lender: Option<Arc<SharedRegions>>,
}

impl BulkPorts {
    /// Bulk ports, and same-host sockets too when `same_host`.
    pub(crate) fn new(same_host: bool) -> BulkPorts {
        BulkPorts {
            same_host,
            ..BulkPorts::default()
        }
    }

    /// Lends inputs that lie in `regions` on to same-host servers.
    pub(crate) fn with_lender(mut self, regions: Arc<SharedRegions>) -> BulkPorts {
        self.lender = Some(regions);
        self
    }

    /// The bulk address of `server`; `None` when it is not known yet.
    pub(crate) fn route(&self, server: &str) -> Option<String> {
        ninf_proto::sync::lock(&self.routes).get(server).cloned()
    }

    /// Learns the servers' bulk ports from the metaserver's status, and returns `server`'s
    /// (empty, and recorded so, when the status does not list it).
    pub(crate) fn learn(&self, status: &[v1::ServerStatus], server: &str) -> String {
        let mut local_routes = ninf_proto::sync::lock(&self.local_routes);
        let mut routes = ninf_proto::sync::lock(&self.routes);
        for s in status {
            routes.insert(s.address.clone(), s.bulk_address.clone());
            local_routes.insert(s.address.clone(), s.bulk_local.clone());
        }
        routes.entry(server.to_string()).or_default().clone()
    }

    /// `server`'s same-host socket, if calls may take it and it is not known unreachable.
    fn local_route(&self, server: &str) -> Option<String> {
        if !self.same_host {
            return None;
        }
        let routes = ninf_proto::sync::lock(&self.local_routes);
        routes.get(server).filter(|name| !name.is_empty()).cloned()
    }

    /// Forgets a route that no longer answers: the next call asks the metaserver again.
    fn forget(&self, server: &str) {
        ninf_proto::sync::lock(&self.routes).remove(server);
        ninf_proto::sync::lock(&self.local_routes).remove(server);
    }

    /// Closes every idle connection.
    pub(crate) fn release(&self) {
        ninf_proto::sync::lock(&self.idle).clear();
        ninf_proto::sync::lock(&self.idle_local).clear();
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
        if let Some(name) = self.local_route(server) {
            match self.call_local(server, &name, call.clone()).await {
                Err(BulkFailure::Connect(e)) => {
                    // Another host or network namespace: its TCP port from now on.
                    tracing::debug!(server, error = %e, "same-host socket unreachable");
                    ninf_proto::sync::lock(&self.local_routes).insert(server.into(), String::new());
                }
                answer => return answer,
            }
        }
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

    /// Runs `call` on `server`'s same-host socket `name`.
    async fn call_local(
        &self,
        server: &str,
        name: &str,
        call: v1::CallRequest,
    ) -> Result<v1::CallReply, BulkFailure> {
        let pooled = ninf_proto::sync::lock(&self.idle_local)
            .get_mut(server)
            .and_then(Vec::pop);
        if let Some(mut connection) = pooled {
            match connection
                .exchange(call.clone(), self.lender.as_deref())
                .await
            {
                Ok(answer) => return self.finish_local(server, connection, answer),
                Err(Broken::Io(_)) => {}
                Err(broken) => return Err(BulkFailure::Call(broken.status(server))),
            }
        }
        let mut connection = LocalConnection::connect(name).map_err(BulkFailure::Connect)?;
        let answer = connection
            .exchange(call, self.lender.as_deref())
            .await
            .map_err(|e| BulkFailure::Call(e.status(server)))?;
        self.finish_local(server, connection, answer)
    }

    fn finish_local(
        &self,
        server: &str,
        connection: LocalConnection,
        answer: Result<v1::CallReply, Status>,
    ) -> Result<v1::CallReply, BulkFailure> {
        if answer.is_ok() {
            ninf_proto::sync::lock(&self.idle_local)
                .entry(server.to_string())
                .or_default()
                .push(connection);
        }
        answer.map_err(BulkFailure::Call)
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

impl From<FrameError> for Broken {
    fn from(e: FrameError) -> Self {
        Broken::Protocol(e.to_string())
    }
}

impl From<ReadError> for Broken {
    fn from(e: ReadError) -> Self {
        match e {
            ReadError::Io(e) => Broken::Io(e),
            ReadError::Frame(e) => e.into(),
        }
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
    // Regions are lent only on a same-host socket.
    call.output_place = None;
    let payloads = take_arrays(&mut call);
    bulk::write_frame(stream, &call).await?;
    for payload in &payloads {
        stream.write_all(payload).await?;
    }
    stream.flush().await?;

    let mut reply = match bulk::read_answer(stream).await? {
        Answer::Reply { reply, .. } => reply,
        Answer::Refused(status) => return Ok(Err(status)),
    };
    read_outputs(&mut TcpOutputs(stream), &mut reply).await?;
    Ok(Ok(reply))
}

/// The smallest shared region made: calls below it (the bulk threshold is 1 MiB) share one
/// size.
const MIN_REGION: usize = 1 << 20;

/// A connection to a server's same-host socket, and the region it shares with it.
pub(crate) struct LocalConnection {
    stream: UnixStream,
    /// Shared with the outputs of the last call while they live (they are read in place):
    /// the next call takes a new region rather than write over them.
    region: Option<Arc<SharedRegion>>,
    /// The largest outputs a call on it returned: the region grows to hold them, so that
    /// later calls of the same kind get theirs back through it.
    largest_outputs: usize,
    /// Clients' regions the server holds for this connection.
    handed: Handed,
}

impl LocalConnection {
    fn connect(name: &str) -> io::Result<LocalConnection> {
        Ok(LocalConnection {
            stream: local::connect(name)?,
            region: None,
            largest_outputs: 0,
            handed: Handed::default(),
        })
    }

    /// One call, its arrays through the region: `Ok(Err(status))` when the server
    /// answered with an error and the connection is still in step.
    async fn exchange(
        &mut self,
        mut call: v1::CallRequest,
        lender: Option<&SharedRegions>,
    ) -> Result<Result<v1::CallReply, Status>, Broken> {
        if lender.is_none() {
            call.output_place = None;
        }
        let mut lent =
            lender.map(|lender| lending::lend_arrays(&mut call, lender, &mut self.handed));
        let payloads = take_arrays(&mut call);
        let handed = match self.stage_inputs(&payloads) {
            Ok(handed) => handed,
            Err(broken) => {
                // Nothing left for the server: the run's output region stays its client's.
                if let Some(loan) = lent.as_mut().and_then(|l| l.output.as_mut()) {
                    loan.never_sent();
                }
                return Err(broken);
            }
        };
        let region = self
            .region
            .as_ref()
            .ok_or_else(|| Broken::Protocol("no shared region".into()))?;
        let to_hand = lent.as_ref().map_or(&[][..], |l| &l.to_hand[..]);
        let mut files = Vec::new();
        if !to_hand.is_empty() {
            // Named files: the connection's own region, if new, under the empty name.
            if handed {
                call.lent_regions.push(String::new());
                files.push(region.fd());
            }
            for lendable in to_hand {
                call.lent_regions.push(lendable.name.clone());
                files.push(lendable.fd());
            }
        } else if handed {
            files.push(region.fd());
        }
        local::send_files(&self.stream, &bulk::encode(&call), &files).await?;
        let (answer, _) = local::receive_message(&self.stream, bulk::MAX_FRAME).await?;
        let mut loan = lent.as_mut().and_then(|lent| lent.output.take());
        // The server has read the lent inputs: their clients' leases may end.
        drop(lent);
        let (mut reply, outputs_follow) = match bulk::answer_of(answer)? {
            Answer::Reply {
                reply,
                outputs_follow,
            } => (reply, outputs_follow),
            Answer::Refused(status) => {
                if let Some(loan) = loan.as_mut() {
                    loan.answered();
                }
                return Ok(Err(status));
            }
        };
        // The routine has written its outputs: the run's lease may end with the run.
        if let Some(loan) = loan.as_mut() {
            loan.answered();
        }
        claim_shared_outputs(&mut reply, loan.as_ref())?;
        let outputs = match (&self.region, outputs_follow) {
            (Some(region), false) => {
                let lend = lend_region(bulk_bytes(&reply), region.len());
                let mut from_region = RegionOutputs {
                    region: region.clone(),
                    offset: 0,
                    lend,
                };
                read_outputs(&mut from_region, &mut reply).await?
            }
            _ => read_outputs(&mut SocketOutputs(&self.stream), &mut reply).await?,
        };
        self.largest_outputs = self.largest_outputs.max(outputs);
        Ok(Ok(reply))
    }

    /// Copies the call's inputs into the connection's region, made large enough for them
    /// and for the largest outputs seen; whether the region is new (and must be handed over).
    fn stage_inputs(&mut self, payloads: &[Bytes]) -> Result<bool, Broken> {
        let inputs: usize = payloads.iter().map(Bytes::len).sum();
        let handed = self.reserve(inputs.max(self.largest_outputs))?;
        let region = self
            .region
            .as_mut()
            .and_then(Arc::get_mut)
            .ok_or_else(|| Broken::Protocol("no shared region".into()))?;
        let mut offset = 0;
        for payload in payloads {
            ninf_proto::copy::copy(&mut region.bytes_mut()[offset..][..payload.len()], payload);
            offset += payload.len();
        }
        Ok(handed)
    }

    /// Makes the region hold `bytes` and be this connection's alone; whether it is new
    /// (and must be handed over).
    fn reserve(&mut self, bytes: usize) -> io::Result<bool> {
        if let Some(region) = self.region.as_mut()
            && region.len() >= bytes
            && Arc::get_mut(region).is_some()
        {
            return Ok(false);
        }
        let size = bytes
            .checked_next_power_of_two()
            .unwrap_or(bytes)
            .max(MIN_REGION);
        self.region = Some(Arc::new(SharedRegion::create(size)?));
        Ok(true)
    }
}

/// Turns each output the reply names in the run's output region lent for the call (`loan`)
/// into the bytes where the routine wrote them; an output named anywhere else breaks the
/// exchange.
fn claim_shared_outputs(
    reply: &mut v1::CallReply,
    loan: Option<&OutputLoan>,
) -> Result<(), Broken> {
    use v1::call_output::Result as Output;
    for output in &mut reply.outputs {
        let Some(Output::Shared(shared)) = &output.result else {
            continue;
        };
        let data = loan
            .filter(|loan| loan.lent_name() == shared.region)
            .and_then(|loan| loan.output(shared.offset, shared.bytes))
            .ok_or_else(|| {
                Broken::Protocol(format!(
                    "output {} named at bytes {}..+{} of region `{}`, not in the output place lent",
                    output.parameter, shared.offset, shared.bytes, shared.region
                ))
            })?;
        output.result = Some(Output::Array(v1::Array {
            element_type: shared.element_type,
            data,
        }));
    }
    Ok(())
}

/// Whether outputs of `outputs` bytes are read where they lie in a region of `region`
/// bytes rather than copied out: when they are large and fill a good part of it, since
/// they keep the whole region alive.
fn lend_region(outputs: usize, region: usize) -> bool {
    outputs >= MIN_REGION && outputs.saturating_mul(4) >= region
}

/// Bytes of a reply's `bulk` outputs.
fn bulk_bytes(reply: &v1::CallReply) -> usize {
    reply
        .outputs
        .iter()
        .map(|o| match &o.result {
            Some(v1::call_output::Result::Bulk(b)) => b.bytes as usize,
            _ => 0,
        })
        .sum()
}

/// Where a reply's output bytes come from.
trait OutputSource {
    /// The next `bytes` bytes of outputs.
    async fn take(&mut self, bytes: usize) -> Result<Bytes, Broken>;
}

/// After the frame on a TCP connection.
struct TcpOutputs<'a>(&'a mut TcpStream);

impl OutputSource for TcpOutputs<'_> {
    async fn take(&mut self, bytes: usize) -> Result<Bytes, Broken> {
        let mut data = Vec::with_capacity(bytes);
        let read = (&mut *self.0)
            .take(bytes as u64)
            .read_to_end(&mut data)
            .await?;
        if read != bytes {
            return Err(Broken::Io(io::ErrorKind::UnexpectedEof.into()));
        }
        Ok(data.into())
    }
}

/// After the frame on a same-host socket (outputs that did not fit the region).
struct SocketOutputs<'a>(&'a UnixStream);

impl OutputSource for SocketOutputs<'_> {
    async fn take(&mut self, bytes: usize) -> Result<Bytes, Broken> {
        let mut data = vec![0u8; bytes];
        local::receive(self.0, &mut data).await?;
        Ok(data.into())
    }
}

/// One after another from the start of the shared region: copied out, or read in place
/// (`lend`).
struct RegionOutputs {
    region: Arc<SharedRegion>,
    offset: usize,
    lend: bool,
}

impl OutputSource for RegionOutputs {
    async fn take(&mut self, bytes: usize) -> Result<Bytes, Broken> {
        let start = self.offset;
        let end = start.saturating_add(bytes);
        if end > self.region.len() {
            return Err(Broken::Protocol(
                "outputs run past the shared region".into(),
            ));
        }
        self.offset = end;
        let lent = self.lend.then(|| self.region.view(start, end)).flatten();
        Ok(lent.unwrap_or_else(|| Bytes::copy_from_slice(&self.region.bytes()[start..end])))
    }
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

/// Takes the raw bytes of each `bulk` output from `source` into an array, in order; at
/// most [`CALL_LIMIT`] bytes in all, as a gRPC reply may carry. Returns the bytes taken.
async fn read_outputs(
    source: &mut impl OutputSource,
    reply: &mut v1::CallReply,
) -> Result<usize, Broken> {
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
        let data = source.take(bulk.bytes as usize).await?;
        output.result = Some(v1::call_output::Result::Array(v1::Array {
            element_type: bulk.element_type,
            data,
        }));
    }
    Ok(total as usize)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use prost::Message;

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
        let ports = BulkPorts::new(true);
        assert_eq!(ports.route("a:1"), None);
        let listed = v1::ServerStatus {
            address: "a:1".into(),
            bulk_address: "a:2".into(),
            bulk_local: "ninf-bulk-a".into(),
            ..Default::default()
        };
        assert_eq!(ports.learn(std::slice::from_ref(&listed), "b:1"), "");
        assert_eq!(ports.route("a:1").as_deref(), Some("a:2"));
        assert_eq!(ports.local_route("a:1").as_deref(), Some("ninf-bulk-a"));
        assert_eq!(ports.route("b:1").as_deref(), Some(""));
        assert_eq!(ports.local_route("b:1"), None);
        ports.forget("a:1");
        assert_eq!(ports.route("a:1"), None);
        assert_eq!(ports.local_route("a:1"), None);
        // `same_host_calls = false`: the TCP port only.
        let tcp_only = BulkPorts::new(false);
        tcp_only.learn(&[listed], "a:1");
        assert_eq!(tcp_only.local_route("a:1"), None);
    }

    #[tokio::test]
    async fn a_same_host_socket_nobody_listens_on_is_a_connect_failure_and_the_tcp_port_is_next() {
        let ports = BulkPorts::new(true);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let listed = v1::ServerStatus {
            address: "a:1".into(),
            bulk_address: address.clone(),
            bulk_local: format!("ninf-bulk-nobody-{}", std::process::id()),
            ..Default::default()
        };
        ports.learn(&[listed], "a:1");
        // A fake TCP bulk port that answers one call with an error frame.
        let server = tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let body = bulk::read_frame(&mut stream).await.unwrap();
            let call = v1::CallRequest::decode(&body[..]).unwrap();
            let refusal = Status::not_found(format!("no `{}` here", call.function));
            bulk::write_frame(&mut stream, &bulk::error_reply(&refusal))
                .await
                .unwrap();
        });
        let call = v1::CallRequest {
            function: "mmul".into(),
            ..Default::default()
        };
        let Err(BulkFailure::Call(status)) = ports.call("a:1", &address, call, String::new()).await
        else {
            panic!("expected the TCP port's answer");
        };
        assert_eq!(status.message(), "no `mmul` here");
        // The socket is remembered as unreachable.
        assert_eq!(ports.local_route("a:1"), None);
        server.await.unwrap();
    }

    /// A same-host server that answers two echo-like calls of `OUT` bytes each: the first
    /// with the outputs after the frame (they do not fit the proxy's region), the second
    /// through the region, which must have grown to hold them.
    async fn fake_same_host_server(name: &str, out: usize) -> tokio::task::JoinHandle<()> {
        let listener = local::listen(name).unwrap();
        tokio::spawn(async move {
            let (stream, _) = listener.accept().await.unwrap();
            let mut region: Option<SharedRegion> = None;
            for round in 0..2u8 {
                let mut header = [0u8; 4];
                if let Some(file) = local::receive(&stream, &mut header).await.unwrap() {
                    region = Some(SharedRegion::adopt(file).unwrap());
                }
                let mut body = vec![0u8; u32::from_le_bytes(header) as usize];
                local::receive(&stream, &mut body).await.unwrap();
                let call = v1::CallRequest::decode(&body[..]).unwrap();
                let Some(Source::Bulk(input)) = &call.arguments[0].source else {
                    panic!("expected a bulk input");
                };
                let region = region.as_mut().unwrap();
                assert!(
                    region.bytes()[..input.bytes as usize]
                        .iter()
                        .all(|&b| b == 7)
                );
                let output: Vec<u8> = (0..out).map(|i| (i % 251) as u8 ^ round).collect();
                let follow = round == 0;
                assert_eq!(region.len() < out, follow, "region of {}", region.len());
                if !follow {
                    region.bytes_mut()[..out].copy_from_slice(&output);
                }
                let reply = v1::CallReply {
                    outputs: vec![v1::CallOutput {
                        parameter: 1,
                        result: Some(v1::call_output::Result::Bulk(v1::BulkArray {
                            element_type: v1::ElementType::Double.into(),
                            bytes: out as u64,
                        })),
                    }],
                    ..Default::default()
                };
                let frame = bulk::encode(&bulk::call_reply(reply, follow));
                local::send(&stream, &frame, None).await.unwrap();
                if follow {
                    local::send(&stream, &output, None).await.unwrap();
                }
            }
        })
    }

    #[tokio::test]
    async fn outputs_too_large_for_the_region_come_after_the_frame_and_the_region_grows() {
        let name = local::random_name("ninf-bulk-proxy-test-").unwrap();
        let out = 3 << 20;
        let server = fake_same_host_server(&name, out).await;
        let mut connection = LocalConnection::connect(&name).unwrap();
        let mut outputs = Vec::new();
        for round in 0..2u8 {
            let call = v1::CallRequest {
                function: "echo".into(),
                arguments: vec![array(1 << 20), v1::CallArgument::default()],
                ..Default::default()
            };
            let reply = connection.exchange(call, None).await.unwrap().unwrap();
            let Some(v1::call_output::Result::Array(array)) = &reply.outputs[0].result else {
                panic!("expected an array");
            };
            let expected: Vec<u8> = (0..out).map(|i| (i % 251) as u8 ^ round).collect();
            assert!(array.data[..] == expected[..], "round {round}");
            outputs.push((array.data.clone(), expected));
        }
        assert_eq!(connection.largest_outputs, out);
        server.await.unwrap();
        // The second call's outputs fill most of the region and are read in place: while
        // they live, the next call gets a new region and they stay as they were.
        let region = connection.region.clone().unwrap();
        assert_eq!(outputs[1].0.as_ptr(), region.bytes().as_ptr());
        assert!(connection.reserve(1 << 20).unwrap());
        assert!(!Arc::ptr_eq(connection.region.as_ref().unwrap(), &region));
        for (data, expected) in &outputs {
            assert!(data[..] == expected[..]);
        }
        drop(outputs);
        // Once nobody reads them, a region is reused.
        assert!(!connection.reserve(1 << 20).unwrap());
    }

    #[test]
    fn outputs_are_read_in_place_only_when_large_and_filling_a_good_part_of_the_region() {
        assert!(lend_region(3 << 20, 4 << 20));
        assert!(lend_region(1 << 20, 4 << 20));
        assert!(!lend_region(1 << 20, 8 << 20));
        assert!(!lend_region(512 << 10, 1 << 20));
    }
}
