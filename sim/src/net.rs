//! A seeded, simulated datagram network and a virtual clock, so deterministic tests and the load
//! generator can run many sans-IO endpoints (nodes, [`ferry_sfu::peer::Peer`]s) in one process.
//!
//! Same seed and same sends give the same deliveries, bit for bit: the only randomness is one
//! ChaCha8 stream drawn in send order, and ties in delivery time are broken by send order.
//!
//! A link may have a bottleneck ([`LinkConfig::rate_bps`]): packets are serialised one after
//! another at that rate behind a drop-tail queue, as a `tc tbf` shaper does, so a sender above
//! the rate sees queueing delay grow and then loss.
//!
//! ```
//! use std::time::{Duration, Instant};
//! use ferry_sim::net::{LinkConfig, SimNet, VirtualClock};
//!
//! let mut clock = VirtualClock::new(Instant::now());
//! let mut net = SimNet::new(7, LinkConfig::delay(Duration::from_millis(10)));
//! let (a, b) = ("10.0.0.1:1000".parse()?, "10.0.0.2:2000".parse()?);
//! net.send(clock.now(), a, b, vec![1, 2, 3]);
//! let due = net.next_delivery().unwrap();
//! clock.advance_to(due);
//! let d = net.poll_delivery(clock.now()).unwrap();
//! assert_eq!((d.from, d.to, d.data), (a, b, vec![1, 2, 3]));
//! # Ok::<(), std::net::AddrParseError>(())
//! ```

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// How one direction of a path behaves. Probabilities outside `0..=1` are clamped.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LinkConfig {
    /// Base one-way delay.
    pub delay: Duration,
    /// Extra delay drawn uniformly from `0..=jitter` per packet. Jitter alone never reorders: a
    /// packet is never delivered before one sent earlier on the same link (a queue, not a
    /// scatter); only `reorder` breaks FIFO.
    pub jitter: Duration,
    /// Probability a packet is lost.
    pub loss: f64,
    /// Probability a packet is held back by an extra delay (up to `max(delay, 10 ms)`) outside
    /// the FIFO order, so packets sent after it overtake it.
    pub reorder: f64,
    /// Probability a packet is delivered twice (the copy with its own delay draw).
    pub duplicate: f64,
    /// Bottleneck rate in bit/s: each packet takes `len * 8 / rate` to serialise, after what the
    /// link already holds, before `delay` and `jitter`; its datagram bytes count, no IP/UDP
    /// header. `None` (the default): no bottleneck and nothing queued.
    pub rate_bps: Option<u64>,
    /// Drop-tail queue of the bottleneck: a packet is dropped when the bytes not yet
    /// serialised, itself included, would exceed this. 0: unbounded.
    pub queue_bytes: usize,
}

impl LinkConfig {
    /// A perfect link with a fixed delay.
    pub fn delay(delay: Duration) -> Self {
        LinkConfig {
            delay,
            jitter: Duration::ZERO,
            loss: 0.0,
            reorder: 0.0,
            duplicate: 0.0,
            rate_bps: None,
            queue_bytes: 0,
        }
    }

    /// This link behind a bottleneck of `rate_bps` with a drop-tail queue of `queue_bytes`.
    pub fn with_rate(self, rate_bps: u64, queue_bytes: usize) -> Self {
        LinkConfig {
            rate_bps: Some(rate_bps),
            queue_bytes,
            ..self
        }
    }
}

impl Default for LinkConfig {
    /// 5 ms, no jitter, no loss.
    fn default() -> Self {
        LinkConfig::delay(Duration::from_millis(5))
    }
}

/// A datagram arriving.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    /// Sender address.
    pub from: SocketAddr,
    /// Receiver address.
    pub to: SocketAddr,
    /// The datagram.
    pub data: Vec<u8>,
}

/// What the network did so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NetStats {
    /// Datagrams handed to [`SimNet::send`].
    pub sent: u64,
    /// Datagrams returned by [`SimNet::poll_delivery`] (duplicates count twice).
    pub delivered: u64,
    /// Datagrams lost: random loss, or an endpoint down at send or delivery time.
    pub dropped: u64,
    /// Extra copies scheduled.
    pub duplicated: u64,
    /// Datagrams held back out of FIFO order.
    pub reordered: u64,
    /// Of `dropped`, those a full bottleneck queue dropped.
    pub queue_dropped: u64,
}

/// Whose bottleneck a packet queues in: its path's own, or the one every path to an address
/// shares ([`SimNet::set_link_to`]: the receiver's access link).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Bottleneck {
    Path(SocketAddr, SocketAddr),
    To(SocketAddr),
}

/// The simulated network: directional links with per-link overrides, endpoints that can be taken
/// down, and a delivery queue ordered by time (FIFO among equal times).
#[derive(Debug, Clone)]
pub struct SimNet {
    rng: ChaCha8Rng,
    default: LinkConfig,
    links: HashMap<(SocketAddr, SocketAddr), LinkConfig>,
    /// Everything sent to an address, unless its path has its own override.
    to_links: HashMap<SocketAddr, LinkConfig>,
    /// When each bottleneck in use has serialised what it holds.
    busy_until: HashMap<Bottleneck, Instant>,
    down: HashSet<SocketAddr>,
    /// Keyed by (delivery time, send order): iteration order is delivery order.
    queue: BTreeMap<(Instant, u64), Delivery>,
    /// Latest in-order delivery time per link, for FIFO under jitter.
    tail: HashMap<(SocketAddr, SocketAddr), Instant>,
    order: u64,
    stats: NetStats,
    /// Paths whose datagrams are kept as sent ([`SimNet::capture`]).
    captured_paths: HashSet<(SocketAddr, SocketAddr)>,
    captured: Vec<(SocketAddr, SocketAddr, Vec<u8>)>,
}

impl SimNet {
    /// A network whose every link behaves like `default` until overridden.
    pub fn new(seed: u64, default: LinkConfig) -> Self {
        SimNet {
            rng: ChaCha8Rng::seed_from_u64(seed),
            default,
            links: HashMap::new(),
            to_links: HashMap::new(),
            busy_until: HashMap::new(),
            down: HashSet::new(),
            queue: BTreeMap::new(),
            tail: HashMap::new(),
            order: 0,
            stats: NetStats::default(),
            captured_paths: HashSet::new(),
            captured: Vec::new(),
        }
    }

    /// Keeps a copy of every datagram sent `from → to` from now on, as it was put on the wire
    /// (before loss): a packet capture of that path.
    pub fn capture(&mut self, from: SocketAddr, to: SocketAddr) {
        self.captured_paths.insert((from, to));
    }

    /// What [`SimNet::capture`] kept: (from, to, datagram), in send order.
    pub fn captured(&self) -> &[(SocketAddr, SocketAddr, Vec<u8>)] {
        &self.captured
    }

    /// Overrides the link `from → to` (one direction only). It may change at any time (a
    /// capacity step): what its bottleneck already holds still leaves at the old rate.
    pub fn set_link(&mut self, from: SocketAddr, to: SocketAddr, cfg: LinkConfig) {
        self.links.insert((from, to), cfg);
    }

    /// Drops the override of `from → to`.
    pub fn clear_link(&mut self, from: SocketAddr, to: SocketAddr) {
        self.links.remove(&(from, to));
    }

    /// Overrides every link to `to` that has no override of its own ([`SimNet::set_link`]):
    /// the receiver's access link. Their packets share one bottleneck, whoever sends them.
    pub fn set_link_to(&mut self, to: SocketAddr, cfg: LinkConfig) {
        self.to_links.insert(to, cfg);
    }

    /// Drops the override of the links to `to`.
    pub fn clear_link_to(&mut self, to: SocketAddr) {
        self.to_links.remove(&to);
    }

    /// Changes the default for links without an override.
    pub fn set_default_link(&mut self, cfg: LinkConfig) {
        self.default = cfg;
    }

    /// The configuration in force for `from → to`.
    pub fn link(&self, from: SocketAddr, to: SocketAddr) -> LinkConfig {
        self.route(from, to).0
    }

    /// The configuration for `from → to` and the bottleneck its packets queue in.
    fn route(&self, from: SocketAddr, to: SocketAddr) -> (LinkConfig, Bottleneck) {
        if let Some(cfg) = self.links.get(&(from, to)) {
            return (*cfg, Bottleneck::Path(from, to));
        }
        match self.to_links.get(&to) {
            Some(cfg) => (*cfg, Bottleneck::To(to)),
            None => (self.default, Bottleneck::Path(from, to)),
        }
    }

    /// Bytes the bottleneck of `from → to` holds at `now` that it has not serialised yet
    /// (0 without a rate).
    pub fn queued_bytes(&self, now: Instant, from: SocketAddr, to: SocketAddr) -> usize {
        let (cfg, key) = self.route(from, to);
        match (cfg.rate_bps, self.busy_until.get(&key)) {
            (Some(rate), Some(&busy)) => bytes_in(busy.saturating_duration_since(now), rate),
            _ => 0,
        }
    }

    /// Puts `len` bytes into a bottleneck of `rate` bit/s at `now`: when they are out, or
    /// `None` when its queue has no room.
    fn serialise(
        &mut self,
        now: Instant,
        key: Bottleneck,
        rate: u64,
        queue: usize,
        len: usize,
    ) -> Option<Instant> {
        let free = self
            .busy_until
            .get(&key)
            .copied()
            .filter(|t| *t > now)
            .unwrap_or(now);
        let backlog = bytes_in(free - now, rate);
        if queue > 0 && backlog.saturating_add(len) > queue {
            return None;
        }
        // Rounded up: a link never carries more than its rate.
        let ns = (len as u128 * 8 * 1_000_000_000).div_ceil(u128::from(rate.max(1)));
        let done = free + Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX));
        self.busy_until.insert(key, done);
        Some(done)
    }

    /// Takes an endpoint down (a crash or partition: everything to or from it is dropped, also
    /// what is already in flight) or brings it back.
    pub fn set_down(&mut self, addr: SocketAddr, down: bool) {
        if down {
            self.down.insert(addr);
        } else {
            self.down.remove(&addr);
        }
    }

    /// Whether `addr` is down.
    pub fn is_down(&self, addr: SocketAddr) -> bool {
        self.down.contains(&addr)
    }

    /// Sends a datagram at `now`.
    pub fn send(&mut self, now: Instant, from: SocketAddr, to: SocketAddr, data: Vec<u8>) {
        self.stats.sent += 1;
        if self.captured_paths.contains(&(from, to)) {
            self.captured.push((from, to, data.clone()));
        }
        if self.is_down(from) || self.is_down(to) {
            self.stats.dropped += 1;
            return;
        }
        let (cfg, key) = self.route(from, to);
        // The bottleneck comes first, drawing nothing: loss and duplication happen on the wire
        // after it, and a link without a rate sends at once.
        let mut sent = now;
        if let Some(rate) = cfg.rate_bps {
            match self.serialise(now, key, rate, cfg.queue_bytes, data.len()) {
                Some(done) => sent = done,
                None => {
                    self.stats.dropped += 1;
                    self.stats.queue_dropped += 1;
                    return;
                }
            }
        }
        if self.chance(cfg.loss) {
            self.stats.dropped += 1;
            return;
        }
        if self.chance(cfg.duplicate) {
            self.stats.duplicated += 1;
            let at = self.arrival(sent, from, to, &cfg);
            self.enqueue(at, from, to, data.clone());
        }
        let at = self.arrival(sent, from, to, &cfg);
        self.enqueue(at, from, to, data);
    }

    /// Delivery time of one copy: in FIFO order with jitter, or held back when reordered.
    fn arrival(
        &mut self,
        now: Instant,
        from: SocketAddr,
        to: SocketAddr,
        cfg: &LinkConfig,
    ) -> Instant {
        let base = now + cfg.delay + self.uniform(cfg.jitter);
        if self.chance(cfg.reorder) {
            self.stats.reordered += 1;
            let hold = cfg.delay.max(Duration::from_millis(10));
            return base + Duration::from_micros(1) + self.uniform(hold);
        }
        let tail = self.tail.entry((from, to)).or_insert(base);
        let at = base.max(*tail);
        *tail = at;
        at
    }

    fn enqueue(&mut self, at: Instant, from: SocketAddr, to: SocketAddr, data: Vec<u8>) {
        self.order += 1;
        self.queue
            .insert((at, self.order), Delivery { from, to, data });
    }

    /// True with probability `p` (clamped; NaN is 0). Draws nothing for `p <= 0`, so a knob left
    /// at zero does not shift the random stream of the others.
    fn chance(&mut self, p: f64) -> bool {
        if p.is_nan() || p <= 0.0 {
            return false;
        }
        // 53 random bits as a float in [0, 1).
        let x = (self.rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        x < p
    }

    /// Uniform in `0..=max` at microsecond resolution.
    fn uniform(&mut self, max: Duration) -> Duration {
        let us = u64::try_from(max.as_micros()).unwrap_or(u64::MAX);
        if us == 0 {
            return Duration::ZERO;
        }
        Duration::from_micros(self.rng.next_u64() % us.saturating_add(1))
    }

    /// When the next datagram arrives.
    pub fn next_delivery(&self) -> Option<Instant> {
        self.queue.keys().next().map(|(at, _)| *at)
    }

    /// The next datagram due at or before `now`, in delivery-time order (FIFO among ties).
    /// Datagrams to or from an endpoint that is down by now are dropped here.
    pub fn poll_delivery(&mut self, now: Instant) -> Option<Delivery> {
        loop {
            let entry = self.queue.first_entry()?;
            if entry.key().0 > now {
                return None;
            }
            let d = entry.remove();
            if self.is_down(d.from) || self.is_down(d.to) {
                self.stats.dropped += 1;
                continue;
            }
            self.stats.delivered += 1;
            return Some(d);
        }
    }

    /// Datagrams in flight.
    pub fn in_flight(&self) -> usize {
        self.queue.len()
    }

    /// Counters so far.
    pub fn stats(&self) -> NetStats {
        self.stats
    }
}

/// Bytes a link of `rate` bit/s serialises in `d`.
fn bytes_in(d: Duration, rate: u64) -> usize {
    let bytes = d.as_nanos() * u128::from(rate) / 8_000_000_000;
    usize::try_from(bytes).unwrap_or(usize::MAX)
}

/// Virtual time: a base `Instant` plus an offset that only moves forward.
#[derive(Debug, Clone, Copy)]
pub struct VirtualClock {
    base: Instant,
    offset: Duration,
}

impl VirtualClock {
    /// A clock that reads `base` until advanced.
    pub fn new(base: Instant) -> Self {
        VirtualClock {
            base,
            offset: Duration::ZERO,
        }
    }

    /// The current virtual time.
    pub fn now(&self) -> Instant {
        self.base + self.offset
    }

    /// Time since the base.
    pub fn elapsed(&self) -> Duration {
        self.offset
    }

    /// Moves to `t`; a `t` in the past leaves the clock where it is.
    pub fn advance_to(&mut self, t: Instant) {
        if let Some(d) = t.checked_duration_since(self.base) {
            self.offset = self.offset.max(d);
        }
    }

    /// Moves forward by `d`.
    pub fn advance(&mut self, d: Duration) {
        self.offset += d;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(port: u16) -> SocketAddr {
        SocketAddr::from(([10, 0, 0, 1], port))
    }

    /// Sends `n` numbered packets 1 ms apart and returns (arrival offset µs, number) in delivery order.
    fn run(net: &mut SimNet, n: u32) -> Vec<(u64, u32)> {
        let t0 = Instant::now();
        for i in 0..n {
            let at = t0 + Duration::from_millis(u64::from(i));
            net.send(at, addr(1), addr(2), i.to_be_bytes().to_vec());
        }
        let mut clock = VirtualClock::new(t0);
        let mut out = Vec::new();
        while let Some(at) = net.next_delivery() {
            clock.advance_to(at);
            let d = net.poll_delivery(clock.now()).unwrap();
            let us = clock.elapsed().as_micros() as u64;
            out.push((us, u32::from_be_bytes(d.data[..4].try_into().unwrap())));
        }
        out
    }

    #[test]
    fn loss_rate_is_within_tolerance() {
        let cfg = LinkConfig {
            loss: 0.1,
            ..LinkConfig::delay(Duration::from_millis(1))
        };
        let mut net = SimNet::new(42, cfg);
        let t = Instant::now();
        for _ in 0..100_000 {
            net.send(t, addr(1), addr(2), vec![0]);
        }
        let s = net.stats();
        assert_eq!(s.sent, 100_000);
        // Binomial σ ≈ 95 packets; ±1 % is over 10σ.
        assert!(
            (9_000..=11_000).contains(&s.dropped),
            "dropped {}",
            s.dropped
        );
        assert_eq!(net.in_flight() as u64, s.sent - s.dropped);
    }

    #[test]
    fn delivers_in_time_order_fifo_among_ties() {
        let mut net = SimNet::new(1, LinkConfig::delay(Duration::from_millis(10)));
        let t = Instant::now();
        net.set_link(
            addr(3),
            addr(2),
            LinkConfig::delay(Duration::from_millis(2)),
        );
        for i in 0..5u8 {
            net.send(t, addr(1), addr(2), vec![i]);
        }
        net.send(t, addr(3), addr(2), vec![99]);
        assert_eq!(net.next_delivery(), Some(t + Duration::from_millis(2)));
        assert_eq!(
            net.poll_delivery(t + Duration::from_millis(1)),
            None,
            "not due yet"
        );
        let later = t + Duration::from_millis(10);
        let order: Vec<u8> = std::iter::from_fn(|| net.poll_delivery(later))
            .map(|d| d.data[0])
            .collect();
        assert_eq!(order, vec![99, 0, 1, 2, 3, 4]);
        assert_eq!(net.stats().delivered, 6);
    }

    #[test]
    fn jitter_alone_keeps_fifo_and_reorder_breaks_it() {
        let jitter = LinkConfig {
            jitter: Duration::from_millis(30),
            ..LinkConfig::delay(Duration::from_millis(20))
        };
        let got = run(&mut SimNet::new(5, jitter), 500);
        assert!(got.windows(2).all(|w| w[0].1 < w[1].1), "jitter reordered");
        let delays: HashSet<u64> = got
            .iter()
            .map(|(us, i)| us - u64::from(*i) * 1000)
            .collect();
        assert!(delays.len() > 10, "jitter varies the delay");

        let reorder = LinkConfig {
            reorder: 0.05,
            ..jitter
        };
        let mut net = SimNet::new(5, reorder);
        let got = run(&mut net, 2000);
        let inversions = got.windows(2).filter(|w| w[0].1 > w[1].1).count();
        assert!(inversions > 20, "only {inversions} inversions");
        assert!(net.stats().reordered > 50);
        let mut all: Vec<u32> = got.iter().map(|g| g.1).collect();
        all.sort_unstable();
        assert_eq!(
            all,
            (0..2000).collect::<Vec<_>>(),
            "nothing lost or duplicated"
        );
    }

    #[test]
    fn duplicates_arrive_twice() {
        let cfg = LinkConfig {
            duplicate: 0.2,
            ..LinkConfig::default()
        };
        let mut net = SimNet::new(9, cfg);
        let got = run(&mut net, 1000);
        let s = net.stats();
        assert!((100..=300).contains(&s.duplicated), "{s:?}");
        assert_eq!(got.len() as u64, 1000 + s.duplicated);
    }

    #[test]
    fn same_seed_same_deliveries() {
        let cfg = LinkConfig {
            delay: Duration::from_millis(15),
            jitter: Duration::from_millis(10),
            loss: 0.05,
            reorder: 0.05,
            duplicate: 0.02,
            ..LinkConfig::default()
        };
        let a = run(&mut SimNet::new(77, cfg), 3000);
        let b = run(&mut SimNet::new(77, cfg), 3000);
        let c = run(&mut SimNet::new(78, cfg), 3000);
        assert_eq!(a, b);
        assert_ne!(a, c);
    }

    #[test]
    fn down_endpoint_drops_everything_including_in_flight() {
        let mut net = SimNet::new(3, LinkConfig::delay(Duration::from_millis(10)));
        let t = Instant::now();
        net.send(t, addr(1), addr(2), vec![1]);
        net.send(t, addr(2), addr(1), vec![2]);
        net.set_down(addr(2), true);
        net.send(t, addr(1), addr(2), vec![3]);
        net.send(t, addr(4), addr(1), vec![4]);
        let later = t + Duration::from_millis(10);
        let got: Vec<u8> = std::iter::from_fn(|| net.poll_delivery(later))
            .map(|d| d.data[0])
            .collect();
        assert_eq!(got, vec![4]);
        assert_eq!(net.stats().dropped, 3);
        net.set_down(addr(2), false);
        net.send(later, addr(1), addr(2), vec![5]);
        assert_eq!(
            net.poll_delivery(later + Duration::from_millis(10))
                .map(|d| d.data),
            Some(vec![5])
        );
    }

    /// Sends `n` numbered packets of `len` bytes `every` apart from `from` to `to`, starting at
    /// `t0`, and returns (sent µs, arrived µs, number) of each delivered one, in delivery order.
    fn paced(
        net: &mut SimNet,
        t0: Instant,
        (from, to): (SocketAddr, SocketAddr),
        n: u32,
        len: usize,
        every: Duration,
    ) -> Vec<(u64, u64, u32)> {
        let mut clock = VirtualClock::new(t0);
        let mut out = Vec::new();
        let mut drain = |net: &mut SimNet, now: Instant| {
            while let Some(d) = net.poll_delivery(now) {
                let i = u32::from_be_bytes(d.data[..4].try_into().unwrap());
                let sent = every.as_micros() as u64 * u64::from(i);
                let arrived = now.duration_since(t0).as_micros() as u64;
                out.push((sent, arrived, i));
            }
        };
        for i in 0..n {
            let at = t0 + every * i;
            while let Some(due) = net.next_delivery().filter(|d| *d <= at) {
                clock.advance_to(due);
                drain(net, clock.now());
            }
            clock.advance_to(at);
            let mut data = vec![0u8; len];
            data[..4].copy_from_slice(&i.to_be_bytes());
            net.send(clock.now(), from, to, data);
        }
        while let Some(due) = net.next_delivery() {
            clock.advance_to(due);
            drain(net, clock.now());
        }
        out
    }

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_bottleneck_caps_throughput_at_its_rate() {
        // 1200-byte packets every ms (9.6 Mbit/s) into 2 Mbit/s: one leaves every 4.8 ms.
        let link = LinkConfig::delay(10 * MS).with_rate(2_000_000, 0);
        let mut net = SimNet::new(1, link);
        let t0 = Instant::now();
        let got = paced(&mut net, t0, (addr(1), addr(2)), 1000, 1200, MS);
        assert_eq!(got.len(), 1000, "an unbounded queue loses nothing");
        assert!(
            got.windows(2).all(|w| w[1].1 - w[0].1 == 4800),
            "paced at the rate"
        );
        assert_eq!(got[0].1, 4800 + 10_000, "serialised, then the delay");
        // Over any second the link carries its rate, not what was offered.
        let second = got
            .iter()
            .filter(|g| (500_000..1_500_000).contains(&g.1))
            .count();
        assert!(second * 1200 * 8 <= 2_000_000 + 9600, "{second}");
        assert!(second * 1200 * 8 >= 2_000_000 - 9600, "{second}");
        // Below the rate nothing waits: the delay is serialisation plus the link's.
        let mut net = SimNet::new(1, link);
        let got = paced(&mut net, t0, (addr(1), addr(2)), 100, 1200, 10 * MS);
        assert!(got.iter().all(|g| g.1 - g.0 == 4800 + 10_000), "{got:?}");
        let end = t0 + Duration::from_secs(1);
        assert_eq!(net.queued_bytes(end, addr(1), addr(2)), 0);
        // The last packet, sent at 990 ms, is out at 994.8 ms.
        assert_eq!(net.queued_bytes(end - 7 * MS, addr(1), addr(2)), 450);
    }

    #[test]
    fn a_full_queue_drops_the_tail() {
        // Room for 10 packets: the queueing delay never passes 10 × 4.8 ms.
        let link = LinkConfig::delay(10 * MS).with_rate(2_000_000, 12_000);
        let mut net = SimNet::new(1, link);
        let t0 = Instant::now();
        let got = paced(&mut net, t0, (addr(1), addr(2)), 1000, 1200, MS);
        let s = net.stats();
        assert_eq!(s.dropped, 1000 - got.len() as u64);
        assert_eq!(s.queue_dropped, s.dropped);
        // 1 s at 2 Mbit/s, plus what the queue held at the end.
        assert!((208..=220).contains(&got.len()), "{}", got.len());
        let worst = got.iter().map(|g| g.1 - g.0).max().unwrap();
        assert!(worst <= 10 * 4800 + 10_000, "{worst}");
        assert!(worst >= 9 * 4800 + 10_000, "{worst}");
        // Numbers arrive in order, with holes where the queue was full.
        assert!(got.windows(2).all(|w| w[0].2 < w[1].2));
        assert!(got.windows(2).any(|w| w[1].2 - w[0].2 > 1));
    }

    #[test]
    fn queueing_delay_grows_while_sending_above_the_rate() {
        // 1.5 × the rate for 2 s: each packet waits 2.4 ms longer than the one before.
        let link = LinkConfig::delay(20 * MS).with_rate(1_000_000, 0);
        let mut net = SimNet::new(1, link);
        let t0 = Instant::now();
        let every = Duration::from_micros(6400);
        let got = paced(&mut net, t0, (addr(1), addr(2)), 312, 1200, every);
        let delays: Vec<u64> = got.iter().map(|g| g.1 - g.0).collect();
        assert!(delays.windows(2).all(|w| w[1] == w[0] + 3200), "{delays:?}");
        assert_eq!(delays[0], 9600 + 20_000);
        assert_eq!(*delays.last().unwrap(), 9600 + 20_000 + 311 * 3200);
        // What is queued right after the last send, to the byte.
        let mut net = SimNet::new(1, link);
        for i in 0..10u32 {
            net.send(t0 + MS * i, addr(1), addr(2), vec![0; 1200]);
        }
        // 12 000 bytes sent by 9 ms, 1 125 bytes serialised per 9 ms at 1 Mbit/s.
        assert_eq!(
            net.queued_bytes(t0 + 9 * MS, addr(1), addr(2)),
            12_000 - 1125
        );
    }

    #[test]
    fn capacity_steps_at_run_time_and_an_access_link_is_shared() {
        let t0 = Instant::now();
        let mut net = SimNet::new(1, LinkConfig::delay(10 * MS));
        let (a, b, viewer) = (addr(1), addr(3), addr(2));
        net.set_link_to(viewer, LinkConfig::delay(10 * MS).with_rate(4_000_000, 0));
        assert_eq!(net.link(a, viewer).rate_bps, Some(4_000_000));
        assert_eq!(net.link(viewer, a).rate_bps, None, "one direction only");
        // Two senders at 2.4 Mbit/s each (1200 bytes every 4 ms) share 4 Mbit/s: the queue grows.
        let mut last = Vec::new();
        for i in 0..250u32 {
            for from in [a, b] {
                net.send(t0 + 4 * MS * i, from, viewer, vec![0; 1200]);
            }
            last.push(net.queued_bytes(t0 + 4 * MS * i, a, viewer));
        }
        assert!(last.windows(2).all(|w| w[1] >= w[0]));
        let t = t0 + 996 * MS;
        assert_eq!(
            net.queued_bytes(t, b, viewer),
            net.queued_bytes(t, a, viewer)
        );
        // 1 s of 4.8 Mbit/s into 4 Mbit/s leaves 0.8 Mbit (100 000 bytes) queued.
        assert!(last[249].abs_diff(100_000) <= 2400, "{}", last[249]);
        // The capacity steps down: a new packet waits for the backlog, then goes at 1 Mbit/s.
        let t1 = t0 + 1000 * MS;
        let backlog = net.queued_bytes(t1, a, viewer);
        net.set_link_to(viewer, LinkConfig::delay(10 * MS).with_rate(1_000_000, 0));
        while net.poll_delivery(t1).is_some() {}
        net.send(t1, a, viewer, vec![0; 1000]);
        let drained = Duration::from_nanos(backlog as u64 * 8 * 250);
        let due = net.queue.keys().last().unwrap().0;
        let want = t1 + drained + 8 * MS + 10 * MS;
        assert!(
            due.max(want) - due.min(want) <= Duration::from_micros(10),
            "{due:?} vs {want:?}"
        );
        // A path's own override takes precedence, with its own bottleneck; clearing it and the
        // access link brings back the default.
        net.set_link(a, viewer, LinkConfig::delay(MS));
        assert_eq!(net.link(a, viewer), LinkConfig::delay(MS));
        assert_eq!(net.queued_bytes(t1, a, viewer), 0);
        net.clear_link(a, viewer);
        net.clear_link_to(viewer);
        assert_eq!(net.link(a, viewer), LinkConfig::delay(10 * MS));
    }

    #[test]
    fn virtual_clock_only_moves_forward() {
        let t0 = Instant::now();
        let mut c = VirtualClock::new(t0);
        c.advance_to(t0 + Duration::from_millis(5));
        c.advance_to(t0 + Duration::from_millis(1));
        assert_eq!(c.now(), t0 + Duration::from_millis(5));
        c.advance(Duration::from_millis(5));
        assert_eq!(c.elapsed(), Duration::from_millis(10));
    }
}
