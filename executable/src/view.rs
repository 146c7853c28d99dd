//! Bytes that lie in a mapped memory file, handed out without a copy: the owner of a
//! `Bytes` keeps the mapping alive while the bytes are in use.

use std::sync::Arc;

use memmap2::Mmap;

/// A view of a mapping's bytes that keeps the mapping alive.
pub(crate) struct RegionView {
    pub(crate) map: Arc<Mmap>,
    pub(crate) start: usize,
    pub(crate) end: usize,
}

impl AsRef<[u8]> for RegionView {
    fn as_ref(&self) -> &[u8] {
        &self.map[self.start..self.end]
    }
}
