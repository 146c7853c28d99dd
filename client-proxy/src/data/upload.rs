//! A put's bytes as they arrive from its client, passed on to the server while they still
//! arrive, and kept until the put is over in case a server fails under it and another must
//! take them.
//!
//! The proxy used to receive a whole put before sending any of it on: the client's stream and
//! the server's ran one after the other, and the chunks were copied into one buffer between
//! them. Now a task drains the client's stream into a list of its chunks (each as it was
//! decoded, not copied), and every server the put goes to reads that list from the start,
//! waiting at its end for the next chunk.

use std::pin::Pin;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use tokio::sync::Notify;
use tonic::Status;

/// The chunks of one put, arriving or arrived.
pub struct Upload {
    shared: Arc<Shared>,
    receiving: Option<tokio::task::JoinHandle<()>>,
    /// All the bytes, when they came at once (a put in shared memory).
    whole: Option<Bytes>,
}

/// A stream of a put's chunks, in order.
pub type Chunks = Pin<Box<dyn Stream<Item = Bytes> + Send>>;

#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    arrived: Notify,
}

/// What a reader finds at its next chunk.
enum Look {
    Chunk(Bytes),
    End,
    Failed,
    Wait,
}

#[derive(Default)]
struct State {
    chunks: Vec<Bytes>,
    received: u64,
    /// Set once the client's stream ended: all `bytes` came, or what went wrong.
    outcome: Option<Result<(), Status>>,
}

impl Upload {
    /// The put of `bytes` bytes whose first data is `first` and whose other chunks `rest`
    /// brings (a client's stream after its first message), received in a task of its own.
    pub fn receive<S>(bytes: u64, first: Bytes, rest: S) -> Upload
    where
        S: Stream<Item = Result<Bytes, Status>> + Send + Unpin + 'static,
    {
        let shared = Arc::new(Shared::default());
        let receiving = tokio::spawn(Self::drain(Arc::clone(&shared), bytes, first, rest));
        Upload {
            shared,
            receiving: Some(receiving),
            whole: None,
        }
    }

    /// A put whose bytes are all here already.
    pub fn whole(data: Bytes) -> Upload {
        let received = data.len() as u64;
        let whole = Some(data.clone());
        let chunks = ninf_proto::chunks::stream_chunks(&data)
            .map(|(_, chunk)| chunk)
            .filter(|chunk| !chunk.is_empty())
            .collect();
        let state = State {
            chunks,
            received,
            outcome: Some(Ok(())),
        };
        Upload {
            shared: Arc::new(Shared {
                state: Mutex::new(state),
                arrived: Notify::new(),
            }),
            receiving: None,
            whole,
        }
    }

    /// All the bytes, if they came at once ([`Upload::whole`]): a server takes them in one
    /// piece, on its bulk path when it has one.
    pub fn whole_bytes(&self) -> Option<Bytes> {
        self.whole.clone()
    }

    async fn drain<S>(shared: Arc<Shared>, bytes: u64, first: Bytes, mut rest: S)
    where
        S: Stream<Item = Result<Bytes, Status>> + Unpin,
    {
        let mut outcome = shared.add(first, bytes);
        while outcome.is_ok() {
            match rest.next().await {
                Some(Ok(chunk)) => outcome = shared.add(chunk, bytes),
                Some(Err(status)) => outcome = Err(status),
                None => break,
            }
        }
        let received = ninf_proto::sync::lock(&shared.state).received;
        if outcome.is_ok() && received != bytes {
            outcome = Err(Status::invalid_argument(format!(
                "the put says {bytes} bytes but sent {received}"
            )));
        }
        ninf_proto::sync::lock(&shared.state).outcome = Some(outcome);
        shared.arrived.notify_waiters();
    }

    /// The chunks from the first, as they arrive. The stream ends once all have come; if the
    /// client's stream failed, it never ends (whoever reads it waits on [`Upload::failed`]
    /// too, and drops the read: a server must not take a short put as a whole one).
    pub fn chunks(&self) -> Chunks {
        let shared = Arc::clone(&self.shared);
        Box::pin(futures_util::stream::unfold(
            (shared, 0usize),
            |(shared, next)| async move {
                let chunk = shared.chunk(next).await?;
                Some((chunk, (shared, next + 1)))
            },
        ))
    }

    /// Resolves, with why, only if the client's stream failed.
    pub async fn failed(&self) -> Status {
        match self.shared.outcome().await {
            Err(status) => status,
            Ok(()) => std::future::pending().await,
        }
    }

    /// Waits for the client's stream to end: all its bytes came, or why not.
    pub async fn finished(&self) -> Result<(), Status> {
        self.shared.outcome().await
    }
}

impl Drop for Upload {
    fn drop(&mut self) {
        if let Some(receiving) = self.receiving.take() {
            receiving.abort();
        }
    }
}

impl Shared {
    fn add(&self, chunk: Bytes, bytes: u64) -> Result<(), Status> {
        let mut state = ninf_proto::sync::lock(&self.state);
        state.received += chunk.len() as u64;
        if state.received > bytes {
            return Err(Status::invalid_argument(format!(
                "a put of {bytes} bytes sent more"
            )));
        }
        if !chunk.is_empty() {
            state.chunks.push(chunk);
            drop(state);
            self.arrived.notify_waiters();
        }
        Ok(())
    }

    /// Chunk `index` once it has come; none past the last of a put that succeeded.
    async fn chunk(&self, index: usize) -> Option<Bytes> {
        loop {
            // Made before the look, so that a chunk added between the two still wakes it.
            let arrived = self.arrived.notified();
            match self.look(index) {
                Look::Chunk(chunk) => return Some(chunk),
                Look::End => return None,
                Look::Failed => return std::future::pending().await,
                Look::Wait => arrived.await,
            }
        }
    }

    fn look(&self, index: usize) -> Look {
        let state = ninf_proto::sync::lock(&self.state);
        match (state.chunks.get(index), &state.outcome) {
            (Some(chunk), _) => Look::Chunk(chunk.clone()),
            (None, Some(Ok(()))) => Look::End,
            (None, Some(Err(_))) => Look::Failed,
            (None, None) => Look::Wait,
        }
    }

    async fn outcome(&self) -> Result<(), Status> {
        loop {
            let arrived = self.arrived.notified();
            if let Some(outcome) = ninf_proto::sync::lock(&self.state).outcome.clone() {
                return outcome;
            }
            arrived.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::StreamExt;
    use tokio::sync::mpsc;
    use tokio_stream::wrappers::UnboundedReceiverStream;

    fn collect(chunks: Vec<Bytes>) -> Vec<u8> {
        chunks.iter().flat_map(|c| c.iter().copied()).collect()
    }

    #[tokio::test]
    async fn a_reader_gets_chunks_as_they_come_and_a_second_reader_gets_them_all_again() {
        let (send, receive) = mpsc::unbounded_channel();
        let upload = Upload::receive(
            6,
            Bytes::from_static(b"ab"),
            UnboundedReceiverStream::new(receive),
        );
        let mut first = upload.chunks();
        assert_eq!(first.next().await.unwrap(), Bytes::from_static(b"ab"));
        send.send(Ok(Bytes::from_static(b"cd"))).unwrap();
        assert_eq!(first.next().await.unwrap(), Bytes::from_static(b"cd"));
        send.send(Ok(Bytes::from_static(b"ef"))).unwrap();
        drop(send);
        assert_eq!(first.next().await.unwrap(), Bytes::from_static(b"ef"));
        assert_eq!(first.next().await, None);
        upload.finished().await.unwrap();
        let again: Vec<Bytes> = upload.chunks().collect().await;
        assert_eq!(collect(again), b"abcdef");
    }

    #[tokio::test(start_paused = true)]
    async fn too_many_or_too_few_bytes_fail_the_put_and_its_readers_never_see_an_end() {
        let too_many: &[&'static [u8]] = &[b"abc", b"def", b"g"];
        let too_few: &[&'static [u8]] = &[b"abc"];
        for (sent, error) in [
            (too_many, "a put of 6 bytes sent more"),
            (too_few, "the put says 6 bytes but sent 3"),
        ] {
            let rest: Vec<Result<Bytes, Status>> = sent[1..]
                .iter()
                .map(|c| Ok(Bytes::from_static(c)))
                .collect();
            let rest = tokio_stream::iter(rest);
            let upload = Upload::receive(6, Bytes::copy_from_slice(sent[0]), rest);
            let status = upload.failed().await;
            assert_eq!(status.code(), tonic::Code::InvalidArgument);
            assert_eq!(status.message(), error);
            assert!(upload.finished().await.is_err());
            let mut reader = upload.chunks();
            assert_eq!(
                reader.next().await.unwrap(),
                Bytes::copy_from_slice(sent[0])
            );
            let rest = tokio::time::timeout(std::time::Duration::from_millis(50), async {
                while reader.next().await.is_some() {}
            });
            assert!(rest.await.is_err(), "a failed put's chunks ended");
        }
    }

    #[tokio::test]
    async fn a_broken_client_stream_fails_the_put_with_its_error() {
        let rest = tokio_stream::iter([
            Ok(Bytes::from_static(b"cd")),
            Err(Status::cancelled("the client went away")),
        ]);
        let upload = Upload::receive(6, Bytes::from_static(b"ab"), rest);
        let status = upload.failed().await;
        assert_eq!(status.code(), tonic::Code::Cancelled);
        assert_eq!(status.message(), "the client went away");
    }

    #[tokio::test]
    async fn a_whole_put_reads_as_its_bytes_in_chunks() {
        let data: Vec<u8> = (0..3 * ninf_proto::chunks::STREAM_CHUNK_BYTES + 5)
            .map(|i| (i % 251) as u8)
            .collect();
        let upload = Upload::whole(Bytes::from(data.clone()));
        upload.finished().await.unwrap();
        let chunks: Vec<Bytes> = upload.chunks().collect().await;
        assert_eq!(chunks.len(), 4);
        assert_eq!(collect(chunks), data);
        let empty: Vec<Bytes> = Upload::whole(Bytes::new()).chunks().collect().await;
        assert!(empty.is_empty());
    }
}
