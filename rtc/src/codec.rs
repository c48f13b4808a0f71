//! Codec knowledge the forwarder needs: which codecs we carry and how to
//! recognise the first packet of a keyframe without decoding anything.

use serde::{Deserialize, Serialize};

pub mod av1;
pub mod dims;
#[cfg(any(test, feature = "fuzzing"))]
pub mod fuzz;
pub mod layers;
pub mod vp9;

/// The media codecs Ferry negotiates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Codec {
    /// Opus audio, 48 kHz.
    Opus,
    /// VP8 video (RFC 7741).
    Vp8,
    /// H.264 video, packetization-mode 1 (RFC 6184).
    H264,
    /// VP9 video (RFC 9628), profile 0; spatial and temporal layers (SVC) in one stream.
    Vp9,
    /// AV1 video (the AV1 RTP specification); layers described by the dependency descriptor.
    Av1,
}

impl Codec {
    /// The `a=rtpmap` encoding name.
    pub fn encoding_name(self) -> &'static str {
        match self {
            Codec::Opus => "opus",
            Codec::Vp8 => "VP8",
            Codec::H264 => "H264",
            Codec::Vp9 => "VP9",
            Codec::Av1 => "AV1",
        }
    }

    /// Maps an `a=rtpmap` encoding name (case-insensitive).
    pub fn from_encoding_name(name: &str) -> Option<Self> {
        if name.eq_ignore_ascii_case("opus") {
            Some(Codec::Opus)
        } else if name.eq_ignore_ascii_case("vp8") {
            Some(Codec::Vp8)
        } else if name.eq_ignore_ascii_case("h264") {
            Some(Codec::H264)
        } else if name.eq_ignore_ascii_case("vp9") {
            Some(Codec::Vp9)
        } else if name.eq_ignore_ascii_case("av1") {
            Some(Codec::Av1)
        } else {
            None
        }
    }

    /// RTP clock rate.
    pub fn clock_rate(self) -> u32 {
        match self {
            Codec::Opus => 48_000,
            Codec::Vp8 | Codec::H264 | Codec::Vp9 | Codec::Av1 => 90_000,
        }
    }

    /// Whether this is a video codec (keyframes matter).
    pub fn is_video(self) -> bool {
        !matches!(self, Codec::Opus)
    }

    /// Stable numeric id used in snapshots.
    pub fn to_wire(self) -> u32 {
        match self {
            Codec::Opus => 1,
            Codec::Vp8 => 2,
            Codec::H264 => 3,
            Codec::Vp9 => 4,
            Codec::Av1 => 5,
        }
    }

    /// Inverse of [`Codec::to_wire`].
    pub fn from_wire(v: u32) -> Option<Self> {
        match v {
            1 => Some(Codec::Opus),
            2 => Some(Codec::Vp8),
            3 => Some(Codec::H264),
            4 => Some(Codec::Vp9),
            5 => Some(Codec::Av1),
            _ => None,
        }
    }

    /// Whether `payload` is the first packet of a keyframe. Audio is always
    /// decodable on its own, so every audio packet counts as a start point.
    pub fn is_keyframe_start(self, payload: &[u8]) -> bool {
        match self {
            Codec::Opus => true,
            Codec::Vp8 => vp8_is_keyframe_start(payload),
            Codec::H264 => h264_is_keyframe_start(payload),
            Codec::Vp9 => vp9_is_keyframe_start(payload),
            Codec::Av1 => av1_is_keyframe_start(payload),
        }
    }

    /// Whether the codec carries spatial/temporal layers inside one stream that a viewer can
    /// be given a part of (VP9 and AV1 SVC; VP8 temporal layers are found per packet).
    pub fn is_scalable(self) -> bool {
        matches!(self, Codec::Vp9 | Codec::Av1)
    }
}

/// Parsed VP8 payload descriptor (RFC 7741 §4.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Vp8Descriptor {
    /// Start of a VP8 partition.
    pub start: bool,
    /// Partition index.
    pub partition: u8,
    /// Picture ID and whether it is the 15-bit form.
    pub picture_id: Option<(u16, bool)>,
    /// Byte offset of the picture ID inside the payload.
    pub picture_id_offset: usize,
    /// TL0PICIDX and its byte offset.
    pub tl0_pic_idx: Option<(u8, usize)>,
    /// TID and the layer-sync bit Y (T=1).
    pub temporal: Option<(u8, bool)>,
    /// KEYIDX (K=1).
    pub key_idx: Option<u8>,
    /// Length of the descriptor; the VP8 payload starts here.
    pub len: usize,
}

/// Parses the VP8 payload descriptor; `None` if it is truncated.
pub fn vp8_descriptor(p: &[u8]) -> Option<Vp8Descriptor> {
    let b0 = *p.first()?;
    let mut i = 1;
    let mut d = Vp8Descriptor {
        start: b0 & 0x10 != 0,
        partition: b0 & 0x07,
        picture_id: None,
        picture_id_offset: 0,
        tl0_pic_idx: None,
        temporal: None,
        key_idx: None,
        len: 0,
    };
    if b0 & 0x80 != 0 {
        let x = *p.get(i)?;
        i += 1;
        if x & 0x80 != 0 {
            let b = *p.get(i)?;
            d.picture_id_offset = i;
            if b & 0x80 != 0 {
                let b2 = *p.get(i + 1)?;
                d.picture_id = Some(((u16::from(b & 0x7f) << 8) | u16::from(b2), true));
                i += 2;
            } else {
                d.picture_id = Some((u16::from(b), false));
                i += 1;
            }
        }
        if x & 0x40 != 0 {
            d.tl0_pic_idx = Some((*p.get(i)?, i));
            i += 1;
        }
        if x & 0x30 != 0 {
            // TID (2 bits) | Y | KEYIDX (5 bits), present when T or K is set.
            let b = *p.get(i)?;
            if x & 0x20 != 0 {
                d.temporal = Some((b >> 6, b & 0x20 != 0));
            }
            if x & 0x10 != 0 {
                d.key_idx = Some(b & 0x1f);
            }
            i += 1;
        }
    }
    d.len = i;
    Some(d)
}

fn vp8_is_keyframe_start(p: &[u8]) -> bool {
    let Some(d) = vp8_descriptor(p) else {
        return false;
    };
    // The inverse key-frame flag P lives in the first byte of partition 0.
    d.start && d.partition == 0 && p.get(d.len).is_some_and(|b| b & 0x01 == 0)
}

/// Rewrites the VP8 picture ID and TL0PICIDX in place by adding the deltas
/// (mod 2^15 / 2^7 and 2^8), keeping the descriptor's size.
pub fn vp8_rewrite(payload: &mut [u8], pic_delta: u16, tl0_delta: u8) {
    let Some(d) = vp8_descriptor(payload) else {
        return;
    };
    if let Some((pid, long)) = d.picture_id {
        let o = d.picture_id_offset;
        if long {
            let v = pid.wrapping_add(pic_delta) & 0x7fff;
            payload[o] = 0x80 | (v >> 8) as u8;
            payload[o + 1] = v as u8;
        } else {
            payload[o] = (pid.wrapping_add(pic_delta) & 0x7f) as u8;
        }
    }
    if let Some((t, o)) = d.tl0_pic_idx {
        payload[o] = t.wrapping_add(tl0_delta);
    }
}

/// The first packet of a VP9 keyframe: the start of the base spatial layer's frame of a picture
/// that is not inter-predicted (RFC 9628: B set, P clear, and no spatial id or spatial id 0).
fn vp9_is_keyframe_start(p: &[u8]) -> bool {
    let Ok(d) = vp9::Vp9Descriptor::parse(p) else {
        return false;
    };
    d.start_of_frame && d.is_keyframe() && d.spatial() == 0
}

/// The first packet of an AV1 keyframe: its aggregation header starts a coded video sequence
/// (N) and its first OBU element is not a continuation (Z clear) — what a sender sets on the
/// first packet of a keyframe that carries the sequence header.
fn av1_is_keyframe_start(p: &[u8]) -> bool {
    p.first()
        .is_some_and(|agg| agg & 0x08 != 0 && agg & 0x80 == 0)
}

const NAL_IDR: u8 = 5;
const NAL_SPS: u8 = 7;
const NAL_STAP_A: u8 = 24;
const NAL_FU_A: u8 = 28;

fn h264_is_keyframe_start(p: &[u8]) -> bool {
    let Some(&b0) = p.first() else {
        return false;
    };
    match b0 & 0x1f {
        NAL_SPS | NAL_IDR => true,
        NAL_STAP_A => {
            let mut i = 1;
            while i + 2 < p.len() {
                let size = usize::from(u16::from_be_bytes([p[i], p[i + 1]]));
                let Some(&nal) = p.get(i + 2) else {
                    return false;
                };
                if matches!(nal & 0x1f, NAL_SPS | NAL_IDR) {
                    return true;
                }
                i += 2 + size;
            }
            false
        }
        NAL_FU_A => p
            .get(1)
            .is_some_and(|fu| fu & 0x80 != 0 && matches!(fu & 0x1f, NAL_SPS | NAL_IDR)),
        _ => false,
    }
}

#[cfg(test)]
mod tests_av1;
#[cfg(test)]
mod tests_dims;
#[cfg(test)]
mod tests_layers;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vp8_keyframe_needs_start_of_partition_zero_and_p_clear() {
        // X=1, S=1, PID=0; I=1 with 15-bit picture id 0x1234; payload byte P=0.
        let key = [0x90, 0x80, 0x92, 0x34, 0x10];
        assert!(Codec::Vp8.is_keyframe_start(&key));
        let delta = [0x90, 0x80, 0x92, 0x34, 0x11];
        assert!(!Codec::Vp8.is_keyframe_start(&delta));
        let not_start = [0x80, 0x80, 0x92, 0x34, 0x10];
        assert!(!Codec::Vp8.is_keyframe_start(&not_start));
        assert!(!Codec::Vp8.is_keyframe_start(&[0x90, 0x80]));
    }

    #[test]
    fn vp8_rewrite_keeps_size_and_wraps() {
        let mut p = [0x90, 0xc0, 0xff, 0xff, 0x07, 0x10];
        vp8_rewrite(&mut p, 2, 250);
        let d = vp8_descriptor(&p).unwrap();
        assert_eq!(d.picture_id, Some((1, true)));
        assert_eq!(d.tl0_pic_idx, Some((1, 4)));
        let mut short = [0x90, 0x80, 0x7f, 0x10];
        vp8_rewrite(&mut short, 1, 0);
        assert_eq!(vp8_descriptor(&short).unwrap().picture_id, Some((0, false)));
    }

    #[test]
    fn h264_keyframes_in_single_stap_a_and_fu_a() {
        assert!(Codec::H264.is_keyframe_start(&[0x67, 0x42]));
        assert!(Codec::H264.is_keyframe_start(&[0x65, 0x88]));
        assert!(!Codec::H264.is_keyframe_start(&[0x41, 0x9a]));
        // STAP-A: [size=2][SPS..][size=2][PPS..]
        assert!(Codec::H264.is_keyframe_start(&[0x78, 0, 2, 0x67, 0x42, 0, 2, 0x68, 0xce]));
        assert!(!Codec::H264.is_keyframe_start(&[0x78, 0, 2, 0x41, 0x42]));
        // FU-A start of an IDR slice, and a continuation.
        assert!(Codec::H264.is_keyframe_start(&[0x7c, 0x85, 0]));
        assert!(!Codec::H264.is_keyframe_start(&[0x7c, 0x05, 0]));
        assert!(!Codec::H264.is_keyframe_start(&[0x7c]));
    }

    #[test]
    fn opus_always_starts() {
        assert!(Codec::Opus.is_keyframe_start(&[]));
        assert_eq!(Codec::from_wire(Codec::H264.to_wire()), Some(Codec::H264));
        assert_eq!(Codec::from_encoding_name("vp8"), Some(Codec::Vp8));
    }
}
