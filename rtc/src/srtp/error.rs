//! Why SRTP/SRTCP protection or unprotection failed.

/// Why a packet could not be protected or unprotected, or a context not built.
#[non_exhaustive]
#[derive(thiserror::Error, Debug, Clone, PartialEq, Eq)]
pub enum SrtpError {
    /// The packet is shorter than its header, trailer and tag.
    #[error("packet too short")]
    TooShort,
    /// The master key or salt has the wrong length for the profile.
    #[error("master key or salt has the wrong length for the profile")]
    BadKeyLength,
    /// The authentication tag does not match.
    #[error("authentication failed")]
    AuthFailed,
    /// The index was already accepted.
    #[error("replayed packet")]
    Replayed,
    /// The index lies behind the replay window (or before the stream began).
    #[error("packet older than the replay window")]
    TooOld,
    /// The buffer cannot hold the packet plus the profile's overhead.
    #[error("buffer too small for the protected packet")]
    BufferTooSmall,
    /// Not an RTP/RTCP version 2 packet.
    #[error("not an RTP or RTCP version 2 packet")]
    InvalidPacket,
    /// The ROC or SRTCP index would wrap: the session must be rekeyed.
    #[error("SRTP index space exhausted; rekey required")]
    IndexExhausted,
    /// The packet's index is at or below the floor set by `skip_rtp_index_to`: another node
    /// may already have used it, and reusing it would reuse keystream.
    #[error("index at or below the skip floor")]
    IndexBelowFloor,
    /// The protect side already tracks [`MAX_SEND_STREAMS`] SSRCs.
    #[error("too many SSRCs on the protect side")]
    TooManyStreams,
    /// A snapshot names an unknown profile.
    #[error("unknown SRTP protection profile {0:#06x}")]
    UnknownProfile(u32),
    /// A snapshot is inconsistent.
    #[error("invalid SRTP state: {0}")]
    InvalidState(&'static str),
}
