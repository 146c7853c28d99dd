//! The Python exceptions, named after the GridRPC error codes, and the mapping from the
//! client library's errors to them. Every one is a subclass of `ninf.NinfError` and carries
//! the code (`.code`) and the message the grid gave.

use ninf::{CallError, ErrorKind};
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::PyType;

pyo3::create_exception!(
    ninf,
    NinfError,
    PyException,
    "A call, transaction or connection failed; `.code` is its GridRPC error name."
);
pyo3::create_exception!(
    ninf,
    ServerNotFound,
    NinfError,
    "No server (or proxy) could be reached at the address."
);
pyo3::create_exception!(
    ninf,
    FunctionNotFound,
    NinfError,
    "No server of the grid serves a routine by that name."
);
pyo3::create_exception!(
    ninf,
    BadArgument,
    NinfError,
    "An argument does not match the routine's interface (count, type, size, layout)."
);
pyo3::create_exception!(
    ninf,
    CommunicationFailed,
    NinfError,
    "The connection to the grid failed during the call."
);
pyo3::create_exception!(
    ninf,
    SessionFailed,
    NinfError,
    "The call reached the routine, which failed (or its process died)."
);
pyo3::create_exception!(ninf, Canceled, NinfError, "The call was cancelled.");
pyo3::create_exception!(ninf, Timeout, NinfError, "The call ran out of time.");
pyo3::create_exception!(
    ninf,
    InvalidSessionId,
    NinfError,
    "The future or session named does not exist (or was already waited on)."
);
pyo3::create_exception!(
    ninf,
    RpcRefused,
    NinfError,
    "The grid turned the call away: a proxy limit that waiting would not lift."
);
pyo3::create_exception!(
    ninf,
    DataNotFound,
    NinfError,
    "A data handle is not on the grid: it was freed, its lease ran out, or it never existed."
);

/// The Python exception for a client-library error.
pub fn to_py(error: CallError) -> PyErr {
    let CallError { kind, message } = error;
    match kind {
        ErrorKind::ServerNotFound => ServerNotFound::new_err(message),
        ErrorKind::FunctionNotFound => FunctionNotFound::new_err(message),
        ErrorKind::BadArgument => BadArgument::new_err(message),
        ErrorKind::CommunicationFailed => CommunicationFailed::new_err(message),
        ErrorKind::SessionFailed => SessionFailed::new_err(message),
        ErrorKind::Canceled => Canceled::new_err(message),
        ErrorKind::Timeout => Timeout::new_err(message),
        ErrorKind::InvalidSessionId => InvalidSessionId::new_err(message),
        ErrorKind::RpcRefused => RpcRefused::new_err(message),
        ErrorKind::DataNotFound => DataNotFound::new_err(message),
    }
}

/// A `BadArgument` naming the argument.
pub fn bad_argument(message: String) -> PyErr {
    BadArgument::new_err(message)
}

/// Adds the exceptions to the module, each with its GridRPC code as `code`.
pub fn register(module: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = module.py();
    let classes: [(Bound<'_, PyType>, &str); 11] = [
        (py.get_type::<NinfError>(), "OTHER_ERROR_CODE"),
        (py.get_type::<ServerNotFound>(), "SERVER_NOT_FOUND"),
        (py.get_type::<FunctionNotFound>(), "FUNCTION_NOT_FOUND"),
        (py.get_type::<BadArgument>(), "BAD_ARGUMENT"),
        (py.get_type::<CommunicationFailed>(), "COMMUNICATION_FAILED"),
        (py.get_type::<SessionFailed>(), "SESSION_FAILED"),
        (py.get_type::<Canceled>(), "CANCELED"),
        (py.get_type::<Timeout>(), "TIMEOUT"),
        (py.get_type::<InvalidSessionId>(), "INVALID_SESSION_ID"),
        (py.get_type::<RpcRefused>(), "RPC_REFUSED"),
        (py.get_type::<DataNotFound>(), "DATA_NOT_FOUND"),
    ];
    for (class, code) in classes {
        class.setattr("code", code)?;
        module.add(class.name()?, class)?;
    }
    Ok(())
}
