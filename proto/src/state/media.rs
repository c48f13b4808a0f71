//! Per-stream media state: what the forwarding path knows about each RTP
//! stream, in a form that survives a move to another node.

/// One packet held for retransmission.
#[derive(Clone, PartialEq, prost::Message)]
pub struct CachedPacket {
    /// Extended (64-bit) sequence number.
    #[prost(uint64, tag = "1")]
    pub ext_seq: u64,
    /// Plaintext RTP packet.
    #[prost(bytes = "vec", tag = "2")]
    pub data: Vec<u8>,
}

/// A stream's retransmission cache.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PacketCacheState {
    /// Slots in the cache.
    #[prost(uint32, tag = "1")]
    pub capacity: u32,
    /// Held packets, oldest first.
    #[prost(message, repeated, tag = "2")]
    pub packets: Vec<CachedPacket>,
}

/// A packet the receiver is still asking for.
#[derive(Clone, PartialEq, prost::Message)]
pub struct MissingPacket {
    /// Extended sequence number.
    #[prost(uint64, tag = "1")]
    pub ext_seq: u64,
    /// How long it has been missing, in ms.
    #[prost(uint64, tag = "2")]
    pub age_ms: u64,
    /// How long ago it was last NACKed, in ms.
    #[prost(uint64, optional, tag = "3")]
    pub last_nack_age_ms: Option<u64>,
    /// NACKs sent for it.
    #[prost(uint32, tag = "4")]
    pub retries: u32,
}

/// Receiver-side NACK generator.
#[derive(Clone, PartialEq, prost::Message)]
pub struct NackGeneratorState {
    /// Highest extended sequence number received.
    #[prost(uint64, optional, tag = "1")]
    pub highest_ext_seq: Option<u64>,
    /// Packets still missing.
    #[prost(message, repeated, tag = "2")]
    pub missing: Vec<MissingPacket>,
    /// Smoothed NACK→repair time in µs.
    #[prost(uint64, tag = "3")]
    pub srtt_us: u64,
    /// Packets given up on.
    #[prost(uint64, tag = "4")]
    pub gave_up: u64,
    /// Packets repaired.
    #[prost(uint64, tag = "5")]
    pub recovered: u64,
}

/// One segment of a munger's sequence mapping: from `out_start` on, outgoing
/// extended sequence = source extended sequence + (`out_start` − `src_start`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct SeqSegment {
    /// Source SSRC of the segment.
    #[prost(uint32, tag = "1")]
    pub src_ssrc: u32,
    /// First source extended sequence number of the segment.
    #[prost(uint64, tag = "2")]
    pub src_start: u64,
    /// The outgoing extended sequence number it maps to.
    #[prost(uint64, tag = "3")]
    pub out_start: u64,
    /// Timestamp delta of the segment (outgoing = source + delta, mod 2^64).
    #[prost(uint64, tag = "4")]
    pub ts_delta: u64,
    /// VP8 picture-id delta of the segment.
    #[prost(uint32, tag = "5")]
    pub vp8_pic_delta: u32,
    /// VP8 TL0PICIDX delta of the segment.
    #[prost(uint32, tag = "6")]
    pub vp8_tl0_delta: u32,
    /// From this outgoing number on, packets of the segment were numbered around dropped ones
    /// (layers the viewer did not get): not by the segment's arithmetic.
    #[prost(uint64, optional, tag = "7")]
    pub layered_from_out: Option<u64>,
    /// Dependency-descriptor frame-number delta of the segment (mod 2^16).
    #[prost(uint32, tag = "8")]
    pub dd_frame_delta: u32,
}

/// A subscriber's munger: maps the source's (SSRC, seq, ts) onto one
/// continuous outgoing stream.
#[derive(Clone, PartialEq, prost::Message)]
pub struct MungerState {
    /// Outgoing SSRC.
    #[prost(uint32, tag = "1")]
    pub out_ssrc: u32,
    /// Whether a packet has been forwarded yet.
    #[prost(bool, tag = "2")]
    pub started: bool,
    /// Dropping until the next keyframe.
    #[prost(bool, tag = "3")]
    pub waiting_keyframe: bool,
    /// Current source SSRC, if bound.
    #[prost(uint32, optional, tag = "4")]
    pub src_ssrc: Option<u32>,
    /// Highest outgoing extended sequence number sent.
    #[prost(uint64, tag = "5")]
    pub last_out_seq: u64,
    /// Highest outgoing extended timestamp sent.
    #[prost(uint64, tag = "6")]
    pub last_out_ts: u64,
    /// Added (mod 2^64) to a source extended timestamp to get the outgoing one.
    #[prost(uint64, tag = "7")]
    pub ts_delta: u64,
    /// Age of the last forwarded packet, in µs.
    #[prost(uint64, optional, tag = "8")]
    pub last_forward_age_us: Option<u64>,
    /// Sequence mapping segments, oldest first.
    #[prost(message, repeated, tag = "9")]
    pub segments: Vec<SeqSegment>,
    /// VP8 picture-id delta (mod 2^15).
    #[prost(uint32, tag = "10")]
    pub vp8_pic_delta: u32,
    /// VP8 TL0PICIDX delta (mod 2^8).
    #[prost(uint32, tag = "11")]
    pub vp8_tl0_delta: u32,
    /// Last outgoing VP8 picture id and TL0PICIDX, for continuity on a switch.
    #[prost(uint32, optional, tag = "12")]
    pub vp8_last_pic: Option<u32>,
    /// Last outgoing TL0PICIDX.
    #[prost(uint32, optional, tag = "13")]
    pub vp8_last_tl0: Option<u32>,
    /// Highest source extended sequence number forwarded in the current segment.
    #[prost(uint64, tag = "14")]
    pub last_src_seq: u64,
    /// Packets of the source were being dropped (layers the viewer does not get): the next
    /// packet starts a segment of its own after `last_src_seq`.
    #[prost(bool, tag = "15")]
    pub layered: bool,
    /// Dependency-descriptor frame-number delta (mod 2^16).
    #[prost(uint32, tag = "16")]
    pub dd_frame_delta: u32,
    /// Last outgoing dependency-descriptor frame number, for continuity on a switch.
    #[prost(uint32, optional, tag = "17")]
    pub dd_last_frame: Option<u32>,
    /// The numbering window while packets are dropped (`layered`): with it the new node
    /// numbers the packets still to come and answers NACKs of the numbers handed out before
    /// the move as the old one would; without it (an older snapshot) the next packet starts
    /// a segment of its own and those NACKs go unanswered.
    #[prost(message, optional, tag = "18")]
    pub layered_map: Option<LayeredState>,
}

/// The numbering window of a viewer that gets only some of its layer's packets.
#[derive(Clone, PartialEq, prost::Message)]
pub struct LayeredState {
    /// The window's source packets, oldest first.
    #[prost(message, repeated, tag = "1")]
    pub slots: Vec<LayeredSlot>,
    /// Highest source extended sequence number given a slot.
    #[prost(uint64, tag = "2")]
    pub highest: u64,
    /// The next outgoing extended sequence number.
    #[prost(uint64, tag = "3")]
    pub next_out: u64,
    /// VP8 picture-id delta for pictures after the last dropped one.
    #[prost(uint32, tag = "4")]
    pub pic_delta: u32,
    /// The last VP8 picture id among the newest packets…
    #[prost(uint32, optional, tag = "5")]
    pub last_pic: Option<u32>,
    /// …and whether it was dropped.
    #[prost(bool, tag = "6")]
    pub last_pic_dropped: bool,
    /// The highest source number when the window took over.
    #[prost(uint64, tag = "7")]
    pub start_src: u64,
}

/// One source packet of a [`LayeredState`] window.
#[derive(Clone, PartialEq, prost::Message)]
pub struct LayeredSlot {
    /// Source extended sequence number.
    #[prost(uint64, tag = "1")]
    pub src: u64,
    /// The outgoing extended sequence number it took or left empty (0: none).
    #[prost(uint64, tag = "2")]
    pub out: u64,
    /// VP8 picture-id delta in force for it.
    #[prost(uint32, tag = "3")]
    pub pic_delta: u32,
    /// 1 forwarded, 2 reserved (not seen yet), 3 dropped.
    #[prost(uint32, tag = "4")]
    pub fate: u32,
}

/// The last sender report received on a stream (its NTP↔RTP mapping).
#[derive(Clone, PartialEq, prost::Message)]
pub struct SenderReportInfo {
    /// 64-bit NTP timestamp of the report.
    #[prost(uint64, tag = "1")]
    pub ntp: u64,
    /// RTP timestamp of the report.
    #[prost(uint32, tag = "2")]
    pub rtp_ts: u32,
    /// How long ago it arrived, in µs.
    #[prost(uint64, tag = "3")]
    pub age_us: u64,
}

/// Receive statistics of an incoming stream (RFC 3550 A.3, A.8).
#[derive(Clone, PartialEq, prost::Message)]
pub struct ReceiveStats {
    /// Packets received (including repairs).
    #[prost(uint64, tag = "1")]
    pub packets: u64,
    /// Payload bytes received.
    #[prost(uint64, tag = "2")]
    pub bytes: u64,
    /// First extended sequence number received.
    #[prost(uint64, optional, tag = "3")]
    pub base_seq: Option<u64>,
    /// Expected count at the last report.
    #[prost(uint64, tag = "4")]
    pub expected_prior: u64,
    /// Received count at the last report.
    #[prost(uint64, tag = "5")]
    pub received_prior: u64,
    /// Interarrival jitter in RTP units, times 16.
    #[prost(uint64, tag = "6")]
    pub jitter_q4: u64,
    /// Last transit time (arrival in RTP units − RTP timestamp).
    #[prost(int64, optional, tag = "7")]
    pub last_transit: Option<i64>,
}

/// An incoming (published) RTP stream.
#[derive(Clone, PartialEq, prost::Message)]
pub struct IncomingStreamState {
    /// Media SSRC.
    #[prost(uint32, tag = "1")]
    pub ssrc: u32,
    /// RTX SSRC, if the publisher repairs with RTX.
    #[prost(uint32, optional, tag = "2")]
    pub rtx_ssrc: Option<u32>,
    /// Simulcast rid, if any.
    #[prost(string, tag = "3")]
    pub rid: String,
    /// Loss tracking.
    #[prost(message, optional, tag = "4")]
    pub nack: Option<NackGeneratorState>,
    /// Retransmission cache.
    #[prost(message, optional, tag = "5")]
    pub cache: Option<PacketCacheState>,
    /// Last sender report.
    #[prost(message, optional, tag = "6")]
    pub last_sr: Option<SenderReportInfo>,
    /// Receive statistics.
    #[prost(message, optional, tag = "7")]
    pub stats: Option<ReceiveStats>,
    /// Highest extended RTP timestamp.
    #[prost(uint64, optional, tag = "8")]
    pub highest_ext_ts: Option<u64>,
    /// Extended sequence number of the last keyframe start.
    #[prost(uint64, optional, tag = "9")]
    pub last_keyframe_seq: Option<u64>,
    /// Bytes received in the current bitrate window.
    #[prost(uint64, tag = "10")]
    pub window_bytes: u64,
    /// A keyframe of this stream is wanted (older writers kept one flag per track, in
    /// `IncomingTrackState`).
    #[prost(bool, tag = "11")]
    pub keyframe_wanted: bool,
    /// Age of the last keyframe request for this stream, in ms.
    #[prost(uint64, optional, tag = "12")]
    pub last_pli_age_ms: Option<u64>,
}

/// An outgoing RTP stream towards a subscriber.
#[derive(Clone, PartialEq, prost::Message)]
pub struct OutgoingStreamState {
    /// The munger.
    #[prost(message, optional, tag = "1")]
    pub munger: Option<MungerState>,
    /// RTX SSRC, if negotiated.
    #[prost(uint32, optional, tag = "2")]
    pub rtx_ssrc: Option<u32>,
    /// Next RTX sequence number.
    #[prost(uint32, tag = "3")]
    pub rtx_seq: u32,
    /// Packets sent (for SR).
    #[prost(uint64, tag = "4")]
    pub packets_sent: u64,
    /// Payload octets sent (for SR).
    #[prost(uint64, tag = "5")]
    pub octets_sent: u64,
    /// Packets retransmitted.
    #[prost(uint64, tag = "6")]
    pub retransmitted: u64,
    /// Index of the subscriber's m-line.
    #[prost(uint32, tag = "7")]
    pub index: u32,
    /// The source layer (SSRC) the allocator chose for it (simulcast sources).
    #[prost(uint32, optional, tag = "8")]
    pub target_ssrc: Option<u32>,
    /// How much longer it may not go up a layer (it went down lately), in ms.
    #[prost(uint64, optional, tag = "9")]
    pub held_for_ms: Option<u64>,
    /// The layers it gets of a scalable (SVC) source.
    #[prost(message, optional, tag = "10")]
    pub svc: Option<SvcSelectorState>,
    /// The highest temporal layer it takes (its frame-rate cap).
    #[prost(uint32, optional, tag = "11")]
    pub temporal_cap: Option<u32>,
    /// How long its next hold after a failed climb lasts, in ms (0: the first hold).
    #[prost(uint64, tag = "12")]
    pub hold_ms: u64,
    /// How long ago it last went up a layer, in ms.
    #[prost(uint64, optional, tag = "13")]
    pub up_ago_ms: Option<u64>,
    /// The highest temporal layer of its target the allocator chose (absent: all of them).
    #[prost(uint32, optional, tag = "14")]
    pub target_temporal: Option<u32>,
}

/// A viewer's layer selector for a scalable source (`ferry_rtc::codec::layers`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct SvcSelectorState {
    /// K-SVC (one spatial layer between key pictures), else full SVC.
    #[prost(bool, tag = "1")]
    pub ksvc: bool,
    /// Target spatial layer.
    #[prost(uint32, tag = "2")]
    pub target_spatial: u32,
    /// Target temporal layer.
    #[prost(uint32, tag = "3")]
    pub target_temporal: u32,
    /// Layers forwarded now: spatial << 8 | temporal.
    #[prost(uint32, optional, tag = "4")]
    pub current: Option<u32>,
    /// Highest spatial layer the stream showed.
    #[prost(uint32, tag = "5")]
    pub max_spatial_seen: u32,
    /// Highest temporal layer the stream showed.
    #[prost(uint32, tag = "6")]
    pub max_temporal_seen: u32,
    /// Last picture id seen.
    #[prost(uint32, optional, tag = "7")]
    pub last_picture: Option<u32>,
    /// Dependency descriptor: the structure in force (its fingerprint).
    #[prost(uint32, optional, tag = "8")]
    pub dd_structure: Option<u32>,
    /// Dependency descriptor: the chosen decode target.
    #[prost(uint32, optional, tag = "9")]
    pub dd_target: Option<u32>,
    /// Dependency descriptor: chains intact (bitmask).
    #[prost(uint32, tag = "10")]
    pub dd_chains_intact: u32,
}
