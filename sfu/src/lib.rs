//! Ferry's media node.
//!
//! The core is a pure state machine: it never reads the clock, never touches
//! a socket, never spawns a task and never draws unseeded randomness. The
//! driver (tokio) feeds it datagrams and timeouts and carries out what it
//! returns. [`node`] holds the drive-loop contract; `docs/sfu.md` the design.

pub mod cert;
pub mod cluster;
pub mod codec;
pub mod driver;
pub mod dtls;
pub mod edge;
pub mod edge_driver;
pub mod egress;
#[cfg(any(test, feature = "fuzzing"))]
pub mod fuzz;
pub mod heartbeat;
pub mod http;
pub mod ice;
pub mod ingest;
pub mod metrics;
pub mod munger;
pub mod nack;
pub mod negotiate;
pub mod node;
pub mod peer;
pub mod relay;
pub mod rtcp;
pub mod rtp;
pub mod sdp;
pub mod seq;
pub mod session;
pub mod signal;
pub mod sim;
pub mod srtp;
pub mod stun;
pub mod testbed;
pub mod time;
pub mod tunnel;
pub mod udp;
