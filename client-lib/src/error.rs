//! Call errors, with the GridRPC error names users of Ninf and Ninf-G know.

use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    ServerNotFound,
    FunctionNotFound,
    /// An argument does not match the routine's interface (count, type or size).
    BadArgument,
    CommunicationFailed,
    /// The call reached the routine, which failed (or its process died).
    SessionFailed,
    Canceled,
    Timeout,
    /// `wait`, `probe` or `cancel` named a session that does not exist (or was waited on).
    InvalidSessionId,
    /// The grid turned the call away: over a limit of the proxy that waiting would not lift
    /// (its queue full, a transaction larger than the client's quota).
    RpcRefused,
    /// A data handle is not on the grid (freed, its lease ran out, or never made).
    DataNotFound,
}

impl ErrorKind {
    /// The GridRPC name of the error.
    pub fn grpc_name(self) -> &'static str {
        match self {
            ErrorKind::ServerNotFound => "SERVER_NOT_FOUND",
            ErrorKind::FunctionNotFound => "FUNCTION_NOT_FOUND",
            ErrorKind::BadArgument => "BAD_ARGUMENT",
            ErrorKind::CommunicationFailed => "COMMUNICATION_FAILED",
            ErrorKind::SessionFailed => "SESSION_FAILED",
            ErrorKind::Canceled => "CANCELED",
            ErrorKind::Timeout => "TIMEOUT",
            ErrorKind::InvalidSessionId => "INVALID_SESSION_ID",
            ErrorKind::RpcRefused => "RPC_REFUSED",
            ErrorKind::DataNotFound => "DATA_NOT_FOUND",
        }
    }
}

/// A failed call: what kind of failure and a message naming the problem.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct CallError {
    pub kind: ErrorKind,
    pub message: String,
}

impl CallError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        CallError {
            kind,
            message: message.into(),
        }
    }

    pub fn bad_argument(message: impl Into<String>) -> Self {
        CallError::new(ErrorKind::BadArgument, message)
    }
}

impl fmt::Display for CallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind.grpc_name(), self.message)
    }
}

/// A failed connection as a call error: SERVER_NOT_FOUND naming the address and every cause
/// (refused, timed out, a certificate problem).
pub(crate) fn connect_error(error: ninf_proto::net::NetError) -> CallError {
    CallError::new(ErrorKind::ServerNotFound, error.to_string())
}

impl From<tonic::Status> for CallError {
    fn from(status: tonic::Status) -> Self {
        use tonic::Code;
        let kind = match status.code() {
            Code::NotFound if ninf_proto::net::missing_data(&status).is_some() => {
                ErrorKind::DataNotFound
            }
            Code::NotFound => ErrorKind::FunctionNotFound,
            Code::InvalidArgument | Code::FailedPrecondition | Code::OutOfRange => {
                ErrorKind::BadArgument
            }
            Code::ResourceExhausted | Code::PermissionDenied => ErrorKind::RpcRefused,
            Code::DeadlineExceeded => ErrorKind::Timeout,
            Code::Aborted | Code::Internal | Code::DataLoss => ErrorKind::SessionFailed,
            Code::Cancelled => ErrorKind::Canceled,
            _ => ErrorKind::CommunicationFailed,
        };
        let message = if status.message().is_empty() {
            format!("{:?}", status.code())
        } else {
            status.message().to_string()
        };
        CallError::new(kind, message)
    }
}
