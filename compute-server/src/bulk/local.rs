//! The same-host bulk path (docs/bulk-protocol.md, "On the same host"): the bulk protocol's
//! frames on an abstract Unix socket, the arrays in a memory file the client shares
//! ([`ninf_proto::net::local`]). A call's bulk inputs lie one after another from the start of
//! the client's region, and the server writes its bulk outputs there the same way once the
//! inputs have gone to the executable. Outputs larger than the region follow the reply
//! frame on the socket instead (`BulkReply.outputs_follow`): a proxy passing calls on does
//! not know their outputs' sizes in advance.

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::sync::Arc;

use bytes::Bytes;
use ninf_proto::net::bulk;
use ninf_proto::net::local::{self, SharedRegion};
use ninf_proto::v1;
use tokio::net::{UnixListener, UnixStream};
use tonic::Status;

use super::Flow;
use super::io::{BulkIo, send_error};
use crate::metrics::Path;
use crate::state::ServerState;

/// What the token check and the logs call every same-host client.
const PEER: &str = "local";

/// Accepts same-host connections until the task is dropped.
pub async fn serve(listener: UnixListener, state: Arc<ServerState>) {
    loop {
        let Ok((socket, _)) = listener.accept().await else {
            continue;
        };
        let state = state.clone();
        tokio::spawn(async move {
            if let Err(e) = connection(socket, &state).await {
                tracing::debug!(error = %e, "same-host bulk connection closed");
            }
        });
    }
}

/// Regions a proxy may have lent on one connection at once.
pub const MAX_LENT_REGIONS: usize = 32;

async fn connection(socket: UnixStream, state: &ServerState) -> std::io::Result<()> {
    let mut io = LocalIo {
        socket,
        region: None,
        lent: HashMap::new(),
        input: 0,
    };
    loop {
        let mut header = [0u8; 4];
        let handed = match local::receive_files(&io.socket, &mut header).await {
            Ok(handed) => handed,
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(e),
        };
        let (request, len) = match super::read_request(&mut io, header).await? {
            Ok(read) => read,
            Err(status) => {
                send_error(&mut io, &status).await?;
                return Ok(());
            }
        };
        if let Err(message) = io.adopt(&request, handed) {
            send_error(&mut io, &Status::invalid_argument(message)).await?;
            return Ok(());
        }
        // Nothing but frames is on the socket, so a request whose inputs are not in the
        // region is answered and the connection stays in step.
        if let Err(status) = io.check_inputs(&request) {
            send_error(&mut io, &status).await?;
            continue;
        }
        io.input = 0;
        if super::serve_request(state, PEER, request, len, Path::Local, &mut io).await?
            == Flow::Close
        {
            return Ok(());
        }
    }
}

/// A same-host connection: its socket, the client's region, the regions a proxy lent on
/// (its own clients' memory, by name), and how far the inputs of the call in progress have
/// been read from its region.
struct LocalIo {
    socket: UnixStream,
    region: Option<Arc<SharedRegion>>,
    lent: HashMap<String, Arc<SharedRegion>>,
    input: usize,
}

impl LocalIo {
    fn region_len(&self) -> usize {
        self.region.as_ref().map_or(0, |r| r.len())
    }

    /// Takes the files handed over with the request: named by `lent_regions` (the empty
    /// name is the connection's own region), or, unnamed, one file as the connection's
    /// region. Lets go of the regions the request drops.
    fn adopt(&mut self, request: &v1::CallRequest, handed: Vec<OwnedFd>) -> Result<(), String> {
        for name in &request.dropped_regions {
            self.lent.remove(name);
        }
        if request.lent_regions.is_empty() {
            if let Some(file) = handed.into_iter().last() {
                self.region = Some(Arc::new(SharedRegion::adopt(file)?));
            }
            return Ok(());
        }
        if handed.len() != request.lent_regions.len() {
            return Err(format!(
                "the request names {} handed regions, but {} files came with it",
                request.lent_regions.len(),
                handed.len()
            ));
        }
        for (name, file) in request.lent_regions.iter().zip(handed) {
            let region = SharedRegion::adopt(file)?;
            if name.is_empty() {
                self.region = Some(Arc::new(region));
            } else {
                self.lent.insert(name.clone(), Arc::new(region));
            }
        }
        if self.lent.len() > MAX_LENT_REGIONS {
            return Err(format!(
                "{} regions lent on one connection, over {MAX_LENT_REGIONS}",
                self.lent.len()
            ));
        }
        Ok(())
    }

    fn check_inputs(&self, request: &v1::CallRequest) -> Result<(), Status> {
        let bytes = super::io::bulk_bytes(request);
        if bytes > self.region_len() as u64 {
            return Err(Status::invalid_argument(format!(
                "the call's bulk inputs of {bytes} bytes do not fit the shared region of {} bytes",
                self.region_len()
            )));
        }
        Ok(())
    }
}

impl BulkIo for LocalIo {
    fn lent_region(&self, name: &str) -> Option<Arc<SharedRegion>> {
        self.lent.get(name).cloned()
    }

    fn output_region(&self) -> Option<Arc<SharedRegion>> {
        self.region.clone()
    }

    async fn read_frame(&mut self, into: &mut [u8]) -> std::io::Result<()> {
        // A region handed over with the body instead of the header is dropped.
        local::receive(&self.socket, into).await.map(|_| ())
    }

    async fn read_input(&mut self, into: &mut [u8]) -> std::io::Result<()> {
        let end = self.input + into.len();
        let source = self
            .region
            .as_ref()
            .and_then(|r| r.bytes().get(self.input..end))
            .ok_or_else(|| std::io::Error::other("bulk input beyond the shared region"))?;
        ninf_proto::copy::copy(into, source);
        self.input = end;
        Ok(())
    }

    async fn skip_input(&mut self, _bytes: u64) -> std::io::Result<()> {
        // The inputs are in the region, not on the socket: nothing to pass over.
        Ok(())
    }

    async fn send(&mut self, reply: &v1::BulkReply, payloads: &[Bytes]) -> std::io::Result<()> {
        let total: usize = payloads.iter().map(Bytes::len).sum();
        match self.region.as_mut() {
            Some(region) if total <= region.len() => {
                let mut offset = 0;
                for payload in payloads {
                    // An output the routine wrote in its place here needs no copy.
                    let in_place = region.bytes().get(offset..).map(<[u8]>::as_ptr);
                    if in_place != Some(payload.as_ptr()) {
                        // SAFETY: one call at a time per connection, and the client reads
                        // the region only after the reply frame that follows.
                        unsafe { region.write_at(offset, payload) };
                    }
                    offset += payload.len();
                }
                local::send(&self.socket, &bulk::encode(reply), None).await
            }
            // Outputs larger than the caller's region (it could not know their size, or it
            // sent its inputs inline): they follow the frame, as on the TCP port.
            _ => {
                let mut reply = reply.clone();
                reply.outputs_follow = !payloads.is_empty();
                local::send(&self.socket, &bulk::encode(&reply), None).await?;
                for payload in payloads {
                    local::send(&self.socket, payload, None).await?;
                }
                Ok(())
            }
        }
    }
}
