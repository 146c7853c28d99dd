//! The crate's integration tests as one program: each file beside this one is a module of
//! it, so a test build links one program per crate instead of one per file (each such
//! link carries the crate's whole dependency tree, tens of megabytes in a debug build).
//! `cargo test -p PACKAGE --test integration FILE::` runs one file's tests.

mod binary;
mod common;
mod data_retries;
mod events;
mod failover;
mod off_lock;
mod planner;
mod recording;
mod resource_db;
mod server_list;
mod shortlist;
mod sites;
mod turns;
