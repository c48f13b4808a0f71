//! `ferry bench transcode`: the transcoding workers end to end — a scheduler and a node as
//! separate processes, a Rust SDK publisher sending a real VP8 stream (made by ffmpeg, paced in
//! real time, looped; one publisher per concurrent transcode), and 1, 2, 4 … concurrent
//! transcodes started through the scheduler's API. Per concurrency: each rung's real-time factor (media seconds published per wall second;
//! 1.0 keeps up with the live source) and CPU (cores its ffmpeg used), the node's own CPU (the
//! WebRTC sessions and the framing), and as the baseline in the same run the same number of bare
//! ffmpeg processes transcoding the same file to the same rung with the same encoder settings,
//! paced by `-re` (the floor: what the encoder alone costs).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use ferry_sdk::codec::Codec;
use ferry_sdk::media::ivf;
use ferry_sdk::{FerryClient, PublishOptions};
use ferry_transcode::encoder::{Encoder, encode_args};
use ferry_transcode::ladder::Rung;
use serde::Serialize;
use serde_json::{Value, json};

use super::cluster::{Cluster, get_json, post_json};
use super::process::{clock_ticks, cpu_seconds, wait_for};
use super::report::write_json;

/// Options of `ferry bench transcode`.
#[derive(clap::Args, Debug)]
pub struct TranscodeArgs {
    /// Concurrent transcodes to measure.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4")]
    concurrent: Vec<usize>,
    /// Each transcode's ladder.
    #[arg(long, value_delimiter = ',', default_value = "360p")]
    ladder: Vec<String>,
    /// Measured seconds per concurrency (after every rung published its first frames).
    #[arg(long, default_value_t = 10.0)]
    duration: f64,
    /// The source's size (`WxH`, 30 frames/s, VP8, a keyframe a second).
    #[arg(long, default_value = "1280x720")]
    source: String,
    /// The node reports a GPU (`--gpu-vram-gib 16 --nvenc-sessions 32`): its transcodes use
    /// `h264_nvenc` where ffmpeg reaches one, else x264 (the JSON says which and why).
    #[arg(long)]
    gpu: bool,
    /// The ffmpeg binary (default: `$FERRY_FFMPEG`, else `ffmpeg` on the PATH).
    #[arg(long)]
    ffmpeg: Option<PathBuf>,
    /// Where the JSON goes.
    #[arg(long, default_value = "target/bench/transcode.json")]
    out: PathBuf,
}

#[derive(Debug, Serialize)]
struct RungRow {
    transcode: String,
    rung: String,
    frames: u64,
    realtime_factor: f64,
    /// Cores its ffmpeg used over the measured window.
    cpu_cores: f64,
}

#[derive(Debug, Serialize)]
struct Row {
    concurrent: usize,
    encoder: String,
    encoder_note: Option<String>,
    rungs: Vec<RungRow>,
    /// The slowest rung's real-time factor.
    realtime_factor_min: f64,
    /// Mean cores per rung (its ffmpeg).
    cpu_per_rung: f64,
    /// Cores the node process itself used (sessions, framing), over the window.
    node_cpu_cores: f64,
    /// The baseline: as many bare ffmpeg processes on the same file and rungs (`-re`).
    baseline_cpu_per_rung: f64,
    baseline_realtime_factor_min: f64,
}

#[derive(Debug, Serialize)]
struct Report {
    source: String,
    ladder: Vec<String>,
    duration_s: f64,
    cpus: usize,
    rows: Vec<Row>,
}

/// ffmpeg's binary: the flag, `$FERRY_FFMPEG`, or `ffmpeg`.
fn ffmpeg_bin(flag: Option<PathBuf>) -> PathBuf {
    flag.or_else(|| std::env::var_os("FERRY_FFMPEG").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("ffmpeg"))
}

/// Encodes the source: `size` at 30 frames/s, VP8, a keyframe a second, 10 s (looped by the
/// publisher).
fn make_source(ffmpeg: &Path, size: &str, out: &Path) -> Result<()> {
    let st = std::process::Command::new(ffmpeg)
        .args([
            "-hide_banner",
            "-loglevel",
            "error",
            "-y",
            "-f",
            "lavfi",
            "-i",
        ])
        .arg(format!("testsrc2=size={size}:rate=30"))
        .args([
            "-t",
            "10",
            "-c:v",
            "libvpx",
            "-g",
            "30",
            "-b:v",
            "2M",
            "-deadline",
            "realtime",
            "-cpu-used",
            "8",
        ])
        .arg(out)
        .stdin(Stdio::null())
        .status()
        .with_context(|| format!("running {}: apt-get install ffmpeg", ffmpeg.display()))?;
    ensure!(st.success(), "ffmpeg could not make the source ({st})");
    Ok(())
}

/// The IVF file's frames: bytes, keyframe, duration.
fn frames(path: &Path) -> Result<Vec<(Vec<u8>, bool, Duration)>> {
    let bytes = std::fs::read(path)?;
    let mut r = ivf::IvfReader::new(bytes.as_slice())?;
    let mut out = Vec::new();
    while let Some(f) = r.read_frame()? {
        let key = f.data.first().is_some_and(|b| b & 1 == 0);
        out.push((f.data, key, Duration::from_micros(33_333)));
    }
    ensure!(!out.is_empty(), "the source has no frames");
    Ok(out)
}

/// Publishes the file's frames on `stream` in real time, looped, until dropped.
async fn publish(
    gateway: &str,
    token: &str,
    node: &str,
    stream: &str,
    frames: Vec<(Vec<u8>, bool, Duration)>,
) -> Result<tokio::task::JoinHandle<()>> {
    let client = FerryClient::new(gateway).with_token(token);
    let session = client
        .publish(
            stream,
            PublishOptions {
                endpoint: Some(format!("{node}/whip/{stream}")),
                ..PublishOptions::new(Codec::Vp8, false)
            },
        )
        .await
        .context("publishing the source")?;
    Ok(tokio::spawn(async move {
        let mut due = Instant::now();
        loop {
            for (data, key, d) in &frames {
                tokio::time::sleep_until(due.into()).await;
                if session.send_video(data.clone(), *d, *key).is_err() {
                    return;
                }
                due += *d;
            }
        }
    }))
}

/// (media seconds, CPU seconds) per rung of transcode `v` as the scheduler lists it.
fn rung_figures(v: &Value) -> Vec<(String, u64, f64, f64)> {
    v["rungs"]
        .as_array()
        .map(|rs| {
            rs.iter()
                .map(|r| {
                    (
                        r["name"].as_str().unwrap_or_default().to_owned(),
                        r["frames"].as_u64().unwrap_or(0),
                        r["media_s"].as_f64().unwrap_or(0.0),
                        r["cpu_s"].as_f64().unwrap_or(0.0),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

async fn get(url: String) -> Result<Value> {
    tokio::task::spawn_blocking(move || get_json(&url)).await?
}

fn delete(url: &str, token: &str) -> Result<()> {
    let r = ureq::delete(url)
        .header("Authorization", &format!("Bearer {token}"))
        .config()
        .http_status_as_error(false)
        .build()
        .call()
        .with_context(|| format!("DELETE {url}"))?;
    ensure!(r.status().is_success(), "DELETE {url}: {}", r.status());
    Ok(())
}

/// `n` bare ffmpegs transcoding `source` (paced by `-re`, looped) to every rung of `ladder` for
/// `secs`: (cores per rung, slowest real-time factor).
async fn baseline(
    ffmpeg: &Path,
    source: &Path,
    ladder: &[Rung],
    encoder: Encoder,
    n: usize,
    secs: f64,
) -> Result<(f64, f64)> {
    let ticks = clock_ticks();
    let mut children = Vec::new();
    for _ in 0..n {
        for rung in ladder {
            // The worker's encoding arguments; the input a looped file read in real time.
            let mut args: Vec<String> = [
                "-hide_banner",
                "-loglevel",
                "error",
                "-nostdin",
                "-progress",
                "pipe:2",
                "-stats_period",
                "0.5",
                "-re",
                "-stream_loop",
                "-1",
            ]
            .map(String::from)
            .to_vec();
            args.extend(["-i".to_owned(), source.display().to_string()]);
            args.extend(["-t".to_owned(), format!("{secs}")]);
            args.extend(encode_args(*rung, encoder));
            args.extend(["-y".to_owned(), "/dev/null".to_owned()]);
            let child = tokio::process::Command::new(ffmpeg)
                .args(&args)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .kill_on_drop(true)
                .spawn()?;
            children.push(child);
        }
    }
    let start = Instant::now();
    // Each one's stderr (its -progress reports) read to its end, while its CPU is sampled.
    let mut runs = Vec::new();
    for mut c in children {
        let pid = c.id();
        let mut stderr = c.stderr.take().context("stderr")?;
        let done = tokio::spawn(async move {
            use tokio::io::AsyncReadExt as _;
            let mut text = String::new();
            let _ = stderr.read_to_string(&mut text).await;
            let st = c.wait().await;
            (text, st, start.elapsed().as_secs_f64())
        });
        runs.push((pid, done, 0.0f64));
    }
    while runs.iter().any(|r| !r.1.is_finished()) {
        for r in &mut runs {
            if let Some(p) = r.0 {
                // A process that ended reads as gone: its last sample stands.
                r.2 = cpu_seconds(p, ticks).unwrap_or(r.2).max(r.2);
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut cpu = Vec::new();
    let mut rtf_min = f64::MAX;
    for (_, done, cpu_s) in runs {
        let (text, st, wall) = done.await?;
        let st = st?;
        ensure!(st.success(), "bare ffmpeg failed: {}", text.trim());
        // -progress reports out_time_us of what was encoded.
        let media = text
            .lines()
            .rev()
            .filter_map(|l| l.strip_prefix("out_time_us="))
            .find_map(|v| v.trim().parse::<f64>().ok())
            .unwrap_or(0.0)
            / 1e6;
        rtf_min = rtf_min.min(media / wall.max(secs));
        cpu.push(cpu_s / wall.max(secs));
    }
    let mean = cpu.iter().sum::<f64>() / cpu.len().max(1) as f64;
    Ok((mean, if rtf_min == f64::MAX { 0.0 } else { rtf_min }))
}

pub async fn transcode(args: TranscodeArgs) -> Result<()> {
    let ffmpeg = ffmpeg_bin(args.ffmpeg.clone());
    if args.concurrent.is_empty() || args.concurrent.contains(&0) {
        bail!("--concurrent: counts of 1 or more");
    }
    let dir = std::env::temp_dir().join(format!("ferry-bench-transcode-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let source = dir.join("source.ivf");
    make_source(&ffmpeg, &args.source, &source)?;
    let frames = frames(&source)?;
    let ladder: Vec<Rung> = args
        .ladder
        .iter()
        .map(|n| {
            serde_json::from_value(json!(n))
                .map(Rung::of)
                .with_context(|| format!("--ladder: {n} is not a rung (720p, 360p, …)"))
        })
        .collect::<Result<_>>()?;

    let gpu_flags = ["--gpu-vram-gib", "16", "--nvenc-sessions", "32"];
    let node_extra: &[&str] = if args.gpu { &gpu_flags } else { &[] };
    let c = Cluster::start_full(100, false, 1, None, &[], node_extra).await?;
    let node = c.node_http[0].clone();
    let node_pid = c.node_pid(0).context("no node")?;
    // One source per concurrent transcode (a stream's rung has one transcode), each the same
    // file.
    let most = args.concurrent.iter().copied().max().unwrap_or(1);
    let sources: Vec<String> = (0..most).map(|i| format!("bench-src-{i}")).collect();
    let mut publishers = Vec::new();
    for s in &sources {
        publishers.push(publish(&c.gateway, &c.token, &node, s, frames.clone()).await?);
    }
    let ticks = clock_ticks();
    let mut rows = Vec::new();
    let mut encoder_used = Encoder::X264;
    for &n in &args.concurrent {
        let mut ids = Vec::new();
        let mut view = Value::Null;
        for stream in &sources[..n] {
            let url = format!("{}/v1/transcodes", c.gateway);
            let body = json!({ "stream": stream, "ladder": args.ladder });
            let token = c.token.clone();
            // The scheduler knows the publisher once the node reports it.
            let deadline = Instant::now() + Duration::from_secs(10);
            let v = loop {
                let (url, token, body) = (url.clone(), token.clone(), body.clone());
                match tokio::task::spawn_blocking(move || post_json(&url, &token, &body)).await? {
                    Ok(v) => break v,
                    Err(e) if format!("{e:#}").contains("404") && Instant::now() < deadline => {
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                    Err(e) => return Err(e),
                }
            };
            ids.push(v["id"].as_str().context("no id")?.to_owned());
            view = v;
        }
        let encoder = view["encoder"].as_str().unwrap_or_default().to_owned();
        if encoder == "h264_nvenc" {
            encoder_used = Encoder::Nvenc;
        }
        let note = view["encoder_note"].as_str().map(str::to_owned);
        let urls: Vec<String> = ids
            .iter()
            .map(|id| format!("{}/v1/transcodes/{id}", c.gateway))
            .collect();
        // Every rung published a second of media: the pipelines are warm.
        wait_for(Duration::from_secs(30), || async {
            for u in &urls {
                let v = get(u.clone()).await?;
                if let Some(e) = v["error"].as_str() {
                    bail!("transcode failed: {e}");
                }
                if rung_figures(&v).iter().any(|r| r.1 < 30) {
                    return Ok(false);
                }
            }
            Ok(true)
        })
        .await
        .context("the transcodes do not publish")?;
        let sample = || async {
            let mut all = Vec::new();
            for (id, u) in ids.iter().zip(&urls) {
                for r in rung_figures(&get(u.clone()).await?) {
                    all.push((id.clone(), r));
                }
            }
            anyhow::Ok((Instant::now(), cpu_seconds(node_pid, ticks)?, all))
        };
        let (t0, node0, before) = sample().await?;
        tokio::time::sleep(Duration::from_secs_f64(args.duration)).await;
        let (t1, node1, after) = sample().await?;
        let wall = t1.duration_since(t0).as_secs_f64();
        let rungs: Vec<RungRow> = before
            .iter()
            .zip(&after)
            .map(|((id, b), (_, a))| RungRow {
                transcode: id.clone(),
                rung: a.0.clone(),
                frames: a.1,
                realtime_factor: (a.2 - b.2) / wall,
                cpu_cores: (a.3 - b.3) / wall,
            })
            .collect();
        for u in &urls {
            let (u, token) = (u.clone(), c.token.clone());
            tokio::task::spawn_blocking(move || delete(&u, &token)).await??;
        }
        let (base_cpu, base_rtf) =
            baseline(&ffmpeg, &source, &ladder, encoder_used, n, args.duration).await?;
        let count = rungs.len().max(1) as f64;
        rows.push(Row {
            concurrent: n,
            encoder,
            encoder_note: note,
            realtime_factor_min: rungs
                .iter()
                .map(|r| r.realtime_factor)
                .fold(f64::MAX, f64::min),
            cpu_per_rung: rungs.iter().map(|r| r.cpu_cores).sum::<f64>() / count,
            node_cpu_cores: (node1 - node0) / wall,
            baseline_cpu_per_rung: base_cpu,
            baseline_realtime_factor_min: base_rtf,
            rungs,
        });
    }
    println!(
        "{:>10} {:>11} {:>9} {:>13} {:>10} {:>14} {:>13}",
        "concurrent",
        "encoder",
        "RTF min",
        "cores/rung",
        "node cores",
        "bare cores/rung",
        "bare RTF min"
    );
    for r in &rows {
        println!(
            "{:>10} {:>11} {:>9.3} {:>13.3} {:>10.3} {:>15.3} {:>13.3}",
            r.concurrent,
            r.encoder,
            r.realtime_factor_min,
            r.cpu_per_rung,
            r.node_cpu_cores,
            r.baseline_cpu_per_rung,
            r.baseline_realtime_factor_min
        );
        if let Some(n) = &r.encoder_note {
            println!("{:>10} note: {n}", "");
        }
    }
    for p in publishers {
        p.abort();
    }
    let _ = std::fs::remove_dir_all(&dir);
    write_json(
        &args.out,
        &Report {
            source: format!("{} VP8 30 fps, 2 Mbit/s", args.source),
            ladder: args.ladder.clone(),
            duration_s: args.duration,
            cpus: std::thread::available_parallelism().map_or(1, usize::from),
            rows,
        },
    )
}
