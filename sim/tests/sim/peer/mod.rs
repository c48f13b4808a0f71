//! The sans-IO peer (`ferry_rtc::peer`) against a minimal server made of the node's real pieces.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::cell::RefCell;
use std::time::Duration;

use proptest::prelude::*;

mod external;
mod fixture;

use std::sync::Arc;
use std::time::Instant;

use ferry_sfu::codec::Codec;
use ferry_sfu::peer::*;
use ferry_sfu::rtcp::{self, RtcpIter, RtcpPacket, SenderReportData};
use ferry_sfu::rtp::RtpHeader;
use ferry_sfu::{cert, rtp};
use ferry_sim::net::LinkConfig;
use fixture::{Got, Server, T, World, addr};

const MS: Duration = Duration::from_millis(1);

fn publisher(video: Codec) -> PeerRole {
    PeerRole::Publisher { video, audio: true }
}

/// A connected publisher (peer 0) with its fixture (server 0).
fn publishing(video: Codec, rtx: bool, run: Duration) -> World {
    let mut w = World::new(1);
    let mut cfg = w.config(publisher(video), 10, 4000);
    cfg.rtx = rtx;
    w.connect(cfg, None);
    w.run_for(run);
    w
}

fn ssrc_of(s: &Server, video: bool) -> u32 {
    s.neg
        .media
        .iter()
        .find(|m| m.video == video)
        .unwrap()
        .remote_ssrcs[0]
        .0
}

fn stream(s: &Server, ssrc: u32) -> Vec<&Got> {
    s.rtp.iter().filter(|g| g.header.ssrc == ssrc).collect()
}

/// Frame start packets that start keyframes, as (arrival, frame number).
fn keyframes(pkts: &[&Got], codec: Codec) -> Vec<(Instant, u64)> {
    let mut out: Vec<(Instant, u64)> = pkts
        .iter()
        .filter(|g| codec.is_keyframe_start(g.payload()))
        .map(|g| (g.at, read_stamp(codec, g.payload()).unwrap().frame))
        .collect();
    // An H.264 keyframe starts twice: its STAP-A and its IDR's first fragment.
    out.dedup_by_key(|k| k.1);
    out
}

#[test]
fn publisher_connects_and_sends_continuous_paced_media() {
    let w = publishing(Codec::Vp8, true, Duration::from_millis(4100));
    let (peer, server) = (&w.peers[0], &w.servers[0]);
    assert!(peer.is_connected() && server.connected());
    let video = stream(server, ssrc_of(server, true));
    let audio = stream(server, ssrc_of(server, false));
    for pkts in [&video, &audio] {
        assert!(
            pkts.windows(2)
                .all(|w| w[1].header.sequence == w[0].header.sequence.wrapping_add(1)),
            "sequence numbers are continuous"
        );
        assert!(pkts.iter().all(|g| g.data.len() <= MAX_RTP_PACKET));
    }
    assert!(video.iter().all(|g| g.header.payload_type == 96));
    assert!(
        audio
            .iter()
            .all(|g| g.header.payload_type == 111 && g.header.marker)
    );
    // One timestamp per frame, 3000 ticks apart at 30 fps; the marker ends each frame.
    let mut frames: Vec<(u32, u64, bool)> = Vec::new();
    for g in &video {
        let f = read_stamp(Codec::Vp8, g.payload()).unwrap().frame;
        match frames.last_mut() {
            Some(last) if last.1 == f => {
                assert_eq!(last.0, g.header.timestamp);
                assert!(!last.2, "packet after the marker");
                last.2 = g.header.marker;
            }
            _ => frames.push((g.header.timestamp, f, g.header.marker)),
        }
    }
    assert!(frames.len() >= 120, "{} frames in 4 s", frames.len());
    for w in frames.windows(2) {
        assert_eq!((w[1].1, w[1].0.wrapping_sub(w[0].0)), (w[0].1 + 1, 3000));
    }
    let key = keyframes(&video, Codec::Vp8);
    assert_eq!(
        key.iter().map(|k| k.1).collect::<Vec<_>>(),
        vec![0, 60, 120]
    );
    for w in audio.windows(2) {
        assert_eq!(
            w[1].header.timestamp.wrapping_sub(w[0].header.timestamp),
            960
        );
    }
    // 1 Mbit/s over whole keyframe intervals (frames 0..120), within 10 %.
    let bytes: usize = video
        .iter()
        .filter(|g| read_stamp(Codec::Vp8, g.payload()).unwrap().frame < 120)
        .map(|g| g.payload().len())
        .sum();
    let bps = bytes as f64 * 8.0 / 4.0;
    assert!((900_000.0..1_100_000.0).contains(&bps), "{bps} bit/s");
    let st = peer.stats();
    assert_eq!(st.keyframes_sent, 3);
    assert_eq!(st.sent.len(), 2);
    assert!(
        st.sent
            .iter()
            .all(|s| s.packets > 0 && s.retransmissions == 0)
    );
}

#[test]
fn h264_keyframes_are_stap_a_then_idr_fragments() {
    let w = publishing(Codec::H264, true, Duration::from_millis(300));
    let server = &w.servers[0];
    let v = server.neg.media.iter().find(|m| m.video).unwrap();
    assert_eq!((v.codec, v.pt, v.rtx_pt), (Codec::H264, 102, Some(103)));
    let video = stream(server, v.remote_ssrcs[0].0);
    assert_eq!(video[0].payload()[0] & 0x1f, 24, "STAP-A first");
    assert!(Codec::H264.is_keyframe_start(video[0].payload()));
    assert_eq!(
        video[1].payload()[..2],
        [0x7c, 0x85],
        "FU-A start of an IDR"
    );
    let first_delta = video
        .iter()
        .position(|g| g.header.timestamp != video[0].header.timestamp)
        .unwrap();
    assert!(video[first_delta - 1].header.marker);
    let nal = video[first_delta].payload()[0] & 0x1f;
    assert!(
        nal == 1 || nal == 28,
        "delta frame as single NAL or FU-A, got {nal}"
    );
    assert_eq!(keyframes(&video, Codec::H264).len(), 1);
}

#[test]
fn pli_and_fir_bring_a_prompt_keyframe_at_most_every_100ms() {
    let mut w = publishing(Codec::Vp8, true, Duration::from_millis(500));
    let ssrc = ssrc_of(&w.servers[0], true);
    let sent_at = w.now();
    w.servers[0].feedback(|b| rtcp::write_pli(b, 1, ssrc).unwrap());
    w.run_for(Duration::from_millis(40));
    // A second request right after the first keyframe waits for the 100 ms gap.
    w.servers[0].feedback(|b| rtcp::write_fir(b, 1, &[(ssrc, 1)]).unwrap());
    w.run_for(Duration::from_millis(300));
    let video = stream(&w.servers[0], ssrc);
    let key: Vec<Instant> = keyframes(&video, Codec::Vp8)
        .into_iter()
        .map(|k| k.0)
        .filter(|t| *t > sent_at)
        .collect();
    assert_eq!(key.len(), 2, "{key:?}");
    // Request travels T, the next frame is ≤ 33 ms away, the keyframe travels T.
    assert!(
        key[0] - sent_at <= 2 * T + 34 * MS,
        "{:?}",
        key[0] - sent_at
    );
    assert!(
        key[1] - key[0] >= FORCED_KEYFRAME_GAP,
        "{:?}",
        key[1] - key[0]
    );
    assert!(key[1] - key[0] <= FORCED_KEYFRAME_GAP + 34 * MS);
    let st = w.peers[0].stats();
    assert_eq!(
        (st.plis_received, st.firs_received, st.forced_keyframes),
        (1, 1, 2)
    );
}

/// Drops one video packet on the wire, NACKs it, and returns what came back.
fn nack_one(rtx: bool) -> (World, Got) {
    let mut w = publishing(Codec::Vp8, rtx, Duration::from_millis(300));
    let v = w.servers[0].neg.media.iter().find(|m| m.video).unwrap();
    let (ssrc, rtx_ssrc) = v.remote_ssrcs[0];
    let lost = stream(&w.servers[0], ssrc)
        .last()
        .unwrap()
        .header
        .sequence
        .wrapping_add(3);
    w.servers[0].drop_incoming.insert((ssrc, lost));
    w.run_for(Duration::from_millis(200));
    assert!(
        !stream(&w.servers[0], ssrc)
            .iter()
            .any(|g| g.header.sequence == lost)
    );
    let before = w.servers[0].rtp.len();
    w.servers[0].feedback(|b| rtcp::write_nack(b, 1, ssrc, &[lost]).unwrap());
    w.run_for(3 * T);
    let again = w.servers[0].rtp[before..]
        .iter()
        .find(|g| g.header.ssrc == rtx_ssrc.unwrap_or(ssrc) && (rtx || g.header.sequence == lost))
        .cloned()
        .unwrap();
    let mut media = again.data.clone();
    if rtx {
        assert_eq!(again.header.payload_type, 97);
        let n = rtp::rtx_unwrap(&mut media, again.data.len(), 96, ssrc).unwrap();
        media.truncate(n);
    }
    let h = RtpHeader::parse(&media).unwrap();
    assert_eq!((h.ssrc, h.sequence, h.payload_type), (ssrc, lost, 96));
    // It belongs between its neighbours: same stamp layout, frame number in sequence.
    let frame = |g: &Got| read_stamp(Codec::Vp8, g.payload()).unwrap().frame;
    let pkts = stream(&w.servers[0], ssrc);
    let prev = pkts
        .iter()
        .find(|g| g.header.sequence == lost.wrapping_sub(1))
        .unwrap();
    let next = pkts
        .iter()
        .find(|g| g.header.sequence == lost.wrapping_add(1))
        .unwrap();
    let f = read_stamp(Codec::Vp8, h.payload(&media)).unwrap().frame;
    assert!(frame(prev) <= f && f <= frame(next));
    let st = w.peers[0].stats();
    assert_eq!((st.nacks_received, st.retransmissions_sent), (1, 1));
    (w, again)
}

#[test]
fn nack_is_answered_with_rtx_when_negotiated() {
    let (w, rtx) = nack_one(true);
    let v = w.servers[0].neg.media.iter().find(|m| m.video).unwrap();
    assert_eq!(Some(rtx.header.ssrc), v.remote_ssrcs[0].1);
}

#[test]
fn nack_is_answered_with_the_same_packet_without_rtx() {
    let (w, _) = nack_one(false);
    assert!(w.servers[0].neg.media.iter().all(|m| m.rtx_pt.is_none()));
}

#[test]
fn sender_reports_map_ntp_to_the_packets_rtp_timestamps() {
    let w = publishing(Codec::Vp8, true, Duration::from_millis(3100));
    let (peer, server) = (&w.peers[0], &w.servers[0]);
    let wall = peer.config().wall;
    let epoch = peer.config().latency_epoch;
    let mut srs: Vec<(Instant, SenderReportData, Vec<u8>)> = Vec::new();
    for (at, data) in &server.rtcp {
        let mut sr = None;
        let mut cname = None;
        for p in RtcpIter::new(data) {
            match p.unwrap() {
                RtcpPacket::SenderReport(s) => sr = Some(s.info),
                RtcpPacket::Sdes(s) => cname = s.cname().map(|c| c.1.to_vec()),
                _ => {}
            }
        }
        if let Some(sr) = sr {
            srs.push((*at, sr, cname.expect("SR compound carries SDES CNAME")));
        }
    }
    assert_eq!(srs.len(), 6, "one per stream per second from 0.5 s");
    assert!(srs.iter().all(|s| s.2 == peer.cname().as_bytes()));
    for (at, sr, _) in &srs {
        // Sent one link delay before it arrived.
        assert_eq!(sr.ntp, wall.ntp(*at - T));
        let codec = if sr.ssrc == ssrc_of(server, true) {
            Codec::Vp8
        } else {
            Codec::Opus
        };
        let rate = i128::from(codec.clock_rate());
        let pkts = stream(server, sr.ssrc);
        assert!(u64::from(sr.packet_count) <= pkts.len() as u64);
        for g in pkts {
            let stamp = read_stamp(codec, g.payload()).unwrap();
            let capture = epoch + Duration::from_micros(stamp.send_us);
            let dntp = wall.ntp(capture).wrapping_sub(sr.ntp) as i64;
            let predicted = sr
                .rtp_ts
                .wrapping_add(((i128::from(dntp) * rate + (1 << 31)) >> 32) as u32);
            let dev = g.header.timestamp.wrapping_sub(predicted) as i32;
            assert!(
                dev.abs() <= 1,
                "{codec:?} packet ts off the SR line by {dev}"
            );
        }
    }
}

/// Publisher 0 → fixture 0 → fixture 1 (relay) → viewer 1.
fn viewing(seed: u64, tweak: impl FnOnce(&mut World)) -> World {
    viewing_codec(Codec::Vp8, seed, tweak)
}

fn viewing_codec(codec: Codec, seed: u64, tweak: impl FnOnce(&mut World)) -> World {
    let mut w = World::new(seed);
    let cfg = w.config(publisher(codec), seed, 4000);
    w.connect(cfg, None);
    w.run_for(Duration::from_millis(5));
    let mut cfg = w.config(PeerRole::Viewer, seed + 1, 4001);
    // Same clocks as the publisher, so latency and the SR check compare like with like.
    cfg.wall = w.peers[0].config().wall;
    cfg.latency_epoch = w.peers[0].config().latency_epoch;
    w.connect(cfg, Some(0));
    w.relay = Some((0, 1));
    tweak(&mut w);
    w
}

#[test]
fn viewer_repairs_a_dropped_packet_with_nack_and_rtx() {
    let mut w = viewing(20, |_| {});
    w.run_for(Duration::from_millis(300));
    let first = stream(&w.servers[0], ssrc_of(&w.servers[0], true))
        .last()
        .unwrap()
        .header
        .sequence;
    let lost = first.wrapping_add(5);
    w.servers[1].drop_once.insert(lost);
    w.run_for(Duration::from_millis(1700));
    let viewer = &w.peers[1];
    assert!(viewer.is_connected());
    let st = viewer.stats();
    let v = w.servers[1].neg.media.iter().find(|m| m.video).unwrap();
    let video = st.stream(v.local_ssrc).unwrap();
    assert_eq!(video.rtx_ssrc, v.local_rtx_ssrc);
    assert_eq!(st.nacks_sent, 1, "exactly the dropped packet was asked for");
    assert_eq!((video.rtx_packets, video.recovered), (1, 1));
    assert_eq!(video.received.missing(), 0, "gap-free after repair");
    assert_eq!(video.received.ranges().len(), 1);
    assert_eq!(video.duplicates, 0);
    assert_eq!(video.first_packet_keyframe, Some(true));
    assert_eq!(video.ts_regressions, 0);
    assert!(video.frames_completed + 1 >= video.frames_seen && video.frames_completed > 40);
    // Publisher → fixture → viewer is two link delays; the repaired packet took longer.
    assert_eq!(video.latency.min_us, Some(2 * T.as_micros() as u64));
    assert!(video.latency.max_us.unwrap() >= 4 * T.as_micros() as u64);
    let mut seen = st.ssrcs_seen.clone();
    seen.sort_unstable();
    let a = w.servers[1]
        .neg
        .media
        .iter()
        .find(|m| !m.video)
        .unwrap()
        .local_ssrc;
    let mut want = vec![a, v.local_ssrc, v.local_rtx_ssrc.unwrap()];
    want.sort_unstable();
    assert_eq!(seen, want);
    let audio = st.stream(a).unwrap();
    assert!(audio.packets >= 90 && audio.received.missing() == 0);
    // Receiver reports reached the fixture: periodic ones carry a block per stream.
    let rr_blocks = w.servers[1]
        .rtcp
        .iter()
        .flat_map(|(_, d)| RtcpIter::new(d).flatten())
        .filter_map(|p| match p {
            RtcpPacket::ReceiverReport(rr) => Some(rr.blocks.len()),
            _ => None,
        })
        .max();
    assert_eq!(rr_blocks, Some(2));
}

#[test]
fn viewer_repairs_random_downlink_loss_completely() {
    let mut w = viewing(30, |_| {});
    let cfg = LinkConfig {
        loss: 0.05,
        jitter: 5 * MS,
        reorder: 0.01,
        ..LinkConfig::delay(T)
    };
    w.net.set_link(addr(2, 5001), addr(1, 4001), cfg);
    w.run_for(Duration::from_secs(3));
    w.peers[0].close();
    w.run_for(Duration::from_millis(1500));
    let st = w.peers[1].stats();
    assert!(w.net.stats().dropped > 20, "{:?}", w.net.stats());
    assert!(st.nacks_sent > 20);
    for s in &st.received {
        assert_eq!(s.ts_regressions, 0);
        // Opus is not NACKed (as in browsers), so only video must come out whole.
        if s.is_video() {
            let holes: Vec<_> = s.received.holes().collect();
            assert_eq!(s.received.missing(), 0, "{holes:?}");
        }
    }
    let video = st.video().next().unwrap();
    assert!(
        video.recovered > 10 && video.frames_completed >= 70,
        "{video:?}"
    );
}

#[test]
fn h264_viewer_counts_each_keyframe_once_and_completes_frames() {
    let mut w = viewing_codec(Codec::H264, 60, |_| {});
    w.run_for(Duration::from_millis(1500));
    let st = w.peers[1].stats();
    let video = st.video().next().unwrap();
    assert_eq!(video.codec, Some(Codec::H264));
    assert_eq!(video.first_packet_keyframe, Some(true));
    assert_eq!(video.keyframes, 1, "STAP-A and IDR FU-A are one keyframe");
    assert!(video.frames_completed + 1 >= video.frames_seen && video.frames_completed > 30);
    assert_eq!(video.received.missing(), 0);
}

#[test]
fn viewer_joining_mid_stream_asks_for_a_keyframe() {
    let mut w = viewing(40, |w| {
        w.servers[1].skip_first = 100;
        w.servers[1].wait_keyframe = false;
    });
    w.run_for(Duration::from_millis(1500));
    let st = w.peers[1].stats();
    let video = st.video().next().unwrap();
    assert_eq!(video.first_packet_keyframe, Some(false));
    assert!(st.plis_sent >= 1);
    assert!(
        video.keyframes >= 1,
        "the PLI reached the publisher and a keyframe came back"
    );
    assert!(w.peers[0].stats().forced_keyframes >= 1);
}

#[test]
fn path_switch_and_ice_restart_keep_media_flowing() {
    let mut w = publishing(Codec::Vp8, true, Duration::from_millis(300));
    let moved = addr(1, 4100);
    w.peers[0].set_local_addr(moved);
    w.run_for(Duration::from_millis(100));
    assert!(
        w.servers[0].events.iter().any(
            |e| matches!(e, ferry_sfu::ice::IceEvent::PathSwitched { to, .. } if *to == moved)
        )
    );
    let frag = w.peers[0].ice_restart();
    let answer = w.servers[0].restart(&frag);
    w.peers[0].apply_restart_answer(&answer).unwrap();
    assert_eq!(
        w.peers[0].apply_restart_answer(&answer),
        Err(PeerError::NotRestarting)
    );
    let before = w.servers[0].rtp.len();
    w.run_for(Duration::from_millis(500));
    assert!(w.servers[0].rtp.len() > before + 20);
    assert!(w.peers[0].is_connected());
    // The new agent got authenticated answers under the new credentials.
    let ice = w.peers[0].ice().unwrap();
    assert!(ice.is_connected());
    assert_eq!(ice.local().ufrag, w.servers[0].ice.remote().ufrag);
    assert_eq!(w.peers[0].stats().ice_errors, 0);
    let ssrc = ssrc_of(&w.servers[0], true);
    let pkts = stream(&w.servers[0], ssrc);
    assert!(
        pkts.windows(2)
            .all(|p| p[1].header.sequence == p[0].header.sequence.wrapping_add(1))
    );
}

#[test]
fn bad_answers_are_errors() {
    let now = Instant::now();
    let cert = Arc::new(cert::generate([3; 32]).unwrap());
    let cfg = PeerConfig::new(PeerRole::Viewer, 1, addr(1, 1), now);
    let mut p = Peer::new(cfg, cert, now);
    let offer = p.create_offer();
    assert!(offer.contains("a=recvonly") && offer.contains("H264/90000"));
    for bad in ["", "v=0\r\n", &offer.replace("a=ice-ufrag", "a=x-ufrag")] {
        assert!(
            matches!(p.apply_answer(now, bad), Err(PeerError::BadAnswer(_))),
            "{bad}"
        );
    }
    assert_eq!(p.poll_timeout(), None);
    assert!(!p.is_connected());
}

#[test]
fn same_seed_same_run() {
    let run = || {
        let w = publishing(Codec::H264, true, Duration::from_millis(400));
        w.servers[0]
            .rtp
            .iter()
            .map(|g| g.data.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(run(), run());
}

thread_local! {
    static CONNECTED: RefCell<Option<World>> = const { RefCell::new(None) };
}

/// Feeds `data` raw, then as valid SRTP and SRTCP around it, to both peers.
fn feed(data: &[u8]) {
    CONNECTED.with(|c| {
        let mut c = c.borrow_mut();
        let w = c.get_or_insert_with(|| {
            let mut w = viewing(50, |_| {});
            w.run_for(Duration::from_millis(200));
            w
        });
        let now = w.now();
        for (i, s) in [(0, 0), (1, 1)] {
            let from = w.servers[s].addr;
            w.peers[i].handle_datagram(now, from, &mut data.to_vec());
            let mut rtp = data.to_vec();
            if rtp.len() >= 12 {
                rtp[0] = 0x80 | (rtp[0] & 0x3f);
                rtp[1] &= 0x7f;
                w.servers[s].send_rtp(rtp.clone());
                rtp[1] = 192 + (rtp[1] % 32);
                w.servers[s].send_rtcp(rtp);
            }
            while let Some((_, mut d)) = w.servers[s].poll_transmit() {
                w.peers[i].handle_datagram(now, from, &mut d);
            }
            w.peers[i].handle_timeout(now);
            while w.peers[i].poll_transmit().is_some() {}
        }
        let _ = w.peers[0].stats();
        let _ = w.peers[1].stats();
    });
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    #[test]
    fn arbitrary_datagrams_never_panic(data in proptest::collection::vec(any::<u8>(), 0..1400)) {
        feed(&data);
    }

    #[test]
    fn arbitrary_rtp_like_datagrams_never_panic(
        head in proptest::collection::vec(any::<u8>(), 12..40),
        tail in proptest::collection::vec(any::<u8>(), 0..300),
    ) {
        let mut data = head;
        data.extend(tail);
        feed(&data);
    }
}
