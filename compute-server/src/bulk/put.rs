//! Puts on a bulk connection (docs/bulk-protocol.md, "Puts"): a frame whose `put` names the
//! owner brings one `bulk` array, after the frame on the TCP port, in the connection's
//! region on the same-host socket, or lent where a same-host client put it. The server
//! stores it as `Storage.Put` would (`crate::storage::put`), with one copy of its bytes,
//! straight into the store region when there is room; gRPC's framing and the proxy's
//! chunking cost several.

use ninf_proto::v1::{self, call_argument::Source};
use tonic::Status;

use super::io::{BulkIo, Failure, bulk_bytes, refuse};
use super::lent::LentInput;
use crate::metrics::Path;
use crate::state::ServerState;
use crate::storage::put;
use crate::storage::region::Arriving;

/// What a put frame asks for, checked before any of its bytes are read.
struct Checked {
    element_type: ninf_idl::ElementType,
    bytes: usize,
    lent: Option<LentInput>,
}

/// Stores the put's array under `owner` and answers with the object; a refused put's bytes
/// are passed over, so the connection stays in step.
pub(super) async fn serve(
    state: &ServerState,
    (owner, path): (&str, Path),
    request: v1::CallRequest,
    io: &mut impl BulkIo,
) -> Result<u64, Failure> {
    let follow = bulk_bytes(&request);
    let checked = match check(state, &request, io) {
        Ok(checked) => checked,
        Err(status) if follow <= state.max_request_bytes => {
            return refuse(io, follow, status).await;
        }
        Err(status) => return Err(Failure::AnswerAndClose(status)),
    };
    let mut data = Arriving::new(state.store_region.as_ref(), checked.bytes as u64);
    let came_by = match &checked.lent {
        Some(input) => {
            let bytes = input.bytes(checked.bytes).ok_or_else(|| {
                Failure::Answer(Status::internal("a lent put outside its region"))
            })?;
            data.extend(bytes)
                .map_err(|e| Failure::Answer(Status::internal(e)))?;
            "lent"
        }
        None => {
            let place = data
                .take_place(checked.bytes)
                .map_err(|e| Failure::AnswerAndClose(Status::internal(e)))?;
            io.read_input(place).await?;
            path.label()
        }
    };
    let info =
        put::store(state, (owner, checked.element_type), data, came_by).map_err(Failure::Answer)?;
    let stored = v1::CallOutput {
        parameter: 0,
        result: Some(v1::call_output::Result::Object(v1::ObjectRef {
            server: state.advertise.clone(),
            object_id: info.id,
        })),
    };
    let reply = v1::BulkReply {
        result: Some(v1::bulk_reply::Result::Reply(v1::CallReply {
            outputs: vec![stored],
            ..Default::default()
        })),
        outputs_follow: false,
    };
    io.send(&reply, &[]).await?;
    Ok(0)
}

/// The put's one array: its type, its length within this server's limit, and where it lies
/// if lent.
fn check(
    state: &ServerState,
    request: &v1::CallRequest,
    io: &impl BulkIo,
) -> Result<Checked, Status> {
    let bulk = match request.arguments.as_slice() {
        [
            v1::CallArgument {
                source: Some(Source::Bulk(bulk)),
            },
        ] => bulk,
        [_] => return Err(Status::invalid_argument("a put's array must come in bulk")),
        many => {
            return Err(Status::invalid_argument(format!(
                "a put carries one array, not {} arguments",
                many.len()
            )));
        }
    };
    if bulk.bytes > state.max_request_bytes {
        return Err(Status::resource_exhausted(format!(
            "object exceeds this server's limit of {} bytes",
            state.max_request_bytes
        )));
    }
    let element_type = put::element_type(bulk.element_type).ok_or_else(|| {
        Status::invalid_argument("a put's array must name an element type of fixed size")
    })?;
    let bytes = usize::try_from(bulk.bytes)
        .map_err(|_| Status::resource_exhausted("a put larger than this host's memory"))?;
    let lent = match request.lent_arrays.as_slice() {
        [] => None,
        [array] if array.parameter == 0 => {
            let region = io.lent_region(&array.region).ok_or_else(|| {
                Status::invalid_argument(format!(
                    "the put's array: no region `{}` was lent on this connection",
                    array.region
                ))
            })?;
            let input = LentInput {
                region,
                offset: array.offset,
            };
            if input.bytes(bytes).is_none() {
                return Err(Status::invalid_argument(format!(
                    "the put's array: its {bytes} bytes at offset {} lie outside the lent region `{}` of {} bytes",
                    array.offset,
                    array.region,
                    input.region.len()
                )));
            }
            Some(input)
        }
        _ => {
            return Err(Status::invalid_argument(
                "a put names its one array (parameter 0) in a lent region at most once",
            ));
        }
    };
    Ok(Checked {
        element_type,
        bytes,
        lent,
    })
}
