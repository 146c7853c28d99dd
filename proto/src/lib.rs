//! The Ninf grid's wire format: gRPC services and protobuf messages (compiled by `build.rs`
//! with `protox`, no system `protoc`), conversions between the IDL's interface descriptors
//! and their protobuf form, and the packed little-endian array encoding every component uses.

pub mod chunks;
pub mod clock;
pub mod copy;
pub mod descriptor;
pub mod net;
pub mod probe;
pub mod shutdown;
pub mod sync;
pub mod values;
pub mod version;

/// Generated protobuf messages and gRPC services, package `ninf.v1`.
#[allow(clippy::all, missing_docs)]
pub mod v1 {
    tonic::include_proto!("ninf.v1");
}

pub use descriptor::DescriptorError;
pub use values::{ArrayData, Element, ValueError};
