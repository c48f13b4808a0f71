//! What the muxers share: a sample on a track's media timeline, the container a recording uses,
//! and why muxing failed.

use ferry_rtc::codec::Codec;
use serde::{Deserialize, Serialize};

/// One frame of one track, ready for a container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sample {
    /// Decode time in the track's ticks since the recording began.
    pub dts: u64,
    /// Ticks until the track's next sample.
    pub duration: u32,
    /// Decodable on its own (every audio frame is).
    pub keyframe: bool,
    /// The frame in container form (AVCC for H.264, raw VP8 and Opus otherwise).
    pub data: Vec<u8>,
}

/// The container of a recording, chosen by its video codec.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Container {
    /// Fragmented MP4: `init.mp4` + `seg-NNNNN.m4s` (H.264 and/or Opus).
    Fmp4,
    /// WebM: `init.mkv` (header and tracks) + `seg-NNNNN.mkv` (clusters) (VP8 + Opus). The
    /// content is WebM (DocType `webm`); the names end in `.mkv` because ffmpeg's HLS reader (and
    /// the players built on it) refuse segments named `.webm` by default, and accept `.mkv`.
    Webm,
}

impl Container {
    /// The container for a recording with video codec `video` (none: audio only, in fMP4).
    pub fn for_video(video: Option<Codec>) -> Container {
        match video {
            Some(Codec::Vp8) => Container::Webm,
            _ => Container::Fmp4,
        }
    }

    /// File name extension of its media segments.
    pub fn segment_extension(self) -> &'static str {
        match self {
            Container::Fmp4 => "m4s",
            Container::Webm => "mkv",
        }
    }

    /// File name extension of its init segment.
    pub fn init_extension(self) -> &'static str {
        match self {
            Container::Fmp4 => "mp4",
            Container::Webm => "mkv",
        }
    }
}

/// Why a segment could not be written.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MuxError {
    /// The MP4 box encoder refused.
    #[error("mp4 encoding: {0}")]
    Mp4(String),
    /// A size or offset does not fit its field.
    #[error("segment too large for the container's fields")]
    TooLarge,
}
