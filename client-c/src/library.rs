//! The library's one grid: what `grpc_initialize` connected to (the proxy named by the grid
//! file, and how to reach compute servers by name), until `grpc_finalize`; and the runtime
//! its calls run on, which `grpc_finalize` (or the process's exit) shuts down, so that no
//! thread of the library outlives it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use std::sync::Once;
use std::time::Duration;

use ninf_client::grid::{AsyncGridClient, GridFile, GridFileError, GridTls, default_grid_file};
use ninf_client::{CallError, NinfClient};
use tokio::runtime::{Handle, Runtime};

use crate::codes::{
    Failure, GRPC_ALREADY_INITIALIZED, GRPC_CONFIGFILE_ERROR, GRPC_CONFIGFILE_NOT_FOUND,
    GRPC_NOT_INITIALIZED,
};

/// A grid the library is connected to.
pub struct Grid {
    /// The client proxy: calls through default handles.
    pub proxy: AsyncGridClient,
    token: Option<String>,
    tls: Option<GridTls>,
    /// Connections to servers named by handles, one per server.
    servers: Mutex<HashMap<String, NinfClient>>,
}

static GRID: Mutex<Option<Arc<Grid>>> = Mutex::new(None);
static RUNTIME: Mutex<Option<Runtime>> = Mutex::new(None);
/// What other tables of the library forget when the grid goes: registered by them, so that
/// this module depends on none of them.
static FORGET: Mutex<Vec<fn()>> = Mutex::new(Vec::new());

/// Has [`finalize`] call `forget` (once per registration).
pub fn forget_at_finalize(forget: fn()) {
    FORGET
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(forget);
}

fn runtime_slot() -> MutexGuard<'static, Option<Runtime>> {
    RUNTIME.lock().unwrap_or_else(|e| e.into_inner())
}

/// The library's runtime, started on first use.
pub fn runtime() -> Result<Handle, Failure> {
    if Handle::try_current().is_ok() {
        return Err(Failure::new(
            crate::codes::GRPC_OTHER_ERROR_CODE,
            "libninf was called from inside an async runtime",
        ));
    }
    let mut slot = runtime_slot();
    if let Some(runtime) = slot.as_ref() {
        return Ok(runtime.handle().clone());
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .thread_name("ninf-client")
        // An idle blocking thread that ends by itself is detached, not joined at shutdown;
        // keeping them until shutdown lets it join every thread it started.
        .thread_keep_alive(Duration::from_secs(24 * 3600))
        .enable_all()
        .build()
        .map_err(|e| {
            Failure::new(
                crate::codes::GRPC_OTHER_ERROR_CODE,
                format!("cannot start the client's threads: {e}"),
            )
        })?;
    let handle = runtime.handle().clone();
    *slot = Some(runtime);
    Ok(handle)
}

/// Stops the runtime's threads (calls still running are dropped).
fn stop_runtime() {
    if let Some(runtime) = runtime_slot().take() {
        runtime.shutdown_timeout(Duration::from_secs(2));
    }
}

/// At exit, a grid still connected is finalized: the library's threads end before the
/// process does (a program that only ever calls `Ninf_call` never calls `grpc_finalize`).
extern "C" fn finalize_at_exit() {
    let _ = std::panic::catch_unwind(|| {
        let _ = finalize();
        stop_runtime();
    });
}

fn grid_slot() -> MutexGuard<'static, Option<Arc<Grid>>> {
    GRID.lock().unwrap_or_else(|e| e.into_inner())
}

/// The grid, or `GRPC_NOT_INITIALIZED`.
pub fn grid() -> Result<Arc<Grid>, Failure> {
    grid_slot().clone().ok_or_else(|| {
        Failure::new(
            GRPC_NOT_INITIALIZED,
            "call grpc_initialize(config_file) before any other GridRPC function",
        )
    })
}

/// Connects to the grid the grid file at `path` (default: the one `ninf up` writes) names.
pub fn initialize(path: Option<&Path>) -> Result<(), Failure> {
    let mut slot = grid_slot();
    if slot.is_some() {
        return Err(Failure::new(
            GRPC_ALREADY_INITIALIZED,
            "grpc_initialize was already called; call grpc_finalize first",
        ));
    }
    let path: PathBuf = path.map_or_else(default_grid_file, Path::to_path_buf);
    let file = GridFile::read(&path).map_err(|e| match e {
        GridFileError::NotFound { .. } => Failure::new(GRPC_CONFIGFILE_NOT_FOUND, e.to_string()),
        _ => Failure::new(GRPC_CONFIGFILE_ERROR, e.to_string()),
    })?;
    let config_error = |e: CallError| Failure::new(GRPC_CONFIGFILE_ERROR, e.to_string());
    let token = file.token().map_err(config_error)?;
    let tls = file.tls().map_err(config_error)?;
    let proxy = runtime()?.block_on(file.connect())?;
    static AT_EXIT: Once = Once::new();
    // SAFETY: registers a plain function; atexit has no other requirement.
    AT_EXIT.call_once(|| unsafe {
        libc::atexit(finalize_at_exit);
    });
    *slot = Some(Arc::new(Grid {
        proxy,
        token,
        tls,
        servers: Mutex::default(),
    }));
    Ok(())
}

/// Forgets the grid and stops the library's threads: calls still running are cancelled.
pub fn finalize() -> Result<(), Failure> {
    let grid = grid_slot().take().ok_or_else(|| {
        Failure::new(
            GRPC_NOT_INITIALIZED,
            "grpc_finalize without grpc_initialize",
        )
    })?;
    drop(grid);
    crate::sessions::forget_all();
    let hooks = FORGET.lock().unwrap_or_else(|e| e.into_inner()).clone();
    for forget in hooks {
        forget();
    }
    stop_runtime();
    Ok(())
}

impl Grid {
    /// A connection to the compute server at `address` (`host:port` or `ninf://host:port`),
    /// with the grid's token and TLS.
    pub fn server(&self, address: &str) -> Result<NinfClient, Failure> {
        let mut servers = self.servers.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(client) = servers.get(address) {
            return Ok(client.clone());
        }
        let mut client =
            runtime()?.block_on(NinfClient::connect_with_tls(address, self.tls.as_ref()))?;
        if let Some(token) = &self.token {
            client = client.with_token(token);
        }
        servers.insert(address.to_string(), client.clone());
        Ok(client)
    }
}
