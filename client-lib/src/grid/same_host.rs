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
//! change under it. Whenever any of this is not possible, the arrays go in the request as
//! before.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ninf_proto::net::local::{self, SharedRegion};
use ninf_proto::v1;
use ninf_proto::v1::call_argument::Source;
use ninf_proto::v1::shared_region_message::Message;
use prost::Message as _;
use tokio::net::UnixStream;
use tokio::sync::oneshot;

/// Arrays smaller than this go in the request: copying them twice costs less than the
/// bookkeeping.
pub const MIN_SHARED_ARRAY: usize = 256 * 1024;

/// Regions a client keeps at once (the proxy takes up to 16 per connection).
const MAX_REGIONS: usize = 8;

/// The smallest region made, so that runs of similar size share one.
const MIN_REGION: usize = 1 << 20;

/// Arrays start at multiples of this in a region, as a routine would align them.
const ALIGN: usize = 64;

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
    /// `None` while a run's arrays are being copied in.
    memory: Option<SharedRegion>,
    len: usize,
    /// Named by a run the proxy has not released yet.
    lent: bool,
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

    /// Moves `request`'s large arrays into a region shared with the proxy, if the proxy
    /// offers one; leaves the request as it was otherwise. Whether it moved any.
    pub(crate) async fn share(
        &self,
        client: &super::AsyncGridClient,
        request: &mut v1::RunRequest,
    ) -> bool {
        let (placements, total) = plan(request);
        if placements.is_empty() {
            return false;
        }
        let Some(connection) = self.connection(client).await else {
            return false;
        };
        match connection.lend(total).await {
            Ok(Some((name, mut memory))) => {
                write(request, &placements, &name, memory.bytes_mut());
                connection.give_back(&name, memory);
                true
            }
            Ok(None) => false,
            Err(e) => {
                tracing::debug!(error = %e, "no shared region; the arrays go in the request");
                connection.alive.store(false, Ordering::Release);
                false
            }
        }
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

/// Whether the proxy refused a run for naming a region it does not hold (its words in
/// `ninf_client_proxy::same_host`).
pub(crate) fn region_unknown(status: &tonic::Status) -> bool {
    status.code() == tonic::Code::InvalidArgument
        && status.message().starts_with("no shared region")
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
fn write(request: &mut v1::RunRequest, placements: &[Placement], region: &str, memory: &mut [u8]) {
    for placement in placements {
        let argument = &mut request.arguments[placement.task].arguments[placement.argument];
        let Some(array) = array_of(argument) else {
            continue;
        };
        let bytes = array.data.len();
        memory[placement.offset..placement.offset + bytes].copy_from_slice(&array.data);
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
            let mut header = [0u8; 4];
            local::receive(&self.stream, &mut header).await?;
            let mut body = vec![0u8; u32::from_le_bytes(header).min(1 << 16) as usize];
            local::receive(&self.stream, &mut body).await?;
            let message = v1::SharedRegionMessage::decode(body.as_slice())
                .map_err(|e| std::io::Error::other(format!("an unreadable frame: {e}")))?;
            match message.message {
                Some(Message::Accepted(name)) => self.answered(&name, Ok(())),
                Some(Message::Refused(refused)) => {
                    self.answered(&refused.region, Err(refused.reason));
                }
                Some(Message::Released(name)) => {
                    let mut regions = ninf_proto::sync::lock(&self.regions);
                    if let Some(slot) = regions.iter_mut().find(|s| s.name == name) {
                        slot.lent = false;
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

    /// A region of at least `bytes` nobody reads, taken out of its slot to be written:
    /// one kept, or a new one handed over. `None` when every slot is lent.
    async fn lend(&self, bytes: usize) -> std::io::Result<Option<(String, SharedRegion)>> {
        let forget = {
            let mut regions = ninf_proto::sync::lock(&self.regions);
            let free = |s: &Slot| !s.lent && s.memory.is_some();
            if let Some(index) = regions.iter().position(|s| free(s) && s.len >= bytes) {
                let slot = &mut regions[index];
                slot.lent = true;
                let memory = slot
                    .memory
                    .take()
                    .ok_or_else(|| std::io::Error::other("taken"))?;
                return Ok(Some((slot.name.clone(), memory)));
            }
            if regions.len() >= MAX_REGIONS {
                // Full: a free region too small for this run makes room for a larger one.
                match regions.iter().position(free) {
                    Some(index) => Some(regions.remove(index).name),
                    None => return Ok(None),
                }
            } else {
                None
            }
        };
        if let Some(name) = forget {
            self.send(Message::Forget(name), None).await?;
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
        let mut regions = ninf_proto::sync::lock(&self.regions);
        regions.push(Slot {
            name: name.clone(),
            memory: None,
            len: size,
            lent: true,
        });
        Ok(Some((name, memory)))
    }

    /// Puts a written region back in its slot (still lent, until the proxy releases it).
    fn give_back(&self, name: &str, memory: SharedRegion) {
        let mut regions = ninf_proto::sync::lock(&self.regions);
        if let Some(slot) = regions.iter_mut().find(|s| s.name == name) {
            slot.memory = Some(memory);
        }
    }

    async fn send(&self, message: Message, region: Option<&SharedRegion>) -> std::io::Result<()> {
        let body = v1::SharedRegionMessage {
            message: Some(message),
        }
        .encode_to_vec();
        let mut frame = (body.len() as u32).to_le_bytes().to_vec();
        frame.extend_from_slice(&body);
        local::send(&self.stream, &frame, region.map(SharedRegion::fd)).await
    }
}

/// A name nobody else's region has: 128 random bits.
fn region_name() -> std::io::Result<String> {
    Ok(local::socket_name()?.replacen("ninf-bulk-", "region-", 1))
}
