//! Exportable SRTP state: what a migration snapshot carries for one `SrtpContext`.
//!
//! Plain prost messages (no `.proto` file). Field tags are part of the wire contract between
//! node versions: never reuse or renumber a tag; add new fields with new tags only. Unknown
//! fields are skipped by older readers and missing fields take their zero default, so every
//! field below is defined so that zero means "nothing special".

/// One direction of one SRTP session (see `crate::srtp::SrtpContext`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct SrtpContextState {
    /// DTLS-SRTP protection profile id (RFC 5764 / RFC 7714): 0x0001, 0x0007 or 0x0008.
    #[prost(uint32, tag = "1")]
    pub profile: u32,
    /// Master key as exported from DTLS (16 bytes for both supported profiles).
    #[prost(bytes = "vec", tag = "2")]
    pub master_key: Vec<u8>,
    /// Master salt (14 bytes for AES-CM, 12 for AEAD_AES_128_GCM).
    #[prost(bytes = "vec", tag = "3")]
    pub master_salt: Vec<u8>,
    /// Per-SSRC SRTP state, least recently used first.
    #[prost(message, repeated, tag = "4")]
    pub rtp: Vec<SrtpStreamState>,
    /// Per-SSRC SRTCP state, least recently used first.
    #[prost(message, repeated, tag = "5")]
    pub rtcp: Vec<SrtcpStreamState>,
}

/// SRTP state of one SSRC.
///
/// On the protect side `roc`/`highest_seq` form the highest index used so far; on the
/// unprotect side, the highest index authenticated so far.
#[derive(Clone, PartialEq, prost::Message)]
pub struct SrtpStreamState {
    /// The SSRC this state belongs to.
    #[prost(uint32, tag = "1")]
    pub ssrc: u32,
    /// Rollover counter of the highest index.
    #[prost(uint32, tag = "2")]
    pub roc: u32,
    /// Sequence number of the highest index (0..=65535).
    #[prost(uint32, tag = "3")]
    pub highest_seq: u32,
    /// Replay window bits 0..64: bit `i` set means index `highest - i` was accepted.
    #[prost(fixed64, tag = "4")]
    pub replay_window_lo: u64,
    /// Replay window bits 64..128.
    #[prost(fixed64, tag = "5")]
    pub replay_window_hi: u64,
    /// Protect side only: no index at or below this value may be used again
    /// (set by `skip_rtp_index_to` after a migration rollback).
    #[prost(uint64, optional, tag = "6")]
    pub index_floor: Option<u64>,
}

/// SRTCP state of one SSRC.
#[derive(Clone, PartialEq, prost::Message)]
pub struct SrtcpStreamState {
    /// The SSRC this state belongs to (sender SSRC of the compound packet).
    #[prost(uint32, tag = "1")]
    pub ssrc: u32,
    /// Protect side: the last 31-bit SRTCP index used. Unprotect side: the highest accepted.
    #[prost(uint32, tag = "2")]
    pub index: u32,
    /// Replay window bits 0..64 (unprotect side): bit `i` set means `index - i` was accepted.
    #[prost(fixed64, tag = "3")]
    pub replay_window_lo: u64,
    /// Replay window bits 64..128.
    #[prost(fixed64, tag = "4")]
    pub replay_window_hi: u64,
}
