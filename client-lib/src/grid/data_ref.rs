//! A handle of data kept on the grid as the client holds it (docs/data.md): its id, element
//! type, shape and management mode, with no I/O; what the grid records of it; and the spec a
//! new handle is asked for with.

use ninf_idl::ElementType;
use ninf_proto::descriptor::{element_type_from_proto, element_type_to_proto};
use ninf_proto::v1;

use crate::{CallError, ErrorKind};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DataMode {
    /// Kept where it was put or last written; never moved or copied by the grid.
    #[default]
    Sticky,
    /// Sticky; the same here.
    UniqueSticky,
    /// The grid may keep further copies where they make calls cheaper.
    Persistent,
}

impl DataMode {
    /// The mode's name in Python and the docs: `sticky`, `unique_sticky`, `persistent`.
    pub fn name(self) -> &'static str {
        match self {
            DataMode::Sticky => "sticky",
            DataMode::UniqueSticky => "unique_sticky",
            DataMode::Persistent => "persistent",
        }
    }

    /// The mode named `name`.
    pub fn from_name(name: &str) -> Result<DataMode, CallError> {
        match name {
            "sticky" => Ok(DataMode::Sticky),
            "unique_sticky" => Ok(DataMode::UniqueSticky),
            "persistent" => Ok(DataMode::Persistent),
            _ => Err(CallError::bad_argument(format!(
                "mode must be \"sticky\", \"unique_sticky\" or \"persistent\", got {name:?}"
            ))),
        }
    }

    pub(crate) fn to_proto(self) -> v1::DataMode {
        match self {
            DataMode::Sticky => v1::DataMode::Sticky,
            DataMode::UniqueSticky => v1::DataMode::UniqueSticky,
            DataMode::Persistent => v1::DataMode::Persistent,
        }
    }

    fn from_proto(mode: i32) -> DataMode {
        match v1::DataMode::try_from(mode) {
            Ok(v1::DataMode::UniqueSticky) => DataMode::UniqueSticky,
            Ok(v1::DataMode::Persistent) => DataMode::Persistent,
            _ => DataMode::Sticky,
        }
    }
}

/// A handle of data kept on the grid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataRef {
    id: String,
    element_type: ElementType,
    shape: Vec<u64>,
    fortran_order: bool,
    bytes: u64,
    mode: DataMode,
}

impl DataRef {
    /// Its id: 128 random bits, in hex.
    pub fn id(&self) -> &str {
        &self.id
    }
    pub fn element_type(&self) -> ElementType {
        self.element_type
    }
    pub fn shape(&self) -> &[u64] {
        &self.shape
    }
    /// Whether the shape is in Fortran (column-major) order.
    pub fn fortran_order(&self) -> bool {
        self.fortran_order
    }
    pub fn nbytes(&self) -> u64 {
        self.bytes
    }
    /// Elements it holds.
    pub fn len(&self) -> usize {
        (self.bytes / self.element_type.size_bytes().unwrap_or(1).max(1)) as usize
    }
    pub fn is_empty(&self) -> bool {
        self.bytes == 0
    }
    pub fn mode(&self) -> DataMode {
        self.mode
    }

    pub(crate) fn of(info: &v1::DataInfo) -> Result<DataRef, CallError> {
        let spec = info.spec.clone().unwrap_or_default();
        let element_type = v1::ElementType::try_from(spec.element_type)
            .ok()
            .and_then(element_type_from_proto)
            .ok_or_else(|| {
                CallError::new(
                    ErrorKind::CommunicationFailed,
                    format!("data handle `{}` has an unknown element type", info.id),
                )
            })?;
        Ok(DataRef {
            id: info.id.clone(),
            element_type,
            shape: spec.shape,
            fortran_order: spec.fortran_order,
            bytes: spec.bytes,
            mode: DataMode::from_proto(spec.mode),
        })
    }
}

/// A handle as the grid records it now.
#[derive(Debug, Clone, PartialEq)]
pub struct DataInfo {
    pub data: DataRef,
    /// The servers holding a copy (none until a value is written).
    pub servers: Vec<String>,
    /// Unix seconds: when it is deleted unless renewed.
    pub lease_until: f64,
}

/// An array's shape, for the client that reads it back: its dimensions (one, of every
/// element, when empty) and whether they are in Fortran (column-major) order.
#[derive(Debug, Clone, Copy, Default)]
pub struct Shape<'a> {
    pub dims: &'a [u64],
    pub fortran_order: bool,
}

/// The spec of a put of `bytes` bytes kept in `replicas` copies (persistent data only).
pub(crate) fn put_spec(
    element_type: ElementType,
    shape: Shape<'_>,
    bytes: u64,
    (mode, replicas): (DataMode, u32),
) -> Result<v1::DataSpec, CallError> {
    if replicas > 1 && mode != DataMode::Persistent {
        return Err(CallError::bad_argument(format!(
            "replicas={replicas} needs mode \"persistent\": {} data is kept in one copy",
            mode.name()
        )));
    }
    let mut spec = spec(element_type, shape, bytes, mode, false)?;
    spec.replicas = replicas;
    Ok(spec)
}

pub(crate) fn spec(
    element_type: ElementType,
    Shape {
        dims: shape,
        fortran_order,
    }: Shape<'_>,
    bytes: u64,
    mode: DataMode,
    empty: bool,
) -> Result<v1::DataSpec, CallError> {
    let size = element_type
        .size_bytes()
        .filter(|&s| s > 0)
        .ok_or_else(|| {
            CallError::bad_argument(format!(
                "data on the grid must be an array of numbers, not {}",
                element_type.keyword()
            ))
        })?;
    let shape = if shape.is_empty() {
        vec![bytes / size]
    } else {
        shape.to_vec()
    };
    if shape.iter().product::<u64>() * size != bytes {
        return Err(CallError::bad_argument(format!(
            "shape {shape:?} of {} holds {} bytes, not {bytes}",
            element_type.keyword(),
            shape.iter().product::<u64>() * size
        )));
    }
    Ok(v1::DataSpec {
        element_type: element_type_to_proto(element_type).into(),
        bytes,
        shape,
        mode: mode.to_proto().into(),
        empty,
        replicas: 0,
        fortran_order,
        put_id: String::new(),
    })
}
