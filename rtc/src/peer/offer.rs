//! The peer's side of offer/answer: a Chrome-like offer, reading the server's answer, and the
//! trickle-ICE fragments of an ICE restart (RFC 8840, RFC 9725 §4.4).

use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr};

use crate::codec::Codec;
use crate::dtls::DtlsRole;
use crate::ice::IceCredentials;
use crate::sdp::extmap::{EXT_ABS_SEND_TIME, EXT_AUDIO_LEVEL, EXT_MID};
use crate::sdp::{MediaKind, MediaView, SdpFrag, SessionDescription, Setup};

use super::PeerError;

/// Payload types of the offer, as Chrome numbers them.
pub(super) const PT_OPUS: u8 = 111;
pub(super) const PT_VP8: u8 = 96;
pub(super) const PT_VP8_RTX: u8 = 97;
pub(super) const PT_H264: u8 = 102;
pub(super) const PT_H264_RTX: u8 = 103;
const H264_FMTP: &str = "level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=42e01f";

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
}

/// Everything the offer said that the answer must be read against.
#[derive(Debug, Clone)]
pub(super) struct OfferPlan {
    pub session_id: u64,
    pub stream: String,
    pub cname: String,
    pub lines: Vec<OfferLine>,
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
        let _ = write!(
            s,
            "a=extmap:2 {EXT_ABS_SEND_TIME}\r\na=extmap:4 {EXT_MID}\r\n"
        );
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
                    let _ = write!(
                        s,
                        "a=rtpmap:{pt} opus/48000/2\r\na=fmtp:{pt} minptime=10;useinbandfec=1\r\n"
                    );
                }
                Codec::Vp8 | Codec::H264 => {
                    let _ = write!(s, "a=rtpmap:{pt} {}/90000\r\n", codec.encoding_name());
                    for fb in ["goog-remb", "ccm fir", "nack", "nack pli"] {
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
    let sdp = SessionDescription::parse(answer).map_err(|e| bad(e.to_string()))?;
    let first = sdp
        .media_views()
        .find(|m| m.port != 0)
        .ok_or_else(|| bad("answer accepts no m-line"))?;
    let (Some(ufrag), Some(pwd)) = (first.ice_ufrag(), first.ice_pwd()) else {
        return Err(bad("answer has no a=ice-ufrag/a=ice-pwd"));
    };
    let fingerprint = first
        .fingerprints()
        .into_iter()
        .find(|f| f.algorithm.eq_ignore_ascii_case("sha-256") && f.bytes.len() == 32)
        .ok_or_else(|| bad("answer has no sha-256 fingerprint"))?
        .bytes;
    // RFC 5763 §5: an answer is active or passive; active is the default.
    let dtls_role = match first.setup() {
        Some(Setup::Active) | None => DtlsRole::Server,
        Some(Setup::Passive) => DtlsRole::Client,
        Some(other) => return Err(bad(format!("answer has a=setup:{other:?}"))),
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
        return Err(bad("answer has no UDP host candidate"));
    }
    let mut lines = Vec::new();
    for ours in &plan.lines {
        let line = match sdp.media_by_mid(&ours.mid) {
            Some(m) => answer_line(ours, &m)?,
            None => rejected(ours),
        };
        lines.push(line);
    }
    if !lines.iter().any(|l| l.accepted) {
        return Err(bad("answer accepts none of our m-lines"));
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
        ssrcs: Vec::new(),
    }
}

fn answer_line(ours: &OfferLine, m: &MediaView<'_>) -> Result<AnswerLine, PeerError> {
    let mut line = rejected(ours);
    if m.port == 0 {
        return Ok(line);
    }
    if (m.kind == MediaKind::Video) != ours.video {
        return Err(bad(format!("m-line {} changed its media kind", ours.mid)));
    }
    // The first payload type of ours the answer lists is the one in use.
    let Some((codec, pt)) = m.payload_types().into_iter().find_map(|pt| {
        ours.codecs
            .iter()
            .find(|(_, p, _)| *p == pt)
            .map(|(c, p, _)| (*c, *p))
    }) else {
        return Err(bad(format!(
            "m-line {} answers no payload type we offered",
            ours.mid
        )));
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
    let ext = |uri: &str| m.extmaps().into_iter().find(|e| e.uri == uri).map(|e| e.id);
    line.ext_mid = ext(EXT_MID);
    line.ext_abs_send_time = ext(EXT_ABS_SEND_TIME);
    line.ext_audio_level = ext(EXT_AUDIO_LEVEL);
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
