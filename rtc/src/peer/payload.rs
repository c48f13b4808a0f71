//! Synthetic media payloads: real codec framing (RFC 7741 VP8 descriptor, RFC 6184 STAP-A / FU-A /
//! single NAL, an Opus TOC byte) around a [`Stamp`] that lets a receiver measure latency and frame
//! completeness without decoding anything.

use crate::codec::{Codec, vp8_descriptor};

/// Bytes of a [`Stamp`] in a payload.
pub const STAMP_LEN: usize = 16;

/// What every synthetic payload carries right after its codec header: when the frame (or audio
/// packet) was captured, in µs since the sender's `latency_epoch`, its frame number, and the
/// simulcast layer it was sent on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    /// Capture time, µs since the sender's latency epoch.
    pub send_us: u64,
    /// Frame number (video) or packet number (audio), from 0; the same on every simulcast layer,
    /// so frames stay in order across a layer switch. Below 2^56.
    pub frame: u64,
    /// Simulcast layer index (0 the lowest, up to 127); `None` for a single stream.
    pub layer: Option<u8>,
}

/// Set in the frame number's top bit when the next 7 bits hold a layer index: a single stream's
/// stamp keeps the bytes it always had, and its frame numbers never reach 2^56.
const LAYER_FLAG: u64 = 1 << 63;
const LAYER_SHIFT: u32 = 56;
const FRAME_MASK: u64 = (1 << LAYER_SHIFT) - 1;

impl Stamp {
    fn write(&self, out: &mut Vec<u8>) {
        let frame = match self.layer {
            Some(l) => {
                LAYER_FLAG | (u64::from(l & 0x7f) << LAYER_SHIFT) | (self.frame & FRAME_MASK)
            }
            None => self.frame,
        };
        out.extend_from_slice(&self.send_us.to_be_bytes());
        out.extend_from_slice(&frame.to_be_bytes());
    }

    fn read(b: &[u8]) -> Option<Stamp> {
        let b = b.get(..STAMP_LEN)?;
        let (t, f) = b.split_at(8);
        let frame = u64::from_be_bytes(f.try_into().ok()?);
        let layered = frame & LAYER_FLAG != 0;
        Some(Stamp {
            send_us: u64::from_be_bytes(t.try_into().ok()?),
            frame: if layered { frame & FRAME_MASK } else { frame },
            layer: layered.then_some(((frame >> LAYER_SHIFT) & 0x7f) as u8),
        })
    }
}

const NAL_NON_IDR: u8 = 1;
const NAL_IDR: u8 = 5;
const NAL_SEI: u8 = 6;
const NAL_STAP_A: u8 = 24;
const NAL_FU_A: u8 = 28;
/// SPS and PPS of a Constrained Baseline 3.1 stream (profile-level-id 42e01f), 320×240 at
/// 30 fps: complete, so a recorder can write its `avcC` from them (x264's, constraint_set2 set).
const SPS: [u8; 24] = [
    0x67, 0x42, 0xe0, 0x1f, 0xd9, 0x01, 0x41, 0xfb, 0x01, 0x10, 0x00, 0x00, 0x03, 0x00, 0x10, 0x00,
    0x00, 0x03, 0x03, 0xc0, 0xf1, 0x83, 0x24, 0x80,
];
const PPS: [u8; 5] = [0x68, 0xcb, 0x83, 0xcb, 0x20];
/// The rest of a VP8 keyframe's header after the frame tag's first byte (RFC 6386 §9.1): the
/// tag's size bytes, the start code, 320×240 — so a recorder can read the frame size.
const VP8_KEY_HEADER: [u8; 9] = [0x00, 0x00, 0x9d, 0x01, 0x2a, 0x40, 0x01, 0xf0, 0x00];
/// Opus TOC: CELT fullband 20 ms, stereo, one frame.
const OPUS_TOC: u8 = 0xfc;

/// Reads the stamp of a payload this module built; `None` for anything else.
pub fn read_stamp(codec: Codec, payload: &[u8]) -> Option<Stamp> {
    let at = match codec {
        Codec::Opus => 1,
        Codec::Vp8 => {
            let d = vp8_descriptor(payload)?;
            let keyframe_start =
                d.start && d.partition == 0 && payload.get(d.len).is_some_and(|tag| tag & 1 == 0);
            d.len
                + 1
                + if keyframe_start {
                    VP8_KEY_HEADER.len()
                } else {
                    0
                }
        }
        Codec::Vp9 | Codec::Av1 => return None,
        Codec::H264 => match payload.first()? & 0x1f {
            NAL_STAP_A => return stap_a_sei(payload),
            NAL_FU_A => 2,
            1..=23 => 1,
            _ => return None,
        },
    };
    Stamp::read(payload.get(at..)?)
}

/// The stamp inside the SEI unit of an STAP-A.
fn stap_a_sei(p: &[u8]) -> Option<Stamp> {
    let mut i = 1;
    while let Some(size) = p.get(i..i + 2) {
        let size = usize::from(u16::from_be_bytes([size[0], size[1]]));
        let unit = p.get(i + 2..i + 2 + size)?;
        if unit.first().is_some_and(|b| b & 0x1f == NAL_SEI) {
            return Stamp::read(unit.get(1..)?);
        }
        i += 2 + size;
    }
    None
}

/// Whether `payload` is the first packet of a frame (audio: every packet). For H.264 an IDR's
/// first FU-A is not: the STAP-A with SPS/PPS before it starts the frame.
pub fn is_frame_start(codec: Codec, payload: &[u8]) -> bool {
    match codec {
        Codec::Opus => true,
        Codec::Vp8 => vp8_descriptor(payload).is_some_and(|d| d.start && d.partition == 0),
        Codec::H264 => match payload.first().map(|b| b & 0x1f) {
            Some(NAL_STAP_A) | Some(1..=23) => true,
            Some(NAL_FU_A) => payload
                .get(1)
                .is_some_and(|fu| fu & 0x80 != 0 && fu & 0x1f != NAL_IDR),
            _ => false,
        },
        Codec::Vp9 => crate::codec::vp9::Vp9Descriptor::parse(payload)
            .is_ok_and(|d| d.start_of_frame && d.spatial() == 0),
        // The first OBU element is not the continuation of a fragment.
        Codec::Av1 => payload.first().is_some_and(|agg| agg & 0x80 == 0),
    }
}

/// One video frame (or audio packet) to packetize.
#[derive(Debug, Clone, Copy)]
pub(super) struct FrameSpec {
    pub keyframe: bool,
    pub stamp: Stamp,
    /// VP8 15-bit picture id.
    pub picture_id: u16,
    /// Payload bytes to produce in total (codec headers included); a floor applies.
    pub bytes: usize,
    /// VP8 temporal layer: its index, the layer sync bit (Y) and TL0PICIDX.
    pub temporal: Option<(u8, bool, u8)>,
}

/// Splits a frame into RTP payloads of at most `max_payload` bytes. The last one carries the
/// marker.
pub(super) fn packetize(codec: Codec, f: &FrameSpec, max_payload: usize) -> Vec<Vec<u8>> {
    match codec {
        Codec::Opus => {
            let mut p = Vec::with_capacity(f.bytes.max(1 + STAMP_LEN));
            p.push(OPUS_TOC);
            f.stamp.write(&mut p);
            fill(&mut p, f.bytes, f.stamp.frame);
            vec![p]
        }
        Codec::Vp8 => vp8(f, max_payload),
        Codec::H264 => h264(f, max_payload),
        // The synthetic source publishes VP8 or H.264 (`PeerRole::Publisher`).
        Codec::Vp9 | Codec::Av1 => Vec::new(),
    }
}

/// Pads `p` to `len` with a pattern derived from the frame number.
fn fill(p: &mut Vec<u8>, len: usize, frame: u64) {
    let b = frame as u8;
    while p.len() < len {
        p.push(b.wrapping_add(p.len() as u8));
    }
}

/// Sizes of `n` parts summing to `total`, as equal as possible.
fn split(total: usize, n: usize) -> impl Iterator<Item = usize> {
    let n = n.max(1);
    (0..n).map(move |i| total / n + usize::from(i < total % n))
}

fn vp8(f: &FrameSpec, max_payload: usize) -> Vec<Vec<u8>> {
    // The descriptor (4 bytes, 6 with TL0PICIDX and TID) and the frame tag's first byte.
    let header = if f.temporal.is_some() { 6 + 1 } else { 4 + 1 };
    let room = max_payload.saturating_sub(header + STAMP_LEN).max(1);
    let body = f.bytes.saturating_sub(header + STAMP_LEN).max(1);
    let n = body.div_ceil(room);
    let pid = f.picture_id & 0x7fff;
    split(body, n)
        .enumerate()
        .map(|(i, len)| {
            let mut p = Vec::with_capacity(header + STAMP_LEN + len);
            // X=1, S on the first packet, PID 0; I=1 (and L, T with temporal layers); M=1
            // with the 15-bit picture id; TL0PICIDX; TID, Y.
            let start = if i == 0 { 0x10 } else { 0 };
            let lt = if f.temporal.is_some() { 0x60 } else { 0 };
            p.extend_from_slice(&[0x80 | start, 0x80 | lt, 0x80 | (pid >> 8) as u8, pid as u8]);
            if let Some((tid, sync, tl0)) = f.temporal {
                p.extend_from_slice(&[tl0, (tid & 3) << 6 | u8::from(sync) << 5]);
            }
            // First byte of the VP8 frame tag: show_frame, and P = 0 on keyframes.
            p.push(match (i, f.keyframe) {
                (0, true) => 0x10,
                (0, false) => 0x11,
                _ => 0,
            });
            if i == 0 && f.keyframe {
                p.extend_from_slice(&VP8_KEY_HEADER);
            }
            f.stamp.write(&mut p);
            fill(&mut p, header + STAMP_LEN + len, f.stamp.frame);
            p
        })
        .collect()
}

fn h264(f: &FrameSpec, max_payload: usize) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut body = f.bytes;
    let (nal_type, nri) = if f.keyframe {
        // STAP-A: SPS, PPS and an SEI unit that carries the stamp.
        let mut p = vec![0x60 | NAL_STAP_A];
        for unit in [&SPS[..], &PPS[..]] {
            p.extend_from_slice(&(unit.len() as u16).to_be_bytes());
            p.extend_from_slice(unit);
        }
        p.extend_from_slice(&(1 + STAMP_LEN as u16).to_be_bytes());
        p.push(NAL_SEI);
        f.stamp.write(&mut p);
        body = body.saturating_sub(p.len());
        out.push(p);
        (NAL_IDR, 0x60)
    } else {
        (NAL_NON_IDR, 0x40)
    };
    let single = 1 + STAMP_LEN;
    if body.max(single) <= max_payload {
        let mut p = Vec::with_capacity(body.max(single));
        p.push(nri | nal_type);
        f.stamp.write(&mut p);
        fill(&mut p, body, f.stamp.frame);
        out.push(p);
        return out;
    }
    const FU_HEADER: usize = 2;
    let room = max_payload.saturating_sub(FU_HEADER + STAMP_LEN).max(1);
    let data = body.saturating_sub(FU_HEADER + STAMP_LEN);
    // At least two fragments: one FU may not carry both the start and the end (RFC 6184 §5.8).
    let n = data.div_ceil(room).max(2);
    for (i, len) in split(data, n).enumerate() {
        let mut p = Vec::with_capacity(FU_HEADER + STAMP_LEN + len);
        let se = match i {
            0 => 0x80,
            i if i + 1 == n => 0x40,
            _ => 0,
        };
        p.extend_from_slice(&[nri | NAL_FU_A, se | nal_type]);
        f.stamp.write(&mut p);
        fill(&mut p, FU_HEADER + STAMP_LEN + len, f.stamp.frame);
        out.push(p);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(keyframe: bool, bytes: usize) -> FrameSpec {
        FrameSpec {
            keyframe,
            stamp: Stamp {
                send_us: 123_456,
                frame: 42,
                layer: None,
            },
            picture_id: 0x1234,
            bytes,
            temporal: None,
        }
    }

    #[test]
    fn vp8_temporal_layers_go_in_the_descriptor() {
        let f = FrameSpec {
            temporal: Some((2, true, 77)),
            ..spec(false, 2500)
        };
        let pkts = packetize(Codec::Vp8, &f, 1000);
        assert_eq!(pkts.len(), 3);
        for p in &pkts {
            let d = vp8_descriptor(p).unwrap();
            assert_eq!(d.temporal, Some((2, true)));
            assert_eq!(d.picture_id, Some((0x1234, true)));
            assert_eq!(read_stamp(Codec::Vp8, p).unwrap().frame, 42);
        }
        assert_eq!(pkts.iter().map(Vec::len).sum::<usize>(), 2500 - 23 + 3 * 23);
    }

    #[test]
    fn vp8_frames_are_real_descriptors_with_stamps() {
        let pkts = packetize(Codec::Vp8, &spec(true, 3000), 1000);
        assert_eq!(pkts.len(), 4);
        assert!(pkts.iter().all(|p| p.len() <= 1000));
        assert_eq!(pkts.iter().map(Vec::len).sum::<usize>(), 3000 - 21 + 4 * 21);
        assert!(Codec::Vp8.is_keyframe_start(&pkts[0]));
        assert!(is_frame_start(Codec::Vp8, &pkts[0]));
        for p in &pkts[1..] {
            assert!(!Codec::Vp8.is_keyframe_start(p) && !is_frame_start(Codec::Vp8, p));
        }
        for p in &pkts {
            let d = vp8_descriptor(p).unwrap();
            assert_eq!(d.picture_id, Some((0x1234, true)));
            assert_eq!(read_stamp(Codec::Vp8, p).unwrap().frame, 42);
        }
        let delta = packetize(Codec::Vp8, &spec(false, 500), 1000);
        assert_eq!(delta.len(), 1);
        assert!(!Codec::Vp8.is_keyframe_start(&delta[0]));
        assert!(is_frame_start(Codec::Vp8, &delta[0]));
    }

    #[test]
    fn h264_keyframe_is_stap_a_then_idr_fragments() {
        let pkts = packetize(Codec::H264, &spec(true, 2500), 1000);
        assert!(pkts.len() >= 4, "{}", pkts.len());
        assert_eq!(pkts[0][0] & 0x1f, NAL_STAP_A);
        assert!(Codec::H264.is_keyframe_start(&pkts[0]));
        assert_eq!(pkts[1][..2], [0x7c, 0x85], "FU-A start of an IDR");
        assert_eq!(pkts.last().unwrap()[1], 0x45, "FU-A end of an IDR");
        assert!(is_frame_start(Codec::H264, &pkts[0]));
        assert!(!is_frame_start(Codec::H264, &pkts[1]));
        for p in &pkts {
            assert!(p.len() <= 1000);
            assert_eq!(read_stamp(Codec::H264, p).unwrap().send_us, 123_456);
        }
        let small = packetize(Codec::H264, &spec(false, 300), 1000);
        assert_eq!((small.len(), small[0][0]), (1, 0x41));
        let big = packetize(Codec::H264, &spec(false, 1500), 1000);
        assert_eq!((big.len(), big[0][..2].to_vec()), (2, vec![0x5c, 0x81]));
        assert!(is_frame_start(Codec::H264, &big[0]) && !Codec::H264.is_keyframe_start(&big[0]));
        assert!(!is_frame_start(Codec::H264, &big[1]));
    }

    #[test]
    fn opus_and_garbage() {
        let p = packetize(Codec::Opus, &spec(false, 100), 1000);
        assert_eq!(p[0].len(), 100);
        assert_eq!(read_stamp(Codec::Opus, &p[0]).unwrap().frame, 42);
        assert_eq!(read_stamp(Codec::H264, &[0x78, 0xff, 0xff]), None);
        assert_eq!(read_stamp(Codec::Vp8, &[0x90]), None);
        assert!(!is_frame_start(Codec::H264, &[]));
    }

    #[test]
    fn a_layer_index_rides_in_the_stamp_and_a_single_stream_stamp_is_unchanged() {
        let single = packetize(Codec::Vp8, &spec(true, 600), 1000);
        let mut layered = spec(true, 600);
        layered.stamp.layer = Some(2);
        let layered = packetize(Codec::Vp8, &layered, 1000);
        // Only the frame number's top byte differs: the fill pattern follows the frame number.
        let diff: Vec<usize> = (0..single[0].len())
            .filter(|&i| single[0][i] != layered[0][i])
            .collect();
        assert_eq!(diff.len(), 1, "{diff:?}");
        assert_eq!(layered[0][diff[0]], 0x80 | 2);
        let s = read_stamp(Codec::Vp8, &single[0]).unwrap();
        assert_eq!((s.frame, s.layer), (42, None));
        for codec in [Codec::Vp8, Codec::H264, Codec::Opus] {
            for key in [true, false] {
                let mut f = spec(key, 2500);
                f.stamp.layer = Some(127);
                f.stamp.frame = FRAME_MASK;
                for p in packetize(codec, &f, 1000) {
                    assert_eq!(read_stamp(codec, &p), Some(f.stamp), "{codec:?} {key}");
                }
            }
        }
    }
}
