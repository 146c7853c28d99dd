//! Memory files lent on to an executable: a large input that already lies in memory a
//! client on the host shares (a proxy's client region, docs/bulk-protocol.md) is read by
//! the routine where it lies instead of being copied into the request region.
//!
//! The host and the executable share one more descriptor, a datagram socket (descriptor 6,
//! announced by `NINF_EXEC_LENT=6`). Just before it writes a request that names lent files
//! (`ExecRequest.lent_arrays`, `lent_regions`), the host sends each file as one datagram:
//! the call's id (8 bytes, little-endian) with the descriptor (`SCM_RIGHTS`). The
//! executable takes the request's files in order, passing over any left from an earlier
//! call, and maps each read-only.
//!
//! Mappings are kept, by file, for later calls (at most [`KEPT_MAPPINGS`], the least
//! recently used let go first): a client reuses its regions, and mapping 64 MiB anew would
//! fault in every page table entry each call, which costs about what the copy saved.

use std::collections::VecDeque;
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;

use bytes::Bytes;
use memmap2::Mmap;
use rustix::net::{
    AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags, SocketFlags, SocketType,
};

/// Descriptor number of the lent socket in the executable.
pub const LENT_FD: i32 = 6;

/// The environment variable that announces it.
pub const LENT_ENV: &str = "NINF_EXEC_LENT";

/// Lent files whose mappings an executable keeps between calls.
pub const KEPT_MAPPINGS: usize = 8;

/// A new socket pair: the host's end and the executable's (to become [`LENT_FD`]).
pub fn socket_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    let (host, child) = rustix::net::socketpair(
        AddressFamily::UNIX,
        SocketType::DGRAM,
        // The host's sends never block its runtime: a full queue fails the call instead.
        SocketFlags::CLOEXEC | SocketFlags::NONBLOCK,
        None,
    )?;
    Ok((host, child))
}

/// Sends `files` for call `call_id`, one datagram each, in order.
pub fn send(socket: BorrowedFd<'_>, call_id: u64, files: &[BorrowedFd<'_>]) -> io::Result<()> {
    let id = call_id.to_le_bytes();
    for file in files {
        let fds = [*file];
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
        let mut control = SendAncillaryBuffer::new(&mut space);
        control.push(SendAncillaryMessage::ScmRights(&fds));
        let iov = [io::IoSlice::new(&id)];
        rustix::net::sendmsg(socket, &iov, &mut control, SendFlags::NOSIGNAL)?;
    }
    Ok(())
}

/// One datagram: the call id it was sent for and the file it carried.
fn receive_one(socket: BorrowedFd<'_>) -> io::Result<Option<(u64, Option<OwnedFd>)>> {
    let mut id = [0u8; 8];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let mut iov = [io::IoSliceMut::new(&mut id)];
    let received = match rustix::net::recvmsg(
        socket,
        &mut iov,
        &mut control,
        RecvFlags::DONTWAIT | RecvFlags::CMSG_CLOEXEC,
    ) {
        Ok(received) => received,
        Err(rustix::io::Errno::AGAIN) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let mut file = None;
    for message in control.drain() {
        if let RecvAncillaryMessage::ScmRights(fds) = message {
            for fd in fds {
                file = Some(fd);
            }
        }
    }
    if received.bytes != id.len() {
        return Ok(Some((u64::MAX, file)));
    }
    Ok(Some((u64::from_le_bytes(id), file)))
}

/// A lent file as the executable keeps it: mapped read-only for inputs, and read-write for
/// the outputs the host asks for there, each mapping made at its first use.
#[derive(Debug)]
pub struct LentFile {
    file: std::fs::File,
    len: usize,
    read: std::sync::Mutex<Option<Arc<Mmap>>>,
    write: std::sync::Mutex<Option<Arc<memmap2::MmapRaw>>>,
}

impl LentFile {
    /// The read-only mapping.
    pub fn read(&self) -> Result<Arc<Mmap>, String> {
        let mut read = ninf_proto::sync::lock(&self.read);
        if let Some(map) = read.as_ref() {
            return Ok(map.clone());
        }
        // SAFETY: the host lends only memory files sealed against shrinking (checked when
        // their client handed them over), so every mapped byte stays backed. The client
        // leaves the bytes alone while the call that names them runs (its lease).
        let map = unsafe { Mmap::map(&self.file) };
        let map = Arc::new(map.map_err(|e| format!("cannot map a lent file: {e}"))?);
        *read = Some(map.clone());
        Ok(map)
    }

    /// The first byte of `bytes` bytes at `offset`, writable, for an output.
    pub fn output(&self, offset: u64, bytes: u64) -> Result<std::ptr::NonNull<u8>, String> {
        let end = offset
            .checked_add(bytes)
            .filter(|&end| end <= self.len as u64);
        if end.is_none() || bytes == 0 {
            return Err(format!(
                "bytes {offset}..{} lie outside the lent file of {} bytes",
                offset.saturating_add(bytes),
                self.len
            ));
        }
        let mut write = ninf_proto::sync::lock(&self.write);
        let map = match write.as_ref() {
            Some(map) => map.clone(),
            None => {
                let map = memmap2::MmapRaw::map_raw(&self.file)
                    .map_err(|e| format!("cannot map a lent file for writing: {e}"))?;
                let map = Arc::new(map);
                *write = Some(map.clone());
                map
            }
        };
        std::ptr::NonNull::new(map.as_mut_ptr().wrapping_add(offset as usize))
            .ok_or_else(|| "a null mapping".to_string())
    }
}

/// A kept lent file, known by its inode.
struct Kept {
    inode: (u64, u64),
    file: Arc<LentFile>,
}

/// The executable's end: receives a request's lent files and maps them, keeping mappings.
pub struct LentFiles {
    socket: OwnedFd,
    /// Most recently used last.
    kept: VecDeque<Kept>,
}

impl LentFiles {
    pub fn new(socket: OwnedFd) -> LentFiles {
        LentFiles {
            socket,
            kept: VecDeque::new(),
        }
    }

    /// The `count` files the host sent for call `call_id`, in order.
    pub fn receive(&mut self, call_id: u64, count: u32) -> Result<Vec<Arc<LentFile>>, String> {
        let mut maps = Vec::with_capacity(count as usize);
        while maps.len() < count as usize {
            let datagram = receive_one(self.socket.as_fd())
                .map_err(|e| format!("cannot receive a lent file: {e}"))?;
            match datagram {
                None => {
                    return Err(format!(
                        "the request names {count} lent files, but the host passed {}",
                        maps.len()
                    ));
                }
                // Left over from a call refused before it took its files.
                Some((id, _)) if id != call_id => continue,
                Some((_, None)) => return Err("a lent datagram without a file".into()),
                Some((_, Some(file))) => maps.push(self.map(file)?),
            }
        }
        Ok(maps)
    }

    /// The kept file of the same inode and size as `file`, or `file`, kept.
    fn map(&mut self, file: OwnedFd) -> Result<Arc<LentFile>, String> {
        let stat = rustix::fs::fstat(&file).map_err(|e| format!("a lent file: {e}"))?;
        let inode = (stat.st_dev, stat.st_ino);
        let len = usize::try_from(stat.st_size).map_err(|_| "a lent file's size".to_string())?;
        if let Some(at) = self
            .kept
            .iter()
            .position(|k| k.inode == inode && k.file.len == len)
        {
            let kept = self.kept.remove(at).ok_or("kept mapping")?;
            let file = kept.file.clone();
            self.kept.push_back(kept);
            return Ok(file);
        }
        let file = Arc::new(LentFile {
            file: std::fs::File::from(file),
            len,
            read: std::sync::Mutex::new(None),
            write: std::sync::Mutex::new(None),
        });
        self.kept.push_back(Kept {
            inode,
            file: file.clone(),
        });
        if self.kept.len() > KEPT_MAPPINGS {
            self.kept.pop_front();
        }
        Ok(file)
    }
}

/// Puts the request's lent arrays back among its arguments, read where they lie in the
/// files the host passed for it (`lent`, absent when the host gave no lent socket).
pub fn restore_lent_arrays(
    lent: Option<&mut LentFiles>,
    request: &mut ninf_proto::v1::ExecRequest,
) -> Result<Vec<Arc<LentFile>>, String> {
    if request.lent_arrays.is_empty() && request.lent_regions == 0 {
        return Ok(Vec::new());
    }
    let Some(lent) = lent else {
        return Err("the request names lent files, but this executable has no lent socket".into());
    };
    let files = lent.receive(request.call_id, request.lent_regions)?;
    for array in std::mem::take(&mut request.lent_arrays) {
        let parameter = array.parameter;
        let file = files.get(array.lent as usize).ok_or_else(|| {
            format!(
                "array of parameter {parameter} lies in lent file {} of {}",
                array.lent,
                files.len()
            )
        })?;
        let data = span(&file.read()?, array.offset, array.bytes)
            .map_err(|e| format!("array of parameter {parameter}: {e}"))?;
        let argument = request
            .arguments
            .get_mut(parameter as usize)
            .filter(|a| a.value.is_none())
            .ok_or_else(|| {
                format!(
                    "a lent array names argument {parameter}, which has a value or is not there"
                )
            })?;
        argument.value = Some(ninf_proto::v1::argument_value::Value::Array(
            ninf_proto::v1::Array {
                element_type: array.element_type,
                data,
            },
        ));
    }
    Ok(files)
}

/// The `bytes` bytes at `offset` of `map`, in place; an error names a span outside it.
pub fn span(map: &Arc<Mmap>, offset: u64, bytes: u64) -> Result<Bytes, String> {
    let end = offset
        .checked_add(bytes)
        .filter(|&end| end <= map.len() as u64);
    match end {
        Some(end) if bytes > 0 => Ok(Bytes::from_owner(crate::view::RegionView {
            map: map.clone(),
            start: offset as usize,
            end: end as usize,
        })),
        _ => Err(format!(
            "bytes {offset}..{} lie outside the lent file of {} bytes",
            offset.saturating_add(bytes),
            map.len()
        )),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn memory_file(bytes: &[u8]) -> std::fs::File {
        let file = crate::shared::memory_file("lent-test").unwrap();
        std::io::Write::write_all(&mut &file, bytes).unwrap();
        file
    }

    #[test]
    fn files_sent_for_a_call_arrive_in_order_mapped_and_leftovers_are_passed_over() {
        let (host, child) = socket_pair().unwrap();
        let mut lent = LentFiles::new(child);
        let (a, b) = (memory_file(b"first file"), memory_file(b"second"));
        // A call refused before it took its file leaves it on the socket.
        send(host.as_fd(), 6, &[a.as_fd()]).unwrap();
        send(host.as_fd(), 7, &[b.as_fd(), a.as_fd()]).unwrap();
        let files = lent.receive(7, 2).unwrap();
        let maps: Vec<_> = files.iter().map(|f| f.read().unwrap()).collect();
        assert_eq!(&maps[0][..], b"second");
        assert_eq!(&maps[1][..], b"first file");
        assert_eq!(&span(&maps[1], 6, 4).unwrap()[..], b"file");
        assert_eq!(
            span(&maps[1], 6, 5).unwrap_err(),
            "bytes 6..11 lie outside the lent file of 10 bytes"
        );
        // The same file again is the kept mapping, not a new one.
        send(host.as_fd(), 8, &[a.as_fd()]).unwrap();
        let again = lent.receive(8, 1).unwrap();
        assert!(Arc::ptr_eq(&again[0].read().unwrap(), &maps[1]));
        // An output written through the file lands in the file's bytes.
        let place = again[0].output(0, 5).unwrap();
        // SAFETY: five bytes of a writable mapping of a ten-byte file.
        unsafe { std::ptr::copy_nonoverlapping(b"FIRST".as_ptr(), place.as_ptr(), 5) };
        assert_eq!(&maps[1][..], b"FIRST file");
        assert_eq!(
            again[0].output(8, 4).unwrap_err(),
            "bytes 8..12 lie outside the lent file of 10 bytes"
        );
    }

    #[test]
    fn a_request_naming_more_files_than_were_passed_is_refused_by_count() {
        let (host, child) = socket_pair().unwrap();
        let mut lent = LentFiles::new(child);
        let a = memory_file(b"only one");
        send(host.as_fd(), 3, &[a.as_fd()]).unwrap();
        assert_eq!(
            lent.receive(3, 2).unwrap_err(),
            "the request names 2 lent files, but the host passed 1"
        );
    }

    #[test]
    fn at_most_the_kept_number_of_mappings_stay() {
        let (host, child) = socket_pair().unwrap();
        let mut lent = LentFiles::new(child);
        let files: Vec<_> = (0..KEPT_MAPPINGS + 2)
            .map(|i| memory_file(&[i as u8; 16]))
            .collect();
        for (i, file) in files.iter().enumerate() {
            send(host.as_fd(), i as u64, &[file.as_fd()]).unwrap();
            lent.receive(i as u64, 1).unwrap();
        }
        assert_eq!(lent.kept.len(), KEPT_MAPPINGS);
    }
}
