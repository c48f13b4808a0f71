//! The VP9 RTP payload descriptor (RFC 9628 §4.2): picture ID, layer indices, reference indices
//! and the scalability structure, read without touching the VP9 bitstream (so it works for
//! end-to-end encrypted payloads too, whose descriptor stays in the clear).
//!
//! ```text
//!       +-+-+-+-+-+-+-+-+
//!       |I|P|L|F|B|E|V|Z|
//!       +-+-+-+-+-+-+-+-+
//!  I:   |M| PICTURE ID  |   7 or 15 bits
//!  M:   | EXTENDED PID  |
//!  L:   | TID |U| SID |D|
//!       |   TL0PICIDX   |   non-flexible mode (F=0) only
//!  P,F: | P_DIFF      |N|   flexible mode, up to 3 times
//!  V:   | SS ...        |
//! ```
//!
//! Browsers send VP9 SVC (`scalabilityMode` L2T*/L3T*, with or without `_KEY`) in flexible mode,
//! whose P_DIFFs name every reference picture; plain temporal scalability (L1T2, L1T3) comes in
//! non-flexible mode with TL0PICIDX, where only the U bit says where a temporal up-switch is
//! safe. [`crate::codec::layers::vp9_layer_info`] turns a descriptor into the selector's input.

/// Most spatial layers a scalability structure can announce (N_S is 3 bits).
pub const MAX_SPATIAL_LAYERS: usize = 8;
/// Most reference indices (P_DIFF) one flexible-mode descriptor carries.
pub const MAX_P_DIFFS: usize = 3;

/// Why a descriptor could not be read or written.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Vp9Error {
    /// The payload ends inside the descriptor.
    #[error("VP9 payload descriptor truncated")]
    Truncated,
    /// A fourth P_DIFF was announced (N=1 on the third).
    #[error("more than three P_DIFF in a VP9 payload descriptor")]
    TooManyPDiffs,
    /// A P_DIFF of zero would make a picture its own reference.
    #[error("VP9 P_DIFF of zero")]
    ZeroPDiff,
    /// Flexible mode with P=1 but no P_DIFF to write.
    #[error("inter-predicted flexible-mode picture without P_DIFF")]
    MissingPDiff,
    /// A field does not fit its width on the wire.
    #[error("VP9 descriptor field out of range")]
    OutOfRange,
    /// The output buffer is too small.
    #[error("buffer too small for the VP9 payload descriptor")]
    BufferTooSmall,
}

/// A picture ID and whether it is the 15-bit form (M=1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PictureId {
    /// 7- or 15-bit value.
    pub value: u16,
    /// The 15-bit form.
    pub long: bool,
}

impl PictureId {
    /// The picture `diff` pictures earlier, wrapping at the ID's width.
    pub fn minus(self, diff: u8) -> u16 {
        let mask = if self.long { 0x7fff } else { 0x7f };
        self.value.wrapping_sub(u16::from(diff)) & mask
    }
}

/// The layer indices byte (L=1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LayerIndices {
    /// TID, 3 bits.
    pub temporal: u8,
    /// U: a switching-up point.
    pub switching_up: bool,
    /// SID, 3 bits.
    pub spatial: u8,
    /// D: this layer frame predicts from the spatial layer below in the same picture.
    pub inter_layer_dependency: bool,
}

/// The scalability structure (V=1), sent with keyframes and when layers change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScalabilityStructure {
    /// N_S + 1.
    pub spatial_layers: u8,
    /// (width, height) of each spatial layer when Y=1; entries past `spatial_layers` are zero.
    pub resolutions: Option<[(u16, u16); MAX_SPATIAL_LAYERS]>,
    /// N_G when G=1: how many pictures the group-of-frames description has.
    pub gof_pictures: Option<u8>,
    /// Where the GOF entries start in the parsed payload (see [`Vp9Descriptor::gof`]).
    pub gof_offset: usize,
}

/// One picture of the group-of-frames description (non-flexible mode).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GofEntry {
    /// TID of the picture.
    pub temporal: u8,
    /// U of the picture.
    pub switching_up: bool,
    /// Its P_DIFFs (first `references` are valid).
    pub p_diffs: [u8; MAX_P_DIFFS],
    /// R, 0..=3.
    pub references: u8,
}

/// A parsed VP9 payload descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Vp9Descriptor {
    /// P: inter-picture predicted (not a keyframe at the base layer).
    pub inter_picture_predicted: bool,
    /// F: flexible mode.
    pub flexible: bool,
    /// B: first packet of a layer frame.
    pub start_of_frame: bool,
    /// E: last packet of a layer frame.
    pub end_of_frame: bool,
    /// Z: not used for inter-layer prediction by the layer above.
    pub not_upper_reference: bool,
    /// Picture ID (I=1).
    pub picture_id: Option<PictureId>,
    /// Layer indices (L=1).
    pub layer: Option<LayerIndices>,
    /// TL0PICIDX (L=1, F=0).
    pub tl0_pic_idx: Option<u8>,
    /// P_DIFFs (F=1, P=1); the first `p_diff_count` are valid.
    pub p_diffs: [u8; MAX_P_DIFFS],
    /// How many P_DIFFs.
    pub p_diff_count: u8,
    /// Scalability structure (V=1).
    pub ss: Option<ScalabilityStructure>,
    /// Length of the descriptor; the VP9 payload starts here.
    pub len: usize,
}

struct Reader<'a> {
    p: &'a [u8],
    i: usize,
}

impl Reader<'_> {
    fn u8(&mut self) -> Result<u8, Vp9Error> {
        let b = *self.p.get(self.i).ok_or(Vp9Error::Truncated)?;
        self.i += 1;
        Ok(b)
    }

    fn u16(&mut self) -> Result<u16, Vp9Error> {
        Ok(u16::from_be_bytes([self.u8()?, self.u8()?]))
    }
}

struct Writer<'a> {
    buf: &'a mut [u8],
    i: usize,
}

impl Writer<'_> {
    fn u8(&mut self, b: u8) -> Result<(), Vp9Error> {
        *self.buf.get_mut(self.i).ok_or(Vp9Error::BufferTooSmall)? = b;
        self.i += 1;
        Ok(())
    }
}

fn bit(b: u8, mask: u8) -> bool {
    b & mask != 0
}

impl Vp9Descriptor {
    /// Parses the descriptor at the start of an RTP payload. Work is bounded by the payload
    /// length; nothing is allocated.
    pub fn parse(p: &[u8]) -> Result<Self, Vp9Error> {
        let mut r = Reader { p, i: 0 };
        let b0 = r.u8()?;
        let mut d = Vp9Descriptor {
            inter_picture_predicted: bit(b0, 0x40),
            flexible: bit(b0, 0x10),
            start_of_frame: bit(b0, 0x08),
            end_of_frame: bit(b0, 0x04),
            not_upper_reference: bit(b0, 0x01),
            picture_id: None,
            layer: None,
            tl0_pic_idx: None,
            p_diffs: [0; MAX_P_DIFFS],
            p_diff_count: 0,
            ss: None,
            len: 0,
        };
        if bit(b0, 0x80) {
            let b = r.u8()?;
            d.picture_id = Some(if bit(b, 0x80) {
                let lo = r.u8()?;
                PictureId {
                    value: (u16::from(b & 0x7f) << 8) | u16::from(lo),
                    long: true,
                }
            } else {
                PictureId {
                    value: u16::from(b),
                    long: false,
                }
            });
        }
        if bit(b0, 0x20) {
            let b = r.u8()?;
            d.layer = Some(LayerIndices {
                temporal: b >> 5,
                switching_up: bit(b, 0x10),
                spatial: (b >> 1) & 0x07,
                inter_layer_dependency: bit(b, 0x01),
            });
            if !d.flexible {
                d.tl0_pic_idx = Some(r.u8()?);
            }
        }
        if d.flexible && d.inter_picture_predicted {
            loop {
                let slot = d
                    .p_diffs
                    .get_mut(usize::from(d.p_diff_count))
                    .ok_or(Vp9Error::TooManyPDiffs)?;
                let b = r.u8()?;
                if b >> 1 == 0 {
                    return Err(Vp9Error::ZeroPDiff);
                }
                *slot = b >> 1;
                d.p_diff_count += 1;
                if !bit(b, 0x01) {
                    break;
                }
            }
        }
        if bit(b0, 0x02) {
            d.ss = Some(parse_ss(&mut r)?);
        }
        d.len = r.i;
        Ok(d)
    }

    /// The valid P_DIFFs.
    pub fn p_diffs(&self) -> &[u8] {
        self.p_diffs
            .get(..usize::from(self.p_diff_count))
            .unwrap_or(&[])
    }

    /// SID, 0 without layer indices.
    pub fn spatial(&self) -> u8 {
        self.layer.map_or(0, |l| l.spatial)
    }

    /// TID, 0 without layer indices.
    pub fn temporal(&self) -> u8 {
        self.layer.map_or(0, |l| l.temporal)
    }

    /// Whether this layer frame decodes on its own: neither inter-picture nor inter-layer
    /// predicted. That is a keyframe at the lowest layer sent.
    pub fn is_keyframe(&self) -> bool {
        !self.inter_picture_predicted && !self.layer.is_some_and(|l| l.inter_layer_dependency)
    }

    /// The group-of-frames entries of the scalability structure, read from `payload` (the one
    /// this descriptor was parsed from). Stops early rather than panic on another buffer.
    pub fn gof<'a>(&self, payload: &'a [u8]) -> impl Iterator<Item = GofEntry> + 'a {
        let (count, offset) = self
            .ss
            .and_then(|ss| Some((ss.gof_pictures?, ss.gof_offset)))
            .unwrap_or((0, 0));
        let mut r = Reader {
            p: payload,
            i: offset,
        };
        (0..count).map_while(move |_| read_gof_entry(&mut r).ok())
    }

    /// Writes the descriptor into `buf` and returns its length; `gof` is the group-of-frames
    /// description written when `ss.gof_pictures` is set (its length must match).
    pub fn write(&self, gof: &[GofEntry], buf: &mut [u8]) -> Result<usize, Vp9Error> {
        let mut w = Writer { buf, i: 0 };
        let flag = |on: bool, mask: u8| if on { mask } else { 0 };
        w.u8(flag(self.picture_id.is_some(), 0x80)
            | flag(self.inter_picture_predicted, 0x40)
            | flag(self.layer.is_some(), 0x20)
            | flag(self.flexible, 0x10)
            | flag(self.start_of_frame, 0x08)
            | flag(self.end_of_frame, 0x04)
            | flag(self.ss.is_some(), 0x02)
            | flag(self.not_upper_reference, 0x01))?;
        if let Some(pid) = self.picture_id {
            if pid.long {
                let v = check(pid.value, 0x7fff)?;
                w.u8(0x80 | (v >> 8) as u8)?;
                w.u8(v as u8)?;
            } else {
                w.u8(check(pid.value, 0x7f)? as u8)?;
            }
        }
        if let Some(l) = self.layer {
            let t = check(l.temporal.into(), 7)? as u8;
            let s = check(l.spatial.into(), 7)? as u8;
            w.u8((t << 5)
                | flag(l.switching_up, 0x10)
                | (s << 1)
                | flag(l.inter_layer_dependency, 0x01))?;
            if !self.flexible {
                w.u8(self.tl0_pic_idx.ok_or(Vp9Error::OutOfRange)?)?;
            }
        }
        if self.flexible && self.inter_picture_predicted {
            let diffs = self.p_diffs();
            if diffs.is_empty() {
                return Err(Vp9Error::MissingPDiff);
            }
            for (k, &d) in diffs.iter().enumerate() {
                if d == 0 {
                    return Err(Vp9Error::ZeroPDiff);
                }
                let more = k + 1 < diffs.len();
                w.u8(((check(d.into(), 0x7f)? as u8) << 1) | u8::from(more))?;
            }
        }
        if let Some(ss) = self.ss {
            write_ss(&mut w, &ss, gof)?;
        }
        Ok(w.i)
    }
}

fn check(v: u16, max: u16) -> Result<u16, Vp9Error> {
    if v > max {
        Err(Vp9Error::OutOfRange)
    } else {
        Ok(v)
    }
}

fn parse_ss(r: &mut Reader<'_>) -> Result<ScalabilityStructure, Vp9Error> {
    let b = r.u8()?;
    let spatial_layers = (b >> 5) + 1;
    let mut ss = ScalabilityStructure {
        spatial_layers,
        resolutions: None,
        gof_pictures: None,
        gof_offset: 0,
    };
    if bit(b, 0x10) {
        let mut res = [(0u16, 0u16); MAX_SPATIAL_LAYERS];
        for slot in res.iter_mut().take(usize::from(spatial_layers)) {
            *slot = (r.u16()?, r.u16()?);
        }
        ss.resolutions = Some(res);
    }
    if bit(b, 0x08) {
        let n = r.u8()?;
        ss.gof_pictures = Some(n);
        ss.gof_offset = r.i;
        // At most 255 entries of at most 4 bytes: bounded, and checked here so that
        // `Vp9Descriptor::gof` can trust the layout.
        for _ in 0..n {
            read_gof_entry(r)?;
        }
    }
    Ok(ss)
}

fn read_gof_entry(r: &mut Reader<'_>) -> Result<GofEntry, Vp9Error> {
    let b = r.u8()?;
    let mut e = GofEntry {
        temporal: b >> 5,
        switching_up: bit(b, 0x10),
        p_diffs: [0; MAX_P_DIFFS],
        references: (b >> 2) & 0x03,
    };
    for slot in e.p_diffs.iter_mut().take(usize::from(e.references)) {
        *slot = r.u8()?;
    }
    Ok(e)
}

fn write_ss(
    w: &mut Writer<'_>,
    ss: &ScalabilityStructure,
    gof: &[GofEntry],
) -> Result<(), Vp9Error> {
    let n_s = ss
        .spatial_layers
        .checked_sub(1)
        .filter(|&n| usize::from(n) < MAX_SPATIAL_LAYERS)
        .ok_or(Vp9Error::OutOfRange)?;
    let y = if ss.resolutions.is_some() { 0x10 } else { 0 };
    let g = if ss.gof_pictures.is_some() { 0x08 } else { 0 };
    w.u8((n_s << 5) | y | g)?;
    if let Some(res) = ss.resolutions {
        for &(width, height) in res.iter().take(usize::from(ss.spatial_layers)) {
            for v in [width, height] {
                for b in v.to_be_bytes() {
                    w.u8(b)?;
                }
            }
        }
    }
    if let Some(n) = ss.gof_pictures {
        if usize::from(n) != gof.len() {
            return Err(Vp9Error::OutOfRange);
        }
        w.u8(n)?;
        for e in gof {
            if e.temporal > 7 || e.references > 3 {
                return Err(Vp9Error::OutOfRange);
            }
            let u = if e.switching_up { 0x10 } else { 0 };
            w.u8((e.temporal << 5) | u | (e.references << 2))?;
            for &d in e.p_diffs.iter().take(usize::from(e.references)) {
                w.u8(d)?;
            }
        }
    }
    Ok(())
}
