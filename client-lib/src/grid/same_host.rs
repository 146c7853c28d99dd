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

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
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
pub const MIN_SHARED_ARRAY: usize = 256 * 1024;

/// Regions a client keeps at once (the proxy takes up to 16 per connection).
const MAX_REGIONS: usize = 8;

/// The smallest region made, so that runs of similar size share one.
const MIN_REGION: usize = 1 << 20;

/// Arrays start at multiples of this in a region, as a routine would align them.
const ALIGN: usize = 64;

/// A free region no run has taken for this long is given back (the proxy unmaps it too),
/// so one large transaction does not pin its memory for the client's life.
const IDLE_REGION: Duration = Duration::from_secs(60);

/// The longest frame the proxy sends on its socket: the messages are names.
const MAX_FRAME: usize = 4096;

/// How long the proxy may take to accept a region.
const OFFER_TIMEOUT: Duration = Duration::from_secs(5);

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
}

struct Slot {
    name: String,
    memory: Arc<SharedRegion>,
    /// Named by a run the proxy has not released yet.
    proxy_holds: bool,
    /// A reply's outputs in it are still being read.
    client_reads: bool,
    /// When a run last took it.
    lent_at: Instant,
}

impl Slot {
    fn free(&self) -> bool {
        !self.proxy_holds && !self.client_reads
    }
}

/// What one attempt of a run shares: for its reply's outputs, the region they may come in.
pub(crate) struct SharedRun {
    output: Option<Arc<OutputHold>>,
}

/// The client's hold on an output region while a reply's arrays in it are read.
struct OutputHold {
    connection: Arc<Connection>,
    name: String,
    memory: Arc<SharedRegion>,
}

impl Drop for OutputHold {
    fn drop(&mut self) {
        let mut regions = ninf_proto::sync::lock(&self.connection.regions);
        if let Some(slot) = regions.iter_mut().find(|s| s.name == self.name) {
            slot.client_reads = false;
        }
    }
}

/// An output's bytes in an output region; the region stays held while they live.
struct OutputBytes {
    hold: Arc<OutputHold>,
    start: usize,
    end: usize,
}

impl AsRef<[u8]> for OutputBytes {
    fn as_ref(&self) -> &[u8] {
        &self.hold.memory.bytes()[self.start..self.end]
    }
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

    /// Moves `request`'s large arrays into a region shared with the proxy, and lends it a
    /// region for the reply's, if the proxy offers that; leaves the request as it was
    /// otherwise (`None`).
    pub(crate) async fn share(
        &self,
        client: &super::AsyncGridClient,
        request: &mut v1::RunRequest,
    ) -> Option<SharedRun> {
        let (placements, total) = plan(request);
        let outputs = output_bytes(request);
        if placements.is_empty() && outputs == 0 {
            return None;
        }
        let connection = self.connection(client).await?;
        let inputs_shared = !placements.is_empty()
            && match connection.lend(total, false).await {
                Ok(Some((name, memory))) => {
                    write(request, &placements, &name, &memory);
                    true
                }
                Ok(None) => false,
                Err(e) => return connection.failed(e),
            };
        let output = if outputs == 0 {
            None
        } else {
            match connection.lend(outputs, true).await {
                Ok(Some((name, memory))) => {
                    request.output_region = name.clone();
                    Some(Arc::new(OutputHold {
                        connection: connection.clone(),
                        name,
                        memory,
                    }))
                }
                Ok(None) => None,
                Err(e) => return connection.failed(e),
            }
        };
        (inputs_shared || output.is_some()).then_some(SharedRun { output })
    }

    /// Drops the connection (the proxy did not know a region: it restarted); the next run
    /// asks the proxy again.
    pub(crate) async fn reconnect(&self) {
        *self.state.lock().await = State::Unknown;
    }

    /// The live connection to the proxy's socket, connecting first if need be.
    async fn connection(&self, client: &super::AsyncGridClient) -> Option<Arc<Connection>> {
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

/// Bytes a region needs for the reply's large outputs: those of the tasks whose wanted
/// outputs reach the size the proxy shares (each may start on the next 64-byte boundary).
fn output_bytes(request: &v1::RunRequest) -> usize {
    let graph = request.graph.as_ref().map_or(&[][..], |g| &g.tasks[..]);
    graph
        .iter()
        .zip(&request.arguments)
        .map(|(task, arguments)| task.client_out_bytes as usize + ALIGN * arguments.returns.len())
        .filter(|&bytes| bytes >= MIN_SHARED_ARRAY)
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
            let data = bytes::Bytes::from_owner(OutputBytes {
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
        });
        let reader = connection.clone();
        tokio::spawn(async move {
            if let Err(e) = reader.read_answers().await {
                tracing::debug!(error = %e, "the proxy's same-host socket closed");
            }
            reader.alive.store(false, Ordering::Release);
            ninf_proto::sync::lock(&reader.offers).clear();
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

    /// A region of at least `bytes` nobody uses, marked held by the proxy (and read by the
    /// client, for outputs): one kept, or a new one handed over. `None` when all are held.
    async fn lend(
        &self,
        bytes: usize,
        for_outputs: bool,
    ) -> std::io::Result<Option<(String, Arc<SharedRegion>)>> {
        let (taken, forget) = {
            let mut regions = ninf_proto::sync::lock(&self.regions);
            choose(&mut regions, bytes, for_outputs, Instant::now())
        };
        for name in forget {
            self.send(Message::Forget(name), None).await?;
        }
        match taken {
            Choice::Taken(name, memory) => return Ok(Some((name, memory))),
            Choice::AllHeld => return Ok(None),
            Choice::MakeOne => {}
        }
        let size = bytes
            .checked_next_power_of_two()
            .unwrap_or(bytes)
            .max(MIN_REGION);
        let mut memory = SharedRegion::create(size)?;
        // Fault the pages in once here, not in every run's copy.
        memory.bytes_mut().fill(0);
        let name = region_name()?;
        let (answer, answered) = oneshot::channel();
        ninf_proto::sync::lock(&self.offers).insert(name.clone(), answer);
        self.send(Message::Offer(name.clone()), Some(&memory))
            .await?;
        match tokio::time::timeout(OFFER_TIMEOUT, answered).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(reason))) => return Err(std::io::Error::other(reason)),
            _ => return Err(std::io::Error::other("the proxy did not answer the offer")),
        }
        let memory = Arc::new(memory);
        ninf_proto::sync::lock(&self.regions).push(Slot {
            name: name.clone(),
            memory: memory.clone(),
            proxy_holds: true,
            client_reads: for_outputs,
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

/// What a run gets from the regions kept.
enum Choice {
    /// The smallest free region that holds the run's bytes, now marked held.
    Taken(String, Arc<SharedRegion>),
    /// None fits, and there is room for a new one.
    MakeOne,
    /// None fits and every slot is held: the arrays go in the request.
    AllHeld,
}

/// Picks a region for a run of `bytes` at `now`, and the regions to give back: those free
/// and idle for [`IDLE_REGION`], and when all [`MAX_REGIONS`] are kept and none fits, a free
/// one to make room. The smallest fit, so that a large region serves only large runs and
/// can go idle.
fn choose(
    regions: &mut Vec<Slot>,
    bytes: usize,
    for_outputs: bool,
    now: Instant,
) -> (Choice, Vec<String>) {
    let mut forget = Vec::new();
    regions.retain(|s| {
        let idle = s.free() && now.saturating_duration_since(s.lent_at) >= IDLE_REGION;
        if idle {
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
    if regions.len() < MAX_REGIONS {
        return (Choice::MakeOne, forget);
    }
    // Full: a free region too small for this run makes room for a larger one.
    match regions.iter().position(Slot::free) {
        Some(index) => {
            forget.push(regions.remove(index).name);
            (Choice::MakeOne, forget)
        }
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
            lent_at,
        }
    }

    fn taken(choice: &Choice) -> &str {
        match choice {
            Choice::Taken(name, _) => name,
            Choice::MakeOne => "make one",
            Choice::AllHeld => "all held",
        }
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
        let (choice, forget) = choose(&mut regions, 1_500_000, true, now);
        assert_eq!((taken(&choice), forget.len()), ("small", 0));
        let small = regions.iter().find(|s| s.name == "small").unwrap();
        assert!(small.proxy_holds && small.client_reads && !small.free());
        // Now only the big one fits; then nothing free fits and there is room for one more.
        assert_eq!(taken(&choose(&mut regions, 1_500_000, false, now).0), "big");
        assert_eq!(
            taken(&choose(&mut regions, 1_500_000, false, now).0),
            "make one"
        );
    }

    #[test]
    fn idle_free_regions_are_given_back_and_a_full_set_makes_room_or_says_all_held() {
        let start = Instant::now();
        let later = start + IDLE_REGION;
        let mut regions = vec![
            slot("idle", 1 << 20, false, start),
            slot("idle but held", 1 << 20, true, start),
        ];
        let (choice, forget) = choose(&mut regions, 1 << 20, false, later);
        assert_eq!(forget, ["idle"]);
        assert_eq!(taken(&choice), "make one");
        assert_eq!(regions.len(), 1);

        let mut full: Vec<Slot> = (0..MAX_REGIONS)
            .map(|i| slot(&format!("r{i}"), 1 << 20, i != 3, later))
            .collect();
        let (choice, forget) = choose(&mut full, 4 << 20, false, later);
        assert_eq!(
            (taken(&choice), forget),
            ("make one", vec!["r3".to_string()])
        );
        assert_eq!(full.len(), MAX_REGIONS - 1);
        full.push(slot("new", 4 << 20, true, later));
        let (choice, forget) = choose(&mut full, 4 << 20, false, later);
        assert_eq!((taken(&choice), forget.len()), ("all held", 0));
    }
}
