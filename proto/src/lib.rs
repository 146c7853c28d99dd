//! The Ninf grid's wire format: gRPC services and protobuf messages (compiled by `build.rs`
//! with `protox`, no system `protoc`), conversions between the IDL's interface descriptors
//! and their protobuf form, and the packed little-endian array encoding every component uses.

pub mod auth;
pub mod descriptor;
pub mod probe;
pub mod shutdown;
pub mod tls;
pub mod values;

/// Generated protobuf messages and gRPC services, package `ninf.v1`.
#[allow(clippy::all, missing_docs)]
pub mod v1 {
    tonic::include_proto!("ninf.v1");
}

/// HTTP/2 flow-control window every Ninf server and client uses (bytes). HTTP/2's defaults
/// (64 KiB windows, 16 KiB frames) make a large array crawl through thousands of
/// flow-control round trips; moving arrays is what Ninf does.
pub const HTTP2_WINDOW: u32 = 16 << 20;
/// HTTP/2 frame size every Ninf server and client uses (the protocol allows up to 16 MiB - 1).
pub const HTTP2_FRAME: u32 = 1 << 20;
/// How often a connection between grid components is pinged (HTTP/2 PING) by default.
pub const KEEPALIVE_INTERVAL: std::time::Duration = std::time::Duration::from_secs(5);
/// A ping unanswered this long drops the connection. A hung peer, or a path that silently
/// drops packets, keeps the TCP connection open; without pings a call to it waits forever.
pub const KEEPALIVE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

pub use descriptor::DescriptorError;
pub use values::{ArrayData, Element, ValueError};
