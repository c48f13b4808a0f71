//! Helpers the node-core simulations share: a migration driven step by step in protocol
//! order, at seeded moments.

#![allow(dead_code, clippy::unwrap_used)]

use std::net::SocketAddr;
use std::time::Duration;

use ferry_migrator::SessionHost;
use ferry_proto::{NodeId, SessionId};
use ferry_sim::net::LinkConfig;
use ferry_sim::testbed::Testbed;
use prost::Message;
use rand::RngExt;

/// A socket address from its text.
pub fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

/// 10 ms links with 3 ms of jitter, 1 % reordering and `loss`.
pub fn link(loss: f64) -> LinkConfig {
    LinkConfig {
        loss,
        jitter: Duration::from_millis(3),
        reorder: 0.01,
        ..LinkConfig::delay(Duration::from_millis(10))
    }
}

/// The one video stream peer `peer` received (its SSRC never changed).
pub fn video(tb: &Testbed, peer: usize) -> ferry_sfu::peer::RecvStreamStats {
    let st = tb.peers[peer].stats();
    let v: Vec<_> = st.video().cloned().collect();
    assert_eq!(
        v.len(),
        1,
        "one video stream, no new SSRC: {:?}",
        st.ssrcs_seen
    );
    v[0].clone()
}

/// The id of the node at `at`.
pub fn id_of(tb: &mut Testbed, at: SocketAddr) -> NodeId {
    tb.node(at).id().clone()
}

/// Seeded pauses between the steps: the moments a migration's phases fall
/// on relative to the media.
pub struct Timing(pub rand_chacha::ChaCha8Rng);

impl Timing {
    pub fn pause(&mut self) -> Duration {
        Duration::from_micros(self.0.random_range(200..30_000))
    }
    pub fn rounds(&mut self) -> usize {
        self.0.random_range(0..5)
    }
}

/// Moves `id` from `from` to `to` in protocol order; the snapshot, WAL and
/// final state go through their wire encoding. Returns the new epoch.
pub fn migrate(
    tb: &mut Testbed,
    timing: &mut Timing,
    id: &SessionId,
    from: SocketAddr,
    to: SocketAddr,
) -> u64 {
    migrate_slowly(tb, timing, id, from, to, Duration::ZERO)
}

/// [`migrate`], the target holding the imported session `slow` longer before the WAL phase (a
/// slow transfer: the nodes' timers run meanwhile).
pub fn migrate_slowly(
    tb: &mut Testbed,
    timing: &mut Timing,
    id: &SessionId,
    from: SocketAddr,
    to: SocketAddr,
    slow: Duration,
) -> u64 {
    let (stream, publisher) = tb
        .nodes
        .iter()
        .filter(|n| n.addr == from)
        .find_map(|n| n.node.session(id))
        .map(|s| {
            (
                s.stream.clone(),
                matches!(s.role, ferry_sfu::node::session::Role::Publisher(_)),
            )
        })
        .unwrap();
    let target = id_of(tb, to);
    let now = tb.now();
    tb.core(to, &stream)
        .prewarm(now, id, &stream, publisher)
        .unwrap();
    let snap = tb.core(from, &stream).export_snapshot(now, id).unwrap();
    let snap = wire(&snap);
    tb.run_for(timing.pause());
    let now = tb.now();
    tb.core(to, &stream).import_snapshot(now, snap).unwrap();
    tb.run_for(slow);
    for _ in 0..timing.rounds() {
        tb.run_for(timing.pause());
        let now = tb.now();
        let wal = tb.core(from, &stream).take_wal(id).unwrap();
        tb.core(to, &stream).apply_wal(now, id, &wal).unwrap();
    }
    let now = tb.now();
    let (fin, wal) = tb.core(from, &stream).freeze(now, id).unwrap();
    let fin = wire(&fin);
    // The final state travels while the client's datagrams are held.
    tb.run_for(timing.pause());
    let now = tb.now();
    tb.core(to, &stream).apply_wal(now, id, &wal).unwrap();
    tb.core(to, &stream)
        .install_final(now, fin.clone())
        .unwrap();
    tb.run_for(timing.pause());
    let epoch = fin.epoch + 1;
    let now = tb.now();
    tb.core(from, &stream).release(now, id, &target).unwrap();
    tb.run_for(timing.pause());
    let now = tb.now();
    tb.core(to, &stream).activate(now, id, epoch).unwrap();
    epoch
}

/// Through the wire encoding and back.
pub fn wire(s: &ferry_proto::state::SessionSnapshot) -> ferry_proto::state::SessionSnapshot {
    ferry_proto::state::SessionSnapshot::decode(s.encode_to_vec().as_slice()).unwrap()
}
