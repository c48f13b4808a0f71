//! Transcodes as tasks of the cluster: the scheduler places each one by the GPU-aware score —
//! on a node whose GPU has NVENC sessions left for its rungs when one has, else on the node with
//! the most headroom — and remembers where it runs. Pure, like the rest of the cluster core.

use ferry_proto::api::{NodeState, SessionKind, TranscodeView};
use ferry_proto::{NodeId, StreamId, TranscodeId};
use serde::{Deserialize, Serialize};

use super::{Cluster, ClusterError};

/// A transcode the scheduler placed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TranscodeTask {
    /// Its id, cluster-wide.
    pub id: TranscodeId,
    /// The source stream.
    pub stream: StreamId,
    /// Its rungs (`360p`, …).
    pub ladder: Vec<String>,
    /// The node that runs it.
    pub node: NodeId,
    /// Whether it runs (false once stopped).
    pub running: bool,
    /// Placed for its GPU (NVENC sessions counted against the node's).
    pub on_gpu: bool,
    /// Times it moved to another node.
    #[serde(default)]
    pub moves: u32,
    /// The encoder its node chose (`h264_nvenc`, `libx264`) and, when not the first choice, why.
    #[serde(default)]
    pub encoder: String,
    /// Why not NVENC, where the node reports a GPU but its ffmpeg cannot use it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encoder_note: Option<String>,
    /// Its move or restart is being carried out.
    #[serde(skip)]
    pub in_flight: bool,
    /// Why its last move or restart failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// What the driver does for a transcode (an [`super::Action`]): hand it over from the node it
/// leaves (`from`, a drain: its rungs' session tickets) and start it on `to` with them — there
/// the rungs' publishers resume their sessions, and their viewers switch over at the new
/// worker's first keyframe; or, with no `from` (its node died), start it on `to` anew.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TranscodeOrder {
    /// The transcode.
    pub id: TranscodeId,
    /// Its source.
    pub stream: StreamId,
    /// Its rungs.
    pub ladder: Vec<String>,
    /// The node it leaves and its HTTP base URL (`None`: that node is dead).
    pub from: Option<(NodeId, String)>,
    /// The node it goes to and its HTTP base URL.
    pub to: (NodeId, String),
    /// Placed for its GPU there.
    pub on_gpu: bool,
}

impl Cluster {
    /// NVENC sessions the scheduler's running transcodes take on `node`.
    fn nvenc_taken(&self, node: &NodeId) -> u32 {
        self.transcodes
            .values()
            .filter(|t| t.running && t.on_gpu && t.node == *node)
            .map(|t| u32::try_from(t.ladder.len()).unwrap_or(u32::MAX))
            .sum()
    }

    /// Where a transcode of `stream` with `rungs` rungs goes, other than `exclude` (or `on`, when
    /// the operator names a node): among the active nodes whose GPU has `rungs` NVENC sessions
    /// left, when any has — the one with the highest placement weight (the score: free VRAM and
    /// NVENC, headroom, loss), then the fewest transcodes — else among every active node, the
    /// one with the fewest transcodes, then the highest weight.
    /// Whether it is placed for a GPU comes with it. 404: the stream has no publisher.
    pub fn place_transcode(
        &self,
        stream: &StreamId,
        rungs: usize,
        on: Option<&NodeId>,
        exclude: Option<&NodeId>,
    ) -> Result<(NodeId, String, bool), ClusterError> {
        self.require_published(stream)?;
        let need = u32::try_from(rungs).unwrap_or(u32::MAX);
        let gpu_free = |id: &NodeId| {
            self.nodes
                .get(id)
                .and_then(|n| n.heartbeat.gpu)
                .map_or(0, |g| g.nvenc_sessions_free)
                .saturating_sub(self.nvenc_taken(id))
        };
        let active: Vec<NodeId> = self
            .nodes
            .iter()
            .filter(|(id, n)| n.state == NodeState::Active && Some(*id) != exclude)
            .map(|(id, _)| id.clone())
            .collect();
        let node = match on {
            Some(n) if active.contains(n) => n.clone(),
            Some(n) if self.nodes.contains_key(n) => {
                return Err(ClusterError::Conflict(format!(
                    "node {n} is not active: it takes no new transcodes"
                )));
            }
            Some(n) => return Err(ClusterError::NotFound(format!("no node {n}"))),
            None => {
                let gpus: Vec<&NodeId> = active.iter().filter(|n| gpu_free(n) >= need).collect();
                let pool: Vec<&NodeId> = if gpus.is_empty() {
                    active.iter().collect()
                } else {
                    gpus
                };
                let count = |n: &NodeId| {
                    self.transcodes
                        .values()
                        .filter(|t| t.running && t.node == *n)
                        .count()
                };
                let weight = |n: &NodeId| {
                    let r = &self.nodes[n];
                    self.effective_weight(n, r.state, r.weight_override)
                };
                // On the GPUs the score decides (free VRAM and NVENC); on the CPUs the
                // fewest transcodes first — a GPU node whose NVENC is spent would otherwise
                // still win on its GPU figures and take x264 work too — then the score.
                let on_gpus = pool.iter().any(|n| gpu_free(n) >= need);
                pool.into_iter()
                    .max_by(|a, b| {
                        let by_count = count(b).cmp(&count(a));
                        let by_weight = weight(a).total_cmp(&weight(b));
                        if on_gpus {
                            by_weight.then(by_count)
                        } else {
                            by_count.then(by_weight)
                        }
                        .then_with(|| b.cmp(a))
                    })
                    .cloned()
                    .ok_or_else(|| {
                        ClusterError::Unavailable("no active node can transcode".into())
                    })?
            }
        };
        let on_gpu = gpu_free(&node) >= need;
        let http = self.node_http(&node).map(|(h, _)| h).unwrap_or_default();
        Ok((node, http, on_gpu))
    }

    /// Refuses (409) a transcode of `stream` into a rung that a running one makes already: its
    /// rung's stream has a publisher.
    pub fn check_rungs_free(
        &self,
        stream: &StreamId,
        ladder: &[String],
    ) -> Result<(), ClusterError> {
        let taken = self
            .transcodes
            .values()
            .filter(|t| t.running && t.stream == *stream)
            .find_map(|t| {
                ladder
                    .iter()
                    .find(|r| t.ladder.contains(r))
                    .map(|r| (t.id.clone(), r.clone()))
            });
        match taken {
            Some((id, rung)) => Err(ClusterError::Conflict(format!(
                "transcode {id} makes {stream}~{rung} already"
            ))),
            None => Ok(()),
        }
    }

    /// Whether transcodes still run on `node` (a drain waits for them to move).
    pub(super) fn transcodes_on(&self, node: &NodeId) -> bool {
        self.transcodes
            .values()
            .any(|t| t.running && t.node == *node)
    }

    /// Where transcode `t` goes when it leaves `from`: the node its first rung's publisher
    /// session was moved to by the drain (there the new worker resumes it make before break),
    /// else the placement's pick among the other nodes.
    fn transcode_target(&self, t: &TranscodeTask, from: &NodeId) -> Option<(NodeId, String, bool)> {
        let rung_stream = t
            .ladder
            .first()
            .and_then(|r| StreamId::new(format!("{}~{r}", t.stream)).ok());
        let with_session = rung_stream.and_then(|rs| {
            self.sessions
                .values()
                .find(|s| s.stream == rs && s.kind == SessionKind::Publish && s.node != *from)
                .map(|s| s.node.clone())
        });
        let rungs = t.ladder.len();
        match with_session.filter(|n| {
            self.nodes
                .get(n)
                .is_some_and(|r| r.state == NodeState::Active)
        }) {
            Some(n) => self
                .place_transcode(&t.stream, rungs, Some(&n), Some(from))
                .ok(),
            None => self
                .place_transcode(&t.stream, rungs, None, Some(from))
                .ok(),
        }
    }

    fn transcode_orders(&mut self, node: &NodeId, dead: bool) -> Vec<super::Action> {
        let ids: Vec<TranscodeId> = self
            .transcodes
            .values()
            .filter(|t| t.running && !t.in_flight && t.node == *node)
            .map(|t| t.id.clone())
            .collect();
        let mut out = Vec::new();
        for id in ids {
            let Some(t) = self.transcodes.get(&id).cloned() else {
                continue;
            };
            let Some((to, http, on_gpu)) = self.transcode_target(&t, node) else {
                continue;
            };
            let from = (!dead).then(|| {
                (
                    node.clone(),
                    self.node_http(node).map(|(h, _)| h).unwrap_or_default(),
                )
            });
            if let Some(task) = self.transcodes.get_mut(&id) {
                task.in_flight = true;
            }
            out.push(super::Action::Transcode(TranscodeOrder {
                id: t.id.clone(),
                stream: t.stream.clone(),
                ladder: t.ladder.clone(),
                from,
                to: (to, http),
                on_gpu,
            }));
        }
        out
    }

    /// A draining node's transcodes move (once its sessions have left).
    pub(super) fn move_transcodes_off(&mut self, node: &NodeId) -> Vec<super::Action> {
        self.transcode_orders(node, false)
    }

    /// A dead node's transcodes start again elsewhere (where their source is published).
    pub(super) fn restart_transcodes(&mut self) -> Vec<super::Action> {
        let dead: Vec<NodeId> = self
            .transcodes
            .values()
            .filter(|t| t.running && !t.in_flight)
            .filter(|t| {
                self.nodes
                    .get(&t.node)
                    .is_none_or(|n| n.state == NodeState::Down)
            })
            .map(|t| t.node.clone())
            .collect();
        let mut out = Vec::new();
        for n in dead {
            out.extend(self.transcode_orders(&n, true));
        }
        out
    }

    /// A move or restart was carried out (`Ok`: it runs on `to` now) or failed (tried again).
    pub fn transcode_moved(
        &mut self,
        id: &TranscodeId,
        to: &NodeId,
        on_gpu: bool,
        result: Result<(), super::OrderFailed>,
    ) {
        if let Some(t) = self.transcodes.get_mut(id) {
            t.in_flight = false;
            match result {
                Ok(()) => {
                    t.node = to.clone();
                    t.on_gpu = on_gpu;
                    t.moves += 1;
                    t.error = None;
                }
                Err(e) => t.error = Some(e.0),
            }
        }
        if let Some(t) = self.transcodes.get(id).filter(|t| t.node == *to) {
            let t = t.clone();
            self.rungs_placed(&t);
        }
    }

    /// A transcode its node started.
    pub fn add_transcode(&mut self, task: TranscodeTask) {
        self.rungs_placed(&task);
        self.transcodes.insert(task.id.clone(), task);
    }

    /// Transcode `t`'s rungs are published on its node: a viewer of one that comes before the
    /// node's next heartbeat goes there, not where the rung's name hashes (no publisher there).
    fn rungs_placed(&mut self, t: &TranscodeTask) {
        for r in &t.ladder {
            if let Ok(rung) = StreamId::new(format!("{}~{r}", t.stream)) {
                self.placed_publishers.insert(rung, (t.node.clone(), 0));
            }
        }
    }

    /// One transcode.
    pub fn transcode_task(&self, id: &TranscodeId) -> Option<&TranscodeTask> {
        self.transcodes.get(id)
    }

    /// A transcode was stopped.
    pub fn transcode_stopped(&mut self, id: &TranscodeId) {
        if let Some(t) = self.transcodes.get_mut(id) {
            t.running = false;
        }
    }

    /// The scheduler's transcodes, as it knows them (the node has the figures).
    pub fn transcode_views(&self) -> Vec<TranscodeView> {
        self.transcodes
            .values()
            .map(|t| TranscodeView {
                id: t.id.to_string(),
                stream: t.stream.to_string(),
                node: t.node.to_string(),
                state: if t.running { "running" } else { "stopped" }.to_owned(),
                encoder: t.encoder.clone(),
                encoder_note: t.encoder_note.clone(),
                error: t.error.clone(),
                moves: t.moves,
                rungs: t
                    .ladder
                    .iter()
                    .map(|r| ferry_proto::api::TranscodeRungView {
                        name: r.clone(),
                        stream: format!("{}~{r}", t.stream),
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::super::ClusterConfig;
    use super::super::tests::beat_with;
    use super::*;
    use std::time::Instant;

    fn node(s: &str) -> NodeId {
        NodeId::new(s).unwrap()
    }

    fn gpu_beat(c: &mut Cluster, now: Instant, id: &str, nvenc: u32) {
        let hb = ferry_proto::api::Heartbeat {
            http: format!("http://{id}.test"),
            media: "127.0.0.1:1".into(),
            gpu: Some(ferry_proto::api::GpuFigures {
                vram_free_bytes: 8 << 30,
                vram_total_bytes: 8 << 30,
                nvenc_sessions_free: nvenc,
                nvenc_sessions_max: nvenc,
            }),
            capabilities: vec!["gpu".into()],
            ..Default::default()
        };
        c.heartbeat(now, &node(id), hb).unwrap();
    }

    #[test]
    fn transcodes_go_to_the_gpu_while_it_has_nvenc_sessions_then_to_the_cpus() {
        let t0 = Instant::now();
        let mut c = Cluster::new(ClusterConfig::default(), t0).unwrap();
        beat_with(&mut c, t0, &node("a"), &[("p", SessionKind::Publish)]);
        gpu_beat(&mut c, t0, "b", 3);
        let live = StreamId::new("live").unwrap();
        let (n, http, gpu) = c.place_transcode(&live, 2, None, None).unwrap();
        assert_eq!(
            (n.as_str(), http.as_str(), gpu),
            ("b", "http://b.test", true)
        );
        c.add_transcode(TranscodeTask {
            id: TranscodeId::new("t1").unwrap(),
            stream: live.clone(),
            ladder: vec!["720p".into(), "360p".into()],
            node: n,
            running: true,
            on_gpu: true,
            moves: 0,
            encoder: "h264_nvenc".into(),
            encoder_note: None,
            in_flight: false,
            error: None,
        });
        assert!(matches!(
            c.check_rungs_free(&live, &["480p".into(), "360p".into()]),
            Err(ClusterError::Conflict(_))
        ));
        c.check_rungs_free(&live, &["480p".into()]).unwrap();
        // One NVENC session left on b: a ladder of two goes to a CPU node.
        let (n, _, gpu) = c.place_transcode(&live, 2, None, None).unwrap();
        assert_eq!((n.as_str(), gpu), ("a", false));
        let (n, _, gpu) = c.place_transcode(&live, 1, None, None).unwrap();
        assert_eq!(
            (n.as_str(), gpu),
            ("b", true),
            "one rung still fits the GPU"
        );
        c.transcode_stopped(&TranscodeId::new("t1").unwrap());
        c.check_rungs_free(&live, &["360p".into()]).unwrap();
        let (n, _, _) = c.place_transcode(&live, 2, None, None).unwrap();
        assert_eq!(
            n.as_str(),
            "b",
            "a stopped transcode gives its sessions back"
        );
        // Without any GPU node, a CPU node; a named node; refusals.
        let (n, _, gpu) = c.place_transcode(&live, 2, None, Some(&node("b"))).unwrap();
        assert_eq!((n.as_str(), gpu), ("a", false));
        assert_eq!(
            c.place_transcode(&live, 1, Some(&node("a")), None)
                .unwrap()
                .0
                .as_str(),
            "a"
        );
        assert!(matches!(
            c.place_transcode(&live, 1, Some(&node("zz")), None),
            Err(ClusterError::NotFound(_))
        ));
        let absent = StreamId::new("absent").unwrap();
        assert!(matches!(
            c.place_transcode(&absent, 1, None, None),
            Err(ClusterError::NotFound(_))
        ));
    }

    /// A running x264 transcode of `stream` on node `on`.
    fn x264_task(
        id: &TranscodeId,
        stream: &StreamId,
        ladder: &[String],
        on: &str,
    ) -> TranscodeTask {
        TranscodeTask {
            id: id.clone(),
            stream: stream.clone(),
            ladder: ladder.to_vec(),
            node: node(on),
            running: true,
            on_gpu: false,
            moves: 0,
            encoder: "libx264".into(),
            encoder_note: None,
            in_flight: false,
            error: None,
        }
    }

    fn moves(actions: Vec<super::super::Action>) -> Vec<TranscodeOrder> {
        actions
            .into_iter()
            .filter_map(|a| match a {
                super::super::Action::Transcode(o) => Some(o),
                _ => None,
            })
            .collect()
    }

    /// A heartbeat of `id` listing `sessions` (id, stream, kind).
    fn beat_streams(
        c: &mut Cluster,
        now: Instant,
        id: &str,
        sessions: &[(&str, &str, SessionKind)],
    ) {
        let hb = ferry_proto::api::Heartbeat {
            http: format!("http://{id}.test"),
            media: "127.0.0.1:1".into(),
            sessions: sessions
                .iter()
                .map(|(s, stream, kind)| ferry_proto::api::SessionReport {
                    id: ferry_proto::SessionId::new(*s).unwrap(),
                    stream: StreamId::new(*stream).unwrap(),
                    kind: *kind,
                    state: "connected".into(),
                })
                .collect(),
            ..Default::default()
        };
        c.heartbeat(now, &node(id), hb).unwrap();
    }

    #[test]
    fn a_draining_node_s_transcode_moves_to_its_rung_s_session_and_a_dead_one_s_restarts() {
        let t0 = Instant::now();
        let cfg = ClusterConfig::default();
        let mut c = Cluster::new(cfg.clone(), t0).unwrap();
        use SessionKind::Publish;
        // b runs the transcode; the drain moved its sessions — the rung's publisher among
        // them — to c already.
        beat_streams(&mut c, t0, "a", &[("p", "live", Publish)]);
        beat_streams(&mut c, t0, "b", &[]);
        beat_streams(&mut c, t0, "c", &[("r", "live~360p", Publish)]);
        let live = StreamId::new("live").unwrap();
        let id = TranscodeId::new("t1").unwrap();
        c.add_transcode(x264_task(&id, &live, &["360p".into()], "b"));
        assert!(
            moves(c.tick(t0)).is_empty(),
            "nothing moves while b is active"
        );
        c.drain(t0, &node("b")).unwrap();
        let o = moves(c.tick(t0));
        assert_eq!(o.len(), 1, "{o:?}");
        assert_eq!(o[0].from, Some((node("b"), "http://b.test".to_owned())));
        assert_eq!(
            o[0].to,
            (node("c"), "http://c.test".to_owned()),
            "where the rung's session went (not a, the source's node)"
        );
        assert!(moves(c.tick(t0)).is_empty(), "one order at a time");
        assert_eq!(
            c.node_state(&node("b")),
            Some(NodeState::Draining),
            "not drained while its transcode moves"
        );
        // A failed move is ordered again; a done one leaves b drained.
        c.transcode_moved(
            &id,
            &node("c"),
            false,
            Err(super::super::OrderFailed("c refused".into())),
        );
        assert_eq!(
            c.transcode_task(&id).unwrap().error.as_deref(),
            Some("c refused")
        );
        assert_eq!(moves(c.tick(t0)).len(), 1);
        c.transcode_moved(&id, &node("c"), false, Ok(()));
        let t = c.transcode_task(&id).unwrap();
        assert_eq!((t.node.as_str(), t.moves, t.error.as_ref()), ("c", 1, None));
        assert!(moves(c.tick(t0)).is_empty());
        assert_eq!(c.node_state(&node("b")), Some(NodeState::Drained));
        // c dies (a stays up): the transcode starts again on a, anew.
        let late = t0 + cfg.heartbeat_interval * (cfg.missed_heartbeats + 2);
        beat_streams(&mut c, late, "a", &[("p", "live", Publish)]);
        let o = moves(c.tick(late));
        assert_eq!(o.len(), 1, "{o:?}");
        assert_eq!((o[0].from.clone(), o[0].to.0.as_str()), (None, "a"));
    }

    #[test]
    fn viewers_of_a_rung_go_to_its_transcode_s_node_before_its_heartbeat_shows_it() {
        use ferry_proto::api::{PlacementKind, PlacementRequest};
        let t0 = Instant::now();
        let ladder: Vec<String> = ["144p", "240p", "360p", "480p", "720p", "1080p"]
            .iter()
            .map(|r| r.to_string())
            .collect();
        let view = |c: &mut Cluster, rung: &str| {
            c.place(&PlacementRequest {
                key: format!("live~{rung}"),
                kind: PlacementKind::View,
                requirements: Default::default(),
            })
            .unwrap()
            .node
        };
        let cluster = || {
            let mut c = Cluster::new(ClusterConfig::default(), t0).unwrap();
            beat_streams(&mut c, t0, "a", &[("p", "live", SessionKind::Publish)]);
            beat_streams(&mut c, t0, "b", &[]);
            beat_streams(&mut c, t0, "c", &[]);
            for n in ["a", "b", "c"] {
                c.set_weight(&node(n), Some(1.0)).unwrap();
            }
            c
        };
        // Without the hint the rungs' names hash over the nodes: not all to b.
        let mut plain = cluster();
        let hashed: Vec<NodeId> = ladder.iter().map(|r| view(&mut plain, r)).collect();
        assert!(hashed.iter().any(|n| *n != node("b")), "{hashed:?}");

        let mut c = cluster();
        let id = TranscodeId::new("t1").unwrap();
        c.add_transcode(x264_task(
            &id,
            &StreamId::new("live").unwrap(),
            &ladder,
            "b",
        ));
        for r in &ladder {
            assert_eq!(view(&mut c, r), node("b"), "a viewer of live~{r}");
        }
        // A failed move changes nothing; a done one sends the next viewers to c.
        c.transcode_moved(
            &id,
            &node("c"),
            false,
            Err(super::super::OrderFailed("refused".into())),
        );
        assert_eq!(view(&mut c, "360p"), node("b"));
        c.transcode_moved(&id, &node("c"), false, Ok(()));
        for r in &ladder {
            assert_eq!(
                view(&mut c, r),
                node("c"),
                "a viewer of live~{r} after the move"
            );
        }
    }
}
