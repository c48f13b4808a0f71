#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use super::*;

const CHROME: &str = include_str!("testdata/chrome_offer.sdp");
const CHROME_SIMULCAST: &str = include_str!("testdata/chrome_simulcast_offer.sdp");
const FIREFOX: &str = include_str!("testdata/firefox_offer.sdp");

fn crlf(s: &str) -> String {
    s.replace('\n', "\r\n")
}

fn syntax(line: usize, reason: &'static str) -> SdpError {
    SdpError::Syntax { line, reason }
}

fn rid(id: &str, paused: bool) -> SimulcastRid {
    SimulcastRid {
        id: id.into(),
        paused,
    }
}

const MINIMAL: &str = "v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\n";

#[test]
fn chrome_offer_session_level() {
    let sdp = SessionDescription::parse(&crlf(CHROME)).unwrap();
    assert_eq!(sdp.origin.session_id, 4215775240449105457);
    assert_eq!(sdp.origin.session_version, 2);
    assert_eq!(sdp.session_name, "-");
    assert_eq!(sdp.timing, Timing { start: 0, stop: 0 });
    assert_eq!(
        sdp.group_bundle(),
        Some(vec!["0".to_string(), "1".to_string()])
    );
    assert!(sdp.extmap_allow_mixed());
    assert_eq!(
        sdp.attr("msid-semantic").and_then(|a| a.value.as_deref()),
        Some(" WMS 5b2e9f0c-3d1a-4c7e-9f2b-8a6d4e1c0b93")
    );
    assert_eq!(sdp.ice_ufrag(), None);
    assert!(!sdp.ice_lite());
    assert_eq!(sdp.media.len(), 2);
    assert_eq!(sdp.media[0].kind, MediaKind::Audio);
    assert_eq!(sdp.media[1].kind, MediaKind::Video);
    // LF-only input parses to the same value.
    assert_eq!(SessionDescription::parse(CHROME).unwrap(), sdp);
}

#[test]
fn chrome_offer_audio() {
    let sdp = SessionDescription::parse(CHROME).unwrap();
    let audio = sdp.media_view(0).unwrap();
    assert_eq!(audio.port, 58718);
    assert_eq!(audio.proto, "UDP/TLS/RTP/SAVPF");
    assert_eq!(audio.payload_types(), vec![111, 63, 9, 0, 8, 13, 110, 126]);
    assert_eq!(audio.connection, Some(Connection::new("203.0.113.7")));
    assert_eq!(audio.mid(), Some("0"));
    assert_eq!(audio.ice_ufrag(), Some("Kx7q"));
    assert_eq!(audio.ice_pwd(), Some("3hF9tLm2QwErTy8UiOpAsDfG"));
    assert_eq!(audio.ice_options(), vec!["trickle"]);
    assert_eq!(audio.setup(), Some(Setup::ActPass));
    assert_eq!(audio.direction(), Direction::SendRecv);
    assert!(audio.rtcp_mux() && audio.rtcp_rsize());
    assert!(
        audio.extmap_allow_mixed(),
        "session-level extmap-allow-mixed applies"
    );
    assert!(
        !audio.media().extmap_allow_mixed(),
        "but is not media-level"
    );

    let fps = audio.fingerprints();
    assert_eq!(fps.len(), 1);
    assert_eq!(fps[0].algorithm, "sha-256");
    assert_eq!(fps[0].bytes.len(), 32);
    assert_eq!(fps[0].bytes[..3], [0x7D, 0x2B, 0x19]);

    let opus = audio.rtpmap(111).unwrap();
    assert_eq!(
        opus,
        RtpMap {
            pt: 111,
            encoding: "opus".into(),
            clock_rate: 48000,
            channels: Some(2)
        }
    );
    let opus_fmtp = audio.fmtp(111).unwrap();
    assert_eq!(opus_fmtp.param("useinbandfec"), Some("1"));
    assert_eq!(opus_fmtp.param("minptime"), Some("10"));
    assert_eq!(
        audio.fmtp(63).unwrap().params,
        vec![("111/111".to_string(), None)]
    );
    assert_eq!(audio.rtpmap(63).unwrap().encoding, "red");
    let dtmf: Vec<_> = audio
        .rtpmaps()
        .into_iter()
        .filter(|r| r.encoding == "telephone-event")
        .map(|r| (r.pt, r.clock_rate))
        .collect();
    assert_eq!(dtmf, vec![(110, 48000), (126, 8000)]);
    assert_eq!(audio.rtcp_fbs(111).len(), 1);
    assert_eq!(audio.rtcp_fbs(111)[0].kind, "transport-cc");

    let ext = audio.extmaps();
    assert_eq!(ext.len(), 4);
    assert_eq!(
        (ext[0].id, ext[0].uri.as_str()),
        (1, "urn:ietf:params:rtp-hdrext:ssrc-audio-level")
    );

    let msid = audio.msid().unwrap();
    assert_eq!(msid.stream_id, "5b2e9f0c-3d1a-4c7e-9f2b-8a6d4e1c0b93");
    assert_eq!(
        msid.track_id.as_deref(),
        Some("a1c3e5f7-0b2d-4f6a-8c9e-1a3b5c7d9e0f")
    );
    let ssrcs = audio.ssrcs();
    assert_eq!(ssrcs.len(), 2);
    assert_eq!(
        ssrcs[0],
        SsrcAttr {
            ssrc: 1203943516,
            attribute: "cname".into(),
            value: Some("qQ2bJm4Xn8LkP0Ys".into())
        }
    );
}

#[test]
fn chrome_offer_candidates() {
    let sdp = SessionDescription::parse(CHROME).unwrap();
    let cands = sdp.media[0].candidates();
    assert_eq!(cands.len(), 3);
    assert_eq!(
        cands[0].address,
        "2f6c1a4e-7b3d-4e21-9c8a-1d5e3f7a9b20.local"
    );
    assert_eq!(
        (cands[0].component, cands[0].port, cands[0].typ.as_str()),
        (1, 58718, "host")
    );
    assert_eq!(cands[0].priority, 2122260223);
    assert_eq!(cands[0].extension("network-cost"), Some("10"));
    assert_eq!(cands[1].typ, "srflx");
    assert_eq!(
        (cands[1].raddr.as_deref(), cands[1].rport),
        (Some("0.0.0.0"), Some(0))
    );
    assert_eq!(cands[2].transport, "tcp");
    assert_eq!(cands[2].extension("tcptype"), Some("active"));
    assert!(!sdp.media_view(0).unwrap().end_of_candidates());
    assert!(sdp.media[1].candidates().is_empty());
}

#[test]
fn chrome_offer_video_codecs() {
    let sdp = SessionDescription::parse(CHROME).unwrap();
    let video = sdp.media_by_mid("1").unwrap();
    assert_eq!(video.formats.len(), 25);
    let maps = video.rtpmaps();
    assert_eq!(maps.len(), 25);
    let enc = |name: &str| -> Vec<u8> {
        maps.iter()
            .filter(|m| m.encoding == name)
            .map(|m| m.pt)
            .collect()
    };
    assert_eq!(enc("VP8"), vec![96]);
    assert_eq!(enc("VP9"), vec![98, 100]);
    assert_eq!(enc("AV1"), vec![45]);
    assert_eq!(enc("H264"), vec![102, 104, 106, 108, 127, 39, 112]);

    // The H.264 constrained-baseline pt with packetization-mode=1.
    let h264: Vec<u8> = enc("H264")
        .into_iter()
        .filter(|&pt| {
            let f = video.fmtp(pt).unwrap();
            f.param("packetization-mode") == Some("1")
                && f.param("profile-level-id") == Some("42e01f")
        })
        .collect();
    assert_eq!(h264, vec![106]);
    assert_eq!(
        video.fmtp(112).unwrap().param("PROFILE-LEVEL-ID"),
        Some("64001f")
    );
    assert_eq!(video.fmtp(98).unwrap().param("profile-id"), Some("0"));
    assert_eq!(video.fmtp(45).unwrap().param("level-idx"), Some("5"));

    // RTX mapping both ways.
    assert_eq!(video.fmtp(107).unwrap().apt(), Some(106));
    assert_eq!(video.rtx_for(96), Some(97));
    assert_eq!(video.rtx_for(106), Some(107));
    assert_eq!(video.rtx_for(127), Some(125));
    assert_eq!(video.rtx_for(116), Some(117));
    assert_eq!(video.rtx_for(118), None);

    let fbs: Vec<String> = video.rtcp_fbs(96).iter().map(|fb| fb.to_string()).collect();
    assert_eq!(
        fbs,
        [
            "96 goog-remb",
            "96 transport-cc",
            "96 ccm fir",
            "96 nack",
            "96 nack pli"
        ]
    );
    assert!(video.rtcp_fbs(118).is_empty());
}

#[test]
fn chrome_offer_video_extmaps_and_ssrcs() {
    let sdp = SessionDescription::parse(CHROME).unwrap();
    let video = sdp.media_view(1).unwrap();
    let ext = video.extmaps();
    assert_eq!(ext.len(), 13);
    let two_byte: Vec<(u8, &str)> = ext
        .iter()
        .filter(|e| e.needs_two_byte())
        .map(|e| (e.id, e.uri.as_str()))
        .collect();
    assert_eq!(
        two_byte,
        vec![
            (
                17,
                "https://aomediacodec.github.io/av1-rtp-spec/#dependency-descriptor-rtp-header-extension"
            ),
            (
                18,
                "http://www.webrtc.org/experiments/rtp-hdrext/video-layers-allocation00"
            ),
        ]
    );
    assert!(
        ext.iter()
            .any(|e| e.id == 10 && e.uri.ends_with("sdes:rtp-stream-id"))
    );
    assert_eq!(
        video.ssrc_groups(),
        vec![SsrcGroup {
            semantics: "FID".into(),
            ssrcs: vec![2868434927, 3947284018]
        }]
    );
    assert_eq!(video.ssrcs().len(), 4);
    assert_eq!(video.ssrcs()[3].attribute, "msid");
    assert_eq!(video.fingerprints()[0].bytes.len(), 32);
    assert!(video.rids().is_empty() && video.simulcast().is_none());
}

#[test]
fn chrome_simulcast_offer() {
    let sdp = SessionDescription::parse(&crlf(CHROME_SIMULCAST)).unwrap();
    let audio = sdp.media_view(0).unwrap();
    assert_eq!(audio.direction(), Direction::SendOnly);
    let video = sdp.media_view(1).unwrap();
    assert_eq!(video.direction(), Direction::SendOnly);
    let rids: Vec<(String, RidDirection)> = video
        .rids()
        .into_iter()
        .map(|r| (r.id, r.direction))
        .collect();
    assert_eq!(
        rids,
        vec![
            ("q".into(), RidDirection::Send),
            ("h".into(), RidDirection::Send),
            ("f".into(), RidDirection::Send)
        ]
    );
    let sim = video.simulcast().unwrap();
    assert_eq!(
        sim.send,
        vec![
            vec![rid("q", false)],
            vec![rid("h", false)],
            vec![rid("f", false)]
        ]
    );
    assert!(sim.recv.is_empty());
    assert!(video.ssrcs().is_empty());
    assert_eq!(
        video.fmtp(102).unwrap().param("profile-level-id"),
        Some("42e01f")
    );
}

#[test]
fn simulcast_alternatives_paused_and_rid_params() {
    let sim = Simulcast::parse("send 1,~4;2;3 recv c").unwrap();
    assert_eq!(
        sim.send,
        vec![
            vec![rid("1", false), rid("4", true)],
            vec![rid("2", false)],
            vec![rid("3", false)]
        ]
    );
    assert_eq!(sim.recv, vec![vec![rid("c", false)]]);
    assert_eq!(sim.to_string(), "send 1,~4;2;3 recv c");
    let recv_first = Simulcast::parse("recv ~a send b").unwrap();
    assert_eq!(
        (
            recv_first.recv[0][0].paused,
            recv_first.send[0][0].id.as_str()
        ),
        (true, "b")
    );
    for bad in [
        "",
        "send",
        "send a send b",
        "both a",
        "send a;;b",
        "send a b",
    ] {
        assert!(Simulcast::parse(bad).is_err(), "{bad:?}");
    }

    let r = Rid::parse("f send pt=96,98;max-width=1280;max-height=720").unwrap();
    assert_eq!(r.payload_types(), vec![96, 98]);
    assert_eq!(r.param("max-width"), Some("1280"));
    assert_eq!(
        r.to_string(),
        "f send pt=96,98;max-width=1280;max-height=720"
    );
    assert!(Rid::parse("f sideways").is_err());
    assert!(Rid::parse("f!x send").is_err());
}

#[test]
fn firefox_offer_session_level_fallback() {
    let sdp = SessionDescription::parse(FIREFOX).unwrap();
    assert_eq!(sdp.origin.username, "mozilla...THIS_IS_SDPARTA-128.0");
    assert_eq!(sdp.ice_ufrag(), Some("7f3c9a21"));
    assert!(!sdp.extmap_allow_mixed());
    let audio = sdp.media_view(0).unwrap();
    assert_eq!(audio.media().ice_ufrag(), None, "not at media level");
    assert_eq!(audio.ice_ufrag(), Some("7f3c9a21"));
    assert_eq!(audio.ice_pwd(), Some("b04e2c51d77a3f8e9c12a6b4d0f5e8c3"));
    assert_eq!(audio.ice_options(), vec!["trickle"]);
    assert!(audio.media().fingerprints().is_empty());
    let fps = audio.fingerprints();
    assert_eq!(
        (fps.len(), fps[0].bytes.len(), fps[0].bytes[0]),
        (1, 32, 0x4E)
    );
    assert_eq!(audio.setup(), Some(Setup::ActPass), "session-level setup");
    assert_eq!(audio.rtpmap(9).unwrap().channels, Some(1));
    assert_eq!(
        audio.fmtp(101).unwrap().params,
        vec![("0-15".to_string(), None)]
    );
    let ext = audio.extmaps();
    assert_eq!(ext[1].direction, Some(Direction::RecvOnly));
    assert_eq!(
        ext[1].to_string(),
        "2/recvonly urn:ietf:params:rtp-hdrext:csrc-audio-level"
    );

    let video = sdp.media_by_mid("1").unwrap();
    assert_eq!(
        video.setup(),
        Some(Setup::Active),
        "media-level setup overrides"
    );
    assert_eq!(video.direction(), Direction::RecvOnly);
    assert_eq!(video.rtx_for(126), Some(127));
    assert_eq!(
        video.fmtp(126).unwrap().param("packetization-mode"),
        Some("1")
    );
    // `*` applies to every pt, in order with the pt-specific lines.
    let fbs: Vec<String> = video
        .rtcp_fbs(121)
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(fbs, ["* nack"]);
    assert_eq!(video.rtcp_fbs(120).len(), 6);
    assert_eq!(video.rtcp_fbs(120)[5].pt, None);
}

#[test]
fn direction_falls_back_to_session() {
    let text = format!(
        "{MINIMAL}a=inactive\r\nm=audio 9 RTP/AVP 0\r\nm=video 9 RTP/AVP 96\r\na=sendonly\r\n"
    );
    let sdp = SessionDescription::parse(&text).unwrap();
    assert_eq!(sdp.direction(), Some(Direction::Inactive));
    assert_eq!(sdp.media_view(0).unwrap().direction(), Direction::Inactive);
    assert_eq!(sdp.media[0].direction(), Direction::SendRecv);
    assert_eq!(sdp.media_view(1).unwrap().direction(), Direction::SendOnly);
    let plain = SessionDescription::parse(&format!("{MINIMAL}m=audio 9 RTP/AVP 0\r\n")).unwrap();
    assert_eq!(
        plain.media_view(0).unwrap().direction(),
        Direction::SendRecv
    );
}

#[test]
fn round_trips_are_exact() {
    for text in [CHROME, CHROME_SIMULCAST, FIREFOX] {
        let sdp = SessionDescription::parse(text).unwrap();
        let written = sdp.to_string();
        assert_eq!(
            written,
            crlf(text),
            "writer reproduces RFC-ordered input byte for byte"
        );
        assert_eq!(SessionDescription::parse(&written).unwrap(), sdp);
    }
}

#[test]
fn writer_orders_lines_per_rfc() {
    let mut sdp = SessionDescription::new(Origin::new(42, 3));
    sdp.connection = Some(Connection::new("::1"));
    sdp.bandwidth.push(Bandwidth {
        kind: "AS".into(),
        value: 500,
    });
    sdp.push_attr("ice-lite", None)
        .push_attr("group", Some("BUNDLE 0"));
    let mut media = MediaDescription::new(MediaKind::Video, 9, "UDP/TLS/RTP/SAVPF", ["96", "97"])
        .with_connection(Connection::new("192.0.2.1"))
        .with_attr("mid", Some("0"));
    media.bandwidth.push(Bandwidth {
        kind: "TIAS".into(),
        value: 1_000_000,
    });
    media
        .push(Direction::RecvOnly)
        .push(Setup::Passive)
        .push(RtpMap {
            pt: 96,
            encoding: "VP8".into(),
            clock_rate: 90000,
            channels: None,
        })
        .push(RtpMap {
            pt: 97,
            encoding: "rtx".into(),
            clock_rate: 90000,
            channels: None,
        })
        .push(Fmtp {
            pt: 97,
            params: vec![("apt".into(), Some("96".into()))],
        })
        .push(RtcpFb {
            pt: Some(96),
            kind: "nack".into(),
            param: Some("pli".into()),
        })
        .push(Fingerprint {
            algorithm: "sha-256".into(),
            bytes: vec![0xAB; 32],
        })
        .push_attr("rtcp-mux", None);
    sdp.push_media(media);
    let text = sdp.to_string();
    let expected = [
        "v=0",
        "o=- 42 3 IN IP4 127.0.0.1",
        "s=-",
        "c=IN IP6 ::1",
        "b=AS:500",
        "t=0 0",
        "a=ice-lite",
        "a=group:BUNDLE 0",
        "m=video 9 UDP/TLS/RTP/SAVPF 96 97",
        "c=IN IP4 192.0.2.1",
        "b=TIAS:1000000",
        "a=mid:0",
        "a=recvonly",
        "a=setup:passive",
        "a=rtpmap:96 VP8/90000",
        "a=rtpmap:97 rtx/90000",
        "a=fmtp:97 apt=96",
        "a=rtcp-fb:96 nack pli",
    ];
    let lines: Vec<&str> = text.split("\r\n").collect();
    assert_eq!(lines[..expected.len()], expected);
    assert!(lines[expected.len()].starts_with("a=fingerprint:sha-256 AB:AB:"));
    assert_eq!(lines[expected.len() + 1..], ["a=rtcp-mux", ""]);
    let back = SessionDescription::parse(&text).unwrap();
    assert_eq!(back, sdp);
    let view = back.media_view(0).unwrap();
    assert_eq!(
        (view.rtx_for(96), view.setup(), view.ice_lite()),
        (Some(97), Some(Setup::Passive), true)
    );
}

#[test]
fn unknown_lines_and_attributes_are_tolerated() {
    let text = format!(
        "{MINIMAL}i=info\r\nu=http://x\r\ne=a@b\r\np=+1\r\nr=7d 1h 0 25h\r\nz=0 0\r\nk=clear\r\n\
         x=whatever\r\n \t\r\na=x-custom:anything goes: here\r\na=flag-only\r\n\r\n\
         m=message 9 TCP/MSRP *\r\ni=title\r\nk=prompt\r\na=accept-types:text/plain\r\n"
    );
    let sdp = SessionDescription::parse(&text).unwrap();
    assert_eq!(
        sdp.attributes[0],
        Attribute::new("x-custom", "anything goes: here")
    );
    assert_eq!(sdp.attributes[1], Attribute::flag("flag-only"));
    assert_eq!(sdp.media[0].kind, MediaKind::Other("message".into()));
    assert_eq!(sdp.media[0].formats, vec!["*"]);
    assert!(sdp.media[0].payload_types().is_empty());
}

#[test]
fn data_channel_section() {
    let text = format!(
        "{MINIMAL}m=application 9 UDP/DTLS/SCTP webrtc-datachannel\r\nc=IN IP4 0.0.0.0\r\n\
         a=mid:2\r\na=sctp-port:5000\r\na=max-message-size:262144\r\n"
    );
    let sdp = SessionDescription::parse(&text).unwrap();
    let dc = &sdp.media[0];
    assert_eq!(
        (dc.kind.clone(), dc.is_rtp()),
        (MediaKind::Application, false)
    );
    assert_eq!(
        (dc.sctp_port(), dc.max_message_size()),
        (Some(5000), Some(262144))
    );
    assert!(dc.rtpmaps().is_empty());
}

#[test]
fn candidate_parse_and_write() {
    let line = "candidate:842163049 1 udp 1677729535 198.51.100.7 52200 typ srflx raddr 10.0.0.2 rport 33192 generation 0 ufrag gydc network-cost 999";
    let c = Candidate::parse(line).unwrap();
    assert_eq!(c, Candidate::parse(&format!("a={line}")).unwrap());
    assert_eq!(c.foundation, "842163049");
    assert_eq!(
        (c.raddr.as_deref(), c.rport),
        (Some("10.0.0.2"), Some(33192))
    );
    assert_eq!(c.extension("ufrag"), Some("gydc"));
    assert_eq!(format!("candidate:{c}"), line);
    assert_eq!(Attribute::from(&c).to_string(), line);
    let v6 = Candidate::parse("1 1 UDP 2130706431 2001:db8::1 40007 typ host").unwrap();
    assert_eq!(
        (v6.transport.as_str(), v6.address.as_str()),
        ("UDP", "2001:db8::1")
    );
}

#[test]
fn sdpfrag_whip_trickle() {
    // RFC 9725 §4.4.1-style trickle PATCH body.
    let body = "a=ice-options:trickle ice2\r\na=group:BUNDLE 0 1\r\n\
                m=audio 9 UDP/TLS/RTP/SAVPF 111\r\na=mid:0\r\na=ice-ufrag:EsAw\r\n\
                a=ice-pwd:bP+XJMM09aR8AiX1jdukzR6Y\r\n\
                a=candidate:1387637174 1 udp 2122260223 192.0.2.1 61764 typ host generation 0 ufrag EsAw network-id 1\r\n\
                a=candidate:3471623853 1 udp 2122194687 198.51.100.2 61765 typ host generation 0 ufrag EsAw network-id 2\r\n\
                a=candidate:473322822 1 tcp 1518280447 192.0.2.1 9 typ host tcptype active generation 0 ufrag EsAw network-id 1\r\n\
                a=end-of-candidates\r\n";
    let frag = SdpFrag::parse(body).unwrap();
    assert_eq!(frag.ice_options(), vec!["trickle", "ice2"]);
    assert_eq!(
        frag.group_bundle(),
        Some(vec!["0".to_string(), "1".to_string()])
    );
    assert_eq!(frag.ice_ufrag(), None);
    let m = frag.media_by_mid("0").unwrap();
    assert_eq!(
        (m.ice_ufrag(), m.ice_pwd()),
        (Some("EsAw"), Some("bP+XJMM09aR8AiX1jdukzR6Y"))
    );
    assert_eq!(m.candidates().len(), 3);
    assert!(m.end_of_candidates());
    let all = frag.candidates();
    assert_eq!(
        (all[2].0, all[2].1.extension("tcptype")),
        (Some("0"), Some("active"))
    );
    assert_eq!(frag.to_string(), body);
    assert_eq!(SdpFrag::parse(&frag.to_string()).unwrap(), frag);
}

#[test]
fn sdpfrag_ice_restart_request_session_level() {
    let body = "a=ice-ufrag:ZZZZ\na=ice-pwd:AsDfGhJkLqWeRtYuIoPzXcVb\na=ice-options:trickle\n\
                m=audio 9 UDP/TLS/RTP/SAVPF 111\na=mid:0\n";
    let frag = SdpFrag::parse(body).unwrap();
    assert_eq!(frag.ice_ufrag(), Some("ZZZZ"));
    let m = frag.media_view(0).unwrap();
    assert_eq!(
        (m.mid(), m.ice_ufrag(), m.ice_pwd()),
        (Some("0"), Some("ZZZZ"), Some("AsDfGhJkLqWeRtYuIoPzXcVb"))
    );
    assert!(m.candidates().is_empty() && !m.end_of_candidates());
    assert_eq!(SdpFrag::parse(""), Ok(SdpFrag::default()));
    assert_eq!(
        SdpFrag::parse("a=ice-ufrag:ok\nm=audio 9\n"),
        Err(syntax(2, "m= line needs at least 4 fields"))
    );
    assert_eq!(
        SdpFrag::parse("a=candidate:x"),
        Err(SdpError::Attribute {
            line: 1,
            name: "candidate".into(),
            reason: "missing component"
        })
    );
}

#[test]
fn ice_restart_answer_fragment() {
    let cand = Candidate::parse("1 1 udp 2130706431 198.51.100.1 39132 typ host").unwrap();
    let frag = IceRestartAnswer {
        ice_lite: true,
        ice_options: vec!["trickle".into(), "ice2".into()],
        ufrag: "289b31b754eaa438".into(),
        pwd: "0b66f472495ef0ccac7bda653ab6be49ea13114472a5d10a".into(),
        bundle: Some(vec!["0".into(), "1".into()]),
        media: Some((
            MediaDescription::new(MediaKind::Audio, 9, "UDP/TLS/RTP/SAVPF", ["111"])
                .with_attr("x-dropped", None),
            "0".into(),
        )),
        candidates: vec![cand.clone()],
        end_of_candidates: true,
    }
    .into_frag();
    assert_eq!(
        frag.to_string(),
        "a=ice-lite\r\na=ice-options:trickle ice2\r\na=group:BUNDLE 0 1\r\n\
         m=audio 9 UDP/TLS/RTP/SAVPF 111\r\na=mid:0\r\na=ice-ufrag:289b31b754eaa438\r\n\
         a=ice-pwd:0b66f472495ef0ccac7bda653ab6be49ea13114472a5d10a\r\n\
         a=candidate:1 1 udp 2130706431 198.51.100.1 39132 typ host\r\na=end-of-candidates\r\n"
    );
    let back = SdpFrag::parse(&frag.to_string()).unwrap();
    assert_eq!(back, frag);
    assert!(back.ice_lite());
    assert_eq!(back.media_view(0).unwrap().candidates(), vec![cand]);

    let session_level = IceRestartAnswer {
        ice_lite: false,
        ice_options: Vec::new(),
        ufrag: "abcd".into(),
        pwd: "efghijklmnopqrstuvwxyz".into(),
        bundle: None,
        media: None,
        candidates: Vec::new(),
        end_of_candidates: false,
    }
    .into_frag();
    assert_eq!(
        session_level.to_string(),
        "a=ice-ufrag:abcd\r\na=ice-pwd:efghijklmnopqrstuvwxyz\r\n"
    );
}

#[test]
fn fuzz_body_runs_on_samples() {
    for sample in [
        CHROME,
        CHROME_SIMULCAST,
        FIREFOX,
        "",
        "v=0",
        "a=mid:0\nm=audio 9 RTP/AVP 0\n",
    ] {
        fuzz_sdp(sample.as_bytes());
    }
    fuzz_sdp(&[0xff, 0xfe, b'v']);
}

#[test]
fn typed_values_display_as_attribute_values() {
    let empty = Fmtp {
        pt: 100,
        params: Vec::new(),
    };
    assert_eq!(Attribute::from(&empty).to_string(), "fmtp:100");
    let h264 = Fmtp::parse("102 profile-level-id=42e01f; packetization-mode=1").unwrap();
    assert_eq!(
        h264.to_string(),
        "102 profile-level-id=42e01f;packetization-mode=1"
    );
    assert_eq!(Setup::parse("holdconn"), Ok(Setup::HoldConn));
    assert_eq!(Direction::SendOnly.reverse(), Direction::RecvOnly);
    let fp =
        Fingerprint::parse("SHA-1 00:11:22:33:44:55:66:77:88:99:aa:bb:cc:dd:ee:ff:00:11:22:33")
            .unwrap();
    assert_eq!(fp.algorithm, "sha-1");
    assert_eq!(
        fp.to_string(),
        "sha-1 00:11:22:33:44:55:66:77:88:99:AA:BB:CC:DD:EE:FF:00:11:22:33"
    );
    let g = SsrcGroup {
        semantics: "SIM".into(),
        ssrcs: vec![1, 2, 3],
    };
    assert_eq!(Attribute::from(g).to_string(), "ssrc-group:SIM 1 2 3");
}
