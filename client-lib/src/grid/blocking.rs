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
            });
        }
        tx.call(function, &tx_args)?;
        let plan = tx.end()?;
        Ok(CallOutcome {
            status: plan.tasks.first().map_or(0, |t| t.status),
        })
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
