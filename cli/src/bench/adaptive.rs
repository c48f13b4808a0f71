//! `ferry bench adaptive`: per-viewer adaptation end to end, in the deterministic testbed
//! (virtual clock, seeded network: fast, and the same numbers on every machine).
//!
//! One node, one simulcast publisher (Chrome's 720p ladder: q 150 k, h 500 k, f 2.5 Mbit/s,
//! VP8 with three temporal layers each as Chrome sends them, plus Opus), N viewers each behind a link of its own whose capacity is drawn
//! log-uniformly from a spread, with a drop-tail queue of 200 ms of that capacity (as
//! `tc … tbf latency 200ms`) and 20 ms of delay, and a free viewer or two for reference. Three
//! phases: *steady* at the drawn capacities, *drop* to 30–50 % of them (drawn), *recovery* back
//! to the original. Every 100 ms of virtual time each viewer's stats are sampled: the layer it
//! got most packets of, its largest video arrival gap, its bytes and layer changes, and what
//! the node's estimator says its feedback acknowledged. The same world then runs again with
//! adaptation off (every viewer on the top layer, what the node did before issue 32) as the
//! baseline.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Result, ensure};
use ferry_proto::{NodeId, SessionId};
use ferry_sfu::codec::Codec;
use ferry_sfu::peer::{PeerStats, RecvStreamStats, SendStreamStats, SeqRanges, SimulcastConfig};
use ferry_sim::net::LinkConfig;
use ferry_sim::testbed::Testbed;
use serde::Serialize;

use super::report::write_json;

/// Options of `ferry bench adaptive`.
#[derive(clap::Args, Debug)]
pub struct AdaptiveArgs {
    /// Viewers behind capacity-limited links.
    #[arg(long, default_value_t = 20)]
    viewers: usize,
    /// Viewers on free links besides them (reference: they should play the top layer).
    #[arg(long, default_value_t = 1)]
    free: usize,
    /// Seed of the capacities, the drops and the simulated world.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Virtual seconds per phase (steady, drop, recovery).
    #[arg(long, default_value_t = 20.0)]
    duration: f64,
    /// Lowest link capacity drawn, in kbit/s.
    #[arg(long, default_value_t = 300)]
    min_kbit: u64,
    /// Highest link capacity drawn, in kbit/s.
    #[arg(long, default_value_t = 4000)]
    max_kbit: u64,
    /// Temporal layers of each of the publisher's VP8 encodings (1 to 3; Chrome sends 3).
    #[arg(long, default_value_t = 3)]
    temporal_layers: u8,
    /// Print this viewer's samples (layer, gap, acknowledged rate, estimate) to stderr.
    #[arg(long)]
    trace: Option<usize>,
    /// Where the JSON goes.
    #[arg(long, default_value = "target/bench/adaptive.json")]
    out: PathBuf,
}

const NODE: &str = "10.0.0.100:5000";
const PUBLISHER: &str = "10.0.0.1:4000";
/// Sampling period of the viewers' stats.
const TICK: Duration = Duration::from_millis(100);
/// How long the calibration run measures the layers' rates on the wire.
const CALIBRATION: Duration = Duration::from_secs(10);
/// An arrival gap of video longer than this is a freeze.
const FREEZE: Duration = Duration::from_millis(500);
/// Repairs of the last second may still be in flight at the end: loss is counted before it.
const REPAIR_TAIL: usize = 10;
/// The drop takes each capacity to this share of it, drawn uniformly.
const DROP_SHARE: (f64, f64) = (0.3, 0.5);
const PHASES: [&str; 3] = ["steady", "drop", "recovery"];

/// SplitMix64: the draws of the links, independent of any crate's generator (a seed gives the
/// same links in every build).
struct Draws(u64);

impl Draws {
    fn unit(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// One viewer's link: its capacity in the steady and recovery phases and in the drop
/// (`None`: a free link).
#[derive(Debug, Clone, Copy)]
struct Plan {
    addr: SocketAddr,
    capacity_bps: Option<u64>,
    drop_bps: Option<u64>,
}

/// A bottleneck of `bps` with a queue of 200 ms of it and 20 ms of delay.
fn bottleneck(bps: u64) -> LinkConfig {
    LinkConfig::delay(Duration::from_millis(20)).with_rate(bps, (bps / 8 / 5) as usize)
}

fn link(bps: Option<u64>) -> LinkConfig {
    bps.map_or(LinkConfig::delay(Duration::from_millis(20)), bottleneck)
}

/// What each layer and the audio take of a viewer's link, as measured (bit/s): what the
/// publisher's encoder sent of each, each packet counted with what it carries on the way to a
/// viewer besides its payload (RTP header, the node's header extensions, SRTP tag), as a free
/// viewer received them. A link counts exactly that (UDP payloads).
#[derive(Debug, Clone, Serialize)]
struct WireRates {
    /// Per layer, lowest first.
    layers: Vec<u64>,
    /// The Opus track.
    audio: u64,
    /// Bytes per media packet besides its payload, to a viewer.
    overhead_bytes: f64,
    /// The layers' nominal (encoder target) rates, for comparison.
    nominal: Vec<u64>,
    /// The ladder the node climbs, lowest first (as `SourceLayers::ladder` builds it: the
    /// lowest layer through all its temporal layers, the layers above from half the frame
    /// rate), each rung's rate its layer's share by the encoder's temporal split.
    rungs: Vec<RungRate>,
}

/// One rung of the ladder: a layer up to a temporal layer.
#[derive(Debug, Clone, Serialize)]
struct RungRate {
    /// `q`, `h`, `f` with all temporal layers; `q0`, `h1`, … up to one.
    name: String,
    layer: u8,
    /// `None`: all temporal layers.
    temporal: Option<u8>,
    bps: u64,
}

impl WireRates {
    fn new(
        layers: Vec<u64>,
        audio: u64,
        overhead_bytes: f64,
        nominal: Vec<u64>,
        shares: &[f64],
    ) -> Self {
        let n = shares.len();
        let mut rungs = Vec::new();
        for (l, &bps) in layers.iter().enumerate() {
            let from = if l == 0 { 0 } else { n.saturating_sub(2) };
            for (t, share) in shares.iter().enumerate().skip(from) {
                let all = t + 1 == n;
                let name = LAYER_NAMES.get(l).copied().unwrap_or("?");
                rungs.push(RungRate {
                    name: if all {
                        name.into()
                    } else {
                        format!("{name}{t}")
                    },
                    layer: l as u8,
                    temporal: (!all).then_some(t as u8),
                    bps: (bps as f64 * share) as u64,
                });
            }
        }
        WireRates {
            layers,
            audio,
            overhead_bytes,
            nominal,
            rungs,
        }
    }

    /// The highest rung that fits in `bps` with the audio (`None`: not even the lowest).
    fn best_fit(&self, bps: u64) -> Option<u8> {
        self.rungs
            .iter()
            .rposition(|r| r.bps + self.audio <= bps)
            .and_then(|l| u8::try_from(l).ok())
    }

    /// The rung of layer `layer` played up to temporal layer `temporal` (the first of the
    /// layer's rungs that takes it).
    fn rung_of(&self, layer: u8, temporal: u8) -> Option<u8> {
        self.rungs
            .iter()
            .position(|r| r.layer == layer && r.temporal.is_none_or(|t| t >= temporal))
            .and_then(|i| u8::try_from(i).ok())
    }

    fn rung_name(&self, rung: Option<u8>) -> &str {
        rung.and_then(|r| self.rungs.get(usize::from(r)))
            .map_or("-", |r| r.name.as_str())
    }
}

/// Measures [`WireRates`]: the publisher and one viewer on a free link, [`CALIBRATION`] long.
fn calibrate(seed: u64, simulcast: SimulcastConfig) -> Result<WireRates> {
    let node: SocketAddr = NODE.parse()?;
    let mut tb = Testbed::new(seed, LinkConfig::delay(Duration::from_millis(20)));
    tb.simulcast = Some(simulcast);
    tb.add_node(NodeId::new("node-a")?, node)?;
    let (publisher, _) = tb.publish(node, "cam", Codec::Vp8, PUBLISHER.parse()?)?;
    tb.run_for(Duration::from_secs(1));
    let (viewer, _) = tb.view(node, "cam", "10.0.9.1:4000".parse()?)?;
    tb.run_for(Duration::from_secs(2));
    let sent0 = tb.peers[publisher].stats().sent;
    let got0 = tb.peers[viewer].stats();
    tb.run_for(CALIBRATION);
    let sent = tb.peers[publisher].stats().sent;
    let got = tb.peers[viewer].stats();
    let payload: u64 = got.received.iter().map(|s| s.bytes).sum::<u64>()
        - got0.received.iter().map(|s| s.bytes).sum::<u64>();
    let datagrams = got.datagrams_received - got0.datagrams_received;
    let bytes = got.bytes_received - got0.bytes_received;
    ensure!(datagrams > 0, "calibration: the viewer received nothing");
    // RTCP datagrams (a few a second) count in as overhead: a slight overestimate.
    let overhead_bytes = bytes.saturating_sub(payload) as f64 / datagrams as f64;
    let secs = CALIBRATION.as_secs_f64();
    let rate = |rid: Option<&str>| -> u64 {
        let of = |v: &[SendStreamStats]| {
            v.iter()
                .filter(|s| s.rid.as_deref() == rid && (rid.is_some() || !s.codec.is_video()))
                .map(|s| (s.bytes, s.packets))
                .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1))
        };
        let (b1, p1) = of(&sent);
        let (b0, p0) = of(&sent0);
        let wire = (b1 - b0) as f64 + (p1 - p0) as f64 * overhead_bytes;
        (wire * 8.0 / secs) as u64
    };
    Ok(WireRates::new(
        simulcast
            .layers()
            .iter()
            .map(|l| rate(Some(l.rid)))
            .collect(),
        rate(None),
        overhead_bytes,
        simulcast
            .layers()
            .iter()
            .map(|l| u64::from(l.bitrate_bps))
            .collect(),
        simulcast.temporal_shares(),
    ))
}

/// One sample of one viewer, at the end of a tick.
#[derive(Debug, Clone, Copy, Default)]
struct Sample {
    /// The layer it got most video packets of during the tick (`None`: no video).
    layer: Option<u8>,
    /// VP8 frames it got per temporal layer so far.
    temporal_frames: [u64; 4],
    /// The same per simulcast layer index (a switch's sample holds frames of the layer left,
    /// played at its own temporal layers until the new one's keyframe, and of the one reached).
    layer_temporal_frames: [[u64; 4]; 4],
    /// Its largest video arrival gap that ended during the tick.
    gap: Duration,
    /// Payload bytes of every stream so far.
    media_bytes: u64,
    /// Media packets so far (unique), and arrivals of retransmissions (RTX, duplicates too).
    packets: u64,
    rtx_packets: u64,
    /// PLIs the viewer sent so far.
    plis: u64,
    /// Video layer changes so far.
    layer_changes: u64,
    /// What the node's estimator says the viewer acknowledged lately.
    acked_bps: Option<u64>,
    /// The node's estimate of the viewer's link.
    estimate_bps: Option<u64>,
}

fn video_of(s: &PeerStats) -> Option<&RecvStreamStats> {
    s.video().next()
}

/// Members missing, and members expected, of `r` up to `cut`.
fn loss_upto(r: &SeqRanges, cut: u64) -> (u64, u64) {
    let Some(first) = r.first() else {
        return (0, 0);
    };
    if cut < first {
        return (0, 0);
    }
    let missing = r
        .holes()
        .filter(|(a, _)| *a <= cut)
        .map(|(a, b)| b.min(cut) - a + 1)
        .sum();
    (missing, cut - first + 1)
}

/// What one viewer did over the run.
#[derive(Debug, Clone, Serialize)]
struct ViewerRow {
    viewer: usize,
    /// `None`: a free link.
    capacity_kbit: Option<u64>,
    drop_kbit: Option<u64>,
    /// The best rung that fits (an index into `WireRates::rungs`; `None`: none does, or a
    /// free link).
    fit: Option<u8>,
    fit_in_drop: Option<u8>,
    /// Seconds after the drop until it played a rung that fits and stayed on it (`None`:
    /// not by the end of the phase).
    settle_s: Option<f64>,
    /// Seconds after the recovery until it played the best rung that fits and stayed on it.
    climb_s: Option<f64>,
    /// The rung it played at the end of the steady phase, and the seconds after the recovery
    /// until it was back on that rung and stayed.
    steady_layer: Option<u8>,
    climb_back_s: Option<f64>,
    /// Video arrival gaps over 500 ms, and the longest gap (ms).
    freezes: u64,
    longest_gap_ms: f64,
    /// Last 10 s of the steady phase: payload received over the capacity; what the node's
    /// estimator saw acknowledged (every RTP datagram: media, retransmissions, probes) over
    /// the capacity; payload over the rate of the best fitting rung plus audio, on the wire.
    media_use: Option<f64>,
    total_use: Option<f64>,
    of_fit: Option<f64>,
    /// The node's estimate over the capacity (same window).
    estimate_use: Option<f64>,
    /// Packets lost after repair over packets sent (audio and video).
    loss: f64,
    /// The same, per phase.
    loss_by_phase: Vec<f64>,
    /// Video frames with every packet received over frames seen, over the run.
    frames_complete: f64,
    /// Retransmissions that arrived per unique media packet, and PLIs the viewer sent per
    /// second, over the last 10 s of each phase.
    rtx_per_packet: Vec<f64>,
    plis_per_s: Vec<f64>,
    /// Layer changes per minute over the last 10 s of each phase.
    flaps_per_min: f64,
    /// Share of the samples on each layer, per phase.
    layer_share: Vec<[f64; 3]>,
}

/// Everything of one run (adaptive or baseline).
#[derive(Debug, Clone, Serialize)]
struct ModeRow {
    mode: &'static str,
    /// Shaped viewers whose dropped link still carries the lowest rung (the aggregates).
    viewers: usize,
    /// Settle times of those whose layer did not fit at some point of the drop.
    settle: Spread,
    /// Climb times of those not on the best layer that fits at some point of the recovery.
    climb: Spread,
    /// Climb times back to the layer played at the end of the steady phase.
    climb_back: Spread,
    media_use_mean: f64,
    media_use_min: f64,
    total_use_mean: f64,
    total_use_min: f64,
    of_fit_mean: f64,
    of_fit_min: f64,
    frames_complete_mean: f64,
    frames_complete_min: f64,
    loss_max: f64,
    /// The highest loss of one viewer in one phase.
    loss_phase_max: f64,
    freezes: u64,
    viewers_with_freezes: usize,
    flaps_per_min_mean: f64,
    flaps_per_min_max: f64,
    /// Shaped viewers whose dropped link carries not even the lowest rung plus audio.
    below_lowest: usize,
    below_lowest_freezes: u64,
    below_lowest_loss_max: f64,
    /// Free viewers: share of their samples on the top layer, and their freezes.
    free_top_share: f64,
    free_freezes: u64,
    /// Keyframes the publisher sent per second on each layer (q, h, f), over the run.
    publisher_keyframes_per_s: Vec<f64>,
    /// Wall time of the run.
    seconds: f64,
    per_viewer: Vec<ViewerRow>,
}

/// Seconds over viewers: how many, p50, p95, max (`None`: never), and how many never.
#[derive(Debug, Clone, Serialize)]
struct Spread {
    n: usize,
    p50_s: Option<f64>,
    p95_s: Option<f64>,
    max_s: Option<f64>,
    never: usize,
}

impl Spread {
    fn of(v: &[Option<f64>]) -> Self {
        Spread {
            n: v.len(),
            p50_s: quantile(v, 0.5),
            p95_s: quantile(v, 0.95),
            max_s: quantile(v, 1.0),
            never: v.iter().filter(|x| x.is_none()).count(),
        }
    }

    fn show(&self) -> String {
        let (a, b, c) = (secs(self.p50_s), secs(self.p95_s), secs(self.max_s));
        format!("{} {a}/{b}/{c}", self.n)
    }
}

/// Nearest-rank quantile of seconds where `None` (never) ranks above everything.
fn quantile(v: &[Option<f64>], p: f64) -> Option<f64> {
    if v.is_empty() {
        return Some(0.0);
    }
    let mut s: Vec<f64> = v.iter().map(|x| x.unwrap_or(f64::INFINITY)).collect();
    s.sort_by(f64::total_cmp);
    let rank = ((p * s.len() as f64).ceil() as usize).clamp(1, s.len());
    Some(s[rank - 1]).filter(|x| x.is_finite())
}

fn mean(v: &[f64]) -> f64 {
    if v.is_empty() {
        0.0
    } else {
        v.iter().sum::<f64>() / v.len() as f64
    }
}

fn min(v: &[f64]) -> f64 {
    v.iter().copied().reduce(f64::min).unwrap_or(0.0)
}

fn max(v: &[f64]) -> f64 {
    v.iter().copied().reduce(f64::max).unwrap_or(0.0)
}

/// Seconds from the start of `phase` (samples `range`) until the layer of every later sample
/// of it satisfies `ok` (a sample without video keeps the layer before it).
fn time_to_stay(
    layers: &[Option<u8>],
    range: std::ops::Range<usize>,
    ok: impl Fn(u8) -> bool,
) -> Option<f64> {
    let start = range.start;
    let end = range.end;
    let mut current = layers[..start].iter().rev().find_map(|l| *l);
    let mut last_bad = None;
    for (i, l) in layers.iter().enumerate().take(end).skip(start) {
        current = l.or(current);
        if !current.is_some_and(&ok) {
            last_bad = Some(i);
        }
    }
    match last_bad {
        None => Some(0.0),
        Some(i) if i + 1 >= end => None,
        Some(i) => Some((i + 1 - start) as f64 * TICK.as_secs_f64()),
    }
}

/// Runs the world once; `adaptive: false` is the baseline.
fn run_mode(
    args: &AdaptiveArgs,
    plans: &[Plan],
    wire: &WireRates,
    adaptive: bool,
) -> Result<ModeRow> {
    let started = std::time::Instant::now();
    let node: SocketAddr = NODE.parse()?;
    let mut tb = Testbed::new(args.seed, LinkConfig::delay(Duration::from_millis(20)));
    tb.simulcast = Some(simulcast_of(args));
    tb.add_node(NodeId::new("node-a")?, node)?;
    tb.node(node).set_adaptive(adaptive);
    let (publisher, _) = tb.publish(node, "cam", Codec::Vp8, PUBLISHER.parse()?)?;
    tb.run_for(Duration::from_secs(1));
    let mut viewers: Vec<(usize, SessionId)> = Vec::new();
    for p in plans {
        tb.set_link_to(p.addr, link(p.capacity_bps));
        viewers.push(tb.view(node, "cam", p.addr)?);
    }
    let per_phase = ((args.duration / TICK.as_secs_f64()).round() as usize).max(2);
    // The measured tail of each phase: its last 10 s (its last half when shorter).
    let window = per_phase.div_ceil(2).min(100);
    let total = per_phase * PHASES.len();
    let mut samples: Vec<Vec<Sample>> = vec![Vec::with_capacity(total); plans.len()];
    let mut last_layer_packets: Vec<Vec<u64>> = vec![Vec::new(); plans.len()];
    // Per viewer and phase: the highest sequence number of each stream at the phase's end.
    let mut cuts: Vec<Vec<Vec<(u32, u64)>>> = vec![Vec::new(); plans.len()];
    for (phase, _) in PHASES.iter().enumerate() {
        if phase > 0 {
            for p in plans {
                let bps = if phase == 1 {
                    p.drop_bps
                } else {
                    p.capacity_bps
                };
                tb.set_link_to(p.addr, link(bps));
            }
        }
        for tick in 0..per_phase {
            tb.run_for(TICK);
            let now = tb.now();
            for (v, (peer, session)) in viewers.iter().enumerate() {
                let st = tb.peers[*peer].stats();
                tb.peers[*peer].reset_arrival_gaps();
                let video = video_of(&st);
                let packets = video.map(|s| s.layer_packets.clone()).unwrap_or_default();
                let got: Vec<u64> = packets
                    .iter()
                    .enumerate()
                    .map(|(l, n)| n - last_layer_packets[v].get(l).copied().unwrap_or(0))
                    .collect();
                let layer = (0..got.len())
                    .filter(|&l| got[l] > 0)
                    .max_by_key(|&l| got[l])
                    .and_then(|l| u8::try_from(l).ok());
                last_layer_packets[v] = packets;
                let adaptation = tb
                    .node(node)
                    .session_view(now, session)
                    .ok()
                    .and_then(|s| s.adaptation);
                samples[v].push(Sample {
                    layer,
                    temporal_frames: video.map_or([0; 4], |s| s.temporal_frames),
                    layer_temporal_frames: video.map_or([[0; 4]; 4], |s| {
                        let mut per = [[0; 4]; 4];
                        for (p, f) in per.iter_mut().zip(&s.layer_temporal_frames) {
                            *p = *f;
                        }
                        per
                    }),
                    gap: video.map_or(Duration::ZERO, |s| s.max_arrival_gap),
                    media_bytes: st.received.iter().map(|s| s.bytes).sum(),
                    packets: st.received.iter().map(|s| s.packets).sum(),
                    rtx_packets: st.received.iter().map(|s| s.rtx_packets).sum(),
                    plis: st.plis_sent,
                    layer_changes: video.map_or(0, |s| s.layer_changes),
                    acked_bps: adaptation.as_ref().and_then(|a| a.acked_bps),
                    estimate_bps: adaptation.as_ref().and_then(|a| a.estimate_bps),
                });
                // The last phase ends a second early: its last repairs may still be on the way.
                let last = phase == PHASES.len() - 1;
                if tick
                    + 1
                    + if last {
                        REPAIR_TAIL.min(per_phase / 2)
                    } else {
                        0
                    }
                    == per_phase
                {
                    cuts[v].push(
                        st.received
                            .iter()
                            .filter_map(|s| Some((s.ssrc, s.received.last()?)))
                            .collect(),
                    );
                }
                if args.trace == Some(v) {
                    let x = samples[v].last().copied().unwrap_or_default();
                    // The node's side: what it allocated, what a step up wants, the video
                    // track's target (layer index, temporal layer), the estimator's state, the
                    // loss it measured and the probe packets sent so far.
                    let node_side = adaptation.as_ref().map_or(String::new(), |a| {
                        let video = a.tracks.iter().find(|t| t.kind == "video");
                        format!(
                            " allocated {:>5} wanted {:>5} target {:?}/{:?} {} loss {:.3} probes {}",
                            a.allocated_bps / 1000,
                            a.wanted_bps.unwrap_or(0) / 1000,
                            video.and_then(|t| t.target),
                            video.and_then(|t| t.temporal_target),
                            a.congestion.unwrap_or("-"),
                            a.loss.unwrap_or(0.0),
                            a.probe_packets,
                        )
                    });
                    eprintln!(
                        "{} t {:>5.1} {:<8} layer {} gap {:>4} ms acked {:>5} estimate {:>5} kbit/s{node_side}",
                        if adaptive { "adaptive" } else { "baseline" },
                        (phase * per_phase + tick + 1) as f64 * TICK.as_secs_f64(),
                        PHASES[phase],
                        wire.rung_name(rung_at(wire, &samples[v], samples[v].len() - 1)),
                        x.gap.as_millis(),
                        x.acked_bps.unwrap_or(0) / 1000,
                        x.estimate_bps.unwrap_or(0) / 1000,
                    );
                }
            }
        }
    }
    let top = u8::try_from(wire.rungs.len().saturating_sub(1))?;
    let mut rows = Vec::new();
    for (v, (p, (peer, _))) in plans.iter().zip(&viewers).enumerate() {
        let s = &samples[v];
        let layers: Vec<Option<u8>> = s.iter().map(|x| x.layer).collect();
        let rungs: Vec<Option<u8>> = (0..s.len()).map(|i| rung_at(wire, s, i)).collect();
        let range = |phase: usize| phase * per_phase..(phase + 1) * per_phase;
        let fit = p.capacity_bps.and_then(|c| wire.best_fit(c));
        let fit_in_drop = p.drop_bps.and_then(|c| wire.best_fit(c));
        // Free links: the top layer fits everywhere.
        let (want_drop, want_back) = match p.capacity_bps {
            None => (top, top),
            Some(_) => (fit_in_drop.unwrap_or(0), fit.unwrap_or(0)),
        };
        let settle_s = time_to_stay(&rungs, range(1), |l| l <= want_drop);
        let climb_s = time_to_stay(&rungs, range(2), |l| l == want_back);
        let steady_layer = rungs[range(0)].iter().rev().find_map(|l| *l);
        let climb_back_s = time_to_stay(&rungs, range(2), |l| Some(l) == steady_layer);
        let freezes = s.iter().filter(|x| x.gap > FREEZE).count() as u64;
        let longest_gap = s.iter().map(|x| x.gap).max().unwrap_or_default();
        let window_s = window as f64 * TICK.as_secs_f64();
        // Each phase's measured tail: its first and last sample.
        let tail = |phase: usize| {
            let end = (phase + 1) * per_phase - 1;
            (&s[end - window], &s[end])
        };
        let per_tail = |f: &dyn Fn(&Sample, &Sample) -> f64| -> Vec<f64> {
            (0..PHASES.len())
                .map(|phase| {
                    let (a, b) = tail(phase);
                    f(a, b)
                })
                .collect()
        };
        let (w0, w1) = tail(0);
        let media_bps = (w1.media_bytes - w0.media_bytes) as f64 * 8.0 / window_s;
        // The mean over the steady tail of what the node's estimator reports, over the capacity.
        let steady_mean = |f: fn(&Sample) -> Option<u64>| {
            let v: Vec<f64> = s[per_phase - window..per_phase]
                .iter()
                .map(|x| f(x).unwrap_or(0) as f64)
                .collect();
            p.capacity_bps.map(|c| mean(&v) / c as f64)
        };
        let rtx_per_packet = per_tail(&|a, b| {
            (b.rtx_packets - a.rtx_packets) as f64 / (b.packets - a.packets).max(1) as f64
        });
        let plis_per_s = per_tail(&|a, b| (b.plis - a.plis) as f64 / window_s);
        let changes: f64 = per_tail(&|a, b| (b.layer_changes - a.layer_changes) as f64)
            .iter()
            .sum();
        let flaps_per_min = changes / (PHASES.len() as f64 * window_s / 60.0);
        let final_stats = tb.peers[*peer].stats();
        // (missing, expected) up to each phase's cut, then per phase.
        let upto: Vec<(u64, u64)> = cuts[v]
            .iter()
            .map(|cut| {
                final_stats
                    .received
                    .iter()
                    .filter_map(|st| {
                        let (_, c) = cut.iter().find(|(ssrc, _)| *ssrc == st.ssrc)?;
                        Some(loss_upto(&st.received, *c))
                    })
                    .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1))
            })
            .collect();
        let ratio = |(m, e): (u64, u64)| if e == 0 { 0.0 } else { m as f64 / e as f64 };
        let loss = ratio(upto.last().copied().unwrap_or_default());
        let loss_by_phase: Vec<f64> = upto
            .iter()
            .enumerate()
            .map(|(i, &(m, e))| {
                let (m0, e0) = if i == 0 { (0, 0) } else { upto[i - 1] };
                ratio((m.saturating_sub(m0), e.saturating_sub(e0)))
            })
            .collect();
        let layer_share = (0..PHASES.len())
            .map(|phase| {
                let mut share = [0.0; 3];
                for l in layers[range(phase)].iter().flatten() {
                    if let Some(x) = share.get_mut(usize::from(*l)) {
                        *x += 1.0 / per_phase as f64;
                    }
                }
                share
            })
            .collect();
        rows.push(ViewerRow {
            viewer: v,
            capacity_kbit: p.capacity_bps.map(|c| c / 1000),
            drop_kbit: p.drop_bps.map(|c| c / 1000),
            fit,
            fit_in_drop,
            settle_s,
            climb_s,
            steady_layer,
            climb_back_s,
            freezes,
            longest_gap_ms: longest_gap.as_secs_f64() * 1e3,
            media_use: p.capacity_bps.map(|c| media_bps / c as f64),
            total_use: steady_mean(|x| x.acked_bps),
            of_fit: fit
                .and_then(|l| wire.rungs.get(usize::from(l)))
                .map(|r| media_bps / (r.bps + wire.audio) as f64),
            estimate_use: steady_mean(|x| x.estimate_bps),
            loss,
            loss_by_phase,
            frames_complete: video_of(&final_stats).map_or(0.0, |v| {
                v.frames_completed as f64 / v.frames_seen.max(1) as f64
            }),
            rtx_per_packet,
            plis_per_s,
            flaps_per_min,
            layer_share,
        });
    }
    let mut row = aggregate(
        if adaptive { "adaptive" } else { "baseline" },
        rows,
        started.elapsed().as_secs_f64(),
    );
    // Every viewer's PLI that reaches the publisher is a keyframe on that layer for all.
    let virtual_s = (total as f64 + 10.0) * TICK.as_secs_f64();
    row.publisher_keyframes_per_s = tb.peers[publisher]
        .stats()
        .sent
        .iter()
        .filter(|s| s.rid.is_some())
        .map(|s| s.keyframes as f64 / virtual_s)
        .collect();
    Ok(row)
}

fn aggregate(mode: &'static str, rows: Vec<ViewerRow>, seconds: f64) -> ModeRow {
    let shaped = |r: &&ViewerRow| r.capacity_kbit.is_some();
    let counted: Vec<&ViewerRow> = rows
        .iter()
        .filter(shaped)
        .filter(|r| r.fit_in_drop.is_some())
        .collect();
    let below: Vec<&ViewerRow> = rows
        .iter()
        .filter(shaped)
        .filter(|r| r.fit_in_drop.is_none())
        .collect();
    let free: Vec<&ViewerRow> = rows.iter().filter(|r| r.capacity_kbit.is_none()).collect();
    // Over the viewers that had to move (a viewer already on a fitting layer settles at 0).
    let spread = |f: fn(&ViewerRow) -> Option<f64>| {
        let moved: Vec<Option<f64>> = counted
            .iter()
            .map(|r| f(r))
            .filter(|x| *x != Some(0.0))
            .collect();
        Spread::of(&moved)
    };
    let complete: Vec<f64> = counted.iter().map(|r| r.frames_complete).collect();
    let of = |f: fn(&ViewerRow) -> Option<f64>| -> Vec<f64> {
        counted.iter().filter_map(|r| f(r)).collect()
    };
    let media = of(|r| r.media_use);
    let total = of(|r| r.total_use);
    let fit = of(|r| r.of_fit);
    let flaps: Vec<f64> = counted.iter().map(|r| r.flaps_per_min).collect();
    let free_top: Vec<f64> = free
        .iter()
        .map(|r| {
            r.layer_share.iter().map(|s| s[2]).sum::<f64>() / r.layer_share.len().max(1) as f64
        })
        .collect();
    ModeRow {
        mode,
        viewers: counted.len(),
        settle: spread(|r| r.settle_s),
        climb: spread(|r| r.climb_s),
        climb_back: spread(|r| r.climb_back_s),
        media_use_mean: mean(&media),
        media_use_min: min(&media),
        total_use_mean: mean(&total),
        total_use_min: min(&total),
        of_fit_mean: mean(&fit),
        of_fit_min: min(&fit),
        frames_complete_mean: mean(&complete),
        frames_complete_min: min(&complete),
        loss_phase_max: max(&counted
            .iter()
            .flat_map(|r| r.loss_by_phase.iter().copied())
            .collect::<Vec<_>>()),
        loss_max: max(&counted.iter().map(|r| r.loss).collect::<Vec<_>>()),
        freezes: counted.iter().map(|r| r.freezes).sum(),
        viewers_with_freezes: counted.iter().filter(|r| r.freezes > 0).count(),
        flaps_per_min_mean: mean(&flaps),
        flaps_per_min_max: max(&flaps),
        below_lowest: below.len(),
        below_lowest_freezes: below.iter().map(|r| r.freezes).sum(),
        below_lowest_loss_max: max(&below.iter().map(|r| r.loss).collect::<Vec<_>>()),
        free_top_share: mean(&free_top),
        free_freezes: free.iter().map(|r| r.freezes).sum(),
        publisher_keyframes_per_s: Vec::new(),
        seconds,
        per_viewer: rows,
    }
}

fn secs(x: Option<f64>) -> String {
    x.map_or_else(|| "never".into(), |s| format!("{s:.1}"))
}

fn pct(x: f64) -> String {
    format!("{:.0}%", x * 100.0)
}

const LAYER_NAMES: [&str; 3] = ["q", "h", "f"];

/// How many ticks back a sample looks for the temporal layers a viewer got (T0 comes every
/// 133 ms at 30 fps with three layers).
const TEMPORAL_LOOKBACK: usize = 3;

/// The rung sample `i` played: its layer, up to the highest temporal layer whose frames came
/// over the last [`TEMPORAL_LOOKBACK`] ticks on that layer (the frames of the layer it left
/// do not count: a sample's temporal frames are those of its layer).
fn rung_at(wire: &WireRates, s: &[Sample], i: usize) -> Option<u8> {
    let x = s.get(i)?;
    let layer = x.layer?;
    let mut from = i;
    while from > 0 && i - from + 1 < TEMPORAL_LOOKBACK && s[from - 1].layer == x.layer {
        from -= 1;
    }
    // Of its layer where the peer tells the layers apart.
    let frames = |y: &Sample| match y.layer_temporal_frames.get(usize::from(layer)) {
        Some(f)
            if y.layer_temporal_frames
                .iter()
                .any(|l| l.iter().any(|n| *n > 0)) =>
        {
            *f
        }
        _ => y.temporal_frames,
    };
    let before = match from.checked_sub(1) {
        Some(b) => frames(&s[b]),
        None => [0; 4],
    };
    let now = frames(x);
    let tid = (0..4u8)
        .rev()
        .find(|&t| now[usize::from(t)] > before[usize::from(t)])
        .unwrap_or(0);
    wire.rung_of(layer, tid)
}

/// The publisher's encodings.
fn simulcast_of(args: &AdaptiveArgs) -> SimulcastConfig {
    SimulcastConfig::chrome_720p().with_temporal_layers(args.temporal_layers)
}

/// One line of right-aligned cells.
fn line(widths: &[usize], cells: &[String]) {
    let out: Vec<String> = cells
        .iter()
        .zip(widths)
        .map(|(c, w)| format!("{c:>w$}"))
        .collect();
    println!("{}", out.join(" "));
}

/// A header: its cells separated by `|`.
fn cells(header: &str) -> Vec<String> {
    header.split('|').map(str::to_owned).collect()
}

/// The adaptive run, viewer by viewer.
fn print_viewers(r: &ModeRow, wire: &WireRates) {
    let w = [6, 7, 6, 3, 4, 6, 6, 6, 6, 4, 7, 5];
    line(
        &w,
        &cells("viewer|kbit/s|drop|fit|drop|settle|climb|media|total|frz|loss|flaps"),
    );
    let kbit = |c: Option<u64>| c.map_or_else(|| "free".into(), |c| c.to_string());
    for v in &r.per_viewer {
        line(
            &w,
            &[
                v.viewer.to_string(),
                kbit(v.capacity_kbit),
                kbit(v.drop_kbit),
                wire.rung_name(v.fit).into(),
                wire.rung_name(v.fit_in_drop).into(),
                secs(v.settle_s),
                secs(v.climb_s),
                v.media_use.map_or_else(|| "-".into(), pct),
                v.total_use.map_or_else(|| "-".into(), pct),
                v.freezes.to_string(),
                format!("{:.2}%", v.loss * 100.0),
                format!("{:.1}", v.flaps_per_min),
            ],
        );
    }
}

/// Adaptive against the baseline: the goals, then what explains them.
fn print_modes(rows: &[ModeRow]) {
    let w = [9, 3, 20, 20, 4, 7, 9, 9, 9];
    line(
        &w,
        &cells(
            "mode|n|settle n p50/95/max|climb n p50/95/max|frz|loss|flaps/min|media use|total use",
        ),
    );
    for r in rows {
        line(
            &w,
            &[
                r.mode.into(),
                r.viewers.to_string(),
                r.settle.show(),
                r.climb.show(),
                r.freezes.to_string(),
                format!("{:.2}%", r.loss_max * 100.0),
                format!("{:.1}/{:.1}", r.flaps_per_min_mean, r.flaps_per_min_max),
                format!("{}/{}", pct(r.media_use_mean), pct(r.media_use_min)),
                format!("{}/{}", pct(r.total_use_mean), pct(r.total_use_min)),
            ],
        );
    }
    let w = [9, 22, 10, 9, 9, 4, 11, 6, 14, 7];
    line(
        &w,
        &cells(
            "mode|climb back n p50/95/max|loss phase|of fit|complete|<low|<low frz/loss|free f|keyframes/s|wall s",
        ),
    );
    for r in rows {
        let kf: Vec<String> = r
            .publisher_keyframes_per_s
            .iter()
            .map(|k| format!("{k:.1}"))
            .collect();
        line(
            &w,
            &[
                r.mode.into(),
                r.climb_back.show(),
                format!("{:.2}%", r.loss_phase_max * 100.0),
                format!("{}/{}", pct(r.of_fit_mean), pct(r.of_fit_min)),
                format!(
                    "{}/{}",
                    pct(r.frames_complete_mean),
                    pct(r.frames_complete_min)
                ),
                r.below_lowest.to_string(),
                format!(
                    "{}/{:.1}%",
                    r.below_lowest_freezes,
                    r.below_lowest_loss_max * 100.0
                ),
                pct(r.free_top_share),
                kf.join("/"),
                format!("{:.1}", r.seconds),
            ],
        );
    }
}

pub fn adaptive(args: AdaptiveArgs) -> Result<()> {
    ensure!(args.viewers + args.free > 0, "no viewers");
    ensure!(args.duration >= 1.0, "--duration must be at least 1 s");
    ensure!(
        (1..=3).contains(&args.temporal_layers),
        "--temporal-layers must be 1, 2 or 3"
    );
    ensure!(
        args.min_kbit > 0 && args.min_kbit <= args.max_kbit,
        "--min-kbit must be positive and at most --max-kbit"
    );
    let mut draws = Draws(args.seed ^ 0xada9_717e);
    let (lo, hi) = ((args.min_kbit * 1000) as f64, (args.max_kbit * 1000) as f64);
    let mut plans = Vec::new();
    for i in 0..args.viewers + args.free {
        let addr = SocketAddr::from(([10, 0, 1 + (i / 250) as u8, 1 + (i % 250) as u8], 4000));
        if i >= args.viewers {
            plans.push(Plan {
                addr,
                capacity_bps: None,
                drop_bps: None,
            });
            continue;
        }
        let capacity = (lo.ln() + draws.unit() * (hi.ln() - lo.ln())).exp();
        let share = DROP_SHARE.0 + draws.unit() * (DROP_SHARE.1 - DROP_SHARE.0);
        plans.push(Plan {
            addr,
            capacity_bps: Some(capacity as u64),
            drop_bps: Some((capacity * share) as u64),
        });
    }
    println!(
        "seed {}: {} viewers on links of {}–{} kbit/s (log-uniform, 200 ms queue, 20 ms delay), {} free; \
         phases of {} s: steady, drop to 30–50 %, recovery; virtual time",
        args.seed, args.viewers, args.min_kbit, args.max_kbit, args.free, args.duration
    );
    let wire = calibrate(args.seed, simulcast_of(&args))?;
    let kbit = |v: &[u64]| {
        v.iter()
            .map(|b| (b / 1000).to_string())
            .collect::<Vec<_>>()
            .join(" / ")
    };
    println!(
        "layers q / h / f on the wire to a viewer (measured, {:.0} B a packet besides the payload): \
         {} kbit/s (nominal {}), audio {} kbit/s",
        wire.overhead_bytes,
        kbit(&wire.layers),
        kbit(&wire.nominal),
        wire.audio / 1000
    );
    println!(
        "the ladder ({} temporal layers): {}",
        args.temporal_layers,
        wire.rungs
            .iter()
            .map(|r| format!("{} {}", r.name, r.bps / 1000))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let mut rows = Vec::new();
    for adaptive in [true, false] {
        rows.push(run_mode(&args, &plans, &wire, adaptive)?);
    }
    if let Some(r) = rows.first() {
        print_viewers(r, &wire);
    }
    print_modes(&rows);
    let json = serde_json::json!({
        "seed": args.seed,
        "temporal_layers": args.temporal_layers,
        "viewers": args.viewers,
        "free": args.free,
        "phase_s": args.duration,
        "capacity_kbit": [args.min_kbit, args.max_kbit],
        "drop_share": [DROP_SHARE.0, DROP_SHARE.1],
        "wire_rates": wire,
        "rows": rows,
    });
    write_json(&args.out, &json)
}
