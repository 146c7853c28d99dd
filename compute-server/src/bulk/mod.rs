//! The bulk-data path: calls whose arrays are too large for gRPC's copies. On a plain TCP
//! connection a client sends a `CallRequest` frame followed by the raw bytes of its `bulk`
//! arguments; the server reads those bytes straight into the executable's shared request
//! region, runs the routine, and writes the outputs straight from the executable's reply
//! region back to the socket. Checks, limits, storage arguments and kept outputs are the same
//! as on the gRPC path (`invoke::prepare`). Wire format: docs/bulk-protocol.md. A client on
//! the same host uses [`local`] instead: the same frames on a Unix socket, the arrays in
//! memory it shares with the server.

mod io;
pub(crate) mod lent;
pub mod local;
mod put;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use ninf_executable::shared::{
    REGION_ARRAY_THRESHOLD, StoreWindow, UNPLACED, in_store, place_region_arrays,
};
use ninf_proto::net::bulk;
use ninf_proto::net::local::SharedRegion;
use ninf_proto::v1::{self, argument_value::Value as WireValue, call_argument::Source};
use prost::Message;
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tonic::Status;

use self::io::{BulkIo, Failure, arrays_in, bulk_bytes, refuse, send_error};
use self::lent::LentInput;
use crate::gang::JobTicket;
use crate::gang::claims::Lent;
use crate::invoke;
use crate::metrics::Path;
use crate::pipeline;
use crate::pool::Outgoing;
use crate::state::ServerState;

/// Accepts bulk connections until the task is dropped.
pub async fn serve(listener: TcpListener, state: Arc<ServerState>) {
    loop {
        let Ok((socket, peer)) = listener.accept().await else {
            continue;
        };
        let _ = socket.set_nodelay(true);
        let state = state.clone();
        tokio::spawn(async move {
            if let Err(e) = connection(socket, &peer.to_string(), &state).await {
                tracing::debug!(%peer, error = %e, "bulk connection closed");
            }
        });
    }
}

async fn connection(socket: TcpStream, peer: &str, state: &ServerState) -> std::io::Result<()> {
    let (reader, writer) = socket.into_split();
    let mut io = TcpIo {
        reader: BufReader::with_capacity(1 << 16, reader),
        writer,
    };
    loop {
        let mut header = [0u8; 4];
        match io.reader.read_exact(&mut header).await {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(e),
        }
        let (request, len) = match read_request(&mut io, header).await? {
            Ok(read) => read,
            Err(status) => {
                send_error(&mut io, &status).await?;
                return Ok(());
            }
        };
        if serve_request(state, peer, request, len, Path::Bulk, &mut io).await? == Flow::Close {
            return Ok(());
        }
    }
}

/// Whether a connection may carry another request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flow {
    Continue,
    Close,
}

/// Reads a request frame's body of `len` bytes (announced by its header) and decodes it; a
/// frame over [`bulk::MAX_FRAME`] is refused before anything is allocated for it.
async fn read_request(
    io: &mut impl BulkIo,
    header: [u8; 4],
) -> std::io::Result<Result<(v1::CallRequest, usize), Status>> {
    let len = match bulk::frame_length(header) {
        Ok(len) => len,
        Err(e) => return Ok(Err(Status::invalid_argument(format!("request {e}")))),
    };
    let mut body = vec![0u8; len];
    io.read_frame(&mut body).await?;
    Ok(v1::CallRequest::decode(Bytes::from(body))
        .map(|request| (request, len))
        .map_err(|e| Status::invalid_argument(format!("malformed request: {e}"))))
}

/// Checks the request's token, runs the call, counts it and answers a failure.
async fn serve_request(
    state: &ServerState,
    peer: &str,
    mut request: v1::CallRequest,
    frame_len: usize,
    path: Path,
    io: &mut impl BulkIo,
) -> std::io::Result<Flow> {
    // Without request metadata, the token travels in the request; a refused client's
    // bulk bytes are not read, so the connection closes.
    let given = (!request.authorization.is_empty()).then_some(request.authorization.as_bytes());
    if let Err(status) = state.check().verify(given, peer) {
        send_error(io, &status).await?;
        return Ok(Flow::Close);
    }
    if let Some(v1::BulkPut { owner }) = request.put.take() {
        let outcome = put::serve(state, (&owner, path), request, io).await;
        return answered(io, outcome).await;
    }
    let (routine, bytes_in) = (
        request.function.clone(),
        frame_len as u64 + arrays_in(&request),
    );
    let started = std::time::Instant::now();
    let running = state.store.call_started(&request.owner);
    let outcome = call(state, request, io).await;
    drop(running);
    let bytes_out = *outcome.as_ref().unwrap_or(&0);
    let seconds = started.elapsed().as_secs_f64();
    state.metrics.call(
        &routine,
        outcome.is_ok(),
        seconds,
        (path, bytes_in, bytes_out),
    );
    answered(io, outcome).await
}

/// Sends the error a request ended with, if any: whether the connection carries more.
async fn answered(io: &mut impl BulkIo, outcome: Result<u64, Failure>) -> std::io::Result<Flow> {
    match outcome {
        Ok(_) => Ok(Flow::Continue),
        Err(Failure::Answer(status)) => {
            send_error(io, &status).await?;
            Ok(Flow::Continue)
        }
        Err(Failure::AnswerAndClose(status)) => {
            send_error(io, &status).await?;
            Ok(Flow::Close)
        }
        Err(Failure::Broken(e)) => Err(e),
    }
}

/// A TCP bulk connection's two halves.
struct TcpIo {
    reader: BufReader<OwnedReadHalf>,
    writer: OwnedWriteHalf,
}

impl BulkIo for TcpIo {
    async fn read_frame(&mut self, into: &mut [u8]) -> std::io::Result<()> {
        self.reader.read_exact(into).await.map(|_| ())
    }

    async fn read_input(&mut self, into: &mut [u8]) -> std::io::Result<()> {
        self.reader.read_exact(into).await.map(|_| ())
    }

    async fn skip_input(&mut self, mut len: u64) -> std::io::Result<()> {
        let mut sink = vec![0u8; 1 << 16];
        while len > 0 {
            let n = (len as usize).min(sink.len());
            self.reader.read_exact(&mut sink[..n]).await?;
            len -= n as u64;
        }
        Ok(())
    }

    async fn send(&mut self, reply: &v1::BulkReply, payloads: &[Bytes]) -> std::io::Result<()> {
        bulk::write_frame(&mut self.writer, reply).await?;
        for payload in payloads {
            self.writer.write_all(payload).await?;
        }
        self.writer.flush().await
    }
}

/// One argument of the executable's request, as it will be laid out in the region.
enum Part {
    Encoded(v1::ArgumentValue),
    /// In bulk: from the socket or the connection's region, or lent (`lent`).
    Bulk {
        element_type: i32,
        bytes: usize,
        lent: Option<LentInput>,
    },
}

/// The region a call's outputs go back through and their places there
/// ([`lent::output_places`]).
type LentOutputs = (Arc<SharedRegion>, Vec<v1::RegionArray>);

/// The executable's request as laid out by [`region_request`].
struct Laid {
    request: v1::ExecRequest,
    /// Where the last array in the request region ends.
    end: usize,
    /// Stored arrays the executable reads where they are kept.
    pinned: Vec<Bytes>,
    /// Arrays borrowed from the host's other servers, lent on to the executable (among
    /// `lent_arrays`): their loans last until the reply.
    from_peers: Vec<Bytes>,
    /// The files its `lent_arrays` name, in order, to pass to the executable.
    lent_files: Vec<Arc<SharedRegion>>,
    /// Lent inputs copied into the request region after all (the executable takes no lent
    /// files, or the input goes where its kept output will be), by parameter.
    lent_copies: HashMap<u32, LentInput>,
}

/// The executable's request: bulk arguments as region arrays (their bytes still to come),
/// placed after the message, and large arrays from storage that lie in the store region
/// (`store`) named there. Returns it with the bytes it takes in the region and those stored
/// arrays, to be kept until the reply: the executable reads them where they are.
fn region_request(
    (call_id, function, lent): (u64, &str, &Lent),
    (parts, lends): (Vec<Part>, bool),
    (store, borrowed): (Option<&StoreWindow>, &[Arc<SharedRegion>]),
    (store_outputs, outputs): (Vec<v1::RegionArray>, Option<LentOutputs>),
) -> Laid {
    // Every field is set before the message is measured: the arrays are laid out after it.
    let mut request = v1::ExecRequest {
        call_id,
        function: function.to_string(),
        threads: lent.threads,
        cores: lent.cores.clone(),
        ..Default::default()
    };
    let (mut pinned, mut from_peers) = (Vec::new(), Vec::new());
    let (mut lent_inputs, mut lent_copies) = (Vec::new(), HashMap::new());
    for (index, part) in parts.into_iter().enumerate() {
        let value = match part {
            Part::Encoded(value) => match stored_array(value, store) {
                Err(value) if lends => match borrowed_array(value, borrowed) {
                    Ok((array, input)) => {
                        let bytes = array.data.len() as u64;
                        lent_inputs.push((index as u32, array.element_type, bytes, input));
                        from_peers.push(array.data);
                        v1::ArgumentValue::default()
                    }
                    Err(value) => value,
                },
                Ok((array, offset)) => {
                    request.region_arrays.push(v1::RegionArray {
                        parameter: index as u32,
                        element_type: array.element_type,
                        offset,
                        bytes: array.data.len() as u64,
                        region: v1::ArrayRegion::Store.into(),
                        lent: 0,
                    });
                    pinned.push(array.data);
                    v1::ArgumentValue::default()
                }
                Err(value) => value,
            },
            Part::Bulk {
                element_type,
                bytes,
                lent,
            } => {
                // An INOUT array whose output is kept in the store region arrives there
                // directly: the routine then updates it where it is kept.
                let own = v1::RegionArray {
                    parameter: index as u32,
                    element_type,
                    offset: UNPLACED,
                    bytes: bytes as u64,
                    region: v1::ArrayRegion::Own.into(),
                    lent: 0,
                };
                let kept = store_outputs
                    .iter()
                    .find(|o| o.parameter == own.parameter && o.bytes == own.bytes);
                match (lent, kept) {
                    (Some(input), None) if lends => {
                        lent_inputs.push((own.parameter, element_type, own.bytes, input));
                    }
                    (lent, kept) => {
                        if let Some(input) = lent {
                            lent_copies.insert(own.parameter, input);
                        }
                        request.region_arrays.push(kept.cloned().unwrap_or(own));
                    }
                }
                v1::ArgumentValue::default()
            }
        };
        request.arguments.push(value);
    }
    request.store_outputs = store_outputs;
    let (mut lent_files, lent_arrays) = lent::number_regions(&lent_inputs);
    request.lent_arrays = lent_arrays;
    if let Some((region, mut places)) = outputs.filter(|(_, places)| lends && !places.is_empty()) {
        let at = lent_files.iter().position(|r| Arc::ptr_eq(r, &region));
        let at = at.unwrap_or_else(|| {
            lent_files.push(region);
            lent_files.len() - 1
        });
        places.iter_mut().for_each(|place| place.lent = at as u32);
        request.lent_outputs = places;
    }
    request.lent_regions = lent_files.len() as u32;
    let len = request.encoded_len();
    let end = place_region_arrays(len, &mut request.region_arrays);
    Laid {
        request,
        end,
        pinned,
        from_peers,
        lent_files,
        lent_copies,
    }
}

/// A large array borrowed from another server of this host, where it lies in that server's
/// region (`borrowed`), to lend on to the executable; any other value back.
fn borrowed_array(
    value: v1::ArgumentValue,
    borrowed: &[Arc<SharedRegion>],
) -> Result<(v1::Array, LentInput), v1::ArgumentValue> {
    use v1::argument_value::Value;
    let place = match &value.value {
        Some(Value::Array(array)) if array.data.len() >= REGION_ARRAY_THRESHOLD => {
            crate::storage::borrowing::place(borrowed, &array.data)
        }
        _ => None,
    };
    match (value.value, place) {
        (Some(Value::Array(array)), Some((region, offset))) => {
            Ok((array, LentInput { region, offset }))
        }
        (value, _) => Err(v1::ArgumentValue { value }),
    }
}

/// A large array that lies in the store region, with its offset there; any other value back.
fn stored_array(
    value: v1::ArgumentValue,
    store: Option<&StoreWindow>,
) -> Result<(v1::Array, u64), v1::ArgumentValue> {
    use v1::argument_value::Value;
    let offset = match (&value.value, store) {
        (Some(Value::Array(array)), Some(store)) if array.data.len() >= REGION_ARRAY_THRESHOLD => {
            store.offset_of(&array.data)
        }
        _ => None,
    };
    match (value.value, offset) {
        (Some(Value::Array(array)), Some(offset)) => Ok((array, offset)),
        (value, _) => Err(v1::ArgumentValue { value }),
    }
}

/// Writes the request's message at the start of the region and reads its bulk arrays from
/// the socket straight into their places: in the region, or in the store region's room
/// reserved for the same parameter's output. Returns the message's length, the frame's.
async fn write_request(
    region: &mut [u8],
    (request, store_outputs, copies): (
        &v1::ExecRequest,
        &mut invoke::StoreOutputs,
        &HashMap<u32, LentInput>,
    ),
    io: &mut impl BulkIo,
) -> std::io::Result<usize> {
    let len = request.encoded_len();
    let region_len = region.len();
    let message = region.get_mut(..len).ok_or_else(|| {
        std::io::Error::other(format!(
            "a request of {len} bytes does not fit its region of {region_len} bytes"
        ))
    })?;
    request
        .encode(&mut &mut message[..])
        .map_err(std::io::Error::other)?;
    for array in &request.region_arrays {
        let place = if in_store(array) {
            match store_outputs.room_for(array.parameter) {
                Some(room) if room.offset() == array.offset => room.as_mut_slice(),
                // An input from storage, which the executable reads where it is kept.
                _ => continue,
            }
        } else {
            let (start, bytes) = (array.offset as usize, array.bytes as usize);
            region
                .get_mut(start..start.saturating_add(bytes))
                .ok_or_else(|| {
                    std::io::Error::other(format!(
                        "parameter {}'s {bytes} bytes at {start} lie outside the region of \
                         {region_len} bytes",
                        array.parameter
                    ))
                })?
        };
        match copies.get(&array.parameter) {
            Some(input) => {
                let source = input
                    .bytes(place.len())
                    .ok_or_else(|| std::io::Error::other("a lent input outside its region"))?;
                ninf_proto::copy::copy(place, source);
            }
            None => io.read_input(place).await?,
        }
    }
    Ok(len)
}

/// How long a job may wait for its bulk input before it counts as idle.
const IDLE_AFTER: std::time::Duration = std::time::Duration::from_millis(20);

/// Waits for `write`, the call's input on its way to the executable. If it is slow to come,
/// the job is idle (the gang thesis): it gives its slots away until the input is complete.
async fn while_idle<T>(ticket: &JobTicket, write: impl Future<Output = T>) -> T {
    tokio::pin!(write);
    match tokio::time::timeout(IDLE_AFTER, &mut write).await {
        Ok(written) => written,
        Err(_) => {
            ticket.set_runnable(false);
            let written = write.await;
            ticket.set_runnable(true);
            ticket.wait_for_slot().await;
            written
        }
    }
}

async fn call(
    state: &ServerState,
    request: v1::CallRequest,
    io: &mut impl BulkIo,
) -> Result<u64, Failure> {
    let bulk_bytes = bulk_bytes(&request);
    let routine = invoke::find(state, &request.function);
    let checked = match &routine {
        Ok(routine) => invoke::prepare(state, routine, &request),
        Err(status) => Err(status.clone()),
    };
    let prepared = match checked {
        Ok(p) => p,
        Err(status) if bulk_bytes <= state.max_request_bytes => {
            return refuse(io, bulk_bytes, status).await;
        }
        Err(status) => return Err(Failure::AnswerAndClose(status)),
    };
    let function = prepared.function;
    let name = function.name.clone();
    if let Some(status) = parallel_refused(&name, prepared.processors) {
        return refuse(io, bulk_bytes, status).await;
    }

    // Arguments that do not come in bulk are resolved first (storage fetches may fail);
    // bulk ones are read from the socket straight into the region below.
    let fetch_start = Instant::now();
    let keep_inputs = invoke::inputs_to_keep(&request);
    let (lent, (outputs, shared_outputs)) = match lent_on(io, &prepared, &request) {
        Ok(lent) => lent,
        Err(status) => return refuse(io, bulk_bytes, status).await,
    };
    let resolving = resolve_parts(state, function, request.arguments, (&keep_inputs, lent));
    let (parts, fetched) = match resolving.await {
        Ok(resolved) => resolved,
        Err(status) => return refuse(io, bulk_bytes, status).await,
    };

    let mut admitted = match pipeline::admit(state, &name, 1, None).await {
        Ok(admitted) => admitted,
        Err(status) => return refuse(io, bulk_bytes, status).await,
    };
    let mut checkout = match prepared.pool.checkout() {
        Ok(c) => c,
        Err(e) => return refuse(io, bulk_bytes, invoke::pool_status(&name, e)).await,
    };
    let ticket = &admitted.ticket;
    ticket
        .attach(checkout.pid().into_iter().collect(), true)
        .await;
    let call_id = checkout.next_call_id();
    let mut store_outputs = invoke::StoreOutputs::reserve(state, &prepared);
    let window = state.store_region.as_ref().map(|r| r.window());
    admitted.lend(state, prepared.routine(), request.alone);
    let laid = region_request(
        (call_id, &name, admitted.lent()),
        (parts, checkout.lends()),
        (window.as_ref(), &state.borrowing.regions()),
        (store_outputs.requested(), outputs),
    );
    let (region_len, pinned, from_peers) = (laid.end, laid.pinned, laid.from_peers);
    let written = match checkout.request_region(region_len) {
        Ok(region) => {
            let into = (&laid.request, &mut store_outputs, &laid.lent_copies);
            while_idle(&admitted.ticket, write_request(region, into, io)).await
        }
        Err(e) => Err(e),
    };
    let len = match written {
        Ok(len) => len,
        Err(e) => {
            // Nothing was sent to the executable: it goes back as it was.
            checkout.release_unused();
            return Err(Failure::Broken(e));
        }
    };
    lend(&checkout, call_id, &laid.lent_files, &name)?;
    let queue_seconds = admitted.queue_seconds;
    let fetch_seconds = fetch_start.elapsed().as_secs_f64() - queue_seconds;

    let cold = checkout.note_call(&name, region_len);
    let exchange = checkout.exchange(Outgoing::Prepared { len, call_id }, true, prepared.timeout);
    let (reply, compute) = pipeline::measured(&admitted.ticket, exchange).await;
    let reply = reply.map_err(|e| Failure::Answer(invoke::pool_status(&name, e)))?;
    let (_ticket, threads) = admitted.release(state);
    // The executable has read its stored, borrowed and lent inputs.
    count_read_in_place(state, (&pinned, &from_peers), &laid.request);
    drop((pinned, from_peers));
    let mut success = match reply.result {
        Some(v1::exec_reply::Result::Success(success)) => success,
        other => {
            return Err(Failure::Answer(failed_reply(
                checkout, call_id, other, &name,
            )));
        }
    };
    claim_lent_outputs(state, &mut success, &laid.lent_files, &name)?;
    store_outputs
        .claim(state, &mut success, &name)
        .map_err(Failure::Answer)?;

    // Outputs still live in the executable's reply region (or, kept ones, in the store
    // region): keep (copied into storage) or stream them, then give the executable back.
    let kept = (&prepared.keep, request.owner.as_str());
    let (outputs, payloads) = split_outputs(state, &name, kept, shared_outputs, success.outputs)
        .map_err(Failure::Answer)?;
    let reply = v1::CallReply {
        outputs,
        status: success.status,
        timing: Some(pipeline::timing(
            fetch_seconds,
            queue_seconds,
            compute,
            cold,
            threads,
        )),
        kept_inputs: invoke::keep_inputs_after(state, &request.owner, fetched),
    };
    send_reply(io, reply, payloads, (checkout, call_id)).await
}

/// Takes the outputs the routine wrote into lent files among the reply's, counting them.
fn claim_lent_outputs(
    state: &ServerState,
    success: &mut v1::ExecSuccess,
    files: &[Arc<SharedRegion>],
    name: &str,
) -> Result<(), Failure> {
    let written = lent::claim_outputs(success, files, name).map_err(Failure::Answer)?;
    state.metrics.lent_output(written);
    Ok(())
}

/// The request's inputs in regions lent on the connection, and where its outputs go
/// ([`outputs_to`]); an error naming what the request got wrong.
fn lent_on(
    io: &impl BulkIo,
    prepared: &invoke::Prepared<'_>,
    request: &v1::CallRequest,
) -> Result<(HashMap<u32, LentInput>, OutputsTo), Status> {
    let lent = lent::lent_inputs(prepared.function, request, |name| io.lent_region(name))?;
    Ok((lent, outputs_to(io, prepared, &request.output_place)?))
}

/// Where a call's outputs go ([`outputs_to`]).
type OutputsTo = (Option<LentOutputs>, SharedOutputs);

/// A lent region outputs written there go back in, named as `shared` rather than copied
/// (the request's output place), and the name it was lent under.
type SharedOutputs = Option<(Arc<SharedRegion>, String)>;

/// The region the call's outputs go back through, and their places there: the lent region
/// the request's output place names (then also as [`SharedOutputs`]), or the connection's
/// own. An error when the place names a region not lent on the connection, or bytes
/// outside it.
fn outputs_to(
    io: &impl BulkIo,
    prepared: &invoke::Prepared<'_>,
    place: &Option<v1::OutputPlace>,
) -> Result<OutputsTo, Status> {
    let call = (
        prepared.function,
        prepared.output_sizes.as_slice(),
        &prepared.keep,
    );
    let Some(place) = place else {
        let own = io.output_region().map(|region| {
            let places = lent::output_places(call, region.len());
            (region, places)
        });
        return Ok((own, None));
    };
    let region = io.lent_region(&place.region).ok_or_else(|| {
        Status::invalid_argument(format!(
            "output place of `{}`: no region `{}` was lent on this connection",
            prepared.function.name, place.region
        ))
    })?;
    let places = lent::output_places_at(call, place, region.len())?;
    let shared = Some((region.clone(), place.region.clone()));
    Ok((Some((region, places)), shared))
}

/// Passes the files the request's lent arrays lie in to the executable of `function`. An
/// executable that does not take them has died: dropped with its checkout, it is replaced.
fn lend(
    checkout: &crate::pool::Checkout<'_>,
    call_id: u64,
    files: &[Arc<SharedRegion>],
    function: &str,
) -> Result<(), Failure> {
    if files.is_empty() {
        return Ok(());
    }
    let fds: Vec<_> = files.iter().map(|region| region.fd()).collect();
    checkout.lend(call_id, &fds).map(|_| ()).map_err(|e| {
        Failure::Answer(Status::unavailable(format!(
            "`{function}`: cannot pass the lent inputs to its executable: {e}"
        )))
    })
}

/// Counts the bytes the executable read where they lie: stored arrays (`pinned`), arrays
/// borrowed from the host's other servers (`from_peers`), and the request's other lent
/// inputs.
fn count_read_in_place(
    state: &ServerState,
    (pinned, from_peers): (&[Bytes], &[Bytes]),
    request: &v1::ExecRequest,
) {
    let length = |arrays: &[Bytes]| arrays.iter().map(|p| p.len() as u64).sum::<u64>();
    state.metrics.store_region("read_in_place", length(pinned));
    let borrowed = length(from_peers);
    state.metrics.store_region("read_from_peer", borrowed);
    let lent: u64 = request.lent_arrays.iter().map(|a| a.bytes).sum();
    state.metrics.lent_input(lent.saturating_sub(borrowed));
}

/// Sends a call's reply and its outputs' bytes, then gives the executable back (its
/// outputs stayed in its reply region until now); the bytes sent.
async fn send_reply(
    io: &mut impl BulkIo,
    reply: v1::CallReply,
    payloads: Vec<Bytes>,
    (checkout, call_id): (crate::pool::Checkout<'_>, u64),
) -> Result<u64, Failure> {
    let status = reply.status;
    let reply = bulk::call_reply(reply, false);
    let sent = io.send(&reply, &payloads).await;
    let bytes_out = prost::Message::encoded_len(&reply) as u64
        + payloads.iter().map(|p| p.len() as u64).sum::<u64>();
    drop(payloads);
    let _ = checkout.finish(v1::ExecReply {
        call_id,
        result: Some(v1::exec_reply::Result::Success(v1::ExecSuccess {
            status,
            ..Default::default()
        })),
    });
    sent.map(|()| bytes_out).map_err(Failure::Broken)
}

/// The status of an executable's reply that is not a success; the executable goes back to
/// its pool (or is replaced) as `finish` decides.
fn failed_reply(
    checkout: crate::pool::Checkout<'_>,
    call_id: u64,
    result: Option<v1::exec_reply::Result>,
    name: &str,
) -> Status {
    checkout
        .finish(v1::ExecReply { call_id, result })
        .err()
        .map(|e| invoke::pool_status(name, e))
        .unwrap_or_else(|| Status::internal("reply without a result"))
}

/// Parallel routines run as SPMD jobs through `Invoke.Call`, never on a bulk connection.
fn parallel_refused(name: &str, processors: u32) -> Option<Status> {
    (processors > 1).then(|| {
        Status::invalid_argument(format!(
            "`{name}` runs on {processors} processors; parallel routines are called through Invoke.Call, not a bulk connection"
        ))
    })
}

/// The request's arguments as the executable will get them: bulk ones to be read from the
/// socket, the others resolved now (inline, or fetched from storage); and the fetched inputs
/// of `keep_inputs`, to keep after the call.
async fn resolve_parts(
    state: &ServerState,
    function: &ninf_idl::FunctionInterface,
    arguments: Vec<v1::CallArgument>,
    (keep_inputs, mut lent): (&std::collections::HashSet<u32>, HashMap<u32, LentInput>),
) -> Result<(Vec<Part>, Vec<invoke::FetchedInput>), Status> {
    let mut parts = Vec::with_capacity(arguments.len());
    let mut fetched = Vec::new();
    for (index, (parameter, argument)) in function.parameters.iter().zip(arguments).enumerate() {
        let index = index as u32;
        parts.push(match argument.source {
            Some(Source::Bulk(b)) => Part::Bulk {
                element_type: b.element_type,
                bytes: b.bytes as usize,
                lent: lent.remove(&index),
            },
            source => {
                let keep = keep_inputs.contains(&index);
                let (value, kept) =
                    invoke::resolve_keeping(state, function, (index, parameter), source, keep)
                        .await?;
                fetched.extend(kept);
                Part::Encoded(value)
            }
        });
    }
    Ok((parts, fetched))
}

/// The reply's outputs: those in `keep` copied into storage under `owner`, those the routine
/// wrote in the `shared` region (the request's output place, and its lent name) named
/// there, the others described for the reply with their bytes to stream after it.
fn split_outputs(
    state: &ServerState,
    name: &str,
    (keep, owner): (&std::collections::HashSet<u32>, &str),
    shared: SharedOutputs,
    outputs: Vec<v1::ExecOutput>,
) -> Result<(Vec<v1::CallOutput>, Vec<Bytes>), Status> {
    let mut described = Vec::with_capacity(outputs.len());
    let mut payloads = Vec::new();
    for output in outputs {
        let Some(WireValue::Array(array)) = output.value.and_then(|v| v.value) else {
            return Err(Status::internal(format!(
                "`{name}` returned a non-array output"
            )));
        };
        let in_place = shared
            .as_ref()
            .and_then(|(region, name)| Some((region.offset_of(&array.data)? as u64, name)));
        let result = if keep.contains(&output.parameter) {
            v1::call_output::Result::Object(invoke::keep_output(state, owner, &array, true)?)
        } else if let Some((offset, region)) = in_place {
            v1::call_output::Result::Shared(v1::SharedArray {
                element_type: array.element_type,
                region: region.clone(),
                offset,
                bytes: array.data.len() as u64,
            })
        } else {
            let bulk = v1::BulkArray {
                element_type: array.element_type,
                bytes: array.data.len() as u64,
            };
            payloads.push(array.data);
            v1::call_output::Result::Bulk(bulk)
        };
        described.push(v1::CallOutput {
            parameter: output.parameter,
            result: Some(result),
        });
    }
    Ok((described, payloads))
}
