//! The Ninf client library (crate `ninf`): [`ninf_call`] with a `ninf://host:port/function`
//! URL, a [`Client`] bound to a server with GridRPC-style asynchronous calls, the async core
//! [`NinfClient`], and what every way of calling shares: positional arguments ([`Arg`]), the
//! [`Caller`] trait generated stubs call, and the checking of arguments against the
//! routine's interface descriptor before anything is sent ([`encode_arguments`]).

pub mod args;
pub mod blocking;
mod bulk_reply;
mod environment;
pub mod error;
pub mod foreign_call;
pub mod grid;
pub mod local;
pub mod memory;
pub mod remote;
pub mod runtime;
mod same_host;

pub use args::{Arg, ArrayMut, ArrayRef, CallOutcome, decode_outputs, encode_arguments};
pub use blocking::{CallResult, Client, OwnedArg, SessionId, ninf_call};
pub use error::{CallError, ErrorKind};
pub use foreign_call::ForeignCall;
pub use grid::{AsyncGridClient, Buffer, GridClient, Plan, Transaction, TxArg};
pub use ninf_idl::ElementType;
pub use num_complex;
pub use remote::NinfClient;

/// Something that can run a routine by name with positional arguments: a server connection,
/// a transaction being recorded, or a local executable. OUT and INOUT arrays are written back
/// into the caller's mutable slices.
pub trait Caller {
    fn call(&mut self, function: &str, args: &mut [Arg<'_>]) -> Result<CallOutcome, CallError>;
}
