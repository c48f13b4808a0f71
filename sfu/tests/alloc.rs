//! Forwarding allocates nothing per packet (issue 10, scope 2): a counting allocator counts
//! what the node core allocates while it handles the publisher's media packets and sends
//! their fan-out to 20 viewers (the send buffers go back to the node's pool as the driver
//! returns them). Timer work (RTCP reports, consent) is counted apart and only reported.

// Tests and benches drive the cores with the real clock (clippy.toml forbids it in the cores).
#![allow(clippy::disallowed_methods)]
#![allow(clippy::unwrap_used, unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ferry_proto::{NodeId, StreamId};
use ferry_sfu::codec::Codec;
use ferry_sfu::node::signal::SessionKind;
use ferry_sfu::node::{Node, NodeConfig};
use ferry_sfu::peer::{Peer, PeerConfig, PeerRole};
use ferry_sfu::time::WallClock;

struct Counting;

thread_local! {
    static IN_NODE: Cell<bool> = const { Cell::new(false) };
}
static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);
/// Counted where [`ALLOCATIONS`] is not: the node's other calls.
static OTHER: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// Counting into [`ALLOCATIONS`] (else [`OTHER`]).
    static MEDIA: Cell<bool> = const { Cell::new(false) };
}

fn count() {
    if IN_NODE.with(Cell::get) {
        if MEDIA.with(Cell::get) {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        } else {
            OTHER.fetch_add(1, Ordering::Relaxed);
        }
    }
}

// SAFETY: every call is passed to the system allocator unchanged; only a counter is kept.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: the caller's contract is forwarded as is.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        // SAFETY: as for `alloc` / `dealloc`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Runs `f` counting its allocations.
fn in_node<T>(f: impl FnOnce() -> T) -> T {
    IN_NODE.with(|c| c.set(true));
    let t = f();
    IN_NODE.with(|c| c.set(false));
    t
}

struct World {
    now: Instant,
    node: Node,
    node_addr: SocketAddr,
    peers: Vec<Peer>,
    /// In flight: (to, from, data), delivered at the next step.
    wire: VecDeque<(SocketAddr, SocketAddr, Vec<u8>)>,
}

impl World {
    fn step(&mut self) {
        for p in &mut self.peers {
            let from = p.config().local_addr;
            while let Some((to, data)) = p.poll_transmit() {
                self.wire.push_back((to, from, data));
            }
        }
        let node_addr = self.node_addr;
        loop {
            let t = in_node(|| self.node.poll_transmit());
            let Some(t) = t else { break };
            self.wire.push_back((t.to, node_addr, t.data.clone()));
            // The driver hands each buffer back once sent.
            in_node(|| self.node.recycle(t.data));
        }
        while let Some((to, from, mut data)) = self.wire.pop_front() {
            if to == node_addr {
                let now = self.now;
                // SRTP (not SRTCP) from the publisher: a media packet to forward.
                let media = from == addr(0)
                    && matches!(data.first(), Some(128..=191))
                    && !matches!(data.get(1), Some(192..=223));
                MEDIA.with(|c| c.set(media));
                in_node(|| self.node.handle_datagram(now, from, &mut data));
                loop {
                    let t = in_node(|| self.node.poll_transmit());
                    let Some(t) = t else { break };
                    self.wire.push_back((t.to, node_addr, t.data.clone()));
                    in_node(|| self.node.recycle(t.data));
                }
                MEDIA.with(|c| c.set(false));
            } else if let Some(p) = self.peers.iter_mut().find(|p| p.config().local_addr == to) {
                p.handle_datagram(self.now, from, &mut data);
                while let Some((to2, data2)) = p.poll_transmit() {
                    self.wire.push_back((to2, to, data2));
                }
                while p.poll_frame().is_some() {}
            }
        }
    }

    fn run_for(&mut self, d: Duration) {
        let until = self.now + d;
        while self.now < until {
            self.step();
            let next = self
                .peers
                .iter()
                .filter_map(Peer::poll_timeout)
                .chain(self.node.poll_timeout())
                .min()
                .unwrap_or(until)
                .clamp(self.now + Duration::from_micros(100), until);
            self.now = next;
            let now = self.now;
            for p in &mut self.peers {
                if p.poll_timeout().is_some_and(|t| t <= now) {
                    p.handle_timeout(now);
                }
            }
            if self.node.poll_timeout().is_some_and(|t| t <= now) {
                in_node(|| self.node.handle_timeout(now));
            }
        }
        self.step();
    }
}

fn addr(i: u16) -> SocketAddr {
    SocketAddr::from(([10, 0, 0, 1], 4000 + i))
}

#[test]
fn forwarding_allocates_nothing_per_packet() {
    let now = Instant::now();
    let wall = WallClock {
        base: now,
        unix_at_base: Duration::from_secs(1_700_000_000),
    };
    let node_addr: SocketAddr = "10.0.0.100:5000".parse().unwrap();
    let mut cfg = NodeConfig::new(
        NodeId::new("node-a").unwrap(),
        vec![node_addr],
        [7; 32],
        wall,
    );
    cfg.deterministic_dtls = true;
    // Small enough that every slot of the audio track's cache (50 packets/s) has been used
    // once before the measurement: a slot's buffer is allocated on its first use.
    cfg.nack_cache = 200;
    let cert = Arc::new(ferry_sfu::cert::generate([9; 32]).unwrap());
    let mut w = World {
        now,
        node: Node::new(cfg, cert, now),
        node_addr,
        peers: Vec::new(),
        wire: VecDeque::new(),
    };
    let stream = StreamId::new("cam").unwrap();
    let connect = |w: &mut World, role: PeerRole, i: u16| {
        let mut cfg = PeerConfig::new(role, 100 + u64::from(i), addr(i), now);
        cfg.wall = wall;
        cfg.latency_epoch = now;
        cfg.video_bitrate_bps = 2_000_000;
        let mut secret = [0x33u8; 32];
        secret[..2].copy_from_slice(&i.to_le_bytes());
        let cert = Arc::new(ferry_sfu::cert::generate(secret).unwrap());
        let mut peer = Peer::new(cfg, cert, w.now);
        let kind = match role {
            PeerRole::Viewer => SessionKind::View,
            _ => SessionKind::Publish,
        };
        let answer = w
            .node
            .create_session(w.now, kind, &stream, &peer.create_offer(), None, None)
            .unwrap();
        peer.apply_answer(w.now, &answer.sdp).unwrap();
        w.peers.push(peer);
    };
    connect(
        &mut w,
        PeerRole::Publisher {
            video: Codec::Vp8,
            audio: true,
        },
        0,
    );
    w.run_for(Duration::from_secs(1));
    for i in 1..=20 {
        connect(&mut w, PeerRole::Viewer, i);
    }
    // Sessions set up, pools and caches filled.
    w.run_for(Duration::from_secs(4));
    assert!(w.peers.iter().all(Peer::is_connected));
    let forwarded0 = w.node.metrics().rtp_forwarded;
    let allocations0 = ALLOCATIONS.load(Ordering::Relaxed);
    let other0 = OTHER.load(Ordering::Relaxed);
    w.run_for(Duration::from_secs(3));
    let forwarded = w.node.metrics().rtp_forwarded - forwarded0;
    let allocations = ALLOCATIONS.load(Ordering::Relaxed) - allocations0;
    let other = OTHER.load(Ordering::Relaxed) - other0;
    eprintln!(
        "{forwarded} packets forwarded: {allocations} allocations on the media path, {other} in \
         the node's other calls (timers, RTCP) in 3 s"
    );
    assert!(forwarded > 20 * 3 * 150, "media flowed: {forwarded}");
    assert_eq!(
        allocations, 0,
        "the media path allocated for {forwarded} forwarded packets"
    );
}
