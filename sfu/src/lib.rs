//! Ferry's media node.
//!
//! The core is a pure state machine: it never reads the clock, never touches
//! a socket, never spawns a task and never draws unseeded randomness. The
//! driver (tokio) feeds it datagrams and timeouts and carries out what it
//! returns. `docs/architecture.md` draws the layers; `docs/sfu.md` has the design.
//!
//! - [`node`]: the machine ([`node::Node`]): sessions, streams, signalling, migration, recording.
//! - [`media`]: the forwarder (ingest, munger, layer allocation, egress).
//! - [`cluster`]: what crosses between nodes (relay cascade, edge tunnel, shards of a node).
//! - [`driver`]: sockets, tasks, HTTP, TLS, heartbeats: everything that touches the world.

// The core never reads the clock (clippy.toml); its tests may, to get a start time.
#![cfg_attr(test, allow(clippy::disallowed_methods))]

pub mod cluster;
#[cfg(feature = "runtime")]
pub mod driver;
#[cfg(any(test, feature = "fuzzing"))]
pub mod fuzz;
pub mod media;
pub mod node;

// The wire protocols and the sans-IO peer live in `ferry-rtc` (shared with the client SDK).
#[cfg(feature = "runtime")]
pub use ferry_rtc::udp;
pub use ferry_rtc::{
    bwe, cert, codec, dtls, ice, nack, peer, rtcp, rtp, sdp, seq, srtp, stun, time, twcc,
};
