//! NumPy arrays as the client library sees them: the dtype of each IDL element type and
//! back, and where a contiguous array's elements are.

use ninf_idl::ElementType;
use num_complex::Complex64;
use numpy::{PyArrayDescrMethods, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::prelude::*;

use crate::errors::bad_argument;

/// The NumPy dtype name for an IDL element type.
pub fn dtype_name(t: ElementType) -> &'static str {
    match t {
        ElementType::Char => "uint8",
        ElementType::Short => "int16",
        ElementType::Int => "int32",
        ElementType::Long => "int64",
        ElementType::Float => "float32",
        ElementType::Scomplex => "complex64",
        ElementType::Dcomplex => "complex128",
        _ => "float64",
    }
}

/// Where a contiguous array's elements are and whether it may be written; `what` names it
/// in the error.
pub fn memory(array: &Bound<'_, PyUntypedArray>, what: &str) -> PyResult<(*mut u8, bool)> {
    if !(array.is_c_contiguous() || array.is_fortran_contiguous()) {
        return Err(bad_argument(format!(
            "{what} must be C- or Fortran-contiguous, got a strided view \
             (shape {:?}, strides {:?}); pass numpy.ascontiguousarray(...) of it",
            array.shape(),
            array.strides()
        )));
    }
    let raw = array.as_array_ptr();
    // SAFETY: `raw` is a live ndarray (we hold a reference); its data and flags are read.
    let (data, flags) = unsafe { ((*raw).fields.data.cast::<u8>(), (*raw).fields.flags) };
    Ok((data, flags & numpy::npyffi::NPY_ARRAY_WRITEABLE != 0))
}

/// The IDL element type of an ndarray's dtype; `what` names the array in the error.
pub fn element_type_of(arg: &Bound<'_, PyAny>, what: &str) -> PyResult<ElementType> {
    let Ok(array) = arg.cast::<PyUntypedArray>() else {
        return Err(bad_argument(format!(
            "{what} must be a numpy.ndarray, got {}",
            arg.get_type()
                .name()
                .map_or_else(|_| "?".to_string(), |n| n.to_string())
        )));
    };
    element_type_of_dtype(&array.dtype(), what)
}

/// The IDL element type of a dtype routines take.
pub fn element_type_of_dtype(
    dtype: &Bound<'_, numpy::PyArrayDescr>,
    what: &str,
) -> PyResult<ElementType> {
    // Only array types have a dtype.
    ElementType::ALL
        .into_iter()
        .find(|t| numpy_dtype(dtype.py(), *t).is_ok_and(|d| dtype.is_equiv_to(&d)))
        .ok_or_else(|| {
            let actual = dtype
                .as_any()
                .str()
                .map_or_else(|_| "?".to_string(), |s| s.to_string());
            bad_argument(format!(
                "{what} must have a dtype routines take (uint8, int16, int32, int64, float32, \
                 float64, complex64, complex128), got {actual}"
            ))
        })
}

pub fn numpy_dtype(py: Python<'_>, t: ElementType) -> PyResult<Bound<'_, numpy::PyArrayDescr>> {
    Ok(match t {
        ElementType::Char => numpy::dtype::<u8>(py),
        ElementType::Short => numpy::dtype::<i16>(py),
        ElementType::Int => numpy::dtype::<i32>(py),
        ElementType::Long => numpy::dtype::<i64>(py),
        ElementType::Float => numpy::dtype::<f32>(py),
        ElementType::Double => numpy::dtype::<f64>(py),
        ElementType::Scomplex => numpy::dtype::<num_complex::Complex32>(py),
        ElementType::Dcomplex => numpy::dtype::<Complex64>(py),
        other => {
            return Err(bad_argument(format!(
                "{} cannot be an array",
                other.keyword()
            )));
        }
    })
}
