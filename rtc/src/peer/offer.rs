//! The peer's side of offer/answer: a Chrome-like offer, reading the server's answer, and the
//! trickle-ICE fragments of an ICE restart (RFC 8840, RFC 9725 §4.4).

use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr};

use crate::codec::Codec;
use crate::dtls::DtlsRole;
use crate::ice::IceCredentials;
use crate::sdp::extmap::{
    EXT_ABS_SEND_TIME, EXT_AUDIO_LEVEL, EXT_MID, EXT_RID, EXT_RRID, EXT_TRANSPORT_CC,
};
use crate::sdp::{MediaKind, MediaView, SdpFrag, SessionDescription, Setup};

use super::PeerError;

/// Payload types of the offer, as Chrome numbers them.
pub(super) const PT_OPUS: u8 = 111;
pub(super) const PT_VP8: u8 = 96;
pub(super) const PT_VP8_RTX: u8 = 97;
pub(super) const PT_H264: u8 = 102;
pub(super) const PT_H264_RTX: u8 = 103;
/// Priority of the one host candidate of an answer (RFC 8445 §5.1.2.1: type preference 126,
/// local preference 65535, component 1).
const HOST_PRIORITY: u32 = (126 << 24) | (65535 << 8) | 255;
const H264_FMTP: &str = "level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=42e01f";
/// The transport-wide sequence number's id in our offer, Chrome's.
pub(super) const EXT_TRANSPORT_CC_ID: u8 = 3;
/// The rid and repaired-rid extensions' ids in a simulcast offer, Chrome's.
pub(super) const EXT_RID_ID: u8 = 10;
pub(super) const EXT_RRID_ID: u8 = 11;

/// One m-line we offer.
#[derive(Debug, Clone)]
pub(super) struct OfferLine {
    pub mid: String,
    pub video: bool,
    /// We send on it (publisher) or receive (viewer).
    pub send: bool,
    /// (codec, pt, rtx pt) in preference order.
    pub codecs: Vec<(Codec, u8, Option<u8>)>,
    /// Publisher: (media, rtx) SSRCs we will send.
    pub ssrc: Option<(u32, Option<u32>)>,
    /// Publisher: simulcast rids we send, lowest first (no SSRCs are declared then).
    pub rids: Vec<String>,
}

/// Everything the offer said that the answer must be read against.
#[derive(Debug, Clone)]
pub(super) struct OfferPlan {
    pub session_id: u64,
    pub stream: String,
    pub cname: String,
    pub lines: Vec<OfferLine>,
    /// Offer transport-wide CC on the lines we receive on ([`super::PeerConfig::transport_cc`]).
    pub transport_cc: bool,
}

impl OfferPlan {
    /// Writes the offer.
    pub fn write(&self, ice: &IceCredentials, fingerprint: &str) -> String {
        let mut s = String::with_capacity(2048);
        let mids: Vec<&str> = self.lines.iter().map(|l| l.mid.as_str()).collect();
        let _ = write!(
            s,
            "v=0\r\no=- {} 2 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\na=group:BUNDLE {}\r\n\
             a=extmap-allow-mixed\r\na=msid-semantic: WMS {}\r\n",
            self.session_id,
            mids.join(" "),
            self.stream
        );
        for line in &self.lines {
            self.write_line(&mut s, line, ice, fingerprint);
        }
        s
    }

    /// Writes our answer to `offer` (read into `a` against lines from [`lines_for_offer`]):
    /// an accepted line receives its one codec and that codec's RTX, with the header
    /// extensions and feedback of the offer we use; a rejected one gets port 0. `host` is our
    /// one candidate.
    pub fn write_answer(
        &self,
        offer: &str,
        a: &Answer,
        ice: &IceCredentials,
        fingerprint: &str,
        host: SocketAddr,
    ) -> String {
        let offered = SessionDescription::parse(offer).ok();
        let mut s = String::with_capacity(2048);
        let bundle: Vec<&str> = a
            .lines
            .iter()
            .filter(|l| l.accepted)
            .map(|l| l.mid.as_str())
            .collect();
        let _ = write!(
            s,
            "v=0\r\no=- {} 2 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\na=group:BUNDLE {}\r\n\
             a=msid-semantic: WMS\r\n",
            self.session_id,
            bundle.join(" ")
        );
        let setup = match a.dtls_role {
            DtlsRole::Client => "active",
            DtlsRole::Server => "passive",
        };
        let ip = if host.is_ipv4() { "IP4" } else { "IP6" };
        for (ours, l) in self.lines.iter().zip(&a.lines) {
            if !l.accepted {
                let m = offered
                    .as_ref()
                    .and_then(|o| o.media_by_mid(&ours.mid))
                    .map(|m| m.media());
                let (kind, proto, fmt) = m
                    .map_or(("audio", "UDP/TLS/RTP/SAVPF", "0".into()), |m| {
                        (m.kind.as_str(), m.proto.as_str(), m.formats.join(" "))
                    });
                let _ = write!(
                    s,
                    "m={kind} 0 {proto} {fmt}\r\nc=IN {ip} 0.0.0.0\r\na=mid:{}\r\n",
                    l.mid
                );
                continue;
            }
            let kind = if l.video { "video" } else { "audio" };
            let pts: Vec<String> = std::iter::once(l.pt)
                .chain(l.rtx_pt)
                .map(|pt| pt.to_string())
                .collect();
            let _ = write!(
                s,
                "m={kind} 9 UDP/TLS/RTP/SAVPF {}\r\nc=IN {ip} 0.0.0.0\r\n\
                 a=ice-ufrag:{}\r\na=ice-pwd:{}\r\na=fingerprint:sha-256 {fingerprint}\r\n\
                 a=setup:{setup}\r\na=mid:{}\r\n",
                pts.join(" "),
                ice.ufrag,
                ice.pwd,
                l.mid
            );
            let exts = [
                (l.ext_audio_level, EXT_AUDIO_LEVEL),
                (l.ext_abs_send_time, EXT_ABS_SEND_TIME),
                (l.ext_transport_cc, EXT_TRANSPORT_CC),
                (l.ext_mid, EXT_MID),
            ];
            for (id, uri) in exts {
                if let Some(id) = id {
                    let _ = write!(s, "a=extmap:{id} {uri}\r\n");
                }
            }
            s.push_str("a=recvonly\r\na=rtcp-mux\r\n");
            let _ = write!(
                s,
                "a=rtpmap:{} {}/{}{}\r\n",
                l.pt,
                l.codec.encoding_name(),
                l.codec.clock_rate(),
                if l.codec == Codec::Opus { "/2" } else { "" }
            );
            let fbs = [
                (l.twcc && l.ext_transport_cc.is_some(), "transport-cc"),
                (l.fir, "ccm fir"),
                (l.nack, "nack"),
                (l.pli, "nack pli"),
            ];
            for (on, fb) in fbs {
                if on {
                    let _ = write!(s, "a=rtcp-fb:{} {fb}\r\n", l.pt);
                }
            }
            if l.codec == Codec::H264 {
                let _ = write!(s, "a=fmtp:{} {H264_FMTP}\r\n", l.pt);
            }
            if let Some(rtx) = l.rtx_pt {
                let _ = write!(
                    s,
                    "a=rtpmap:{rtx} rtx/90000\r\na=fmtp:{rtx} apt={}\r\n",
                    l.pt
                );
            }
            let _ = write!(
                s,
                "a=candidate:1 1 udp {} {} {} typ host\r\na=end-of-candidates\r\n",
                HOST_PRIORITY,
                host.ip(),
                host.port()
            );
        }
        s
    }

    fn write_line(&self, s: &mut String, l: &OfferLine, ice: &IceCredentials, fp: &str) {
        let pts: Vec<String> = l
            .codecs
            .iter()
            .flat_map(|&(_, pt, rtx)| std::iter::once(pt).chain(rtx))
            .map(|pt| pt.to_string())
            .collect();
        let kind = if l.video { "video" } else { "audio" };
        let _ = write!(
            s,
            "m={kind} 9 UDP/TLS/RTP/SAVPF {}\r\nc=IN IP4 0.0.0.0\r\na=rtcp:9 IN IP4 0.0.0.0\r\n\
             a=ice-ufrag:{}\r\na=ice-pwd:{}\r\na=ice-options:trickle\r\n\
             a=fingerprint:sha-256 {fp}\r\na=setup:actpass\r\na=mid:{}\r\n",
            pts.join(" "),
            ice.ufrag,
            ice.pwd,
            l.mid
        );
        if !l.video {
            let _ = write!(s, "a=extmap:1 {EXT_AUDIO_LEVEL}\r\n");
        }
        let _ = write!(s, "a=extmap:2 {EXT_ABS_SEND_TIME}\r\n");
        // A viewer sends transport-wide CC feedback, as browsers do (unless configured not to,
        // as a REMB-only client); a publisher does not stamp the sequence numbers that feedback
        // would need.
        let twcc = !l.send && self.transport_cc;
        if twcc {
            let _ = write!(s, "a=extmap:{EXT_TRANSPORT_CC_ID} {EXT_TRANSPORT_CC}\r\n");
        }
        let _ = write!(s, "a=extmap:4 {EXT_MID}\r\n");
        let simulcast = l.send && !l.rids.is_empty();
        if simulcast {
            let _ = write!(
                s,
                "a=extmap:{EXT_RID_ID} {EXT_RID}\r\na=extmap:{EXT_RRID_ID} {EXT_RRID}\r\n"
            );
        }
        let track = format!("{}-{}", self.stream, l.mid);
        if l.send {
            let _ = write!(s, "a=sendonly\r\na=msid:{} {track}\r\n", self.stream);
        } else {
            s.push_str("a=recvonly\r\n");
        }
        s.push_str("a=rtcp-mux\r\na=rtcp-rsize\r\n");
        for &(codec, pt, rtx) in &l.codecs {
            match codec {
                Codec::Opus => {
                    let _ = write!(s, "a=rtpmap:{pt} opus/48000/2\r\n");
                    if twcc {
                        let _ = write!(s, "a=rtcp-fb:{pt} transport-cc\r\n");
                    }
                    let _ = write!(s, "a=fmtp:{pt} minptime=10;useinbandfec=1\r\n");
                }
                Codec::Vp8 | Codec::H264 | Codec::Vp9 | Codec::Av1 => {
                    let _ = write!(s, "a=rtpmap:{pt} {}/90000\r\n", codec.encoding_name());
                    let fbs = ["goog-remb", "transport-cc", "ccm fir", "nack", "nack pli"];
                    for fb in fbs.into_iter().filter(|&fb| twcc || fb != "transport-cc") {
                        let _ = write!(s, "a=rtcp-fb:{pt} {fb}\r\n");
                    }
                    if codec == Codec::H264 {
                        let _ = write!(s, "a=fmtp:{pt} {H264_FMTP}\r\n");
                    }
                }
            }
            if let Some(rtx) = rtx {
                let _ = write!(s, "a=rtpmap:{rtx} rtx/90000\r\na=fmtp:{rtx} apt={pt}\r\n");
            }
        }
        if simulcast {
            // As Chrome writes `sendEncodings`: the rids, then their order, lowest first.
            for rid in &l.rids {
                let _ = write!(s, "a=rid:{rid} send\r\n");
            }
            let _ = write!(s, "a=simulcast:send {}\r\n", l.rids.join(";"));
        }
        if let Some((ssrc, rtx)) = l.ssrc {
            if let Some(rtx) = rtx {
                let _ = write!(s, "a=ssrc-group:FID {ssrc} {rtx}\r\n");
            }
            for x in std::iter::once(ssrc).chain(rtx) {
                let _ = write!(
                    s,
                    "a=ssrc:{x} cname:{}\r\na=ssrc:{x} msid:{} {track}\r\n",
                    self.cname, self.stream
                );
            }
        }
    }
}

/// What the answer decided for one of our m-lines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct AnswerLine {
    pub mid: String,
    pub video: bool,
    pub accepted: bool,
    pub codec: Codec,
    pub pt: u8,
    pub rtx_pt: Option<u8>,
    pub nack: bool,
    pub pli: bool,
    pub fir: bool,
    pub ext_mid: Option<u8>,
    pub ext_abs_send_time: Option<u8>,
    pub ext_audio_level: Option<u8>,
    /// The transport-wide sequence number's id: we send transport-wide CC feedback.
    pub ext_transport_cc: Option<u8>,
    /// `a=rtcp-fb:<pt> transport-cc` is there too.
    pub twcc: bool,
    /// The rid extension's id (a simulcast publisher stamps its layers with it).
    pub ext_rid: Option<u8>,
    /// The repaired-rid extension's id (on a simulcast publisher's RTX packets).
    pub ext_rrid: Option<u8>,
    /// Publisher: the rids the answer's `a=simulcast:recv` takes (paused ones left out);
    /// `None` without that attribute.
    pub simulcast_recv: Option<Vec<String>>,
    /// Viewer: the server's (media, rtx) SSRCs on this line.
    pub ssrcs: Vec<(u32, Option<u32>)>,
}

/// The answer, read.
#[derive(Debug, Clone)]
pub(super) struct Answer {
    pub ice: IceCredentials,
    pub fingerprint: Vec<u8>,
    pub dtls_role: DtlsRole,
    /// Host UDP candidates, in the answer's order.
    pub candidates: Vec<SocketAddr>,
    pub lines: Vec<AnswerLine>,
}

fn bad(reason: impl Into<String>) -> PeerError {
    PeerError::BadAnswer(reason.into())
}

/// Reads the server's answer against our offer.
pub(super) fn read_answer(plan: &OfferPlan, answer: &str) -> Result<Answer, PeerError> {
    read_remote(plan, answer, false)
}

/// Reads a server's offer against the lines [`lines_for_offer`] made of it, as if it were an
/// answer: its credentials, fingerprint, candidates and, per line, the first payload type we
/// support. We take the DTLS client role unless the offer insists on being it.
pub(super) fn read_offer(plan: &OfferPlan, offer: &str) -> Result<Answer, PeerError> {
    read_remote(plan, offer, true)
}

/// Our lines for answering a server's offer: one per offered m-line, in its order, receiving
/// the offered codecs we support (none: the line is rejected), with RTX when `rtx`.
pub(super) fn lines_for_offer(offer: &str, rtx: bool) -> Result<Vec<OfferLine>, PeerError> {
    let sdp = SessionDescription::parse(offer).map_err(|e| PeerError::BadOffer(e.to_string()))?;
    let mut lines = Vec::new();
    for m in sdp.media_views() {
        let Some(mid) = m.mid() else {
            return Err(PeerError::BadOffer("an m-line has no a=mid".into()));
        };
        let video = m.kind == MediaKind::Video;
        let media = matches!(m.kind, MediaKind::Audio | MediaKind::Video);
        let codecs = m
            .payload_types()
            .into_iter()
            .filter(|_| media)
            .filter_map(|pt| {
                let codec = Codec::from_encoding_name(&m.rtpmap(pt)?.encoding)?;
                // The peer plays what it can assemble: Opus, VP8 and H.264.
                let playable = matches!(codec, Codec::Opus | Codec::Vp8 | Codec::H264);
                (playable && codec.is_video() == video)
                    .then(|| (codec, pt, m.rtx_for(pt).filter(|_| rtx)))
            })
            .collect();
        lines.push(OfferLine {
            mid: mid.to_owned(),
            video,
            send: false,
            codecs,
            ssrc: None,
            rids: Vec::new(),
        });
    }
    Ok(lines)
}

fn read_remote(plan: &OfferPlan, text: &str, offer: bool) -> Result<Answer, PeerError> {
    let what = if offer { "offer" } else { "answer" };
    let fail = |reason: String| {
        if offer {
            PeerError::BadOffer(reason)
        } else {
            PeerError::BadAnswer(reason)
        }
    };
    let sdp = SessionDescription::parse(text).map_err(|e| fail(e.to_string()))?;
    let first = sdp
        .media_views()
        .find(|m| m.port != 0)
        .ok_or_else(|| fail(format!("{what} accepts no m-line")))?;
    let (Some(ufrag), Some(pwd)) = (first.ice_ufrag(), first.ice_pwd()) else {
        return Err(fail(format!("{what} has no a=ice-ufrag/a=ice-pwd")));
    };
    let fingerprint = first
        .fingerprints()
        .into_iter()
        .find(|f| f.algorithm.eq_ignore_ascii_case("sha-256") && f.bytes.len() == 32)
        .ok_or_else(|| fail(format!("{what} has no sha-256 fingerprint")))?
        .bytes;
    // RFC 5763 §5: an answer is active or passive; active is the default. An offer is actpass
    // (we answer active, as browsers do) or, rarely, insists on one role.
    let dtls_role = match (offer, first.setup()) {
        (false, Some(Setup::Active) | None) | (true, Some(Setup::Active)) => DtlsRole::Server,
        (false, Some(Setup::Passive)) | (true, Some(Setup::Passive | Setup::ActPass) | None) => {
            DtlsRole::Client
        }
        (_, Some(other)) => return Err(fail(format!("{what} has a=setup:{other:?}"))),
    };
    let candidates: Vec<SocketAddr> = sdp
        .media_views()
        .flat_map(|m| m.candidates())
        .filter(|c| c.transport.eq_ignore_ascii_case("udp") && c.component == 1)
        .filter_map(|c| Some(SocketAddr::new(c.address.parse::<IpAddr>().ok()?, c.port)))
        .fold(Vec::new(), |mut v, a| {
            if !v.contains(&a) {
                v.push(a);
            }
            v
        });
    if candidates.is_empty() {
        return Err(fail(format!("{what} has no UDP host candidate")));
    }
    let mut lines = Vec::new();
    for ours in &plan.lines {
        let line = match sdp.media_by_mid(&ours.mid) {
            Some(m) => answer_line(ours, &m).map_err(|e| fail(e.to_string()))?,
            None => rejected(ours),
        };
        lines.push(line);
    }
    if !lines.iter().any(|l| l.accepted) {
        return Err(fail(format!("{what} accepts none of our m-lines")));
    }
    Ok(Answer {
        ice: IceCredentials {
            ufrag: ufrag.to_owned(),
            pwd: pwd.to_owned(),
        },
        fingerprint,
        dtls_role,
        candidates,
        lines,
    })
}

fn rejected(ours: &OfferLine) -> AnswerLine {
    AnswerLine {
        mid: ours.mid.clone(),
        video: ours.video,
        accepted: false,
        codec: Codec::Opus,
        pt: 0,
        rtx_pt: None,
        nack: false,
        pli: false,
        fir: false,
        ext_mid: None,
        ext_abs_send_time: None,
        ext_audio_level: None,
        ext_transport_cc: None,
        twcc: false,
        ext_rid: None,
        ext_rrid: None,
        simulcast_recv: None,
        ssrcs: Vec::new(),
    }
}

/// How a remote m-line fails to match the one of ours in its place.
#[derive(Debug, thiserror::Error)]
enum LineMismatch {
    /// Audio where we had video, or the other way round.
    #[error("m-line {0} changed its media kind")]
    Kind(String),
    /// None of the payload types we put on the line.
    #[error("m-line {0} answers no payload type we offered")]
    NoPayloadType(String),
}

fn answer_line(ours: &OfferLine, m: &MediaView<'_>) -> Result<AnswerLine, LineMismatch> {
    let mut line = rejected(ours);
    // No codec of ours: an offered line we reject.
    if m.port == 0 || ours.codecs.is_empty() {
        return Ok(line);
    }
    if (m.kind == MediaKind::Video) != ours.video {
        return Err(LineMismatch::Kind(ours.mid.clone()));
    }
    // The first payload type of ours the answer lists is the one in use.
    let Some((codec, pt)) = m.payload_types().into_iter().find_map(|pt| {
        ours.codecs
            .iter()
            .find(|(_, p, _)| *p == pt)
            .map(|(c, p, _)| (*c, *p))
    }) else {
        return Err(LineMismatch::NoPayloadType(ours.mid.clone()));
    };
    let fbs = m.rtcp_fbs(pt);
    let has = |kind: &str, param: Option<&str>| {
        fbs.iter()
            .any(|f| f.kind == kind && f.param.as_deref() == param)
    };
    line.accepted = true;
    line.codec = codec;
    line.pt = pt;
    line.rtx_pt = m.rtx_for(pt);
    line.nack = has("nack", None);
    line.pli = has("nack", Some("pli"));
    line.fir = has("ccm", Some("fir"));
    line.twcc = has("transport-cc", None);
    let ext = |uri: &str| m.extmaps().into_iter().find(|e| e.uri == uri).map(|e| e.id);
    line.ext_mid = ext(EXT_MID);
    line.ext_abs_send_time = ext(EXT_ABS_SEND_TIME);
    line.ext_audio_level = ext(EXT_AUDIO_LEVEL);
    line.ext_transport_cc = ext(EXT_TRANSPORT_CC);
    line.ext_rid = ext(EXT_RID);
    line.ext_rrid = ext(EXT_RRID);
    line.simulcast_recv = m.simulcast().map(|sim| {
        sim.recv
            .iter()
            .flatten()
            .filter(|r| !r.paused)
            .map(|r| r.id.clone())
            .collect()
    });
    line.ssrcs = m.declared_ssrcs();
    Ok(line)
}

/// The PATCH body of an ICE restart: new credentials on the first bundled m-line (RFC 9725 §4.4.1).
pub(super) fn restart_frag(plan: &OfferPlan, ice: &IceCredentials) -> String {
    let mids: Vec<&str> = plan.lines.iter().map(|l| l.mid.as_str()).collect();
    let mut s = format!(
        "a=ice-options:trickle ice2\r\na=group:BUNDLE {}\r\n",
        mids.join(" ")
    );
    if let Some(l) = plan.lines.first() {
        let kind = if l.video { "video" } else { "audio" };
        let pt = l.codecs.first().map_or(0, |c| c.1);
        let _ = write!(
            s,
            "m={kind} 9 UDP/TLS/RTP/SAVPF {pt}\r\na=mid:{}\r\n",
            l.mid
        );
    }
    let _ = write!(s, "a=ice-ufrag:{}\r\na=ice-pwd:{}\r\n", ice.ufrag, ice.pwd);
    s
}

/// The server's restart answer: its new credentials and any UDP candidates.
pub(super) fn read_restart_answer(
    frag: &str,
) -> Result<(IceCredentials, Vec<SocketAddr>), PeerError> {
    let frag = SdpFrag::parse(frag).map_err(|e| bad(e.to_string()))?;
    let view = frag.media_views().next();
    let ufrag = view
        .as_ref()
        .and_then(|m| m.ice_ufrag())
        .or_else(|| frag.ice_ufrag());
    let pwd = view
        .as_ref()
        .and_then(|m| m.ice_pwd())
        .or_else(|| frag.ice_pwd());
    let (Some(ufrag), Some(pwd)) = (ufrag, pwd) else {
        return Err(bad("restart answer has no a=ice-ufrag/a=ice-pwd"));
    };
    let session = frag
        .attributes
        .iter()
        .filter(|a| a.name == "candidate")
        .filter_map(|a| crate::sdp::Candidate::parse(a.value.as_deref()?).ok());
    let candidates = frag
        .candidates()
        .into_iter()
        .map(|(_, c)| c)
        .chain(session)
        .filter(|c| c.transport.eq_ignore_ascii_case("udp") && c.component == 1)
        .filter_map(|c| Some(SocketAddr::new(c.address.parse::<IpAddr>().ok()?, c.port)))
        .collect();
    Ok((
        IceCredentials {
            ufrag: ufrag.to_owned(),
            pwd: pwd.to_owned(),
        },
        candidates,
    ))
}

#[cfg(test)]
pub(super) mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// The shape of Janus 1.1.2's streaming-plugin offer (one Opus, one VP8 mountpoint stream).
    pub(crate) const JANUS_OFFER: &str = "v=0\r\no=- 1796152406442017 1 IN IP4 127.0.0.1\r\n\
        s=Mountpoint 1\r\nt=0 0\r\na=group:BUNDLE 0 1\r\na=ice-options:trickle\r\n\
        a=fingerprint:sha-256 3E:D3:4D:4D:4D:9B:08:70:88:C9:39:4A:ED:4A:0C:A7:90:5E:F1:8A:0A:06:8D:D8:59:81:C4:00:12:6A:E1:F2\r\n\
        a=extmap-allow-mixed\r\na=msid-semantic: WMS *\r\n\
        m=audio 9 UDP/TLS/RTP/SAVPF 111\r\nc=IN IP4 127.0.0.1\r\na=sendonly\r\na=mid:0\r\n\
        a=rtcp-mux\r\na=ice-ufrag:3EiH\r\na=ice-pwd:PK7FmPKcRphi4aUH1lnuvA\r\n\
        a=ice-options:trickle\r\na=setup:actpass\r\na=rtpmap:111 opus/48000/2\r\n\
        a=rtcp-fb:111 transport-cc\r\na=extmap:4 urn:ietf:params:rtp-hdrext:sdes:mid\r\n\
        a=msid:janus janus0\r\na=ssrc:3108810833 cname:janus\r\n\
        a=candidate:1 1 udp 2015363839 10.203.0.2 39896 typ host\r\na=end-of-candidates\r\n\
        m=video 9 UDP/TLS/RTP/SAVPF 96 97\r\nc=IN IP4 127.0.0.1\r\na=sendonly\r\na=mid:1\r\n\
        a=rtcp-mux\r\na=ice-ufrag:3EiH\r\na=ice-pwd:PK7FmPKcRphi4aUH1lnuvA\r\n\
        a=ice-options:trickle\r\na=setup:actpass\r\na=rtpmap:96 VP8/90000\r\n\
        a=rtcp-fb:96 ccm fir\r\na=rtcp-fb:96 nack\r\na=rtcp-fb:96 nack pli\r\n\
        a=rtcp-fb:96 goog-remb\r\na=rtcp-fb:96 transport-cc\r\n\
        a=extmap:2 http://www.webrtc.org/experiments/rtp-hdrext/abs-send-time\r\n\
        a=extmap:4 urn:ietf:params:rtp-hdrext:sdes:mid\r\na=rtpmap:97 rtx/90000\r\n\
        a=fmtp:97 apt=96\r\na=ssrc-group:FID 3252071694 3513330664\r\na=msid:janus janus1\r\n\
        a=ssrc:3252071694 cname:janus\r\na=ssrc:3513330664 cname:janus\r\n\
        a=candidate:1 1 udp 2015363839 10.203.0.2 39896 typ host\r\na=end-of-candidates\r\n\
        m=application 9 UDP/DTLS/SCTP webrtc-datachannel\r\nc=IN IP4 127.0.0.1\r\na=mid:2\r\n";

    fn plan(lines: Vec<OfferLine>) -> OfferPlan {
        OfferPlan {
            session_id: 7,
            stream: "s".into(),
            cname: "c".into(),
            lines,
            transport_cc: true,
        }
    }

    #[test]
    fn a_janus_offer_is_read_as_the_answer_we_need() {
        let lines = lines_for_offer(JANUS_OFFER, true).unwrap();
        let summary: Vec<_> = lines
            .iter()
            .map(|l| (l.mid.as_str(), l.video, l.send, l.codecs.clone()))
            .collect();
        assert_eq!(
            summary,
            [
                ("0", false, false, vec![(Codec::Opus, 111, None)]),
                ("1", true, false, vec![(Codec::Vp8, 96, Some(97))]),
                ("2", false, false, vec![]),
            ]
        );
        let without_rtx = lines_for_offer(JANUS_OFFER, false).unwrap();
        assert_eq!(without_rtx[1].codecs, [(Codec::Vp8, 96, None)]);

        let a = read_offer(&plan(lines), JANUS_OFFER).unwrap();
        assert_eq!(a.ice.ufrag, "3EiH");
        assert_eq!(a.ice.pwd, "PK7FmPKcRphi4aUH1lnuvA");
        assert_eq!(a.fingerprint.len(), 32);
        assert_eq!(a.fingerprint[0], 0x3E);
        // actpass: we answer active, the DTLS client.
        assert_eq!(a.dtls_role, DtlsRole::Client);
        assert_eq!(a.candidates, ["10.203.0.2:39896".parse().unwrap()]);
        let accepted: Vec<_> = a.lines.iter().map(|l| l.accepted).collect();
        assert_eq!(accepted, [true, true, false]);
        let v = &a.lines[1];
        assert_eq!((v.codec, v.pt, v.rtx_pt), (Codec::Vp8, 96, Some(97)));
        assert!(v.nack && v.pli && v.fir);
        assert_eq!((v.ext_mid, v.ext_abs_send_time), (Some(4), Some(2)));
        assert_eq!(v.ssrcs, [(3_252_071_694, Some(3_513_330_664))]);
        assert_eq!(a.lines[0].ssrcs, [(3_108_810_833, None)]);
    }

    #[test]
    fn the_answer_receives_one_codec_per_line_and_rejects_the_rest() {
        let p = plan(lines_for_offer(JANUS_OFFER, true).unwrap());
        let a = read_offer(&p, JANUS_OFFER).unwrap();
        let ice = IceCredentials {
            ufrag: "ufrg".into(),
            pwd: "p".repeat(24),
        };
        let host: SocketAddr = "10.203.0.1:40000".parse().unwrap();
        let fp = crate::cert::format_fingerprint(&[0xAB; 32]);
        let sdp = p.write_answer(JANUS_OFFER, &a, &ice, &fp, host);
        let parsed = SessionDescription::parse(&sdp).unwrap();
        assert_eq!(parsed.group_bundle(), Some(vec!["0".into(), "1".into()]));
        let m: Vec<_> = parsed.media_views().collect();
        assert_eq!(m.len(), 3);
        assert_eq!((m[0].port, m[0].payload_types()), (9, vec![111]));
        assert_eq!((m[1].port, m[1].payload_types()), (9, vec![96, 97]));
        assert_eq!(m[2].port, 0);
        assert_eq!(m[2].kind, MediaKind::Application);
        assert_eq!(m[2].mid(), Some("2"));
        for v in &m[..2] {
            assert_eq!(v.setup(), Some(Setup::Active));
            assert_eq!(v.ice_ufrag(), Some("ufrg"));
            assert_eq!(v.direction(), crate::sdp::Direction::RecvOnly);
            let c = &v.candidates()[0];
            assert_eq!((c.address.as_str(), c.port), ("10.203.0.1", 40000));
            assert!(v.end_of_candidates());
        }
        assert_eq!(m[1].rtx_for(96), Some(97));
        let fbs: Vec<_> = m[1]
            .rtcp_fbs(96)
            .into_iter()
            .map(|f| (f.kind, f.param))
            .collect();
        assert_eq!(
            fbs,
            [
                ("ccm".into(), Some("fir".into())),
                ("nack".into(), None),
                ("nack".into(), Some("pli".into()))
            ]
        );
        let exts: Vec<_> = m[1].extmaps().into_iter().map(|e| e.id).collect();
        assert_eq!(exts, [2, 4]);
    }

    #[test]
    fn an_offered_transport_wide_sequence_number_is_answered_with_its_feedback() {
        let abs = "a=extmap:2 http://www.webrtc.org/experiments/rtp-hdrext/abs-send-time\r\n";
        let offer = JANUS_OFFER.replace(abs, &format!("{abs}a=extmap:5 {EXT_TRANSPORT_CC}\r\n"));
        let p = plan(lines_for_offer(&offer, true).unwrap());
        let a = read_offer(&p, &offer).unwrap();
        // Janus's audio line has the feedback but not the extension.
        let twcc: Vec<_> = a
            .lines
            .iter()
            .map(|l| (l.ext_transport_cc, l.twcc))
            .collect();
        assert_eq!(twcc, [(None, true), (Some(5), true), (None, false)]);
        let ice = IceCredentials {
            ufrag: "ufrg".into(),
            pwd: "p".repeat(24),
        };
        let fp = crate::cert::format_fingerprint(&[0xAB; 32]);
        let host: SocketAddr = "10.203.0.1:40000".parse().unwrap();
        let sdp = p.write_answer(&offer, &a, &ice, &fp, host);
        let parsed = SessionDescription::parse(&sdp).unwrap();
        let m: Vec<_> = parsed.media_views().collect();
        let exts: Vec<_> = m[1].extmaps().into_iter().map(|e| (e.id, e.uri)).collect();
        assert_eq!(
            exts,
            [
                (2, EXT_ABS_SEND_TIME.into()),
                (5, EXT_TRANSPORT_CC.into()),
                (4, EXT_MID.into())
            ]
        );
        assert_eq!(m[1].rtcp_fbs(96)[0].kind, "transport-cc");
        assert!(m[0].rtcp_fbs(111).is_empty());
        assert!(m[0].extmaps().iter().all(|e| e.uri != EXT_TRANSPORT_CC));
    }

    #[test]
    fn a_viewer_offers_transport_cc_and_a_publisher_does_not() {
        let ice = IceCredentials {
            ufrag: "ufrg".into(),
            pwd: "p".repeat(24),
        };
        let line = |video, send| OfferLine {
            mid: "0".into(),
            video,
            send,
            codecs: if video {
                vec![(Codec::Vp8, PT_VP8, Some(PT_VP8_RTX))]
            } else {
                vec![(Codec::Opus, PT_OPUS, None)]
            },
            ssrc: send.then_some((5, None)),
            rids: Vec::new(),
        };
        for (video, send) in [(false, false), (true, false), (false, true), (true, true)] {
            let fp = crate::cert::format_fingerprint(&[0xAB; 32]);
            let sdp = plan(vec![line(video, send)]).write(&ice, &fp);
            let parsed = SessionDescription::parse(&sdp).unwrap();
            let m = parsed.media_views().next().unwrap();
            let pt = if video { PT_VP8 } else { PT_OPUS };
            let ids: Vec<_> = m.extmaps().into_iter().map(|e| e.id).collect();
            let fb = m.rtcp_fbs(pt).iter().any(|f| f.kind == "transport-cc");
            let twcc = ids.contains(&EXT_TRANSPORT_CC_ID);
            assert_eq!(
                (twcc, fb),
                (!send, !send),
                "video {video}, send {send}: {sdp}"
            );
            let expected: &[u8] = match (video, send) {
                (false, false) => &[1, 2, 3, 4],
                (true, false) => &[2, 3, 4],
                (false, true) => &[1, 2, 4],
                (true, true) => &[2, 4],
            };
            assert_eq!(ids, expected);
        }
    }

    #[test]
    fn offers_we_cannot_answer_are_bad_offers() {
        let no_codec = JANUS_OFFER
            .replace("opus/48000/2", "PCMU/8000")
            .replace("VP8/90000", "VP9/90000");
        let p = plan(lines_for_offer(&no_codec, true).unwrap());
        assert!(matches!(
            read_offer(&p, &no_codec),
            Err(PeerError::BadOffer(r)) if r == "offer accepts none of our m-lines"
        ));
        let no_candidate = JANUS_OFFER.replace("a=candidate:1 1 udp", "a=candidate:1 1 tcp");
        let p = plan(lines_for_offer(&no_candidate, true).unwrap());
        assert!(matches!(
            read_offer(&p, &no_candidate),
            Err(PeerError::BadOffer(r)) if r == "offer has no UDP host candidate"
        ));
        assert!(matches!(
            lines_for_offer(&JANUS_OFFER.replace("a=mid:1\r\n", ""), true),
            Err(PeerError::BadOffer(_))
        ));
        let holdconn = JANUS_OFFER.replace("a=setup:actpass", "a=setup:holdconn");
        let p = plan(lines_for_offer(&holdconn, true).unwrap());
        assert!(matches!(
            read_offer(&p, &holdconn),
            Err(PeerError::BadOffer(_))
        ));
        // An offer that insists on being the DTLS client makes us its server.
        let active = JANUS_OFFER.replace("a=setup:actpass", "a=setup:active");
        let p = plan(lines_for_offer(&active, true).unwrap());
        assert_eq!(read_offer(&p, &active).unwrap().dtls_role, DtlsRole::Server);
    }
}
