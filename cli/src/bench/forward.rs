//! `ferry bench forward`: one synthetic publisher fanned out to N synthetic SRTP subscribers
//! through a real `ferry node` process over loopback UDP, against the same fan-out through a
//! raw UDP relay (`ferry bench relay`: no WebRTC, the same `recvmmsg` / `sendmmsg` batching as
//! the node) and through Janus 1.1's streaming plugin (`janus.rs`, when `janus` is installed).
//! CPU and memory are read from each process's `/proc` entry; the forwarding process runs
//! pinned to CPU 0 and the benchmark on the others. `--saturate` searches for the highest
//! fan-out each sustains and runs Ferry at twice its own (overload).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::fanout::{
    PeerCmd, PeerHandle, Side, all_playing, all_stats, side, start_peer, start_peer_with,
};
use super::process::{
    ChildProc, Clocks, clock_ticks, cpu_count, cpu_seconds, pin_process, rss_bytes, spawn_on,
    wait_for,
};
use anyhow::{Context, Result, bail};
use ferry_sfu::codec::Codec;
use ferry_sfu::peer::{LatencyStats, PeerConfig, PeerRole, PeerStats};
use ferry_sfu::time::WallClock;
use serde::Serialize;
use tokio::sync::{mpsc, oneshot};

/// Options of `ferry bench forward`.
#[derive(clap::Args, Debug)]
pub struct ForwardArgs {
    /// Subscriber counts to measure.
    #[arg(long, value_delimiter = ',', default_value = "1,10,100")]
    subscribers: Vec<usize>,
    /// Measured seconds per run (after warm-up).
    #[arg(long, default_value_t = 5.0)]
    duration: f64,
    /// Publisher video bitrate in bit/s.
    #[arg(long, default_value_t = 4_000_000)]
    bitrate: u32,
    /// Where the JSON goes.
    #[arg(long, default_value = "target/bench/forward.json")]
    out: PathBuf,
    /// Also find saturation: raise the subscriber count (from the first of `--subscribers`,
    /// ×1.5 a step) until more than 0.1 % of the packets the fan-out owes go undelivered or
    /// the p99 latency passes 50 ms, for Ferry and for the raw relay; then run Ferry at twice
    /// its saturation count (overload: delivered latency, viewers still decoding). Latency is
    /// capture to the kernel's arrival stamp at the subscriber's socket (`SO_TIMESTAMPNS`), for
    /// Ferry's peers and the raw relay's subscribers alike: what the forwarder and the network
    /// took, not how far behind the load generator is in reading its sockets.
    #[arg(long)]
    saturate: bool,
    /// Upper bound of the saturation search.
    #[arg(long, default_value_t = 4000)]
    max_subscribers: usize,
    /// Pin the forwarding process to CPU 0 and this benchmark (publisher, subscribers) to the
    /// others (`sched_setaffinity`), so they do not share a core. Needs ≥ 2 CPUs.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pin: bool,
    /// Worker counts of the node to measure (`ferry node --workers`): with W workers the load
    /// is W streams, one on each core, sharing the subscribers; the node is pinned to W CPUs
    /// when the machine has more, else it and the bench share them all.
    #[arg(long, value_delimiter = ',', default_value = "1")]
    workers: Vec<usize>,
    /// Only the node's scaling over `--workers`: for each count, the saturation search of the
    /// node alone. Every subscriber but `--probes` stops reading its socket once all play
    /// (a sink: receive buffer at the kernel's minimum, what comes is dropped in the kernel),
    /// so the load generator costs next to nothing; packets out are the node's own forwarded
    /// count, latency and loss the probes'. Ferry / raw and Ferry / Janus are not measured.
    #[arg(long)]
    scaling: bool,
    /// Subscribers that keep reading in `--scaling` runs (at least one per stream).
    #[arg(long, default_value_t = 8)]
    probes: usize,
    /// The node's per-viewer adaptation (`ferry node --adaptive`), one run of Ferry per value:
    /// `true,false` measures beside today's node the node before adaptation as the baseline
    /// (its viewers offer no transport-wide CC, so it stamps no sequence numbers, estimates
    /// nothing and allocates nothing). Each further value is compared with the first.
    #[arg(long, value_delimiter = ',', default_value = "true")]
    adaptive: Vec<bool>,
}

impl ForwardArgs {
    /// The first `--adaptive` value: the mode of the runs that are compared with the raw relay.
    fn first_adaptive(&self) -> bool {
        self.adaptive.first().copied().unwrap_or(true)
    }
}

/// Frame rate of the synthetic publisher (the test peer's default).
const FPS: f64 = 30.0;

/// `ferry_process_heap_bytes` from a node's `/metrics`.
async fn heap_bytes(http: &str) -> Result<u64> {
    Ok(node_metric(http, "ferry_process_heap_bytes").await? as u64)
}

/// One unlabelled sample of a node's `/metrics`.
async fn node_metric(http: &str, name: &str) -> Result<f64> {
    Ok(node_metrics(http, &[name]).await?[0])
}

/// Unlabelled samples of a node's `/metrics`, all from one scrape (counters that one core
/// changes together are read together).
async fn node_metrics(http: &str, names: &[&str]) -> Result<Vec<f64>> {
    let url = format!("{http}/metrics");
    let prefixes: Vec<String> = names.iter().map(|n| format!("{n} ")).collect();
    tokio::task::spawn_blocking(move || -> Result<Vec<f64>> {
        let text = ureq::get(&url).call()?.body_mut().read_to_string()?;
        prefixes
            .iter()
            .map(|prefix| {
                text.lines()
                    .find_map(|l| l.strip_prefix(prefix.as_str()))
                    .and_then(|v| v.trim().parse().ok())
                    .with_context(|| format!("no {prefix}in /metrics"))
            })
            .collect()
    })
    .await?
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct Row {
    subscribers: usize,
    /// The node's `--workers`.
    workers: usize,
    duration_s: f64,
    publisher_bitrate_bps: u32,
    publisher_pps: f64,
    packet_bytes: f64,
    ferry: Side,
    raw: Side,
    /// Janus 1.1 (streaming plugin, in a network namespace), when installed.
    janus: Option<Side>,
    /// Ferry's packets per core as a fraction of the raw relay's.
    ferry_over_raw: f64,
    /// Ferry's packets per core over Janus's.
    ferry_over_janus: Option<f64>,
    /// Node heap added per subscriber session (live heap delta / N).
    heap_per_subscriber_bytes: f64,
    /// Node resident memory added per subscriber session (RSS delta / N;
    /// includes buffer-pool growth and allocator slack).
    rss_per_subscriber_bytes: f64,
    nack_cache_packets: usize,
}

struct FerryRun {
    side: Side,
    publisher_pps: f64,
    packet_bytes: f64,
    rss_per_subscriber: f64,
    heap_per_subscriber: f64,
    /// Viewers that completed video frames during the measurement.
    viewers_decoding: usize,
    /// Viewers that received a keyframe during the measurement.
    viewers_with_keyframe: usize,
    /// The node's counters at the end: video packets shed, shed ratio.
    dropped_overload: f64,
    shed_ratio: f64,
    /// CPU the load generator (this process: publishers, subscribers) used, in cores.
    generator_cores: f64,
    /// Datagrams per second a worker received for another core and handed over.
    handed_off_pps: f64,
    /// The share of the packets the reading viewers (with sinks: the probes) were owed that
    /// never came: holes in their sequence numbers over the window, lost on the way in or out.
    seq_loss: f64,
    /// The share of what the node owed its viewers over the window (publisher packets in ×
    /// viewers) that it did not forward: shed, or refused. Exact: its own counters, one scrape.
    node_undelivered: f64,
    /// `--scaling`: video packets the node's overload control shed during the window.
    shed_in_window: Option<f64>,
}

impl FerryRun {
    /// This run as a step of a saturation search.
    fn step(&self, n: usize) -> SatStep {
        let mut s = SatStep {
            generator_cores: Some(self.generator_cores),
            ..SatStep::new(n, self.publisher_pps, &self.side)
        };
        // What the node did not send, or what the viewers never got: the worse. (Not the
        // viewers' count against the publishers': a frame off at either end of the window,
        // ±0.7 % over 5 s.)
        s.set_undelivered(self.node_undelivered.max(self.seq_loss));
        s
    }
}

/// `workers` stream names, each owned by a different core of a node with that many.
fn streams_per_core(n: usize, workers: usize) -> Vec<String> {
    let mut names: Vec<Option<String>> = vec![None; workers];
    let mut i = 0;
    while names.iter().any(Option::is_none) {
        let name = format!("bench{n}-{i}");
        if let Ok(id) = ferry_proto::StreamId::new(name.clone()) {
            let core = ferry_sfu::cluster::shards::shard_of(&id, workers);
            names[core].get_or_insert(name);
        }
        i += 1;
    }
    names.into_iter().flatten().collect()
}

async fn measure_ferry(
    n: usize,
    workers: usize,
    adaptive: bool,
    args: &ForwardArgs,
    ticks: f64,
) -> Result<FerryRun> {
    // The node's API token is also a WHIP/WHEP credential: the raw peers send it as
    // `access_token` (they have no header to put it in).
    let token = crate::access::random_secret();
    let workers_arg = workers.to_string();
    let adaptive_arg = adaptive.to_string();
    let cpus = cpu_count();
    let node_args = [
        "node",
        "--adaptive",
        &adaptive_arg,
        "--http",
        "127.0.0.1:0",
        "--udp",
        "127.0.0.1:0",
        "--token",
        &token,
        "--workers",
        &workers_arg,
    ];
    // The node starts on its CPUs (its workers pin themselves to one each within them).
    let node = if args.pin && cpus > workers {
        spawn_on(&node_args, &(0..workers).collect::<Vec<_>>())?
    } else {
        ChildProc::spawn(&node_args)?
    };
    let http = node.after("http")?;
    if args.pin && cpus > workers {
        pin_process(std::process::id(), &(workers..cpus).collect::<Vec<_>>())?;
    } else {
        // Everyone on every CPU (the bench may have pinned itself for an earlier run).
        pin_process(std::process::id(), &(0..cpus).collect::<Vec<_>>())?;
    }
    let now = Instant::now();
    let clocks = Clocks {
        wall: WallClock {
            base: now,
            unix_at_base: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default(),
        },
        epoch: now,
    };
    let streams = streams_per_core(n, workers);
    let mut publishers = Vec::new();
    for (i, stream) in streams.iter().enumerate() {
        publishers.push(
            start_peer(
                PeerRole::Publisher {
                    video: Codec::Vp8,
                    audio: true,
                },
                1 + i as u64,
                args.bitrate,
                &clocks,
                ferry_proto::auth::with_access_token(&format!("{http}/whip/{stream}"), &token),
            )
            .await?,
        );
    }
    wait_for(Duration::from_secs(20), || async {
        Ok(all_stats(&publishers).await?.iter().all(|s| s.connected))
    })
    .await
    .context("publisher did not connect")?;
    // Let the publisher's retransmission cache fill (1,000 packets) so its
    // memory is not counted against the subscribers.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let rss0 = rss_bytes(node.pid())?;
    let heap0 = heap_bytes(&http).await?;
    // `--scaling`: all but the probes (the first, over every stream) become sinks, each as
    // soon as it plays, so that this process never reads what the whole fan-out sends.
    let probes = args.probes.max(streams.len());
    let sink = args.scaling && n > probes;
    let mut parked = vec![false; n];
    let mut viewers = Vec::new();
    for i in 0..n {
        if sink && i > probes && i % 50 == 0 {
            park_playing(&viewers, probes, &mut parked).await?;
        }
        viewers.push(
            start_peer_with(
                PeerRole::Viewer,
                100 + i as u64,
                args.bitrate,
                &clocks,
                ferry_proto::auth::with_access_token(
                    &format!("{http}/whep/{}", streams[i % streams.len()]),
                    &token,
                ),
                |cfg| cfg.transport_cc = adaptive,
            )
            .await?,
        );
    }
    if sink {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !(park_playing(&viewers, probes, &mut parked).await?
            && all_playing(&viewers[..probes]).await?)
        {
            if Instant::now() > deadline {
                bail!("viewers did not all start playing: timed out after 60 s");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    } else {
        wait_for(Duration::from_secs(60), || all_playing(&viewers))
            .await
            .context("viewers did not all start playing")?;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let viewers_all = viewers;
    let viewers = if sink {
        // Their receive buffers fill; what the node sends them is dropped from then on.
        tokio::time::sleep(Duration::from_millis(500)).await;
        // While every viewer still read, this process competed with the node for the CPUs
        // and may have made it shed: measure once it no longer does (or after 10 s, shedding)
        // and a keyframe later (a viewer shed stays off until its stream's next keyframe).
        let settle = Instant::now() + Duration::from_secs(10);
        while Instant::now() < settle && node_metric(&http, "ferry_node_shed_ratio").await? > 0.0 {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // The publishers' keyframe interval (`start_peer` keeps the default).
        let gop = PeerConfig::KEYFRAME_INTERVAL;
        tokio::time::sleep(gop + Duration::from_millis(200)).await;
        &viewers_all[..probes]
    } else {
        &viewers_all[..]
    };

    let received = |stats: &[PeerStats]| -> u64 {
        stats
            .iter()
            .flat_map(|s| s.received.iter().map(|r| r.packets))
            .sum()
    };
    let sent = |s: &[PeerStats]| -> (u64, u64) {
        (
            s.iter().flat_map(|s| &s.sent).map(|r| r.packets).sum(),
            s.iter().flat_map(|s| &s.sent).map(|r| r.bytes).sum(),
        )
    };
    let s0 = all_stats(viewers).await?;
    let p0 = sent(&all_stats(&publishers).await?);
    let c0 = NodeCounts::read(&http).await?;
    let cpu0 = cpu_seconds(node.pid(), ticks)?;
    let gen0 = cpu_seconds(std::process::id(), ticks)?;
    let t0 = Instant::now();
    tokio::time::sleep(Duration::from_secs_f64(args.duration)).await;
    let s1 = all_stats(viewers).await?;
    let p1 = sent(&all_stats(&publishers).await?);
    let c1 = NodeCounts::read(&http).await?;
    let cpu1 = cpu_seconds(node.pid(), ticks)?;
    let gen1 = cpu_seconds(std::process::id(), ticks)?;
    let dur = t0.elapsed().as_secs_f64();
    let rss1 = rss_bytes(node.pid())?;
    let heap1 = heap_bytes(&http).await?;

    // Latency of the measured window only: not the warm-up, while the viewers joined.
    let mut lat = LatencyStats::default();
    let mut missing = 0;
    // The probes' holes and packets over the window (audio too: all are owed).
    let (mut holes, mut got) = (0, 0);
    for (a, b) in s0.iter().zip(&s1) {
        for r in b.video() {
            match a.video().find(|e| e.ssrc == r.ssrc) {
                Some(e) => lat.merge(&r.latency.since(&e.latency)),
                None => lat.merge(&r.latency),
            }
            missing += r.received.missing();
        }
        for r in &b.received {
            let before = a.received.iter().find(|e| e.ssrc == r.ssrc);
            let (m0, p0) = before.map_or((0, 0), |e| (e.received.missing(), e.packets));
            holes += r.received.missing().saturating_sub(m0);
            got += r.packets.saturating_sub(p0);
        }
    }
    let video = |s: &PeerStats| -> (u64, u64) {
        s.video().fold((0, 0), |(f, k), r| {
            (f + r.frames_completed, k + r.keyframes)
        })
    };
    let progress: Vec<((u64, u64), (u64, u64))> = s0
        .iter()
        .zip(&s1)
        .map(|(a, b)| (video(a), video(b)))
        .collect();
    let pkts = p1.0.saturating_sub(p0.0);
    let out = if sink {
        (c1.forwarded - c0.forwarded).max(0.0) as u64
    } else {
        received(&s1).saturating_sub(received(&s0))
    };
    // One publisher's rate (each stream has one): with sinks, as the node took it in, so that
    // what it owes and what it forwarded are counted alike (a packet lost on the way in shows
    // as the probes' holes).
    let publisher_pps = if sink {
        (c1.received - c0.received).max(0.0) / dur / streams.len() as f64
    } else {
        pkts as f64 / dur / streams.len() as f64
    };
    Ok(FerryRun {
        side: side(out, dur, cpu1 - cpu0, &lat, missing),
        publisher_pps,
        packet_bytes: p1.1.saturating_sub(p0.1) as f64 / pkts.max(1) as f64,
        rss_per_subscriber: rss1.saturating_sub(rss0) as f64 / n as f64,
        heap_per_subscriber: heap1.saturating_sub(heap0) as f64 / n as f64,
        viewers_decoding: progress.iter().filter(|(a, b)| b.0 > a.0).count(),
        viewers_with_keyframe: progress.iter().filter(|(a, b)| b.1 > a.1).count(),
        dropped_overload: node_metric(&http, "ferry_node_dropped_overload_total").await?,
        shed_ratio: node_metric(&http, "ferry_node_shed_ratio").await?,
        generator_cores: (gen1 - gen0) / dur,
        handed_off_pps: (c1.handed_off - c0.handed_off) / dur,
        seq_loss: holes as f64 / (holes + got).max(1) as f64,
        node_undelivered: {
            let owed = (c1.received - c0.received) * n as f64 / streams.len() as f64;
            (1.0 - (c1.forwarded - c0.forwarded) / owed.max(1.0)).max(0.0)
        },
        shed_in_window: sink.then_some(c1.shed - c0.shed),
    })
}

/// A node's packet counters, from one scrape of its `/metrics`: a core counts a packet's whole
/// fan-out as it handles it, so what it took in and what it forwarded agree to the packet (the
/// publishers' own counters, read apart from the node's, can be a keyframe's fan-out off).
struct NodeCounts {
    /// RTP packets in from publishers.
    received: f64,
    /// RTP packets forwarded to viewers.
    forwarded: f64,
    /// Video packets the overload control shed.
    shed: f64,
    /// Datagrams a worker handed to another core.
    handed_off: f64,
}

impl NodeCounts {
    async fn read(http: &str) -> Result<Self> {
        let v = node_metrics(
            http,
            &[
                "ferry_node_rtp_received_total",
                "ferry_node_rtp_forwarded_total",
                "ferry_node_dropped_overload_total",
                "ferry_node_handed_off_total",
            ],
        )
        .await?;
        Ok(NodeCounts {
            received: v[0],
            forwarded: v[1],
            shed: v[2],
            handed_off: v[3],
        })
    }
}

/// Parks (makes sinks of) the viewers from `probes` on that play now; whether all of them
/// have been parked.
async fn park_playing(viewers: &[PeerHandle], probes: usize, parked: &mut [bool]) -> Result<bool> {
    let mut all = true;
    for (i, v) in viewers.iter().enumerate().skip(probes) {
        if parked[i] {
            continue;
        }
        if all_playing(std::slice::from_ref(v)).await? {
            v.tx.send(PeerCmd::Park).await.ok().context("peer gone")?;
            parked[i] = true;
        } else {
            all = false;
        }
    }
    Ok(all && viewers.len() == parked.len())
}

/// A raw subscriber: registers with the relay, counts packets and latency (to the kernel's
/// arrival stamp, as the Ferry run's peers measure it), on the same batched loop.
async fn raw_subscriber(
    relay: SocketAddr,
    epoch: Instant,
    rx: mpsc::Receiver<oneshot::Sender<RawCounts>>,
) -> Result<()> {
    let socket = ferry_sfu::udp::bind(([127, 0, 0, 1], 0).into())?;
    let mut sub = RawSub {
        relay,
        epoch,
        rx,
        count: 0,
        seqs: ferry_sfu::peer::SeqRanges::default(),
        lat: LatencyStats::default(),
        next_hello: Some(Instant::now()),
        hello_due: false,
    };
    ferry_sfu::udp::serve(&socket, &mut sub).await;
    Ok(())
}

/// What raw subscribers received: packets, holes in the publisher's sequence numbers, latency.
#[derive(Debug, Clone, Default)]
struct RawCounts {
    packets: u64,
    missing: u64,
    lat: LatencyStats,
}

/// [`raw_subscriber`]'s state: says hello every 200 ms until packets come.
struct RawSub {
    relay: SocketAddr,
    epoch: Instant,
    rx: mpsc::Receiver<oneshot::Sender<RawCounts>>,
    count: u64,
    /// The publisher's sequence numbers received.
    seqs: ferry_sfu::peer::SeqRanges,
    lat: LatencyStats,
    /// When to say hello (again); `None` once packets come.
    next_hello: Option<Instant>,
    hello_due: bool,
}

impl ferry_sfu::udp::Datagrams for RawSub {
    type Transmit = (SocketAddr, &'static [u8]);
    type Event = oneshot::Sender<RawCounts>;

    fn view(t: &Self::Transmit) -> (&[u8], SocketAddr) {
        (t.1, t.0)
    }

    fn handle_datagram(&mut self, now: Instant, _: SocketAddr, data: &mut [u8], waited: Duration) {
        let arrived = now.checked_sub(waited).unwrap_or(now);
        let at_us = arrived.saturating_duration_since(self.epoch).as_micros() as u64;
        if let Some(stamp) = data.get(..8).and_then(|b| <[u8; 8]>::try_from(b).ok()) {
            self.lat
                .add(at_us.saturating_sub(u64::from_be_bytes(stamp)));
        }
        if let Some(seq) = data.get(8..16).and_then(|b| <[u8; 8]>::try_from(b).ok()) {
            self.seqs.insert(u64::from_be_bytes(seq));
        }
        self.count += 1;
        self.next_hello = None;
    }

    fn handle_timeout(&mut self, now: Instant) {
        if self.count == 0 {
            self.hello_due = true;
            self.next_hello = Some(now + Duration::from_millis(200));
        }
    }

    fn poll_transmit(&mut self) -> Option<Self::Transmit> {
        std::mem::take(&mut self.hello_due).then_some((self.relay, b"SUB".as_slice()))
    }

    fn poll_timeout(&mut self) -> Option<Instant> {
        self.next_hello
    }

    async fn next_event(&mut self) -> Option<Self::Event> {
        self.rx.recv().await
    }

    fn handle_event(&mut self, reply: Self::Event) {
        let _ = reply.send(RawCounts {
            packets: self.count,
            missing: self.seqs.missing(),
            lat: self.lat.clone(),
        });
    }
}

async fn measure_raw(
    n: usize,
    pps: f64,
    size: usize,
    args: &ForwardArgs,
    ticks: f64,
) -> Result<(Side, f64)> {
    let relay_proc = ChildProc::spawn(&["bench", "relay", "--udp", "127.0.0.1:0"])?;
    let relay: SocketAddr = relay_proc.after("udp")?.parse()?;
    if args.pin && cpu_count() >= 2 {
        pin_process(relay_proc.pid(), &[0])?;
        pin_process(std::process::id(), &(1..cpu_count()).collect::<Vec<_>>())?;
    }
    let epoch = Instant::now();
    let mut subs = Vec::new();
    for _ in 0..n {
        let (tx, rx) = mpsc::channel(2);
        tokio::spawn(raw_subscriber(relay, epoch, rx));
        subs.push(tx);
    }
    // Publisher: the same packet rate and size as the Ferry run, sent as
    // the test peer sends video — one burst per frame at 30 fps — and stamped.
    let (stop_tx, mut stop_rx) = oneshot::channel::<()>();
    // Packets per frame on average (a fraction carried over: rounding it would send up to 3 %
    // off the rate the demand is counted at).
    let per_frame = (pps / FPS).max(1.0);
    let publisher = tokio::spawn(async move {
        let socket = ferry_sfu::udp::bind(([127, 0, 0, 1], 0).into())?;
        let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / FPS));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
        let mut pkt = vec![0u8; size.max(16)];
        let mut seq = 0u64;
        let mut owed = 0.0;
        loop {
            tokio::select! {
                _ = tick.tick() => {
                    let stamp = (epoch.elapsed().as_micros() as u64).to_be_bytes();
                    owed += per_frame;
                    let now = owed.floor();
                    owed -= now;
                    for _ in 0..now as usize {
                        pkt[..8].copy_from_slice(&stamp);
                        pkt[8..16].copy_from_slice(&seq.to_be_bytes());
                        seq += 1;
                        socket.send_to(&pkt, relay).await?;
                    }
                }
                _ = &mut stop_rx => return anyhow::Ok(()),
            }
        }
    });
    let query = |subs: &Vec<mpsc::Sender<oneshot::Sender<RawCounts>>>| {
        let subs = subs.clone();
        async move {
            let mut total = RawCounts::default();
            let mut started = 0;
            for s in &subs {
                let (tx, rx) = oneshot::channel();
                s.send(tx).await.ok().context("subscriber gone")?;
                let c = rx.await?;
                total.packets += c.packets;
                total.missing += c.missing;
                total.lat.merge(&c.lat);
                started += usize::from(c.packets > 0);
            }
            anyhow::Ok((total, started))
        }
    };
    wait_for(Duration::from_secs(20), || async {
        Ok(query(&subs).await?.1 == n)
    })
    .await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (c0, _) = query(&subs).await?;
    let cpu0 = cpu_seconds(relay_proc.pid(), ticks)?;
    let t0 = Instant::now();
    tokio::time::sleep(Duration::from_secs_f64(args.duration)).await;
    let (c1, _) = query(&subs).await?;
    let cpu1 = cpu_seconds(relay_proc.pid(), ticks)?;
    let dur = t0.elapsed().as_secs_f64();
    let _ = stop_tx.send(());
    let _ = publisher.await;
    let (got, holes) = (
        c1.packets - c0.packets,
        c1.missing.saturating_sub(c0.missing),
    );
    // The window's latency: the merged histograms' difference (each subscriber's only grows).
    let side = side(got, dur, cpu1 - cpu0, &c1.lat.since(&c0.lat), holes);
    Ok((side, holes as f64 / (got + holes).max(1) as f64))
}

pub(crate) async fn forward(args: ForwardArgs) -> Result<()> {
    let ticks = clock_ticks();
    cpu_count();
    if args.scaling {
        return scaling(&args, ticks).await;
    }
    let mut rows = Vec::new();
    let mut worker_rows = Vec::new();
    let mut adaptive_rows = Vec::new();
    println!(
        "{:>5} | {:>10} {:>6} {:>10} | {:>10} {:>6} {:>10} | {:>6} | {:>10} {:>6} | {:>8} {:>8} | {:>8} {:>8} | {:>8} {:>8} | {:>7}",
        "subs",
        "ferry pps",
        "cores",
        "pps/core",
        "raw pps",
        "cores",
        "pps/core",
        "f/raw",
        "janus p/c",
        "f/jan",
        "p50 µs",
        "p99 µs",
        "raw p50",
        "raw p99",
        "heap KiB",
        "RSS KiB",
        "missing"
    );
    for &n in &args.subscribers {
        let first = args.workers.first().copied().unwrap_or(1);
        let mode = args.first_adaptive();
        let ferry = measure_ferry(n, first, mode, &args, ticks)
            .await
            .with_context(|| format!("ferry run, {n} subscribers"))?;
        let raw = measure_raw(
            n,
            ferry.publisher_pps,
            ferry.packet_bytes as usize,
            &args,
            ticks,
        )
        .await
        .with_context(|| format!("raw run, {n} subscribers"))?
        .0;
        let ratio = if raw.pps_per_core > 0.0 {
            ferry.side.pps_per_core / raw.pps_per_core
        } else {
            0.0
        };
        let pin_janus = (args.pin && cpu_count() >= 2).then_some(0);
        let janus = super::janus::measure_janus(n, args.bitrate, args.duration, pin_janus)
            .await
            .with_context(|| format!("janus run, {n} subscribers"))?;
        let over_janus = janus
            .as_ref()
            .map(|j| ferry.side.pps_per_core / j.pps_per_core.max(1.0));
        let row = Row {
            subscribers: n,
            workers: first,
            duration_s: args.duration,
            publisher_bitrate_bps: args.bitrate,
            publisher_pps: ferry.publisher_pps,
            packet_bytes: ferry.packet_bytes,
            ferry: ferry.side.clone(),
            raw: raw.clone(),
            janus: janus.clone(),
            ferry_over_raw: ratio,
            ferry_over_janus: over_janus,
            rss_per_subscriber_bytes: ferry.rss_per_subscriber,
            heap_per_subscriber_bytes: ferry.heap_per_subscriber,
            nack_cache_packets: 1000,
        };
        let f = &row.ferry;
        println!(
            "{:>5} | {:>10.0} {:>6.2} {:>10.0} | {:>10.0} {:>6.2} {:>10.0} | {:>6.2} | {:>10} {:>6} | {:>8} {:>8} | {:>8} {:>8} | {:>8.1} {:>8.1} | {:>7}",
            n,
            f.out_pps,
            f.cpu_cores,
            f.pps_per_core,
            raw.out_pps,
            raw.cpu_cores,
            raw.pps_per_core,
            ratio,
            janus
                .as_ref()
                .map_or("-".into(), |j| format!("{:.0}", j.pps_per_core)),
            over_janus.map_or("-".into(), |r| format!("{r:.2}")),
            f.latency_p50_us.unwrap_or(0),
            f.latency_p99_us.unwrap_or(0),
            raw.latency_p50_us.unwrap_or(0),
            raw.latency_p99_us.unwrap_or(0),
            row.heap_per_subscriber_bytes / 1024.0,
            row.rss_per_subscriber_bytes / 1024.0,
            f.missing
        );
        rows.push(row);
        for &a in args.adaptive.iter().skip(1) {
            let r = measure_ferry(n, first, a, &args, ticks)
                .await
                .with_context(|| format!("ferry run, {n} subscribers, --adaptive {a}"))?;
            let first_over_this = ferry.side.pps_per_core / r.side.pps_per_core.max(1.0);
            print_further_run(
                n,
                &format!("--adaptive {a}"),
                &r.side,
                &format!("--adaptive {mode}: {first_over_this:.2}x of it"),
            );
            adaptive_rows.push(serde_json::json!({
                "subscribers": n,
                "workers": first,
                "adaptive": a,
                "ferry": r.side,
                "first_over_this": first_over_this,
            }));
        }
        for &w in args.workers.iter().skip(1) {
            let r = measure_ferry(n, w, mode, &args, ticks)
                .await
                .with_context(|| format!("ferry run, {n} subscribers, {w} workers"))?;
            let per_core = r.side.pps_per_core / ferry.side.pps_per_core.max(1.0);
            print_further_run(
                n,
                &format!("--workers {w}"),
                &r.side,
                &format!("{per_core:.2}x of --workers {first}"),
            );
            worker_rows.push(serde_json::json!({
                "subscribers": n,
                "workers": w,
                "streams": w,
                "ferry": r.side,
                "pps_per_core_over_first": per_core,
                "pinned": args.pin && cpu_count() > w,
            }));
        }
    }
    let saturation = if args.saturate {
        Some(saturate(&args, ticks).await?)
    } else {
        None
    };
    if let Some(dir) = args.out.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let json = serde_json::json!({
        "adaptive": args.first_adaptive(),
        "rows": rows,
        "workers": worker_rows,
        "adaptive_rows": adaptive_rows,
        "saturation": saturation,
    });
    std::fs::write(&args.out, serde_json::to_string_pretty(&json)?)?;
    println!("wrote {}", args.out.display());
    Ok(())
}

/// The line of a further Ferry run at `n` subscribers beside the row's first (another
/// `--adaptive` mode or `--workers` count), `compared` saying how it compares.
fn print_further_run(n: usize, what: &str, side: &Side, compared: &str) {
    println!(
        "{n:>5} | {what}: {:.0} pps on {:.2} cores = {:.0} pps/core ({compared}); p50 {} µs p99 {} µs; missing {}",
        side.out_pps,
        side.cpu_cores,
        side.pps_per_core,
        side.latency_p50_us.unwrap_or(0),
        side.latency_p99_us.unwrap_or(0),
        side.missing
    );
}

/// One step of the saturation search.
#[derive(Debug, Clone, Serialize)]
struct SatStep {
    subscribers: usize,
    /// Packets the fan-out owes per second: the publisher's rate × subscribers.
    demand_pps: f64,
    /// Media packets the subscribers received per second.
    out_pps: f64,
    /// 1 − out / demand.
    undelivered: f64,
    latency_p99_us: Option<u64>,
    cpu_cores: f64,
    pps_per_core: f64,
    /// Within 0.1 % undelivered and 50 ms p99.
    sustained: bool,
    /// CPU the load generator used, in cores (Ferry runs).
    #[serde(skip_serializing_if = "Option::is_none")]
    generator_cores: Option<f64>,
}

impl SatStep {
    fn new(n: usize, publisher_pps: f64, side: &Side) -> Self {
        let demand_pps = publisher_pps * n as f64;
        let undelivered = (1.0 - side.out_pps / demand_pps.max(1.0)).max(0.0);
        let mut s = SatStep {
            subscribers: n,
            demand_pps,
            out_pps: side.out_pps,
            undelivered,
            latency_p99_us: side.latency_p99_us,
            cpu_cores: side.cpu_cores,
            pps_per_core: side.pps_per_core,
            sustained: false,
            generator_cores: None,
        };
        s.set_undelivered(undelivered);
        s
    }

    /// Judges the step by `undelivered` (a share) instead.
    fn set_undelivered(&mut self, undelivered: f64) {
        self.undelivered = undelivered;
        self.sustained = undelivered <= 0.001 && self.latency_p99_us.is_some_and(|p| p <= 50_000);
    }

    fn print(&self, who: &str) {
        println!(
            "{who:>6} {:>6} subs | demand {:>9.0} pps | out {:>9.0} pps | undelivered {:>6.2} % | p99 {:>8} µs | {:>4.2} cores | {:>9.0} pps/core | {}{}",
            self.subscribers,
            self.demand_pps,
            self.out_pps,
            self.undelivered * 100.0,
            self.latency_p99_us.unwrap_or(0),
            self.cpu_cores,
            self.pps_per_core,
            if self.sustained {
                "sustained"
            } else {
                "saturated"
            },
            self.generator_cores
                .map_or(String::new(), |g| format!(" | generator {g:.2} cores"))
        );
    }
}

/// Ferry at twice its saturation count.
#[derive(Debug, Clone, Serialize)]
struct OverloadRun {
    subscribers: usize,
    demand_pps: f64,
    out_pps: f64,
    latency_p50_us: Option<u64>,
    latency_p99_us: Option<u64>,
    latency_max_us: Option<u64>,
    viewers_decoding: usize,
    viewers_with_keyframe: usize,
    dropped_overload_packets: f64,
    shed_ratio: f64,
}

#[derive(Debug, Clone, Serialize)]
struct Saturation {
    pinned: bool,
    ferry_steps: Vec<SatStep>,
    raw_steps: Vec<SatStep>,
    /// The highest sustained step of each.
    ferry: Option<SatStep>,
    raw: Option<SatStep>,
    /// Ferry's sustained packets out per core over the raw relay's.
    ferry_over_raw: Option<f64>,
    overload: Option<OverloadRun>,
    /// The `--adaptive` mode of the Ferry search above.
    adaptive: bool,
    /// The other `--adaptive` modes' searches.
    adaptive_modes: Vec<AdaptiveMode>,
}

/// A saturation search of Ferry in another `--adaptive` mode.
#[derive(Debug, Clone, Serialize)]
struct AdaptiveMode {
    adaptive: bool,
    steps: Vec<SatStep>,
    /// Its highest sustained step.
    sustained: Option<SatStep>,
    /// Sustained packets out per core of the first mode over this one's.
    first_over_this: Option<f64>,
}

/// Raises the subscriber count ×1.5 a step until a step is not sustained (or the bound);
/// returns every step.
async fn search<F, Fut>(start: usize, max: usize, who: &str, mut step: F) -> Result<Vec<SatStep>>
where
    F: FnMut(usize) -> Fut,
    Fut: std::future::Future<Output = Result<SatStep>>,
{
    let mut steps = Vec::new();
    let mut n = start.max(1);
    loop {
        let s = step(n).await?;
        s.print(who);
        let go_on = s.sustained && n < max;
        steps.push(s);
        if !go_on {
            return Ok(steps);
        }
        n = ((n as f64 * 1.5).ceil() as usize).min(max);
    }
}

/// Narrows a search's boundary: halves the gap between its highest sustained step and the
/// next count that was not sustained until it is within a sixteenth (the ×1.5 steps alone
/// would leave the sustained figure up to a third short).
async fn refine<F, Fut>(steps: &mut Vec<SatStep>, who: &str, mut step: F) -> Result<()>
where
    F: FnMut(usize) -> Fut,
    Fut: std::future::Future<Output = Result<SatStep>>,
{
    loop {
        let Some(lo) = steps
            .iter()
            .filter(|s| s.sustained)
            .map(|s| s.subscribers)
            .max()
        else {
            return Ok(());
        };
        let Some(hi) = steps
            .iter()
            .filter(|s| !s.sustained && s.subscribers > lo)
            .map(|s| s.subscribers)
            .min()
        else {
            return Ok(());
        };
        if hi - lo <= (lo / 16).max(1) {
            return Ok(());
        }
        let s = step(lo + (hi - lo) / 2).await?;
        s.print(who);
        steps.push(s);
    }
}

/// `--scaling`: the node alone (sink subscribers) at each `--workers` count, searched to
/// saturation and refined; each count's highest sustained packets out over the first's.
async fn scaling(args: &ForwardArgs, ticks: f64) -> Result<()> {
    let start = args.subscribers.first().copied().unwrap_or(100);
    let cpus = cpu_count();
    println!(
        "node scaling over --workers {:?}: all subscribers but {} probes are sinks; {cpus} CPUs",
        args.workers, args.probes
    );
    let mut runs = Vec::new();
    let modes: Vec<(usize, bool)> = args
        .workers
        .iter()
        .flat_map(|&w| args.adaptive.iter().map(move |&a| (w, a)))
        .collect();
    for &(w, a) in &modes {
        let who = if args.adaptive.len() > 1 {
            format!("w{w}{}", if a { "" } else { "-fixed" })
        } else {
            format!("w{w}")
        };
        let run = |n: usize| async move {
            let r = measure_ferry(n, w, a, args, ticks).await?;
            println!(
                "{:>6} {n:>6} subs | p50 {} µs max {} µs | probes lost {:.3} % | shed {:.0} packets | handed to another core {:.0} datagrams/s",
                "",
                r.side.latency_p50_us.unwrap_or(0),
                r.side.latency_max_us.unwrap_or(0),
                r.seq_loss * 100.0,
                r.shed_in_window.unwrap_or(0.0),
                r.handed_off_pps
            );
            Ok(r.step(n))
        };
        let mut steps = search(start, args.max_subscribers, &who, run).await?;
        refine(&mut steps, &who, run).await?;
        let best = steps
            .iter()
            .filter(|s| s.sustained)
            .max_by_key(|s| s.subscribers)
            .cloned();
        match &best {
            Some(b) => println!(
                "--workers {w} --adaptive {a}: sustained {} subscribers, {:.0} pps out on {:.2} cores ({} pinned to {w} CPUs), generator {:.2} cores",
                b.subscribers,
                b.out_pps,
                b.cpu_cores,
                if args.pin && cpus > w { "node" } else { "not" },
                b.generator_cores.unwrap_or(0.0)
            ),
            None => println!("--workers {w} --adaptive {a}: no step sustained"),
        }
        runs.push((w, a, args.pin && cpus > w, steps, best));
    }
    let first = runs.first().and_then(|r| r.4.as_ref()).map(|b| b.out_pps);
    let mut json = Vec::new();
    for (w, a, pinned, steps, best) in &runs {
        let over_first = best
            .as_ref()
            .zip(first)
            .map(|(b, f)| b.out_pps / f.max(1.0));
        if let Some(r) = over_first {
            println!(
                "--workers {w} --adaptive {a}: {r:.2}x the sustained packets out of --workers {} --adaptive {}",
                args.workers[0],
                args.first_adaptive()
            );
        }
        json.push(serde_json::json!({
            "workers": w,
            "adaptive": a,
            "node_pinned": pinned,
            "steps": steps,
            "sustained": best,
            "out_over_first": over_first,
        }));
    }
    let out = args.out.with_extension("scaling.json");
    if let Some(dir) = out.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let json = serde_json::json!({ "cpus": cpus, "probes": args.probes, "runs": json });
    std::fs::write(&out, serde_json::to_string_pretty(&json)?)?;
    println!("wrote {}", out.display());
    Ok(())
}

async fn saturate(args: &ForwardArgs, ticks: f64) -> Result<Saturation> {
    let start = args.subscribers.first().copied().unwrap_or(50);
    println!(
        "saturation search (pinned: {})",
        args.pin && cpu_count() >= 2
    );
    let publisher = std::cell::Cell::new((0.0, 0.0));
    let mode = args.first_adaptive();
    let ferry_steps = search(start, args.max_subscribers, "ferry", |n| {
        let publisher = &publisher;
        async move {
            let r = measure_ferry(n, 1, mode, args, ticks).await?;
            publisher.set((r.publisher_pps, r.packet_bytes));
            Ok(r.step(n))
        }
    })
    .await?;
    // The other `--adaptive` modes, each searched the same way and compared at saturation.
    let mut modes = Vec::new();
    for &a in args.adaptive.iter().skip(1) {
        let who = format!("ferry --adaptive {a}");
        let steps = search(start, args.max_subscribers, &who, |n| async move {
            Ok(measure_ferry(n, 1, a, args, ticks).await?.step(n))
        })
        .await?;
        modes.push((a, steps));
    }
    let (pps, size) = publisher.get();
    let raw_steps = search(start, args.max_subscribers, "raw", |n| async move {
        let (side, loss) = measure_raw(n, pps, size as usize, args, ticks).await?;
        let mut s = SatStep::new(n, pps, &side);
        // As for Ferry: the holes, not the count against a frame-granular demand.
        s.set_undelivered(loss);
        Ok(s)
    })
    .await?;
    let best = |steps: &[SatStep]| steps.iter().rev().find(|s| s.sustained).cloned();
    let (ferry, raw) = (best(&ferry_steps), best(&raw_steps));
    let ferry_over_raw = ferry
        .as_ref()
        .zip(raw.as_ref())
        .map(|(f, r)| f.pps_per_core / r.pps_per_core.max(1.0));
    let overload = match &ferry {
        Some(f) => {
            let n = f.subscribers * 2;
            let r = measure_ferry(n, 1, mode, args, ticks).await?;
            let o = OverloadRun {
                subscribers: n,
                demand_pps: r.publisher_pps * n as f64,
                out_pps: r.side.out_pps,
                latency_p50_us: r.side.latency_p50_us,
                latency_p99_us: r.side.latency_p99_us,
                latency_max_us: r.side.latency_max_us,
                viewers_decoding: r.viewers_decoding,
                viewers_with_keyframe: r.viewers_with_keyframe,
                dropped_overload_packets: r.dropped_overload,
                shed_ratio: r.shed_ratio,
            };
            println!(
                "overload {n} subs (2× saturation) | demand {:.0} pps | out {:.0} pps | p50 {} µs p99 {} µs max {} µs | {}/{n} viewers decoding, {}/{n} got a keyframe | shed {:.0} packets, ratio {:.2}",
                o.demand_pps,
                o.out_pps,
                o.latency_p50_us.unwrap_or(0),
                o.latency_p99_us.unwrap_or(0),
                o.latency_max_us.unwrap_or(0),
                o.viewers_decoding,
                o.viewers_with_keyframe,
                o.dropped_overload_packets,
                o.shed_ratio
            );
            Some(o)
        }
        None => None,
    };
    if let Some(r) = ferry_over_raw {
        println!("at saturation: ferry / raw = {r:.2} (packets out per core)");
    }
    let adaptive_modes = modes
        .into_iter()
        .map(|(a, steps)| {
            let sustained = best(&steps);
            let first_over_this = ferry
                .as_ref()
                .zip(sustained.as_ref())
                .map(|(f, m)| f.pps_per_core / m.pps_per_core.max(1.0));
            if let Some(r) = first_over_this {
                println!(
                    "at saturation: ferry --adaptive {mode} / ferry --adaptive {a} = {r:.2} (packets out per core)"
                );
            }
            AdaptiveMode {
                adaptive: a,
                steps,
                sustained,
                first_over_this,
            }
        })
        .collect();
    Ok(Saturation {
        pinned: args.pin && cpu_count() >= 2,
        ferry_steps,
        raw_steps,
        ferry,
        raw,
        ferry_over_raw,
        overload,
        adaptive: mode,
        adaptive_modes,
    })
}

/// The raw baseline: datagram `SUB` subscribes its sender; every other
/// datagram goes to every subscriber. Same loop shape and batching as the node's driver
/// (`recvmmsg` in, `sendmmsg` out, [`ferry_sfu::udp::BATCH`] per call).
pub(crate) async fn relay(udp: SocketAddr) -> Result<()> {
    use ferry_sfu::udp::{BATCH, RecvBatch, send_each, try_recv_batch};
    // The same kernel buffers as the node's media socket.
    let socket = ferry_sfu::udp::bind(udp)?;
    println!("relay udp {}", socket.local_addr()?);
    let mut subs: Vec<SocketAddr> = Vec::new();
    let mut batch = RecvBatch::default();
    loop {
        socket.readable().await?;
        let Ok(k) = try_recv_batch(&socket, &mut batch) else {
            continue;
        };
        for i in 0..k {
            let (data, from) = batch.get_mut(i);
            if data == b"SUB" {
                if !subs.contains(&from) {
                    subs.push(from);
                }
                continue;
            }
            let data = &data[..];
            for chunk in subs.chunks(BATCH) {
                send_each(&socket, chunk, |s| (data, *s)).await;
            }
        }
    }
}
