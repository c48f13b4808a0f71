//! Per viewer and track: which packets of a layered video stream inside one SSRC to forward,
//! so that the viewer gets the spatial and temporal layer it is allotted and never a frame
//! whose references it lacks. (Simulcast, one SSRC per layer, is switched at keyframes
//! elsewhere; a simulcast layer with temporal layers comes through here too.)
//!
//! # Driving it
//!
//! Sans-IO, per packet, in arrival order:
//!
//! 1. Describe the packet as a [`LayerInfo`]: [`vp8_layer_info`] or [`vp9_layer_info`] from the
//!    RTP payload, or, when the stream has the dependency descriptor extension (AV1, and
//!    libwebrtc's VP9/H.264 when negotiated), [`Av1DdTracker::read`] from the extension's bytes
//!    (one tracker per source stream, shared by its viewers; the payload is never read, so
//!    end-to-end encrypted media works). The RTP marker goes in as `rtp_marker`.
//! 2. [`LayerSelector::select`] on each viewer's selector, with the SSRC the packet came on
//!    (frame identities are per stream): [`Selection::Forward`] with the marker
//!    bit to write, or [`Selection::Drop`], after which the caller closes the sequence number
//!    gap it leaves (and, for VP8, keeps picture IDs and TL0PICIDX continuous).
//! 3. After each packet, [`LayerSelector::needs_keyframe`] says whether the switch asked for
//!    by [`LayerSelector::set_target`] waits on a keyframe: the caller sends a PLI, paced.
//!    With a dependency descriptor, [`LayerSelector::active_decode_targets`] is the bitmask to
//!    write into forwarded descriptors so the receiver does not expect layers it will not get.
//!
//! Switching rules (checked against mediasoup's and LiveKit's selectors):
//! * Temporal down at the next picture; temporal up at a switch point of the next layer (VP8
//!   Y, VP9 U in non-flexible mode) or, where references are explicit (VP9 flexible mode, the
//!   dependency descriptor), at any frame whose references were all forwarded.
//! * Spatial up at a keyframe, or at a layer frame that predicts only from the layer below in
//!   the same picture (VP9 P=0). Spatial down at the next picture in full SVC ([`SvcMode::Full`]:
//!   the lower layers were forwarded all along); in K-SVC ([`SvcMode::KSvc`]) only the current
//!   layer is forwarded between key pictures, so both directions wait for a keyframe and the
//!   current layer stays until then.
//! * With a dependency descriptor, decode targets replace the modes: a frame is forwarded when
//!   its DTI for the chosen decode target is not `NotPresent`; the target changes at a
//!   decodable frame whose DTI is `Switch`, or, downwards, to a decode target whose frames are
//!   all in the current one and whose chain is intact.
//! * A frame one of whose references was dropped is dropped too; the marker goes on the last
//!   packet of the highest forwarded spatial layer of each picture (VP9 E bit, descriptor
//!   `end_of_frame`), or stays where the sender put it.
//!
//! Scalability modes covered by this module's tests: VP8 with 3 temporal layers (libwebrtc
//! pattern with Y bits); VP9 L1T3 (non-flexible, TL0PICIDX and U) and L3T3 in flexible mode
//! with the scalability structure at the keyframe, in both modes; AV1 descriptors with
//! libwebrtc's L1T3 and L3T3_KEY structures and Chrome's captured L3T3 structure.

use crate::codec::av1::{
    ChainDiffs, DdError, DependencyDescriptor, DependencyStructure, Dti, Dtis, FrameDependencies,
    MAX_DECODE_TARGETS,
};
use crate::codec::vp8_descriptor;
use crate::codec::vp9::Vp9Descriptor;

/// References a [`LayerInfo`] carries (VP9: 3 P_DIFFs and the inter-layer one).
pub const MAX_REFS: usize = 4;

// Frame identities carry their codec in the top bits, so a decision cached for one codec's
// numbering is never read back for another's.
pub(crate) const TAG_VP8: u32 = 1 << 28;
pub(crate) const TAG_VP9: u32 = 2 << 28;
pub(crate) const TAG_AV1: u32 = 3 << 28;

/// What the selector needs to know of one packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LayerInfo {
    /// Spatial layer (0 without spatial scalability).
    pub spatial: u8,
    /// Temporal layer (0 without temporal scalability).
    pub temporal: u8,
    /// The frame decodes without any earlier frame.
    pub keyframe: bool,
    /// First packet of the (layer) frame.
    pub start_of_frame: bool,
    /// Last packet of the (layer) frame.
    pub end_of_frame: bool,
    /// The packet's RTP marker bit.
    pub rtp_marker: bool,
    /// Switching up to this frame's temporal layer is possible here (VP8 Y, VP9 U, DTI switch).
    pub temporal_switch_up: bool,
    /// This layer frame needs no earlier frame of its spatial layer (VP9 P=0, DTI switch).
    pub spatial_switch_up: bool,
    /// Picture ID (VP8/VP9): layer frames of one picture share it.
    pub picture: Option<u16>,
    /// Identity of the (layer) frame, for per-frame decisions and references.
    pub frame: Option<u32>,
    /// Identities of the frames this one references (first `ref_count`).
    pub refs: [u32; MAX_REFS],
    /// How many references.
    pub ref_count: u8,
    /// `refs` lists every reference (VP9 flexible mode, dependency descriptor).
    pub refs_complete: bool,
    /// Spatial layers the sender announces (VP9 scalability structure, descriptor structure).
    pub spatial_layers: Option<u8>,
    /// The dependency descriptor's view of the frame.
    pub dd: Option<DdFrame>,
}

impl LayerInfo {
    /// The references.
    pub fn refs(&self) -> &[u32] {
        self.refs.get(..usize::from(self.ref_count)).unwrap_or(&[])
    }

    /// Adds a reference; false (and `refs_complete` cleared) when full.
    pub fn push_ref(&mut self, id: u32) -> bool {
        let Some(slot) = self.refs.get_mut(usize::from(self.ref_count)) else {
            self.refs_complete = false;
            return false;
        };
        *slot = id;
        self.ref_count += 1;
        true
    }
}

/// A VP8 packet (RFC 7741): the temporal layer from the T bit, switch points from Y, the
/// frame's end from the RTP marker. `None` when the descriptor is truncated.
pub fn vp8_layer_info(payload: &[u8], rtp_marker: bool) -> Option<LayerInfo> {
    let d = vp8_descriptor(payload)?;
    let (temporal, sync) = d.temporal.unwrap_or((0, false));
    let start = d.start && d.partition == 0;
    // The inverse key-frame flag P is bit 0 of the VP8 payload header (RFC 7741 §4.3).
    let keyframe = start && payload.get(d.len).is_some_and(|b| b & 0x01 == 0);
    let picture = d.picture_id.map(|(p, _)| p);
    Some(LayerInfo {
        temporal,
        keyframe,
        start_of_frame: start,
        end_of_frame: rtp_marker,
        rtp_marker,
        temporal_switch_up: sync,
        spatial_switch_up: keyframe,
        picture,
        frame: picture.map(|p| TAG_VP8 | u32::from(p)),
        spatial_layers: Some(1),
        ..LayerInfo::default()
    })
}

fn vp9_id(picture: u16, spatial: u8) -> u32 {
    TAG_VP9 | (u32::from(picture) << 3) | u32::from(spatial & 7)
}

/// A VP9 packet (RFC 9628). In flexible mode the references are explicit (P_DIFFs and the
/// inter-layer dependency); in non-flexible mode the U bit marks temporal switch points.
/// `None` when the descriptor does not parse.
pub fn vp9_layer_info(payload: &[u8], rtp_marker: bool) -> Option<LayerInfo> {
    let d = Vp9Descriptor::parse(payload).ok()?;
    let l = d.layer.unwrap_or_default();
    let mut info = LayerInfo {
        spatial: l.spatial,
        temporal: l.temporal,
        keyframe: d.is_keyframe(),
        start_of_frame: d.start_of_frame,
        end_of_frame: d.end_of_frame,
        rtp_marker,
        temporal_switch_up: d.layer.is_none_or(|l| l.switching_up),
        spatial_switch_up: !d.inter_picture_predicted,
        picture: d.picture_id.map(|p| p.value),
        frame: d.picture_id.map(|p| vp9_id(p.value, l.spatial)),
        refs_complete: d.flexible && d.picture_id.is_some(),
        spatial_layers: d.ss.map(|ss| ss.spatial_layers),
        ..LayerInfo::default()
    };
    if let Some(pid) = d.picture_id {
        for &diff in d.p_diffs() {
            info.push_ref(vp9_id(pid.minus(diff), l.spatial));
        }
        if l.inter_layer_dependency && l.spatial > 0 {
            info.push_ref(vp9_id(pid.value, l.spatial - 1));
        }
    }
    Some(info)
}

/// The dependency descriptor state of one source stream: the structure in force and the
/// sender's active decode targets.
#[derive(Debug, Clone, Default)]
pub struct Av1DdTracker {
    structure: Option<DependencyStructure>,
    fingerprint: u32,
    targets: DecodeTargets,
    active: u32,
    /// Newest frame number seen and that of the structure in force, unwrapped.
    newest: Option<u64>,
    structure_frame: u64,
}

/// [`Av1DdTracker`] as plain data: the structure as a descriptor carrying it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Av1DdTrackerSnapshot {
    /// A dependency descriptor with the structure attached, when one is known.
    pub structure: Option<Vec<u8>>,
    /// The sender's active decode targets.
    pub active_decode_targets: u32,
}

fn all_targets(n: u8) -> u32 {
    1u32.checked_shl(n.into()).map_or(u32::MAX, |b| b - 1)
}

impl Av1DdTracker {
    /// No structure yet: descriptors fail with [`DdError::NoStructure`] until a keyframe's.
    pub fn new() -> Self {
        Self::default()
    }

    /// The structure in force.
    pub fn structure(&self) -> Option<&DependencyStructure> {
        self.structure.as_ref()
    }

    /// The sender's active decode targets (bit per decode target).
    pub fn active_decode_targets(&self) -> u32 {
        self.active
    }

    /// Reads one packet's extension, adopting an attached structure and active-target mask,
    /// and describes the packet for the selectors. A descriptor that does not parse changes
    /// nothing.
    pub fn read(
        &mut self,
        ext: &[u8],
        rtp_marker: bool,
    ) -> Result<(DependencyDescriptor, LayerInfo), DdError> {
        let dd = DependencyDescriptor::parse(ext, self.structure.as_ref())?;
        let f = dd.frame(self.structure.as_ref())?;
        // Frame numbers unwrapped around the newest one seen (packets arrive within ±2^15).
        let at = self.newest.map_or(1 << 16, |n| {
            let delta = dd.frame_number.wrapping_sub(n as u16) as i16;
            n.saturating_add_signed(delta.into())
        });
        if let Some(st) = &dd.structure {
            if self.structure.as_ref() != Some(st) {
                if self.structure.is_some() && at < self.structure_frame {
                    return Err(DdError::StaleStructure);
                }
                self.fingerprint = st.fingerprint();
                self.targets = DecodeTargets::from_structure(st);
                self.structure = Some(st.clone());
                self.structure_frame = at;
            }
            // An attached structure makes every decode target active unless the mask says.
            self.active = all_targets(st.decode_targets);
        }
        if let Some(m) = dd.active_decode_targets {
            self.active = m;
        }
        self.newest = Some(self.newest.map_or(at, |n| n.max(at)));
        let spatial_layers = self.structure.as_ref().map_or(1, |s| s.max_spatial() + 1);
        let frame = DdFrame {
            frame_number: dd.frame_number,
            structure: self.fingerprint,
            dtis: f.dtis,
            chain_diffs: f.chain_diffs,
            active_decode_targets: self.active,
            targets: self.targets,
        };
        let info = dd_layer_info(&dd, &f, frame, spatial_layers, rtp_marker);
        Ok((dd, info))
    }

    /// [`Av1DdTracker::read`] without the descriptor.
    pub fn layer_info(&mut self, ext: &[u8], rtp_marker: bool) -> Result<LayerInfo, DdError> {
        self.read(ext, rtp_marker).map(|(_, info)| info)
    }

    /// The decode targets whose frames a receiver of decode target `dt` gets, among the
    /// active ones: the bitmask to write into forwarded descriptors.
    pub fn decodable_with(&self, dt: u8) -> u32 {
        self.targets.within(dt.into()) & self.active
    }

    /// Plain data for a session snapshot.
    pub fn snapshot(&self) -> Av1DdTrackerSnapshot {
        let structure = self.structure.as_ref().and_then(|st| {
            let dd = DependencyDescriptor {
                start_of_frame: true,
                end_of_frame: true,
                template_id: st.template_id_offset,
                frame_number: self.structure_frame as u16,
                structure: Some(st.clone()),
                active_decode_targets: None,
                custom_dtis: None,
                custom_fdiffs: None,
                custom_chains: None,
            };
            let mut buf = vec![0u8; dd.encoded_len(None).ok()?];
            dd.write(None, &mut buf).ok()?;
            Some(buf)
        });
        Av1DdTrackerSnapshot {
            structure,
            active_decode_targets: self.active,
        }
    }

    /// From [`Av1DdTracker::snapshot`].
    pub fn restore(s: &Av1DdTrackerSnapshot) -> Result<Self, DdError> {
        let mut t = Av1DdTracker::new();
        if let Some(bytes) = &s.structure {
            t.read(bytes, false)?;
        }
        t.active = s.active_decode_targets;
        Ok(t)
    }
}

/// Per decode target: its (spatial, temporal) layer and protecting chain, copied out of the
/// structure so a [`DdFrame`] is self-contained plain data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecodeTargets {
    layer: [u8; MAX_DECODE_TARGETS],
    chain: [u8; MAX_DECODE_TARGETS],
    within: [u32; MAX_DECODE_TARGETS],
    len: u8,
}

impl Default for DecodeTargets {
    fn default() -> Self {
        DecodeTargets {
            layer: [0; MAX_DECODE_TARGETS],
            chain: [NO_CHAIN; MAX_DECODE_TARGETS],
            within: [0; MAX_DECODE_TARGETS],
            len: 0,
        }
    }
}

const NO_CHAIN: u8 = 0xff;

impl DecodeTargets {
    /// The decode targets of `st`.
    pub fn from_structure(st: &DependencyStructure) -> Self {
        let mut d = DecodeTargets::default();
        let n = usize::from(st.decode_targets).min(MAX_DECODE_TARGETS);
        for dt in 0..n {
            let (s, t) = st.decode_target_layer(dt).unwrap_or((0, 0));
            if let (Some(l), Some(c)) = (d.layer.get_mut(dt), d.chain.get_mut(dt)) {
                *l = (s << 4) | (t & 0x0f);
                *c = st.chain_of(dt).unwrap_or(NO_CHAIN);
            }
            // Decode targets whose every template is also present in `dt`: a receiver of `dt`
            // has all their frames (full SVC: the lower layers; K-SVC: only the same layer's
            // lower frame rates).
            let mut within = 0u32;
            for other in 0..n {
                let contained = st.templates.iter().all(|t| {
                    t.dtis.get(other) == Some(Dti::NotPresent)
                        || t.dtis.get(dt).is_some_and(|x| x != Dti::NotPresent)
                });
                if contained {
                    within |= 1 << other;
                }
            }
            if let Some(w) = d.within.get_mut(dt) {
                *w = within;
            }
        }
        d.len = n as u8;
        d
    }

    /// Bit `d` set when decode target `d`'s frames are all frames of decode target `dt`.
    pub fn within(&self, dt: usize) -> u32 {
        self.within
            .get(dt)
            .filter(|_| dt < self.len())
            .copied()
            .unwrap_or(0)
    }

    /// How many.
    pub fn len(&self) -> usize {
        usize::from(self.len)
    }

    /// None at all.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// (spatial, max temporal) of decode target `dt`.
    pub fn layer(&self, dt: usize) -> Option<(u8, u8)> {
        let l = *self.layer.get(dt).filter(|_| dt < self.len())?;
        Some((l >> 4, l & 0x0f))
    }

    /// The chain protecting `dt`, if any.
    pub fn chain(&self, dt: usize) -> Option<u8> {
        self.chain
            .get(dt)
            .filter(|&&c| dt < self.len() && c != NO_CHAIN)
            .copied()
    }

    /// The decode target whose layer is exactly (`spatial`, `temporal`).
    pub fn find(&self, spatial: u8, temporal: u8) -> Option<usize> {
        (0..self.len()).find(|&dt| self.layer(dt) == Some((spatial, temporal)))
    }
}

/// What the layer selector needs of one frame's descriptor, resolved against the structure
/// in force: plain data, no heap.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DdFrame {
    /// The frame number.
    pub frame_number: u16,
    /// [`DependencyStructure::fingerprint`] of the structure in force.
    pub structure: u32,
    /// The frame's DTIs.
    pub dtis: Dtis,
    /// The frame's chain diffs.
    pub chain_diffs: ChainDiffs,
    /// The sender's active decode targets (bit `dt`).
    pub active_decode_targets: u32,
    /// The structure's decode targets.
    pub targets: DecodeTargets,
}

/// Turns one frame's dependencies into the selector's input (`frame_number` for identity).
fn dd_layer_info(
    dd: &DependencyDescriptor,
    f: &FrameDependencies,
    frame: DdFrame,
    spatial_layers: u8,
    rtp_marker: bool,
) -> LayerInfo {
    let own = frame.targets.find(f.spatial, f.temporal);
    let switch = own.and_then(|dt| f.dtis.get(dt)) == Some(Dti::Switch);
    let mut info = LayerInfo {
        spatial: f.spatial,
        temporal: f.temporal,
        keyframe: f.fdiffs.as_slice().is_empty(),
        start_of_frame: dd.start_of_frame,
        end_of_frame: dd.end_of_frame,
        rtp_marker,
        temporal_switch_up: switch,
        spatial_switch_up: switch,
        frame: Some(TAG_AV1 | u32::from(dd.frame_number)),
        refs_complete: f.fdiffs.as_slice().len() <= MAX_REFS,
        spatial_layers: Some(spatial_layers),
        dd: Some(frame),
        ..LayerInfo::default()
    };
    for &d in f.fdiffs.as_slice().iter().take(MAX_REFS) {
        info.push_ref(TAG_AV1 | u32::from(dd.frame_number.wrapping_sub(d)));
    }
    info
}

/// How spatial layers depend on each other, for VP9 without a dependency descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SvcMode {
    /// Every layer up to the current one is forwarded: what full SVC (L2T*, L3T*) needs, and
    /// safe for any stream. Spatial down-switches need no keyframe.
    #[default]
    Full,
    /// K-SVC (L2T*_KEY, L3T*_KEY): between key pictures only the current spatial layer is
    /// forwarded (it predicts from itself only), saving the lower layers' bandwidth; every
    /// spatial switch waits for a key picture.
    KSvc,
}

/// What to do with a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Selection {
    /// Forward it, with this RTP marker bit.
    Forward {
        /// Last packet of the highest forwarded spatial layer of the picture.
        marker: bool,
    },
    /// Drop it (and close the sequence number gap).
    Drop,
}

/// [`LayerSelector`] as plain data (the per-frame decision cache is not kept: after a restore,
/// references are presumed forwarded and switches wait for frames decided afresh).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LayerSelectorSnapshot {
    /// The mode.
    pub mode: SvcMode,
    /// Target (spatial, temporal).
    pub target: (u8, u8),
    /// Current (spatial, temporal), `None` before the first keyframe.
    pub current: Option<(u8, u8)>,
    /// Highest spatial layer the sender sends.
    pub max_spatial_seen: u8,
    /// Highest temporal layer seen since the last key picture.
    pub max_temporal_seen: u8,
    /// The last picture ID decided.
    pub last_picture: Option<u16>,
    /// Fingerprint of the descriptor structure the decode target belongs to.
    pub dd_structure: Option<u32>,
    /// The chosen decode target.
    pub dd_target: Option<u8>,
    /// Chains intact at the receiver (bit per chain).
    pub dd_chains_intact: u32,
}

const CACHE_SLOTS: usize = 509;

/// The last decisions by source stream and frame identity: a prime-sized table, so any 509
/// consecutive identities of a stream (63 VP9 pictures of up to 8 layers) get distinct slots.
///
/// The stream (its SSRC) is part of the key: a publisher's new encoder (a reconnect, a
/// restart) numbers its frames afresh, from about where the old one started. Keyed by number
/// alone, the new stream's frame read the old one's decision of that number — one dropped while
/// the viewer waited for its first keyframe — and every frame after it, their reference
/// "dropped", was dropped too: the viewer stood still, seeing no loss to report, until the
/// numbers passed that range (seconds).
#[derive(Clone)]
struct DecisionCache {
    /// `ssrc << 32 | id << 2 | decision` (1 forward, 2 drop; 0 empty). Identities are under
    /// 2^30 (codec tag in bits 28-29).
    slots: [u64; CACHE_SLOTS],
}

impl DecisionCache {
    fn new() -> Self {
        DecisionCache {
            slots: [0; CACHE_SLOTS],
        }
    }

    fn get(&self, ssrc: u32, id: u32) -> Option<bool> {
        let e = *self.slots.get(id as usize % CACHE_SLOTS)?;
        let d = e & 3;
        (d != 0 && e >> 32 == u64::from(ssrc) && (e as u32) >> 2 == id).then_some(d == 1)
    }

    fn put(&mut self, ssrc: u32, id: u32, forward: bool) {
        if let Some(e) = self.slots.get_mut(id as usize % CACHE_SLOTS) {
            *e = u64::from(ssrc) << 32 | u64::from(id << 2) | if forward { 1 } else { 2 };
        }
    }
}

impl std::fmt::Debug for DecisionCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let used = self.slots.iter().filter(|&&e| e != 0).count();
        f.debug_struct("DecisionCache")
            .field("used", &used)
            .finish()
    }
}

/// One viewer's layer filter for one track. See the module documentation.
#[derive(Debug, Clone)]
pub struct LayerSelector {
    mode: SvcMode,
    target: (u8, u8),
    current: Option<(u8, u8)>,
    max_spatial_seen: u8,
    max_temporal_seen: u8,
    last_picture: Option<u16>,
    last_decision: bool,
    dd_structure: Option<u32>,
    dd_target: Option<u8>,
    chains_intact: u32,
    dd_view: Option<(DecodeTargets, u32)>,
    cache: DecisionCache,
}

impl Default for LayerSelector {
    /// Full SVC, target as high as the stream goes.
    fn default() -> Self {
        Self::new(SvcMode::Full)
    }
}

impl LayerSelector {
    /// Forwards nothing until a keyframe; the target is as high as the stream goes.
    pub fn new(mode: SvcMode) -> Self {
        Self::restore(LayerSelectorSnapshot {
            mode,
            target: (u8::MAX, u8::MAX),
            ..LayerSelectorSnapshot::default()
        })
    }

    /// The layers to reach; switches happen at the points the stream allows.
    pub fn set_target(&mut self, spatial: u8, temporal: u8) {
        self.target = (spatial, temporal);
    }

    /// The target (spatial, temporal).
    pub fn target(&self) -> (u8, u8) {
        self.target
    }

    /// The (spatial, temporal) layers being forwarded, as far as the stream has shown them;
    /// `None` before the first keyframe or after the stream broke.
    pub fn current(&self) -> Option<(u8, u8)> {
        self.current
            .map(|(s, t)| (s, t.min(self.max_temporal_seen)))
    }

    /// The chosen decode target, with a dependency descriptor.
    pub fn decode_target(&self) -> Option<u8> {
        self.dd_target
    }

    /// The decode targets the viewer gets all frames of, among the sender's active ones: the
    /// `active_decode_targets_bitmask` to write into forwarded descriptors.
    pub fn active_decode_targets(&self) -> Option<u32> {
        let (targets, active) = self.dd_view?;
        Some(targets.within(self.dd_target?.into()) & active)
    }

    /// Whether reaching the target (or forwarding at all) waits for a keyframe.
    pub fn needs_keyframe(&self) -> bool {
        if let Some((targets, active)) = &self.dd_view {
            return self.dd_needs_keyframe(targets, *active);
        }
        let Some((cs, _)) = self.current else {
            return true;
        };
        let ts = self.target.0;
        let up = ts > cs && self.max_spatial_seen > cs;
        let ksvc_move = self.mode == SvcMode::KSvc && (ts < cs || cs > self.max_spatial_seen);
        up || ksvc_move
    }

    /// Decides one packet, which came on the source stream `ssrc`. Packets of a frame already
    /// decided follow that decision, so a target change never cuts a frame in two.
    pub fn select(&mut self, ssrc: u32, info: &LayerInfo) -> Selection {
        let known = info.frame.and_then(|id| self.cache.get(ssrc, id));
        let forward = match known {
            Some(d) => d,
            // A continuation packet without a frame identity follows the frame's first one.
            None if info.frame.is_none() && !info.start_of_frame => self.last_decision,
            None => {
                let d = match &info.dd {
                    Some(dd) => self.decide_dd(ssrc, info, dd),
                    None => self.decide(ssrc, info),
                };
                if let Some(id) = info.frame {
                    self.cache.put(ssrc, id, d);
                }
                d
            }
        };
        self.last_decision = forward;
        if !forward {
            return Selection::Drop;
        }
        let top = self.current.map(|(s, _)| s);
        Selection::Forward {
            marker: info.rtp_marker || (info.end_of_frame && top == Some(info.spatial)),
        }
    }

    /// Plain data for a session snapshot.
    pub fn snapshot(&self) -> LayerSelectorSnapshot {
        LayerSelectorSnapshot {
            mode: self.mode,
            target: self.target,
            current: self.current,
            max_spatial_seen: self.max_spatial_seen,
            max_temporal_seen: self.max_temporal_seen,
            last_picture: self.last_picture,
            dd_structure: self.dd_structure,
            dd_target: self.dd_target,
            dd_chains_intact: self.chains_intact,
        }
    }

    /// From [`LayerSelector::snapshot`].
    pub fn restore(s: LayerSelectorSnapshot) -> Self {
        LayerSelector {
            mode: s.mode,
            target: s.target,
            current: s.current,
            max_spatial_seen: s.max_spatial_seen,
            max_temporal_seen: s.max_temporal_seen,
            last_picture: s.last_picture,
            last_decision: false,
            dd_structure: s.dd_structure,
            dd_target: s.dd_target,
            chains_intact: s.dd_chains_intact,
            dd_view: None,
            cache: DecisionCache::new(),
        }
    }

    /// Whether a reference of `i` (a frame of the stream `ssrc`) was dropped, and whether all
    /// were forwarded.
    fn refs_state(&self, ssrc: u32, i: &LayerInfo) -> (bool, bool) {
        let dropped = i
            .refs()
            .iter()
            .any(|&r| self.cache.get(ssrc, r) == Some(false));
        let forwarded = i
            .refs()
            .iter()
            .all(|&r| self.cache.get(ssrc, r) == Some(true));
        (dropped, forwarded)
    }

    /// VP8/VP9: the first packet seen of a new (layer) frame.
    fn decide(&mut self, ssrc: u32, i: &LayerInfo) -> bool {
        self.dd_view = None;
        let new_picture = i.picture.is_none() || i.picture != self.last_picture;
        self.last_picture = i.picture;
        let (ts, tt) = self.target;
        let announced = i.spatial_layers.map(|n| n.saturating_sub(1));
        let key_picture = i.keyframe && (i.spatial == 0 || self.current.is_none());
        if let Some(top) = announced {
            self.max_spatial_seen = top;
        } else if key_picture {
            self.max_spatial_seen = 0;
        }
        self.max_spatial_seen = self.max_spatial_seen.max(i.spatial);
        if key_picture {
            self.max_temporal_seen = 0;
        }
        self.max_temporal_seen = self.max_temporal_seen.max(i.temporal);
        let (dropped_ref, refs_forwarded) = self.refs_state(ssrc, i);

        if key_picture && i.spatial <= ts {
            // A key picture restarts every layer: the upper layer frames of the picture
            // predict only from the ones below, so the target is reachable at once.
            let top = announced.unwrap_or(i.spatial).min(ts).max(i.spatial);
            self.current = Some((top, tt));
            return i.temporal <= tt;
        }
        let Some((mut cs, mut ct)) = self.current else {
            return false;
        };
        if new_picture && tt < ct {
            ct = tt;
        }
        if self.mode == SvcMode::Full && new_picture && ts < cs && i.spatial <= ts {
            cs = ts;
        }
        let spatial_point = if i.refs_complete {
            refs_forwarded
        } else {
            i.spatial_switch_up && cs.checked_add(1) == Some(i.spatial)
        };
        if ts > cs
            && i.spatial > cs
            && i.spatial <= ts
            && i.temporal <= ct
            && !dropped_ref
            && spatial_point
        {
            cs = i.spatial;
        }
        let spatial_ok = match self.mode {
            SvcMode::Full => i.spatial <= cs,
            SvcMode::KSvc => i.spatial == cs || (i.spatial < cs && i.spatial_switch_up),
        };
        // One layer at a time where only a flag vouches for the switch: a frame of layer
        // ct+2 may be a switch point while the layer between has frames we never forwarded.
        let temporal_point = if i.refs_complete {
            refs_forwarded
        } else {
            i.temporal_switch_up && ct.checked_add(1) == Some(i.temporal)
        };
        if spatial_ok
            && tt > ct
            && i.temporal > ct
            && i.temporal <= tt
            && !dropped_ref
            && temporal_point
        {
            ct = i.temporal;
        }
        let in_layers = spatial_ok && i.temporal <= ct;
        if in_layers && dropped_ref && i.temporal == 0 && i.spatial == cs {
            // The base of the current layer lost a reference: nothing decodes until a
            // keyframe.
            self.current = None;
            return false;
        }
        self.current = Some((cs, ct));
        in_layers && !dropped_ref
    }

    /// With a dependency descriptor: the first packet seen of a new frame.
    fn decide_dd(&mut self, ssrc: u32, i: &LayerInfo, d: &DdFrame) -> bool {
        if self.dd_structure != Some(d.structure) {
            // New structure: decode target indexes and chains start over at its keyframe.
            self.dd_structure = Some(d.structure);
            self.dd_target = None;
            self.chains_intact = 0;
            self.current = None;
        }
        self.dd_view = Some((d.targets, d.active_decode_targets));
        for (c, &diff) in d.chain_diffs.as_slice().iter().enumerate() {
            let bit = 1u32.checked_shl(c as u32).unwrap_or(0);
            if diff == 0 {
                self.chains_intact |= bit;
            } else if self.chains_intact & bit != 0 {
                // Unknown (not yet arrived, or too old to remember) counts as intact: a lost
                // packet is recovered upstream; only our own drops break a chain.
                let prev = TAG_AV1 | u32::from(d.frame_number.wrapping_sub(u16::from(diff)));
                if self.cache.get(ssrc, prev) == Some(false) {
                    self.chains_intact &= !bit;
                }
            }
        }
        let (dropped_ref, refs_forwarded) = self.refs_state(ssrc, i);
        let chains = self.chains_intact;
        let chain_ok = |dt: usize| {
            d.targets
                .chain(dt)
                .is_none_or(|c| chains & 1u32.checked_shl(c.into()).unwrap_or(0) != 0)
        };
        let active = |dt: usize| d.active_decode_targets & bit_of(dt) != 0;
        let current = self
            .dd_target
            .map(usize::from)
            .filter(|&c| c < d.targets.len() && active(c) && chain_ok(c));
        let (cands, n) = candidates(&d.targets, d.active_decode_targets, self.target);
        let mut chosen = None;
        for &dt in cands.iter().take(n) {
            let dt = usize::from(dt);
            if Some(dt) == current {
                chosen = Some(dt);
                break;
            }
            let switch = d.dtis.get(dt) == Some(Dti::Switch) && refs_forwarded && chain_ok(dt);
            let subset = current.is_some_and(|c| d.targets.within(c) & bit_of(dt) != 0);
            if switch || (subset && chain_ok(dt)) {
                chosen = Some(dt);
                break;
            }
        }
        // No switch point yet: keep the current decode target, even above the target.
        let chosen = chosen.or(current);
        self.dd_target = chosen.map(|c| c as u8);
        self.current = chosen.and_then(|c| d.targets.layer(c));
        if let Some((_, t)) = self.current {
            self.max_spatial_seen = self.max_spatial_seen.max(i.spatial);
            self.max_temporal_seen = t;
        }
        chosen.is_some_and(|c| d.dtis.get(c).is_some_and(|x| x != Dti::NotPresent) && !dropped_ref)
    }

    fn dd_needs_keyframe(&self, targets: &DecodeTargets, active: u32) -> bool {
        let (cands, n) = candidates(targets, active, self.target);
        let Some(&best) = cands.get(..n).and_then(|c| c.first()) else {
            // Nothing the sender sends fits the target: a keyframe would not help.
            return false;
        };
        let best = usize::from(best);
        let Some(c) = self.dd_target.map(usize::from) else {
            return true;
        };
        let layer = |dt| targets.layer(dt).map_or(0, |(s, _)| s);
        let chain_ok = targets
            .chain(best)
            .is_none_or(|ch| self.chains_intact & 1u32.checked_shl(ch.into()).unwrap_or(0) != 0);
        let reachable = targets.within(c) & bit_of(best) != 0 && chain_ok;
        layer(best) != layer(c) && !reachable
    }
}

fn bit_of(dt: usize) -> u32 {
    1u32.checked_shl(dt as u32).unwrap_or(0)
}

/// Active decode targets within `target`, highest (spatial, temporal) first.
fn candidates(targets: &DecodeTargets, active: u32, target: (u8, u8)) -> ([u8; 32], usize) {
    let mut out = [0u8; 32];
    let mut n = 0;
    for dt in 0..targets.len().min(32) {
        let Some((s, t)) = targets.layer(dt) else {
            continue;
        };
        if active & bit_of(dt) != 0
            && s <= target.0
            && t <= target.1
            && let Some(slot) = out.get_mut(n)
        {
            *slot = dt as u8;
            n += 1;
        }
    }
    if let Some(c) = out.get_mut(..n) {
        c.sort_by_key(|&dt| std::cmp::Reverse(targets.layer(dt.into()).unwrap_or((0, 0))));
    }
    (out, n)
}
