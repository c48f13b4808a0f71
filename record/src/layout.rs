//! The recorder's containers in one place: which tracks a recording has and the init and media
//! segments of its container, and the codec facts they need (video parameters, Opus durations).

use crate::fmp4::{self, Fmp4Track};
use crate::h264::H264Params;
use crate::mux::{Container, MuxError, Sample};
use crate::webm::{self, WebmTrack};

/// The decoder configuration of the video track, from its first usable keyframe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum VideoParams {
    H264(H264Params),
    Vp8 { width: u16, height: u16 },
}

/// A recording's container and tracks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Layout {
    pub(crate) container: Container,
    pub(crate) video: bool,
    pub(crate) audio: bool,
}

impl Layout {
    /// The init segment; `None` while the video parameters are unknown.
    pub(crate) fn init_segment(
        &self,
        params: Option<&VideoParams>,
    ) -> Result<Option<Vec<u8>>, MuxError> {
        match self.container {
            Container::Webm => {
                let mut tracks = Vec::new();
                if let Some(&VideoParams::Vp8 { width, height }) = params {
                    tracks.push(WebmTrack::Vp8 { width, height });
                } else if self.video {
                    return Ok(None);
                }
                if self.audio {
                    tracks.push(WebmTrack::Opus);
                }
                Ok(Some(webm::init_segment(&tracks)))
            }
            _ => {
                let mut tracks = Vec::new();
                if let Some(VideoParams::H264(p)) = params {
                    tracks.push(Fmp4Track::H264(p.clone()));
                } else if self.video {
                    return Ok(None);
                }
                if self.audio {
                    tracks.push(Fmp4Track::Opus);
                }
                fmp4::init_segment(&tracks).map(Some)
            }
        }
    }

    /// Media segment `number` of these samples.
    pub(crate) fn media_segment(
        &self,
        params: Option<&VideoParams>,
        number: u32,
        video: &[Sample],
        audio: &[Sample],
    ) -> Result<Vec<u8>, MuxError> {
        let mut tracks: Vec<&[Sample]> = Vec::new();
        if self.video {
            tracks.push(video);
        }
        if self.audio {
            tracks.push(audio);
        }
        match self.container {
            Container::Webm => {
                let mut kinds = Vec::new();
                if let Some(&VideoParams::Vp8 { width, height }) = params {
                    kinds.push(WebmTrack::Vp8 { width, height });
                }
                if self.audio {
                    kinds.push(WebmTrack::Opus);
                }
                webm::media_segment(&kinds, &tracks)
            }
            _ => fmp4::media_segment(number, &tracks),
        }
    }
}

/// Ticks of one Opus packet from its TOC byte (RFC 6716 §3.1), at 48 kHz.
pub(crate) fn opus_duration(packet: &[u8]) -> Option<u32> {
    let toc = *packet.first()?;
    let config = toc >> 3;
    let frame: u32 = match config {
        0..=11 => [480, 960, 1920, 2880][usize::from(config % 4)],
        12..=15 => [480, 960][usize::from(config % 2)],
        _ => [120, 240, 480, 960][usize::from(config % 4)],
    };
    let count = match toc & 3 {
        0 => 1,
        1 | 2 => 2,
        _ => u32::from(*packet.get(1)? & 0x3f),
    };
    let d = frame * count;
    (d > 0 && d <= 5760).then_some(d)
}
