//! A publisher sending simulcast: one synthetic stream per layer, each with its own SSRC,
//! sequence numbers, rid, bitrate, keyframes and RTX, as Chrome does with `sendEncodings`.

#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::*;
use crate::sdp::extmap::{EXT_MID, EXT_RID, EXT_RRID};

const KEY: [u8; 16] = [1; 16];
const SALT: [u8; 12] = [2; 12];
const SERVER_KEY: [u8; 16] = [3; 16];
const SERVER_SALT: [u8; 12] = [4; 12];

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A server's answer to a publisher's VP8 + Opus offer; `simulcast` receives those rids.
fn publisher_answer(simulcast: Option<&str>) -> String {
    let fp = cert::format_fingerprint(&[0xAB; 32]);
    let common = format!(
        "c=IN IP4 0.0.0.0\r\na=ice-ufrag:srv1\r\na=ice-pwd:{}\r\na=fingerprint:sha-256 {fp}\r\n\
         a=setup:passive\r\na=recvonly\r\na=rtcp-mux\r\n",
        "p".repeat(24)
    );
    let sim = simulcast.map_or(String::new(), |rids| {
        let mut s = String::from(
            "a=extmap:10 urn:ietf:params:rtp-hdrext:sdes:rtp-stream-id\r\n\
             a=extmap:11 urn:ietf:params:rtp-hdrext:sdes:repaired-rtp-stream-id\r\n",
        );
        for rid in rids.split(';') {
            s.push_str(&format!("a=rid:{} recv\r\n", rid.trim_start_matches('~')));
        }
        s.push_str(&format!("a=simulcast:recv {rids}\r\n"));
        s
    });
    format!(
        "v=0\r\no=- 1 2 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\na=group:BUNDLE 0 1\r\na=ice-lite\r\n\
         m=audio 9 UDP/TLS/RTP/SAVPF 111\r\n{common}a=mid:0\r\n\
         a=extmap:2 http://www.webrtc.org/experiments/rtp-hdrext/abs-send-time\r\n\
         a=extmap:4 urn:ietf:params:rtp-hdrext:sdes:mid\r\na=rtpmap:111 opus/48000/2\r\n\
         a=candidate:1 1 udp 2130706431 10.0.0.1 5000 typ host\r\n\
         m=video 9 UDP/TLS/RTP/SAVPF 96 97\r\n{common}a=mid:1\r\n\
         a=extmap:2 http://www.webrtc.org/experiments/rtp-hdrext/abs-send-time\r\n\
         a=extmap:4 urn:ietf:params:rtp-hdrext:sdes:mid\r\n{sim}a=rtpmap:96 VP8/90000\r\n\
         a=rtcp-fb:96 ccm fir\r\na=rtcp-fb:96 nack\r\na=rtcp-fb:96 nack pli\r\n\
         a=rtpmap:97 rtx/90000\r\na=fmtp:97 apt=96\r\n"
    )
}

fn server() -> SocketAddr {
    "10.0.0.1:5000".parse().unwrap()
}

/// A publisher that applied `answer` and whose SRTP is keyed (the DTLS handshake skipped), with
/// the server's SRTP contexts (protect, unprotect).
fn connected(t0: Instant, cfg: PeerConfig, answer: &str) -> (Peer, SrtpContext, SrtpContext) {
    let mut peer = Peer::new(cfg, Arc::new(cert::generate([9; 32]).unwrap()), t0);
    let _ = peer.create_offer();
    peer.apply_answer(t0, answer).unwrap();
    while peer.poll_transmit().is_some() {}
    let keys = dtls::SrtpKeys {
        profile: SrtpProfile::AeadAes128Gcm.dtls_id(),
        local_key: KEY.to_vec(),
        local_salt: SALT.to_vec(),
        remote_key: SERVER_KEY.to_vec(),
        remote_salt: SERVER_SALT.to_vec(),
    };
    peer.on_keys(t0, &keys);
    let profile = SrtpProfile::AeadAes128Gcm;
    (
        peer,
        SrtpContext::new(profile, &SERVER_KEY, &SERVER_SALT).unwrap(),
        SrtpContext::new(profile, &KEY, &SALT).unwrap(),
    )
}

fn config(t0: Instant) -> PeerConfig {
    let role = PeerRole::Publisher {
        video: Codec::Vp8,
        audio: true,
    };
    PeerConfig::new(role, 11, "10.0.0.2:40000".parse().unwrap(), t0)
}

fn simulcast_config(t0: Instant) -> PeerConfig {
    PeerConfig {
        simulcast: Some(SimulcastConfig::chrome_720p()),
        ..config(t0)
    }
}

/// Protects one RTCP compound from the server.
fn rtcp_from_server(tx: &mut SrtpContext, body: &[u8]) -> Vec<u8> {
    let mut p = body.to_vec();
    let len = p.len();
    p.resize(len + tx.profile().rtcp_overhead(), 0);
    let n = tx.protect_rtcp(&mut p, len).unwrap();
    p.truncate(n);
    p
}

/// A publisher's RTP packet, decrypted and read.
#[derive(Debug, Clone)]
struct Sent {
    data: Vec<u8>,
    h: RtpHeader,
}

impl Sent {
    fn ext(&self, id: u8) -> Option<&[u8]> {
        self.h.find_extension(&self.data, id)
    }

    fn stamp(&self) -> Stamp {
        read_stamp(Codec::Vp8, self.h.payload(&self.data)).unwrap()
    }

    fn keyframe_start(&self) -> bool {
        Codec::Vp8.is_keyframe_start(self.h.payload(&self.data))
    }
}

/// Runs `peer` until `until`, handing every RTP packet it sends (decrypted) and every SSRC of
/// its sender reports to the caller's lists.
fn run(
    peer: &mut Peer,
    rx: &mut SrtpContext,
    until: Instant,
    rtp: &mut Vec<Sent>,
    srs: &mut Vec<u32>,
) {
    while let Some(t) = peer.poll_timeout().filter(|t| *t < until) {
        peer.handle_timeout(t);
        while let Some((to, mut d)) = peer.poll_transmit() {
            assert_eq!(to, server());
            // ICE checks go on beside the media.
            if !matches!(d.first(), Some(128..=191)) {
                continue;
            }
            if rtp::is_rtcp(&d) {
                let n = rx.unprotect_rtcp(&mut d).unwrap();
                for p in RtcpIter::new(&d[..n]) {
                    if let Ok(RtcpPacket::SenderReport(sr)) = p {
                        srs.push(sr.info.ssrc);
                    }
                }
                continue;
            }
            let n = rx.unprotect_rtp(&mut d).unwrap();
            d.truncate(n);
            let h = RtpHeader::parse(&d).unwrap();
            rtp.push(Sent { data: d, h });
        }
    }
}

/// Sends one RTCP packet from the server, written by `write`.
fn feedback(
    peer: &mut Peer,
    tx: &mut SrtpContext,
    now: Instant,
    write: impl FnOnce(&mut [u8]) -> usize,
) {
    let mut b = vec![0u8; 128];
    let n = write(&mut b);
    let mut p = rtcp_from_server(tx, &b[..n]);
    peer.handle_datagram(now, server(), &mut p);
}

#[test]
fn the_offer_sends_the_layers_by_rid_like_chrome() {
    let t0 = Instant::now();
    let mut peer = Peer::new(
        simulcast_config(t0),
        Arc::new(cert::generate([9; 32]).unwrap()),
        t0,
    );
    let offer = peer.create_offer();
    let sdp = crate::sdp::SessionDescription::parse(&offer).unwrap();
    let m: Vec<_> = sdp.media_views().collect();
    let video = &m[1];
    // What Chrome writes for `sendEncodings` of rids q, h, f: rids and their order, the rid
    // and repaired-rid extensions next to mid, and no SSRCs.
    let rids: Vec<_> = video.rids().into_iter().map(|r| r.id).collect();
    assert_eq!(rids, ["q", "h", "f"]);
    assert!(offer.contains("a=rid:q send\r\na=rid:h send\r\na=rid:f send\r\n"));
    assert!(offer.contains("a=simulcast:send q;h;f\r\n"), "{offer}");
    let sim = video.simulcast().unwrap();
    assert_eq!(sim.send.len(), 3);
    let exts: Vec<_> = video.extmaps().into_iter().map(|e| (e.id, e.uri)).collect();
    for want in [(4, EXT_MID), (10, EXT_RID), (11, EXT_RRID)] {
        assert!(exts.contains(&(want.0, want.1.into())), "{exts:?}");
    }
    assert!(video.declared_ssrcs().is_empty(), "{offer}");
    assert_eq!(video.direction(), crate::sdp::Direction::SendOnly);
    // Audio is as it always was; a single-stream publisher offers no rids.
    assert_eq!(m[0].declared_ssrcs().len(), 1);
    assert!(m[0].rids().is_empty() && m[0].simulcast().is_none());
    let mut single = Peer::new(config(t0), Arc::new(cert::generate([9; 32]).unwrap()), t0);
    let offer = single.create_offer();
    assert!(
        !offer.contains("a=rid:") && !offer.contains(EXT_RID),
        "{offer}"
    );
}

#[test]
fn each_layer_is_its_own_stream_with_its_rid_bitrate_and_stamps() {
    let t0 = Instant::now();
    let answer = publisher_answer(Some("q;h;f"));
    let (mut peer, _tx, mut rx) = connected(t0, simulcast_config(t0), &answer);
    let (mut rtp, mut srs) = (Vec::new(), Vec::new());
    run(&mut peer, &mut rx, t0 + ms(2000), &mut rtp, &mut srs);
    let st = peer.stats();
    let sent: Vec<_> = st
        .sent
        .iter()
        .map(|s| (s.rid.as_deref(), s.codec))
        .collect();
    assert_eq!(
        sent,
        [
            (Some("q"), Codec::Vp8),
            (Some("h"), Codec::Vp8),
            (Some("f"), Codec::Vp8),
            (None, Codec::Opus)
        ]
    );
    let mut ssrcs: Vec<u32> = st.sent.iter().map(|s| s.ssrc).collect();
    ssrcs.extend(st.sent.iter().filter_map(|s| s.rtx_ssrc));
    ssrcs.sort_unstable();
    ssrcs.dedup();
    assert_eq!(ssrcs.len(), 7, "media and RTX SSRCs all distinct");
    for (i, (layer, bitrate)) in st.sent[..3]
        .iter()
        .zip([150_000u64, 500_000, 2_500_000])
        .enumerate()
    {
        let mine: Vec<&Sent> = rtp.iter().filter(|p| p.h.ssrc == layer.ssrc).collect();
        assert_eq!(mine.len() as u64, layer.packets);
        assert_eq!((layer.frames, layer.keyframes), (60, 1), "{i}");
        // 60 frames of which one key, sized to average the layer's bitrate over 2 s.
        let want = bitrate * 2 / 8;
        assert!(
            layer.bytes.abs_diff(want) < want / 20,
            "{i}: {} vs {want}",
            layer.bytes
        );
        let rid = layer.rid.as_deref().unwrap();
        let mut seq = layer.first_seq;
        let mut frames = std::collections::BTreeSet::new();
        for p in &mine {
            assert_eq!(p.h.sequence, seq, "{i}: its own sequence");
            seq = seq.wrapping_add(1);
            assert_eq!(p.h.payload_type, 96);
            // Every packet names its layer, by rid in the header and by index in the stamp.
            assert_eq!(p.ext(10), Some(rid.as_bytes()));
            assert_eq!(p.ext(11), None);
            assert_eq!(p.ext(4), Some(b"1".as_slice()));
            let stamp = p.stamp();
            assert_eq!(stamp.layer, Some(i as u8));
            frames.insert(stamp.frame);
        }
        assert!(mine[0].keyframe_start());
        // The same captures on every layer: frame numbers 0..60.
        assert_eq!(frames, (0..60).collect());
    }
    // Each layer has its own timestamp base and picture ids, as each of Chrome's encoders.
    let first = |i: usize| {
        rtp.iter()
            .find(|p| p.h.ssrc == st.sent[i].ssrc)
            .map(|p| p.h.timestamp)
            .unwrap()
    };
    assert!(first(0) != first(1) && first(1) != first(2));
    // A sender report per layer, and the audio's.
    let mut reported: Vec<u32> = srs.clone();
    reported.sort_unstable();
    reported.dedup();
    let mut want: Vec<u32> = st.sent.iter().map(|s| s.ssrc).collect();
    want.sort_unstable();
    assert_eq!(reported, want);
    assert_eq!(st.keyframes_sent, 3);
}

#[test]
fn a_keyframe_request_for_one_layer_gives_a_keyframe_on_that_layer_only() {
    let t0 = Instant::now();
    let answer = publisher_answer(Some("q;h;f"));
    let (mut peer, mut tx, mut rx) = connected(t0, simulcast_config(t0), &answer);
    let (mut rtp, mut srs) = (Vec::new(), Vec::new());
    let keys =
        |peer: &Peer| -> Vec<u64> { peer.stats().sent[..3].iter().map(|s| s.keyframes).collect() };
    run(&mut peer, &mut rx, t0 + ms(500), &mut rtp, &mut srs);
    assert_eq!(keys(&peer), [1, 1, 1]);
    let ssrcs: Vec<u32> = peer.stats().sent.iter().map(|s| s.ssrc).collect();
    feedback(&mut peer, &mut tx, t0 + ms(500), |b| {
        crate::rtcp::write_pli(b, 1, ssrcs[1]).unwrap()
    });
    assert!(peer.take_keyframe_request());
    run(&mut peer, &mut rx, t0 + ms(700), &mut rtp, &mut srs);
    assert_eq!(keys(&peer), [1, 2, 1]);
    let forced: Vec<&Sent> = rtp
        .iter()
        .filter(|p| p.keyframe_start() && p.stamp().frame > 0)
        .collect();
    assert_eq!(forced.len(), 1);
    assert_eq!(forced[0].h.ssrc, ssrcs[1]);
    assert_eq!(forced[0].ext(10), Some(b"h".as_slice()));
    // A FIR names its layer too; its retransmission (same sequence number) is not a new one.
    for _ in 0..2 {
        feedback(&mut peer, &mut tx, t0 + ms(700), |b| {
            crate::rtcp::write_fir(b, 1, &[(ssrcs[2], 7)]).unwrap()
        });
    }
    run(&mut peer, &mut rx, t0 + ms(1000), &mut rtp, &mut srs);
    assert_eq!(keys(&peer), [1, 2, 2]);
    let st = peer.stats();
    assert_eq!(
        (st.plis_received, st.firs_received, st.forced_keyframes),
        (1, 1, 2)
    );
    // The periodic interval runs per layer: the forced ones moved theirs.
    run(&mut peer, &mut rx, t0 + ms(2100), &mut rtp, &mut srs);
    assert_eq!(keys(&peer), [2, 2, 2]);
    run(&mut peer, &mut rx, t0 + ms(2600), &mut rtp, &mut srs);
    assert_eq!(keys(&peer), [2, 3, 2]);
    run(&mut peer, &mut rx, t0 + ms(2800), &mut rtp, &mut srs);
    assert_eq!(keys(&peer), [2, 3, 3]);
    // Audio's SSRC asks for nothing.
    feedback(&mut peer, &mut tx, t0 + ms(2800), |b| {
        crate::rtcp::write_pli(b, 1, ssrcs[3]).unwrap()
    });
    run(&mut peer, &mut rx, t0 + ms(3000), &mut rtp, &mut srs);
    assert_eq!(keys(&peer), [2, 3, 3]);
}

#[test]
fn a_layer_is_repaired_on_its_own_rtx_stream_named_by_repaired_rid() {
    let t0 = Instant::now();
    let answer = publisher_answer(Some("q;h;f"));
    let (mut peer, mut tx, mut rx) = connected(t0, simulcast_config(t0), &answer);
    let (mut rtp, mut srs) = (Vec::new(), Vec::new());
    run(&mut peer, &mut rx, t0 + ms(300), &mut rtp, &mut srs);
    let st = peer.stats();
    for (i, layer) in st.sent[..3].iter().enumerate() {
        let seq = layer.first_seq.wrapping_add(3);
        let original = rtp
            .iter()
            .find(|p| p.h.ssrc == layer.ssrc && p.h.sequence == seq)
            .unwrap()
            .clone();
        feedback(&mut peer, &mut tx, t0 + ms(300), |b| {
            crate::rtcp::write_nack(b, 1, layer.ssrc, &[seq]).unwrap()
        });
        let (_, mut d) = peer.poll_transmit().unwrap();
        let n = rx.unprotect_rtp(&mut d).unwrap();
        d.truncate(n);
        let h = RtpHeader::parse(&d).unwrap();
        assert_eq!((h.payload_type, Some(h.ssrc)), (97, layer.rtx_ssrc), "{i}");
        let rtx = Sent { data: d, h };
        // The rid became the repaired rid, in place.
        assert_eq!(rtx.ext(10), None);
        assert_eq!(rtx.ext(11), layer.rid.as_deref().map(str::as_bytes));
        assert_eq!(rtx.ext(4), Some(b"1".as_slice()));
        let mut inner = rtx.data.clone();
        let len = inner.len();
        let n = rtp::rtx_unwrap(&mut inner, len, 96, layer.ssrc).unwrap();
        let h = RtpHeader::parse(&inner[..n]).unwrap();
        assert_eq!(h.sequence, seq);
        assert_eq!(h.payload(&inner[..n]), original.h.payload(&original.data));
    }
    assert_eq!(peer.stats().retransmissions_sent, 3);
}

#[test]
fn the_answer_decides_which_layers_are_sent() {
    let t0 = Instant::now();
    let rids = |answer: &str| -> Vec<Option<String>> {
        let (peer, _, _) = connected(t0, simulcast_config(t0), answer);
        let st = peer.stats();
        st.sent
            .iter()
            .filter(|s| s.codec.is_video())
            .map(|s| s.rid.clone())
            .collect()
    };
    assert_eq!(
        rids(&publisher_answer(Some("q;f"))),
        [Some("q".into()), Some("f".into())]
    );
    assert_eq!(rids(&publisher_answer(Some("q;~h;f"))).len(), 2);
    // No a=simulcast in the answer: the first encoding alone, as a browser falls back.
    assert_eq!(rids(&publisher_answer(None)), [Some("q".into())]);
}

/// A server's answer to our viewer offer: video from SSRC 2222, no transport-wide CC.
fn viewer_answer() -> String {
    let fp = cert::format_fingerprint(&[0xAB; 32]);
    let common = format!(
        "c=IN IP4 0.0.0.0\r\na=ice-ufrag:srv1\r\na=ice-pwd:{}\r\na=fingerprint:sha-256 {fp}\r\n\
         a=setup:passive\r\na=sendonly\r\na=rtcp-mux\r\n",
        "p".repeat(24)
    );
    format!(
        "v=0\r\no=- 1 2 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\na=group:BUNDLE 0 1\r\na=ice-lite\r\n\
         m=audio 9 UDP/TLS/RTP/SAVPF 111\r\n{common}a=mid:0\r\na=rtpmap:111 opus/48000/2\r\n\
         a=ssrc:1111 cname:srv\r\na=candidate:1 1 udp 2130706431 10.0.0.1 5000 typ host\r\n\
         m=video 9 UDP/TLS/RTP/SAVPF 96\r\n{common}a=mid:1\r\na=rtpmap:96 VP8/90000\r\n\
         a=rtcp-fb:96 nack\r\na=rtcp-fb:96 nack pli\r\na=ssrc:2222 cname:srv\r\n"
    )
}

#[test]
fn a_viewer_counts_what_it_receives_per_layer() {
    let t0 = Instant::now();
    let answer = publisher_answer(Some("q;h;f"));
    let (mut publisher, _, mut rx) = connected(t0, simulcast_config(t0), &answer);
    let (mut rtp, mut srs) = (Vec::new(), Vec::new());
    run(&mut publisher, &mut rx, t0 + ms(2100), &mut rtp, &mut srs);
    let layers: Vec<u32> = publisher.stats().sent[..3].iter().map(|s| s.ssrc).collect();

    // What a server forwards on one outgoing SSRC: layer 0 from the start, layer 2 from its
    // keyframe at 2 s. One layer-0 packet comes late, after the switch (a repair).
    let mut forwarded: Vec<&Sent> = Vec::new();
    for p in &rtp {
        let switched = forwarded.iter().any(|f| f.h.ssrc == layers[2]);
        let take = if switched || (p.h.ssrc == layers[2] && p.keyframe_start()) {
            p.h.ssrc == layers[2] && (switched || p.stamp().frame == 60)
        } else {
            p.h.ssrc == layers[0]
        };
        if take {
            forwarded.push(p);
        }
    }
    let q = forwarded.iter().filter(|p| p.h.ssrc == layers[0]).count();
    let f = forwarded.len() - q;
    assert!(q > 60 && f > 5, "{q} {f}");
    let late = q - 3;
    let mut order: Vec<usize> = (0..forwarded.len()).filter(|&i| i != late).collect();
    order.insert(q + 2, late);

    let cfg = PeerConfig::new(PeerRole::Viewer, 9, "10.0.0.2:40000".parse().unwrap(), t0);
    let mut viewer = Peer::new(cfg, Arc::new(cert::generate([9; 32]).unwrap()), t0);
    let _ = viewer.create_offer();
    viewer.apply_answer(t0, &viewer_answer()).unwrap();
    let keys = dtls::SrtpKeys {
        profile: SrtpProfile::AeadAes128Gcm.dtls_id(),
        local_key: KEY.to_vec(),
        local_salt: SALT.to_vec(),
        remote_key: SERVER_KEY.to_vec(),
        remote_salt: SERVER_SALT.to_vec(),
    };
    viewer.on_keys(t0, &keys);
    let mut tx = SrtpContext::new(SrtpProfile::AeadAes128Gcm, &SERVER_KEY, &SERVER_SALT).unwrap();
    let base_seq = 1000u16;
    for (k, &i) in order.iter().enumerate() {
        let mut d = forwarded[i].data.clone();
        {
            let mut m = rtp::RtpPacketMut::new(&mut d).unwrap();
            m.set_ssrc(2222);
            m.set_sequence(base_seq.wrapping_add(i as u16));
        }
        let len = d.len();
        d.resize(len + tx.profile().rtp_overhead(), 0);
        let n = tx.protect_rtp(&mut d, len).unwrap();
        d.truncate(n);
        viewer.handle_datagram(t0 + ms(k as u64), server(), &mut d);
    }
    let st = viewer.stats();
    assert_eq!(st.srtp_errors, 0);
    let v = st.stream(2222).unwrap();
    assert_eq!(v.packets, forwarded.len() as u64);
    assert_eq!(v.layer_packets, [q as u64, 0, f as u64]);
    assert_eq!(
        (v.packets_of_layer(0), v.packets_of_layer(1)),
        (q as u64, 0)
    );
    assert_eq!(v.packets_of_layer(9), 0);
    let bytes: u64 = forwarded
        .iter()
        .filter(|p| p.h.ssrc == layers[2])
        .map(|p| p.h.payload(&p.data).len() as u64)
        .sum();
    assert_eq!(v.bytes_of_layer(2), bytes);
    // The late layer-0 packet counts for its layer but is no switch back.
    assert_eq!((v.layer, v.layer_changes), (Some(2), 1));
    // Frame numbers run on across the switch: layer 0's up to 59, layer 2's from 60.
    let frames: std::collections::BTreeSet<u64> =
        forwarded.iter().map(|p| p.stamp().frame).collect();
    assert_eq!(frames, (0..63).collect());
    assert_eq!((v.frames_seen, v.frames_completed), (63, 63));
}
