//! Ferry's recorder: one stream's RTP (an H.264 or VP8 video track and an Opus audio track) into
//! segments cut at keyframes — fragmented MP4 for H.264, WebM for VP8 — and an HLS playlist that
//! a player opens while it records, stored through `object_store` (a local directory or S3).
//!
//! [`Recorder`] is the sans-IO core: packets and `now` in, [`Output`]s out (objects to store in
//! order, a hand-over state, events). [`Recorder::export`] / [`Recorder::begin_handover`] and
//! [`Recorder::resume`] move a recording between nodes with no gap and no duplicate;
//! [`Recorder::resume_after_crash`] continues one from its last uploaded state with the gap marked
//! `EXT-X-DISCONTINUITY`. [`store::Store`] is the thin async driver that puts the objects.
//!
//! Drive loop (the node's task):
//! ```text
//! packet  -> rec.handle_rtp(now, &pkt)        timer -> rec.handle_timeout(now)
//! then    -> for o in store.drain(&mut rec).await? { Handover(state) => give it to the target, … }
//! arm the timer at rec.poll_timeout(); send a PLI when rec.wants_keyframe()
//! ```

// The core never reads the clock (clippy.toml); its tests may, to get a start time.
#![cfg_attr(test, allow(clippy::disallowed_methods))]

pub mod config;
pub mod fmp4;
#[cfg(any(test, feature = "fuzzing"))]
pub mod fuzz;
pub mod h264;
mod layout;
pub mod mux;
pub mod output;
pub mod playlist;
pub mod recorder;
pub mod segmenter;
pub mod state;
#[cfg(feature = "runtime")]
pub mod store;
pub mod timeline;
pub mod webm;

pub use config::{ConfigError, InputError, RecorderConfig, TrackConfig};
pub use mux::{Container, MuxError, Sample};
pub use output::{Event, Object, ObjectKind, Output, RecorderStats};
pub use recorder::{PLAYLIST_NAME, Recorder, STATE_NAME};
pub use segmenter::SegmentPolicy;
pub use state::{RecorderState, SegmentEntry, StateError};
#[cfg(feature = "runtime")]
pub use store::{Store, StoreError, StoreMetrics};
