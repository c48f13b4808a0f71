//! A recording's migratable state: everything another node needs to continue it, as plain serde
//! data. The recorder uploads it (`state.json`) after every segment, next to the playlist, so the
//! index in storage is never behind the segments it lists.

use ferry_rtc::codec::Codec;
use serde::{Deserialize, Serialize};

use crate::mux::Container;
use crate::timeline::TrackClock;

/// Version of [`RecorderState`]'s layout.
pub const STATE_VERSION: u32 = 1;

/// One finished, uploaded segment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SegmentEntry {
    /// Its number (1, 2, …; the playlist's media sequence counts from the first).
    pub number: u32,
    /// Object name under the recording's prefix.
    pub name: String,
    /// Seconds (EXTINF).
    pub duration: f64,
    /// A gap (a crashed recorder) precedes it: `EXT-X-DISCONTINUITY`.
    pub discontinuity: bool,
    /// The init segment it needs, when it differs from the previous segment's (`EXT-X-MAP`).
    pub map: Option<String>,
    /// Its size.
    pub bytes: u64,
}

/// The init segment in force.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InitEntry {
    /// Object name.
    pub name: String,
    /// CRC-32 of its bytes: a recorder that resumes writes a new one only when its own differs.
    pub crc32: u32,
}

/// Where one received track stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrackState {
    /// Its codec.
    pub codec: Codec,
    /// Its RTP payload type.
    pub payload_type: u8,
    /// SSRC of the stream last received.
    pub ssrc: Option<u32>,
    /// Highest extended sequence number received.
    pub highest_seq: Option<u64>,
    /// Highest extended RTP timestamp received.
    pub highest_ts: Option<u64>,
    /// Extended sequence number of the last packet of the last frame written: the next frame
    /// written should start right after it (absent in states from before it was kept).
    #[serde(default)]
    pub last_written_seq: Option<u64>,
    /// Its mapping onto the media timeline, once it has a frame.
    pub clock: Option<TrackClock>,
}

/// Everything a recording is, apart from the media of its open segment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecorderState {
    /// [`STATE_VERSION`].
    pub version: u32,
    /// Where it is stored (a directory or `s3://bucket/prefix`), for the node that resumes it.
    pub target: String,
    /// Its container.
    pub container: Container,
    /// Segments written so far, in order.
    pub segments: Vec<SegmentEntry>,
    /// Number of the next segment.
    pub next_number: u32,
    /// The init segment in force.
    pub init: Option<InitEntry>,
    /// Init segments written so far (names `init.mp4`, `init-2.mp4`, …).
    pub init_count: u32,
    /// The video track.
    pub video: Option<TrackState>,
    /// The audio track.
    pub audio: Option<TrackState>,
    /// `EXT-X-TARGETDURATION` so far.
    pub target_duration: u64,
    /// The next segment follows a gap.
    pub pending_discontinuity: bool,
    /// Multipart upload in progress, if the driver uses one (segments are single puts today).
    pub upload_id: Option<String>,
    /// The recording was stopped (`EXT-X-ENDLIST` written).
    pub finished: bool,
}

/// Why a state could not be used.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// Not JSON of a [`RecorderState`].
    #[error("state does not decode: {0}")]
    Decode(#[from] serde_json::Error),
    /// Written by an incompatible version.
    #[error("state version {0} is not {STATE_VERSION}")]
    Version(u32),
    /// Its tracks are not the configuration's.
    #[error("state does not match the configuration: {0}")]
    Mismatch(&'static str),
    /// The recording was already stopped.
    #[error("the recording is finished")]
    Finished,
}

impl RecorderState {
    /// As JSON (what is stored as `state.json`).
    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec_pretty(self).unwrap_or_default()
    }

    /// From JSON, version checked.
    pub fn from_json(data: &[u8]) -> Result<RecorderState, StateError> {
        let s: RecorderState = serde_json::from_slice(data)?;
        if s.version != STATE_VERSION {
            return Err(StateError::Version(s.version));
        }
        Ok(s)
    }
}
