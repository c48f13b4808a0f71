//! `ferry bench room`: a join storm into one room spread over the nodes. `--participants`
//! WebSocket clients join at `--join-rate` per second, each placed by the scheduler
//! (`POST /v1/rooms/{room}/join`) on one of `--nodes` node processes, which replicate the room.
//! Three runs, each on a fresh cluster:
//!
//! - `window 50 ms, lazy`: 50 ms merge windows; participants subscribe to chat and reactions
//!   only (no join/leave/register events), as a large meeting's client that lists
//!   participants on demand would;
//! - `window 50 ms, all`: merge windows, every participant gets every event;
//! - `no window, all`: every change goes out at once (`--room-window-ms 0`);
//! - `window 50 ms, all, protobuf`: as `window 50 ms, all`, the clients on binary protobuf
//!   frames (the node's default; the runs above ask for JSON with `?format=json`), each frame
//!   decoded as an SDK would.
//!
//! `--observers` participants (not lazy) time every join from its `join` frame being sent to
//! its `joined` event arriving (p50/p99). Per participant: events and frames delivered per
//! second of the storm, bytes over the run; CPU per node. The load generator (this process)
//! shares the machine with the nodes.
//!
//! Then a hot room beside `--small-rooms` small ones on one node: each small room's speaker
//! chats every 100 ms and a listener times the messages; `--hot-participants` in the hot room
//! flip their mute four times a second. The small rooms' chat latency with the hot room idle
//! and storming, without isolation (`--room-hot-ops 0`) and with it (a hot room gets a task of
//! its own). JSON under `target/bench/room.json`.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use futures_util::{SinkExt, StreamExt};
use serde::Serialize;
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

use super::cluster::{Cluster, post_json};
use super::process::{clock_ticks, cpu_seconds};
use super::report::percentile;

/// Options of `ferry bench room`.
#[derive(clap::Args, Debug)]
pub struct RoomArgs {
    /// Participants joining the room.
    #[arg(long, default_value_t = 10_000)]
    participants: usize,
    /// Nodes (at most 3).
    #[arg(long, default_value_t = 3)]
    nodes: usize,
    /// Joins per second.
    #[arg(long, default_value_t = 2_000)]
    join_rate: u64,
    /// Participants that get every event and time the joins.
    #[arg(long, default_value_t = 20)]
    observers: usize,
    /// Seconds measured after the last join was sent.
    #[arg(long, default_value_t = 3.0)]
    settle: f64,
    /// Only the run named so (`lazy`, `all`, `nowindow`, `protobuf`, `hot`); default: all.
    #[arg(long)]
    only: Option<String>,
    /// Small rooms beside the hot room (3 participants each).
    #[arg(long, default_value_t = 100)]
    small_rooms: usize,
    /// Participants of the hot room.
    #[arg(long, default_value_t = 300)]
    hot_participants: usize,
    /// Where the JSON goes.
    #[arg(long, default_value = "target/bench/room.json")]
    out: PathBuf,
}

#[derive(Debug, Clone, Copy)]
struct Scenario {
    name: &'static str,
    label: &'static str,
    window_ms: u64,
    lazy: bool,
    /// Binary protobuf frames instead of JSON text.
    binary: bool,
}

const SCENARIOS: [Scenario; 4] = [
    Scenario {
        name: "lazy",
        label: "window 50 ms, lazy",
        window_ms: 50,
        lazy: true,
        binary: false,
    },
    Scenario {
        name: "all",
        label: "window 50 ms, all",
        window_ms: 50,
        lazy: false,
        binary: false,
    },
    Scenario {
        name: "nowindow",
        label: "no window, all",
        window_ms: 0,
        lazy: false,
        binary: false,
    },
    Scenario {
        name: "protobuf",
        label: "window 50 ms, all, protobuf",
        window_ms: 50,
        lazy: false,
        binary: true,
    },
];

#[derive(Debug, Serialize)]
struct Row {
    run: String,
    window_ms: u64,
    lazy: bool,
    /// `json` or `protobuf`.
    format: &'static str,
    participants: usize,
    nodes: usize,
    join_rate: u64,
    /// Joins acknowledged (receipts).
    joined: u64,
    /// Clients that could not connect or join.
    failed: u64,
    /// Connections the nodes closed (too slow to read their events).
    dropped: u64,
    /// Seconds from the first join sent to the last.
    storm_s: f64,
    /// Events delivered per participant per second (over storm + settle).
    events_per_participant_s: f64,
    /// Frames delivered per participant per second.
    frames_per_participant_s: f64,
    /// Bytes delivered per participant over the run.
    bytes_per_participant: f64,
    /// Join → `joined` at an observer, ms.
    latency_p50_ms: f64,
    latency_p99_ms: f64,
    /// Joins the observers saw / joins they should have seen.
    observed: f64,
    /// CPU cores used per node over the run.
    cpu_cores: Vec<f64>,
}

#[derive(Default)]
struct Totals {
    joined: AtomicU64,
    failed: AtomicU64,
    dropped: AtomicU64,
    events: AtomicU64,
    frames: AtomicU64,
    bytes: AtomicU64,
}

/// Runs `ferry bench room`.
pub(crate) async fn room(args: RoomArgs) -> Result<()> {
    let mut rows = Vec::new();
    for s in SCENARIOS {
        if args.only.as_deref().is_some_and(|o| o != s.name) {
            continue;
        }
        let row = run(&args, s).await.with_context(|| s.label)?;
        println!(
            "{:<28} | joined {:>6}/{} failed {} dropped {} | events/part/s {:>8.1} frames/part/s {:>6.1} KiB/part {:>8.1} | join→seen p50 {:>7.1} ms p99 {:>7.1} ms (seen {:.0} %) | cpu/node {:?}",
            s.label,
            row.joined,
            row.participants,
            row.failed,
            row.dropped,
            row.events_per_participant_s,
            row.frames_per_participant_s,
            row.bytes_per_participant / 1024.0,
            row.latency_p50_ms,
            row.latency_p99_ms,
            row.observed * 100.0,
            row.cpu_cores
                .iter()
                .map(|c| (c * 100.0).round() / 100.0)
                .collect::<Vec<_>>()
        );
        rows.push(row);
    }
    let mut hot_rows = Vec::new();
    if args.only.as_deref().is_none_or(|o| o == "hot") {
        for isolation in [false, true] {
            let row = hot_room(&args, isolation).await.context("hot room")?;
            println!(
                "hot room ({} participants, {:.0} ops/s) beside {} small rooms, isolation {}: small-room chat p50/p99 {:.1}/{:.1} ms idle, {:.1}/{:.1} ms during the storm ({} messages); hot room isolated: {}",
                row.hot_participants,
                row.hot_ops_per_s,
                row.small_rooms,
                if isolation { "on " } else { "off" },
                row.idle_p50_ms,
                row.idle_p99_ms,
                row.storm_p50_ms,
                row.storm_p99_ms,
                row.storm_messages,
                row.isolated
            );
            hot_rows.push(row);
        }
    }
    if let Some(dir) = args.out.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let report = json!({"storm": rows, "hot_room": hot_rows});
    std::fs::write(&args.out, serde_json::to_string_pretty(&report)?)?;
    println!("wrote {}", args.out.display());
    Ok(())
}

async fn run(args: &RoomArgs, s: Scenario) -> Result<Row> {
    let window = s.window_ms.to_string();
    let cluster = Cluster::start_full(
        args.participants + 100,
        false,
        args.nodes,
        None,
        &[],
        &["--room-window-ms", &window],
    )
    .await?;
    let ticks = clock_ticks();
    let pids: Vec<u32> = (0..args.nodes)
        .filter_map(|i| cluster.node_pid(i))
        .collect();
    let cpu0: Vec<f64> = pids
        .iter()
        .map(|p| cpu_seconds(*p, ticks).unwrap_or(0.0))
        .collect();
    let totals = Arc::new(Totals::default());
    let sent: Arc<Vec<OnceLock<Instant>>> =
        Arc::new((0..args.participants).map(|_| OnceLock::new()).collect());
    let latencies: Arc<Mutex<Vec<f64>>> = Arc::default();
    let stop = Arc::new(tokio::sync::Notify::new());
    let start = Instant::now();
    let gap = Duration::from_secs_f64(1.0 / args.join_rate.max(1) as f64);
    let mut tasks = Vec::new();
    for i in 0..args.participants {
        let at = start + gap.mul_f64(i as f64);
        tokio::time::sleep_until(at.into()).await;
        let c = Client {
            index: i,
            gateway: cluster.gateway.clone(),
            token: cluster.token.clone(),
            observer: i < args.observers,
            lazy: s.lazy,
            binary: s.binary,
            totals: totals.clone(),
            sent: sent.clone(),
            latencies: latencies.clone(),
            stop: stop.clone(),
        };
        tasks.push(tokio::spawn(c.run()));
    }
    let storm = start.elapsed();
    tokio::time::sleep(Duration::from_secs_f64(args.settle)).await;
    let elapsed = start.elapsed().as_secs_f64();
    let cpu: Vec<f64> = pids
        .iter()
        .zip(&cpu0)
        .map(|(p, c0)| (cpu_seconds(*p, ticks).unwrap_or(0.0) - c0) / elapsed)
        .collect();
    let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let (events, frames, bytes) = (get(&totals.events), get(&totals.frames), get(&totals.bytes));
    stop.notify_waiters();
    for t in tasks {
        t.abort();
    }
    let mut lat = latencies.lock().unwrap_or_else(|e| e.into_inner()).clone();
    lat.sort_by(f64::total_cmp);
    let n = args.participants as f64;
    let expected = (args.observers.min(args.participants) * args.participants) as f64;
    Ok(Row {
        run: s.label.to_owned(),
        window_ms: s.window_ms,
        lazy: s.lazy,
        format: if s.binary { "protobuf" } else { "json" },
        participants: args.participants,
        nodes: args.nodes,
        join_rate: args.join_rate,
        joined: get(&totals.joined),
        failed: get(&totals.failed),
        dropped: get(&totals.dropped),
        storm_s: storm.as_secs_f64(),
        events_per_participant_s: events as f64 / n / elapsed,
        frames_per_participant_s: frames as f64 / n / elapsed,
        bytes_per_participant: bytes as f64 / n,
        latency_p50_ms: percentile(&lat, 0.5),
        latency_p99_ms: percentile(&lat, 0.99),
        observed: lat.len() as f64 / expected.max(1.0),
        cpu_cores: cpu,
    })
}

struct Client {
    index: usize,
    gateway: String,
    token: String,
    observer: bool,
    lazy: bool,
    binary: bool,
    totals: Arc<Totals>,
    sent: Arc<Vec<OnceLock<Instant>>>,
    latencies: Arc<Mutex<Vec<f64>>>,
    stop: Arc<tokio::sync::Notify>,
}

impl Client {
    async fn run(self) {
        if self.session().await.is_err() {
            self.totals.failed.fetch_add(1, Ordering::Relaxed);
        }
    }

    async fn session(&self) -> Result<()> {
        let id = format!("p{}", self.index);
        let url = format!("{}/v1/rooms/storm/join", self.gateway);
        let token = self.token.clone();
        let body = json!({"participant": id});
        let answer = tokio::task::spawn_blocking(move || post_json(&url, &token, &body)).await??;
        // Lazy: subscribed from the start (a small welcome too), to chat and reactions.
        let lazy = if self.lazy && !self.observer {
            "&events=chat,reactions"
        } else {
            ""
        };
        let format = if self.binary { "" } else { "&format=json" };
        let ws = format!(
            "{}&access_token={}{format}{lazy}",
            answer["ws"].as_str().context("ws")?,
            self.token
        );
        let socket = connect(&ws).await?;
        let (mut sink, mut stream) = socket.split();
        let join = json!({"type": "join", "key": format!("join-{id}"), "name": id});
        let join = if self.binary {
            Message::Binary(ferry_proto::room::encode_client(&join)?.into())
        } else {
            Message::Text(join.to_string().into())
        };
        let _ = self.sent[self.index].set(Instant::now());
        sink.send(join).await?;
        let stopped = self.stop.notified();
        tokio::pin!(stopped);
        loop {
            tokio::select! {
                () = &mut stopped => return Ok(()),
                m = stream.next() => match m {
                    Some(Ok(Message::Text(t))) => self.frame(t.as_str()),
                    Some(Ok(Message::Binary(b))) => self.binary_frame(&b),
                    Some(Ok(Message::Close(_))) | None | Some(Err(_)) => {
                        self.totals.dropped.fetch_add(1, Ordering::Relaxed);
                        return Ok(());
                    }
                    Some(Ok(_)) => {}
                },
            }
        }
    }

    fn frame(&self, text: &str) {
        let t = &self.totals;
        t.bytes.fetch_add(text.len() as u64, Ordering::Relaxed);
        if text.contains("\"type\":\"receipt\"") {
            t.joined.fetch_add(1, Ordering::Relaxed);
            return;
        }
        if !text.contains("\"type\":\"events\"") {
            return;
        }
        t.frames.fetch_add(1, Ordering::Relaxed);
        // Every event carries a `type`, and so does the frame.
        let events = text.matches("\"type\":").count().saturating_sub(1);
        t.events.fetch_add(events as u64, Ordering::Relaxed);
        if !self.observer {
            return;
        }
        let now = Instant::now();
        let Ok(v) = serde_json::from_str::<Value>(text) else {
            return;
        };
        let joins = v["events"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|e| e["type"] == "joined")
            .filter_map(|e| e["participant"].as_str());
        self.seen_joins(now, joins);
    }

    /// A binary frame: decoded whole (protobuf), as a client must to use it.
    fn binary_frame(&self, bytes: &[u8]) {
        use ferry_proto::room::{ServerFrame, event, server_frame::Frame};
        use prost::Message as _;
        let t = &self.totals;
        t.bytes.fetch_add(bytes.len() as u64, Ordering::Relaxed);
        let Ok(frame) = ServerFrame::decode(bytes) else {
            return;
        };
        match frame.frame {
            Some(Frame::Receipt(_)) => {
                t.joined.fetch_add(1, Ordering::Relaxed);
            }
            Some(Frame::Events(e)) => {
                t.frames.fetch_add(1, Ordering::Relaxed);
                t.events.fetch_add(e.events.len() as u64, Ordering::Relaxed);
                if self.observer {
                    let joins = e.events.iter().filter_map(|e| match &e.kind {
                        Some(event::Kind::Joined(j)) => Some(j.participant.as_str()),
                        _ => None,
                    });
                    self.seen_joins(Instant::now(), joins);
                }
            }
            _ => {}
        }
    }

    /// An observer saw these participants join at `now`: their join → seen latencies.
    fn seen_joins<'a>(&self, now: Instant, participants: impl Iterator<Item = &'a str>) {
        let lat: Vec<f64> = participants
            .filter_map(|p| p.strip_prefix('p')?.parse::<usize>().ok())
            .filter_map(|i| self.sent.get(i)?.get())
            .map(|sent| now.duration_since(*sent).as_secs_f64() * 1e3)
            .collect();
        self.latencies
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend(lat);
    }
}

#[derive(Debug, Serialize)]
struct HotRow {
    isolation: bool,
    small_rooms: usize,
    hot_participants: usize,
    /// Operations per second the hot room took during the storm.
    hot_ops_per_s: f64,
    /// Whether the node isolated the hot room (`GET /v1/rooms`).
    isolated: bool,
    idle_p50_ms: f64,
    idle_p99_ms: f64,
    storm_p50_ms: f64,
    storm_p99_ms: f64,
    storm_messages: usize,
}

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// A room WebSocket with a small read buffer: most of the thousands of clients read a
/// welcome and a receipt, and each read zeroes the whole buffer (128 KiB by default), which
/// cost the load generator more than it cost the nodes to serve those frames.
async fn connect(url: &str) -> Result<Ws> {
    let config = tokio_tungstenite::tungstenite::protocol::WebSocketConfig::default()
        .read_buffer_size(8 << 10);
    let (socket, _) = tokio_tungstenite::connect_async_with_config(url, Some(config), true).await?;
    Ok(socket)
}

/// A joined participant's socket (the welcome and the join's receipt read).
async fn joined(gateway: &str, token: &str, room: &str, id: &str) -> Result<Ws> {
    let url = format!("{gateway}/v1/rooms/{room}/join");
    let (token2, body) = (token.to_owned(), json!({"participant": id}));
    let answer = tokio::task::spawn_blocking(move || post_json(&url, &token2, &body)).await??;
    let ws = format!(
        "{}&access_token={token}&format=json",
        answer["ws"].as_str().context("ws")?
    );
    let mut socket = connect(&ws).await?;
    let join = json!({"type": "join", "key": format!("join-{room}-{id}"), "name": id});
    socket.send(Message::Text(join.to_string().into())).await?;
    loop {
        match socket.next().await {
            Some(Ok(Message::Text(t))) if t.as_str().contains("\"type\":\"receipt\"") => {
                return Ok(socket);
            }
            Some(Ok(_)) => {}
            _ => anyhow::bail!("{id}: no receipt for its join"),
        }
    }
}

/// Sent times of the small rooms' chat messages (`room.seq`) and the latencies measured.
#[derive(Default)]
struct Chats {
    sent: Mutex<std::collections::HashMap<String, Instant>>,
    latencies: Mutex<Vec<f64>>,
}

async fn hot_room(args: &RoomArgs, isolation: bool) -> Result<HotRow> {
    let hot_ops = if isolation { "300" } else { "0" };
    let cluster = Cluster::start_full(
        args.hot_participants + args.small_rooms * 3 + 100,
        false,
        1,
        None,
        &[],
        &["--room-hot-ops", hot_ops],
    )
    .await?;
    let (gw, token) = (cluster.gateway.as_str(), cluster.token.as_str());
    let chats = Arc::new(Chats::default());
    let stop = Arc::new(tokio::sync::Notify::new());
    let mut tasks = Vec::new();
    for k in 0..args.small_rooms {
        let room = format!("small-{k}");
        let speaker = joined(gw, token, &room, "speaker").await?;
        let mut listener = joined(gw, token, &room, "listener").await?;
        let third = joined(gw, token, &room, "third").await?;
        let c = chats.clone();
        tasks.push(tokio::spawn(async move {
            let _third = third;
            while let Some(Ok(m)) = listener.next().await {
                let Message::Text(t) = m else { continue };
                let now = Instant::now();
                let Ok(v) = serde_json::from_str::<Value>(t.as_str()) else {
                    continue;
                };
                for e in v["events"].as_array().into_iter().flatten() {
                    let Some(text) = e["text"].as_str() else {
                        continue;
                    };
                    let sent = c
                        .sent
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .remove(text);
                    if let Some(sent) = sent {
                        let ms = now.duration_since(sent).as_secs_f64() * 1e3;
                        c.latencies
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .push(ms);
                    }
                }
            }
        }));
        let (c, stop) = (chats.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            let (mut sink, mut stream) = speaker.split();
            tokio::spawn(async move { while stream.next().await.is_some() {} });
            let mut tick = tokio::time::interval(Duration::from_millis(100));
            for seq in 0u64.. {
                tokio::select! {
                    () = stop.notified() => return,
                    _ = tick.tick() => {}
                }
                let text = format!("{room}.{seq}");
                c.sent
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(text.clone(), Instant::now());
                let frame = json!({"type": "chat", "key": format!("c-{text}"), "text": text});
                if sink
                    .send(Message::Text(frame.to_string().into()))
                    .await
                    .is_err()
                {
                    return;
                }
            }
        }));
    }
    // The hot room's participants, idle at first; every one reads everything.
    let storming = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let hot_ops = Arc::new(AtomicU64::new(0));
    for i in 0..args.hot_participants {
        let socket = joined(gw, token, "hot", &format!("h{i}")).await?;
        let (storming, hot_ops, stop) = (storming.clone(), hot_ops.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            let (mut sink, mut stream) = socket.split();
            tokio::spawn(async move { while stream.next().await.is_some() {} });
            let mut tick = tokio::time::interval(Duration::from_millis(250));
            for n in 0u64.. {
                tokio::select! {
                    () = stop.notified() => return,
                    _ = tick.tick() => {}
                }
                if !storming.load(Ordering::Relaxed) {
                    continue;
                }
                let frame = json!({"type": "set", "key": format!("m-{i}-{n}"),
                                   "register": "audio_muted", "value": n % 2 == 0});
                if sink
                    .send(Message::Text(frame.to_string().into()))
                    .await
                    .is_err()
                {
                    return;
                }
                hot_ops.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    let take = |c: &Chats| {
        let mut l = std::mem::take(&mut *c.latencies.lock().unwrap_or_else(|e| e.into_inner()));
        l.sort_by(f64::total_cmp);
        l
    };
    tokio::time::sleep(Duration::from_secs(1)).await;
    take(&chats);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let idle = take(&chats);
    storming.store(true, Ordering::Relaxed);
    // The node measures rates per second; give it two before measuring.
    tokio::time::sleep(Duration::from_secs(2)).await;
    take(&chats);
    let ops0 = hot_ops.load(Ordering::Relaxed);
    let t1 = Instant::now();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let storm = take(&chats);
    let ops = (hot_ops.load(Ordering::Relaxed) - ops0) as f64 / t1.elapsed().as_secs_f64();
    let node = cluster.node_http.first().cloned().unwrap_or_default();
    let rooms =
        tokio::task::spawn_blocking(move || super::cluster::get_json(&format!("{node}/v1/rooms")))
            .await??;
    let isolated = rooms
        .as_array()
        .into_iter()
        .flatten()
        .any(|r| r["room"] == "hot" && r["isolated"] == true);
    stop.notify_waiters();
    for t in tasks {
        t.abort();
    }
    Ok(HotRow {
        isolation,
        small_rooms: args.small_rooms,
        hot_participants: args.hot_participants,
        hot_ops_per_s: ops,
        isolated,
        idle_p50_ms: percentile(&idle, 0.5),
        idle_p99_ms: percentile(&idle, 0.99),
        storm_p50_ms: percentile(&storm, 0.5),
        storm_p99_ms: percentile(&storm, 0.99),
        storm_messages: storm.len(),
    })
}
