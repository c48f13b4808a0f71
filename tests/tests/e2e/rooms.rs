//! Rooms (issue 12) on `ferry dev`, with WebSocket clients speaking the protocol of
//! docs/rooms.md: participants placed by the scheduler on both nodes see each other's join,
//! mute and chat within 200 ms; a retried command changes nothing; bad frames, bad tokens and
//! unauthenticated replication get specific errors; both nodes' replicas hold the same digest;
//! a connection gone without `leave` leaves after the grace period.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use ferry_tests::cluster::{Dev, room_join as join_at, start_dev_registered};
use ferry_tests::http;
use futures_util::stream::SplitSink;
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream, connect_async};

type Sink = SplitSink<WebSocketStream<MaybeTlsStream<TcpStream>>, Message>;

/// One participant's connection: frames as they arrive (with when), and the sending half.
struct Peer {
    id: String,
    node: String,
    frames: Arc<Mutex<Vec<(Instant, Value)>>>,
    sink: Sink,
    reader: tokio::task::JoinHandle<()>,
    /// The connection's local TCP port (the partition test lets it through).
    port: u16,
    /// Protobuf binary frames (else JSON text frames).
    binary: bool,
}

impl Drop for Peer {
    /// Both halves go: the connection closes (without `leave`).
    fn drop(&mut self) {
        self.reader.abort();
    }
}

impl Peer {
    async fn connect(answer: &Value, token: &str) -> Result<Peer> {
        Self::connect_with(answer, token, "").await
    }

    /// [`Peer::connect`] with `extra` appended to the WebSocket's query (`&events=…`). JSON
    /// text frames, unless `extra` asks for `format=protobuf`: then binary frames both ways.
    async fn connect_with(answer: &Value, token: &str, extra: &str) -> Result<Peer> {
        let binary = extra.contains("format=protobuf");
        let json = if binary { "" } else { "&format=json" };
        let url = format!(
            "{}&access_token={token}{json}{extra}",
            answer["ws"].as_str().context("ws")?
        );
        let (ws, _) = connect_async(url.as_str())
            .await
            .context("room WebSocket")?;
        let port = match ws.get_ref() {
            MaybeTlsStream::Plain(s) => s.local_addr()?.port(),
            _ => 0,
        };
        let (sink, mut stream) = ws.split();
        let frames: Arc<Mutex<Vec<(Instant, Value)>>> = Arc::default();
        let log = frames.clone();
        let reader = tokio::spawn(async move {
            while let Some(Ok(m)) = stream.next().await {
                let v = match (&m, binary) {
                    (Message::Text(t), false) => serde_json::from_str::<Value>(t.as_str()).ok(),
                    (Message::Binary(b), true) => ferry_proto::room::decode_server(b).ok(),
                    // A frame in the encoding not asked for: recorded as such (tests fail).
                    (Message::Text(_) | Message::Binary(_), _) => {
                        Some(json!({"type": "wrong_encoding"}))
                    }
                    _ => None,
                };
                if let Some(v) = v {
                    log.lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push((Instant::now(), v));
                }
            }
        });
        let mut peer = Peer {
            id: answer["participant"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            node: answer["node"].as_str().unwrap_or_default().to_owned(),
            frames,
            sink,
            reader,
            port,
            binary,
        };
        peer.wait(Duration::from_secs(5), |f| f["type"] == "welcome")
            .await
            .context("welcome")?;
        Ok(peer)
    }

    /// The first frame (from the start) that `pred` accepts, waiting up to `timeout`.
    async fn wait(
        &mut self,
        timeout: Duration,
        pred: impl Fn(&Value) -> bool,
    ) -> Result<(Instant, Value)> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(f) = self
                .frames
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .iter()
                .find(|(_, f)| pred(f))
            {
                return Ok(f.clone());
            }
            if Instant::now() > deadline {
                let all: Vec<Value> = self.all();
                bail!("{}: no such frame within {timeout:?}; got {all:?}", self.id);
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    /// Every event of every `events` frame so far, with when it arrived.
    fn events(&self) -> Vec<(Instant, Value)> {
        let frames = self.frames.lock().unwrap_or_else(|e| e.into_inner());
        frames
            .iter()
            .filter(|(_, f)| f["type"] == "events")
            .flat_map(|(t, f)| {
                f["events"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
                    .into_iter()
                    .map(move |e| (*t, e))
            })
            .collect()
    }

    fn all(&self) -> Vec<Value> {
        let frames = self.frames.lock().unwrap_or_else(|e| e.into_inner());
        frames.iter().map(|(_, f)| f.clone()).collect()
    }

    /// Sends a frame; the receipt or error frame for its key, and when it was sent.
    async fn send(&mut self, frame: Value) -> Result<(Instant, Value)> {
        let key = frame["key"].clone();
        let seen = self.all().len();
        let sent = Instant::now();
        let message = if self.binary {
            Message::Binary(ferry_proto::room::encode_client(&frame)?.into())
        } else {
            Message::Text(frame.to_string().into())
        };
        self.sink.send(message).await?;
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let all = self.all();
            if let Some(r) = all[seen.min(all.len())..].iter().find(|f| {
                (f["type"] == "receipt" || f["type"] == "error" || f["type"] == "subscribed")
                    && f["key"] == key
            }) {
                return Ok((sent, r.clone()));
            }
            if Instant::now() > deadline {
                bail!("{}: no answer to {frame}", self.id);
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    /// When the event `pred` accepts arrived.
    async fn event(&mut self, timeout: Duration, pred: impl Fn(&Value) -> bool) -> Result<Instant> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some((t, _)) = self.events().into_iter().find(|(_, e)| pred(e)) {
                return Ok(t);
            }
            if Instant::now() > deadline {
                bail!(
                    "{}: no such event within {timeout:?}; got {:?}",
                    self.id,
                    self.events()
                );
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
}

/// An event: `who`'s microphone muted (`on`) or unmuted.
fn muted(who: &str, on: bool) -> impl Fn(&Value) -> bool + '_ {
    move |e| {
        e["type"] == "register"
            && e["participant"] == who
            && e["register"] == "audio_muted"
            && e["value"] == on
    }
}

/// Sends `command` to page `from`; once every page of `ids` logged an event `pred` accepts at
/// or after the command's receipt went out from `from`, the delays (ms, per page).
async fn delays(
    collector: &ferry_tests::Collector,
    ids: &[String],
    from: &str,
    command: &str,
    pred: &dyn Fn(&Value) -> bool,
) -> Result<Vec<f64>> {
    let measure = |reports: &ferry_tests::Reports| -> Option<Vec<f64>> {
        let sent = reports.get(from)?["sent"]
            .as_array()?
            .iter()
            .rev()
            .find(|s| s["what"] == command && s["receipt"].is_object())?["wall"]
            .as_f64()?;
        ids.iter()
            .map(|id| {
                let e = reports.get(id)?["roomEvents"]
                    .as_array()?
                    .iter()
                    .find(|e| pred(e) && e["wall"].as_f64().is_some_and(|w| w >= sent - 5.0))?;
                Some(e["wall"].as_f64()? - sent)
            })
            .collect()
    };
    collector.command(from, command);
    let r = collector
        .wait_until(Duration::from_secs(10), |r| measure(r).is_some())
        .await?;
    measure(&r).context("delays")
}

/// A WebSocket the node refuses (a browser cannot read a refused upgrade's status): its error
/// frame and close code.
async fn refusal(url: &str) -> Result<(Value, Option<u16>)> {
    let (mut ws, _) = connect_async(url).await.context("room WebSocket")?;
    let mut error = Value::Null;
    while let Some(m) = tokio::time::timeout(Duration::from_secs(5), ws.next())
        .await
        .context("no close")?
    {
        match m? {
            Message::Text(t) => error = serde_json::from_str(t.as_str())?,
            // The default format: protobuf binary frames.
            Message::Binary(b) => error = ferry_proto::room::decode_server(&b)?,
            Message::Close(c) => return Ok((error, c.map(|c| u16::from(c.code)))),
            _ => {}
        }
    }
    Ok((error, None))
}

fn join_answer(dev: &Dev, room: &str, participant: &str) -> Result<Value> {
    join_at(&dev.gateway, &dev.token, room, participant)
}

fn room_on(url: &str, room: &str) -> Result<Value> {
    let r = http(&format!("{url}/v1/rooms/{room}"), "GET", &[], b"")?;
    ensure!(r.status == 200, "{url}: {} {}", r.status, r.body);
    Ok(serde_json::from_str(&r.body)?)
}

/// `ferry rooms` (and `ferry rooms ROOM`) against the scheduler of `dev`: the room on both
/// nodes, its replicas agreeing, its three participants; bad and unknown rooms.
async fn operator_sees_the_room(dev: &Dev, room: &str) -> Result<()> {
    let ferry = |args: &[&str]| -> Result<(i32, String, String)> {
        let o = std::process::Command::new(ferry_tests::ferry_bin()?)
            .arg("rooms")
            .args(args)
            .args(["--scheduler", &dev.gateway, "--token", &dev.token])
            .output()
            .context("running ferry rooms")?;
        Ok((
            o.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        ))
    };
    // The participants as last told to clients: a change shows one merge window (50 ms) later.
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let (code, out, err) = ferry(&[])?;
        let row = out
            .lines()
            .find(|l| l.starts_with(room))
            .unwrap_or_default();
        let cells: Vec<&str> = row.split_whitespace().collect();
        if code == 0
            && cells.len() == 7
            && [cells[0], cells[1], cells[2], cells[5], cells[6]]
                == [room, "node-a,node-b", "3", "-", "yes"]
        {
            break;
        }
        ensure!(
            Instant::now() < deadline,
            "ferry rooms ({code}):\n{out}{err}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (code, out, err) = ferry(&[room])?;
    ensure!(
        code == 0
            && out.contains(&format!("ROOM {room}: 2 replicas, converged"))
            && out.contains("PARTICIPANTS (3, as node-a sees them)")
            && out
                .lines()
                .any(|l| l.starts_with("node-b") && l.contains("64/1"))
            // The sync tree's parent column: node-a is the root, node-b's parent.
            && out
                .lines()
                .any(|l| l.starts_with("node-a") && l.split_whitespace().nth(7) == Some("-"))
            && out
                .lines()
                .any(|l| l.starts_with("node-b") && l.split_whitespace().nth(7) == Some("node-a")),
        "ferry rooms {room} ({code}):\n{out}{err}"
    );
    eprintln!("ferry rooms {room}:\n{out}");
    let (code, out, err) = ferry(&["no-such-room"])?;
    ensure!(
        code == 1 && out.contains("hosted by no node"),
        "ferry rooms no-such-room ({code}):\n{out}{err}"
    );
    let (code, _, err) = ferry(&["../v1/nodes"])?;
    ensure!(
        code == 2 && err.contains("room \"../v1/nodes\""),
        "ferry rooms with a bad room id ({code}): {err}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn participants_on_both_nodes_share_one_room() -> Result<()> {
    let _area = ferry_tests::area(module_path!());
    let dev = start_dev_registered(&[], &[]).await?;
    let room = "standup";
    // Three participants the scheduler places on both nodes (two on one, one on the other).
    let mut answers: Vec<Value> = Vec::new();
    for i in 0..64 {
        let a = join_answer(&dev, room, &format!("u{i}"))?;
        let nodes: std::collections::BTreeSet<&str> = answers
            .iter()
            .chain(std::iter::once(&a))
            .filter_map(|x| x["node"].as_str())
            .collect();
        if answers.len() < 2 || nodes.len() == 2 {
            answers.push(a);
        }
        if answers.len() == 3 {
            break;
        }
    }
    ensure!(
        answers.len() == 3,
        "placement never used both nodes: {answers:?}"
    );
    // The third speaks protobuf (the node's default encoding), the others JSON.
    let mut peers = Vec::new();
    for (i, a) in answers.iter().enumerate() {
        let format = if i == 2 { "&format=protobuf" } else { "" };
        peers.push(Peer::connect_with(a, &dev.token, format).await?);
    }
    eprintln!(
        "participants: {:?}",
        peers.iter().map(|p| (&p.id, &p.node)).collect::<Vec<_>>()
    );

    // Joins: everyone sees everyone within 200 ms of the join being sent.
    let mut latencies = Vec::new();
    for i in 0..peers.len() {
        let id = peers[i].id.clone();
        let (sent, r) = peers[i]
            .send(json!({"type": "join", "key": format!("join-{id}"), "name": id.to_uppercase()}))
            .await?;
        ensure!(r["type"] == "receipt" && r["duplicate"] == false, "{r}");
        for p in peers.iter_mut() {
            let t = p
                .event(Duration::from_secs(2), |e| {
                    e["type"] == "joined" && e["participant"] == id
                })
                .await?;
            latencies.push(("join", t - sent));
        }
    }
    // Mute.
    let a = peers[0].id.clone();
    let (sent, r) = peers[0]
        .send(json!({"type": "set", "key": "mute-1", "register": "audio_muted", "value": true}))
        .await?;
    ensure!(r["type"] == "receipt", "{r}");
    for p in peers.iter_mut() {
        let t = p
            .event(Duration::from_secs(2), |e| {
                e["type"] == "register" && e["participant"] == a && e["value"] == true
            })
            .await?;
        latencies.push(("mute", t - sent));
    }
    // Chat, and its retry with the same key: one message, the same receipt.
    let chat = json!({"type": "chat", "key": "chat-1", "text": "hello room"});
    let (sent, first) = peers[2].send(chat.clone()).await?;
    let (_, retry) = peers[2].send(chat).await?;
    ensure!(
        first["duplicate"] == false && retry["duplicate"] == true,
        "{first} {retry}"
    );
    ensure!(first["stamp"] == retry["stamp"], "{first} {retry}");
    for p in peers.iter_mut() {
        let t = p
            .event(Duration::from_secs(2), |e| {
                e["type"] == "chat" && e["text"] == "hello room"
            })
            .await?;
        latencies.push(("chat", t - sent));
    }
    // The same key for another command, from another node's participant: refused.
    let (_, reused) = peers[1]
        .send(json!({"type": "chat", "key": "chat-1", "text": "something else"}))
        .await?;
    ensure!(
        reused["type"] == "error" && reused["code"] == "key_reused",
        "{reused}"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    for p in &peers {
        let n = p
            .events()
            .iter()
            .filter(|(_, e)| e["type"] == "chat")
            .count();
        ensure!(n == 1, "{} saw {n} chat messages", p.id);
    }
    let worst = latencies.iter().map(|(_, d)| *d).max().unwrap_or_default();
    eprintln!(
        "event latencies (ms): {:?}",
        latencies
            .iter()
            .map(|(w, d)| format!("{w} {:.1}", d.as_secs_f64() * 1e3))
            .collect::<Vec<_>>()
    );
    ensure!(
        worst <= Duration::from_millis(200),
        "an event took {worst:?} (goal: 200 ms)"
    );

    // Bad input: specific errors, the connection stays.
    let (_, e) = peers[0]
        .send(json!({"type": "set", "key": "bad-1", "register": "volume", "value": 3}))
        .await?;
    ensure!(e["code"] == "bad_request", "{e}");
    let (_, e) = peers[0]
        .send(json!({"type": "chat", "key": "bad-2", "text": "x".repeat(5000)}))
        .await?;
    ensure!(e["code"] == "too_large", "{e}");
    peers[0].sink.send(Message::Text("not json".into())).await?;
    peers[0]
        .wait(Duration::from_secs(2), |f| {
            f["type"] == "error" && f["code"] == "bad_request" && f["key"].is_null()
        })
        .await?;
    // A binary frame that is not one, on the protobuf connection: its error comes in protobuf.
    peers[2]
        .sink
        .send(Message::Binary(vec![0x0a, 0xff, 0x01].into()))
        .await?;
    peers[2]
        .wait(Duration::from_secs(2), |f| {
            f["type"] == "error"
                && f["code"] == "bad_request"
                && f["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("not a frame"))
        })
        .await?;
    for p in &peers {
        ensure!(
            !p.all().iter().any(|f| f["type"] == "wrong_encoding"),
            "{}: a frame in the encoding it did not ask for",
            p.id
        );
    }
    // A participant that did not join may not chat.
    let late = join_answer(&dev, room, "late")?;
    let mut late = Peer::connect(&late, &dev.token).await?;
    let (_, e) = late
        .send(json!({"type": "chat", "key": "late-1", "text": "hi"}))
        .await?;
    ensure!(e["code"] == "not_in_room", "{e}");
    drop(late);
    // A lazy connection (chat only from the start): a welcome without the participant list,
    // chat but no join events.
    let lazy = join_answer(&dev, room, "lazy")?;
    let mut lazy = Peer::connect_with(&lazy, &dev.token, "&events=chat").await?;
    let (_, welcome) = lazy
        .wait(Duration::from_secs(1), |f| f["type"] == "welcome")
        .await?;
    ensure!(
        welcome["state"]["participants"] == json!({})
            && welcome["state"]["participant_count"] == 3
            && welcome["state"]["chat"].as_array().map(Vec::len) == Some(1),
        "a lazy welcome: {welcome}"
    );
    let (_, r) = lazy
        .send(json!({"type": "join", "key": "lazy-j", "name": "Lazy"}))
        .await?;
    ensure!(r["type"] == "receipt", "{r}");
    peers[0]
        .send(json!({"type": "chat", "key": "chat-lazy", "text": "for the lazy"}))
        .await?;
    lazy.event(Duration::from_secs(2), |e| e["text"] == "for the lazy")
        .await?;
    ensure!(
        lazy.events().iter().all(|(_, e)| e["type"] == "chat"),
        "a chat-only subscription got {:?}",
        lazy.events()
    );
    let (_, r) = lazy.send(json!({"type": "leave", "key": "lazy-l"})).await?;
    ensure!(r["type"] == "receipt", "{r}");
    drop(lazy);

    // Credentials: no token, a forged one, replication without the cluster token.
    let ws = answers[0]["ws"].as_str().context("ws")?;
    for (url, what) in [
        (ws.to_owned(), "no token"),
        (format!("{ws}&access_token=forged"), "a forged token"),
    ] {
        let (error, close) = refusal(&url).await?;
        ensure!(
            error["code"] == "unauthorized" && close == Some(4401),
            "{what}: {error} / close code {close:?}"
        );
    }
    let r = http(
        &format!("{}/v1/rooms/{room}/join", dev.gateway),
        "POST",
        &[],
        b"{}",
    )?;
    ensure!(
        r.status == 401,
        "join without a token: {} {}",
        r.status,
        r.body
    );
    let r = http(
        &format!("{}/v1/rooms/{room}/join", dev.gateway),
        "POST",
        &[("authorization", &format!("Bearer {}", dev.token))],
        br#"{"participant":"not ok!"}"#,
    )?;
    ensure!(
        r.status == 400,
        "a bad participant id: {} {}",
        r.status,
        r.body
    );
    let r = http(
        &format!("{}/v1/rooms/replica", dev.node_a),
        "POST",
        &[],
        b"\x01\x00",
    )?;
    ensure!(
        r.status == 401,
        "replication without the cluster token: {}",
        r.status
    );
    let r = http(
        &format!("{}/v1/rooms/replica", dev.node_a),
        "POST",
        &[("authorization", &format!("Bearer {}", dev.token))],
        b"\x07garbage",
    )?;
    ensure!(r.status == 400, "a garbage batch: {} {}", r.status, r.body);

    // Both replicas hold the same state, and know each other.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let (ra, rb) = (room_on(&dev.node_a, room)?, room_on(&dev.node_b, room)?);
        if ra["digest"] == rb["digest"] && ra["peers"] == json!(["node-b"]) {
            ensure!(rb["peers"] == json!(["node-a"]), "{rb}");
            // Two replicas: ops go one hop down their push trees (fan-out 64 by default).
            ensure!(
                ra["fanout"] == json!({"children": 64, "depth": 1}),
                "{}",
                ra["fanout"]
            );
            ensure!(
                ra["state"]["participants"].as_object().map(|o| o.len()) == Some(3),
                "{ra}"
            );
            break;
        }
        if Instant::now() > deadline {
            bail!("replicas differ: {ra} / {rb}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    operator_sees_the_room(&dev, room).await?;

    // A connection gone without `leave`: the participant leaves after the grace (10 s).
    let gone = peers.pop().context("peer")?;
    let gone_id = gone.id.clone();
    let closed = Instant::now();
    drop(gone);
    let t = peers[0]
        .event(Duration::from_secs(15), |e| {
            e["type"] == "left" && e["participant"] == gone_id
        })
        .await?;
    let after = t - closed;
    ensure!(
        after >= Duration::from_secs(9),
        "left after {after:?}, before its grace"
    );
    // An explicit leave goes at once.
    let b = peers[1].id.clone();
    let (sent, _) = peers[1]
        .send(json!({"type": "leave", "key": "leave-b"}))
        .await?;
    let t = peers[0]
        .event(Duration::from_secs(2), |e| {
            e["type"] == "left" && e["participant"] == b
        })
        .await?;
    eprintln!(
        "grace leave after {:.1} s, explicit leave seen after {:.1} ms",
        after.as_secs_f64(),
        (t - sent).as_secs_f64() * 1e3
    );
    // The two leaves' tombstones are collected on both nodes through the sync tree (node-a,
    // the lower id, is its root): node-b's summary up, node-a's watermark down.
    let sync = |url: &str| -> Result<Value> { Ok(room_on(url, room)?["sync"].clone()) };
    let (a, b_sync) = (sync(&dev.node_a)?, sync(&dev.node_b)?);
    ensure!(
        a["parent"].is_null() && a["children"] == json!(["node-b"]) && b_sync["parent"] == "node-a",
        "sync tree: node-a {a}, node-b {b_sync}"
    );
    let leaves = Instant::now();
    loop {
        let (a, b_sync) = (sync(&dev.node_a)?, sync(&dev.node_b)?);
        if a["tombstones"] == 0 && b_sync["tombstones"] == 0 {
            eprintln!(
                "tombstones collected on both nodes {:.0} ms after the leave (stable {} of {} ops)",
                t.elapsed().as_secs_f64() * 1e3,
                a["stable_ops"],
                a["merged_ops"]
            );
            break;
        }
        ensure!(
            leaves.elapsed() < Duration::from_secs(5),
            "tombstones left 5 s after the leaves: node-a {a}, node-b {b_sync}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let metric = |name: &str| -> Result<f64> {
        let mut sum = 0.0;
        for url in [&dev.node_a, &dev.node_b] {
            let text = http(&format!("{url}/metrics"), "GET", &[], b"")?.body;
            let v: f64 = text
                .lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
                .and_then(|v| v.trim().parse().ok())
                .with_context(|| format!("{name} on {url}"))?;
            sum += v;
        }
        Ok(sum)
    };
    ensure!(
        metric("ferry_room_rooms")? == 2.0,
        "both nodes host the room"
    );
    ensure!(
        metric("ferry_room_duplicates_total")? == 1.0,
        "one retried command"
    );
    ensure!(
        metric("ferry_room_grace_leaves_total")? == 1.0,
        "one grace leave"
    );
    ensure!(
        metric("ferry_room_replication_received_total")? > 0.0,
        "replication"
    );
    Ok(())
}

/// Three Chromium participants (browser SDK, `client.join`) in one room across both nodes: they
/// see each other's join, track, mute and chat within 200 ms; a retried chat with the same key
/// is one message; the publisher's session migrates to the other node, its room connection
/// follows it, and room events keep flowing both ways.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chromium_participants_follow_a_room_across_a_migration() -> Result<()> {
    let _area = ferry_tests::area(module_path!());
    use ferry_tests::Browser;
    use ferry_tests::Collector;
    use ferry_tests::cluster::{migration_end, start_migration};

    let dev = start_dev_registered(&[], &[]).await?;
    let collector = Collector::start()?;
    let room = "meet";
    // Participants the scheduler puts on both nodes; the first publishes.
    let mut picked: Vec<(String, String)> = Vec::new();
    for i in 0..64 {
        let id = format!("c{i}");
        let node = join_answer(&dev, room, &id)?["node"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let nodes: std::collections::BTreeSet<&str> = picked
            .iter()
            .map(|(_, n)| n.as_str())
            .chain(std::iter::once(node.as_str()))
            .collect();
        if picked.len() < 2 || nodes.len() == 2 {
            picked.push((id, node));
        }
        if picked.len() == 3 {
            break;
        }
    }
    ensure!(picked.len() == 3, "placement never used both nodes");
    let mut pages = Vec::new();
    for (i, (id, _)) in picked.iter().enumerate() {
        let mut q = vec![
            ("sdk", dev.gateway.as_str()),
            ("base", dev.gateway.as_str()),
            ("room", room),
            ("participant", id.as_str()),
            ("name", id.as_str()),
            ("token", dev.token.as_str()),
            ("id", id.as_str()),
        ];
        if i == 0 {
            q.push(("publish", "1"));
        }
        pages.push(Browser::open(&collector.page_url("room.html", &q))?);
    }
    let ids: Vec<String> = picked.iter().map(|(id, _)| id.clone()).collect();
    let everyone = json!(
        ids.iter()
            .cloned()
            .collect::<std::collections::BTreeSet<_>>()
    );
    let (alice, bob, carol) = (ids[0].clone(), ids[1].clone(), ids[2].clone());
    // Everyone in, alice's camera announced as a track and live.
    collector
        .wait_until(Duration::from_secs(30), |r| {
            ids.iter().all(|id| {
                r.get(id).is_some_and(|p| {
                    p["phase"] == "joined"
                        && p["participants"] == everyone
                        && p["view"][alice.as_str()]["tracks"]["cam"]["kind"] == "video"
                })
            }) && r
                .get(&alice)
                .is_some_and(|p| p["state"] == "connected" && p["session"].is_string())
        })
        .await
        .context("three participants, alice publishing")?;

    let mut latencies: Vec<(String, f64)> = Vec::new();

    let is_mute = muted(&alice, true);
    for l in delays(&collector, &ids, &alice, "mute", &is_mute)
        .await
        .context("alice's mute")?
    {
        latencies.push(("mute".into(), l));
    }

    let hello = format!("hello from {bob}");
    let is_hello = |e: &Value| e["type"] == "chat" && e["text"] == hello.as_str();
    for l in delays(&collector, &ids, &bob, "chat-hello", &is_hello)
        .await
        .context("bob's chat")?
    {
        latencies.push(("chat".into(), l));
    }

    // A retried chat (the same key twice): one message everywhere, the retry a duplicate.
    collector.command(&carol, "chat-retry");
    let r = collector
        .wait_until(Duration::from_secs(10), |r| {
            r.get(&carol).is_some_and(|p| {
                p["sent"].as_array().is_some_and(|s| {
                    s.iter()
                        .filter(|x| x["what"] == "chat-retry" && x["receipt"].is_object())
                        .count()
                        == 2
                })
            })
        })
        .await
        .context("carol's retried chat")?;
    let receipts: Vec<Value> = r[&carol]["sent"]
        .as_array()
        .map(|s| {
            s.iter()
                .filter(|x| x["what"] == "chat-retry")
                .map(|x| x["receipt"].clone())
                .collect()
        })
        .unwrap_or_default();
    ensure!(
        receipts[0]["duplicate"] == false && receipts[1]["duplicate"] == true,
        "{receipts:?}"
    );
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let r = collector.reports();
    for id in &ids {
        let n = r[id]["chat"]
            .as_array()
            .map_or(0, |c| c.iter().filter(|t| *t == "retried once").count());
        ensure!(n == 1, "{id} shows the retried chat {n} times");
    }

    // Alice's session migrates; her room connection follows to the new node.
    let session = r[&alice]["session"]
        .as_str()
        .context("alice's session")?
        .to_owned();
    let from = r[&alice]["sessionNode"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let target = if from == "node-a" { "node-b" } else { "node-a" };
    let m = start_migration(&dev.gateway, &dev.token, &session, target, "ice-restart")?;
    let v = migration_end(&dev.gateway, &m).await?;
    ensure!(v["state"] == "committed", "migration: {v}");
    collector
        .wait_until(Duration::from_secs(15), |r| {
            r.get(&alice).is_some_and(|p| {
                p["node"] == target
                    && p["roomEvents"]
                        .as_array()
                        .is_some_and(|e| e.iter().any(|x| x["type"] == "moved"))
            })
        })
        .await
        .with_context(|| format!("alice's room connection moving from {from} to {target}"))?;
    let is_unmute = muted(&alice, false);
    for l in delays(&collector, &ids, &alice, "unmute", &is_unmute)
        .await
        .context("alice's unmute after the migration")?
    {
        latencies.push(("unmute after migration".into(), l));
    }
    let hello_c = format!("hello from {carol}");
    let is_hello_c = |e: &Value| e["type"] == "chat" && e["text"] == hello_c.as_str();
    for l in delays(&collector, &ids, &carol, "chat-hello", &is_hello_c)
        .await
        .context("carol's chat after the migration")?
    {
        latencies.push(("chat after migration".into(), l));
    }
    ensure!(
        r.get(&alice).is_some_and(|p| p["participants"] == everyone),
        "alice still sees everyone: {}",
        r[&alice]["participants"]
    );
    eprintln!("room event latencies (ms, per page): {latencies:?}");
    let worst = latencies.iter().map(|(_, l)| *l).fold(0.0, f64::max);
    ensure!(worst <= 200.0, "a room event took {worst} ms (goal: 200)");
    drop(pages);
    Ok(())
}

/// An nftables table that drops TCP between two nodes' HTTP ports (their room replication) and
/// lets the test's own connections through; removed on drop.
struct Partition {
    table: String,
}

impl Partition {
    fn new(ports: [u16; 2], keep: &[u16]) -> Result<Partition> {
        let table = format!("ferry_rooms_{}", std::process::id());
        let ports = format!("{{ {}, {} }}", ports[0], ports[1]);
        let keep = keep
            .iter()
            .map(u16::to_string)
            .collect::<Vec<_>>()
            .join(", ");
        let rules = format!(
            "table inet {table} {{\n\
               chain input {{\n\
                 type filter hook input priority 0; policy accept;\n\
                 tcp dport {ports} tcp sport != {{ {keep} }} drop\n\
                 tcp sport {ports} tcp dport != {{ {keep} }} drop\n\
               }}\n\
             }}\n"
        );
        let mut child = std::process::Command::new("nft")
            .args(["-f", "-"])
            .stdin(std::process::Stdio::piped())
            .spawn()
            .context("nft (apt-get install nftables; the test needs root)")?;
        std::io::Write::write_all(child.stdin.as_mut().context("stdin")?, rules.as_bytes())?;
        let status = child.wait()?;
        ensure!(status.success(), "nft -f: {status}; rules:\n{rules}");
        Ok(Partition { table })
    }
}

impl Drop for Partition {
    fn drop(&mut self) {
        let _ = std::process::Command::new("nft")
            .args(["delete", "table", "inet", &self.table])
            .status();
    }
}

fn port_of(url: &str) -> Result<u16> {
    url.rsplit(':')
        .next()
        .and_then(|p| p.trim_end_matches('/').parse().ok())
        .with_context(|| format!("no port in {url}"))
}

/// Both replicas' digests are equal (and each knows the other): the state of node-a's.
async fn converged(dev: &Dev, room: &str, within: Duration) -> Result<Value> {
    let deadline = Instant::now() + within;
    loop {
        let (ra, rb) = (room_on(&dev.node_a, room)?, room_on(&dev.node_b, room)?);
        if ra["digest"] == rb["digest"] && ra["peers"] == json!(["node-b"]) {
            return Ok(ra);
        }
        if Instant::now() > deadline {
            bail!("replicas differ after {within:?}: {ra} / {rb}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A real partition between the two nodes of `ferry dev` (nftables drops their replication,
/// both ways): participants on both sides make conflicting changes; after the heal the replicas
/// converge to one state (equal digests) holding every acknowledged join, the last write of a
/// register both sides wrote, both sides' chat, and the leave made on one side.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_between_the_nodes_heals_to_one_state() -> Result<()> {
    let _area = ferry_tests::area(module_path!());
    let dev = start_dev_registered(&[], &[]).await?;
    let room = "split";
    // x on both nodes (two connections of one participant), ya on node-a, yb on node-b.
    let mut xa = Peer::connect(&join_at(&dev.node_a, &dev.token, room, "x")?, &dev.token).await?;
    let mut xb = Peer::connect(&join_at(&dev.node_b, &dev.token, room, "x")?, &dev.token).await?;
    let mut ya = Peer::connect(&join_at(&dev.node_a, &dev.token, room, "ya")?, &dev.token).await?;
    let mut yb = Peer::connect(&join_at(&dev.node_b, &dev.token, room, "yb")?, &dev.token).await?;
    for (p, k) in [(&mut xa, "x-a"), (&mut ya, "ya-1"), (&mut yb, "yb-1")] {
        let (_, r) = p.send(json!({"type": "join", "key": k, "name": k})).await?;
        ensure!(r["type"] == "receipt", "{r}");
    }
    converged(&dev, room, Duration::from_secs(5)).await?;

    let ports = [port_of(&dev.node_a)?, port_of(&dev.node_b)?];
    let mut keep: Vec<u16> = [&xa, &xb, &ya, &yb].iter().map(|p| p.port).collect();
    // New participants of each side, connected before the partition (new connections to a
    // node would be dropped too).
    let mut na = Peer::connect(&join_at(&dev.node_a, &dev.token, room, "na")?, &dev.token).await?;
    let mut nb = Peer::connect(&join_at(&dev.node_b, &dev.token, room, "nb")?, &dev.token).await?;
    keep.extend([na.port, nb.port]);
    let partition = Partition::new(ports, &keep)?;
    let cut = Instant::now();

    // Side a: a join, x's layout (first), chat, ya leaves. Side b: a join, x's layout (later,
    // so it wins), chat, an attribute.
    let steps: Vec<(&str, Value)> = vec![
        ("na", json!({"type": "join", "key": "na-1", "name": "NA"})),
        (
            "xa",
            json!({"type": "set", "key": "x-l1", "register": "layout", "value": "grid"}),
        ),
        (
            "xa",
            json!({"type": "chat", "key": "x-c1", "text": "from a"}),
        ),
        ("ya", json!({"type": "leave", "key": "ya-2"})),
        ("nb", json!({"type": "join", "key": "nb-1", "name": "NB"})),
        (
            "xb",
            json!({"type": "set", "key": "x-l2", "register": "layout", "value": "speaker"}),
        ),
        (
            "xb",
            json!({"type": "chat", "key": "x-c2", "text": "from b"}),
        ),
        (
            "yb",
            json!({"type": "set", "key": "yb-a", "register": "attribute", "name": "side", "value": "b"}),
        ),
    ];
    for (who, frame) in steps {
        let p = match who {
            "na" => &mut na,
            "nb" => &mut nb,
            "xa" => &mut xa,
            "xb" => &mut xb,
            "ya" => &mut ya,
            _ => &mut yb,
        };
        let (_, r) = p.send(frame.clone()).await?;
        ensure!(r["type"] == "receipt", "{frame}: {r}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Partitioned: each side sees only its own changes.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    ensure!(
        !xa.events().iter().any(|(_, e)| e["participant"] == "nb"),
        "node-a heard of nb through the partition"
    );
    ensure!(
        !xb.events().iter().any(|(_, e)| e["participant"] == "na"),
        "node-b heard of na through the partition"
    );
    drop(partition);
    let healed = Instant::now();
    let state = converged(&dev, room, Duration::from_secs(20)).await?;
    let took = healed.elapsed();
    let ps = &state["state"]["participants"];
    let names: Vec<&String> = ps
        .as_object()
        .map(|o| o.keys().collect())
        .unwrap_or_default();
    ensure!(
        names == ["na", "nb", "x", "yb"],
        "participants after the heal: {names:?}"
    );
    ensure!(ps["x"]["layout"] == "speaker", "x's layout: {}", ps["x"]);
    ensure!(ps["yb"]["attributes"]["side"] == "b", "{}", ps["yb"]);
    let chat: Vec<&str> = state["state"]["chat"]
        .as_array()
        .map(|c| c.iter().filter_map(|m| m["text"].as_str()).collect())
        .unwrap_or_default();
    ensure!(
        chat == ["from a", "from b"],
        "chat after the heal: {chat:?}"
    );
    // The clients of each side heard of the other side's changes.
    xa.event(Duration::from_secs(5), |e| {
        e["type"] == "joined" && e["participant"] == "nb"
    })
    .await?;
    xb.event(Duration::from_secs(5), |e| {
        e["type"] == "left" && e["participant"] == "ya"
    })
    .await?;
    eprintln!(
        "partitioned {:.1} s; converged {:.0} ms after the heal",
        (healed - cut).as_secs_f64(),
        took.as_secs_f64() * 1e3
    );
    Ok(())
}

/// The stored room snapshots at the scheduler (`GET /v1/room-snapshots`).
fn snapshots_listed(dev: &Dev) -> Result<Vec<Value>> {
    let auth = format!("Bearer {}", dev.token);
    let r = http(
        &format!("{}/v1/room-snapshots", dev.gateway),
        "GET",
        &[("authorization", &auth)],
        b"",
    )?;
    ensure!(r.status == 200, "{} {}", r.status, r.body);
    Ok(serde_json::from_str(&r.body)?)
}

/// SIGKILLs and restarts `dev`; carol connects to `room` on node-`node`: when the restart was
/// over, her connection and its welcome.
async fn restart_and_join(dev: &mut Dev, room: &str, node: &str) -> Result<(Instant, Peer, Value)> {
    dev.restart()?;
    ferry_tests::cluster::wait_registered(&dev.gateway, 2).await?;
    let t0 = Instant::now();
    let url = if node == "a" {
        &dev.node_a
    } else {
        &dev.node_b
    };
    let carol = Peer::connect(&join_at(url, &dev.token, room, "carol")?, &dev.token).await?;
    let welcome = carol.all()[0].clone();
    eprintln!("welcome after the restart in {:?}: {welcome}", t0.elapsed());
    Ok((t0, carol, welcome))
}

/// A restart of the whole cluster (scheduler and both nodes SIGKILLed at once, started again
/// on the same state directory) keeps a room: every node stores its replica's state with the
/// scheduler (`--room-snapshot-ms`), a node opening the room merges them; a participant who
/// comes back stays, one who does not leaves after the grace; bad snapshots get 400/401/404.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_cluster_restart_keeps_the_rooms() -> Result<()> {
    let _area = ferry_tests::area(module_path!());
    let mut dev = start_dev_registered(&["--room-snapshot-ms", "200"], &[]).await?;
    let room = "durable";
    let mut alice = Peer::connect(
        &join_at(&dev.node_a, &dev.token, room, "alice")?,
        &dev.token,
    )
    .await?;
    let mut bob =
        Peer::connect(&join_at(&dev.node_b, &dev.token, room, "bob")?, &dev.token).await?;
    for (p, k) in [(&mut alice, "alice-join"), (&mut bob, "bob-join")] {
        let (_, r) = p.send(json!({"type": "join", "key": k, "name": k})).await?;
        ensure!(r["type"] == "receipt", "{r}");
    }
    let frames = [
        json!({"type": "set", "key": "a-mute", "register": "audio_muted", "value": true}),
        json!({"type": "set", "key": "a-lang", "register": "attribute", "name": "lang", "value": "de"}),
        json!({"type": "chat", "key": "a-chat", "text": "before the restart"}),
    ];
    for f in frames {
        let (_, r) = alice.send(f).await?;
        ensure!(r["type"] == "receipt", "{r}");
    }
    let (_, r) = bob
        .send(json!({"type": "set", "key": "b-layout", "register": "layout", "value": "speaker"}))
        .await?;
    ensure!(r["type"] == "receipt", "{r}");
    let before = converged(&dev, room, Duration::from_secs(5)).await?;
    let last_op = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_millis() as u64;
    // Both nodes stored a snapshot taken after the last change.
    let deadline = Instant::now() + Duration::from_secs(5);
    let stored = loop {
        let list = snapshots_listed(&dev)?;
        let fresh: Vec<&Value> = list
            .iter()
            .filter(|s| s["room"] == room && s["saved_at_ms"].as_u64() > Some(last_op + 100))
            .collect();
        if fresh.len() == 2 {
            break list;
        }
        if Instant::now() > deadline {
            // What each node says of its snapshots, and its snapshot error count.
            let mut nodes = Vec::new();
            for url in [&dev.node_a, &dev.node_b] {
                let shown = room_on(url, room).map(|r| r["snapshots"].clone());
                let metrics = http(&format!("{url}/metrics"), "GET", &[], b"")?.body;
                let errors = metrics
                    .lines()
                    .find(|l| l.starts_with("ferry_room_snapshot_errors_total"))
                    .map(str::to_owned);
                nodes.push(format!("{url}: {shown:?} {errors:?}"));
            }
            bail!("snapshots not stored: {list:?}; {nodes:?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    eprintln!("stored: {stored:?}");
    let files =
        std::fs::read_dir(dev.state.join("scheduler.rooms").join(format!("r-{room}")))?.count();
    ensure!(files == 2, "{files} snapshot files");

    // Bad snapshots: no token, garbage, another room's state, a bad id, nothing to delete.
    let url = |r: &str, n: &str| format!("{}/v1/rooms/{r}/snapshots/{n}", dev.gateway);
    let auth = format!("Bearer {}", dev.token);
    let h = [("authorization", auth.as_str())];
    let r = http(&url(room, "node-a"), "PUT", &[], b"\x01\x02")?;
    ensure!(r.status == 401, "{} {}", r.status, r.body);
    let r = http(&url(room, "node-a"), "PUT", &h, b"\x01garbage")?;
    ensure!(
        r.status == 400 && r.body.contains("not a room state"),
        "{} {}",
        r.status,
        r.body
    );
    let r = http(&url("a%20b", "node-a"), "PUT", &h, b"\x01")?;
    ensure!(r.status == 400, "{} {}", r.status, r.body);
    let r = http(&url("never", "node-a"), "DELETE", &h, b"")?;
    ensure!(r.status == 404, "{} {}", r.status, r.body);
    let r = http(
        &format!("{}/v1/rooms/{room}/snapshots", dev.gateway),
        "GET",
        &[],
        b"",
    )?;
    ensure!(r.status == 401, "{} {}", r.status, r.body);

    drop((alice, bob));
    // Carol joins on node-a: her welcome holds the room as it was.
    let (t0, carol, welcome) = restart_and_join(&mut dev, room, "a").await?;
    let state = &welcome["state"];
    ensure!(
        state["participants"]["alice"]["audio_muted"] == true
            && state["participants"]["alice"]["attributes"]["lang"] == "de"
            && state["participants"]["bob"]["layout"] == "speaker"
            && state["chat"][0]["text"] == "before the restart",
        "the room was not restored: {welcome}"
    );
    let shown = room_on(&dev.node_a, room)?;
    ensure!(
        shown["digest"] == before["digest"] && shown["snapshots"]["merged"] == 2,
        "restored {shown} / before {before}"
    );
    // Alice comes back (to node-a); Bob does not: he leaves once the grace is over.
    let mut alice = Peer::connect(
        &join_at(&dev.node_a, &dev.token, room, "alice")?,
        &dev.token,
    )
    .await?;
    let mut carol = carol;
    let left = carol
        .event(Duration::from_secs(20), |e| {
            e["type"] == "left" && e["participant"] == "bob"
        })
        .await?;
    eprintln!("bob left {:?} after the restart", left - t0);
    ensure!(
        left - t0 >= Duration::from_secs(9),
        "bob left before his grace: {:?}",
        left - t0
    );
    let (_, r) = alice
        .send(json!({"type": "chat", "key": "a-chat-2", "text": "after the restart"}))
        .await?;
    ensure!(r["type"] == "receipt", "{r}");
    carol
        .event(Duration::from_secs(2), |e| {
            e["type"] == "chat" && e["text"] == "after the restart"
        })
        .await?;
    let now = room_on(&dev.node_a, room)?;
    ensure!(
        now["state"]["participants"].get("alice").is_some()
            && now["state"]["participants"].get("bob").is_none(),
        "{now}"
    );
    let metrics = http(&format!("{}/metrics", dev.node_a), "GET", &[], b"")?.body;
    for m in [
        "ferry_room_snapshots_restored_total 2",
        "ferry_room_orphan_graces_total 2",
    ] {
        ensure!(metrics.contains(m), "no {m:?} in the metrics");
    }
    Ok(())
}

/// The same on etcd (`ferry dev --store etcd`): the nodes' snapshots are keys
/// `{prefix}/rooms/{room}/{node}` in a real etcd, nothing is written beside the state directory,
/// and after the whole cluster is SIGKILLed and started again a node restores the room from them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn room_snapshots_on_etcd_survive_a_full_cluster_restart() -> Result<()> {
    let _area = ferry_tests::area(module_path!());
    let etcd = ferry_tests::etcd::Etcd::start("rooms")?;
    let mut dev = start_dev_registered(
        &[
            "--room-snapshot-ms",
            "200",
            "--store",
            "etcd",
            "--etcd-endpoints",
            &etcd.url,
        ],
        &[],
    )
    .await?;
    let room = "on-etcd";
    let mut alice = Peer::connect(
        &join_at(&dev.node_a, &dev.token, room, "alice")?,
        &dev.token,
    )
    .await?;
    for f in [
        json!({"type": "join", "key": "e-join", "name": "Alice"}),
        json!({"type": "set", "key": "e-hand", "register": "hand_raised", "value": true}),
        json!({"type": "chat", "key": "e-chat", "text": "kept in etcd"}),
    ] {
        let (_, r) = alice.send(f).await?;
        ensure!(r["type"] == "receipt", "{r}");
    }
    let before = room_on(&dev.node_a, room)?;
    let last_op = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_millis() as u64;
    let key = format!("/ferry-dev/default/rooms/{room}/node-a");
    let deadline = Instant::now() + Duration::from_secs(5);
    let stored = loop {
        let fresh = snapshots_listed(&dev)?.into_iter().find(|s| {
            s["room"] == room
                && s["node"] == "node-a"
                && s["saved_at_ms"].as_u64() > Some(last_op + 100)
        });
        if let Some(s) = fresh {
            break s;
        }
        ensure!(
            Instant::now() < deadline,
            "no fresh snapshot of {room} listed"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let value = etcd
        .get(&key)?
        .with_context(|| format!("no {key} in etcd"))?;
    eprintln!("stored: {stored}; {key}: {} B in etcd", value.len());
    ensure!(
        !dev.state.join("scheduler.rooms").exists(),
        "snapshots written beside the state directory with --store etcd"
    );

    drop(alice);
    // Carol joins on node-b, which never hosted the room: it comes from node-a's key in etcd.
    let (_, _carol, welcome) = restart_and_join(&mut dev, room, "b").await?;
    let state = &welcome["state"];
    ensure!(
        state["participants"]["alice"]["hand_raised"] == true
            && state["chat"][0]["text"] == "kept in etcd",
        "the room was not restored from etcd: {welcome}"
    );
    let shown = room_on(&dev.node_b, room)?;
    eprintln!("node-b after the restart: {shown}");
    ensure!(
        shown["digest"] == before["digest"] && shown["snapshots"]["merged"] == 1,
        "restored {shown} / before {before}"
    );
    Ok(())
}
