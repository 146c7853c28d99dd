//! Packed arrays: typed Rust vectors to and from the `Array` message's little-endian bytes.
//! One codec for every component, so a client, a server's storage and an executable agree
//! byte for byte.

use ninf_idl::ElementType;
use num_complex::{Complex32, Complex64};

use crate::descriptor::{element_type_from_proto, element_type_to_proto};
use crate::v1;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ValueError {
    #[error("{len} bytes is not a whole number of {element} elements ({size} bytes each)")]
    RaggedArray {
        len: usize,
        element: &'static str,
        size: usize,
    },
    #[error("array has no valid element type")]
    UnknownElementType,
    #[error("{0} arrays are not supported")]
    UnsupportedElementType(&'static str),
}

/// A type that can be an array element on the wire.
pub trait Element: bytemuck::Pod + Default + Send + Sync + 'static {
    const TYPE: ElementType;
    const SIZE: usize;
    fn append_le(&self, out: &mut Vec<u8>);
    /// `bytes` holds exactly `SIZE` bytes.
    fn from_le(bytes: &[u8]) -> Self;
    fn into_array(values: Vec<Self>) -> ArrayData;
    fn from_array(array: ArrayData) -> Result<Vec<Self>, ArrayData>;
}

macro_rules! plain_element {
    ($t:ty, $variant:ident, $size:expr) => {
        impl Element for $t {
            const TYPE: ElementType = ElementType::$variant;
            const SIZE: usize = $size;
            fn append_le(&self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
            fn from_le(bytes: &[u8]) -> Self {
                let mut raw = [0u8; $size];
                raw.copy_from_slice(bytes);
                <$t>::from_le_bytes(raw)
            }
            fn into_array(values: Vec<Self>) -> ArrayData {
                ArrayData::$variant(values)
            }
            fn from_array(array: ArrayData) -> Result<Vec<Self>, ArrayData> {
                match array {
                    ArrayData::$variant(v) => Ok(v),
                    other => Err(other),
                }
            }
        }
    };
}

macro_rules! complex_element {
    ($t:ty, $part:ty, $variant:ident, $size:expr) => {
        impl Element for $t {
            const TYPE: ElementType = ElementType::$variant;
            const SIZE: usize = $size;
            fn append_le(&self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.re.to_le_bytes());
                out.extend_from_slice(&self.im.to_le_bytes());
            }
            fn from_le(bytes: &[u8]) -> Self {
                let half = $size / 2;
                <$t>::new(
                    <$part as Element>::from_le(&bytes[..half]),
                    <$part as Element>::from_le(&bytes[half..]),
                )
            }
            fn into_array(values: Vec<Self>) -> ArrayData {
                ArrayData::$variant(values)
            }
            fn from_array(array: ArrayData) -> Result<Vec<Self>, ArrayData> {
                match array {
                    ArrayData::$variant(v) => Ok(v),
                    other => Err(other),
                }
            }
        }
    };
}

plain_element!(u8, Char, 1);
plain_element!(i16, Short, 2);
plain_element!(i32, Int, 4);
plain_element!(i64, Long, 8);
plain_element!(f32, Float, 4);
plain_element!(f64, Double, 8);
complex_element!(Complex32, f32, Scomplex, 8);
complex_element!(Complex64, f64, Dcomplex, 16);

/// Encodes elements as packed little-endian bytes (a plain copy on little-endian machines).
pub fn encode<T: Element>(values: &[T]) -> Vec<u8> {
    if cfg!(target_endian = "little") {
        return bytemuck::cast_slice(values).to_vec();
    }
    let mut out = Vec::with_capacity(values.len() * T::SIZE);
    for v in values {
        v.append_le(&mut out);
    }
    out
}

/// Decodes packed little-endian bytes; the length must be a whole number of elements.
pub fn decode<T: Element>(bytes: &[u8]) -> Result<Vec<T>, ValueError> {
    check_whole::<T>(bytes)?;
    let len = bytes.len() / T::SIZE;
    if cfg!(target_endian = "little") {
        // One pass over the memory, not a zeroing pass and then a copy: arrays are large.
        let mut out = Vec::<T>::with_capacity(len);
        // SAFETY: `T: Pod`, so any bytes make valid values; the new vector has room for
        // `len` elements, exactly `len * T::SIZE == bytes.len()` bytes are copied into it
        // before its length is set, and a fresh allocation cannot overlap `bytes`.
        unsafe {
            std::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                out.as_mut_ptr().cast::<u8>(),
                bytes.len(),
            );
            out.set_len(len);
        }
        return Ok(out);
    }
    let mut out = vec![T::default(); len];
    decode_into(bytes, &mut out)?;
    Ok(out)
}

/// Decodes into an existing slice of exactly the right length (the caller checked it).
pub fn decode_into<T: Element>(bytes: &[u8], out: &mut [T]) -> Result<(), ValueError> {
    check_whole::<T>(bytes)?;
    if cfg!(target_endian = "little") && out.len() * T::SIZE == bytes.len() {
        crate::copy::copy(bytemuck::cast_slice_mut::<T, u8>(out), bytes);
        return Ok(());
    }
    for (slot, chunk) in out.iter_mut().zip(bytes.chunks_exact(T::SIZE)) {
        *slot = T::from_le(chunk);
    }
    Ok(())
}

fn check_whole<T: Element>(bytes: &[u8]) -> Result<(), ValueError> {
    if bytes.len().is_multiple_of(T::SIZE) {
        Ok(())
    } else {
        Err(ValueError::RaggedArray {
            len: bytes.len(),
            element: T::TYPE.keyword(),
            size: T::SIZE,
        })
    }
}

/// The element type of a wire array, checked as decoding it would check it (a known type
/// that arrays hold, and a whole number of elements) without touching its elements.
pub fn checked_element_type(array: &v1::Array) -> Result<ElementType, ValueError> {
    let element_type = v1::ElementType::try_from(array.element_type)
        .ok()
        .and_then(element_type_from_proto)
        .ok_or(ValueError::UnknownElementType)?;
    let size = element_type
        .size_bytes()
        .ok_or(ValueError::UnsupportedElementType(element_type.keyword()))? as usize;
    if !array.data.len().is_multiple_of(size) {
        return Err(ValueError::RaggedArray {
            len: array.data.len(),
            element: element_type.keyword(),
            size,
        });
    }
    Ok(element_type)
}

/// A vector seen as its bytes, so `Bytes` can own it without a copy.
struct LittleEndianArray<T>(Vec<T>);

impl<T: Element> AsRef<[u8]> for LittleEndianArray<T> {
    fn as_ref(&self) -> &[u8] {
        bytemuck::cast_slice(&self.0)
    }
}

/// An owned array of any element type.
#[derive(Debug, Clone, PartialEq)]
pub enum ArrayData {
    Char(Vec<u8>),
    Short(Vec<i16>),
    Int(Vec<i32>),
    Long(Vec<i64>),
    Float(Vec<f32>),
    Double(Vec<f64>),
    Scomplex(Vec<Complex32>),
    Dcomplex(Vec<Complex64>),
}

macro_rules! each_array {
    ($value:expr, $v:ident => $body:expr) => {
        match $value {
            ArrayData::Char($v) => $body,
            ArrayData::Short($v) => $body,
            ArrayData::Int($v) => $body,
            ArrayData::Long($v) => $body,
            ArrayData::Float($v) => $body,
            ArrayData::Double($v) => $body,
            ArrayData::Scomplex($v) => $body,
            ArrayData::Dcomplex($v) => $body,
        }
    };
}

impl ArrayData {
    /// A zero-filled array, as the executable allocates for OUT and WORK parameters.
    pub fn zeroed(element_type: ElementType, len: usize) -> Result<ArrayData, ValueError> {
        Ok(match element_type {
            ElementType::Char => ArrayData::Char(vec![0; len]),
            ElementType::Short => ArrayData::Short(vec![0; len]),
            ElementType::Int => ArrayData::Int(vec![0; len]),
            ElementType::Long => ArrayData::Long(vec![0; len]),
            ElementType::Float => ArrayData::Float(vec![0.0; len]),
            ElementType::Double => ArrayData::Double(vec![0.0; len]),
            ElementType::Scomplex => ArrayData::Scomplex(vec![Complex32::default(); len]),
            ElementType::Dcomplex => ArrayData::Dcomplex(vec![Complex64::default(); len]),
            other => return Err(ValueError::UnsupportedElementType(other.keyword())),
        })
    }

    pub fn element_type(&self) -> ElementType {
        match self {
            ArrayData::Char(_) => ElementType::Char,
            ArrayData::Short(_) => ElementType::Short,
            ArrayData::Int(_) => ElementType::Int,
            ArrayData::Long(_) => ElementType::Long,
            ArrayData::Float(_) => ElementType::Float,
            ArrayData::Double(_) => ElementType::Double,
            ArrayData::Scomplex(_) => ElementType::Scomplex,
            ArrayData::Dcomplex(_) => ElementType::Dcomplex,
        }
    }

    pub fn len(&self) -> usize {
        each_array!(self, v => v.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Decodes bytes of the given element type.
    pub fn decode(element_type: ElementType, bytes: &[u8]) -> Result<ArrayData, ValueError> {
        Ok(match element_type {
            ElementType::Char => ArrayData::Char(bytes.to_vec()),
            ElementType::Short => ArrayData::Short(decode(bytes)?),
            ElementType::Int => ArrayData::Int(decode(bytes)?),
            ElementType::Long => ArrayData::Long(decode(bytes)?),
            ElementType::Float => ArrayData::Float(decode(bytes)?),
            ElementType::Double => ArrayData::Double(decode(bytes)?),
            ElementType::Scomplex => ArrayData::Scomplex(decode(bytes)?),
            ElementType::Dcomplex => ArrayData::Dcomplex(decode(bytes)?),
            other => return Err(ValueError::UnsupportedElementType(other.keyword())),
        })
    }

    /// The first element's address, for handing the array to C.
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        each_array!(self, v => v.as_mut_ptr().cast())
    }

    pub fn encode(&self) -> Vec<u8> {
        each_array!(self, v => encode(v))
    }

    pub fn from_proto(array: &v1::Array) -> Result<ArrayData, ValueError> {
        ArrayData::decode(checked_element_type(array)?, &array.data)
    }

    pub fn to_proto(&self) -> v1::Array {
        v1::Array {
            element_type: element_type_to_proto(self.element_type()).into(),
            data: self.encode().into(),
        }
    }

    /// Like [`ArrayData::to_proto`], but gives the vector to the message without copying it
    /// (on little-endian machines, where the in-memory layout is the wire layout).
    pub fn into_proto(self) -> v1::Array {
        let element_type = element_type_to_proto(self.element_type()).into();
        let data = if cfg!(target_endian = "little") {
            each_array!(self, v => bytes::Bytes::from_owner(LittleEndianArray(v)))
        } else {
            self.encode().into()
        };
        v1::Array { element_type, data }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn decoding_gives_back_what_was_encoded_from_any_alignment() {
        let values: Vec<f64> = (0..1000).map(|i| f64::from(i) * 0.5 - 7.0).collect();
        let encoded = encode(&values);
        // Shift the bytes by every offset an f64 can have in a message.
        for shift in 0..8 {
            let mut buffer = vec![0u8; shift];
            buffer.extend_from_slice(&encoded);
            assert_eq!(decode::<f64>(&buffer[shift..]).unwrap(), values);
        }
        let complex: Vec<Complex64> = (0..10).map(|i| Complex64::new(i.into(), -1.0)).collect();
        assert_eq!(decode::<Complex64>(&encode(&complex)).unwrap(), complex);
        assert_eq!(decode::<i32>(&[]).unwrap(), Vec::<i32>::new());
        assert!(decode::<i32>(&[1, 2, 3]).is_err());
    }
}
