//! One call of a named server's routine over memory another language owns: the C client's
//! function handles bound to a server (`grpc_function_handle_init`) call it straight, not
//! through a proxy. The arguments are checked and encoded when the call is made (GridRPC
//! lets the caller reuse IN arrays once the call has started), and nothing is written into
//! the caller's arrays until [`ForeignCall::finish`], so a call cancelled before then writes
//! nothing.

use std::sync::Arc;

use ninf_idl::FunctionInterface;
use ninf_proto::v1;

use crate::grid::{ForeignArg, ForeignArray};
use crate::remote::decode_reply;
use crate::{Arg, CallError, CallOutcome, NinfClient};

/// A call being made.
#[derive(Debug)]
pub struct ForeignCall {
    interface: Arc<FunctionInterface>,
    args: Vec<ForeignArg>,
    request: Option<v1::CallRequest>,
}

impl ForeignCall {
    /// Checks `args` against `interface` and encodes them for `client`. Arrays the routine
    /// writes may not overlap another argument.
    pub fn new(
        client: &NinfClient,
        interface: Arc<FunctionInterface>,
        args: Vec<ForeignArg>,
    ) -> Result<ForeignCall, CallError> {
        crate::args::check_argument_count(&interface, args.len())?;
        check_overlaps(&interface, &args)?;
        let mut call = ForeignCall {
            interface,
            args,
            request: None,
        };
        let interface = call.interface.clone();
        call.request = Some(client.request_for(&interface, &call.views())?);
        Ok(call)
    }

    /// Sends the call to `client`'s server (once) and waits for its reply.
    pub async fn send(&mut self, client: &NinfClient) -> Result<v1::CallReply, CallError> {
        let request = self
            .request
            .take()
            .ok_or_else(|| CallError::bad_argument("this call was already sent"))?;
        client.call_request(request).await
    }

    /// Writes the reply's outputs into the caller's OUT and INOUT arrays.
    pub fn finish(mut self, reply: v1::CallReply) -> Result<CallOutcome, CallError> {
        let interface = self.interface.clone();
        decode_reply(&interface, reply, &mut self.views())
    }

    /// The arguments as the client library's views: arrays the routine writes as mutable
    /// slices, the others read-only.
    fn views(&mut self) -> Vec<Arg<'_>> {
        self.args
            .iter_mut()
            .map(|arg| match arg {
                ForeignArg::Integer(v) => Arg::Integer(*v),
                ForeignArg::Real(v) => Arg::Real(*v),
                ForeignArg::Complex(v) => Arg::Complex(*v),
                ForeignArg::Text(s) => Arg::Text(s),
                ForeignArg::File(p) => Arg::File(p),
                ForeignArg::Array(array) => {
                    if array.writable() {
                        // SAFETY: `ForeignArray::new`'s contract keeps the memory alive and
                        // ours, and `new` refused written arrays that overlap any other
                        // argument, so this is the only view of it.
                        Arg::Out(unsafe { array.view_mut() })
                    } else {
                        Arg::In(array.view())
                    }
                }
                ForeignArg::Work => Arg::Work,
                ForeignArg::Data(d) => Arg::Data {
                    element_type: d.element_type(),
                    len: d.len(),
                },
            })
            .collect()
    }
}

/// Refuses an array the routine writes that overlaps another array argument: the two views
/// of one memory would alias.
fn check_overlaps(interface: &FunctionInterface, args: &[ForeignArg]) -> Result<(), CallError> {
    let arrays: Vec<(&str, &ForeignArray)> = interface
        .parameters
        .iter()
        .zip(args)
        .filter_map(|(p, a)| match a {
            ForeignArg::Array(array) => Some((p.name.as_str(), array)),
            _ => None,
        })
        .collect();
    for (i, (name, array)) in arrays.iter().enumerate() {
        for (other_name, other) in &arrays[..i] {
            if (array.writable() || other.writable()) && array.overlaps(other) {
                return Err(CallError::bad_argument(format!(
                    "arguments `{other_name}` and `{name}` of `{}` share memory and one of \
                     them is written; pass separate arrays",
                    interface.name
                )));
            }
        }
    }
    Ok(())
}
