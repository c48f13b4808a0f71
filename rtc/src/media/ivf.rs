//! IVF, the container libvpx and `ffmpeg -f ivf` write VP8 in: a 32-byte file header, then per
//! frame a 12-byte header (size, presentation timestamp) and the frame. All integers are little
//! endian.
//!
//! ```
//! use std::io::Cursor;
//! use ferry_rtc::media::ivf::{IvfHeader, IvfReader, IvfWriter};
//! let mut w = IvfWriter::new(Cursor::new(Vec::new()), &IvfHeader::vp8(320, 240, 30)).unwrap();
//! w.write_frame(0, &[0x10, 1, 2]).unwrap();
//! let file = w.finish().unwrap().into_inner();
//! let mut r = IvfReader::new(&file[..]).unwrap();
//! assert_eq!(r.header().frame_count, 1);
//! assert_eq!(r.read_frame().unwrap().unwrap().data, [0x10, 1, 2]);
//! assert!(r.read_frame().unwrap().is_none());
//! ```

use std::io::{self, Read, Seek, SeekFrom, Write};
use std::time::Duration;

/// Bytes of the file header this module writes (and the least it reads).
pub const IVF_HEADER_LEN: usize = 32;
/// Bytes before each frame.
pub const IVF_FRAME_HEADER_LEN: usize = 12;
/// Largest frame the reader accepts, so a corrupt size cannot make it allocate gigabytes.
pub const MAX_IVF_FRAME: usize = 16 << 20;
/// Largest file header the reader skips over (the format allows a longer one).
const MAX_HEADER_LEN: usize = 1024;
const SIGNATURE: &[u8; 4] = b"DKIF";
/// Offset of the frame count in the file header.
const FRAME_COUNT_AT: u64 = 24;

/// Why an IVF file could not be read or written.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum IvfError {
    /// The underlying reader or writer failed.
    #[error("i/o: {0}")]
    Io(#[from] io::Error),
    /// The file does not start with `DKIF`.
    #[error("not an IVF file (signature {0:02x?})")]
    BadSignature([u8; 4]),
    /// The header length field is below 32 or unreasonably large.
    #[error("bad IVF header length {0}")]
    BadHeaderLen(u16),
    /// The file ends inside its header.
    #[error("IVF file header truncated")]
    TruncatedHeader,
    /// The file ends inside a frame or its header.
    #[error("IVF frame {index} truncated")]
    TruncatedFrame {
        /// Index of the frame, from 0.
        index: u64,
    },
    /// A frame claims more than [`MAX_IVF_FRAME`] bytes.
    #[error("IVF frame {index} of {size} bytes exceeds the limit")]
    FrameTooLarge {
        /// Index of the frame, from 0.
        index: u64,
        /// Its claimed size.
        size: u64,
    },
}

/// The file header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IvfHeader {
    /// Format version (0).
    pub version: u16,
    /// Codec, e.g. `VP80`.
    pub fourcc: [u8; 4],
    /// Width in pixels.
    pub width: u16,
    /// Height in pixels.
    pub height: u16,
    /// Time base denominator: a timestamp counts `timebase_num / timebase_den` seconds.
    pub timebase_den: u32,
    /// Time base numerator.
    pub timebase_num: u32,
    /// Number of frames as the header states it (writers may leave it wrong; the reader does not
    /// rely on it).
    pub frame_count: u32,
}

impl IvfHeader {
    /// A VP8 header with timestamps counting frames at `fps`.
    pub fn vp8(width: u16, height: u16, fps: u32) -> Self {
        IvfHeader {
            version: 0,
            fourcc: *b"VP80",
            width,
            height,
            timebase_den: fps.max(1),
            timebase_num: 1,
            frame_count: 0,
        }
    }

    /// How long `ticks` of the time base last (zero for a zero denominator).
    pub fn duration(&self, ticks: u64) -> Duration {
        let nanos = u128::from(ticks) * u128::from(self.timebase_num) * 1_000_000_000;
        let nanos = nanos
            .checked_div(u128::from(self.timebase_den))
            .unwrap_or(0);
        Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    }

    /// The header as it is written (a stream that cannot seek writes it once, frame count 0).
    pub fn to_bytes(self) -> [u8; IVF_HEADER_LEN] {
        let mut b = [0u8; IVF_HEADER_LEN];
        b[0..4].copy_from_slice(SIGNATURE);
        b[4..6].copy_from_slice(&self.version.to_le_bytes());
        b[6..8].copy_from_slice(&(IVF_HEADER_LEN as u16).to_le_bytes());
        b[8..12].copy_from_slice(&self.fourcc);
        b[12..14].copy_from_slice(&self.width.to_le_bytes());
        b[14..16].copy_from_slice(&self.height.to_le_bytes());
        b[16..20].copy_from_slice(&self.timebase_den.to_le_bytes());
        b[20..24].copy_from_slice(&self.timebase_num.to_le_bytes());
        b[24..28].copy_from_slice(&self.frame_count.to_le_bytes());
        b
    }
}

/// One frame of an IVF file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IvfFrame {
    /// Presentation timestamp in the header's time base.
    pub pts: u64,
    /// The encoded frame.
    pub data: Vec<u8>,
}

fn u16_at(b: &[u8], i: usize) -> u16 {
    u16::from_le_bytes([b[i], b[i + 1]])
}

fn u32_at(b: &[u8], i: usize) -> u32 {
    u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]])
}

/// Reads as much of `buf` as the reader has; returns how much that was.
fn read_full<R: Read>(r: &mut R, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// Reads an IVF file frame by frame. Malformed input is an error, never a panic; after an error
/// the reader yields nothing more.
#[derive(Debug)]
pub struct IvfReader<R> {
    inner: R,
    header: IvfHeader,
    index: u64,
    done: bool,
}

impl<R: Read> IvfReader<R> {
    /// Reads and checks the file header.
    pub fn new(mut inner: R) -> Result<Self, IvfError> {
        let mut b = [0u8; IVF_HEADER_LEN];
        if read_full(&mut inner, &mut b)? < IVF_HEADER_LEN {
            return Err(IvfError::TruncatedHeader);
        }
        let signature = [b[0], b[1], b[2], b[3]];
        if &signature != SIGNATURE {
            return Err(IvfError::BadSignature(signature));
        }
        let header_len = u16_at(&b, 6);
        let extra = usize::from(header_len)
            .checked_sub(IVF_HEADER_LEN)
            .filter(|_| usize::from(header_len) <= MAX_HEADER_LEN)
            .ok_or(IvfError::BadHeaderLen(header_len))?;
        let skipped = io::copy(&mut (&mut inner).take(extra as u64), &mut io::sink())?;
        if skipped < extra as u64 {
            return Err(IvfError::TruncatedHeader);
        }
        let header = IvfHeader {
            version: u16_at(&b, 4),
            fourcc: [b[8], b[9], b[10], b[11]],
            width: u16_at(&b, 12),
            height: u16_at(&b, 14),
            timebase_den: u32_at(&b, 16),
            timebase_num: u32_at(&b, 20),
            frame_count: u32_at(&b, 24),
        };
        Ok(IvfReader {
            inner,
            header,
            index: 0,
            done: false,
        })
    }

    /// The file header.
    pub fn header(&self) -> &IvfHeader {
        &self.header
    }

    /// The next frame; `None` at the end of the file (a clean end: between two frames).
    pub fn read_frame(&mut self) -> Result<Option<IvfFrame>, IvfError> {
        if self.done {
            return Ok(None);
        }
        let r = self.read_next();
        if !matches!(r, Ok(Some(_))) {
            self.done = true;
        }
        r
    }

    fn read_next(&mut self) -> Result<Option<IvfFrame>, IvfError> {
        let index = self.index;
        let mut h = [0u8; IVF_FRAME_HEADER_LEN];
        match read_full(&mut self.inner, &mut h)? {
            0 => return Ok(None),
            IVF_FRAME_HEADER_LEN => {}
            _ => return Err(IvfError::TruncatedFrame { index }),
        }
        let size = u64::from(u32_at(&h, 0));
        if size > MAX_IVF_FRAME as u64 {
            return Err(IvfError::FrameTooLarge { index, size });
        }
        let pts = u64::from_le_bytes([h[4], h[5], h[6], h[7], h[8], h[9], h[10], h[11]]);
        // Read through `take` rather than into a buffer of the claimed size: a truncated file
        // then costs what it holds, not what it claims.
        let mut data = Vec::new();
        (&mut self.inner).take(size).read_to_end(&mut data)?;
        if data.len() as u64 != size {
            return Err(IvfError::TruncatedFrame { index });
        }
        self.index += 1;
        Ok(Some(IvfFrame { pts, data }))
    }

    /// The reader, positioned after what was read.
    pub fn into_inner(self) -> R {
        self.inner
    }
}

impl<R: Read> Iterator for IvfReader<R> {
    type Item = Result<IvfFrame, IvfError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.read_frame().transpose()
    }
}

/// The header of one frame of `size` bytes at `pts` (for a stream written as it goes, without
/// [`IvfWriter`]'s seek).
pub fn frame_header(size: u32, pts: u64) -> [u8; IVF_FRAME_HEADER_LEN] {
    let mut h = [0u8; IVF_FRAME_HEADER_LEN];
    h[..4].copy_from_slice(&size.to_le_bytes());
    h[4..].copy_from_slice(&pts.to_le_bytes());
    h
}

/// Writes an IVF file: the header at once, frames as they come, and the frame count when
/// finished.
#[derive(Debug)]
pub struct IvfWriter<W: Write + Seek> {
    inner: W,
    /// Where the file header starts in `inner`.
    start: u64,
    frames: u32,
}

impl<W: Write + Seek> IvfWriter<W> {
    /// Writes the file header (its frame count is patched by [`IvfWriter::finish`]).
    pub fn new(mut inner: W, header: &IvfHeader) -> Result<Self, IvfError> {
        let start = inner.stream_position()?;
        inner.write_all(&header.to_bytes())?;
        Ok(IvfWriter {
            inner,
            start,
            frames: 0,
        })
    }

    /// Appends one frame.
    pub fn write_frame(&mut self, pts: u64, data: &[u8]) -> Result<(), IvfError> {
        let size = u32::try_from(data.len())
            .ok()
            .filter(|s| *s as usize <= MAX_IVF_FRAME)
            .ok_or(IvfError::FrameTooLarge {
                index: u64::from(self.frames),
                size: data.len() as u64,
            })?;
        self.inner.write_all(&frame_header(size, pts))?;
        self.inner.write_all(data)?;
        self.frames = self.frames.saturating_add(1);
        Ok(())
    }

    /// Frames written so far.
    pub fn frames(&self) -> u32 {
        self.frames
    }

    /// Patches the frame count into the header, flushes, and returns the writer positioned at
    /// the end of the file.
    pub fn finish(mut self) -> Result<W, IvfError> {
        let end = self.inner.stream_position()?;
        self.inner
            .seek(SeekFrom::Start(self.start + FRAME_COUNT_AT))?;
        self.inner.write_all(&self.frames.to_le_bytes())?;
        self.inner.seek(SeekFrom::Start(end))?;
        self.inner.flush()?;
        Ok(self.inner)
    }
}

/// Fuzz target body: reads arbitrary bytes as an IVF file to the end or the first error, and
/// checks that what was read writes back to the same frames.
#[cfg(any(test, feature = "fuzzing"))]
pub fn fuzz_ivf(data: &[u8]) {
    let Ok(mut r) = IvfReader::new(data) else {
        return;
    };
    let header = *r.header();
    let mut frames = Vec::new();
    while let Ok(Some(f)) = r.read_frame() {
        assert!(f.data.len() <= MAX_IVF_FRAME);
        frames.push(f);
    }
    assert!(matches!(r.read_frame(), Ok(None)), "nothing after the end");
    let Ok(mut w) = IvfWriter::new(io::Cursor::new(Vec::new()), &header) else {
        return;
    };
    for f in &frames {
        assert!(w.write_frame(f.pts, &f.data).is_ok());
    }
    let Ok(out) = w.finish() else {
        return;
    };
    let again: Vec<IvfFrame> = IvfReader::new(&out.get_ref()[..])
        .into_iter()
        .flatten()
        .flatten()
        .collect();
    assert_eq!(again, frames);
}

/// The size of a VP8 keyframe (RFC 6386 §9.1: the start code after the 3-byte frame tag, then
/// 14-bit width and height), `None` for an interframe or bad data — what an IVF header of the
/// stream says.
pub fn vp8_keyframe_size(frame: &[u8]) -> Option<(u16, u16)> {
    let b = frame.get(..10)?;
    if b[0] & 1 != 0 || b[3..6] != [0x9d, 0x01, 0x2a] {
        return None;
    }
    let w = u16::from_le_bytes([b[6], b[7]]) & 0x3fff;
    let h = u16::from_le_bytes([b[8], b[9]]) & 0x3fff;
    Some((w, h))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::io::Cursor;

    fn frames() -> Vec<IvfFrame> {
        (0..5u8)
            .map(|i| IvfFrame {
                pts: u64::from(i) * 3,
                data: (0..u16::from(i) * 100 + 1).map(|b| b as u8 ^ i).collect(),
            })
            .collect()
    }

    fn file(frames: &[IvfFrame]) -> Vec<u8> {
        let mut w = IvfWriter::new(Cursor::new(Vec::new()), &IvfHeader::vp8(640, 360, 90)).unwrap();
        for f in frames {
            w.write_frame(f.pts, &f.data).unwrap();
        }
        assert_eq!(w.frames(), frames.len() as u32);
        w.finish().unwrap().into_inner()
    }

    #[test]
    fn round_trip_patches_the_frame_count() {
        let fs = frames();
        let bytes = file(&fs);
        assert_eq!(&bytes[..4], b"DKIF");
        assert_eq!(u32_at(&bytes, 24), 5);
        let total: usize = fs.iter().map(|f| 12 + f.data.len()).sum();
        assert_eq!(bytes.len(), 32 + total);
        let r = IvfReader::new(&bytes[..]).unwrap();
        assert_eq!(
            *r.header(),
            IvfHeader {
                frame_count: 5,
                ..IvfHeader::vp8(640, 360, 90)
            }
        );
        assert_eq!(r.header().duration(3), Duration::from_nanos(33_333_333));
        let back: Vec<IvfFrame> = r.map(Result::unwrap).collect();
        assert_eq!(back, fs);
    }

    #[test]
    fn writer_patches_the_header_where_it_started() {
        let mut c = Cursor::new(b"prefix".to_vec());
        c.seek(SeekFrom::End(0)).unwrap();
        let mut w = IvfWriter::new(c, &IvfHeader::vp8(2, 2, 1)).unwrap();
        w.write_frame(7, b"abc").unwrap();
        let bytes = w.finish().unwrap().into_inner();
        assert_eq!(&bytes[..6], b"prefix");
        let mut r = IvfReader::new(&bytes[6..]).unwrap();
        assert_eq!(r.header().frame_count, 1);
        assert_eq!(
            r.read_frame().unwrap(),
            Some(IvfFrame {
                pts: 7,
                data: b"abc".to_vec()
            })
        );
    }

    #[test]
    fn a_longer_header_is_skipped() {
        let mut bytes = file(&frames()[..2]);
        bytes[6] = 40;
        bytes.splice(32..32, [0xee; 8]);
        let back: Vec<IvfFrame> = IvfReader::new(&bytes[..]).unwrap().flatten().collect();
        assert_eq!(back, frames()[..2]);
    }

    #[test]
    fn truncated_and_garbage_input_are_typed_errors() {
        let bytes = file(&frames());
        for cut in [0, 4, 31] {
            assert!(matches!(
                IvfReader::new(&bytes[..cut]),
                Err(IvfError::TruncatedHeader)
            ));
        }
        assert!(matches!(
            IvfReader::new(&b"RIFF\0\0\0\0................................"[..]),
            Err(IvfError::BadSignature(s)) if &s == b"RIFF"
        ));
        let mut short_header = bytes.clone();
        short_header[6] = 16;
        assert!(matches!(
            IvfReader::new(&short_header[..]),
            Err(IvfError::BadHeaderLen(16))
        ));
        // Cut inside the second frame's header, then inside its data.
        for (cut, want) in [(32 + 13 + 5, 1), (32 + 13 + 12 + 50, 1)] {
            let mut r = IvfReader::new(&bytes[..cut]).unwrap();
            assert_eq!(r.read_frame().unwrap(), Some(frames()[0].clone()));
            assert!(matches!(
                r.read_frame(),
                Err(IvfError::TruncatedFrame { index }) if index == want
            ));
            assert!(matches!(r.read_frame(), Ok(None)), "nothing after an error");
        }
        let mut huge = bytes[..32].to_vec();
        huge.extend_from_slice(&u32::MAX.to_le_bytes());
        huge.extend_from_slice(&[0; 8]);
        let mut r = IvfReader::new(&huge[..]).unwrap();
        assert!(matches!(
            r.read_frame(),
            Err(IvfError::FrameTooLarge { index: 0, size }) if size == u64::from(u32::MAX)
        ));
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(tail in proptest::collection::vec(any::<u8>(), 0..300),
                                       keep_header in any::<bool>()) {
            let mut data = if keep_header { file(&[])[..32].to_vec() } else { Vec::new() };
            data.extend(tail);
            fuzz_ivf(&data);
        }
    }
}
