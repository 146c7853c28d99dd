//! What every bulk request is served through, whichever path it came by: the connection's
//! input and output ([`BulkIo`]), how a request can fail ([`Failure`]), and the bytes its
//! bulk arguments bring. Calls (`super`) and puts (`super::put`) share them.

use std::sync::Arc;

use bytes::Bytes;
use ninf_proto::net::bulk;
use ninf_proto::net::local::SharedRegion;
use ninf_proto::v1::{self, call_argument::Source};
use tonic::Status;

/// What went wrong on a connection: an answer to send, or a broken stream.
pub(super) enum Failure {
    /// Reply with this error; the stream is still in step.
    Answer(Status),
    /// Reply with this error, then close: the stream cannot be trusted to be in step.
    AnswerAndClose(Status),
    /// The stream broke; nothing can be sent.
    Broken(std::io::Error),
}

impl From<std::io::Error> for Failure {
    fn from(e: std::io::Error) -> Self {
        Failure::Broken(e)
    }
}

/// Where a call's bulk inputs come from and where its reply goes. On a TCP connection both
/// are raw bytes on the socket; on a same-host connection ([`local`]) they sit in memory the
/// client shares, and only the frames cross the socket.
pub(super) trait BulkIo: Send {
    /// Fills `into` with the rest of a request frame, after its header.
    fn read_frame(&mut self, into: &mut [u8]) -> impl Future<Output = std::io::Result<()>> + Send;
    /// Fills `into` with the next bulk input bytes.
    fn read_input(&mut self, into: &mut [u8]) -> impl Future<Output = std::io::Result<()>> + Send;
    /// Passes over `bytes` bulk input bytes of a refused call, to stay in step.
    fn skip_input(&mut self, bytes: u64) -> impl Future<Output = std::io::Result<()>> + Send;
    /// A region a proxy lent on this connection, by name (only same-host connections have
    /// them).
    fn lent_region(&self, _name: &str) -> Option<Arc<SharedRegion>> {
        None
    }
    /// The region the call's outputs are sent back through, shared with the client (only
    /// same-host connections have one): the routine may write them there itself.
    fn output_region(&self) -> Option<Arc<SharedRegion>> {
        None
    }
    /// Sends the reply frame and the bytes of its bulk outputs.
    fn send(
        &mut self,
        reply: &v1::BulkReply,
        payloads: &[Bytes],
    ) -> impl Future<Output = std::io::Result<()>> + Send;
}

pub(super) async fn send_error(io: &mut impl BulkIo, status: &Status) -> std::io::Result<()> {
    io.send(&bulk::error_reply(status), &[]).await
}

/// Answers the request with `status` after reading past its bulk bytes, so the connection
/// stays usable for the next request.
pub(super) async fn refuse<T>(
    io: &mut impl BulkIo,
    bulk_bytes: u64,
    status: Status,
) -> Result<T, Failure> {
    io.skip_input(bulk_bytes).await?;
    Err(Failure::Answer(status))
}

/// Bytes of the request's bulk arguments wherever they lie (after the frame, in the
/// connection's region, or lent on): what the call takes in.
pub(super) fn arrays_in(request: &v1::CallRequest) -> u64 {
    bulk_arguments(request)
        .map(|(_, bytes)| bytes)
        .fold(0, u64::saturating_add)
}

/// Bytes the request's bulk arguments bring after its frame (or in the connection's
/// region): those lent on lie elsewhere.
pub(super) fn bulk_bytes(request: &v1::CallRequest) -> u64 {
    let lent: std::collections::HashSet<u32> =
        request.lent_arrays.iter().map(|l| l.parameter).collect();
    bulk_arguments(request)
        .filter(|(parameter, _)| !lent.contains(parameter))
        .map(|(_, bytes)| bytes)
        .fold(0, u64::saturating_add)
}

/// (parameter, bytes) of each of the request's bulk arguments.
pub(super) fn bulk_arguments(request: &v1::CallRequest) -> impl Iterator<Item = (u32, u64)> + '_ {
    request
        .arguments
        .iter()
        .enumerate()
        .filter_map(|(index, a)| match &a.source {
            Some(Source::Bulk(b)) => Some((index as u32, b.bytes)),
            _ => None,
        })
}
