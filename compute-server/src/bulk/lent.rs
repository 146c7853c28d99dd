//! Bulk inputs that lie in regions a proxy lent on (docs/bulk-protocol.md, "Regions lent
//! on"): a proxy on the server's host names an input where its own client put it, in a
//! memory file it handed over on the same-host socket, instead of copying it into the
//! connection's region. The server passes that file on to the executable
//! (`ninf_executable::lent`), so the routine reads the input where the client wrote it.
//!
//! The connection's own region goes to the executable the same way for the call's outputs:
//! the routine writes each large one where the server would have copied it for the proxy
//! ([`output_places`]).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use ninf_executable::shared::{REGION_ALIGN, REGION_ARRAY_THRESHOLD};
use ninf_idl::FunctionInterface;
use ninf_proto::descriptor::element_type_to_proto;
use ninf_proto::net::local::SharedRegion;
use ninf_proto::v1::{self, call_argument::Source};
use tonic::Status;

/// A bulk input in a lent region: the region, and where the input starts in it.
#[derive(Clone)]
pub(crate) struct LentInput {
    pub region: Arc<SharedRegion>,
    pub offset: u64,
}

impl LentInput {
    /// The input's bytes, for an executable that takes no lent files (copied then).
    pub fn bytes(&self, len: usize) -> Option<&[u8]> {
        let start = usize::try_from(self.offset).ok()?;
        self.region.bytes().get(start..start.checked_add(len)?)
    }
}

/// The request's lent inputs by parameter, each checked: a `bulk` argument, in a region lent
/// on this connection (`lent`), whole inside it.
pub(super) fn lent_inputs(
    function: &FunctionInterface,
    request: &v1::CallRequest,
    lent: impl Fn(&str) -> Option<Arc<SharedRegion>>,
) -> Result<HashMap<u32, LentInput>, Status> {
    let mut inputs = HashMap::new();
    for array in &request.lent_arrays {
        let parameter = array.parameter;
        let name = function
            .parameters
            .get(parameter as usize)
            .map_or_else(|| format!("#{parameter}"), |p| p.name.clone());
        let bytes = match request
            .arguments
            .get(parameter as usize)
            .and_then(|a| a.source.as_ref())
        {
            Some(Source::Bulk(bulk)) => bulk.bytes,
            _ => {
                return Err(Status::invalid_argument(format!(
                    "argument `{name}` of `{}` is named in a lent region but not sent in bulk",
                    function.name
                )));
            }
        };
        let region = lent(&array.region).ok_or_else(|| {
            Status::invalid_argument(format!(
                "argument `{name}` of `{}`: no region `{}` was lent on this connection",
                function.name, array.region
            ))
        })?;
        let inside = array
            .offset
            .checked_add(bytes)
            .is_some_and(|end| end <= region.len() as u64);
        if !inside {
            return Err(Status::invalid_argument(format!(
                "argument `{name}` of `{}`: its {bytes} bytes at offset {} lie outside the lent region `{}` of {} bytes",
                function.name,
                array.offset,
                array.region,
                region.len()
            )));
        }
        let input = LentInput {
            region,
            offset: array.offset,
        };
        if inputs.insert(parameter, input).is_some() {
            return Err(Status::invalid_argument(format!(
                "argument `{name}` of `{}` is named in a lent region twice",
                function.name
            )));
        }
    }
    Ok(inputs)
}

/// The distinct regions of `inputs` in the order the request names them; each input's
/// entry for the executable's `lent_arrays` names its region by that position.
pub(crate) fn number_regions(
    inputs: &[(u32, i32, u64, LentInput)],
) -> (Vec<Arc<SharedRegion>>, Vec<v1::RegionArray>) {
    let mut regions: Vec<Arc<SharedRegion>> = Vec::new();
    let mut arrays = Vec::with_capacity(inputs.len());
    for (parameter, element_type, bytes, input) in inputs {
        let lent = match regions.iter().position(|r| Arc::ptr_eq(r, &input.region)) {
            Some(at) => at,
            None => {
                regions.push(input.region.clone());
                regions.len() - 1
            }
        };
        arrays.push(v1::RegionArray {
            parameter: *parameter,
            element_type: *element_type,
            offset: input.offset,
            bytes: *bytes,
            region: v1::ArrayRegion::Own.into(),
            lent: lent as u32,
        });
    }
    (regions, arrays)
}

/// Where the call's outputs go in the connection's region of `region_len` bytes, which the
/// server sends them through (`LocalIo::send`): every output not kept, one after another
/// from the region's start in parameter order. The large ones on a 64-byte boundary are
/// asked of the routine there (`ExecRequest.lent_outputs`, their `lent` still to be set);
/// none when the outputs do not fit the region (they then follow the reply on the socket).
/// `outputs` are the call's (parameter, bytes), `keep` those it keeps in storage.
pub(super) fn output_places(
    (function, outputs, keep): (&FunctionInterface, &[(u32, u64)], &HashSet<u32>),
    region_len: usize,
) -> Vec<v1::RegionArray> {
    let mut offset = 0u64;
    let mut places = Vec::new();
    for &(parameter, bytes) in outputs {
        if keep.contains(&parameter) {
            continue;
        }
        let large = bytes >= REGION_ARRAY_THRESHOLD as u64;
        if large && offset.is_multiple_of(REGION_ALIGN as u64) {
            places.push(asked_place(function, parameter, offset, bytes));
        }
        offset = offset.saturating_add(bytes);
    }
    if offset > region_len as u64 {
        return Vec::new();
    }
    places
}

/// The place asked of the routine for output `parameter` of `function`: `bytes` at
/// `offset` in a lent file (its `lent` still to be set).
fn asked_place(
    function: &FunctionInterface,
    parameter: u32,
    offset: u64,
    bytes: u64,
) -> v1::RegionArray {
    let element_type = function
        .parameters
        .get(parameter as usize)
        .map_or(0, |p| element_type_to_proto(p.element_type).into());
    v1::RegionArray {
        parameter,
        element_type,
        offset,
        bytes,
        region: v1::ArrayRegion::Own.into(),
        lent: 0,
    }
}

/// Where the call's outputs go in the lent region `region` of `region_len` bytes that
/// `place` names (a proxy's client's own output region): each output `place.parameters`
/// names and the call does not keep, one after another from `place.offset`, each on a
/// 64-byte boundary, while they fit in `place.bytes`; outputs too small to place, or that do
/// not fit, come back as they would without a place. An error when the place lies outside
/// the region.
pub(super) fn output_places_at(
    (function, outputs, keep): (&FunctionInterface, &[(u32, u64)], &HashSet<u32>),
    place: &v1::OutputPlace,
    region_len: usize,
) -> Result<Vec<v1::RegionArray>, Status> {
    let end = place
        .offset
        .checked_add(place.bytes)
        .filter(|&end| end <= region_len as u64)
        .ok_or_else(|| {
            Status::invalid_argument(format!(
                "output place of `{}`: bytes {}..{} lie outside the lent region `{}` of {region_len} bytes",
                function.name,
                place.offset,
                place.offset.saturating_add(place.bytes),
                place.region
            ))
        })?;
    let mut cursor = place.offset;
    let mut places = Vec::new();
    for &(parameter, bytes) in outputs {
        if keep.contains(&parameter) || !place.parameters.contains(&parameter) {
            continue;
        }
        let start = cursor.next_multiple_of(REGION_ALIGN as u64);
        let fits = start.checked_add(bytes).is_some_and(|e| e <= end);
        if bytes < REGION_ARRAY_THRESHOLD as u64 || !fits {
            continue;
        }
        places.push(asked_place(function, parameter, start, bytes));
        cursor = start + bytes;
    }
    Ok(places)
}

/// Moves the reply's outputs the routine wrote into lent `files` among its outputs, as the
/// bytes where they lie; the bytes so written. Outputs elsewhere (the store region) stay
/// described.
pub(super) fn claim_outputs(
    success: &mut v1::ExecSuccess,
    files: &[Arc<SharedRegion>],
    name: &str,
) -> Result<u64, Status> {
    let (lent, others): (Vec<_>, Vec<_>) = std::mem::take(&mut success.region_outputs)
        .into_iter()
        .partition(|a| a.region == v1::ArrayRegion::Lent as i32);
    success.region_outputs = others;
    let mut written = 0;
    for output in lent {
        let span = usize::try_from(output.offset).ok().and_then(|start| {
            let end = start.checked_add(usize::try_from(output.bytes).ok()?)?;
            files.get(output.lent as usize)?.view(start, end)
        });
        let Some(data) = span else {
            return Err(Status::internal(format!(
                "`{name}` put output {} in lent file {} at bytes {}..{}, outside what was lent",
                output.parameter,
                output.lent,
                output.offset,
                output.offset.saturating_add(output.bytes)
            )));
        };
        written += output.bytes;
        success.outputs.push(v1::ExecOutput {
            parameter: output.parameter,
            value: Some(v1::ArgumentValue {
                value: Some(v1::argument_value::Value::Array(v1::Array {
                    element_type: output.element_type,
                    data,
                })),
            }),
        });
    }
    success.outputs.sort_by_key(|o| o.parameter);
    Ok(written)
}
