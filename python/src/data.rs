//! Data kept on the grid (docs/data.md) from Python: the native handle behind `ninf.Data`,
//! made by `Client.put` and `Client.empty`, read back into a NumPy array in place, freed,
//! and passed as an argument wherever an array goes (`arguments.rs`).

use ninf::grid::{AsyncGridClient, DataMode, DataRef, Shape};
use numpy::{PyUntypedArray, PyUntypedArrayMethods};
use pyo3::prelude::*;

use crate::arrays::{dtype_name, element_type_of, element_type_of_dtype, memory};
use crate::errors::{bad_argument, to_py};
use crate::runtime::block_on;

/// A handle of data kept on the grid.
#[pyclass(module = "ninf._native", frozen)]
pub struct DataHandle {
    pub(crate) inner: DataRef,
    client: AsyncGridClient,
}

/// Puts `array` on the grid through `client`.
pub fn put(
    py: Python<'_>,
    client: &AsyncGridClient,
    array: &Bound<'_, PyAny>,
    (mode, replicas): (&str, u32),
) -> PyResult<DataHandle> {
    let mode = DataMode::from_name(mode).map_err(to_py)?;
    let Ok(ndarray) = array.cast::<PyUntypedArray>() else {
        return Err(bad_argument("put takes a numpy.ndarray".to_string()));
    };
    let element_type = element_type_of(array, "the array to put")?;
    let (data, _) = memory(ndarray, "the array to put")?;
    let dims: Vec<u64> = ndarray.shape().iter().map(|&d| d as u64).collect();
    let fortran_order = ndarray.is_fortran_contiguous() && !ndarray.is_c_contiguous();
    let bytes = ndarray.len() * element_type.size_bytes().unwrap_or(1) as usize;
    // SAFETY: a contiguous ndarray of `bytes` bytes at `data`, alive while we hold `array`,
    // which outlives the put: it is read (written into memory shared with the proxy, or
    // copied to be sent) before this returns, as a NumPy function that drops the GIL reads it.
    let memory = unsafe { std::slice::from_raw_parts(data, bytes) };
    let client = client.clone();
    let inner = block_on(py, async {
        let shape = Shape {
            dims: &dims,
            fortran_order,
        };
        client
            .put_slice_replicated(element_type, shape, memory, mode, replicas)
            .await
    })?;
    Ok(DataHandle {
        inner,
        client: client.clone(),
    })
}

/// A handle of `shape` and `dtype` that receives an output on the grid.
pub fn empty(
    py: Python<'_>,
    client: &AsyncGridClient,
    (shape, dtype, fortran_order): (Vec<u64>, &Bound<'_, PyAny>, bool),
    mode: &str,
) -> PyResult<DataHandle> {
    let mode = DataMode::from_name(mode).map_err(to_py)?;
    let probe = numpy::PyArrayDescr::new(dtype.py(), dtype)?;
    let element_type = element_type_of_dtype(&probe, "a ninf.Data")?;
    let client = client.clone();
    let inner = block_on(py, async {
        let shape = Shape {
            dims: &shape,
            fortran_order,
        };
        client.empty(element_type, shape, mode).await
    })?;
    Ok(DataHandle {
        inner,
        client: client.clone(),
    })
}

impl DataHandle {
    pub(crate) fn of(inner: DataRef, client: &AsyncGridClient) -> DataHandle {
        DataHandle {
            inner,
            client: client.clone(),
        }
    }
}

#[pymethods]
impl DataHandle {
    #[getter]
    fn id(&self) -> &str {
        self.inner.id()
    }

    #[getter]
    fn nbytes(&self) -> u64 {
        self.inner.nbytes()
    }

    /// The NumPy dtype's name.
    #[getter]
    fn dtype(&self) -> &'static str {
        dtype_name(self.inner.element_type())
    }

    #[getter]
    fn shape(&self) -> Vec<u64> {
        self.inner.shape().to_vec()
    }

    #[getter]
    fn fortran_order(&self) -> bool {
        self.inner.fortran_order()
    }

    #[getter]
    fn mode(&self) -> &'static str {
        self.inner.mode().name()
    }

    /// The servers holding a copy now.
    fn servers(&self, py: Python<'_>) -> PyResult<Vec<String>> {
        let client = self.client.clone();
        let id = self.inner.id().to_string();
        block_on(py, async move { Ok(client.data_info(&id).await?.servers) })
    }

    /// Reads the value into `out`, a writable contiguous array of its dtype and size.
    fn read_into(&self, py: Python<'_>, out: &Bound<'_, PyAny>) -> PyResult<()> {
        let Ok(ndarray) = out.cast::<PyUntypedArray>() else {
            return Err(bad_argument("out must be a numpy.ndarray".to_string()));
        };
        let element_type = element_type_of(out, "out")?;
        let (data, writable) = memory(ndarray, "out")?;
        let bytes = ndarray.len() as u64 * element_type.size_bytes().unwrap_or(1);
        if element_type != self.inner.element_type() || bytes != self.inner.nbytes() || !writable {
            return Err(bad_argument(format!(
                "out must be a writable array of {} {} ({} bytes); got {} {}{}",
                self.inner.len(),
                dtype_name(self.inner.element_type()),
                self.inner.nbytes(),
                ndarray.len(),
                dtype_name(element_type),
                if writable { "" } else { ", read-only" }
            )));
        }
        let client = self.client.clone();
        let inner = self.inner.clone();
        let value = block_on(py, async move { client.get_bytes(&inner).await })?;
        // SAFETY: `out` is a writable contiguous ndarray of exactly `value.len()` bytes at
        // `data`, alive while we hold it; `value` is our own buffer.
        unsafe { std::ptr::copy_nonoverlapping(value.as_ptr(), data, value.len()) };
        Ok(())
    }

    /// Deletes the handle and its data on the grid.
    fn free(&self, py: Python<'_>) -> PyResult<()> {
        let client = self.client.clone();
        let inner = self.inner.clone();
        block_on(py, async move { client.free(&inner).await })
    }
}
