//! Real media for the end-to-end tests: ffmpeg encodes H.264 (libx264 baseline, a keyframe every
//! 2 s), VP8 (libvpx) and Opus (libopus, 20 ms) once; the tests packetize it with ferry-rtc into
//! RTP as a browser would send it, and check what the recorder wrote with ffprobe
//! ([`ferry_testkit::probe`]).

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use ferry_record::{Output, Recorder, Store};
use ferry_rtc::codec::Codec;
use ferry_rtc::media::ivf::IvfReader;
use ferry_rtc::media::{Payloads, annexb, packetize};
use ferry_testkit::require_ffmpeg;

pub const SECONDS: u32 = 10;
pub const FPS: u32 = 30;
pub const VIDEO_PT: u8 = 102;
pub const AUDIO_PT: u8 = 111;

/// A fresh directory for one encode, removed once its output is read into memory.
fn media_dir(kind: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ferry-record-media-{kind}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Runs ffmpeg with `args` (split at whitespace) writing `out`.
fn ffmpeg(args: &str, out: &Path) {
    require_ffmpeg().unwrap();
    let out = Command::new("ffmpeg")
        .args(["-v", "error", "-y", "-nostdin"])
        .args(args.split_whitespace())
        .arg(out)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "ffmpeg {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The encoded video frames (H.264 access units in Annex B, or VP8 frames).
pub fn video_frames(codec: Codec) -> &'static [Vec<u8>] {
    static H264: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    static VP8: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    let secs = SECONDS.to_string();
    let src = format!("testsrc2=size=320x240:rate={FPS}");
    match codec {
        Codec::H264 => H264.get_or_init(|| {
            let dir = media_dir("h264");
            let f = dir.join("video.h264");
            ffmpeg(
                &format!(
                    "-f lavfi -i {src} -t {secs} -c:v libx264 -profile:v baseline -preset veryfast \
                     -g 60 -keyint_min 60 -sc_threshold 0 -bf 0 -pix_fmt yuv420p \
                     -x264-params repeat-headers=1 -f h264"
                ),
                &f,
            );
            let data = std::fs::read(&f).unwrap();
            std::fs::remove_dir_all(dir).unwrap();
            annexb::access_units(&data)
                .map(|au| au.data.to_vec())
                .collect()
        }),
        _ => VP8.get_or_init(|| {
            let dir = media_dir("vp8");
            let f = dir.join("video.ivf");
            ffmpeg(
                &format!(
                    "-f lavfi -i {src} -t {secs} -c:v libvpx -g 60 -keyint_min 60 -b:v 400k \
                     -deadline realtime -cpu-used 8 -auto-alt-ref 0 -lag-in-frames 0 -f ivf"
                ),
                &f,
            );
            let mut r = IvfReader::new(std::fs::File::open(&f).unwrap()).unwrap();
            let mut frames = Vec::new();
            while let Some(fr) = r.read_frame().unwrap() {
                frames.push(fr.data);
            }
            std::fs::remove_dir_all(dir).unwrap();
            frames
        }),
    }
}

/// The Opus packets (20 ms each) of a 440 Hz tone.
pub fn opus_packets() -> &'static [Vec<u8>] {
    static OPUS: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    OPUS.get_or_init(|| {
        let dir = media_dir("opus");
        let f = dir.join("audio.ogg");
        let secs = SECONDS.to_string();
        ffmpeg(
            &format!(
                "-f lavfi -i sine=frequency=440:sample_rate=48000 -t {secs} -ac 2 -c:a libopus \
                 -b:a 64k -frame_duration 20 -f ogg"
            ),
            &f,
        );
        let data = std::fs::read(&f).unwrap();
        std::fs::remove_dir_all(dir).unwrap();
        // Ogg pages (RFC 3533): packets laced across segments; the first two are OpusHead and
        // OpusTags.
        let mut packets = Vec::new();
        let mut cur = Vec::new();
        let mut i = 0;
        while i + 27 <= data.len() {
            assert_eq!(&data[i..i + 4], b"OggS");
            let n = usize::from(data[i + 26]);
            let mut p = i + 27 + n;
            for &lace in &data[i + 27..i + 27 + n] {
                cur.extend_from_slice(&data[p..p + usize::from(lace)]);
                p += usize::from(lace);
                if lace < 255 {
                    packets.push(std::mem::take(&mut cur));
                }
            }
            i = p;
        }
        packets.split_off(2)
    })
}

/// One RTP packet.
pub fn rtp(pt: u8, seq: u16, ts: u32, ssrc: u32, marker: bool, payload: &[u8]) -> Vec<u8> {
    let mut p = vec![0x80, pt | if marker { 0x80 } else { 0 }];
    p.extend_from_slice(&seq.to_be_bytes());
    p.extend_from_slice(&ts.to_be_bytes());
    p.extend_from_slice(&ssrc.to_be_bytes());
    p.extend_from_slice(payload);
    p
}

/// A stream as sent: (send time, packet, is video, frame index).
pub struct Sent {
    pub at: Duration,
    pub packet: Vec<u8>,
    pub video: bool,
    pub frame: usize,
}

/// Where a stream's RTP numbering starts.
#[derive(Clone, Copy)]
pub struct Numbering {
    pub video_ssrc: u32,
    pub audio_ssrc: u32,
    pub video_seq: u16,
    pub audio_seq: u16,
    pub video_ts: u32,
    pub audio_ts: u32,
}

/// Near the wrap of every counter, so the recording crosses it.
pub const WRAPPING: Numbering = Numbering {
    video_ssrc: 0x1111_1111,
    audio_ssrc: 0x2222_2222,
    video_seq: 65_000,
    audio_seq: 65_300,
    video_ts: u32::MAX - 200_000,
    audio_ts: u32::MAX - 100_000,
};

/// Video frames `frames` and audio packets `audio` as RTP in send order (frame i at i/30 s,
/// packet j at j·20 ms).
pub fn packets(
    codec: Codec,
    frames: std::ops::Range<usize>,
    audio: std::ops::Range<usize>,
    n: Numbering,
) -> Vec<Sent> {
    let mut out = Vec::new();
    let mut payloads = Payloads::new();
    let video = video_frames(codec);
    // Sequence numbers count from frame 0 so that any range is a part of one stream.
    let mut seq = n.video_seq;
    for (i, f) in video.iter().enumerate().take(frames.end) {
        packetize(codec, f, i as u16, 1200, &mut payloads).unwrap();
        let ts = n.video_ts.wrapping_add(i as u32 * (90_000 / FPS));
        let count = payloads.len();
        for (k, p) in payloads.iter().enumerate() {
            if i >= frames.start {
                out.push(Sent {
                    at: Duration::from_micros(i as u64 * 1_000_000 / u64::from(FPS)),
                    packet: rtp(VIDEO_PT, seq, ts, n.video_ssrc, k + 1 == count, p),
                    video: true,
                    frame: i,
                });
            }
            seq = seq.wrapping_add(1);
        }
    }
    let opus = opus_packets();
    for (j, p) in opus.iter().enumerate().take(audio.end).skip(audio.start) {
        let seq = n.audio_seq.wrapping_add(j as u16);
        let ts = n.audio_ts.wrapping_add(j as u32 * 960);
        out.push(Sent {
            at: Duration::from_millis(j as u64 * 20),
            packet: rtp(AUDIO_PT, seq, ts, n.audio_ssrc, true, p),
            video: false,
            frame: j,
        });
    }
    out.sort_by_key(|s| s.at);
    out
}

/// Stores what the recorder output; returns the rest.
pub async fn drain(rec: &mut Recorder, store: &Store) -> Vec<Output> {
    match store.drain(rec).await {
        Ok(rest) => rest,
        Err((obj, e)) => panic!("put {}: {e}", obj.name),
    }
}

/// Feeds `sent` to `rec` at `t0` + send time, storing its objects.
pub async fn feed(rec: &mut Recorder, store: &Store, t0: Instant, sent: &[Sent]) -> Vec<Output> {
    let mut rest = Vec::new();
    for s in sent {
        let now = t0 + s.at;
        rec.handle_timeout(now);
        let _ = rec.handle_rtp(now, &s.packet);
        rest.extend(drain(rec, store).await);
    }
    rest
}
