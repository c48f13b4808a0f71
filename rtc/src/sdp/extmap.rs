//! RTP header extension URIs (`a=extmap`) that Ferry negotiates.

/// RFC 8843 `mid` header extension.
pub const EXT_MID: &str = "urn:ietf:params:rtp-hdrext:sdes:mid";
/// RFC 8852 `rid` header extension.
pub const EXT_RID: &str = "urn:ietf:params:rtp-hdrext:sdes:rtp-stream-id";
/// RFC 8852 repaired `rid` header extension (on RTX packets).
pub const EXT_RRID: &str = "urn:ietf:params:rtp-hdrext:sdes:repaired-rtp-stream-id";
/// Absolute send time (used by REMB bandwidth estimation).
pub const EXT_ABS_SEND_TIME: &str = "http://www.webrtc.org/experiments/rtp-hdrext/abs-send-time";
/// Transport-wide sequence number (transport-wide congestion control feedback, [`crate::twcc`]).
pub const EXT_TRANSPORT_CC: &str =
    "http://www.ietf.org/id/draft-holmer-rmcat-transport-wide-cc-extensions-01";
/// AV1's dependency descriptor (the AV1 RTP specification, appendix A): the layers of each
/// frame, read by the node to give a viewer some of them ([`crate::codec::av1`]).
pub const EXT_DEPENDENCY_DESCRIPTOR: &str =
    "https://aomediacodec.github.io/av1-rtp-spec/#dependency-descriptor-rtp-header-extension";
/// RFC 6464 audio level.
pub const EXT_AUDIO_LEVEL: &str = "urn:ietf:params:rtp-hdrext:ssrc-audio-level";
/// 3GPP coordination of video orientation.
pub const EXT_VIDEO_ORIENTATION: &str = "urn:3gpp:video-orientation";
