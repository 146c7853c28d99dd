//! Data kept on the grid between transactions (the GridRPC data-management API, GFD.186;
//! docs/data.md): the metaserver's record of every handle, kept in the resource DB
//! (`store.rs`) so that a handle outlives the proxy that made it and a fail-over. The
//! decisions here are pure: which server a new handle's data goes to, and which replicas
//! make room for it under a server's data cap (`room.rs`), and which persistent handles are
//! short of their replicas after a server was lost (`repair.rs`).

pub mod repair;
pub mod room;
pub mod store;

use ninf_proto::v1;

pub use room::{Kept, Remaining};

/// A server that may take a new handle's data, as the registry and the records see it now.
#[derive(Debug, Clone, PartialEq)]
pub struct Holder<'a> {
    pub address: &'a str,
    /// Bytes its storage holds (its latest load sample).
    pub stored_bytes: u64,
    /// Free memory on its host (its latest load sample); 0: unknown.
    pub free_memory_bytes: u64,
    /// Its cap on data kept on the grid; 0: none.
    pub data_cap_bytes: u64,
    /// The copies it keeps (and those being stored there), as the records say; only
    /// needed under a cap.
    pub kept: Vec<Kept>,
}

/// Where one copy of a new handle goes, and the replicas that server drops for it.
#[derive(Debug, Clone, PartialEq)]
pub struct Placed<'a> {
    pub address: &'a str,
    pub evicted: Vec<String>,
}

/// Why a handle cannot be made.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PlaceError {
    #[error("no compute server is up to keep data")]
    NoServer,
    #[error(
        "no server has room for {bytes} bytes: the most any up server can take is {largest} \
         bytes (its free memory, or its data cap less the last copies of handles it keeps)"
    )]
    NoRoom { bytes: u64, largest: u64 },
    #[error("{copies} copies need as many up servers with room; {servers} have it")]
    TooFewServers { copies: usize, servers: usize },
}

/// Where a new handle of `bytes` goes: among the servers whose free memory (where known)
/// fits it and whose data cap fits it, replicas evicted if need be, the one that evicts the
/// fewest bytes, then the one holding the fewest stored bytes; ties go to the first, so the
/// choice is deterministic.
pub fn choose_holder<'a>(
    holders: &[Holder<'a>],
    bytes: u64,
    remaining: &Remaining,
) -> Result<Placed<'a>, PlaceError> {
    if holders.is_empty() {
        return Err(PlaceError::NoServer);
    }
    let fits = |h: &&Holder| h.free_memory_bytes == 0 || h.free_memory_bytes >= bytes;
    holders
        .iter()
        .filter(fits)
        .filter_map(|h| {
            let evicted = room::evictions(h.data_cap_bytes, &h.kept, bytes, remaining)?;
            let freed: u64 = evicted.iter().map(|k| k.bytes).sum();
            let evicted = evicted.into_iter().map(|k| k.handle.clone()).collect();
            Some(((freed, h.stored_bytes), h.address, evicted))
        })
        .min_by_key(|(key, _, _)| *key)
        .map(|(_, address, evicted)| Placed { address, evicted })
        .ok_or(PlaceError::NoRoom {
            bytes,
            largest: holders
                .iter()
                .map(|h| {
                    let memory = match h.free_memory_bytes {
                        0 => u64::MAX,
                        free => free,
                    };
                    memory.min(room::room(h.data_cap_bytes, &h.kept, remaining))
                })
                .max()
                .unwrap_or(0),
        })
}

/// Where a new handle's `copies` copies of `bytes` go: each on a server of its own, chosen
/// by [`choose_holder`] among those not yet chosen, no handle losing its last copy to the
/// evictions of all of them.
pub fn choose_holders<'a>(
    holders: &[Holder<'a>],
    bytes: u64,
    copies: usize,
) -> Result<Vec<Placed<'a>>, PlaceError> {
    let mut left: Vec<Holder<'a>> = holders.to_vec();
    let mut chosen: Vec<Placed<'a>> = Vec::with_capacity(copies);
    let mut remaining = Remaining::new();
    while chosen.len() < copies {
        match choose_holder(&left, bytes, &remaining) {
            Ok(placed) => {
                let address = placed.address;
                let on = left.iter().find(|h| h.address == address);
                for handle in &placed.evicted {
                    let copies = on
                        .and_then(|h| h.kept.iter().find(|k| &k.handle == handle))
                        .map_or(1, |k| k.copies);
                    let count = remaining.entry(handle.clone()).or_insert(copies);
                    *count = count.saturating_sub(1);
                }
                left.retain(|h| h.address != address);
                chosen.push(placed);
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
            data_cap_bytes: 0,
            kept: Vec::new(),
        }
    }

    fn at(address: &str) -> Placed<'_> {
        Placed {
            address,
            evicted: Vec::new(),
        }
    }

    fn capped<'a>(address: &'a str, cap: u64, kept: &[(&str, u64, usize, f64)]) -> Holder<'a> {
        Holder {
            data_cap_bytes: cap,
            kept: kept
                .iter()
                .map(|&(handle, bytes, copies, used_at)| Kept {
                    handle: handle.into(),
                    bytes,
                    copies,
                    used_at,
                })
                .collect(),
            ..holder(address, kept.iter().map(|k| k.1).sum(), 0)
        }
    }

    #[test]
    fn new_data_goes_to_the_server_holding_least_that_has_room() {
        let none = Remaining::new();
        let holders = [
            holder("a", 500, 10_000),
            holder("b", 100, 50),
            holder("c", 200, 0),
        ];
        assert_eq!(
            choose_holder(&holders, 60, &none),
            Ok(at("c")),
            "b has no room; c's is unknown"
        );
        assert_eq!(choose_holder(&holders, 10, &none), Ok(at("b")));
        assert_eq!(choose_holder(&[], 10, &none), Err(PlaceError::NoServer));
        let full = [holder("a", 0, 10), holder("b", 0, 20)];
        let refused = choose_holder(&full, 30, &none).unwrap_err();
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
        assert_eq!(choose_holders(&holders, 10, 2), Ok(vec![at("b"), at("c")]));
        assert_eq!(
            choose_holders(&holders, 10, 3),
            Ok(vec![at("b"), at("c"), at("a")])
        );
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
    fn under_caps_a_server_with_room_wins_over_one_that_must_evict_then_the_least_evicted() {
        let none = Remaining::new();
        let holders = [
            capped("a", 100, &[("r1", 60, 2, 1.0)]),
            capped("b", 100, &[("r2", 30, 2, 5.0), ("r3", 30, 2, 6.0)]),
        ];
        // 40 fits on a as it is, though a holds more.
        assert_eq!(choose_holder(&holders, 40, &none), Ok(at("a")));
        // 50 fits nowhere as it is: b drops 30 (r2, its older), a would drop 60.
        let placed = choose_holder(&holders, 50, &none).unwrap();
        assert_eq!(
            (placed.address, placed.evicted),
            ("b", vec!["r2".to_string()])
        );
        let refused = choose_holder(&[capped("a", 100, &[("last", 60, 1, 0.0)])], 50, &none);
        assert_eq!(
            refused.unwrap_err().to_string(),
            "no server has room for 50 bytes: the most any up server can take is 40 bytes \
             (its free memory, or its data cap less the last copies of handles it keeps)"
        );
    }

    #[test]
    fn two_copies_placed_together_never_evict_both_copies_of_one_handle() {
        // `h` is on a and b, nothing else: a 2-copy put that needs both servers to evict
        // may drop `h` from one of them only.
        let holders = [
            capped("a", 100, &[("h", 60, 2, 0.0)]),
            capped("b", 100, &[("h", 60, 2, 0.0)]),
        ];
        let refused = choose_holders(&holders, 50, 2).unwrap_err();
        assert_eq!(
            refused,
            PlaceError::TooFewServers {
                copies: 2,
                servers: 1
            }
        );
        let one = choose_holders(&holders, 50, 1).unwrap();
        assert_eq!(one[0].evicted, vec!["h".to_string()]);
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
