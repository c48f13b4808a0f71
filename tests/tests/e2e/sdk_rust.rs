//! The Rust SDK with real media, through `ferry dev`, as its examples run it (issue 8):
//!
//! - `publish` streams a file made by ffmpeg (lavfi testsrc → VP8 IVF, and H.264 Annex B) and a
//!   Chromium viewer (browser SDK) decodes it;
//! - `play` records a Chromium publisher into a file that ffprobe reads, with the number of
//!   frames the publisher sent in that time (± 5 %).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use ferry_tests::cluster::{Dev, start_dev, wait_registered};
use ferry_tests::{Browser, Collector, ferry_bin, num};
use serde_json::Value;

const SETUP: Duration = Duration::from_secs(45);

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// An example binary of `ferry-sdk`, built next to `ferry` (`cargo build -p ferry-sdk
/// --examples`).
fn example(name: &str) -> Result<PathBuf> {
    let bin = ferry_bin()?
        .parent()
        .context("target dir")?
        .join("examples")
        .join(name);
    ensure!(
        bin.exists(),
        "{} not found: cargo build --release -p ferry-sdk --examples",
        bin.display()
    );
    Ok(bin)
}

/// ffmpeg and ffprobe, or an error that says how to get them.
fn tool(name: &str) -> Result<String> {
    let ok = Command::new(name)
        .arg("-version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    ensure!(ok, "{name} is required: apt-get install ffmpeg");
    Ok(name.to_owned())
}

fn run(cmd: &mut Command) -> Result<String> {
    let out = cmd.output().with_context(|| format!("running {cmd:?}"))?;
    if !out.status.success() {
        bail!(
            "{cmd:?} failed: {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Six seconds of the ffmpeg test pattern at 30 fps, a keyframe every second.
fn test_file(dir: &Path, codec: &str) -> Result<PathBuf> {
    let ffmpeg = tool("ffmpeg")?;
    let (name, args): (&str, &[&str]) = match codec {
        "vp8" => (
            "src.ivf",
            &["-c:v", "libvpx", "-b:v", "800k", "-deadline", "realtime"],
        ),
        _ => (
            "src.h264",
            &[
                "-pix_fmt",
                "yuv420p",
                "-c:v",
                "libx264",
                "-profile:v",
                "baseline",
                "-bsf:v",
                "h264_mp4toannexb",
                "-f",
                "h264",
            ],
        ),
    };
    let path = dir.join(name);
    run(Command::new(ffmpeg)
        .args(["-loglevel", "error", "-y", "-f", "lavfi", "-i"])
        .arg("testsrc=size=640x360:rate=30")
        .args(["-t", "6", "-g", "30"])
        .args(args)
        .arg(&path))?;
    Ok(path)
}

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn scratch(name: &str) -> Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("ferry-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

async fn rust_publisher_chromium_viewer(dev: &Dev, codec: &str, mime: &str) -> Result<()> {
    let dir = scratch(&format!("sdk-pub-{codec}"))?;
    let file = test_file(&dir, codec)?;
    let stream = format!("rust-{codec}");
    let _publisher = Killed(
        Command::new(example("publish")?)
            .arg(&file)
            .arg(format!("{}/whip/{stream}", dev.gateway))
            .arg("--loop")
            .args(["--token", &dev.token])
            .stdout(Stdio::null())
            .spawn()
            .context("starting the publish example")?,
    );
    let collector = Collector::start()?;
    let started = Instant::now();
    // The stream exists once the publisher is connected: the viewer waits for it.
    let _viewer = loop {
        let probe = ferry_tests::http(&format!("{}/v1/sessions", dev.gateway), "GET", &[], b"")?;
        if probe.body.contains(&format!("\"stream\":\"{stream}\"")) {
            break Browser::open(&collector.page_url(
                "sdk-play.html",
                &[
                    ("sdk", &dev.gateway),
                    ("base", &dev.gateway),
                    ("stream", &stream),
                    ("id", "V"),
                    ("token", &dev.token),
                ],
            ))?;
        }
        ensure!(
            started.elapsed() < SETUP,
            "the Rust publisher never showed up"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let first = collector
        .wait_until(SETUP, |r| {
            r.get("V").is_some_and(|v| num(v, "/frames/count") > 10.0)
        })
        .await?;
    tokio::time::sleep(Duration::from_secs(4)).await;
    let end = collector.reports();
    let v = &end["V"];
    let shown = num(v, "/frames/count") - num(&first["V"], "/frames/count");
    let secs = (num(v, "/t") - num(&first["V"], "/t")) / 1000.0;
    let fps = shown / secs;
    eprintln!(
        "Rust SDK publishes {codec}: Chromium showed {shown} frames in {secs:.1} s ({fps:.1} fps), codec {}, width {}",
        v["inbound"]["video"]["codec"], v["frames"]["width"]
    );
    ensure!(
        v["inbound"]["video"]["codec"] == mime,
        "{}",
        v["inbound"]["video"]
    );
    ensure!(
        fps >= 24.0,
        "Chromium shows the Rust publisher's 30 fps file at {fps:.1} fps"
    );
    ensure!(
        num(v, "/frames/width") == 640.0,
        "the file's 640x360: {}",
        v["frames"]
    );
    ensure!(
        num(v, "/inbound/video/framesDropped") <= 3.0,
        "frames dropped: {}",
        v["inbound"]["video"]
    );
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

async fn chromium_publisher_rust_player(dev: &Dev, codec: &str) -> Result<()> {
    let dir = scratch(&format!("sdk-play-{codec}"))?;
    let stream = format!("chromium-{codec}");
    let collector = Collector::start()?;
    let _publisher = Browser::open(&collector.page_url(
        "sdk-publish.html",
        &[
            ("sdk", &dev.gateway),
            ("base", &dev.gateway),
            ("stream", &stream),
            ("codec", codec),
            ("id", "P"),
            ("token", &dev.token),
        ],
    ))?;
    collector
        .wait_until(SETUP, |r| {
            r.get("P").is_some_and(|p| {
                p["phase"] == "publishing" && num(p, "/outbound/video/framesSent") > 30.0
            })
        })
        .await?;
    let out = dir.join(if codec == "vp8" {
        "out.ivf"
    } else {
        "out.h264"
    });
    let before = collector.reports();
    let t0 = Instant::now();
    let summary = run(Command::new(example("play")?)
        .arg(format!("{}/whep/{stream}", dev.gateway))
        .arg(&out)
        .args(["--seconds", "6"])
        // The other way to give the examples a token.
        .env("FERRY_TOKEN", &dev.token))?;
    let elapsed = t0.elapsed().as_secs_f64();
    let after = collector.reports();
    let summary: Value = serde_json::from_str(summary.lines().last().context("summary")?)?;
    let written = summary["frames_written"]
        .as_f64()
        .context("frames_written")?;
    // The publisher's frame rate over the recording.
    let sent = num(&after["P"], "/outbound/video/framesSent")
        - num(&before["P"], "/outbound/video/framesSent");
    let fps = sent
        / (after["P"]["t"].as_f64().unwrap_or(0.0) - before["P"]["t"].as_f64().unwrap_or(0.0))
        * 1000.0;
    let probe = run(Command::new(tool("ffprobe")?)
        .args(["-v", "error", "-count_frames", "-select_streams", "v:0"])
        .args([
            "-show_entries",
            "stream=codec_name,nb_read_frames,width,height:format=duration",
        ])
        .args(["-of", "json"])
        .arg(&out))?;
    let p: Value = serde_json::from_str(&probe)?;
    let s = &p["streams"][0];
    let read: f64 = s["nb_read_frames"].as_str().unwrap_or("0").parse()?;
    // The recording spans from its first keyframe to the end: as many frames as the publisher
    // sent in that time.
    let span = summary["first_keyframe_to_end_s"]
        .as_f64()
        .context("span")?;
    let expected = fps * span;
    eprintln!(
        "Rust SDK plays {codec} for {elapsed:.1} s: wrote {written} frames, ffprobe reads {read} ({} {}x{}), publisher at {fps:.1} fps over {span:.2} s → {expected:.0} expected",
        s["codec_name"], s["width"], s["height"]
    );
    ensure!(s["codec_name"] == codec, "ffprobe sees {}", s["codec_name"]);
    ensure!(
        read == written,
        "ffprobe decodes every frame written: {read} of {written}"
    );
    ensure!(
        (read - expected).abs() <= expected * 0.05,
        "{read} frames, expected {expected:.0} ± 5 %"
    );
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rust_sdk_publishes_files_to_chromium_and_records_chromium() -> Result<()> {
    let _area = ferry_tests::area(module_path!());
    let _serial = SERIAL.lock().await;
    let dev = start_dev(true)?;
    wait_registered(&dev.gateway, 2).await?;
    rust_publisher_chromium_viewer(&dev, "vp8", "video/VP8").await?;
    rust_publisher_chromium_viewer(&dev, "h264", "video/H264").await?;
    chromium_publisher_rust_player(&dev, "vp8").await?;
    chromium_publisher_rust_player(&dev, "h264").await?;
    Ok(())
}
