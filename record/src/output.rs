//! What a recorder hands its driver: objects to store, a hand-over state, events, counters.

use crate::mux::MuxError;
use crate::state::RecorderState;

/// What a stored object is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ObjectKind {
    /// An init segment.
    Init,
    /// A media segment.
    Segment,
    /// The HLS playlist.
    Playlist,
    /// The recorder's state.
    State,
}

/// An object to store, under the recording's prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Object {
    /// Its name (`init.mp4`, `seg-00001.m4s`, `index.m3u8`, `state.json`).
    pub name: String,
    /// What it is.
    pub kind: ObjectKind,
    /// Its bytes.
    pub bytes: Vec<u8>,
}

/// Something worth telling the node.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// A segment was closed (its objects precede this event).
    SegmentClosed {
        /// Its number.
        number: u32,
        /// Its length in seconds.
        duration: f64,
    },
    /// The open segment passed the maximum length with no keyframe; it goes on to the next one.
    SegmentOverrun {
        /// Its number.
        number: u32,
    },
    /// A video frame was written that does not follow on from the one written before it:
    /// `packets` RTP sequence numbers between them are not in the recording (lost on the way,
    /// dropped as unusable, or never handed over). Frames the publisher did not send leave no
    /// hole, whatever the step in the timeline.
    VideoHole {
        /// Sequence numbers missing between the two frames.
        packets: u64,
    },
    /// A segment could not be muxed; its media is lost.
    MuxFailed {
        /// Its number.
        number: u32,
        /// Why.
        error: MuxError,
    },
}

/// What the recorder asks its driver to do, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Output {
    /// Store this object (in order: a segment before the playlist that lists it, the playlist
    /// before the state).
    Put(Object),
    /// The hand-over point was reached (every object before this is the source's last):
    /// give this state to the target's [`Recorder::resume`].
    Handover(Box<RecorderState>),
    /// Something to log or count.
    Event(Event),
}

/// What the recorder counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RecorderStats {
    /// Video frames written.
    pub video_frames: u64,
    /// Audio frames written.
    pub audio_frames: u64,
    /// Frames dropped as stale (at or before a frame already written).
    pub stale_frames: u64,
    /// Frames dropped because they could not be used (an H.264 keyframe without parameter
    /// sets before any, no NAL unit).
    pub unusable_frames: u64,
    /// Audio dropped while waiting for the first video keyframe (beyond the maximum segment).
    pub preroll_dropped: u64,
    /// Segments written.
    pub segments: u64,
    /// Segment bytes written.
    pub segment_bytes: u64,
    /// Segments that passed the maximum length.
    pub overruns: u64,
    /// Segments lost to a mux failure.
    pub mux_failures: u64,
    /// Times a track's RTP clock jumped (re-anchored to arrival time).
    pub timeline_jumps: u64,
    /// Times a track's SSRC changed.
    pub ssrc_changes: u64,
    /// Video holes: frames written that did not follow on from the frame before in RTP
    /// sequence numbers ([`Event::VideoHole`]).
    pub video_holes: u64,
}
