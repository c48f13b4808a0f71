//! Recordings that outlive their node's part in a stream (issue 13, DESIGN §3 "tasks"), in the
//! deterministic simulation: a recording stays on its node while the publisher migrates away and
//! back (the stream relayed in), moves to another node at a keyframe, and resumes on another
//! node from its last stored state after its node died.
//!
//! What is checked is what a player of the recording would see: every video frame the publisher
//! sent in the window written exactly once, across nodes (no gap, no duplicate), one playlist
//! whose segments are numbered without a hole, and a discontinuity only where media was lost.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use ferry_proto::{NodeId, RecordingId, StreamId};
use ferry_record::RecorderState;
use ferry_sfu::codec::Codec;
use ferry_sfu::node::{RecordingOutput, RecordingPhase};
use ferry_sim::testbed::Testbed;
use rand::SeedableRng;

use crate::support;
use support::{Timing, addr, link, migrate};

const A: &str = "10.0.0.100:5000";
const B: &str = "10.0.0.101:5000";

/// Objects as a store holds them: the last put of each name wins.
#[derive(Default)]
struct Bucket {
    objects: BTreeMap<String, Vec<u8>>,
}

impl Bucket {
    /// Puts what the node at `at` output for its recordings, in order.
    fn take(&mut self, tb: &mut Testbed, at: SocketAddr) -> Vec<RecordingOutput> {
        let mut rest = Vec::new();
        while let Some(o) = tb.node(at).poll_recording() {
            match o {
                RecordingOutput::Put(_, obj) => {
                    self.objects.insert(obj.name, obj.bytes);
                }
                other => rest.push(other),
            }
        }
        rest
    }

    fn playlist(&self) -> String {
        String::from_utf8(self.objects["index.m3u8"].clone()).unwrap()
    }

    fn state(&self) -> RecorderState {
        RecorderState::from_json(&self.objects["state.json"]).unwrap()
    }

    /// The playlist's segments are numbered 1, 2, … without a hole, each stored; returns how
    /// many there are and how many discontinuities it marks.
    fn check_playlist(&self) -> (usize, usize) {
        let p = self.playlist();
        let segments: Vec<&str> = p
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
            .collect();
        for (i, name) in segments.iter().enumerate() {
            let n: usize = name
                .trim_start_matches("seg-")
                .split('.')
                .next()
                .unwrap()
                .parse()
                .unwrap();
            assert_eq!(n, i + 1, "segment numbers without a hole: {p}");
            assert!(self.objects.contains_key(*name), "{name} is stored");
        }
        let gaps = p.matches("#EXT-X-DISCONTINUITY\n").count();
        (segments.len(), gaps)
    }
}

/// Video frames the publisher `peer` sent so far.
fn sent_video_frames(tb: &Testbed, peer: usize) -> u64 {
    tb.peers[peer]
        .stats()
        .sent
        .iter()
        .filter(|s| s.codec.is_video())
        .map(|s| s.frames)
        .sum()
}

/// Video frames recording `id` wrote on the node at `at`.
fn recorded(tb: &mut Testbed, at: SocketAddr, id: &RecordingId) -> u64 {
    tb.node(at).recording(id).map_or(0, |r| r.video_frames)
}

impl World {
    /// Video frames the recording wrote on `at`, and those the publisher sent, so far.
    fn frames(&mut self, at: SocketAddr) -> (u64, u64) {
        let id = self.id.clone();
        (
            recorded(&mut self.tb, at, &id),
            sent_video_frames(&self.tb, self.publisher),
        )
    }
}

struct World {
    tb: Testbed,
    a: SocketAddr,
    b: SocketAddr,
    publisher: usize,
    publisher_id: ferry_proto::SessionId,
    stream: StreamId,
    id: RecordingId,
}

/// Nodes A and B, the publisher on A, a recording of its stream on `on`.
fn world(seed: u64, codec: Codec, on: &str) -> World {
    let (a, b) = (addr(A), addr(B));
    let mut tb = Testbed::new(seed, link(0.01));
    tb.add_node(NodeId::new("node-a").unwrap(), a).unwrap();
    tb.add_node(NodeId::new("node-b").unwrap(), b).unwrap();
    let (publisher, publisher_id) = tb.publish(a, "cam", codec, addr("10.0.0.1:4000")).unwrap();
    tb.run_for(Duration::from_secs(1));
    let stream = StreamId::new("cam").unwrap();
    let on = addr(on);
    if on != a {
        let now = tb.now();
        tb.node(on).subscribe_relay(now, &stream, a);
        tb.run_for(Duration::from_millis(300));
    }
    let id = RecordingId::new("rec-sim").unwrap();
    let now = tb.now();
    tb.node(on)
        .start_recording(now, Some(id.clone()), &stream, Some("/sim/rec-sim".into()))
        .unwrap();
    // Past the first keyframe and segment start.
    tb.run_for(Duration::from_secs(2));
    World {
        tb,
        a,
        b,
        publisher,
        publisher_id,
        stream,
        id,
    }
}

/// The publisher moves to B and back while the recording stays on A: A keeps the stream
/// relayed in from B meanwhile (nothing else watches it there), and the recording takes every
/// frame across both switches.
#[test]
fn a_recording_stays_on_its_node_while_its_publisher_moves_away_and_back() {
    for (seed, codec) in [(51, Codec::Vp8), (52, Codec::H264), (53, Codec::Vp8)] {
        let mut w = world(seed, codec, A);
        let mut timing = Timing(rand_chacha::ChaCha8Rng::seed_from_u64(seed));
        let mut bucket = Bucket::default();
        let (a, b) = (w.a, w.b);
        let (r1, s1) = w.frames(a);
        migrate(&mut w.tb, &mut timing, &w.publisher_id, a, b);
        w.tb.run_for(Duration::from_secs(3));
        assert_eq!(w.tb.node(a).session_count(), 0, "the publisher left A");
        assert!(
            w.tb.node(a).has_stream(&w.stream),
            "A relays the stream in for its recording"
        );
        migrate(&mut w.tb, &mut timing, &w.publisher_id, b, a);
        w.tb.run_for(Duration::from_secs(2));
        w.tb.peers[w.publisher].pause_media();
        w.tb.run_for(Duration::from_secs(1));
        let (r2, s2) = w.frames(a);
        eprintln!(
            "seed {seed} {codec:?}: sent {} video frames, recorded {}",
            s2 - s1,
            r2 - r1
        );
        assert!(
            (r2 - r1).abs_diff(s2 - s1) <= 2,
            "seed {seed}: every frame sent is recorded once ({} sent, {} recorded)",
            s2 - s1,
            r2 - r1
        );
        let holes = w.tb.node(a).recording(&w.id).unwrap().video_holes;
        assert_eq!(holes, 0, "seed {seed}: the relay's packets follow on");
        let now = w.tb.now();
        w.tb.node(a).stop_recording(now, &w.id).unwrap();
        bucket.take(&mut w.tb, a);
        let (segments, gaps) = bucket.check_playlist();
        assert!(segments >= 2, "seed {seed}: {segments} segments");
        assert_eq!(gaps, 0, "nothing lost, nothing marked");
        assert!(bucket.playlist().contains("#EXT-X-ENDLIST"));
    }
}

/// Hands the recording on `from` over to `to` the way the scheduler's move does: `to` waits
/// for it (the stream relayed in), `from` hands over at its next keyframe, `to` resumes.
fn hand_over(
    tb: &mut Testbed,
    id: &RecordingId,
    stream: &StreamId,
    from: SocketAddr,
    to: SocketAddr,
) {
    if !tb.node(to).has_stream(stream) {
        let now = tb.now();
        tb.node(to).subscribe_relay(now, stream, from);
        tb.run_for(Duration::from_millis(300));
    }
    let now = tb.now();
    let target = tb.node(from).recording(id).unwrap().target;
    let waiting = tb
        .node(to)
        .await_recording(now, id.clone(), stream, target.clone())
        .unwrap();
    assert_eq!(waiting.state, RecordingPhase::Awaiting);
    // Asking again (a retried order) changes nothing.
    tb.node(to)
        .await_recording(now, id.clone(), stream, target)
        .unwrap();
    tb.run_for(Duration::from_millis(20));
    let now = tb.now();
    tb.node(from).begin_recording_handover(now, id).unwrap();
    let mut waited = Duration::ZERO;
    let state = loop {
        if let Some(s) = tb.node(from).handed_over_state(id) {
            break s;
        }
        assert!(
            waited < Duration::from_secs(2),
            "a keyframe comes to hand over at"
        );
        tb.run_for(Duration::from_millis(5));
        waited += Duration::from_millis(5);
    };
    // The state travels while both nodes keep receiving.
    tb.run_for(Duration::from_millis(30));
    let now = tb.now();
    let info = tb.node(to).resume_awaiting(now, id, &state).unwrap();
    assert_eq!(info.state, RecordingPhase::Recording);
    assert_eq!(
        tb.node(from).recording(id).unwrap().state,
        RecordingPhase::Moved
    );
}

/// The drain of the recording's node: the publisher moves A → B, then the recording follows it
/// at a keyframe — every frame sent is written once, by A or by B, into one playlist.
#[test]
fn a_recording_moves_to_another_node_with_no_gap_and_no_duplicate() {
    for (seed, codec, publisher_first) in [
        (61, Codec::Vp8, true),
        (62, Codec::H264, true),
        (63, Codec::Vp8, false),
        (64, Codec::H264, false),
    ] {
        let mut w = world(seed, codec, A);
        let mut timing = Timing(rand_chacha::ChaCha8Rng::seed_from_u64(seed));
        let mut bucket = Bucket::default();
        let (a, b) = (w.a, w.b);
        let (r1, s1) = w.frames(a);
        if publisher_first {
            migrate(&mut w.tb, &mut timing, &w.publisher_id, a, b);
            w.tb.run_for(Duration::from_secs(1));
        }
        let id = w.id.clone();
        let stream = w.stream.clone();
        hand_over(&mut w.tb, &id, &stream, a, b);
        bucket.take(&mut w.tb, a);
        let ra = recorded(&mut w.tb, a, &id) - r1;
        w.tb.run_for(Duration::from_secs(3));
        w.tb.peers[w.publisher].pause_media();
        w.tb.run_for(Duration::from_secs(1));
        let rb = recorded(&mut w.tb, b, &id);
        let s2 = sent_video_frames(&w.tb, w.publisher);
        eprintln!(
            "seed {seed} {codec:?} publisher first: {publisher_first}: sent {}, recorded {ra} on A + {rb} on B",
            s2 - s1
        );
        assert!(
            (ra + rb).abs_diff(s2 - s1) <= 2,
            "seed {seed}: every frame once across the hand-over ({} sent, {ra} + {rb} recorded)",
            s2 - s1
        );
        let holes = |tb: &mut Testbed, at| tb.node(at).recording(&id).unwrap().video_holes;
        assert_eq!(
            (holes(&mut w.tb, a), holes(&mut w.tb, b)),
            (0, 0),
            "seed {seed}: B's first frame follows on from A's last"
        );
        let now = w.tb.now();
        w.tb.node(b).stop_recording(now, &id).unwrap();
        bucket.take(&mut w.tb, b);
        let (segments, gaps) = bucket.check_playlist();
        assert!(segments >= 2, "seed {seed}: {segments} segments");
        assert_eq!(gaps, 0, "a hand-over loses nothing, so marks nothing");
        assert!(bucket.playlist().contains("#EXT-X-ENDLIST"));
        // A recording coming back to a node it left takes the old entry's place.
        if !w.tb.node(a).has_stream(&stream) {
            let now = w.tb.now();
            let origin = if publisher_first { b } else { a };
            w.tb.node(a).subscribe_relay(now, &stream, origin);
            w.tb.run_for(Duration::from_millis(300));
        }
        let now = w.tb.now();
        assert!(
            w.tb.node(a)
                .await_recording(now, id.clone(), &stream, "/sim/other".into())
                .is_ok(),
            "a moved-away entry does not block its id"
        );
    }
}

/// The recording's node dies: another node resumes it from the state stored last; the media
/// between that state and the resumption is lost, and the playlist says so (one
/// discontinuity), with no hole in the segment numbers.
#[test]
fn a_recording_resumes_from_storage_after_its_node_dies() {
    for (seed, codec) in [(71, Codec::Vp8), (72, Codec::H264)] {
        // The recording on B, fed by the relay from the publisher's node A.
        let mut w = world(seed, codec, B);
        let mut bucket = Bucket::default();
        let (a, b) = (w.a, w.b);
        w.tb.run_for(Duration::from_secs(7));
        bucket.take(&mut w.tb, b);
        let before = bucket.check_playlist().0;
        assert!(before >= 1, "B stored a segment before it died");
        w.tb.crash_node(b);
        w.tb.run_for(Duration::from_secs(2));
        let state = bucket.state();
        let now = w.tb.now();
        let stream = w.stream.clone();
        w.tb.node(a)
            .resume_recording(now, w.id.clone(), &stream, &state, true)
            .unwrap();
        w.tb.run_for(Duration::from_secs(6));
        let now = w.tb.now();
        w.tb.node(a).stop_recording(now, &w.id).unwrap();
        bucket.take(&mut w.tb, a);
        let (segments, gaps) = bucket.check_playlist();
        eprintln!("seed {seed} {codec:?}: {before} segments before the crash, {segments} after");
        assert!(segments > before, "the recording went on");
        assert_eq!(gaps, 1, "the lost media is marked once");
        assert!(bucket.playlist().contains("#EXT-X-ENDLIST"));
    }
}
