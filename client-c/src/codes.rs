//! GridRPC's error codes (`grpc_error_t`), their strings, and how the client library's
//! errors map onto them; the thread's last error message (`ninf_error_message`).

use std::cell::RefCell;
use std::ffi::{CString, c_char};

use ninf_client::{CallError, ErrorKind};

pub type GrpcError = i32;

pub const GRPC_NO_ERROR: GrpcError = 0;
pub const GRPC_NOT_INITIALIZED: GrpcError = 1;
pub const GRPC_ALREADY_INITIALIZED: GrpcError = 2;
pub const GRPC_CONFIGFILE_NOT_FOUND: GrpcError = 3;
pub const GRPC_CONFIGFILE_ERROR: GrpcError = 4;
pub const GRPC_SERVER_NOT_FOUND: GrpcError = 5;
pub const GRPC_FUNCTION_NOT_FOUND: GrpcError = 6;
pub const GRPC_INVALID_FUNCTION_HANDLE: GrpcError = 7;
pub const GRPC_INVALID_SESSION_ID: GrpcError = 8;
pub const GRPC_RPC_REFUSED: GrpcError = 9;
pub const GRPC_COMMUNICATION_FAILED: GrpcError = 10;
pub const GRPC_SESSION_FAILED: GrpcError = 11;
pub const GRPC_NOT_COMPLETED: GrpcError = 12;
pub const GRPC_NONE_COMPLETED: GrpcError = 13;
pub const GRPC_OTHER_ERROR_CODE: GrpcError = 14;
pub const GRPC_UNKNOWN_ERROR_CODE: GrpcError = 15;
pub const GRPC_LAST_ERROR_CODE: GrpcError = 16;

/// `GRPC_SESSIONID_VOID`.
pub const SESSION_VOID: i32 = -1;

/// The text of each code, NUL-terminated for C.
const STRINGS: [&str; GRPC_LAST_ERROR_CODE as usize + 1] = [
    "GRPC_NO_ERROR: success\0",
    "GRPC_NOT_INITIALIZED: grpc_initialize has not been called\0",
    "GRPC_ALREADY_INITIALIZED: grpc_initialize was already called\0",
    "GRPC_CONFIGFILE_NOT_FOUND: the configuration (grid) file does not exist\0",
    "GRPC_CONFIGFILE_ERROR: the configuration (grid) file is malformed\0",
    "GRPC_SERVER_NOT_FOUND: no server can run the routine\0",
    "GRPC_FUNCTION_NOT_FOUND: no such routine on the grid\0",
    "GRPC_INVALID_FUNCTION_HANDLE: not an initialised function handle\0",
    "GRPC_INVALID_SESSION_ID: no such session, or it was already waited for\0",
    "GRPC_RPC_REFUSED: the server refused the call\0",
    "GRPC_COMMUNICATION_FAILED: the grid could not be reached\0",
    "GRPC_SESSION_FAILED: the call failed\0",
    "GRPC_NOT_COMPLETED: the call has not completed\0",
    "GRPC_NONE_COMPLETED: none of the calls has completed\0",
    "GRPC_OTHER_ERROR_CODE: an error (ninf_error_message says which)\0",
    "GRPC_UNKNOWN_ERROR_CODE: not a GridRPC error code\0",
    "GRPC_LAST_ERROR_CODE\0",
];

/// The string of a code (`GRPC_UNKNOWN_ERROR_CODE`'s for a number that is none).
pub fn error_string(code: GrpcError) -> *const c_char {
    let index = usize::try_from(code)
        .ok()
        .filter(|&i| i < STRINGS.len())
        .unwrap_or(GRPC_UNKNOWN_ERROR_CODE as usize);
    STRINGS[index].as_ptr().cast()
}

/// The code a failed call of the client library reports.
pub fn code_of(error: &CallError) -> GrpcError {
    match error.kind {
        ErrorKind::ServerNotFound => GRPC_SERVER_NOT_FOUND,
        ErrorKind::FunctionNotFound => GRPC_FUNCTION_NOT_FOUND,
        ErrorKind::CommunicationFailed if refused(&error.message) => GRPC_RPC_REFUSED,
        ErrorKind::RpcRefused => GRPC_RPC_REFUSED,
        ErrorKind::CommunicationFailed => GRPC_COMMUNICATION_FAILED,
        ErrorKind::SessionFailed | ErrorKind::Canceled => GRPC_SESSION_FAILED,
        ErrorKind::InvalidSessionId => GRPC_INVALID_SESSION_ID,
        ErrorKind::BadArgument | ErrorKind::Timeout | ErrorKind::DataNotFound => {
            GRPC_OTHER_ERROR_CODE
        }
    }
}

/// A service that turned the caller away (no or a wrong grid token, TLS refused).
fn refused(message: &str) -> bool {
    message.contains("refuses requests") || message.contains("Unauthenticated")
}

/// A failure: its code and what happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub code: GrpcError,
    pub message: String,
}

impl Failure {
    pub fn new(code: GrpcError, message: impl Into<String>) -> Failure {
        Failure {
            code,
            message: message.into(),
        }
    }
}

impl From<CallError> for Failure {
    fn from(error: CallError) -> Failure {
        Failure::new(code_of(&error), error.to_string())
    }
}

thread_local! {
    /// The calling thread's last failure message, and the text handed to C for it.
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

/// Keeps `message` as the thread's last error; returns `code`, for `return fail(...)`.
pub fn fail(failure: Failure) -> GrpcError {
    keep_message(&failure.message);
    failure.code
}

/// Stores text for C in the thread's slot and points at it (valid until the next call).
pub fn keep_message(message: &str) -> *const c_char {
    let text = CString::new(message.replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|slot| {
        *slot.borrow_mut() = text;
        slot.borrow().as_ptr()
    })
}

/// The thread's last error message.
pub fn last_message() -> *const c_char {
    LAST_ERROR.with(|slot| slot.borrow().as_ptr())
}
