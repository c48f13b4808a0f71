//! A simulated viewer link to test the estimator on, in virtual time.
//!
//! [`Link`] is a bottleneck: a capacity schedule, a drop-tail queue (bytes),
//! propagation delay, random loss, Gilbert–Elliott burst loss and constant
//! bit-rate cross traffic sharing the queue. [`run`] drives a
//! [`BandwidthEstimator`] over it the way the media node would: a sender
//! that forwards 30 fps video at the layer an allocator picks from the
//! estimate (probing before it switches up; each frame's packets spaced as
//! the publisher's pacer sent them, at 2.5× the layer's rate) plus
//! continuous audio, every
//! packet stamped with a transport-wide sequence number; a receiver that
//! returns transport-wide feedback every 50 ms after the return delay. It
//! reports what a benchmark compares across runs ([`RunReport`]).
//!
//! Deterministic: randomness comes from `ChaCha8Rng` seeded by the
//! scenario; the only clock reading is the base instant of a run, and only
//! differences from it matter.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

mod link;

pub use link::{GilbertElliott, Link, LinkConfig};
use link::{MTU, scheduled, unit};

use super::{BandwidthEstimator, BweConfig, PacketFeedback, SentPacket};
use crate::time::signed_us;
/// Simulation step.
const TICK: Duration = Duration::from_millis(1);
/// Estimates above this multiple of the available capacity count as overshoot.
const OVERSHOOT: f64 = 1.3;
/// Base of the receiver's clock (arbitrary: only differences may count).
const RECEIVER_CLOCK_BASE_US: i64 = 7_340_032_000_123;

/// A run: a link, a duration, and the sender's layers.
#[derive(Debug, Clone, PartialEq)]
pub struct Scenario {
    /// Short name for tables.
    pub name: String,
    /// The link.
    pub link: LinkConfig,
    /// Simulated time.
    pub duration: Duration,
    /// Video layers (bps), ascending, as an allocator chooses among.
    pub layers: Vec<u64>,
    /// Continuous audio (bps), 20 ms packets.
    pub audio_bps: u64,
    /// Feedback interval of the receiver.
    pub feedback_interval: Duration,
    /// The estimator's settings.
    pub bwe: BweConfig,
    /// Time after a change of the available capacity (and after the start)
    /// before samples count as steady state.
    pub steady_after: Duration,
}

impl Scenario {
    /// Defaults around `link`: layers 150 k / 500 k / 1.5 M / 2.5 M, 40 kbit/s
    /// audio, feedback every 50 ms, the default estimator, steady after 5 s.
    pub fn new(name: impl Into<String>, link: LinkConfig, duration: Duration) -> Self {
        Self {
            name: name.into(),
            link,
            duration,
            layers: vec![150_000, 500_000, 1_500_000, 2_500_000],
            audio_bps: 40_000,
            feedback_interval: Duration::from_millis(50),
            bwe: BweConfig::default(),
            steady_after: Duration::from_secs(5),
        }
    }

    /// 3 Mbit/s, down to 500 kbit/s at 20 s, back at 40 s; 70 s.
    pub fn step_down_up() -> Self {
        let mut link = LinkConfig::constant(3_000_000);
        link.capacity = vec![
            (Duration::ZERO, 3_000_000),
            (Duration::from_secs(20), 500_000),
            (Duration::from_secs(40), 3_000_000),
        ];
        link.queue_bytes = 60_000;
        Self::new("step 3M>500k>3M", link, Duration::from_secs(70))
    }

    /// 3 Mbit/s, down to 1 Mbit/s at 15 s behind a 2-second (at 1 Mbit/s)
    /// drop-tail buffer: only the delay signal can keep the queue short.
    pub fn deep_queue() -> Self {
        let mut link = LinkConfig::constant(3_000_000);
        link.capacity = vec![
            (Duration::ZERO, 3_000_000),
            (Duration::from_secs(15), 1_000_000),
        ];
        link.queue_bytes = 250_000;
        Self::new("deep queue 3M>1M", link, Duration::from_secs(45))
    }

    /// 3 Mbit/s with 2 % random loss.
    pub fn random_loss() -> Self {
        let mut link = LinkConfig::constant(3_000_000);
        link.random_loss = 0.02;
        Self::new("2% random loss", link, Duration::from_secs(40))
    }

    /// 3 Mbit/s with bursty loss (mean burst about 3 packets, ~1.6 % overall).
    pub fn burst_loss() -> Self {
        let mut link = LinkConfig::constant(3_000_000);
        link.burst_loss = Some(GilbertElliott {
            enter_bad: 0.005,
            leave_bad: 0.3,
            loss_bad: 1.0,
        });
        Self::new("burst loss", link, Duration::from_secs(40))
    }

    /// 4 Mbit/s; constant-rate cross traffic takes half of it from 15 s to 40 s.
    pub fn cross_traffic() -> Self {
        let mut link = LinkConfig::constant(4_000_000);
        link.cross_traffic = vec![
            (Duration::ZERO, 0),
            (Duration::from_secs(15), 2_000_000),
            (Duration::from_secs(40), 0),
        ];
        Self::new("cross traffic 1/2", link, Duration::from_secs(60))
    }

    /// 400 kbit/s behind a token-bucket shaper as `tc … tbf rate 400kbit
    /// burst 4000 latency 200ms` sets one up (the e2e tests' shaped viewer):
    /// a short burst passes at line rate, so a probe that fits in the
    /// bucket reads as reachable whatever the rate. Layers as a 960×540
    /// VP9 L3T3 stream's spatial layers, 35 kbit/s audio.
    pub fn token_bucket() -> Self {
        let mut link = LinkConfig::constant(400_000);
        link.burst_bytes = 4_000;
        link.queue_bytes = 14_000;
        let mut s = Self::new("token bucket 400k", link, Duration::from_secs(40));
        s.layers = vec![150_000, 300_000, 1_000_000];
        s.audio_bps = 35_000;
        s
    }

    /// All of the above.
    pub fn all() -> Vec<Self> {
        vec![
            Self::step_down_up(),
            Self::deep_queue(),
            Self::random_loss(),
            Self::burst_loss(),
            Self::cross_traffic(),
            Self::token_bucket(),
        ]
    }

    /// The same scenario with another seed.
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.link.seed = seed;
        self
    }

    /// The highest layer whose rate plus audio fits in `bps` (else the lowest).
    pub fn layer_for(&self, bps: u64) -> usize {
        self.layers
            .iter()
            .rposition(|l| l + self.audio_bps <= bps)
            .unwrap_or(0)
    }
}

/// A sample of a run, every 100 ms.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TracePoint {
    /// Simulated time.
    pub at: Duration,
    /// The estimate (bps).
    pub estimate_bps: u64,
    /// Capacity left for the viewer (bps).
    pub available_bps: u64,
    /// The layer sent.
    pub layer: usize,
    /// Queueing delay at the bottleneck (ms).
    pub queue_ms: f64,
}

/// What one run measured.
#[derive(Debug, Clone, PartialEq)]
pub struct RunReport {
    /// Scenario name.
    pub name: String,
    /// From the first drop of the available capacity until the estimate was
    /// at or below it; None when there was no drop or it never got there.
    pub settle_after_drop: Option<Duration>,
    /// From the first rise of the available capacity (after the first drop,
    /// if any) until the sender reached the highest layer that fits; None
    /// when there was no rise or it never got there.
    pub climb_after_rise: Option<Duration>,
    /// Steady state: mean of min(estimate, available) / available.
    pub utilisation: f64,
    /// Steady state: media delivered over what the best fitting layer plus
    /// audio would have delivered.
    pub delivered: f64,
    /// Share of our packets lost (queue drops and path loss).
    pub loss: f64,
    /// How often the sent layer changed.
    pub layer_switches: u32,
    /// Time the estimate spent above 1.3 × the available capacity.
    pub overshoot: Duration,
    /// Steady state: mean queueing delay of our packets (ms).
    pub queue_ms_mean: f64,
    /// Steady state: 95th percentile of it (ms).
    pub queue_ms_p95: f64,
    /// Highest queueing delay of any of our packets over the run, drops and
    /// rises included (ms).
    pub queue_ms_max: f64,
    /// Probe clusters the estimator asked padding for.
    pub probe_clusters: u32,
    /// Probe sessions that found their target reachable…
    pub probe_successes: u32,
    /// …and that did not.
    pub probe_failures: u32,
    /// Padding bytes sent for probes.
    pub padding_bytes: u64,
    /// The estimate at the end (bps).
    pub final_estimate_bps: u64,
    /// Samples every 100 ms.
    pub trace: Vec<TracePoint>,
}

/// A packet on its way to the receiver.
#[derive(Debug, Clone, Copy)]
struct InFlight {
    seq: u64,
    sent: Instant,
    arrival: Option<Instant>,
}

/// The sender, link and receiver of one run.
struct Sim<'a> {
    s: &'a Scenario,
    start: Instant,
    link: Link,
    bwe: BandwidthEstimator,
    rng: ChaCha8Rng,
    seq: u64,
    in_flight: VecDeque<InFlight>,
    /// Frame packets waiting for their (paced) time.
    media: VecDeque<(Instant, usize)>,
    feedback: VecDeque<(Instant, Duration, Vec<PacketFeedback>)>,
    sent: u64,
    lost: u64,
    media_delivered_bits: f64,
    queue_ms: Vec<f64>,
    queue_ms_max: f64,
    padding_bytes: u64,
    clusters: Vec<u32>,
}

impl Sim<'_> {
    fn steady(&self, now: Instant, changes: &[Duration]) -> bool {
        let t = now.saturating_duration_since(self.start);
        let last = changes.iter().filter(|c| **c <= t).max().copied();
        t >= self.s.steady_after && last.is_none_or(|c| t >= c + self.s.steady_after)
    }

    fn send(&mut self, now: Instant, size: usize, probe: Option<u32>, steady: bool) {
        self.seq += 1;
        self.bwe.on_sent(
            now,
            SentPacket {
                seq: self.seq,
                size,
                probe,
            },
        );
        self.sent += 1;
        let arrival = self.link.send(now, size);
        if let Some(a) = arrival {
            let queued = a
                .saturating_duration_since(now)
                .saturating_sub(self.s.link.delay)
                .as_secs_f64()
                * 1000.0;
            self.queue_ms_max = self.queue_ms_max.max(queued);
            if steady {
                self.queue_ms.push(queued);
                if probe.is_none() {
                    self.media_delivered_bits += size as f64 * 8.0;
                }
            }
        } else {
            self.lost += 1;
        }
        self.in_flight.push_back(InFlight {
            seq: self.seq,
            sent: now,
            arrival,
        });
    }

    fn send_bytes(&mut self, now: Instant, mut bytes: usize, probe: Option<u32>, steady: bool) {
        while bytes > 0 {
            let size = bytes.min(MTU);
            self.send(now, size, probe, steady);
            bytes -= size;
        }
    }

    /// The receiver's report at `now`: everything up to the last packet
    /// that has arrived (holes before it reported lost).
    fn report(&mut self, now: Instant) {
        let mut last = None;
        for (i, p) in self.in_flight.iter().enumerate() {
            match p.arrival {
                Some(a) if a <= now => last = Some(i),
                Some(_) => break,
                None => {}
            }
        }
        let Some(last) = last else {
            return;
        };
        let mut fb = Vec::with_capacity(last + 1);
        let mut rtt = Duration::ZERO;
        for p in self.in_flight.drain(..=last) {
            if let Some(a) = p.arrival {
                rtt = a.saturating_duration_since(p.sent) + self.s.link.return_delay;
            }
            fb.push(PacketFeedback {
                seq: p.seq,
                arrival_us: p
                    .arrival
                    .map(|a| RECEIVER_CLOCK_BASE_US + signed_us(a, self.start)),
            });
        }
        self.feedback
            .push_back((now + self.s.link.return_delay, rtt, fb));
    }
}

/// Runs a scenario from a fresh estimator.
pub fn run(s: &Scenario) -> RunReport {
    let start = Instant::now();
    let mut sim = Sim {
        s,
        start,
        link: Link::new(s.link.clone(), start),
        bwe: BandwidthEstimator::new(s.bwe.clone()),
        rng: ChaCha8Rng::seed_from_u64(s.link.seed ^ 0x5EED_F00D),
        seq: 0,
        in_flight: VecDeque::new(),
        media: VecDeque::new(),
        feedback: VecDeque::new(),
        sent: 0,
        lost: 0,
        media_delivered_bits: 0.0,
        queue_ms: Vec::new(),
        queue_ms_max: 0.0,
        padding_bytes: 0,
        clusters: Vec::new(),
    };
    let available = |t: Duration| {
        scheduled(&s.link.capacity, t).saturating_sub(scheduled(&s.link.cross_traffic, t))
    };
    let mut changes: Vec<Duration> = s
        .link
        .capacity
        .iter()
        .chain(&s.link.cross_traffic)
        .map(|e| e.0)
        .filter(|t| !t.is_zero())
        .collect();
    changes.sort();
    changes.dedup();
    let before = |t: Duration| available(t.saturating_sub(TICK));
    let drop = changes.iter().copied().find(|t| available(*t) < before(*t));
    let rise = changes
        .iter()
        .copied()
        .find(|t| available(*t) > before(*t) && drop.is_none_or(|d| *t > d));

    let frame_interval = Duration::from_nanos(1_000_000_000 / 30);
    let audio_interval = Duration::from_millis(20);
    let audio_bytes = (s.audio_bps / 8 / 50).max(1) as usize;
    let (mut next_frame, mut next_audio, mut next_report) =
        (start, start, start + s.feedback_interval);
    let mut layer = 0usize;
    let mut switches = 0u32;
    let (mut settle, mut climb) = (None, None);
    let mut overshoot = Duration::ZERO;
    let (mut util_sum, mut util_n) = (0.0, 0u32);
    let mut ideal_bits = 0.0;
    let mut trace = Vec::new();
    let (mut probe_successes, mut probe_failures) = (0u32, 0u32);
    let end = start + s.duration;
    let mut now = start;
    let mut tick = 0u64;
    while now < end {
        let t = now - start;
        let steady = sim.steady(now, &changes);
        while sim.feedback.front().is_some_and(|f| f.0 <= now) {
            if let Some((_, rtt, fb)) = sim.feedback.pop_front() {
                sim.bwe.handle_rtt(now, rtt);
                sim.bwe.handle_feedback(now, &fb);
            }
        }
        if sim.bwe.poll_timeout().is_some_and(|d| d <= now) {
            sim.bwe.handle_timeout(now);
        }
        let estimate = sim.bwe.estimate_bps();
        if now >= next_frame {
            // The allocator: the highest layer the estimate fits, probing
            // before a switch up.
            let fit = s.layer_for(estimate);
            if fit != layer {
                layer = fit;
                switches += 1;
            }
            if let Some(next) = s.layers.get(layer + 1) {
                sim.bwe.request_probe(now, next + s.audio_bps);
            }
            let layer_bps = s.layers.get(layer).copied().unwrap_or(0);
            let jitter = 0.85 + 0.3 * unit(&mut sim.rng);
            let mut bytes = (layer_bps as f64 / 30.0 / 8.0 * jitter) as usize;
            // The publisher's pacer spread the frame at 2.5× the layer's
            // rate; forwarding keeps that spacing.
            let gap = Duration::from_nanos(
                (MTU as u64 * 8 * 1_000_000_000) / (layer_bps.max(1) * 5 / 2).max(1),
            );
            let mut due = now;
            while bytes > 0 {
                let size = bytes.min(MTU);
                sim.media.push_back((due, size));
                bytes -= size;
                due += gap;
            }
            next_frame += frame_interval;
        }
        while let Some(&(due, size)) = sim.media.front() {
            if due > now {
                break;
            }
            sim.media.pop_front();
            sim.send(now, size, None, steady);
        }
        if now >= next_audio {
            sim.send(now, audio_bytes, None, steady);
            next_audio += audio_interval;
        }
        if let Some(o) = sim.bwe.take_probe_outcome() {
            if o.success {
                probe_successes += 1;
            } else {
                probe_failures += 1;
            }
        }
        while let Some(p) = sim.bwe.poll_probe(now) {
            if sim.clusters.last() != Some(&p.cluster) {
                sim.clusters.push(p.cluster);
            }
            sim.padding_bytes += p.bytes as u64;
            sim.send_bytes(now, p.bytes, Some(p.cluster), steady);
        }
        if now >= next_report {
            sim.report(now);
            next_report += s.feedback_interval;
        }

        let avail = available(t);
        let estimate = sim.bwe.estimate_bps();
        if estimate as f64 > OVERSHOOT * avail as f64 {
            overshoot += TICK;
        }
        if let Some(d) = drop
            && settle.is_none()
            && t >= d
            && estimate <= avail
        {
            settle = Some(t - d);
        }
        if let Some(r) = rise
            && climb.is_none()
            && t >= r
            && layer == s.layer_for(avail)
        {
            climb = Some(t - r);
        }
        if steady {
            let best = s.layers.get(s.layer_for(avail)).copied().unwrap_or(0) + s.audio_bps;
            ideal_bits += best as f64 * TICK.as_secs_f64();
        }
        if tick.is_multiple_of(100) {
            if steady && avail > 0 {
                util_sum += estimate.min(avail) as f64 / avail as f64;
                util_n += 1;
            }
            trace.push(TracePoint {
                at: t,
                estimate_bps: estimate,
                available_bps: avail,
                layer,
                queue_ms: sim.link.queue_delay(now).as_secs_f64() * 1000.0,
            });
        }
        tick += 1;
        now += TICK;
    }

    let mut q = std::mem::take(&mut sim.queue_ms);
    q.sort_by(f64::total_cmp);
    let queue_ms_mean = if q.is_empty() {
        0.0
    } else {
        q.iter().sum::<f64>() / q.len() as f64
    };
    let queue_ms_p95 = q
        .get((q.len() * 95 / 100).min(q.len().saturating_sub(1)))
        .copied()
        .unwrap_or(0.0);
    RunReport {
        name: s.name.clone(),
        settle_after_drop: settle,
        climb_after_rise: climb,
        utilisation: if util_n == 0 {
            0.0
        } else {
            util_sum / f64::from(util_n)
        },
        delivered: if ideal_bits > 0.0 {
            sim.media_delivered_bits / ideal_bits
        } else {
            0.0
        },
        loss: if sim.sent == 0 {
            0.0
        } else {
            sim.lost as f64 / sim.sent as f64
        },
        layer_switches: switches,
        overshoot,
        queue_ms_mean,
        queue_ms_p95,
        queue_ms_max: sim.queue_ms_max,
        probe_clusters: sim.clusters.len() as u32,
        probe_successes,
        probe_failures,
        padding_bytes: sim.padding_bytes,
        final_estimate_bps: sim.bwe.estimate_bps(),
        trace,
    }
}
