//! The bytes between the worker and ffmpeg: the source's frames framed for ffmpeg's stdin (IVF
//! for VP8, Annex B as it comes for H.264), and ffmpeg's stdout cut back into access units at
//! their delimiters. Pure.

use ferry_sdk::media::ivf::{IvfHeader, frame_header, vp8_keyframe_size};

use crate::encoder::Input;

/// Frames the source's video for ffmpeg.
#[derive(Debug)]
pub struct Feed {
    input: Input,
    header_sent: bool,
    frames: u64,
}

impl Feed {
    /// A feed of `input` frames.
    pub fn new(input: Input) -> Self {
        Feed {
            input,
            header_sent: false,
            frames: 0,
        }
    }

    /// What to write to ffmpeg for one frame (`None`: nothing, a VP8 stream waits for its first
    /// keyframe to tell its size).
    pub fn frame(&mut self, data: &[u8], keyframe: bool) -> Option<Vec<u8>> {
        match self.input {
            Input::H264 => {
                if !self.header_sent && !keyframe {
                    return None;
                }
                self.header_sent = true;
                self.frames += 1;
                Some(data.to_vec())
            }
            Input::Vp8 => {
                let mut out = Vec::with_capacity(data.len() + 44);
                if !self.header_sent {
                    let (w, h) = vp8_keyframe_size(data).filter(|_| keyframe)?;
                    out.extend_from_slice(&IvfHeader::vp8(w, h, 30).to_bytes());
                    self.header_sent = true;
                }
                let size = u32::try_from(data.len()).ok()?;
                out.extend_from_slice(&frame_header(size, self.frames));
                out.extend_from_slice(data);
                self.frames += 1;
                Some(out)
            }
        }
    }

    /// Frames fed so far.
    pub fn frames(&self) -> u64 {
        self.frames
    }
}

/// Largest access unit kept: a stream without delimiters must not grow the buffer forever.
pub const MAX_UNIT: usize = 8 << 20;

/// Cuts an Annex B stream into access units at their delimiters (NAL type 9), as it arrives.
#[derive(Debug, Default)]
pub struct Units {
    buf: Vec<u8>,
    /// Where the current unit's delimiter starts, once seen.
    start: Option<usize>,
    /// How far the buffer has been searched for the next delimiter.
    scanned: usize,
    /// Bytes thrown away (before the first delimiter, or a unit past [`MAX_UNIT`]).
    pub discarded: u64,
}

/// One access unit out of [`Units`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unit {
    /// Its bytes, Annex B, from its delimiter's start code on.
    pub data: Vec<u8>,
    /// It holds an IDR picture.
    pub keyframe: bool,
}

impl Units {
    /// Takes more of the stream.
    pub fn push(&mut self, data: &[u8]) {
        self.buf.extend_from_slice(data);
    }

    /// The next complete unit (one that the next delimiter closed), if there is one.
    pub fn next_unit(&mut self) -> Option<Unit> {
        loop {
            let from = match self.start {
                Some(s) => self.scanned.max(s + 4),
                None => self.scanned,
            };
            let Some(at) = find_aud(&self.buf, from) else {
                self.scanned = self.buf.len().saturating_sub(4).max(from);
                if self.start.is_none() {
                    // Nothing starts before a delimiter: keep only what may begin one.
                    let keep = self.buf.len().min(4);
                    let drop = self.buf.len() - keep;
                    self.discarded += drop as u64;
                    self.buf.drain(..drop);
                    self.scanned = 0;
                } else if self.buf.len() > MAX_UNIT {
                    self.discarded += self.buf.len() as u64;
                    self.buf.clear();
                    self.start = None;
                    self.scanned = 0;
                }
                return None;
            };
            match self.start {
                None => {
                    self.discarded += at as u64;
                    self.buf.drain(..at);
                    self.start = Some(0);
                    self.scanned = 0;
                }
                Some(s) => {
                    let data: Vec<u8> = self.buf[s..at].to_vec();
                    self.buf.drain(..at);
                    self.start = Some(0);
                    self.scanned = 0;
                    let keyframe = is_keyframe(&data);
                    return Some(Unit { data, keyframe });
                }
            }
        }
    }

    /// The last unit, at the end of the stream.
    pub fn finish(&mut self) -> Option<Unit> {
        let s = self.start.take()?;
        let data: Vec<u8> = self.buf.drain(..).skip(s).collect();
        self.scanned = 0;
        (!data.is_empty()).then(|| Unit {
            keyframe: is_keyframe(&data),
            data,
        })
    }
}

/// Where the start code of the next access unit delimiter at or after `from` begins (a 4-byte
/// start code's leading zero included).
fn find_aud(buf: &[u8], from: usize) -> Option<usize> {
    let mut i = from;
    while i + 4 <= buf.len() {
        if buf[i] == 0 && buf[i + 1] == 0 && buf[i + 2] == 1 && buf[i + 3] & 0x1f == 9 {
            return Some(if i > from && buf[i - 1] == 0 {
                i - 1
            } else {
                i
            });
        }
        i += 1;
    }
    None
}

fn is_keyframe(au: &[u8]) -> bool {
    ferry_sdk::media::annexb::nal_units(au).any(|n| n.first().is_some_and(|b| b & 0x1f == 5))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An access unit: a delimiter, then (for a keyframe) SPS, PPS and an IDR slice, else a
    /// non-IDR slice, with `n` as payload.
    fn au(key: bool, n: u8) -> Vec<u8> {
        let mut v = vec![0, 0, 0, 1, 0x09, 0xf0];
        if key {
            v.extend_from_slice(&[
                0, 0, 0, 1, 0x67, 0x42, 0, 0x1f, 0, 0, 1, 0x68, 0xce, 0, 0, 1, 0x65, n,
            ]);
        } else {
            v.extend_from_slice(&[0, 0, 1, 0x41, n, n]);
        }
        v
    }

    #[test]
    fn units_are_cut_at_delimiters_however_the_bytes_arrive() {
        let units = [au(true, 1), au(false, 2), au(false, 3), au(true, 4)];
        let stream: Vec<u8> = units.concat();
        for chunk in [1, 2, 3, 5, 7, 64] {
            let mut u = Units::default();
            u.push(&[0xaa, 0xbb]); // garbage before the first delimiter
            let mut got = Vec::new();
            for c in stream.chunks(chunk) {
                u.push(c);
                while let Some(x) = u.next_unit() {
                    got.push(x);
                }
            }
            got.extend(u.finish());
            assert_eq!(got.len(), 4, "chunks of {chunk}");
            for (g, want) in got.iter().zip(&units) {
                assert_eq!(&g.data, want, "chunks of {chunk}");
            }
            assert_eq!(
                got.iter().map(|g| g.keyframe).collect::<Vec<_>>(),
                [true, false, false, true]
            );
            assert_eq!(u.discarded, 2);
        }
    }

    #[test]
    fn vp8_is_framed_as_ivf_from_its_first_keyframe() {
        let mut f = Feed::new(Input::Vp8);
        let delta = [0x11, 0, 0, 1, 2, 3];
        assert_eq!(f.frame(&delta, false), None, "waits for a keyframe");
        let key = [0x10, 0, 0, 0x9d, 0x01, 0x2a, 0x80, 0x02, 0xe0, 0x01, 7, 7];
        let out = f.frame(&key, true).unwrap();
        assert_eq!(&out[..4], b"DKIF");
        assert_eq!(u16::from_le_bytes([out[12], out[13]]), 640);
        assert_eq!(u16::from_le_bytes([out[14], out[15]]), 480);
        assert_eq!(out.len(), 32 + 12 + key.len());
        let out = f.frame(&delta, false).unwrap();
        assert_eq!(out.len(), 12 + delta.len());
        assert_eq!(u64::from_le_bytes(out[4..12].try_into().unwrap()), 1);
        assert_eq!(f.frames(), 2);
    }

    proptest::proptest! {
        /// Whatever the stream, no panic, and units start with a delimiter.
        #[test]
        fn arbitrary_streams_cut_cleanly(data in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..512), chunk in 1usize..40) {
            let mut u = Units::default();
            for c in data.chunks(chunk) {
                u.push(c);
                while let Some(x) = u.next_unit() {
                    let code = if x.data.starts_with(&[0, 0, 0, 1]) { 4 } else { 3 };
                    proptest::prop_assert_eq!(x.data[code - 1], 1);
                    proptest::prop_assert_eq!(x.data[code] & 0x1f, 9);
                }
            }
            let _ = u.finish();
        }
    }
}
