//! Shared-memory frames between a host and its executable. Large requests and replies go
//! through two anonymous memory files (`memfd`) instead of the pipe; the pipe carries only a
//! 12-byte header. The host creates both regions when it spawns the executable and hands
//! them over as inherited descriptors 3 (requests, host writes) and 4 (replies, executable
//! writes), announced by `NINF_EXEC_SHARED=3,4`. Nothing is ever named in a file system, so
//! nothing can be left behind.
//!
//! Each region is reused for every call (so its pages are touched once, not per call) and
//! grows when a frame does not fit. Exactly one frame is in flight per direction: the host
//! writes a request only after it has read the previous reply, and copies a reply out before
//! it writes the next request, so neither side ever reads a region the other is rewriting.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Arc;

use bytes::Bytes;
use memmap2::{Mmap, MmapMut};
use prost::Message;

/// Frames at least this large go through shared memory.
pub const SHARED_THRESHOLD: usize = 256 << 10;

/// The environment variable that tells an executable its regions' descriptors.
pub const SHARED_ENV: &str = "NINF_EXEC_SHARED";

/// Descriptor numbers of the request and reply regions in the executable.
pub const REQUEST_FD: i32 = 3;
pub const REPLY_FD: i32 = 4;

/// An anonymous memory file.
pub fn memory_file(name: &str) -> io::Result<File> {
    let name = std::ffi::CString::new(name).map_err(io::Error::other)?;
    // SAFETY: memfd_create reads the NUL-terminated name and returns a new descriptor (or -1),
    // which is owned by the File from here on.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh descriptor that nothing else owns.
    Ok(File::from(unsafe { OwnedFd::from_raw_fd(fd) }))
}

/// The side of a region that writes frames into it.
#[derive(Debug)]
pub struct RegionWriter {
    file: File,
    map: Option<MmapMut>,
}

impl RegionWriter {
    pub fn new(file: File) -> RegionWriter {
        RegionWriter { file, map: None }
    }

    pub fn file(&self) -> &File {
        &self.file
    }

    /// The first `len` bytes of the region, growing it if needed, to write a frame into.
    pub fn reserve(&mut self, len: usize) -> io::Result<&mut [u8]> {
        if self.map.as_ref().is_none_or(|m| m.len() < len) {
            let size = len.next_power_of_two().max(1 << 20);
            self.file.set_len(size as u64)?;
            // SAFETY: the region is private to this host and its executable, and the protocol
            // guarantees the executable does not touch it while the host writes (see module
            // documentation); resizing happens only here, before the new mapping is made.
            self.map = Some(unsafe { MmapMut::map_mut(&self.file)? });
        }
        match self.map.as_mut() {
            Some(map) => Ok(&mut map[..len]),
            None => Err(io::Error::other("shared region not mapped")),
        }
    }

    /// Encodes `message` at the start of the region, growing it if needed; returns its length.
    pub fn write(&mut self, message: &impl Message) -> io::Result<usize> {
        let len = message.encoded_len();
        let mut target: &mut [u8] = self.reserve(len)?;
        message.encode(&mut target).map_err(io::Error::other)?;
        Ok(len)
    }
}

/// A view of a region's bytes that keeps the mapping alive.
struct RegionView {
    map: Arc<Mmap>,
    len: usize,
}

impl AsRef<[u8]> for RegionView {
    fn as_ref(&self) -> &[u8] {
        &self.map[..self.len]
    }
}

/// The side of a region that reads frames from it.
#[derive(Debug)]
pub struct RegionReader {
    file: File,
    map: Option<Arc<Mmap>>,
}

impl RegionReader {
    pub fn new(file: File) -> RegionReader {
        RegionReader { file, map: None }
    }

    pub fn file(&self) -> &File {
        &self.file
    }

    fn mapped(&mut self, len: usize) -> io::Result<Arc<Mmap>> {
        match &self.map {
            Some(map) if map.len() >= len => Ok(map.clone()),
            _ => {
                let size = self.file.metadata()?.len();
                if size < len as u64 {
                    return Err(io::Error::other(format!(
                        "shared frame of {len} bytes in a region of {size} bytes"
                    )));
                }
                // SAFETY: see RegionWriter::write; the writer does not change the region while
                // a frame it announced is being read.
                let map = Arc::new(unsafe { Mmap::map(&self.file)? });
                self.map = Some(map.clone());
                Ok(map)
            }
        }
    }

    /// The frame's bytes without copying them; valid until the writer's next frame.
    pub fn view(&mut self, len: usize) -> io::Result<Bytes> {
        let map = self.mapped(len)?;
        Ok(Bytes::from_owner(RegionView { map, len }))
    }

    /// A private copy of the frame's bytes, safe to keep after the writer's next frame.
    pub fn copy(&mut self, len: usize) -> io::Result<Bytes> {
        let map = self.mapped(len)?;
        Ok(Bytes::copy_from_slice(&map[..len]))
    }
}

/// The host's ends of a new executable's two regions.
pub struct HostRegions {
    pub requests: RegionWriter,
    pub replies: RegionReader,
}

impl HostRegions {
    pub fn create() -> io::Result<HostRegions> {
        Ok(HostRegions {
            requests: RegionWriter::new(memory_file("ninf-requests")?),
            replies: RegionReader::new(memory_file("ninf-replies")?),
        })
    }

    /// Makes the child inherit the regions as descriptors 3 and 4 and announces them.
    pub fn attach(&self, command: &mut std::process::Command) {
        use std::os::unix::process::CommandExt;
        let request = self.requests.file().as_raw_fd();
        let reply = self.replies.file().as_raw_fd();
        command.env(SHARED_ENV, format!("{REQUEST_FD},{REPLY_FD}"));
        // SAFETY: the closure runs in the child between fork and exec and calls only dup2
        // and fcntl, which are async-signal-safe. The reply descriptor is first moved out of
        // the way if it happens to be number 3.
        unsafe {
            command.pre_exec(move || {
                let mut reply = reply;
                if reply == REQUEST_FD {
                    reply = libc::fcntl(reply, libc::F_DUPFD_CLOEXEC, 10);
                    if reply < 0 {
                        return Err(io::Error::last_os_error());
                    }
                }
                for (from, to) in [(request, REQUEST_FD), (reply, REPLY_FD)] {
                    let result = if from == to {
                        // dup2 onto itself keeps close-on-exec: clear it instead.
                        libc::fcntl(to, libc::F_SETFD, 0)
                    } else {
                        libc::dup2(from, to)
                    };
                    if result < 0 {
                        return Err(io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
    }
}

/// The executable's ends, when its host provided them.
pub struct ExecutableRegions {
    pub requests: RegionReader,
    pub replies: RegionWriter,
}

impl ExecutableRegions {
    /// Takes descriptors 3 and 4 if `NINF_EXEC_SHARED` announces them.
    pub fn from_env() -> Option<ExecutableRegions> {
        let announced = std::env::var(SHARED_ENV).ok()?;
        if announced != format!("{REQUEST_FD},{REPLY_FD}") {
            return None;
        }
        // SAFETY: the host created these descriptors for this process alone and announced
        // them; this is the only place that takes ownership of them, once at start-up.
        let (requests, replies) =
            unsafe { (File::from_raw_fd(REQUEST_FD), File::from_raw_fd(REPLY_FD)) };
        Some(ExecutableRegions {
            requests: RegionReader::new(requests),
            replies: RegionWriter::new(replies),
        })
    }
}
