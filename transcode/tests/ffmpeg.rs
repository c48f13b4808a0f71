//! A rung's pipeline against the real ffmpeg (the Debian package `./scripts/test` installs): a
//! VP8 stream made by ffmpeg, framed by [`Feed`] as the worker frames the frames it plays, into
//! ffmpeg with the worker's command line, and ffmpeg's output cut by [`Units`]: one access unit
//! per source frame, keyframes where the GOP puts them, 360 lines high.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::process::{Command, Stdio};

use ferry_proto::api::RungName;
use ferry_sdk::media::ivf::IvfReader;
use ferry_transcode::encoder::{Encoder, GOP, Input, ffmpeg_args};
use ferry_transcode::framing::{Feed, Units};
use ferry_transcode::ladder::Rung;

fn ffmpeg() -> String {
    std::env::var("FERRY_FFMPEG").unwrap_or_else(|_| "ffmpeg".into())
}

/// `frames` frames of a 640x480 VP8 test picture, a keyframe every 30.
fn vp8_source(frames: u32) -> Vec<(Vec<u8>, bool)> {
    let out = Command::new(ffmpeg())
        .args(["-hide_banner", "-loglevel", "error", "-f", "lavfi", "-i"])
        .arg("testsrc2=size=640x480:rate=30")
        .args(["-frames:v", &frames.to_string()])
        .args([
            "-c:v",
            "libvpx",
            "-g",
            "30",
            "-b:v",
            "1M",
            "-deadline",
            "realtime",
        ])
        .args(["-f", "ivf", "pipe:1"])
        .stdin(Stdio::null())
        .output()
        .expect("ffmpeg runs (apt-get install ffmpeg)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut r = IvfReader::new(out.stdout.as_slice()).expect("an IVF file");
    let mut v = Vec::new();
    while let Some(f) = r.read_frame().expect("a frame") {
        let key = f.data.first().is_some_and(|b| b & 1 == 0);
        v.push((f.data, key));
    }
    v
}

#[test]
fn a_vp8_stream_through_the_rung_s_ffmpeg_comes_out_one_unit_per_frame() {
    let source = vp8_source(90);
    assert_eq!(source.len(), 90);
    let rung = Rung::of(RungName::P360);
    let mut child = Command::new(ffmpeg())
        .args(ffmpeg_args(Input::Vp8, rung, Encoder::X264))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("ffmpeg starts");
    let mut stdin = child.stdin.take().expect("stdin");
    let feeder = std::thread::spawn(move || {
        let mut feed = Feed::new(Input::Vp8);
        for (data, key) in &source {
            if let Some(bytes) = feed.frame(data, *key) {
                stdin.write_all(&bytes).expect("ffmpeg takes its input");
            }
        }
        feed.frames()
    });
    let mut out = Vec::new();
    child
        .stdout
        .take()
        .expect("stdout")
        .read_to_end(&mut out)
        .expect("ffmpeg's output");
    let fed = feeder.join().expect("feeder");
    let result = child.wait_with_output().expect("ffmpeg ends");
    let errors = String::from_utf8_lossy(&result.stderr);
    assert!(result.status.success(), "{errors}");
    assert!(errors.trim().is_empty(), "ffmpeg complained: {errors}");
    assert_eq!(fed, 90);
    let mut units = Units::default();
    units.push(&out);
    let mut got = Vec::new();
    while let Some(u) = units.next_unit() {
        got.push(u);
    }
    got.extend(units.finish());
    assert_eq!(got.len(), 90, "one access unit per source frame");
    let keys: Vec<usize> = (0..got.len()).filter(|&i| got[i].keyframe).collect();
    assert_eq!(keys, (0..90).step_by(GOP as usize).collect::<Vec<_>>());
    // The rung's height, from ffprobe on what came out.
    let dir = std::env::temp_dir().join(format!("ferry-transcode-{}.h264", std::process::id()));
    std::fs::write(&dir, &out).expect("written");
    let probe = Command::new("ffprobe")
        .args([
            "-v",
            "error",
            "-show_entries",
            "stream=height",
            "-of",
            "csv=p=0",
        ])
        .arg(&dir)
        .output()
        .expect("ffprobe runs");
    let _ = std::fs::remove_file(&dir);
    assert_eq!(String::from_utf8_lossy(&probe.stdout).trim(), "360");
}
