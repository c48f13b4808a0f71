//! Transcoding workers (issue 13, scope 3; DESIGN §7): a node re-encodes a stream's video into
//! a ladder of rungs (`360p`, `720p`, …), each published back as a stream of its own
//! (`{stream}~360p`) that viewers play over WHEP like any other.
//!
//! A worker is a client of its node: it plays the source with the Rust SDK, feeds one ffmpeg per
//! rung (`h264_nvenc` where the node has a GPU ffmpeg can use, `libx264` otherwise), cuts each
//! ffmpeg's output into access units and publishes them with the SDK. So a rung is an ordinary
//! stream: relayed to other nodes, recorded, migrated.
//!
//! - [`ladder`], [`encoder`], [`framing`]: the pure parts (rungs, command lines, the bytes to
//!   and from ffmpeg), unit- and property-tested;
//! - [`worker`]: one running transcode (tokio, ffmpeg processes, SDK sessions);
//! - [`node`]: a node's transcodes and its HTTP API (`/v1/transcodes`), which `ferry node` and
//!   `ferry dev` mount on each node.

pub mod encoder;
pub mod framing;
pub mod ladder;
pub mod node;
pub mod worker;

pub use encoder::{Encoder, Input};
pub use ladder::{LadderError, Rung};
pub use node::Transcoders;
