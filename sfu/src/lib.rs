//! Ferry's media node.
//!
//! The core is a pure state machine: it never reads the clock, never touches
//! a socket, never spawns a task and never draws unseeded randomness. The
//! driver (tokio) feeds it datagrams and timeouts and carries out what it
//! returns. [`node`] holds the drive-loop contract; `docs/sfu.md` the design.

pub mod adapt;
pub mod cluster;
pub mod driver;
pub mod edge;
pub mod edge_driver;
pub mod egress;
#[cfg(any(test, feature = "fuzzing"))]
pub mod fuzz;
pub mod heartbeat;
pub mod http;
pub mod ingest;
pub mod metrics;
pub mod munger;
pub mod negotiate;
pub mod node;
pub mod recording_writer;
pub mod relay;
pub mod scheduler_link;
pub mod session;
pub mod shards;
pub mod signal;
pub mod sim;
pub mod testbed;
pub mod tls;
pub mod tunnel;

// The wire protocols and the sans-IO peer live in `ferry-rtc` (shared with the client SDK).
pub use ferry_rtc::{
    bwe, cert, codec, dtls, ice, nack, peer, rtcp, rtp, sdp, seq, srtp, stun, time, twcc, udp,
};
