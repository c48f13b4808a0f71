//! Ferry's WebRTC wire protocols and a sans-IO peer.
//!
//! Everything here is shared by the media node (`ferry-sfu`) and the client SDK (`ferry-sdk`):
//! STUN and ICE (lite on the server, a controlling agent on the client), DTLS-SRTP keying, our
//! own SRTP (its per-SSRC state is exportable, so sessions can migrate), RTP/RTCP, SDP, codec
//! framing, and [`peer::Peer`], a WebRTC endpoint that publishes (WHIP) or plays (WHEP), with
//! synthetic media or real encoded frames ([`media`]: IVF, H.264 Annex B, RTP packetization and
//! frame assembly).
//!
//! The protocol code never reads the clock, never touches a socket and never draws unseeded
//! randomness; [`udp`] is the one helper for drivers (a socket with large kernel buffers).
//! [`turn`] is a sans-IO TURN client (RFC 8656 over UDP) that a driver puts between a peer and
//! its socket to send the peer's datagrams through a relay. [`twcc`] is transport-wide congestion
//! control feedback: its wire format and the receiver that writes it.

// The core never reads the clock (clippy.toml); its tests may, to get a start time.
#![cfg_attr(test, allow(clippy::disallowed_methods))]

pub mod bwe;
pub mod cert;
pub mod codec;
pub mod dtls;
pub mod ice;
pub mod media;
pub mod nack;
pub mod peer;
pub mod rtcp;
pub mod rtp;
pub mod sdp;
pub mod seq;
pub mod srtp;
pub mod stun;
pub mod time;
pub mod turn;
pub mod twcc;
#[cfg(feature = "runtime")]
pub mod udp;
