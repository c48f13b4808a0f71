//! Hard capability flags for placement filters ("this transcode needs AV1 encode").
//!
//! Capabilities say what a node *can* do, not what it has free: a GPU node whose NVENC sessions
//! are all in use keeps `nvenc`, and its score (the free NVENC term) keeps work away instead.

use serde::{Deserialize, Serialize};

use super::heartbeat::{Codec, Heartbeat};

/// One capability.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Capability {
    /// A GPU with video memory.
    Gpu,
    /// NVENC hardware encode sessions.
    Nvenc,
    /// H.264 encode.
    H264Encode,
    /// HEVC encode.
    HevcEncode,
    /// VP8 encode.
    Vp8Encode,
    /// VP9 encode.
    Vp9Encode,
    /// AV1 encode.
    Av1Encode,
}

impl Capability {
    /// Every capability, in bit order.
    pub const ALL: [Capability; 7] = [
        Capability::Gpu,
        Capability::Nvenc,
        Capability::H264Encode,
        Capability::HevcEncode,
        Capability::Vp8Encode,
        Capability::Vp9Encode,
        Capability::Av1Encode,
    ];

    const fn bit(self) -> u32 {
        1 << self as u32
    }

    /// The encode capability for a codec, if it has one.
    pub const fn encode(codec: Codec) -> Option<Capability> {
        match codec {
            Codec::H264 => Some(Capability::H264Encode),
            Codec::Hevc => Some(Capability::HevcEncode),
            Codec::Vp8 => Some(Capability::Vp8Encode),
            Codec::Vp9 => Some(Capability::Vp9Encode),
            Codec::Av1 => Some(Capability::Av1Encode),
            Codec::Other => None,
        }
    }
}

/// A set of capabilities. Serialised as a list of names (`["gpu", "av1_encode"]`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(from = "Vec<Capability>", into = "Vec<Capability>")]
pub struct CapabilitySet(u32);

impl CapabilitySet {
    /// No capability.
    pub const EMPTY: CapabilitySet = CapabilitySet(0);

    /// Whether `c` is in the set.
    pub const fn contains(self, c: Capability) -> bool {
        self.0 & c.bit() != 0
    }

    /// Whether every capability of `required` is in the set (the placement filter).
    pub const fn contains_all(self, required: CapabilitySet) -> bool {
        self.0 & required.0 == required.0
    }

    /// The set with `c` added.
    #[must_use]
    pub const fn with(self, c: Capability) -> CapabilitySet {
        CapabilitySet(self.0 | c.bit())
    }

    /// Both sets together.
    #[must_use]
    pub const fn union(self, other: CapabilitySet) -> CapabilitySet {
        CapabilitySet(self.0 | other.0)
    }

    /// This set less `other`.
    #[must_use]
    pub const fn difference(self, other: CapabilitySet) -> CapabilitySet {
        CapabilitySet(self.0 & !other.0)
    }

    /// The capabilities in the set, in [`Capability::ALL`] order.
    pub fn iter(self) -> impl Iterator<Item = Capability> {
        Capability::ALL
            .into_iter()
            .filter(move |c| self.contains(*c))
    }

    /// What a heartbeat shows: `gpu` when it reports VRAM, `nvenc` when it reports NVENC
    /// sessions, and one `*_encode` per codec in `encoders`.
    pub fn from_heartbeat(hb: &Heartbeat) -> CapabilitySet {
        let mut set = CapabilitySet::EMPTY;
        if let Some(g) = &hb.gpu {
            if g.vram_total_bytes > 0 {
                set = set.with(Capability::Gpu);
            }
            if g.nvenc_sessions_max > 0 {
                set = set.with(Capability::Nvenc);
            }
        }
        hb.encoders
            .iter()
            .filter_map(|c| Capability::encode(*c))
            .fold(set, CapabilitySet::with)
    }
}

impl FromIterator<Capability> for CapabilitySet {
    fn from_iter<I: IntoIterator<Item = Capability>>(iter: I) -> Self {
        iter.into_iter()
            .fold(CapabilitySet::EMPTY, CapabilitySet::with)
    }
}

impl From<Vec<Capability>> for CapabilitySet {
    fn from(v: Vec<Capability>) -> Self {
        v.into_iter().collect()
    }
}

impl From<CapabilitySet> for Vec<Capability> {
    fn from(s: CapabilitySet) -> Self {
        s.iter().collect()
    }
}

impl std::fmt::Debug for CapabilitySet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.iter()).finish()
    }
}

/// Per-node configuration that the heartbeat cannot tell: canary status and capability
/// overrides (an operator may withhold `av1_encode` from a node whose encoder is known bad, or
/// grant `h264_encode` to a node that reports no encoders).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct NodeConfig {
    /// A canary node gets the fixed canary weight whatever its score.
    pub canary: bool,
    /// Capabilities added to what the heartbeat shows.
    pub add_capabilities: CapabilitySet,
    /// Capabilities removed from what the heartbeat shows (applied after `add_capabilities`).
    pub remove_capabilities: CapabilitySet,
}

impl NodeConfig {
    /// The node's capabilities: `(heartbeat ∪ add) \ remove`.
    pub fn capabilities(&self, hb: Option<&Heartbeat>) -> CapabilitySet {
        hb.map(CapabilitySet::from_heartbeat)
            .unwrap_or_default()
            .union(self.add_capabilities)
            .difference(self.remove_capabilities)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scoring::heartbeat::GpuFigures;
    use ferry_proto::NodeId;

    fn hb(gpu: Option<GpuFigures>, encoders: Vec<Codec>) -> Heartbeat {
        Heartbeat {
            node: NodeId::new("n").unwrap(),
            cpu: 0.0,
            memory: 0.0,
            bandwidth_used_bps: 0,
            bandwidth_capacity_bps: 1,
            packet_loss: 0.0,
            sessions: 0,
            session_capacity: 1,
            sessions_to_move: 0,
            gpu,
            encoders,
        }
    }

    #[test]
    fn capabilities_come_from_the_heartbeat_and_config() {
        let gpu = GpuFigures {
            vram_free_bytes: 1,
            vram_total_bytes: 2,
            nvenc_sessions_free: 0,
            nvenc_sessions_max: 3,
        };
        let h = hb(Some(gpu), vec![Codec::H264, Codec::Av1, Codec::Other]);
        let caps = CapabilitySet::from_heartbeat(&h);
        assert_eq!(
            caps.iter().collect::<Vec<_>>(),
            [
                Capability::Gpu,
                Capability::Nvenc,
                Capability::H264Encode,
                Capability::Av1Encode
            ]
        );
        // A GPU without NVENC (H100/H200/A100 class) is `gpu` only.
        let no_nvenc = GpuFigures {
            nvenc_sessions_max: 0,
            ..gpu
        };
        let caps = CapabilitySet::from_heartbeat(&hb(Some(no_nvenc), vec![]));
        assert_eq!(caps, CapabilitySet::EMPTY.with(Capability::Gpu));

        let cfg = NodeConfig {
            canary: false,
            add_capabilities: [Capability::Vp8Encode].into_iter().collect(),
            remove_capabilities: [Capability::Av1Encode].into_iter().collect(),
        };
        let caps = cfg.capabilities(Some(&h));
        assert!(caps.contains(Capability::Vp8Encode));
        assert!(!caps.contains(Capability::Av1Encode));
        assert!(
            caps.contains_all(
                [Capability::Gpu, Capability::H264Encode]
                    .into_iter()
                    .collect()
            )
        );
        assert!(
            !caps.contains_all(
                [Capability::Gpu, Capability::Av1Encode]
                    .into_iter()
                    .collect()
            )
        );
        assert_eq!(
            cfg.capabilities(None),
            CapabilitySet::EMPTY.with(Capability::Vp8Encode)
        );
    }

    #[test]
    fn capability_sets_serialise_as_names() {
        let s: CapabilitySet = [Capability::Av1Encode, Capability::Gpu]
            .into_iter()
            .collect();
        let json = serde_json::to_string(&s).unwrap();
        assert_eq!(json, r#"["gpu","av1_encode"]"#);
        assert_eq!(serde_json::from_str::<CapabilitySet>(&json).unwrap(), s);
    }
}
