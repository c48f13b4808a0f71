//! End-to-end: real H.264/VP8/Opus from ffmpeg, as RTP, through the recorder into a local
//! directory or a real S3 API server (moto), opened with ffprobe.

// Tests and benches drive the cores with the real clock (clippy.toml forbids it in the cores).
#![allow(clippy::disallowed_methods)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::*;
use ferry_record::{
    Container, Output, Recorder, RecorderConfig, RecorderState, Store, TrackConfig,
};
use ferry_rtc::codec::Codec;
use ferry_testkit::{Moto, Probe, ffprobe_with, probe, require_ffmpeg};

fn config(video: Codec, target: &str) -> RecorderConfig {
    RecorderConfig::new(
        Some(TrackConfig::new(video, VIDEO_PT)),
        Some(TrackConfig::new(Codec::Opus, AUDIO_PT)),
        target,
    )
}

fn temp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ferry-record-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn playlist(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("index.m3u8")).unwrap()
}

/// Segment names in the playlist, in order.
fn segment_names(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(str::to_string)
        .collect()
}

/// Checks the streams and the duration (±0.5 s) of a recording of `video` + Opus.
fn check_recording(p: &Probe, video: &str, duration: f64) {
    let kinds: Vec<(&str, &str)> = p
        .streams
        .iter()
        .map(|(t, n)| (t.as_str(), n.as_str()))
        .collect();
    assert!(kinds.contains(&("video", video)), "{p:?}");
    assert!(kinds.contains(&("audio", "opus")), "{p:?}");
    let got = p.duration.expect("no duration");
    assert!(
        (got - duration).abs() <= 0.5,
        "duration {got} not {duration} ± 0.5: {p:?}"
    );
}

/// Each segment, after its init segment, opens on its own with both streams; the init segment
/// followed by every segment is one file holding every frame once.
fn check_segments(dir: &Path, container: Container) {
    let text = playlist(dir);
    let init = text
        .lines()
        .find_map(|l| l.strip_prefix("#EXT-X-MAP:URI=\""))
        .map(|l| l.trim_end_matches('"').to_string())
        .unwrap();
    let ext = match container {
        Container::Webm => "webm",
        _ => "mp4",
    };
    for name in segment_names(&text) {
        let mut bytes = std::fs::read(dir.join(&init)).unwrap();
        bytes.extend(std::fs::read(dir.join(&name)).unwrap());
        let joined = dir.join(format!("check-{name}.{ext}"));
        std::fs::write(&joined, bytes).unwrap();
        let p = probe(&joined).unwrap();
        assert_eq!(p.streams.len(), 2, "{name}: {p:?}");
        assert!(
            p.packets["video"] > 0 && p.packets["audio"] > 0,
            "{name}: {p:?}"
        );
        std::fs::remove_file(joined).unwrap();
    }
    let mut whole = std::fs::read(dir.join(&init)).unwrap();
    for name in segment_names(&text) {
        whole.extend(std::fs::read(dir.join(&name)).unwrap());
    }
    let joined = dir.join(format!("whole.{ext}"));
    std::fs::write(&joined, whole).unwrap();
    let p = probe(&joined).unwrap();
    println!("{container:?}: ffprobe init + all segments: {p:?}");
    assert_eq!(
        (p.packets["video"], p.packets["audio"]),
        (300, 500),
        "{p:?}"
    );
    if let Some(d) = p.duration {
        assert!((d - f64::from(SECONDS)).abs() <= 0.5, "{p:?}");
    }
    std::fs::remove_file(joined).unwrap();
}

/// Records the whole stream; `midway` runs on the stored recording at 5 s, while it records.
async fn record_whole(
    video: Codec,
    store: &Store,
    target: &str,
    midway: impl FnOnce(),
) -> Recorder {
    let mut rec = Recorder::new(config(video, target)).unwrap();
    let sent = packets(video, 0..300, 0..500, WRAPPING);
    let t0 = Instant::now();
    let half = sent
        .iter()
        .position(|s| s.at >= Duration::from_secs(5))
        .unwrap();
    feed(&mut rec, store, t0, &sent[..half]).await;
    midway();
    feed(&mut rec, store, t0, &sent[half..]).await;
    rec.finish(t0 + Duration::from_secs(11));
    drain(&mut rec, store).await;
    rec
}

async fn records_to_hls(video: Codec, codec_name: &str) {
    require_ffmpeg().unwrap();
    let dir = temp_dir(codec_name);
    let target = dir.to_str().unwrap();
    let store = Store::open(target).unwrap();
    let rec = record_whole(video, &store, target, || {
        // A player opens the recording while it records: the playlist has no ENDLIST yet, lists
        // the segments written so far, and ffprobe opens it as a live stream with both tracks.
        let text = playlist(&dir);
        assert!(!text.contains("#EXT-X-ENDLIST"), "{text}");
        assert_eq!(segment_names(&text).len(), 2, "{text}");
        let v = ffprobe_with(
            &dir.join("index.m3u8"),
            &["-live_start_index", "0"],
            &["-show_entries", "stream=codec_type,codec_name"],
        )
        .unwrap();
        println!("{codec_name}: ffprobe index.m3u8 while recording: {v}");
        let names: Vec<&str> = v["streams"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|s| s["codec_name"].as_str())
            .collect();
        assert_eq!(names, [codec_name, "opus"], "{v}");
    })
    .await;
    let st = rec.stats();
    assert_eq!((st.video_frames, st.audio_frames), (300, 500), "{st:?}");
    assert_eq!(
        (st.stale_frames, st.unusable_frames, st.overruns),
        (0, 0, 0)
    );

    let text = playlist(&dir);
    assert!(
        text.contains("#EXT-X-VERSION:7") && text.contains("#EXT-X-ENDLIST"),
        "{text}"
    );
    assert!(!text.contains("DISCONTINUITY"), "{text}");
    // A keyframe every 2 s and a 2 s minimum: five segments of 2 s.
    assert_eq!(segment_names(&text).len(), 5, "{text}");
    let p = probe(&dir.join("index.m3u8")).unwrap();
    println!("{codec_name}: ffprobe index.m3u8: {p:?}");
    check_recording(&p, codec_name, f64::from(SECONDS));
    assert_eq!((p.packets["video"], p.packets["audio"]), (300, 500));
    check_segments(&dir, rec.container());
    let m = store.metrics();
    assert_eq!(m.segments, 5);
    assert!(m.segment_bytes > 100_000 && m.errors == 0, "{m:?}");
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn h264_and_opus_record_to_fmp4_hls() {
    records_to_hls(Codec::H264, "h264").await;
}

#[tokio::test]
async fn vp8_and_opus_record_to_webm_hls() {
    records_to_hls(Codec::Vp8, "vp8").await;
}

#[tokio::test]
async fn handover_between_two_recorders_has_no_gap_and_no_duplicate() {
    for video in [Codec::H264, Codec::Vp8] {
        let dir = temp_dir(&format!("handover-{video:?}"));
        let target = dir.to_str().unwrap();
        let store = Store::open(target).unwrap();
        let sent = packets(video, 0..300, 0..500, WRAPPING);
        let t0 = Instant::now();
        // Recorder A records until 4.3 s (mid-GOP), then hands over at the next keyframe.
        let split = sent
            .iter()
            .position(|s| s.at >= Duration::from_millis(4300))
            .unwrap();
        let mut a = Recorder::new(config(video, target)).unwrap();
        feed(&mut a, &store, t0, &sent[..split]).await;
        a.begin_handover();
        let mut state = None;
        for s in &sent[split..] {
            let _ = a.handle_rtp(t0 + s.at, &s.packet);
            for o in drain(&mut a, &store).await {
                if let Output::Handover(st) = o {
                    state = Some(*st);
                }
            }
            if a.is_stopped() {
                break;
            }
        }
        let state = state.expect("no hand-over");
        // The state travels as JSON (or any serde format).
        let state = RecorderState::from_json(&state.to_json()).unwrap();
        let a_segments = state.segments.len();
        // Recorder B gets the stream from where the hand-over began: the overlap is dropped.
        let mut b = Recorder::resume(config(video, target), &state).unwrap();
        feed(&mut b, &store, t0, &sent[split..]).await;
        b.finish(t0 + Duration::from_secs(11));
        drain(&mut b, &store).await;
        let (sa, sb) = (a.stats(), b.stats());
        assert_eq!(
            sa.video_frames + sb.video_frames,
            300,
            "{video:?} {sa:?} {sb:?}"
        );
        assert_eq!(
            sa.audio_frames + sb.audio_frames,
            500,
            "{video:?} {sa:?} {sb:?}"
        );

        let text = playlist(&dir);
        assert!(!text.contains("DISCONTINUITY") && text.contains("#EXT-X-ENDLIST"));
        let names = segment_names(&text);
        assert!(names.len() > a_segments, "{text}");
        for (i, n) in names.iter().enumerate() {
            assert!(n.starts_with(&format!("seg-{:05}.", i + 1)), "{text}");
        }
        let p = probe(&dir.join("index.m3u8")).unwrap();
        println!("{video:?} hand-over: ffprobe index.m3u8: {p:?}");
        let name = if video == Codec::H264 { "h264" } else { "vp8" };
        check_recording(&p, name, f64::from(SECONDS));
        assert_eq!((p.packets["video"], p.packets["audio"]), (300, 500));
        // No gap larger than two frame intervals.
        assert!(p.max_video_gap <= 2.0 / f64::from(FPS) + 0.001, "{p:?}");
        let _ = std::fs::remove_dir_all(dir);
    }
}

#[tokio::test]
async fn a_crashed_recording_resumes_after_a_marked_discontinuity() {
    let video = Codec::H264;
    let dir = temp_dir("crash");
    let target = dir.to_str().unwrap();
    let store = Store::open(target).unwrap();
    let t0 = Instant::now();
    // A records 5.5 s and dies without a word.
    let mut a = Recorder::new(config(video, target)).unwrap();
    feed(
        &mut a,
        &store,
        t0,
        &packets(video, 0..165, 0..275, WRAPPING),
    )
    .await;
    drop(a);
    let state = store
        .load_state()
        .await
        .unwrap()
        .expect("no state uploaded");
    let uploaded: f64 = state.segments.iter().map(|s| s.duration).sum();
    assert_eq!(state.segments.len(), 2);
    // The publisher reconnects to B's node: a new stream (SSRCs, sequence numbers and
    // timestamps start anew) from 6 s on.
    let fresh = Numbering {
        video_ssrc: 0x3333_3333,
        audio_ssrc: 0x4444_4444,
        video_seq: 100,
        audio_seq: 7,
        video_ts: 12_345,
        audio_ts: 999,
    };
    let mut b = Recorder::resume_after_crash(config(video, target), &state).unwrap();
    let t1 = t0 + Duration::from_secs(6);
    let rest = packets(video, 180..300, 300..500, fresh);
    let shifted: Vec<Sent> = rest
        .into_iter()
        .map(|s| Sent {
            at: s.at - Duration::from_secs(6),
            ..s
        })
        .collect();
    feed(&mut b, &store, t1, &shifted).await;
    b.finish(t1 + Duration::from_secs(5));
    drain(&mut b, &store).await;
    assert_eq!(b.stats().video_frames, 120);

    let text = playlist(&dir);
    assert_eq!(text.matches("#EXT-X-DISCONTINUITY\n").count(), 1, "{text}");
    let disc = text.find("#EXT-X-DISCONTINUITY").unwrap();
    assert!(disc > text.find("seg-00002").unwrap() && disc < text.find("seg-00003").unwrap());
    let p = probe(&dir.join("index.m3u8")).unwrap();
    println!("crash resume: uploaded {uploaded:.3} s before; ffprobe index.m3u8: {p:?}");
    check_recording(&p, "h264", uploaded + 4.0);
    assert_eq!(p.packets["video"], 120 + (uploaded * 30.0).round() as usize);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn records_into_a_real_s3_api_server() {
    require_ffmpeg().unwrap();
    let moto = Moto::start().unwrap();
    moto.create_bucket("ferry").unwrap();
    let endpoint = moto.endpoint();
    let env = move |k: &str| match k {
        "AWS_ACCESS_KEY_ID" => Some("testing".to_string()),
        "AWS_SECRET_ACCESS_KEY" => Some("testing".to_string()),
        "AWS_REGION" => Some("us-east-1".to_string()),
        "AWS_ENDPOINT_URL" => Some(endpoint.clone()),
        _ => None,
    };
    let target = "s3://ferry/rec1";
    let store = Store::open_with_env(target, &env).unwrap();
    record_whole(Codec::H264, &store, target, || {}).await;
    let m = store.metrics();
    assert!(
        m.segments == 5 && m.errors == 0 && m.latency_us_max > 0,
        "{m:?}"
    );

    // Read everything back through S3 and open it from a local copy.
    let dir = temp_dir("s3");
    let text = String::from_utf8(store.get("index.m3u8").await.unwrap()).unwrap();
    std::fs::write(dir.join("index.m3u8"), &text).unwrap();
    for name in segment_names(&text)
        .into_iter()
        .chain(["init.mp4".to_string()])
    {
        std::fs::write(dir.join(&name), store.get(&name).await.unwrap()).unwrap();
    }
    let state = store.load_state().await.unwrap().unwrap();
    assert!(state.finished && state.segments.len() == 5);
    let p = probe(&dir.join("index.m3u8")).unwrap();
    println!("s3: ffprobe index.m3u8 (downloaded): {p:?}");
    check_recording(&p, "h264", f64::from(SECONDS));
    assert_eq!((p.packets["video"], p.packets["audio"]), (300, 500));
    check_segments(&dir, Container::Fmp4);
    let _ = std::fs::remove_dir_all(dir);
}
