//! Session state as plain, versioned data (DESIGN §3).
//!
//! Every stateful struct of the media node exports one of these with
//! `snapshot()` and is rebuilt from it with `restore()`. Times are stored as
//! ages relative to the snapshot instant, never as clock readings.

pub mod bwe;
pub mod ice;
pub mod media;
pub mod srtp;

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

/// A header extension in use: id and URI.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ExtMapEntry {
    /// Extension id (1–255).
    #[prost(uint32, tag = "1")]
    pub id: u32,
    /// Extension URI.
    #[prost(string, tag = "2")]
    pub uri: String,
}

/// One negotiated m-line.
#[derive(Clone, PartialEq, prost::Message)]
pub struct MediaLineState {
    /// `a=mid`.
    #[prost(string, tag = "1")]
    pub mid: String,
    /// Video (else audio).
    #[prost(bool, tag = "2")]
    pub video: bool,
    /// Accepted (else rejected with port 0).
    #[prost(bool, tag = "3")]
    pub accepted: bool,
    /// Codec (1 opus, 2 VP8, 3 H264).
    #[prost(uint32, tag = "4")]
    pub codec: u32,
    /// Payload type.
    #[prost(uint32, tag = "5")]
    pub pt: u32,
    /// RTX payload type.
    #[prost(uint32, optional, tag = "6")]
    pub rtx_pt: Option<u32>,
    /// Answered fmtp parameters.
    #[prost(string, tag = "7")]
    pub fmtp: String,
    /// Generic NACK.
    #[prost(bool, tag = "8")]
    pub nack: bool,
    /// PLI.
    #[prost(bool, tag = "9")]
    pub pli: bool,
    /// FIR.
    #[prost(bool, tag = "10")]
    pub fir: bool,
    /// REMB.
    #[prost(bool, tag = "11")]
    pub remb: bool,
    /// Header extensions in use.
    #[prost(message, repeated, tag = "12")]
    pub extmap: Vec<ExtMapEntry>,
    /// Publisher's declared media SSRCs.
    #[prost(uint32, repeated, tag = "13")]
    pub remote_ssrcs: Vec<u32>,
    /// RTX SSRC paired with each media SSRC (0 = none).
    #[prost(uint32, repeated, tag = "14")]
    pub remote_rtx_ssrcs: Vec<u32>,
    /// Simulcast rids.
    #[prost(string, repeated, tag = "15")]
    pub rids: Vec<String>,
    /// Viewer: outgoing SSRC.
    #[prost(uint32, tag = "16")]
    pub local_ssrc: u32,
    /// Viewer: outgoing RTX SSRC.
    #[prost(uint32, optional, tag = "17")]
    pub local_rtx_ssrc: Option<u32>,
    /// Viewer: index of the publisher's m-line it plays.
    #[prost(uint32, optional, tag = "18")]
    pub source: Option<u32>,
    /// Transport-wide congestion control feedback (`transport-cc`).
    #[prost(bool, tag = "19")]
    pub twcc: bool,
    /// Why the node did not accept a live m-line (absent when it did, or the offer disabled it).
    #[prost(string, optional, tag = "20")]
    pub rejected: Option<String>,
}

/// A published track (one accepted m-line) on the receive side.
#[derive(Clone, PartialEq, prost::Message)]
pub struct IncomingTrackState {
    /// Index of its m-line.
    #[prost(uint32, tag = "1")]
    pub index: u32,
    /// Its RTP streams (simulcast layers).
    #[prost(message, repeated, tag = "2")]
    pub streams: Vec<media::IncomingStreamState>,
    /// Index of the forwarded stream.
    #[prost(uint32, optional, tag = "3")]
    pub selected: Option<u32>,
    /// Age of the last keyframe request, in ms.
    #[prost(uint64, optional, tag = "4")]
    pub last_pli_age_ms: Option<u64>,
    /// FIR sequence number.
    #[prost(uint32, tag = "5")]
    pub fir_seq: u32,
    /// A keyframe request is pending.
    #[prost(bool, tag = "6")]
    pub keyframe_wanted: bool,
}

/// Everything a node knows about one session: enough to restore it on
/// another node and continue exactly where it was (DESIGN §3).
#[derive(Clone, PartialEq, prost::Message)]
pub struct SessionSnapshot {
    /// Format version ([`SNAPSHOT_VERSION`] when written).
    #[prost(uint32, tag = "1")]
    pub version: u32,
    /// Session id.
    #[prost(string, tag = "2")]
    pub session_id: String,
    /// Stream name.
    #[prost(string, tag = "3")]
    pub stream: String,
    /// Publisher (else viewer).
    #[prost(bool, tag = "4")]
    pub publisher: bool,
    /// ICE-lite agent.
    #[prost(message, optional, tag = "5")]
    pub ice: Option<ice::IceState>,
    /// DTLS outcome and identity.
    #[prost(message, optional, tag = "6")]
    pub dtls: Option<DtlsState>,
    /// SRTP context we encrypt with.
    #[prost(message, optional, tag = "7")]
    pub srtp_tx: Option<srtp::SrtpContextState>,
    /// SRTP context we decrypt with.
    #[prost(message, optional, tag = "8")]
    pub srtp_rx: Option<srtp::SrtpContextState>,
    /// Negotiated m-lines.
    #[prost(message, repeated, tag = "9")]
    pub media: Vec<MediaLineState>,
    /// Publisher tracks.
    #[prost(message, repeated, tag = "10")]
    pub incoming: Vec<IncomingTrackState>,
    /// Viewer tracks.
    #[prost(message, repeated, tag = "11")]
    pub outgoing: Vec<media::OutgoingStreamState>,
    /// SSRC the node sends RTCP from.
    #[prost(uint32, tag = "12")]
    pub rtcp_ssrc: u32,
    /// The SDP answer given to the peer.
    #[prost(string, tag = "13")]
    pub answer_sdp: String,
    /// Age of the session, in ms.
    #[prost(uint64, tag = "14")]
    pub age_ms: u64,
    /// Current REMB estimate towards a publisher.
    #[prost(uint64, tag = "15")]
    pub remb_bps: u64,
    /// Ownership epoch.
    #[prost(uint64, tag = "16")]
    pub epoch: u64,
    /// Where the client is reached through (an edge, or the node the session
    /// left: its forwarding pointer); empty when the client is reached directly.
    #[prost(string, tag = "17")]
    pub via: String,
    /// Cluster address of the node the session's stream is published on (the
    /// relay origin a migration target subscribes to).
    #[prost(string, tag = "18")]
    pub origin: String,
    /// Publisher: cluster addresses of the nodes the stream is relayed to
    /// (the target takes over relaying to them at cutover).
    #[prost(string, repeated, tag = "19")]
    pub relay_to: Vec<String>,
    /// Ticket generation: tickets of this generation resume the session (DESIGN §6); each
    /// resumption raises it.
    #[prost(uint32, tag = "20")]
    pub ticket_generation: u32,
    /// Viewer: its client turned video off (degraded mode).
    #[prost(bool, tag = "21")]
    pub video_paused: bool,
    /// Viewer: its bandwidth estimate and transport-wide sequence numbers.
    #[prost(message, optional, tag = "22")]
    pub adapt: Option<ViewerAdaptState>,
}

/// A viewer's adaptation state (`ferry_sfu::media::adapt::viewer`): what lets it keep its estimate and
/// its layers on another node.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ViewerAdaptState {
    /// The next transport-wide sequence number (the viewer's feedback goes on numbering from
    /// there).
    #[prost(uint64, tag = "1")]
    pub next_seq: u64,
    /// The bandwidth estimator.
    #[prost(message, optional, tag = "2")]
    pub bwe: Option<bwe::BweState>,
    /// What the last allocation gave the viewer (bit/s).
    #[prost(uint64, tag = "3")]
    pub allocated_bps: u64,
    /// Padding packets sent to probe so far.
    #[prost(uint64, tag = "4")]
    pub probe_packets: u64,
    /// Bytes of those.
    #[prost(uint64, tag = "5")]
    pub probe_bytes: u64,
    /// The viewer's cap on the picture height (pixels).
    #[prost(uint32, optional, tag = "6")]
    pub max_height: Option<u32>,
    /// Its cap on the picture width (pixels).
    #[prost(uint32, optional, tag = "7")]
    pub max_width: Option<u32>,
    /// Its cap on the frame rate.
    #[prost(uint32, optional, tag = "8")]
    pub max_fps: Option<u32>,
    /// Its cap on the rate it is sent (bit/s).
    #[prost(uint64, optional, tag = "9")]
    pub max_bitrate: Option<u64>,
}

/// A change to a session's state after its snapshot was taken, streamed to
/// the migration target (DESIGN §4 "WAL").
#[derive(Clone, PartialEq, prost::Message)]
pub struct WalRecord {
    /// Position in the session's WAL, from 1, without gaps.
    #[prost(uint64, tag = "1")]
    pub position: u64,
    /// What changed.
    #[prost(oneof = "wal_record::Change", tags = "2")]
    pub change: Option<wal_record::Change>,
}

/// The kinds of WAL changes.
pub mod wal_record {
    /// One change.
    #[derive(Clone, PartialEq, prost::Oneof)]
    pub enum Change {
        /// A packet entered a published stream's retransmission cache.
        #[prost(message, tag = "2")]
        CachePacket(super::WalCachePacket),
    }
}

/// A packet added to a publisher track's cache.
#[derive(Clone, PartialEq, prost::Message)]
pub struct WalCachePacket {
    /// Index of the track's m-line.
    #[prost(uint32, tag = "1")]
    pub track: u32,
    /// Media SSRC of the stream.
    #[prost(uint32, tag = "2")]
    pub ssrc: u32,
    /// Extended sequence number.
    #[prost(uint64, tag = "3")]
    pub ext_seq: u64,
    /// Plaintext RTP packet.
    #[prost(bytes = "vec", tag = "4")]
    pub data: Vec<u8>,
}
