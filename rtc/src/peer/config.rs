//! What a [`super::Peer`] is configured with: its role, where its media comes from, and the
//! synthetic media's pacing.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::codec::Codec;
use crate::time::WallClock;

/// What the peer does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerRole {
    /// Sends media (WHIP). `video` is `Vp8` or `H264`; `Opus` means no video track.
    Publisher {
        /// Video codec.
        video: Codec,
        /// Whether an Opus track is sent too.
        audio: bool,
    },
    /// Receives audio and video (WHEP), offering Opus, VP8 and H.264.
    Viewer,
}

/// Where a peer's media comes from (publisher) and goes to (viewer).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MediaSource {
    /// Stamped synthetic frames on a fixed schedule; a viewer measures what arrives
    /// (latency, completeness, the sender-report mapping) and keeps no media.
    #[default]
    Synthetic,
    /// Real encoded frames from the application: a publisher sends what
    /// [`super::Peer::send_frame`] is given and nothing else; a viewer rebuilds the frames it
    /// receives for [`super::Peer::poll_frame`].
    External,
}

/// How a peer behaves. Every field is public; [`PeerConfig::new`] fills sensible defaults.
#[derive(Debug, Clone, Copy)]
pub struct PeerConfig {
    /// Publisher or viewer.
    pub role: PeerRole,
    /// Synthetic or the application's media.
    pub media: MediaSource,
    /// All randomness: ICE credentials, SSRCs, sequence and timestamp bases, DTLS.
    pub seed: u64,
    /// Instant ↔ wall time, for NTP timestamps and abs-send-time.
    pub wall: WallClock,
    /// Where our datagrams come from.
    pub local_addr: SocketAddr,
    /// Offer RTX.
    pub rtx: bool,
    /// Synthetic video frame rate.
    pub video_fps: u32,
    /// Synthetic target video bitrate (keyframes included).
    pub video_bitrate_bps: u32,
    /// Synthetic periodic keyframe interval.
    pub keyframe_interval: Duration,
    /// Payload stamps count µs from this instant.
    pub latency_epoch: Instant,
    /// Publish the synthetic video as simulcast, one stream per layer, instead of one stream at
    /// `video_bitrate_bps`. Ignored with [`MediaSource::External`] media and without video; a
    /// config with no layers is no simulcast.
    pub simulcast: Option<SimulcastConfig>,
    /// A viewer's offer (or its answer to an offer) has transport-wide CC and it sends the
    /// feedback, as browsers do; off, it has neither (a REMB-only client, or a benchmark's
    /// baseline of a node that stamps nothing and estimates nothing for it).
    pub transport_cc: bool,
}

impl PeerConfig {
    /// How often [`PeerConfig::new`]'s publisher sends a keyframe.
    pub const KEYFRAME_INTERVAL: Duration = Duration::from_secs(2);

    /// Synthetic media at 30 fps, 1 Mbit/s, a keyframe every 2 s, RTX on; `wall` and
    /// `latency_epoch` pinned at `now` (Unix time 1.7e9 s there), so peers made with the same
    /// `now` agree on both.
    pub fn new(role: PeerRole, seed: u64, local_addr: SocketAddr, now: Instant) -> Self {
        PeerConfig {
            role,
            media: MediaSource::Synthetic,
            seed,
            wall: WallClock {
                base: now,
                unix_at_base: Duration::from_secs(1_700_000_000),
            },
            local_addr,
            rtx: true,
            video_fps: 30,
            video_bitrate_bps: 1_000_000,
            keyframe_interval: Self::KEYFRAME_INTERVAL,
            latency_epoch: now,
            simulcast: None,
            transport_cc: true,
        }
    }
}

/// Most temporal layers a synthetic VP8 encoding has.
pub const MAX_TEMPORAL_LAYERS: u8 = 3;

/// Most simulcast layers a publisher sends (Chrome sends up to four encodings).
pub const MAX_SIMULCAST_LAYERS: usize = 4;

/// One simulcast encoding, like an entry of Chrome's `sendEncodings`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SimulcastLayer {
    /// Its RTP stream id (`a=rid`, the rid header extension): 1 to 16 letters or digits.
    pub rid: &'static str,
    /// Target bitrate of its synthetic frames (keyframes included).
    pub bitrate_bps: u32,
    /// `scaleResolutionDownBy`, for information: the synthetic frames have no pixels.
    pub scale_down_by: u8,
}

impl SimulcastLayer {
    const UNUSED: SimulcastLayer = SimulcastLayer {
        rid: "",
        bitrate_bps: 0,
        scale_down_by: 1,
    };
}

/// The layers a simulcast publisher sends, lowest first (the order of `a=simulcast:send`). A
/// fixed array, so that [`PeerConfig`] stays `Copy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SimulcastConfig {
    layers: [SimulcastLayer; MAX_SIMULCAST_LAYERS],
    len: usize,
    /// Temporal layers of each VP8 encoding (1: none), as libwebrtc's encoder makes them.
    pub temporal_layers: u8,
}

impl SimulcastConfig {
    /// The first [`MAX_SIMULCAST_LAYERS`] of `layers`, lowest first.
    pub fn new(layers: &[SimulcastLayer]) -> Self {
        let mut c = SimulcastConfig {
            layers: [SimulcastLayer::UNUSED; MAX_SIMULCAST_LAYERS],
            len: layers.len().min(MAX_SIMULCAST_LAYERS),
            temporal_layers: 1,
        };
        c.layers[..c.len].copy_from_slice(&layers[..c.len]);
        c
    }

    /// Chrome's three layers of a 1280×720 camera: `q` (320×180) at 150 kbit/s, `h` (640×360)
    /// at 500 kbit/s and `f` (1280×720) at 2.5 Mbit/s, its targets for those sizes.
    pub fn chrome_720p() -> Self {
        Self::new(&[
            SimulcastLayer {
                rid: "q",
                bitrate_bps: 150_000,
                scale_down_by: 4,
            },
            SimulcastLayer {
                rid: "h",
                bitrate_bps: 500_000,
                scale_down_by: 2,
            },
            SimulcastLayer {
                rid: "f",
                bitrate_bps: 2_500_000,
                scale_down_by: 1,
            },
        ])
    }

    /// The same layers, each a VP8 stream of `n` temporal layers (1 to
    /// [`MAX_TEMPORAL_LAYERS`]) in libwebrtc's pattern and rate split: Chrome's VP8 simulcast
    /// sends three.
    pub fn with_temporal_layers(mut self, n: u8) -> Self {
        self.temporal_layers = n.clamp(1, MAX_TEMPORAL_LAYERS);
        self
    }

    /// The share of an encoding's delta frames' bytes its temporal layers up to each carry,
    /// lowest first (the last is 1): libwebrtc's VP8 split, 60/40 % with two layers and
    /// 40/20/40 % with three.
    pub fn temporal_shares(&self) -> &'static [f64] {
        match self.temporal_layers {
            0 | 1 => &[1.0],
            2 => &[0.6, 1.0],
            _ => &[0.4, 0.6, 1.0],
        }
    }

    /// The layers, lowest first.
    pub fn layers(&self) -> &[SimulcastLayer] {
        &self.layers[..self.len]
    }
}
