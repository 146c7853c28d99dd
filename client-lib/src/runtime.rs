//! The one background runtime the synchronous API (`ninf_call`, `Client`, `GridClient`)
//! and the C and Python bindings run the async core on.

use std::sync::OnceLock;

use tokio::runtime::Runtime;

use crate::{CallError, ErrorKind};

/// The library's background runtime (two worker threads), started on first use; refused
/// from inside another async runtime, where blocking on it would stall that runtime.
pub fn runtime() -> Result<&'static Runtime, CallError> {
    static RUNTIME: OnceLock<Result<Runtime, String>> = OnceLock::new();
    if tokio::runtime::Handle::try_current().is_ok() {
        return Err(CallError::new(
            ErrorKind::CommunicationFailed,
            "the synchronous Ninf API was called from inside an async runtime; use ninf::remote::NinfClient there",
        ));
    }
    RUNTIME
        .get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .thread_name("ninf-client")
                .enable_all()
                .build()
                .map_err(|e| e.to_string())
        })
        .as_ref()
        .map_err(|e| {
            CallError::new(
                ErrorKind::CommunicationFailed,
                format!("cannot start the client runtime: {e}"),
            )
        })
}
