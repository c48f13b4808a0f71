//! End to end with headless Chromium: viewer caps (`setQuality`) and dynacast, through the
//! browser SDK on `ferry dev`.
//!
//! Page A publishes a 960×540 fake camera with the SDK in three simulcast encodings (rids q, h,
//! f: `scaleResolutionDownBy` 4, 2, 1) to node-a; viewers B and C play it there with the SDK.
//! B caps itself at 180 lines (`setQuality({maxHeight: 180})`): it plays the 240×135 layer while
//! C keeps 540. C caps itself too: no consumer can use f any more, the node says so on A's event
//! stream (`active`), and A's SDK stops encoding it (its `outbound-rtp` of rid f stops growing).
//! B lifts its cap (`setQuality({})`): f is encoded again and B climbs back to 540. Then B caps
//! its rate (`{maxBitrate: 300000}`): the node sends it what fits, a layer below the top (the
//! 480×270 layer at part of its frame rate, or 240×135) at most 300 kbit/s. Last, B is
//! moved to node-b in `reconnect` mode (a new session there): the SDK sends its caps to node-b,
//! which holds them and keeps B below the top layer.
//!
//! The Rust SDK's viewer too: `set_quality` caps it on node-a, and after a reconnect to node-b
//! node-b holds its caps.
//!
//! Then the demo page of `ferry dev` (simulcast on by default: 320×180 and 640×360): its Play
//! panel's "Bandwidth" select caps its viewer at 300 kbit/s, and the node's view it plots shows
//! the cap and a layer below the top within it; the plot is saved as `quality-demo-plot.png` in the target
//! directory.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use ferry_sdk::{FerryClient, PlayOptions, Quality};
use ferry_tests::cluster::{
    Dev, migration_end, open_sdk_page, open_sdk_publisher, start_dev, start_migration,
    wait_registered,
};
use ferry_tests::sdk::frames_over;
use ferry_tests::{Browser, Collector, Reports, http, num};
use serde_json::Value;

const STREAM: &str = "quality";
const SETUP: Duration = Duration::from_secs(60);
/// How soon a capped viewer must play a layer within its cap.
const CAPPED: Duration = Duration::from_secs(10);
/// How soon the top encoding must stop once nobody can use it: the node's 5 s hold, a rate
/// window, the event, the browser.
const DYNACAST_OFF: Duration = Duration::from_secs(10);
/// How soon a viewer whose cap is lifted must be back on the top layer.
const CLIMB: Duration = Duration::from_secs(15);
/// A viewer that dipped a layer on its own estimate climbs back within the allocator's
/// longest hold (8 s) and a probe.
const C_BACK: Duration = Duration::from_secs(12);

fn height(r: &Reports, id: &str) -> f64 {
    r.get(id)
        .map_or(0.0, |v| num(v, "/inbound/video/frameHeight"))
}

/// The height of A's top encoding (its encoder may scale it down when the machine is busy: the
/// top layer is what it sends, not what was asked).
fn top_height(r: &Reports) -> f64 {
    r.get("A")
        .map_or(0.0, |a| num(a, "/outboundLayers/f/frameHeight"))
}

/// A's `outbound-rtp` counter `key` of encoding `rid`.
fn layer(r: &Reports, rid: &str, key: &str) -> f64 {
    r.get("A")
        .map_or(0.0, |a| num(a, &format!("/outboundLayers/{rid}/{key}")))
}

fn show(r: &Reports, id: &str) -> String {
    r.get(id).map_or("no report".into(), |v| {
        format!(
            "{id}: state={} node={} inbound video={} outbound layers={} dynacast={} quality={} \
             calls={} errors={} sdk errors={}",
            v["state"],
            v["node"],
            v["inbound"]["video"],
            v["outboundLayers"],
            v["dynacast"],
            v["quality"],
            v["qualityCalls"],
            v["errors"],
            v["sdkErrors"]
        )
    })
}

fn show_all(r: &Reports) -> String {
    ["A", "B", "C"]
        .iter()
        .map(|id| show(r, id))
        .collect::<Vec<_>>()
        .join("\n  ")
}

/// The node's view of page `id`'s session (`GET {node}/v1/sessions/{id}`).
fn view(node: &str, r: &Reports, id: &str) -> Result<Value> {
    let session = r
        .get(id)
        .and_then(|v| v["session"].as_str())
        .with_context(|| format!("{id} has no session"))?;
    let resp = http(&format!("{node}/v1/sessions/{session}"), "GET", &[], b"")?;
    ensure!(
        resp.status == 200,
        "GET /v1/sessions/{session} on {node}: {} {}",
        resp.status,
        resp.body
    );
    Ok(serde_json::from_str(&resp.body)?)
}

/// Waits (up to `within`) until viewer `id` plays the top layer (above the caps' 180 lines);
/// else fails with `id`, `what`, every page's report and the node's view of `id`.
async fn on_top(
    collector: &Collector,
    dev: &Dev,
    id: &str,
    within: Duration,
    what: &str,
) -> Result<Reports> {
    collector
        .wait_until(within, |r| {
            let top = top_height(r);
            top > 180.0 && height(r, id) == top
        })
        .await
        .with_context(|| {
            let r = collector.reports();
            let node = view(&dev.node_a, &r, id).map(|v| v["adaptation"].to_string());
            format!("{id} {what}\n  {}\n  node: {node:?}", show_all(&r))
        })
}

/// Page errors, or errors the SDK reported (its `error` events).
fn errors(r: &Reports) -> Vec<String> {
    let mut out = Vec::new();
    for (id, v) in r {
        for key in ["errors", "sdkErrors"] {
            for e in v[key].as_array().into_iter().flatten() {
                out.push(format!("{id} {key}: {e}"));
            }
        }
    }
    out
}

/// Whether the last `quality:` command of page `id` was taken.
fn quality_taken(r: &Reports, id: &str, n: usize) -> bool {
    r.get(id).is_some_and(|v| {
        v["qualityCalls"]
            .as_array()
            .is_some_and(|c| c.len() >= n && c.last().is_some_and(|c| c["ok"] == true))
    })
}

fn viewer(collector: &Collector, dev: &Dev, id: &str) -> Result<Browser> {
    let endpoint = format!("{}/whep/{STREAM}", dev.node_a);
    open_sdk_page(
        collector,
        dev,
        "sdk-play.html",
        STREAM,
        id,
        &[("endpoint", &endpoint)],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn caps_pick_a_viewers_layer_and_dynacast_stops_the_unused_encoding() -> Result<()> {
    let _area = ferry_tests::area(module_path!());
    let dev = start_dev(false)?;
    wait_registered(&dev.gateway, 2).await?;
    let collector = Collector::start()?;
    let whip = format!("{}/whip/{STREAM}", dev.node_a);
    let _a = open_sdk_publisher(
        &collector,
        &dev,
        STREAM,
        "A",
        &[
            ("endpoint", &whip),
            ("simulcast", "1"),
            ("width", "960"),
            ("height", "540"),
        ],
        SETUP,
    )
    .await?;
    let _b = viewer(&collector, &dev, "B")?;
    let _c = viewer(&collector, &dev, "C")?;

    // Both viewers on the top layer.
    let r = collector
        .wait_until(SETUP, |r| {
            let top = top_height(r);
            top > 0.0 && height(r, "B") == top && height(r, "C") == top
        })
        .await
        .with_context(|| {
            format!(
                "not both on the top layer\n  {}",
                show_all(&collector.reports())
            )
        })?;
    let top = top_height(&r);
    eprintln!("both viewers on the top layer: {top} lines");
    ensure!(errors(&r).is_empty(), "{:?}", errors(&r));
    ensure!(
        r["A"]["outboundLayers"]
            .as_object()
            .is_some_and(|l| ["q", "h", "f"].iter().all(|rid| l.contains_key(*rid))),
        "A sends three encodings: {}",
        r["A"]["outboundLayers"]
    );

    // B caps its height: a layer within it, C keeps the top.
    let capped = Instant::now();
    collector.command("B", r#"quality:{"maxHeight":180}"#);
    let r = collector
        .wait_until(CAPPED, |r| {
            let b = height(r, "B");
            quality_taken(r, "B", 1) && b > 0.0 && b <= 180.0
        })
        .await
        .with_context(|| {
            let r = collector.reports();
            let node = view(&dev.node_a, &r, "B").map(|v| v["adaptation"].to_string());
            format!("B not within its cap\n  {}\n  node: {node:?}", show_all(&r))
        })?;
    let b_capped = capped.elapsed();
    let b_view = view(&dev.node_a, &r, "B")?;
    eprintln!(
        "B capped at 180: plays {} lines after {b_capped:?}, C {}; node: preferences {} layers {}",
        height(&r, "B"),
        height(&r, "C"),
        b_view["adaptation"]["preferences"],
        b_view["adaptation"]["tracks"]
    );
    ensure!(
        b_view["adaptation"]["preferences"]["maxHeight"] == 180,
        "the node holds B's cap: {}",
        b_view["adaptation"]
    );
    // B's cap is B's alone: C plays the top layer. C's own estimate may dip on a loaded
    // machine (a delay spike reads as overuse and takes it a layer down for the allocator's
    // hold); then it climbs back, which the wait allows: a cap that leaked to C never would.
    if height(&r, "C") != top_height(&r) {
        eprintln!(
            "C below the top layer right after B's cap: {} of {}; node: {}",
            height(&r, "C"),
            top_height(&r),
            view(&dev.node_a, &r, "C")
                .map_or_else(|e| e.to_string(), |v| v["adaptation"].to_string())
        );
    }
    let c_wait = Instant::now();
    let r = on_top(&collector, &dev, "C", C_BACK, "does not keep the top layer").await?;
    eprintln!(
        "C on the top layer {:?} after B's cap was taken",
        c_wait.elapsed()
    );
    ensure!(
        view(&dev.node_a, &r, "C")?["adaptation"]["preferences"]
            .as_object()
            .is_some_and(|p| p.is_empty()),
        "C holds no cap of its own"
    );
    ensure!(
        r["A"]["outboundLayers"]["f"]["active"] != false,
        "C still uses f: {}",
        r["A"]["outboundLayers"]
    );

    // C caps itself too: nobody can use f; after the node's hold A stops encoding it.
    let capped = Instant::now();
    collector.command("C", r#"quality:{"maxHeight":180}"#);
    let r = collector
        .wait_until(CAPPED, |r| {
            let c = height(r, "C");
            quality_taken(r, "C", 1) && c > 0.0 && c <= 180.0
        })
        .await
        .with_context(|| format!("C not within its cap\n  {}", show_all(&collector.reports())))?;
    eprintln!(
        "C capped at 180: plays {} lines after {:?}",
        height(&r, "C"),
        capped.elapsed()
    );
    let f_off = |r: &Reports| {
        r["A"]["dynacast"].as_array().is_some_and(|d| {
            d.last().is_some_and(|e| {
                e["encodings"]
                    .as_array()
                    .is_some_and(|l| l.iter().any(|x| x["rid"] == "f" && x["active"] == false))
            })
        }) && r["A"]["outboundLayers"]["f"]["active"] == false
    };
    let r = collector
        .wait_until(DYNACAST_OFF, |r| f_off(r))
        .await
        .with_context(|| format!("f still on\n  {}", show_all(&collector.reports())))?;
    let off_after = capped.elapsed();
    let (bytes, frames) = (layer(&r, "f", "bytesSent"), layer(&r, "f", "framesEncoded"));
    let q_frames = layer(&r, "q", "framesEncoded");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let r2 = collector.reports();
    eprintln!(
        "dynacast: f off {off_after:?} after C's cap; over 3 s f sent {} bytes, encoded {} \
         frames (q {} frames); events: {}",
        layer(&r2, "f", "bytesSent") - bytes,
        layer(&r2, "f", "framesEncoded") - frames,
        layer(&r2, "q", "framesEncoded") - q_frames,
        r2["A"]["dynacast"]
    );
    ensure!(
        layer(&r2, "f", "framesEncoded") == frames && layer(&r2, "f", "bytesSent") == bytes,
        "A still encodes f: {}",
        r2["A"]["outboundLayers"]["f"]
    );
    ensure!(
        layer(&r2, "q", "framesEncoded") > q_frames + 30.0,
        "A goes on encoding q: {}",
        r2["A"]["outboundLayers"]["q"]
    );
    ensure!(
        height(&r2, "B") > 0.0 && height(&r2, "B") <= 180.0 && height(&r2, "C") <= 180.0,
        "the viewers stay within their caps"
    );

    // B lifts its cap: f comes back at once and B climbs to the top layer.
    let lifted = Instant::now();
    collector.command("B", "quality:{}");
    let r = collector
        .wait_until(CLIMB, |r| layer(r, "f", "framesEncoded") > frames + 10.0)
        .await
        .with_context(|| format!("f not encoded again\n  {}", show_all(&collector.reports())))?;
    let f_back = lifted.elapsed();
    ensure!(
        quality_taken(&r, "B", 2),
        "B's {{}} was taken: {}",
        show(&r, "B")
    );
    let r = on_top(&collector, &dev, "B", CLIMB, "did not climb back").await?;
    let climbed = lifted.elapsed();
    eprintln!(
        "B's cap lifted: f encoded again after {f_back:?}, B on {} lines after {climbed:?}; C {}",
        height(&r, "B"),
        height(&r, "C")
    );
    ensure!(height(&r, "C") <= 180.0, "C stays within its cap");

    // B caps its rate instead: from the top layer to the one that fits.
    let capped = Instant::now();
    collector.command("B", r#"quality:{"maxBitrate":300000}"#);
    let r = collector
        .wait_until(CAPPED, |r| {
            let b = height(r, "B");
            quality_taken(r, "B", 3) && b > 0.0 && b < top
        })
        .await
        .with_context(|| {
            let r = collector.reports();
            let node = view(&dev.node_a, &r, "B").map(|v| v["adaptation"].to_string());
            format!(
                "B not within 300 kbit/s\n  {}\n  node: {node:?}",
                show_all(&r)
            )
        })?;
    let b_view = view(&dev.node_a, &r, "B")?;
    eprintln!(
        "B capped at 300 kbit/s: plays {} lines after {:?}, C {}; node: allocated {} of an \
         estimate of {}",
        height(&r, "B"),
        capped.elapsed(),
        height(&r, "C"),
        b_view["adaptation"]["allocated_bps"],
        b_view["adaptation"]["estimate_bps"]
    );
    ensure!(
        b_view["adaptation"]["allocated_bps"]
            .as_u64()
            .is_some_and(|a| a <= 300_000),
        "the node keeps B within its rate: {}",
        b_view["adaptation"]
    );

    // Moved to node-b by a reconnect (a new session there): B's SDK tells node-b its caps.
    let session = r["B"]["session"]
        .as_str()
        .context("B's session")?
        .to_owned();
    let frames_before = num(&r["B"], "/totals/framesDecoded");
    let id = start_migration(&dev.gateway, &dev.token, &session, "node-b", "reconnect")?;
    let m = migration_end(&dev.gateway, &id).await?;
    ensure!(m["state"] == "committed", "the move: {m}");
    let r = collector
        .wait_until(SETUP, |r| {
            r.get("B").is_some_and(|b| {
                b["node"] == "node-b"
                    && b["migrated"].as_array().is_some_and(|m| !m.is_empty())
                    && num(b, "/totals/framesDecoded") > frames_before + 60.0
            })
        })
        .await
        .with_context(|| {
            format!(
                "B not playing on node-b\n  {}",
                show_all(&collector.reports())
            )
        })?;
    let b_view = view(&dev.node_b, &r, "B")?;
    eprintln!(
        "B moved to node-b ({}): plays {} lines; node-b: preferences {} layers {}",
        r["B"]["migrated"],
        height(&r, "B"),
        b_view["adaptation"]["preferences"],
        b_view["adaptation"]["tracks"]
    );
    ensure!(
        b_view["adaptation"]["preferences"]["maxBitrate"] == 300_000,
        "node-b holds B's cap: {}",
        b_view["adaptation"]
    );
    ensure!(
        height(&r, "B") > 0.0 && height(&r, "B") < top,
        "B within its cap on node-b: {}",
        show(&r, "B")
    );
    ensure!(errors(&r).is_empty(), "{:?}", errors(&r));
    rust_viewer(&dev).await?;
    drop((_a, _b, _c));
    demo_page(&dev).await
}

/// The Rust SDK's viewer of the stream on node-a: `set_quality` caps it there, and after a
/// reconnect to node-b (a new session) its SDK has told node-b the caps too.
async fn rust_viewer(dev: &Dev) -> Result<()> {
    let client = FerryClient::new(&dev.gateway).with_token(&dev.token);
    let opts = PlayOptions {
        endpoint: Some(format!("{}/whep/{STREAM}", dev.node_a)),
        ..PlayOptions::default()
    };
    let d = client.play(STREAM, opts).await.context("the Rust viewer")?;
    frames_over(&d, 30, SETUP).await?;
    let caps = Quality {
        max_height: Some(180),
        ..Quality::default()
    };
    d.set_quality(caps).await.context("set_quality")?;
    ensure!(d.quality() == Some(caps), "{:?}", d.quality());
    let session = d.id().context("the Rust viewer's session")?;
    let on_a = node_view_until(&dev.node_a, &session, |a| {
        a["preferences"]["maxHeight"] == 180
            && playing_height(a).is_some_and(|h| h > 0.0 && h <= 180.0)
    })
    .await?;
    eprintln!(
        "Rust viewer capped at 180 on node-a: plays a layer of {:?} lines",
        playing_height(&on_a)
    );
    let id = start_migration(&dev.gateway, &dev.token, &session, "node-b", "reconnect")?;
    let m = migration_end(&dev.gateway, &id).await?;
    ensure!(m["state"] == "committed", "the move: {m}");
    let deadline = Instant::now() + SETUP;
    while d.node().as_deref() != Some("node-b") {
        ensure!(
            Instant::now() < deadline,
            "the Rust viewer is on {:?}",
            d.node()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let frames = d.stats().await?.frames;
    frames_over(&d, frames + 30, SETUP).await?;
    let on_b = node_view_until(&dev.node_b, &session, |a| {
        a["preferences"]["maxHeight"] == 180
            && playing_height(a).is_some_and(|h| h > 0.0 && h <= 180.0)
    })
    .await?;
    eprintln!(
        "Rust viewer moved to node-b: node-b holds its caps {}, plays a layer of {:?} lines",
        on_b["preferences"],
        playing_height(&on_b)
    );
    ensure!(
        d.set_quality(Quality {
            max_height: Some(0),
            ..Quality::default()
        })
        .await
        .is_err(),
        "a cap of 0 lines is refused"
    );
    d.close().await;
    Ok(())
}

/// The height of the video layer a viewer plays, as its node's `adaptation` says.
fn playing_height(a: &Value) -> Option<f64> {
    let video = a["tracks"]
        .as_array()?
        .iter()
        .find(|t| t["kind"] == "video")?;
    let i = usize::try_from(video["playing"].as_u64()?).ok()?;
    video["layers"][i]["height"].as_f64()
}

/// Polls `GET {node}/v1/sessions/{session}` until its `adaptation` satisfies `ok` (10 s).
async fn node_view_until(node: &str, session: &str, ok: impl Fn(&Value) -> bool) -> Result<Value> {
    let deadline = Instant::now() + CAPPED;
    loop {
        let r = http(&format!("{node}/v1/sessions/{session}"), "GET", &[], b"")?;
        let v: Value = serde_json::from_str(&r.body).unwrap_or(Value::Null);
        if ok(&v["adaptation"]) {
            return Ok(v["adaptation"].clone());
        }
        ensure!(
            Instant::now() < deadline,
            "{session} on {node}: {} {}",
            r.status,
            r.body
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The tallest layer the demo's viewer could play, as the node's view lists them.
fn demo_top(d: &Value) -> f64 {
    d["adaptation"]["layerHeights"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_f64)
        .fold(0.0, f64::max)
}

/// The demo page: publishes (simulcast) and plays; its Bandwidth select caps the viewer; the
/// node's view plotted shows the cap and a rung within it.
async fn demo_page(dev: &Dev) -> Result<()> {
    let collector = Collector::start()?;
    let page = format!(
        "{}&server={}&run=1&token={}",
        collector.demo_url("demo"),
        dev.gateway,
        dev.token
    );
    let _browser = Browser::open(&page)?;
    let demo_errors = |d: &Value| d["errors"].as_array().is_some_and(|e| !e.is_empty());
    let r = collector
        .wait_until(SETUP, |r| {
            r.get("demo").is_some_and(|d| {
                demo_errors(d)
                    || (num(d, "/video/frames") > 60.0 && num(d, "/adaptation/points/height") > 2.0)
            })
        })
        .await?;
    let d = &r["demo"];
    ensure!(!demo_errors(d), "page errors: {}", d["errors"]);
    eprintln!("demo: the node's view before the cap: {}", d["adaptation"]);
    let capped = Instant::now();
    collector.command("demo", "quality-bitrate-300000");
    let r = collector
        .wait_until(CAPPED + Duration::from_secs(5), |r| {
            r.get("demo").is_some_and(|d| {
                demo_errors(d)
                    || (d["quality"]["last"]["ok"] == true
                        && d["adaptation"]["preferences"]["maxBitrate"] == 300_000
                        && num(d, "/adaptation/allocatedBps") <= 300_000.0
                        && num(d, "/adaptation/height") > 0.0
                        // A layer below the top, or the top layer at part of its frame
                        // rate (a temporal layer below its top).
                        && (num(d, "/adaptation/height") < demo_top(d)
                            || !d["adaptation"]["temporalTarget"].is_null()))
            })
        })
        .await
        .with_context(|| {
            let d = collector.report("demo").unwrap_or_default();
            format!(
                "the demo's viewer not within 300 kbit/s: {} {}",
                d["adaptation"], d["quality"]
            )
        })?;
    let d = &r["demo"];
    ensure!(!demo_errors(d), "page errors: {}", d["errors"]);
    eprintln!(
        "demo: capped at 300 kbit/s after {:?}: {}",
        capped.elapsed(),
        d["adaptation"]
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    collector.command("demo", "snapshot-adapt");
    let r = collector
        .wait_until(Duration::from_secs(10), |r| {
            r.get("demo")
                .is_some_and(|d| demo_errors(d) || d["adaptPlot"]["png"].is_string())
        })
        .await?;
    let d = &r["demo"];
    ensure!(!demo_errors(d), "page errors: {}", d["errors"]);
    let url = d["adaptPlot"]["png"].as_str().context("the plot")?;
    let png = base64::Engine::decode(
        &base64::engine::general_purpose::STANDARD,
        url.strip_prefix("data:image/png;base64,")
            .context("a PNG data URL")?,
    )?;
    ensure!(
        png.len() > 5 * 1024,
        "the plot has content: {} bytes",
        png.len()
    );
    let path = target_dir()?.join("quality-demo-plot.png");
    std::fs::write(&path, &png).with_context(|| format!("writing {}", path.display()))?;
    eprintln!(
        "demo: plot of the node's view: {} ({} bytes)",
        path.display(),
        png.len()
    );

    // Automatic again: the node holds no cap.
    collector.command("demo", "quality-auto");
    let r = collector
        .wait_until(CAPPED, |r| {
            r.get("demo").is_some_and(|d| {
                demo_errors(d)
                    || (d["quality"]["last"]["ok"] == true
                        && d["adaptation"]["preferences"]
                            .as_object()
                            .is_some_and(|p| p.is_empty()))
            })
        })
        .await?;
    ensure!(
        !demo_errors(&r["demo"]),
        "page errors: {}",
        r["demo"]["errors"]
    );
    eprintln!("demo: automatic again: {}", r["demo"]["adaptation"]);
    Ok(())
}

/// The target directory: `$CARGO_TARGET_DIR`, else the one this test binary was built in
/// (`target/<profile>/deps/<test>`).
fn target_dir() -> Result<std::path::PathBuf> {
    if let Some(dir) = std::env::var_os("CARGO_TARGET_DIR").map(std::path::PathBuf::from)
        && dir.is_absolute()
    {
        return Ok(dir);
    }
    let exe = std::env::current_exe().context("current_exe")?;
    exe.ancestors()
        .nth(3)
        .map(std::path::PathBuf::from)
        .context("locating the target directory")
}
