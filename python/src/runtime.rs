//! Running the client library's futures from Python: on the library's runtime, with the GIL
//! released while they wait.

use ninf::CallError;
use ninf::runtime::runtime;
use pyo3::prelude::*;

use crate::errors::to_py;

/// Runs `future` on the library's runtime with the GIL released.
pub fn block_on<T: Send>(
    py: Python<'_>,
    future: impl Future<Output = Result<T, CallError>> + Send,
) -> PyResult<T> {
    let runtime = runtime().map_err(to_py)?;
    py.detach(|| runtime.block_on(future)).map_err(to_py)
}
