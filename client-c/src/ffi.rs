//! What every exported function does at the C boundary: run its body with failures turned
//! into codes and panics stopped ([`guard`]), read C strings, write through C's pointers.

use std::ffi::{CStr, c_char, c_int};
use std::panic::{AssertUnwindSafe, catch_unwind};

use crate::codes::{self, Failure, GRPC_NO_ERROR, GRPC_OTHER_ERROR_CODE, GrpcError};

/// Runs `body`, turning a failure into its code (kept as the thread's last message) and a
/// panic into `GRPC_OTHER_ERROR_CODE`.
pub fn guard(body: impl FnOnce() -> Result<(), Failure>) -> GrpcError {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => GRPC_NO_ERROR,
        Ok(Err(failure)) => codes::fail(failure),
        Err(_) => codes::fail(Failure::new(
            GRPC_OTHER_ERROR_CODE,
            "internal error in libninf (a bug: please report it)",
        )),
    }
}

/// A failure with no code of its own: `GRPC_OTHER_ERROR_CODE`.
pub fn other(message: &str) -> Failure {
    Failure::new(GRPC_OTHER_ERROR_CODE, message)
}

/// A C string argument, or an error naming it.
///
/// # Safety
/// `text` must be null or a NUL-terminated string.
pub unsafe fn c_text(text: *const c_char, what: &str) -> Result<String, Failure> {
    if text.is_null() {
        return Err(other(&format!("{what} is NULL")));
    }
    // SAFETY: the caller's contract.
    unsafe { CStr::from_ptr(text) }
        .to_str()
        .map(str::to_string)
        .map_err(|_| other(&format!("{what} is not UTF-8")))
}

/// Writes `value` through `out` if C gave a place for it.
///
/// # Safety
/// `out` must be null or writable.
pub unsafe fn store(out: *mut c_int, value: c_int) {
    if !out.is_null() {
        // SAFETY: the caller's contract.
        unsafe { out.write(value) };
    }
}
