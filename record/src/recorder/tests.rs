use std::time::Duration;

use ferry_rtc::media::{Payloads, packetize};
use mp4_atom::{Any, Decode};
use proptest::prelude::*;

use super::*;
use crate::config::ConfigError;
use crate::state::StateError;

const VPT: u8 = 96;
const APT: u8 = 111;
const SPS: [u8; 11] = [
    0x67, 0x42, 0xc0, 0x1f, 0xda, 0x01, 0x40, 0x16, 0xe8, 0x06, 0xd0,
];

/// A synthetic H.264 access unit: SPS + PPS + IDR slice, or one non-IDR slice; `len` bytes of
/// slice data (several RTP packets when large).
fn h264_au(i: usize, key: bool, len: usize) -> Vec<u8> {
    let mut au = Vec::new();
    let mut nal = |u: &[u8]| {
        au.extend_from_slice(&[0, 0, 0, 1]);
        au.extend_from_slice(u);
    };
    let mut slice = vec![if key { 0x65 } else { 0x41 }, 0x88];
    slice.extend((2..len).map(|b| ((b * 13 + i) % 255 + 1) as u8));
    if key {
        nal(&SPS);
        nal(&[0x68, 0xce, 0x3c, 0x80]);
    }
    nal(&slice);
    au
}

fn rtp(pt: u8, seq: u16, ts: u32, ssrc: u32, marker: bool, payload: &[u8]) -> Vec<u8> {
    let mut p = vec![0x80, pt | if marker { 0x80 } else { 0 }];
    p.extend_from_slice(&seq.to_be_bytes());
    p.extend_from_slice(&ts.to_be_bytes());
    p.extend_from_slice(&ssrc.to_be_bytes());
    p.extend_from_slice(payload);
    p
}

/// (send time, packet, video frame index or None for audio): 30 fps video with a keyframe
/// every `gop` frames, 20 ms Opus packets, `secs` seconds, timestamps about to wrap.
fn stream(secs: u32, gop: usize, frame_len: usize) -> Vec<(Duration, Vec<u8>, Option<usize>)> {
    let mut out = Vec::new();
    let mut payloads = Payloads::new();
    let mut seq = 65_500u16;
    for i in 0..(secs as usize * 30) {
        let au = h264_au(i, i % gop == 0, frame_len);
        packetize(Codec::H264, &au, 0, 1200, &mut payloads).unwrap();
        let ts = (u32::MAX - 30_000).wrapping_add(i as u32 * 3000);
        let n = payloads.len();
        for (k, p) in payloads.iter().enumerate() {
            let at = Duration::from_micros(i as u64 * 33_333);
            out.push((at, rtp(VPT, seq, ts, 1, k + 1 == n, p), Some(i)));
            seq = seq.wrapping_add(1);
        }
    }
    for j in 0..(secs as usize * 50) {
        let ts = 4_000_000_000u32.wrapping_add(j as u32 * 960);
        let p = rtp(APT, j as u16, ts, 2, true, &[0xf8, j as u8, 1, 2]);
        out.push((Duration::from_millis(j as u64 * 20), p, None));
    }
    out.sort_by_key(|p| p.0);
    out
}

fn config() -> RecorderConfig {
    RecorderConfig::new(
        Some(TrackConfig::new(Codec::H264, VPT)),
        Some(TrackConfig::new(Codec::Opus, APT)),
        "mem",
    )
}

fn run(
    rec: &mut Recorder,
    t0: Instant,
    pkts: &[(Duration, Vec<u8>, Option<usize>)],
) -> Vec<Output> {
    let mut out = Vec::new();
    for (at, p, _) in pkts {
        rec.handle_timeout(t0 + *at);
        rec.handle_rtp(t0 + *at, p).unwrap();
        out.extend(std::iter::from_fn(|| rec.poll_output()));
    }
    out
}

fn puts(out: &[Output]) -> Vec<(&str, ObjectKind)> {
    out.iter()
        .filter_map(|o| match o {
            Output::Put(obj) => Some((obj.name.as_str(), obj.kind)),
            _ => None,
        })
        .collect()
}

/// Per track of an fMP4 media segment: (track id, tfdt, sum of durations, samples).
fn fragments(seg: &[u8]) -> Vec<(u32, u64, u64, usize)> {
    let mut buf = std::io::Cursor::new(seg);
    let mut out = Vec::new();
    while let Ok(atom) = Any::decode(&mut buf) {
        if let Any::Moof(moof) = atom {
            for t in moof.traf {
                let run = &t.trun[0].samples;
                let total = run.iter().map(|e| u64::from(e.duration.unwrap_or(0))).sum();
                out.push((
                    t.tfhd.track_id,
                    t.tfdt.unwrap().base_media_decode_time,
                    total,
                    run.len(),
                ));
            }
        }
    }
    out
}

/// Checks that consecutive segments continue each track's timeline exactly; returns the
/// number of samples per track.
fn check_continuous(segments: &[&[u8]]) -> (usize, usize) {
    let mut end = [None::<u64>; 2];
    let mut count = [0usize; 2];
    for seg in segments {
        for (id, tfdt, total, n) in fragments(seg) {
            let k = id as usize - 1;
            if let Some(e) = end[k] {
                assert_eq!(
                    tfdt, e,
                    "track {id}: fragment starts at {tfdt}, previous ended at {e}"
                );
            }
            end[k] = Some(tfdt + total);
            count[k] += n;
        }
    }
    (count[0], count[1])
}

fn segment_bytes(out: &[Output]) -> Vec<&[u8]> {
    out.iter()
        .filter_map(|o| match o {
            Output::Put(obj) if obj.kind == ObjectKind::Segment => Some(obj.bytes.as_slice()),
            _ => None,
        })
        .collect()
}

#[test]
fn configurations_are_checked() {
    let h264 = Some(TrackConfig::new(Codec::H264, VPT));
    let opus = Some(TrackConfig::new(Codec::Opus, APT));
    let err = |c: RecorderConfig| Recorder::new(c).err();
    assert_eq!(
        err(RecorderConfig::new(None, None, "x")),
        Some(ConfigError::NoTracks)
    );
    assert_eq!(
        err(RecorderConfig::new(opus, None, "x")),
        Some(ConfigError::WrongKind(Codec::Opus, "video"))
    );
    let mut slow = TrackConfig::new(Codec::Opus, APT);
    slow.clock_rate = 8000;
    assert!(matches!(
        err(RecorderConfig::new(h264, Some(slow), "x")),
        Some(ConfigError::ClockRate(8000, Codec::Opus, 48_000))
    ));
    assert_eq!(
        err(RecorderConfig::new(
            h264,
            Some(TrackConfig::new(Codec::Opus, VPT)),
            "x"
        )),
        Some(ConfigError::SamePayloadType(VPT))
    );
    let mut c = config();
    c.segments.min = Duration::from_secs(7);
    assert_eq!(err(c), Some(ConfigError::SegmentBounds));
    let vp8 = RecorderConfig::new(Some(TrackConfig::new(Codec::Vp8, VPT)), opus, "x");
    assert_eq!(Recorder::new(vp8).unwrap().container(), Container::Webm);
}

#[test]
fn bad_packets_are_typed_errors() {
    let mut rec = Recorder::new(config()).unwrap();
    let now = Instant::now();
    assert!(matches!(
        rec.handle_rtp(now, &[1, 2, 3]),
        Err(InputError::Rtp(_))
    ));
    assert_eq!(
        rec.handle_rtp(now, &rtp(5, 1, 1, 1, true, &[1])),
        Err(InputError::UnknownPayloadType(5))
    );
    // Garbage payloads of a known type are counted by the assembler, not refused.
    assert_eq!(
        rec.handle_rtp(now, &rtp(VPT, 1, 1, 1, true, &[0xff, 0xff])),
        Ok(())
    );
    rec.finish(now);
    assert_eq!(
        rec.handle_rtp(now, &rtp(VPT, 2, 1, 1, true, &[1])),
        Err(InputError::Stopped)
    );
    // Nothing was recorded: only the (empty, ended) playlist and the state.
    let out: Vec<Output> = std::iter::from_fn(|| rec.poll_output()).collect();
    assert_eq!(
        puts(&out),
        vec![
            ("index.m3u8", ObjectKind::Playlist),
            ("state.json", ObjectKind::State)
        ]
    );
}

#[test]
fn segments_are_cut_at_the_first_keyframe_after_the_minimum() {
    let mut rec = Recorder::new(config()).unwrap();
    let t0 = Instant::now();
    // Keyframes every 1.5 s: cuts at 3 s, 6 s and 9 s.
    let mut out = run(&mut rec, t0, &stream(10, 45, 2500));
    rec.finish(t0 + Duration::from_secs(11));
    out.extend(std::iter::from_fn(|| rec.poll_output()));
    use ObjectKind::*;
    let p = puts(&out);
    assert_eq!(
        p[..5],
        [
            ("init.mp4", Init),
            ("seg-00001.m4s", Segment),
            ("index.m3u8", Playlist),
            ("state.json", State),
            ("seg-00002.m4s", Segment),
        ]
    );
    assert_eq!(p.iter().filter(|p| p.1 == Segment).count(), 4);
    let durations: Vec<f64> = rec.segments().iter().map(|s| s.duration).collect();
    assert_eq!(durations, [3.0, 3.0, 3.0, 1.0]);
    assert_eq!(rec.segments()[0].map.as_deref(), Some("init.mp4"));
    assert!(
        rec.segments()[1..]
            .iter()
            .all(|s| s.map.is_none() && !s.discontinuity)
    );
    let (video, audio) = check_continuous(&segment_bytes(&out));
    assert_eq!((video, audio), (300, 500));
    let st = rec.stats();
    assert_eq!((st.segments, st.overruns, st.stale_frames), (4, 0, 0));
    let Some(Output::Put(last)) = out
        .iter()
        .rev()
        .find(|o| matches!(o, Output::Put(obj) if obj.kind == Playlist))
    else {
        panic!("no playlist");
    };
    let text = String::from_utf8(last.bytes.clone()).unwrap();
    assert!(text.ends_with("#EXT-X-ENDLIST\n"), "{text}");
    assert!(
        text.contains("#EXTINF:3,\nseg-00001.m4s") || text.contains("#EXTINF:3.0"),
        "{text}"
    );
}

#[test]
fn no_keyframe_by_the_maximum_is_reported_and_never_cut_mid_gop() {
    let mut rec = Recorder::new(config()).unwrap();
    let t0 = Instant::now();
    // One keyframe every 8 s.
    let mut out = run(&mut rec, t0, &stream(10, 240, 300));
    rec.finish(t0 + Duration::from_secs(11));
    out.extend(std::iter::from_fn(|| rec.poll_output()));
    let overruns: Vec<&Output> = out
        .iter()
        .filter(|o| matches!(o, Output::Event(Event::SegmentOverrun { number: 1 })))
        .collect();
    assert_eq!(overruns.len(), 1);
    let durations: Vec<f64> = rec.segments().iter().map(|s| s.duration).collect();
    assert_eq!(durations, [8.0, 2.0]);
    assert_eq!(rec.state().target_duration, 8);
}

#[test]
fn a_lost_packet_inside_a_frame_drops_video_until_the_next_keyframe() {
    let mut rec = Recorder::new(config()).unwrap();
    let t0 = Instant::now();
    let mut pkts = stream(10, 60, 3000);
    // The second packet of frame 70 never arrives; the next keyframe is frame 120.
    let lost = pkts
        .iter()
        .enumerate()
        .filter(|(_, p)| p.2 == Some(70))
        .nth(1)
        .unwrap()
        .0;
    pkts.remove(lost);
    let mut wanted = false;
    let mut out = Vec::new();
    for (at, p, _) in &pkts {
        rec.handle_timeout(t0 + *at);
        rec.handle_rtp(t0 + *at, p).unwrap();
        wanted |= rec.wants_keyframe();
        out.extend(std::iter::from_fn(|| rec.poll_output()));
    }
    rec.finish(t0 + Duration::from_secs(11));
    out.extend(std::iter::from_fn(|| rec.poll_output()));
    assert!(wanted);
    assert_eq!(rec.stats().video_frames, 300 - 50);
    assert_eq!(rec.stats().audio_frames, 500);
    // One hole: frame 120 (the keyframe) written after frame 69, the 50 frames between missing.
    assert_eq!(rec.stats().video_holes, 1);
    let holes: Vec<u64> = out
        .iter()
        .filter_map(|o| match o {
            Output::Event(Event::VideoHole { packets }) => Some(*packets),
            _ => None,
        })
        .collect();
    let between = pkts
        .iter()
        .filter(|p| p.2.is_some_and(|i| (70..120).contains(&i)))
        .count() as u64;
    assert_eq!(
        holes,
        vec![between + 1],
        "the lost packet and the frames dropped"
    );
    // The frames before the hole are all there; the segment holding the hole is shorter in
    // samples but the timeline still only moves forward.
    let segs = segment_bytes(&out);
    let mut last = 0;
    for seg in &segs {
        for (id, tfdt, total, _) in fragments(seg) {
            if id == 1 {
                assert!(tfdt >= last);
                last = tfdt + total;
            }
        }
    }
}

#[test]
fn export_resume_continues_one_playlist_without_duplicates() {
    let pkts = stream(10, 45, 1500);
    let t0 = Instant::now();
    let split = pkts
        .iter()
        .position(|p| p.0 >= Duration::from_millis(4000))
        .unwrap();
    let mut a = Recorder::new(config()).unwrap();
    let mut out = run(&mut a, t0, &pkts[..split]);
    a.begin_handover();
    let mut state = None;
    for (at, p, _) in &pkts[split..] {
        let _ = a.handle_rtp(t0 + *at, p);
        for o in std::iter::from_fn(|| a.poll_output()) {
            match o {
                Output::Handover(s) => state = Some(*s),
                o => out.push(o),
            }
        }
        if a.is_stopped() {
            break;
        }
    }
    let state = RecorderState::from_json(&state.unwrap().to_json()).unwrap();
    // A cut at the keyframe at 4.5 s.
    assert_eq!(state.segments.iter().map(|s| s.duration).sum::<f64>(), 4.5);
    let mut b = Recorder::resume(config(), &state).unwrap();
    // B hears the stream from where the hand-over began: the overlap is dropped as stale or
    // (video before the keyframe) by the assembler.
    out.extend(run(&mut b, t0, &pkts[split..]));
    b.finish(t0 + Duration::from_secs(11));
    out.extend(std::iter::from_fn(|| b.poll_output()));
    assert!(b.stats().stale_frames > 0);
    let (video, audio) = check_continuous(&segment_bytes(&out));
    assert_eq!((video, audio), (300, 500));
    // B checked its first frame against A's last (carried in the state): no hole.
    assert!(state.video.as_ref().unwrap().last_written_seq.is_some());
    assert_eq!(a.stats().video_holes + b.stats().video_holes, 0);
    // One init segment: B's is the same bytes, so it is not written again.
    assert_eq!(
        puts(&out)
            .iter()
            .filter(|p| p.1 == ObjectKind::Init)
            .count(),
        1
    );
    let numbers: Vec<u32> = b.segments().iter().map(|s| s.number).collect();
    assert_eq!(numbers, (1..=numbers.len() as u32).collect::<Vec<_>>());
    assert!(b.segments().iter().all(|s| !s.discontinuity));
}

#[test]
fn frames_the_publisher_skipped_are_no_hole_but_a_late_takeover_is() {
    // The publisher's encoder skipped frames 40 and 41 (no packets, no sequence numbers): a
    // step of three frame intervals in the timeline, and nothing missing from the recording.
    let mut pkts = stream(6, 45, 1500);
    pkts.retain(|p| !matches!(p.2, Some(40 | 41)));
    let mut seq = 65_500u16;
    for p in pkts.iter_mut().filter(|p| p.2.is_some()) {
        p.1[2..4].copy_from_slice(&seq.to_be_bytes());
        seq = seq.wrapping_add(1);
    }
    let t0 = Instant::now();
    let mut rec = Recorder::new(config()).unwrap();
    run(&mut rec, t0, &pkts);
    rec.finish(t0 + Duration::from_secs(7));
    assert_eq!(rec.stats().video_frames, 6 * 30 - 2);
    assert_eq!(rec.stats().video_holes, 0);

    // A hand-over whose target hears the stream only from after the hand-over keyframe
    // (frame 90) on: it starts at the next one (135), and says the recording lacks 90..135.
    let pkts = stream(6, 45, 1500);
    let split = pkts.iter().position(|p| p.2 == Some(80)).unwrap();
    let mut a = Recorder::new(config()).unwrap();
    run(&mut a, t0, &pkts[..split]);
    a.begin_handover();
    let mut state = None;
    for (at, p, _) in &pkts[split..] {
        let _ = a.handle_rtp(t0 + *at, p);
        while let Some(o) = a.poll_output() {
            if let Output::Handover(s) = o {
                state = Some(*s);
            }
        }
        if a.is_stopped() {
            break;
        }
    }
    let mut b = Recorder::resume(config(), &state.unwrap()).unwrap();
    let late = pkts.iter().position(|p| p.2 == Some(91)).unwrap();
    run(&mut b, t0, &pkts[late..]);
    assert_eq!(b.stats().video_holes, 1);
    assert_eq!(a.stats().video_holes, 0);
}

#[test]
fn states_are_checked_on_resume() {
    let mut rec = Recorder::new(config()).unwrap();
    let t0 = Instant::now();
    run(&mut rec, t0, &stream(3, 45, 500));
    let state = rec.export(t0 + Duration::from_secs(3));
    assert!(rec.is_stopped() && !state.segments.is_empty());
    let vp8 = RecorderConfig::new(
        Some(TrackConfig::new(Codec::Vp8, VPT)),
        Some(TrackConfig::new(Codec::Opus, APT)),
        "mem",
    );
    assert!(matches!(
        Recorder::resume(vp8, &state),
        Err(StateError::Mismatch(_))
    ));
    let audio_only = RecorderConfig::new(None, Some(TrackConfig::new(Codec::Opus, APT)), "m");
    assert!(matches!(
        Recorder::resume(audio_only, &state),
        Err(StateError::Mismatch(_))
    ));
    let mut old = state.clone();
    old.version = 99;
    assert!(matches!(
        RecorderState::from_json(&old.to_json()),
        Err(StateError::Version(99))
    ));
    assert!(matches!(
        RecorderState::from_json(b"{"),
        Err(StateError::Decode(_))
    ));
    let mut done = state.clone();
    done.finished = true;
    assert!(matches!(
        Recorder::resume(config(), &done),
        Err(StateError::Finished)
    ));
    assert!(Recorder::resume(config(), &state).is_ok());
}

#[test]
fn crash_resume_marks_a_discontinuity_and_keeps_time_moving() {
    let mut a = Recorder::new(config()).unwrap();
    let t0 = Instant::now();
    run(&mut a, t0, &stream(5, 45, 500));
    let state = a.state();
    let end = state.video.as_ref().unwrap().clock.unwrap().last_media;
    let mut b = Recorder::resume_after_crash(config(), &state).unwrap();
    // A new stream: the same synthetic one (its own SSRC, sequence and timestamps).
    let mut out = run(&mut b, t0 + Duration::from_secs(20), &stream(4, 45, 500));
    b.finish(t0 + Duration::from_secs(30));
    out.extend(std::iter::from_fn(|| b.poll_output()));
    let first_new = &b.segments()[state.segments.len()];
    assert!(first_new.discontinuity);
    assert_eq!(b.segments().iter().filter(|s| s.discontinuity).count(), 1);
    let segs = segment_bytes(&out);
    let (_, tfdt, _, _) = fragments(segs[0])[0];
    assert!(tfdt > end, "{tfdt} after {end}");
}

#[test]
fn sender_reports_align_tracks_instead_of_arrival() {
    let mut rec = Recorder::new(config()).unwrap();
    let t0 = Instant::now();
    let ntp0: u64 = 3_900_000_000 << 32;
    // Both SRs say: video ts 1000 and audio ts 5000 were sampled at the same instant.
    rec.handle_sender_report(&SenderReportData {
        ssrc: 1,
        ntp: ntp0,
        rtp_ts: 1000,
        packet_count: 0,
        octet_count: 0,
    });
    rec.handle_sender_report(&SenderReportData {
        ssrc: 2,
        ntp: ntp0,
        rtp_ts: 5000,
        packet_count: 0,
        octet_count: 0,
    });
    let mut payloads = Payloads::new();
    packetize(Codec::H264, &h264_au(0, true, 100), 0, 1200, &mut payloads).unwrap();
    let n = payloads.len();
    for (k, p) in payloads.iter().enumerate() {
        rec.handle_rtp(t0, &rtp(VPT, k as u16, 1000, 1, k + 1 == n, p))
            .unwrap();
    }
    // The audio sampled 100 ms after the video's first frame arrives 600 ms later.
    rec.handle_rtp(
        t0 + Duration::from_millis(600),
        &rtp(APT, 0, 5000 + 4800, 2, true, &[0xf8, 0]),
    )
    .unwrap();
    let clock = rec.state().audio.unwrap().clock.unwrap();
    assert_eq!(clock.anchor_media, 4800);
    let mut plain = Recorder::new(config()).unwrap();
    for (k, p) in payloads.iter().enumerate() {
        plain
            .handle_rtp(t0, &rtp(VPT, k as u16, 1000, 1, k + 1 == n, p))
            .unwrap();
    }
    plain
        .handle_rtp(
            t0 + Duration::from_millis(600),
            &rtp(APT, 0, 9800, 2, true, &[0xf8, 0]),
        )
        .unwrap();
    assert_eq!(
        plain.state().audio.unwrap().clock.unwrap().anchor_media,
        28_800
    );
}

#[test]
fn a_new_ssrc_continues_the_timeline() {
    let mut rec = Recorder::new(config()).unwrap();
    let t0 = Instant::now();
    run(&mut rec, t0, &stream(2, 30, 300));
    let before = rec.state().audio.unwrap().clock.unwrap().last_media;
    // The publisher reconnects: a new audio SSRC with unrelated numbers, 1 s later.
    let p = rtp(APT, 30_000, 123, 77, true, &[0xf8, 0]);
    rec.handle_rtp(t0 + Duration::from_secs(3), &p).unwrap();
    let after = rec.state().audio.unwrap().clock.unwrap().last_media;
    assert_eq!(rec.stats().ssrc_changes, 1);
    assert!(
        after > before && after - before <= 48_000 + 960,
        "{before} -> {after}"
    );
}

#[test]
fn opus_durations_from_the_toc() {
    assert_eq!(opus_duration(&[0xf8]), Some(960));
    assert_eq!(opus_duration(&[0x08]), Some(960));
    assert_eq!(opus_duration(&[0xf9]), Some(1920));
    assert_eq!(opus_duration(&[0xfb, 0x03]), Some(2880));
    assert_eq!(opus_duration(&[0xfb, 0x00]), None);
    assert_eq!(opus_duration(&[]), None);
}

proptest! {
    #[test]
    fn arbitrary_input_never_panics(data in proptest::collection::vec(any::<u8>(), 0..3000)) {
        crate::fuzz::fuzz_record(&data);
    }

    /// Any loss pattern on a real-shaped stream: video never goes back in time and stays
    /// decodable (every segment starts with a keyframe), whatever is lost.
    #[test]
    fn lossy_streams_stay_in_order(seed in any::<u64>(), loss in 0u64..20) {
        let mut pkts = stream(4, 30, 2000);
        let mut x = seed | 1;
        pkts.retain(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % 100 >= loss
        });
        let mut rec = Recorder::new(config()).unwrap();
        let t0 = Instant::now();
        let mut out = run(&mut rec, t0, &pkts);
        rec.finish(t0 + Duration::from_secs(5));
        out.extend(std::iter::from_fn(|| rec.poll_output()));
        let mut last = [0u64; 2];
        for seg in segment_bytes(&out) {
            for (id, tfdt, total, _) in fragments(seg) {
                let k = id as usize - 1;
                prop_assert!(tfdt >= last[k]);
                last[k] = tfdt + total;
            }
        }
    }
}
