//! What a node reports in every heartbeat. It travels to the scheduler as JSON.
//!
//! Unknown fields are ignored and the newer fields default, so a scheduler reads heartbeats from
//! nodes one version older or newer during a rolling upgrade.

use ferry_proto::NodeId;
use serde::{Deserialize, Serialize};

/// One node's figures at one moment.
///
/// Ratios (`cpu`, `memory`, `packet_loss`) are fractions in `0..=1`; values outside are clamped
/// when scored, never rejected, so a node that reports 1.02 CPU (rounding in its sampler) is just
/// full.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Heartbeat {
    /// The reporting node.
    pub node: NodeId,
    /// CPU utilisation of the whole machine, `0..=1`.
    pub cpu: f64,
    /// Memory in use, `0..=1`.
    pub memory: f64,
    /// Network bandwidth in use, bit/s (the larger of in and out).
    pub bandwidth_used_bps: u64,
    /// Network bandwidth the node may use, bit/s. 0 counts as full.
    pub bandwidth_capacity_bps: u64,
    /// Fraction of media packets lost on the node's links, `0..=1` (from RTCP receiver reports).
    pub packet_loss: f64,
    /// Sessions the node holds now.
    pub sessions: u32,
    /// Sessions the node is configured to hold. 0 counts as full.
    pub session_capacity: u32,
    /// Sessions on this node that are migrating in or out, or planned to move (drain,
    /// rebalance). This is the node's migration cost: placing more work on a node that is busy
    /// moving sessions makes those moves slower and the new work likely to move again.
    #[serde(default)]
    pub sessions_to_move: u32,
    /// GPU figures summed over the node's devices; `None` on a node without a GPU.
    #[serde(default)]
    pub gpu: Option<GpuFigures>,
    /// Codecs the node can encode (hardware or software), for placement filters.
    #[serde(default)]
    pub encoders: Vec<Codec>,
}

/// GPU figures of one node (summed over its devices, see [`super::aggregate`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct GpuFigures {
    /// Unallocated video memory, bytes.
    pub vram_free_bytes: u64,
    /// Installed video memory, bytes. 0 means no usable GPU.
    pub vram_total_bytes: u64,
    /// NVENC sessions that can still be opened.
    pub nvenc_sessions_free: u32,
    /// NVENC sessions the node's GPUs allow in all. 0 means no NVENC.
    pub nvenc_sessions_max: u32,
}

/// A video codec a node can encode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum Codec {
    /// H.264 / AVC.
    H264,
    /// H.265 / HEVC.
    Hevc,
    /// VP8.
    Vp8,
    /// VP9.
    Vp9,
    /// AV1.
    Av1,
    /// A codec this scheduler version does not know (sent by a newer node); ignored.
    #[serde(other)]
    Other,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heartbeat_json_defaults_new_fields_and_ignores_unknown_ones() {
        let json = r#"{
            "node": "node-a", "cpu": 0.5, "memory": 0.25,
            "bandwidth_used_bps": 100, "bandwidth_capacity_bps": 1000,
            "packet_loss": 0.0, "sessions": 3, "session_capacity": 10,
            "encoders": ["h264", "av1", "h266"],
            "from_the_future": {"x": 1}
        }"#;
        let hb: Heartbeat = serde_json::from_str(json).unwrap();
        assert_eq!(hb.node.as_str(), "node-a");
        assert_eq!(hb.sessions_to_move, 0);
        assert_eq!(hb.gpu, None);
        assert_eq!(hb.encoders, vec![Codec::H264, Codec::Av1, Codec::Other]);
        let back: Heartbeat = serde_json::from_str(&serde_json::to_string(&hb).unwrap()).unwrap();
        assert_eq!(back, hb);
    }

    #[test]
    fn heartbeat_with_a_bad_node_id_is_rejected() {
        let json = r#"{"node": "a b", "cpu": 0, "memory": 0, "bandwidth_used_bps": 0,
            "bandwidth_capacity_bps": 0, "packet_loss": 0, "sessions": 0, "session_capacity": 0}"#;
        assert!(serde_json::from_str::<Heartbeat>(json).is_err());
    }
}
