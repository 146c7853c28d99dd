//! GFD.186's data handles (`grpc_data.h`): what a `grpc_data_t` describes (element type,
//! dimensions, input and output locations with their management modes), the table of live
//! handles by address, the memory mapping of `memory://` keys, and what a handle becomes as
//! a call's argument: data kept on the grid (sent once, from its input) or an ordinary array
//! in mapped memory.

pub mod transfer;
pub mod uri;

use std::collections::{HashMap, HashSet};
use std::ffi::c_void;
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use ninf_client::grid::{DataMode, DataRef, ForeignArg, ForeignArray, Shape};
use ninf_idl::{ElementType, Parameter};

use crate::codes::{Failure, GRPC_OTHER_ERROR_CODE};
use crate::library::{self, runtime};
use uri::Location;

/// grpc_data.h's `grpc_data_t`.
#[repr(C)]
pub struct CData {
    private: *mut c_void,
}

/// A management mode (`grpc_data_mode_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Volatile,
    StrictlyVolatile,
    Kept(DataMode),
}

impl Mode {
    pub fn from_c(mode: i32) -> Option<Mode> {
        Some(match mode {
            0 => Mode::Volatile,
            1 => Mode::StrictlyVolatile,
            2 => Mode::Kept(DataMode::Sticky),
            3 => Mode::Kept(DataMode::UniqueSticky),
            4 => Mode::Kept(DataMode::Persistent),
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Mode::Volatile => "GRPC_VOLATILE",
            Mode::StrictlyVolatile => "GRPC_STRICTLY_VOLATILE",
            Mode::Kept(DataMode::Sticky) => "GRPC_STICKY",
            Mode::Kept(DataMode::UniqueSticky) => "GRPC_UNIQUE_STICKY",
            Mode::Kept(DataMode::Persistent) => "GRPC_PERSISTENT",
        }
    }
}

/// `GRPC_END_LIST`.
pub const END_LIST: i32 = 5;

/// The element type of a `grpc_data_type_t`, or why it cannot be data here.
pub fn element_type_of(data_type: i32) -> Result<ElementType, Failure> {
    Ok(match data_type {
        1 => ElementType::Int,
        2 => ElementType::Double,
        3 | 12 => ElementType::Dcomplex,
        7 => ElementType::Char,
        8 => ElementType::Short,
        9 => ElementType::Long,
        10 => ElementType::Float,
        11 => ElementType::Scomplex,
        0 | 4 | 5 | 6 => {
            return Err(bad(format!(
                "grpc_data_init: data type {data_type} (GRPC_BOOL, GRPC_STRING, GRPC_FILE or \
                 a container) is not an array of numbers, which is what the grid keeps"
            )));
        }
        _ => {
            return Err(bad(format!(
                "grpc_data_init: unknown data type {data_type}"
            )));
        }
    })
}

/// The `grpc_data_type_t` name of an element type, for `grpc_data_getinfo`.
pub fn type_name(t: ElementType) -> &'static str {
    match t {
        ElementType::Int => "GRPC_INT",
        ElementType::Double => "GRPC_DOUBLE",
        ElementType::Dcomplex => "GRPC_DCOMPLEX",
        ElementType::Char => "GRPC_CHAR",
        ElementType::Short => "GRPC_SHORT",
        ElementType::Long => "GRPC_LONG",
        ElementType::Float => "GRPC_FLOAT",
        ElementType::Scomplex => "GRPC_SCOMPLEX",
        _ => "GRPC_BOOL",
    }
}

pub fn bad(message: impl Into<String>) -> Failure {
    Failure::new(GRPC_OTHER_ERROR_CODE, message)
}

/// What a `grpc_data_t` describes.
#[derive(Debug)]
pub struct Data {
    pub element_type: ElementType,
    pub dims: Vec<u64>,
    pub inputs: Vec<(String, Location)>,
    pub outputs: Vec<(String, Location, Mode)>,
    /// Its handle on the grid, once it is kept there.
    pub on_grid: Option<DataRef>,
}

impl Data {
    pub fn elements(&self) -> u64 {
        self.dims.iter().product()
    }

    pub fn bytes(&self) -> u64 {
        self.elements() * self.element_type.size_bytes().unwrap_or(0)
    }

    /// How the grid keeps it: the mode of its `ninf://grid` output, or of the handle it was
    /// bound to; `None` for volatile data.
    pub fn kept(&self) -> Option<DataMode> {
        if let Some(on_grid) = &self.on_grid {
            return Some(on_grid.mode());
        }
        self.outputs
            .iter()
            .find_map(|(_, location, mode)| match (location, mode) {
                (Location::Grid(_), Mode::Kept(kept)) => Some(*kept),
                _ => None,
            })
    }

    pub fn mode(&self) -> Mode {
        self.kept().map_or(Mode::Volatile, Mode::Kept)
    }

    fn shape(&self) -> Shape<'_> {
        Shape {
            dims: &self.dims,
            fortran_order: false,
        }
    }
}

pub type Shared = Arc<Mutex<Data>>;

/// Live handles by the address of their `grpc_data_t`; addresses freed since, so that a
/// freed handle passed to a call is refused rather than read as an array.
#[derive(Default)]
struct Table {
    live: HashMap<usize, Shared>,
    freed: HashSet<usize>,
    memory: HashMap<String, usize>,
}

static TABLE: Mutex<Option<Table>> = Mutex::new(None);
/// What a freed `grpc_data_t` holds, to tell it from an array that now lives at its address.
static FREED_MARK: u8 = 0;

fn table() -> MutexGuard<'static, Option<Table>> {
    TABLE.lock().unwrap_or_else(|e| e.into_inner())
}

fn with_table<T>(f: impl FnOnce(&mut Table) -> T) -> T {
    f(table().get_or_insert_with(Table::default))
}

fn freed_mark() -> *mut c_void {
    std::ptr::addr_of!(FREED_MARK).cast_mut().cast()
}

/// Records `data` as the handle at `c`.
///
/// # Safety
/// `c` must be writable.
pub unsafe fn install(c: *mut CData, data: Data) {
    let address = c as usize;
    with_table(|t| {
        t.freed.remove(&address);
        t.live.insert(address, Arc::new(Mutex::new(data)));
    });
    // SAFETY: the caller's contract.
    unsafe {
        c.write(CData {
            private: address as *mut c_void,
        })
    };
}

/// The handle at `c`.
pub fn get(c: *const CData) -> Result<Shared, Failure> {
    with_table(|t| t.live.get(&(c as usize)).cloned()).ok_or_else(|| {
        bad(format!(
            "{c:p} is not a grpc_data_t made by grpc_data_init (or it was freed or unbound)"
        ))
    })
}

/// Forgets the handle at `c`; later calls naming it are refused.
///
/// # Safety
/// `c` must be a live handle's `grpc_data_t`, writable.
pub unsafe fn forget(c: *mut CData) {
    let address = c as usize;
    with_table(|t| {
        t.live.remove(&address);
        t.freed.insert(address);
    });
    // SAFETY: the caller's contract.
    unsafe {
        c.write(CData {
            private: freed_mark(),
        })
    };
}

/// Forgets every handle and mapping (`grpc_finalize`).
pub fn forget_all() {
    *table() = None;
}

pub fn map_memory(key: &str, address: usize) {
    with_table(|t| t.memory.insert(key.to_string(), address));
}

pub fn mapped(key: &str) -> Result<usize, Failure> {
    with_table(|t| t.memory.get(key).copied()).ok_or_else(|| {
        bad(format!(
            "memory://localhost/{key}: no memory is mapped to `{key}` \
             (grpc_data_memory_mapping_set)"
        ))
    })
}

/// What a pointer C passed for an array parameter is: `None` for an ordinary array, else
/// the handle it names.
pub fn handle_at(pointer: *const c_void) -> Option<Result<Shared, Failure>> {
    let address = pointer as usize;
    let (live, freed) = with_table(|t| (t.live.get(&address).cloned(), t.freed.contains(&address)));
    if let Some(data) = live {
        return Some(Ok(data));
    }
    // SAFETY: a freed grpc_data_t's address held a `CData`, which `forget` marked.
    if freed && unsafe { pointer.cast::<CData>().read_unaligned() }.private == freed_mark() {
        return Some(Err(bad(format!(
            "the grpc_data_t at {pointer:p} was freed or unbound (grpc_data_free, \
             grpc_data_unbind)"
        ))));
    }
    None
}

/// The handle `data` as argument `p` of `function`, which needs `count` elements: data kept
/// on the grid (put there first if it is not yet), or an array in mapped memory. A transfer
/// of it in flight must have been waited for.
pub fn argument(
    data: &Shared,
    function: &str,
    p: &Parameter,
    count: usize,
) -> Result<ForeignArg, Failure> {
    let mut d = data.lock().unwrap_or_else(|e| e.into_inner());
    let what = format!("argument `{}` of `{function}`", p.name);
    if d.element_type != p.element_type || d.elements() != count as u64 {
        return Err(bad(format!(
            "{what}: the grpc_data_t holds {} elements of {}, but the call needs {count} of {}",
            d.elements(),
            d.element_type.keyword(),
            p.element_type.keyword()
        )));
    }
    match d.kept() {
        Some(mode) => Ok(ForeignArg::Data(keep_on_grid(&mut d, mode)?)),
        None => in_memory(&d, &what, count, p.mode.is_output()),
    }
}

/// The handle on the grid, putting its value there from its first input (or keeping a
/// place for an output, when it has none) the first time.
fn keep_on_grid(d: &mut Data, mode: DataMode) -> Result<DataRef, Failure> {
    if let Some(on_grid) = &d.on_grid {
        return Ok(on_grid.clone());
    }
    let grid = library::grid()?;
    let made = match d.inputs.first() {
        Some((_, location)) => {
            let value = read_client(location, d.bytes())?;
            runtime()?.block_on(grid.proxy.put_bytes(d.element_type, d.shape(), value, mode))?
        }
        None => runtime()?.block_on(grid.proxy.empty(d.element_type, d.shape(), mode))?,
    };
    d.on_grid = Some(made.clone());
    Ok(made)
}

/// Volatile data as an ordinary array: its memory:// location (the input's, else the
/// output's).
fn in_memory(d: &Data, what: &str, count: usize, writes: bool) -> Result<ForeignArg, Failure> {
    let memory = |(_, location): (&String, &Location)| match location {
        Location::Memory(key) => Some(key.clone()),
        _ => None,
    };
    let input = d.inputs.iter().map(|(u, l)| (u, l)).find_map(memory);
    let output = d.outputs.iter().map(|(u, l, _)| (u, l)).find_map(memory);
    if let (Some(i), Some(o), true) = (&input, &output, writes)
        && i != o
    {
        return Err(bad(format!(
            "{what}: volatile data is read from and written to one memory location, not \
             `{i}` and `{o}`"
        )));
    }
    let key = input.or(output).ok_or_else(|| {
        bad(format!(
            "{what}: volatile data in a call lives in client memory (memory://localhost/KEY); \
             keep it on the grid (output ninf://grid) or move it with grpc_data_transfer"
        ))
    })?;
    let address = mapped(&key)?;
    // SAFETY: grpc_data.h's contract: mapped memory holds the data and stays alive while
    // it is called with.
    let array = unsafe { ForeignArray::new(address as *mut u8, count, d.element_type, writes) }
        .map_err(|e| bad(format!("{what}: {}", e.message)))?;
    Ok(ForeignArg::Array(array))
}

/// The value at a client location (memory or file), `bytes` long.
pub fn read_client(location: &Location, bytes: u64) -> Result<Bytes, Failure> {
    let len = usize::try_from(bytes).map_err(|_| bad("the data is too large"))?;
    match location {
        Location::Memory(key) => {
            let address = mapped(key)?;
            // SAFETY: grpc_data.h's contract: mapped memory holds the data's bytes.
            let slice = unsafe { std::slice::from_raw_parts(address as *const u8, len) };
            Ok(Bytes::copy_from_slice(slice))
        }
        Location::File(path) => {
            let value = std::fs::read(path)
                .map_err(|e| bad(format!("cannot read {}: {e}", path.display())))?;
            if value.len() != len {
                return Err(bad(format!(
                    "{} holds {} bytes, but the data is {len}",
                    path.display(),
                    value.len()
                )));
            }
            Ok(Bytes::from(value))
        }
        Location::Grid(_) => Err(bad("internal: the grid is not a client location")),
    }
}

/// Writes `value` to a client location (memory or file).
pub fn write_client(location: &Location, value: &[u8]) -> Result<(), Failure> {
    match location {
        Location::Memory(key) => {
            let address = mapped(key)?;
            // SAFETY: grpc_data.h's contract: mapped memory has room for the data's bytes and
            // nobody else writes it during the transfer.
            unsafe {
                std::ptr::copy_nonoverlapping(value.as_ptr(), address as *mut u8, value.len())
            };
            Ok(())
        }
        Location::File(path) => std::fs::write(path, value)
            .map_err(|e| bad(format!("cannot write {}: {e}", path.display()))),
        Location::Grid(_) => Err(bad("internal: the grid is not a client location")),
    }
}
