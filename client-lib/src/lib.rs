//! The Ninf client library (crate `ninf`). Today it holds what every way of calling a routine
//! shares: positional arguments ([`Arg`]), the [`Caller`] trait that generated stubs call,
//! and the checking of arguments against an interface descriptor before anything is sent
//! ([`encode_arguments`]) and of results after ([`decode_outputs`]).

pub mod args;
pub mod error;
pub mod local;

pub use args::{Arg, ArrayMut, ArrayRef, CallOutcome, decode_outputs, encode_arguments};
pub use error::{CallError, ErrorKind};
pub use num_complex;

/// Something that can run a routine by name with positional arguments: a server connection,
/// a transaction being recorded, or a local executable. OUT and INOUT arrays are written back
/// into the caller's mutable slices.
pub trait Caller {
    fn call(&mut self, function: &str, args: &mut [Arg<'_>]) -> Result<CallOutcome, CallError>;
}
