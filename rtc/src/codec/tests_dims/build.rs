//! Builders for the `dims` tests: an MSB-first bit writer, and H.264 SPS, VP8, VP9 and AV1
//! headers written field by field from the specifications, with proptest strategies for them.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use proptest::prelude::*;

use crate::codec::vp9::{
    LayerIndices, MAX_P_DIFFS, MAX_SPATIAL_LAYERS, PictureId, ScalabilityStructure, Vp9Descriptor,
};

// ------------------------------------------------------------------------------- bit writer

/// MSB-first bit writer for building headers field by field.
#[derive(Default)]
pub(super) struct W {
    out: Vec<u8>,
    cur: u8,
    n: u32,
}

impl W {
    pub(super) fn bit(&mut self, b: bool) -> &mut Self {
        self.cur = (self.cur << 1) | u8::from(b);
        self.n += 1;
        if self.n == 8 {
            self.out.push(self.cur);
            (self.cur, self.n) = (0, 0);
        }
        self
    }

    pub(super) fn bits(&mut self, v: u64, n: u32) -> &mut Self {
        for i in (0..n).rev() {
            self.bit((v >> i) & 1 == 1);
        }
        self
    }

    /// `ue(v)`, also AV1's `uvlc()` below 2^32 - 1.
    pub(super) fn ue(&mut self, v: u32) -> &mut Self {
        let x = u64::from(v) + 1;
        let len = 64 - x.leading_zeros();
        self.bits(0, len - 1).bits(x, len)
    }

    pub(super) fn se(&mut self, v: i32) -> &mut Self {
        let k = if v > 0 {
            2 * v.unsigned_abs() - 1
        } else {
            2 * v.unsigned_abs()
        };
        self.ue(k)
    }

    /// Pads with zeros to a byte boundary.
    pub(super) fn bytes(&mut self) -> Vec<u8> {
        while self.n != 0 {
            self.bit(false);
        }
        std::mem::take(&mut self.out)
    }

    /// rbsp_trailing_bits(): a one, then zeros.
    pub(super) fn rbsp(&mut self) -> Vec<u8> {
        self.bit(true);
        self.bytes()
    }
}

/// Inserts emulation-prevention bytes, as an H.264 encoder does.
pub(super) fn escape(rbsp: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut zeros = 0;
    for &b in rbsp {
        if zeros >= 2 && b <= 3 {
            out.push(3);
            zeros = 0;
        }
        out.push(b);
        zeros = if b == 0 { zeros + 1 } else { 0 };
    }
    out
}

// ----------------------------------------------------------------------------- SPS builder

#[derive(Debug, Clone)]
pub(super) struct Sps {
    pub(super) profile: u8,
    pub(super) chroma: u32,
    pub(super) separate_planes: bool,
    /// Per list: absent, `Some(vec![])` for "use the default" (delta -8), or explicit values.
    pub(super) scaling: Option<Vec<Option<Vec<u8>>>>,
    pub(super) poc_type: u32,
    pub(super) poc_cycle: Vec<i32>,
    pub(super) width_mbs: u32,
    pub(super) height_units: u32,
    pub(super) frame_mbs_only: bool,
    pub(super) crop: Option<[u32; 4]>,
}

impl Sps {
    pub(super) fn baseline(width_mbs: u32, height_units: u32) -> Self {
        Sps {
            profile: 66,
            chroma: 1,
            separate_planes: false,
            scaling: None,
            poc_type: 2,
            poc_cycle: Vec::new(),
            width_mbs,
            height_units,
            frame_mbs_only: true,
            crop: None,
        }
    }

    pub(super) fn high(&self) -> bool {
        [100, 110, 122, 244, 44, 83, 86, 118, 128, 138, 139, 134, 135].contains(&self.profile)
    }

    /// The NAL unit, header byte included, escaped.
    pub(super) fn nal(&self) -> Vec<u8> {
        let mut w = W::default();
        w.bits(self.profile.into(), 8)
            .bits(0xe0, 8)
            .bits(31, 8)
            .ue(0);
        if self.high() {
            w.ue(self.chroma);
            if self.chroma == 3 {
                w.bit(self.separate_planes);
            }
            w.ue(0).ue(0).bit(false).bit(self.scaling.is_some());
            for (i, list) in self.scaling.iter().flatten().enumerate() {
                w.bit(list.is_some());
                let Some(values) = list else { continue };
                let len = if i < 6 { 16 } else { 64 };
                if values.is_empty() {
                    w.se(-8); // nextScale 0 at j = 0: use the default list
                    continue;
                }
                let mut last = 8i32;
                for j in 0..len {
                    let v = i32::from(values[j % values.len()]);
                    let mut d = v - last;
                    if d > 127 {
                        d -= 256;
                    } else if d < -128 {
                        d += 256;
                    }
                    w.se(d);
                    last = v;
                }
            }
        }
        w.ue(0).ue(self.poc_type);
        match self.poc_type {
            0 => {
                w.ue(2);
            }
            1 => {
                w.bit(false).se(-3).se(5).ue(self.poc_cycle.len() as u32);
                for &o in &self.poc_cycle {
                    w.se(o);
                }
            }
            _ => {}
        }
        w.ue(1)
            .bit(false)
            .ue(self.width_mbs - 1)
            .ue(self.height_units - 1);
        w.bit(self.frame_mbs_only);
        if !self.frame_mbs_only {
            w.bit(true);
        }
        w.bit(true).bit(self.crop.is_some());
        for c in self.crop.into_iter().flatten() {
            w.ue(c);
        }
        w.bit(false); // vui_parameters_present_flag
        let mut nal = vec![0x67];
        nal.extend(escape(&w.rbsp()));
        nal
    }

    pub(super) fn crop_units(&self) -> (u32, u32) {
        let f = if self.frame_mbs_only { 1 } else { 2 };
        let chroma = if !self.high() {
            1
        } else if self.separate_planes {
            0
        } else {
            self.chroma
        };
        match chroma {
            1 => (2, 2 * f),
            2 => (2, f),
            _ => (1, f),
        }
    }

    pub(super) fn expected(&self) -> (u16, u16) {
        let f = if self.frame_mbs_only { 1 } else { 2 };
        let [l, r, t, b] = self.crop.unwrap_or([0; 4]);
        let (ux, uy) = self.crop_units();
        let w = self.width_mbs * 16 - ux * (l + r);
        let h = self.height_units * 16 * f - uy * (t + b);
        (w as u16, h as u16)
    }
}

// ------------------------------------------------------------------------------------- VP8

/// A VP8 keyframe start: version 0, show_frame, the start code, sizes with scale bits.
pub(super) fn vp8_frame(w: u16, h: u16, hscale: u16, vscale: u16) -> Vec<u8> {
    let mut f = vec![0x10, 0x02, 0x00, 0x9d, 0x01, 0x2a];
    f.extend(((hscale << 14) | w).to_le_bytes());
    f.extend(((vscale << 14) | h).to_le_bytes());
    f.extend([0x00, 0x47, 0x08]);
    f
}
// -------------------------------------------------------------------------------------- VP9

pub(super) fn vp9_desc(start: bool, predicted: bool, spatial: Option<u8>) -> Vp9Descriptor {
    Vp9Descriptor {
        inter_picture_predicted: predicted,
        flexible: true,
        start_of_frame: start,
        end_of_frame: false,
        not_upper_reference: false,
        picture_id: Some(PictureId {
            value: 0x1234,
            long: true,
        }),
        layer: spatial.map(|s| LayerIndices {
            temporal: 0,
            switching_up: false,
            spatial: s,
            inter_layer_dependency: s > 0,
        }),
        tl0_pic_idx: None,
        p_diffs: [0; MAX_P_DIFFS],
        p_diff_count: 0,
        ss: None,
        len: 0,
    }
}

pub(super) fn vp9_packet(d: &Vp9Descriptor, frame: &[u8]) -> Vec<u8> {
    let mut buf = [0u8; 64];
    let n = d.write(&[], &mut buf).unwrap();
    [&buf[..n], frame].concat()
}

pub(super) fn ss(sizes: &[(u16, u16)], with_sizes: bool) -> ScalabilityStructure {
    let mut res = [(0, 0); MAX_SPATIAL_LAYERS];
    res[..sizes.len()].copy_from_slice(sizes);
    ScalabilityStructure {
        spatial_layers: sizes.len() as u8,
        resolutions: with_sizes.then_some(res),
        gof_pictures: None,
        gof_offset: 0,
    }
}
/// A VP9 uncompressed header start written field by field (§6.2).
pub(super) fn vp9_header(profile: u8, intra_only: bool, cs: u8, w: u16, h: u16) -> Vec<u8> {
    let mut b = W::default();
    b.bits(2, 2).bit(profile & 1 == 1).bit(profile >> 1 == 1);
    if profile == 3 {
        b.bit(false);
    }
    b.bit(false); // show_existing_frame
    if intra_only {
        b.bit(true).bit(false).bit(false).bit(true).bits(0, 2); // inter, hidden, intra_only
    } else {
        b.bit(false).bit(true).bit(false);
    }
    b.bits(0x49_83_42, 24);
    if !intra_only || profile > 0 {
        if profile >= 2 {
            b.bit(true);
        }
        b.bits(cs.into(), 3);
        if cs != 7 {
            b.bit(false);
            if profile == 1 || profile == 3 {
                b.bits(0, 3);
            }
        } else {
            b.bit(false);
        }
    }
    if intra_only {
        b.bits(0x01, 8);
    }
    b.bits(u64::from(w) - 1, 16)
        .bits(u64::from(h) - 1, 16)
        .bits(0, 8);
    b.bytes()
}
#[derive(Debug, Clone)]
pub(super) struct SeqHeader {
    pub(super) profile: u8,
    pub(super) reduced: bool,
    pub(super) timing: Option<Option<u32>>,
    pub(super) decoder_model: Option<u8>,
    pub(super) initial_display_delay: bool,
    pub(super) ops: Vec<(u16, u8, bool, bool)>,
    pub(super) width: u32,
    pub(super) height: u32,
    pub(super) extra_bits: u32,
}

impl SeqHeader {
    pub(super) fn write(&self) -> Vec<u8> {
        let mut w = W::default();
        w.bits(self.profile.into(), 3)
            .bit(self.reduced)
            .bit(self.reduced);
        if self.reduced {
            w.bits(8, 5);
        } else {
            w.bit(self.timing.is_some());
            if let Some(ticks) = self.timing {
                w.bits(1001, 32).bits(60_000, 32).bit(ticks.is_some());
                if let Some(t) = ticks {
                    w.ue(t);
                }
                w.bit(self.decoder_model.is_some());
                if let Some(len) = self.decoder_model {
                    w.bits(len.into(), 5)
                        .bits(90_000, 32)
                        .bits(31, 5)
                        .bits(22, 5);
                }
            }
            w.bit(self.initial_display_delay)
                .bits(self.ops.len() as u64 - 1, 5);
            for &(idc, level, dm, idd) in &self.ops {
                w.bits(idc.into(), 12).bits(level.into(), 5);
                if level > 7 {
                    w.bit(true);
                }
                if let Some(len) = self.decoder_model {
                    w.bit(dm);
                    if dm {
                        let n = u32::from(len) + 1;
                        w.bits(0x1_5555, n).bits(0x0_aaaa, n).bit(true);
                    }
                }
                if self.initial_display_delay {
                    w.bit(idd);
                    if idd {
                        w.bits(9, 4);
                    }
                }
            }
        }
        let bits = |v: u32| (32 - (v - 1).leading_zeros()).max(1);
        let wb = (bits(self.width) + self.extra_bits).min(16);
        let hb = (bits(self.height) + self.extra_bits).min(16);
        w.bits(u64::from(wb) - 1, 4).bits(u64::from(hb) - 1, 4);
        w.bits(u64::from(self.width) - 1, wb)
            .bits(u64::from(self.height) - 1, hb);
        // The rest of the header (frame id numbers, tools, color config) is not read.
        w.bits(0x2d_4c_ff, 24);
        w.rbsp()
    }
}
pub(super) fn sps_strategy() -> impl Strategy<Value = Sps> {
    (
        prop::sample::select(vec![66u8, 77, 88, 100, 110, 122, 244, 118]),
        0u32..4,
        any::<bool>(),
        prop::option::of(prop::collection::vec(
            prop::option::of(prop::collection::vec(1u8..=255, 0..5)),
            12,
        )),
        0u32..3,
        prop::collection::vec(-1000i32..1000, 0..8),
        (1u32..=240, 1u32..=135, any::<bool>()),
        prop::option::of(prop::array::uniform4(0u32..8)),
    )
        .prop_map(
            |(profile, chroma, separate_planes, scaling, poc_type, poc_cycle, dims, crop)| {
                let high = [100, 110, 122, 244, 118].contains(&profile);
                let chroma = if high { chroma } else { 1 };
                let lists = if chroma == 3 { 12 } else { 8 };
                Sps {
                    profile,
                    chroma,
                    separate_planes: separate_planes && chroma == 3,
                    scaling: scaling.filter(|_| high).map(|mut l| {
                        l.truncate(lists);
                        l
                    }),
                    poc_type,
                    poc_cycle,
                    width_mbs: dims.0,
                    height_units: dims.1,
                    frame_mbs_only: dims.2,
                    crop,
                }
            },
        )
}

pub(super) fn seq_header_strategy() -> impl Strategy<Value = SeqHeader> {
    (
        0u8..3,
        any::<bool>(),
        prop::option::of(prop::option::of(0u32..100_000)),
        prop::option::of(0u8..32),
        any::<bool>(),
        prop::collection::vec((0u16..4096, 0u8..32, any::<bool>(), any::<bool>()), 1..=32),
        (1u32..=65_535, 1u32..=65_535, 0u32..4),
    )
        .prop_map(
            |(profile, reduced, timing, dm, idd, ops, (width, height, extra))| SeqHeader {
                profile,
                reduced,
                decoder_model: dm.filter(|_| timing.is_some()),
                timing,
                initial_display_delay: idd,
                ops,
                width,
                height,
                extra_bits: extra,
            },
        )
}
