//! Session state as plain, versioned data (DESIGN §3).
//!
//! Every stateful struct of the media node exports one of these with
//! `snapshot()` and is rebuilt from it with `restore()`. Times are stored as
//! ages relative to the snapshot instant, never as clock readings.

pub mod ice;
pub mod media;

/// Snapshot format version written by this build. Readers accept this
/// version and every older one (protobuf keeps unknown fields harmless and
/// fills defaults for missing ones).
pub const SNAPSHOT_VERSION: u32 = 1;

/// The outcome of a DTLS-SRTP handshake, and the identity that made it.
#[derive(Clone, PartialEq, prost::Message)]
pub struct DtlsState {
    /// We were the DTLS client.
    #[prost(bool, tag = "1")]
    pub client: bool,
    /// Our certificate (DER).
    #[prost(bytes = "vec", tag = "2")]
    pub certificate_der: Vec<u8>,
    /// Our private key (PKCS#8 DER).
    #[prost(bytes = "vec", tag = "3")]
    pub private_key_der: Vec<u8>,
    /// SHA-256 fingerprint the peer's certificate must match.
    #[prost(bytes = "vec", tag = "4")]
    pub remote_fingerprint: Vec<u8>,
    /// 0 handshaking, 1 connected, 2 failed, 3 closed.
    #[prost(uint32, tag = "5")]
    pub phase: u32,
    /// Negotiated SRTP protection profile id (0 before the handshake).
    #[prost(uint32, tag = "6")]
    pub srtp_profile: u32,
}
