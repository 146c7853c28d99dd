//! Borrowing stored arrays from the other servers of this host (docs/bulk-protocol.md,
//! "Stored arrays lent between servers"): the other side of [`super::lending`]. A call's
//! argument held by another server is asked of that server's store socket first; when it
//! lends, the array comes back as bytes where they lie in the holder's store region (mapped
//! here from the file it handed over), and the executable is lent that file
//! ([`lent_arguments`]), so the routine reads the array with no copy at all. Anything else (a
//! holder on another host, or in another network namespace, a TLS grid, a spilled array)
//! falls back to `Storage.Get`.
//!
//! One connection per holder carries every loan. A loan is returned when the last clone of
//! its bytes is dropped, which is after the executable's reply: the holder keeps the array
//! where it lies until then.

use std::collections::{HashMap, VecDeque};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use ninf_executable::shared::REGION_ARRAY_THRESHOLD;
use ninf_proto::net::auth::{AttachToken, authorized};
use ninf_proto::net::local::{self, SharedRegion};
use ninf_proto::v1;
use tokio::net::UnixStream;
use tokio::sync::{mpsc, oneshot};
use tonic::transport::Channel;

use crate::bulk::lent::{LentInput, number_regions};

/// How long a holder may take to say where its store socket is. A holder that does not
/// answer in time is asked again at the next fetch from it, which meanwhile goes through
/// `Storage.Get`; a loaded host can be slow to answer, and every fetch it misses costs
/// copies.
const ASK_TIMEOUT: Duration = Duration::from_secs(10);

/// The largest answer read from a holder.
const MAX_FRAME: usize = 1 << 20;

/// What is known of each holder, by its address.
#[derive(Default)]
pub struct Borrowing {
    holders: Mutex<HashMap<String, Holder>>,
}

#[derive(Clone)]
enum Holder {
    /// Not on this host, in another network namespace, or lending nothing.
    Elsewhere,
    Lending(Arc<Connection>),
}

/// A connection to one holder's store socket.
struct Connection {
    outgoing: mpsc::UnboundedSender<Outgoing>,
    /// The holder's store region, once its file came.
    region: OnceLock<Arc<SharedRegion>>,
    broken: Arc<AtomicBool>,
}

enum Outgoing {
    Borrow(String, oneshot::Sender<Answer>),
    Return(u64),
}

type Answer = (v1::StoreBorrowReply, Option<OwnedFd>);

impl Borrowing {
    /// `object` where it lies in its holder's store region, lent until the bytes are
    /// dropped; `None` when it cannot be borrowed (fetch it another way).
    /// `credentials` go with every borrow; `holder` is a channel to the holder, awaited only
    /// to ask where its store socket is.
    pub async fn borrow(
        &self,
        object: &v1::ObjectRef,
        credentials: &AttachToken,
        holder: impl Future<Output = Result<Channel, String>>,
    ) -> Option<v1::Array> {
        let connection = self.connection(&object.server, credentials, holder).await?;
        let (answer, answered) = oneshot::channel();
        let asked = Outgoing::Borrow(object.object_id.clone(), answer);
        connection.outgoing.send(asked).ok()?;
        let (reply, file) = answered.await.ok()?;
        let loan = match reply.result? {
            v1::store_borrow_reply::Result::Loan(loan) => loan,
            v1::store_borrow_reply::Result::Error(e) => {
                tracing::debug!(object = %object.object_id, holder = %object.server, reason = %e.message, "not lent");
                return None;
            }
        };
        let lease = Lease {
            loan: loan.loan,
            connection: connection.clone(),
        };
        if let Some(file) = file {
            match SharedRegion::adopt(file) {
                Ok(region) => {
                    let _ = connection.region.set(Arc::new(region));
                }
                Err(e) => {
                    tracing::warn!(holder = %object.server, error = %e, "unusable store region")
                }
            }
        }
        let region = connection.region.get()?.clone();
        let start = usize::try_from(loan.offset).ok()?;
        let end = start.checked_add(usize::try_from(loan.bytes).ok()?)?;
        (end <= region.len()).then(|| v1::Array {
            element_type: loan.element_type,
            data: Bytes::from_owner(Borrowed {
                region,
                start,
                end,
                _lease: lease,
            }),
        })
    }

    /// The regions borrowed from now, to find which one an argument's bytes lie in.
    pub fn regions(&self) -> Vec<Arc<SharedRegion>> {
        ninf_proto::sync::lock(&self.holders)
            .values()
            .filter_map(|holder| match holder {
                Holder::Lending(c) => c.region.get().cloned(),
                Holder::Elsewhere => None,
            })
            .collect()
    }

    /// The connection to `server`'s store socket: the one kept, or a new one.
    async fn connection(
        &self,
        server: &str,
        credentials: &AttachToken,
        holder: impl Future<Output = Result<Channel, String>>,
    ) -> Option<Arc<Connection>> {
        if let Some(known) = self.known(server) {
            return known;
        }
        // A holder that does not answer now is asked again next time; one that has no store
        // socket, or one this host cannot reach, is not.
        let holder = match store_socket(credentials, holder).await? {
            Some(name) => match local::connect(&name) {
                Ok(stream) => Holder::Lending(Arc::new(Connection::start(stream, credentials))),
                Err(_) => Holder::Elsewhere,
            },
            None => Holder::Elsewhere,
        };
        tracing::debug!(%server, lends = matches!(holder, Holder::Lending(_)), "store of a peer");
        let mut holders = ninf_proto::sync::lock(&self.holders);
        // Another call may have connected meanwhile: the first connection stays.
        let kept = match holders.get(server) {
            Some(Holder::Lending(c)) if !c.broken.load(Ordering::Relaxed) => {
                Holder::Lending(c.clone())
            }
            _ => {
                holders.insert(server.to_string(), holder.clone());
                holder
            }
        };
        match kept {
            Holder::Lending(c) => Some(c),
            Holder::Elsewhere => None,
        }
    }

    /// What is known of `server` already: `Some(None)` if it lends nothing here, `None` if
    /// it must be asked (never asked, or its connection broke).
    fn known(&self, server: &str) -> Option<Option<Arc<Connection>>> {
        match ninf_proto::sync::lock(&self.holders).get(server) {
            Some(Holder::Elsewhere) => Some(None),
            Some(Holder::Lending(c)) if !c.broken.load(Ordering::Relaxed) => Some(Some(c.clone())),
            _ => None,
        }
    }
}

/// The holder's store socket, as it says in its `ServerInfo` (`Some(None)`: it has none);
/// `None` if it cannot be asked now or does not answer in time.
async fn store_socket(
    credentials: &AttachToken,
    holder: impl Future<Output = Result<Channel, String>>,
) -> Option<Option<String>> {
    let channel = holder.await.ok()?;
    let mut monitor = v1::monitor_client::MonitorClient::new(authorized(channel, credentials));
    let asked = monitor.info(v1::InfoRequest {});
    let info = tokio::time::timeout(ASK_TIMEOUT, asked).await.ok()?.ok()?;
    Some(Some(info.into_inner().store_local).filter(|name| !name.is_empty()))
}

impl Connection {
    /// Starts the connection's writer and reader.
    fn start(stream: UnixStream, credentials: &AttachToken) -> Connection {
        let stream = Arc::new(stream);
        let broken = Arc::new(AtomicBool::new(false));
        let waiting = Arc::new(Mutex::new(VecDeque::new()));
        let (outgoing, queue) = mpsc::unbounded_channel();
        let authorization = credentials.header();
        tokio::spawn(write(
            (stream.clone(), queue, authorization),
            waiting.clone(),
            broken.clone(),
        ));
        tokio::spawn(read(stream, waiting, broken.clone()));
        Connection {
            outgoing,
            region: OnceLock::new(),
            broken,
        }
    }
}

type Waiting = Arc<Mutex<VecDeque<oneshot::Sender<Answer>>>>;

/// Sends the borrows and returns in order; each borrow's answer is awaited by the reader,
/// first in, first answered.
async fn write(
    (stream, mut queue, authorization): (
        Arc<UnixStream>,
        mpsc::UnboundedReceiver<Outgoing>,
        String,
    ),
    waiting: Waiting,
    broken: Arc<AtomicBool>,
) {
    while let Some(next) = queue.recv().await {
        let mut frame = v1::StoreBorrow {
            authorization: authorization.clone(),
            ..Default::default()
        };
        match next {
            Outgoing::Borrow(object_id, answer) => {
                frame.object_id = object_id;
                ninf_proto::sync::lock(&waiting).push_back(answer);
            }
            Outgoing::Return(loan) => frame.returned.push(loan),
        }
        if let Err(e) = local::send_message(&stream, &frame, None).await {
            tracing::debug!(error = %e, "store socket: cannot send");
            break;
        }
    }
    broken.store(true, Ordering::Relaxed);
    // The borrows still waiting are answered by nobody: their callers fetch another way.
    ninf_proto::sync::lock(&waiting).clear();
    // The reader ends on the end of stream, and the holder lets go of every loan.
    // SAFETY: shutdown on a descriptor the stream owns, which stays open until it is dropped.
    unsafe { libc::shutdown(stream.as_raw_fd(), libc::SHUT_RDWR) };
}

/// Hands each answer to the borrow waiting longest.
async fn read(stream: Arc<UnixStream>, waiting: Waiting, broken: Arc<AtomicBool>) {
    loop {
        let answer = local::receive_message::<v1::StoreBorrowReply>(&stream, MAX_FRAME).await;
        let Ok(answer) = answer else {
            break;
        };
        let Some(next) = ninf_proto::sync::lock(&waiting).pop_front() else {
            tracing::debug!("store socket: an answer nobody asked for");
            break;
        };
        let _ = next.send(answer);
    }
    broken.store(true, Ordering::Relaxed);
    ninf_proto::sync::lock(&waiting).clear();
}

/// A loan, returned when dropped.
struct Lease {
    loan: u64,
    connection: Arc<Connection>,
}

impl Drop for Lease {
    fn drop(&mut self) {
        // A closed connection returned every loan with it.
        let _ = self.connection.outgoing.send(Outgoing::Return(self.loan));
    }
}

/// A borrowed array's bytes where they lie in the holder's region.
struct Borrowed {
    region: Arc<SharedRegion>,
    start: usize,
    end: usize,
    _lease: Lease,
}

impl AsRef<[u8]> for Borrowed {
    fn as_ref(&self) -> &[u8] {
        &self.region.bytes()[self.start..self.end]
    }
}

/// The region among `regions` that `data` lies in, and its offset there.
pub fn place(regions: &[Arc<SharedRegion>], data: &[u8]) -> Option<(Arc<SharedRegion>, u64)> {
    regions
        .iter()
        .find_map(|region| Some((region.clone(), region.offset_of(data)? as u64)))
}

/// Large borrowed arrays among an executable's request, lent to it: each is taken out of
/// its argument and named in `lent_arrays` by its place in the holder's file, as the bulk
/// path names inputs in regions a proxy lent on. Returns the files to pass with the request
/// (in the order `lent` numbers them) and the arrays' bytes, to keep until the reply (their
/// loans).
pub fn lent_arguments(
    borrowing: &Borrowing,
    request: &mut v1::ExecRequest,
) -> (Vec<Arc<SharedRegion>>, Vec<Bytes>) {
    use v1::argument_value::Value;
    let regions = borrowing.regions();
    let (mut inputs, mut held) = (Vec::new(), Vec::new());
    if regions.is_empty() {
        return (Vec::new(), held);
    }
    for (index, argument) in request.arguments.iter_mut().enumerate() {
        let Some(Value::Array(array)) = &argument.value else {
            continue;
        };
        if array.data.len() < REGION_ARRAY_THRESHOLD {
            continue;
        }
        let Some((region, offset)) = place(&regions, &array.data) else {
            continue;
        };
        let (element_type, bytes) = (array.element_type, array.data.len() as u64);
        inputs.push((
            index as u32,
            element_type,
            bytes,
            LentInput { region, offset },
        ));
        held.push(array.data.clone());
        argument.value = None;
    }
    let (files, arrays) = number_regions(&inputs);
    request.lent_arrays = arrays;
    request.lent_regions = files.len() as u32;
    (files, held)
}
