//! Array arguments as a routine sees them: slices, wherever their elements lie. A large IN
//! array is read where it lies in the shared request region; a large OUT or INOUT array is
//! written where the reply carries it, in the shared reply region; the others are vectors.
//! Nothing is copied on the way in or out of the routine beyond what the call needs (an INOUT
//! array's input, once, into its place in the reply).

use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

use bytes::Bytes;
use ninf_idl::ElementType;
use ninf_proto::{ArrayData, Element, ValueError, v1};

/// An array argument of any element type, as a call's arguments hold it.
#[derive(Debug)]
pub enum ArrayStorage {
    Owned(ArrayData),
    /// Read-only bytes in the request region, aligned for their element type.
    Shared {
        element_type: ElementType,
        bytes: Bytes,
    },
    /// Bytes in the reply region, `offset` bytes from its start.
    Region(RegionPlace),
}

/// A place reserved for one output array: in the reply region, or in the host's store
/// region when the host asked for the output there.
#[derive(Debug, Clone, Copy)]
pub struct RegionPlace {
    pub element_type: ElementType,
    /// Bytes from the start of its region.
    pub offset: usize,
    /// In the host's store region rather than the reply region.
    pub in_store: bool,
    /// In this one of the request's lent files rather than the reply region.
    pub lent: Option<u32>,
    /// Already holds the INOUT array's input: the host wrote it there.
    pub holds_input: bool,
    /// The place's first byte. It stays valid while the reply region is neither grown nor
    /// rewritten: the runtime reserves the region before it lays the places out and writes
    /// the reply's message only below them. A place in the store region lies in a mapping the
    /// executable keeps for its life.
    pub start: NonNull<u8>,
    pub bytes: usize,
}

impl RegionPlace {
    fn as_bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: see `start`: the place lies inside the reserved, mapped reply region, and
        // places do not overlap one another or the message.
        unsafe { std::slice::from_raw_parts_mut(self.start.as_ptr(), self.bytes) }
    }
}

/// Bytes of one element (arrays never hold strings or files).
fn element_size(element_type: ElementType) -> usize {
    element_type.size_bytes().unwrap_or(1).max(1) as usize
}

/// Alignment of one element in memory.
fn element_align(element_type: ElementType) -> usize {
    match element_type {
        ElementType::Char => 1,
        ElementType::Short => 2,
        ElementType::Int | ElementType::Float | ElementType::Scomplex => 4,
        _ => 8,
    }
}

impl ArrayStorage {
    /// An array from its wire form. With `in_place`, bytes aligned for their element type
    /// are kept where they lie (read-only); otherwise they are decoded into a vector.
    pub fn from_wire(array: &v1::Array, in_place: bool) -> Result<ArrayStorage, ValueError> {
        let element_type = ninf_proto::values::checked_element_type(array)?;
        let aligned = (array.data.as_ptr() as usize).is_multiple_of(element_align(element_type));
        if in_place && aligned {
            return Ok(ArrayStorage::Shared {
                element_type,
                bytes: array.data.clone(),
            });
        }
        ArrayData::decode(element_type, &array.data).map(ArrayStorage::Owned)
    }

    /// An output array in its reserved place: zeroed, or holding `input` (an INOUT array's
    /// bytes, already checked to fill the place exactly).
    pub fn placed(mut place: RegionPlace, input: Option<&[u8]>) -> ArrayStorage {
        let target = place.as_bytes_mut();
        match input {
            Some(bytes) if bytes.len() == target.len() => ninf_proto::copy::copy(target, bytes),
            _ => ninf_proto::copy::zero(target),
        }
        ArrayStorage::Region(place)
    }

    pub fn element_type(&self) -> ElementType {
        match self {
            ArrayStorage::Owned(data) => data.element_type(),
            ArrayStorage::Shared { element_type, .. } => *element_type,
            ArrayStorage::Region(place) => place.element_type,
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            ArrayStorage::Owned(data) => data.len(),
            ArrayStorage::Shared {
                element_type,
                bytes,
            } => bytes.len() / element_size(*element_type),
            ArrayStorage::Region(place) => place.bytes / element_size(place.element_type),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The first element, for a C routine; a read-only array is first copied when
    /// `writable`.
    pub fn pointer(&mut self, writable: bool) -> *mut std::ffi::c_void {
        if writable
            && let ArrayStorage::Shared {
                bytes,
                element_type,
            } = self
        {
            // A read-only array's bytes decode without error: they were checked on the way in.
            if let Ok(data) = ArrayData::decode(*element_type, bytes) {
                *self = ArrayStorage::Owned(data);
            }
        }
        match self {
            ArrayStorage::Owned(data) => data.as_mut_ptr().cast(),
            ArrayStorage::Shared { bytes, .. } => bytes.as_ptr().cast_mut().cast(),
            ArrayStorage::Region(place) => place.start.as_ptr().cast(),
        }
    }
}

/// One array argument of element type `T`, as a routine gets it: a slice wherever its
/// elements lie. Writing to a read-only (IN) array first copies it.
#[derive(Debug)]
pub struct ArrayBuf<T: Element> {
    inner: Inner<T>,
}

#[derive(Debug)]
enum Inner<T> {
    Owned(Vec<T>),
    Shared(Bytes, PhantomData<T>),
    Region(RegionPlace, PhantomData<T>),
}

impl<T: Element> ArrayBuf<T> {
    /// The array as `T`s, or the storage back when it holds another element type.
    pub fn from_storage(storage: ArrayStorage) -> Result<ArrayBuf<T>, ArrayStorage> {
        if storage.element_type() != T::TYPE {
            return Err(storage);
        }
        let inner = match storage {
            ArrayStorage::Owned(data) => {
                Inner::Owned(T::from_array(data).map_err(ArrayStorage::Owned)?)
            }
            ArrayStorage::Shared { bytes, .. } => Inner::Shared(bytes, PhantomData),
            ArrayStorage::Region(place) => Inner::Region(place, PhantomData),
        };
        Ok(ArrayBuf { inner })
    }

    pub fn into_storage(self) -> ArrayStorage {
        match self.inner {
            Inner::Owned(values) => ArrayStorage::Owned(T::into_array(values)),
            Inner::Shared(bytes, _) => ArrayStorage::Shared {
                element_type: T::TYPE,
                bytes,
            },
            Inner::Region(place, _) => ArrayStorage::Region(place),
        }
    }
}

impl<T: Element> From<Vec<T>> for ArrayBuf<T> {
    fn from(values: Vec<T>) -> Self {
        ArrayBuf {
            inner: Inner::Owned(values),
        }
    }
}

impl<T: Element> Deref for ArrayBuf<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        match &self.inner {
            Inner::Owned(values) => values,
            // Shared bytes were checked for T's alignment and a whole number of elements.
            Inner::Shared(bytes, _) => bytemuck::try_cast_slice(bytes).unwrap_or(&[]),
            Inner::Region(place, _) => {
                // SAFETY: see `RegionPlace::start`; the place is 64-byte aligned and holds a
                // whole number of `T`s, which are plain data.
                unsafe {
                    std::slice::from_raw_parts(
                        place.start.as_ptr().cast::<T>(),
                        place.bytes / size_of::<T>(),
                    )
                }
            }
        }
    }
}

impl<T: Element> DerefMut for ArrayBuf<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        if let Inner::Shared(..) = &self.inner {
            self.inner = Inner::Owned(self.to_vec());
        }
        match &mut self.inner {
            Inner::Owned(values) => values,
            Inner::Shared(..) => &mut [],
            Inner::Region(place, _) => {
                // SAFETY: as in `deref`, and this buffer is the place's only user.
                unsafe {
                    std::slice::from_raw_parts_mut(
                        place.start.as_ptr().cast::<T>(),
                        place.bytes / size_of::<T>(),
                    )
                }
            }
        }
    }
}
