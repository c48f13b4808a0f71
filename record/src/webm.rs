//! WebM (Matroska's subset, EBML RFC 8794) for VP8 + Opus, written as a live byte stream: an
//! init segment (EBML header, a Segment of unknown size, Info with 1 ms timestamps, Tracks) and
//! media segments of Clusters with SimpleBlocks. The init followed by any run of media segments is
//! a valid WebM file, as Media Source Extensions and ffmpeg's HLS reader expect.
//!
//! No crate on crates.io writes this without linking libwebm, so this is a small EBML writer.

use crate::mux::{MuxError, Sample};

const EBML: u32 = 0x1A45_DFA3;
const EBML_VERSION: u32 = 0x4286;
const EBML_READ_VERSION: u32 = 0x42F7;
const EBML_MAX_ID_LENGTH: u32 = 0x42F2;
const EBML_MAX_SIZE_LENGTH: u32 = 0x42F3;
const DOC_TYPE: u32 = 0x4282;
const DOC_TYPE_VERSION: u32 = 0x4287;
const DOC_TYPE_READ_VERSION: u32 = 0x4285;
const SEGMENT: u32 = 0x1853_8067;
const INFO: u32 = 0x1549_A966;
const TIMESTAMP_SCALE: u32 = 0x2A_D7B1;
const MUXING_APP: u32 = 0x4D80;
const WRITING_APP: u32 = 0x5741;
const TRACKS: u32 = 0x1654_AE6B;
const TRACK_ENTRY: u32 = 0xAE;
const TRACK_NUMBER: u32 = 0xD7;
const TRACK_UID: u32 = 0x73C5;
const TRACK_TYPE: u32 = 0x83;
const FLAG_LACING: u32 = 0x9C;
const CODEC_ID: u32 = 0x86;
const CODEC_PRIVATE: u32 = 0x63A2;
const CODEC_DELAY: u32 = 0x56AA;
const SEEK_PRE_ROLL: u32 = 0x56BB;
const VIDEO: u32 = 0xE0;
const PIXEL_WIDTH: u32 = 0xB0;
const PIXEL_HEIGHT: u32 = 0xBA;
const AUDIO: u32 = 0xE1;
const SAMPLING_FREQUENCY: u32 = 0xB5;
const CHANNELS: u32 = 0x9F;
const CLUSTER: u32 = 0x1F43_B675;
const TIMESTAMP: u32 = 0xE7;
const SIMPLE_BLOCK: u32 = 0xA3;

/// Segment size "unknown" (all value bits set, 8 bytes).
const UNKNOWN_SIZE: [u8; 8] = [0x01, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF];

/// A block's timestamp is a signed 16-bit offset from its cluster's (ms).
const MAX_BLOCK_OFFSET_MS: u64 = i16::MAX as u64;

/// One track of a WebM recording.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WebmTrack {
    /// VP8 video of the given size, 90 kHz samples.
    Vp8 {
        /// Pixels.
        width: u16,
        /// Pixels.
        height: u16,
    },
    /// Opus audio, stereo, 48 kHz samples.
    Opus,
}

impl WebmTrack {
    fn rate(self) -> u32 {
        match self {
            WebmTrack::Vp8 { .. } => 90_000,
            WebmTrack::Opus => 48_000,
        }
    }
}

/// The size of a VP8 keyframe (RFC 6386 §9.1), `None` for an interframe or bad data.
pub use ferry_rtc::media::ivf::vp8_keyframe_size;

/// An EBML element ID as written (its length marker is part of the value).
fn put_id(out: &mut Vec<u8>, id: u32) {
    let bytes = id.to_be_bytes();
    let skip = bytes.iter().take_while(|b| **b == 0).count().min(3);
    out.extend_from_slice(&bytes[skip..]);
}

/// An EBML variable-size integer in the fewest bytes (all-ones values are reserved).
fn put_size(out: &mut Vec<u8>, size: u64) {
    let mut len = 1;
    while len < 8 && size >= (1u64 << (7 * len)) - 1 {
        len += 1;
    }
    let v = size | (1u64 << (7 * len));
    out.extend_from_slice(&v.to_be_bytes()[8 - len..]);
}

fn element(out: &mut Vec<u8>, id: u32, body: &[u8]) {
    put_id(out, id);
    put_size(out, body.len() as u64);
    out.extend_from_slice(body);
}

fn uint(out: &mut Vec<u8>, id: u32, v: u64) {
    let bytes = v.to_be_bytes();
    let skip = bytes.iter().take_while(|b| **b == 0).count().min(7);
    element(out, id, &bytes[skip..]);
}

fn float(out: &mut Vec<u8>, id: u32, v: f64) {
    element(out, id, &v.to_be_bytes());
}

fn nested(out: &mut Vec<u8>, id: u32, f: impl FnOnce(&mut Vec<u8>)) {
    let mut body = Vec::new();
    f(&mut body);
    element(out, id, &body);
}

/// `OpusHead` (RFC 7845 §5.1): version 1, stereo, no pre-skip (RTP does not carry it), 48 kHz,
/// no gain, mapping family 0.
fn opus_head() -> Vec<u8> {
    let mut h = b"OpusHead".to_vec();
    h.extend_from_slice(&[1, 2, 0, 0]);
    h.extend_from_slice(&48_000u32.to_le_bytes());
    h.extend_from_slice(&[0, 0, 0]);
    h
}

/// The init segment: EBML header, then a Segment of unknown size holding Info and Tracks (track
/// numbers 1, 2, … in order).
pub fn init_segment(tracks: &[WebmTrack]) -> Vec<u8> {
    let mut out = Vec::new();
    nested(&mut out, EBML, |b| {
        uint(b, EBML_VERSION, 1);
        uint(b, EBML_READ_VERSION, 1);
        uint(b, EBML_MAX_ID_LENGTH, 4);
        uint(b, EBML_MAX_SIZE_LENGTH, 8);
        element(b, DOC_TYPE, b"webm");
        uint(b, DOC_TYPE_VERSION, 4);
        uint(b, DOC_TYPE_READ_VERSION, 2);
    });
    put_id(&mut out, SEGMENT);
    out.extend_from_slice(&UNKNOWN_SIZE);
    nested(&mut out, INFO, |b| {
        uint(b, TIMESTAMP_SCALE, 1_000_000);
        element(b, MUXING_APP, b"ferry-record");
        element(b, WRITING_APP, b"ferry-record");
    });
    nested(&mut out, TRACKS, |b| {
        for (i, t) in tracks.iter().enumerate() {
            let n = i as u64 + 1;
            nested(b, TRACK_ENTRY, |e| {
                uint(e, TRACK_NUMBER, n);
                uint(e, TRACK_UID, n);
                uint(e, FLAG_LACING, 0);
                match *t {
                    WebmTrack::Vp8 { width, height } => {
                        uint(e, TRACK_TYPE, 1);
                        element(e, CODEC_ID, b"V_VP8");
                        nested(e, VIDEO, |v| {
                            uint(v, PIXEL_WIDTH, width.into());
                            uint(v, PIXEL_HEIGHT, height.into());
                        });
                    }
                    WebmTrack::Opus => {
                        uint(e, TRACK_TYPE, 2);
                        element(e, CODEC_ID, b"A_OPUS");
                        element(e, CODEC_PRIVATE, &opus_head());
                        uint(e, CODEC_DELAY, 0);
                        uint(e, SEEK_PRE_ROLL, 80_000_000);
                        nested(e, AUDIO, |a| {
                            float(a, SAMPLING_FREQUENCY, 48_000.0);
                            uint(a, CHANNELS, 2);
                        });
                    }
                }
            });
        }
    });
    out
}

/// A media segment: the samples of every track (track numbers 1, 2, … as in the init segment)
/// interleaved by time into Clusters, a new Cluster whenever a block would lie more than
/// 32.767 s past its Cluster's timestamp.
pub fn media_segment(tracks: &[WebmTrack], samples: &[&[Sample]]) -> Result<Vec<u8>, MuxError> {
    // (ms, track number, sample), in time order; video first on a tie.
    let mut blocks: Vec<(u64, u8, &Sample)> = Vec::new();
    for (i, (t, ss)) in tracks.iter().zip(samples).enumerate() {
        let n = u8::try_from(i + 1).map_err(|_| MuxError::TooLarge)?;
        if n > 126 {
            return Err(MuxError::TooLarge);
        }
        for s in ss.iter() {
            blocks.push((crate::timeline::rescale(s.dts, t.rate(), 1000), n, s));
        }
    }
    blocks.sort_by_key(|b| (b.0, b.1));
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(&(base, _, _)) = blocks.get(i) {
        let mut body = Vec::new();
        uint(&mut body, TIMESTAMP, base);
        while let Some(&(ms, n, s)) = blocks.get(i) {
            if ms - base > MAX_BLOCK_OFFSET_MS {
                break;
            }
            let mut block = Vec::with_capacity(s.data.len() + 4);
            put_size(&mut block, n.into());
            let rel = i16::try_from(ms - base).map_err(|_| MuxError::TooLarge)?;
            block.extend_from_slice(&rel.to_be_bytes());
            block.push(if s.keyframe { 0x80 } else { 0x00 });
            block.extend_from_slice(&s.data);
            element(&mut body, SIMPLE_BLOCK, &block);
            i += 1;
        }
        element(&mut out, CLUSTER, &body);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_use_the_fewest_bytes() {
        let enc = |n| {
            let mut v = Vec::new();
            put_size(&mut v, n);
            v
        };
        assert_eq!(enc(0), [0x80]);
        assert_eq!(enc(126), [0xFE]);
        // 127 is the reserved all-ones value in one byte.
        assert_eq!(enc(127), [0x40, 0x7F]);
        assert_eq!(enc(16_382), [0x7F, 0xFE]);
        assert_eq!(enc(16_383), [0x20, 0x3F, 0xFF]);
        let mut id = Vec::new();
        put_id(&mut id, CLUSTER);
        put_id(&mut id, TIMESTAMP);
        assert_eq!(id, [0x1F, 0x43, 0xB6, 0x75, 0xE7]);
    }

    #[test]
    fn clusters_interleave_by_time_and_split_past_the_block_range() {
        let video: Vec<Sample> = (0..3)
            .map(|i| Sample {
                dts: i * 20_000 * 90,
                duration: 3000,
                keyframe: i == 0,
                data: vec![0xAA],
            })
            .collect();
        let audio = [Sample {
            dts: 48 * 5,
            duration: 960,
            keyframe: true,
            data: vec![0xBB],
        }];
        let tracks = [
            WebmTrack::Vp8 {
                width: 64,
                height: 48,
            },
            WebmTrack::Opus,
        ];
        let seg = media_segment(&tracks, &[&video, &audio]).unwrap();
        // Cluster 1: ts 0, video@0 (key), audio@5, video@20000; cluster 2: ts 40000.
        let clusters = seg
            .windows(4)
            .filter(|w| *w == [0x1F, 0x43, 0xB6, 0x75])
            .count();
        assert_eq!(clusters, 2);
        let a = seg.iter().position(|b| *b == 0xBB).unwrap();
        // Track 2, +5 ms, keyframe flag.
        assert_eq!(seg[a - 4..a], [0x82, 0x00, 0x05, 0x80]);
    }

    #[test]
    fn vp8_keyframe_size_reads_the_header() {
        let key = [0x50, 0x42, 0x00, 0x9d, 0x01, 0x2a, 0x80, 0x02, 0xe0, 0x01];
        assert_eq!(vp8_keyframe_size(&key), Some((640, 480)));
        assert_eq!(
            vp8_keyframe_size(&[0x51, 0, 0, 0x9d, 1, 0x2a, 0, 0, 0, 0]),
            None
        );
        assert_eq!(vp8_keyframe_size(&[0x50]), None);
    }
}
