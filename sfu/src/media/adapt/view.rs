//! What `GET /v1/sessions/{id}` shows of a session's adaptation: a viewer's estimate, what
//! limits it, what it was allocated, the layers its tracks could play and play, its probes,
//! and the recent history of its estimate (the demo page plots it).

use serde::Serialize;

use crate::node::signal::SessionInfo;

/// One session as the node sees it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SessionView {
    /// What `GET /v1/sessions` lists.
    #[serde(flatten)]
    pub info: SessionInfo,
    /// A viewer's adaptation (`None` for a publisher).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub adaptation: Option<AdaptationView>,
    /// The offer's live m-lines the node did not accept, and why.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub rejected: Vec<RejectedLineView>,
}

/// An m-line of the offer the node did not accept.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RejectedLineView {
    /// Its `a=mid`.
    pub mid: String,
    /// Why.
    pub reason: String,
}

/// A viewer's adaptation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AdaptationView {
    /// What the estimate comes from: `transport-cc`, `remb` or `none` (the viewer gets every
    /// layer's top).
    pub feedback: &'static str,
    /// The bandwidth estimate (bit/s).
    pub estimate_bps: Option<u64>,
    /// What limits it: `normal`, `overusing`, `underusing`, `loss-limited`.
    pub congestion: Option<&'static str>,
    /// What the viewer's feedback says arrived lately (bit/s).
    pub acked_bps: Option<u64>,
    /// The loss its feedback reports (0–1).
    pub loss: Option<f64>,
    /// What the chosen layers carry (bit/s).
    pub allocated_bps: u64,
    /// What a step up would take, when one is wanted (bit/s).
    pub wanted_bps: Option<u64>,
    /// Transport-wide CC feedback messages received.
    pub feedbacks: u64,
    /// Padding packets sent to probe, and their bytes.
    pub probe_packets: u64,
    /// Bytes of those.
    pub probe_bytes: u64,
    /// The round-trip time its receiver reports give (ms), smoothed.
    pub rtt_ms: Option<u64>,
    /// NACKed packets not resent because its retransmissions of the last second had reached
    /// its estimate ([`crate::media::adapt::resend`]).
    pub resends_over_budget: u64,
    /// What the viewer asked for (its caps).
    pub preferences: crate::media::adapt::prefs::Preferences,
    /// Per track.
    pub tracks: Vec<TrackView>,
    /// The last minute: `[ms ago, estimate, allocated]` every half second, oldest first.
    pub history: Vec<[u64; 3]>,
}

/// One track of a viewer.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TrackView {
    /// Its `mid`.
    pub mid: String,
    /// `audio` or `video`.
    pub kind: &'static str,
    /// The source's live layers, lowest first.
    pub layers: Vec<LayerView>,
    /// The layer (index into `layers`) it switches to or plays.
    pub target: Option<usize>,
    /// The layer (index into `layers`) it plays now.
    pub playing: Option<usize>,
    /// The highest temporal layer it is to get (`None`: all): what the allocator chose, or
    /// the viewer's frame-rate cap where lower.
    pub temporal_target: Option<u8>,
    /// The highest temporal layer it gets now (`None`: the source has none, or not known yet).
    pub temporal_playing: Option<u8>,
}

/// One layer of a source track.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LayerView {
    /// Its SSRC.
    pub ssrc: u32,
    /// What it carries (bit/s).
    pub bitrate_bps: u64,
    /// What it carries up to each of its temporal layers (bit/s; empty without them).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub temporal_bps: Vec<u64>,
    /// Its picture width, once a keyframe of it said.
    pub width: Option<u16>,
    /// Its picture height.
    pub height: Option<u16>,
}
