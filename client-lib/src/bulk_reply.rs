//! A bulk reply on the client's side (docs/bulk-protocol.md): the server's answer turned into
//! the call's outcome or error, and its output bytes written into the caller's OUT and INOUT
//! arrays, each checked against the interface before its bytes are taken. The frames
//! themselves are `ninf_proto::net::bulk`'s; where the output bytes come from (the TCP
//! stream, or the region shared with a server on this host) is an [`OutputBytes`].

use ninf_idl::FunctionInterface;
use ninf_proto::net::bulk::{self, Answer, FrameError, ReadError};
use ninf_proto::v1;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

use crate::{Arg, CallError, CallOutcome, ErrorKind};

pub(crate) enum BulkFailure {
    Call(CallError),
    Io(std::io::Error),
}

impl From<std::io::Error> for BulkFailure {
    fn from(e: std::io::Error) -> Self {
        BulkFailure::Io(e)
    }
}

impl From<FrameError> for BulkFailure {
    fn from(e: FrameError) -> Self {
        BulkFailure::Call(CallError::new(
            ErrorKind::CommunicationFailed,
            format!("bulk reply: {e}"),
        ))
    }
}

impl From<ReadError> for BulkFailure {
    fn from(e: ReadError) -> Self {
        match e {
            ReadError::Io(e) => BulkFailure::Io(e),
            ReadError::Frame(e) => e.into(),
        }
    }
}

/// The reply a server's answer carries and whether its outputs follow on the socket, or its
/// refusal as the call's error.
pub(crate) fn call_reply(answer: Answer) -> Result<(v1::CallReply, bool), BulkFailure> {
    match answer {
        Answer::Reply {
            reply,
            outputs_follow,
        } => Ok((reply, outputs_follow)),
        Answer::Refused(status) => Err(BulkFailure::Call(CallError::from(status))),
    }
}

/// A reply frame's body, as [`call_reply`] reads it.
pub(crate) fn decode_reply_frame(body: &[u8]) -> Result<(v1::CallReply, bool), BulkFailure> {
    call_reply(bulk::decode_answer(body)?)
}

/// Where a bulk reply's output bytes come from: the socket after the frame, or (on the same
/// host) the region shared with the server.
pub(crate) trait OutputBytes {
    /// Fills `into` with the next output bytes.
    async fn fill(&mut self, into: &mut [u8]) -> std::io::Result<()>;
}

impl OutputBytes for TcpStream {
    async fn fill(&mut self, into: &mut [u8]) -> std::io::Result<()> {
        self.read_exact(into).await.map(|_| ())
    }
}

/// Writes a bulk reply's outputs into the call's OUT and INOUT arrays, each checked against
/// the interface before its bytes are taken from `source`.
pub(crate) async fn receive_outputs(
    interface: &FunctionInterface,
    reply: v1::CallReply,
    args: &mut [Arg<'_>],
    source: &mut impl OutputBytes,
) -> Result<CallOutcome, BulkFailure> {
    let name = &interface.name;
    let protocol = |message: String| {
        BulkFailure::Call(CallError::new(ErrorKind::CommunicationFailed, message))
    };
    let mut received = vec![false; interface.parameters.len()];
    for output in reply.outputs {
        let index = output.parameter as usize;
        let Some(p) = interface
            .parameters
            .get(index)
            .filter(|p| p.mode.is_output())
        else {
            return Err(protocol(format!(
                "`{name}` returned parameter {index}, which is not an output"
            )));
        };
        if std::mem::replace(&mut received[index], true) {
            return Err(protocol(format!("`{name}` returned `{}` twice", p.name)));
        }
        let Some(Arg::Out(target)) = args.get_mut(index) else {
            return Err(protocol(format!(
                "`{name}` returned `{}`, which has no array to receive it",
                p.name
            )));
        };
        let expected = (target.as_ref().len() as u64) * p.element_type.size_bytes().unwrap_or(1);
        let (element_type, bytes) = match &output.result {
            Some(v1::call_output::Result::Bulk(b)) => (b.element_type, b.bytes),
            _ => {
                return Err(protocol(format!(
                    "`{name}` returned `{}` in an unexpected form",
                    p.name
                )));
            }
        };
        let element_type = v1::ElementType::try_from(element_type)
            .ok()
            .and_then(ninf_proto::descriptor::element_type_from_proto);
        if element_type != Some(p.element_type) || bytes != expected {
            return Err(protocol(format!(
                "`{name}` returned {bytes} bytes for `{}`, expected {expected}",
                p.name
            )));
        }
        match target.le_bytes_mut() {
            Some(memory) => source.fill(memory).await?,
            None => {
                let mut raw = vec![0u8; bytes as usize];
                source.fill(&mut raw).await?;
                target
                    .decode_from(&raw)
                    .map_err(|e| protocol(format!("result `{}` of `{name}`: {e}", p.name)))?;
            }
        }
    }
    if let Some(p) = crate::args::missing_output(interface, &received) {
        return Err(protocol(format!(
            "`{name}` returned no value for output `{}`",
            p.name
        )));
    }
    Ok(CallOutcome {
        status: reply.status,
    })
}
