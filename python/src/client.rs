//! The native grid connection: descriptors, routine lists, and transactions that become
//! runs. The friendly API (`ninf.Grid`, `ninf.Future`, `grid.transaction()`) is Python over
//! these classes, in `ninf/_grid.py`.

use std::path::PathBuf;
use std::sync::Arc;

use ninf::grid::{
    AsyncGridClient, ForeignTransaction, GridFile, GridFileError, Progress, ProgressCallback,
};
use ninf::{CallError, ErrorKind};
use ninf_idl::FunctionInterface;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

use crate::arguments::{convert, scratch_array};
use crate::errors::to_py;
use crate::run::Run;
use crate::runtime::block_on;

/// A connection to a grid's client proxy.
#[pyclass(module = "ninf._native", frozen)]
pub struct Client {
    inner: AsyncGridClient,
}

fn grid_file_error(error: GridFileError) -> PyErr {
    let kind = match error {
        GridFileError::NotFound { .. } => ErrorKind::ServerNotFound,
        _ => ErrorKind::BadArgument,
    };
    to_py(CallError::new(kind, error.to_string()))
}

#[pymethods]
impl Client {
    /// Connects to the proxy at `address` (`host:port` or `ninf://host:port`), presenting
    /// `token` and checking the proxy against the authority `ca` (a PEM file) when given.
    #[new]
    #[pyo3(signature = (address, token=None, ca=None))]
    fn new(
        py: Python<'_>,
        address: &str,
        token: Option<&str>,
        ca: Option<PathBuf>,
    ) -> PyResult<Client> {
        let tls = match ca {
            Some(ca) => Some(
                ninf::grid::GridTls::trusting(&ca)
                    .map_err(|e| to_py(CallError::bad_argument(e.to_string())))?,
            ),
            None => None,
        };
        let address = address.to_string();
        let client = block_on(py, async move {
            AsyncGridClient::connect_with_tls(&address, tls.as_ref()).await
        })?;
        Ok(Client::with_token(client, token))
    }

    /// Connects to the grid a grid file describes (`None`: `$NINF_GRID`, else the file
    /// `ninf up` writes by default); `token` overrides the file's.
    #[staticmethod]
    #[pyo3(signature = (path=None, token=None))]
    fn from_grid_file(
        py: Python<'_>,
        path: Option<PathBuf>,
        token: Option<&str>,
    ) -> PyResult<Client> {
        let path = path.unwrap_or_else(ninf::grid::default_grid_file);
        let file = GridFile::read(&path).map_err(grid_file_error)?;
        let client = block_on(py, async move { file.connect().await })?;
        Ok(Client::with_token(client, token))
    }

    /// The proxy's address.
    #[getter]
    fn address(&self) -> &str {
        self.inner.address()
    }

    /// A routine's interface as JSON (the IDL's descriptor).
    fn describe_json(&self, py: Python<'_>, name: &str) -> PyResult<String> {
        let interface = self.interface(py, name)?;
        serde_json::to_string(&*interface)
            .map_err(|e| to_py(CallError::bad_argument(e.to_string())))
    }

    /// The routines some server that is up serves, sorted.
    fn functions(&self, py: Python<'_>) -> PyResult<Vec<String>> {
        let client = self.inner.clone();
        block_on(py, async move { client.functions().await })
    }

    /// Sends `array` once and keeps it on the grid.
    #[pyo3(signature = (array, mode="sticky", replicas=1))]
    fn put(
        &self,
        py: Python<'_>,
        array: &Bound<'_, PyAny>,
        mode: &str,
        replicas: u32,
    ) -> PyResult<crate::data::DataHandle> {
        crate::data::put(py, &self.inner, array, (mode, replicas))
    }

    /// A handle of `shape` and `dtype` that receives an output on the grid.
    #[pyo3(signature = (shape, dtype, fortran_order=false, mode="sticky"))]
    fn empty(
        &self,
        py: Python<'_>,
        shape: Vec<u64>,
        dtype: &Bound<'_, PyAny>,
        fortran_order: bool,
        mode: &str,
    ) -> PyResult<crate::data::DataHandle> {
        crate::data::empty(py, &self.inner, (shape, dtype, fortran_order), mode)
    }

    /// This client's handles, oldest first.
    fn data(&self, py: Python<'_>) -> PyResult<Vec<crate::data::DataHandle>> {
        let client = self.inner.clone();
        let handles = block_on(py, async move { client.data().await })?;
        Ok(handles
            .into_iter()
            .map(|d| crate::data::DataHandle::of(d.data, &self.inner))
            .collect())
    }

    /// A new transaction on this grid.
    fn transaction(slf: Bound<'_, Self>) -> Transaction {
        let recording = ForeignTransaction::for_client(&slf.borrow().inner);
        Transaction {
            client: slf.unbind(),
            recording: Some(recording),
            arrays: Vec::new(),
        }
    }
}

impl Client {
    /// The connection, presenting `token` instead of what it was given, if any.
    fn with_token(client: AsyncGridClient, token: Option<&str>) -> Client {
        Client {
            inner: match token {
                Some(token) => client.with_token(token),
                None => client,
            },
        }
    }

    /// The routine's descriptor, fetched once per client.
    fn interface(&self, py: Python<'_>, name: &str) -> PyResult<Arc<FunctionInterface>> {
        // Every call asks: answer from the cache without releasing the GIL or the runtime.
        if let Some(found) = self.inner.cached(name) {
            return Ok(found);
        }
        let client = self.inner.clone();
        let name = name.to_string();
        block_on(py, async move { client.describe(&name).await })
    }
}

/// What a transaction answers once it has been sent.
fn already_sent() -> PyErr {
    to_py(CallError::bad_argument(
        "this transaction was already sent; start a new one",
    ))
}

/// Calls being recorded; `start` sends them as one graph.
#[pyclass(module = "ninf._native")]
pub struct Transaction {
    client: Py<Client>,
    recording: Option<ForeignTransaction>,
    /// Every array a recorded call names, kept alive until the run ends.
    arrays: Vec<Py<PyAny>>,
}

#[pymethods]
impl Transaction {
    /// Records a call: arguments in IDL order, checked now against the interface.
    #[pyo3(signature = (name, *args))]
    fn call(&mut self, py: Python<'_>, name: &str, args: &Bound<'_, PyTuple>) -> PyResult<()> {
        let interface = self.client.get().interface(py, name)?;
        let (converted, arrays) = convert(&interface, args)?;
        let recording = self.recording.as_mut().ok_or_else(already_sent)?;
        recording.call(&interface, &converted).map_err(to_py)?;
        self.arrays.extend(arrays);
        Ok(())
    }

    /// Records a call that is sent at once (`Grid.call`, `Grid.call_async`), without copying
    /// its input arrays: they are read where they are when the run is sent, and the caller
    /// leaves them untouched until it ends.
    #[pyo3(signature = (name, *args))]
    fn call_sent_at_once(
        &mut self,
        py: Python<'_>,
        name: &str,
        args: &Bound<'_, PyTuple>,
    ) -> PyResult<()> {
        let interface = self.client.get().interface(py, name)?;
        let (converted, arrays) = convert(&interface, args)?;
        let recording = self.recording.as_mut().ok_or_else(already_sent)?;
        let keep_alive: Arc<dyn Send + Sync> =
            Arc::new(arrays.iter().map(|a| a.clone_ref(py)).collect::<Vec<_>>());
        // SAFETY: the request's bytes keep the arrays alive through `keep_alive`, and the
        // Python API's contract for these calls is that nobody writes them until they end.
        unsafe { recording.call_reading_when_sent(&interface, &converted, keep_alive) }
            .map_err(to_py)?;
        self.arrays.extend(arrays);
        Ok(())
    }

    /// Keeps `array`'s final value on the grid: calls write it and read it there, and it is
    /// never written back (see `Transaction.scratch`). Returns the array.
    fn scratch<'py>(&mut self, array: Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        let foreign = scratch_array(&array)?;
        let recording = self.recording.as_mut().ok_or_else(already_sent)?;
        recording.scratch(foreign);
        // Kept alive like the calls' arrays: its address names it until the run ends.
        self.arrays.push(array.clone().unbind());
        Ok(array)
    }

    /// Names the transaction in the metaserver's records (and on the dashboard).
    fn set_label(&mut self, label: &str) {
        if let Some(recording) = &mut self.recording {
            recording.set_label(label);
        }
    }

    /// Calls recorded so far.
    fn __len__(&self) -> usize {
        self.recording.as_ref().map_or(0, ForeignTransaction::len)
    }

    /// The recorded edges: (producer, its parameter, consumer, its parameter, bytes).
    fn edges(&self) -> Vec<(usize, String, usize, String, u64)> {
        self.recording
            .as_ref()
            .map_or_else(Vec::new, |r| r.graph().edges)
    }

    /// Sends the graph; the returned run writes every written array in place when it ends.
    /// `progress`, when given, is called with a dict (`graph_id`, `tasks_done`,
    /// `tasks_total`, `bytes_moved`, `retries`) as the graph's tasks end.
    #[pyo3(signature = (progress=None))]
    fn start(&mut self, py: Python<'_>, progress: Option<Py<PyAny>>) -> PyResult<Run> {
        let recording = self.recording.take().ok_or_else(already_sent)?;
        let mut client = self.client.get().inner.clone();
        if let Some(callback) = progress {
            client = client.with_progress(progress_callback(callback));
        }
        let foreign = recording.into_run(client.scheduler());
        Run::spawn(py, client, foreign, std::mem::take(&mut self.arrays))
    }
}

/// Calls a Python callable with each progress report, holding the GIL only for the call. An
/// exception it raises is reported as unraisable (printed, or pytest's warning) and the
/// transaction goes on: watching a run must not fail it.
fn progress_callback(callback: Py<PyAny>) -> ProgressCallback {
    Arc::new(move |progress: &Progress| {
        Python::attach(|py| {
            let report = PyDict::new(py);
            let fields = [
                ("graph_id", progress.graph_id),
                ("tasks_done", u64::from(progress.tasks_done)),
                ("tasks_total", u64::from(progress.tasks_total)),
                ("bytes_moved", progress.bytes_moved),
                ("retries", u64::from(progress.retries)),
            ];
            let called = fields
                .iter()
                .try_for_each(|(key, value)| report.set_item(key, value))
                .and_then(|()| callback.call1(py, (report,)));
            if let Err(error) = called {
                error.write_unraisable(py, Some(callback.bind(py)));
            }
        });
    })
}
