//! The exported GridRPC functions (`grpc.h`): each checks what C passed, runs the library's
//! logic, and answers with a code; panics stop here as `GRPC_OTHER_ERROR_CODE`.

use std::ffi::{c_char, c_int, c_void};
use std::path::PathBuf;

use crate::library::runtime;
use ninf_client::ForeignCall;
use ninf_client::grid::{ForeignArg, ForeignTransaction};

use crate::argstack::ArgStack;
use crate::codes::{
    self, Failure, GRPC_INVALID_SESSION_ID, GRPC_NO_ERROR, GrpcError, SESSION_VOID,
};
use crate::ffi::{c_text, guard, other, store};
use crate::handles::{self, CHandle, Handle, Target, value_kind};
use crate::values::{self, CValue, Raw};
use crate::{library, sessions};

/// [`guard`] for the functions that need `grpc_initialize` first (`GRPC_NOT_INITIALIZED`).
fn initialized(body: impl FnOnce() -> Result<(), Failure>) -> GrpcError {
    guard(|| {
        library::grid()?;
        body()
    })
}

/// [`initialized`] for a function that names a session through `id_out`: `GRPC_SESSIONID_VOID`
/// there unless `body` names one.
///
/// # Safety
/// `id_out` must be null or writable.
unsafe fn answering_id(
    id_out: *mut c_int,
    body: impl FnOnce() -> (c_int, Result<(), Failure>),
) -> GrpcError {
    // SAFETY: the caller's contract.
    unsafe { store(id_out, SESSION_VOID) };
    initialized(|| {
        let (id, outcome) = body();
        // SAFETY: the caller's contract.
        unsafe { store(id_out, id) };
        outcome
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn grpc_initialize(config_file_name: *const c_char) -> GrpcError {
    guard(|| {
        let path = if config_file_name.is_null() {
            None
        } else {
            // SAFETY: C passes a NUL-terminated file name.
            Some(PathBuf::from(unsafe {
                c_text(config_file_name, "the configuration file name")
            }?))
        };
        library::initialize(path.as_deref())
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn grpc_finalize() -> GrpcError {
    guard(library::finalize)
}

/// Initialises `handle` for `function`, through the proxy or on `server`.
///
/// # Safety
/// `handle` must be null or writable; the strings null or NUL-terminated.
unsafe fn handle_init(
    handle: *mut CHandle,
    server: Option<*const c_char>,
    function: *const c_char,
) -> GrpcError {
    guard(|| {
        let grid = library::grid()?;
        if handle.is_null() {
            return Err(Failure::new(
                codes::GRPC_INVALID_FUNCTION_HANDLE,
                "the handle is NULL",
            ));
        }
        // SAFETY: the caller's contract.
        let function = unsafe { c_text(function, "the function name") }?;
        let server = match server {
            // SAFETY: the caller's contract.
            Some(server) => Some(unsafe { c_text(server, "the server name") }?),
            None => None,
        };
        let made = handles::make(&grid, &function, server.as_deref())?;
        // SAFETY: checked non-null; the caller's contract.
        unsafe { handles::install(handle, made) };
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn grpc_function_handle_default(
    handle: *mut CHandle,
    func_name: *const c_char,
) -> GrpcError {
    // SAFETY: grpc.h's contract.
    unsafe { handle_init(handle, None, func_name) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn grpc_function_handle_init(
    handle: *mut CHandle,
    server_name: *const c_char,
    func_name: *const c_char,
) -> GrpcError {
    // SAFETY: grpc.h's contract.
    unsafe { handle_init(handle, Some(server_name), func_name) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn grpc_function_handle_destruct(handle: *mut CHandle) -> GrpcError {
    initialized(|| {
        // SAFETY: grpc.h's contract.
        unsafe { handles::destruct(handle) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn grpc_get_handle(
    handle: *mut *mut CHandle,
    session_id: c_int,
) -> GrpcError {
    initialized(|| {
        if handle.is_null() {
            return Err(other("grpc_get_handle: the place for the handle is NULL"));
        }
        let found = sessions::handle_of(session_id)?;
        // SAFETY: checked non-null; grpc.h's contract.
        unsafe { handle.write(found as *mut CHandle) };
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ninf_handle_kinds(
    handle: *const CHandle,
    kinds: *mut c_int,
    max_kinds: c_int,
) -> c_int {
    let mut count = 0;
    let code = initialized(|| {
        // SAFETY: grpc.h's contract.
        let handle = unsafe { handles::get(handle) }?;
        let parameters = &handle.interface.parameters;
        if parameters.len() > usize::try_from(max_kinds).unwrap_or(0) || kinds.is_null() {
            return Err(other(&format!(
                "`{}` has {} parameters, more than a variadic call can pass ({max_kinds})",
                handle.interface.name,
                parameters.len()
            )));
        }
        for (i, parameter) in parameters.iter().enumerate() {
            // SAFETY: `kinds` holds `max_kinds` >= this many ints (grpc.h's contract).
            unsafe { kinds.add(i).write(value_kind(parameter)) };
        }
        count = parameters.len() as c_int;
        Ok(())
    });
    if code == GRPC_NO_ERROR { count } else { -code }
}

/// Starts a session calling `handle` with `raw`; returns its id.
///
/// # Safety
/// The arrays `raw` names must stay alive and untouched until the session has been waited
/// for or cancelled (GridRPC's rule for asynchronous calls).
unsafe fn start(c_handle: usize, handle: Handle, raw: Vec<Raw>) -> Result<i32, Failure> {
    let interface = handle.interface.clone();
    // SAFETY: the caller's contract.
    let args = unsafe { values::sized(&interface, raw) }?;
    let runtime = runtime()?;
    let id = match handle.target {
        Target::Placed => {
            let grid = library::grid()?;
            let mut transaction = ForeignTransaction::for_client(&grid.proxy);
            transaction.call(&interface, &args)?;
            let mut run = transaction.into_run(None);
            spawn_session(&runtime, c_handle, async move {
                let reply = run.send(&grid.proxy).await;
                move || reply.and_then(|reply| run.finish(reply)).map(drop)
            })
        }
        Target::Server(_) if args.iter().any(|a| matches!(a, ForeignArg::Data(_))) => {
            return Err(other(&format!(
                "`{}`: data kept on the grid goes through the grid's proxy; call it through \
                 a handle from grpc_function_handle_default",
                interface.name
            )));
        }
        Target::Server(client) => {
            let mut call = ForeignCall::new(&client, interface, args)?;
            spawn_session(&runtime, c_handle, async move {
                let reply = call.send(&client).await;
                move || reply.and_then(|reply| call.finish(reply)).map(drop)
            })
        }
    };
    Ok(id)
}

/// Runs `call` as a new session called through `c_handle`; the write-back it returns runs
/// under the session table's lock unless the session was cancelled first.
fn spawn_session<W>(
    runtime: &tokio::runtime::Handle,
    c_handle: usize,
    call: impl Future<Output = W> + Send + 'static,
) -> i32
where
    W: FnOnce() -> Result<(), ninf_client::CallError> + Send + 'static,
{
    let id = sessions::start(c_handle);
    let task = runtime.spawn(async move {
        let write = call.await;
        sessions::finish(id, || write().map_err(Failure::from));
    });
    sessions::attach(id, task.abort_handle());
    id
}

/// A call with its arguments read: waits for it unless `session_id` is given.
///
/// # Safety
/// As [`start`]; `session_id` null or writable.
unsafe fn call(
    c_handle: *mut CHandle,
    session_id: Option<*mut c_int>,
    read: impl FnOnce(&Handle) -> Result<Vec<Raw>, Failure>,
) -> GrpcError {
    if let Some(out) = session_id {
        // SAFETY: the caller's contract.
        unsafe { store(out, SESSION_VOID) };
    }
    initialized(|| {
        // SAFETY: grpc.h's contract.
        let handle = unsafe { handles::get(c_handle) }?;
        if session_id.is_some_and(|out| out.is_null()) {
            return Err(other("the place for the session id is NULL"));
        }
        let raw = read(&handle)?;
        // SAFETY: the caller's contract.
        let id = unsafe { start(c_handle as usize, handle, raw) }?;
        match session_id {
            // SAFETY: checked non-null.
            Some(out) => unsafe { store(out, id) },
            None => return sessions::wait(id).map_err(|failure| blocking_failure(id, failure)),
        }
        Ok(())
    })
}

/// A blocking call's failure: the cause's own code (the session is gone, so the caller
/// cannot ask `grpc_get_error`).
fn blocking_failure(id: i32, failure: Failure) -> Failure {
    match sessions::error_of(id) {
        Err(cause) => cause,
        Ok(()) => failure,
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ninf_call_values(
    handle: *mut CHandle,
    asynchronous: c_int,
    session_id: *mut c_int,
    values: *const CValue,
    count: c_int,
) -> GrpcError {
    let session = (asynchronous != 0).then_some(session_id);
    // SAFETY: grpc.h's contract: `values` as the header collected them.
    unsafe {
        call(handle, session, |h| {
            values::from_values(&h.interface, values, count)
        })
    }
}

/// The pointers of an arg stack C passed.
///
/// # Safety
/// `stack` must be null or an arg stack from `grpc_arg_stack_new`.
unsafe fn stack_args(stack: *const ArgStack) -> Result<Vec<*mut c_void>, Failure> {
    if stack.is_null() {
        return Err(other("the arg stack is NULL"));
    }
    // SAFETY: the caller's contract.
    Ok(unsafe { &*stack }.args.clone())
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn grpc_call_argstack(
    handle: *mut CHandle,
    args: *mut ArgStack,
) -> GrpcError {
    // SAFETY: grpc.h's contract.
    unsafe {
        call(handle, None, |h| {
            values::from_pointers(&h.interface, &stack_args(args)?)
        })
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn grpc_call_argstack_async(
    handle: *mut CHandle,
    session_id: *mut c_int,
    args: *mut ArgStack,
) -> GrpcError {
    // SAFETY: grpc.h's contract.
    unsafe {
        call(handle, Some(session_id), |h| {
            values::from_pointers(&h.interface, &stack_args(args)?)
        })
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn grpc_arg_stack_new(max_size: c_int) -> *mut ArgStack {
    match usize::try_from(max_size) {
        Ok(capacity) => Box::into_raw(Box::new(ArgStack::new(capacity))),
        Err(_) => std::ptr::null_mut(),
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn grpc_arg_stack_push_arg(
    stack: *mut ArgStack,
    arg: *mut c_void,
) -> GrpcError {
    guard(|| {
        if stack.is_null() {
            return Err(other("the arg stack is NULL"));
        }
        // SAFETY: grpc.h's contract: a stack from grpc_arg_stack_new.
        if unsafe { &mut *stack }.push(arg) {
            Ok(())
        } else {
            Err(other("the arg stack is full"))
        }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn grpc_arg_stack_pop_arg(stack: *mut ArgStack) -> *mut c_void {
    if stack.is_null() {
        return std::ptr::null_mut();
    }
    // SAFETY: grpc.h's contract: a stack from grpc_arg_stack_new.
    unsafe { &mut *stack }.pop().unwrap_or(std::ptr::null_mut())
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn grpc_arg_stack_destruct(stack: *mut ArgStack) -> GrpcError {
    guard(|| {
        if stack.is_null() {
            return Err(other("the arg stack is NULL"));
        }
        // SAFETY: grpc.h's contract: a stack from grpc_arg_stack_new, destructed once.
        drop(unsafe { Box::from_raw(stack) });
        Ok(())
    })
}

/// `ids[..length]` as a slice.
///
/// # Safety
/// `ids` must be null or point to `length` ids.
unsafe fn id_list<'a>(ids: *const c_int, length: usize) -> Result<&'a [c_int], Failure> {
    if length == 0 {
        return Ok(&[]);
    }
    if ids.is_null() {
        return Err(Failure::new(
            GRPC_INVALID_SESSION_ID,
            "the session id array is NULL",
        ));
    }
    // SAFETY: the caller's contract.
    Ok(unsafe { std::slice::from_raw_parts(ids, length) })
}

#[unsafe(no_mangle)]
pub extern "C" fn grpc_probe(session_id: c_int) -> GrpcError {
    initialized(|| match sessions::probe(session_id) {
        GRPC_NO_ERROR => Ok(()),
        code => Err(Failure::new(code, format!("session {session_id}"))),
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn grpc_probe_or(
    ids: *const c_int,
    length: usize,
    id_out: *mut c_int,
) -> GrpcError {
    // SAFETY: grpc.h's contract.
    unsafe {
        answering_id(id_out, || {
            match id_list(ids, length).and_then(sessions::probe_or) {
                Ok(id) => (id, Ok(())),
                Err(failure) => (SESSION_VOID, Err(failure)),
            }
        })
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn grpc_cancel(session_id: c_int) -> GrpcError {
    initialized(|| sessions::cancel(session_id))
}

#[unsafe(no_mangle)]
pub extern "C" fn grpc_cancel_all() -> GrpcError {
    initialized(|| {
        sessions::cancel_all();
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn grpc_wait(session_id: c_int) -> GrpcError {
    initialized(|| sessions::wait(session_id))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn grpc_wait_and(ids: *const c_int, length: usize) -> GrpcError {
    initialized(|| {
        // SAFETY: grpc.h's contract.
        sessions::wait_all(Some(unsafe { id_list(ids, length) }?))
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn grpc_wait_or(
    ids: *const c_int,
    length: usize,
    id_out: *mut c_int,
) -> GrpcError {
    // SAFETY: grpc.h's contract.
    unsafe {
        answering_id(id_out, || match id_list(ids, length) {
            Ok([]) => (
                SESSION_VOID,
                Err(Failure::new(
                    GRPC_INVALID_SESSION_ID,
                    "grpc_wait_or: no session ids",
                )),
            ),
            Ok(ids) => sessions::wait_or(ids),
            Err(failure) => (SESSION_VOID, Err(failure)),
        })
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn grpc_wait_all() -> GrpcError {
    initialized(|| sessions::wait_all(None))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn grpc_wait_any(id_out: *mut c_int) -> GrpcError {
    // SAFETY: grpc.h's contract.
    unsafe { answering_id(id_out, sessions::wait_any) }
}

#[unsafe(no_mangle)]
pub extern "C" fn grpc_get_error(session_id: c_int) -> GrpcError {
    initialized(|| sessions::error_of(session_id))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn grpc_get_failed_sessionid(id_out: *mut c_int) -> GrpcError {
    initialized(|| {
        if id_out.is_null() {
            return Err(other("the place for the session id is NULL"));
        }
        // SAFETY: checked non-null.
        unsafe { id_out.write(sessions::failed()) };
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn grpc_error_string(error_code: GrpcError) -> *const c_char {
    codes::error_string(error_code)
}

#[unsafe(no_mangle)]
pub extern "C" fn ninf_error_message() -> *const c_char {
    codes::last_message()
}

#[unsafe(no_mangle)]
pub extern "C" fn ninf_session_error_message(session_id: c_int) -> *const c_char {
    let message = match sessions::error_of(session_id) {
        Ok(()) => String::new(),
        Err(failure) => failure.message,
    };
    codes::keep_message(&message)
}
