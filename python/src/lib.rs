//! The native core of the Python client, `ninf._native`: a connection to a grid's proxy,
//! transactions recorded over NumPy arrays in place, and runs that write results back into
//! the caller's arrays. The public API is the Python package `ninf` over it.

mod arguments;
mod arrays;
mod client;
mod data;
mod errors;
mod run;
mod runtime;

use pyo3::prelude::*;

#[pymodule]
fn _native(module: &Bound<'_, PyModule>) -> PyResult<()> {
    // Before any client starts its runtime's threads (docs in `ninf::memory`).
    ninf::memory::keep_freed_buffers();
    module.add("__version__", env!("CARGO_PKG_VERSION"))?;
    module.add_class::<client::Client>()?;
    module.add_class::<client::Transaction>()?;
    module.add_class::<run::Run>()?;
    module.add_class::<data::DataHandle>()?;
    module.add_function(wrap_pyfunction!(run::wait_any, module)?)?;
    errors::register(module)?;
    Ok(())
}
