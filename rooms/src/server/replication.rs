//! Replication between the nodes hosting a room: per peer a queue of replica messages, sent
//! as one batch per request (`POST /v1/rooms/replica`, the codec's binary encoding, the
//! cluster token), at most one request in flight per peer; the answer carries the peer's
//! replies (acks, anti-entropy steps) and the rooms it does not host.

use super::call::{CallError, http_agent, read_answer};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Mutex;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::codec::{self, Message};
use crate::ids::RoomId;
use ferry_proto::ids::NodeId;

/// How long one replication request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(3);
/// Messages queued for one peer before the oldest are dropped (deltas and anti-entropy repair
/// whatever a dropped op carried).
const QUEUE_LIMIT: usize = 65_536;

/// Messages grouped by room.
pub type RoomMessages = Vec<(RoomId, Vec<Message>)>;

/// What one node sends another in one request (and gets back).
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct Batch {
    /// The sender.
    pub from: NodeId,
    /// Messages per room.
    pub rooms: RoomMessages,
    /// Rooms of the request the sender (of this answer) does not host.
    pub gone: Vec<RoomId>,
}

#[derive(Default)]
struct Queues {
    queued: HashMap<NodeId, Vec<(RoomId, Message)>>,
    in_flight: HashSet<NodeId>,
}

/// The per-peer queues.
pub(super) struct Outbox {
    queues: Mutex<Queues>,
    agent: ureq::Agent,
    token: Option<String>,
}

impl Outbox {
    pub(super) fn new(token: Option<String>) -> Self {
        let agent = http_agent(REQUEST_TIMEOUT);
        Outbox {
            queues: Mutex::default(),
            agent,
            token,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Queues> {
        self.queues.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn push(&self, peer: &NodeId, room: &RoomId, m: Message) {
        let mut q = self.lock();
        let queue = q.queued.entry(peer.clone()).or_default();
        if queue.len() >= QUEUE_LIMIT {
            queue.remove(0);
        }
        queue.push((room.clone(), m));
    }

    /// The batches to send now (peers with messages and no request in flight), grouped by room.
    pub(super) fn take_ready(&self) -> Vec<(NodeId, RoomMessages)> {
        let mut q = self.lock();
        let ready: Vec<NodeId> = q
            .queued
            .iter()
            .filter(|(p, m)| !m.is_empty() && !q.in_flight.contains(*p))
            .map(|(p, _)| p.clone())
            .collect();
        let mut out = Vec::new();
        for p in ready {
            let msgs = q.queued.remove(&p).unwrap_or_default();
            let mut by_room: BTreeMap<RoomId, Vec<Message>> = BTreeMap::new();
            for (room, m) in msgs {
                by_room.entry(room).or_default().push(m);
            }
            q.in_flight.insert(p.clone());
            out.push((p, by_room.into_iter().collect()));
        }
        out
    }

    /// The request to `peer` ended.
    pub(super) fn done(&self, peer: &NodeId) {
        self.lock().in_flight.remove(peer);
    }

    /// Sends a batch to the node at `url`; its answer.
    pub(super) async fn send(
        &self,
        url: &str,
        from: NodeId,
        rooms: RoomMessages,
    ) -> Result<Batch, CallError> {
        let body = codec::encode(&Batch {
            from,
            rooms,
            gone: Vec::new(),
        })
        .map_err(|e| CallError::Decode("encoding the batch".into(), e))?;
        let agent = self.agent.clone();
        let url = format!("{}/v1/rooms/replica", url.trim_end_matches('/'));
        let auth = self.token.as_ref().map(|t| format!("Bearer {t}"));
        tokio::task::spawn_blocking(move || {
            let mut req = agent
                .post(&url)
                .header("content-type", "application/octet-stream");
            if let Some(a) = &auth {
                req = req.header("authorization", a);
            }
            let mut resp = req
                .send(&body[..])
                .map_err(|e| CallError::Transport(url.clone(), e.to_string()))?;
            let (status, bytes) = read_answer(&mut resp)
                .map_err(|e| CallError::Transport(url.clone(), e.to_string()))?;
            if status != 200 {
                return Err(CallError::status(url, status, &bytes));
            }
            codec::decode::<Batch>(&bytes).map_err(|e| CallError::Decode("the batch".into(), e))
        })
        .await
        .map_err(|e| CallError::Task(e.to_string()))?
    }
}
