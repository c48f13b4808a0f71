//! The simulated bottleneck [`Link`]: a capacity schedule, a drop-tail queue (bytes), an
//! optional token bucket in front of it (`tc … tbf`), propagation delay, random loss,
//! Gilbert–Elliott burst loss and constant bit-rate cross traffic sharing the queue. It knows
//! nothing of the estimator (the probe tests send clusters through it too).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Largest packet the sender builds (bytes on the wire).
pub(super) const MTU: usize = 1200;
/// A uniform draw in [0, 1).
pub(super) fn unit(rng: &mut ChaCha8Rng) -> f64 {
    (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64
}

/// Gilbert–Elliott burst loss: a good and a bad state, switched per packet.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GilbertElliott {
    /// Chance per packet to go from good to bad.
    pub enter_bad: f64,
    /// Chance per packet to go from bad to good (mean burst 1 / this).
    pub leave_bad: f64,
    /// Loss in the bad state.
    pub loss_bad: f64,
}

/// A bottleneck's description.
#[derive(Debug, Clone, PartialEq)]
pub struct LinkConfig {
    /// Capacity schedule: from each time on, that many bit/s (sorted; the
    /// first entry also holds before its time).
    pub capacity: Vec<(Duration, u64)>,
    /// Drop-tail queue limit in bytes.
    pub queue_bytes: usize,
    /// Token-bucket burst in bytes (a `tc … tbf` shaper's `burst`, a
    /// policer's allowance): while the bucket holds tokens, packets pass at
    /// line rate; it refills at the capacity. 0: a plain serialising link.
    pub burst_bytes: usize,
    /// One-way propagation delay towards the viewer.
    pub delay: Duration,
    /// Propagation delay of the feedback path.
    pub return_delay: Duration,
    /// Chance that a packet is lost after the bottleneck.
    pub random_loss: f64,
    /// Burst loss after the bottleneck.
    pub burst_loss: Option<GilbertElliott>,
    /// Constant bit-rate cross traffic through the same queue (schedule as
    /// for `capacity`; empty for none).
    pub cross_traffic: Vec<(Duration, u64)>,
    /// Seed of the link's (and the sender's) randomness.
    pub seed: u64,
}

impl LinkConfig {
    /// A clean link of constant capacity: 25 ms each way, a queue of about
    /// 250 ms at that rate.
    pub fn constant(bps: u64) -> Self {
        Self {
            capacity: vec![(Duration::ZERO, bps)],
            queue_bytes: (bps / 8 / 4) as usize,
            burst_bytes: 0,
            delay: Duration::from_millis(25),
            return_delay: Duration::from_millis(25),
            random_loss: 0.0,
            burst_loss: None,
            cross_traffic: Vec::new(),
            seed: 1,
        }
    }
}

/// The value of a schedule at `at`.
pub(super) fn scheduled(schedule: &[(Duration, u64)], at: Duration) -> u64 {
    let mut value = schedule.first().map_or(0, |e| e.1);
    for &(from, v) in schedule {
        if from <= at {
            value = v;
        }
    }
    value
}

/// The simulated bottleneck.
#[derive(Debug, Clone)]
pub struct Link {
    cfg: LinkConfig,
    start: Instant,
    rng: ChaCha8Rng,
    /// Departure time and size of each queued packet.
    queue: VecDeque<(Instant, usize)>,
    queued_bytes: usize,
    busy_until: Instant,
    /// Tokens in the bucket at `busy_until` (bytes).
    tokens: f64,
    bad: bool,
    next_cross: Instant,
}

impl Link {
    /// A link whose schedules count from `start`.
    pub fn new(cfg: LinkConfig, start: Instant) -> Self {
        Self {
            rng: ChaCha8Rng::seed_from_u64(cfg.seed),
            cfg,
            start,
            queue: VecDeque::new(),
            queued_bytes: 0,
            busy_until: start,
            tokens: 0.0,
            bad: false,
            next_cross: start,
        }
    }

    fn since_start(&self, now: Instant) -> Duration {
        now.saturating_duration_since(self.start)
    }

    /// Capacity at `now` (bps).
    pub fn capacity_at(&self, now: Instant) -> u64 {
        scheduled(&self.cfg.capacity, self.since_start(now))
    }

    /// Cross traffic at `now` (bps).
    pub fn cross_at(&self, now: Instant) -> u64 {
        scheduled(&self.cfg.cross_traffic, self.since_start(now))
    }

    /// What is left for the viewer at `now` (bps).
    pub fn available_at(&self, now: Instant) -> u64 {
        self.capacity_at(now).saturating_sub(self.cross_at(now))
    }

    /// How long a packet entering now waits before its transmission starts.
    pub fn queue_delay(&self, now: Instant) -> Duration {
        self.busy_until.saturating_duration_since(now)
    }

    /// Puts a packet into the queue at `now`; its departure, or None when the
    /// queue is full.
    fn enqueue(&mut self, now: Instant, size: usize) -> Option<Instant> {
        while let Some(&(departure, bytes)) = self.queue.front() {
            if departure > now {
                break;
            }
            self.queue.pop_front();
            self.queued_bytes = self.queued_bytes.saturating_sub(bytes);
        }
        if self.queued_bytes + size > self.cfg.queue_bytes {
            return None;
        }
        let begin = now.max(self.busy_until);
        let capacity = self.capacity_at(begin).max(1);
        // Tokens refilled since the last departure, up to the burst.
        let refill = begin
            .saturating_duration_since(self.busy_until)
            .as_secs_f64()
            * capacity as f64
            / 8.0;
        let tokens = (self.tokens + refill).min(self.cfg.burst_bytes as f64);
        let wait_bytes = (size as f64 - tokens).max(0.0);
        self.tokens = (tokens - size as f64).max(0.0);
        let nanos = wait_bytes * 8e9 / capacity as f64;
        let departure = begin + Duration::from_nanos(nanos as u64);
        self.busy_until = departure;
        self.queue.push_back((departure, size));
        self.queued_bytes += size;
        Some(departure)
    }

    /// Feeds cross traffic up to `now` into the queue.
    fn advance(&mut self, now: Instant) {
        while self.next_cross <= now {
            let at = self.next_cross;
            let rate = self.cross_at(at);
            if rate == 0 {
                self.next_cross = at + Duration::from_millis(10);
                continue;
            }
            self.enqueue(at, MTU);
            self.next_cross = at + Duration::from_nanos(MTU as u64 * 8 * 1_000_000_000 / rate);
        }
    }

    /// Our packet enters the bottleneck at `now`: when it reaches the
    /// viewer, or None when the queue or the path drops it.
    pub fn send(&mut self, now: Instant, size: usize) -> Option<Instant> {
        self.advance(now);
        let departure = self.enqueue(now, size)?;
        if let Some(ge) = self.cfg.burst_loss {
            let flip = unit(&mut self.rng);
            self.bad = if self.bad {
                flip >= ge.leave_bad
            } else {
                flip < ge.enter_bad
            };
            if self.bad && unit(&mut self.rng) < ge.loss_bad {
                return None;
            }
        }
        if self.cfg.random_loss > 0.0 && unit(&mut self.rng) < self.cfg.random_loss {
            return None;
        }
        Some(departure + self.cfg.delay)
    }
}
