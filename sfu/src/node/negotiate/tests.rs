use super::*;

const CHROME: &str = include_str!("../../../../rtc/src/sdp/testdata/chrome_offer.sdp");
/// What GStreamer 1.22's whipsink (webrtcbin, max-bundle) offers: the second line has port 0
/// and `a=bundle-only`, both lines use payload type 96.
const GSTREAMER: &str = include_str!("../../../../rtc/src/sdp/testdata/gstreamer_whip_offer.sdp");
const SIMULCAST: &str = include_str!("../../../../rtc/src/sdp/testdata/chrome_simulcast_offer.sdp");

fn params<'a>(ice: &'a IceCredentials, cands: &'a [SocketAddr]) -> AnswerParams<'a> {
    AnswerParams {
        local_ice: ice,
        fingerprint: &[0xAB; 32],
        candidates: cands,
        origin_id: 42,
        stream: "cam",
    }
}

fn ice() -> IceCredentials {
    IceCredentials {
        ufrag: "srv1".into(),
        pwd: "serverpassword0123456789".into(),
    }
}

/// [`GSTREAMER`] with its Opus on payload type 111 (`rtpopuspay pt=111`).
fn gstreamer() -> String {
    let (video, audio) = GSTREAMER.split_at(GSTREAMER.find("m=audio").unwrap());
    let audio = audio
        .replace("SAVPF 96", "SAVPF 111")
        .replace("a=rtpmap:96 ", "a=rtpmap:111 ")
        .replace("a=rtcp-fb:96 ", "a=rtcp-fb:111 ")
        .replace("a=fmtp:96 ", "a=fmtp:111 ");
    format!("{video}{audio}")
}

#[test]
fn one_payload_type_for_two_codecs_in_a_bundle_is_refused() {
    let ice = ice();
    // GStreamer's payloaders all default to 96: VP8 and Opus on one payload type.
    let e = negotiate_publish(GSTREAMER, &params(&ice, &[])).unwrap_err();
    let SignalError::BadSdp(why) = &e else {
        panic!("{e:?}")
    };
    assert!(
        why.contains(
            "payload type 96 is VP8/90000 on m-line video0 and OPUS/48000 on m-line audio1"
        ) && why.contains("RFC 8843"),
        "{why}"
    );
    // The same in a viewer's offer.
    let e = negotiate_view(&as_viewer(GSTREAMER), &[], &params(&ice, &[]), &mut || 1).unwrap_err();
    assert!(matches!(e, SignalError::BadSdp(_)), "{e:?}");
    // Outside the group (a line the offer disabled) a payload type may mean something else.
    let unbundled = GSTREAMER
        .replace("a=group:BUNDLE video0 audio1", "a=group:BUNDLE video0")
        .replace("a=bundle-only\r\n", "");
    assert!(negotiate_publish(&unbundled, &params(&ice, &[])).is_ok());
    // The same codec on one payload type in two lines (Chrome's camera and screen) is fine.
    let two = CHROME.replace("a=group:BUNDLE 0 1", "a=group:BUNDLE 0 1 2")
        + &CHROME[CHROME.find("m=video").unwrap()..].replace("a=mid:1", "a=mid:2");
    let n = negotiate_publish(&two, &params(&ice, &[])).unwrap();
    assert_eq!(n.media.len(), 3);
    assert!(n.media[2].accepted);
}

#[test]
fn lines_not_accepted_say_why() {
    let ice = ice();
    let n = negotiate_publish(
        &CHROME
            .replacen("a=sendrecv", "a=recvonly", 2)
            .replacen("a=recvonly", "a=sendrecv", 1),
        &params(&ice, &[]),
    )
    .unwrap();
    assert!(n.media[0].accepted && n.media[0].rejected.is_none());
    assert_eq!(
        n.media[1].rejected.as_deref(),
        Some("a WHIP offer's m=video line must send (sendonly or sendrecv)")
    );
    let state = n.media[1].to_state();
    assert_eq!(MediaLine::from_state(&state).unwrap(), n.media[1]);
    // A viewer whose video takes only H.264 packetization-mode=0 gets audio, and the reason.
    let publisher = negotiate_publish(CHROME, &params(&ice, &[])).unwrap();
    let video = CHROME[CHROME.find("m=video").unwrap()..]
        .lines()
        .next()
        .unwrap();
    let only_h264_0 = as_viewer(CHROME)
        .replace(video, "m=video 9 UDP/TLS/RTP/SAVPF 102")
        .replace(
            "a=fmtp:102 level-asymmetry-allowed=1;packetization-mode=1",
            "a=fmtp:102 level-asymmetry-allowed=1;packetization-mode=0",
        );
    let n = negotiate_view(
        &only_h264_0,
        &publisher.media,
        &params(&ice, &[]),
        &mut || 7,
    )
    .unwrap();
    assert!(n.media[0].accepted);
    let why = n.media[1].rejected.as_deref().unwrap();
    assert!(
        why.contains("the stream's video track is VP8")
            && why.contains("payload type 102 is H264 packetization-mode=0"),
        "{why}"
    );
}

fn as_viewer(offer: &str) -> String {
    offer
        .replace("a=sendrecv", "a=recvonly")
        .replace("a=sendonly", "a=recvonly")
}

#[test]
fn publish_answers_chrome_with_opus_and_vp8() {
    let ice = ice();
    let cands = ["127.0.0.1:5000".parse().unwrap()];
    let n = negotiate_publish(CHROME, &params(&ice, &cands)).unwrap();
    assert_eq!(n.dtls_role, DtlsRole::Client);
    assert_eq!(n.remote_ice.ufrag, "Kx7q");
    assert_eq!(n.remote_fingerprint.len(), 32);
    let (a, v) = (&n.media[0], &n.media[1]);
    assert!(a.accepted && v.accepted);
    assert_eq!(
        (a.codec, a.pt, a.nack, a.rtx_pt),
        (Codec::Opus, 111, false, None)
    );
    assert_eq!(a.fmtp, "minptime=10;useinbandfec=1");
    assert_eq!((v.codec, v.pt, v.rtx_pt), (Codec::Vp8, 96, Some(97)));
    // Transport-wide CC (the browser's own send-side estimate runs on our feedback); REMB is
    // only for peers without it.
    assert!(v.nack && v.pli && v.fir && v.twcc && !v.remb);
    assert!(a.twcc && !a.remb);
    assert_eq!(v.ext_id(EXT_ABS_SEND_TIME), Some(2));
    assert_eq!(v.ext_id(EXT_MID), Some(4));
    assert_eq!(v.ext_id(EXT_RID), Some(10));
    assert_eq!(v.ext_id(EXT_TRANSPORT_CC), Some(3));
    assert_eq!(a.remote_ssrcs, vec![(1203943516, None)]);

    let answer = SessionDescription::parse(&n.answer).unwrap();
    assert!(answer.ice_lite());
    assert_eq!(answer.group_bundle(), Some(vec!["0".into(), "1".into()]));
    let av = answer.media_view(1).unwrap();
    assert_eq!(av.direction(), Direction::RecvOnly);
    assert_eq!(av.setup(), Some(Setup::Active));
    assert_eq!(av.ice_ufrag(), Some("srv1"));
    assert_eq!(av.payload_types(), vec![96, 97]);
    assert_eq!(av.rtx_for(96), Some(97));
    assert_eq!(av.candidates()[0].port, 5000);
    assert!(av.end_of_candidates());
    assert!(n.answer.contains("a=extmap-allow-mixed\r\n"));
    assert!(n.answer.contains("a=rtcp-fb:96 transport-cc\r\n"));
    assert!(!n.answer.contains("goog-remb"));
    // Without transport-wide CC in the offer, REMB it is.
    let old = CHROME.replace(" transport-cc", " x-none");
    let n = negotiate_publish(&old, &params(&ice, &cands)).unwrap();
    assert!(n.media[1].remb && !n.media[1].twcc);
    assert!(n.media[1].ext_id(EXT_TRANSPORT_CC).is_none());
    assert!(n.answer.contains("a=rtcp-fb:96 goog-remb\r\n"));
}

#[test]
fn publish_takes_h264_when_preferred_and_skips_packetization_mode_0() {
    // Put H.264 (pm=0 first, then pm=1) ahead of VP8.
    let offer = CHROME.replace(
        "m=video 9 UDP/TLS/RTP/SAVPF 96 97 102",
        "m=video 9 UDP/TLS/RTP/SAVPF 104 102 96 97",
    );
    let ice = ice();
    let n = negotiate_publish(&offer, &params(&ice, &[])).unwrap();
    let v = &n.media[1];
    assert_eq!(v.codec, Codec::H264);
    assert!(v.fmtp.contains("packetization-mode=1"), "{}", v.fmtp);
}

#[test]
fn view_plays_the_publishers_codecs_with_its_own_payload_types() {
    let ice = ice();
    let publisher = negotiate_publish(CHROME, &params(&ice, &[])).unwrap();
    let offer = as_viewer(CHROME)
        .replace("a=rtpmap:96 VP8/90000", "a=rtpmap:96 VP9/90000")
        .replace("a=rtpmap:98 VP9/90000", "a=rtpmap:98 VP8/90000")
        .replace(
            "a=fmtp:98 profile-id=0",
            "a=fmtp:98 x-google-start-bitrate=1",
        );
    let mut next = 1000u32;
    let mut next_ssrc = || {
        next += 1;
        next
    };
    let n = negotiate_view(&offer, &publisher.media, &params(&ice, &[]), &mut next_ssrc).unwrap();
    let v = &n.media[1];
    assert!(v.accepted);
    assert_eq!((v.codec, v.pt, v.source), (Codec::Vp8, 98, Some(1)));
    assert_eq!(v.local_rtx_ssrc.is_some(), v.rtx_pt.is_some());
    let answer = SessionDescription::parse(&n.answer).unwrap();
    let av = answer.media_view(1).unwrap();
    assert_eq!(av.direction(), Direction::SendOnly);
    assert!(
        av.ssrcs()
            .iter()
            .any(|s| s.ssrc == v.local_ssrc && s.attribute == "cname")
    );
    assert_eq!(n.media[0].source, Some(0));
}

#[test]
fn view_matches_the_h264_profile() {
    let ice = ice();
    let pub_offer = CHROME.replace(
        "m=video 9 UDP/TLS/RTP/SAVPF 96 97 102",
        "m=video 9 UDP/TLS/RTP/SAVPF 106 102 96 97",
    );
    let publisher = negotiate_publish(&pub_offer, &params(&ice, &[])).unwrap();
    assert_eq!(publisher.media[1].codec, Codec::H264);
    let want = h264_profile(&publisher.media[1].fmtp);
    let n = negotiate_view(
        &as_viewer(CHROME),
        &publisher.media,
        &params(&ice, &[]),
        &mut || 7,
    )
    .unwrap();
    let v = &n.media[1];
    assert_eq!(v.codec, Codec::H264);
    assert_eq!(h264_profile(&v.fmtp), want);
}

#[test]
fn view_without_the_streams_codec_is_unprocessable() {
    let ice = ice();
    let publisher = negotiate_publish(CHROME, &params(&ice, &[])).unwrap();
    let audio_only_pcmu = "v=0\r\no=- 1 2 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\na=group:BUNDLE 0\r\n\
        m=audio 9 UDP/TLS/RTP/SAVPF 0\r\nc=IN IP4 0.0.0.0\r\na=mid:0\r\na=recvonly\r\na=rtcp-mux\r\n\
        a=ice-ufrag:abcd\r\na=ice-pwd:abcdefghijklmnopqrstuvwx\r\n\
        a=fingerprint:sha-256 7D:2B:19:A4:E0:5C:88:F1:36:0B:9E:C2:4A:D7:13:6F:A0:52:BB:E9:04:3C:7E:91:D8:25:6A:F3:0C:B4:48:1E\r\n\
        a=setup:actpass\r\na=rtpmap:0 PCMU/8000\r\n";
    let e = negotiate_view(
        audio_only_pcmu,
        &publisher.media,
        &params(&ice, &[]),
        &mut || 1,
    )
    .unwrap_err();
    assert_eq!(e.status(), 422);
    assert!(e.to_string().contains("opus"), "{e}");
}

#[test]
fn simulcast_rids_are_accepted() {
    let ice = ice();
    let n = negotiate_publish(SIMULCAST, &params(&ice, &[])).unwrap();
    assert_eq!(n.media[1].rids, vec!["q", "h", "f"]);
    assert!(n.answer.contains("a=simulcast:recv q;h;f\r\n"));
    assert!(n.answer.contains("a=rid:f recv\r\n"));
}

#[test]
fn bad_offers_get_specific_errors() {
    let ice = ice();
    let p = params(&ice, &[]);
    let status = |offer: &str| {
        let e = negotiate_publish(offer, &p).unwrap_err();
        (e.status(), e.to_string())
    };
    let (s, r) = status("hello world");
    assert_eq!(s, 400, "{r}");
    let plain = "v=0\r\no=- 1 2 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\nm=audio 5004 RTP/AVP 0\r\na=rtpmap:0 PCMU/8000\r\n";
    let (s, r) = status(plain);
    assert_eq!(s, 422);
    assert!(r.contains("ICE"), "{r}");
    let (s, r) = status(
        &CHROME
            .replace("a=group:BUNDLE 0 1\r\n", "")
            .replace("a=group:BUNDLE 0 1\n", ""),
    );
    assert_eq!(s, 422);
    assert!(r.contains("BUNDLE"), "{r}");
    let (s, r) = status(
        &CHROME
            .replace("a=rtcp-mux\r\n", "")
            .replace("a=rtcp-mux\n", ""),
    );
    assert_eq!(s, 422);
    assert!(r.contains("rtcp-mux"), "{r}");
    let (s, r) = status(&as_viewer(CHROME));
    assert_eq!(s, 422);
    assert!(r.contains("no supported media"), "{r}");
    let (s, r) = status(&CHROME.replace("UDP/TLS/RTP/SAVPF", "RTP/AVP"));
    assert_eq!(s, 422);
    assert!(r.contains("SAVPF"), "{r}");
}

#[test]
fn media_lines_round_trip_through_state() {
    let ice = ice();
    let n = negotiate_publish(SIMULCAST, &params(&ice, &[])).unwrap();
    for m in &n.media {
        assert_eq!(&MediaLine::from_state(&m.to_state()).unwrap(), m);
    }
}

#[test]
fn bundle_only_lines_with_port_0_are_live_and_rejected_lines_carry_the_transport() {
    let ice = ice();
    let n = negotiate_publish(&gstreamer(), &params(&ice, &[])).unwrap();
    let (v, a) = (&n.media[0], &n.media[1]);
    assert!(v.accepted && a.accepted, "{:?}", n.media);
    assert_eq!((v.codec, v.pt), (Codec::Vp8, 96));
    assert_eq!((a.codec, a.pt), (Codec::Opus, 111));
    let answer = SessionDescription::parse(&n.answer).unwrap();
    assert_eq!(
        answer.group_bundle(),
        Some(vec!["video0".into(), "audio1".into()])
    );
    let al = answer.media_view(1).unwrap();
    assert_eq!((al.port, al.mid()), (9, Some("audio1")));
    // A bundle-only line need not repeat the transport (RFC 8843 §7.2).
    let bare = gstreamer().replace("a=bundle-only\r\na=rtcp-mux\r\n", "a=bundle-only\r\n");
    assert!(negotiate_publish(&bare, &params(&ice, &[])).unwrap().media[1].accepted);
    // Outside the BUNDLE group a port-0 line stays rejected.
    let unbundled = gstreamer().replace("a=group:BUNDLE video0 audio1", "a=group:BUNDLE video0");
    let n = negotiate_publish(&unbundled, &params(&ice, &[])).unwrap();
    assert!(!n.media[1].accepted);
    // ... and its answer line carries ICE credentials, fingerprint and setup, which webrtcbin
    // requires of every line ("No fingerprint lines in sdp for media 1").
    let answer = SessionDescription::parse(&n.answer).unwrap();
    let rejected = answer.media_view(1).unwrap();
    assert_eq!(rejected.port, 0);
    assert_eq!(rejected.ice_ufrag(), Some("srv1"));
    assert_eq!(rejected.fingerprints().len(), 1);
    assert_eq!(rejected.setup(), Some(Setup::Active));
}

#[test]
fn opus_without_a_channel_count_is_taken_and_h264_without_packetization_mode_is_named() {
    let ice = ice();
    let p = params(&ice, &[]);
    let n = negotiate_publish(&gstreamer().replace("OPUS/48000/2", "OPUS/48000"), &p).unwrap();
    assert_eq!(n.media[1].codec, Codec::Opus);
    assert!(n.answer.contains("opus/48000/2"));
    let mono = negotiate_publish(&gstreamer().replace("OPUS/48000/2", "OPUS/48000/1"), &p).unwrap();
    assert!(!mono.media[1].accepted);

    let h264 = gstreamer()
        .replace(
            "a=rtpmap:96 VP8/90000",
            "a=rtpmap:96 H264/90000\r\na=fmtp:96 profile-level-id=42e01f",
        )
        .replace("a=rtpmap:111 OPUS/48000/2", "a=rtpmap:111 OPUS/48000/1");
    let e = negotiate_publish(&h264, &p).unwrap_err();
    assert_eq!(e.status(), 422);
    let r = e.to_string();
    assert!(
        r.contains("without packetization-mode") && r.contains("payload type 96"),
        "{r}"
    );
    let mode0 = h264.replace(
        "profile-level-id=42e01f",
        "profile-level-id=42e01f;packetization-mode=0",
    );
    let r = negotiate_publish(&mode0, &p).unwrap_err().to_string();
    assert!(r.contains("packetization-mode=0"), "{r}");
    let e = negotiate_publish(
        &gstreamer()
            .replace("VP8/90000", "VP8/48000")
            .replace("OPUS/48000/2", "OPUS/48000/1"),
        &p,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("VP8/48000") && e.contains("90000"), "{e}");
}

#[test]
fn vp9_and_av1_profile_0_are_taken_and_others_named() {
    let ice = ice();
    let cands = ["127.0.0.1:5000".parse().unwrap()];
    // VP9 first: published as VP9 profile 0, its RTX kept.
    let vp9 = CHROME.replace(
        "m=video 9 UDP/TLS/RTP/SAVPF 96 97 102",
        "m=video 9 UDP/TLS/RTP/SAVPF 98 99 96 97 102",
    );
    let n = negotiate_publish(&vp9, &params(&ice, &cands)).unwrap();
    let v = &n.media[1];
    assert_eq!((v.codec, v.pt, v.rtx_pt), (Codec::Vp9, 98, Some(99)));
    assert!(n.answer.contains("a=rtpmap:98 VP9/90000\r\n"));
    assert!(n.answer.contains("a=fmtp:98 profile-id=0\r\n"));
    // AV1 first, with the dependency descriptor extension taken (SVC layers are read from it).
    let av1 = CHROME.replace(
        "m=video 9 UDP/TLS/RTP/SAVPF 96 97 102",
        "m=video 9 UDP/TLS/RTP/SAVPF 45 46 96 97 102",
    );
    let n = negotiate_publish(&av1, &params(&ice, &cands)).unwrap();
    let v = &n.media[1];
    assert_eq!((v.codec, v.pt), (Codec::Av1, 45));
    assert_eq!(v.ext_id(EXT_DEPENDENCY_DESCRIPTOR), Some(17));
    // A publisher of VP9 profile 2 only: refused with the reason.
    let p2 = CHROME
        .replace(
            "m=video 9 UDP/TLS/RTP/SAVPF 96 97 102 103 104 105 106 107 108 109 127 125 39 40 45 46 98 99 100 101 112 113 116 117 118",
            "m=video 9 UDP/TLS/RTP/SAVPF 98",
        )
        .replace("a=fmtp:98 profile-id=0", "a=fmtp:98 profile-id=2")
        .replace(
            "m=audio 58718 UDP/TLS/RTP/SAVPF 111 63 9 0 8 13 110 126",
            "m=audio 58718 UDP/TLS/RTP/SAVPF 0",
        );
    let err = negotiate_publish(&p2, &params(&ice, &cands)).unwrap_err();
    assert!(err.to_string().contains("VP9 profile-id=2"), "{err}");
}
