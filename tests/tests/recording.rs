//! Recording on the node (issue 13, scope 1) with headless Chromium and `ferry dev`.
//!
//! Chromium publishes VP8 + Opus to node-a; the test records it through the node's API
//! (`POST /v1/recordings`, the default target under the state directory) for 30 s, stops it
//! (`DELETE`), and ffprobe opens `index.m3u8`: duration 30 s ± 1 s, an audio and a video stream,
//! packet timestamps strictly increasing per stream, `EXT-X-ENDLIST`. Then Chromium publishes
//! H.264 + Opus and `ferry record start/list/stop` record it for 10 s into a real S3 API server
//! (`moto_server`, PyPI `moto[server]`) that `ferry dev` reaches with the standard AWS
//! variables; ffprobe reads the recording back over HTTP from the bucket. Bad requests get
//! their 4xx with a reason, and the node's `/metrics` counts what was stored.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use ferry_testkit::{Moto, probe, require_ffprobe};
use ferry_tests::cluster::{Dev, open_publisher, start_dev_env};
use ferry_tests::{Collector, ferry_bin, http};
use serde_json::{Value, json};

const SETUP: Duration = Duration::from_secs(40);
const TOLERANCE_S: f64 = 1.0;

/// Copies every object under a prefix of an S3 bucket into a directory:
/// `python3 -c DOWNLOAD ENDPOINT BUCKET PREFIX DIR`.
const DOWNLOAD: &str = "
import os, sys, boto3
endpoint, bucket, prefix, out = sys.argv[1:5]
s3 = boto3.client('s3', endpoint_url=endpoint)
os.makedirs(out, exist_ok=True)
for page in s3.get_paginator('list_objects_v2').paginate(Bucket=bucket, Prefix=prefix):
    for o in page.get('Contents', []):
        s3.download_file(bucket, o['Key'], os.path.join(out, o['Key'][len(prefix):]))
";

fn api(dev: &Dev, method: &str, path: &str, body: &Value) -> Result<(u16, Value)> {
    let auth = format!("Bearer {}", dev.token);
    let body = if body.is_null() {
        Vec::new()
    } else {
        body.to_string().into_bytes()
    };
    let r = http(
        &format!("{}{path}", dev.node_a),
        method,
        &[
            ("Authorization", auth.as_str()),
            ("Content-Type", "application/json"),
        ],
        &body,
    )?;
    let v = serde_json::from_str(&r.body).unwrap_or(Value::String(r.body.clone()));
    Ok((r.status, v))
}

/// `ferry record ARGS --node node-a --token … --json`, its JSON output.
fn cli(dev: &Dev, args: &[&str]) -> Result<Value> {
    let out = Command::new(ferry_bin()?)
        .arg("record")
        .args(args)
        .args(["--node", &dev.node_a, "--token", &dev.token, "--json"])
        .output()?;
    ensure!(
        out.status.success(),
        "ferry record {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).context("ferry record's output is not JSON")
}

fn check_recording(label: &str, playlist: &str, text: &str, want_s: f64) -> Result<f64> {
    ensure!(
        text.contains("#EXT-X-ENDLIST"),
        "{label}: the playlist has no EXT-X-ENDLIST:\n{text}"
    );
    let p = probe(Path::new(playlist))?;
    let duration = p
        .duration
        .with_context(|| format!("{label}: no duration: {p:?}"))?;
    eprintln!(
        "{label}: ffprobe duration {duration:.3} s, streams {:?}, {} packets",
        p.streams,
        p.packets.values().sum::<usize>()
    );
    ensure!(
        (duration - want_s).abs() <= TOLERANCE_S,
        "{label}: duration {duration} s, want {want_s} ± {TOLERANCE_S}"
    );
    ensure!(
        p.has("video") && p.has("audio"),
        "{label}: streams {:?}, want audio and video",
        p.streams
    );
    Ok(duration)
}

/// A metric of node-a (the sum of its series).
fn metric(dev: &Dev, name: &str) -> Result<f64> {
    let r = http(&format!("{}/metrics", dev.node_a), "GET", &[], b"")?;
    Ok(r.body
        .lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with([' ', '{']))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum())
}

/// Requests the API must refuse, each with its status.
fn bad_input(dev: &Dev, live: &str) -> Result<()> {
    let no_auth = http(
        &format!("{}/v1/recordings", dev.node_a),
        "POST",
        &[("Content-Type", "application/json")],
        json!({ "stream": live }).to_string().as_bytes(),
    )?;
    ensure!(no_auth.status == 401, "no token: {}", no_auth.status);
    for (body, want) in [
        (json!({ "stream": "nobody-publishes-this" }), 404),
        (json!({ "stream": live, "target": "ftp://host/x" }), 400),
        (json!({ "stream": live, "target": "s3://" }), 400),
        (json!({ "stream": "bad name!" }), 400),
        (json!({ "stream": live, "extra": 1 }), 400),
        (json!({ "target": "/tmp/x" }), 400),
    ] {
        let (status, v) = api(dev, "POST", "/v1/recordings", &body)?;
        ensure!(
            status == want && v["error"].as_str().is_some_and(|e| !e.is_empty()),
            "{body}: {status} {v}, want {want} with a reason"
        );
    }
    let (status, _) = api(dev, "GET", "/v1/recordings/rec-none", &Value::Null)?;
    ensure!(status == 404, "unknown recording: {status}");
    let (status, _) = api(dev, "DELETE", "/v1/recordings/bad%20id", &Value::Null)?;
    ensure!(status == 400, "bad recording id: {status}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chromium_stream_recorded_on_its_node_to_a_directory_and_to_s3() -> Result<()> {
    require_ffprobe()?;
    let moto = Moto::start()?;
    moto.create_bucket("ferry")?;
    let endpoint = moto.endpoint();
    let dev = start_dev_env(
        false,
        &[],
        &[
            ("AWS_ACCESS_KEY_ID", "testing"),
            ("AWS_SECRET_ACCESS_KEY", "testing"),
            ("AWS_REGION", "us-east-1"),
            ("AWS_ENDPOINT_URL", &endpoint),
        ],
    )?;
    let collector = Collector::start()?;
    let token = dev.token.clone();

    // VP8 + Opus, 30 s, into the node's default directory, through the HTTP API.
    let stream = "rec-vp8";
    let whip = format!("{}/whip/{stream}", dev.node_a);
    let publisher =
        open_publisher(&collector, &whip, "vp8", "A", &[("token", &token)], SETUP).await?;
    bad_input(&dev, stream)?;
    let (status, v) = api(&dev, "POST", "/v1/recordings", &json!({ "stream": stream }))?;
    ensure!(status == 201, "POST /v1/recordings: {status} {v}");
    let id = v["id"].as_str().context("no id")?.to_owned();
    let dir = v["target"].as_str().context("no target")?.to_owned();
    ensure!(
        v["stream"] == stream && v["state"] == "recording",
        "created: {v}"
    );
    ensure!(
        Path::new(&dir).starts_with(dev.state.join("recordings").join("node-a")),
        "default target {dir} is not under the state directory"
    );
    ensure!(
        metric(&dev, "ferry_recordings_active")? == 1.0,
        "one active"
    );
    tokio::time::sleep(Duration::from_secs(30)).await;
    // The scheduler lists it with its node (from node-a's heartbeats).
    let listed = http(&format!("{}/v1/recordings", dev.gateway), "GET", &[], &[])?;
    let listed: Value = serde_json::from_str(&listed.body)?;
    ensure!(
        listed
            .as_array()
            .is_some_and(|l| l.iter().any(|r| r["id"] == id.as_str()
                && r["node"] == "node-a"
                && r["stream"] == stream
                && r["state"] == "recording")),
        "the scheduler's GET /v1/recordings lacks {id} on node-a: {listed}"
    );
    let (status, v) = api(&dev, "GET", &format!("/v1/recordings/{id}"), &Value::Null)?;
    ensure!(
        status == 200 && v["state"] == "recording" && v["segments"].as_u64() >= Some(4),
        "while recording: {status} {v}"
    );
    let (status, list) = api(&dev, "GET", "/v1/recordings", &Value::Null)?;
    ensure!(
        status == 200 && list.as_array().is_some_and(|l| l.len() == 1),
        "list: {status} {list}"
    );
    let (status, v) = api(
        &dev,
        "DELETE",
        &format!("/v1/recordings/{id}"),
        &Value::Null,
    )?;
    ensure!(
        status == 200 && v["state"] == "stopped" && v["upload_errors"] == 0,
        "DELETE: {status} {v}"
    );
    let (status, _) = api(
        &dev,
        "DELETE",
        &format!("/v1/recordings/{id}"),
        &Value::Null,
    )?;
    ensure!(status == 409, "second DELETE: {status}");
    let playlist = format!("{dir}/index.m3u8");
    let text = std::fs::read_to_string(&playlist).with_context(|| playlist.clone())?;
    ensure!(
        text.contains("init.mkv") && text.contains(".mkv"),
        "VP8 is recorded as WebM:\n{text}"
    );
    let vp8 = check_recording("vp8 (directory)", &playlist, &text, 30.0)?;
    ensure!(
        metric(&dev, "ferry_recordings_active")? == 0.0,
        "none active"
    );
    let segments = metric(&dev, "ferry_recording_segments_total")?;
    let bytes = metric(&dev, "ferry_recording_bytes_total")?;
    ensure!(
        segments >= 5.0
            && bytes > 100_000.0
            && metric(&dev, "ferry_recording_upload_seconds_count")? > segments,
        "metrics: {segments} segments, {bytes} bytes"
    );
    drop(publisher);

    // H.264 + Opus, 10 s, into S3 (moto), with `ferry record`.
    let stream = "rec-h264";
    let whip = format!("{}/whip/{stream}", dev.node_a);
    let _publisher =
        open_publisher(&collector, &whip, "h264", "B", &[("token", &token)], SETUP).await?;
    let v = cli(
        &dev,
        &[
            "start",
            "--stream",
            stream,
            "--target",
            "s3://ferry/rec/h264",
        ],
    )?;
    let id = v["id"].as_str().context("no id")?.to_owned();
    tokio::time::sleep(Duration::from_secs(10)).await;
    let list = cli(&dev, &["list"])?;
    ensure!(
        list.as_array().is_some_and(|l| l
            .iter()
            .any(|r| r["id"] == id.as_str() && r["state"] == "recording")),
        "ferry record list: {list}"
    );
    let v = cli(&dev, &["stop", &id])?;
    ensure!(
        v["state"] == "stopped" && v["upload_errors"] == 0 && v["segments"].as_u64() >= Some(2),
        "ferry record stop: {v}"
    );
    // Read back with the AWS SDK (boto3 comes with moto): moto refuses anonymous GETs.
    let copy = dev.state.join("s3-copy");
    let out = Command::new("python3")
        .args(["-c", DOWNLOAD, &endpoint, "ferry", "rec/h264/"])
        .arg(&copy)
        .env("AWS_ACCESS_KEY_ID", "testing")
        .env("AWS_SECRET_ACCESS_KEY", "testing")
        .env("AWS_DEFAULT_REGION", "us-east-1")
        .output()?;
    ensure!(
        out.status.success(),
        "downloading the recording from S3: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let playlist = copy.join("index.m3u8").to_string_lossy().into_owned();
    let text = std::fs::read_to_string(&playlist).with_context(|| playlist.clone())?;
    ensure!(
        text.contains("init.mp4") && text.contains(".m4s"),
        "H.264 is recorded as fragmented MP4:\n{text}"
    );
    let h264 = check_recording("h264 (s3)", &playlist, &text, 10.0)?;
    eprintln!("durations: vp8 {vp8:.3} s (want 30), h264 {h264:.3} s (want 10)");
    Ok(())
}
