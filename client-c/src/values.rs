//! A call's arguments as C passed them (collected variable arguments, or an arg stack's
//! pointers) made into the client library's foreign arguments: scalars read, strings copied,
//! arrays named by address with their element counts from the IDL's dimensions and the
//! call's integer scalars.

use std::collections::HashMap;
use std::ffi::{CStr, c_char, c_void};
use std::path::PathBuf;

use ninf_client::grid::{ForeignArg, ForeignArray};
use ninf_client::num_complex::Complex64;
use ninf_idl::{ElementType, FunctionInterface, Mode, Parameter};

use crate::codes::{Failure, GRPC_OTHER_ERROR_CODE};
use crate::handles::{VALUE_POINTER, value_kind};

/// grpc.h's `ninf_value_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CValue {
    pub kind: i32,
    pub u: CValueUnion,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub union CValueUnion {
    pub integer: i64,
    pub real: f64,
    pub complex_parts: [f64; 2],
    pub pointer: *const c_void,
}

/// One argument before its arrays are sized: a scalar's value, or a pointer.
#[derive(Debug, Clone)]
pub enum Raw {
    Scalar(ForeignArg),
    Pointer(*const c_void),
}

fn bad(message: String) -> Failure {
    Failure::new(GRPC_OTHER_ERROR_CODE, message)
}

fn text(function: &str, parameter: &Parameter, pointer: *const c_void) -> Result<String, Failure> {
    if pointer.is_null() {
        return Err(bad(format!(
            "argument `{}` of `{function}` is a NULL string",
            parameter.name
        )));
    }
    // SAFETY: C passed a NUL-terminated string for a string parameter (grpc.h's contract).
    let text = unsafe { CStr::from_ptr(pointer.cast::<c_char>()) };
    text.to_str().map(str::to_string).map_err(|_| {
        bad(format!(
            "argument `{}` of `{function}` is not UTF-8",
            parameter.name
        ))
    })
}

/// A string or filename parameter's argument.
fn string_arg(
    function: &str,
    p: &Parameter,
    pointer: *const c_void,
) -> Result<ForeignArg, Failure> {
    let value = text(function, p, pointer)?;
    Ok(if p.element_type == ElementType::Filename {
        ForeignArg::File(PathBuf::from(value))
    } else {
        ForeignArg::Text(value)
    })
}

/// The collected variable arguments of a call of `interface`.
///
/// # Safety
/// `values` must point to `count` values, and every pointer in them be what grpc.h says
/// the parameter takes.
pub unsafe fn from_values(
    interface: &FunctionInterface,
    values: *const CValue,
    count: i32,
) -> Result<Vec<Raw>, Failure> {
    let count = usize::try_from(count).unwrap_or(0);
    check_count(interface, count)?;
    let values = if count == 0 {
        &[][..]
    } else {
        // SAFETY: the caller's contract.
        unsafe { std::slice::from_raw_parts(values, count) }
    };
    let function = &interface.name;
    interface
        .parameters
        .iter()
        .zip(values)
        .map(|(p, v)| {
            let kind = value_kind(p);
            if v.kind != kind {
                return Err(bad(format!(
                    "argument `{}` of `{function}` was collected as kind {} but is kind {kind}",
                    p.name, v.kind
                )));
            }
            // SAFETY: the union's field of `kind`, which the header wrote.
            unsafe {
                Ok(match p.element_type {
                    _ if kind == VALUE_POINTER => Raw::Pointer(v.u.pointer),
                    t if t.is_integer() => Raw::Scalar(ForeignArg::Integer(v.u.integer)),
                    ElementType::Float | ElementType::Double => {
                        Raw::Scalar(ForeignArg::Real(v.u.real))
                    }
                    ElementType::Scomplex | ElementType::Dcomplex => {
                        let [re, im] = v.u.complex_parts;
                        Raw::Scalar(ForeignArg::Complex(Complex64::new(re, im)))
                    }
                    _ => Raw::Scalar(string_arg(function, p, v.u.pointer)?),
                })
            }
        })
        .collect()
}

/// An arg stack's pointers: scalars by address, arrays and strings as their pointers.
///
/// # Safety
/// Every pointer must be what grpc.h says the parameter's arg-stack entry is.
pub unsafe fn from_pointers(
    interface: &FunctionInterface,
    pointers: &[*mut c_void],
) -> Result<Vec<Raw>, Failure> {
    check_count(interface, pointers.len())?;
    let function = &interface.name;
    interface
        .parameters
        .iter()
        .zip(pointers)
        .map(|(p, &pointer)| {
            if value_kind(p) == VALUE_POINTER {
                return Ok(Raw::Pointer(pointer));
            }
            if matches!(p.element_type, ElementType::String | ElementType::Filename) {
                return Ok(Raw::Scalar(string_arg(function, p, pointer)?));
            }
            if pointer.is_null() {
                return Err(bad(format!(
                    "argument `{}` of `{function}` is NULL; push the scalar's address",
                    p.name
                )));
            }
            // SAFETY: the caller's contract: the address of a scalar of the IDL's type.
            Ok(Raw::Scalar(unsafe { read_scalar(p.element_type, pointer) }))
        })
        .collect()
}

/// The scalar of type `t` at `pointer`.
///
/// # Safety
/// `pointer` must point to a C value of `t`'s type.
unsafe fn read_scalar(t: ElementType, pointer: *const c_void) -> ForeignArg {
    // SAFETY: the caller's contract; C's values need not be aligned for us, so read them
    // unaligned.
    unsafe {
        match t {
            ElementType::Char => {
                ForeignArg::Integer(i64::from(pointer.cast::<i8>().read_unaligned()))
            }
            ElementType::Short => {
                ForeignArg::Integer(i64::from(pointer.cast::<i16>().read_unaligned()))
            }
            ElementType::Int => {
                ForeignArg::Integer(i64::from(pointer.cast::<i32>().read_unaligned()))
            }
            ElementType::Long => ForeignArg::Integer(pointer.cast::<i64>().read_unaligned()),
            ElementType::Float => {
                ForeignArg::Real(f64::from(pointer.cast::<f32>().read_unaligned()))
            }
            ElementType::Scomplex => {
                let [re, im] = pointer.cast::<[f32; 2]>().read_unaligned();
                ForeignArg::Complex(Complex64::new(f64::from(re), f64::from(im)))
            }
            ElementType::Dcomplex => {
                let [re, im] = pointer.cast::<[f64; 2]>().read_unaligned();
                ForeignArg::Complex(Complex64::new(re, im))
            }
            _ => ForeignArg::Real(pointer.cast::<f64>().read_unaligned()),
        }
    }
}

fn check_count(interface: &FunctionInterface, count: usize) -> Result<(), Failure> {
    ninf_client::args::check_argument_count(interface, count).map_err(Failure::from)
}

/// The arguments with their arrays sized: each pointer becomes an array of the element
/// count its dimensions give for this call's integer scalars.
///
/// # Safety
/// Each array pointer must point to at least that many elements of the parameter's type,
/// alive and not written by anyone else until the call has ended.
pub unsafe fn sized(
    interface: &FunctionInterface,
    raw: Vec<Raw>,
) -> Result<Vec<ForeignArg>, Failure> {
    let scalars: HashMap<String, i64> = interface
        .parameters
        .iter()
        .zip(&raw)
        .filter_map(|(p, r)| match r {
            Raw::Scalar(ForeignArg::Integer(v)) => Some((p.name.clone(), *v)),
            _ => None,
        })
        .collect();
    let function = &interface.name;
    interface
        .parameters
        .iter()
        .zip(raw)
        .map(|(p, r)| match r {
            Raw::Scalar(arg) => Ok(arg),
            Raw::Pointer(_) if p.mode == Mode::Work => Ok(ForeignArg::Work),
            Raw::Pointer(pointer) => {
                let count = interface
                    .element_count(p, &scalars)
                    .map_err(|e| bad(format!("argument `{}` of `{function}`: {e}", p.name)))?;
                let count = usize::try_from(count)
                    .map_err(|_| bad(format!("argument `{}` of `{function}` is too large", p.name)))?;
                if let Some(data) = crate::data::handle_at(pointer) {
                    let data = data?;
                    crate::data::transfer::wait_for(&data)?;
                    return crate::data::argument(&data, function, p, count);
                }
                if pointer.is_null() && count > 0 {
                    return Err(bad(format!(
                        "argument `{}` of `{function}` is NULL but must hold {count} elements of {}",
                        p.name,
                        p.element_type.keyword()
                    )));
                }
                // SAFETY: the caller's contract.
                let array = unsafe {
                    ForeignArray::new(pointer.cast_mut().cast(), count, p.element_type, p.mode.is_output())
                }
                .map_err(|e| bad(format!("argument `{}` of `{function}`: {e}", p.name)))?;
                Ok(ForeignArg::Array(array))
            }
        })
        .collect()
}
