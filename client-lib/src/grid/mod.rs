//! Calls through a client proxy, and Ninf transactions (the metaserver paper): calls between
//! `transaction_begin` and `end` are recorded, not run; the library links a call's IN argument
//! to the earlier call that wrote the same client buffer, computes each call's costs from the
//! interface descriptor and its actual scalars, and at the end sends the whole Network Task
//! graph with its input data to the proxy, which has it scheduled and run. When `end` returns,
//! every buffer the transaction wrote holds its final value.
//!
//! Buffers are registered with the transaction, which keeps them borrowed until it ends:
//! [`Transaction::input`] for data the routines only read, [`Transaction::buffer`] for data
//! they may write. The returned [`Buffer`] handles are what calls take, so "the same client
//! buffer" is the same handle, and Rust's borrow rules keep anyone else from touching the data
//! while the graph runs.
//!
//! ```no_run
//! # fn main() -> Result<(), ninf::CallError> {
//! use ninf::grid::{GridClient, TxArg};
//! let n = 100usize;
//! let (a, b, c, d) = (vec![1.0; n * n], vec![2.0; n * n], vec![3.0; n * n], vec![4.0; n * n]);
//! let (mut e, mut f, mut g) = (vec![0.0; n * n], vec![0.0; n * n], vec![0.0; n * n]);
//! let grid = GridClient::connect("127.0.0.1:7100")?;
//! let plan = grid.transaction(|tx| {
//!     let [a, b, c, d] = [&a, &b, &c, &d].map(|m| tx.input(m));
//!     let [e, f, g] = [&mut e, &mut f, &mut g].map(|m| tx.buffer(m));
//!     let n = TxArg::from(n as i64);
//!     tx.call("mmul", &[n.clone(), a.into(), b.into(), e.into()])?;
//!     tx.call("mmul", &[n.clone(), c.into(), d.into(), f.into()])?;
//!     tx.call("mmul", &[n, e.into(), f.into(), g.into()])?;
//!     Ok(())
//! })?;
//! println!("{plan}");
//! # Ok(()) }
//! ```

//!
//! [`AsyncGridClient`] is the async core (for async programs and the C and Python bindings,
//! which record over their own memory with [`ForeignTransaction`] and find the grid by its
//! [`GridFile`]);
//! [`GridClient`] is a thin blocking wrapper over it. Recording a transaction is pure
//! ([`Recording`]: no I/O, descriptors passed in); only looking up descriptors and running
//! the graph talk to the proxy.

mod async_client;
mod blocking;
mod data;
mod data_ref;
mod foreign;
mod grid_file;
mod plan;
mod progress;
mod recording;
mod renewal;
mod same_host;
mod transaction;

pub use crate::environment::{
    DEFAULT_RECONNECT_SECONDS, RECONNECT_SECONDS_ENV, SAME_HOST_UPLOADS_ENV, TLS_CA_ENV,
    TLS_CERTIFICATE_ENV, TLS_KEY_ENV, TOKEN_FILE_ENV,
};
pub use async_client::AsyncGridClient;
pub use blocking::GridClient;
pub use data_ref::{DataInfo, DataMode, DataRef, Shape};
pub use foreign::{ForeignArg, ForeignArray, ForeignRun, ForeignTransaction};
pub use grid_file::{GRID_FILE_ENV, GridFile, GridFileError, default_data_dir, default_grid_file};
pub use ninf_proto::net::tls::GridTls;
pub use plan::{Plan, TaskPlan};
pub use progress::{Progress, ProgressCallback};
pub use recording::{Buffer, RecordedGraph, Recording, TxArg};
pub use transaction::Transaction;
