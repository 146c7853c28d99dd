//! Storing an array a client puts, whichever path its bytes came by: `Storage.Put`'s stream
//! of chunks, or a put frame on a bulk connection (`crate::bulk::put`). Both check the same
//! things in the same words and count the bytes by path.

use ninf_idl::ElementType;
use ninf_proto::descriptor::element_type_from_proto;
use ninf_proto::v1;
use tonic::Status;

use super::ObjectInfo;
use super::region::Arriving;
use crate::state::ServerState;

/// The element type a put names, if it names one of fixed size.
pub fn element_type(proto: i32) -> Option<ElementType> {
    v1::ElementType::try_from(proto)
        .ok()
        .and_then(element_type_from_proto)
        .filter(|t| t.size_bytes().is_some())
}

/// Stores the whole array `data` under `owner`, counting its bytes as come by `path`
/// (`ninf_put_bytes`); an error when fewer bytes came than were announced.
pub fn store(
    state: &ServerState,
    (owner, element_type): (&str, ElementType),
    data: Arriving,
    path: &'static str,
) -> Result<ObjectInfo, Status> {
    let region = state.store_region.as_ref();
    let (data, copied) = data.finish(region).map_err(Status::invalid_argument)?;
    if copied {
        state.metrics.store_region("copied_in", data.len() as u64);
    }
    let bytes = data.len() as u64;
    let info = state
        .store
        .put(owner, element_type, data)
        .map_err(|e| e.status())?;
    state.touch(owner);
    state.metrics.put(path, bytes);
    Ok(info)
}
