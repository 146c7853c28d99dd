//! Positional arguments and their checking against an interface descriptor. Every mismatch
//! (count, type, scalar range, array length) is found here, before any byte is sent, and the
//! message names the argument with the expected and actual size.

use std::collections::BTreeMap;
use std::path::Path;

use ninf_idl::{ElementType, FunctionInterface, Mode, Parameter};
use ninf_proto::v1::{self, argument_value::Value as WireValue};
use ninf_proto::values::{decode_into, encode};
use num_complex::{Complex32, Complex64};

use crate::error::CallError;

/// A read-only array argument.
#[derive(Debug)]
pub enum ArrayRef<'a> {
    Char(&'a [u8]),
    Short(&'a [i16]),
    Int(&'a [i32]),
    Long(&'a [i64]),
    Float(&'a [f32]),
    Double(&'a [f64]),
    Scomplex(&'a [Complex32]),
    Dcomplex(&'a [Complex64]),
}

/// An array argument the routine may write (OUT, INOUT).
#[derive(Debug)]
pub enum ArrayMut<'a> {
    Char(&'a mut [u8]),
    Short(&'a mut [i16]),
    Int(&'a mut [i32]),
    Long(&'a mut [i64]),
    Float(&'a mut [f32]),
    Double(&'a mut [f64]),
    Scomplex(&'a mut [Complex32]),
    Dcomplex(&'a mut [Complex64]),
}

macro_rules! for_each_array {
    ($enum:ident, $value:expr, $v:ident => $body:expr) => {
        match $value {
            $enum::Char($v) => $body,
            $enum::Short($v) => $body,
            $enum::Int($v) => $body,
            $enum::Long($v) => $body,
            $enum::Float($v) => $body,
            $enum::Double($v) => $body,
            $enum::Scomplex($v) => $body,
            $enum::Dcomplex($v) => $body,
        }
    };
}

impl ArrayRef<'_> {
    /// The same array, borrowed for a shorter time.
    pub fn reborrow(&self) -> ArrayRef<'_> {
        match self {
            ArrayRef::Char(v) => ArrayRef::Char(v),
            ArrayRef::Short(v) => ArrayRef::Short(v),
            ArrayRef::Int(v) => ArrayRef::Int(v),
            ArrayRef::Long(v) => ArrayRef::Long(v),
            ArrayRef::Float(v) => ArrayRef::Float(v),
            ArrayRef::Double(v) => ArrayRef::Double(v),
            ArrayRef::Scomplex(v) => ArrayRef::Scomplex(v),
            ArrayRef::Dcomplex(v) => ArrayRef::Dcomplex(v),
        }
    }

    pub fn len(&self) -> usize {
        for_each_array!(ArrayRef, self, v => v.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn element_type(&self) -> ElementType {
        match self {
            ArrayRef::Char(_) => ElementType::Char,
            ArrayRef::Short(_) => ElementType::Short,
            ArrayRef::Int(_) => ElementType::Int,
            ArrayRef::Long(_) => ElementType::Long,
            ArrayRef::Float(_) => ElementType::Float,
            ArrayRef::Double(_) => ElementType::Double,
            ArrayRef::Scomplex(_) => ElementType::Scomplex,
            ArrayRef::Dcomplex(_) => ElementType::Dcomplex,
        }
    }

    fn encode(&self) -> Vec<u8> {
        for_each_array!(ArrayRef, self, v => encode(v))
    }

    /// The elements as little-endian bytes: borrowed on little-endian machines.
    pub fn le_bytes(&self) -> std::borrow::Cow<'_, [u8]> {
        if cfg!(target_endian = "little") {
            std::borrow::Cow::Borrowed(
                for_each_array!(ArrayRef, self, v => bytemuck::cast_slice(v)),
            )
        } else {
            std::borrow::Cow::Owned(self.encode())
        }
    }
}

impl ArrayMut<'_> {
    /// The same array, borrowed mutably for a shorter time.
    pub fn reborrow_mut(&mut self) -> ArrayMut<'_> {
        match self {
            ArrayMut::Char(v) => ArrayMut::Char(v),
            ArrayMut::Short(v) => ArrayMut::Short(v),
            ArrayMut::Int(v) => ArrayMut::Int(v),
            ArrayMut::Long(v) => ArrayMut::Long(v),
            ArrayMut::Float(v) => ArrayMut::Float(v),
            ArrayMut::Double(v) => ArrayMut::Double(v),
            ArrayMut::Scomplex(v) => ArrayMut::Scomplex(v),
            ArrayMut::Dcomplex(v) => ArrayMut::Dcomplex(v),
        }
    }

    pub fn as_ref(&self) -> ArrayRef<'_> {
        match self {
            ArrayMut::Char(v) => ArrayRef::Char(v),
            ArrayMut::Short(v) => ArrayRef::Short(v),
            ArrayMut::Int(v) => ArrayRef::Int(v),
            ArrayMut::Long(v) => ArrayRef::Long(v),
            ArrayMut::Float(v) => ArrayRef::Float(v),
            ArrayMut::Double(v) => ArrayRef::Double(v),
            ArrayMut::Scomplex(v) => ArrayRef::Scomplex(v),
            ArrayMut::Dcomplex(v) => ArrayRef::Dcomplex(v),
        }
    }

    pub(crate) fn decode_from(&mut self, bytes: &[u8]) -> Result<(), ninf_proto::ValueError> {
        for_each_array!(ArrayMut, self, v => decode_into(bytes, v))
    }

    /// The elements' memory as bytes, to receive little-endian data in place; `None` on
    /// big-endian machines, where received bytes must be decoded.
    pub fn le_bytes_mut(&mut self) -> Option<&mut [u8]> {
        if cfg!(target_endian = "little") {
            Some(for_each_array!(ArrayMut, self, v => bytemuck::cast_slice_mut(v)))
        } else {
            None
        }
    }
}

/// One positional argument of a call.
#[derive(Debug)]
pub enum Arg<'a> {
    /// A char, short, int or long scalar.
    Integer(i64),
    /// A float or double scalar.
    Real(f64),
    Complex(Complex64),
    Text(&'a str),
    /// A `filename` argument: the file's contents are sent.
    File(&'a Path),
    In(ArrayRef<'a>),
    Out(ArrayMut<'a>),
    /// A WORK array: allocated by the server, never sent.
    Work,
    /// An array kept on the grid (a data handle, [`crate::grid::DataRef`]): checked by its
    /// type and length, never sent with the call. Only transactions through a proxy take it.
    Data {
        element_type: ElementType,
        len: usize,
    },
}

impl Arg<'_> {
    fn describe(&self) -> String {
        match self {
            Arg::Integer(_) => "an integer".into(),
            Arg::Real(_) => "a real number".into(),
            Arg::Complex(_) => "a complex number".into(),
            Arg::Text(_) => "a string".into(),
            Arg::File(_) => "a file".into(),
            Arg::In(a) => format!("a read-only array of {}", a.element_type().keyword()),
            Arg::Out(a) => format!("a mutable array of {}", a.as_ref().element_type().keyword()),
            Arg::Work => "a WORK placeholder".into(),
            Arg::Data { element_type, len } => {
                format!("a data handle of {len} {}", element_type.keyword())
            }
        }
    }
}

macro_rules! integer_arg {
    ($($t:ty),*) => {$(
        impl From<$t> for Arg<'_> {
            fn from(v: $t) -> Self {
                Arg::Integer(i64::from(v))
            }
        }
    )*};
}
integer_arg!(u8, i16, i32, i64);

impl From<f64> for Arg<'_> {
    fn from(v: f64) -> Self {
        Arg::Real(v)
    }
}

impl From<f32> for Arg<'_> {
    fn from(v: f32) -> Self {
        Arg::Real(f64::from(v))
    }
}

impl From<Complex64> for Arg<'_> {
    fn from(v: Complex64) -> Self {
        Arg::Complex(v)
    }
}

impl From<Complex32> for Arg<'_> {
    fn from(v: Complex32) -> Self {
        Arg::Complex(Complex64::new(f64::from(v.re), f64::from(v.im)))
    }
}

impl<'a> From<&'a str> for Arg<'a> {
    fn from(v: &'a str) -> Self {
        Arg::Text(v)
    }
}

impl<'a> From<&'a Path> for Arg<'a> {
    fn from(v: &'a Path) -> Self {
        Arg::File(v)
    }
}

macro_rules! array_arg {
    ($($t:ty => $variant:ident),*) => {$(
        impl<'a> From<&'a [$t]> for Arg<'a> {
            fn from(v: &'a [$t]) -> Self { Arg::In(ArrayRef::$variant(v)) }
        }
        impl<'a> From<&'a Vec<$t>> for Arg<'a> {
            fn from(v: &'a Vec<$t>) -> Self { Arg::In(ArrayRef::$variant(v)) }
        }
        impl<'a> From<&'a mut [$t]> for Arg<'a> {
            fn from(v: &'a mut [$t]) -> Self { Arg::Out(ArrayMut::$variant(v)) }
        }
        impl<'a> From<&'a mut Vec<$t>> for Arg<'a> {
            fn from(v: &'a mut Vec<$t>) -> Self { Arg::Out(ArrayMut::$variant(v)) }
        }
        impl<'a> From<&'a [$t]> for ArrayRef<'a> {
            fn from(v: &'a [$t]) -> Self { ArrayRef::$variant(v) }
        }
        impl<'a> From<&'a Vec<$t>> for ArrayRef<'a> {
            fn from(v: &'a Vec<$t>) -> Self { ArrayRef::$variant(v) }
        }
        impl<'a> From<&'a mut [$t]> for ArrayMut<'a> {
            fn from(v: &'a mut [$t]) -> Self { ArrayMut::$variant(v) }
        }
        impl<'a> From<&'a mut Vec<$t>> for ArrayMut<'a> {
            fn from(v: &'a mut Vec<$t>) -> Self { ArrayMut::$variant(v) }
        }
    )*};
}
array_arg!(u8 => Char, i16 => Short, i32 => Int, i64 => Long, f32 => Float, f64 => Double,
    Complex32 => Scomplex, Complex64 => Dcomplex);

/// The routine's own status (LINPACK-style `info`; 0 when the routine reports none).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CallOutcome {
    pub status: i64,
}

/// Checks positional arguments against the interface and encodes what travels to the
/// routine: one value per parameter, none for OUT and WORK.
pub fn encode_arguments(
    function: &FunctionInterface,
    args: &[Arg<'_>],
) -> Result<Vec<v1::ArgumentValue>, CallError> {
    Ok(check_and_encode(function, args, false)?
        .into_iter()
        .map(|e| match e {
            Encoded::Value(v) => v,
            Encoded::Bulk(_) => v1::ArgumentValue { value: None },
        })
        .collect())
}

/// One argument after checking: a value to send, or (on a bulk connection) an array whose
/// raw bytes follow the request.
#[derive(Debug)]
pub enum Encoded {
    Value(v1::ArgumentValue),
    Bulk(v1::BulkArray),
}

/// The same checks as [`encode_arguments`]; with `bulk`, IN and INOUT arrays are described
/// (type and byte count) instead of copied into the message.
pub fn check_and_encode(
    function: &FunctionInterface,
    args: &[Arg<'_>],
    bulk: bool,
) -> Result<Vec<Encoded>, CallError> {
    if let Some((p, _)) = function
        .parameters
        .iter()
        .zip(args)
        .find(|(_, a)| matches!(a, Arg::Data { .. }))
    {
        return Err(CallError::bad_argument(format!(
            "argument `{}` of `{}` is a data handle, which only a call through a grid's proxy \
             takes, not a call straight to a server",
            p.name, function.name
        )));
    }
    check_and_encode_with(function, args, &vec![bulk; args.len()], &[])
}

/// [`check_and_encode`] where `described[i]` says whether `args[i]`, an IN or INOUT array, is
/// described instead of copied, and `writable[i]` that it, an [`Arg::In`], stands for a
/// buffer the caller will also let the routine write (transactions hold their buffers this
/// way, so one buffer can appear several times in a call).
pub(crate) fn check_and_encode_with(
    function: &FunctionInterface,
    args: &[Arg<'_>],
    described: &[bool],
    writable: &[bool],
) -> Result<Vec<Encoded>, CallError> {
    check_argument_count(function, args.len())?;
    let bindings = integer_bindings(function, args)?;
    let mut values = Vec::with_capacity(args.len());
    for (i, (p, arg)) in function.parameters.iter().zip(args).enumerate() {
        let value = if p.is_array() {
            let is_writable = writable.get(i).copied().unwrap_or(false);
            let bulk = described.get(i).copied().unwrap_or(false);
            encode_array(function, p, arg, &bindings, (bulk, is_writable))?
        } else {
            Encoded::Value(v1::ArgumentValue {
                value: Some(encode_scalar(function, p, arg)?),
            })
        };
        values.push(value);
    }
    Ok(values)
}

/// Refuses a call with the wrong number of arguments, naming the parameters it takes.
pub fn check_argument_count(function: &FunctionInterface, got: usize) -> Result<(), CallError> {
    if got == function.parameters.len() {
        return Ok(());
    }
    let names: Vec<&str> = function
        .parameters
        .iter()
        .map(|p| p.name.as_str())
        .collect();
    Err(CallError::bad_argument(format!(
        "`{}` takes {} arguments ({}), got {got}",
        function.name,
        names.len(),
        names.join(", ")
    )))
}

/// The call's IN integer scalars by name, checked first: array sizes depend on them.
fn integer_bindings(
    function: &FunctionInterface,
    args: &[Arg<'_>],
) -> Result<BTreeMap<String, i64>, CallError> {
    let name = &function.name;
    let mut bindings = BTreeMap::new();
    for (p, arg) in function.parameters.iter().zip(args) {
        if p.mode == Mode::In && !p.is_array() && p.element_type.is_integer() {
            let Arg::Integer(v) = arg else {
                return Err(CallError::bad_argument(format!(
                    "argument `{}` of `{name}` must be {}, got {}",
                    p.name,
                    p.element_type.with_article(),
                    arg.describe()
                )));
            };
            if !p.element_type.fits_integer(*v) {
                return Err(CallError::bad_argument(format!(
                    "argument `{}` of `{name}`: {v} does not fit in {}",
                    p.name,
                    p.element_type.with_article()
                )));
            }
            bindings.insert(p.name.clone(), *v);
        }
    }
    Ok(bindings)
}

/// The error for an argument of the wrong kind.
fn mismatch(function: &FunctionInterface, p: &Parameter, arg: &Arg<'_>, what: String) -> CallError {
    CallError::bad_argument(format!(
        "argument `{}` of `{}` must be {what}, got {}",
        p.name,
        function.name,
        arg.describe()
    ))
}

/// A scalar argument checked against its parameter's type (a file is read now).
fn encode_scalar(
    function: &FunctionInterface,
    p: &Parameter,
    arg: &Arg<'_>,
) -> Result<WireValue, CallError> {
    let name = &function.name;
    let t = p.element_type;
    Ok(match (t, arg) {
        (t, Arg::Integer(v)) if t.is_integer() => WireValue::IntValue(*v),
        (ElementType::Float | ElementType::Double, Arg::Real(v)) => WireValue::FloatValue(*v),
        (ElementType::Scomplex | ElementType::Dcomplex, Arg::Complex(c)) => {
            WireValue::ComplexValue(v1::Complex { re: c.re, im: c.im })
        }
        (ElementType::String, Arg::Text(s)) => WireValue::StringValue(s.to_string()),
        (ElementType::Filename, Arg::File(path)) => WireValue::FileContent(
            std::fs::read(path)
                .map_err(|e| {
                    CallError::bad_argument(format!(
                        "argument `{}` of `{name}`: cannot read {}: {e}",
                        p.name,
                        path.display()
                    ))
                })?
                .into(),
        ),
        _ => return Err(mismatch(function, p, arg, t.with_article())),
    })
}

/// An array argument checked against its parameter (kind, type, element count) and
/// encoded: by value, as a bulk description (`bulk`), or nothing when the server allocates
/// it or the caller's buffer stands for it (`is_writable`).
fn encode_array(
    function: &FunctionInterface,
    p: &Parameter,
    arg: &Arg<'_>,
    bindings: &BTreeMap<String, i64>,
    (bulk, is_writable): (bool, bool),
) -> Result<Encoded, CallError> {
    let name = &function.name;
    let mismatch = |what: String| mismatch(function, p, arg, what);
    let dims = function
        .dimensions_of(p, bindings)
        .map_err(|e| CallError::bad_argument(format!("argument `{}` of `{name}`: {e}", p.name)))?;
    let expected = function
        .element_count(p, bindings)
        .map_err(|e| CallError::bad_argument(format!("argument `{}` of `{name}`: {e}", p.name)))?;
    let array = match (p.mode, arg) {
        (Mode::Work, Arg::Work) => None,
        (Mode::Work, _) => {
            return Err(mismatch(
                "`Arg::Work` (WORK arrays stay on the server)".into(),
            ));
        }
        (Mode::In | Mode::InOut | Mode::Out, Arg::Data { .. }) => None,
        (Mode::In, Arg::In(a)) => Some(a),
        (Mode::InOut | Mode::Out, Arg::In(_)) if is_writable => None,
        (Mode::In, Arg::Out(_)) | (Mode::InOut | Mode::Out, Arg::Out(_)) => None,
        (Mode::In, _) => {
            return Err(mismatch(format!(
                "an array of {}",
                p.element_type.keyword()
            )));
        }
        _ => {
            return Err(mismatch(format!(
                "a mutable array of {} ({} results are written back)",
                p.element_type.keyword(),
                p.mode.keyword()
            )));
        }
    };
    let (actual_type, actual_len) = match arg {
        Arg::In(a) => (Some(a.element_type()), a.len()),
        Arg::Out(a) => (Some(a.as_ref().element_type()), a.as_ref().len()),
        Arg::Data { element_type, len } => (Some(*element_type), *len),
        _ => (None, 0),
    };
    if let Some(actual_type) = actual_type {
        if actual_type != p.element_type {
            return Err(CallError::bad_argument(format!(
                "argument `{}` of `{name}` must be an array of {}, got an array of {}",
                p.name,
                p.element_type.keyword(),
                actual_type.keyword()
            )));
        }
        if actual_len as u64 != expected {
            return Err(CallError::bad_argument(format!(
                "argument `{}` of `{name}` has {actual_len} elements, expected {expected} ({})",
                p.name,
                p.shape(&dims)
            )));
        }
    }
    let source = match (p.mode, array, arg) {
        (Mode::In, Some(a), _) => Some(a.reborrow()),
        (Mode::InOut, None, Arg::In(a)) => Some(a.reborrow()),
        (Mode::In | Mode::InOut, None, Arg::Out(a)) => Some(a.as_ref()),
        _ => None,
    };
    let element_type = ninf_proto::descriptor::element_type_to_proto(p.element_type).into();
    Ok(match source {
        Some(a) if bulk => Encoded::Bulk(v1::BulkArray {
            element_type,
            bytes: a.len() as u64 * p.element_type.size_bytes().unwrap_or(1),
        }),
        Some(a) => Encoded::Value(v1::ArgumentValue {
            value: Some(WireValue::Array(v1::Array {
                element_type,
                data: a.encode().into(),
            })),
        }),
        None => Encoded::Value(v1::ArgumentValue { value: None }),
    })
}

/// Writes a routine's OUT and INOUT results back into the caller's mutable arrays, checking
/// that every output arrived once with the right type and length.
pub fn decode_outputs(
    function: &FunctionInterface,
    outputs: Vec<v1::ExecOutput>,
    status: i64,
    args: &mut [Arg<'_>],
) -> Result<CallOutcome, CallError> {
    let name = &function.name;
    let bad = |message: String| CallError::new(crate::ErrorKind::CommunicationFailed, message);
    let mut received = vec![false; function.parameters.len()];
    for output in outputs {
        let index = output.parameter as usize;
        let Some(p) = function
            .parameters
            .get(index)
            .filter(|p| p.mode.is_output())
        else {
            return Err(bad(format!(
                "`{name}` returned a value for parameter {index}, which is not an output"
            )));
        };
        if std::mem::replace(&mut received[index], true) {
            return Err(bad(format!("`{name}` returned `{}` twice", p.name)));
        }
        let Some(WireValue::Array(array)) = output.value.and_then(|v| v.value) else {
            return Err(bad(format!("`{name}` returned no array for `{}`", p.name)));
        };
        let Some(Arg::Out(target)) = args.get_mut(index) else {
            return Err(CallError::bad_argument(format!(
                "argument `{}` of `{name}` must be a mutable array to receive the result",
                p.name
            )));
        };
        let expected_bytes =
            target.as_ref().len() * p.element_type.size_bytes().unwrap_or(0) as usize;
        if array.data.len() != expected_bytes
            || ninf_proto::descriptor::element_type_from_proto(
                v1::ElementType::try_from(array.element_type).unwrap_or_default(),
            ) != Some(p.element_type)
        {
            return Err(bad(format!(
                "`{name}` returned {} bytes for `{}`, expected {expected_bytes}",
                array.data.len(),
                p.name
            )));
        }
        target
            .decode_from(&array.data)
            .map_err(|e| bad(format!("result `{}` of `{name}`: {e}", p.name)))?;
    }
    if let Some(p) = missing_output(function, &received) {
        return Err(bad(format!(
            "`{name}` returned no value for output `{}`",
            p.name
        )));
    }
    Ok(CallOutcome { status })
}

/// The first output of `function` a reply left without a value (`received` by parameter).
pub(crate) fn missing_output<'a>(
    function: &'a FunctionInterface,
    received: &[bool],
) -> Option<&'a Parameter> {
    function
        .parameters
        .iter()
        .zip(received)
        .find(|(p, got)| p.mode.is_output() && !**got)
        .map(|(p, _)| p)
}

impl<'a> From<&'a ninf_proto::ArrayData> for ArrayRef<'a> {
    fn from(data: &'a ninf_proto::ArrayData) -> Self {
        use ninf_proto::ArrayData as D;
        match data {
            D::Char(v) => ArrayRef::Char(v),
            D::Short(v) => ArrayRef::Short(v),
            D::Int(v) => ArrayRef::Int(v),
            D::Long(v) => ArrayRef::Long(v),
            D::Float(v) => ArrayRef::Float(v),
            D::Double(v) => ArrayRef::Double(v),
            D::Scomplex(v) => ArrayRef::Scomplex(v),
            D::Dcomplex(v) => ArrayRef::Dcomplex(v),
        }
    }
}

impl<'a> From<&'a mut ninf_proto::ArrayData> for ArrayMut<'a> {
    fn from(data: &'a mut ninf_proto::ArrayData) -> Self {
        use ninf_proto::ArrayData as D;
        match data {
            D::Char(v) => ArrayMut::Char(v),
            D::Short(v) => ArrayMut::Short(v),
            D::Int(v) => ArrayMut::Int(v),
            D::Long(v) => ArrayMut::Long(v),
            D::Float(v) => ArrayMut::Float(v),
            D::Double(v) => ArrayMut::Double(v),
            D::Scomplex(v) => ArrayMut::Scomplex(v),
            D::Dcomplex(v) => ArrayMut::Dcomplex(v),
        }
    }
}
