//! JSON types of the operator API (DESIGN §10) and of the node ↔ scheduler
//! heartbeat. Nodes and the scheduler share them here, so neither links the
//! other.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::{MigrationId, NodeId, SessionId, StreamId};

/// Reads an unsigned integer that JSON may spell `2967` or `2967.0`
/// (JSON Schema counts both as integers; serde's u64 takes only the first).
pub mod lenient {
    use serde::Deserializer;
    use serde::de::{Error, Visitor};

    /// Largest value [`u64`] takes: 2^53 − 1, the last integer every JSON
    /// reader holds exactly.
    pub const MAX_U64: u64 = (1 << 53) - 1;
    /// Largest value [`count`] takes.
    pub const MAX_COUNT: u64 = 1_000_000;
    /// Largest value [`seconds`] takes: one year.
    pub const MAX_SECONDS: u64 = 365 * 24 * 3600;

    struct Whole(u64);

    impl Visitor<'_> for Whole {
        type Value = u64;

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "an integer in [0, {}]", self.0)
        }

        fn visit_u64<E: Error>(self, v: u64) -> Result<u64, E> {
            if v <= self.0 {
                Ok(v)
            } else {
                Err(E::custom(format!("{v} is above {}", self.0)))
            }
        }

        fn visit_i64<E: Error>(self, v: i64) -> Result<u64, E> {
            u64::try_from(v)
                .map_err(|_| E::custom(format!("{v} is negative")))
                .and_then(|v| self.visit_u64(v))
        }

        fn visit_f64<E: Error>(self, v: f64) -> Result<u64, E> {
            // Only floats that are exact whole numbers below 2^53 (e.g. `2967.0`).
            if v.is_finite() && v >= 0.0 && v.fract() == 0.0 && v <= MAX_U64 as f64 {
                self.visit_u64(v as u64)
            } else {
                Err(E::custom(format!(
                    "{v} is not an integer in [0, {}]",
                    self.0
                )))
            }
        }
    }

    /// A `u64` up to [`MAX_U64`].
    pub fn u64<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        d.deserialize_any(Whole(MAX_U64))
    }

    /// A count (sessions, encoders) up to [`MAX_COUNT`].
    pub fn count<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
        d.deserialize_any(Whole(MAX_COUNT)).map(|v| v as u32)
    }

    /// A ticket generation (any `u32`).
    pub fn generation<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
        d.deserialize_any(Whole(u64::from(u32::MAX)))
            .map(|v| u32::try_from(v).unwrap_or(u32::MAX))
    }

    /// A number of seconds up to [`MAX_SECONDS`].
    pub fn seconds<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        d.deserialize_any(Whole(MAX_SECONDS))
    }

    /// An optional number of seconds (as [`seconds`]): `null` or absent is `None`.
    pub fn opt_seconds<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
        struct Opt;
        impl<'de> Visitor<'de> for Opt {
            type Value = Option<u64>;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "null or an integer in [0, {MAX_SECONDS}]")
            }

            fn visit_none<E: Error>(self) -> Result<Option<u64>, E> {
                Ok(None)
            }

            fn visit_unit<E: Error>(self) -> Result<Option<u64>, E> {
                Ok(None)
            }

            fn visit_some<D2: Deserializer<'de>>(self, d: D2) -> Result<Option<u64>, D2::Error> {
                seconds(d).map(Some)
            }
        }
        d.deserialize_option(Opt)
    }
}

#[cfg(feature = "openapi")]
use utoipa::ToSchema;

/// A node's lifecycle as the scheduler sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum NodeState {
    /// Takes new sessions.
    Active,
    /// Takes no new sessions; its sessions are being moved away.
    Draining,
    /// Drained: no sessions left, no placements.
    Drained,
    /// Missed its heartbeats.
    Down,
}

impl NodeState {
    /// The name the API uses (`active`, `draining`, `drained`, `down`).
    pub fn as_str(self) -> &'static str {
        match self {
            NodeState::Active => "active",
            NodeState::Draining => "draining",
            NodeState::Drained => "drained",
            NodeState::Down => "down",
        }
    }
}

/// Publish or view.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum SessionKind {
    /// WHIP.
    #[default]
    Publish,
    /// WHEP.
    View,
}

/// GPU figures of a node (from NVML, or from configuration).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct GpuFigures {
    /// Free video memory in bytes.
    #[serde(deserialize_with = "lenient::u64")]
    #[cfg_attr(feature = "openapi", schema(maximum = 9_007_199_254_740_991_u64))]
    pub vram_free_bytes: u64,
    /// Total video memory in bytes.
    #[serde(deserialize_with = "lenient::u64")]
    #[cfg_attr(feature = "openapi", schema(maximum = 9_007_199_254_740_991_u64))]
    pub vram_total_bytes: u64,
    /// NVENC sessions still available.
    #[serde(deserialize_with = "lenient::count")]
    #[cfg_attr(feature = "openapi", schema(maximum = 1_000_000))]
    pub nvenc_sessions_free: u32,
    /// NVENC sessions the GPU supports.
    #[serde(deserialize_with = "lenient::count")]
    #[cfg_attr(feature = "openapi", schema(maximum = 1_000_000))]
    pub nvenc_sessions_max: u32,
}

/// One session as a node reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct SessionReport {
    /// Session id.
    #[cfg_attr(feature = "openapi", schema(value_type = String, pattern = "^[A-Za-z0-9._-]{1,64}$"))]
    pub id: SessionId,
    /// Stream name.
    #[cfg_attr(feature = "openapi", schema(value_type = String, pattern = "^[A-Za-z0-9._~-]{1,64}$"))]
    pub stream: StreamId,
    /// Publish or view.
    pub kind: SessionKind,
    /// `new`, `connecting`, `connected`.
    pub state: String,
}

/// What a node sends `POST /v1/nodes/{id}/heartbeat` every second.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct Heartbeat {
    /// Base URL of the node's WHIP/WHEP API (`http://10.0.0.5:8081`).
    #[cfg_attr(feature = "openapi", schema(min_length = 1))]
    pub http: String,
    /// Media (UDP) address clients reach.
    #[serde(default)]
    pub media: String,
    /// Node-to-node UDP address (cascade relay, forwarding pointers, edge
    /// tunnels); empty when the node takes no part in a cluster.
    #[serde(default)]
    pub cluster: String,
    /// Migration transport (QUIC) address; empty when the node cannot migrate.
    #[serde(default)]
    pub migration: String,
    /// Zone (AZ or ISP line).
    #[serde(default)]
    pub zone: String,
    /// Physical host (anti-affinity).
    #[serde(default)]
    pub host: String,
    /// Region (data residency).
    #[serde(default)]
    pub region: String,
    /// Capability flags (`gpu`, `h264_encode`, `av1_encode`, ...).
    #[serde(default)]
    pub capabilities: Vec<String>,
    /// CPU use, 0..1 of the node's cores.
    #[cfg_attr(feature = "openapi", schema(minimum = 0.0, maximum = 1.0))]
    #[serde(default)]
    pub cpu: f64,
    /// Memory use, 0..1.
    #[cfg_attr(feature = "openapi", schema(minimum = 0.0, maximum = 1.0))]
    #[serde(default)]
    pub memory: f64,
    /// Bandwidth in use, bit/s.
    #[serde(default, deserialize_with = "lenient::u64")]
    #[cfg_attr(feature = "openapi", schema(maximum = 9_007_199_254_740_991_u64))]
    pub bandwidth_bps: u64,
    /// Bandwidth capacity, bit/s (0 = unknown).
    #[serde(default, deserialize_with = "lenient::u64")]
    #[cfg_attr(feature = "openapi", schema(maximum = 9_007_199_254_740_991_u64))]
    pub bandwidth_capacity_bps: u64,
    /// Packet loss seen, 0..1.
    #[cfg_attr(feature = "openapi", schema(minimum = 0.0, maximum = 1.0))]
    #[serde(default)]
    pub loss: f64,
    /// Sessions the node accepts at most.
    #[serde(default, deserialize_with = "lenient::u64")]
    #[cfg_attr(feature = "openapi", schema(maximum = 9_007_199_254_740_991_u64))]
    pub session_capacity: u64,
    /// Cores forwarding media (`--workers`; 0 = not reported).
    #[serde(default, deserialize_with = "lenient::u64")]
    #[cfg_attr(feature = "openapi", schema(maximum = 9_007_199_254_740_991_u64))]
    pub workers: u64,
    /// Its sessions now.
    #[serde(default)]
    pub sessions: Vec<SessionReport>,
    /// Its recordings (running, and the latest that ended).
    #[serde(default)]
    pub recordings: Vec<RecordingReport>,
    /// GPU figures, where the node has a GPU.
    #[serde(default)]
    pub gpu: Option<GpuFigures>,
    /// A canary node gets a small fixed weight.
    #[serde(default)]
    pub canary: bool,
    /// Streams relayed in, each with the node it comes from.
    #[serde(default)]
    pub relays: Vec<RelayReport>,
}

/// A stream a node relays in (`Heartbeat::relays`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct RelayReport {
    /// Stream name.
    pub stream: String,
    /// Cluster (UDP) address of the node it comes from: its origin, or a node the origin sent
    /// this one to (one level down the relay tree).
    pub from: String,
}

/// A node in `GET /v1/nodes`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct NodeView {
    /// Node id.
    #[cfg_attr(feature = "openapi", schema(value_type = String, pattern = "^[A-Za-z0-9._-]{1,64}$"))]
    pub id: NodeId,
    /// Lifecycle state.
    pub state: NodeState,
    /// Placement weight on the fixed scale [0, 1].
    pub weight: f64,
    /// Weight pinned by an operator (`PUT /v1/nodes/{id}/weight`), if any.
    pub weight_override: Option<f64>,
    /// Zone.
    pub zone: String,
    /// Host.
    pub host: String,
    /// Region.
    pub region: String,
    /// Capability flags.
    pub capabilities: Vec<String>,
    /// WHIP/WHEP base URL.
    pub http: String,
    /// Media address.
    pub media: String,
    /// Node-to-node UDP address (empty: none).
    pub cluster: String,
    /// Migration (QUIC) address (empty: none).
    pub migration: String,
    /// CPU use 0..1.
    pub cpu: f64,
    /// Memory use 0..1.
    pub memory: f64,
    /// Bandwidth in use, bit/s.
    pub bandwidth_bps: u64,
    /// Packet loss 0..1.
    pub loss: f64,
    /// Sessions on the node.
    pub sessions: u64,
    /// Session capacity.
    pub session_capacity: u64,
    /// Cores forwarding media (0 = not reported).
    pub workers: u64,
    /// GPU figures.
    pub gpu: Option<GpuFigures>,
    /// Milliseconds since its last heartbeat.
    pub last_heartbeat_ms: u64,
}

/// A session in `GET /v1/sessions`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct SessionView {
    /// Session id.
    #[cfg_attr(feature = "openapi", schema(value_type = String, pattern = "^[A-Za-z0-9._-]{1,64}$"))]
    pub id: SessionId,
    /// Stream name.
    #[cfg_attr(feature = "openapi", schema(value_type = String, pattern = "^[A-Za-z0-9._~-]{1,64}$"))]
    pub stream: StreamId,
    /// Publish or view.
    pub kind: SessionKind,
    /// The node it is on.
    #[cfg_attr(feature = "openapi", schema(value_type = String, pattern = "^[A-Za-z0-9._-]{1,64}$"))]
    pub node: NodeId,
    /// `new`, `connecting`, `connected`.
    pub state: String,
}

/// What a placement is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum PlacementKind {
    /// A publisher (WHIP).
    #[default]
    Publish,
    /// A viewer (WHEP).
    View,
    /// A transcode.
    Transcode,
}

/// Hard and soft constraints of a placement.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(default, deny_unknown_fields)]
pub struct Requirements {
    /// Capabilities the node must have (`gpu`, `av1_encode`, ...).
    pub capabilities: Vec<String>,
    /// Region the node must be in (data residency).
    pub region: Option<String>,
    /// Room whose other transcodes should be on other hosts (soft).
    pub room: Option<String>,
}

/// A recording as its node reports it (heartbeat) and `GET /v1/recordings` of the scheduler
/// lists it.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct RecordingReport {
    /// Recording id.
    pub id: String,
    /// The stream it records.
    pub stream: String,
    /// Where it is stored (directory or `s3://bucket/prefix`).
    pub target: String,
    /// `recording`, `stopped` or `moved`.
    pub state: String,
    /// Media segments stored.
    #[serde(default, deserialize_with = "lenient::u64")]
    #[cfg_attr(feature = "openapi", schema(maximum = 9_007_199_254_740_991_u64))]
    pub segments: u64,
    /// Bytes stored.
    #[serde(default, deserialize_with = "lenient::u64")]
    #[cfg_attr(feature = "openapi", schema(maximum = 9_007_199_254_740_991_u64))]
    pub bytes: u64,
    /// The node that runs it (set by the scheduler; empty in a heartbeat).
    #[serde(default)]
    pub node: String,
    /// Times the scheduler moved it to another node (a drain).
    #[serde(default, deserialize_with = "lenient::count")]
    #[cfg_attr(feature = "openapi", schema(minimum = 0, maximum = 1_000_000))]
    pub moves: u32,
    /// Times the scheduler resumed it on another node after its node died.
    #[serde(default, deserialize_with = "lenient::count")]
    #[cfg_attr(feature = "openapi", schema(minimum = 0, maximum = 1_000_000))]
    pub resumes: u32,
    /// Why its last move or resumption failed, if one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// `POST /v1/recordings` (scheduler and node).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct RecordingRequest {
    /// The stream to record.
    #[cfg_attr(feature = "openapi", schema(pattern = "^[A-Za-z0-9._~-]{1,64}$"))]
    pub stream: String,
    /// Where to store it: a directory, `file:///dir` or `s3://bucket/prefix` (default: the
    /// node's recordings directory).
    #[serde(default)]
    // The pattern is RECORDING_TARGET_PATTERN (utoipa takes a literal; the scheduler's API test
    // checks that the document says the same).
    #[cfg_attr(
        feature = "openapi",
        schema(
            min_length = 1,
            max_length = 1024,
            pattern = r"^(?:file:///[^\x00-\x1f\x7f-\x9f]*|s3://[^/\x00-\x1f\x7f-\x9f][^\x00-\x1f\x7f-\x9f]*|(?:[^:\x00-\x1f\x7f-\x9f]|:+(?:/:+)*(?:[^:/\x00-\x1f\x7f-\x9f]|/[^:/\x00-\x1f\x7f-\x9f]|/?$))+)$"
        )
    )]
    pub target: Option<String>,
    /// The node to record on (default: where the stream is published). The stream is relayed
    /// there; the recording still moves when that node drains and resumes elsewhere when it
    /// dies.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>, pattern = "^[A-Za-z0-9._-]{1,64}$"))]
    pub node: Option<NodeId>,
}

/// Longest recording target accepted.
pub const MAX_RECORDING_TARGET: usize = 1024;

/// What [`check_recording_target`] accepts, as the OpenAPI document says it (ECMA-262): no
/// control character; `file:///…`, `s3://bucket…`, or no `://` at all (a directory).
pub const RECORDING_TARGET_PATTERN: &str = r"^(?:file:///[^\x00-\x1f\x7f-\x9f]*|s3://[^/\x00-\x1f\x7f-\x9f][^\x00-\x1f\x7f-\x9f]*|(?:[^:\x00-\x1f\x7f-\x9f]|:+(?:/:+)*(?:[^:/\x00-\x1f\x7f-\x9f]|/[^:/\x00-\x1f\x7f-\x9f]|/?$))+)$";

/// Checks a recording target's form: a directory, `file:///dir` or `s3://bucket/prefix` (the
/// store checks the rest when it opens it).
pub fn check_recording_target(t: &str) -> Result<(), TargetError> {
    if t.is_empty() {
        return Err(TargetError::Empty);
    }
    if t.len() > MAX_RECORDING_TARGET {
        return Err(TargetError::TooLong);
    }
    if t.chars().any(char::is_control) {
        return Err(TargetError::ControlCharacter);
    }
    match t.split_once("://") {
        None => Ok(()),
        Some(("file", path)) if path.starts_with('/') => Ok(()),
        Some(("file", _)) => Err(TargetError::RelativeFile),
        Some(("s3", rest)) => match rest.split_once('/').map_or(rest, |(b, _)| b) {
            "" => Err(TargetError::NoBucket),
            _ => Ok(()),
        },
        Some((scheme, _)) => Err(TargetError::Scheme(scheme.to_owned())),
    }
}

/// Why a recording target is refused (a 400 with this reason).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TargetError {
    /// An empty string.
    #[error("target is empty")]
    Empty,
    /// Longer than [`MAX_RECORDING_TARGET`].
    #[error("target is longer than {MAX_RECORDING_TARGET} bytes")]
    TooLong,
    /// A control character anywhere.
    #[error("target holds a control character")]
    ControlCharacter,
    /// `file://` without an absolute path.
    #[error("a file:// target needs an absolute path (file:///dir)")]
    RelativeFile,
    /// `s3://` without a bucket.
    #[error("an s3:// target needs a bucket (s3://bucket/prefix)")]
    NoBucket,
    /// Another scheme.
    #[error("unsupported target scheme {0:?}: use a directory, file:///dir or s3://bucket/prefix")]
    Scheme(String),
}

/// `POST /v1/transcodes` (scheduler and node): make `ladder`'s rungs of `stream`, each
/// published as `{stream}~{rung}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct TranscodeRequest {
    /// The source stream.
    #[cfg_attr(feature = "openapi", schema(pattern = "^[A-Za-z0-9._-]{1,64}$"))]
    pub stream: String,
    /// Rungs by height, each at most once.
    #[cfg_attr(
        feature = "openapi",
        schema(value_type = std::collections::BTreeSet<RungName>, min_items = 1, max_items = 6)
    )]
    pub ladder: Vec<RungName>,
    /// The node to run on (default: placed by the GPU-aware score).
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>, pattern = "^[A-Za-z0-9._-]{1,64}$"))]
    pub node: Option<NodeId>,
    /// Its id (default: one is given; `409` where a transcode has it already).
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>, pattern = "^[A-Za-z0-9._-]{1,64}$"))]
    pub id: Option<String>,
}

/// A rung of a transcode's ladder, by its height.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub enum RungName {
    /// 1920×1080.
    #[serde(rename = "1080p")]
    P1080,
    /// 1280×720.
    #[serde(rename = "720p")]
    P720,
    /// 854×480.
    #[serde(rename = "480p")]
    P480,
    /// 640×360.
    #[serde(rename = "360p")]
    P360,
    /// 426×240.
    #[serde(rename = "240p")]
    P240,
    /// 320×180.
    #[serde(rename = "180p")]
    P180,
}

impl RungName {
    /// Every rung, highest first.
    pub const ALL: [RungName; 6] = [
        RungName::P1080,
        RungName::P720,
        RungName::P480,
        RungName::P360,
        RungName::P240,
        RungName::P180,
    ];

    /// `360p`.
    pub fn as_str(self) -> &'static str {
        match self {
            RungName::P1080 => "1080p",
            RungName::P720 => "720p",
            RungName::P480 => "480p",
            RungName::P360 => "360p",
            RungName::P240 => "240p",
            RungName::P180 => "180p",
        }
    }

    /// Its picture height.
    pub fn height(self) -> u16 {
        match self {
            RungName::P1080 => 1080,
            RungName::P720 => 720,
            RungName::P480 => 480,
            RungName::P360 => 360,
            RungName::P240 => 240,
            RungName::P180 => 180,
        }
    }
}

/// One rung of a transcode as its node reports it.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct TranscodeRungView {
    /// `360p`.
    pub name: String,
    /// The stream it is published as (`{stream}~360p`).
    pub stream: String,
    /// Frames published.
    #[serde(default)]
    pub frames: u64,
    /// Keyframes among them.
    #[serde(default)]
    pub keyframes: u64,
    /// Media seconds published.
    #[serde(default)]
    pub media_s: f64,
    /// CPU seconds its encoder process used.
    #[serde(default)]
    pub cpu_s: f64,
    /// Media seconds published per wall second (1.0 keeps up with a live source).
    #[serde(default)]
    pub realtime_factor: f64,
    /// Why it stopped, if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// `POST /v1/transcodes` on a node (the scheduler's call; an operator may make it too): a
/// [`TranscodeRequest`] without a node, with the rungs' session tickets when the transcode moves
/// here from another node (its rungs' sessions are resumed, not made anew).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeTranscodeRequest {
    /// The source stream.
    pub stream: String,
    /// Rungs by height, each at most once.
    pub ladder: Vec<RungName>,
    /// Its id (default: one is given).
    #[serde(default)]
    pub id: Option<String>,
    /// Rung (`360p`) → the ticket of the session that publishes it (from the node it leaves,
    /// [`TranscodeHandover`]).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub tickets: std::collections::BTreeMap<String, String>,
    /// Where it is refused (`"node"` is the scheduler's).
    #[serde(default, skip_serializing)]
    pub node: Option<String>,
}

/// `POST /v1/transcodes/{id}/handover` on a node: the tickets of the transcode's rungs'
/// sessions, for the node it moves to. The worker keeps running until `DELETE`, which then
/// detaches the rungs' sessions instead of ending them.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct TranscodeHandover {
    /// Rung (`360p`) → its session's current ticket.
    pub tickets: std::collections::BTreeMap<String, String>,
}

/// A transcode in `GET /v1/transcodes`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct TranscodeView {
    /// Its id.
    pub id: String,
    /// The source stream.
    pub stream: String,
    /// Where it runs.
    #[serde(default)]
    pub node: String,
    /// `starting`, `running`, `moving`, `stopped`, `failed`.
    pub state: String,
    /// The encoder: `h264_nvenc` or `libx264`.
    #[serde(default)]
    pub encoder: String,
    /// Why the encoder is not the node's first choice (no NVENC reachable), if it is not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encoder_note: Option<String>,
    /// Source frames taken.
    #[serde(default)]
    pub frames_in: u64,
    /// Its rungs.
    #[serde(default)]
    pub rungs: Vec<TranscodeRungView>,
    /// Times the scheduler moved it to another node.
    #[serde(default, deserialize_with = "lenient::count")]
    #[cfg_attr(feature = "openapi", schema(minimum = 0, maximum = 1_000_000))]
    pub moves: u32,
    /// Why it failed, if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A stream in `GET /v1/streams`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct StreamView {
    /// Stream name.
    pub stream: String,
    /// The publisher's node, if it has one.
    pub origin: Option<String>,
    /// Viewers in all.
    #[cfg_attr(feature = "openapi", schema(maximum = 9_007_199_254_740_991_u64))]
    pub viewers: u64,
    /// Viewers per node.
    pub viewers_by_node: std::collections::BTreeMap<String, u64>,
    /// Hot: its origin serves as many viewers as `--hot-stream-viewers` allows, further ones
    /// go to other nodes (relayed from the origin).
    pub hot: bool,
    /// The relay tree: each node the stream is relayed to, and the node it gets it from (the
    /// origin, or one of the origin's subscribers past `--relay-fanout`).
    #[serde(default)]
    pub relayed_from: std::collections::BTreeMap<String, String>,
}

/// `POST /v1/turn/credentials`: TURN relays for a user.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct TurnCredentialsRequest {
    /// Who the relays are for (the key of the consistent hashing: the same user gets the same
    /// relays); no `:`.
    #[cfg_attr(
        feature = "openapi",
        schema(min_length = 1, max_length = 128, pattern = "^[^:]+$")
    )]
    pub user: String,
    /// The stream the user publishes or plays (an access token is checked against it).
    #[serde(default)]
    pub stream: Option<String>,
    /// The user's zone: relays there first.
    #[serde(default)]
    pub zone: Option<String>,
    /// The user's ISP line: only relays on it.
    #[serde(default)]
    pub isp: Option<String>,
    /// `v4` or `v6`: only relays reachable over that family.
    #[serde(default)]
    pub family: Option<String>,
}

/// One relay, shaped like `RTCIceServer`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct IceServerEntry {
    /// `turn:host:port?transport=udp`.
    pub urls: Vec<String>,
    /// `"{expiry}:{user}"`.
    pub username: String,
    /// HMAC-SHA1 of the username under the fleet's secret (coturn `use-auth-secret`).
    pub credential: String,
}

/// Answer to `POST /v1/turn/credentials`: the primary relay first, then its backups.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct TurnCredentialsResponse {
    /// `RTCConfiguration.iceServers`.
    pub ice_servers: Vec<IceServerEntry>,
    /// Seconds the credential stays valid.
    pub ttl: u64,
}

/// A TURN relay's drain (`POST /v1/turn/relays/{id}/drain`): it gets no new users, clients on
/// it are told to move (an ICE restart onto a backup relay), and it is drained once it holds no
/// allocations or the deadline passes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct TurnDrain {
    /// When it started, Unix ms.
    #[cfg_attr(feature = "openapi", schema(maximum = 9_007_199_254_740_991_u64))]
    pub since_unix_ms: u64,
    /// When it ends at the latest, Unix ms.
    #[cfg_attr(feature = "openapi", schema(maximum = 9_007_199_254_740_991_u64))]
    pub deadline_unix_ms: u64,
    /// When it ended, Unix ms (`None`: still draining).
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(maximum = 9_007_199_254_740_991_u64))]
    pub done_unix_ms: Option<u64>,
    /// Why it ended: `empty` (no allocations left) or `deadline`.
    #[serde(default)]
    pub done_reason: Option<String>,
}

/// `POST /v1/turn/relays/{id}/drain` (body optional).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct TurnDrainRequest {
    /// Seconds until the relay counts as drained even with allocations left (default 600).
    #[serde(default, deserialize_with = "lenient::opt_seconds")]
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 86_400))]
    pub deadline_s: Option<u64>,
}

/// `POST /v1/turn/relays`: a relay joins the fleet.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct TurnRelayRequest {
    /// `turn:host:port[?transport=udp|tcp][;zone=Z][;isp=I][;weight=W]` (or `turns:`), as in
    /// `FERRY_TURN_URIS`.
    #[cfg_attr(
        feature = "openapi",
        schema(min_length = 6, max_length = 512, pattern = "^turns?:[^\\s,]+$")
    )]
    pub uri: String,
}

/// A TURN relay in `GET /v1/turn/relays`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct TurnRelayView {
    /// Relay id (its URI with `:`/`?`/`=` replaced).
    pub id: String,
    /// `turn:host:port?transport=udp`.
    pub uri: String,
    /// Zone.
    pub zone: String,
    /// ISP line.
    pub isp: String,
    /// Share of the users, relative to the others.
    pub weight: f64,
    /// `active`, `draining`, `drained` or `down` (failing its STUN probes).
    pub state: String,
    /// Users whose live credential names it as primary (as this replica counts them).
    #[cfg_attr(feature = "openapi", schema(maximum = 9_007_199_254_740_991_u64))]
    pub allocations: u64,
    /// Its drain, if one was started.
    pub drain: Option<TurnDrain>,
}

/// `POST /v1/placements`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct PlacementRequest {
    /// Stream or room key.
    #[cfg_attr(feature = "openapi", schema(min_length = 1, max_length = 256))]
    pub key: String,
    /// What is placed.
    #[serde(default)]
    pub kind: PlacementKind,
    /// Constraints.
    #[serde(default)]
    pub requirements: Requirements,
}

/// Answer to `POST /v1/placements`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct PlacementResponse {
    /// The chosen node.
    #[cfg_attr(feature = "openapi", schema(value_type = String, pattern = "^[A-Za-z0-9._-]{1,64}$"))]
    pub node: NodeId,
    /// Where to go if it fails, in order.
    #[cfg_attr(feature = "openapi", schema(value_type = Vec<String>))]
    pub backups: Vec<NodeId>,
    /// Routing-table version the decision was made at.
    pub routing_version: u64,
    /// The node's WHIP/WHEP base URL.
    pub http: String,
}

/// `PUT /v1/nodes/{id}/weight`: pin a weight, or `null` to follow the score again.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct WeightUpdate {
    /// Weight on the fixed scale [0, 1], or null.
    #[cfg_attr(feature = "openapi", schema(minimum = 0.0, maximum = 1.0))]
    pub weight: Option<f64>,
}

/// `POST /v1/nodes/{id}/reclaim-notice`: the node (a spot instance) goes away.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ReclaimNotice {
    /// Seconds until the node is reclaimed (at most a year).
    #[serde(deserialize_with = "lenient::seconds")]
    #[cfg_attr(feature = "openapi", schema(maximum = 31_536_000))]
    pub deadline_s: u64,
}

/// How a migrated session's client is moved (DESIGN §4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(rename_all = "kebab-case")]
pub enum CutoverMode {
    /// The edge flips its routing entry.
    #[default]
    Edge,
    /// The client restarts ICE towards the target.
    IceRestart,
    /// The client reconnects with a ticket.
    Reconnect,
}

/// `POST /v1/migrations`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct MigrationRequest {
    /// The session to move.
    #[cfg_attr(feature = "openapi", schema(value_type = String, pattern = "^[A-Za-z0-9._-]{1,64}$"))]
    pub session: SessionId,
    /// Target node (default: chosen by placement).
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>, pattern = "^[A-Za-z0-9._-]{1,64}$"))]
    pub target: Option<NodeId>,
    /// Cutover mode.
    #[serde(default)]
    pub mode: CutoverMode,
}

/// Where a migration is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum MigrationState {
    /// Accepted, not started.
    Planned,
    /// Snapshot/WAL/cutover under way.
    Running,
    /// Done: the target owns the session.
    Committed,
    /// Undone: the source owns the session again.
    RolledBack,
    /// Could not be carried out.
    Failed,
}

/// `GET /v1/migrations/{id}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct MigrationView {
    /// Migration id.
    #[cfg_attr(feature = "openapi", schema(value_type = String, pattern = "^[A-Za-z0-9._-]{1,64}$"))]
    pub id: MigrationId,
    /// The session.
    #[cfg_attr(feature = "openapi", schema(value_type = String, pattern = "^[A-Za-z0-9._-]{1,64}$"))]
    pub session: SessionId,
    /// Where it was.
    #[cfg_attr(feature = "openapi", schema(value_type = String, pattern = "^[A-Za-z0-9._-]{1,64}$"))]
    pub source: NodeId,
    /// Where it goes.
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>, pattern = "^[A-Za-z0-9._-]{1,64}$"))]
    pub target: Option<NodeId>,
    /// Cutover mode.
    pub mode: CutoverMode,
    /// State.
    pub state: MigrationState,
    /// Duration of each finished phase, in ms.
    pub phases_ms: BTreeMap<String, u64>,
    /// Media blackout beyond the normal packet gap, in ms.
    pub blackout_ms: Option<f64>,
    /// Snapshot + WAL bytes moved.
    pub bytes: u64,
    /// Why it failed or rolled back.
    pub error: Option<String>,
}

/// `POST /v1/migrations` answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct MigrationAccepted {
    /// Migration id.
    #[cfg_attr(feature = "openapi", schema(value_type = String, pattern = "^[A-Za-z0-9._-]{1,64}$"))]
    pub id: MigrationId,
}

/// Progress of a drain (`POST /v1/nodes/{id}/drain` answers it, `GET` shows it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct DrainStatus {
    /// The node.
    #[cfg_attr(feature = "openapi", schema(value_type = String, pattern = "^[A-Za-z0-9._-]{1,64}$"))]
    pub node: NodeId,
    /// Its state.
    pub state: NodeState,
    /// Sessions still on it.
    pub sessions_left: u64,
    /// Migrations started by the drain.
    pub migrations_started: u64,
    /// Of those, committed.
    pub migrations_committed: u64,
    /// Of those, failed or rolled back.
    pub migrations_failed: u64,
}

/// A node in the routing table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct RouteNode {
    /// Node id.
    #[cfg_attr(feature = "openapi", schema(value_type = String, pattern = "^[A-Za-z0-9._-]{1,64}$"))]
    pub id: NodeId,
    /// State.
    pub state: NodeState,
    /// Weight.
    pub weight: f64,
    /// Zone.
    pub zone: String,
    /// WHIP/WHEP base URL.
    pub http: String,
    /// Media address.
    pub media: String,
    /// Node-to-node UDP address (empty: none).
    #[serde(default)]
    pub cluster: String,
    /// Migration (QUIC) address (empty: none).
    #[serde(default)]
    pub migration: String,
}

/// Which node owns a session, at which fencing epoch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct RouteEntry {
    /// Session id.
    #[cfg_attr(feature = "openapi", schema(value_type = String, pattern = "^[A-Za-z0-9._-]{1,64}$"))]
    pub session: SessionId,
    /// Stream name.
    #[cfg_attr(feature = "openapi", schema(value_type = String, pattern = "^[A-Za-z0-9._~-]{1,64}$"))]
    pub stream: StreamId,
    /// Owning node.
    #[cfg_attr(feature = "openapi", schema(value_type = String, pattern = "^[A-Za-z0-9._-]{1,64}$"))]
    pub node: NodeId,
    /// Ownership epoch (raised by each migration cutover).
    pub epoch: u64,
    /// Publish or view (a stream's publisher is where relays start).
    #[serde(default)]
    pub kind: SessionKind,
}

/// `GET /v1/routing`: versioned; watchers long-poll with `?since=VERSION`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct RoutingTable {
    /// Version; every change raises it.
    pub version: u64,
    /// Nodes.
    pub nodes: Vec<RouteNode>,
    /// Session owners.
    pub sessions: Vec<RouteEntry>,
}

/// JSON error body of the API.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct ApiError {
    /// What went wrong, for a human.
    pub error: String,
}

/// What a session ticket asserts (DESIGN §6): the cluster's signature over these claims lets a
/// client resume the session's identity on any node, once per generation. Wire form:
/// `base64url("ferry-ticket 2\0" ‖ JSON(claims) ‖ HMAC-SHA256-128(cluster key))`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TicketClaims {
    /// Session id.
    pub sid: SessionId,
    /// Stream.
    pub stream: StreamId,
    /// Publish or view.
    pub kind: SessionKind,
    /// Node that issued it (where the session was).
    pub node: NodeId,
    /// The session's ticket generation: using a ticket consumes its generation.
    pub r#gen: u32,
    /// Expiry, Unix seconds.
    pub exp: u64,
}

/// Prefix of a ticket's signed body.
pub const TICKET_PREFIX: &[u8] = b"ferry-ticket 2\0";

/// `POST /v1/tickets/consume` (nodes, with the cluster token): a node is about to resume a
/// session with a ticket of `generation`; the scheduler answers 200 the first time and 409 for
/// any later use of that generation (or an older one) of the session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct TicketUse {
    /// Session id.
    #[cfg_attr(feature = "openapi", schema(value_type = String, pattern = "^[A-Za-z0-9._-]{1,64}$"))]
    pub session: SessionId,
    /// The ticket's generation.
    #[serde(deserialize_with = "lenient::generation")]
    #[cfg_attr(feature = "openapi", schema(value_type = i64, minimum = 0, maximum = 4_294_967_295_i64))]
    pub generation: u32,
    /// The ticket's expiry (Unix seconds): the record is kept until then.
    #[serde(deserialize_with = "lenient::u64")]
    #[cfg_attr(feature = "openapi", schema(maximum = 9_007_199_254_740_991_u64))]
    pub expires: u64,
}

#[cfg(test)]
mod tests {
    use super::check_recording_target;

    #[test]
    fn recording_targets() {
        for ok in [
            "/var/lib/ferry/rec",
            "rec/r1",
            "file:///tmp/r",
            "s3://bucket",
            "s3://bucket/a/b",
        ] {
            assert_eq!(check_recording_target(ok), Ok(()), "{ok}");
        }
        for bad in [
            "",
            "http://x/y",
            "s3://",
            "s3:///prefix",
            "file://relative",
            "a\nb",
        ] {
            assert!(check_recording_target(bad).is_err(), "{bad:?}");
        }
        assert!(check_recording_target(&"x".repeat(1025)).is_err());
    }

    proptest::proptest! {
        /// The pattern the OpenAPI document gives is what the check accepts.
        #[test]
        fn the_recording_target_pattern_is_the_check(t in "[as3file:/ \\x01\\x85é]{0,12}") {
            let re = regex::Regex::new(super::RECORDING_TARGET_PATTERN).unwrap();
            proptest::prop_assert_eq!(re.is_match(&t), check_recording_target(&t).is_ok(), "{:?}", t);
        }
    }
}
