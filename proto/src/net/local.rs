//! Same-host bulk calls. A compute server also listens on a Unix socket in the abstract
//! namespace, under a random name it advertises (`ServerInfo.bulk_local`). Abstract names
//! belong to a network namespace and never appear in a file system: only a client on the
//! same host (and in the same namespace) can connect, and nothing is left behind when the
//! server dies. The socket carries the bulk protocol's frames; the arrays themselves do not
//! cross it. They sit in a memory file (`memfd`) the client creates, seals against shrinking
//! and hands over once with the frame that first uses it (`SCM_RIGHTS`): the server copies the
//! inputs from it into the executable's region and writes the outputs back into it. Loopback
//! TCP copies every byte into the kernel and out again; this moves each byte once per side.
//!
//! The seal is what makes sharing memory with another process safe: a mapping whose file
//! shrinks under it faults (`SIGBUS`) on the next access, so the server refuses any region
//! that could shrink.

use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::linux::net::SocketAddrExt;

use memmap2::MmapMut;
use rustix::fs::{MemfdFlags, SealFlags};
use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};
use tokio::io::Interest;
use tokio::net::{UnixListener, UnixStream};

/// Arrays a client on a proxy's host shares with it from this size on; smaller ones go in
/// the request and the reply (docs/bulk-protocol.md, "From a client on the proxy's host").
pub const MIN_SHARED_ARRAY: usize = 256 * 1024;

/// Arrays start at multiples of this in a shared region, as a routine would align them.
pub const SHARED_ALIGN: usize = 64;

/// Each task's part of a run's output region, as (offset, bytes), for the tasks whose
/// wanted outputs (`client_out_bytes`, `returns` of them) reach [`MIN_SHARED_ARRAY`]: one
/// after another in task order, each with room for every output to start on a
/// [`SHARED_ALIGN`] boundary. The client sizes the region as their sum; the proxy has the
/// routines write each task's outputs in its part.
pub fn output_parts(tasks: impl Iterator<Item = (u64, usize)>) -> Vec<Option<(u64, u64)>> {
    let mut offset = 0u64;
    tasks
        .map(|(client_out_bytes, returns)| {
            let bytes = client_out_bytes
                .saturating_add((SHARED_ALIGN as u64).saturating_mul(returns as u64));
            (bytes >= MIN_SHARED_ARRAY as u64).then(|| {
                let part = (offset, bytes);
                offset = offset.saturating_add(bytes);
                part
            })
        })
        .collect()
}

/// A fresh abstract socket name: random, so a name advertised by a server on another host
/// can never reach a different server on this one.
pub fn socket_name() -> io::Result<String> {
    random_name("ninf-bulk-")
}

/// The kernel this process runs on and its network namespace, as one name (`ServerInfo.host`):
/// processes that share it reach each other's abstract sockets and can pass memory files, so
/// servers with the same name lend each other stored arrays. Empty when either cannot be read.
pub fn host_identity() -> String {
    use std::os::unix::fs::MetadataExt;
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id");
    let namespace = std::fs::metadata("/proc/self/ns/net");
    match (boot, namespace) {
        (Ok(boot), Ok(namespace)) => format!("{}/net:{}", boot.trim(), namespace.ino()),
        _ => String::new(),
    }
}

/// `prefix` and 128 random bits in hex: a name nobody else picks.
pub fn random_name(prefix: &str) -> io::Result<String> {
    let mut bytes = [0u8; 16];
    let mut filled = 0;
    while filled < bytes.len() {
        filled +=
            rustix::rand::getrandom(&mut bytes[filled..], rustix::rand::GetRandomFlags::empty())?;
    }
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    Ok(format!("{prefix}{hex}"))
}

/// Sends `message` as one frame (a 4-byte little-endian length, then the message), handing
/// `file` over with it when given.
pub async fn send_message(
    stream: &UnixStream,
    message: &impl prost::Message,
    file: Option<BorrowedFd<'_>>,
) -> io::Result<()> {
    send(stream, &super::bulk::encode(message), file).await
}

/// Receives one frame of [`send_message`] of at most `max` bytes, with the file handed over
/// with it, if any. A longer frame, or one that does not decode, is an error: the stream is
/// out of step.
pub async fn receive_message<M: prost::Message + Default>(
    stream: &UnixStream,
    max: usize,
) -> io::Result<(M, Option<OwnedFd>)> {
    let mut header = [0u8; 4];
    let mut file = receive(stream, &mut header).await?;
    let length = super::bulk::frame_length_within(header, max).map_err(io::Error::other)?;
    let mut body = vec![0u8; length];
    if let Some(later) = receive(stream, &mut body).await? {
        file = Some(later);
    }
    let message = M::decode(body.as_slice())
        .map_err(|e| io::Error::other(format!("an unreadable frame: {e}")))?;
    Ok((message, file))
}

/// Listens on the abstract socket `name`.
pub fn listen(name: &str) -> io::Result<UnixListener> {
    let address = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())?;
    let listener = std::os::unix::net::UnixListener::bind_addr(&address)?;
    listener.set_nonblocking(true)?;
    UnixListener::from_std(listener)
}

/// Connects to the abstract socket `name`; fails at once when no server of this host listens
/// under it (connection refused), or when its queue of connections not yet accepted is full
/// (`WouldBlock`): the socket is non-blocking from the start, so that a server too busy to
/// accept cannot stall the caller's runtime thread in `connect`.
pub fn connect(name: &str) -> io::Result<UnixStream> {
    let address = rustix::net::SocketAddrUnix::new_abstract_name(name.as_bytes())?;
    let socket = rustix::net::socket_with(
        rustix::net::AddressFamily::UNIX,
        rustix::net::SocketType::STREAM,
        rustix::net::SocketFlags::NONBLOCK | rustix::net::SocketFlags::CLOEXEC,
        None,
    )?;
    rustix::net::connect(&socket, &address)?;
    UnixStream::from_std(std::os::unix::net::UnixStream::from(socket))
}

/// Writes all of `bytes`, handing `region` over with the first of them when given.
pub async fn send(
    stream: &UnixStream,
    bytes: &[u8],
    region: Option<BorrowedFd<'_>>,
) -> io::Result<()> {
    let files: Vec<BorrowedFd<'_>> = region.into_iter().collect();
    send_files(stream, bytes, &files).await
}

/// The most files one frame hands over ([`send_files`]).
pub const MAX_FILES_PER_FRAME: usize = 20;

/// Writes all of `bytes`, handing `files` over with the first of them (at most
/// [`MAX_FILES_PER_FRAME`]).
pub async fn send_files(
    stream: &UnixStream,
    bytes: &[u8],
    files: &[BorrowedFd<'_>],
) -> io::Result<()> {
    if files.len() > MAX_FILES_PER_FRAME {
        return Err(io::Error::other(format!(
            "{} files in one frame, over {MAX_FILES_PER_FRAME}",
            files.len()
        )));
    }
    let mut sent = 0;
    let mut fds = (!files.is_empty()).then_some(files);
    while sent < bytes.len() {
        stream.writable().await?;
        let result = stream.try_io(Interest::WRITABLE, || {
            let mut space =
                [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FILES_PER_FRAME))];
            let mut control = SendAncillaryBuffer::new(&mut space);
            if let Some(fds) = fds {
                control.push(SendAncillaryMessage::ScmRights(fds));
            }
            let iov = [io::IoSlice::new(&bytes[sent..])];
            rustix::net::sendmsg(stream, &iov, &mut control, SendFlags::NOSIGNAL)
                .map_err(io::Error::from)
        });
        match result {
            Ok(n) => {
                sent += n;
                // The descriptors went with the first bytes.
                fds = None;
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Fills `buffer` from the stream, collecting a region handed over with any of its bytes
/// (the last one wins; earlier ones are closed). An end of stream before the first byte is
/// `UnexpectedEof`.
pub async fn receive(stream: &UnixStream, buffer: &mut [u8]) -> io::Result<Option<OwnedFd>> {
    Ok(receive_files(stream, buffer).await?.pop())
}

/// Fills `buffer` from the stream, collecting every file handed over with its bytes, in
/// order. An end of stream before the first byte is `UnexpectedEof`.
pub async fn receive_files(stream: &UnixStream, buffer: &mut [u8]) -> io::Result<Vec<OwnedFd>> {
    let mut filled = 0;
    let mut files = Vec::new();
    while filled < buffer.len() {
        stream.readable().await?;
        let result = stream.try_io(Interest::READABLE, || {
            let mut space =
                [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FILES_PER_FRAME))];
            let mut control = RecvAncillaryBuffer::new(&mut space);
            let mut iov = [io::IoSliceMut::new(&mut buffer[filled..])];
            let received =
                rustix::net::recvmsg(stream, &mut iov, &mut control, RecvFlags::CMSG_CLOEXEC)
                    .map_err(io::Error::from)?;
            let mut handed = Vec::new();
            for message in control.drain() {
                if let RecvAncillaryMessage::ScmRights(fds) = message {
                    handed.extend(fds);
                }
            }
            Ok((received.bytes, handed))
        });
        match result {
            Ok((0, _)) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok((n, handed)) => {
                filled += n;
                files.extend(handed);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(files)
}

/// A span of a [`SharedRegion`], as the owner of a `Bytes`.
struct RegionSpan {
    region: std::sync::Arc<SharedRegion>,
    start: usize,
    end: usize,
}

impl AsRef<[u8]> for RegionSpan {
    fn as_ref(&self) -> &[u8] {
        &self.region.bytes()[self.start..self.end]
    }
}

/// A memory file shared between a client and a server, mapped read-write, that cannot shrink.
#[derive(Debug)]
pub struct SharedRegion {
    file: OwnedFd,
    map: MmapMut,
}

impl SharedRegion {
    /// A new region of `len` bytes, sealed against shrinking (the client's side).
    pub fn create(len: usize) -> io::Result<SharedRegion> {
        let file = rustix::fs::memfd_create(
            "ninf-bulk-local",
            MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING,
        )?;
        rustix::fs::ftruncate(&file, len as u64)?;
        rustix::fs::fcntl_add_seals(&file, SealFlags::SHRINK | SealFlags::SEAL)?;
        SharedRegion::map(file, len)
    }

    /// The region a client handed over (the server's side): refused unless sealed against
    /// shrinking, so its mapping can never fault.
    pub fn adopt(file: OwnedFd) -> Result<SharedRegion, String> {
        let seals = rustix::fs::fcntl_get_seals(&file)
            .map_err(|e| format!("the shared region is not a sealable memory file ({e})"))?;
        if !seals.contains(SealFlags::SHRINK) {
            return Err("the shared region is not sealed against shrinking (F_SEAL_SHRINK)".into());
        }
        let len = rustix::fs::fstat(&file)
            .map_err(|e| format!("cannot read the shared region's size: {e}"))?
            .st_size;
        let len = usize::try_from(len).map_err(|_| format!("shared region of {len} bytes"))?;
        SharedRegion::map(file, len).map_err(|e| format!("cannot map the shared region: {e}"))
    }

    fn map(file: OwnedFd, len: usize) -> io::Result<SharedRegion> {
        let file = std::fs::File::from(file);
        // SAFETY: the file is sealed against shrinking, so every byte of the mapping stays
        // backed; the other side may write into it concurrently, which can only garble the
        // bytes of its own call (the protocol has one call in flight per connection).
        let map = unsafe { memmap2::MmapOptions::new().len(len).map_mut(&file)? };
        Ok(SharedRegion {
            file: OwnedFd::from(file),
            map,
        })
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    pub fn fd(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }

    pub fn bytes(&self) -> &[u8] {
        &self.map
    }

    /// Where `data` starts in the region, when it lies wholly inside it (bytes borrowed
    /// from the mapping, not a copy).
    pub fn offset_of(&self, data: &[u8]) -> Option<usize> {
        let base = self.map.as_ptr() as usize;
        let start = data.as_ptr() as usize;
        let inside = start >= base && start.checked_add(data.len())? <= base + self.map.len();
        inside.then(|| start - base)
    }

    /// Bytes `start..end` of the region where they lie, keeping it mapped while they live;
    /// `None` when the span is not inside it.
    pub fn view(self: &std::sync::Arc<Self>, start: usize, end: usize) -> Option<bytes::Bytes> {
        (start <= end && end <= self.len()).then(|| {
            bytes::Bytes::from_owner(RegionSpan {
                region: self.clone(),
                start,
                end,
            })
        })
    }

    pub fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.map
    }

    /// Copies `bytes` into the region at `offset`, through a shared handle; false (and
    /// nothing written) when they do not fit.
    ///
    /// # Safety
    /// Nothing in this process may read or write that range meanwhile: the caller holds the
    /// region exclusively (a lease, or a slot marked in use).
    pub unsafe fn write_at(&self, offset: usize, bytes: &[u8]) -> bool {
        if offset
            .checked_add(bytes.len())
            .is_none_or(|end| end > self.map.len())
        {
            return false;
        }
        // SAFETY: in bounds (checked); the mapping is writable and stays mapped while `self`
        // lives; the caller guarantees exclusive use of the range.
        let target = unsafe {
            std::slice::from_raw_parts_mut(self.map.as_ptr().cast_mut().add(offset), bytes.len())
        };
        crate::copy::copy(target, bytes);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_region_handed_over_is_the_same_memory_and_an_unsealed_one_is_refused() {
        let name = socket_name().unwrap();
        let listener = listen(&name).unwrap();
        let client = connect(&name).unwrap();
        let (server, _) = listener.accept().await.unwrap();

        let mut region = SharedRegion::create(1 << 20).unwrap();
        region.bytes_mut()[..4].copy_from_slice(b"ninf");
        send(&client, &[1, 2, 3, 4, 5, 6], Some(region.fd()))
            .await
            .unwrap();
        let mut header = [0u8; 4];
        let handed = receive(&server, &mut header).await.unwrap().unwrap();
        assert_eq!(header, [1, 2, 3, 4]);
        let mut rest = [0u8; 2];
        assert!(receive(&server, &mut rest).await.unwrap().is_none());
        assert_eq!(rest, [5, 6]);
        let mut adopted = SharedRegion::adopt(handed).unwrap();
        assert_eq!(adopted.len(), 1 << 20);
        assert_eq!(&adopted.bytes()[..4], b"ninf");
        adopted.bytes_mut()[4..8].copy_from_slice(b"grid");
        assert_eq!(&region.bytes()[4..8], b"grid");
        // The client cannot shrink it under the server either.
        let file = std::fs::File::from(region.file.try_clone().unwrap());
        assert!(file.set_len(16).is_err());

        let plain = rustix::fs::memfd_create("plain", MemfdFlags::CLOEXEC).unwrap();
        rustix::fs::ftruncate(&plain, 4096).unwrap();
        let e = SharedRegion::adopt(plain).unwrap_err();
        assert!(e.contains("not sealed against shrinking"), "{e}");
    }

    #[test]
    fn no_server_under_a_name_refuses_at_once() {
        let e = connect(&socket_name().unwrap()).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::ConnectionRefused);
    }
}
