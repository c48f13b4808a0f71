//! Third-party WHIP/WHEP clients against `ferry dev`, as a user would run them: GStreamer 1.22
//! (`whipsink` / `whepsrc` from gst-plugins-rs, webrtcbin with libnice and an RSA DTLS
//! certificate, `bundle-only` m-lines, redirects followed by hand) and aiortc (PyPI). Both
//! ignore loopback, so they run in a network namespace and `ferry dev` listens on the veth
//! address (its inter-node migration link too: `--udp` on a non-loopback address).
//!
//! - whipsink publishes VP8 + Opus and H.264 + Opus through the gateway; a Chromium viewer
//!   decodes ≥ 12 fps with no freeze.
//! - whepsrc plays a Chromium publisher; its decoded frames are counted, across an edge
//!   migration.
//! - aiortc publishes and plays.
//! - Each client's DELETE (gst-launch stopped with Ctrl-C; aiortc's DELETE on its Location)
//!   ends its session at once, before and after an edge migration of that session (the URL
//!   the client holds is the node it left: that node forwards).

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use ferry_proto::auth::with_access_token;
use ferry_tests::cluster::{Dev, migration_end, start_dev_at, start_migration, wait_registered};
use ferry_tests::gstreamer::GstLaunch;
use ferry_tests::netns::Netns;
use ferry_tests::{Browser, Collector, http, num};
use serde_json::Value;

/// `ferry dev` with the edge, every socket on the host end of `ns`'s link.
async fn dev_on(ns: &Netns) -> Result<(Dev, String)> {
    let dev = start_dev_at(&ns.host_ip, true, &[], &[])?;
    wait_registered(&dev.gateway, 2).await?;
    let access = dev._process.after("access-token")?;
    Ok((dev, access))
}

/// `(node name, node URL)` of both nodes.
fn nodes(dev: &Dev) -> [(&'static str, String); 2] {
    [
        ("node-a", dev.node_a.clone()),
        ("node-b", dev.node_b.clone()),
    ]
}

/// Every session on both nodes, with the node holding it.
fn sessions(dev: &Dev) -> Result<Vec<(&'static str, Value)>> {
    let mut all = Vec::new();
    for (name, url) in nodes(dev) {
        let r = http(&format!("{url}/v1/sessions"), "GET", &[], b"")?;
        ensure!(
            r.status == 200,
            "GET {url}/v1/sessions: {} {}",
            r.status,
            r.body
        );
        let list: Value = serde_json::from_str(&r.body)?;
        for s in list.as_array().cloned().unwrap_or_default() {
            all.push((name, s));
        }
    }
    Ok(all)
}

/// Waits for a connected session of `kind` on `stream`: (node, session id).
async fn connected(dev: &Dev, stream: &str, kind: &str) -> Result<(&'static str, String)> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let list = sessions(dev)?;
        if let Some((node, s)) = list
            .iter()
            .find(|(_, s)| s["stream"] == stream && s["kind"] == kind && s["state"] == "connected")
        {
            return Ok((node, s["id"].as_str().unwrap_or_default().to_owned()));
        }
        ensure!(
            Instant::now() < deadline,
            "no connected {kind} session on {stream}: {list:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until no node has session `id`; how long that took from `since`.
async fn gone(dev: &Dev, id: &str, since: Instant, within: Duration) -> Result<Duration> {
    loop {
        let list = sessions(dev)?;
        if !list.iter().any(|(_, s)| s["id"] == id) {
            return Ok(since.elapsed());
        }
        ensure!(
            since.elapsed() < within,
            "session {id} still there {within:?} after the client's DELETE: {list:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Edge-migrates session `id` from `node` to the other node; the target's name.
async fn migrate(dev: &Dev, id: &str, node: &str) -> Result<&'static str> {
    let target = if node == "node-a" { "node-b" } else { "node-a" };
    let m = start_migration(&dev.gateway, &dev.token, id, target, "edge")?;
    let end = migration_end(&dev.gateway, &m).await?;
    ensure!(end["state"] == "committed", "migration of {id}: {end}");
    // The target has it, the source does not.
    let list = sessions(dev)?;
    ensure!(
        list.iter().any(|(n, s)| *n == target && s["id"] == id),
        "{id} not on {target} after the migration: {list:?}"
    );
    Ok(target)
}

/// Stops gst-launch with Ctrl-C (whipsink and whepsrc DELETE their session URL) and checks
/// that session `id`, on `node`, is gone from every node within 3 s.
async fn stop(dev: &Dev, gst: &mut GstLaunch, id: &str, who: &str, node: &str) -> Result<()> {
    let since = Instant::now();
    gst.interrupt(Duration::from_secs(10))?;
    let took = gone(dev, id, since, Duration::from_secs(3)).await?;
    println!(
        "{who}'s DELETE ended its session (on {node}) {} ms after Ctrl-C",
        took.as_millis()
    );
    Ok(())
}

/// whipsink's pipeline for `codec` (`vp8` or `h264`) with Opus, to `url`. Every GStreamer
/// payloader defaults to payload type 96: Opus takes 111, for one BUNDLE group must not give
/// one payload type two codecs (RFC 8843 §9.1; the node answers 400).
fn whipsink(codec: &str, url: &str, token: &str) -> Vec<String> {
    let video = match codec {
        "vp8" => "vp8enc deadline=1 keyframe-max-dist=30 ! rtpvp8pay",
        _ => {
            "x264enc tune=zerolatency speed-preset=ultrafast key-int-max=30 ! \
             video/x-h264,profile=constrained-baseline ! rtph264pay config-interval=-1"
        }
    };
    let line = format!(
        "videotestsrc is-live=true ! video/x-raw,width=640,height=360,framerate=30/1 ! \
         videoconvert ! {video} ! whip.sink_0 \
         audiotestsrc is-live=true wave=ticks ! audioconvert ! audioresample ! opusenc ! \
         rtpopuspay pt=111 ! whip.sink_1 \
         whipsink name=whip whip-endpoint={url} auth-token={token}"
    );
    pipeline(&line)
}

/// gst-launch's words of a pipeline description.
fn pipeline(line: &str) -> Vec<String> {
    line.split_whitespace().map(str::to_owned).collect()
}

fn words(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gstreamer_whipsink_publishes_vp8_and_h264_with_opus_to_chromium() -> Result<()> {
    let _area = ferry_tests::area(module_path!());
    let ns = Netns::create()?;
    let (dev, access) = dev_on(&ns).await?;
    let collector = Collector::start()?;
    for (codec, migrate_first) in [("vp8", false), ("h264", true)] {
        let stream = format!("gst-{codec}");
        let pipeline = whipsink(codec, &format!("{}/whip/{stream}", dev.gateway), &access);
        let mut gst = GstLaunch::spawn(&ns, &words(&pipeline), "whipsink:4,webrtcbin:3")?;
        let (mut node, id) = connected(&dev, &stream, "publish")
            .await
            .with_context(|| gst.tail(30))?;

        // A Chromium viewer decodes it: ≥ 12 fps over 4 s, no freeze.
        let whep = with_access_token(&format!("{}/whep/{stream}", dev.gateway), &access);
        let vid = format!("view-{codec}");
        let _viewer =
            Browser::open(&collector.page_url("view.html", &[("whep", &whep), ("id", &vid)]))?;
        let reports = collector
            .wait_until(Duration::from_secs(25), |r| {
                r.get(&vid)
                    .is_some_and(|v| num(v, "/inbound/video/framesDecoded") >= 30.0)
            })
            .await
            .with_context(|| gst.tail(30))?;
        let (f0, t0) = (
            num(&reports[&vid], "/inbound/video/framesDecoded"),
            Instant::now(),
        );
        tokio::time::sleep(Duration::from_secs(4)).await;
        let last = collector.reports()[&vid].clone();
        let fps = (num(&last, "/inbound/video/framesDecoded") - f0) / t0.elapsed().as_secs_f64();
        println!(
            "{codec}: Chromium decodes GStreamer's stream at {fps:.1} fps, {}x{}, freezes {}, audio packets {}",
            num(&last, "/inbound/video/frameWidth"),
            num(&last, "/inbound/video/frameHeight"),
            num(&last, "/inbound/video/freezeCount"),
            num(&last, "/inbound/audio/packetsReceived"),
        );
        ensure!(fps >= 12.0, "{codec}: {fps:.1} fps: {last}");
        ensure!(
            num(&last, "/inbound/video/freezeCount") == 0.0,
            "{codec}: freezes: {last}"
        );
        ensure!(
            num(&last, "/inbound/audio/packetsReceived") > 0.0,
            "{codec}: no audio: {last}"
        );

        if migrate_first {
            node = migrate(&dev, &id, node).await?;
            println!("{codec}: the publisher's session moved to {node} (edge)");
        }
        // Ctrl-C: whipsink DELETEs the URL it holds (the node it left, when it moved).
        stop(&dev, &mut gst, &id, &format!("{codec}: whipsink"), node).await?;
    }
    Ok(())
}

/// whepsrc with VP8 + Opus, each stream decoded (`decodebin`) into a fakesink that prints
/// each buffer. Which stream lands in which branch is up to gst-launch (its pads appear as
/// their first packets do): [`GstLaunch::decoded`] sorts them by caps.
fn whepsrc(url: &str, token: &str) -> Vec<String> {
    let line = format!(
        "whepsrc name=w whep-endpoint={url} auth-token={token} \
         video-caps=application/x-rtp,media=video,encoding-name=VP8,payload=96,clock-rate=90000 \
         audio-caps=application/x-rtp,media=audio,encoding-name=OPUS,payload=111,clock-rate=48000,encoding-params=(string)2 \
         w. ! queue ! decodebin ! fakesink name=s0 silent=false \
         w. ! queue ! decodebin ! fakesink name=s1 silent=false"
    );
    pipeline(&line)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gstreamer_whepsrc_plays_a_chromium_publisher_across_an_edge_migration() -> Result<()> {
    let _area = ferry_tests::area(module_path!());
    let ns = Netns::create()?;
    let (dev, access) = dev_on(&ns).await?;
    let collector = Collector::start()?;
    let whip = with_access_token(&format!("{}/whip/chrome", dev.gateway), &access);
    let _publisher = ferry_tests::cluster::open_publisher(
        &collector,
        &whip,
        "vp8",
        "pub",
        &[],
        Duration::from_secs(20),
    )
    .await?;
    let url = format!("{}/whep/chrome", dev.gateway);
    for migrate_first in [false, true] {
        let mut gst = GstLaunch::spawn(&ns, &words(&whepsrc(&url, &access)), "whepsrc:4")?;
        let (mut node, id) = connected(&dev, "chrome", "view")
            .await
            .with_context(|| gst.tail(30))?;
        let deadline = Instant::now() + Duration::from_secs(20);
        while gst.decoded("video") < 30 {
            ensure!(
                Instant::now() < deadline && gst.running(),
                "whepsrc decoded {} frames: {}",
                gst.decoded("video"),
                gst.tail(30)
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let (f0, t0) = (gst.decoded("video"), Instant::now());
        tokio::time::sleep(Duration::from_secs(3)).await;
        let fps = (gst.decoded("video") - f0) as f64 / t0.elapsed().as_secs_f64();
        println!(
            "whepsrc decodes Chromium's VP8 at {fps:.1} fps ({} audio buffers)",
            gst.decoded("audio")
        );
        ensure!(fps >= 12.0, "whepsrc: {fps:.1} fps");
        ensure!(gst.decoded("audio") > 0, "whepsrc decoded no audio");
        if migrate_first {
            node = migrate(&dev, &id, node).await?;
            let (f1, t1) = (gst.decoded("video"), Instant::now());
            tokio::time::sleep(Duration::from_secs(3)).await;
            let after = (gst.decoded("video") - f1) as f64 / t1.elapsed().as_secs_f64();
            println!("whepsrc after its session moved to {node} (edge): {after:.1} fps");
            ensure!(after >= 12.0, "whepsrc after the migration: {after:.1} fps");
        }
        stop(&dev, &mut gst, &id, "whepsrc", node).await?;
    }
    Ok(())
}

/// `tests/peers/aiortc_peer.py` in a namespace, its JSON lines collected.
struct Aiortc {
    child: Child,
    lines: Arc<Mutex<Vec<Value>>>,
}

impl Aiortc {
    fn spawn(ns: &Netns, mode: &str, url: &str, token: &str) -> Result<Aiortc> {
        // The package as cargo runs the test, not where it was compiled.
        let dir =
            std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or(env!("CARGO_MANIFEST_DIR").into());
        let script = std::path::Path::new(&dir).join("peers/aiortc_peer.py");
        let mut child = ns
            .command("python3")
            .arg(&script)
            .args([mode, url, token])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .context("python3 with aiortc (pip install aiortc)")?;
        let out = child.stdout.take().context("stdout")?;
        let lines: Arc<Mutex<Vec<Value>>> = Arc::default();
        let sink = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if let Ok(v) = serde_json::from_str(&line) {
                    sink.lock().unwrap_or_else(|e| e.into_inner()).push(v);
                }
            }
        });
        Ok(Aiortc { child, lines })
    }

    fn last(&self, event: &str) -> Option<Value> {
        let lines = self.lines.lock().unwrap_or_else(|e| e.into_inner());
        lines.iter().rev().find(|v| v["event"] == event).cloned()
    }

    /// The session id at the end of its Location.
    async fn session(&mut self) -> Result<String> {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(v) = self.last("created") {
                let loc = v["location"].as_str().unwrap_or_default();
                return Ok(loc.rsplit('/').next().unwrap_or_default().to_owned());
            }
            if !matches!(self.child.try_wait(), Ok(None)) {
                bail!("aiortc exited: {:?}", self.child.try_wait());
            }
            ensure!(Instant::now() < deadline, "aiortc made no session");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn video_frames(&self) -> f64 {
        self.last("frames").map_or(0.0, |v| num(&v, "/video"))
    }

    /// Closes its stdin: it DELETEs its Location and exits; the DELETE's status.
    async fn delete(&mut self) -> Result<u16> {
        drop(self.child.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(v) = self.last("deleted") {
                return Ok(v["status"].as_u64().unwrap_or(0) as u16);
            }
            ensure!(Instant::now() < deadline, "aiortc did not DELETE");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Aiortc {
    fn drop(&mut self) {
        if let Some(mut stdin) = self.child.stdin.take() {
            let _ = stdin.flush();
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aiortc_publishes_and_plays_and_its_delete_ends_the_session_before_and_after_a_migration()
-> Result<()> {
    let _area = ferry_tests::area(module_path!());
    let ns = Netns::create()?;
    let (dev, access) = dev_on(&ns).await?;
    let whip = format!("{}/whip/py", dev.gateway);
    let whep = format!("{}/whep/py", dev.gateway);
    let mut publisher = Aiortc::spawn(&ns, "publish", &whip, &access)?;
    let pub_id = publisher.session().await?;
    let (mut pub_node, _) = connected(&dev, "py", "publish").await?;
    let mut viewers = Vec::new();
    for _ in 0..2 {
        let mut v = Aiortc::spawn(&ns, "play", &whep, &access)?;
        let id = v.session().await?;
        viewers.push((v, id));
    }
    for (v, _) in &viewers {
        let deadline = Instant::now() + Duration::from_secs(30);
        while v.video_frames() < 30.0 {
            ensure!(
                Instant::now() < deadline,
                "aiortc viewer decoded {} frames",
                v.video_frames()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    println!("aiortc publishes, two aiortc viewers decode its video");

    // Viewer 1: DELETE on its own node.
    let (mut v1, id1) = viewers.remove(0);
    let stop = Instant::now();
    let status = v1.delete().await?;
    let took = gone(&dev, &id1, stop, Duration::from_secs(2)).await?;
    ensure!(status == 200, "DELETE: {status}");
    println!(
        "aiortc viewer's DELETE: {status}, session gone after {} ms",
        took.as_millis()
    );

    // Viewer 2: moved first, keeps decoding, then DELETEs the URL it holds (the old node).
    let (mut v2, id2) = viewers.remove(0);
    let node2 = sessions(&dev)?
        .into_iter()
        .find(|(_, s)| s["id"] == id2.as_str())
        .map(|(n, _)| n)
        .context("viewer 2's node")?;
    let to = migrate(&dev, &id2, node2).await?;
    let before = v2.video_frames();
    tokio::time::sleep(Duration::from_secs(2)).await;
    ensure!(
        v2.video_frames() > before + 15.0,
        "viewer 2 stalled after its migration: {before} → {}",
        v2.video_frames()
    );
    // PATCH to the URL it holds reaches the session where it is now (forwarded): a trickled
    // candidate is taken (204), a stale If-Match is refused there (412).
    let location = v2
        .last("created")
        .and_then(|v| v["location"].as_str().map(str::to_owned))
        .context("viewer 2's Location")?;
    let frag = b"a=candidate:1 1 udp 2130706431 192.0.2.9 9 typ host\r\n";
    let patch = |etag: &str| {
        http(
            &location,
            "PATCH",
            &[
                ("Content-Type", "application/trickle-ice-sdpfrag"),
                ("If-Match", etag),
            ],
            frag,
        )
    };
    let r = patch("*")?;
    ensure!(
        r.status == 204,
        "PATCH to the old URL: {} {}",
        r.status,
        r.body
    );
    let r = patch("\"stale\"")?;
    ensure!(
        r.status == 412,
        "stale PATCH to the old URL: {} {}",
        r.status,
        r.body
    );
    let stop = Instant::now();
    let status = v2.delete().await?;
    let took = gone(&dev, &id2, stop, Duration::from_secs(2)).await?;
    ensure!(status == 200, "DELETE after the migration: {status}");
    println!(
        "aiortc viewer moved {node2} → {to}; its DELETE to {node2}: {status}, gone after {} ms",
        took.as_millis()
    );

    // The publisher: moved, then DELETE to the node it left.
    pub_node = migrate(&dev, &pub_id, pub_node).await?;
    let stop = Instant::now();
    let status = publisher.delete().await?;
    let took = gone(&dev, &pub_id, stop, Duration::from_secs(2)).await?;
    ensure!(
        status == 200,
        "publisher DELETE after the migration: {status}"
    );
    println!(
        "aiortc publisher moved to {pub_node}; its DELETE: {status}, gone after {} ms",
        took.as_millis()
    );

    // A publisher's DELETE where it is.
    let mut p2 = Aiortc::spawn(
        &ns,
        "publish",
        &format!("{}/whip/py2", dev.gateway),
        &access,
    )?;
    let id = p2.session().await?;
    connected(&dev, "py2", "publish").await?;
    let stop = Instant::now();
    let status = p2.delete().await?;
    gone(&dev, &id, stop, Duration::from_secs(2)).await?;
    ensure!(status == 200, "DELETE: {status}");
    Ok(())
}
