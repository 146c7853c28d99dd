//! The store region: one memory file per server that holds its large stored arrays, shared
//! with every executable it starts (descriptor 5, docs/executable-protocol.md). A call's
//! input kept here is named to the executable by its offset and read where it lies, and an
//! output the call keeps is written here by the routine itself: a stored array crosses no
//! copy between the routine that wrote it and the routine that reads it on this server.
//!
//! The file is as long as the region's capacity from the start. Its pages cost memory only
//! once written, and the space of a freed array is handed back to the kernel (a hole punched
//! in the file) once more than [`KEEP_FREED`] bytes of freed space stay written, so that a
//! burst of large arrays does not pin its memory while the next calls find pages already
//! faulted in. Space is handed out first-fit in whole pages.

use std::collections::BTreeMap;
use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use ninf_executable::shared::{REGION_ARRAY_THRESHOLD, StoreWindow};

/// Space is reserved in whole pages, so that each array can be mapped on its own.
const PAGE: u64 = 4096;

/// Freed space kept written (its pages resident) for the next arrays.
const KEEP_FREED: u64 = 256 << 20;

/// The most a region's file and mapping may span (address space, not memory).
const MAX_CAPACITY: u64 = 64 << 30;

/// A server's store region.
pub struct StoreRegion {
    file: File,
    map: memmap2::MmapRaw,
    capacity: u64,
    free: Mutex<FreeSpace>,
}

impl std::fmt::Debug for StoreRegion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreRegion")
            .field("capacity", &self.capacity)
            .finish_non_exhaustive()
    }
}

/// The region's free ranges, by offset, coalesced.
#[derive(Debug)]
struct FreeSpace {
    ranges: BTreeMap<u64, u64>,
    /// Freed bytes whose pages were left written, about (see [`KEEP_FREED`]).
    written: u64,
    reserved: u64,
}

impl FreeSpace {
    /// First fit: the lowest offset with room for `len` bytes.
    fn take(&mut self, len: u64) -> Option<u64> {
        let (&offset, &size) = self.ranges.iter().find(|&(_, &size)| size >= len)?;
        self.ranges.remove(&offset);
        if size > len {
            self.ranges.insert(offset + len, size - len);
        }
        self.written = self.written.saturating_sub(len);
        self.reserved += len;
        Some(offset)
    }

    /// Gives a range back, merged with its free neighbours; returns whether its pages should
    /// be handed back to the kernel.
    fn give_back(&mut self, mut offset: u64, mut len: u64) -> bool {
        self.reserved = self.reserved.saturating_sub(len);
        let punch = self.written + len > KEEP_FREED;
        if !punch {
            self.written += len;
        }
        let (start, size) = (offset, len);
        if let Some((&before, &before_len)) = self.ranges.range(..start).next_back()
            && before + before_len == start
        {
            self.ranges.remove(&before);
            offset = before;
            len += before_len;
        }
        if let Some(&after_len) = self.ranges.get(&(start + size)) {
            self.ranges.remove(&(start + size));
            len += after_len;
        }
        self.ranges.insert(offset, len);
        punch
    }
}

impl StoreRegion {
    /// A region of up to `capacity` bytes (rounded up to whole pages, at most 64 GiB).
    pub fn create(capacity: u64) -> std::io::Result<Arc<StoreRegion>> {
        let capacity = capacity.clamp(PAGE, MAX_CAPACITY).div_ceil(PAGE) * PAGE;
        let file = sealed_file(capacity)?;
        let map = memmap2::MmapRaw::map_raw(&file)?;
        Ok(Arc::new(StoreRegion {
            file,
            map,
            capacity,
            free: Mutex::new(FreeSpace {
                ranges: BTreeMap::from([(0, capacity)]),
                written: 0,
                reserved: 0,
            }),
        }))
    }

    /// The file executables get as descriptor 5.
    pub fn file(&self) -> &File {
        &self.file
    }

    /// Where the region lies in this process, to recognise arrays stored in it.
    pub fn window(&self) -> StoreWindow {
        StoreWindow::new(self.map.as_ptr(), self.capacity as usize)
    }

    /// Bytes reserved now (whole pages).
    pub fn reserved(&self) -> u64 {
        ninf_proto::sync::lock(&self.free).reserved
    }

    /// Room for `bytes` bytes, or `None` when the region has none left.
    pub fn reserve(self: &Arc<Self>, bytes: usize) -> Option<Reservation> {
        let len = (bytes as u64).max(1).div_ceil(PAGE) * PAGE;
        let offset = ninf_proto::sync::lock(&self.free).take(len)?;
        Some(Reservation {
            region: self.clone(),
            offset,
            len,
            bytes,
        })
    }

    /// A copy of `data` in the region, or `None` when it has no room.
    pub fn copy_in(self: &Arc<Self>, data: &[u8]) -> Option<Bytes> {
        let mut reservation = self.reserve(data.len())?;
        reservation.as_mut_slice().copy_from_slice(data);
        Some(reservation.into_bytes())
    }

    fn release(&self, offset: u64, len: u64) {
        let punch = ninf_proto::sync::lock(&self.free).give_back(offset, len);
        if punch {
            // SAFETY: fallocate only changes the file's allocation; the range is free, so no
            // array and no mapping in use reads it.
            let result = unsafe {
                libc::fallocate(
                    self.file.as_raw_fd(),
                    libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                    offset as libc::off_t,
                    len as libc::off_t,
                )
            };
            if result != 0 {
                tracing::debug!(offset, len, error = %std::io::Error::last_os_error(), "cannot free store pages");
            }
        }
    }
}

/// The region's memory file, `capacity` bytes long and sealed against shrinking and growing:
/// a server of this host it is lent to ([`super::lending`]) maps it whole, and a mapping of
/// a file that shrank would fault. Punching holes (freed pages) stays allowed.
fn sealed_file(capacity: u64) -> std::io::Result<File> {
    let name = c"ninf-store";
    // SAFETY: memfd_create reads the NUL-terminated name and returns a new descriptor (or -1),
    // which is owned by the File from here on.
    let fd =
        unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh descriptor that nothing else owns.
    let file = File::from(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) });
    file.set_len(capacity)?;
    let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
    // SAFETY: fcntl on a descriptor this function owns; F_ADD_SEALS takes an int.
    if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_ADD_SEALS, seals) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(file)
}

/// Room in the store region for one array; given back when dropped (with every `Bytes`
/// made from it).
#[derive(Debug)]
pub struct Reservation {
    region: Arc<StoreRegion>,
    offset: u64,
    len: u64,
    bytes: usize,
}

impl Reservation {
    /// Where the array starts in the region.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// The array's length in bytes.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    fn start(&self) -> *mut u8 {
        self.region
            .map
            .as_mut_ptr()
            .wrapping_add(self.offset as usize)
    }

    /// The reserved bytes, to fill.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: the range lies inside the mapping, and reservations never overlap, so this
        // is the only reference to it.
        unsafe { std::slice::from_raw_parts_mut(self.start(), self.bytes) }
    }

    /// The array as bytes that keep its room reserved while any clone of them lives.
    pub fn into_bytes(self) -> Bytes {
        Bytes::from_owner(Stored(self))
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.region.release(self.offset, self.len);
    }
}

/// An array arriving in chunks (`Storage.Put`): received straight into the store region
/// when its length is said up front and it is large enough to be read in place, else
/// gathered on the heap and copied into the region at the end if it is that large (once,
/// where every later call on this server and the host's other servers read it in place).
#[derive(Debug)]
pub enum Arriving {
    Region { room: Reservation, filled: usize },
    Heap(bytes::BytesMut),
}

impl Arriving {
    /// Room for an array of `total` bytes (0: not said).
    pub fn new(region: Option<&Arc<StoreRegion>>, total: u64) -> Arriving {
        let large = total >= REGION_ARRAY_THRESHOLD as u64;
        let room = region
            .filter(|_| large)
            .and_then(|region| region.reserve(usize::try_from(total).ok()?));
        match room {
            Some(room) => Arriving::Region { room, filled: 0 },
            None => Arriving::Heap(bytes::BytesMut::new()),
        }
    }

    /// Bytes received so far.
    pub fn len(&self) -> usize {
        match self {
            Arriving::Region { filled, .. } => *filled,
            Arriving::Heap(data) => data.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Appends a chunk; an error past the length said up front.
    pub fn extend(&mut self, chunk: &[u8]) -> Result<(), String> {
        match self {
            Arriving::Region { room, filled } => {
                let total = room.bytes();
                let end = filled.saturating_add(chunk.len());
                let Some(place) = room.as_mut_slice().get_mut(*filled..end) else {
                    return Err(format!(
                        "more than the {total} bytes the first chunk announced"
                    ));
                };
                place.copy_from_slice(chunk);
                *filled = end;
            }
            Arriving::Heap(data) => data.extend_from_slice(chunk),
        }
        Ok(())
    }

    /// The place of the next `len` bytes, counted as received: the caller fills it at once
    /// (reading it from a socket, say) or drops the whole array. An error past the length
    /// said up front.
    pub fn take_place(&mut self, len: usize) -> Result<&mut [u8], String> {
        match self {
            Arriving::Region { room, filled } => {
                let total = room.bytes();
                let start = *filled;
                let end = start.saturating_add(len);
                if end > total {
                    return Err(format!("more than the {total} bytes announced"));
                }
                *filled = end;
                room.as_mut_slice()
                    .get_mut(start..end)
                    .ok_or_else(|| format!("more than the {total} bytes announced"))
            }
            Arriving::Heap(data) => {
                let start = data.len();
                data.resize(start.saturating_add(len), 0);
                Ok(&mut data[start..])
            }
        }
    }

    /// The whole array, and whether it was copied into the region at the end; an error when
    /// fewer bytes came than announced.
    pub fn finish(self, region: Option<&Arc<StoreRegion>>) -> Result<(Bytes, bool), String> {
        match self {
            Arriving::Region { room, filled } if filled == room.bytes() => {
                Ok((room.into_bytes(), false))
            }
            Arriving::Region { room, filled } => Err(format!(
                "{filled} bytes came of the {} the first chunk announced",
                room.bytes()
            )),
            Arriving::Heap(data) if data.len() >= REGION_ARRAY_THRESHOLD => {
                match region.and_then(|region| region.copy_in(&data)) {
                    Some(stored) => Ok((stored, true)),
                    None => Ok((data.freeze(), false)),
                }
            }
            Arriving::Heap(data) => Ok((data.freeze(), false)),
        }
    }
}

/// A filled reservation, read-only from here on.
struct Stored(Reservation);

impl AsRef<[u8]> for Stored {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: as in `as_mut_slice`; nothing writes a reservation once its bytes are made.
        unsafe { std::slice::from_raw_parts(self.0.start(), self.0.bytes) }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn arrays_get_whole_pages_first_fit_and_give_them_back_merged() {
        let region = StoreRegion::create(16 * PAGE).unwrap();
        let a = region.reserve(100).unwrap();
        let b = region.reserve(PAGE as usize + 1).unwrap();
        let c = region.reserve(PAGE as usize).unwrap();
        assert_eq!((a.offset(), b.offset(), c.offset()), (0, PAGE, 3 * PAGE));
        assert_eq!(region.reserved(), 4 * PAGE);
        drop(a);
        drop(b);
        // The first three pages are one free range again: a three-page array fits there.
        let d = region.reserve(3 * PAGE as usize).unwrap();
        assert_eq!(d.offset(), 0);
        assert!(
            region.reserve(13 * PAGE as usize).is_none(),
            "12 pages are left"
        );
        let e = region.reserve(12 * PAGE as usize).unwrap();
        assert_eq!(e.offset(), 4 * PAGE);
        drop((c, d, e));
        assert_eq!(region.reserved(), 0);
        assert_eq!(region.reserve(16 * PAGE as usize).unwrap().offset(), 0);
    }

    #[test]
    fn stored_bytes_read_what_was_copied_in_and_hold_their_room_until_the_last_clone_goes() {
        let region = StoreRegion::create(1 << 20).unwrap();
        let data: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        let stored = region.copy_in(&data).unwrap();
        assert_eq!(&stored[..], &data[..]);
        let window = region.window();
        assert_eq!(window.offset_of(&stored), Some(0));
        assert_eq!(window.offset_of(&stored[4096..]), Some(4096));
        assert_eq!(
            window.offset_of(&data),
            None,
            "a heap copy is not in the region"
        );
        let clone = stored.slice(10..20);
        drop(stored);
        assert_eq!(region.reserved(), 3 * PAGE, "a slice still holds the array");
        drop(clone);
        assert_eq!(region.reserved(), 0);
    }

    #[test]
    fn the_file_is_sealed_against_resizing_and_freed_pages_still_go_back() {
        let region = StoreRegion::create(4 * PAGE).unwrap();
        assert!(region.file().set_len(PAGE).is_err(), "shrinking is sealed");
        assert!(
            region.file().set_len(8 * PAGE).is_err(),
            "growing is sealed"
        );
        let mut room = region.reserve(2 * PAGE as usize).unwrap();
        room.as_mut_slice().fill(7);
        let offset = room.offset() as libc::off_t;
        // The same call `release` makes once more than KEEP_FREED bytes are freed.
        let punched = unsafe {
            libc::fallocate(
                region.file().as_raw_fd(),
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                offset,
                2 * PAGE as libc::off_t,
            )
        };
        assert_eq!(punched, 0, "{}", std::io::Error::last_os_error());
        assert!(
            room.as_mut_slice().iter().all(|&b| b == 0),
            "the pages went back"
        );
    }

    #[test]
    fn a_full_region_says_so() {
        let region = StoreRegion::create(2 * PAGE).unwrap();
        let _held = region.copy_in(&[1u8; 5000]).unwrap();
        assert!(region.copy_in(&[1u8; 10]).is_none());
    }
}
