//! The blocking connection to a client proxy, [`GridClient`]: single calls and transactions
//! over [`AsyncGridClient`] on the library's background runtime.

use std::sync::Arc;

use ninf_idl::FunctionInterface;
use ninf_proto::net::tls::GridTls;

use super::async_client::AsyncGridClient;
use super::plan::Plan;
use super::recording::TxArg;
use super::transaction::Transaction;
use crate::environment::tls_from_env;
use crate::runtime::runtime;
use crate::{Arg, CallError, CallOutcome};

/// A blocking connection to a client proxy, over [`AsyncGridClient`] on the library's
/// background runtime (so not for use inside an async runtime; it says so).
#[derive(Clone)]
pub struct GridClient {
    inner: AsyncGridClient,
}

impl GridClient {
    /// Connects to the proxy at `host:port` (or `ninf://host:port`); see
    /// [`AsyncGridClient::connect`].
    pub fn connect(url: &str) -> Result<GridClient, CallError> {
        GridClient::connect_with_tls(url, tls_from_env()?.as_ref())
    }

    /// See [`AsyncGridClient::connect_with_tls`].
    pub fn connect_with_tls(url: &str, tls: Option<&GridTls>) -> Result<GridClient, CallError> {
        let inner = runtime()?.block_on(AsyncGridClient::connect_with_tls(url, tls))?;
        Ok(GridClient { inner })
    }

    /// The blocking API over an async client already connected (by [`super::GridFile`],
    /// say).
    pub fn from_async(inner: AsyncGridClient) -> GridClient {
        GridClient { inner }
    }

    /// Presents this token to the proxy (the grid's `token` file holds it).
    pub fn with_token(self, token: &str) -> GridClient {
        GridClient {
            inner: self.inner.with_token(token),
        }
    }

    /// Sends a transaction again for up to `window` while the proxy is unreachable; see
    /// [`AsyncGridClient::with_reconnect`].
    pub fn with_reconnect(self, window: std::time::Duration) -> GridClient {
        GridClient {
            inner: self.inner.with_reconnect(window),
        }
    }

    /// Asks for this scheduler instead of the metaserver's configured one (experiments).
    pub fn with_scheduler(self, scheduler: &str) -> GridClient {
        GridClient {
            inner: self.inner.with_scheduler(scheduler),
        }
    }

    /// Follows every transaction: `callback` gets its progress as its tasks end (on the
    /// library's background runtime; keep it short).
    pub fn with_progress(
        self,
        callback: impl Fn(&super::Progress) + Send + Sync + 'static,
    ) -> GridClient {
        GridClient {
            inner: self.inner.with_progress(std::sync::Arc::new(callback)),
        }
    }

    pub fn address(&self) -> &str {
        self.inner.address()
    }

    /// The async client underneath.
    pub fn inner(&self) -> &AsyncGridClient {
        &self.inner
    }

    /// A routine's interface descriptor, fetched once per client.
    pub fn describe(&self, function: &str) -> Result<Arc<FunctionInterface>, CallError> {
        self.inner.describe_blocking(function)
    }

    /// One call outside any transaction: a graph of one task.
    pub fn call(&self, function: &str, args: &mut [Arg<'_>]) -> Result<CallOutcome, CallError> {
        let mut tx = self.transaction_begin();
        let mut tx_args = Vec::with_capacity(args.len());
        for arg in args.iter_mut() {
            tx_args.push(match arg {
                Arg::Integer(v) => TxArg::Integer(*v),
                Arg::Real(v) => TxArg::Real(*v),
                Arg::Complex(v) => TxArg::Complex(*v),
                Arg::Text(s) => TxArg::Text((*s).to_string()),
                Arg::File(path) => TxArg::File(path.to_path_buf()),
                Arg::In(a) => TxArg::Buffer(tx.input(a.reborrow())),
                Arg::Out(a) => TxArg::Buffer(tx.buffer(a.reborrow_mut())),
                Arg::Work => TxArg::Work,
                Arg::Data { .. } => {
                    return Err(CallError::bad_argument(format!(
                        "`{function}`: pass a data handle as `TxArg::Data` in a transaction"
                    )));
                }
            });
        }
        tx.call(function, &tx_args)?;
        let plan = tx.end()?;
        Ok(CallOutcome {
            status: plan.tasks.first().map_or(0, |t| t.status),
        })
    }

    /// Sends `array` (of `shape`; one dimension when empty) once and keeps it on the grid:
    /// see [`AsyncGridClient::put`].
    pub fn put<'a>(
        &self,
        array: impl Into<crate::ArrayRef<'a>>,
        shape: &[u64],
        mode: super::DataMode,
    ) -> Result<super::DataRef, CallError> {
        runtime()?.block_on(self.inner.put(array.into(), shape, mode))
    }

    /// [`Self::put`] in `replicas` copies, each on a server of its own: persistent data
    /// only (any other mode is refused when `replicas` > 1).
    pub fn put_replicated<'a>(
        &self,
        array: impl Into<crate::ArrayRef<'a>>,
        shape: &[u64],
        mode: super::DataMode,
        replicas: u32,
    ) -> Result<super::DataRef, CallError> {
        runtime()?.block_on(
            self.inner
                .put_replicated(array.into(), shape, mode, replicas),
        )
    }

    /// A handle of `shape` that receives a call's output on the grid.
    pub fn empty(
        &self,
        element_type: ninf_idl::ElementType,
        shape: &[u64],
        mode: super::DataMode,
    ) -> Result<super::DataRef, CallError> {
        let shape = super::Shape {
            dims: shape,
            fortran_order: false,
        };
        runtime()?.block_on(self.inner.empty(element_type, shape, mode))
    }

    /// Reads the handle's value into `out`, of its type and length.
    pub fn get<'a>(
        &self,
        data: &super::DataRef,
        out: impl Into<crate::ArrayMut<'a>>,
    ) -> Result<(), CallError> {
        let bytes = runtime()?.block_on(self.inner.get_bytes(data))?;
        let mut out = out.into();
        if out.as_ref().element_type() != data.element_type() || out.as_ref().len() != data.len() {
            return Err(CallError::bad_argument(format!(
                "data handle `{}` holds {} {}; the array given has {} {}",
                data.id(),
                data.len(),
                data.element_type().keyword(),
                out.as_ref().len(),
                out.as_ref().element_type().keyword()
            )));
        }
        out.decode_from(&bytes).map_err(|e| {
            CallError::new(
                crate::ErrorKind::CommunicationFailed,
                format!("data handle: {e}"),
            )
        })
    }

    /// Deletes the handle and its data on the grid.
    pub fn free(&self, data: &super::DataRef) -> Result<(), CallError> {
        runtime()?.block_on(self.inner.free(data))
    }

    /// This client's handles, oldest first.
    pub fn data(&self) -> Result<Vec<super::DataInfo>, CallError> {
        runtime()?.block_on(self.inner.data())
    }

    /// Starts recording a transaction; nothing runs until [`Transaction::end`].
    pub fn transaction_begin<'a>(&self) -> Transaction<'a> {
        Transaction::new(self.inner.clone())
    }

    /// A transaction that cannot forget its end: `body` records calls, then the graph runs.
    /// If `body` fails, nothing runs.
    pub fn transaction<'a>(
        &self,
        body: impl FnOnce(&mut Transaction<'a>) -> Result<(), CallError>,
    ) -> Result<Plan, CallError> {
        let mut tx = self.transaction_begin();
        body(&mut tx)?;
        tx.end()
    }
}
