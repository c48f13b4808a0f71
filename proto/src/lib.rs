//! Wire and state types shared by every Ferry crate.
//!
//! State types are protobuf messages (via `prost` derive, no code generation):
//! unknown fields are ignored and missing fields take their defaults, so a
//! node at version N+1 restores a snapshot written by version N.

pub mod api;
#[cfg(feature = "jwt")]
pub mod auth;
pub mod ids;
#[cfg(feature = "room")]
pub mod room;
pub mod state;
#[cfg(feature = "otel")]
pub mod trace;
#[cfg(feature = "turn")]
pub mod turn;

pub use ids::{
    IdError, MigrationId, NodeId, RecordingId, SessionId, StreamId, TrackId, TranscodeId,
};
