//! Ferry's media node.
//!
//! The core is a pure state machine: it never reads the clock, never touches
//! a socket, never spawns a task and never draws unseeded randomness. The
//! driver (tokio) feeds it datagrams and timeouts and carries out what it
//! returns.

pub mod cert;
pub mod codec;
pub mod dtls;
pub mod ice;
pub mod metrics;
pub mod munger;
pub mod nack;
pub mod negotiate;
pub mod peer;
pub mod rtcp;
pub mod rtp;
pub mod sdp;
pub mod seq;
pub mod signal;
pub mod sim;
pub mod srtp;
pub mod stun;
pub mod time;
