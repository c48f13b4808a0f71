//! ffprobe (Debian `ffmpeg`): what a recording holds, read back by a real demuxer.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, ensure};
use serde_json::Value;

use crate::require;

const HINT: &str = "apt-get install ffmpeg (scripts/test installs it)";

/// Fails (never skips) when ffprobe is missing.
pub fn require_ffprobe() -> Result<()> {
    require("ffprobe", &["-version"], HINT)
}

/// Fails (never skips) when ffmpeg or ffprobe is missing.
pub fn require_ffmpeg() -> Result<()> {
    require("ffmpeg", &["-version"], HINT)?;
    require_ffprobe()
}

/// ffprobe's JSON for `args` on `path`.
pub fn ffprobe(path: &Path, args: &[&str]) -> Result<Value> {
    ffprobe_with(path, &[], args)
}

/// ffprobe's JSON for `args` on `path` opened with input options `input`.
pub fn ffprobe_with(path: &Path, input: &[&str], args: &[&str]) -> Result<Value> {
    require_ffprobe()?;
    let out = Command::new("ffprobe")
        .args(["-v", "error", "-of", "json"])
        .args(input)
        .args(args)
        .arg(path)
        .output()
        .context("running ffprobe")?;
    ensure!(
        out.status.success(),
        "ffprobe {path:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).with_context(|| format!("ffprobe {path:?}: not JSON"))
}

/// What ffprobe says about a recording.
#[derive(Debug)]
pub struct Probe {
    /// Absent for a live WebM stream (init + clusters) on its own.
    pub duration: Option<f64>,
    /// (codec_type, codec_name) per stream.
    pub streams: Vec<(String, String)>,
    /// Packet count per codec_type ("video", "audio").
    pub packets: BTreeMap<String, usize>,
    /// Largest pts step between consecutive packets of the video stream, seconds.
    pub max_video_gap: f64,
    /// Every video packet's pts, seconds, in order.
    pub video_pts: Vec<f64>,
}

impl Probe {
    /// Whether it has a stream of `codec_type` ("video", "audio").
    pub fn has(&self, codec_type: &str) -> bool {
        self.streams.iter().any(|(t, _)| t == codec_type)
    }
}

/// The `field` of every stream in ffprobe's JSON `v`.
fn stream_field(v: &Value, field: &str) -> Vec<String> {
    v["streams"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| s[field].as_str().unwrap_or("").to_owned())
        .collect()
}

/// Probes `path` (a file or a playlist): duration and streams, then every packet; an error
/// unless each stream's pts strictly increase.
pub fn probe(path: &Path) -> Result<Probe> {
    let v = ffprobe(
        path,
        &[
            "-show_entries",
            "format=duration:stream=index,codec_type,codec_name",
        ],
    )?;
    let duration = v["format"]["duration"]
        .as_str()
        .and_then(|d| d.parse().ok());
    let streams = stream_field(&v, "codec_type")
        .into_iter()
        .zip(stream_field(&v, "codec_name"))
        .collect();
    let p = ffprobe(
        path,
        &[
            "-show_entries",
            "packet=stream_index,pts_time:stream=index,codec_type",
        ],
    )?;
    let kinds = stream_field(&p, "codec_type");
    let mut packets = BTreeMap::new();
    let mut last: Vec<Option<f64>> = vec![None; kinds.len()];
    let mut max_video_gap: f64 = 0.0;
    let mut video_pts = Vec::new();
    for pk in p["packets"].as_array().into_iter().flatten() {
        let i = pk["stream_index"]
            .as_u64()
            .and_then(|i| usize::try_from(i).ok())
            .filter(|i| *i < kinds.len())
            .with_context(|| format!("{path:?}: packet of no stream: {pk}"))?;
        let pts: f64 = pk["pts_time"]
            .as_str()
            .and_then(|t| t.parse().ok())
            .with_context(|| format!("{path:?}: packet without pts: {pk}"))?;
        if let Some(l) = last[i] {
            ensure!(
                pts > l,
                "{path:?}: {} pts {pts} after {l} (not increasing)",
                kinds[i]
            );
            if kinds[i] == "video" {
                max_video_gap = max_video_gap.max(pts - l);
            }
        }
        last[i] = Some(pts);
        if kinds[i] == "video" {
            video_pts.push(pts);
        }
        *packets.entry(kinds[i].clone()).or_insert(0) += 1;
    }
    Ok(Probe {
        duration,
        streams,
        packets,
        max_video_gap,
        video_pts,
    })
}
