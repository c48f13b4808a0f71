//! The peer with the application's media ([`MediaSource::External`]): real encoded frames in at a
//! publisher, through the fixture's relay, and out of a viewer's frame assembly.

use std::time::{Duration, Instant};

use ferry_sfu::codec::Codec;
use ferry_sfu::peer::*;
use ferry_sfu::rtcp::{self, RtcpIter, RtcpPacket};
use ferry_sim::net::LinkConfig;

use super::fixture::{World, addr};

const MS: Duration = Duration::from_millis(1);
const FRAME: Duration = Duration::from_nanos(1_000_000_000 / 30);
const AUDIO: Duration = Duration::from_millis(20);

/// A frame the publishing application sent.
#[derive(Debug)]
struct Sent {
    at: Instant,
    data: Vec<u8>,
    keyframe: bool,
    /// Sent because the server asked for a keyframe.
    requested: bool,
}

#[derive(Debug, Default)]
struct Run {
    video: Vec<Sent>,
    audio: Vec<Sent>,
    got_video: Vec<ReceivedFrame>,
    got_audio: Vec<ReceivedFrame>,
}

fn fill(len: usize, salt: usize) -> impl Iterator<Item = u8> {
    // Never zero, so no start code or trailing zero can hide in an H.264 unit.
    (0..len).map(move |k| ((k * 7 + salt * 13) % 255 + 1) as u8)
}

/// A VP8 frame: only the first byte's inverse key-frame bit matters to the transport.
fn vp8_frame(i: usize, key: bool) -> Vec<u8> {
    let len = if key { 6000 } else { 300 + (i * 131) % 2200 };
    let mut f = vec![if key { 0x10 } else { 0x11 }];
    f.extend((1..len).map(|k| (k * 31 + i * 17) as u8));
    f
}

/// An H.264 access unit with valid NAL headers: SPS, PPS and two IDR slices for a keyframe, one
/// or two P slices otherwise.
fn h264_au(i: usize, key: bool) -> Vec<u8> {
    let mut units: Vec<Vec<u8>> = Vec::new();
    let slice = |header: [u8; 2], len: usize, salt: usize| {
        header
            .into_iter()
            .chain(fill(len, salt))
            .collect::<Vec<u8>>()
    };
    if key {
        units.push(vec![0x67, 0x42, 0xe0, 0x1f, 0xda, 0x02, 0x80, 0xf6, 0x80]);
        units.push(vec![0x68, 0xce, 0x3c, 0x80]);
        // first_mb_in_slice = 0, then a later slice of the same picture.
        units.push(slice([0x65, 0x88], 5000, i));
        units.push(slice([0x65, 0x21], 800, i + 1));
    } else {
        units.push(slice([0x41, 0x9a], 300 + (i * 131) % 2000, i));
        if i.is_multiple_of(3) {
            units.push(slice([0x41, 0x1a], 200, i + 7));
        }
    }
    units
        .iter()
        .flat_map(|u| [&[0, 0, 0, 1][..], u].concat())
        .collect()
}

fn opus_packet(i: usize) -> Vec<u8> {
    let mut p = vec![0xfc];
    p.extend((0..80 + i % 40).map(|k| (k + i * 3) as u8));
    p
}

/// External publisher (peer 0, fixture 0) relayed by fixture 1 to an external viewer (peer 1),
/// all connected.
fn external_world(codec: Codec, seed: u64) -> World {
    let mut w = World::new(seed);
    let mut cfg = w.config(
        PeerRole::Publisher {
            video: codec,
            audio: true,
        },
        seed,
        4000,
    );
    cfg.media = MediaSource::External;
    w.connect(cfg, None);
    w.run_for(5 * MS);
    let mut cfg = w.config(PeerRole::Viewer, seed + 1, 4001);
    cfg.media = MediaSource::External;
    w.connect(cfg, Some(0));
    w.relay = Some((0, 1));
    while !(w.peers.iter().all(Peer::is_connected) && w.servers.iter().all(|s| s.connected())) {
        w.run_for(MS);
    }
    w
}

fn collect(w: &mut World, run: &mut Run) {
    while let Some(f) = w.peers[1].poll_frame() {
        if f.video {
            run.got_video.push(f);
        } else {
            run.got_audio.push(f);
        }
    }
}

/// Sends 30 fps video (a keyframe every `gop` frames and when asked) and 20 ms Opus packets for
/// `length`, then lets repairs finish. `before_video(i, w)` runs before video frame `i`.
fn stream(
    w: &mut World,
    codec: Codec,
    length: Duration,
    gop: usize,
    mut before_video: impl FnMut(usize, &mut World),
) -> Run {
    while !w.peers[0].is_connected() {
        let now = w.now();
        assert_eq!(
            w.peers[0].send_frame(now, true, &[0x10], FRAME, true),
            Err(PeerError::NotConnected)
        );
        w.run_for(MS);
    }
    let t0 = w.now();
    let end = t0 + length;
    let mut run = Run::default();
    loop {
        let tv = t0 + FRAME * run.video.len() as u32;
        let ta = t0 + AUDIO * run.audio.len() as u32;
        let t = tv.min(ta);
        if t >= end {
            break;
        }
        w.run_until(t);
        collect(w, &mut run);
        if tv == t {
            let i = run.video.len();
            before_video(i, w);
            let requested = w.peers[0].take_keyframe_request();
            let keyframe = i.is_multiple_of(gop) || requested;
            let data = match codec {
                Codec::Vp8 => vp8_frame(i, keyframe),
                _ => h264_au(i, keyframe),
            };
            w.peers[0]
                .send_frame(t, true, &data, FRAME, keyframe)
                .unwrap();
            run.video.push(Sent {
                at: t,
                data,
                keyframe,
                requested: requested && !i.is_multiple_of(gop),
            });
        }
        if ta == t {
            let data = opus_packet(run.audio.len());
            w.peers[0].send_frame(t, false, &data, AUDIO, true).unwrap();
            run.audio.push(Sent {
                at: t,
                data,
                keyframe: true,
                requested: false,
            });
        }
    }
    w.run_for(Duration::from_secs(2));
    collect(w, &mut run);
    run
}

/// Index of the sent frame a received one carries, checking bytes, flag and stream.
fn index_of(sent: &[Sent], got: &ReceivedFrame, codec: Codec) -> usize {
    let i = sent
        .iter()
        .position(|s| s.data == got.data)
        .unwrap_or_else(|| panic!("{codec:?}: received a frame that was never sent"));
    assert_eq!(got.keyframe, sent[i].keyframe, "{codec:?} frame {i}");
    assert_eq!(got.codec, codec);
    i
}

/// Frames come out in order and video never resumes after a gap but at a keyframe; returns
/// the indices received.
fn check_order(run: &Run, codec: Codec) -> (Vec<usize>, Vec<usize>) {
    let video: Vec<usize> = run
        .got_video
        .iter()
        .map(|g| index_of(&run.video, g, codec))
        .collect();
    assert!(run.got_video[0].keyframe, "video starts at a keyframe");
    for (k, w) in video.windows(2).enumerate() {
        assert!(w[0] < w[1], "out of order: {video:?}");
        if w[1] != w[0] + 1 {
            assert!(run.got_video[k + 1].keyframe, "resumed at a delta frame");
        }
    }
    for w in run.got_video.windows(2) {
        assert!(w[0].ts < w[1].ts && w[0].received_at <= w[1].received_at);
    }
    let audio: Vec<usize> = run
        .got_audio
        .iter()
        .map(|g| index_of(&run.audio, g, Codec::Opus))
        .collect();
    for (w, g) in audio.windows(2).zip(run.got_audio.windows(2)) {
        assert!(w[0] < w[1], "audio out of order: {audio:?}");
        // 20 ms is exactly 960 ticks at 48 kHz.
        assert_eq!(g[1].ts - g[0].ts, 960 * (w[1] - w[0]) as u64);
    }
    (video, audio)
}

/// Every SR the publisher sent maps the send instant of every frame to its RTP timestamp.
fn check_sender_reports(w: &World, run: &Run) {
    let server = &w.servers[0];
    let wall = w.peers[0].config().wall;
    let srs: Vec<_> = server
        .rtcp
        .iter()
        .flat_map(|(_, d)| RtcpIter::new(d).flatten())
        .filter_map(|p| match p {
            RtcpPacket::SenderReport(sr) => Some(sr.info),
            _ => None,
        })
        .collect();
    assert!(srs.len() >= 6, "{} SRs", srs.len());
    for (video, sent) in [(true, &run.video), (false, &run.audio)] {
        let line = server.neg.media.iter().find(|m| m.video == video).unwrap();
        let ssrc = line.remote_ssrcs[0].0;
        let rate = i128::from(line.codec.clock_rate());
        // One timestamp per frame, in order (the uplink is lossless).
        let mut ts: Vec<u32> = server
            .rtp
            .iter()
            .filter(|g| g.header.ssrc == ssrc)
            .map(|g| g.header.timestamp)
            .collect();
        ts.dedup();
        assert_eq!(ts.len(), sent.len(), "video {video}");
        for sr in srs.iter().filter(|sr| sr.ssrc == ssrc) {
            for (s, ts) in sent.iter().zip(&ts) {
                let dntp = wall.ntp(s.at).wrapping_sub(sr.ntp) as i64;
                let ticks = ((i128::from(dntp) * rate + (1 << 31)) >> 32) as u32;
                let dev = ts.wrapping_sub(sr.rtp_ts.wrapping_add(ticks)) as i32;
                assert!(dev.abs() <= 1, "video {video}: off the SR line by {dev}");
            }
        }
    }
}

fn lossy_downlink(w: &mut World) {
    let cfg = LinkConfig {
        loss: 0.08,
        jitter: 5 * MS,
        reorder: 0.02,
        ..LinkConfig::delay(Duration::from_millis(10))
    };
    w.net.set_link(addr(2, 5001), addr(1, 4001), cfg);
}

/// Over a lossy downlink NACK repairs everything: the viewer gets every video frame from its
/// first keyframe on, byte for byte, and the audio that was not lost, all in order. Keyframes
/// come only at the start and when asked: a periodic one could overtake a frame still under
/// repair (which the assembler then gives up, by design).
fn repaired_end_to_end(codec: Codec, seed: u64) {
    let mut w = external_world(codec, seed);
    lossy_downlink(&mut w);
    // The last half second is clean: a lost last packet has no successor to reveal it.
    let run = stream(&mut w, codec, Duration::from_secs(4), 1000, |i, w| {
        if i == 105 {
            w.net
                .set_link(addr(2, 5001), addr(1, 4001), LinkConfig::delay(10 * MS));
        }
    });
    let (video, audio) = check_order(&run, codec);
    assert!(w.net.stats().dropped > 10, "{:?}", w.net.stats());
    let first = video[0];
    assert!(
        first < 10,
        "the viewer's first keyframe came late: frame {first}"
    );
    assert_eq!(
        video,
        (first..run.video.len()).collect::<Vec<_>>(),
        "every video frame after the first keyframe"
    );
    for w in run.got_video.windows(2) {
        // 1/30 s on the 90 kHz clock, within the rounding of a nanosecond clock.
        assert!(
            (2999..=3001).contains(&(w[1].ts - w[0].ts)),
            "{}",
            w[1].ts - w[0].ts
        );
    }
    assert!(
        audio.len() * 10 >= run.audio.len() * 8 && audio.len() < run.audio.len(),
        "{} of {} audio packets (Opus is not NACKed)",
        audio.len(),
        run.audio.len()
    );
    let st = w.peers[1].stats();
    let v = st.video().next().unwrap();
    assert_eq!(v.codec, Some(codec));
    assert!(v.recovered > 5 && st.nacks_sent > 5, "{v:?}");
    assert_eq!(v.received.missing(), 0);
    assert_eq!(v.assembled.frames, run.got_video.len() as u64);
    assert_eq!(
        v.assembled.keyframes,
        video.iter().filter(|i| run.video[**i].keyframe).count() as u64
    );
    assert_eq!(
        (v.assembled.gave_up, v.assembled.corrupt_frames),
        (0, 0),
        "{:?}",
        v.assembled
    );
    assert_eq!((v.unstamped, v.frames_overflowed), (0, 0));
    check_sender_reports(&w, &run);
    let sent = &w.peers[0].stats().sent;
    let sv = sent.iter().find(|s| s.codec == codec).unwrap();
    assert_eq!(sv.frames, run.video.len() as u64);
    assert_eq!(
        sv.keyframes,
        run.video.iter().filter(|s| s.keyframe).count() as u64
    );
}

#[test]
fn external_vp8_and_opus_arrive_byte_for_byte_after_repair() {
    repaired_end_to_end(Codec::Vp8, 70);
}

#[test]
fn external_h264_access_units_arrive_byte_for_byte_after_repair() {
    repaired_end_to_end(Codec::H264, 80);
}

#[test]
fn unrepairable_loss_skips_to_a_requested_keyframe() {
    for codec in [Codec::Vp8, Codec::H264] {
        unrepairable_loss(codec, 90);
    }
}

/// One video packet is lost for good: the viewer gives up on its frame, drops the deltas after
/// it, asks for a keyframe, and resumes there.
fn unrepairable_loss(codec: Codec, seed: u64) {
    let mut w = external_world(codec, seed);
    // Lose one video packet about a second in, for good: never sent, never cached.
    let first = w.peers[0]
        .stats()
        .sent
        .iter()
        .find(|s| s.codec == codec)
        .unwrap()
        .first_seq;
    w.servers[1].drop_always.insert(first.wrapping_add(60));
    // No periodic keyframe after the first: recovery has to come from a request.
    let run = stream(&mut w, codec, Duration::from_secs(4), 1000, |_, _| {});
    let (video, _) = check_order(&run, codec);
    let gaps: Vec<(usize, usize)> = video
        .windows(2)
        .filter(|w| w[1] != w[0] + 1)
        .map(|w| (w[0], w[1]))
        .collect();
    assert_eq!(gaps.len(), 1, "{codec:?}: {video:?}");
    let (before, after) = gaps[0];
    let resumed = &run.video[after];
    assert!(resumed.keyframe && resumed.requested, "{codec:?}");
    // Given up within the assembler's 500 ms, then a PLI's round trip.
    let lost_at = run.video[before + 1].at;
    assert!(
        resumed.at - lost_at < Duration::from_millis(700),
        "{codec:?}: {:?}",
        resumed.at - lost_at
    );
    assert_eq!(*video.last().unwrap(), run.video.len() - 1);
    let st = w.peers[1].stats();
    let v = st.video().next().unwrap();
    assert_eq!(v.assembled.gave_up, 1, "{codec:?} {:?}", v.assembled);
    assert!(v.nack_gave_up >= 1 && st.plis_sent >= 1);
    assert!(w.peers[0].stats().forced_keyframes >= 1);
}

#[test]
fn send_frame_and_keyframe_requests_report_what_they_did() {
    // A synthetic publisher cannot take frames; an audio-only one has no video track.
    let mut w = World::new(5);
    let cfg = w.config(
        PeerRole::Publisher {
            video: Codec::Vp8,
            audio: true,
        },
        5,
        4000,
    );
    w.connect(cfg, None);
    let mut cfg = w.config(
        PeerRole::Publisher {
            video: Codec::Opus,
            audio: true,
        },
        6,
        4001,
    );
    cfg.media = MediaSource::External;
    w.connect(cfg, None);
    w.run_for(Duration::from_millis(300));
    let now = w.now();
    assert_eq!(
        w.peers[0].send_frame(now, true, &[0x10], FRAME, true),
        Err(PeerError::NotExternal)
    );
    assert_eq!(
        w.peers[1].send_frame(now, true, &[0x10], FRAME, true),
        Err(PeerError::NoTrack { video: true })
    );
    assert!(matches!(
        w.peers[1].send_frame(now, false, &[], AUDIO, true),
        Err(PeerError::Packetize(_))
    ));
    w.peers[1]
        .send_frame(now, false, &[0xfc, 1], AUDIO, true)
        .unwrap();
    // An external publisher sends nothing of its own.
    w.run_for(Duration::from_millis(200));
    let audio_ssrc = w.servers[1].neg.media[0].remote_ssrcs[0].0;
    assert_eq!(
        w.servers[1]
            .rtp
            .iter()
            .filter(|g| g.header.ssrc == audio_ssrc)
            .count(),
        1
    );

    // A PLI or FIR for the video stream surfaces once.
    let mut w = external_world(Codec::Vp8, 7);
    w.run_for(Duration::from_millis(300));
    assert!(!w.peers[0].take_keyframe_request());
    let ssrc = w.servers[0]
        .neg
        .media
        .iter()
        .find(|m| m.video)
        .unwrap()
        .remote_ssrcs[0]
        .0;
    w.servers[0].feedback(|b| rtcp::write_fir(b, 1, &[(ssrc, 9)]).unwrap());
    w.run_for(Duration::from_millis(50));
    assert!(w.peers[0].take_keyframe_request());
    assert!(!w.peers[0].take_keyframe_request());
    // The viewer's explicit request goes out at once, unthrottled, and reaches the publisher.
    let now = w.now();
    let before = w.peers[1].stats().plis_sent;
    assert!(w.peers[1].request_keyframe(now));
    assert!(w.peers[1].request_keyframe(now));
    assert_eq!(w.peers[1].stats().plis_sent, before + 2);
    w.run_for(Duration::from_millis(50));
    assert!(w.peers[0].take_keyframe_request());
    assert_eq!(w.peers[0].poll_frame(), None);
}
