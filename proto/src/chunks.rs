//! Arrays cut into the pieces a gRPC stream carries: small enough to stay well under every
//! message limit, large enough that the per-message cost is noise.

use bytes::Bytes;

/// Bytes per stream message.
pub const STREAM_CHUNK_BYTES: usize = 1 << 20;

/// `data` as consecutive slices of at most [`STREAM_CHUNK_BYTES`] (no copy), each with its
/// offset; one empty slice for empty data, so that a stream always has a first message.
pub fn stream_chunks(data: &Bytes) -> impl Iterator<Item = (usize, Bytes)> + '_ {
    let count = data.len().div_ceil(STREAM_CHUNK_BYTES).max(1);
    (0..count).map(move |i| {
        let start = i * STREAM_CHUNK_BYTES;
        let end = (start + STREAM_CHUNK_BYTES).min(data.len());
        (start, data.slice(start..end))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_cover_the_data_in_order_and_empty_data_is_one_empty_chunk() {
        let data = Bytes::from(vec![7u8; 2 * STREAM_CHUNK_BYTES + 3]);
        let chunks: Vec<(usize, Bytes)> = stream_chunks(&data).collect();
        let offsets: Vec<usize> = chunks.iter().map(|(o, _)| *o).collect();
        assert_eq!(offsets, [0, STREAM_CHUNK_BYTES, 2 * STREAM_CHUNK_BYTES]);
        assert_eq!(
            chunks.iter().map(|(_, c)| c.len()).sum::<usize>(),
            data.len()
        );
        assert_eq!(chunks[2].1.len(), 3);
        let empty: Vec<(usize, Bytes)> = stream_chunks(&Bytes::new()).collect();
        assert_eq!(empty, [(0, Bytes::new())]);
    }
}
