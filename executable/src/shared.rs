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
use ninf_proto::v1;
use prost::Message;

use crate::view::RegionView;

/// Frames at least this large go through shared memory.
pub const SHARED_THRESHOLD: usize = 256 << 10;

/// Arrays at least this large travel beside the message, as `RegionArray`s, where the
/// receiver can use them in place.
pub const REGION_ARRAY_THRESHOLD: usize = 64 << 10;

/// Where region arrays start: a cache line, so every element type is aligned.
pub const REGION_ALIGN: usize = 64;

/// The offset of a region array not placed yet. A zero would not be encoded at all; this
/// takes the same 9 bytes as any real offset, so a message's length can be measured before
/// its arrays are placed after it.
pub const UNPLACED: u64 = u64::MAX;

/// `offset` rounded up to the next multiple of [`REGION_ALIGN`].
pub fn region_align(offset: usize) -> usize {
    offset.div_ceil(REGION_ALIGN) * REGION_ALIGN
}

/// The environment variable that tells an executable its regions' descriptors.
pub const SHARED_ENV: &str = "NINF_EXEC_SHARED";

/// Descriptor numbers of the request and reply regions in the executable.
pub const REQUEST_FD: i32 = 3;
pub const REPLY_FD: i32 = 4;

/// Descriptor number of the host's store region in the executable, when the host has one
/// (`NINF_EXEC_SHARED=3,4,5`).
pub const STORE_FD: i32 = 5;

/// Where a host's store region is mapped in the host. An array whose bytes lie inside it is
/// named to the executable by its offset there (`ArrayRegion::Store`) instead of being copied
/// into the request region; the executable maps those pages itself.
#[derive(Debug, Clone, Copy)]
pub struct StoreWindow {
    base: usize,
    len: usize,
}

impl StoreWindow {
    /// The window of a mapping of the store region's file from its start: `len` bytes at
    /// `base`. Only addresses are compared with it; nothing is read through it.
    pub fn new(base: *const u8, len: usize) -> StoreWindow {
        StoreWindow {
            base: base as usize,
            len,
        }
    }

    /// The offset in the store region of `data`, if all of it lies there.
    pub fn offset_of(&self, data: &[u8]) -> Option<u64> {
        let start = data.as_ptr() as usize;
        let end = start.checked_add(data.len())?;
        let inside = !data.is_empty() && start >= self.base && end <= self.base + self.len;
        inside.then(|| (start - self.base) as u64)
    }
}

/// The executable's view of its host's store region: one read-only mapping of the whole
/// region for inputs and one writable mapping for the outputs the host asks for there, each
/// made at its first use and kept. Mapping arrays call by call would cost more page-table
/// work than the copies it saves (about 1 ms to map 8 MB, against 0.5 ms to copy it), while
/// kept mappings touch each page once. A routine that writes into an input still meets
/// read-only pages; one that writes past the end of an output can reach other stored
/// arrays, as it can reach its own memory: module executables are the server's own code.
#[derive(Debug)]
pub struct StoreMapper {
    file: File,
    inputs: RegionReader,
    outputs: Option<MmapMut>,
}

impl StoreMapper {
    pub fn new(file: File) -> io::Result<StoreMapper> {
        Ok(StoreMapper {
            inputs: RegionReader::new(file.try_clone()?),
            file,
            outputs: None,
        })
    }

    fn checked(&self, offset: u64, bytes: u64) -> io::Result<()> {
        let size = self.file.metadata()?.len();
        match offset.checked_add(bytes) {
            Some(end) if end <= size && bytes > 0 => Ok(()),
            _ => Err(io::Error::other(format!(
                "bytes {offset}..{} lie outside the store region of {size} bytes",
                offset.saturating_add(bytes)
            ))),
        }
    }

    /// An input array's bytes, read-only where they lie. (The host does not change a
    /// stored array while a call that reads it runs: it keeps the array alive and never
    /// writes stored arrays in place.)
    pub fn input(&mut self, offset: u64, bytes: u64) -> io::Result<Bytes> {
        self.checked(offset, bytes)?;
        self.inputs.span(offset, bytes, true)
    }

    /// The first byte of the place the host reserved for an output, writable.
    pub fn output(&mut self, offset: u64, bytes: u64) -> io::Result<std::ptr::NonNull<u8>> {
        self.checked(offset, bytes)?;
        let size = self.file.metadata()?.len();
        if self
            .outputs
            .as_ref()
            .is_none_or(|m| (m.len() as u64) < size)
        {
            // SAFETY: the host reserves each output's bytes for one call alone and reads
            // them only after its reply; nothing else writes them meanwhile.
            self.outputs = Some(unsafe { MmapMut::map_mut(&self.file)? });
        }
        let map = self
            .outputs
            .as_mut()
            .ok_or_else(|| io::Error::other("store region not mapped"))?;
        let start = map.as_mut_ptr().wrapping_add(offset as usize);
        std::ptr::NonNull::new(start).ok_or_else(|| io::Error::other("null mapping"))
    }
}

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

    /// Writes `request` with its large arrays moved beside the message (`region_arrays`,
    /// 64-byte aligned, so the executable reads them in place); returns the message's length,
    /// the frame's. Each array is copied once, as encoding it inline would copy it.
    pub fn write_request(&mut self, request: &mut v1::ExecRequest) -> io::Result<usize> {
        self.write_request_with_store(request, None)
            .map(|(len, _)| len)
    }

    /// As [`RegionWriter::write_request`], but an array whose bytes lie in the host's store
    /// region (`store`) is named there by its offset, not copied. Returns the frame's length
    /// and those arrays' bytes, which the caller keeps until the reply has come back: the
    /// executable reads them where they are.
    pub fn write_request_with_store(
        &mut self,
        request: &mut v1::ExecRequest,
        store: Option<&StoreWindow>,
    ) -> io::Result<(usize, Vec<Bytes>)> {
        let (moved, pinned) = move_out_large_arrays(request, store);
        let len = request.encoded_len();
        let end = place_region_arrays(len, &mut request.region_arrays);
        let region = self.reserve(end)?;
        let own = request.region_arrays.iter().filter(|a| !in_store(a));
        for (array, data) in own.zip(&moved) {
            ninf_proto::copy::copy(&mut region[array.offset as usize..][..data.len()], data);
        }
        request
            .encode(&mut &mut region[..len])
            .map_err(io::Error::other)?;
        Ok((len, pinned))
    }
}

/// Whether a region array lies in the host's store region rather than the sender's own.
pub fn in_store(array: &v1::RegionArray) -> bool {
    array.region == v1::ArrayRegion::Store as i32
}

/// Whether a region array lies in the sender's own region (not the store region, nor a
/// lent file).
pub fn in_own(array: &v1::RegionArray) -> bool {
    array.region == v1::ArrayRegion::Own as i32
}

/// Takes the data of every array argument of at least [`REGION_ARRAY_THRESHOLD`] bytes out
/// of `request`, describing each in `region_arrays`: those in `store` at their offset there
/// (returned second, to be kept alive), the others with offsets still to be placed in the
/// request region (returned first, to be copied there).
fn move_out_large_arrays(
    request: &mut v1::ExecRequest,
    store: Option<&StoreWindow>,
) -> (Vec<Bytes>, Vec<Bytes>) {
    use v1::argument_value::Value;
    let (mut moved, mut pinned) = (Vec::new(), Vec::new());
    request.region_arrays.clear();
    for (index, argument) in request.arguments.iter_mut().enumerate() {
        let large = matches!(&argument.value,
            Some(Value::Array(a)) if a.data.len() >= REGION_ARRAY_THRESHOLD);
        if !large {
            continue;
        }
        if let Some(Value::Array(array)) = argument.value.take() {
            let stored = store.and_then(|s| s.offset_of(&array.data));
            request.region_arrays.push(v1::RegionArray {
                parameter: index as u32,
                element_type: array.element_type,
                offset: stored.unwrap_or(UNPLACED),
                bytes: array.data.len() as u64,
                region: if stored.is_some() {
                    v1::ArrayRegion::Store
                } else {
                    v1::ArrayRegion::Own
                }
                .into(),
                ..Default::default()
            });
            if stored.is_some() {
                pinned.push(array.data);
            } else {
                moved.push(array.data);
            }
        }
    }
    (moved, pinned)
}

/// Gives each array an aligned offset after a message of `message_len` bytes (measured with
/// the arrays' offsets [`UNPLACED`]), in order; returns where the last one ends. Arrays in
/// the store region keep the offsets they have there.
pub fn place_region_arrays(message_len: usize, arrays: &mut [v1::RegionArray]) -> usize {
    let mut end = message_len;
    for array in arrays.iter_mut().filter(|a| in_own(a)) {
        let offset = region_align(end);
        array.offset = offset as u64;
        end = offset + array.bytes as usize;
    }
    end
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
        Ok(Bytes::from_owner(RegionView {
            map,
            start: 0,
            end: len,
        }))
    }

    /// The `bytes` bytes at `offset`, in place, or copied out unless `in_place`; an error
    /// names a span outside the region.
    pub fn span(&mut self, offset: u64, bytes: u64, in_place: bool) -> io::Result<Bytes> {
        let outside = || {
            io::Error::other(format!(
                "bytes {offset}..{} lie outside the shared region",
                offset.saturating_add(bytes)
            ))
        };
        let end = offset.checked_add(bytes).ok_or_else(outside)?;
        let (start, end) = (
            usize::try_from(offset).map_err(|_| outside())?,
            usize::try_from(end).map_err(|_| outside())?,
        );
        let map = self.mapped(end).map_err(|_| outside())?;
        if !in_place {
            return Ok(Bytes::copy_from_slice(&map[start..end]));
        }
        Ok(Bytes::from_owner(RegionView { map, start, end }))
    }

    /// A private copy of the frame's bytes, safe to keep after the writer's next frame.
    pub fn copy(&mut self, len: usize) -> io::Result<Bytes> {
        let map = self.mapped(len)?;
        Ok(Bytes::copy_from_slice(&map[..len]))
    }
}

/// The host's ends of a new executable's regions, its store region if it has one, and the
/// lent socket ([`crate::lent`]) when the host lends files on.
pub struct HostRegions {
    pub requests: RegionWriter,
    pub replies: RegionReader,
    store: Option<File>,
    /// The host's end, and the executable's until it is spawned.
    lent: Option<(OwnedFd, Option<OwnedFd>)>,
}

impl HostRegions {
    pub fn create() -> io::Result<HostRegions> {
        Self::create_with_store(None)
    }

    /// Regions for an executable that also gets `store` (the host's store region) as
    /// descriptor 5.
    pub fn create_with_store(store: Option<&File>) -> io::Result<HostRegions> {
        Ok(HostRegions {
            requests: RegionWriter::new(memory_file("ninf-requests")?),
            replies: RegionReader::new(memory_file("ninf-replies")?),
            store: store.map(File::try_clone).transpose()?,
            lent: None,
        })
    }

    /// Gives the executable a lent socket too (descriptor 6, `NINF_EXEC_LENT=6`), over
    /// which [`HostRegions::lend`] passes files for a request.
    pub fn with_lent_socket(mut self) -> io::Result<HostRegions> {
        let (host, child) = crate::lent::socket_pair()?;
        self.lent = Some((host, Some(child)));
        Ok(self)
    }

    /// Passes `files` for the request of call `call_id`, to be sent next; an error when the
    /// executable was given no lent socket.
    pub fn lend(&self, call_id: u64, files: &[std::os::fd::BorrowedFd<'_>]) -> io::Result<()> {
        use std::os::fd::AsFd;
        let (host, _) = self
            .lent
            .as_ref()
            .ok_or_else(|| io::Error::other("this executable has no lent socket"))?;
        crate::lent::send(host.as_fd(), call_id, files)
    }

    /// Whether files can be lent to the executable.
    pub fn lends(&self) -> bool {
        self.lent.is_some()
    }

    /// Closes the host's copy of the executable's lent end, once the executable has it:
    /// then an executable that dies leaves nobody to queue files for.
    pub fn spawned(&mut self) {
        if let Some(lent) = self.lent.as_mut() {
            lent.1 = None;
        }
    }

    /// Makes the child inherit the regions as descriptors 3 and 4 (and the store region as
    /// 5) and announces them.
    pub fn attach(&self, command: &mut std::process::Command) {
        use std::os::unix::process::CommandExt;
        let mut sources = vec![
            self.requests.file().as_raw_fd(),
            self.replies.file().as_raw_fd(),
        ];
        sources.extend(self.store.as_ref().map(File::as_raw_fd));
        let mut targets = vec![REQUEST_FD, REPLY_FD];
        targets.extend(self.store.as_ref().map(|_| STORE_FD));
        let announced: Vec<String> = targets.iter().map(i32::to_string).collect();
        command.env(SHARED_ENV, announced.join(","));
        if let Some((_, Some(child))) = &self.lent {
            sources.push(child.as_raw_fd());
            targets.push(crate::lent::LENT_FD);
            command.env(crate::lent::LENT_ENV, crate::lent::LENT_FD.to_string());
        }
        // SAFETY: the closure runs in the child between fork and exec and calls only fcntl,
        // dup2 and close, which are async-signal-safe. Every source is first copied above the
        // targets, so that no dup2 overwrites a source not yet moved.
        unsafe {
            command.pre_exec(move || {
                let mut high = [0; 4];
                for (slot, &source) in high.iter_mut().zip(&sources) {
                    *slot = libc::fcntl(source, libc::F_DUPFD_CLOEXEC, 10);
                    if *slot < 0 {
                        return Err(io::Error::last_os_error());
                    }
                }
                for (&from, &to) in high.iter().zip(&targets).take(sources.len()) {
                    if libc::dup2(from, to) < 0 {
                        return Err(io::Error::last_os_error());
                    }
                    libc::close(from);
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
    /// The host's store region, when it has one.
    pub store: Option<StoreMapper>,
    /// Files the host lends on, when it gave a lent socket.
    pub lent: Option<crate::lent::LentFiles>,
}

impl ExecutableRegions {
    /// Takes descriptors 3 and 4 (and 5) if `NINF_EXEC_SHARED` announces them.
    pub fn from_env() -> Option<ExecutableRegions> {
        let announced = std::env::var(SHARED_ENV).ok()?;
        let with_store = if announced == format!("{REQUEST_FD},{REPLY_FD}") {
            false
        } else if announced == format!("{REQUEST_FD},{REPLY_FD},{STORE_FD}") {
            true
        } else {
            return None;
        };
        // SAFETY: the host created these descriptors for this process alone and announced
        // them; this is the only place that takes ownership of them, once at start-up.
        let (requests, replies) =
            unsafe { (File::from_raw_fd(REQUEST_FD), File::from_raw_fd(REPLY_FD)) };
        // SAFETY: as above, for the store region's descriptor.
        let store = with_store
            .then(|| StoreMapper::new(unsafe { File::from_raw_fd(STORE_FD) }).ok())
            .flatten();
        let lent = (std::env::var(crate::lent::LENT_ENV).ok()
            == Some(crate::lent::LENT_FD.to_string()))
        .then(|| {
            // SAFETY: as above, for the lent socket's descriptor.
            crate::lent::LentFiles::new(unsafe { OwnedFd::from_raw_fd(crate::lent::LENT_FD) })
        });
        Some(ExecutableRegions {
            requests: RegionReader::new(requests),
            replies: RegionWriter::new(replies),
            store,
            lent,
        })
    }
}

/// Puts the bytes of the `region` arrays back into `arguments` (as the arrays they describe),
/// read from `region` in place or copied out. Used by an executable on its requests
/// (`region_arrays`) and by a host on its replies (`region_outputs`).
pub fn restore_region_arrays(
    region: &mut RegionReader,
    arrays: Vec<v1::RegionArray>,
    in_place: bool,
    mut restore: impl FnMut(u32, v1::Array),
) -> Result<(), String> {
    for array in arrays {
        let data = region
            .span(array.offset, array.bytes, in_place)
            .map_err(|e| format!("array of parameter {}: {e}", array.parameter))?;
        let value = v1::Array {
            element_type: array.element_type,
            data,
        };
        restore(array.parameter, value);
    }
    Ok(())
}

/// A request's region arrays back in its arguments, in place (for an executable); those in
/// the store region are read from `store`, except an INOUT input the host wrote where the
/// request asks for its output (the same entry in `store_outputs`): that one stays in
/// `region_arrays`, for the call's layout. Each must name an argument that carries no value.
pub fn restore_request_arrays(
    region: &mut RegionReader,
    store: Option<&mut StoreMapper>,
    request: &mut v1::ExecRequest,
) -> Result<(), String> {
    let arrays = std::mem::take(&mut request.region_arrays);
    let arguments = &mut request.arguments;
    for array in &arrays {
        let parameter = array.parameter;
        match arguments.get(parameter as usize) {
            Some(argument) if argument.value.is_none() => {}
            Some(_) => {
                return Err(format!(
                    "argument {parameter} has a value and a region array"
                ));
            }
            None => {
                return Err(format!(
                    "a region array names argument {parameter} of {}",
                    arguments.len()
                ));
            }
        }
    }
    let (stored, own): (Vec<_>, Vec<_>) = arrays.into_iter().partition(in_store);
    // An input the host wrote where it asked for the same parameter's output stays there:
    // the routine updates it in place (see `OutputLayout::plan`).
    let (in_place, stored): (Vec<_>, Vec<_>) = stored
        .into_iter()
        .partition(|a| request.store_outputs.contains(a));
    request.region_arrays = in_place;
    let mut store = store;
    for array in stored {
        let parameter = array.parameter;
        let data = match store.as_deref_mut() {
            Some(store) => store
                .input(array.offset, array.bytes)
                .map_err(|e| format!("array of parameter {parameter}: {e}"))?,
            None => {
                return Err(format!(
                    "array of parameter {parameter} lies in the host's store region, which this executable was not given"
                ));
            }
        };
        if let Some(argument) = arguments.get_mut(parameter as usize) {
            argument.value = Some(v1::argument_value::Value::Array(v1::Array {
                element_type: array.element_type,
                data,
            }));
        }
    }
    restore_region_arrays(region, own, true, |parameter, array| {
        if let Some(argument) = arguments.get_mut(parameter as usize) {
            argument.value = Some(v1::argument_value::Value::Array(array));
        }
    })
}

/// A reply's region outputs back among its outputs, in parameter order (for a host). Those
/// in the store region are left in `region_outputs`, for the host to match with what it
/// reserved.
pub fn restore_reply_outputs(
    region: &mut RegionReader,
    reply: &mut v1::ExecReply,
    in_place: bool,
) -> Result<(), String> {
    let Some(v1::exec_reply::Result::Success(success)) = reply.result.as_mut() else {
        return Ok(());
    };
    if success.region_outputs.is_empty() {
        return Ok(());
    }
    // Outputs in the store region or a lent file stay described: only the host knows what
    // it reserved or lent.
    let (arrays, stored): (Vec<_>, Vec<_>) = std::mem::take(&mut success.region_outputs)
        .into_iter()
        .partition(in_own);
    success.region_outputs = stored;
    let outputs = &mut success.outputs;
    restore_region_arrays(region, arrays, in_place, |parameter, array| {
        outputs.push(v1::ExecOutput {
            parameter,
            value: Some(v1::ArgumentValue {
                value: Some(v1::argument_value::Value::Array(array)),
            }),
        });
    })?;
    outputs.sort_by_key(|o| o.parameter);
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use v1::argument_value::Value;

    fn array(bytes: usize, seed: u8) -> v1::ArgumentValue {
        let data: Vec<u8> = (0..bytes).map(|i| (i as u8).wrapping_mul(seed)).collect();
        v1::ArgumentValue {
            value: Some(Value::Array(v1::Array {
                element_type: v1::ElementType::Double as i32,
                data: data.into(),
            })),
        }
    }

    #[test]
    fn large_arrays_go_beside_the_message_aligned_and_come_back_whole() {
        let file = memory_file("test").unwrap();
        let mut writer = RegionWriter::new(file.try_clone().unwrap());
        let mut reader = RegionReader::new(file);
        let arguments = vec![
            array(REGION_ARRAY_THRESHOLD + 8, 3),
            v1::ArgumentValue {
                value: Some(Value::IntValue(7)),
            },
            array(64, 5),
            array(3 * REGION_ARRAY_THRESHOLD, 11),
        ];
        let mut request = v1::ExecRequest {
            call_id: 9,
            function: "f".into(),
            arguments: arguments.clone(),
            ..Default::default()
        };
        let len = writer.write_request(&mut request).unwrap();

        let mut received = v1::ExecRequest::decode(reader.view(len).unwrap()).unwrap();
        let placed: Vec<(u32, u64)> = received
            .region_arrays
            .iter()
            .map(|a| (a.parameter, a.offset))
            .collect();
        assert_eq!(placed.len(), 2, "only the two large arrays go beside");
        assert_eq!((placed[0].0, placed[1].0), (0, 3));
        assert!(
            placed[0].1 >= len as u64,
            "the first array starts after the message"
        );
        assert!(
            placed
                .iter()
                .all(|(_, offset)| offset % REGION_ALIGN as u64 == 0)
        );
        restore_request_arrays(&mut reader, None, &mut received).unwrap();
        for (index, (got, sent)) in received.arguments.iter().zip(&arguments).enumerate() {
            assert!(got == sent, "argument {index} came back different");
        }
        assert_eq!(received.arguments.len(), arguments.len());
    }
}
