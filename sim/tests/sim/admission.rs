//! Admission on a node of several cores, in the deterministic simulation: the node's session
//! limit holds for its cores together (each core admits against what the others hold), for
//! WHIP/WHEP requests and for sessions migrating in; a client that resumes its own session is
//! not refused by a full node.

#![allow(clippy::unwrap_used)]

use crate::support;

use std::time::Duration;

use ferry_migrator::SessionHost;
use ferry_proto::{NodeId, StreamId};
use ferry_sfu::cluster::shards::shard_of;
use ferry_sfu::codec::Codec;
use ferry_sfu::node::MigrateError;
use ferry_sfu::node::signal::SignalError;
use ferry_sim::testbed::Testbed;
use support::{addr, link};

const A: &str = "10.0.0.100:5000";
const B: &str = "10.0.0.101:5000";

/// The first stream name `cam-K` that lives on core `core` of a node of two cores.
fn on_core(core: usize) -> String {
    (0..)
        .map(|k| format!("cam-{k}"))
        .find(|s| shard_of(&StreamId::new(s.as_str()).unwrap(), 2) == core)
        .unwrap()
}

fn full<T: std::fmt::Debug>(r: Result<T, SignalError>, what: &str) {
    match r {
        Err(SignalError::Full) => {}
        other => panic!("{what}: expected the node to be full, got {other:?}"),
    }
}

#[test]
fn the_cores_of_a_node_share_its_session_limit() {
    let (a, b) = (addr(A), addr(B));
    let mut tb = Testbed::new(7, link(0.0));
    tb.add_sharded_node(NodeId::new("node-a").unwrap(), a, 2)
        .unwrap();
    tb.add_node(NodeId::new("node-b").unwrap(), b).unwrap();
    tb.limit_sessions(a, 3);
    let (s0, s1) = (on_core(0), on_core(1));

    // Two sessions on core 0, one on core 1: the node's three.
    tb.publish(a, &s0, Codec::Vp8, addr("10.0.0.1:4000"))
        .unwrap();
    tb.publish(a, &s1, Codec::Vp8, addr("10.0.0.2:4000"))
        .unwrap();
    tb.run_for(Duration::from_secs(1));
    let (_, v0) = tb.view(a, &s0, addr("10.0.0.3:4000")).unwrap();
    // Core 1 holds one session, but the node holds its three.
    full(tb.view(a, &s1, addr("10.0.0.4:4000")), "a viewer on core 1");
    full(
        tb.publish(a, "another", Codec::Vp8, addr("10.0.0.5:4000")),
        "a new stream",
    );

    // A session migrating in is refused at the prewarm and at the import.
    let (_, moving) = tb
        .publish(b, "mover", Codec::Vp8, addr("10.0.0.6:4000"))
        .unwrap();
    tb.run_for(Duration::from_millis(500));
    let mover = StreamId::new("mover").unwrap();
    let now = tb.now();
    assert!(matches!(
        tb.core(a, &mover).prewarm(now, &moving, &mover, true),
        Err(MigrateError::Full)
    ));
    let snap = tb.node(b).export_snapshot(now, &moving).unwrap();
    assert!(matches!(
        tb.core(a, &mover).import_snapshot(now, snap),
        Err(MigrateError::Full)
    ));
    tb.node(b).cancel_export(now, &moving);

    // One leaves core 0: core 1 takes the next.
    let s0_id = StreamId::new(s0.as_str()).unwrap();
    tb.core(a, &s0_id).delete(now, &v0).unwrap();
    let (_, v1) = tb.view(a, &s1, addr("10.0.0.7:4000")).unwrap();
    tb.run_for(Duration::from_secs(1));

    // Full again, yet the viewer's client resuming its session (a new transport, its ticket)
    // gets it: it takes no new place.
    full(tb.view(a, &s0, addr("10.0.0.8:4000")), "a fourth viewer");
    let s1_id = StreamId::new(s1.as_str()).unwrap();
    let now = tb.now();
    let ticket = tb.core(a, &s1_id).issue_ticket(now, &v1).unwrap().0;
    let (_, resumed) = tb
        .view_with(a, &s1, addr("10.0.0.9:4000"), Some(&ticket))
        .unwrap();
    assert_eq!(resumed, v1, "the session keeps its id");
    full(tb.view(a, &s1, addr("10.0.0.10:4000")), "still full");
    let held: usize = tb
        .nodes
        .iter()
        .filter(|n| n.addr == a)
        .map(|n| n.node.session_count())
        .sum();
    assert_eq!(held, 3);
}
