//! `ferry dev` end to end: the scheduler on the gateway port with node-a and
//! node-b reporting to it and the edge in front of them; the demo page,
//! driven in headless Chromium like a user would, publishes the fake camera
//! through the browser SDK (the scheduler's 307 to the placed node) and plays
//! it back from the same node — cross-origin, so CORS on the scheduler and the
//! nodes is exercised. Then it moves the viewer with the cluster panel's
//! "move to" button: the session lands on the other node, the SDK's
//! `migrated` event puts a marker on the live plot, and the plot comes back as
//! a PNG (`target/demo-plot.png`). Once with the edge (`edge` mode: nothing
//! for the client to do), once with `--no-edge` (`ice-restart` mode: the SDK
//! restarts ICE towards the target, `target/demo-plot-ice-restart.png`).
//! With the edge, the room panel too: the page joins a room, a participant of the test's own
//! (a raw WebSocket, placed by the scheduler) joins, mutes and chats, the page shows it and its
//! own mute, hand and chat reach the test.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use ferry_tests::cluster::{start_dev, start_dev_with, wait_registered, wait_session_on};
use ferry_tests::etcd::Etcd;
use ferry_tests::{Browser, Collector, http, num};
use serde_json::Value;

/// One scenario at a time: each runs a cluster and a Chromium, and two at once on two cores
/// would measure the machine.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_page_publishes_plays_and_moves_the_viewer_through_the_edge() -> Result<()> {
    let _area = ferry_tests::area(module_path!());
    let _serial = SERIAL.lock().await;
    run(true, "demo-plot.png", None).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_page_moves_the_viewer_with_an_ice_restart_without_the_edge() -> Result<()> {
    let _area = ferry_tests::area(module_path!());
    let _serial = SERIAL.lock().await;
    run(false, "demo-plot-ice-restart.png", None).await
}

/// The same with the scheduler's state in a real etcd (`--store etcd`): placement, the move
/// and the routing table go through the elected leader and its fenced writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_page_publishes_plays_and_moves_with_the_scheduler_on_etcd() -> Result<()> {
    let _area = ferry_tests::area(module_path!());
    let _serial = SERIAL.lock().await;
    let etcd = Etcd::start("dev-demo")?;
    run(true, "demo-plot-etcd.png", Some(&etcd)).await
}

/// `ferry dev` (with its edge or not), the demo page publishing and playing, then the viewer
/// moved from the cluster panel (`edge` mode with the edge, else `ice-restart`); the plot is
/// saved as `png` in the target directory. With `etcd`, the scheduler keeps its state there.
async fn run(edge: bool, png_name: &str, etcd: Option<&Etcd>) -> Result<()> {
    let started = Instant::now();
    let dev = match etcd {
        Some(e) => start_dev_with(edge, &["--store", "etcd", "--etcd-endpoints", &e.url])?,
        None => start_dev(edge)?,
    };
    let gateway = dev.gateway.clone();
    wait_registered(&gateway, 2).await?;
    if etcd.is_some() {
        let r = http(&format!("{gateway}/readyz"), "GET", &[], b"")?;
        ensure!(
            r.status == 200 && r.body.contains("leader"),
            "the only replica leads: {} {}",
            r.status,
            r.body
        );
    }
    // The scheduler serves the page at `/` with the API token in place of its slot (the
    // cluster panel's moves and drains need it). An older page means an older binary.
    let r = http(&format!("{gateway}/"), "GET", &[], b"")?;
    ensure!(
        r.status == 200 && r.body.contains("<title>Ferry dev</title>"),
        "demo page served: {}",
        r.status
    );
    ensure!(
        r.body.contains(&format!(
            "<meta name=\"ferry-token\" content=\"{}\">",
            dev.token
        )) && !r.body.contains("<!--ferry-dev-token-->"),
        "the page at / carries the API token (is {} built from this tree?)",
        ferry_tests::ferry_bin()?.display()
    );
    // WHIP/WHEP need a token; the API token is one for every stream, and the redirect carries
    // a token on to the node (a browser drops Authorization on a cross-origin redirect) …
    let r = http(
        &format!("{gateway}/whip/x"),
        "POST",
        &[("Content-Type", "application/sdp")],
        b"v=0",
    )?;
    ensure!(
        r.status == 401 && r.header("www-authenticate").is_some(),
        "gateway refuses WHIP without a token: {}",
        r.status
    );
    let bearer = format!("Bearer {}", dev.token);
    let r = http(
        &format!("{gateway}/whip/x"),
        "POST",
        &[
            ("Content-Type", "application/sdp"),
            ("Authorization", &bearer),
        ],
        b"v=0",
    )?;
    ensure!(r.status == 307, "gateway redirects WHIP: {}", r.status);
    // … not the API token itself (URLs end up in logs): a token for this stream only.
    let location = r.header("location").context("307 without Location")?;
    ensure!(
        location.contains("/whip/x?access_token=") && !location.contains(&dev.token),
        "the redirect carries a token of its own: {location}"
    );

    let collector = Collector::start()?;
    let page = format!(
        "{}&server={gateway}&run=1&token={}",
        collector.demo_url("demo"),
        dev.token
    );
    let _browser = Browser::open(&page)?;
    let reports = collector
        .wait_until(Duration::from_secs(45), |r| {
            r.get("demo")
                .is_some_and(|d| num(d, "/video/frames") > 60.0 || has_errors(d))
        })
        .await?;
    let d = &reports["demo"];
    eprintln!("demo report: {}", brief(d));
    ensure!(!has_errors(d), "page errors: {}", d["errors"]);
    ensure!(num(d, "/video/width") > 0.0, "the Play panel shows video");
    ensure!(
        d["shown"]["freezeCount"] == "0",
        "no freezes shown: {}",
        d["shown"]
    );
    let viewer = d["viewer"]["id"]
        .as_str()
        .context("the page reports its viewer session")?
        .to_owned();
    let publisher = d["publisher"]["id"]
        .as_str()
        .context("the page reports its publisher session")?
        .to_owned();
    let playing_at = started.elapsed();

    // The scheduler lists both sessions (reported by heartbeat) on one node.
    let source = {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let sessions = sessions(&gateway)?;
            let node = |id: &str| {
                sessions
                    .iter()
                    .find(|s| s["id"] == id)
                    .and_then(|s| s["node"].as_str())
                    .map(str::to_owned)
            };
            if let (Some(p), Some(v)) = (node(&publisher), node(&viewer))
                && p == v
            {
                break v;
            }
            ensure!(
                Instant::now() < deadline,
                "publisher {publisher} and viewer {viewer} on one node: {sessions:?}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    };
    let target = if source == "node-a" {
        "node-b"
    } else {
        "node-a"
    };
    let mode = if edge { "edge" } else { "ice-restart" };

    // The cluster panel lists the viewer with a "move to" button for the other node and picks
    // the mode by itself: `edge` when the nodes share the edge's address.
    let reports = collector
        .wait_until(Duration::from_secs(10), |r| {
            r.get("demo").is_some_and(|d| {
                has_errors(d)
                    || row(d, &viewer).is_some_and(|s| {
                        s["node"] == source.as_str() && s["targets"] == serde_json::json!([target])
                    })
            })
        })
        .await?;
    let d = &reports["demo"];
    ensure!(!has_errors(d), "page errors: {}", d["errors"]);
    let shown = row(d, &viewer).context("the viewer's row")?;
    ensure!(
        shown["modes"] == serde_json::json!(["edge", "ice-restart", "reconnect"]),
        "modes offered: {}",
        shown["modes"]
    );
    ensure!(
        shown["mode"] == mode,
        "the page picks {mode} for this cluster: {}",
        shown["mode"]
    );

    // Some playback on the plot before the move, and (below) some after it.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let clicked_at = Instant::now();
    collector.command("demo", &format!("move-viewer-{mode}"));
    wait_session_on(&gateway, &viewer, target).await?;
    let moved_in = clicked_at.elapsed();
    let reports = collector
        .wait_until(Duration::from_secs(15), |r| {
            r.get("demo").is_some_and(|d| {
                has_errors(d)
                    || (!markers(d).is_empty()
                        && d["moves"]
                            .as_array()
                            .and_then(|m| m.last())
                            .is_some_and(|m| is_final(&m["state"])))
            })
        })
        .await?;
    let marked_in = clicked_at.elapsed();
    let d = &reports["demo"];
    ensure!(!has_errors(d), "page errors: {}", d["errors"]);
    eprintln!("clicked: {}", d["clicked"]);
    ensure!(
        d["clicked"]["target"] == target && d["clicked"]["mode"] == mode,
        "clicked {}",
        d["clicked"]
    );
    let moves = d["moves"].as_array().context("moves")?;
    ensure!(moves.len() == 1, "one move: {}", d["moves"]);
    let m = &moves[0];
    eprintln!("move: {m}");
    ensure!(
        m["session"] == viewer.as_str()
            && m["target"] == target
            && m["mode"] == mode
            && m["state"] == "committed",
        "the move is shown committed: {m}"
    );
    let marker = markers(d).first().cloned().context("a marker")?;
    eprintln!("marker: {marker}");
    ensure!(
        marker["event"] == "migrated" && marker["mode"] == mode && marker["to"] == target,
        "a migrated marker of the move: {marker}"
    );
    let blackout = marker["blackoutMs"]
        .as_f64()
        .with_context(|| format!("the marker's blackout is a number: {marker}"))?;
    ensure!(
        blackout.is_finite() && blackout >= 0.0,
        "blackout {blackout}"
    );
    ensure!(
        d["viewer"]["node"] == target,
        "the SDK's viewer session is on {target}: {}",
        d["viewer"]
    );

    tokio::time::sleep(Duration::from_secs(5)).await;
    collector.command("demo", "snapshot");
    let reports = collector
        .wait_until(Duration::from_secs(10), |r| {
            r.get("demo")
                .is_some_and(|d| has_errors(d) || d["plot"]["png"].is_string())
        })
        .await?;
    let d = &reports["demo"];
    ensure!(!has_errors(d), "page errors: {}", d["errors"]);
    let url = d["plot"]["png"].as_str().context("the plot")?;
    let png = base64_decode(
        url.strip_prefix("data:image/png;base64,")
            .with_context(|| format!("a PNG data URL: {:.60}", url))?,
    )?;
    let path = target_dir()?.join(png_name);
    std::fs::write(&path, &png).with_context(|| format!("writing {}", path.display()))?;
    let (width, height) = png_size(&png)?;
    eprintln!(
        "plot: {} ({width}x{height}, {} bytes)",
        path.display(),
        png.len()
    );
    ensure!(
        width >= 900 && height >= 300,
        "the plot is {width}x{height}"
    );
    ensure!(
        png.len() > 5 * 1024,
        "the plot has content: {} bytes",
        png.len()
    );
    let markers_now = markers(d).len();
    ensure!(markers_now == 1, "one marker: {}", d["markers"]);

    // "record stream" records the page's stream through the scheduler: its row shows where.
    collector.command("demo", "record");
    let reports = collector
        .wait_until(Duration::from_secs(10), |r| {
            r.get("demo").is_some_and(|d| {
                has_errors(d)
                    || d["recordings"].as_array().is_some_and(|l| {
                        l.iter()
                            .any(|x| x["state"] == "recording" && x["node"] == source.as_str())
                    })
            })
        })
        .await?;
    let d = &reports["demo"];
    ensure!(!has_errors(d), "page errors: {}", d["errors"]);
    eprintln!("recordings shown: {}", d["recordings"]);

    // "transcode 360p" transcodes it: its row shows the rung running, keeping up.
    collector.command("demo", "transcode");
    let reports = collector
        .wait_until(Duration::from_secs(20), |r| {
            r.get("demo").is_some_and(|d| {
                has_errors(d)
                    || d["transcodes"].as_array().is_some_and(|l| {
                        l.iter().any(|x| {
                            x["state"] == "running"
                                && x["rungs"].as_str().is_some_and(|s| s.ends_with("~360p"))
                                && x["rtf"]
                                    .as_str()
                                    .and_then(|f| f.parse::<f64>().ok())
                                    .is_some_and(|f| f > 0.5)
                        })
                    })
            })
        })
        .await?;
    let d = &reports["demo"];
    ensure!(!has_errors(d), "page errors: {}", d["errors"]);
    eprintln!("transcodes shown: {}", d["transcodes"]);
    eprintln!(
        "timings: playing after {playing_at:?}; move clicked → session on {target} in \
         {moved_in:?}, → marker in {marked_in:?}; {mode} blackout {blackout} ms \
         (first frame {} ms; the node measured {} ms)",
        marker["firstFrameMs"], m["blackout_ms"]
    );
    if edge {
        room_panel(&collector, &gateway, &dev.token).await?;
    }
    if let Some(e) = etcd {
        // The state the leader wrote holds both sessions and the committed move.
        let state = e
            .get("/ferry-dev/default/state")?
            .context("no scheduler state in etcd")?;
        let state = String::from_utf8_lossy(&state);
        let moved = m["id"]
            .as_str()
            .with_context(|| format!("the move's id: {m}"))?;
        for id in [viewer.as_str(), publisher.as_str(), moved] {
            ensure!(state.contains(id), "{id} is not in etcd's state");
        }
    }
    // `ferry dev` has no TURN fleet: the nodes' WHIP/WHEP answers go without relays, quietly.
    let turn: Vec<String> = dev
        ._process
        .warnings()
        .into_iter()
        .filter(|l| l.contains("TURN"))
        .collect();
    ensure!(turn.is_empty(), "warnings about TURN: {turn:?}");
    Ok(())
}

fn has_errors(d: &Value) -> bool {
    d["errors"].as_array().is_some_and(|e| !e.is_empty())
}

fn markers(d: &Value) -> Vec<Value> {
    d["markers"].as_array().cloned().unwrap_or_default()
}

fn is_final(state: &Value) -> bool {
    matches!(
        state.as_str(),
        Some("committed" | "rolled_back" | "failed" | "refused")
    )
}

/// The cluster panel's row of session `id`.
fn row<'a>(d: &'a Value, id: &str) -> Option<&'a Value> {
    d["sessions"].as_array()?.iter().find(|s| s["id"] == id)
}

/// `GET /v1/sessions`.
fn sessions(gateway: &str) -> Result<Vec<Value>> {
    let r = http(&format!("{gateway}/v1/sessions"), "GET", &[], b"")?;
    ensure!(r.status == 200, "GET /v1/sessions: {} {}", r.status, r.body);
    Ok(serde_json::from_str(&r.body)?)
}

/// A report without its bulky parts.
fn brief(d: &Value) -> Value {
    let mut d = d.clone();
    if let Some(o) = d.as_object_mut() {
        o.remove("log");
        o.remove("plot");
    }
    d
}

/// The target directory: `$CARGO_TARGET_DIR`, else the one this test binary
/// was built in (`target/<profile>/deps/<test>`).
fn target_dir() -> Result<PathBuf> {
    if let Some(dir) = std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from)
        && dir.is_absolute()
    {
        return Ok(dir);
    }
    let exe = std::env::current_exe().context("current_exe")?;
    exe.ancestors()
        .nth(3)
        .map(PathBuf::from)
        .context("locating the target directory")
}

/// Width and height from a PNG's signature and IHDR chunk.
fn png_size(png: &[u8]) -> Result<(u32, u32)> {
    const SIGNATURE: &[u8] = b"\x89PNG\r\n\x1a\n";
    ensure!(
        png.starts_with(SIGNATURE),
        "not a PNG: {:02x?}",
        &png[..png.len().min(8)]
    );
    let ihdr = png.get(8..24).context("a PNG without IHDR")?;
    ensure!(&ihdr[4..8] == b"IHDR", "the first chunk is not IHDR");
    let be = |b: &[u8]| u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
    Ok((be(&ihdr[8..12]), be(&ihdr[12..16])))
}

/// Standard base64 (padding optional).
fn base64_decode(s: &str) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(s.len() / 4 * 3);
    let (mut acc, mut bits) = (0u32, 0u32);
    for c in s.bytes().take_while(|&c| c != b'=') {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => bail!("not base64: {:?}", char::from(c)),
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push(u8::try_from((acc >> bits) & 0xff)?);
            acc &= (1 << bits) - 1;
        }
    }
    Ok(out)
}

#[test]
fn base64_decodes_what_the_browser_encodes() {
    let _area = ferry_tests::area(module_path!());
    assert_eq!(base64_decode("iVBORw0KGgo=").unwrap(), b"\x89PNG\r\n\x1a\n");
    assert_eq!(base64_decode("TWFu").unwrap(), b"Man");
    assert_eq!(base64_decode("TWE=").unwrap(), b"Ma");
    assert!(base64_decode("TW!=").is_err());
}

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// The next JSON frame of `ws` that `pred` accepts, within `timeout`.
async fn frame_where(
    ws: &mut Ws,
    timeout: Duration,
    pred: impl Fn(&Value) -> bool,
) -> Result<Value> {
    use futures_util::StreamExt;
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let m = tokio::time::timeout_at(deadline, ws.next())
            .await
            .context("no such room frame in time")?
            .context("the room socket closed")??;
        if let tokio_tungstenite::tungstenite::Message::Text(t) = m {
            let v: Value = serde_json::from_str(t.as_str())?;
            if pred(&v) {
                return Ok(v);
            }
        }
    }
}

/// Any event of an `events` frame that `pred` accepts.
fn has_event(f: &Value, pred: impl Fn(&Value) -> bool) -> bool {
    f["type"] == "events" && f["events"].as_array().is_some_and(|e| e.iter().any(&pred))
}

/// The room panel: the page joins `demo-room`; the test's participant (placed by the scheduler,
/// JSON frames) joins, mutes and chats; the page lists it as muted and shows its chat; the
/// page's Mute, Raise hand and chat reach the test's participant.
async fn room_panel(collector: &Collector, gateway: &str, token: &str) -> Result<()> {
    use futures_util::SinkExt;
    use tokio_tungstenite::tungstenite::Message;
    let page_rows = |d: &Value| {
        d["room"]["participants"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    };
    collector.command("demo", "room-join");
    let reports = collector
        .wait_until(Duration::from_secs(10), |r| {
            r.get("demo").is_some_and(|d| {
                has_errors(d)
                    || page_rows(d)
                        .iter()
                        .any(|p| p["me"] == true && p["name"] == "Page")
            })
        })
        .await?;
    let d = &reports["demo"];
    ensure!(!has_errors(d), "page errors: {}", d["errors"]);
    let page = page_rows(d)
        .iter()
        .find(|p| p["me"] == true)
        .and_then(|p| p["id"].as_str().map(str::to_owned))
        .context("the page's own row")?;
    eprintln!("room panel: {}", d["room"]["status"]);

    let body = serde_json::json!({"participant": "tester", "name": "Tester"}).to_string();
    let bearer = format!("Bearer {token}");
    let r = http(
        &format!("{gateway}/v1/rooms/demo-room/join"),
        "POST",
        &[
            ("Content-Type", "application/json"),
            ("Authorization", &bearer),
        ],
        body.as_bytes(),
    )?;
    ensure!(
        r.status == 200,
        "join through the gateway: {} {}",
        r.status,
        r.body
    );
    let answer: Value = serde_json::from_str(&r.body)?;
    let url = format!(
        "{}&access_token={token}&format=json",
        answer["ws"].as_str().context("ws")?
    );
    let (mut ws, _) = tokio_tungstenite::connect_async(url.as_str()).await?;
    frame_where(&mut ws, Duration::from_secs(5), |f| f["type"] == "welcome").await?;
    let started = Instant::now();
    for frame in [
        serde_json::json!({"type": "join", "key": "t-1", "name": "Tester"}),
        serde_json::json!({"type": "set", "key": "t-2", "register": "audio_muted", "value": true}),
        serde_json::json!({"type": "chat", "key": "t-3", "text": "hello from the test"}),
    ] {
        let key = frame["key"].clone();
        ws.send(Message::Text(frame.to_string().into())).await?;
        let r = frame_where(&mut ws, Duration::from_secs(5), |f| f["key"] == key).await?;
        ensure!(r["type"] == "receipt", "{frame}: {r}");
    }
    let reports = collector
        .wait_until(Duration::from_secs(10), |r| {
            r.get("demo").is_some_and(|d| {
                has_errors(d)
                    || (page_rows(d).iter().any(|p| {
                        p["id"] == "tester" && p["name"] == "Tester" && p["mic"] == "muted"
                    }) && d["room"]["chat"].as_array().is_some_and(|c| {
                        c.iter().any(|m| {
                            m.as_str()
                                .is_some_and(|m| m.ends_with("hello from the test"))
                        })
                    }))
            })
        })
        .await?;
    let d = &reports["demo"];
    ensure!(!has_errors(d), "page errors: {}", d["errors"]);
    eprintln!(
        "room panel shows the tester muted and its chat {:?} after its join; {}",
        started.elapsed(),
        d["room"]["status"]
    );

    let started = Instant::now();
    for (command, what) in [("room-mute", "audio_muted"), ("room-hand", "hand_raised")] {
        collector.command("demo", command);
        frame_where(&mut ws, Duration::from_secs(5), |f| {
            has_event(f, |e| {
                e["type"] == "register"
                    && e["participant"] == page.as_str()
                    && e["register"] == what
                    && e["value"] == true
            })
        })
        .await
        .with_context(|| format!("the page's {command}"))?;
    }
    collector.command("demo", "room-chat");
    frame_where(&mut ws, Duration::from_secs(5), |f| {
        has_event(f, |e| {
            e["type"] == "chat"
                && e["participant"] == page.as_str()
                && e["text"] == "hello from the page"
        })
    })
    .await
    .context("the page's chat")?;
    eprintln!(
        "the page's mute, hand and chat reached the tester within {:?}",
        started.elapsed()
    );
    let reports = collector
        .wait_until(Duration::from_secs(5), |r| {
            r.get("demo").is_some_and(|d| {
                has_errors(d)
                    || page_rows(d)
                        .iter()
                        .any(|p| p["me"] == true && p["mic"] == "muted" && p["hand"] == "raised")
            })
        })
        .await?;
    ensure!(
        !has_errors(&reports["demo"]),
        "page errors: {}",
        reports["demo"]["errors"]
    );
    Ok(())
}
