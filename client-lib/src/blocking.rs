//! The synchronous API, as Ninf users know it: [`ninf_call`] with a `ninf://` URL, or a
//! [`Client`] bound to a server, plus GridRPC-style asynchronous calls (session ids with
//! `wait`, `wait_any`, `wait_all`, `probe` and `cancel`). It runs the async core on one shared
//! background runtime, so it must not be used from inside an async runtime (it says so).

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use ninf_idl::Mode;
use ninf_proto::ArrayData;
use num_complex::Complex64;
use tokio::task::JoinHandle;

use crate::remote::{NinfClient, parse_url, server_address};
use crate::runtime::runtime;
use crate::{Arg, ArrayMut, ArrayRef, CallError, CallOutcome, Caller, ErrorKind};

/// Clients by server address, shared by every `ninf_call`, so descriptors are fetched once.
fn shared_client(address: &str) -> Result<Client, CallError> {
    static CLIENTS: OnceLock<Mutex<HashMap<String, Client>>> = OnceLock::new();
    let clients = CLIENTS.get_or_init(Mutex::default);
    if let Some(c) = ninf_proto::sync::lock(clients).get(address).cloned() {
        return Ok(c);
    }
    let client = Client::connect(address)?;
    {
        let mut c = ninf_proto::sync::lock(clients);
        c.insert(address.to_string(), client.clone());
    }
    Ok(client)
}

/// Calls a routine by URL, as Ninf-1 did: `ninf_call("ninf://host:port/dgefa", &mut args)`.
pub fn ninf_call(url: &str, args: &mut [Arg<'_>]) -> Result<CallOutcome, CallError> {
    let (address, function) = parse_url(url)?;
    shared_client(&address)?.call(&function, args)
}

/// An identifier of an asynchronous call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SessionId(pub u64);

/// An argument an asynchronous call owns (it outlives the caller's stack frame).
#[derive(Debug, Clone)]
pub enum OwnedArg {
    Integer(i64),
    Real(f64),
    Complex(Complex64),
    Text(String),
    File(PathBuf),
    /// An IN or INOUT array.
    Array(ArrayData),
    /// An OUT array: allocated from the IDL's dimensions; its result is in the outputs.
    Out,
    Work,
}

/// The results of an asynchronous call.
#[derive(Debug, Clone, PartialEq)]
pub struct CallResult {
    pub status: i64,
    /// Every OUT and INOUT array, by parameter name.
    pub outputs: BTreeMap<String, ArrayData>,
}

/// Running asynchronous calls by session number.
type SessionTable = HashMap<u64, JoinHandle<Result<CallResult, CallError>>>;

/// A synchronous client bound to one server.
#[derive(Clone)]
pub struct Client {
    inner: NinfClient,
    sessions: Arc<Mutex<SessionTable>>,
    next_session: Arc<AtomicU64>,
}

impl Client {
    /// Connects to `host:port` or `ninf://host:port`.
    pub fn connect(url: &str) -> Result<Client, CallError> {
        let address = server_address(url)?;
        let inner = runtime()?.block_on(NinfClient::connect(&address))?;
        Ok(Client {
            inner,
            sessions: Arc::default(),
            next_session: Arc::new(AtomicU64::new(1)),
        })
    }

    /// Limits every call made through this client (see [`NinfClient::with_timeout`]).
    pub fn with_timeout(mut self, timeout: Duration) -> Client {
        self.inner = self.inner.with_timeout(timeout);
        self
    }

    pub fn address(&self) -> &str {
        self.inner.address()
    }

    /// The async core, for use inside async code.
    pub fn remote(&self) -> &NinfClient {
        &self.inner
    }

    pub fn call(&self, function: &str, args: &mut [Arg<'_>]) -> Result<CallOutcome, CallError> {
        runtime()?.block_on(self.inner.call(function, args))
    }

    pub fn describe(&self, function: &str) -> Result<Arc<ninf_idl::FunctionInterface>, CallError> {
        runtime()?.block_on(self.inner.describe(function))
    }

    /// Starts a call and returns at once; collect it with `wait`.
    pub fn call_async(&self, function: &str, args: Vec<OwnedArg>) -> Result<SessionId, CallError> {
        let rt = runtime()?;
        let client = self.inner.clone();
        let function = function.to_string();
        let handle = rt.spawn(async move { run_owned(&client, &function, args).await });
        let id = self.next_session.fetch_add(1, Ordering::Relaxed);
        self.lock_sessions()?.insert(id, handle);
        Ok(SessionId(id))
    }

    fn lock_sessions(&self) -> Result<std::sync::MutexGuard<'_, SessionTable>, CallError> {
        Ok(ninf_proto::sync::lock(&self.sessions))
    }

    fn unknown(id: SessionId) -> CallError {
        CallError::new(
            ErrorKind::InvalidSessionId,
            format!("no session {} (unknown, or already waited for)", id.0),
        )
    }

    /// Whether the call has finished (successfully or not).
    pub fn probe(&self, id: SessionId) -> Result<bool, CallError> {
        let sessions = self.lock_sessions()?;
        sessions
            .get(&id.0)
            .map(JoinHandle::is_finished)
            .ok_or_else(|| Self::unknown(id))
    }

    /// Cancels the call; `wait` on it then reports CANCELED. The server finishes (or times
    /// out) the routine on its own, and its executable stays usable.
    pub fn cancel(&self, id: SessionId) -> Result<(), CallError> {
        let sessions = self.lock_sessions()?;
        sessions
            .get(&id.0)
            .ok_or_else(|| Self::unknown(id))?
            .abort();
        Ok(())
    }

    /// Waits for one call and forgets its session.
    pub fn wait(&self, id: SessionId) -> Result<CallResult, CallError> {
        let handle = self
            .lock_sessions()?
            .remove(&id.0)
            .ok_or_else(|| Self::unknown(id))?;
        join(runtime()?.block_on(handle), id)
    }

    /// Waits until any of `ids` finishes; returns which, with its result.
    pub fn wait_any(
        &self,
        ids: &[SessionId],
    ) -> Result<(SessionId, Result<CallResult, CallError>), CallError> {
        if ids.is_empty() {
            return Err(CallError::new(
                ErrorKind::InvalidSessionId,
                "wait_any needs at least one session",
            ));
        }
        {
            let sessions = self.lock_sessions()?;
            if let Some(missing) = ids.iter().find(|id| !sessions.contains_key(&id.0)) {
                return Err(Self::unknown(*missing));
            }
        }
        loop {
            let finished = {
                let sessions = self.lock_sessions()?;
                ids.iter()
                    .copied()
                    .find(|id| sessions.get(&id.0).is_some_and(JoinHandle::is_finished))
            };
            if let Some(id) = finished {
                return Ok((id, self.wait(id)));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Waits for every call, in the order given.
    pub fn wait_all(&self, ids: &[SessionId]) -> Vec<Result<CallResult, CallError>> {
        ids.iter().map(|&id| self.wait(id)).collect()
    }
}

fn join(
    joined: Result<Result<CallResult, CallError>, tokio::task::JoinError>,
    id: SessionId,
) -> Result<CallResult, CallError> {
    match joined {
        Ok(result) => result,
        Err(e) if e.is_cancelled() => Err(CallError::new(
            ErrorKind::Canceled,
            format!("session {} was canceled", id.0),
        )),
        Err(e) => Err(CallError::new(
            ErrorKind::SessionFailed,
            format!("session {} failed: {e}", id.0),
        )),
    }
}

/// Runs a call whose arguments are owned: OUT arrays are allocated from the IDL first.
async fn run_owned(
    client: &NinfClient,
    function: &str,
    mut args: Vec<OwnedArg>,
) -> Result<CallResult, CallError> {
    let interface = client.describe(function).await?;
    crate::args::check_argument_count(&interface, args.len())?;
    let bindings: BTreeMap<String, i64> = interface
        .parameters
        .iter()
        .zip(&args)
        .filter_map(|(p, a)| match a {
            OwnedArg::Integer(v) if p.mode == Mode::In && !p.is_array() => {
                Some((p.name.clone(), *v))
            }
            _ => None,
        })
        .collect();
    for (p, arg) in interface.parameters.iter().zip(args.iter_mut()) {
        if p.mode == Mode::Out && p.is_array() && matches!(arg, OwnedArg::Out) {
            let len = interface.element_count(p, &bindings).map_err(|e| {
                CallError::bad_argument(format!("argument `{}` of `{function}`: {e}", p.name))
            })?;
            let len = usize::try_from(len).map_err(|_| {
                CallError::bad_argument(format!(
                    "argument `{}` of `{function}` is too large",
                    p.name
                ))
            })?;
            *arg = OwnedArg::Array(
                ArrayData::zeroed(p.element_type, len)
                    .map_err(|e| CallError::bad_argument(format!("argument `{}`: {e}", p.name)))?,
            );
        }
    }
    let status = {
        let mut views: Vec<Arg<'_>> = interface
            .parameters
            .iter()
            .zip(args.iter_mut())
            .map(|(p, a)| match a {
                OwnedArg::Integer(v) => Arg::Integer(*v),
                OwnedArg::Real(v) => Arg::Real(*v),
                OwnedArg::Complex(v) => Arg::Complex(*v),
                OwnedArg::Text(s) => Arg::Text(s),
                OwnedArg::File(path) => Arg::File(path),
                OwnedArg::Array(data) => {
                    if p.mode == Mode::In {
                        Arg::In(ArrayRef::from(&*data))
                    } else {
                        Arg::Out(ArrayMut::from(data))
                    }
                }
                OwnedArg::Out | OwnedArg::Work => Arg::Work,
            })
            .collect();
        client.call(function, &mut views).await?.status
    };
    let outputs = interface
        .parameters
        .iter()
        .zip(args)
        .filter(|(p, _)| p.mode.is_output())
        .filter_map(|(p, a)| match a {
            OwnedArg::Array(data) => Some((p.name.clone(), data)),
            _ => None,
        })
        .collect();
    Ok(CallResult { status, outputs })
}

impl Caller for Client {
    fn call(&mut self, function: &str, args: &mut [Arg<'_>]) -> Result<CallOutcome, CallError> {
        Client::call(self, function, args)
    }
}
