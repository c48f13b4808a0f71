//! Recordings as tasks of the cluster (DESIGN §3 "tasks"): the scheduler names each recording,
//! places it on a node where its stream is live, and keeps it going when that node leaves —
//! moved at a keyframe when the node drains (no gap, no duplicate), resumed from the state the
//! node last stored when it dies (the gap marked as a discontinuity).
//!
//! Pure, like the rest of the cluster core: [`Cluster::tick`] turns what it sees into
//! [`Action`]s (move, resume); the driver carries them out on the nodes and reports back.

use std::time::{Duration, Instant};

use ferry_proto::api::{NodeState, RecordingReport, SessionKind};
use ferry_proto::{NodeId, RecordingId, StreamId};
use serde::{Deserialize, Serialize};

use super::{Action, Cluster, ClusterError};

/// How long a recording whose node died waits for its stream to be live on another node (its
/// publisher reconnecting there, say) before it is given up as lost.
pub const RESUME_WITHIN: Duration = Duration::from_secs(60);

/// Where a recording task is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskState {
    /// Running on its node.
    Recording,
    /// Being handed over from its node to another (its node drains).
    Moving,
    /// Its node died (or a move failed after the hand-over): to be resumed from storage.
    Resuming,
    /// Stopped (by the API, or its stream ended).
    Stopped,
    /// Its stream was live nowhere for [`RESUME_WITHIN`] after its node died.
    Lost,
}

impl TaskState {
    /// The name used in the API.
    pub fn as_str(self) -> &'static str {
        match self {
            TaskState::Recording => "recording",
            TaskState::Moving => "moving",
            TaskState::Resuming => "resuming",
            TaskState::Stopped => "stopped",
            TaskState::Lost => "lost",
        }
    }
}

/// A recording the scheduler keeps going.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordingTask {
    /// Its id, cluster-wide.
    pub id: RecordingId,
    /// The stream it records.
    pub stream: StreamId,
    /// Where its objects go (as its first node resolved it).
    pub target: String,
    /// The node that runs it (or ran it last).
    pub node: NodeId,
    /// Where it is.
    pub state: TaskState,
    /// While moving: the node it goes to.
    pub to: Option<NodeId>,
    /// Moves done.
    pub moves: u32,
    /// Resumptions after a dead node.
    pub resumes: u32,
    /// Why the last move or resumption failed, if it did.
    pub error: Option<String>,
    /// An order for it is being carried out (not stored: a new leader orders again).
    #[serde(skip)]
    in_flight: bool,
    /// Since when it waits to be resumed.
    #[serde(skip)]
    orphaned_at: Option<Instant>,
}

/// What the driver does for a recording (an [`Action`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordingOrder {
    /// The recording.
    pub id: RecordingId,
    /// Its stream.
    pub stream: StreamId,
    /// Its target.
    pub target: String,
    /// Move: the source node and its HTTP base URL (`None`: resume from storage).
    pub from: Option<(NodeId, String)>,
    /// The node that continues it and its HTTP base URL.
    pub to: (NodeId, String),
}

impl Cluster {
    /// 404 unless `stream` has a publisher somewhere in the cluster (a task of it needs one).
    pub(super) fn require_published(&self, stream: &StreamId) -> Result<(), ClusterError> {
        let live = self
            .sessions
            .values()
            .any(|s| s.stream == *stream && s.kind == SessionKind::Publish);
        if live {
            Ok(())
        } else {
            Err(ClusterError::NotFound(format!(
                "stream {stream} has no publisher in the cluster"
            )))
        }
    }

    /// The node to record `stream` on, other than `exclude`: the publisher's node when it takes
    /// work, else the stream's node by bounded-load consistent hashing (it is relayed there),
    /// else the least loaded active node.
    /// `None` when the stream has no publisher anywhere, or no node can take it.
    pub fn recording_node(&self, stream: &StreamId, exclude: Option<&NodeId>) -> Option<NodeId> {
        let ok = |id: &NodeId| {
            Some(id) != exclude
                && self
                    .nodes
                    .get(id)
                    .is_some_and(|n| n.state == NodeState::Active)
        };
        let origin = self
            .sessions
            .values()
            .find(|s| s.stream == *stream && s.kind == SessionKind::Publish)
            .map(|s| s.node.clone())
            .filter(|n| {
                self.nodes
                    .get(n)
                    .is_some_and(|r| r.state != NodeState::Down)
            })?;
        if ok(&origin) {
            return Some(origin);
        }
        // The stream's node by placement, else (weights still ramping up) the least loaded.
        let loads = self.loads();
        self.stream_nodes(stream)
            .into_iter()
            .find(|n| ok(n))
            .or_else(|| {
                self.nodes
                    .keys()
                    .filter(|n| ok(n))
                    .min_by_key(|n| loads.get(*n).copied().unwrap_or(0))
                    .cloned()
            })
    }

    /// `POST /v1/recordings`: where a new recording of `stream` goes — `on` when the operator
    /// names a node (404: unknown; 409: not active) — (404: the stream is live nowhere; 503: no
    /// node can take it).
    pub fn place_recording(
        &self,
        stream: &StreamId,
        on: Option<&NodeId>,
    ) -> Result<(NodeId, String), ClusterError> {
        self.require_published(stream)?;
        let node = match on {
            Some(n) => match self.nodes.get(n).map(|r| r.state) {
                None => return Err(ClusterError::NotFound(format!("no node {n}"))),
                Some(NodeState::Active) => n.clone(),
                Some(st) => {
                    return Err(ClusterError::Conflict(format!(
                        "node {n} is {}: it takes no new recordings",
                        serde_json::to_value(st)
                            .ok()
                            .and_then(|v| v.as_str().map(str::to_owned))
                            .unwrap_or_default()
                    )));
                }
            },
            None => self
                .recording_node(stream, None)
                .ok_or_else(|| ClusterError::Unavailable("no active node can record".into()))?,
        };
        let http = self.node_http(&node).map(|(h, _)| h).unwrap_or_default();
        Ok((node, http))
    }

    /// A recording its node started (after [`Cluster::place_recording`]).
    pub fn add_recording(
        &mut self,
        id: RecordingId,
        stream: StreamId,
        target: String,
        node: NodeId,
    ) {
        self.recordings.insert(
            id.clone(),
            RecordingTask {
                id,
                stream,
                target,
                node,
                state: TaskState::Recording,
                to: None,
                moves: 0,
                resumes: 0,
                error: None,
                in_flight: false,
                orphaned_at: None,
            },
        );
    }

    /// One recording task.
    pub fn recording_task(&self, id: &RecordingId) -> Option<&RecordingTask> {
        self.recordings.get(id)
    }

    /// A recording was stopped through the API.
    pub fn recording_stopped(&mut self, id: &RecordingId) {
        if let Some(t) = self.recordings.get_mut(id) {
            t.state = TaskState::Stopped;
            t.to = None;
        }
    }

    /// A move ended: the target records it (`Ok`), or it failed — before the hand-over the
    /// source records on; after it (`handed_over`) it is resumed from storage.
    pub fn recording_move_done(
        &mut self,
        now: Instant,
        id: &RecordingId,
        result: Result<NodeId, (String, bool)>,
    ) {
        let Some(t) = self.recordings.get_mut(id) else {
            return;
        };
        t.in_flight = false;
        t.to = None;
        match result {
            Ok(node) => {
                t.node = node;
                t.state = TaskState::Recording;
                t.moves += 1;
                t.error = None;
            }
            Err((reason, handed_over)) => {
                t.error = Some(reason);
                if handed_over {
                    t.state = TaskState::Resuming;
                    t.orphaned_at = Some(now);
                } else {
                    t.state = TaskState::Recording;
                }
            }
        }
    }

    /// A resumption ended: `Ok(node)` records it now; a failure is tried again.
    pub fn recording_resume_done(
        &mut self,
        id: &RecordingId,
        result: Result<NodeId, super::OrderFailed>,
    ) {
        let Some(t) = self.recordings.get_mut(id) else {
            return;
        };
        t.in_flight = false;
        match result {
            Ok(node) => {
                t.node = node;
                t.state = TaskState::Recording;
                t.resumes += 1;
                t.error = None;
                t.orphaned_at = None;
            }
            Err(e) => t.error = Some(e.0),
        }
    }

    /// What the nodes report of the recordings they run: a recording whose stream ended on
    /// its node is stopped.
    pub(super) fn note_recording_reports(&mut self, node: &NodeId, reports: &[RecordingReport]) {
        for r in reports {
            let Ok(id) = RecordingId::new(r.id.clone()) else {
                continue;
            };
            if let Some(t) = self.recordings.get_mut(&id)
                && t.node == *node
                && t.state == TaskState::Recording
                && r.state == "stopped"
            {
                t.state = TaskState::Stopped;
            }
        }
    }

    /// Whether recordings still run on `node` (a drain waits for them to move).
    pub(super) fn records_on(&self, node: &NodeId) -> bool {
        self.recordings
            .values()
            .any(|t| t.node == *node && matches!(t.state, TaskState::Recording | TaskState::Moving))
    }

    /// Recordings on a draining node move; those on a dead node resume where their stream is.
    pub(super) fn drive_recordings(&mut self, now: Instant) -> Vec<Action> {
        let mut actions = Vec::new();
        let tasks: Vec<RecordingTask> = self
            .recordings
            .values()
            .filter(|t| {
                matches!(
                    t.state,
                    TaskState::Recording | TaskState::Moving | TaskState::Resuming
                )
            })
            .cloned()
            .collect();
        for mut t in tasks {
            let node_state = self.nodes.get(&t.node).map(|n| n.state);
            if t.state == TaskState::Recording && matches!(node_state, Some(NodeState::Down) | None)
            {
                t.state = TaskState::Resuming;
                t.orphaned_at = Some(now);
                tracing::warn!(recording = %t.id, node = %t.node, "the recording's node is down: resuming it from storage");
            }
            if !t.in_flight {
                let from = || Some((t.node.clone(), self.http_of(&t.node)));
                let order = match t.state {
                    TaskState::Recording
                        if matches!(node_state, Some(NodeState::Draining | NodeState::Drained)) =>
                    {
                        self.recording_node(&t.stream, Some(&t.node)).map(|to| {
                            t.state = TaskState::Moving;
                            t.to = Some(to.clone());
                            (from(), to)
                        })
                    }
                    // A move whose order was lost (the scheduler restarted): ordered again; every
                    // step is idempotent on the nodes.
                    TaskState::Moving => t.to.clone().map(|to| (from(), to)),
                    TaskState::Resuming => {
                        let since = *t.orphaned_at.get_or_insert(now);
                        let on = self.recording_node(&t.stream, None);
                        if on.is_none() && now.saturating_duration_since(since) >= RESUME_WITHIN {
                            t.state = TaskState::Lost;
                            t.error = Some(format!(
                                "stream {} was live on no node for {} s after node {} died",
                                t.stream,
                                RESUME_WITHIN.as_secs(),
                                t.node
                            ));
                            tracing::warn!(recording = %t.id, stream = %t.stream, "recording lost: its stream came back nowhere");
                        }
                        on.map(|on| (None, on))
                    }
                    _ => None,
                };
                if let Some((from, to)) = order {
                    t.in_flight = true;
                    let http = self.http_of(&to);
                    actions.push(Action::Recording(RecordingOrder {
                        id: t.id.clone(),
                        stream: t.stream.clone(),
                        target: t.target.clone(),
                        from,
                        to: (to, http),
                    }));
                }
            }
            self.recordings.insert(t.id.clone(), t);
        }
        actions
    }

    fn http_of(&self, node: &NodeId) -> String {
        self.node_http(node).map(|(h, _)| h).unwrap_or_default()
    }

    /// `GET /v1/recordings`: the scheduler's recordings (with the figures their node reports)
    /// and those started on a node directly that its heartbeat lists.
    pub fn recording_views(&self) -> Vec<RecordingReport> {
        let reported = |node: &NodeId, id: &str| {
            self.nodes
                .get(node)
                .filter(|n| n.state != NodeState::Down)
                .and_then(|n| n.heartbeat.recordings.iter().find(|r| r.id == id))
        };
        let mut out: Vec<RecordingReport> = self
            .recordings
            .values()
            .map(|t| {
                let r = reported(&t.node, t.id.as_str());
                RecordingReport {
                    id: t.id.to_string(),
                    stream: t.stream.to_string(),
                    target: t.target.clone(),
                    state: t.state.as_str().to_owned(),
                    segments: r.map_or(0, |r| r.segments),
                    bytes: r.map_or(0, |r| r.bytes),
                    node: t.node.to_string(),
                    moves: t.moves,
                    resumes: t.resumes,
                    error: t.error.clone(),
                }
            })
            .collect();
        for (id, n) in &self.nodes {
            if n.state == NodeState::Down {
                continue;
            }
            for r in &n.heartbeat.recordings {
                let tracked = RecordingId::new(r.id.clone())
                    .is_ok_and(|rid| self.recordings.contains_key(&rid));
                if !tracked {
                    let mut r = r.clone();
                    r.node = id.to_string();
                    out.push(r);
                }
            }
        }
        out
    }

    /// `/metrics` series of the recordings the scheduler keeps going.
    pub fn recording_metrics(&self) -> String {
        use std::fmt::Write as _;
        let mut s = String::from(
            "# HELP ferry_scheduler_recordings Recordings the scheduler keeps going, by state.\n\
             # TYPE ferry_scheduler_recordings gauge\n",
        );
        for st in [
            TaskState::Recording,
            TaskState::Moving,
            TaskState::Resuming,
            TaskState::Stopped,
            TaskState::Lost,
        ] {
            let n = self.recordings.values().filter(|t| t.state == st).count();
            let _ = writeln!(
                s,
                "ferry_scheduler_recordings{{state=\"{}\"}} {n}",
                st.as_str()
            );
        }
        let moves: u64 = self.recordings.values().map(|t| u64::from(t.moves)).sum();
        let resumes: u64 = self.recordings.values().map(|t| u64::from(t.resumes)).sum();
        let _ = write!(
            s,
            "# HELP ferry_scheduler_recording_moves_total Recordings handed over to another node (drains).\n\
             # TYPE ferry_scheduler_recording_moves_total counter\n\
             ferry_scheduler_recording_moves_total {moves}\n\
             # HELP ferry_scheduler_recording_resumes_total Recordings resumed on another node after theirs died (a gap, marked).\n\
             # TYPE ferry_scheduler_recording_resumes_total counter\n\
             ferry_scheduler_recording_resumes_total {resumes}\n"
        );
        s
    }

    /// One recording's view (404: unknown).
    pub fn recording_view(&self, id: &RecordingId) -> Result<RecordingReport, ClusterError> {
        self.recording_views()
            .into_iter()
            .find(|r| r.id == id.as_str())
            .ok_or_else(|| ClusterError::NotFound(format!("no recording {id}")))
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::beat_with;
    use super::super::{ClusterConfig, Persisted};
    use super::*;

    fn node(s: &str) -> NodeId {
        NodeId::new(s).unwrap()
    }

    fn orders(actions: Vec<Action>) -> Vec<RecordingOrder> {
        actions
            .into_iter()
            .filter_map(|a| match a {
                Action::Recording(o) => Some(o),
                _ => None,
            })
            .collect()
    }

    /// Nodes a (the publisher of `live`) and b, both up; a recording of `live` on a.
    fn cluster(t0: Instant) -> (Cluster, RecordingId) {
        let mut c = Cluster::new(ClusterConfig::default(), t0).unwrap();
        beat_with(&mut c, t0, &node("a"), &[("p", SessionKind::Publish)]);
        beat_with(&mut c, t0, &node("b"), &[]);
        let live = StreamId::new("live").unwrap();
        let (on, http) = c.place_recording(&live, None).unwrap();
        assert_eq!((on.as_str(), http.as_str()), ("a", "http://a.test"));
        let id = RecordingId::new("rec-1").unwrap();
        c.add_recording(id.clone(), live, "/rec/rec-1".into(), on);
        (c, id)
    }

    #[test]
    fn a_recording_goes_where_its_stream_is_published() {
        let t0 = Instant::now();
        let (c, id) = cluster(t0);
        let absent = StreamId::new("absent").unwrap();
        assert!(matches!(
            c.place_recording(&absent, None),
            Err(ClusterError::NotFound(_))
        ));
        let live = StreamId::new("live").unwrap();
        let (b, _) = c.place_recording(&live, Some(&node("b"))).unwrap();
        assert_eq!(b.as_str(), "b", "an operator may name the node");
        assert!(matches!(
            c.place_recording(&live, Some(&node("zz"))),
            Err(ClusterError::NotFound(_))
        ));
        let v = c.recording_view(&id).unwrap();
        assert_eq!((v.node.as_str(), v.state.as_str()), ("a", "recording"));
        assert!(c.recording_views().iter().any(|r| r.id == "rec-1"));
    }

    #[test]
    fn a_draining_node_moves_its_recording_and_is_drained_only_after() {
        let t0 = Instant::now();
        let (mut c, _) = cluster(t0);
        // Another recording of `live`, on b (relayed there); b holds no session.
        let live = StreamId::new("live").unwrap();
        let (on, _) = c.place_recording(&live, Some(&node("b"))).unwrap();
        let id = RecordingId::new("rec-2").unwrap();
        c.add_recording(id.clone(), live, "/rec/rec-2".into(), on);
        c.drain(t0, &node("b")).unwrap();
        let o = orders(c.tick(t0));
        assert_eq!(o.len(), 1, "{o:?}");
        assert_eq!(o[0].id, id);
        assert_eq!(o[0].from.as_ref().map(|f| f.0.as_str()), Some("b"));
        assert_eq!(o[0].to.0.as_str(), "a", "the publisher's node");
        assert_eq!(o[0].to.1, "http://a.test");
        assert_eq!(c.recording_task(&id).unwrap().state, TaskState::Moving);
        assert!(orders(c.tick(t0)).is_empty(), "one order at a time");
        assert_eq!(
            c.node_state(&node("b")),
            Some(NodeState::Draining),
            "not drained while its recording moves"
        );
        // A move that fails before the hand-over leaves it on b, and it is ordered again.
        c.recording_move_done(t0, &id, Err(("a refused".into(), false)));
        let t = c.recording_task(&id).unwrap();
        assert_eq!((t.state, t.node.as_str()), (TaskState::Recording, "b"));
        assert_eq!(t.error.as_deref(), Some("a refused"));
        assert_eq!(orders(c.tick(t0)).len(), 1);
        c.recording_move_done(t0, &id, Ok(node("a")));
        let t = c.recording_task(&id).unwrap();
        assert_eq!(
            (t.state, t.node.as_str(), t.moves),
            (TaskState::Recording, "a", 1)
        );
        assert_eq!(t.error, None);
        let _ = c.tick(t0);
        assert_eq!(c.node_state(&node("b")), Some(NodeState::Drained));
    }

    #[test]
    fn the_publisher_s_draining_node_hands_its_recording_to_another() {
        let t0 = Instant::now();
        let (mut c, id) = cluster(t0);
        c.drain(t0, &node("a")).unwrap();
        let o = orders(c.tick(t0));
        assert_eq!(o.len(), 1, "{o:?}");
        assert_eq!(
            (o[0].from.as_ref().map(|f| f.0.as_str()), o[0].to.0.as_str()),
            (Some("a"), "b"),
            "the origin drains: the recording goes where the stream will be relayed"
        );
        assert_eq!(
            c.recording_task(&id)
                .unwrap()
                .to
                .as_ref()
                .map(NodeId::as_str),
            Some("b")
        );
    }

    #[test]
    fn a_move_that_fails_after_the_hand_over_resumes_from_storage() {
        let t0 = Instant::now();
        let (mut c, id) = cluster(t0);
        c.drain(t0, &node("a")).unwrap();
        assert_eq!(orders(c.tick(t0)).len(), 1);
        c.recording_move_done(t0, &id, Err(("b died".into(), true)));
        assert_eq!(c.recording_task(&id).unwrap().state, TaskState::Resuming);
        // The publisher is on a (draining): it resumes on b, relayed.
        let o = orders(c.tick(t0));
        assert_eq!(o.len(), 1);
        assert_eq!((o[0].from.is_none(), o[0].to.0.as_str()), (true, "b"));
    }

    #[test]
    fn a_dead_node_s_recording_resumes_where_the_stream_comes_back_or_is_lost() {
        let t0 = Instant::now();
        let (mut c, id) = cluster(t0);
        // a dies with the publisher: nothing to resume on until the stream is live again.
        let later = t0 + Duration::from_secs(10);
        beat_with(&mut c, later, &node("b"), &[]);
        let o = orders(c.tick(later));
        assert_eq!(c.node_state(&node("a")), Some(NodeState::Down));
        assert!(o.is_empty(), "no publisher anywhere: {o:?}");
        assert_eq!(c.recording_task(&id).unwrap().state, TaskState::Resuming);
        // Its publisher reconnects to b: the recording resumes there.
        beat_with(&mut c, later, &node("b"), &[("p", SessionKind::Publish)]);
        let o = orders(c.tick(later));
        assert_eq!(o.len(), 1);
        assert_eq!((o[0].from.is_none(), o[0].to.0.as_str()), (true, "b"));
        assert_eq!(o[0].target, "/rec/rec-1", "the same target");
        // A failed attempt is tried again on the next tick.
        c.recording_resume_done(&id, Err(super::super::OrderFailed("b: 502".into())));
        assert_eq!(orders(c.tick(later)).len(), 1);
        c.recording_resume_done(&id, Ok(node("b")));
        let t = c.recording_task(&id).unwrap();
        assert_eq!(
            (t.state, t.node.as_str(), t.resumes),
            (TaskState::Recording, "b", 1)
        );

        // Another recording whose stream never comes back is lost after RESUME_WITHIN.
        let (mut c, id) = cluster(t0);
        beat_with(&mut c, later, &node("b"), &[]);
        let _ = c.tick(later);
        let much_later = later + RESUME_WITHIN;
        beat_with(&mut c, much_later, &node("b"), &[]);
        assert!(orders(c.tick(much_later)).is_empty());
        let t = c.recording_task(&id).unwrap();
        assert_eq!(t.state, TaskState::Lost);
        assert!(
            t.error
                .as_deref()
                .is_some_and(|e| e.contains("live on no node"))
        );
    }

    #[test]
    fn a_recording_whose_stream_ended_is_stopped_and_tasks_survive_a_restart() {
        let t0 = Instant::now();
        let (mut c, id) = cluster(t0);
        let p: Persisted =
            serde_json::from_str(&serde_json::to_string(&c.persisted(t0, 1_000)).unwrap()).unwrap();
        let restored = Cluster::restore(ClusterConfig::default(), p, t0, 1_000).unwrap();
        assert_eq!(restored.recording_task(&id), c.recording_task(&id));
        let hb = ferry_proto::api::Heartbeat {
            http: "http://a.test".into(),
            media: "127.0.0.1:1".into(),
            recordings: vec![RecordingReport {
                id: "rec-1".into(),
                stream: "live".into(),
                state: "stopped".into(),
                ..Default::default()
            }],
            ..Default::default()
        };
        c.heartbeat(t0, &node("a"), hb).unwrap();
        assert_eq!(c.recording_task(&id).unwrap().state, TaskState::Stopped);
        c.drain(t0, &node("a")).unwrap();
        assert!(
            orders(c.tick(t0)).is_empty(),
            "a stopped recording does not move"
        );
    }
}
