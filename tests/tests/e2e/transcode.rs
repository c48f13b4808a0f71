//! Transcoding (issue 13, scope 3) with separate `ferry scheduler` and `ferry node` processes and
//! headless Chromium.
//!
//! node-b reports a GPU from its flags (`--gpu-vram-gib 16 --nvenc-sessions 1`); Chromium
//! publishes VP8 + Opus to node-a. `POST /v1/transcodes {"ladder": ["360p"]}` at the scheduler
//! goes to node-b (the GPU node, one NVENC session free); its worker plays the stream (relayed
//! from node-a), ffmpeg scales it to 360 lines and encodes H.264 (`h264_nvenc` where ffmpeg
//! reaches a GPU — this machine has none, so `libx264`, and the view says why), and the rung is
//! published as `{stream}~360p`. A Chromium viewer plays that over WHEP and decodes 360 lines.
//! A second transcode with two rungs needs more NVENC sessions than node-b has left and goes to
//! the CPU node. Bad requests get their 4xx with a reason; stopping ends the rungs.

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use ferry_tests::cluster::{
    open_publisher, playing, post_once_known, start_cluster_with, task_until, wait_registered,
};
use ferry_tests::{Browser, Collector, api_call, http, num};
use serde_json::{Value, json};

const SETUP: Duration = Duration::from_secs(45);

/// `ferry transcode ARGS --scheduler GATEWAY --token T`: its output.
fn cli(gateway: &str, token: &str, args: &[&str]) -> Result<String> {
    let out = std::process::Command::new(ferry_tests::ferry_bin()?)
        .arg("transcode")
        .args(args)
        .args(["--scheduler", gateway, "--token", token])
        .output()?;
    ensure!(
        out.status.success(),
        "ferry transcode {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `DELETE /v1/transcodes/{id}` at the scheduler: its status and answer.
fn stop(c: &ferry_tests::cluster::Cluster, id: &str) -> Result<(u16, Value)> {
    api_call(
        &c.gateway,
        &c.token,
        "DELETE",
        &format!("/v1/transcodes/{id}"),
        &Value::Null,
    )
}

/// A Chromium viewer ("V") of `rung` through the gateway, and its reports once it decoded
/// `frames` frames (or why it did not).
async fn play_rung(
    collector: &Collector,
    c: &ferry_tests::cluster::Cluster,
    rung: &str,
    frames: f64,
) -> Result<(Browser, Result<ferry_tests::Reports>)> {
    let viewer = Browser::open(&collector.page_url(
        "view.html",
        &[
            ("whep", &format!("{}/whep/{rung}", c.gateway)),
            ("id", "V"),
            ("token", &c.token),
        ],
    ))?;
    let reports = collector
        .wait_until(SETUP, |r| {
            r.get("V")
                .is_some_and(|v| playing(v) && num(v, "/inbound/video/framesDecoded") > frames)
        })
        .await;
    Ok((viewer, reports))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chromium_plays_a_360p_rung_transcoded_on_the_gpu_node() -> Result<()> {
    let _area = ferry_tests::area(module_path!());
    ferry_testkit::require_ffprobe()?;
    let c = start_cluster_with(
        "transcode",
        &[],
        &["--gpu-vram-gib", "16", "--nvenc-sessions", "1"],
    )?;
    wait_registered(&c.gateway, 2).await?;
    let collector = Collector::start()?;
    let stream = "tc-cam";
    let whip = format!("{}/whip/{stream}", c.node_a);
    let _publisher =
        open_publisher(&collector, &whip, "vp8", "A", &[("token", &c.token)], SETUP).await?;
    let (status, v) = post_once_known(
        &c.gateway,
        &c.token,
        "/v1/transcodes",
        &json!({ "stream": stream, "ladder": ["360p"] }),
    )
    .await?;
    ensure!(status == 201, "POST /v1/transcodes: {status} {v}");
    ensure!(v["node"] == "node-b", "placed on the GPU node: {v}");
    let id = v["id"].as_str().context("no id")?.to_owned();
    eprintln!("transcode: {v}");
    // This machine has no GPU ffmpeg can use: x264, and the view says so.
    ensure!(
        v["encoder"] == "h264_nvenc"
            || (v["encoder"] == "libx264"
                && v["encoder_note"]
                    .as_str()
                    .is_some_and(|n| n.contains("h264_nvenc"))),
        "the encoder and why: {v}"
    );

    let rung = format!("{stream}~360p");
    let (_viewer, reports) = play_rung(&collector, &c, &rung, 60.0).await?;
    let reports = match reports {
        Ok(r) => r,
        Err(e) => {
            let t = http(
                &format!("{}/v1/transcodes/{id}", c.gateway),
                "GET",
                &[],
                b"",
            )?;
            return Err(e.context(format!("the transcode then: {}", t.body)));
        }
    };
    let v = &reports["V"];
    let height = num(v, "/inbound/video/frameHeight");
    eprintln!(
        "viewer of {rung}: {}x{height}, {} frames decoded, codec {}",
        num(v, "/inbound/video/frameWidth"),
        num(v, "/inbound/video/framesDecoded"),
        v["inbound"]["video"]["codec"]
    );
    ensure!(height == 360.0, "decoded height {height}, want 360: {v}");

    let t = task_until(&c.gateway, "transcodes", &id, Duration::from_secs(5), |t| {
        t["rungs"][0]["frames"].as_u64() > Some(60)
    })
    .await?;
    let r = &t["rungs"][0];
    eprintln!(
        "rung 360p: {} frames, {} keyframes, {:.2} media s, real-time factor {:.3}, cpu {:.2} s",
        r["frames"], r["keyframes"], r["media_s"], r["realtime_factor"], r["cpu_s"]
    );
    ensure!(
        r["realtime_factor"].as_f64().is_some_and(|f| f > 0.8),
        "the rung keeps up with its live source: {t}"
    );

    // Two rungs need two NVENC sessions; node-b has none left: the CPU node takes it.
    // (Through the CLI, as an operator would.)
    let v2 = cli(
        &c.gateway,
        &c.token,
        &[
            "start",
            "--stream",
            stream,
            "--ladder",
            "240p,180p",
            "--json",
        ],
    )?;
    let v2: Value = serde_json::from_str(&v2).context("ferry transcode start --json")?;
    ensure!(
        v2["node"] == "node-a" && v2["encoder"] == "libx264",
        "no NVENC left: a CPU node: {v2}"
    );
    let id2 = v2["id"].as_str().context("no id")?.to_owned();
    let table = cli(&c.gateway, &c.token, &["list"])?;
    eprintln!("ferry transcode list:\n{table}");
    for rung in ["tc-cam~360p", "tc-cam~240p", "tc-cam~180p"] {
        ensure!(table.contains(rung), "ferry transcode list shows {rung}");
    }
    ensure!(
        table.lines().filter(|l| l.contains("libx264")).count() == 3,
        "the list shows the encoder each node uses"
    );

    // Refusals, each with a reason.
    let no_auth = http(
        &format!("{}/v1/transcodes", c.gateway),
        "POST",
        &[("Content-Type", "application/json")],
        json!({ "stream": stream, "ladder": ["360p"] })
            .to_string()
            .as_bytes(),
    )?;
    ensure!(no_auth.status == 401, "no token: {}", no_auth.status);
    for (body, want) in [
        (json!({ "stream": stream, "ladder": ["360"] }), 400),
        (json!({ "stream": stream, "ladder": [] }), 400),
        (json!({ "stream": stream, "ladder": ["360p", "360p"] }), 400),
        // tc-cam~360p has its transcode already.
        (json!({ "stream": stream, "ladder": ["720p", "360p"] }), 409),
        (
            json!({ "stream": "nobody-publishes-this", "ladder": ["360p"] }),
            404,
        ),
        (
            json!({ "stream": stream, "ladder": ["480p"], "node": "node-zz" }),
            404,
        ),
    ] {
        let (status, v) = api_call(&c.gateway, &c.token, "POST", "/v1/transcodes", &body)?;
        ensure!(
            status == want && v["error"].as_str().is_some_and(|e| !e.is_empty()),
            "{body}: {status} {v}, want {want} with a reason"
        );
    }
    let r = http(&format!("{}/v1/transcodes", c.node_b), "GET", &[], b"")?;
    ensure!(
        r.status == 401,
        "a node's transcode API needs the token: {}",
        r.status
    );

    for id in [&id, &id2] {
        let (status, v) = stop(&c, id)?;
        ensure!(
            status == 200 && v["state"] == "stopped",
            "DELETE {id}: {status} {v}"
        );
    }
    let (status, _) = stop(&c, &id)?;
    ensure!(status == 409, "second DELETE: {status}");
    let m = http(&format!("{}/metrics", c.node_b), "GET", &[], b"")?;
    ensure!(
        m.body.contains("ferry_transcodes_running 0")
            && m.body.contains("ferry_transcode_frames_total"),
        "node-b's metrics count transcodes"
    );
    Ok(())
}

/// The `state` of `node` at the scheduler.
fn node_state(gateway: &str, node: &str) -> Result<String> {
    let r = http(&format!("{gateway}/v1/nodes"), "GET", &[], b"")?;
    let nodes: Value = serde_json::from_str(&r.body)?;
    Ok(nodes
        .as_array()
        .and_then(|l| l.iter().find(|n| n["id"] == node))
        .and_then(|n| n["state"].as_str())
        .unwrap_or_default()
        .to_owned())
}

/// Without GPUs a transcode goes to a CPU node. A transcode on node-b, a Chromium viewer of its
/// rung; node-b is drained: its sessions move
/// to node-a (the viewer's, and the worker's own: its source viewer and the rung's publisher),
/// then the transcode — node-b hands over the rung's session ticket, node-a's new worker
/// resumes that session (make before break: the viewer switches at its first keyframe), and
/// node-b's worker lets go of it. The viewer plays on at 360 lines with at most one freeze.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn draining_the_transcode_s_node_moves_it_and_its_viewer_plays_on() -> Result<()> {
    let _area = ferry_tests::area(module_path!());
    let c = start_cluster_with("tc-drain", &[], &[])?;
    wait_registered(&c.gateway, 2).await?;
    let collector = Collector::start()?;
    let stream = "tc-drain";
    let whip = format!("{}/whip/{stream}", c.node_a);
    let _publisher =
        open_publisher(&collector, &whip, "vp8", "A", &[("token", &c.token)], SETUP).await?;
    // No node reports a GPU: a transcode goes to a CPU node, with x264 and nothing to explain.
    let (status, v) = post_once_known(
        &c.gateway,
        &c.token,
        "/v1/transcodes",
        &json!({ "stream": stream, "ladder": ["240p"] }),
    )
    .await?;
    ensure!(
        status == 201 && v["encoder"] == "libx264" && v["encoder_note"].is_null(),
        "a transcode without GPUs: {status} {v}"
    );
    let cpu_id = v["id"].as_str().context("no id")?;
    let (status, _) = stop(&c, cpu_id)?;
    ensure!(status == 200, "DELETE {cpu_id}: {status}");
    let (status, v) = api_call(
        &c.gateway,
        &c.token,
        "POST",
        "/v1/transcodes",
        &json!({ "stream": stream, "ladder": ["360p"], "node": "node-b" }),
    )?;
    ensure!(
        status == 201 && v["node"] == "node-b",
        "POST /v1/transcodes on node-b: {status} {v}"
    );
    let id = v["id"].as_str().context("no id")?.to_owned();
    let rung = format!("{stream}~360p");
    let (_viewer, reports) = play_rung(&collector, &c, &rung, 90.0).await?;
    let reports = reports?;
    let before = reports["V"].clone();
    let (frames0, freezes0) = (
        num(&before, "/inbound/video/framesDecoded"),
        num(&before, "/inbound/video/freezeCount"),
    );

    let (status, v) = api_call(
        &c.gateway,
        &c.token,
        "POST",
        "/v1/nodes/node-b/drain",
        &Value::Null,
    )?;
    ensure!(status == 200 || status == 202, "drain: {status} {v}");
    let drained_at = std::time::Instant::now();
    let t = task_until(
        &c.gateway,
        "transcodes",
        &id,
        Duration::from_secs(60),
        |t| t["node"] == "node-a" && t["moves"] == 1 && t["state"] == "running",
    )
    .await?;
    let moved_in = drained_at.elapsed();
    let frames_at_move = num(&collector.reports()["V"], "/inbound/video/framesDecoded");
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while node_state(&c.gateway, "node-b")? != "drained" {
        ensure!(
            std::time::Instant::now() < deadline,
            "node-b is {} after its transcode moved",
            node_state(&c.gateway, "node-b")?
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The viewer plays on for 3 s more.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = collector.reports()["V"].clone();
    let frames = num(&after, "/inbound/video/framesDecoded") - frames0;
    let freezes = num(&after, "/inbound/video/freezeCount") - freezes0;
    let height = num(&after, "/inbound/video/frameHeight");
    eprintln!(
        "transcode moved to node-a {moved_in:?} after the drain began; the viewer decoded {frames} \
         frames since, {freezes} freezes, height {height}; transcode {t}"
    );
    ensure!(
        frames > 90.0 && playing(&after),
        "the viewer plays on after the move: {frames} frames: {after}"
    );
    ensure!(height == 360.0, "still the 360p rung: {height}");
    // What it decodes now comes from node-a's worker (node-b's has stopped).
    let since_move = num(&after, "/inbound/video/framesDecoded") - frames_at_move;
    let t = task_until(&c.gateway, "transcodes", &id, Duration::from_secs(2), |t| {
        t["rungs"][0]["frames"].as_u64() > Some(60)
    })
    .await?;
    eprintln!(
        "since the move: the viewer decoded {since_move} frames, node-a's worker published {}",
        t["rungs"][0]["frames"]
    );
    ensure!(
        since_move > 60.0,
        "the viewer plays node-a's rung: {since_move} frames in the 3 s after the move"
    );
    ensure!(freezes <= 1.0, "{freezes} freezes across the move");
    let r = &t["rungs"][0];
    ensure!(
        r["keyframes"].as_u64() > Some(0),
        "node-a's worker publishes the rung: {t}"
    );
    let m = http(&format!("{}/metrics", c.node_b), "GET", &[], b"")?;
    ensure!(
        m.body.contains("ferry_transcodes_running 0"),
        "node-b runs no transcode now"
    );
    let (status, v) = stop(&c, &id)?;
    ensure!(
        status == 200 && v["state"] == "stopped" && v["node"] == "node-a",
        "DELETE after the move: {status} {v}"
    );
    Ok(())
}
