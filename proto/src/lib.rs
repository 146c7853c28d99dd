//! tmp
pub mod v1 { tonic::include_proto!("ninf.v1"); }
