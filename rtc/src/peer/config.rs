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
        }
    }
}
