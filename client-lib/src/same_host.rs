//! Bulk calls to a server on this host (docs/bulk-protocol.md, "On the same host"). The
//! client keeps one memory file per connection, large enough for the larger of a call's
//! inputs and outputs: it copies the inputs in, sends the request frame on the server's
//! abstract Unix socket (handing the file over whenever it is new), and copies the outputs
//! out once the reply frame says where they are. The arrays never cross a socket.

use std::io;

use ninf_idl::FunctionInterface;
use ninf_proto::net::bulk;
use ninf_proto::net::local::{self, SharedRegion};
use ninf_proto::v1;
use tokio::net::UnixStream;

use crate::args::Encoded;
use crate::bulk_reply::{BulkFailure, OutputBytes, decode_reply_frame, receive_outputs};
use crate::{Arg, CallOutcome};

/// The smallest region made: calls below it (the bulk threshold is 1 MiB) share one size.
const MIN_REGION: usize = 1 << 20;

/// A connection to a server's same-host socket, and the region it shares with it.
pub(crate) struct SameHostConnection {
    stream: UnixStream,
    region: Option<SharedRegion>,
}

impl SameHostConnection {
    /// Connects to the abstract socket `name`; fails when no server of this host has it.
    pub(crate) fn connect(name: &str) -> io::Result<SameHostConnection> {
        Ok(SameHostConnection {
            stream: local::connect(name)?,
            region: None,
        })
    }

    /// One request and its reply.
    pub(crate) async fn exchange(
        &mut self,
        interface: &FunctionInterface,
        request: &v1::CallRequest,
        encoded: &[Encoded],
        args: &mut [Arg<'_>],
    ) -> Result<CallOutcome, BulkFailure> {
        let needed = input_bytes(encoded).max(output_bytes(interface, args));
        let handed = self.reserve(needed)?;
        let Some(region) = self.region.as_mut() else {
            return Err(BulkFailure::Io(io::Error::other("no shared region")));
        };
        write_inputs(region.bytes_mut(), args, encoded);
        local::send_message(&self.stream, request, handed.then(|| region.fd())).await?;

        let mut header = [0u8; 4];
        local::receive(&self.stream, &mut header).await?;
        let mut body = vec![0u8; bulk::frame_length(header).map_err(BulkFailure::from)?];
        local::receive(&self.stream, &mut body).await?;
        let (reply, outputs_follow) = decode_reply_frame(&body)?;
        if outputs_follow {
            let mut outputs = SocketOutputs(&self.stream);
            return receive_outputs(interface, reply, args, &mut outputs).await;
        }
        let mut outputs = RegionOutputs {
            bytes: region.bytes(),
            offset: 0,
        };
        receive_outputs(interface, reply, args, &mut outputs).await
    }

    /// Makes the region hold `bytes`; whether it is new (and must be handed over).
    fn reserve(&mut self, bytes: usize) -> io::Result<bool> {
        if self.region.as_ref().is_some_and(|r| r.len() >= bytes) {
            return Ok(false);
        }
        let size = bytes
            .checked_next_power_of_two()
            .unwrap_or(bytes)
            .max(MIN_REGION);
        self.region = Some(SharedRegion::create(size)?);
        Ok(true)
    }
}

/// Bytes of the call's bulk inputs, in the order they are laid out.
fn input_bytes(encoded: &[Encoded]) -> usize {
    encoded
        .iter()
        .map(|e| match e {
            Encoded::Bulk(b) => b.bytes as usize,
            Encoded::Value(_) => 0,
        })
        .sum()
}

/// Bytes the call's OUT and INOUT arrays will take when they come back.
fn output_bytes(interface: &FunctionInterface, args: &[Arg<'_>]) -> usize {
    interface
        .parameters
        .iter()
        .zip(args)
        .filter(|(p, _)| p.mode.is_output())
        .map(|(p, a)| match a {
            Arg::Out(x) => x.as_ref().len() * p.element_type.size_bytes().unwrap_or(1) as usize,
            _ => 0,
        })
        .sum()
}

/// Copies the bulk inputs one after another from the region's start.
fn write_inputs(region: &mut [u8], args: &[Arg<'_>], encoded: &[Encoded]) {
    let mut offset = 0;
    for (arg, e) in args.iter().zip(encoded) {
        if let Encoded::Bulk(_) = e {
            let view;
            let array = match arg {
                Arg::In(a) => a,
                Arg::Out(a) => {
                    view = a.as_ref();
                    &view
                }
                _ => continue,
            };
            let bytes = array.le_bytes();
            ninf_proto::copy::copy(&mut region[offset..][..bytes.len()], &bytes);
            offset += bytes.len();
        }
    }
}

/// A reply's outputs that did not fit the region: they follow the frame on the socket.
struct SocketOutputs<'a>(&'a UnixStream);

impl OutputBytes for SocketOutputs<'_> {
    async fn fill(&mut self, into: &mut [u8]) -> io::Result<()> {
        local::receive(self.0, into).await.map(|_| ())
    }
}

/// A reply's outputs, one after another from the region's start.
struct RegionOutputs<'a> {
    bytes: &'a [u8],
    offset: usize,
}

impl OutputBytes for RegionOutputs<'_> {
    async fn fill(&mut self, into: &mut [u8]) -> io::Result<()> {
        let end = self.offset + into.len();
        let source = self
            .bytes
            .get(self.offset..end)
            .ok_or_else(|| io::Error::other("the server's outputs run past the shared region"))?;
        ninf_proto::copy::copy(into, source);
        self.offset = end;
        Ok(())
    }
}
