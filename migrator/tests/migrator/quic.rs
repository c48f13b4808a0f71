//! The QUIC transport on loopback: mutual TLS against the cluster CA, node
//! IDs from certificates, control and bulk streams.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use ferry_migrator::Message;
use ferry_migrator::transport::{
    ClusterCa, NodeIdentity, QuicTransport, Transport, TransportError,
};
use ferry_migrator::wire::{Body, Ready, WalAck, chunk_snapshot};
use ferry_proto::{MigrationId, NodeId};

fn node(s: &str) -> NodeId {
    NodeId::new(s).unwrap()
}

fn mid(s: &str) -> MigrationId {
    MigrationId::new(s).unwrap()
}

fn bind(id: &NodeIdentity) -> QuicTransport {
    QuicTransport::bind(id, "127.0.0.1:0".parse().unwrap()).unwrap()
}

async fn recv(t: &mut QuicTransport) -> (NodeId, Message) {
    tokio::time::timeout(Duration::from_secs(10), t.recv())
        .await
        .expect("no message within 10 s")
        .unwrap()
}

#[tokio::test]
async fn messages_cross_with_mutual_tls_and_authenticated_senders() {
    let ca = ClusterCa::generate().unwrap();
    let mut a = bind(&ca.issue(&node("node-a")).unwrap());
    let mut b = bind(&ca.issue(&node("node-b")).unwrap());
    a.add_peer(node("node-b"), b.local_addr().unwrap());
    b.add_peer(node("node-a"), a.local_addr().unwrap());

    // Snapshot chunks (bulk stream) and control messages (control stream).
    let data: Vec<u8> = (0..300_000u32).map(|i| (i * 7) as u8).collect();
    let chunks = chunk_snapshot(&data, 64 * 1024);
    let n = chunks.len();
    for c in chunks {
        a.send(
            &node("node-b"),
            Message::new(mid("m1"), Body::SnapshotChunk(c)),
        )
        .unwrap();
    }
    let ack = Message::new(mid("m1"), Body::WalAck(WalAck { position: 5 }));
    a.send(&node("node-b"), ack.clone()).unwrap();

    let mut got_chunks = Vec::new();
    let mut got_ack = None;
    while got_chunks.len() < n || got_ack.is_none() {
        let (from, m) = recv(&mut b).await;
        assert_eq!(from, node("node-a"), "sender from its certificate");
        match m.body {
            Body::SnapshotChunk(c) => got_chunks.push(c),
            _ => got_ack = Some(m),
        }
    }
    assert_eq!(got_ack, Some(ack));
    // One bulk stream keeps chunks in order; every one arrives intact.
    assert_eq!(
        got_chunks.iter().map(|c| c.seq).collect::<Vec<_>>(),
        (1..=n as u32).collect::<Vec<_>>()
    );
    assert!(got_chunks.iter().all(|c| c.is_intact()));
    let joined: Vec<u8> = got_chunks.into_iter().flat_map(|c| c.bytes).collect();
    assert_eq!(joined, data);

    let reply = Message::new(mid("m1"), Body::Ready(Ready { position: 5 }));
    b.send(&node("node-a"), reply.clone()).unwrap();
    assert_eq!(recv(&mut a).await, (node("node-b"), reply));
}

#[tokio::test]
async fn peers_of_another_ca_are_refused_both_ways() {
    let ca = ClusterCa::generate().unwrap();
    let other = ClusterCa::generate().unwrap();
    let mut a = bind(&ca.issue(&node("node-a")).unwrap());

    // A node of another cluster: its server certificate is not trusted.
    let stranger = bind(&other.issue(&node("node-b")).unwrap());
    a.add_peer(node("node-b"), stranger.local_addr().unwrap());
    let err = a.connect(&node("node-b")).await.unwrap_err();
    assert!(matches!(err, TransportError::Connect { .. }), "{err}");

    // A client that trusts our CA but presents another CA's certificate:
    // our side refuses it, so its dial fails and nothing reaches us.
    let forged = other.issue(&node("node-c")).unwrap();
    let impostor_id =
        NodeIdentity::from_pem(&forged.cert_pem(), &forged.key_pem(), &ca.cert_pem()).unwrap();
    let impostor = bind(&impostor_id);
    impostor.add_peer(node("node-a"), a.local_addr().unwrap());
    let err = impostor.connect(&node("node-a")).await.unwrap_err();
    assert!(matches!(err, TransportError::Connect { .. }), "{err}");
    impostor
        .send(
            &node("node-a"),
            Message::new(mid("m9"), Body::WalAck(WalAck { position: 1 })),
        )
        .unwrap();
    let nothing = tokio::time::timeout(Duration::from_millis(300), a.recv()).await;
    assert!(
        nothing.is_err(),
        "a refused peer's message arrived: {nothing:?}"
    );
}

#[tokio::test]
async fn a_dialled_node_must_be_the_one_its_certificate_names() {
    let ca = ClusterCa::generate().unwrap();
    let a = bind(&ca.issue(&node("node-a")).unwrap());
    let b = bind(&ca.issue(&node("node-b")).unwrap());
    // node-b listens where a believes node-c is.
    a.add_peer(node("node-c"), b.local_addr().unwrap());
    match a.connect(&node("node-c")).await {
        Err(TransportError::WrongPeer { expected, found }) => {
            assert_eq!((expected, found), (node("node-c"), node("node-b")));
        }
        other => panic!("expected WrongPeer, got {other:?}"),
    }
    assert!(matches!(
        a.connect(&node("node-x")).await,
        Err(TransportError::UnknownPeer(_))
    ));
}

/// Round trips of small control messages once the connections are up
/// (printed, not asserted: speed is for benchmarks). A message waits for
/// nothing but the network and the receiving task.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_round_trips_on_loopback() {
    let ca = ClusterCa::generate().unwrap();
    let mut a = bind(&ca.issue(&node("node-a")).unwrap());
    let mut b = bind(&ca.issue(&node("node-b")).unwrap());
    a.add_peer(node("node-b"), b.local_addr().unwrap());
    b.add_peer(node("node-a"), a.local_addr().unwrap());
    let ping = Message::new(mid("rt"), Body::WalAck(WalAck { position: 1 }));
    let mut times = Vec::new();
    for i in 0..40 {
        let t = std::time::Instant::now();
        a.send(&node("node-b"), ping.clone()).unwrap();
        let (_, m) = recv(&mut b).await;
        b.send(&node("node-a"), m).unwrap();
        recv(&mut a).await;
        if i >= 5 {
            times.push(t.elapsed());
        }
    }
    times.sort();
    eprintln!(
        "control round trip: p50 {:?}, max {:?} (35 after warm-up)",
        times[times.len() / 2],
        times[times.len() - 1]
    );
}
