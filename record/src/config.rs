//! What a recorder records and why a configuration or a packet is refused.

use ferry_rtc::codec::Codec;
use ferry_rtc::media::AssemblerConfig;
use ferry_rtc::rtp::RtpError;

use crate::segmenter::SegmentPolicy;

/// One track to record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TrackConfig {
    /// Its codec: H.264 or VP8 for video, Opus for audio.
    pub codec: Codec,
    /// Its RTP payload type.
    pub payload_type: u8,
    /// Its RTP clock rate (90 kHz video, 48 kHz Opus).
    pub clock_rate: u32,
}

impl TrackConfig {
    /// A track of `codec` at its standard clock rate.
    pub fn new(codec: Codec, payload_type: u8) -> TrackConfig {
        TrackConfig {
            codec,
            payload_type,
            clock_rate: codec.clock_rate(),
        }
    }
}

/// What to record and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecorderConfig {
    /// The video track, if any.
    pub video: Option<TrackConfig>,
    /// The audio track, if any.
    pub audio: Option<TrackConfig>,
    /// Segment length bounds.
    pub segments: SegmentPolicy,
    /// Where the recording is stored (kept in the state for the node that resumes it).
    pub target: String,
    /// Frame reassembly bounds.
    pub assembler: AssemblerConfig,
}

impl RecorderConfig {
    /// A recording of `video` and `audio` into `target`, 2–6 s segments.
    pub fn new(
        video: Option<TrackConfig>,
        audio: Option<TrackConfig>,
        target: impl Into<String>,
    ) -> RecorderConfig {
        RecorderConfig {
            video,
            audio,
            segments: SegmentPolicy::default(),
            target: target.into(),
            assembler: AssemblerConfig::default(),
        }
    }
}

/// Why a configuration is refused.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// Neither a video nor an audio track.
    #[error("nothing to record: no track")]
    NoTracks,
    /// A video track of an audio codec or the reverse.
    #[error("{0:?} cannot be the {1} track")]
    WrongKind(Codec, &'static str),
    /// A clock rate other than the codec's (the containers use 90 kHz video, 48 kHz Opus).
    #[error("clock rate {0} of {1:?} is not {2}")]
    ClockRate(u32, Codec, u32),
    /// Both tracks on one payload type.
    #[error("both tracks use payload type {0}")]
    SamePayloadType(u8),
    /// Segment bounds out of order or zero.
    #[error("segment bounds must satisfy 0 < min <= max")]
    SegmentBounds,
}

/// Why a packet was refused.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InputError {
    /// Not an RTP packet.
    #[error("bad RTP packet: {0}")]
    Rtp(#[from] RtpError),
    /// A payload type of neither track.
    #[error("payload type {0} is not recorded")]
    UnknownPayloadType(u8),
    /// The recorder was stopped, exported or handed over.
    #[error("the recorder has stopped")]
    Stopped,
}

pub(crate) fn check_config(config: &RecorderConfig) -> Result<(), ConfigError> {
    if config.video.is_none() && config.audio.is_none() {
        return Err(ConfigError::NoTracks);
    }
    if let Some(v) = config.video
        && !v.codec.is_video()
    {
        return Err(ConfigError::WrongKind(v.codec, "video"));
    }
    if let Some(a) = config.audio
        && a.codec.is_video()
    {
        return Err(ConfigError::WrongKind(a.codec, "audio"));
    }
    for t in config.video.iter().chain(config.audio.iter()) {
        if t.clock_rate != t.codec.clock_rate() {
            return Err(ConfigError::ClockRate(
                t.clock_rate,
                t.codec,
                t.codec.clock_rate(),
            ));
        }
    }
    if let (Some(v), Some(a)) = (config.video, config.audio)
        && v.payload_type == a.payload_type
    {
        return Err(ConfigError::SamePayloadType(v.payload_type));
    }
    let p = config.segments;
    if p.min.is_zero() || p.min > p.max {
        return Err(ConfigError::SegmentBounds);
    }
    Ok(())
}
