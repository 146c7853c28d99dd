//! Data kept on the grid between transactions (the GridRPC data-management API, GFD.186;
//! docs/data.md): the metaserver's record of every handle, kept in the resource DB
//! (`store.rs`) so that a handle outlives the proxy that made it and a fail-over. The
//! decisions here are pure: which server a new handle's data goes to, and which handles'
//! leases have run out.

pub mod store;

use ninf_proto::v1;

/// A server that may take a new handle's data, as the registry sees it now.
#[derive(Debug, Clone, PartialEq)]
pub struct Holder<'a> {
    pub address: &'a str,
    /// Bytes its storage holds (its latest load sample).
    pub stored_bytes: u64,
    /// Free memory on its host (its latest load sample); 0: unknown.
    pub free_memory_bytes: u64,
}

/// Why a handle cannot be made.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PlaceError {
    #[error("no compute server is up to keep data")]
    NoServer,
    #[error(
        "no server has room for {bytes} bytes: the most free memory any up server reports is \
         {largest} bytes"
    )]
    NoRoom { bytes: u64, largest: u64 },
    #[error("{copies} copies need as many up servers with room; {servers} have it")]
    TooFewServers { copies: usize, servers: usize },
}

/// Where a new handle of `bytes` goes: the server holding the fewest stored bytes among
/// those whose free memory (where known) fits it; ties go to the first, so the choice is
/// deterministic.
pub fn choose_holder<'a>(holders: &[Holder<'a>], bytes: u64) -> Result<&'a str, PlaceError> {
    if holders.is_empty() {
        return Err(PlaceError::NoServer);
    }
    let fits = |h: &&Holder| h.free_memory_bytes == 0 || h.free_memory_bytes >= bytes;
    holders
        .iter()
        .filter(fits)
        .min_by_key(|h| h.stored_bytes)
        .map(|h| h.address)
        .ok_or(PlaceError::NoRoom {
            bytes,
            largest: holders
                .iter()
                .map(|h| h.free_memory_bytes)
                .max()
                .unwrap_or(0),
        })
}

/// Where a new handle's `copies` copies of `bytes` go: each on a server of its own, chosen
/// by [`choose_holder`] among those not yet chosen.
pub fn choose_holders<'a>(
    holders: &[Holder<'a>],
    bytes: u64,
    copies: usize,
) -> Result<Vec<&'a str>, PlaceError> {
    let mut left: Vec<Holder<'a>> = holders.to_vec();
    let mut chosen = Vec::with_capacity(copies);
    while chosen.len() < copies {
        match choose_holder(&left, bytes) {
            Ok(address) => {
                chosen.push(address);
                left.retain(|h| h.address != address);
            }
            Err(_) if !chosen.is_empty() => {
                return Err(PlaceError::TooFewServers {
                    copies,
                    servers: chosen.len(),
                });
            }
            Err(e) => return Err(e),
        }
    }
    Ok(chosen)
}

/// Checks a client's spec: a known element type and a size that is a whole number of
/// elements.
pub fn check_spec(spec: &v1::DataSpec) -> Result<(), String> {
    let element = v1::ElementType::try_from(spec.element_type)
        .ok()
        .filter(|t| *t != v1::ElementType::Unspecified)
        .ok_or_else(|| format!("unknown element type {}", spec.element_type))?;
    let size = element_size(element)
        .ok_or_else(|| format!("{element:?} is not an array's element type"))?;
    if !spec.bytes.is_multiple_of(size) {
        return Err(format!(
            "{} bytes is not a whole number of {size}-byte elements",
            spec.bytes
        ));
    }
    let elements: u64 = spec.shape.iter().product();
    if !spec.shape.is_empty() && elements * size != spec.bytes {
        return Err(format!(
            "shape {:?} holds {} bytes, not {}",
            spec.shape,
            elements * size,
            spec.bytes
        ));
    }
    Ok(())
}

fn element_size(element: v1::ElementType) -> Option<u64> {
    use v1::ElementType as E;
    match element {
        E::Char => Some(1),
        E::Short => Some(2),
        E::Int | E::Float => Some(4),
        E::Long | E::Double | E::Scomplex => Some(8),
        E::Dcomplex => Some(16),
        E::Unspecified | E::String | E::Filename => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holder(address: &str, stored: u64, free: u64) -> Holder<'_> {
        Holder {
            address,
            stored_bytes: stored,
            free_memory_bytes: free,
        }
    }

    #[test]
    fn new_data_goes_to_the_server_holding_least_that_has_room() {
        let holders = [
            holder("a", 500, 10_000),
            holder("b", 100, 50),
            holder("c", 200, 0),
        ];
        assert_eq!(
            choose_holder(&holders, 60),
            Ok("c"),
            "b has no room; c's is unknown"
        );
        assert_eq!(choose_holder(&holders, 10), Ok("b"));
        assert_eq!(choose_holder(&[], 10), Err(PlaceError::NoServer));
        let full = [holder("a", 0, 10), holder("b", 0, 20)];
        let refused = choose_holder(&full, 30).unwrap_err();
        assert_eq!(
            refused,
            PlaceError::NoRoom {
                bytes: 30,
                largest: 20
            }
        );
        assert!(refused.to_string().contains("30 bytes"), "{refused}");
    }

    #[test]
    fn replicas_go_to_servers_of_their_own_or_are_refused() {
        let holders = [
            holder("a", 500, 0),
            holder("b", 100, 0),
            holder("c", 200, 0),
        ];
        assert_eq!(choose_holders(&holders, 10, 2), Ok(vec!["b", "c"]));
        assert_eq!(choose_holders(&holders, 10, 3), Ok(vec!["b", "c", "a"]));
        let refused = choose_holders(&holders, 10, 4).unwrap_err();
        assert_eq!(
            refused,
            PlaceError::TooFewServers {
                copies: 4,
                servers: 3
            }
        );
    }

    #[test]
    fn a_spec_must_be_whole_elements_of_its_shape() {
        let spec = |bytes, shape: Vec<u64>| v1::DataSpec {
            element_type: v1::ElementType::Double as i32,
            bytes,
            shape,
            ..Default::default()
        };
        assert!(check_spec(&spec(80, vec![2, 5])).is_ok());
        assert!(
            check_spec(&spec(81, vec![]))
                .unwrap_err()
                .contains("whole number")
        );
        assert!(
            check_spec(&spec(80, vec![3, 3]))
                .unwrap_err()
                .contains("shape")
        );
        let unknown = v1::DataSpec::default();
        assert!(check_spec(&unknown).unwrap_err().contains("element type"));
    }
}
