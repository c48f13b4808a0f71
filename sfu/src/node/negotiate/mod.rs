//! Offer/answer: turns a WHIP or WHEP offer into the media parameters a
//! session runs with and the SDP answer that tells the peer so.
//!
//! We answer with only what we support (Opus, VP8, H.264 packetization-mode
//! 1, VP9 and AV1 profile 0, NACK/RTX, PLI/FIR, transport-wide CC or REMB), ICE-lite with host
//! candidates, BUNDLE and rtcp-mux required, and reject what we cannot do
//! with a reason the HTTP layer returns as 400/422.

use std::fmt::Write as _;
use std::net::SocketAddr;

use crate::codec::Codec;
use crate::dtls::DtlsRole;
use crate::ice::IceCredentials;
use crate::media::line::MediaLine;
use crate::node::signal::{SessionKind, SignalError};
use crate::sdp::{Direction, MediaKind, MediaView, SessionDescription, Setup};

pub use ferry_rtc::sdp::extmap::{
    EXT_ABS_SEND_TIME, EXT_AUDIO_LEVEL, EXT_DEPENDENCY_DESCRIPTOR, EXT_MID, EXT_RID, EXT_RRID,
    EXT_TRANSPORT_CC, EXT_VIDEO_ORIENTATION,
};

/// The codecs a node carries, as a reason names them.
const TAKES: &str = "opus, VP8, H264 packetization-mode=1, VP9 and AV1 profile 0";

const PUBLISH_EXTS: &[&str] = &[
    EXT_MID,
    EXT_RID,
    EXT_RRID,
    EXT_ABS_SEND_TIME,
    EXT_AUDIO_LEVEL,
    EXT_VIDEO_ORIENTATION,
    EXT_TRANSPORT_CC,
    EXT_DEPENDENCY_DESCRIPTOR,
];
const VIEW_EXTS: &[&str] = &[
    EXT_ABS_SEND_TIME,
    EXT_AUDIO_LEVEL,
    EXT_VIDEO_ORIENTATION,
    EXT_TRANSPORT_CC,
    EXT_DEPENDENCY_DESCRIPTOR,
];

/// What negotiation decided for a session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Negotiated {
    /// The peer's ICE credentials.
    pub remote_ice: IceCredentials,
    /// SHA-256 fingerprint the peer's DTLS certificate must have.
    pub remote_fingerprint: Vec<u8>,
    /// Our DTLS role.
    pub dtls_role: DtlsRole,
    /// One entry per offered m-line, in order.
    pub media: Vec<MediaLine>,
    /// The SDP answer.
    pub answer: String,
}

/// Our side of the answer.
#[derive(Debug, Clone)]
pub struct AnswerParams<'a> {
    /// Our ICE credentials.
    pub local_ice: &'a IceCredentials,
    /// Our certificate fingerprint.
    pub fingerprint: &'a [u8],
    /// Host candidates to announce.
    pub candidates: &'a [SocketAddr],
    /// `o=` session id.
    pub origin_id: u64,
    /// Stream name (viewer `msid`).
    pub stream: &'a str,
}

fn bad(reason: impl Into<String>) -> SignalError {
    SignalError::BadSdp(reason.into())
}

fn unsupported(reason: impl Into<String>) -> SignalError {
    SignalError::Unsupported(reason.into())
}

struct Transport {
    ice: IceCredentials,
    fingerprint: Vec<u8>,
    role: DtlsRole,
    bundle: Vec<String>,
}

/// Whether an m-line is live: a port other than 0, or port 0 with `a=bundle-only` inside the
/// BUNDLE group (JSEP §5.2.1, RFC 8843 §7.3: what GStreamer's webrtcbin and browsers with
/// `bundlePolicy: "max-bundle"` send for every line after the first).
fn live(m: &MediaView<'_>, bundle: &[String]) -> bool {
    m.port != 0
        || (m.media().has_attr("bundle-only")
            && m.mid().is_some_and(|mid| bundle.iter().any(|b| b == mid)))
}

/// Checks what every WebRTC offer must carry and extracts the transport. It comes from the
/// BUNDLE group's tagged (first) line, else from the first live line: bundle-only lines need
/// not repeat the transport's attributes (RFC 8843 §7.2).
fn transport(sdp: &SessionDescription) -> Result<Transport, SignalError> {
    let bundle = sdp.group_bundle().unwrap_or_default();
    let tagged = bundle.first().and_then(|mid| sdp.media_by_mid(mid));
    let first = tagged
        .filter(|m| m.port != 0 && m.kind != MediaKind::Application)
        .or_else(|| {
            sdp.media_views()
                .find(|m| m.port != 0 && m.kind != MediaKind::Application)
        })
        .ok_or_else(|| bad("offer has no usable audio or video m-line"))?;
    let (Some(ufrag), Some(pwd)) = (first.ice_ufrag(), first.ice_pwd()) else {
        return Err(unsupported(
            "not a WebRTC offer: no ICE credentials (a=ice-ufrag/a=ice-pwd)",
        ));
    };
    if ufrag.len() < 4 || pwd.len() < 22 {
        return Err(bad(
            "ICE ufrag must be ≥ 4 and pwd ≥ 22 characters (RFC 8445)",
        ));
    }
    let fps = first.fingerprints();
    if fps.is_empty() {
        return Err(unsupported(
            "not a WebRTC offer: no DTLS fingerprint (a=fingerprint)",
        ));
    }
    let fingerprint = fps
        .iter()
        .find(|f| f.algorithm.eq_ignore_ascii_case("sha-256") && f.bytes.len() == 32)
        .ok_or_else(|| unsupported("only sha-256 DTLS fingerprints are supported"))?
        .bytes
        .clone();
    let role = match first.setup() {
        Some(Setup::ActPass) | Some(Setup::Passive) | None => DtlsRole::Client,
        Some(Setup::Active) => DtlsRole::Server,
        Some(Setup::HoldConn) => return Err(unsupported("a=setup:holdconn is not supported")),
    };
    if !first.rtcp_mux() {
        return Err(unsupported("offer must use a=rtcp-mux"));
    }
    check_bundle_payload_types(sdp, &bundle)?;
    let live_lines = sdp.media_views().filter(|m| live(m, &bundle)).count();
    if live_lines > 1 && bundle.is_empty() {
        return Err(unsupported(
            "offer must use BUNDLE (a=group:BUNDLE); Ferry serves one transport per session",
        ));
    }
    Ok(Transport {
        ice: IceCredentials {
            ufrag: ufrag.to_owned(),
            pwd: pwd.to_owned(),
        },
        fingerprint,
        role,
        bundle,
    })
}

/// One BUNDLE group maps each payload type to one codec (RFC 8843 §9.1: the RTP packets of all
/// its m-lines share one transport, and a receiver tells their codecs apart by payload type).
/// Payload types without `a=rtpmap` (static ones) are the same everywhere by definition.
fn check_bundle_payload_types(
    sdp: &SessionDescription,
    bundle: &[String],
) -> Result<(), SignalError> {
    let mut seen: Vec<(u8, String, u32, u16, String)> = Vec::new();
    for m in sdp.media_views().filter(|m| live(m, bundle)) {
        let Some(mid) = m.mid().filter(|mid| bundle.iter().any(|b| b == mid)) else {
            continue;
        };
        for pt in m.payload_types() {
            let Some(map) = m.rtpmap(pt) else { continue };
            let channels = map.channels.unwrap_or(1);
            match seen.iter().find(|s| s.0 == pt) {
                Some((_, enc, rate, ch, other))
                    if !enc.eq_ignore_ascii_case(&map.encoding)
                        || *rate != map.clock_rate
                        || *ch != channels =>
                {
                    return Err(bad(format!(
                        "payload type {pt} is {enc}/{rate} on m-line {other} and {}/{} on m-line {mid}: \
                         one BUNDLE group maps each payload type to one codec (RFC 8843 §9.1; \
                         GStreamer: give each payloader its own pt)",
                        map.encoding, map.clock_rate
                    )));
                }
                Some(_) => {}
                None => seen.push((
                    pt,
                    map.encoding.clone(),
                    map.clock_rate,
                    channels,
                    mid.to_owned(),
                )),
            }
        }
    }
    Ok(())
}

/// Negotiates a WHIP offer.
pub fn negotiate_publish(offer: &str, p: &AnswerParams<'_>) -> Result<Negotiated, SignalError> {
    let sdp = SessionDescription::parse(offer).map_err(|e| bad(e.to_string()))?;
    let t = transport(&sdp)?;
    let mut media = Vec::new();
    for (i, m) in sdp.media_views().enumerate() {
        media.push(publish_line(&m, i, &t)?);
    }
    if !media.iter().any(|m| m.accepted) {
        let why = sdp
            .media_views()
            .filter(|m| live(m, &t.bundle))
            .find_map(|m| why_unsupported(&m).map(|w| format!("m={}: {w}", m.kind.as_str())));
        return Err(unsupported(match why {
            Some(why) => format!("offer sends no supported media: {why}"),
            None => format!(
                "offer sends no supported media (Ferry takes {TAKES} on sendonly/sendrecv m-lines)"
            ),
        }));
    }
    let answer = write_answer(&sdp, &media, &t, p, SessionKind::Publish);
    Ok(Negotiated {
        remote_ice: t.ice,
        remote_fingerprint: t.fingerprint,
        dtls_role: t.role,
        media,
        answer,
    })
}

/// Negotiates a WHEP offer against the publisher's media lines.
pub fn negotiate_view(
    offer: &str,
    sources: &[MediaLine],
    p: &AnswerParams<'_>,
    next_ssrc: &mut dyn FnMut() -> u32,
) -> Result<Negotiated, SignalError> {
    let sdp = SessionDescription::parse(offer).map_err(|e| bad(e.to_string()))?;
    let t = transport(&sdp)?;
    let mut taken = vec![false; sources.len()];
    let mut media = Vec::new();
    let mut mismatch = None;
    for (i, m) in sdp.media_views().enumerate() {
        let line = view_line(&m, i, &t, sources, &mut taken, next_ssrc, &mut mismatch);
        media.push(line);
    }
    if !media.iter().any(|m| m.accepted) {
        return Err(unsupported(mismatch.unwrap_or_else(|| {
            "offer receives none of the stream's tracks (needs recvonly/sendrecv audio or video)"
                .into()
        })));
    }
    let answer = write_answer(&sdp, &media, &t, p, SessionKind::View);
    Ok(Negotiated {
        remote_ice: t.ice,
        remote_fingerprint: t.fingerprint,
        dtls_role: t.role,
        media,
        answer,
    })
}

fn rejected(m: &MediaView<'_>, i: usize) -> MediaLine {
    MediaLine {
        mid: m.mid().map_or_else(|| i.to_string(), str::to_owned),
        video: m.kind == MediaKind::Video,
        accepted: false,
        codec: Codec::Opus,
        pt: 0,
        rtx_pt: None,
        fmtp: String::new(),
        nack: false,
        pli: false,
        fir: false,
        remb: false,
        twcc: false,
        extmap: Vec::new(),
        remote_ssrcs: Vec::new(),
        rids: Vec::new(),
        local_ssrc: 0,
        local_rtx_ssrc: None,
        source: None,
        rejected: None,
    }
}

fn usable(m: &MediaView<'_>, t: &Transport) -> Result<bool, SignalError> {
    if !live(m, &t.bundle) || !matches!(m.kind, MediaKind::Audio | MediaKind::Video) {
        return Ok(false);
    }
    if !m.proto.contains("SAVPF") {
        return Err(unsupported(format!(
            "m={} uses {}; WebRTC needs UDP/TLS/RTP/SAVPF",
            m.kind.as_str(),
            m.proto
        )));
    }
    let Some(mid) = m.mid() else {
        return Err(bad("every m-line needs a=mid"));
    };
    if t.bundle.is_empty() {
        // One live line without BUNDLE: it is the transport's line (rtcp-mux checked there).
        return Ok(true);
    }
    // Bundled lines share the tagged line's transport, rtcp-mux included (RFC 8843 §7.2).
    Ok(t.bundle.iter().any(|b| b == mid))
}

/// Why [`usable`] said no to a line, where the peer should hear it: `None` for a line the offer
/// disabled itself (port 0).
fn why_not_usable(m: &MediaView<'_>, t: &Transport) -> Option<String> {
    if !live(m, &t.bundle) {
        return None;
    }
    Some(match &m.kind {
        MediaKind::Audio | MediaKind::Video => {
            "not in the offer's BUNDLE group: Ferry serves one transport per session".into()
        }
        MediaKind::Application => "data channels (m=application) are not supported".into(),
        MediaKind::Other(kind) => format!("m={kind} is not supported"),
    })
}

/// Why none of a line's payload types is one we carry, when it offers a codec we know in a
/// form we do not take (the reason a 4xx names instead of "no supported media").
fn why_unsupported(m: &MediaView<'_>) -> Option<String> {
    m.payload_types().into_iter().find_map(|pt| {
        let map = m.rtpmap(pt)?;
        let codec = Codec::from_encoding_name(&map.encoding)?;
        if map.clock_rate != codec.clock_rate() {
            return Some(format!(
                "payload type {pt} is {}/{} but {} runs at {} Hz",
                map.encoding,
                map.clock_rate,
                codec.encoding_name(),
                codec.clock_rate()
            ));
        }
        match codec {
            Codec::Opus => Some(format!(
                "payload type {pt} is opus with {} channels; SDP describes Opus as opus/48000/2 (RFC 7587)",
                map.channels.unwrap_or(1)
            )),
            Codec::H264 => {
                let mode = m
                    .fmtp(pt)
                    .and_then(|f| f.param("packetization-mode").map(str::to_owned));
                Some(match mode {
                    Some(mode) => format!(
                        "payload type {pt} is H264 packetization-mode={mode}; Ferry takes packetization-mode=1"
                    ),
                    None => format!(
                        "payload type {pt} is H264 without packetization-mode (which means 0, single NAL units); Ferry takes packetization-mode=1: add a=fmtp:{pt} packetization-mode=1"
                    ),
                })
            }
            Codec::Vp9 => {
                let profile = m.fmtp(pt).and_then(|f| f.param("profile-id").map(str::to_owned));
                Some(format!(
                    "payload type {pt} is VP9 profile-id={}; Ferry takes profile 0",
                    profile.unwrap_or_default()
                ))
            }
            Codec::Av1 => {
                let profile = m.fmtp(pt).and_then(|f| f.param("profile").map(str::to_owned));
                Some(format!(
                    "payload type {pt} is AV1 profile={}; Ferry takes profile 0 (Main)",
                    profile.unwrap_or_default()
                ))
            }
            Codec::Vp8 => None,
        }
    })
}

/// The codec for a payload type, if we carry it.
fn codec_of(m: &MediaView<'_>, pt: u8) -> Option<Codec> {
    let map = m.rtpmap(pt)?;
    let codec = Codec::from_encoding_name(&map.encoding)?;
    if map.clock_rate != codec.clock_rate() {
        return None;
    }
    match codec {
        // RFC 7587 writes opus/48000/2; a missing channel count is taken as that (lenient).
        Codec::Opus => matches!(map.channels, None | Some(2)).then_some(codec),
        Codec::H264 => {
            let fmtp = m.fmtp(pt)?;
            (fmtp.param("packetization-mode") == Some("1")).then_some(codec)
        }
        Codec::Vp8 => Some(codec),
        // Profile 0 (8-bit 4:2:0) only: a viewer must decode what the publisher sends, and
        // every WebRTC browser decodes profile 0.
        Codec::Vp9 => m
            .fmtp(pt)
            .and_then(|f| f.param("profile-id").map(str::to_owned))
            .is_none_or(|p| p == "0")
            .then_some(codec),
        Codec::Av1 => m
            .fmtp(pt)
            .and_then(|f| f.param("profile").map(str::to_owned))
            .is_none_or(|p| p == "0")
            .then_some(codec),
    }
}

fn fmtp_string(m: &MediaView<'_>, pt: u8) -> String {
    m.fmtp(pt)
        .map(|f| {
            f.params
                .iter()
                .map(|(k, v)| match v {
                    Some(v) => format!("{k}={v}"),
                    None => k.clone(),
                })
                .collect::<Vec<_>>()
                .join(";")
        })
        .unwrap_or_default()
}

/// What a line negotiated for `pt`.
#[derive(Debug, Clone, Copy, Default)]
struct Feedback {
    nack: bool,
    pli: bool,
    fir: bool,
    remb: bool,
    twcc: bool,
}

/// The feedback we answer for `pt`: transport-wide CC where the peer offers it with the
/// sequence number extension, else REMB where it offers that (the two are alternatives: a
/// browser given both lets REMB cap its own send-side estimate).
fn feedback(m: &MediaView<'_>, pt: u8) -> Feedback {
    let fbs = m.rtcp_fbs(pt);
    let has = |kind: &str, param: Option<&str>| {
        fbs.iter()
            .any(|f| f.kind == kind && f.param.as_deref() == param)
    };
    let twcc = has("transport-cc", None) && m.extmaps().iter().any(|e| e.uri == EXT_TRANSPORT_CC);
    Feedback {
        nack: has("nack", None),
        pli: has("nack", Some("pli")),
        fir: has("ccm", Some("fir")),
        remb: !twcc && has("goog-remb", None),
        twcc,
    }
}

/// The extensions of `m` we take, of `allowed`; the transport-wide sequence number only with
/// its feedback.
fn extmaps(m: &MediaView<'_>, allowed: &[&str], twcc: bool) -> Vec<(u8, String)> {
    m.extmaps()
        .into_iter()
        .filter(|e| allowed.contains(&e.uri.as_str()))
        .filter(|e| twcc || e.uri != EXT_TRANSPORT_CC)
        .map(|e| (e.id, e.uri))
        .collect()
}

fn publish_line(m: &MediaView<'_>, i: usize, t: &Transport) -> Result<MediaLine, SignalError> {
    let mut line = rejected(m, i);
    if !usable(m, t)? {
        line.rejected = why_not_usable(m, t);
        return Ok(line);
    }
    if !matches!(m.direction(), Direction::SendOnly | Direction::SendRecv) {
        line.rejected = Some(format!(
            "a WHIP offer's m={} line must send (sendonly or sendrecv)",
            m.kind.as_str()
        ));
        return Ok(line);
    }
    let Some((pt, codec)) = m
        .payload_types()
        .into_iter()
        .find_map(|pt| codec_of(m, pt).map(|c| (pt, c)))
    else {
        line.rejected = Some(why_unsupported(m).unwrap_or_else(|| {
            format!(
                "m={} offers no codec Ferry takes ({TAKES})",
                m.kind.as_str()
            )
        }));
        return Ok(line);
    };
    if codec.is_video() != (m.kind == MediaKind::Video) {
        line.rejected = Some(format!(
            "payload type {pt} is {} on an m={} line",
            codec.encoding_name(),
            m.kind.as_str()
        ));
        return Ok(line);
    }
    let fb = feedback(m, pt);
    line.accepted = true;
    line.codec = codec;
    line.pt = pt;
    line.rtx_pt = if fb.nack { m.rtx_for(pt) } else { None };
    line.fmtp = fmtp_string(m, pt);
    (line.nack, line.pli, line.fir, line.remb, line.twcc) =
        (fb.nack, fb.pli, fb.fir, fb.remb, fb.twcc);
    line.extmap = extmaps(m, PUBLISH_EXTS, fb.twcc);
    line.remote_ssrcs = m.declared_ssrcs();
    if let Some(sim) = m.simulcast() {
        line.rids = sim
            .send
            .iter()
            .filter_map(|alts| alts.first())
            .map(|r| r.id.clone())
            .collect();
    }
    Ok(line)
}

/// H.264 profile (profile_idc + constraint flags) of a profile-level-id.
fn h264_profile(fmtp: &str) -> Option<String> {
    fmtp.split(';')
        .filter_map(|p| p.split_once('='))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case("profile-level-id"))
        .map(|(_, v)| v.trim().get(..4).unwrap_or("").to_ascii_lowercase())
}

#[allow(clippy::too_many_arguments)]
fn view_line(
    m: &MediaView<'_>,
    i: usize,
    t: &Transport,
    sources: &[MediaLine],
    taken: &mut [bool],
    next_ssrc: &mut dyn FnMut() -> u32,
    mismatch: &mut Option<String>,
) -> MediaLine {
    let mut line = rejected(m, i);
    if !matches!(usable(m, t), Ok(true)) {
        line.rejected = why_not_usable(m, t);
        return line;
    }
    if !matches!(m.direction(), Direction::RecvOnly | Direction::SendRecv) {
        line.rejected = Some(format!(
            "a WHEP offer's m={} line must receive (recvonly or sendrecv)",
            m.kind.as_str()
        ));
        return line;
    }
    let video = m.kind == MediaKind::Video;
    let Some(src_idx) = sources
        .iter()
        .enumerate()
        .position(|(j, s)| s.accepted && s.video == video && !taken[j])
    else {
        // The stream has no track of this kind (a video-only publisher, say). Rejecting the
        // line would reject the offer's BUNDLE tag when it is the first one, which browsers
        // refuse ("Failed to setup RTCP mux"): accept it, inactive, in the bundle.
        let pt = m
            .payload_types()
            .into_iter()
            .find(|pt| codec_of(m, *pt).is_some_and(|c| c.is_video() == video));
        if let Some(pt) = pt {
            line.accepted = true;
            line.codec = codec_of(m, pt).unwrap_or(line.codec);
            line.pt = pt;
            line.fmtp = fmtp_string(m, pt);
            line.local_ssrc = next_ssrc();
            line.source = None;
        }
        return line;
    };
    let src = &sources[src_idx];
    let candidates: Vec<u8> = m
        .payload_types()
        .into_iter()
        .filter(|pt| codec_of(m, *pt) == Some(src.codec))
        .collect();
    let pick = if src.codec == Codec::H264 {
        let want = h264_profile(&src.fmtp);
        candidates
            .iter()
            .copied()
            .find(|pt| h264_profile(&fmtp_string(m, *pt)) == want)
            .or_else(|| candidates.first().copied())
    } else {
        candidates.first().copied()
    };
    let Some(pt) = pick else {
        let why = why_unsupported(m).map_or_else(String::new, |w| format!(" ({w})"));
        let reason = format!(
            "the stream's {} track is {} and the offer does not accept it{why}",
            if video { "video" } else { "audio" },
            src.codec.encoding_name()
        );
        line.rejected = Some(reason.clone());
        *mismatch = Some(reason);
        return line;
    };
    taken[src_idx] = true;
    // A viewer's transport-wide CC feedback (or its REMB, where it has no transport-wide CC)
    // is what its bandwidth estimate comes from.
    let fb = feedback(m, pt);
    line.accepted = true;
    line.codec = src.codec;
    line.pt = pt;
    line.rtx_pt = if fb.nack { m.rtx_for(pt) } else { None };
    line.fmtp = fmtp_string(m, pt);
    (line.nack, line.pli, line.fir, line.remb, line.twcc) =
        (fb.nack, fb.pli, fb.fir, fb.remb, fb.twcc);
    line.extmap = extmaps(m, VIEW_EXTS, fb.twcc);
    line.local_ssrc = next_ssrc();
    line.local_rtx_ssrc = line.rtx_pt.map(|_| next_ssrc());
    line.source = Some(src_idx);
    line
}

fn write_answer(
    offer: &SessionDescription,
    media: &[MediaLine],
    t: &Transport,
    p: &AnswerParams<'_>,
    kind: SessionKind,
) -> String {
    let mut s = String::with_capacity(2048);
    let fp = crate::cert::format_fingerprint(p.fingerprint);
    let setup = match t.role {
        DtlsRole::Client => "active",
        DtlsRole::Server => "passive",
    };
    let _ = write!(
        s,
        "v=0\r\no=- {} 2 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\n",
        p.origin_id
    );
    let mids: Vec<&str> = media
        .iter()
        .filter(|m| m.accepted)
        .map(|m| m.mid.as_str())
        .collect();
    let _ = write!(s, "a=group:BUNDLE {}\r\n", mids.join(" "));
    if offer.extmap_allow_mixed() || offer.media_views().any(|m| m.extmap_allow_mixed()) {
        s.push_str("a=extmap-allow-mixed\r\n");
    }
    s.push_str("a=ice-lite\r\n");
    if kind == SessionKind::View {
        s.push_str("a=msid-semantic: WMS *\r\n");
    }
    for (line, m) in media.iter().zip(offer.media_views()) {
        if !line.accepted {
            let fmt = m.formats.first().map_or("0", String::as_str);
            // With the transport's attributes: webrtcbin refuses an answer whose rejected
            // line lacks them ("No fingerprint lines in sdp for media 1"); browsers ignore them.
            let _ = write!(
                s,
                "m={} 0 {} {}\r\nc=IN IP4 0.0.0.0\r\na=ice-ufrag:{}\r\na=ice-pwd:{}\r\na=fingerprint:sha-256 {fp}\r\na=setup:{setup}\r\na=mid:{}\r\na=inactive\r\na=rtcp-mux\r\n",
                m.kind.as_str(),
                m.proto,
                fmt,
                p.local_ice.ufrag,
                p.local_ice.pwd,
                line.mid
            );
            continue;
        }
        let kind_str = if line.video { "video" } else { "audio" };
        let _ = write!(s, "m={kind_str} 9 UDP/TLS/RTP/SAVPF {}", line.pt);
        if let Some(rtx) = line.rtx_pt {
            let _ = write!(s, " {rtx}");
        }
        s.push_str("\r\nc=IN IP4 0.0.0.0\r\na=rtcp:9 IN IP4 0.0.0.0\r\n");
        let _ = write!(
            s,
            "a=ice-ufrag:{}\r\na=ice-pwd:{}\r\na=fingerprint:sha-256 {fp}\r\na=setup:{setup}\r\na=mid:{}\r\n",
            p.local_ice.ufrag, p.local_ice.pwd, line.mid
        );
        for (id, uri) in &line.extmap {
            let _ = write!(s, "a=extmap:{id} {uri}\r\n");
        }
        // A viewer's line with nothing to play is inactive (see `view_line`).
        let silent = kind == SessionKind::View && line.source.is_none();
        s.push_str(match kind {
            SessionKind::Publish => "a=recvonly\r\n",
            SessionKind::View if silent => "a=inactive\r\n",
            SessionKind::View => "a=sendonly\r\n",
        });
        if kind == SessionKind::View && !silent {
            let _ = write!(s, "a=msid:{} {}-{}\r\n", p.stream, p.stream, line.mid);
        }
        s.push_str("a=rtcp-mux\r\n");
        if m.rtcp_rsize() {
            s.push_str("a=rtcp-rsize\r\n");
        }
        let codec = line.codec;
        match codec {
            Codec::Opus => {
                let _ = write!(s, "a=rtpmap:{} opus/48000/2\r\n", line.pt);
            }
            _ => {
                let _ = write!(
                    s,
                    "a=rtpmap:{} {}/90000\r\n",
                    line.pt,
                    codec.encoding_name()
                );
            }
        }
        for (on, fb) in [
            (line.remb, "goog-remb"),
            (line.twcc, "transport-cc"),
            (line.nack, "nack"),
            (line.pli, "nack pli"),
            (line.fir, "ccm fir"),
        ] {
            if on {
                let _ = write!(s, "a=rtcp-fb:{} {fb}\r\n", line.pt);
            }
        }
        if !line.fmtp.is_empty() {
            let _ = write!(s, "a=fmtp:{} {}\r\n", line.pt, line.fmtp);
        }
        if let Some(rtx) = line.rtx_pt {
            let _ = write!(
                s,
                "a=rtpmap:{rtx} rtx/90000\r\na=fmtp:{rtx} apt={}\r\n",
                line.pt
            );
        }
        if kind == SessionKind::Publish && !line.rids.is_empty() {
            for rid in &line.rids {
                let _ = write!(s, "a=rid:{rid} recv\r\n");
            }
            let _ = write!(s, "a=simulcast:recv {}\r\n", line.rids.join(";"));
        }
        if kind == SessionKind::View && !silent {
            let cname = format!("ferry-{}", p.stream);
            if let Some(rtx) = line.local_rtx_ssrc {
                let _ = write!(s, "a=ssrc-group:FID {} {rtx}\r\n", line.local_ssrc);
            }
            for ssrc in std::iter::once(line.local_ssrc).chain(line.local_rtx_ssrc) {
                let _ = write!(
                    s,
                    "a=ssrc:{ssrc} cname:{cname}\r\na=ssrc:{ssrc} msid:{} {}-{}\r\n",
                    p.stream, p.stream, line.mid
                );
            }
        }
        write_candidates(&mut s, p.candidates);
    }
    s
}

/// `a=candidate` lines for our host candidates plus `a=end-of-candidates`.
pub fn write_candidates(s: &mut String, candidates: &[SocketAddr]) {
    for (i, c) in candidates.iter().enumerate() {
        let priority = (126u32 << 24) | ((65535 - i as u32) << 8) | 255;
        let _ = write!(
            s,
            "a=candidate:{} 1 udp {priority} {} {} typ host\r\n",
            i + 1,
            c.ip(),
            c.port()
        );
    }
    s.push_str("a=end-of-candidates\r\n");
}

#[cfg(test)]
mod tests;
