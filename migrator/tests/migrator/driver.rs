//! Two nodes in one process, each a tokio task running the driver helpers
//! over the in-memory transport, as `ferry dev` does.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::time::{Duration, Instant};

use ferry_migrator::transport::MemoryNetwork;
use ferry_migrator::{Config, MigrationEvent, MigrationPlan, Migrator, Outcome, driver};
use ferry_proto::StreamId;
use ferry_proto::api::CutoverMode;
use support::{Call, FakeHost, State, mid, node, sid};
use tokio::sync::{mpsc, oneshot};

/// A node task: the migrator arm of its select loop, plus a channel to
/// start migrations. Returns its host when a migration has finished.
async fn run_node(
    mut migrator: Migrator,
    mut transport: ferry_migrator::transport::MemoryTransport,
    mut host: FakeHost,
    mut starts: mpsc::UnboundedReceiver<MigrationPlan>,
    done: oneshot::Sender<(FakeHost, Box<ferry_migrator::MigrationReport>)>,
) {
    loop {
        tokio::select! {
            input = driver::next_input(migrator.poll_timeout(), &mut transport) => {
                driver::handle_input(&mut migrator, Instant::now(), &mut host, input.unwrap());
            }
            Some(plan) = starts.recv() => {
                migrator.start(Instant::now(), &mut host, plan).unwrap();
            }
        }
        driver::flush(&mut migrator, &transport);
        while let Some(e) = migrator.poll_event() {
            if let MigrationEvent::Finished(report) = e {
                // Keep answering a little longer, then hand the host back.
                let until = Instant::now() + Duration::from_millis(200);
                while Instant::now() < until {
                    let t = Some(until.min(migrator.poll_timeout().unwrap_or(until)));
                    let input = driver::next_input(t, &mut transport).await.unwrap();
                    driver::handle_input(&mut migrator, Instant::now(), &mut host, input);
                    driver::flush(&mut migrator, &transport);
                }
                let _ = done.send((host, report));
                return;
            }
        }
    }
}

#[tokio::test]
async fn memory_transport_and_driver_move_a_session() {
    let net = MemoryNetwork::new();
    let mut ha = FakeHost::new();
    ha.add_session("s1", 1, 100);
    let hb = FakeHost::new();
    let (start_a, starts_a) = mpsc::unbounded_channel();
    let (_start_b, starts_b) = mpsc::unbounded_channel();
    let (done_a, wait_a) = oneshot::channel();
    let (done_b, wait_b) = oneshot::channel();
    let ma = Migrator::new(node("a"), Config::default());
    let mb = Migrator::new(node("b"), Config::default());
    tokio::spawn(run_node(ma, net.join(node("a")), ha, starts_a, done_a));
    tokio::spawn(run_node(mb, net.join(node("b")), hb, starts_b, done_b));
    start_a
        .send(MigrationPlan {
            id: mid("m1"),
            session: sid("s1"),
            stream: StreamId::new("stream-s1").unwrap(),
            publisher: true,
            target: node("b"),
            epoch: 1,
            mode: CutoverMode::Edge,
            trace_parent: String::new(),
        })
        .unwrap();
    let (ha, ra) = tokio::time::timeout(Duration::from_secs(10), wait_a)
        .await
        .unwrap()
        .unwrap();
    let (hb, rb) = tokio::time::timeout(Duration::from_secs(10), wait_b)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (ra.outcome, rb.outcome),
        (Outcome::Committed, Outcome::Committed)
    );
    assert_eq!(ha.sessions[&sid("s1")].state, State::Released);
    assert_eq!(hb.sessions[&sid("s1")].state, State::Active(2));
    assert_eq!(hb.sessions[&sid("s1")].cache, ha.sessions[&sid("s1")].cache);
    assert_eq!(hb.calls.last(), Some(&Call::Activate("s1".into(), 2)));
}
