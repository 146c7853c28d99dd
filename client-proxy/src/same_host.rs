//! Arrays from a client on the proxy's host, passed in memory instead of bytes
//! (docs/bulk-protocol.md, "From a client on the proxy's host").
//!
//! The proxy listens on a Unix socket in the abstract namespace under a random name it tells
//! clients (`Proxy.SameHost`). A client there hands over memory files (`memfd`, sealed
//! against shrinking) under names of its choosing, writes a run's large arrays into one, and
//! names them in its `RunRequest` as `SharedArray { region, offset, bytes }` instead of
//! sending their bytes. Before anything else sees the request, [`SharedRegions::resolve`]
//! turns each into an ordinary array value whose bytes are the region's memory: no copy at
//! the proxy, and none through a socket.
//!
//! A region is lent to one run at a time. The lease ends when the last of the run's arrays
//! is dropped (the run is over and nothing keeps its inputs), and the proxy then says
//! `released` on the socket: only from then on may the client write the region again. A
//! client that dies or closes the socket takes its regions with it; runs still reading one
//! keep its mapping until they end.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use bytes::Bytes;
use ninf_proto::net::local::{self, SharedRegion};
use ninf_proto::v1;
use ninf_proto::v1::call_argument::Source;
use ninf_proto::v1::shared_region_message::Message;
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::mpsc;
use tonic::Status;

/// Regions one connection may have at once; a client needs one per run in flight.
pub const MAX_REGIONS_PER_CONNECTION: usize = 16;

/// Outputs smaller than this stay in the reply (the client shares arrays from the same size).
pub const MIN_SHARED_OUTPUT: usize = 256 * 1024;

/// The longest frame either side sends: the messages are names.
const MAX_FRAME: usize = 4096;

/// Every region clients on this host have handed over, by name.
#[derive(Default)]
pub struct SharedRegions {
    regions: Mutex<HashMap<String, Arc<Region>>>,
    next_connection: AtomicU64,
    next_region: AtomicU64,
}

/// A handed-over region, and the connection that says when it is free again.
struct Region {
    name: String,
    /// The name it is lent on under ([`Lendable`]): unique for the proxy's life, whereas a
    /// client may offer a name again once it forgot the region.
    lent_name: String,
    memory: SharedRegion,
    connection: u64,
    leased: AtomicBool,
    /// The run's lease while it is a run's output region, for calls to lend the region on
    /// to the servers that write the outputs ([`SharedRegions::lend_output`]).
    output_lease: Mutex<Weak<Lease>>,
    /// A call lent this region for its outputs was given up while its routine may still
    /// write them: the client is told never to use the region again ([`OutputLoan`]).
    retired: AtomicBool,
    to_client: mpsc::UnboundedSender<v1::SharedRegionMessage>,
}

/// One run's use of a region: while it lives, the client leaves the region alone.
struct Lease(Arc<Region>);

impl Drop for Lease {
    fn drop(&mut self) {
        let region = &self.0;
        let name = region.name.clone();
        let said = if region.retired.load(Ordering::Acquire) {
            // Stays leased: no run names it again before the client forgets it.
            Message::Retired(name)
        } else {
            region.leased.store(false, Ordering::Release);
            Message::Released(name)
        };
        // A client that went away has nothing to hear.
        let _ = region.to_client.send(message(said));
    }
}

/// An array's bytes inside a leased region.
struct LeasedBytes {
    lease: Arc<Lease>,
    start: usize,
    end: usize,
}

impl AsRef<[u8]> for LeasedBytes {
    fn as_ref(&self) -> &[u8] {
        &self.lease.0.memory.bytes()[self.start..self.end]
    }
}

fn message(message: Message) -> v1::SharedRegionMessage {
    v1::SharedRegionMessage {
        message: Some(message),
    }
}

impl SharedRegions {
    /// Replaces every shared array of `request` by its value in the region it names,
    /// leasing each region the request names; the bytes so resolved. A refused request
    /// gives back at once whatever it had leased. The request with its shared arrays may
    /// hold at most `limit` bytes, as one sent whole through gRPC may.
    pub fn resolve(&self, request: &mut v1::RunRequest, limit: usize) -> Result<u64, Status> {
        let sent = prost::Message::encoded_len(request) as u64;
        let shared: u64 = request
            .arguments
            .iter()
            .flat_map(|a| &a.arguments)
            .filter_map(|a| match &a.source {
                Some(Source::Shared(shared)) => Some(shared.bytes),
                _ => None,
            })
            .fold(0u64, u64::saturating_add);
        if sent.saturating_add(shared) > limit as u64 {
            return Err(Status::resource_exhausted(format!(
                "the request holds {} bytes ({shared} of them in shared memory), over the \
                 proxy's max_request_bytes of {limit}",
                sent.saturating_add(shared)
            )));
        }
        let mut leases: HashMap<String, Arc<Lease>> = HashMap::new();
        for (task, arguments) in request.arguments.iter_mut().enumerate() {
            for (parameter, argument) in arguments.arguments.iter_mut().enumerate() {
                let Some(Source::Shared(shared)) = &argument.source else {
                    continue;
                };
                let lease = match leases.get(&shared.region) {
                    Some(lease) => lease.clone(),
                    None => {
                        let lease = Arc::new(self.lease(&shared.region)?);
                        leases.insert(shared.region.clone(), lease.clone());
                        lease
                    }
                };
                let array = slice(lease, shared).map_err(|e| {
                    Status::invalid_argument(format!(
                        "task {task}, argument {parameter}: the shared array {e}"
                    ))
                })?;
                argument.source = Some(Source::Value(v1::ArgumentValue {
                    value: Some(v1::argument_value::Value::Array(array)),
                }));
            }
        }
        Ok(shared)
    }

    /// The bytes of one shared array (a put's whole value), its region leased until the
    /// last of them is dropped.
    pub fn resolve_array(&self, shared: &v1::SharedArray) -> Result<Bytes, Status> {
        let lease = Arc::new(self.lease(&shared.region)?);
        slice(lease, shared)
            .map(|array| array.data)
            .map_err(|e| Status::invalid_argument(format!("the put's shared array {e}")))
    }

    /// The region `request` names for its reply's large arrays, held for the run.
    pub fn lease_output(&self, request: &v1::RunRequest) -> Result<Option<OutputRegion>, Status> {
        if request.output_region.is_empty() {
            return Ok(None);
        }
        let lease = self.lease(&request.output_region).map_err(|status| {
            let mut named =
                Status::invalid_argument(format!("output region: {}", status.message()));
            *named.metadata_mut() = status.metadata().clone();
            named
        })?;
        let lease = Arc::new(lease);
        *ninf_proto::sync::lock(&lease.0.output_lease) = Arc::downgrade(&lease);
        Ok(Some(OutputRegion(lease)))
    }

    /// Lends a run's output region on to one call for its outputs, at `place` (the client's
    /// name for the region, and the call's part of it); `None` when the region is not a
    /// run's output region now, was retired, or is smaller than the place.
    pub fn lend_output(&self, place: &v1::OutputPlace) -> Option<OutputLoan> {
        let region = ninf_proto::sync::lock(&self.regions)
            .get(&place.region)?
            .clone();
        let lease = ninf_proto::sync::lock(&region.output_lease).upgrade()?;
        let inside = place
            .offset
            .checked_add(place.bytes)
            .is_some_and(|end| end <= region.memory.len() as u64);
        if region.retired.load(Ordering::Acquire) || !inside {
            return None;
        }
        Some(OutputLoan {
            lease,
            answered: false,
        })
    }

    fn lease(&self, name: &str) -> Result<Lease, Status> {
        let regions = ninf_proto::sync::lock(&self.regions);
        let region = regions.get(name).ok_or_else(|| {
            let mut status = Status::invalid_argument(format!(
                "no shared region `{name}`: its client never handed it to this proxy, or left"
            ));
            status.metadata_mut().insert(
                ninf_proto::net::REGION_UNKNOWN_METADATA,
                tonic::metadata::MetadataValue::from_static("1"),
            );
            status
        })?;
        if region.leased.swap(true, Ordering::AcqRel) {
            return Err(Status::invalid_argument(format!(
                "the shared region `{name}` is still read by another run"
            )));
        }
        Ok(Lease(region.clone()))
    }

    /// Where `data` lies in a region a client handed over, to lend it on to a server on
    /// this host instead of copying it; `None` when it lies elsewhere.
    pub fn locate(&self, data: &[u8]) -> Option<Lendable> {
        let regions = ninf_proto::sync::lock(&self.regions);
        regions.values().find_map(|region| {
            Some(Lendable {
                name: region.lent_name.clone(),
                offset: region.memory.offset_of(data)? as u64,
                region: region.clone(),
            })
        })
    }

    /// Whether the region lent on as `lent_name` is still held (its client did not forget
    /// it or leave).
    pub fn still_held(&self, lent_name: &str) -> bool {
        let regions = ninf_proto::sync::lock(&self.regions);
        regions.values().any(|region| region.lent_name == lent_name)
    }

    /// Serves clients on `listener` (until the task running it is aborted).
    pub async fn serve(self: Arc<Self>, listener: UnixListener) {
        loop {
            match listener.accept().await {
                Ok((stream, _)) => {
                    tokio::spawn(self.clone().connection(stream));
                }
                Err(e) => {
                    tracing::warn!(error = %e, "same-host socket: accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
            }
        }
    }

    /// One client's connection: takes its offers and forgets, and tells it of each
    /// region's release, until it closes.
    async fn connection(self: Arc<Self>, stream: UnixStream) {
        let id = self.next_connection.fetch_add(1, Ordering::Relaxed);
        let stream = Arc::new(stream);
        let (to_client, mut outbox) = mpsc::unbounded_channel::<v1::SharedRegionMessage>();
        let writer = {
            let stream = stream.clone();
            tokio::spawn(async move {
                while let Some(message) = outbox.recv().await {
                    if local::send_message(&stream, &message, None).await.is_err() {
                        return;
                    }
                }
            })
        };
        if let Err(e) = self.take_messages(id, &stream, &to_client).await {
            tracing::debug!(error = %e, "same-host connection closed");
        }
        ninf_proto::sync::lock(&self.regions).retain(|_, region| region.connection != id);
        drop(to_client);
        writer.abort();
    }

    async fn take_messages(
        &self,
        id: u64,
        stream: &UnixStream,
        to_client: &mpsc::UnboundedSender<v1::SharedRegionMessage>,
    ) -> std::io::Result<()> {
        loop {
            let (received, file) =
                local::receive_message::<v1::SharedRegionMessage>(stream, MAX_FRAME).await?;
            let answer = match received.message {
                Some(Message::Offer(name)) => Some(self.offered(id, name, file, to_client)),
                Some(Message::Forget(name)) => {
                    let mut regions = ninf_proto::sync::lock(&self.regions);
                    if regions.get(&name).is_some_and(|r| r.connection == id) {
                        regions.remove(&name);
                    }
                    None
                }
                _ => None,
            };
            if let Some(answer) = answer {
                let _ = to_client.send(message(answer));
            }
        }
    }

    /// Takes the region `name` with its memory file, or says why not.
    fn offered(
        &self,
        id: u64,
        name: String,
        file: Option<std::os::fd::OwnedFd>,
        to_client: &mpsc::UnboundedSender<v1::SharedRegionMessage>,
    ) -> Message {
        let refused = |reason: String| {
            Message::Refused(v1::RegionRefused {
                region: name.clone(),
                reason,
            })
        };
        if name.is_empty() || name.len() > 128 || !name.chars().all(|c| c.is_ascii_graphic()) {
            return refused("a region's name is 1 to 128 visible ASCII characters".into());
        }
        let Some(file) = file else {
            return refused("the offer came without its memory file".into());
        };
        let memory = match SharedRegion::adopt(file) {
            Ok(memory) => memory,
            Err(e) => return refused(e),
        };
        let mut regions = ninf_proto::sync::lock(&self.regions);
        if regions.values().filter(|r| r.connection == id).count() >= MAX_REGIONS_PER_CONNECTION {
            return refused(format!(
                "a connection holds at most {MAX_REGIONS_PER_CONNECTION} regions"
            ));
        }
        if regions.contains_key(&name) {
            return refused("a region of that name is already shared".into());
        }
        let serial = self.next_region.fetch_add(1, Ordering::Relaxed);
        let region = Region {
            name: name.clone(),
            lent_name: format!("{name}#{serial}"),
            memory,
            connection: id,
            leased: AtomicBool::new(false),
            output_lease: Mutex::new(Weak::new()),
            retired: AtomicBool::new(false),
            to_client: to_client.clone(),
        };
        regions.insert(name.clone(), Arc::new(region));
        Message::Accepted(name)
    }
}

/// An array's place in a client's region, to lend on: the region's name for lending (unique
/// for the proxy's life), the array's offset in it, and its memory file.
pub struct Lendable {
    pub name: String,
    pub offset: u64,
    region: Arc<Region>,
}

impl Lendable {
    pub fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.region.memory.fd()
    }
}

/// The region a run writes its reply's large arrays into: the client reads them once the
/// reply arrives, and the proxy releases the region as it builds the reply. Calls that
/// write their outputs there themselves hold the lease too ([`OutputLoan`]).
pub struct OutputRegion(Arc<Lease>);

impl OutputRegion {
    /// Names each output of [`MIN_SHARED_OUTPUT`] bytes or more in the region: where it
    /// lies, if a routine wrote it there, or copied into the first room after the previous
    /// one that no such output takes, if it fits. Returns the bytes named, copied or not.
    /// Ends this hold of the lease. A retired region is left alone: the outputs stay in the
    /// reply, since a given-up call may still write there.
    pub fn write_outputs(self, reply: &mut v1::RunReply) -> u64 {
        use v1::call_output::Result as Output;
        let region = &self.0.0;
        if region.retired.load(Ordering::Acquire) {
            return 0;
        }
        let outputs = || {
            reply
                .tasks
                .iter()
                .flat_map(|t| t.outputs.iter())
                .filter_map(|o| match &o.result {
                    Some(Output::Array(array)) if array.data.len() >= MIN_SHARED_OUTPUT => {
                        Some(&array.data)
                    }
                    _ => None,
                })
        };
        let written: Vec<(usize, usize)> = outputs()
            .filter_map(|data| {
                let start = region.memory.offset_of(data)?;
                Some((start, start + data.len()))
            })
            .collect();
        let mut cursor = 0usize;
        let mut named = 0u64;
        for output in reply.tasks.iter_mut().flat_map(|t| t.outputs.iter_mut()) {
            let Some(Output::Array(array)) = &output.result else {
                continue;
            };
            let bytes = array.data.len();
            if bytes < MIN_SHARED_OUTPUT {
                continue;
            }
            let offset = match region.memory.offset_of(&array.data) {
                Some(offset) => offset,
                None => {
                    let Some(offset) = free_room(cursor, bytes, &written, region.memory.len())
                    else {
                        continue;
                    };
                    // SAFETY: the lease keeps every other run, and the client, off the
                    // region; the room overlaps no output a routine wrote there.
                    if !unsafe { region.memory.write_at(offset, &array.data) } {
                        continue;
                    }
                    cursor = (offset + bytes).next_multiple_of(ALIGN);
                    offset
                }
            };
            output.result = Some(Output::Shared(v1::SharedArray {
                element_type: array.element_type,
                region: region.name.clone(),
                offset: offset as u64,
                bytes: bytes as u64,
            }));
            named += bytes as u64;
        }
        named
    }
}

/// Outputs start at multiples of this in an output region.
const ALIGN: usize = local::SHARED_ALIGN;

/// The first offset from `cursor` on, on an [`ALIGN`] boundary, where `bytes` bytes fit
/// in a region of `len` bytes without overlapping any of the `taken` ranges.
fn free_room(cursor: usize, bytes: usize, taken: &[(usize, usize)], len: usize) -> Option<usize> {
    let mut start = cursor.next_multiple_of(ALIGN);
    loop {
        let end = start.checked_add(bytes).filter(|&end| end <= len)?;
        match taken
            .iter()
            .filter(|&&(s, e)| s < end && start < e)
            .map(|&(_, e)| e)
            .max()
        {
            Some(after) => start = after.next_multiple_of(ALIGN),
            None => return Some(start),
        }
    }
}

/// A run's output region lent on to one call, whose routine writes its outputs there
/// (`CallRequest.output_place`). It holds the run's lease, so the client hears of the
/// region only once the call is over. Dropped before [`OutputLoan::answered`] (the call was
/// given up, or its connection broke), the routine may still write the region: it is
/// retired, and the client told so instead of `released`.
pub struct OutputLoan {
    lease: Arc<Lease>,
    answered: bool,
}

impl OutputLoan {
    /// The name the region is lent on under.
    pub fn lent_name(&self) -> &str {
        &self.lease.0.lent_name
    }

    /// The region, to hand over to a server that does not hold it yet.
    pub fn lendable(&self) -> Lendable {
        Lendable {
            name: self.lease.0.lent_name.clone(),
            offset: 0,
            region: self.lease.0.clone(),
        }
    }

    /// The server answered: its routine no longer writes the region.
    pub fn answered(&mut self) {
        self.answered = true;
    }

    /// The call was given up before its request left for the server: no routine was told
    /// of the region, which goes back to its client as if answered.
    pub fn never_sent(&mut self) {
        self.answered = true;
    }

    /// The output the server's reply names at `offset`, `bytes` long, as the bytes where
    /// they lie (holding the lease); `None` when they lie outside the region.
    pub fn output(&self, offset: u64, bytes: u64) -> Option<Bytes> {
        let len = self.lease.0.memory.len() as u64;
        let end = offset.checked_add(bytes).filter(|&end| end <= len)?;
        Some(Bytes::from_owner(LeasedBytes {
            lease: self.lease.clone(),
            start: offset as usize,
            end: end as usize,
        }))
    }
}

impl Drop for OutputLoan {
    fn drop(&mut self) {
        if !self.answered {
            self.lease.0.retired.store(true, Ordering::Release);
        }
    }
}

/// The array `shared` names, its bytes borrowed from the leased region.
fn slice(lease: Arc<Lease>, shared: &v1::SharedArray) -> Result<v1::Array, String> {
    let len = lease.0.memory.len() as u64;
    let end = shared
        .offset
        .checked_add(shared.bytes)
        .filter(|&end| end <= len);
    let Some(end) = end else {
        return Err(format!(
            "at bytes {}..{}+{} lies outside its region of {len} bytes",
            shared.offset, shared.offset, shared.bytes
        ));
    };
    let data = Bytes::from_owner(LeasedBytes {
        lease,
        start: shared.offset as usize,
        end: end as usize,
    });
    Ok(v1::Array {
        element_type: shared.element_type,
        data,
    })
}

/// Starts listening for this host's clients under a fresh name.
pub fn listen() -> std::io::Result<(String, UnixListener)> {
    let name = local::random_name("ninf-proxy-")?;
    let listener = local::listen(&name)?;
    Ok((name, listener))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use rustix::fs::MemfdFlags;
    use std::os::fd::AsFd;

    /// A client's end: its connection and a sender of frames.
    struct TestClient {
        stream: UnixStream,
    }

    impl TestClient {
        async fn send(&self, message: Message, file: Option<std::os::fd::BorrowedFd<'_>>) {
            local::send_message(&self.stream, &super::message(message), file)
                .await
                .unwrap();
        }

        async fn next(&self) -> Message {
            let (received, _) =
                local::receive_message::<v1::SharedRegionMessage>(&self.stream, MAX_FRAME)
                    .await
                    .unwrap();
            received.message.unwrap()
        }

        /// Hands `memory` over as `name` and expects it accepted.
        async fn offer(&self, name: &str, memory: &SharedRegion) {
            self.send(Message::Offer(name.into()), Some(memory.fd()))
                .await;
            assert_eq!(self.next().await, Message::Accepted(name.into()));
        }
    }

    async fn serving() -> (Arc<SharedRegions>, TestClient) {
        let regions = Arc::new(SharedRegions::default());
        let (name, listener) = listen().unwrap();
        tokio::spawn(regions.clone().serve(listener));
        let stream = local::connect(&name).unwrap();
        (regions, TestClient { stream })
    }

    fn request(region: &str, offset: u64, bytes: u64) -> v1::RunRequest {
        let shared = v1::CallArgument {
            source: Some(Source::Shared(v1::SharedArray {
                element_type: v1::ElementType::Double.into(),
                region: region.into(),
                offset,
                bytes,
            })),
        };
        v1::RunRequest {
            arguments: vec![v1::TaskArguments {
                arguments: vec![v1::CallArgument::default(), shared],
                returns: vec![],
            }],
            ..Default::default()
        }
    }

    fn array(request: &v1::RunRequest) -> &[u8] {
        match &request.arguments[0].arguments[1].source {
            Some(Source::Value(v1::ArgumentValue {
                value: Some(v1::argument_value::Value::Array(array)),
            })) => &array.data,
            other => panic!("not resolved: {other:?}"),
        }
    }

    #[tokio::test]
    async fn a_shared_array_is_the_regions_memory_lent_to_one_run_at_a_time() {
        let (regions, client) = serving().await;
        let mut memory = SharedRegion::create(1 << 20).unwrap();
        memory.bytes_mut()[64..72].copy_from_slice(&2.5f64.to_le_bytes());
        client.offer("r1", &memory).await;

        let mut first = request("r1", 64, 8);
        assert_eq!(regions.resolve(&mut first, usize::MAX).unwrap(), 8);
        assert_eq!(array(&first), 2.5f64.to_le_bytes());

        // While the first run holds it, no other run may name the region.
        let e = regions
            .resolve(&mut request("r1", 0, 8), usize::MAX)
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument);
        assert!(e.message().contains("still read by another run"), "{e}");

        // Once the run's arrays are gone, the client hears so and may use it again.
        drop(first);
        assert_eq!(client.next().await, Message::Released("r1".into()));
        let mut again = request("r1", 64, 8);
        regions.resolve(&mut again, usize::MAX).unwrap();
        drop(again);
        assert_eq!(client.next().await, Message::Released("r1".into()));
    }

    #[tokio::test]
    async fn a_bad_offer_or_a_bad_reference_is_refused_by_name() {
        let (regions, client) = serving().await;
        let plain = rustix::fs::memfd_create("plain", MemfdFlags::CLOEXEC).unwrap();
        rustix::fs::ftruncate(&plain, 4096).unwrap();
        client
            .send(Message::Offer("plain".into()), Some(plain.as_fd()))
            .await;
        match client.next().await {
            Message::Refused(r) => {
                assert_eq!(r.region, "plain");
                assert!(r.reason.contains("not sealed against shrinking"), "{r:?}");
            }
            other => panic!("{other:?}"),
        }
        client.send(Message::Offer("nofile".into()), None).await;
        match client.next().await {
            Message::Refused(r) => assert!(r.reason.contains("without its memory file"), "{r:?}"),
            other => panic!("{other:?}"),
        }

        let e = regions
            .resolve(&mut request("plain", 0, 8), usize::MAX)
            .unwrap_err();
        assert!(e.message().contains("no shared region `plain`"), "{e}");
        // Marked, so that a client of a restarted proxy knows to connect again.
        assert!(
            e.metadata()
                .contains_key(ninf_proto::net::REGION_UNKNOWN_METADATA)
        );

        let memory = SharedRegion::create(1 << 20).unwrap();
        client.offer("r", &memory).await;
        let e = regions
            .resolve(&mut request("r", (1 << 20) - 4, 8), usize::MAX)
            .unwrap_err();
        assert!(
            e.message()
                .contains("task 0, argument 1: the shared array at bytes 1048572..1048572+8 lies outside its region of 1048576 bytes"),
            "{e}"
        );
        // A refused request gives the region back at once.
        assert_eq!(client.next().await, Message::Released("r".into()));
        // Shared bytes count against the proxy's request limit, as sent ones do.
        let mut large = request("r", 0, 1 << 20);
        let limit = prost::Message::encoded_len(&large) + (1 << 20) - 1;
        let e = regions.resolve(&mut large, limit).unwrap_err();
        assert_eq!(e.code(), tonic::Code::ResourceExhausted);
        assert!(
            e.message()
                .contains("(1048576 of them in shared memory), over the proxy's max_request_bytes"),
            "{e}"
        );
        regions.resolve(&mut large, limit + 1).unwrap();
        drop(large);
        assert_eq!(client.next().await, Message::Released("r".into()));
        let mut fine = request("r", 0, 8);
        regions.resolve(&mut fine, usize::MAX).unwrap();
        drop(fine);
        assert_eq!(client.next().await, Message::Released("r".into()));
    }

    #[tokio::test]
    async fn a_region_goes_when_its_client_forgets_it_or_leaves_but_a_run_keeps_its_bytes() {
        let (regions, client) = serving().await;
        let mut memory = SharedRegion::create(1 << 20).unwrap();
        memory.bytes_mut()[..4].copy_from_slice(b"ninf");
        for name in ["a", "b"] {
            client.offer(name, &memory).await;
        }
        client.send(Message::Forget("a".into()), None).await;
        let mut running = request("b", 0, 4);
        regions.resolve(&mut running, usize::MAX).unwrap();
        drop(client);
        drop(memory);
        // The connection's end removes its regions; the proxy notices it soon.
        for _ in 0..100 {
            if ninf_proto::sync::lock(&regions.regions).is_empty() {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        for name in ["a", "b"] {
            let e = regions
                .resolve(&mut request(name, 0, 4), usize::MAX)
                .unwrap_err();
            assert!(e.message().contains("no shared region"), "{e}");
        }
        assert_eq!(array(&running), b"ninf");
    }

    #[tokio::test]
    async fn a_runs_large_outputs_go_into_its_output_region_and_small_ones_stay_in_the_reply() {
        use v1::call_output::Result as Output;
        let (regions, client) = serving().await;
        let memory = SharedRegion::create(1 << 20).unwrap();
        client.offer("out", &memory).await;
        let output = |parameter: u32, bytes: usize, fill: u8| v1::CallOutput {
            parameter,
            result: Some(Output::Array(v1::Array {
                element_type: v1::ElementType::Char.into(),
                data: Bytes::from(vec![fill; bytes]),
            })),
        };
        let mut reply = v1::RunReply {
            tasks: vec![v1::TaskReport {
                outputs: vec![
                    output(0, 300_000, 1),
                    output(1, 1000, 2),
                    output(2, 600_000, 3),
                    // No longer fits after the other two.
                    output(3, 300_000, 4),
                ],
                ..Default::default()
            }],
            ..Default::default()
        };
        let request = v1::RunRequest {
            output_region: "out".into(),
            ..Default::default()
        };
        let held = regions.lease_output(&request).unwrap().unwrap();
        // Another run cannot name it meanwhile.
        let e = regions.lease_output(&request).err().unwrap();
        assert!(
            e.message()
                .contains("output region: the shared region `out` is still read"),
            "{e}"
        );
        assert_eq!(held.write_outputs(&mut reply), 900_000);
        assert_eq!(client.next().await, Message::Released("out".into()));

        let results: Vec<_> = reply.tasks[0]
            .outputs
            .iter()
            .map(|o| o.result.clone())
            .collect();
        let shared = |offset: u64, bytes: u64| {
            Some(Output::Shared(v1::SharedArray {
                element_type: v1::ElementType::Char.into(),
                region: "out".into(),
                offset,
                bytes,
            }))
        };
        assert_eq!(results[0], shared(0, 300_000));
        assert!(matches!(&results[1], Some(Output::Array(a)) if a.data.len() == 1000));
        // 300,000 rounded up to a 64-byte boundary.
        assert_eq!(results[2], shared(300_032, 600_000));
        assert!(matches!(&results[3], Some(Output::Array(a)) if a.data.len() == 300_000));
        assert!(memory.bytes()[..300_000].iter().all(|&b| b == 1));
        assert!(memory.bytes()[300_032..900_032].iter().all(|&b| b == 3));

        let unknown = v1::RunRequest {
            output_region: "gone".into(),
            ..Default::default()
        };
        let e = regions.lease_output(&unknown).err().unwrap();
        assert!(
            e.message()
                .starts_with("output region: no shared region `gone`"),
            "{e}"
        );
    }

    /// A client's 1 MiB region `out`, offered and leased as a run's output region.
    async fn output_region_leased() -> (
        Arc<SharedRegions>,
        TestClient,
        SharedRegion,
        v1::RunRequest,
        OutputRegion,
    ) {
        let (regions, client) = serving().await;
        let memory = SharedRegion::create(1 << 20).unwrap();
        client.offer("out", &memory).await;
        let request = v1::RunRequest {
            output_region: "out".into(),
            ..Default::default()
        };
        let held = regions.lease_output(&request).unwrap().unwrap();
        (regions, client, memory, request, held)
    }

    fn place(region: &str, offset: u64, bytes: u64) -> v1::OutputPlace {
        v1::OutputPlace {
            region: region.into(),
            offset,
            bytes,
            parameters: vec![2],
        }
    }

    #[tokio::test]
    async fn outputs_a_routine_wrote_in_the_region_are_named_where_they_lie_and_others_copied_around_them()
     {
        use v1::call_output::Result as Output;
        let (regions, client) = serving().await;
        let memory = SharedRegion::create(1 << 20).unwrap();
        client.offer("out", &memory).await;
        // Not an output region yet: nothing to lend.
        assert!(regions.lend_output(&place("out", 0, 4096)).is_none());
        let request = v1::RunRequest {
            output_region: "out".into(),
            ..Default::default()
        };
        let held = regions.lease_output(&request).unwrap().unwrap();
        // A place past the region's end is not lent.
        assert!(regions.lend_output(&place("out", 1 << 20, 1)).is_none());
        let mut loan = regions.lend_output(&place("out", 0, 400_000)).unwrap();
        assert!(loan.lent_name().starts_with("out#"), "{}", loan.lent_name());
        // What the routine wrote at 64, as the server's reply names it.
        // SAFETY: the test is the region's only writer.
        assert!(unsafe { memory.write_at(64, &[7u8; 300_000]) });
        let written = loan.output(64, 300_000).unwrap();
        assert!(loan.output((1 << 20) - 10, 11).is_none());
        loan.answered();
        drop(loan);
        let array = |data: Bytes| {
            Some(Output::Array(v1::Array {
                element_type: v1::ElementType::Char.into(),
                data,
            }))
        };
        let mut reply = v1::RunReply {
            tasks: vec![v1::TaskReport {
                outputs: vec![
                    v1::CallOutput {
                        parameter: 0,
                        result: array(Bytes::from(vec![1u8; 300_000])),
                    },
                    v1::CallOutput {
                        parameter: 2,
                        result: array(written),
                    },
                ],
                ..Default::default()
            }],
            ..Default::default()
        };
        assert_eq!(held.write_outputs(&mut reply), 600_000);
        assert_eq!(client.next().await, Message::Released("out".into()));
        let shared = |offset: u64| {
            Some(Output::Shared(v1::SharedArray {
                element_type: v1::ElementType::Char.into(),
                region: "out".into(),
                offset,
                bytes: 300_000,
            }))
        };
        // The copied one goes after the one in place, which it would have overlapped.
        assert_eq!(reply.tasks[0].outputs[0].result, shared(300_096));
        assert_eq!(reply.tasks[0].outputs[1].result, shared(64));
        assert!(memory.bytes()[64..300_064].iter().all(|&b| b == 7));
        assert!(memory.bytes()[300_096..600_096].iter().all(|&b| b == 1));
    }

    #[tokio::test]
    async fn a_region_lent_to_a_call_given_up_is_retired_not_released() {
        use v1::call_output::Result as Output;
        let (regions, client, _memory, request, held) = output_region_leased().await;
        // One call answered, another given up while its routine may still write.
        let mut answered = regions.lend_output(&place("out", 0, 4096)).unwrap();
        answered.answered();
        drop(answered);
        let given_up = regions.lend_output(&place("out", 4096, 4096)).unwrap();
        drop(given_up);
        // No call is lent it again, and the run's outputs stay in the reply.
        assert!(regions.lend_output(&place("out", 0, 4096)).is_none());
        let mut reply = v1::RunReply {
            tasks: vec![v1::TaskReport {
                outputs: vec![v1::CallOutput {
                    parameter: 0,
                    result: Some(Output::Array(v1::Array {
                        element_type: v1::ElementType::Char.into(),
                        data: Bytes::from(vec![1u8; 300_000]),
                    })),
                }],
                ..Default::default()
            }],
            ..Default::default()
        };
        assert_eq!(held.write_outputs(&mut reply), 0);
        assert!(matches!(
            reply.tasks[0].outputs[0].result,
            Some(Output::Array(_))
        ));
        assert_eq!(client.next().await, Message::Retired("out".into()));
        // Still leased until the client forgets it: no run may name it.
        let e = regions.lease_output(&request).err().unwrap();
        assert!(e.message().contains("still read by another run"), "{e}");
        client.send(Message::Forget("out".into()), None).await;
        tokio::time::timeout(std::time::Duration::from_secs(5), async {
            while ninf_proto::sync::lock(&regions.regions).contains_key("out") {
                tokio::task::yield_now().await;
            }
        })
        .await
        .unwrap();
    }

    #[tokio::test]
    async fn a_region_lent_to_a_call_never_sent_goes_back_to_its_client() {
        let (regions, client, _memory, _request, held) = output_region_leased().await;
        // The call failed before its request left (its region could not be made): no
        // routine was told of the output region.
        let mut unsent = regions.lend_output(&place("out", 0, 4096)).unwrap();
        unsent.never_sent();
        drop(unsent);
        // Lent again to the call made instead, and released with the run.
        let mut again = regions.lend_output(&place("out", 0, 4096)).unwrap();
        again.answered();
        drop(again);
        drop(held);
        assert_eq!(client.next().await, Message::Released("out".into()));
    }

    #[test]
    fn room_is_found_after_the_cursor_around_taken_ranges() {
        assert_eq!(free_room(0, 100, &[], 1000), Some(0));
        assert_eq!(free_room(1, 100, &[], 1000), Some(64));
        assert_eq!(free_room(0, 100, &[(50, 200)], 1000), Some(256));
        assert_eq!(free_room(0, 64, &[(64, 128), (128, 300)], 1000), Some(0));
        assert_eq!(free_room(0, 100, &[(0, 900)], 1000), None);
        assert_eq!(free_room(0, 1001, &[], 1000), None);
    }
}
