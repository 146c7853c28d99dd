//! Function handles: a routine's interface, fetched once when the handle is made, and where
//! its calls go (the metaserver's choice through the proxy, or a named server). C holds a
//! `grpc_function_handle_t` whose one field points to a [`Handle`]; the library keeps the
//! set of handles it made, so a handle never initialised, already destructed, or garbage is
//! refused with `GRPC_INVALID_FUNCTION_HANDLE` instead of being followed.

use std::collections::HashSet;
use std::ffi::c_void;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::library::runtime;
use ninf_client::NinfClient;
use ninf_idl::{ElementType, FunctionInterface, Mode, Parameter};

use crate::codes::{Failure, GRPC_FUNCTION_NOT_FOUND, GRPC_INVALID_FUNCTION_HANDLE};
use crate::library::Grid;

/// What C declares: `typedef struct { void *ninf_private; } grpc_function_handle_t`.
#[repr(C)]
pub struct CHandle {
    private: *mut c_void,
}

impl CHandle {
    /// A handle holding nothing, for the library's own handles.
    pub fn empty() -> CHandle {
        CHandle {
            private: std::ptr::null_mut(),
        }
    }
}

/// Where a handle's calls run.
#[derive(Clone)]
pub enum Target {
    /// Through the proxy, on the server the metaserver picks per call.
    Placed,
    /// Straight to this server.
    Server(NinfClient),
}

/// An initialised handle.
pub struct Handle {
    pub interface: Arc<FunctionInterface>,
    pub target: Target,
}

/// Addresses of the live handles.
static LIVE: Mutex<Option<HashSet<usize>>> = Mutex::new(None);

fn live() -> MutexGuard<'static, Option<HashSet<usize>>> {
    LIVE.lock().unwrap_or_else(|e| e.into_inner())
}

fn invalid() -> Failure {
    Failure::new(
        GRPC_INVALID_FUNCTION_HANDLE,
        "not a function handle made by grpc_function_handle_default or _init (or it was destructed)",
    )
}

/// Makes a handle for `function` on `grid`, asking its interface now: an unknown routine
/// is `GRPC_FUNCTION_NOT_FOUND` here rather than at the first call.
pub fn make(grid: &Grid, function: &str, server: Option<&str>) -> Result<Handle, Failure> {
    let (interface, target) = match server {
        None => {
            let proxy = grid.proxy.clone();
            let name = function.to_string();
            let interface = runtime()?.block_on(async move { proxy.describe(&name).await })?;
            (interface, Target::Placed)
        }
        Some(address) => {
            let client = grid.server(address)?;
            let asked = client.clone();
            let name = function.to_string();
            let interface = runtime()?.block_on(async move { asked.describe(&name).await })?;
            (interface, Target::Server(client))
        }
    };
    if interface.name != function {
        return Err(Failure::new(
            GRPC_FUNCTION_NOT_FOUND,
            format!("no routine `{function}` on the grid"),
        ));
    }
    Ok(Handle { interface, target })
}

/// Stores `handle` in C's struct (replacing nothing: C's struct may hold garbage).
///
/// # Safety
/// `c` must point to a writable `grpc_function_handle_t`.
pub unsafe fn install(c: *mut CHandle, handle: Handle) {
    let pointer = Box::into_raw(Box::new(handle));
    live()
        .get_or_insert_with(HashSet::new)
        .insert(pointer as usize);
    // SAFETY: the caller's contract.
    unsafe { (*c).private = pointer.cast() };
}

/// Frees the handle C's struct holds, if it is a live one.
///
/// # Safety
/// `c` must be null or point to a readable, writable `grpc_function_handle_t`.
pub unsafe fn destruct(c: *mut CHandle) -> Result<(), Failure> {
    if c.is_null() {
        return Err(invalid());
    }
    // SAFETY: the caller's contract.
    let pointer = unsafe { (*c).private } as usize;
    {
        let mut live = live();
        if !live.as_mut().is_some_and(|set| set.remove(&pointer)) {
            return Err(invalid());
        }
        // The last handle gone, the set goes too: nothing of the library's stays allocated.
        if live.as_ref().is_some_and(HashSet::is_empty) {
            *live = None;
        }
    }
    // SAFETY: it was live, so it came from `Box::into_raw` in `install` and nothing freed it.
    drop(unsafe { Box::from_raw(pointer as *mut Handle) });
    // SAFETY: the caller's contract.
    unsafe { (*c).private = std::ptr::null_mut() };
    Ok(())
}

/// The handle C's struct holds: its interface and target, cloned, so a call keeps them
/// even if the handle is destructed while it runs.
///
/// # Safety
/// `c` must be null or point to a readable `grpc_function_handle_t`.
pub unsafe fn get(c: *const CHandle) -> Result<Handle, Failure> {
    if c.is_null() {
        return Err(invalid());
    }
    // SAFETY: the caller's contract.
    let pointer = unsafe { (*c).private } as usize;
    let guard = live();
    if !guard.as_ref().is_some_and(|set| set.contains(&pointer)) {
        return Err(invalid());
    }
    // SAFETY: live handles are valid `Handle`s, freed only under this lock.
    let handle = unsafe { &*(pointer as *const Handle) };
    Ok(Handle {
        interface: handle.interface.clone(),
        target: handle.target.clone(),
    })
}

/// `NINF_VALUE_*` of grpc.h: how a parameter travels through C's variable arguments.
pub const VALUE_INT: i32 = 1;
pub const VALUE_LONG: i32 = 2;
pub const VALUE_DOUBLE: i32 = 3;
pub const VALUE_SCOMPLEX: i32 = 4;
pub const VALUE_DCOMPLEX: i32 = 5;
pub const VALUE_STRING: i32 = 6;
pub const VALUE_POINTER: i32 = 7;

/// How `parameter` is passed: arrays (and WORK arrays) by pointer, IN scalars by value as C
/// promotes them.
pub fn value_kind(parameter: &Parameter) -> i32 {
    if parameter.mode == Mode::Work || parameter.is_array() {
        return VALUE_POINTER;
    }
    match parameter.element_type {
        ElementType::Char | ElementType::Short | ElementType::Int => VALUE_INT,
        ElementType::Long => VALUE_LONG,
        ElementType::Float | ElementType::Double => VALUE_DOUBLE,
        ElementType::Scomplex => VALUE_SCOMPLEX,
        ElementType::Dcomplex => VALUE_DCOMPLEX,
        ElementType::String | ElementType::Filename => VALUE_STRING,
    }
}
