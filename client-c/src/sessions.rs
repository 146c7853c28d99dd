//! Sessions: asynchronous calls by id, as GridRPC has them. A session runs as a task on the
//! library's runtime; its state changes under one lock with one condition variable,
//! so every wait (one id, all of a set, any of a set, all, any) is a loop over the table.
//! A session is forgotten when it is waited for (its id is then invalid, but
//! `grpc_get_error` still answers for it); a cancelled one writes nothing.

use std::collections::{HashMap, VecDeque};
use std::sync::{Condvar, Mutex, MutexGuard};

use tokio::task::AbortHandle;

use crate::codes::{
    Failure, GRPC_INVALID_SESSION_ID, GRPC_NO_ERROR, GRPC_NONE_COMPLETED, GRPC_NOT_COMPLETED,
    GRPC_SESSION_FAILED, GrpcError, SESSION_VOID,
};

/// Where a session is.
#[derive(Debug, Clone)]
pub enum State {
    Running,
    Done(Result<(), Failure>),
}

struct Session {
    /// The C handle it was called through, for `grpc_get_handle`.
    handle: usize,
    state: State,
    task: Option<AbortHandle>,
}

#[derive(Default)]
struct Table {
    next: i32,
    sessions: HashMap<i32, Session>,
    /// Outcomes of sessions already waited for, for `grpc_get_error`.
    waited: HashMap<i32, Result<(), Failure>>,
    /// Sessions `wait_all`/`wait_and` found failed that `grpc_get_failed_sessionid` has not
    /// handed out yet, oldest first.
    failed: VecDeque<i32>,
}

static TABLE: Mutex<Option<Table>> = Mutex::new(None);
static CHANGED: Condvar = Condvar::new();

struct Locked(MutexGuard<'static, Option<Table>>);

impl Locked {
    fn table(&mut self) -> &mut Table {
        self.0.get_or_insert_with(Table::default)
    }
}

fn lock() -> Locked {
    Locked(TABLE.lock().unwrap_or_else(|e| e.into_inner()))
}

impl Locked {
    fn wait(self) -> Locked {
        Locked(CHANGED.wait(self.0).unwrap_or_else(|e| e.into_inner()))
    }
}

fn invalid(id: i32) -> Failure {
    Failure::new(
        GRPC_INVALID_SESSION_ID,
        format!("no session {id}: never started, or already waited for"),
    )
}

/// A new running session called through `handle`; returns its id.
pub fn start(handle: usize) -> i32 {
    let mut locked = lock();
    let table = locked.table();
    let id = table.next;
    table.next = table.next.checked_add(1).unwrap_or(0);
    table.sessions.insert(
        id,
        Session {
            handle,
            state: State::Running,
            task: None,
        },
    );
    id
}

/// Remembers the task running session `id`, so that it can be cancelled.
pub fn attach(id: i32, task: AbortHandle) {
    let mut locked = lock();
    match locked.table().sessions.get_mut(&id) {
        Some(session) if matches!(session.state, State::Running) => session.task = Some(task),
        // Cancelled (or ended) before its task was known.
        _ => task.abort(),
    }
}

/// Ends session `id` with `outcome` unless it was cancelled; `write` puts the results in the
/// caller's memory and runs under the table's lock, so a cancel either comes before it
/// (nothing written) or finds the session done.
pub fn finish(id: i32, write: impl FnOnce() -> Result<(), Failure>) {
    let mut locked = lock();
    let Some(session) = locked.table().sessions.get_mut(&id) else {
        return;
    };
    if !matches!(session.state, State::Running) {
        return;
    }
    session.state = State::Done(write());
    session.task = None;
    CHANGED.notify_all();
}

/// `grpc_cancel`: a running session ends failed, writing nothing; a finished one is left as
/// it is.
pub fn cancel(id: i32) -> Result<(), Failure> {
    let mut locked = lock();
    let session = locked
        .table()
        .sessions
        .get_mut(&id)
        .ok_or_else(|| invalid(id))?;
    if matches!(session.state, State::Running) {
        if let Some(task) = session.task.take() {
            task.abort();
        }
        session.state = State::Done(Err(Failure::new(
            GRPC_SESSION_FAILED,
            format!("session {id} was cancelled"),
        )));
        CHANGED.notify_all();
    }
    Ok(())
}

/// Cancels every session and forgets them all (`grpc_finalize`).
pub fn forget_all() {
    cancel_all();
    *lock().0 = None;
}

/// `grpc_cancel_all`.
pub fn cancel_all() {
    let ids: Vec<i32> = lock().table().sessions.keys().copied().collect();
    for id in ids {
        let _ = cancel(id);
    }
}

/// The handle session `id` was called through.
pub fn handle_of(id: i32) -> Result<usize, Failure> {
    lock()
        .table()
        .sessions
        .get(&id)
        .map(|s| s.handle)
        .ok_or_else(|| invalid(id))
}

/// `grpc_probe`: `GRPC_NO_ERROR` when done, `GRPC_NOT_COMPLETED` while running.
pub fn probe(id: i32) -> GrpcError {
    match lock().table().sessions.get(&id) {
        None => GRPC_INVALID_SESSION_ID,
        Some(s) if matches!(s.state, State::Running) => GRPC_NOT_COMPLETED,
        Some(_) => GRPC_NO_ERROR,
    }
}

/// `grpc_probe_or`: the first of `ids` that is done, or `GRPC_NONE_COMPLETED`.
pub fn probe_or(ids: &[i32]) -> Result<i32, Failure> {
    let mut locked = lock();
    let table = locked.table();
    check_known(table, ids)?;
    ids.iter()
        .copied()
        .find(|id| !matches!(table.sessions[id].state, State::Running))
        .ok_or_else(|| Failure::new(GRPC_NONE_COMPLETED, "none of the sessions has completed"))
}

fn check_known(table: &Table, ids: &[i32]) -> Result<(), Failure> {
    match ids.iter().find(|id| !table.sessions.contains_key(id)) {
        Some(&id) => Err(invalid(id)),
        None => Ok(()),
    }
}

/// Takes a finished session out of the table: `GRPC_SESSION_FAILED` if it failed.
fn collect(table: &mut Table, id: i32) -> Result<(), Failure> {
    let outcome = match table.sessions.remove(&id).map(|s| s.state) {
        Some(State::Done(outcome)) => outcome,
        _ => return Err(invalid(id)),
    };
    table.waited.insert(id, outcome.clone());
    outcome.map_err(|f| Failure::new(GRPC_SESSION_FAILED, f.message))
}

/// `grpc_wait`.
pub fn wait(id: i32) -> Result<(), Failure> {
    wait_until(|table| {
        let session = table.sessions.get(&id).ok_or_else(|| invalid(id))?;
        Ok((!matches!(session.state, State::Running)).then_some(id))
    })
    .and_then(|(mut locked, id)| collect(locked.table(), id))
}

/// Waits until `ready` names a session (or fails); returns the lock still held.
fn wait_until(
    mut ready: impl FnMut(&mut Table) -> Result<Option<i32>, Failure>,
) -> Result<(Locked, i32), Failure> {
    let mut locked = lock();
    loop {
        if let Some(id) = ready(locked.table())? {
            return Ok((locked, id));
        }
        locked = locked.wait();
    }
}

/// `grpc_wait_or`: waits for any of `ids`; returns it and its outcome.
pub fn wait_or(ids: &[i32]) -> (i32, Result<(), Failure>) {
    if let Err(failure) = check_known(lock().table(), ids) {
        return (SESSION_VOID, Err(failure));
    }
    let found = wait_until(|table| {
        check_known(table, ids)?;
        Ok(ids
            .iter()
            .copied()
            .find(|id| !matches!(table.sessions[id].state, State::Running)))
    });
    match found {
        Ok((mut locked, id)) => (id, collect(locked.table(), id)),
        Err(failure) => (SESSION_VOID, Err(failure)),
    }
}

/// `grpc_wait_any`: waits for any running session; `GRPC_INVALID_SESSION_ID` if there is
/// none to wait for.
pub fn wait_any() -> (i32, Result<(), Failure>) {
    let found = wait_until(|table| {
        if table.sessions.is_empty() {
            return Err(Failure::new(
                GRPC_INVALID_SESSION_ID,
                "grpc_wait_any: no session to wait for",
            ));
        }
        Ok(table
            .sessions
            .iter()
            .find(|(_, s)| !matches!(s.state, State::Running))
            .map(|(&id, _)| id))
    });
    match found {
        Ok((mut locked, id)) => (id, collect(locked.table(), id)),
        Err(failure) => (SESSION_VOID, Err(failure)),
    }
}

/// `grpc_wait_and` (`ids`) and `grpc_wait_all` (`None`: every session): waits for all;
/// `GRPC_SESSION_FAILED` if any failed, each such (in id order) queued for
/// `grpc_get_failed_sessionid`.
pub fn wait_all(ids: Option<&[i32]>) -> Result<(), Failure> {
    let mut locked = lock();
    let ids: Vec<i32> = match ids {
        Some(ids) => {
            check_known(locked.table(), ids)?;
            ids.to_vec()
        }
        None => {
            let mut all: Vec<i32> = locked.table().sessions.keys().copied().collect();
            all.sort_unstable();
            all
        }
    };
    while ids.iter().any(|id| {
        locked
            .table()
            .sessions
            .get(id)
            .is_some_and(|s| matches!(s.state, State::Running))
    }) {
        locked = locked.wait();
    }
    let table = locked.table();
    let mut first_failure = None;
    for &id in &ids {
        if let Err(failure) = collect(table, id) {
            table.failed.push_back(id);
            first_failure.get_or_insert(failure);
        }
    }
    match first_failure {
        Some(failure) => Err(failure),
        None => Ok(()),
    }
}

/// `grpc_get_error`: the session's error so far: `GRPC_NO_ERROR` while it runs or once it
/// succeeded, else why it failed.
pub fn error_of(id: i32) -> Result<(), Failure> {
    let mut locked = lock();
    let table = locked.table();
    let outcome = match table.sessions.get(&id) {
        Some(Session {
            state: State::Running,
            ..
        }) => return Ok(()),
        Some(Session {
            state: State::Done(outcome),
            ..
        }) => outcome,
        None => table.waited.get(&id).ok_or_else(|| invalid(id))?,
    };
    outcome.clone()
}

/// `grpc_get_failed_sessionid`: the oldest failed session of `grpc_wait_and`/`grpc_wait_all`
/// not handed out yet (each once), then `GRPC_SESSIONID_VOID`.
pub fn failed() -> i32 {
    lock().table().failed.pop_front().unwrap_or(SESSION_VOID)
}
