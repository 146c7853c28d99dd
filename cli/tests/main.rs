//! The crate's integration tests as one program: each file beside this one is a module of
//! it, so a test build links one program per crate instead of one per file (each such
//! link carries the crate's whole dependency tree, tens of megabytes in a debug build).
//! `cargo test -p PACKAGE --test integration FILE::` runs one file's tests.

mod common;
mod dag_bench;
mod demo;
mod deploy;
mod install;
mod load;
mod scale;
mod signals;
mod status;
mod testbed;
mod traces;
mod versions;
