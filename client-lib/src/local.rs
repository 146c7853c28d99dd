//! Calling a module's executable directly on this machine, with no server in between: the
//! same checks and encoding as a remote call, over the executable protocol. Useful for
//! testing routines and generated stubs.

use std::path::Path;

use ninf_executable::{CallFailure, ExecutableProcess};
use ninf_idl::ModuleInterface;
use ninf_proto::v1::ExecErrorKind;

use crate::{Arg, CallError, CallOutcome, Caller, ErrorKind, decode_outputs, encode_arguments};

/// A running executable and the interface of its module.
pub struct LocalExecutable {
    module: ModuleInterface,
    process: ExecutableProcess,
}

impl LocalExecutable {
    pub fn spawn(executable: &Path, module: ModuleInterface) -> Result<Self, CallError> {
        let process = ExecutableProcess::spawn(executable).map_err(|e| {
            CallError::new(
                ErrorKind::ServerNotFound,
                format!("cannot start {}: {e}", executable.display()),
            )
        })?;
        Ok(LocalExecutable { module, process })
    }

    pub fn process(&mut self) -> &mut ExecutableProcess {
        &mut self.process
    }
}

/// The client-side kind of an executable's error.
pub fn error_kind(kind: ExecErrorKind) -> ErrorKind {
    match kind {
        ExecErrorKind::FunctionNotFound => ErrorKind::FunctionNotFound,
        ExecErrorKind::BadArgument | ExecErrorKind::Evaluation => ErrorKind::BadArgument,
        ExecErrorKind::MalformedRequest => ErrorKind::CommunicationFailed,
        ExecErrorKind::RoutineFailed | ExecErrorKind::Unspecified => ErrorKind::SessionFailed,
    }
}

impl Caller for LocalExecutable {
    fn call(&mut self, function: &str, args: &mut [Arg<'_>]) -> Result<CallOutcome, CallError> {
        let interface = self.module.function(function).ok_or_else(|| {
            CallError::new(
                ErrorKind::FunctionNotFound,
                format!(
                    "module `{}` has no function `{function}`",
                    self.module.module
                ),
            )
        })?;
        let arguments = encode_arguments(interface, args)?;
        let success = self
            .process
            .call(function, arguments)
            .map_err(|failure| match failure {
                CallFailure::Routine { kind, message } => CallError::new(error_kind(kind), message),
                CallFailure::Crashed { reason } => CallError::new(ErrorKind::SessionFailed, reason),
            })?;
        decode_outputs(interface, success.outputs, success.status, args)
    }
}
