//! The H.264 facts a muxer needs from an access unit: its parameter sets (for `avcC`), the coded
//! size (read from the SPS, ITU-T H.264 §7.3.2.1.1) and the AVCC form of its NAL units (each
//! behind a 4-byte length instead of a start code, ISO/IEC 14496-15 §5.3.2).

use ferry_rtc::media::annexb;
use ferry_rtc::media::nal::{self, AUD, PPS, SPS};

/// The decoder configuration of an H.264 stream, taken from a keyframe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct H264Params {
    /// The sequence parameter set, NAL header included.
    pub sps: Vec<u8>,
    /// The picture parameter set, NAL header included.
    pub pps: Vec<u8>,
    /// Coded width in pixels after cropping.
    pub width: u16,
    /// Coded height in pixels after cropping.
    pub height: u16,
}

impl H264Params {
    /// The first SPS and PPS of an Annex B access unit; `None` without both or when the SPS
    /// does not parse.
    pub fn from_access_unit(au: &[u8]) -> Option<H264Params> {
        let mut sps = None;
        let mut pps = None;
        for unit in annexb::nal_units(au) {
            match unit.first().map(|h| nal::nal_type(*h)) {
                Some(SPS) if sps.is_none() => sps = Some(unit),
                Some(PPS) if pps.is_none() => pps = Some(unit),
                _ => {}
            }
        }
        let (sps, pps) = (sps?, pps?);
        let (width, height) = sps_dimensions(sps)?;
        Some(H264Params {
            sps: sps.to_vec(),
            pps: pps.to_vec(),
            width: u16::try_from(width).ok()?,
            height: u16::try_from(height).ok()?,
        })
    }
}

/// An Annex B access unit in AVCC form (4-byte big-endian lengths), access unit delimiters
/// left out (they have no place in an MP4 sample). `None` when it holds no NAL unit.
pub fn to_avcc(au: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(au.len() + 16);
    for unit in annexb::nal_units(au) {
        if unit.first().is_some_and(|h| nal::nal_type(*h) == AUD) {
            continue;
        }
        out.extend_from_slice(&u32::try_from(unit.len()).ok()?.to_be_bytes());
        out.extend_from_slice(unit);
    }
    (!out.is_empty()).then_some(out)
}

/// Reads bits MSB first from an RBSP.
#[derive(Debug)]
struct Bits {
    data: Vec<u8>,
    pos: usize,
}

impl Bits {
    fn bit(&mut self) -> Option<u32> {
        let byte = *self.data.get(self.pos / 8)?;
        let b = (byte >> (7 - self.pos % 8)) & 1;
        self.pos += 1;
        Some(u32::from(b))
    }

    fn bits(&mut self, n: u32) -> Option<u32> {
        (0..n).try_fold(0u32, |acc, _| Some(acc << 1 | self.bit()?))
    }

    /// Exp-Golomb ue(v); values beyond 32 bits are refused.
    fn ue(&mut self) -> Option<u32> {
        let mut zeros = 0;
        while self.bit()? == 0 {
            zeros += 1;
            if zeros > 31 {
                return None;
            }
        }
        let rest = self.bits(zeros)?;
        ((1u64 << zeros) - 1 + u64::from(rest)).try_into().ok()
    }

    /// Exp-Golomb se(v).
    fn se(&mut self) -> Option<i64> {
        let k = i64::from(self.ue()?);
        Some(if k % 2 == 1 { (k + 1) / 2 } else { -(k / 2) })
    }
}

/// The RBSP of a NAL unit's payload: emulation prevention bytes (`00 00 03`) removed.
fn rbsp(payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(payload.len());
    let mut zeros = 0;
    for &b in payload {
        if zeros >= 2 && b == 3 {
            zeros = 0;
            continue;
        }
        zeros = if b == 0 { zeros + 1 } else { 0 };
        out.push(b);
    }
    out
}

fn skip_scaling_list(r: &mut Bits, size: usize) -> Option<()> {
    let (mut last, mut next) = (8i64, 8i64);
    for _ in 0..size {
        if next != 0 {
            next = (last + r.se()? + 256).rem_euclid(256);
        }
        if next != 0 {
            last = next;
        }
    }
    Some(())
}

/// Width and height in pixels of an SPS (NAL header included), after the cropping window.
pub fn sps_dimensions(sps: &[u8]) -> Option<(u32, u32)> {
    if sps.first().map(|h| nal::nal_type(*h)) != Some(SPS) {
        return None;
    }
    let mut r = Bits {
        data: rbsp(sps.get(1..)?),
        pos: 0,
    };
    let profile = r.bits(8)?;
    r.bits(16)?; // constraint flags, level
    r.ue()?; // seq_parameter_set_id
    let mut chroma_format = 1;
    let mut separate_planes = false;
    if matches!(
        profile,
        100 | 110 | 122 | 244 | 44 | 83 | 86 | 118 | 128 | 138 | 139 | 134 | 135
    ) {
        chroma_format = r.ue()?;
        if chroma_format == 3 {
            separate_planes = r.bit()? == 1;
        }
        r.ue()?; // bit_depth_luma_minus8
        r.ue()?; // bit_depth_chroma_minus8
        r.bit()?; // qpprime_y_zero_transform_bypass_flag
        if r.bit()? == 1 {
            let lists = if chroma_format == 3 { 12 } else { 8 };
            for i in 0..lists {
                if r.bit()? == 1 {
                    skip_scaling_list(&mut r, if i < 6 { 16 } else { 64 })?;
                }
            }
        }
    }
    r.ue()?; // log2_max_frame_num_minus4
    match r.ue()? {
        0 => {
            r.ue()?;
        }
        1 => {
            r.bit()?;
            r.se()?;
            r.se()?;
            let n = r.ue()?;
            if n > 255 {
                return None;
            }
            for _ in 0..n {
                r.se()?;
            }
        }
        _ => {}
    }
    r.ue()?; // max_num_ref_frames
    r.bit()?; // gaps_in_frame_num_value_allowed_flag
    let width_mbs = u64::from(r.ue()?) + 1;
    let height_units = u64::from(r.ue()?) + 1;
    let frame_mbs_only = u64::from(r.bit()?);
    if frame_mbs_only == 0 {
        r.bit()?; // mb_adaptive_frame_field_flag
    }
    r.bit()?; // direct_8x8_inference_flag
    let (mut left, mut right, mut top, mut bottom) = (0u64, 0u64, 0u64, 0u64);
    if r.bit()? == 1 {
        left = r.ue()?.into();
        right = r.ue()?.into();
        top = r.ue()?.into();
        bottom = r.ue()?.into();
    }
    let (sub_w, sub_h) = match (chroma_format, separate_planes) {
        (0, _) | (3, true) => (1, 1),
        (1, _) => (2, 2),
        (2, _) => (2, 1),
        _ => (1, 1),
    };
    let crop_x = sub_w;
    let crop_y = sub_h * (2 - frame_mbs_only);
    let width = (width_mbs * 16).checked_sub(crop_x * (left + right))?;
    let height = ((2 - frame_mbs_only) * height_units * 16).checked_sub(crop_y * (top + bottom))?;
    Some((u32::try_from(width).ok()?, u32::try_from(height).ok()?))
}

/// Fuzz target body: parameter sets and AVCC conversion of arbitrary bytes never panic.
#[cfg(any(test, feature = "fuzzing"))]
pub fn fuzz_h264(data: &[u8]) {
    let _ = H264Params::from_access_unit(data);
    let _ = to_avcc(data);
    let mut sps = vec![0x67];
    sps.extend_from_slice(data);
    let _ = sps_dimensions(&sps);
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A 1280x720 baseline SPS from libx264 (cropping 8 lines off 1280x736... no: 720 = 45 MBs).
    const SPS_720P: [u8; 11] = [
        0x67, 0x42, 0xc0, 0x1f, 0xda, 0x01, 0x40, 0x16, 0xe8, 0x06, 0xd0,
    ];

    #[test]
    fn dimensions_of_a_real_sps() {
        assert_eq!(sps_dimensions(&SPS_720P), Some((1280, 720)));
        // 1920x1080 high profile, cropped from 1088 (x264 --profile high).
        let sps_1080p = [
            0x67, 0x64, 0x00, 0x28, 0xac, 0xd9, 0x40, 0x78, 0x02, 0x27, 0xe5, 0xc0, 0x44, 0x00,
            0x00, 0x03, 0x00, 0x04, 0x00, 0x00, 0x03, 0x00, 0xf0, 0x3c, 0x60, 0xc6, 0x58,
        ];
        assert_eq!(sps_dimensions(&sps_1080p), Some((1920, 1080)));
    }

    #[test]
    fn avcc_replaces_start_codes_and_drops_delimiters() {
        let au = [
            0, 0, 0, 1, 0x09, 0xf0, 0, 0, 1, 0x67, 0x42, 0, 0, 0, 1, 0x65, 0x88,
        ];
        assert_eq!(
            to_avcc(&au),
            Some(vec![0, 0, 0, 2, 0x67, 0x42, 0, 0, 0, 2, 0x65, 0x88])
        );
        assert_eq!(to_avcc(&[1, 2, 3]), None);
    }

    #[test]
    fn params_need_both_sets() {
        let mut au = vec![0, 0, 0, 1];
        au.extend_from_slice(&SPS_720P);
        assert_eq!(H264Params::from_access_unit(&au), None);
        au.extend_from_slice(&[0, 0, 0, 1, 0x68, 0xce, 0x3c, 0x80, 0, 0, 0, 1, 0x65, 0x88]);
        let p = H264Params::from_access_unit(&au).unwrap();
        assert_eq!((p.width, p.height, p.pps.len()), (1280, 720, 4));
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..300)) {
            fuzz_h264(&data);
        }
    }
}
