//! The C client (`libninf.so`, `libninf.a`): the GridRPC end-user API of GFD-R.52
//! (`include/grpc.h`), its data-management API of GFD.186 (`include/grpc_data.h`), and Ninf's own `Ninf_call` (`include/ninf.h`), over the Rust client
//! library's async core. Calls through a function handle made by
//! `grpc_function_handle_default` go through the grid's proxy, which has the metaserver
//! place each one; a handle made by `grpc_function_handle_init` calls its named server
//! straight. Arrays are the caller's memory, named by address: read when a call starts,
//! written in place when it ends, never written by a call that failed or was cancelled.
//!
//! Every exported function checks what C hands it (null pointers, handles it never made,
//! session ids it never issued) and answers with an error code; none unwinds into C.

mod argstack;
mod codes;
mod data;
mod data_api;
mod ffi;
mod grpc_api;
mod handles;
mod library;
mod ninf_api;
mod sessions;
mod values;
