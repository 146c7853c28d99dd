//! The bulk protocol's frames (docs/bulk-protocol.md), written and read here for every side
//! that speaks it: the compute server's TCP bulk port and its same-host socket, the client
//! library's direct calls, and the proxy's calls to servers. A frame is a 4-byte
//! little-endian length, then a protobuf message (`CallRequest` one way, `BulkReply` the
//! other); raw array bytes follow it outside the frame. How the bytes travel (a TCP stream,
//! or an abstract Unix socket with a memory file beside it) stays with each side.

use prost::Message;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tonic::Status;

use crate::v1;

/// Largest frame either side accepts (a request's or a reply's message; the arrays
/// themselves follow as raw bytes, checked against the IDL).
pub const MAX_FRAME: usize = 64 << 20;

/// A frame that breaks the protocol: the stream is out of step, or the peer is not a Ninf
/// bulk peer.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("a frame of {len} bytes exceeds {max}")]
    TooLong { len: usize, max: usize },
    #[error("an undecodable frame: {0}")]
    Undecodable(#[from] prost::DecodeError),
    #[error("an empty reply")]
    EmptyReply,
}

/// What a server answered a call.
#[derive(Debug)]
pub enum Answer {
    /// The call's reply; `outputs_follow` when its outputs come after the frame on the
    /// socket rather than in the shared region (same-host connections only).
    Reply {
        reply: v1::CallReply,
        outputs_follow: bool,
    },
    /// The server refused or failed the call; the connection is still in step.
    Refused(Status),
}

/// A message as it goes on the wire: its length, then its bytes.
pub fn encode(message: &impl Message) -> Vec<u8> {
    let len = message.encoded_len();
    let mut frame = Vec::with_capacity(4 + len);
    frame.extend_from_slice(&(len as u32).to_le_bytes());
    message.encode_raw(&mut frame);
    frame
}

/// The length a frame's header announces. It comes from the peer, so it is capped at
/// [`MAX_FRAME`] before anything is allocated for it.
pub fn frame_length(header: [u8; 4]) -> Result<usize, FrameError> {
    frame_length_within(header, MAX_FRAME)
}

/// [`frame_length`] under a cap of `max` bytes (the same-host socket's small frames).
pub fn frame_length_within(header: [u8; 4], max: usize) -> Result<usize, FrameError> {
    let len = u32::from_le_bytes(header) as usize;
    if len > max {
        return Err(FrameError::TooLong { len, max });
    }
    Ok(len)
}

/// A reply frame's body, as the answer it carries.
pub fn decode_answer(body: &[u8]) -> Result<Answer, FrameError> {
    answer_of(v1::BulkReply::decode(body)?)
}

/// The answer a decoded reply frame carries.
pub fn answer_of(reply: v1::BulkReply) -> Result<Answer, FrameError> {
    match reply.result {
        Some(v1::bulk_reply::Result::Reply(r)) => Ok(Answer::Reply {
            reply: r,
            outputs_follow: reply.outputs_follow,
        }),
        Some(v1::bulk_reply::Result::Error(e)) => Ok(Answer::Refused(Status::new(
            tonic::Code::from(e.code),
            e.message,
        ))),
        None => Err(FrameError::EmptyReply),
    }
}

/// The reply frame of a refused or failed call.
pub fn error_reply(status: &Status) -> v1::BulkReply {
    v1::BulkReply {
        result: Some(v1::bulk_reply::Result::Error(v1::BulkError {
            code: status.code() as i32,
            message: status.message().to_string(),
        })),
        outputs_follow: false,
    }
}

/// The reply frame of a call that ran.
pub fn call_reply(reply: v1::CallReply, outputs_follow: bool) -> v1::BulkReply {
    v1::BulkReply {
        result: Some(v1::bulk_reply::Result::Reply(reply)),
        outputs_follow,
    }
}

/// Writes `message` as one frame on a stream (not flushed).
pub async fn write_frame(
    stream: &mut (impl AsyncWrite + Unpin),
    message: &impl Message,
) -> std::io::Result<()> {
    stream.write_all(&encode(message)).await
}

/// Why reading a frame from a stream failed.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Frame(#[from] FrameError),
}

/// Reads one frame's body from a stream: its header, then as many bytes as it announces.
pub async fn read_frame(stream: &mut (impl AsyncRead + Unpin)) -> Result<Vec<u8>, ReadError> {
    let mut header = [0u8; 4];
    stream.read_exact(&mut header).await?;
    let mut body = vec![0u8; frame_length(header)?];
    stream.read_exact(&mut body).await?;
    Ok(body)
}

/// Reads one reply frame from a stream, as the answer it carries.
pub async fn read_answer(stream: &mut (impl AsyncRead + Unpin)) -> Result<Answer, ReadError> {
    let body = read_frame(stream).await?;
    Ok(decode_answer(&body)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_header_over_the_cap_is_refused_with_both_sizes() {
        let header = ((MAX_FRAME + 1) as u32).to_le_bytes();
        let err = frame_length(header).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("a frame of {} bytes exceeds {MAX_FRAME}", MAX_FRAME + 1)
        );
        assert_eq!(frame_length(7u32.to_le_bytes()).unwrap(), 7);
    }

    #[tokio::test]
    async fn a_reply_and_an_error_round_trip_through_a_stream() {
        let (mut a, mut b) = tokio::io::duplex(1 << 16);
        let reply = v1::CallReply {
            status: 3,
            ..Default::default()
        };
        write_frame(&mut a, &call_reply(reply, true)).await.unwrap();
        write_frame(&mut a, &error_reply(&Status::not_found("no routine `x`")))
            .await
            .unwrap();
        match read_answer(&mut b).await.unwrap() {
            Answer::Reply {
                reply,
                outputs_follow,
            } => assert_eq!((reply.status, outputs_follow), (3, true)),
            other => panic!("expected a reply, got {other:?}"),
        }
        match read_answer(&mut b).await.unwrap() {
            Answer::Refused(status) => {
                assert_eq!(status.code(), tonic::Code::NotFound);
                assert_eq!(status.message(), "no routine `x`");
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn an_empty_reply_and_garbage_are_protocol_errors() {
        let empty = v1::BulkReply {
            result: None,
            outputs_follow: false,
        };
        assert!(matches!(
            decode_answer(&empty.encode_to_vec()),
            Err(FrameError::EmptyReply)
        ));
        assert!(matches!(
            decode_answer(&[0xff, 0xff, 0xff]),
            Err(FrameError::Undecodable(_))
        ));
    }
}
