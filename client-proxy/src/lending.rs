//! Inputs lent on to a server on the proxy's host (docs/bulk-protocol.md, "Regions lent
//! on"): an array a client on this host put in a region it shares with the proxy is named
//! where it lies, and the region's memory file goes to the server with the call, instead of
//! the proxy copying the array into its connection's own region. The server passes the
//! file on to the routine's executable, so the bytes the client wrote are the bytes the
//! routine reads.
//!
//! Each connection hands a region over once and keeps a list of what the server holds
//! ([`Handed`]), at most [`MAX_HANDED`] of them, the least recently used let go first; a
//! region its client forgot is let go too.

use bytes::Bytes;
use ninf_proto::v1::{self, argument_value::Value as WireValue, call_argument::Source};

use crate::same_host::{Lendable, OutputLoan, SharedRegions};

/// Regions a server holds for one connection at most (the server allows 32).
pub(crate) const MAX_HANDED: usize = 16;

/// Arrays smaller than this are copied: lending costs the server a file and the executable
/// a mapping, which only pays for large arrays.
pub(crate) const MIN_LENT: usize = 256 << 10;

/// The regions a connection's server holds, by the names they were lent under, the most
/// recently used last.
#[derive(Debug, Default)]
pub(crate) struct Handed(Vec<String>);

impl Handed {
    /// Marks `name` used; whether it must be handed over (the server does not hold it).
    fn use_name(&mut self, name: &str) -> bool {
        match self.0.iter().position(|n| n == name) {
            Some(at) => {
                let name = self.0.remove(at);
                self.0.push(name);
                false
            }
            None => {
                self.0.push(name.to_string());
                true
            }
        }
    }

    /// Lets go of regions over [`MAX_HANDED`] and of those no longer `held`: their names,
    /// for the server to drop.
    fn trim(&mut self, held: impl Fn(&str) -> bool) -> Vec<String> {
        let mut dropped = Vec::new();
        self.0.retain(|name| {
            let keep = held(name);
            if !keep {
                dropped.push(name.clone());
            }
            keep
        });
        let over = self.0.len().saturating_sub(MAX_HANDED);
        dropped.extend(self.0.drain(..over));
        dropped
    }
}

/// What [`lend_arrays`] lent: the regions to hand over with the frame, and the lent arrays'
/// bytes, held until the server has answered (they hold the client's lease).
pub(crate) struct Lent {
    pub to_hand: Vec<Lendable>,
    /// Held, never read: dropping them ends the leases.
    pub _holding: Vec<Bytes>,
    /// The run's output region, lent for the call's outputs (`call.output_place`).
    pub output: Option<OutputLoan>,
}

/// Names every large array of `call` that lies in a client's region where it lies
/// (`call.lent_arrays`, its argument a `bulk` one), and sets `call.dropped_regions`.
pub(crate) fn lend_arrays(
    call: &mut v1::CallRequest,
    lender: &SharedRegions,
    handed: &mut Handed,
) -> Lent {
    let mut to_hand: Vec<Lendable> = Vec::new();
    let mut holding = Vec::new();
    for (parameter, argument) in call.arguments.iter_mut().enumerate() {
        let Some(Source::Value(v1::ArgumentValue {
            value: Some(WireValue::Array(array)),
        })) = &argument.source
        else {
            continue;
        };
        if array.data.len() < MIN_LENT {
            continue;
        }
        let Some(place) = lender.locate(&array.data) else {
            continue;
        };
        let new = !to_hand.iter().any(|l| l.name == place.name) && handed.use_name(&place.name);
        call.lent_arrays.push(v1::LentArray {
            parameter: parameter as u32,
            region: place.name.clone(),
            offset: place.offset,
        });
        let bulk = v1::BulkArray {
            element_type: array.element_type,
            bytes: array.data.len() as u64,
        };
        if new {
            to_hand.push(place);
        }
        if let Some(Source::Value(v1::ArgumentValue {
            value: Some(WireValue::Array(array)),
        })) = argument.source.take()
        {
            holding.push(array.data);
        }
        argument.source = Some(Source::Bulk(bulk));
    }
    let output = lend_output(call, lender, handed, &mut to_hand);
    let mut names: Vec<&str> = call.lent_arrays.iter().map(|l| l.region.as_str()).collect();
    names.extend(call.output_place.as_ref().map(|p| p.region.as_str()));
    call.dropped_regions = handed.trim(|name| names.contains(&name) || lender.still_held(name));
    Lent {
        to_hand,
        _holding: holding,
        output,
    }
}

/// Lends the run's output region the call's output place names on to the server, naming it
/// there by its lent name (handed over with the frame if the server does not hold it); drops
/// the place when the region cannot be lent (the outputs then come back as before).
fn lend_output(
    call: &mut v1::CallRequest,
    lender: &SharedRegions,
    handed: &mut Handed,
    to_hand: &mut Vec<Lendable>,
) -> Option<OutputLoan> {
    let place = call.output_place.as_mut()?;
    let Some(loan) = lender.lend_output(place) else {
        call.output_place = None;
        return None;
    };
    place.region = loan.lent_name().to_string();
    let new = !to_hand.iter().any(|l| l.name == place.region) && handed.use_name(&place.region);
    if new {
        to_hand.push(loan.lendable());
    }
    Some(loan)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_least_recently_used_and_the_forgotten_are_let_go() {
        let mut handed = Handed::default();
        for i in 0..MAX_HANDED {
            assert!(handed.use_name(&format!("r{i}")));
        }
        assert!(!handed.use_name("r0"), "held already: not handed again");
        assert!(handed.use_name("new"));
        // r1 is now the least recently used; r5 was forgotten by its client.
        let dropped = handed.trim(|name| name != "r5");
        assert_eq!(dropped, ["r5"]);
        assert!(handed.use_name("newer"));
        assert_eq!(handed.trim(|_| true), ["r1"]);
        assert_eq!(handed.0.len(), MAX_HANDED);
    }
}
