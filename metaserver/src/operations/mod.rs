//! The metaserver's operations, one module per request (the metaserver paper's steps 0-5), each an
//! `impl Metaserver` block over the shared state in `lib.rs`.

pub mod actuals;
pub mod alloc;
pub mod data;
pub mod data_repair;
pub mod heartbeat;
pub mod leave;
pub mod network;
pub mod register;
pub mod schedule;
pub mod status;
pub mod upkeep;
