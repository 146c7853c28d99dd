//! A run's large arrays handed to a proxy on this host in shared memory
//! (docs/bulk-protocol.md, "From a client on the proxy's host").
//!
//! The first time a run carries an array of [`MIN_SHARED_ARRAY`] bytes or more, the client
//! asks the proxy for its same-host socket (`Proxy.SameHost`) and connects to it; a proxy on
//! another host, an older proxy, or one with TLS has none, and the client stops asking. It
//! then keeps a few memory files it shares with the proxy: for each run it takes one nobody
//! reads, copies the large arrays into it, and names them in the request instead of
//! carrying their bytes. The proxy says when the run no longer reads the region
//! (`released`); until then the client never writes it again, so a run's inputs cannot
//! change under it. A run whose wanted outputs include arrays that large also lends the
//! proxy a region for them (`output_region`); the proxy writes them there and the client
//! reads them from it, holding the region until it has. Whenever any of this is not
//! possible, the arrays go in the request and the reply as before.
//!
//! A transaction (Rust's, C's, Python's) records its large inputs straight into a region
//! ([`Recorder`]) once the client has a connection: the copy it must make anyway, so that
//! later changes to the caller's arrays do not reach the run, lands where the proxy reads
//! it, and the run names those bytes instead of copying them again.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ninf_proto::net::local::{self, SharedRegion};
use ninf_proto::v1;
use ninf_proto::v1::call_argument::Source;
use ninf_proto::v1::shared_region_message::Message;
use tokio::net::UnixStream;
use tokio::sync::oneshot;

use crate::CallError;

/// Arrays smaller than this go in the request: copying them twice costs less than the
/// bookkeeping.
pub use ninf_proto::net::local::MIN_SHARED_ARRAY;

/// Regions a client keeps at once (the proxy takes up to 16 per connection).
const MAX_REGIONS: usize = 8;

/// The smallest region made, so that runs of similar size share one.
const MIN_REGION: usize = 1 << 20;

/// Arrays start at multiples of this in a region, as a routine would align them.
const ALIGN: usize = local::SHARED_ALIGN;

/// A free region no run has taken for this long is given back (the proxy unmaps it too),
/// so one large transaction does not pin its memory for the client's life.
const IDLE_REGION: Duration = Duration::from_secs(60);

/// A recording region holds this many arrays of the size that made it: a transaction's
/// inputs usually share a size (the seed's five systems, or the cascade's eight matrices).
const RECORD_ARRAYS: usize = 4;

/// The longest frame the proxy sends on its socket: the messages are names.
const MAX_FRAME: usize = 4096;

/// How long the proxy may take to accept a region.
const OFFER_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a run waits for a region when runs in flight hold them all, before it sends its
/// arrays in the request after all (a proxy that keeps every region that long is running
/// long calls, next to which the request's extra copies are small).
const RELEASE_WAIT: Duration = Duration::from_secs(5);

/// Asks the proxy for its same-host socket (`Proxy.SameHost`): its name, `None` when it
/// offers none or does not know the call. The grid client is one; the regions here need
/// nothing else of it.
pub(crate) trait ProxySocket: Sync {
    fn same_host_socket(
        &self,
    ) -> impl std::future::Future<Output = Result<Option<String>, tonic::Status>> + Send;
}

/// One client's shared regions with its proxy.
#[derive(Default)]
pub(crate) struct SharedUploads {
    state: tokio::sync::Mutex<State>,
}

#[derive(Default)]
enum State {
    /// Not asked yet, or the connection ended (the proxy restarted): ask again.
    #[default]
    Unknown,
    /// The proxy offers no socket, or it cannot be reached: send every array in requests.
    Off,
    On(Arc<Connection>),
}

/// The connection to the proxy's socket and the regions handed over on it.
struct Connection {
    stream: UnixStream,
    regions: Mutex<Vec<Slot>>,
    /// Offers waiting for the proxy's answer, by region name.
    offers: Mutex<HashMap<String, oneshot::Sender<Result<(), String>>>>,
    alive: AtomicBool,
    /// Regions being made (created, faulted in, offered) outside the lock on `regions`,
    /// counted against [`MAX_REGIONS`] with those kept: runs choosing at once would
    /// otherwise each make one past the limit, until the proxy refused an offer and the
    /// connection, and every region on it, was given up.
    making: AtomicUsize,
    /// Told whenever a region may have become free (or the connection ended), for the runs
    /// waiting for one.
    freed: tokio::sync::Notify,
}

struct Slot {
    name: String,
    memory: Arc<SharedRegion>,
    /// Named by a run the proxy has not released yet.
    proxy_holds: bool,
    /// A reply's outputs in it are still being read.
    client_reads: bool,
    /// A transaction records its inputs into it ([`Recorder`]); no other takes it.
    recording: bool,
    /// Handed over to the proxy (a recording region is made before it is offered).
    offered: bool,
    /// When a run last took it.
    lent_at: Instant,
}

impl Slot {
    fn free(&self) -> bool {
        !self.proxy_holds && !self.client_reads && !self.recording
    }

    /// Whether `data` lies in this region.
    fn holds(&self, data: &[u8]) -> bool {
        let start = self.memory.bytes().as_ptr() as usize;
        let address = data.as_ptr() as usize;
        address >= start && address + data.len() <= start + self.memory.len()
    }
}

/// What one attempt of a run shares: for its reply's outputs, the region they may come in.
pub(crate) struct SharedRun {
    output: Option<Arc<RegionHold>>,
}

/// Which of the client's own holds on a region a [`RegionHold`] is.
#[derive(Clone, Copy)]
enum Holder {
    /// A reply's outputs in it are being read.
    Reader,
    /// A transaction records its inputs into it.
    Recorder,
}

/// The client's hold on a region (a slot's `client_reads` or `recording`), given up when
/// the last array in it is dropped.
struct RegionHold {
    connection: Arc<Connection>,
    name: String,
    memory: Arc<SharedRegion>,
    holder: Holder,
}

impl Drop for RegionHold {
    fn drop(&mut self) {
        let mut regions = ninf_proto::sync::lock(&self.connection.regions);
        if let Some(slot) = regions.iter_mut().find(|s| s.name == self.name) {
            match self.holder {
                Holder::Reader => slot.client_reads = false,
                Holder::Recorder => slot.recording = false,
            }
        }
        drop(regions);
        self.connection.freed.notify_waiters();
    }
}

/// An array's bytes in a region; the region stays held while they live.
struct HeldBytes {
    hold: Arc<RegionHold>,
    start: usize,
    end: usize,
}

impl AsRef<[u8]> for HeldBytes {
    fn as_ref(&self) -> &[u8] {
        &self.hold.memory.bytes()[self.start..self.end]
    }
}

/// Copies a transaction's large inputs into regions shared with the proxy as the calls are
/// recorded, one array after another (each region is the transaction's alone). Gone with
/// the transaction; the regions are free again once its run has ended too.
pub struct Recorder {
    connection: Arc<Connection>,
    /// The region being filled, and its next free byte.
    current: Option<(Arc<RegionHold>, usize)>,
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder")
            .field("region", &self.current.as_ref().map(|(hold, _)| &hold.name))
            .finish()
    }
}

impl Recorder {
    /// A copy of `data` in a shared region, or `None`: too small to share, the connection
    /// is gone, or every region is taken (the caller copies it as before).
    pub fn copy(&mut self, data: &[u8]) -> Option<bytes::Bytes> {
        if data.len() < MIN_SHARED_ARRAY || !self.connection.alive.load(Ordering::Acquire) {
            return None;
        }
        let fits = |(hold, offset): &(Arc<RegionHold>, usize)| {
            offset.saturating_add(data.len()) <= hold.memory.len()
        };
        if !self.current.as_ref().is_some_and(fits) {
            self.current = Some((self.connection.take_for_recording(data.len())?, 0));
        }
        let (hold, offset) = self.current.as_mut()?;
        let start = *offset;
        // SAFETY: the slot is marked recording, so no run and no other transaction takes it;
        // this recorder alone writes it, and only past every array it handed out before.
        if !unsafe { hold.memory.write_at(start, data) } {
            return None;
        }
        *offset = (start + data.len()).next_multiple_of(ALIGN);
        Some(bytes::Bytes::from_owner(HeldBytes {
            hold: hold.clone(),
            start,
            end: start + data.len(),
        }))
    }
}

/// For each argument of a call being recorded, the buffer a [`Recorder`] may copy: an
/// input no earlier call of the transaction produces (those flow server to server, as
/// `writers` says).
pub(crate) fn recordable_inputs<'a>(
    interface: &'a ninf_idl::FunctionInterface,
    args: &'a [super::recording::TxArg],
    writers: &'a [Option<(usize, u32)>],
) -> impl Iterator<Item = Option<usize>> + 'a {
    use super::recording::{Buffer, TxArg};
    interface
        .parameters
        .iter()
        .zip(args)
        .map(move |(parameter, arg)| match arg {
            TxArg::Buffer(Buffer(b))
                if parameter.mode.is_input() && writers.get(*b).is_some_and(Option::is_none) =>
            {
                Some(*b)
            }
            _ => None,
        })
}

/// Where one array goes in the region.
struct Placement {
    task: usize,
    argument: usize,
    offset: usize,
}

impl SharedUploads {
    /// Sharing as the environment allows ([`crate::environment::SAME_HOST_UPLOADS_ENV`]).
    pub(crate) fn from_env() -> Result<SharedUploads, crate::CallError> {
        let state = if crate::environment::same_host_uploads_from_env()? {
            State::Unknown
        } else {
            State::Off
        };
        Ok(SharedUploads {
            state: tokio::sync::Mutex::new(state),
        })
    }

    /// A recorder for a new transaction, when the client is connected to its proxy's socket
    /// (after its first run with large arrays); `None` otherwise, and the transaction copies
    /// its inputs as before.
    pub(crate) fn recorder(&self) -> Option<Recorder> {
        let state = self.state.try_lock().ok()?;
        match &*state {
            State::On(connection) if connection.alive.load(Ordering::Acquire) => Some(Recorder {
                connection: connection.clone(),
                current: None,
            }),
            _ => None,
        }
    }

    /// Moves `request`'s large arrays into a region shared with the proxy, and lends it a
    /// region for the reply's, if the proxy offers that; leaves the request as it was
    /// otherwise (`None`).
    pub(crate) async fn share(
        &self,
        client: &impl ProxySocket,
        request: &mut v1::RunRequest,
    ) -> Option<SharedRun> {
        let (placements, total) = plan(request);
        let outputs = output_bytes(request);
        if placements.is_empty() && outputs == 0 {
            return None;
        }
        let connection = self.connection(client).await?;
        let recorded = match connection.adopt_recorded(request).await {
            Ok(named) => named,
            Err(e) => return connection.failed(e),
        };
        let (placements, total) = if recorded {
            plan(request)
        } else {
            (placements, total)
        };
        let copied = !placements.is_empty()
            && match connection.lend(total, false, !recorded).await {
                Ok(Some((name, memory))) => {
                    write(request, &placements, &name, &memory);
                    true
                }
                Ok(None) => false,
                Err(e) => return connection.failed(e),
            };
        let inputs_shared = recorded || copied;
        let output = if outputs == 0 {
            None
        } else {
            match connection.lend(outputs, true, false).await {
                Ok(Some((name, memory))) => {
                    request.output_region = name.clone();
                    Some(Arc::new(RegionHold {
                        connection: connection.clone(),
                        name,
                        memory,
                        holder: Holder::Reader,
                    }))
                }
                Ok(None) => None,
                Err(e) => return connection.failed(e),
            }
        };
        (inputs_shared || output.is_some()).then_some(SharedRun { output })
    }

    /// Copies `data` (a put's whole value, of at least [`MIN_SHARED_ARRAY`] bytes) into a
    /// region shared with the proxy and names it there; `None` when the proxy offers no
    /// regions or all are held (the put then sends its bytes). The proxy says `released`
    /// once the put no longer reads it.
    pub(crate) async fn share_array(
        &self,
        client: &impl ProxySocket,
        data: &[u8],
        element_type: i32,
    ) -> Option<v1::SharedArray> {
        if data.len() < MIN_SHARED_ARRAY {
            return None;
        }
        let connection = self.connection(client).await?;
        let (name, memory) = match connection.lend(data.len(), false, true).await {
            Ok(Some(lent)) => lent,
            Ok(None) => return None,
            Err(e) => {
                connection.failed(e);
                return None;
            }
        };
        // SAFETY: the slot is marked held by the proxy, so no run takes the region, and the
        // proxy reads it only once the put names it; `lend` sized it to hold `data`.
        let written = unsafe { memory.write_at(0, data) };
        written.then_some(v1::SharedArray {
            element_type,
            region: name,
            offset: 0,
            bytes: data.len() as u64,
        })
    }

    /// Drops the connection (the proxy did not know a region: it restarted); the next run
    /// asks the proxy again.
    pub(crate) async fn reconnect(&self) {
        *self.state.lock().await = State::Unknown;
    }

    /// The live connection to the proxy's socket, connecting first if need be.
    async fn connection(&self, client: &impl ProxySocket) -> Option<Arc<Connection>> {
        let mut state = self.state.lock().await;
        if let State::On(connection) = &*state {
            if connection.alive.load(Ordering::Acquire) {
                return Some(connection.clone());
            }
            *state = State::Unknown;
        }
        if matches!(*state, State::Off) {
            return None;
        }
        match client.same_host_socket().await {
            Ok(Some(name)) => match local::connect(&name) {
                Ok(stream) => {
                    let connection = Connection::start(stream);
                    *state = State::On(connection.clone());
                    Some(connection)
                }
                Err(e) => {
                    tracing::debug!(error = %e, "the proxy is on another host");
                    *state = State::Off;
                    None
                }
            },
            Ok(None) => {
                *state = State::Off;
                None
            }
            // Unreachable for now: ask again next run.
            Err(_) => None,
        }
    }
}

/// Whether the proxy refused a run for naming a region it does not hold.
pub(crate) fn region_unknown(status: &tonic::Status) -> bool {
    status
        .metadata()
        .contains_key(ninf_proto::net::REGION_UNKNOWN_METADATA)
}

/// Bytes a region needs for the reply's large outputs: the parts of the tasks whose wanted
/// outputs reach the size the proxy shares (`local::output_parts`, the proxy's rule too).
fn output_bytes(request: &v1::RunRequest) -> usize {
    let graph = request.graph.as_ref().map_or(&[][..], |g| &g.tasks[..]);
    let tasks = graph
        .iter()
        .zip(&request.arguments)
        .map(|(task, arguments)| (task.client_out_bytes, arguments.returns.len()));
    local::output_parts(tasks)
        .into_iter()
        .flatten()
        .map(|(_, bytes)| bytes as usize)
        .sum()
}

impl SharedRun {
    /// The reply with each output the proxy put in the output region read from there
    /// (the region held until the reply's arrays are dropped).
    pub(crate) fn receive(self, mut reply: v1::RunReply) -> Result<v1::RunReply, CallError> {
        use v1::call_output::Result as Output;
        for output in reply.tasks.iter_mut().flat_map(|t| t.outputs.iter_mut()) {
            let Some(Output::Shared(shared)) = &output.result else {
                continue;
            };
            let hold = self
                .output
                .as_ref()
                .filter(|hold| hold.name == shared.region)
                .ok_or_else(|| bad_reply(format!("names region `{}`", shared.region)))?;
            let len = hold.memory.len() as u64;
            let end = shared
                .offset
                .checked_add(shared.bytes)
                .filter(|&e| e <= len);
            let Some(end) = end else {
                return Err(bad_reply(format!(
                    "names bytes {}..{}+{} of a region of {len}",
                    shared.offset, shared.offset, shared.bytes
                )));
            };
            let data = bytes::Bytes::from_owner(HeldBytes {
                hold: hold.clone(),
                start: shared.offset as usize,
                end: end as usize,
            });
            output.result = Some(Output::Array(v1::Array {
                element_type: shared.element_type,
                data,
            }));
        }
        Ok(reply)
    }
}

fn bad_reply(what: String) -> CallError {
    CallError::new(
        crate::ErrorKind::CommunicationFailed,
        format!("the proxy's reply {what}, not the output region this client lent it"),
    )
}

/// The arrays worth sharing, where each goes, and the bytes the region needs.
fn plan(request: &v1::RunRequest) -> (Vec<Placement>, usize) {
    let mut placements = Vec::new();
    let mut offset = 0usize;
    for (task, arguments) in request.arguments.iter().enumerate() {
        for (argument, value) in arguments.arguments.iter().enumerate() {
            let Some(array) = array_of(value) else {
                continue;
            };
            if array.data.len() >= MIN_SHARED_ARRAY {
                placements.push(Placement {
                    task,
                    argument,
                    offset,
                });
                offset += array.data.len().next_multiple_of(ALIGN);
            }
        }
    }
    (placements, offset)
}

fn array_of(argument: &v1::CallArgument) -> Option<&v1::Array> {
    match &argument.source {
        Some(Source::Value(v1::ArgumentValue {
            value: Some(v1::argument_value::Value::Array(array)),
        })) => Some(array),
        _ => None,
    }
}

/// Copies the planned arrays into `memory` and names them in the request instead.
fn write(
    request: &mut v1::RunRequest,
    placements: &[Placement],
    region: &str,
    memory: &SharedRegion,
) {
    for placement in placements {
        let argument = &mut request.arguments[placement.task].arguments[placement.argument];
        let Some(array) = array_of(argument) else {
            continue;
        };
        let bytes = array.data.len();
        // SAFETY: the slot is marked held by the proxy, so no other run takes the region,
        // and the proxy reads it only once the request names it. `plan` sized it.
        if !unsafe { memory.write_at(placement.offset, &array.data) } {
            continue;
        }
        argument.source = Some(Source::Shared(v1::SharedArray {
            element_type: array.element_type,
            region: region.to_string(),
            offset: placement.offset as u64,
            bytes: bytes as u64,
        }));
    }
}

impl Connection {
    fn start(stream: UnixStream) -> Arc<Connection> {
        let connection = Arc::new(Connection {
            stream,
            regions: Mutex::new(Vec::new()),
            offers: Mutex::new(HashMap::new()),
            alive: AtomicBool::new(true),
            making: AtomicUsize::new(0),
            freed: tokio::sync::Notify::new(),
        });
        let reader = connection.clone();
        tokio::spawn(async move {
            if let Err(e) = reader.read_answers().await {
                tracing::debug!(error = %e, "the proxy's same-host socket closed");
            }
            reader.alive.store(false, Ordering::Release);
            ninf_proto::sync::lock(&reader.offers).clear();
            reader.freed.notify_waiters();
        });
        connection
    }

    /// The proxy's answers and releases, until the socket closes.
    async fn read_answers(&self) -> std::io::Result<()> {
        loop {
            let (message, _) =
                local::receive_message::<v1::SharedRegionMessage>(&self.stream, MAX_FRAME).await?;
            match message.message {
                Some(Message::Accepted(name)) => self.answered(&name, Ok(())),
                Some(Message::Refused(refused)) => {
                    self.answered(&refused.region, Err(refused.reason));
                }
                Some(Message::Released(name)) => {
                    let mut regions = ninf_proto::sync::lock(&self.regions);
                    if let Some(slot) = regions.iter_mut().find(|s| s.name == name) {
                        slot.proxy_holds = false;
                    }
                    drop(regions);
                    self.freed.notify_waiters();
                }
                // A call that may still write it was given up: never used again. Readers
                // still holding it keep its mapping.
                Some(Message::Retired(name)) => {
                    ninf_proto::sync::lock(&self.regions).retain(|s| s.name != name);
                    self.send(Message::Forget(name), None).await?;
                    self.freed.notify_waiters();
                }
                _ => {}
            }
        }
    }

    fn answered(&self, name: &str, answer: Result<(), String>) {
        if let Some(waiting) = ninf_proto::sync::lock(&self.offers).remove(name) {
            let _ = waiting.send(answer);
        }
    }

    /// Names in `request` the arrays recorded into this connection's regions, where they
    /// lie, and leases those regions to the run (offering any the proxy has not seen).
    /// Whether any was named. A region another run still holds (the same transaction sent
    /// twice at once) is left alone: its arrays are copied as any others.
    async fn adopt_recorded(&self, request: &mut v1::RunRequest) -> std::io::Result<bool> {
        let mut named: Vec<(usize, usize, String, usize)> = Vec::new();
        let mut to_offer: Vec<(String, Arc<SharedRegion>)> = Vec::new();
        {
            let mut regions = ninf_proto::sync::lock(&self.regions);
            let mut taken: Vec<usize> = Vec::new();
            for (task, arguments) in request.arguments.iter().enumerate() {
                for (argument, value) in arguments.arguments.iter().enumerate() {
                    let Some(array) = array_of(value) else {
                        continue;
                    };
                    let Some(index) = regions
                        .iter()
                        .position(|s| s.recording && s.holds(&array.data))
                    else {
                        continue;
                    };
                    let slot = &regions[index];
                    if slot.proxy_holds && !taken.contains(&index) {
                        continue;
                    }
                    if !taken.contains(&index) {
                        taken.push(index);
                    }
                    let offset =
                        array.data.as_ptr() as usize - slot.memory.bytes().as_ptr() as usize;
                    named.push((task, argument, slot.name.clone(), offset));
                }
            }
            let now = Instant::now();
            for &index in &taken {
                let slot = &mut regions[index];
                slot.proxy_holds = true;
                slot.lent_at = now;
                if !slot.offered {
                    slot.offered = true;
                    to_offer.push((slot.name.clone(), slot.memory.clone()));
                }
            }
        }
        for (name, memory) in to_offer {
            self.offer(&name, &memory).await?;
        }
        for (task, argument, region, offset) in &named {
            let value = &mut request.arguments[*task].arguments[*argument];
            let Some(array) = array_of(value) else {
                continue;
            };
            value.source = Some(Source::Shared(v1::SharedArray {
                element_type: array.element_type,
                region: region.clone(),
                offset: *offset as u64,
                bytes: array.data.len() as u64,
            }));
        }
        Ok(!named.is_empty())
    }

    /// A region of its own for a transaction to record into: a free one large enough for
    /// [`RECORD_ARRAYS`] arrays of `bytes`, or a new one (not yet offered to the proxy, which
    /// sees it with the first run that names it). `None` when every slot is taken.
    fn take_for_recording(self: &Arc<Self>, bytes: usize) -> Option<Arc<RegionHold>> {
        let wanted = bytes
            .next_multiple_of(ALIGN)
            .saturating_mul(RECORD_ARRAYS)
            .checked_next_power_of_two()?
            .max(MIN_REGION);
        let hold = |slot: &mut Slot| {
            slot.recording = true;
            Arc::new(RegionHold {
                connection: self.clone(),
                name: slot.name.clone(),
                memory: slot.memory.clone(),
                holder: Holder::Recorder,
            })
        };
        let _making = {
            let mut regions = ninf_proto::sync::lock(&self.regions);
            let fitting = regions
                .iter_mut()
                .filter(|s| s.free() && s.memory.len() >= wanted)
                .min_by_key(|s| s.memory.len());
            if let Some(slot) = fitting {
                return Some(hold(slot));
            }
            if regions.len() + self.making.load(Ordering::Acquire) >= MAX_REGIONS {
                // Every slot kept: a free region that holds this array serves, though not
                // four of them (after a burst of single-array calls, all may be of one
                // array's size). None is given up to make a larger one: a burst of such
                // calls would churn through regions, faulting in every new one's pages.
                let holding = regions
                    .iter_mut()
                    .filter(|s| s.free() && s.memory.len() >= bytes)
                    .max_by_key(|s| s.memory.len());
                return holding.map(hold);
            }
            Making::start(&self.making)
        };
        let (name, memory) = fresh_region(wanted).ok()?;
        let mut slot = Slot {
            name,
            memory: Arc::new(memory),
            proxy_holds: false,
            client_reads: false,
            recording: false,
            offered: false,
            lent_at: Instant::now(),
        };
        let recorder = hold(&mut slot);
        let mut regions = ninf_proto::sync::lock(&self.regions);
        if regions.len() >= MAX_REGIONS {
            return None;
        }
        regions.push(slot);
        Some(recorder)
    }

    /// Hands `memory` over to the proxy under `name` and waits for its answer.
    async fn offer(&self, name: &str, memory: &SharedRegion) -> std::io::Result<()> {
        let (answer, answered) = oneshot::channel();
        ninf_proto::sync::lock(&self.offers).insert(name.to_string(), answer);
        self.send(Message::Offer(name.to_string()), Some(memory))
            .await?;
        match tokio::time::timeout(OFFER_TIMEOUT, answered).await {
            Ok(Ok(Ok(()))) => Ok(()),
            Ok(Ok(Err(reason))) => Err(std::io::Error::other(reason)),
            _ => Err(std::io::Error::other("the proxy did not answer the offer")),
        }
    }

    /// A region of at least `bytes` nobody uses, marked held by the proxy (and read by the
    /// client, for outputs): one kept, or a new one handed over. `None` when all are held.
    ///
    /// With `may_wait` (only for a run that holds no region yet, so that two runs never
    /// wait for each other's), a run that finds every region held by runs in flight waits
    /// for one of them to be released.
    async fn lend(
        &self,
        bytes: usize,
        for_outputs: bool,
        may_wait: bool,
    ) -> std::io::Result<Option<(String, Arc<SharedRegion>)>> {
        let deadline = tokio::time::Instant::now() + RELEASE_WAIT;
        let _making = loop {
            // Listening before looking, so that a release between the two is not missed.
            let freed = self.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            let (taken, forget, making) = {
                let mut regions = ninf_proto::sync::lock(&self.regions);
                let making = self.making.load(Ordering::Acquire);
                let (taken, forget) =
                    choose(&mut regions, making, bytes, for_outputs, Instant::now());
                // Counted before the lock is let go, uncounted however this run ends.
                let making = matches!(taken, Choice::MakeOne).then(|| Making::start(&self.making));
                (taken, forget, making)
            };
            for name in forget {
                self.send(Message::Forget(name), None).await?;
            }
            match (taken, making) {
                (Choice::Taken(name, memory), _) => return Ok(Some((name, memory))),
                (Choice::AllHeld, _) => return Ok(None),
                (Choice::MakeOne, Some(making)) => break making,
                (Choice::MakeOne, None) => return Ok(None),
                (Choice::AwaitRelease, _) if !may_wait => return Ok(None),
                (Choice::AwaitRelease, _) => {
                    let waited = tokio::time::timeout_at(deadline, freed).await;
                    if waited.is_err() || !self.alive.load(Ordering::Acquire) {
                        return Ok(None);
                    }
                }
            }
        };
        let size = bytes
            .checked_next_power_of_two()
            .unwrap_or(bytes)
            .max(MIN_REGION);
        let (name, memory) = fresh_region(size)?;
        self.offer(&name, &memory).await?;
        let memory = Arc::new(memory);
        ninf_proto::sync::lock(&self.regions).push(Slot {
            name: name.clone(),
            memory: memory.clone(),
            proxy_holds: true,
            client_reads: for_outputs,
            recording: false,
            offered: true,
            lent_at: Instant::now(),
        });
        Ok(Some((name, memory)))
    }

    /// Gives up on the connection after a failure: the run sends its arrays in the request.
    fn failed(&self, e: std::io::Error) -> Option<SharedRun> {
        tracing::debug!(error = %e, "no shared region; the arrays go in the request");
        self.alive.store(false, Ordering::Release);
        None
    }

    async fn send(&self, message: Message, region: Option<&SharedRegion>) -> std::io::Result<()> {
        let message = v1::SharedRegionMessage {
            message: Some(message),
        };
        local::send_message(&self.stream, &message, region.map(SharedRegion::fd)).await
    }
}

/// A new region of `size` bytes under a fresh name, its pages faulted in once here rather
/// than in every run's copies.
fn fresh_region(size: usize) -> std::io::Result<(String, SharedRegion)> {
    let mut memory = SharedRegion::create(size)?;
    ninf_proto::copy::zero(memory.bytes_mut());
    Ok((region_name()?, memory))
}

/// One region being made ([`Connection::making`]), counted until dropped.
struct Making<'a>(&'a AtomicUsize);

impl<'a> Making<'a> {
    fn start(count: &'a AtomicUsize) -> Making<'a> {
        count.fetch_add(1, Ordering::AcqRel);
        Making(count)
    }
}

impl Drop for Making<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// What a run gets from the regions kept.
enum Choice {
    /// The smallest free region that holds the run's bytes, now marked held.
    Taken(String, Arc<SharedRegion>),
    /// None fits, and there is room for a new one.
    MakeOne,
    /// None fits and every slot is held, some by runs in flight: wait for the proxy to
    /// release one rather than copy the arrays twice more through the request (as Ray's
    /// object store makes a put wait when it is full). Runs in flight thus hold at most
    /// [`MAX_REGIONS`] regions, which the executables keep mapped.
    AwaitRelease,
    /// None fits and the client itself holds every slot (transactions recording, replies
    /// being read), which waiting here could not free: the arrays go in the request.
    AllHeld,
}

/// Picks a region for a run of `bytes` at `now`, and the regions to give back: those free
/// and idle for [`IDLE_REGION`], and when all [`MAX_REGIONS`] are kept and none fits, a free
/// one to make room. The smallest fit, so that a large region serves only large runs and
/// can go idle.
fn choose(
    regions: &mut Vec<Slot>,
    making: usize,
    bytes: usize,
    for_outputs: bool,
    now: Instant,
) -> (Choice, Vec<String>) {
    let mut forget = Vec::new();
    regions.retain(|s| {
        let idle = s.free() && now.saturating_duration_since(s.lent_at) >= IDLE_REGION;
        if idle && s.offered {
            forget.push(s.name.clone());
        }
        !idle
    });
    let fitting = regions
        .iter_mut()
        .filter(|s| s.free() && s.memory.len() >= bytes)
        .min_by_key(|s| s.memory.len());
    if let Some(slot) = fitting {
        slot.proxy_holds = true;
        slot.client_reads = for_outputs;
        slot.lent_at = now;
        return (
            Choice::Taken(slot.name.clone(), slot.memory.clone()),
            forget,
        );
    }
    if regions.len() + making < MAX_REGIONS {
        return (Choice::MakeOne, forget);
    }
    // Full: a free region too small for this run makes room for a larger one.
    match regions.iter().position(Slot::free) {
        Some(index) => {
            let slot = regions.remove(index);
            if slot.offered {
                forget.push(slot.name);
            }
            (Choice::MakeOne, forget)
        }
        None if regions.iter().any(|s| s.proxy_holds) => (Choice::AwaitRelease, forget),
        None => (Choice::AllHeld, forget),
    }
}

/// A name nobody else's region has: 128 random bits.
fn region_name() -> std::io::Result<String> {
    local::random_name("region-")
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn slot(name: &str, len: usize, held: bool, lent_at: Instant) -> Slot {
        Slot {
            name: name.into(),
            memory: Arc::new(SharedRegion::create(len).unwrap()),
            proxy_holds: held,
            client_reads: false,
            recording: false,
            offered: true,
            lent_at,
        }
    }

    fn taken(choice: &Choice) -> &str {
        match choice {
            Choice::Taken(name, _) => name,
            Choice::MakeOne => "make one",
            Choice::AwaitRelease => "await release",
            Choice::AllHeld => "all held",
        }
    }

    /// A proxy's side of the socket that accepts every offer, noting the regions offered.
    async fn accepting_proxy(stream: UnixStream, offered: Arc<Mutex<Vec<String>>>) {
        while let Ok((message, file)) =
            local::receive_message::<v1::SharedRegionMessage>(&stream, MAX_FRAME).await
        {
            if let Some(Message::Offer(name)) = message.message {
                assert!(
                    file.is_some(),
                    "the offer of `{name}` came without its file"
                );
                let answer = v1::SharedRegionMessage {
                    message: Some(Message::Accepted(name.clone())),
                };
                local::send_message(&stream, &answer, None).await.unwrap();
                ninf_proto::sync::lock(&offered).push(name);
            }
        }
    }

    fn call_with(data: bytes::Bytes) -> v1::TaskArguments {
        v1::TaskArguments {
            arguments: vec![v1::CallArgument {
                source: Some(Source::Value(v1::ArgumentValue {
                    value: Some(v1::argument_value::Value::Array(v1::Array {
                        element_type: 1,
                        data,
                    })),
                })),
            }],
            returns: Vec::new(),
        }
    }

    fn shared_of(arguments: &v1::TaskArguments) -> Option<&v1::SharedArray> {
        match &arguments.arguments[0].source {
            Some(Source::Shared(shared)) => Some(shared),
            _ => None,
        }
    }

    #[tokio::test]
    async fn recorded_inputs_are_named_where_they_lie_and_their_region_is_the_transactions_own() {
        let (client_end, proxy_end) = UnixStream::pair().unwrap();
        let offered = Arc::new(Mutex::new(Vec::new()));
        let proxy = tokio::spawn(accepting_proxy(proxy_end, offered.clone()));
        let connection = Connection::start(client_end);
        let mut recorder = Recorder {
            connection: connection.clone(),
            current: None,
        };
        // Too small to share: the caller copies it as before.
        assert!(recorder.copy(&[7u8; 1000]).is_none());
        let first: Vec<u8> = (0..MIN_SHARED_ARRAY).map(|i| i as u8).collect();
        let second = vec![9u8; MIN_SHARED_ARRAY + 1];
        let a = recorder.copy(&first).unwrap();
        let b = recorder.copy(&second).unwrap();
        assert_eq!((&a[..], &b[..]), (&first[..], &second[..]));
        {
            let regions = ninf_proto::sync::lock(&connection.regions);
            assert_eq!(
                regions.len(),
                1,
                "both arrays share the transaction's region"
            );
            let slot = &regions[0];
            assert!(slot.recording && !slot.offered && !slot.free());
            assert!(slot.holds(&a) && slot.holds(&b));
        }
        // Another transaction's recorder gets a region of its own.
        let mut other = Recorder {
            connection: connection.clone(),
            current: None,
        };
        let c = other.copy(&first).unwrap();
        drop(other);

        let mut request = v1::RunRequest {
            arguments: vec![call_with(a.clone()), call_with(b.clone())],
            ..Default::default()
        };
        assert!(connection.adopt_recorded(&mut request).await.unwrap());
        let (named_a, named_b) = (
            shared_of(&request.arguments[0]).unwrap(),
            shared_of(&request.arguments[1]).unwrap(),
        );
        assert_eq!(named_a.region, named_b.region);
        assert_eq!((named_a.offset, named_a.bytes), (0, first.len() as u64));
        assert_eq!(named_b.offset, first.len().next_multiple_of(ALIGN) as u64);
        assert!(plan(&request).0.is_empty(), "nothing is left to copy");

        // The same arrays sent again while that run holds the region are copied instead.
        let mut again = v1::RunRequest {
            arguments: vec![call_with(a.clone())],
            ..Default::default()
        };
        assert!(!connection.adopt_recorded(&mut again).await.unwrap());
        assert!(shared_of(&again.arguments[0]).is_none());
        assert_eq!(plan(&again).0.len(), 1);

        // Free again only once the run is released and the transaction's arrays are gone.
        let name = named_a.region.clone();
        let free = |connection: &Connection| {
            ninf_proto::sync::lock(&connection.regions)
                .iter()
                .find(|s| s.name == name)
                .is_some_and(Slot::free)
        };
        ninf_proto::sync::lock(&connection.regions)
            .iter_mut()
            .for_each(|s| s.proxy_holds = false);
        assert!(!free(&connection));
        drop((recorder, request, again, a, b));
        assert!(free(&connection));
        assert!(
            ninf_proto::sync::lock(&connection.regions)
                .iter()
                .any(|s| s.holds(&c) && s.recording)
        );

        assert_eq!(
            *ninf_proto::sync::lock(&offered),
            [name],
            "only the region a run named was offered"
        );
        proxy.abort();
    }

    #[test]
    fn a_run_takes_the_smallest_free_region_that_holds_it() {
        let now = Instant::now();
        let mut regions = vec![
            slot("big", 8 << 20, false, now),
            slot("held", 2 << 20, true, now),
            slot("small", 2 << 20, false, now),
            slot("tiny", 1 << 20, false, now),
        ];
        let (choice, forget) = choose(&mut regions, 0, 1_500_000, true, now);
        assert_eq!((taken(&choice), forget.len()), ("small", 0));
        let small = regions.iter().find(|s| s.name == "small").unwrap();
        assert!(small.proxy_holds && small.client_reads && !small.free());
        // Now only the big one fits; then nothing free fits and there is room for one more.
        assert_eq!(
            taken(&choose(&mut regions, 0, 1_500_000, false, now).0),
            "big"
        );
        assert_eq!(
            taken(&choose(&mut regions, 0, 1_500_000, false, now).0),
            "make one"
        );
        // Regions other runs are making count as kept: the set is full with them, and the
        // free one too small gives way instead.
        let making = MAX_REGIONS - regions.len();
        let (choice, forget) = choose(&mut regions, making, 1_500_000, false, now);
        assert_eq!(
            (taken(&choice), forget),
            ("make one", vec!["tiny".to_string()])
        );
        assert!(regions.iter().all(|s| s.name != "tiny"));
    }

    #[test]
    fn idle_free_regions_are_given_back_and_a_full_set_makes_room_or_says_all_held() {
        let start = Instant::now();
        let later = start + IDLE_REGION;
        let mut regions = vec![
            slot("idle", 1 << 20, false, start),
            slot("idle but held", 1 << 20, true, start),
        ];
        let (choice, forget) = choose(&mut regions, 0, 1 << 20, false, later);
        assert_eq!(forget, ["idle"]);
        assert_eq!(taken(&choice), "make one");
        assert_eq!(regions.len(), 1);

        let mut full: Vec<Slot> = (0..MAX_REGIONS)
            .map(|i| slot(&format!("r{i}"), 1 << 20, i != 3, later))
            .collect();
        let (choice, forget) = choose(&mut full, 0, 4 << 20, false, later);
        assert_eq!(
            (taken(&choice), forget),
            ("make one", vec!["r3".to_string()])
        );
        assert_eq!(full.len(), MAX_REGIONS - 1);
        full.push(slot("new", 4 << 20, true, later));
        let (choice, forget) = choose(&mut full, 0, 4 << 20, false, later);
        assert_eq!((taken(&choice), forget.len()), ("await release", 0));
        // Held only by the client itself (transactions recording): waiting frees nothing.
        full.iter_mut().for_each(|s| {
            s.proxy_holds = false;
            s.recording = true;
        });
        let (choice, forget) = choose(&mut full, 0, 4 << 20, false, later);
        assert_eq!((taken(&choice), forget.len()), ("all held", 0));
    }

    #[tokio::test]
    async fn a_transaction_finding_every_slot_kept_records_into_a_free_region_that_holds_the_array()
    {
        let (client_end, _proxy_end) = UnixStream::pair().unwrap();
        let connection = Connection::start(client_end);
        let now = Instant::now();
        // All slots kept, one free region of 1 MiB (less than four arrays of 1 MiB).
        *ninf_proto::sync::lock(&connection.regions) = (0..MAX_REGIONS)
            .map(|i| slot(&format!("r{i}"), 1 << 20, i != 2, now))
            .collect();
        let mut recorder = Recorder {
            connection: connection.clone(),
            current: None,
        };
        let small = vec![5u8; 1 << 20];
        let kept = recorder.copy(&small).expect("a free region that holds it");
        assert_eq!(&kept[..], &small[..]);
        assert!(
            ninf_proto::sync::lock(&connection.regions)
                .iter()
                .any(|s| s.name == "r2" && s.recording && s.holds(&kept))
        );
        drop((recorder, kept));
        // An array no free region holds is copied as before: no region is given up or made.
        let mut recorder = Recorder {
            connection: connection.clone(),
            current: None,
        };
        assert!(recorder.copy(&vec![3u8; 2 << 20]).is_none());
        let regions = ninf_proto::sync::lock(&connection.regions);
        let names: Vec<&str> = regions.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(
            names,
            (0..MAX_REGIONS)
                .map(|i| format!("r{i}"))
                .collect::<Vec<_>>()
        );
    }

    #[tokio::test]
    async fn a_run_finding_every_region_held_by_runs_in_flight_waits_for_a_release() {
        let (client_end, proxy_end) = UnixStream::pair().unwrap();
        let connection = Connection::start(client_end);
        let now = Instant::now();
        *ninf_proto::sync::lock(&connection.regions) = (0..MAX_REGIONS)
            .map(|i| slot(&format!("r{i}"), 1 << 20, true, now))
            .collect();
        // A run already holding a region of its own does not wait: its arrays go in the
        // request.
        assert!(
            connection
                .lend(1 << 20, true, false)
                .await
                .unwrap()
                .is_none()
        );
        let waiting = tokio::spawn({
            let connection = connection.clone();
            async move { connection.lend(1 << 20, false, true).await.unwrap() }
        });
        tokio::task::yield_now().await;
        assert!(
            !waiting.is_finished(),
            "it waits while every region is held"
        );
        let released = v1::SharedRegionMessage {
            message: Some(Message::Released("r5".into())),
        };
        local::send_message(&proxy_end, &released, None)
            .await
            .unwrap();
        let (name, _) = waiting.await.unwrap().expect("the released region");
        assert_eq!(name, "r5");
        let slot = ninf_proto::sync::lock(&connection.regions)
            .iter()
            .find(|s| s.name == "r5")
            .map(|s| s.proxy_holds);
        assert_eq!(slot, Some(true), "taken again by the run that waited");

        // A connection that ends wakes its waiters, whose arrays then go in the request.
        let waiting = tokio::spawn({
            let connection = connection.clone();
            async move { connection.lend(1 << 20, false, true).await.unwrap() }
        });
        tokio::task::yield_now().await;
        drop(proxy_end);
        assert!(waiting.await.unwrap().is_none());
    }

    #[tokio::test]
    async fn a_retired_region_is_never_taken_again_and_the_proxy_told_to_forget_it() {
        let (client_end, proxy_end) = UnixStream::pair().unwrap();
        let connection = Connection::start(client_end);
        let now = Instant::now();
        *ninf_proto::sync::lock(&connection.regions) = (0..MAX_REGIONS)
            .map(|i| slot(&format!("r{i}"), 1 << 20, true, now))
            .collect();
        // A run waits for a region while all are held; a retired one frees a place in the
        // set, and the run makes a region of its own rather than take the retired one.
        let waiting = tokio::spawn({
            let connection = connection.clone();
            async move { connection.lend(1 << 20, false, true).await.unwrap() }
        });
        tokio::task::yield_now().await;
        let retired = v1::SharedRegionMessage {
            message: Some(Message::Retired("r3".into())),
        };
        local::send_message(&proxy_end, &retired, None)
            .await
            .unwrap();
        let (said, _) = local::receive_message::<v1::SharedRegionMessage>(&proxy_end, MAX_FRAME)
            .await
            .unwrap();
        assert_eq!(said.message, Some(Message::Forget("r3".into())));
        // The run offers a new region: accept it.
        let (offer, _) = local::receive_message::<v1::SharedRegionMessage>(&proxy_end, MAX_FRAME)
            .await
            .unwrap();
        let Some(Message::Offer(name)) = offer.message else {
            panic!("expected an offer, got {offer:?}");
        };
        let accepted = v1::SharedRegionMessage {
            message: Some(Message::Accepted(name.clone())),
        };
        local::send_message(&proxy_end, &accepted, None)
            .await
            .unwrap();
        let (taken, _) = waiting.await.unwrap().expect("a region");
        assert_eq!(taken, name);
        let names: Vec<String> = ninf_proto::sync::lock(&connection.regions)
            .iter()
            .map(|s| s.name.clone())
            .collect();
        assert!(!names.contains(&"r3".to_string()), "{names:?}");
        assert_eq!(names.len(), MAX_REGIONS);
    }
}
