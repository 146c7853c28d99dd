//! `grpc_data_transfer` and `grpc_data_wait`: a transfer runs as a task on the library's
//! runtime; its state changes under one lock with one condition variable, so that waiting
//! for all or any of a list is a loop over the table (as sessions are).

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use bytes::Bytes;
use ninf_client::grid::{DataRef, Shape};

use super::uri::Location;
use super::{Mode, Shared, bad, read_client, write_client};
use crate::codes::Failure;
use crate::library::{self, runtime};

enum State {
    Running,
    Done(Result<(), Failure>),
}

/// Transfers not yet waited for, by their data's address.
static TRANSFERS: Mutex<Option<HashMap<usize, State>>> = Mutex::new(None);
static CHANGED: Condvar = Condvar::new();

fn transfers() -> MutexGuard<'static, Option<HashMap<usize, State>>> {
    TRANSFERS.lock().unwrap_or_else(|e| e.into_inner())
}

fn key(data: &Shared) -> usize {
    Arc::as_ptr(data) as usize
}

/// Where a transfer reads the value.
pub enum Source {
    Grid(DataRef),
    Client(Location),
}

/// Starts moving `data`'s value from `source` to each of `outputs`.
pub fn start(data: Shared, source: Source, outputs: Vec<(Location, Mode)>) -> Result<(), Failure> {
    let grid = library::grid()?;
    let runtime = runtime()?;
    {
        let mut table = transfers();
        let table = table.get_or_insert_with(HashMap::new);
        if matches!(table.get(&key(&data)), Some(State::Running)) {
            return Err(bad(
                "grpc_data_transfer: this data is already being transferred; \
                 grpc_data_wait for it first",
            ));
        }
        table.insert(key(&data), State::Running);
    }
    runtime.spawn(async move {
        let outcome = run(&grid, &data, source, outputs).await;
        let mut table = transfers();
        table
            .get_or_insert_with(HashMap::new)
            .insert(key(&data), State::Done(outcome));
        CHANGED.notify_all();
    });
    Ok(())
}

async fn run(
    grid: &library::Grid,
    data: &Shared,
    source: Source,
    outputs: Vec<(Location, Mode)>,
) -> Result<(), Failure> {
    let (element_type, dims, bytes) = {
        let d = data.lock().unwrap_or_else(|e| e.into_inner());
        (d.element_type, d.dims.clone(), d.bytes())
    };
    let value: Bytes = match source {
        Source::Grid(on_grid) => grid.proxy.get_bytes(&on_grid).await?,
        Source::Client(location) => read_client(&location, bytes)?,
    };
    for (location, mode) in outputs {
        let Location::Grid(_) = location else {
            write_client(&location, &value)?;
            continue;
        };
        let Mode::Kept(kept) = mode else {
            return Err(bad(format!(
                "grpc_data_transfer: ninf://grid keeps data, so its mode is GRPC_STICKY, \
                 GRPC_UNIQUE_STICKY or GRPC_PERSISTENT, not {}",
                mode.name()
            )));
        };
        let shape = Shape {
            dims: &dims,
            fortran_order: false,
        };
        let made = grid
            .proxy
            .put_bytes(element_type, shape, value.clone(), kept)
            .await?;
        let older = data
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .on_grid
            .replace(made);
        if let Some(older) = older {
            grid.proxy.free(&older).await?;
        }
    }
    Ok(())
}

/// Waits for `data`'s transfer, if one is in flight or unwaited: its outcome.
pub fn wait_for(data: &Shared) -> Result<(), Failure> {
    wait(std::slice::from_ref(data), false).1
}

/// Waits for all of `list` (or, `any`, the first to end): the index of the one that ended
/// (for `any`) and the first failure among those waited for.
pub fn wait(list: &[Shared], any: bool) -> (Option<usize>, Result<(), Failure>) {
    let mut table = transfers();
    loop {
        let states = table.get_or_insert_with(HashMap::new);
        let ended = |d: &Shared| !matches!(states.get(&key(d)), Some(State::Running));
        let ready = if any {
            list.iter().position(ended)
        } else {
            list.iter().all(ended).then_some(0)
        };
        if let Some(index) = ready {
            let waited = if any { &list[index..=index] } else { list };
            let mut outcome = Ok(());
            for d in waited {
                if let Some(State::Done(Err(failure))) = states.remove(&key(d)) {
                    outcome = outcome.and(Err(failure));
                }
            }
            return (any.then_some(index), outcome);
        }
        table = CHANGED.wait(table).unwrap_or_else(|e| e.into_inner());
    }
}

/// `GRPC_STATUS`: where the data's last transfer is.
pub fn status(data: &Shared) -> &'static str {
    match transfers().as_ref().and_then(|t| t.get(&key(data))) {
        Some(State::Running) => "GRPC_TRANSFERING",
        Some(State::Done(Err(_))) => "GRPC_ERROR_TRANSFER",
        _ => "GRPC_IN_PLACE",
    }
}

/// Forgets every transfer (`grpc_finalize`).
pub fn forget_all() {
    *transfers() = None;
}
