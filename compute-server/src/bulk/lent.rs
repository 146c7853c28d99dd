//! Bulk inputs that lie in regions a proxy lent on (docs/bulk-protocol.md, "Regions lent
//! on"): a proxy on the server's host names an input where its own client put it, in a
//! memory file it handed over on the same-host socket, instead of copying it into the
//! connection's region. The server passes that file on to the executable
//! (`ninf_executable::lent`), so the routine reads the input where the client wrote it.

use std::collections::HashMap;
use std::sync::Arc;

use ninf_idl::FunctionInterface;
use ninf_proto::net::local::SharedRegion;
use ninf_proto::v1::{self, call_argument::Source};
use tonic::Status;

/// A bulk input in a lent region: the region, and where the input starts in it.
#[derive(Clone)]
pub(super) struct LentInput {
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
pub(super) fn number_regions(
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
