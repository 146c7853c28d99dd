//! Length-prefixed frames: a 4-byte little-endian length, then that many bytes (or, for large
//! frames, a marker and a length whose bytes are in shared memory).

use std::io::{self, Read, Write};

/// Largest frame either side accepts unless configured otherwise (1 GiB).
pub const DEFAULT_MAX_FRAME: usize = 1 << 30;

#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("i/o error: {0}")]
    Io(#[from] io::Error),
    #[error("frame of {len} bytes exceeds the limit of {max} bytes")]
    TooLarge { len: usize, max: usize },
    #[error("stream ended inside a frame")]
    Truncated,
    #[error("a shared-memory frame arrived, but no shared region was set up")]
    UnexpectedShared,
}

/// A length of `u32::MAX` announces a frame in shared memory (see `shared`): an 8-byte
/// little-endian length follows, and the body is at the start of the sender's region.
pub const SHARED_MARKER: u32 = u32::MAX;

/// One received frame.
#[derive(Debug)]
pub enum Frame {
    Inline(Vec<u8>),
    /// The body is in the sender's shared region, this many bytes long.
    Shared(usize),
}

/// Reads one frame, inline or shared; `Ok(None)` when the stream ended between frames.
pub fn read_any_frame(reader: &mut impl Read, max: usize) -> Result<Option<Frame>, FrameError> {
    let mut header = [0u8; 4];
    match read_full(reader, &mut header)? {
        0 => return Ok(None),
        4 => {}
        _ => return Err(FrameError::Truncated),
    }
    let len = u32::from_le_bytes(header);
    if len == SHARED_MARKER {
        let mut size = [0u8; 8];
        if read_full(reader, &mut size)? != 8 {
            return Err(FrameError::Truncated);
        }
        let size = u64::from_le_bytes(size) as usize;
        if size > max {
            return Err(FrameError::TooLarge { len: size, max });
        }
        return Ok(Some(Frame::Shared(size)));
    }
    read_body(reader, len as usize, max).map(|body| Some(Frame::Inline(body)))
}

/// Announces a frame of `len` bytes already written to the shared region.
pub fn write_shared_header(writer: &mut impl Write, len: usize) -> Result<(), FrameError> {
    writer.write_all(&SHARED_MARKER.to_le_bytes())?;
    writer.write_all(&(len as u64).to_le_bytes())?;
    writer.flush()?;
    Ok(())
}

/// Reads one inline frame; `Ok(None)` when the stream ended cleanly between frames.
pub fn read_frame(reader: &mut impl Read, max: usize) -> Result<Option<Vec<u8>>, FrameError> {
    match read_any_frame(reader, max)? {
        None => Ok(None),
        Some(Frame::Inline(body)) => Ok(Some(body)),
        Some(Frame::Shared(_)) => Err(FrameError::UnexpectedShared),
    }
}

fn read_body(reader: &mut impl Read, len: usize, max: usize) -> Result<Vec<u8>, FrameError> {
    if len > max {
        return Err(FrameError::TooLarge { len, max });
    }
    let mut body = vec![0u8; len];
    if read_full(reader, &mut body)? != len {
        return Err(FrameError::Truncated);
    }
    Ok(body)
}

/// Discards `len` bytes, so that the stream stays in step after a refused frame.
pub fn skip(reader: &mut impl Read, len: usize) -> Result<(), FrameError> {
    let copied = io::copy(&mut reader.take(len as u64), &mut io::sink())?;
    if copied as usize == len {
        Ok(())
    } else {
        Err(FrameError::Truncated)
    }
}

pub fn write_frame(writer: &mut impl Write, body: &[u8]) -> Result<(), FrameError> {
    let len = u32::try_from(body.len()).map_err(|_| FrameError::TooLarge {
        len: body.len(),
        max: u32::MAX as usize,
    })?;
    writer.write_all(&len.to_le_bytes())?;
    writer.write_all(body)?;
    writer.flush()?;
    Ok(())
}

/// Fills `buf` unless the stream ends first; returns how much was read.
fn read_full(reader: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match reader.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}
