//! The node's recordings: each one's recorder, phase and counters, and those waiting for the
//! state their source hands over.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use ferry_proto::{RecordingId, StreamId};
use ferry_record::{Output, Recorder, RecorderState, TrackConfig};

use crate::codec::Codec;
use crate::media::line::MediaLine;

/// How long a simulcast layer (an SSRC of the recorded line) must be silent before the recorder
/// follows another one.
pub(super) const SSRC_SILENCE: Duration = Duration::from_secs(1);

/// How often a recording asks the publisher for a keyframe: segments are cut at keyframes only
/// (2–6 s), and browsers send them rarely unless asked.
pub(super) const KEYFRAME_INTERVAL: Duration = Duration::from_secs(4);

/// Recordings a node keeps listing after they ended.
pub(super) const MAX_ENDED: usize = 1000;

/// How long a recording waits here for the state its source hands over; then it is dropped
/// (the source recorded on, or the scheduler resumes it from storage).
pub const AWAIT_LIMIT: Duration = Duration::from_secs(30);

/// Most packet bytes a waiting recording holds; the oldest go first beyond.
pub(super) const AWAIT_BYTES: usize = 32 << 20;

/// Where a recording is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RecordingPhase {
    /// Taking media.
    Recording,
    /// Stopped: its last objects (the playlist with `EXT-X-ENDLIST`) are out.
    Stopped,
    /// Handed over or exported (it goes on elsewhere).
    Moved,
    /// Waiting for the state its source hands over, holding the stream's packets meanwhile.
    Awaiting,
}

impl RecordingPhase {
    /// The name used in the API.
    pub fn as_str(self) -> &'static str {
        match self {
            RecordingPhase::Recording => "recording",
            RecordingPhase::Stopped => "stopped",
            RecordingPhase::Moved => "moved",
            RecordingPhase::Awaiting => "awaiting",
        }
    }
}

/// A recording as the core sees it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct RecordingInfo {
    /// Its id.
    pub id: RecordingId,
    /// The stream it records.
    pub stream: StreamId,
    /// Where its objects go (directory, `file://` or `s3://bucket/prefix`).
    pub target: String,
    /// Where it is.
    pub state: RecordingPhase,
    /// Segments closed so far.
    pub segments: u64,
    /// Segment bytes muxed so far.
    pub segment_bytes: u64,
    /// Video and audio frames written.
    pub frames: u64,
    /// Video frames written (by this node's recorder).
    pub video_frames: u64,
    /// Audio frames written (by this node's recorder).
    pub audio_frames: u64,
    /// Places where this node's recorder wrote a video frame that did not follow on from the
    /// one before (RTP sequence numbers missing: media the recording lacks).
    pub video_holes: u64,
}

/// What the driver does for a recording.
#[derive(Debug, Clone, PartialEq)]
pub enum RecordingOutput {
    /// Store this object (in order) under the recording's target.
    Put(RecordingId, ferry_record::Object),
    /// Nothing more will be put for it: its writer can finish.
    Ended(RecordingId),
    /// It reached its hand-over point: this state continues it elsewhere.
    Handover(RecordingId, Box<RecorderState>),
    /// Something to log.
    Event(RecordingId, ferry_record::Event),
}

/// Why a recording cannot start or be found.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum RecordingError {
    /// The stream is neither published nor relayed here.
    #[error("stream {0} is not live on this node")]
    UnknownStream(StreamId),
    /// The stream sends no H.264, VP8 or Opus track.
    #[error("stream {0} has no track to record (H.264 or VP8 video, Opus audio)")]
    NothingToRecord(StreamId),
    /// No recording by that id.
    #[error("no recording {0} on this node")]
    UnknownRecording(RecordingId),
    /// The recording ended already.
    #[error("recording {0} has ended")]
    Ended(RecordingId),
    /// A recording by that id runs here already (for another stream, or not waiting for a
    /// hand-over).
    #[error("recording {0} exists on this node")]
    Exists(RecordingId),
    /// The recording is not waiting for a hand-over (or is not handed over yet).
    #[error("recording {0} is {1}")]
    WrongPhase(RecordingId, &'static str),
    /// No target given and the node has no recordings directory.
    #[error("no target given and this node has no recordings directory (--recordings-dir)")]
    NoTarget,
    /// The recorder refused its configuration.
    #[error("recorder: {0}")]
    Config(#[from] ferry_record::ConfigError),
    /// A state to resume does not fit.
    #[error("recorder state: {0}")]
    State(#[from] ferry_record::StateError),
}

impl RecordingError {
    /// The HTTP status it maps to.
    pub fn status(&self) -> u16 {
        match self {
            RecordingError::UnknownStream(_) | RecordingError::UnknownRecording(_) => 404,
            RecordingError::Ended(_)
            | RecordingError::Exists(_)
            | RecordingError::WrongPhase(..) => 409,
            RecordingError::NothingToRecord(_) => 422,
            _ => 400,
        }
    }
}

/// One recorded line: which media line of the source, which SSRC is followed.
#[derive(Debug, Clone, Copy)]
pub(super) struct Tap {
    pub(super) line: usize,
    pub(super) ssrc: Option<u32>,
    pub(super) last_seen: Option<Instant>,
}

impl Tap {
    /// Whether a packet of `ssrc` is recorded (one simulcast layer at a time).
    pub(super) fn admit(&mut self, now: Instant, ssrc: u32) -> bool {
        match (self.ssrc, self.last_seen) {
            (Some(s), _) if s == ssrc => {}
            (Some(_), Some(t)) if now.saturating_duration_since(t) < SSRC_SILENCE => return false,
            _ => self.ssrc = Some(ssrc),
        }
        self.last_seen = Some(now);
        true
    }
}

#[derive(Debug)]
pub(super) struct Recording {
    pub(super) id: RecordingId,
    pub(super) stream: StreamId,
    pub(super) target: String,
    pub(super) phase: RecordingPhase,
    pub(super) recorder: Recorder,
    pub(super) video: Option<Tap>,
    pub(super) audio: Option<Tap>,
    /// Packets the recorder refused (payload type, malformed).
    pub(super) refused: u64,
    /// When to ask for the next keyframe.
    pub(super) next_keyframe: Instant,
}

impl Recording {
    pub(super) fn info(&self) -> RecordingInfo {
        let st = self.recorder.stats();
        RecordingInfo {
            id: self.id.clone(),
            stream: self.stream.clone(),
            target: self.target.clone(),
            state: self.phase,
            segments: st.segments,
            segment_bytes: st.segment_bytes,
            frames: st.video_frames + st.audio_frames,
            video_frames: st.video_frames,
            audio_frames: st.audio_frames,
            video_holes: st.video_holes,
        }
    }
}

/// A packet a waiting recording holds.
#[derive(Debug)]
pub(super) struct Held {
    pub(super) at: Instant,
    pub(super) line: usize,
    pub(super) data: Vec<u8>,
}

/// A recording that waits here for the state its source hands over (`Node::await_recording`):
/// it holds the stream's packets from before the source's hand-over keyframe, so the recorder
/// resumed from that state starts at that keyframe with no gap.
#[derive(Debug)]
pub(super) struct Awaiting {
    pub(super) id: RecordingId,
    pub(super) stream: StreamId,
    pub(super) target: String,
    pub(super) since: Instant,
    pub(super) held: VecDeque<Held>,
    pub(super) bytes: usize,
    /// Packets let go beyond [`AWAIT_BYTES`].
    pub(super) dropped: u64,
}

impl Awaiting {
    pub(super) fn info(&self) -> RecordingInfo {
        RecordingInfo {
            id: self.id.clone(),
            stream: self.stream.clone(),
            target: self.target.clone(),
            state: RecordingPhase::Awaiting,
            segments: 0,
            segment_bytes: 0,
            frames: 0,
            video_frames: 0,
            audio_frames: 0,
            video_holes: 0,
        }
    }

    pub(super) fn hold(&mut self, now: Instant, line: usize, pkt: &[u8]) {
        self.held.push_back(Held {
            at: now,
            line,
            data: pkt.to_vec(),
        });
        self.bytes += pkt.len();
        while self.bytes > AWAIT_BYTES {
            let Some(h) = self.held.pop_front() else {
                break;
            };
            self.bytes -= h.data.len();
            self.dropped += 1;
        }
    }
}

/// How recordings came and went on a node (`/metrics`).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RecordingCounters {
    /// Recordings handed over to another node (a move's source).
    pub handed_over: u64,
    /// Recordings taken over from another node (a move's target).
    pub taken_over: u64,
    /// Recordings resumed here after their node died (each a gap, marked in the playlist).
    pub crash_resumes: u64,
    /// Video holes recorders wrote here ([`ferry_record::Event::VideoHole`]).
    pub video_holes: u64,
}

impl RecordingCounters {
    /// Adds another core's counters.
    pub fn add(&mut self, o: RecordingCounters) {
        self.handed_over += o.handed_over;
        self.taken_over += o.taken_over;
        self.crash_resumes += o.crash_resumes;
        self.video_holes += o.video_holes;
    }
}

/// The node's recordings and what they output.
#[derive(Debug, Default)]
pub(crate) struct Recordings {
    pub(super) counters: RecordingCounters,
    pub(super) list: Vec<Recording>,
    pub(super) awaiting: Vec<Awaiting>,
    pub(super) out: VecDeque<RecordingOutput>,
    /// Directory default targets go under (`{dir}/{id}`).
    pub(crate) dir: Option<String>,
}

impl Recordings {
    /// Whether `stream` is being recorded here (or a recording of it waits for its state): the
    /// stream is then wanted here as if it had a viewer.
    pub(crate) fn records(&self, stream: &StreamId) -> bool {
        self.list
            .iter()
            .any(|r| &r.stream == stream && r.phase == RecordingPhase::Recording)
            || self.awaiting.iter().any(|a| &a.stream == stream)
    }

    /// Makes room for a recording `id` of `stream`: an entry that moved on from here (a
    /// recording coming back) is forgotten; a running or stopped one refuses.
    pub(super) fn claim(&mut self, id: &RecordingId) -> Result<(), RecordingError> {
        if self.awaiting.iter().any(|a| &a.id == id) {
            return Err(RecordingError::Exists(id.clone()));
        }
        match self.list.iter().find(|r| &r.id == id).map(|r| r.phase) {
            None => Ok(()),
            Some(RecordingPhase::Moved) => {
                self.list.retain(|r| &r.id != id);
                Ok(())
            }
            Some(RecordingPhase::Stopped) => Err(RecordingError::Ended(id.clone())),
            Some(_) => Err(RecordingError::Exists(id.clone())),
        }
    }

    pub(super) fn get_mut(&mut self, id: &RecordingId) -> Option<&mut Recording> {
        self.list.iter_mut().find(|r| &r.id == id)
    }

    pub(super) fn drain(
        out: &mut VecDeque<RecordingOutput>,
        counters: &mut RecordingCounters,
        r: &mut Recording,
    ) {
        while let Some(o) = r.recorder.poll_output() {
            out.push_back(match o {
                Output::Put(obj) => RecordingOutput::Put(r.id.clone(), obj),
                Output::Handover(state) => {
                    counters.handed_over += 1;
                    r.phase = RecordingPhase::Moved;
                    RecordingOutput::Handover(r.id.clone(), state)
                }
                Output::Event(e) => {
                    if let ferry_record::Event::VideoHole { .. } = e {
                        counters.video_holes += 1;
                    }
                    RecordingOutput::Event(r.id.clone(), e)
                }
            });
        }
        if r.phase == RecordingPhase::Recording && r.recorder.is_stopped() {
            r.phase = RecordingPhase::Moved;
        }
    }

    /// Forgets the oldest ended recordings past [`MAX_ENDED`].
    pub(super) fn trim(&mut self) {
        let ended = self
            .list
            .iter()
            .filter(|r| r.phase != RecordingPhase::Recording)
            .count();
        let mut extra = ended.saturating_sub(MAX_ENDED);
        self.list.retain(|r| {
            if extra > 0 && r.phase != RecordingPhase::Recording {
                extra -= 1;
                return false;
            }
            true
        });
    }
}

/// A media line of the source and the recorder track it feeds.
type LineTrack = (usize, TrackConfig);

/// The recorder configuration for a source with `lines`: its first accepted H.264/VP8 and Opus
/// lines (the tracks it sends).
pub(super) fn tracks(lines: &[MediaLine]) -> (Option<LineTrack>, Option<LineTrack>) {
    let pick = |video: bool| {
        lines.iter().enumerate().find_map(|(i, l)| {
            let ok = l.accepted
                && l.video == video
                && match l.codec {
                    Codec::H264 | Codec::Vp8 => video,
                    Codec::Opus => !video,
                    // Not in the recorder's containers yet.
                    Codec::Vp9 | Codec::Av1 => false,
                };
            ok.then(|| (i, TrackConfig::new(l.codec, l.pt)))
        })
    };
    (pick(true), pick(false))
}

/// Recording `id` of `list`.
pub(super) fn find_mut<'a>(
    list: &'a mut [Recording],
    id: &RecordingId,
) -> Result<&'a mut Recording, RecordingError> {
    list.iter_mut()
        .find(|r| &r.id == id)
        .ok_or_else(|| RecordingError::UnknownRecording(id.clone()))
}
