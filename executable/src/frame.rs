//! Length-prefixed frames: a 4-byte little-endian length, then that many bytes.

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
}

/// Reads one frame; `Ok(None)` when the stream ended cleanly between frames.
pub fn read_frame(reader: &mut impl Read, max: usize) -> Result<Option<Vec<u8>>, FrameError> {
    let mut header = [0u8; 4];
    match read_full(reader, &mut header)? {
        0 => return Ok(None),
        4 => {}
        _ => return Err(FrameError::Truncated),
    }
    let len = u32::from_le_bytes(header) as usize;
    if len > max {
        return Err(FrameError::TooLarge { len, max });
    }
    let mut body = vec![0u8; len];
    if read_full(reader, &mut body)? != len {
        return Err(FrameError::Truncated);
    }
    Ok(Some(body))
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
