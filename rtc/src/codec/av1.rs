//! The Dependency Descriptor RTP header extension (AV1 RTP specification, appendix A): which
//! spatial and temporal layer a frame belongs to, which frames it references, and for every
//! decode target whether the frame is needed (its decode target indication, DTI).
//!
//! The template dependency structure arrives attached to a keyframe's descriptor; later
//! descriptors name one of its templates by id (and may override DTIs, frame diffs or chain
//! diffs). [`Av1DdTracker`](crate::codec::layers::Av1DdTracker) keeps the structure in force
//! per source stream and turns each packet's extension into a
//! [`LayerInfo`](crate::codec::layers::LayerInfo) for the per-viewer
//! [`LayerSelector`](crate::codec::layers::LayerSelector). Only the extension is read, so this
//! works for end-to-end encrypted payloads; libwebrtc also sends it with VP9 and H.264.
//!
//! Work is bounded: at most [`MAX_TEMPLATES`] templates, [`MAX_DECODE_TARGETS`] decode targets,
//! [`MAX_FDIFFS`] frame diffs per template or frame, four spatial and eight temporal ids; a
//! structure beyond that is rejected before anything is stored.

/// The extension's URI in `a=extmap`.
pub const DD_URI: &str =
    "https://aomediacodec.github.io/av1-rtp-spec/#dependency-descriptor-rtp-header-extension";
/// Template ids are 6 bits.
pub const MAX_TEMPLATES: usize = 64;
/// `dt_cnt_minus_one` is 5 bits.
pub const MAX_DECODE_TARGETS: usize = 32;
/// At most one chain per decode target.
pub const MAX_CHAINS: usize = MAX_DECODE_TARGETS;
/// Frame diffs kept per template or frame (AV1 references at most 7 frames).
pub const MAX_FDIFFS: usize = 16;
/// Spatial ids 0..=3 (AV1 `spatial_id` is 2 bits).
pub const MAX_SPATIAL_IDS: u8 = 4;
/// Temporal ids 0..=7 (AV1 `temporal_id` is 3 bits).
pub const MAX_TEMPORAL_IDS: u8 = 8;

/// Why a descriptor could not be read or written.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DdError {
    /// The extension ends inside a field.
    #[error("dependency descriptor truncated")]
    Truncated,
    /// No structure attached and none in force.
    #[error("no template dependency structure known")]
    NoStructure,
    /// The template id names no template of the structure in force.
    #[error("template id {0} not in the dependency structure")]
    UnknownTemplate(u8),
    /// More than [`MAX_TEMPLATES`] templates.
    #[error("too many templates")]
    TooManyTemplates,
    /// A spatial id above 3 or a temporal id above 7.
    #[error("layer id out of range")]
    LayerOutOfRange,
    /// More than [`MAX_FDIFFS`] frame diffs.
    #[error("too many frame diffs")]
    TooManyFdiffs,
    /// A structure or descriptor that cannot be encoded (inconsistent counts, values out of
    /// range, templates out of order).
    #[error("invalid dependency descriptor: {0}")]
    Invalid(&'static str),
    /// The output buffer is too small.
    #[error("buffer too small for the dependency descriptor")]
    BufferTooSmall,
    /// A structure attached to a frame older than the structure in force (a late or
    /// retransmitted packet of an earlier keyframe): not adopted, the packet is stale.
    #[error("structure older than the one in force")]
    StaleStructure,
}

/// A decode target indication (table A.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dti {
    /// The frame is not part of the decode target (`-`).
    NotPresent,
    /// Part of it, but no later frame of the target references it (`D`).
    Discardable,
    /// A switch point: no later frame of the target references anything before it (`S`).
    Switch,
    /// Part of it and referenced later (`R`).
    Required,
}

impl Dti {
    fn from_bits(b: u32) -> Self {
        match b & 3 {
            0 => Dti::NotPresent,
            1 => Dti::Discardable,
            2 => Dti::Switch,
            _ => Dti::Required,
        }
    }

    fn bits(self) -> u64 {
        match self {
            Dti::NotPresent => 0,
            Dti::Discardable => 1,
            Dti::Switch => 2,
            Dti::Required => 3,
        }
    }
}

/// Up to [`MAX_DECODE_TARGETS`] DTIs, packed two bits each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Dtis {
    bits: u64,
    len: u8,
}

impl Dtis {
    /// From libwebrtc's notation, one symbol per decode target: `-`, `D`, `S`, `R`.
    pub fn from_symbols(s: &str) -> Option<Self> {
        let mut d = Dtis::default();
        for c in s.chars() {
            let dti = match c {
                '-' => Dti::NotPresent,
                'D' => Dti::Discardable,
                'S' => Dti::Switch,
                'R' => Dti::Required,
                _ => return None,
            };
            if !d.push(dti) {
                return None;
            }
        }
        Some(d)
    }

    /// Appends one; false when full.
    pub fn push(&mut self, dti: Dti) -> bool {
        if usize::from(self.len) >= MAX_DECODE_TARGETS {
            return false;
        }
        self.bits |= dti.bits() << (2 * self.len);
        self.len += 1;
        true
    }

    /// The DTI for decode target `dt`.
    pub fn get(&self, dt: usize) -> Option<Dti> {
        (dt < usize::from(self.len)).then(|| Dti::from_bits((self.bits >> (2 * dt)) as u32))
    }

    /// How many.
    pub fn len(&self) -> usize {
        usize::from(self.len)
    }

    /// None at all.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

macro_rules! small_list {
    ($(#[$m:meta])* $name:ident, $t:ty, $cap:expr) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub struct $name {
            v: [$t; $cap],
            len: u8,
        }

        impl Default for $name {
            fn default() -> Self {
                Self { v: [0; $cap], len: 0 }
            }
        }

        impl $name {
            /// From a slice; `None` when it is longer than the capacity.
            pub fn from_slice(s: &[$t]) -> Option<Self> {
                let mut l = Self::default();
                l.v.get_mut(..s.len())?.copy_from_slice(s);
                l.len = s.len() as u8;
                Some(l)
            }

            /// Appends one; false when full.
            pub fn push(&mut self, x: $t) -> bool {
                let Some(slot) = self.v.get_mut(usize::from(self.len)) else {
                    return false;
                };
                *slot = x;
                self.len += 1;
                true
            }

            /// The values.
            pub fn as_slice(&self) -> &[$t] {
                self.v.get(..usize::from(self.len)).unwrap_or(&[])
            }
        }
    };
}

small_list!(
    /// Frame diffs: how many frame numbers back each referenced frame is.
    Fdiffs,
    u16,
    MAX_FDIFFS
);
small_list!(
    /// Chain diffs: per chain, how many frame numbers back the previous frame in it is (0: none).
    ChainDiffs,
    u8,
    MAX_CHAINS
);

/// One frame dependency template.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FrameTemplate {
    /// Spatial id.
    pub spatial: u8,
    /// Temporal id.
    pub temporal: u8,
    /// One DTI per decode target.
    pub dtis: Dtis,
    /// References, 1..=16 each.
    pub fdiffs: Fdiffs,
    /// One diff per chain, 0..=15 each.
    pub chain_diffs: ChainDiffs,
}

/// The template dependency structure.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DependencyStructure {
    /// Template id of `templates[0]`.
    pub template_id_offset: u8,
    /// How many decode targets (1..=32).
    pub decode_targets: u8,
    /// How many chains (0..=decode_targets).
    pub chains: u8,
    /// The chain protecting each decode target (empty without chains).
    pub protected_by: Vec<u8>,
    /// Templates ordered by (spatial, temporal), starting at (0, 0).
    pub templates: Vec<FrameTemplate>,
    /// Maximum render (width, height) of each spatial layer, when sent.
    pub resolutions: Vec<(u32, u32)>,
}

impl DependencyStructure {
    /// Highest spatial id of the templates.
    pub fn max_spatial(&self) -> u8 {
        self.templates.last().map_or(0, |t| t.spatial)
    }

    /// The (spatial, max temporal) layer of decode target `dt`: the highest ids among the
    /// templates present in it (appendix A, `decode_target_layers`).
    pub fn decode_target_layer(&self, dt: usize) -> Option<(u8, u8)> {
        if dt >= usize::from(self.decode_targets) {
            return None;
        }
        let mut layer = (0, 0);
        for t in &self.templates {
            if t.dtis.get(dt).is_some_and(|d| d != Dti::NotPresent) {
                layer = (layer.0.max(t.spatial), layer.1.max(t.temporal));
            }
        }
        Some(layer)
    }

    /// The chain protecting decode target `dt`, if there are chains.
    pub fn chain_of(&self, dt: usize) -> Option<u8> {
        self.protected_by.get(dt).copied()
    }

    /// Checks every count and range the wire format imposes.
    pub fn validate(&self) -> Result<(), DdError> {
        let dts = usize::from(self.decode_targets);
        let chains = usize::from(self.chains);
        if self.template_id_offset >= 64 {
            return Err(DdError::Invalid("template id offset"));
        }
        if dts == 0 || dts > MAX_DECODE_TARGETS || chains > dts {
            return Err(DdError::Invalid("decode target or chain count"));
        }
        if self.protected_by.len() != if chains > 0 { dts } else { 0 }
            || self.protected_by.iter().any(|&c| usize::from(c) >= chains)
        {
            return Err(DdError::Invalid("decode target protected by chain"));
        }
        if self.templates.len() > MAX_TEMPLATES {
            return Err(DdError::TooManyTemplates);
        }
        let mut prev: Option<(u8, u8)> = None;
        for t in &self.templates {
            if t.spatial >= MAX_SPATIAL_IDS || t.temporal >= MAX_TEMPORAL_IDS {
                return Err(DdError::LayerOutOfRange);
            }
            let next_ok = match prev {
                None => (t.spatial, t.temporal) == (0, 0),
                Some((s, tid)) => {
                    (t.spatial == s && (t.temporal == tid || t.temporal == tid + 1))
                        || (t.spatial == s + 1 && t.temporal == 0)
                }
            };
            if !next_ok {
                return Err(DdError::Invalid(
                    "templates out of (spatial, temporal) order",
                ));
            }
            prev = Some((t.spatial, t.temporal));
            if t.dtis.len() != dts
                || t.chain_diffs.as_slice().len() != chains
                || t.chain_diffs.as_slice().iter().any(|&c| c > 15)
                || t.fdiffs.as_slice().iter().any(|&f| !(1..=16).contains(&f))
            {
                return Err(DdError::Invalid("template dtis, fdiffs or chain diffs"));
            }
        }
        if prev.is_none() {
            return Err(DdError::Invalid("no templates"));
        }
        if !self.resolutions.is_empty()
            && (self.resolutions.len() != usize::from(self.max_spatial()) + 1
                || self
                    .resolutions
                    .iter()
                    .any(|&(w, h)| !(1..=65_536).contains(&w) || !(1..=65_536).contains(&h)))
        {
            return Err(DdError::Invalid("render resolutions"));
        }
        Ok(())
    }

    /// A stable 32-bit digest (FNV-1a over the fields), equal on every node for equal
    /// structures, so selector snapshots can name the structure they were made against.
    pub fn fingerprint(&self) -> u32 {
        let mut h: u32 = 0x811c_9dc5;
        let mut eat = |b: u8| {
            h ^= u32::from(b);
            h = h.wrapping_mul(0x0100_0193);
        };
        for b in [self.template_id_offset, self.decode_targets, self.chains] {
            eat(b);
        }
        self.protected_by.iter().for_each(|&b| eat(b));
        for t in &self.templates {
            eat(t.spatial);
            eat(t.temporal);
            t.dtis.bits.to_le_bytes().into_iter().for_each(&mut eat);
            for &f in t.fdiffs.as_slice() {
                f.to_le_bytes().into_iter().for_each(&mut eat);
            }
            eat(0xff);
            t.chain_diffs.as_slice().iter().for_each(|&c| eat(c));
        }
        for &(w, hgt) in &self.resolutions {
            w.to_le_bytes().into_iter().for_each(&mut eat);
            hgt.to_le_bytes().into_iter().for_each(&mut eat);
        }
        h
    }
}

/// A frame's resolved dependencies: its template with any custom fields applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FrameDependencies {
    /// Spatial id.
    pub spatial: u8,
    /// Temporal id.
    pub temporal: u8,
    /// One DTI per decode target.
    pub dtis: Dtis,
    /// References (frame number differences).
    pub fdiffs: Fdiffs,
    /// One diff per chain.
    pub chain_diffs: ChainDiffs,
}

/// The mandatory fields, readable without any structure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mandatory {
    /// First packet of the frame.
    pub start_of_frame: bool,
    /// Last packet of the frame.
    pub end_of_frame: bool,
    /// Template id (6 bits).
    pub template_id: u8,
    /// Frame number (16 bits, wrapping).
    pub frame_number: u16,
}

/// A parsed dependency descriptor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DependencyDescriptor {
    /// First packet of the frame.
    pub start_of_frame: bool,
    /// Last packet of the frame.
    pub end_of_frame: bool,
    /// Template id (6 bits).
    pub template_id: u8,
    /// Frame number (16 bits, wrapping).
    pub frame_number: u16,
    /// A structure attached to this descriptor (keyframes).
    pub structure: Option<DependencyStructure>,
    /// `active_decode_targets_bitmask` when present.
    pub active_decode_targets: Option<u32>,
    /// DTIs overriding the template's.
    pub custom_dtis: Option<Dtis>,
    /// Frame diffs overriding the template's.
    pub custom_fdiffs: Option<Fdiffs>,
    /// Chain diffs overriding the template's.
    pub custom_chains: Option<ChainDiffs>,
}

use bits::{BitReader, BitWriter};

impl DependencyDescriptor {
    /// Reads the mandatory fields only (no structure needed).
    pub fn parse_mandatory(data: &[u8]) -> Result<Mandatory, DdError> {
        let mut r = BitReader::new(data);
        Ok(Mandatory {
            start_of_frame: r.bit()?,
            end_of_frame: r.bit()?,
            template_id: r.bits(6)? as u8,
            frame_number: r.bits(16)? as u16,
        })
    }

    /// Parses a descriptor against the structure in force (ignored when one is attached).
    pub fn parse(data: &[u8], in_force: Option<&DependencyStructure>) -> Result<Self, DdError> {
        let m = Self::parse_mandatory(data)?;
        let mut r = BitReader::new(data);
        r.skip(24);
        let (mut structure, mut active) = (None, None);
        let (mut custom_dtis, mut custom_fdiffs, mut custom_chains) = (false, false, false);
        if data.len() > 3 {
            let structure_present = r.bit()?;
            let active_present = r.bit()?;
            custom_dtis = r.bit()?;
            custom_fdiffs = r.bit()?;
            custom_chains = r.bit()?;
            if structure_present {
                structure = Some(bits::read_structure(&mut r)?);
            }
            if active_present {
                let st = structure
                    .as_ref()
                    .or(in_force)
                    .ok_or(DdError::NoStructure)?;
                active = Some(r.bits(u32::from(st.decode_targets))?);
            }
        }
        let st = structure
            .as_ref()
            .or(in_force)
            .ok_or(DdError::NoStructure)?;
        template_of(st, m.template_id)?;
        let custom_dtis = match custom_dtis {
            false => None,
            true => {
                let mut d = Dtis::default();
                for _ in 0..st.decode_targets {
                    d.push(Dti::from_bits(r.bits(2)?));
                }
                Some(d)
            }
        };
        let custom_fdiffs = match custom_fdiffs {
            false => None,
            true => Some(bits::read_frame_fdiffs(&mut r)?),
        };
        let custom_chains = match custom_chains {
            false => None,
            true => {
                let mut c = ChainDiffs::default();
                for _ in 0..st.chains {
                    c.push(r.bits(8)? as u8);
                }
                Some(c)
            }
        };
        Ok(DependencyDescriptor {
            start_of_frame: m.start_of_frame,
            end_of_frame: m.end_of_frame,
            template_id: m.template_id,
            frame_number: m.frame_number,
            structure,
            active_decode_targets: active,
            custom_dtis,
            custom_fdiffs,
            custom_chains,
        })
    }

    /// The structure this descriptor reads against: the attached one, else `in_force`.
    pub fn structure_in_force<'a>(
        &'a self,
        in_force: Option<&'a DependencyStructure>,
    ) -> Result<&'a DependencyStructure, DdError> {
        self.structure
            .as_ref()
            .or(in_force)
            .ok_or(DdError::NoStructure)
    }

    /// The frame's layer, DTIs, frame diffs and chain diffs.
    pub fn frame(
        &self,
        in_force: Option<&DependencyStructure>,
    ) -> Result<FrameDependencies, DdError> {
        let st = self.structure_in_force(in_force)?;
        let t = template_of(st, self.template_id)?;
        Ok(FrameDependencies {
            spatial: t.spatial,
            temporal: t.temporal,
            dtis: self.custom_dtis.unwrap_or(t.dtis),
            fdiffs: self.custom_fdiffs.unwrap_or(t.fdiffs),
            chain_diffs: self.custom_chains.unwrap_or(t.chain_diffs),
        })
    }

    /// Bytes [`DependencyDescriptor::write`] needs.
    pub fn encoded_len(&self, in_force: Option<&DependencyStructure>) -> Result<usize, DdError> {
        let mut w = BitWriter::counting();
        self.write_bits(&mut w, in_force)?;
        Ok(w.len())
    }

    /// Writes the descriptor (mandatory fields alone when nothing else is set, else the
    /// extended fields too) and returns its length. Used to rewrite the active decode targets
    /// a receiver is told about, and by tests to build inputs.
    pub fn write(
        &self,
        in_force: Option<&DependencyStructure>,
        buf: &mut [u8],
    ) -> Result<usize, DdError> {
        let mut w = BitWriter::new(buf);
        self.write_bits(&mut w, in_force)?;
        Ok(w.len())
    }

    fn write_bits(
        &self,
        w: &mut BitWriter<'_>,
        in_force: Option<&DependencyStructure>,
    ) -> Result<(), DdError> {
        if self.template_id >= 64 {
            return Err(DdError::Invalid("template id"));
        }
        w.bit(self.start_of_frame)?;
        w.bit(self.end_of_frame)?;
        w.bits(self.template_id.into(), 6)?;
        w.bits(self.frame_number.into(), 16)?;
        let extended = self.structure.is_some()
            || self.active_decode_targets.is_some()
            || self.custom_dtis.is_some()
            || self.custom_fdiffs.is_some()
            || self.custom_chains.is_some();
        let st = self.structure_in_force(in_force)?;
        if extended {
            w.bit(self.structure.is_some())?;
            w.bit(self.active_decode_targets.is_some())?;
            w.bit(self.custom_dtis.is_some())?;
            w.bit(self.custom_fdiffs.is_some())?;
            w.bit(self.custom_chains.is_some())?;
            if let Some(s) = &self.structure {
                bits::write_structure(w, s)?;
            }
            if let Some(mask) = self.active_decode_targets {
                let n = u32::from(st.decode_targets);
                if n < 32 && mask >> n != 0 {
                    return Err(DdError::Invalid("active decode targets beyond the count"));
                }
                w.bits(mask, n)?;
            }
        }
        template_of(st, self.template_id)?;
        if let Some(d) = self.custom_dtis {
            if d.len() != usize::from(st.decode_targets) {
                return Err(DdError::Invalid("custom DTI count"));
            }
            for k in 0..d.len() {
                w.bits(d.get(k).map_or(0, |x| x.bits() as u32), 2)?;
            }
        }
        if let Some(f) = self.custom_fdiffs {
            bits::write_frame_fdiffs(w, &f)?;
        }
        if let Some(c) = self.custom_chains {
            if c.as_slice().len() != usize::from(st.chains) {
                return Err(DdError::Invalid("custom chain count"));
            }
            for &x in c.as_slice() {
                w.bits(x.into(), 8)?;
            }
        }
        w.pad()
    }
}

fn template_of(st: &DependencyStructure, template_id: u8) -> Result<&FrameTemplate, DdError> {
    let idx = (usize::from(template_id) + 64 - usize::from(st.template_id_offset)) % 64;
    st.templates
        .get(idx)
        .ok_or(DdError::UnknownTemplate(template_id))
}

/// A descriptor with its L3T3 structure (9 decode targets, 3 chains) as Chrome 112 sent it,
/// first published in jitsi-videobridge's tests.
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) const CHROME_L3T3: [u8; 95] = [
    0xd0, 0x01, 0x34, 0x81, 0xe8, 0x14, 0x85, 0x21, 0x4e, 0xaf, 0xff, 0xaa, 0xaa, 0x86, 0x3c, 0xf0,
    0x43, 0x0c, 0x10, 0xc3, 0x02, 0xaf, 0xc0, 0xaa, 0xa0, 0x06, 0x3c, 0x00, 0x43, 0x00, 0x10, 0xc0,
    0x02, 0xa0, 0x00, 0xa8, 0x00, 0x06, 0x00, 0x00, 0x40, 0x00, 0x1d, 0x95, 0x49, 0x26, 0xe0, 0x82,
    0xb0, 0x4a, 0x09, 0x41, 0xb8, 0x20, 0xac, 0x12, 0x82, 0x50, 0x31, 0x57, 0xf9, 0x74, 0x00, 0x0c,
    0xa8, 0x64, 0x33, 0x0e, 0x22, 0x22, 0x22, 0xec, 0xa8, 0x65, 0x53, 0x04, 0x22, 0x42, 0x30, 0xec,
    0xa8, 0x77, 0x53, 0x01, 0x3f, 0x00, 0xb3, 0x02, 0x7f, 0x01, 0x67, 0x04, 0xff, 0x02, 0xcf,
];

/// Bit-level reading and writing (MSB first), and the structure's syntax (appendix A.2).
mod bits {
    use super::{
        ChainDiffs, DdError, DependencyStructure, Dti, Fdiffs, FrameTemplate, MAX_SPATIAL_IDS,
        MAX_TEMPLATES, MAX_TEMPORAL_IDS,
    };

    pub(super) struct BitReader<'a> {
        data: &'a [u8],
        pos: usize,
    }

    impl<'a> BitReader<'a> {
        pub(super) fn new(data: &'a [u8]) -> Self {
            BitReader { data, pos: 0 }
        }

        pub(super) fn skip(&mut self, n: usize) {
            self.pos += n;
        }

        pub(super) fn bit(&mut self) -> Result<bool, DdError> {
            let byte = self.data.get(self.pos / 8).ok_or(DdError::Truncated)?;
            let b = (byte >> (7 - self.pos % 8)) & 1;
            self.pos += 1;
            Ok(b == 1)
        }

        /// `f(n)`, n <= 32.
        pub(super) fn bits(&mut self, n: u32) -> Result<u32, DdError> {
            let mut v = 0u32;
            for _ in 0..n {
                v = (v << 1) | u32::from(self.bit()?);
            }
            Ok(v)
        }

        /// `ns(n)`: a value in 0..n in the non-symmetric code of the AV1 specification, n >= 1.
        pub(super) fn ns(&mut self, n: u32) -> Result<u32, DdError> {
            let w = 32 - n.leading_zeros();
            let m = (1u32 << w) - n;
            let v = self.bits(w - 1)?;
            if v < m {
                return Ok(v);
            }
            Ok((v << 1) - m + self.bits(1)?)
        }
    }

    /// Writes into a buffer, or only counts bits (`counting`).
    pub(super) struct BitWriter<'a> {
        buf: Option<&'a mut [u8]>,
        pos: usize,
    }

    impl<'a> BitWriter<'a> {
        pub(super) fn new(buf: &'a mut [u8]) -> Self {
            BitWriter {
                buf: Some(buf),
                pos: 0,
            }
        }

        pub(super) fn counting() -> Self {
            BitWriter { buf: None, pos: 0 }
        }

        /// Bytes written so far, the last one partial.
        pub(super) fn len(&self) -> usize {
            self.pos.div_ceil(8)
        }

        pub(super) fn bit(&mut self, b: bool) -> Result<(), DdError> {
            if let Some(buf) = self.buf.as_deref_mut() {
                let byte = buf.get_mut(self.pos / 8).ok_or(DdError::BufferTooSmall)?;
                let m = 0x80u8 >> (self.pos % 8);
                if b {
                    *byte |= m;
                } else {
                    *byte &= !m;
                }
            }
            self.pos += 1;
            Ok(())
        }

        pub(super) fn bits(&mut self, v: u32, n: u32) -> Result<(), DdError> {
            for k in (0..n).rev() {
                self.bit((v >> k) & 1 == 1)?;
            }
            Ok(())
        }

        pub(super) fn ns(&mut self, v: u32, n: u32) -> Result<(), DdError> {
            if v >= n {
                return Err(DdError::Invalid("ns value out of range"));
            }
            let w = 32 - n.leading_zeros();
            let m = (1u32 << w) - n;
            if v < m {
                self.bits(v, w - 1)
            } else {
                let x = v + m;
                self.bits(x >> 1, w - 1)?;
                self.bits(x & 1, 1)
            }
        }

        /// Zero bits up to the next byte boundary.
        pub(super) fn pad(&mut self) -> Result<(), DdError> {
            while !self.pos.is_multiple_of(8) {
                self.bit(false)?;
            }
            Ok(())
        }
    }

    pub(super) fn read_structure(r: &mut BitReader<'_>) -> Result<DependencyStructure, DdError> {
        let template_id_offset = r.bits(6)? as u8;
        let decode_targets = r.bits(5)? as u8 + 1;
        let mut templates: Vec<FrameTemplate> = Vec::new();
        let (mut s, mut t) = (0u8, 0u8);
        loop {
            if templates.len() >= MAX_TEMPLATES {
                return Err(DdError::TooManyTemplates);
            }
            templates.push(FrameTemplate {
                spatial: s,
                temporal: t,
                ..FrameTemplate::default()
            });
            match r.bits(2)? {
                0 => {}
                1 => t += 1,
                2 => (s, t) = (s + 1, 0),
                _ => break,
            }
            if s >= MAX_SPATIAL_IDS || t >= MAX_TEMPORAL_IDS {
                return Err(DdError::LayerOutOfRange);
            }
        }
        for tpl in &mut templates {
            for _ in 0..decode_targets {
                tpl.dtis.push(Dti::from_bits(r.bits(2)?));
            }
        }
        for tpl in &mut templates {
            while r.bit()? {
                if !tpl.fdiffs.push(r.bits(4)? as u16 + 1) {
                    return Err(DdError::TooManyFdiffs);
                }
            }
        }
        let chains = r.ns(u32::from(decode_targets) + 1)? as u8;
        let mut protected_by = Vec::new();
        if chains > 0 {
            for _ in 0..decode_targets {
                protected_by.push(r.ns(chains.into())? as u8);
            }
            for tpl in &mut templates {
                let mut c = ChainDiffs::default();
                for _ in 0..chains {
                    c.push(r.bits(4)? as u8);
                }
                tpl.chain_diffs = c;
            }
        }
        let mut st = DependencyStructure {
            template_id_offset,
            decode_targets,
            chains,
            protected_by,
            templates,
            resolutions: Vec::new(),
        };
        if r.bit()? {
            for _ in 0..=st.max_spatial() {
                let w = r.bits(16)? + 1;
                let h = r.bits(16)? + 1;
                st.resolutions.push((w, h));
            }
        }
        Ok(st)
    }

    pub(super) fn write_structure(
        w: &mut BitWriter<'_>,
        st: &DependencyStructure,
    ) -> Result<(), DdError> {
        st.validate()?;
        w.bits(st.template_id_offset.into(), 6)?;
        w.bits(u32::from(st.decode_targets) - 1, 5)?;
        for (k, t) in st.templates.iter().enumerate() {
            let idc = match st.templates.get(k + 1) {
                None => 3,
                Some(n) if n.spatial == t.spatial && n.temporal == t.temporal => 0,
                Some(n) if n.spatial == t.spatial => 1,
                Some(_) => 2,
            };
            w.bits(idc, 2)?;
        }
        for t in &st.templates {
            for dt in 0..t.dtis.len() {
                w.bits(t.dtis.get(dt).map_or(0, |d| d.bits() as u32), 2)?;
            }
        }
        for t in &st.templates {
            for &f in t.fdiffs.as_slice() {
                w.bit(true)?;
                w.bits(u32::from(f) - 1, 4)?;
            }
            w.bit(false)?;
        }
        w.ns(st.chains.into(), u32::from(st.decode_targets) + 1)?;
        if st.chains > 0 {
            for &c in &st.protected_by {
                w.ns(c.into(), st.chains.into())?;
            }
            for t in &st.templates {
                for &c in t.chain_diffs.as_slice() {
                    w.bits(c.into(), 4)?;
                }
            }
        }
        w.bit(!st.resolutions.is_empty())?;
        for &(width, height) in &st.resolutions {
            w.bits(width - 1, 16)?;
            w.bits(height - 1, 16)?;
        }
        Ok(())
    }

    pub(super) fn read_frame_fdiffs(r: &mut BitReader<'_>) -> Result<Fdiffs, DdError> {
        let mut f = Fdiffs::default();
        loop {
            let size = r.bits(2)?;
            if size == 0 {
                return Ok(f);
            }
            if !f.push(r.bits(4 * size)? as u16 + 1) {
                return Err(DdError::TooManyFdiffs);
            }
        }
    }

    pub(super) fn write_frame_fdiffs(w: &mut BitWriter<'_>, f: &Fdiffs) -> Result<(), DdError> {
        for &d in f.as_slice() {
            let v = u32::from(d)
                .checked_sub(1)
                .filter(|&v| v < 4096)
                .ok_or(DdError::Invalid("frame diff out of 1..=4096"))?;
            let size = match v {
                0..16 => 1,
                16..256 => 2,
                _ => 3,
            };
            w.bits(size, 2)?;
            w.bits(v, 4 * size)?;
        }
        w.bits(0, 2)
    }
}
