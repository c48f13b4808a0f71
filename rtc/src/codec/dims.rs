//! The picture size of each video layer, read from the headers that travel with keyframes, so a
//! viewer's quality cap (`maxHeight: 180`) can pick the highest layer that fits without anything
//! being decoded:
//!
//! - VP8: the keyframe header after the payload descriptor (RFC 6386 §9.1, RFC 7741);
//! - H.264: the sequence parameter set, alone, in a STAP-A or at the start of an FU-A
//!   (H.264 §7.3.2.1.1, RFC 6184);
//! - VP9: the scalability structure of the payload descriptor (RFC 9628 §4.2), else the
//!   uncompressed header of a keyframe (VP9 bitstream spec §6.2);
//! - AV1: the sequence header OBU (AV1 spec §5.5, AV1 RTP spec §4), and the per-layer
//!   resolutions a dependency descriptor's structure may carry.
//!
//! Every reader is bounded by its input (at most a few thousand fields for an H.264 SPS with
//! scaling lists), allocates nothing and answers `None` rather than guess: an end-to-end
//! encrypted payload reads as garbage, and garbage must not turn into a layer size.

use crate::codec::av1::DependencyStructure;
use crate::codec::vp8_descriptor;
use crate::codec::vp9::{MAX_SPATIAL_LAYERS, Vp9Descriptor};

/// Known (width, height) per spatial layer id. Sizes are never zero; layers nobody announced
/// stay unknown rather than defaulting to something.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LayerSizes {
    sizes: [Option<(u16, u16)>; MAX_SPATIAL_LAYERS],
}

impl LayerSizes {
    /// The size of spatial layer `spatial`, if known.
    pub fn get(&self, spatial: u8) -> Option<(u16, u16)> {
        self.sizes.get(usize::from(spatial)).copied().flatten()
    }

    /// Records a layer's size; returns false (and records nothing) for a spatial id past
    /// [`MAX_SPATIAL_LAYERS`] or a zero dimension.
    pub fn set(&mut self, spatial: u8, size: (u16, u16)) -> bool {
        match self.sizes.get_mut(usize::from(spatial)) {
            Some(slot) if size.0 > 0 && size.1 > 0 => {
                *slot = Some(size);
                true
            }
            _ => false,
        }
    }

    /// Takes every layer `newer` knows, keeping the others: a keyframe header tells one
    /// layer's size, the structure all of them.
    pub fn update(&mut self, newer: &LayerSizes) {
        for (slot, new) in self.sizes.iter_mut().zip(newer.sizes) {
            if new.is_some() {
                *slot = new;
            }
        }
    }

    /// The known layers, lowest spatial id first.
    pub fn iter(&self) -> impl Iterator<Item = (u8, (u16, u16))> + '_ {
        (0u8..)
            .zip(self.sizes.iter())
            .filter_map(|(sid, s)| Some((sid, (*s)?)))
    }

    /// How many layers are known.
    pub fn len(&self) -> usize {
        self.sizes.iter().flatten().count()
    }

    /// Whether no layer is known.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The highest spatial layer whose known height is at most `max_height` (a viewer's
    /// `maxHeight`); `None` when no known layer fits.
    pub fn highest_at_most(&self, max_height: u16) -> Option<u8> {
        self.iter()
            .filter(|&(_, (_, h))| h <= max_height)
            .map(|(sid, _)| sid)
            .last()
    }
}

/// MSB-first bit reader. With `epb` set it drops H.264 emulation-prevention bytes (the 0x03 of
/// 0x00 0x00 0x03) as it goes, so the SPS never needs an unescaped copy.
struct Bits<'a> {
    data: &'a [u8],
    pos: usize,
    cur: u8,
    left: u8,
    zeros: u8,
    epb: bool,
}

impl<'a> Bits<'a> {
    fn new(data: &'a [u8]) -> Self {
        Bits {
            data,
            pos: 0,
            cur: 0,
            left: 0,
            zeros: 0,
            epb: false,
        }
    }

    fn rbsp(data: &'a [u8]) -> Self {
        Bits {
            epb: true,
            ..Bits::new(data)
        }
    }

    fn next_byte(&mut self) -> Option<u8> {
        let mut b = *self.data.get(self.pos)?;
        self.pos += 1;
        if self.epb {
            if self.zeros >= 2 && b == 0x03 {
                b = *self.data.get(self.pos)?;
                self.pos += 1;
                self.zeros = 0;
            }
            self.zeros = if b == 0 {
                self.zeros.saturating_add(1)
            } else {
                0
            };
        }
        Some(b)
    }

    fn bit(&mut self) -> Option<bool> {
        if self.left == 0 {
            self.cur = self.next_byte()?;
            self.left = 8;
        }
        self.left -= 1;
        Some((self.cur >> self.left) & 1 == 1)
    }

    fn flag(&mut self) -> Option<bool> {
        self.bit()
    }

    /// `n` ≤ 32 bits as an unsigned number.
    fn bits(&mut self, n: u32) -> Option<u32> {
        let mut v: u32 = 0;
        for _ in 0..n.min(32) {
            v = (v << 1) | u32::from(self.bit()?);
        }
        Some(v)
    }

    fn skip(&mut self, n: u32) -> Option<()> {
        for _ in 0..n {
            self.bit()?;
        }
        Some(())
    }

    /// Leading zero bits before a one, giving up past `max` of them.
    fn leading_zeros(&mut self, max: u32) -> Option<u32> {
        let mut n = 0;
        while !self.bit()? {
            n += 1;
            if n > max {
                return None;
            }
        }
        Some(n)
    }

    /// H.264 `ue(v)`. Values need at most 31 leading zeros to fit 32 bits; more is garbage.
    fn ue(&mut self) -> Option<u32> {
        let n = self.leading_zeros(31)?;
        let rest = self.bits(n)?;
        Some(((1u64 << n) - 1 + u64::from(rest)) as u32)
    }

    /// H.264 `se(v)`.
    fn se(&mut self) -> Option<i64> {
        let k = i64::from(self.ue()?);
        Some(if k % 2 == 1 { (k + 1) / 2 } else { -(k / 2) })
    }

    /// AV1 `uvlc()`: 32 or more leading zeros saturate instead of failing.
    fn uvlc(&mut self) -> Option<u32> {
        let mut n = 0u32;
        while !self.bit()? {
            n += 1;
        }
        if n >= 32 {
            return Some(u32::MAX);
        }
        let rest = self.bits(n)?;
        Some(((1u64 << n) - 1 + u64::from(rest)) as u32)
    }
}

/// A picture size that is not zero and fits 16 bits per dimension.
fn size(w: u64, h: u64) -> Option<(u16, u16)> {
    let w = u16::try_from(w).ok().filter(|&w| w > 0)?;
    let h = u16::try_from(h).ok().filter(|&h| h > 0)?;
    Some((w, h))
}

// ---------------------------------------------------------------------------------------- VP8

/// The picture size from the first packet of a VP8 keyframe (payload descriptor included);
/// `None` for anything else.
pub fn vp8_size(payload: &[u8]) -> Option<(u16, u16)> {
    let d = vp8_descriptor(payload)?;
    if !d.start || d.partition != 0 {
        return None;
    }
    vp8_keyframe_size(payload.get(d.len..)?)
}

/// The picture size from the start of a VP8 keyframe (RFC 6386 §9.1: the 3-byte frame tag, the
/// start code 0x9d 0x01 0x2a, then 14-bit width and height each with a 2-bit scale).
///
/// The scale bits only ask the renderer to upscale after decoding; the layer is coded, sent
/// and capped at the 14-bit size, so that is what is returned.
pub fn vp8_keyframe_size(frame: &[u8]) -> Option<(u16, u16)> {
    let head = frame.get(..10)?;
    // Bit 0 of the frame tag is the inverse key-frame flag; bits 1..=3 the version (0..=3).
    if head[0] & 0x01 != 0 || (head[0] >> 1) & 0x07 > 3 || head[3..6] != [0x9d, 0x01, 0x2a] {
        return None;
    }
    let w = u16::from_le_bytes([head[6], head[7]]) & 0x3fff;
    let h = u16::from_le_bytes([head[8], head[9]]) & 0x3fff;
    size(w.into(), h.into())
}

// --------------------------------------------------------------------------------------- H.264

const NAL_SPS: u8 = 7;
const NAL_STAP_A: u8 = 24;
const NAL_FU_A: u8 = 28;

/// The picture size from an H.264 SPS in an RTP payload (RFC 6184): a single SPS NAL unit, an
/// SPS inside a STAP-A, or the first fragment of an FU-A carrying an SPS.
pub fn h264_size(payload: &[u8]) -> Option<(u16, u16)> {
    let (&b0, rest) = payload.split_first()?;
    match b0 & 0x1f {
        NAL_SPS => h264_sps_size(rest),
        NAL_STAP_A => {
            let mut p = rest;
            // Every unit consumes at least its 2-byte size, so this ends.
            while let [hi, lo, tail @ ..] = p {
                let n = usize::from(u16::from_be_bytes([*hi, *lo]));
                let nal = tail.get(..n)?;
                p = tail.get(n..)?;
                if let Some((&h, sps)) = nal.split_first()
                    && h & 0x1f == NAL_SPS
                {
                    return h264_sps_size(sps);
                }
            }
            None
        }
        NAL_FU_A => match rest {
            [fu, sps @ ..] if fu & 0x80 != 0 && fu & 0x1f == NAL_SPS => h264_sps_size(sps),
            _ => None,
        },
        _ => None,
    }
}

/// Profiles whose SPS carries chroma format, bit depths and scaling matrices (H.264 §7.3.2.1.1).
const HIGH_PROFILES: [u32; 13] = [100, 110, 122, 244, 44, 83, 86, 118, 128, 138, 139, 134, 135];

/// The cropped picture size from an SPS: the NAL unit after its one-byte header, emulation
/// prevention bytes still in. The VUI after the cropping window is not read.
pub fn h264_sps_size(sps: &[u8]) -> Option<(u16, u16)> {
    let mut r = Bits::rbsp(sps);
    let profile_idc = r.bits(8)?;
    r.skip(16)?; // constraint flags, level_idc
    if r.ue()? > 31 {
        return None; // seq_parameter_set_id
    }
    let mut chroma_format_idc = 1;
    let mut separate_colour_plane = false;
    if HIGH_PROFILES.contains(&profile_idc) {
        chroma_format_idc = r.ue()?;
        if chroma_format_idc > 3 {
            return None;
        }
        if chroma_format_idc == 3 {
            separate_colour_plane = r.flag()?;
        }
        if r.ue()? > 6 || r.ue()? > 6 {
            return None; // bit depths of luma and chroma, 8..=14 bits
        }
        r.skip(1)?; // qpprime_y_zero_transform_bypass_flag
        if r.flag()? {
            // seq_scaling_matrix_present_flag: 6 4x4 lists, then 2 (4:2:0, 4:2:2) or 6 8x8.
            let lists = if chroma_format_idc == 3 { 12 } else { 8 };
            for i in 0..lists {
                if r.flag()? {
                    skip_scaling_list(&mut r, if i < 6 { 16 } else { 64 })?;
                }
            }
        }
    }
    if r.ue()? > 12 {
        return None; // log2_max_frame_num_minus4
    }
    match r.ue()? {
        0 => {
            if r.ue()? > 12 {
                return None; // log2_max_pic_order_cnt_lsb_minus4
            }
        }
        1 => {
            r.skip(1)?; // delta_pic_order_always_zero_flag
            r.se()?; // offset_for_non_ref_pic
            r.se()?; // offset_for_top_to_bottom_field
            let cycle = r.ue()?;
            if cycle > 255 {
                return None;
            }
            for _ in 0..cycle {
                r.se()?; // offset_for_ref_frame
            }
        }
        2 => {}
        _ => return None,
    }
    r.ue()?; // max_num_ref_frames
    r.skip(1)?; // gaps_in_frame_num_value_allowed_flag
    let width_mbs = u64::from(r.ue()?) + 1;
    let height_map_units = u64::from(r.ue()?) + 1;
    let frame_mbs_only = r.flag()?;
    if !frame_mbs_only {
        r.skip(1)?; // mb_adaptive_frame_field_flag
    }
    r.skip(1)?; // direct_8x8_inference_flag
    // Field coding counts map units in field pairs: two macroblock rows each.
    let field_factor = if frame_mbs_only { 1 } else { 2 };
    let mut width = width_mbs * 16;
    let mut height = height_map_units * 16 * field_factor;
    if r.flag()? {
        let (left, right, top, bottom) = (r.ue()?, r.ue()?, r.ue()?, r.ue()?);
        // Table 6-1 and equations 7-19..7-22: crop offsets count chroma samples (and field
        // lines), so their unit depends on the chroma format.
        let chroma_array_type = if separate_colour_plane {
            0
        } else {
            chroma_format_idc
        };
        let (unit_x, unit_y) = match chroma_array_type {
            0 => (1, field_factor),
            1 => (2, 2 * field_factor),
            2 => (2, field_factor),
            _ => (1, field_factor),
        };
        width = width.checked_sub(unit_x * (u64::from(left) + u64::from(right)))?;
        height = height.checked_sub(unit_y * (u64::from(top) + u64::from(bottom)))?;
    }
    size(width, height)
}

/// Reads past one `scaling_list()` (H.264 §7.3.2.1.1.1); nothing of it matters for the size.
fn skip_scaling_list(r: &mut Bits<'_>, len: usize) -> Option<()> {
    let (mut last, mut next) = (8i64, 8i64);
    for _ in 0..len {
        if next != 0 {
            let delta = r.se()?;
            if !(-128..=127).contains(&delta) {
                return None;
            }
            next = (last + delta + 256).rem_euclid(256);
        }
        if next != 0 {
            last = next;
        }
    }
    Some(())
}

// ---------------------------------------------------------------------------------------- VP9

/// Per spatial layer sizes from a VP9 RTP payload: the scalability structure's sizes (Y=1)
/// when the descriptor carries them, else, for the first packet of a layer frame that is not
/// inter-picture predicted, the size in the frame's uncompressed header, for the descriptor's
/// spatial layer. `None` when neither is there.
pub fn vp9_size(payload: &[u8]) -> Option<LayerSizes> {
    let d = Vp9Descriptor::parse(payload).ok()?;
    let mut out = LayerSizes::default();
    if let Some(ss) = d.ss
        && let Some(res) = ss.resolutions
    {
        for (sid, &s) in (0u8..).zip(res.iter().take(usize::from(ss.spatial_layers))) {
            out.set(sid, s);
        }
        if !out.is_empty() {
            return Some(out);
        }
    }
    if d.start_of_frame && !d.inter_picture_predicted {
        let s = vp9_frame_size(payload.get(d.len..)?)?;
        out.set(d.spatial(), s);
        return (!out.is_empty()).then_some(out);
    }
    None
}

/// The frame size from a VP9 uncompressed header (VP9 bitstream spec §6.2) of a keyframe or an
/// intra-only frame, the only ones that state it outright; `None` for other frames (their
/// size may come from a reference) and for anything that is not a VP9 frame.
pub fn vp9_frame_size(frame: &[u8]) -> Option<(u16, u16)> {
    let mut r = Bits::new(frame);
    if r.bits(2)? != 2 {
        return None; // frame_marker
    }
    let low = r.bits(1)?;
    let profile = (r.bits(1)? << 1) | low;
    if profile == 3 && r.flag()? {
        return None; // reserved_zero
    }
    if r.flag()? {
        return None; // show_existing_frame: no header of its own
    }
    let key = !r.flag()?; // frame_type 0 is KEY_FRAME
    let show_frame = r.flag()?;
    let error_resilient = r.flag()?;
    if key {
        vp9_sync_code(&mut r)?;
        vp9_color_config(&mut r, profile)?;
    } else {
        let intra_only = !show_frame && r.flag()?;
        if !error_resilient {
            r.skip(2)?; // reset_frame_context
        }
        if !intra_only {
            return None;
        }
        vp9_sync_code(&mut r)?;
        if profile > 0 {
            vp9_color_config(&mut r, profile)?;
        }
        r.skip(8)?; // refresh_frame_flags
    }
    let w = u64::from(r.bits(16)?) + 1;
    let h = u64::from(r.bits(16)?) + 1;
    size(w, h)
}

fn vp9_sync_code(r: &mut Bits<'_>) -> Option<()> {
    (r.bits(24)? == 0x49_83_42).then_some(())
}

fn vp9_color_config(r: &mut Bits<'_>, profile: u32) -> Option<()> {
    if profile >= 2 {
        r.skip(1)?; // ten_or_twelve_bit
    }
    let color_space = r.bits(3)?;
    let subsampling_signalled = profile == 1 || profile == 3;
    if color_space != 7 {
        r.skip(1)?; // color_range
        if subsampling_signalled {
            r.skip(2)?; // subsampling_x, subsampling_y
            if r.flag()? {
                return None; // reserved_zero
            }
        }
    } else if subsampling_signalled {
        // CS_RGB: 4:4:4 implied, only the reserved bit is sent.
        if r.flag()? {
            return None;
        }
    } else {
        return None; // RGB needs profile 1 or 3
    }
    Some(())
}

// ---------------------------------------------------------------------------------------- AV1

const OBU_SEQUENCE_HEADER: u8 = 1;

/// The maximum frame size from an AV1 sequence header OBU in an RTP payload (AV1 RTP spec §4:
/// the aggregation header, then OBU elements, each with a leb128 length except the last when
/// W is set). A first element continuing an earlier packet's OBU (Z=1) is skipped. For SVC
/// streams this is the size of the top layer; [`dd_sizes`] has the others when sent.
pub fn av1_size(payload: &[u8]) -> Option<(u16, u16)> {
    let (&agg, mut rest) = payload.split_first()?;
    let continuation = agg & 0x80 != 0;
    let w = usize::from((agg >> 4) & 0x03);
    let mut k = 0;
    while !rest.is_empty() {
        k += 1;
        let elem;
        if w != 0 && k == w {
            (elem, rest) = (rest, &[]);
        } else {
            // Each element takes at least its length byte, so the loop ends.
            let (len, n) = leb128(rest)?;
            let end = n.checked_add(len)?;
            elem = rest.get(n..end)?;
            rest = rest.get(end..)?;
        }
        if k == 1 && continuation {
            continue;
        }
        if let Some(s) = av1_obu_size(elem) {
            return Some(s);
        }
    }
    None
}

/// The size from one OBU (header, optional extension and size field) if it is a sequence
/// header. The RTP spec asks senders to drop the size field, but receivers must accept it.
fn av1_obu_size(obu: &[u8]) -> Option<(u16, u16)> {
    let (&h, mut rest) = obu.split_first()?;
    if h & 0x80 != 0 || (h >> 3) & 0x0f != OBU_SEQUENCE_HEADER {
        return None; // forbidden bit, or another OBU type
    }
    if h & 0x04 != 0 {
        rest = rest.get(1..)?; // extension header
    }
    if h & 0x02 != 0 {
        let (len, n) = leb128(rest)?;
        rest = rest.get(n..)?;
        // A fragment (Y=1) may end early; the parser then stops where the bytes do.
        rest = rest.get(..len).unwrap_or(rest);
    }
    av1_sequence_header_size(rest)
}

/// AV1 `leb128()`: the value and how many bytes it took (at most 8; values past 32 bits are
/// not conformant and are refused).
fn leb128(p: &[u8]) -> Option<(usize, usize)> {
    let mut v: u64 = 0;
    for (i, &b) in p.iter().take(8).enumerate() {
        v |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            let v = u32::try_from(v).ok()?;
            return Some((usize::try_from(v).ok()?, i + 1));
        }
    }
    None
}

/// The maximum frame size from a sequence header OBU's payload (AV1 spec §5.5.1), skipping
/// timing info, the decoder model and the operating points before it.
pub fn av1_sequence_header_size(seq: &[u8]) -> Option<(u16, u16)> {
    let mut r = Bits::new(seq);
    if r.bits(3)? > 2 {
        return None; // seq_profile 3..=7 are reserved
    }
    r.skip(1)?; // still_picture
    if r.flag()? {
        r.skip(5)?; // reduced_still_picture_header: seq_level_idx[0] only
    } else {
        let mut buffer_delay_len = 0;
        let mut decoder_model = false;
        if r.flag()? {
            // timing_info(): display tick, time scale, equal_picture_interval.
            r.skip(64)?;
            if r.flag()? {
                r.uvlc()?; // num_ticks_per_picture_minus_1
            }
            decoder_model = r.flag()?;
            if decoder_model {
                // decoder_model_info()
                buffer_delay_len = r.bits(5)? + 1;
                r.skip(32 + 5 + 5)?;
            }
        }
        let initial_display_delay = r.flag()?;
        let operating_points = r.bits(5)? + 1;
        for _ in 0..operating_points {
            r.skip(12)?; // operating_point_idc
            if r.bits(5)? > 7 {
                r.skip(1)?; // seq_tier
            }
            if decoder_model && r.flag()? {
                // operating_parameters_info(): both buffer delays and low_delay_mode_flag.
                r.skip(2 * buffer_delay_len + 1)?;
            }
            if initial_display_delay && r.flag()? {
                r.skip(4)?; // initial_display_delay_minus_1
            }
        }
    }
    let width_bits = r.bits(4)? + 1;
    let height_bits = r.bits(4)? + 1;
    let w = u64::from(r.bits(width_bits)?) + 1;
    let h = u64::from(r.bits(height_bits)?) + 1;
    size(w, h)
}

/// The per spatial layer render sizes a dependency descriptor's template structure carries
/// (AV1 RTP spec appendix A, `render_resolutions`), indexed by spatial id; `None` when it has
/// none. A dimension of 65536, legal there, does not fit and leaves that layer unknown.
pub fn dd_sizes(st: &DependencyStructure) -> Option<LayerSizes> {
    let mut out = LayerSizes::default();
    for (sid, &(w, h)) in (0u8..).zip(&st.resolutions) {
        if let Some(s) = size(w.into(), h.into()) {
            out.set(sid, s);
        }
    }
    (!out.is_empty()).then_some(out)
}

// --------------------------------------------------------------------------------------- fuzz

/// Fuzz body (`fuzz/fuzz_targets/dims.rs`): arbitrary bytes into every reader, as they are and
/// behind prefixes that get them past the packetization into the headers proper. Nothing may
/// panic, and every size found must be plausible (no zero dimension).
#[cfg(any(test, feature = "fuzzing"))]
pub fn fuzz_dims(data: &[u8]) {
    use crate::codec::av1::DependencyDescriptor;

    fn plausible(s: Option<(u16, u16)>) {
        if let Some((w, h)) = s {
            assert!(w > 0 && h > 0, "zero dimension {w}x{h}");
        }
    }
    fn layers(l: Option<LayerSizes>) {
        if let Some(l) = l {
            assert!(!l.is_empty(), "empty layer sizes returned");
            assert_eq!(l.iter().count(), l.len());
            for (sid, s) in l.iter() {
                assert!(usize::from(sid) < MAX_SPATIAL_LAYERS);
                assert_eq!(l.get(sid), Some(s));
                plausible(Some(s));
            }
            if let Some(sid) = l.highest_at_most(u16::MAX) {
                assert!(l.get(sid).is_some());
            }
        }
    }

    plausible(vp8_size(data));
    plausible(vp8_keyframe_size(data));
    plausible(h264_size(data));
    plausible(h264_sps_size(data));
    layers(vp9_size(data));
    plausible(vp9_frame_size(data));
    plausible(av1_size(data));
    plausible(av1_sequence_header_size(data));

    let prefixed = |prefix: &[u8]| -> Vec<u8> { prefix.iter().chain(data).copied().collect() };
    // VP8: start of partition 0, then a key frame tag and the start code.
    plausible(vp8_size(&prefixed(&[
        0x10, 0x00, 0x00, 0x00, 0x9d, 0x01, 0x2a,
    ])));
    // H.264: an SPS alone, in a STAP-A (length clamped to the data) and in an FU-A start.
    let sps = prefixed(&[0x67]);
    plausible(h264_size(&sps));
    let n = u16::try_from(sps.len()).unwrap_or(u16::MAX).to_be_bytes();
    plausible(h264_size(&[&[0x78, n[0], n[1]][..], &sps].concat()));
    plausible(h264_size(&prefixed(&[0x7c, 0x87])));
    // VP9: B=1 before a keyframe header's fixed start, and B=1 V=1 before a structure.
    layers(vp9_size(&prefixed(&[0x08, 0x82, 0x49, 0x83, 0x42])));
    layers(vp9_size(&prefixed(&[0x0a])));
    // AV1: W=1 with a sequence header OBU without, and W=0 with, a size field.
    plausible(av1_size(&prefixed(&[0x10, 0x08])));
    // One-byte leb128 lengths: the element (header, size byte, body) must stay below 0x80.
    let n = u8::try_from(data.len().min(0x7d)).unwrap_or(0x7d);
    plausible(av1_size(&prefixed(&[0x00, n + 2, 0x0a, n])));
    // Dependency descriptor structures.
    if let Ok(dd) = DependencyDescriptor::parse(data, None)
        && let Some(st) = &dd.structure
    {
        layers(dd_sizes(st));
    }
}
