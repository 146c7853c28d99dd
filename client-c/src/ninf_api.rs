//! Ninf's own C API (`ninf.h`): `Ninf_call("mmul", ...)` by routine name on the grid the
//! default grid file names (connected on first use), `Ninf_call_async` and the waits, and
//! the seed's transactions: calls between `Ninf_transaction_begin()` and
//! `Ninf_transaction_end()` are recorded, linked by array address, and run as one graph.

use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void};
use std::sync::{Mutex, MutexGuard, Once};

use crate::library::runtime;
use ninf_client::grid::{ForeignArray, ForeignTransaction};
use ninf_idl::ElementType;

use crate::codes::{self, Failure, GRPC_NO_ERROR, GRPC_OTHER_ERROR_CODE, GrpcError};
use crate::ffi::{c_text, guard};
use crate::grpc_api::ninf_call_values;
use crate::handles::{self, CHandle};
use crate::values::{self, CValue};
use crate::{library, sessions};

const NINF_OK: c_int = 0;
const NINF_ERROR: c_int = -1;

/// Handles of the routines called by name, made once each.
static BY_NAME: Mutex<Option<HashMap<String, usize>>> = Mutex::new(None);
/// The transaction being recorded, between begin and end.
static RECORDING: Mutex<Option<ForeignTransaction>> = Mutex::new(None);

fn by_name() -> MutexGuard<'static, Option<HashMap<String, usize>>> {
    forget_with_the_grid();
    BY_NAME.lock().unwrap_or_else(|e| e.into_inner())
}

fn recording() -> MutexGuard<'static, Option<ForeignTransaction>> {
    forget_with_the_grid();
    RECORDING.lock().unwrap_or_else(|e| e.into_inner())
}

fn status(code: GrpcError) -> c_int {
    if code == GRPC_NO_ERROR {
        NINF_OK
    } else {
        NINF_ERROR
    }
}

/// The grid, connected with the default grid file if nobody initialised the library.
fn ensure_grid() -> Result<std::sync::Arc<library::Grid>, Failure> {
    if let Ok(grid) = library::grid() {
        return Ok(grid);
    }
    match library::initialize(None) {
        Ok(())
        | Err(Failure {
            code: codes::GRPC_ALREADY_INITIALIZED,
            ..
        }) => library::grid(),
        Err(failure) => Err(failure),
    }
}

/// The handle of routine `name` (placed by the metaserver), made on first use. NULL when
/// the grid cannot be reached or has no such routine (`Ninf_error` says which).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ninf_function(name: *const c_char) -> *mut CHandle {
    let mut found = std::ptr::null_mut();
    guard(|| {
        let grid = ensure_grid()?;
        // SAFETY: ninf.h's contract.
        let name = unsafe { c_text(name, "the routine name") }?;
        let mut cache = by_name();
        let cache = cache.get_or_insert_with(HashMap::new);
        if let Some(&handle) = cache.get(&name) {
            found = handle as *mut CHandle;
            return Ok(());
        }
        let handle = handles::make(&grid, &name, None)?;
        let c = Box::into_raw(Box::new(CHandle::empty()));
        // SAFETY: a fresh allocation.
        unsafe { handles::install(c, handle) };
        cache.insert(name, c as usize);
        found = c;
        Ok(())
    });
    found
}

/// A call by name: recorded into the open transaction, else run (waited for unless
/// `asynchronous`, which returns its session id).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ninf_call_named(
    handle: *mut CHandle,
    asynchronous: c_int,
    values: *const CValue,
    count: c_int,
) -> c_int {
    let mut recorded = false;
    let code = guard(|| {
        let mut open = recording();
        let Some(transaction) = open.as_mut() else {
            return Ok(());
        };
        recorded = true;
        if asynchronous != 0 {
            return Err(Failure::new(
                GRPC_OTHER_ERROR_CODE,
                "Ninf_call_async inside a transaction: use Ninf_call; the transaction runs at Ninf_transaction_end",
            ));
        }
        // SAFETY: ninf.h's contract: a handle from ninf_function, values as collected.
        let handle = unsafe { handles::get(handle) }?;
        // SAFETY: as above; the arrays stay alive until Ninf_transaction_end.
        let raw = unsafe { values::from_values(&handle.interface, values, count) }?;
        // SAFETY: as above.
        let args = unsafe { values::sized(&handle.interface, raw) }?;
        transaction.call(&handle.interface, &args)?;
        Ok(())
    });
    if recorded {
        return status(code);
    }
    let mut id = -1;
    // SAFETY: ninf.h's contract.
    let code = unsafe { ninf_call_values(handle, asynchronous, &mut id, values, count) };
    match (code, asynchronous != 0) {
        (GRPC_NO_ERROR, true) => id,
        (code, _) => status(code),
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn Ninf_wait(id: c_int) -> c_int {
    status(guard(|| sessions::wait(id)))
}

#[unsafe(no_mangle)]
pub extern "C" fn Ninf_wait_all() -> c_int {
    status(guard(|| sessions::wait_all(None)))
}

#[unsafe(no_mangle)]
pub extern "C" fn Ninf_transaction_begin() -> c_int {
    status(guard(|| {
        let grid = ensure_grid()?;
        let mut open = recording();
        if open.is_some() {
            return Err(Failure::new(
                GRPC_OTHER_ERROR_CODE,
                "a transaction is already open; end it with Ninf_transaction_end",
            ));
        }
        *open = Some(ForeignTransaction::for_client(&grid.proxy));
        Ok(())
    }))
}

/// Inside a transaction: the `bytes` bytes at `array` are an intermediate. The calls that
/// write it leave its final value on the grid, later calls read it there, and nothing is
/// written back into it.
#[unsafe(no_mangle)]
pub extern "C" fn Ninf_transaction_scratch(array: *const c_void, bytes: usize) -> c_int {
    status(guard(|| {
        let mut open = recording();
        let transaction = open.as_mut().ok_or_else(|| {
            Failure::new(
                GRPC_OTHER_ERROR_CODE,
                "Ninf_transaction_scratch outside a transaction (call Ninf_transaction_begin first)",
            )
        })?;
        // SAFETY: a scratch array is only compared by address and size, never read or
        // written; bytes of `char` need no alignment.
        let memory =
            unsafe { ForeignArray::new(array.cast_mut().cast(), bytes, ElementType::Char, false) }
                .map_err(|e| Failure::new(GRPC_OTHER_ERROR_CODE, e.message))?;
        transaction.scratch(memory);
        Ok(())
    }))
}

/// Runs the recorded calls as one graph and writes every written array in place.
#[unsafe(no_mangle)]
pub extern "C" fn Ninf_transaction_end() -> c_int {
    status(guard(|| {
        let transaction = recording().take().ok_or_else(|| {
            Failure::new(
                GRPC_OTHER_ERROR_CODE,
                "Ninf_transaction_end without Ninf_transaction_begin",
            )
        })?;
        let grid = ensure_grid()?;
        let mut run = transaction.into_run(None);
        let reply = runtime()?.block_on(run.send(&grid.proxy))?;
        run.finish(reply)?;
        Ok(())
    }))
}

#[unsafe(no_mangle)]
pub extern "C" fn Ninf_error() -> *const c_char {
    codes::last_message()
}

/// Has `grpc_finalize` forget these tables with the grid, once.
fn forget_with_the_grid() {
    static REGISTERED: Once = Once::new();
    REGISTERED.call_once(|| library::forget_at_finalize(forget_handles));
}

/// Forgets the handles made by name (their grid is gone).
fn forget_handles() {
    if let Some(cache) = by_name().take() {
        for (_, handle) in cache {
            let c = handle as *mut CHandle;
            // SAFETY: each came from `Box::into_raw` in `ninf_function`, freed only here.
            unsafe {
                let _ = handles::destruct(c);
                drop(Box::from_raw(c));
            }
        }
    }
    *recording() = None;
}
