//! Message passing among the ranks of a parallel routine (IDL `Parallel p Backend "MPI"`).
//! A parallel call runs as p processes of the executable, SPMD: each gets the same arguments
//! and knows its [`rank`] and the job's [`size`]; rank 0's outputs are the call's. Ranks
//! exchange byte messages with [`send`] (it returns once the broker has the message, not
//! when the receiver takes it) and [`recv`] (blocks until the message from that rank arrives). Messages go
//! through a broker on a Unix socket: the compute server's, which sees every send and receive
//! and so can tell when all ranks wait with nothing in flight, or, when the server's processors
//! span nodes, the rank's node's, which carries messages to other nodes over TCP.
//!
//! ```ignore
//! let (rank, size) = (spmd::rank(), spmd::size());
//! let part = compute_my_block(rank, size);
//! if rank == 0 {
//!     for from in 1..size { merge(spmd::recv_f64(from)?); }
//! } else {
//!     spmd::send_f64(0, &part)?;
//! }
//! ```

use std::cell::Cell;
use std::io::{BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::Mutex;

use ninf_proto::v1::{self, spmd_frame::Kind};
use prost::Message;

use crate::frame::{self, DEFAULT_MAX_FRAME};

/// The environment variable naming the broker's socket.
pub const SOCKET_ENV: &str = "NINF_SPMD_SOCKET";

#[derive(Debug, thiserror::Error)]
pub enum SpmdError {
    #[error("rank {to} does not exist: the job has {size} ranks")]
    NoSuchRank { to: usize, size: usize },
    #[error("not running as a rank of a parallel job (call it from a parallel routine)")]
    NotParallel,
    #[error("no message broker: {SOCKET_ENV} is not set")]
    NoBroker,
    #[error("message broker: {0}")]
    Broker(String),
    #[error("the job was ended while this rank waited: {0}")]
    Aborted(String),
}

/// The current call's place in its job: (job, rank, size).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Context {
    pub job: u64,
    pub rank: usize,
    pub size: usize,
}

thread_local! {
    static CONTEXT: Cell<Option<Context>> = const { Cell::new(None) };
}

/// The broker connection, opened on first use and kept while calls use the same broker.
static CONNECTION: Mutex<Option<Connection>> = Mutex::new(None);

/// The broker the current call was given (its node's), if not the one in [`SOCKET_ENV`].
static CALL_BROKER: Mutex<Option<PathBuf>> = Mutex::new(None);

struct Connection {
    path: PathBuf,
    writer: UnixStream,
    reader: BufReader<UnixStream>,
}

/// Sets the context for the call about to run (the runtime does this from the request).
pub fn enter(context: Option<Context>) {
    CONTEXT.with(|c| c.set(context));
}

/// Sets the broker the call about to run talks through: its node's broker when the server
/// runs one per node (`None`: the one named by [`SOCKET_ENV`]).
pub fn enter_broker(path: Option<PathBuf>) {
    if let Ok(mut broker) = CALL_BROKER.lock() {
        *broker = path;
    }
}

fn broker_path() -> Result<PathBuf, SpmdError> {
    let given = CALL_BROKER
        .lock()
        .map_err(|_| SpmdError::Broker("broker lock poisoned".into()))?
        .clone();
    given
        .or_else(|| std::env::var_os(SOCKET_ENV).map(PathBuf::from))
        .ok_or(SpmdError::NoBroker)
}

/// The context of the running call, if it is a rank of a parallel job.
pub fn context() -> Option<Context> {
    CONTEXT.with(Cell::get)
}

/// This process's rank (0 for a sequential call).
pub fn rank() -> usize {
    context().map_or(0, |c| c.rank)
}

/// The number of ranks (1 for a sequential call).
pub fn size() -> usize {
    context().map_or(1, |c| c.size)
}

fn with_connection<T>(
    f: impl FnOnce(&mut UnixStream, &mut BufReader<UnixStream>) -> Result<T, SpmdError>,
) -> Result<T, SpmdError> {
    let mut guard = CONNECTION
        .lock()
        .map_err(|_| SpmdError::Broker("connection lock poisoned".into()))?;
    let path = broker_path()?;
    if guard.as_ref().is_none_or(|c| c.path != path) {
        let writer = UnixStream::connect(&path)
            .map_err(|e| SpmdError::Broker(format!("cannot connect to {}: {e}", path.display())))?;
        let reader = writer
            .try_clone()
            .map_err(|e| SpmdError::Broker(e.to_string()))?;
        *guard = Some(Connection {
            path,
            writer,
            reader: BufReader::new(reader),
        });
    }
    let Some(Connection { writer, reader, .. }) = guard.as_mut() else {
        return Err(SpmdError::NoBroker);
    };
    let result = f(writer, reader);
    if matches!(result, Err(SpmdError::Broker(_))) {
        // A broken connection is reopened by the next call.
        *guard = None;
    }
    result
}

fn write(writer: &mut UnixStream, kind: Kind) -> Result<(), SpmdError> {
    let body = v1::SpmdFrame { kind: Some(kind) }.encode_to_vec();
    frame::write_frame(writer, &body).map_err(|e| SpmdError::Broker(e.to_string()))?;
    writer.flush().map_err(|e| SpmdError::Broker(e.to_string()))
}

fn current(to: usize) -> Result<Context, SpmdError> {
    let context = context().ok_or(SpmdError::NotParallel)?;
    if to >= context.size {
        return Err(SpmdError::NoSuchRank {
            to,
            size: context.size,
        });
    }
    Ok(context)
}

/// Sends `data` to rank `to` of this job.
pub fn send(to: usize, data: &[u8]) -> Result<(), SpmdError> {
    let context = current(to)?;
    with_connection(|writer, reader| {
        write(
            writer,
            Kind::Send(v1::SpmdSend {
                job: context.job,
                from: context.rank as u32,
                to: to as u32,
                data: bytes::Bytes::copy_from_slice(data),
            }),
        )?;
        match read(reader)? {
            Kind::Sent(_) => Ok(()),
            Kind::Abort(reason) => Err(SpmdError::Aborted(reason)),
            _ => Err(SpmdError::Broker("unexpected frame from the broker".into())),
        }
    })
}

fn read(reader: &mut BufReader<UnixStream>) -> Result<Kind, SpmdError> {
    let body = frame::read_frame(reader, DEFAULT_MAX_FRAME)
        .map_err(|e| SpmdError::Broker(e.to_string()))?
        .ok_or_else(|| SpmdError::Broker("the broker closed the connection".into()))?;
    v1::SpmdFrame::decode(body.as_slice())
        .map_err(|e| SpmdError::Broker(format!("undecodable frame: {e}")))?
        .kind
        .ok_or_else(|| SpmdError::Broker("empty frame from the broker".into()))
}

/// Waits for the next message from rank `from` of this job.
pub fn recv(from: usize) -> Result<Vec<u8>, SpmdError> {
    let context = current(from)?;
    with_connection(|writer, reader| {
        write(
            writer,
            Kind::Recv(v1::SpmdRecv {
                job: context.job,
                rank: context.rank as u32,
                from: from as u32,
            }),
        )?;
        match read(reader)? {
            Kind::Deliver(message) => Ok(message.data.to_vec()),
            Kind::Abort(reason) => Err(SpmdError::Aborted(reason)),
            _ => Err(SpmdError::Broker("unexpected frame from the broker".into())),
        }
    })
}

/// Sends doubles (little-endian).
pub fn send_f64(to: usize, values: &[f64]) -> Result<(), SpmdError> {
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    send(to, &bytes)
}

/// Receives doubles sent with [`send_f64`].
pub fn recv_f64(from: usize) -> Result<Vec<f64>, SpmdError> {
    let bytes = recv(from)?;
    if bytes.len() % 8 != 0 {
        return Err(SpmdError::Broker(format!(
            "a message of {} bytes is not a whole number of doubles",
            bytes.len()
        )));
    }
    Ok(bytes
        .chunks_exact(8)
        .map(|c| f64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
        .collect())
}

/// Waits until every rank has reached this point (rank 0 collects a token from each rank,
/// then releases them).
pub fn barrier() -> Result<(), SpmdError> {
    let Some(context) = context() else {
        // A sequential call is a job of one rank: nobody to wait for.
        return Ok(());
    };
    if context.rank == 0 {
        for from in 1..context.size {
            recv(from)?;
        }
        for to in 1..context.size {
            send(to, &[])?;
        }
    } else {
        send(0, &[])?;
        recv(0)?;
    }
    Ok(())
}
