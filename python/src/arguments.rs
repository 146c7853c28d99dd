//! Python arguments to the client library's foreign arguments, by the routine's descriptor:
//! numbers and strings by value, NumPy arrays by address (read in place when the call is
//! recorded, written in place when it returns). Each array is checked here for what only
//! Python knows (that it is an ndarray, its dtype, its layout, whether it may be written);
//! the client library then checks counts and sizes against the IDL.

use std::path::PathBuf;

use ninf::grid::{ForeignArg, ForeignArray};
use ninf_idl::{ElementType, FunctionInterface, Mode, Parameter};
use num_complex::Complex64;
use numpy::{PyArrayDescrMethods, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::arrays::{dtype_name, element_type_of, memory, numpy_dtype};
use crate::errors::bad_argument;

/// The arguments of one call, in IDL order, and the arrays among them (which the caller
/// keeps alive until the call's run ends).
pub fn convert(
    interface: &FunctionInterface,
    args: &Bound<'_, PyTuple>,
) -> PyResult<(Vec<ForeignArg>, Vec<Py<PyAny>>)> {
    let name = &interface.name;
    ninf::args::check_argument_count(interface, args.len()).map_err(crate::errors::to_py)?;
    let mut converted = Vec::with_capacity(args.len());
    let mut arrays = Vec::new();
    for (p, arg) in interface.parameters.iter().zip(args.iter()) {
        let value = if let Ok(data) = arg.cast::<crate::data::DataHandle>() {
            data_argument(name, p, data.get())?
        } else if p.is_array() {
            array_argument(name, p, &arg)?
        } else {
            scalar_argument(name, p, &arg)?
        };
        if matches!(value, ForeignArg::Array(_)) {
            arrays.push(arg.unbind());
        }
        converted.push(value);
    }
    Ok((converted, arrays))
}

/// The Python type a Python user passes for an IDL scalar type.
fn python_kind(t: ElementType) -> &'static str {
    match t {
        t if t.is_integer() => "an int",
        ElementType::Float | ElementType::Double => "a float",
        ElementType::Scomplex | ElementType::Dcomplex => "a complex",
        ElementType::Filename => "a path (str or os.PathLike)",
        _ => "a str",
    }
}

fn type_name(arg: &Bound<'_, PyAny>) -> String {
    arg.get_type()
        .name()
        .map_or_else(|_| "?".to_string(), |n| n.to_string())
}

fn scalar_argument(function: &str, p: &Parameter, arg: &Bound<'_, PyAny>) -> PyResult<ForeignArg> {
    let t = p.element_type;
    let wrong = || {
        bad_argument(format!(
            "argument `{}` of `{function}` must be {} (IDL {}), got {}",
            p.name,
            python_kind(t),
            t.keyword(),
            type_name(arg)
        ))
    };
    if arg.is_instance_of::<pyo3::types::PyBool>() {
        return Err(wrong());
    }
    Ok(match t {
        t if t.is_integer() => ForeignArg::Integer(arg.extract().map_err(|_| wrong())?),
        ElementType::Float | ElementType::Double => {
            ForeignArg::Real(arg.extract().map_err(|_| wrong())?)
        }
        ElementType::Scomplex | ElementType::Dcomplex => {
            ForeignArg::Complex(arg.extract::<Complex64>().map_err(|_| wrong())?)
        }
        ElementType::Filename => ForeignArg::File(arg.extract::<PathBuf>().map_err(|_| wrong())?),
        _ => ForeignArg::Text(arg.extract().map_err(|_| wrong())?),
    })
}

fn array_argument(function: &str, p: &Parameter, arg: &Bound<'_, PyAny>) -> PyResult<ForeignArg> {
    let t = p.element_type;
    let expected = dtype_name(t);
    if p.mode == Mode::Work {
        return if arg.is_none() {
            Ok(ForeignArg::Work)
        } else {
            Err(bad_argument(format!(
                "argument `{}` of `{function}` is a WORK array (the server allocates it): pass None",
                p.name
            )))
        };
    }
    let Ok(array) = arg.cast::<PyUntypedArray>() else {
        return Err(bad_argument(format!(
            "argument `{}` of `{function}` must be a numpy.ndarray of {expected} (IDL {}), got {}",
            p.name,
            t.keyword(),
            type_name(arg)
        )));
    };
    let dtype = array.dtype();
    let wanted = numpy_dtype(arg.py(), t)?;
    if !dtype.is_equiv_to(&wanted) {
        let actual = dtype
            .as_any()
            .str()
            .map_or_else(|_| "?".to_string(), |s| s.to_string());
        return Err(bad_argument(format!(
            "argument `{}` of `{function}` must be an array of {expected} (IDL {}), got dtype {actual}; \
             convert it with .astype(numpy.{expected})",
            p.name,
            t.keyword()
        )));
    }
    let (data, writable) = memory(array, &format!("argument `{}` of `{function}`", p.name))?;
    if p.mode.is_output() && !writable {
        return Err(bad_argument(format!(
            "argument `{}` of `{function}` receives the routine's {} result in place, but the \
             array is read-only",
            p.name,
            p.mode.keyword()
        )));
    }
    // SAFETY: a contiguous ndarray of `len` elements of this dtype at `data`; the caller
    // keeps the array alive until the run that uses it has ended or been dropped.
    let foreign = unsafe { ForeignArray::new(data, array.len(), t, writable) }
        .map_err(crate::errors::to_py)?;
    Ok(ForeignArg::Array(foreign))
}

/// A data handle as argument `p`: an array parameter of its element type (the client
/// library checks its size).
fn data_argument(
    function: &str,
    p: &Parameter,
    data: &crate::data::DataHandle,
) -> PyResult<ForeignArg> {
    let handle = &data.inner;
    if !p.is_array() || p.mode == Mode::Work {
        return Err(bad_argument(format!(
            "argument `{}` of `{function}` is `{}`; a ninf.Data goes only where an IN, OUT or \
             INOUT array does",
            p.name,
            p.declaration()
        )));
    }
    if handle.element_type() != p.element_type {
        return Err(bad_argument(format!(
            "argument `{}` of `{function}` must be an array of {} (IDL {}), got a ninf.Data of {}",
            p.name,
            dtype_name(p.element_type),
            p.element_type.keyword(),
            dtype_name(handle.element_type())
        )));
    }
    Ok(ForeignArg::Data(handle.clone()))
}

/// The memory a transaction's scratch array names: any contiguous array of an IDL element
/// type. Its contents are never read or written through this handle.
pub fn scratch_array(arg: &Bound<'_, PyAny>) -> PyResult<ForeignArray> {
    let Ok(array) = arg.cast::<PyUntypedArray>() else {
        return Err(bad_argument(format!(
            "a scratch array must be a numpy.ndarray, got {}",
            type_name(arg)
        )));
    };
    let element_type = element_type_of(arg, "a scratch array")?;
    let (data, writable) = memory(array, "a scratch array")?;
    // SAFETY: a contiguous ndarray of `len` elements of this dtype at `data`; a scratch
    // array is only compared by address, never read or written.
    unsafe { ForeignArray::new(data, array.len(), element_type, writable) }
        .map_err(crate::errors::to_py)
}
