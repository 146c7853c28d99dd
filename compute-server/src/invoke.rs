//! One call, from request to reply: find the routine, check what can be checked before any
//! data moves (argument count, scalar values, processors, the total input size against the
//! server's limit), fetch arguments held on storage servers, wait for the job's place in the
//! gang time table, run the routine on its processes (p ranks for a parallel routine), then
//! return the outputs or keep them in this server's storage.

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use ninf_idl::{ElementType, FunctionInterface, Mode};
use ninf_proto::descriptor::{element_type_from_proto, element_type_to_proto};
use ninf_proto::net::auth::authorized;
use ninf_proto::v1::{self, argument_value::Value as WireValue, call_argument::Source};
use prost::Message;
use tonic::Status;

use crate::config::{BrokerPlacement, RankPlacement};
use crate::gang::JobTicket;
use crate::gang::claims::Lent;
use crate::pipeline;
pub use crate::pipeline::gang_status;
pub use crate::pool::pool_status;
use crate::pool::{Checkout, ExecutablePool, Outgoing};
use crate::state::{Routine, ServerState};
use crate::storage::region::Reservation;

fn bad(message: String) -> Status {
    Status::invalid_argument(message)
}

/// A call that passed every check that can be made before any data moves.
pub struct Prepared<'a> {
    pub function: &'a FunctionInterface,
    pub pool: &'a ExecutablePool,
    /// OUT/INOUT parameters to keep in this server's storage.
    pub keep: HashSet<u32>,
    /// (parameter, bytes) of each kept output, as the IDL sizes it for this call.
    pub kept_sizes: Vec<(u32, u64)>,
    /// (parameter, bytes) of every OUT and INOUT array, in parameter order, as the IDL
    /// sizes it for this call.
    pub output_sizes: Vec<(u32, u64)>,
    pub timeout: Duration,
    /// Processors (ranks) the job needs: 1, or the IDL's `Parallel` for this call.
    pub processors: u32,
    /// The call's floating-point operations (the IDL's `CalcOrder`; 0 without one).
    pub flops: f64,
}

impl Prepared<'_> {
    /// What lending cores to the call depends on.
    pub fn routine(&self) -> pipeline::Routine<'_> {
        pipeline::Routine {
            parallelism: &self.function.parallelism,
            flops: self.flops,
        }
    }
}

/// The routine `name` as this server serves it now, or NOT_FOUND.
pub fn find(state: &ServerState, name: &str) -> Result<Routine, Status> {
    state
        .function(name)
        .ok_or_else(|| Status::not_found(format!("no routine `{name}` on this server")))
}

/// Checks the request against the routine's interface and this server's limits: argument
/// count, IN scalars, sizes, kept outputs and the sizes of bulk arrays.
pub fn prepare<'a>(
    state: &ServerState,
    routine: &'a Routine,
    request: &v1::CallRequest,
) -> Result<Prepared<'a>, Status> {
    let function = routine.interface();
    let name = &function.name;
    if request.arguments.len() != function.parameters.len() {
        return Err(bad(format!(
            "`{name}` takes {} arguments, got {}",
            function.parameters.len(),
            request.arguments.len()
        )));
    }
    let bindings = integer_bindings(function, &request.arguments)?;
    let cost = function
        .cost(&bindings)
        .map_err(|e| bad(format!("`{name}`: {e}")))?;
    let processors = function
        .processors(&bindings)
        .map_err(|e| bad(format!("`{name}`: {e}")))?;
    if processors == 0 || processors > u64::from(state.gang.processors) {
        return Err(bad(format!(
            "`{name}` would run on {processors} processors; this server has {}",
            state.gang.processors
        )));
    }
    if cost.bytes_in > state.max_request_bytes || cost.bytes_out > state.max_request_bytes {
        return Err(Status::resource_exhausted(format!(
            "call of `{name}` would move {} bytes in and {} bytes out, over this server's limit of {} bytes per call",
            cost.bytes_in, cost.bytes_out, state.max_request_bytes
        )));
    }
    for (p, argument) in function.parameters.iter().zip(&request.arguments) {
        if let Some(Source::Bulk(bulk)) = &argument.source {
            if !p.is_array() || !p.mode.is_input() {
                return Err(bad(format!(
                    "argument `{}` of `{name}` is `{}`; only IN and INOUT arrays may be sent in bulk",
                    p.name,
                    p.declaration()
                )));
            }
            let expected = function
                .byte_size(p, &bindings)
                .map_err(|e| bad(format!("`{name}`: {e}")))?;
            let element_type = v1::ElementType::try_from(bulk.element_type)
                .ok()
                .and_then(element_type_from_proto);
            if element_type != Some(p.element_type) || bulk.bytes != expected {
                return Err(bad(format!(
                    "argument `{}` of `{name}` must be {expected} bytes of {}, got {} bytes of {}",
                    p.name,
                    p.element_type.keyword(),
                    bulk.bytes,
                    element_type.map_or("an unknown type", |t| t.keyword())
                )));
            }
        }
    }
    let keep = kept_outputs(function, &request.keep)?;
    let kept_sizes = keep
        .iter()
        .filter_map(|&index| {
            let parameter = function.parameters.get(index as usize)?;
            Some((index, function.byte_size(parameter, &bindings).ok()?))
        })
        .collect();
    let output_sizes = function
        .parameters
        .iter()
        .enumerate()
        .filter(|(_, p)| p.is_array() && p.mode.is_output())
        .filter_map(|(index, p)| Some((index as u32, function.byte_size(p, &bindings).ok()?)))
        .collect();
    let timeout = if request.timeout_seconds > 0.0 && request.timeout_seconds.is_finite() {
        Duration::from_secs_f64(request.timeout_seconds).min(state.call_timeout)
    } else {
        state.call_timeout
    };
    Ok(Prepared {
        function,
        pool: routine.pool(),
        keep,
        kept_sizes,
        output_sizes,
        timeout,
        processors: processors as u32,
        flops: cost.flops,
    })
}

/// An input fetched from another server's storage that the call asked this server to keep
/// too (`CallRequest.keep_inputs`): kept once the call has succeeded.
pub struct FetchedInput {
    pub parameter: u32,
    pub array: v1::Array,
}

/// Keeps the fetched inputs under `owner`, for the reply; an input that does not fit is
/// not kept (it was only asked for to save a later transfer).
pub fn keep_inputs_after(
    state: &ServerState,
    owner: &str,
    fetched: Vec<FetchedInput>,
) -> Vec<v1::KeptInput> {
    fetched
        .into_iter()
        .filter_map(|f| match keep_output(state, owner, &f.array, false) {
            Ok(object) => Some(v1::KeptInput {
                parameter: f.parameter,
                object: Some(object),
            }),
            Err(status) => {
                tracing::debug!(parameter = f.parameter, error = %status.message(), "fetched input not kept");
                None
            }
        })
        .collect()
}

/// The arguments a request asks to keep once fetched, by index.
pub fn inputs_to_keep(request: &v1::CallRequest) -> std::collections::HashSet<u32> {
    request.keep_inputs.iter().copied().collect()
}

/// [`resolve`], and the array fetched when it came from another server and `keep` asks for
/// it.
pub async fn resolve_keeping(
    state: &ServerState,
    function: &FunctionInterface,
    (index, parameter): (u32, &ninf_idl::Parameter),
    source: Option<Source>,
    keep: bool,
) -> Result<(v1::ArgumentValue, Option<FetchedInput>), Status> {
    let remote = matches!(&source, Some(Source::Object(o))
        if keep && !o.server.is_empty() && o.server != state.advertise);
    let value = resolve(state, function, parameter, source).await?;
    let fetched = match &value.value {
        Some(WireValue::Array(array)) if remote => Some(FetchedInput {
            parameter: index,
            array: array.clone(),
        }),
        _ => None,
    };
    Ok((value, fetched))
}

/// An argument that is not in bulk: its value, fetching it from storage if needed.
pub async fn resolve(
    state: &ServerState,
    function: &FunctionInterface,
    parameter: &ninf_idl::Parameter,
    source: Option<Source>,
) -> Result<v1::ArgumentValue, Status> {
    let value = match source {
        None => None,
        Some(Source::Value(v)) => v.value,
        Some(Source::Bulk(_)) => {
            return Err(bad(format!(
                "argument `{}` of `{}` is sent in bulk, which only a bulk connection carries",
                parameter.name, function.name
            )));
        }
        Some(Source::Shared(_)) => {
            return Err(bad(format!(
                "argument `{}` of `{}` names a region shared with a proxy, which only that proxy reads",
                parameter.name, function.name
            )));
        }
        Some(Source::Data(data)) => {
            return Err(bad(format!(
                "argument `{}` of `{}` names data handle `{}`, which only a proxy resolves",
                parameter.name, function.name, data.id
            )));
        }
        Some(Source::Object(object)) => {
            if !parameter.is_array() || !parameter.mode.is_input() {
                return Err(bad(format!(
                    "argument `{}` of `{}` is `{}`; only IN and INOUT arrays may come from storage",
                    parameter.name,
                    function.name,
                    parameter.declaration()
                )));
            }
            let array = fetch(state, &object).await.map_err(|e| {
                Status::failed_precondition(format!(
                    "argument `{}` of `{}`: cannot fetch object `{}` from {}: {e}",
                    parameter.name, function.name, object.object_id, object.server
                ))
            })?;
            Some(WireValue::Array(array))
        }
    };
    Ok(v1::ArgumentValue { value })
}

/// Keeps an output in this server's storage and returns where it is.
pub fn keep_output(
    state: &ServerState,
    owner: &str,
    array: &v1::Array,
    copy: bool,
) -> Result<v1::ObjectRef, Status> {
    let element_type = v1::ElementType::try_from(array.element_type)
        .ok()
        .and_then(element_type_from_proto)
        .unwrap_or(ElementType::Char);
    // A reply read in place from the executable's region must be copied before it is kept:
    // into the store region when it is large and there is room, where later calls on this
    // server read it without another copy.
    // An output the routine wrote into the store region is there already.
    let large = array.data.len() >= ninf_executable::shared::REGION_ARRAY_THRESHOLD;
    // An array borrowed from another server of the host is that server's memory, lent for
    // one call: a copy kept here must be our own.
    let borrowed = large
        && crate::storage::borrowing::place(&state.borrowing.regions(), &array.data).is_some();
    let copy = copy || borrowed;
    let stored = state
        .store_region
        .as_ref()
        .is_some_and(|region| region.window().offset_of(&array.data).is_some());
    let data = match &state.store_region {
        _ if stored || !copy => array.data.clone(),
        Some(region) if large => match region.copy_in(&array.data) {
            Some(data) => {
                state.metrics.store_region("copied_in", data.len() as u64);
                data
            }
            None => bytes::Bytes::copy_from_slice(&array.data),
        },
        _ => bytes::Bytes::copy_from_slice(&array.data),
    };
    let info = state
        .store
        .put(owner, element_type, data)
        .map_err(crate::storage::StorageError::status)?;
    state.touch(owner);
    Ok(v1::ObjectRef {
        server: state.advertise.clone(),
        object_id: info.id,
    })
}

/// Room reserved in the store region for a call's large kept outputs, which the routine
/// then writes there itself (`ExecRequest.store_outputs`): kept without a copy. Room not
/// used is given back on drop: at once after a reply (the executable placed the output
/// elsewhere), a moment later when the call ended without one.
#[derive(Default)]
pub struct StoreOutputs {
    reserved: Vec<(u32, i32, Reservation)>,
    /// The call's reply came: its executable writes no more.
    settled: bool,
}

/// How long the room of a call that ended without its reply stays reserved: its executable
/// was killed, and a killed process may run for a moment after the signal.
const KILLED_GRACE: Duration = Duration::from_secs(1);

impl Drop for StoreOutputs {
    fn drop(&mut self) {
        if self.settled || self.reserved.is_empty() {
            return;
        }
        let rooms = std::mem::take(&mut self.reserved);
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move {
                    tokio::time::sleep(KILLED_GRACE).await;
                    drop(rooms);
                });
            }
            // No runtime to wait on: the room stays reserved rather than risk a late write.
            Err(_) => std::mem::forget(rooms),
        }
    }
}

impl StoreOutputs {
    /// Reserves room for each kept output large enough to travel beside a message; none
    /// without a store region, or where it has no room left.
    pub fn reserve(state: &ServerState, prepared: &Prepared<'_>) -> StoreOutputs {
        let Some(region) = &state.store_region else {
            return StoreOutputs::default();
        };
        let mut reserved = Vec::new();
        for &(index, bytes) in &prepared.kept_sizes {
            let Ok(bytes) = usize::try_from(bytes) else {
                continue;
            };
            let Some(parameter) = prepared.function.parameters.get(index as usize) else {
                continue;
            };
            if bytes < ninf_executable::shared::REGION_ARRAY_THRESHOLD {
                continue;
            }
            if let Some(room) = region.reserve(bytes) {
                let element_type = element_type_to_proto(parameter.element_type).into();
                reserved.push((index, element_type, room));
            }
        }
        StoreOutputs {
            reserved,
            settled: false,
        }
    }

    /// The room reserved for `parameter`'s output, if any.
    pub fn room_for(&mut self, parameter: u32) -> Option<&mut Reservation> {
        self.reserved
            .iter_mut()
            .find(|(p, _, _)| *p == parameter)
            .map(|(_, _, room)| room)
    }

    /// The request's `store_outputs`.
    pub fn requested(&self) -> Vec<v1::RegionArray> {
        self.reserved
            .iter()
            .map(|(parameter, element_type, room)| v1::RegionArray {
                parameter: *parameter,
                element_type: *element_type,
                offset: room.offset(),
                bytes: room.bytes() as u64,
                region: v1::ArrayRegion::Store.into(),
                ..Default::default()
            })
            .collect()
    }

    /// Puts the outputs the executable wrote into the store region among the reply's
    /// outputs, their bytes the reserved room itself. An output there that this call did not
    /// reserve is refused: the executable broke the protocol.
    pub fn claim(
        mut self,
        state: &ServerState,
        success: &mut v1::ExecSuccess,
        name: &str,
    ) -> Result<(), Status> {
        self.settled = true;
        for stored in std::mem::take(&mut success.region_outputs) {
            let found = self.reserved.iter().position(|(parameter, _, room)| {
                *parameter == stored.parameter
                    && room.offset() == stored.offset
                    && room.bytes() as u64 == stored.bytes
            });
            let Some(found) = found else {
                return Err(Status::internal(format!(
                    "`{name}` put output {} in the store region at bytes {}..{}, which the call did not reserve",
                    stored.parameter,
                    stored.offset,
                    stored.offset.saturating_add(stored.bytes)
                )));
            };
            let (_, element_type, room) = self.reserved.swap_remove(found);
            state
                .metrics
                .store_region("written_in_place", room.bytes() as u64);
            success.outputs.push(v1::ExecOutput {
                parameter: stored.parameter,
                value: Some(v1::ArgumentValue {
                    value: Some(WireValue::Array(v1::Array {
                        element_type,
                        data: room.into_bytes(),
                    })),
                }),
            });
        }
        success.outputs.sort_by_key(|o| o.parameter);
        Ok(())
    }
}

/// Bytes of `request`'s arrays that its executable will read from the store region: the
/// large ones lying there, in a request large enough to go through shared memory (see
/// `RegionWriter::write_request_with_store`).
fn stored_input_bytes(state: &ServerState, request: &v1::ExecRequest) -> u64 {
    let Some(window) = state.store_region.as_ref().map(|r| r.window()) else {
        return 0;
    };
    if request.encoded_len() < ninf_executable::shared::SHARED_THRESHOLD {
        return 0;
    }
    request
        .arguments
        .iter()
        .filter_map(|a| match &a.value {
            Some(WireValue::Array(array)) => Some(&array.data),
            _ => None,
        })
        .filter(|data| data.len() >= ninf_executable::shared::REGION_ARRAY_THRESHOLD)
        .filter(|data| window.offset_of(data).is_some())
        .map(|data| data.len() as u64)
        .sum()
}

/// Runs a call request from the gRPC service to completion.
pub async fn call(state: &ServerState, request: v1::CallRequest) -> Result<v1::CallReply, Status> {
    call_holding(state, request, &mut None).await
}

/// Runs a batch of independent calls one after another (`CallBatch`), answering each on its
/// own. Sequential calls share one gang job: it is admitted once, for the first, and kept
/// while each next call runs, so a batch of tiny calls pays the gang table's admission and
/// slot hand-over once instead of per call. A parallel call, or one after a failure, is
/// admitted on its own.
pub async fn call_batch(
    state: &ServerState,
    requests: Vec<v1::CallRequest>,
) -> Vec<Result<v1::CallReply, Status>> {
    let mut held = None;
    let mut results = Vec::with_capacity(requests.len());
    for request in requests {
        results.push(call_holding(state, request, &mut held).await);
    }
    results
}

/// Runs one call, in the job `held` when there is one and the call runs on one process;
/// leaves its job in `held` after a success, for the next call of a batch.
async fn call_holding(
    state: &ServerState,
    request: v1::CallRequest,
    held: &mut Option<JobTicket>,
) -> Result<v1::CallReply, Status> {
    let _running = state.store.call_started(&request.owner);
    let routine = find(state, &request.function)?;
    let prepared = prepare(state, &routine, &request)?;
    let function = prepared.function;
    let name = &function.name;

    let fetch_start = Instant::now();
    let mut arguments = Vec::with_capacity(request.arguments.len());
    let mut fetched = Vec::new();
    let keep_inputs = inputs_to_keep(&request);
    for (index, (parameter, argument)) in function
        .parameters
        .iter()
        .zip(request.arguments)
        .enumerate()
    {
        let index = index as u32;
        let keep = keep_inputs.contains(&index);
        let (value, kept) =
            resolve_keeping(state, function, (index, parameter), argument.source, keep).await?;
        arguments.push(value);
        fetched.extend(kept);
    }
    let fetch_seconds = fetch_start.elapsed().as_secs_f64();

    let shareable = prepared.processors == 1
        && !matches!(function.parallelism, ninf_idl::Parallelism::Parallel { .. });
    let reuse = held.take().filter(|_| shareable);
    let mut admitted = pipeline::admit(state, name, prepared.processors, reuse).await?;
    admitted.lend(state, prepared.routine(), request.alone);
    let run = run_job(
        state,
        &prepared,
        &admitted.ticket,
        arguments,
        admitted.lent(),
    );
    let (ran, compute) = pipeline::measured(&admitted.ticket, run).await;
    let Ran { success, cold } = ran?;
    let queue_seconds = admitted.queue_seconds;
    let (ticket, threads) = admitted.release(state);
    if shareable {
        *held = Some(ticket);
    }
    let timing = pipeline::timing(fetch_seconds, queue_seconds, compute, cold, threads);

    let mut outputs = Vec::with_capacity(success.outputs.len());
    for output in success.outputs {
        let Some(WireValue::Array(array)) = output.value.and_then(|v| v.value) else {
            return Err(Status::internal(format!(
                "`{name}` returned a non-array output"
            )));
        };
        let result = if prepared.keep.contains(&output.parameter) {
            v1::call_output::Result::Object(keep_output(state, &request.owner, &array, false)?)
        } else {
            v1::call_output::Result::Array(array)
        };
        outputs.push(v1::CallOutput {
            parameter: output.parameter,
            result: Some(result),
        });
    }
    Ok(v1::CallReply {
        outputs,
        status: success.status,
        timing: Some(timing),
        kept_inputs: keep_inputs_after(state, &request.owner, fetched),
    })
}

/// What a job's processes returned, and whether any of them was cold for it
/// ([`Checkout::note_call`]).
pub struct Ran {
    pub success: v1::ExecSuccess,
    pub cold: bool,
}

/// Runs an admitted job on its processes: one executable for a sequential routine; for a
/// parallel one, p executables of the module given the same arguments, each knowing its rank,
/// with their messages through the broker. Rank 0's outputs are the call's.
pub async fn run_job(
    state: &ServerState,
    prepared: &Prepared<'_>,
    ticket: &JobTicket,
    arguments: Vec<v1::ArgumentValue>,
    lent: &Lent,
) -> Result<Ran, Status> {
    let name = &prepared.function.name;
    let ranks = prepared.processors as usize;
    let parallel = matches!(
        prepared.function.parallelism,
        ninf_idl::Parallelism::Parallel { .. }
    );
    if (ranks > 1 || parallel) && state.gang.settings.ranks == RankPlacement::Nodes {
        // The nodes' agents start the ranks' executables for this job alone.
        let success = run_on_nodes(state, prepared, ticket, arguments).await?;
        return Ok(Ran {
            success,
            cold: true,
        });
    }
    let mut checkouts = prepared
        .pool
        .checkout_many(ranks)
        .map_err(|e| pool_status(name, e))?;
    let pids: Vec<u32> = checkouts.iter().filter_map(Checkout::pid).collect();
    ticket.attach(pids, true).await;
    if ranks == 1 && !parallel {
        let store_outputs = StoreOutputs::reserve(state, prepared);
        let request = v1::ExecRequest {
            call_id: 0,
            function: name.clone(),
            arguments,
            store_outputs: store_outputs.requested(),
            threads: lent.threads,
            cores: lent.cores.clone(),
            ..Default::default()
        };
        let mut checkout = checkouts
            .pop()
            .ok_or_else(|| Status::internal("no process"))?;
        let cold = checkout.note_call(name, request.encoded_len());
        let read_in_place = stored_input_bytes(state, &request);
        let (request, borrowed) = lend_borrowed(state, &mut checkout, request, name)?;
        let reply = checkout
            .exchange(
                Outgoing::Message(Box::new(request)),
                false,
                prepared.timeout,
            )
            .await
            .map_err(|e| pool_status(name, e))?;
        read_from_peers(state, borrowed);
        let mut success = checkout.finish(reply).map_err(|e| pool_status(name, e))?;
        store_outputs.claim(state, &mut success, name)?;
        state.metrics.store_region("read_in_place", read_in_place);
        return Ok(Ran { success, cold });
    }
    let spread = state.gang.settings.broker == BrokerPlacement::Nodes;
    let node_brokers = if spread {
        open_on_nodes(state, ticket, name).await?
    } else {
        state.broker.open(ticket.id, ranks as u32);
        Vec::new()
    };
    let mut cold = false;
    let requests: Vec<v1::ExecRequest> = checkouts
        .iter_mut()
        .enumerate()
        .map(|(rank, checkout)| {
            let request = rank_request(
                name,
                &arguments,
                ticket,
                rank as u32,
                ranks as u32,
                &node_brokers,
            );
            cold |= checkout.note_call(name, request.encoded_len());
            request
        })
        .collect();
    let exchanges = checkouts.iter_mut().zip(requests).enumerate().map(
        |(rank, (checkout, request))| async move {
            let reply = checkout
                .exchange(
                    Outgoing::Message(Box::new(request)),
                    false,
                    prepared.timeout,
                )
                .await;
            if spread {
                state.gang.spread_rank_done(ticket.id, rank as u32);
            } else {
                state.broker.rank_done(ticket.id, rank as u32);
            }
            reply
        },
    );
    let replies = futures_util::future::join_all(exchanges).await;
    if spread {
        state.gang.close_spread(ticket.id, "");
    } else {
        state.broker.close(ticket.id);
    }
    if let Some(reason) = ticket.killed() {
        return Err(Status::aborted(format!("`{name}`: {reason}")));
    }
    let outcomes = checkouts.into_iter().zip(replies).map(|(checkout, reply)| {
        reply
            .and_then(|reply| checkout.finish(reply))
            .map_err(|e| pool_status(name, e))
    });
    let success = rank_zero_result(name, ranks as u32, outcomes)?;
    Ok(Ran { success, cold })
}

/// Lends the executable the files of the arrays in `request` borrowed from the host's other
/// servers (`storage::borrowing`), so that it reads them where they lie; an executable that
/// takes no lent files gets them copied as before. Returns the request, with its call id
/// drawn, and the borrowed bytes, to keep until the reply.
fn lend_borrowed(
    state: &ServerState,
    checkout: &mut Checkout<'_>,
    mut request: v1::ExecRequest,
    name: &str,
) -> Result<(v1::ExecRequest, Vec<bytes::Bytes>), Status> {
    if !checkout.lends() {
        return Ok((request, Vec::new()));
    }
    let (files, borrowed) =
        crate::storage::borrowing::lent_arguments(&state.borrowing, &mut request);
    if files.is_empty() {
        return Ok((request, borrowed));
    }
    request.call_id = checkout.next_call_id();
    let fds: Vec<_> = files.iter().map(|region| region.fd()).collect();
    checkout.lend(request.call_id, &fds).map_err(|e| {
        Status::unavailable(format!(
            "`{name}`: cannot pass the borrowed inputs to its executable: {e}"
        ))
    })?;
    Ok((request, borrowed))
}

/// Counts the borrowed arrays the executable has read, and lets them go: their loans end.
fn read_from_peers(state: &ServerState, borrowed: Vec<bytes::Bytes>) {
    let bytes = borrowed.iter().map(|b| b.len() as u64).sum();
    state.metrics.store_region("read_from_peer", bytes);
}

/// Rank `rank`'s request: the call's arguments and its place among the job's ranks.
fn rank_request(
    name: &str,
    arguments: &[v1::ArgumentValue],
    ticket: &JobTicket,
    rank: u32,
    size: u32,
    brokers: &[String],
) -> v1::ExecRequest {
    v1::ExecRequest {
        call_id: 0,
        function: name.to_string(),
        arguments: arguments.to_vec(),
        spmd: Some(v1::SpmdContext {
            job: ticket.id,
            rank,
            size,
            broker: brokers.get(rank as usize).cloned().unwrap_or_default(),
        }),
        region_arrays: Vec::new(),
        // Rank 0's outputs come back in its reply region.
        store_outputs: Vec::new(),
        threads: 0,
        cores: Vec::new(),
        ..Default::default()
    }
}

/// The call's result from its ranks' outcomes (rank order): rank 0's success, or the first
/// rank's failure.
fn rank_zero_result(
    name: &str,
    size: u32,
    outcomes: impl Iterator<Item = Result<v1::ExecSuccess, Status>>,
) -> Result<v1::ExecSuccess, Status> {
    let mut first = None;
    for (rank, outcome) in outcomes.enumerate() {
        match outcome {
            Ok(success) if rank == 0 => first = Some(success),
            Ok(_) => {}
            Err(status) => return Err(rank_failure(rank, size, status)),
        }
    }
    first.ok_or_else(|| Status::internal(format!("`{name}`: rank 0 returned nothing")))
}

/// Opens a parallel job on its nodes' brokers; returns each rank's broker socket.
async fn open_on_nodes(
    state: &ServerState,
    ticket: &JobTicket,
    name: &str,
) -> Result<Vec<String>, Status> {
    state
        .gang
        .open_spread(ticket.id)
        .await
        .map_err(|e| killed_or(ticket, name, Status::unavailable(format!("`{name}`: {e}"))))
}

/// Why the job was killed, if it was (its node's agent went away, a deadlock), else `other`.
fn killed_or(ticket: &JobTicket, name: &str, other: Status) -> Status {
    match ticket.killed() {
        Some(reason) => Status::aborted(format!("`{name}`: {reason}")),
        None => other,
    }
}

/// Runs a parallel job whose ranks the agents of its nodes start (`ranks = "nodes"`): each
/// rank's request goes to the agent of the node holding its column, which starts the
/// executable and says its process id; once all have, the job waits for its slot and the
/// agents send the requests.
async fn run_on_nodes(
    state: &ServerState,
    prepared: &Prepared<'_>,
    ticket: &JobTicket,
    arguments: Vec<v1::ArgumentValue>,
) -> Result<v1::ExecSuccess, Status> {
    let name = &prepared.function.name;
    let size = prepared.processors;
    let brokers = open_on_nodes(state, ticket, name).await?;
    let pool = prepared.pool;
    let limits = pool.options().limits;
    let runs = (0..size)
        .map(|rank| v1::SpmdRunRank {
            job: ticket.id,
            rank,
            module: pool.module().to_string(),
            executable: pool.path().display().to_string(),
            request: Some(rank_request(name, &arguments, ticket, rank, size, &brokers)),
            timeout_seconds: prepared.timeout.as_secs_f64(),
            cpu_slowdown: pool.options().cpu_slowdown,
            memory_bytes: limits.memory_bytes.unwrap_or(0),
            open_files: limits.open_files.unwrap_or(0),
            cpu_seconds_per_call: limits.cpu_seconds_per_call.unwrap_or(0),
        })
        .collect();
    let gang = &state.gang;
    let replies = gang
        .run_on_nodes(ticket.id, runs)
        .map_err(|e| killed_or(ticket, name, Status::unavailable(format!("`{name}`: {e}"))))?;
    let mut results = replies.results;
    let Ok(pids) = replies.started.await else {
        // A rank that could not start says why; so does a job killed meanwhile.
        let failure = results
            .iter_mut()
            .enumerate()
            .find_map(|(rank, rx)| Some((rank, rx.try_recv().ok()?.err()?)));
        gang.close_spread(ticket.id, "a rank could not start");
        return Err(match failure {
            Some((rank, status)) => rank_failure(rank, size, status),
            None => killed_or(
                ticket,
                name,
                Status::unavailable(format!("`{name}`: its ranks did not start")),
            ),
        });
    };
    ticket.attach(pids, true).await;
    gang.start_node_ranks(ticket.id);
    let waits = results
        .into_iter()
        .enumerate()
        .map(|(rank, rx)| async move {
            let outcome = rx.await;
            gang.spread_rank_done(ticket.id, rank as u32);
            outcome
        });
    let outcomes = futures_util::future::join_all(waits).await;
    gang.close_spread(ticket.id, "");
    if let Some(reason) = ticket.killed() {
        return Err(Status::aborted(format!("`{name}`: {reason}")));
    }
    // A reply that never came (its agent went away) counts as the rank's failure.
    let outcomes = outcomes.into_iter().map(|outcome| {
        outcome.unwrap_or_else(|_| {
            Err(Status::aborted(format!(
                "`{name}`: lost with its node's agent"
            )))
        })
    });
    rank_zero_result(name, size, outcomes)
}

fn rank_failure(rank: usize, size: u32, status: Status) -> Status {
    Status::new(
        status.code(),
        format!("rank {rank} of {size}: {}", status.message()),
    )
}

/// Values of the IN integer scalars, which array sizes and the cost depend on.
fn integer_bindings(
    function: &FunctionInterface,
    arguments: &[v1::CallArgument],
) -> Result<BTreeMap<String, i64>, Status> {
    let mut bindings = BTreeMap::new();
    for (p, argument) in function.parameters.iter().zip(arguments) {
        if p.mode == Mode::In && !p.is_array() && p.element_type.is_integer() {
            let value = match &argument.source {
                Some(Source::Value(v1::ArgumentValue {
                    value: Some(WireValue::IntValue(v)),
                })) => *v,
                _ => {
                    return Err(bad(format!(
                        "argument `{}` of `{}` must be {} sent with the call",
                        p.name,
                        function.name,
                        p.element_type.with_article()
                    )));
                }
            };
            if !p.element_type.fits_integer(value) {
                return Err(bad(format!(
                    "argument `{}` of `{}`: {value} does not fit in {}",
                    p.name,
                    function.name,
                    p.element_type.with_article()
                )));
            }
            bindings.insert(p.name.clone(), value);
        }
    }
    Ok(bindings)
}

fn kept_outputs(function: &FunctionInterface, keep: &[u32]) -> Result<HashSet<u32>, Status> {
    let mut set = HashSet::new();
    for &index in keep {
        match function.parameters.get(index as usize) {
            Some(p) if p.mode.is_output() && p.is_array() => {
                set.insert(index);
            }
            Some(p) => {
                return Err(bad(format!(
                    "cannot keep `{}` of `{}` in storage: it is not an OUT or INOUT array",
                    p.name, function.name
                )));
            }
            None => {
                return Err(bad(format!(
                    "cannot keep parameter {index} of `{}`: it has {} parameters",
                    function.name,
                    function.parameters.len()
                )));
            }
        }
    }
    Ok(set)
}

/// Reads an object from this server's storage, borrows it where it lies from another server
/// of this host, or streams it from another server's.
pub(crate) async fn fetch(
    state: &ServerState,
    object: &v1::ObjectRef,
) -> Result<v1::Array, String> {
    if object.server.is_empty() || object.server == state.advertise {
        let (info, data) = state
            .store
            .get(&object.object_id)
            .map_err(|e| e.to_string())?;
        return Ok(v1::Array {
            element_type: element_type_to_proto(info.element_type).into(),
            data,
        });
    }
    // A holder on this host lends the array where it lies (storage::borrowing).
    let holder = state.peer(&object.server);
    if let Some(array) = state
        .borrowing
        .borrow(object, &state.credentials(), holder)
        .await
    {
        return Ok(array);
    }
    let channel = state.peer(&object.server).await?;
    let mut client =
        v1::storage_client::StorageClient::new(authorized(channel, &state.credentials()))
            .max_decoding_message_size(usize::MAX)
            .max_encoding_message_size(usize::MAX);
    let mut stream = client
        .get(v1::GetRequest {
            object_id: object.object_id.clone(),
        })
        .await
        .map_err(|s| s.message().to_string())?
        .into_inner();
    let mut element_type = 0;
    let mut data = BytesMut::new();
    let mut first = true;
    while let Some(chunk) = stream
        .message()
        .await
        .map_err(|s| s.message().to_string())?
    {
        if first {
            element_type = chunk.element_type;
            if chunk.total_bytes > state.max_request_bytes {
                return Err(format!(
                    "object of {} bytes exceeds this server's limit of {} bytes",
                    chunk.total_bytes, state.max_request_bytes
                ));
            }
            data.reserve(chunk.total_bytes as usize);
            first = false;
        }
        data.extend_from_slice(&chunk.data);
    }
    Ok(v1::Array {
        element_type,
        data: data.freeze(),
    })
}
