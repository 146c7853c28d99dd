//! The library's one grid: what `grpc_initialize` connected to (the proxy named by the grid
//! file, and how to reach compute servers by name), until `grpc_finalize`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use ninf_client::grid::{AsyncGridClient, GridFile, GridFileError, GridTls, default_grid_file};
use ninf_client::runtime::runtime;
use ninf_client::{CallError, NinfClient};

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
    *slot = Some(Arc::new(Grid {
        proxy,
        token,
        tls,
        servers: Mutex::default(),
    }));
    Ok(())
}

/// Forgets the grid (calls still running keep their own reference until they end).
pub fn finalize() -> Result<(), Failure> {
    grid_slot().take().map(drop).ok_or_else(|| {
        Failure::new(
            GRPC_NOT_INITIALIZED,
            "grpc_finalize without grpc_initialize",
        )
    })
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
