//! The node's side of room snapshots (`crate::snapshot`): stores its replicas' states with
//! the scheduler (`PUT /v1/rooms/{room}/snapshots/{node}`), fetches every node's snapshot of a
//! room it opens (`GET /v1/rooms/{room}/snapshots`), and removes its own when it stops hosting
//! an idle room (`DELETE`), all with the cluster token.

use super::call::{CallError, http_agent, read_answer};
use std::time::Duration;

use crate::codec;
use crate::ids::RoomId;
use crate::snapshot::{MAX_SNAPSHOT_BYTES, StoredSnapshot};
use ferry_proto::ids::NodeId;

/// How long one snapshot request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// Where a node keeps its rooms' snapshots.
#[derive(Clone, Debug)]
pub struct SnapshotTarget {
    /// The scheduler replicas' base URLs, tried in turn (any replica serves snapshots).
    pub urls: Vec<String>,
    /// A replica's state is stored this often when it changed, ms.
    pub interval_ms: u64,
}

/// The HTTP client of one node.
pub(super) struct SnapshotClient {
    agent: ureq::Agent,
    bases: Vec<String>,
    node: NodeId,
    auth: Option<String>,
}

impl SnapshotClient {
    pub(super) fn new(target: &SnapshotTarget, node: NodeId, token: Option<&str>) -> Self {
        let agent = http_agent(REQUEST_TIMEOUT);
        SnapshotClient {
            agent,
            bases: target
                .urls
                .iter()
                .map(|u| u.trim_end_matches('/').to_owned())
                .collect(),
            node,
            auth: token.map(|t| format!("Bearer {t}")),
        }
    }

    fn path(&self, room: &RoomId, own: bool) -> String {
        let mut u = format!("/v1/rooms/{room}/snapshots");
        if own {
            u.push('/');
            u.push_str(self.node.as_str());
        }
        u
    }

    /// Runs one request off the runtime's threads, on the first replica that answers: its
    /// status and body.
    async fn call(
        &self,
        method: &'static str,
        path: String,
        body: Vec<u8>,
    ) -> Result<(u16, Vec<u8>), CallError> {
        let mut last = CallError::NoUrl;
        for base in &self.bases {
            match self
                .call_one(method, format!("{base}{path}"), body.clone())
                .await
            {
                Ok(answer) => return Ok(answer),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    async fn call_one(
        &self,
        method: &'static str,
        url: String,
        body: Vec<u8>,
    ) -> Result<(u16, Vec<u8>), CallError> {
        let agent = self.agent.clone();
        let auth = self.auth.clone();
        tokio::task::spawn_blocking(move || {
            let mut req = ureq::http::Request::builder().method(method).uri(&url);
            if let Some(a) = &auth {
                req = req.header("authorization", a);
            }
            let sent = if body.is_empty() {
                req.body(()).map(|r| agent.run(r))
            } else {
                req.header("content-type", "application/octet-stream")
                    .body(body)
                    .map(|r| agent.run(r))
            };
            let mut resp = sent
                .map_err(|e| CallError::Request(e.to_string()))?
                .map_err(|e| CallError::Transport(url.clone(), e.to_string()))?;
            read_answer(&mut resp).map_err(|e| CallError::Transport(url, e.to_string()))
        })
        .await
        .map_err(|e| CallError::Task(e.to_string()))?
    }

    /// Stores this node's snapshot of `room` (an encoded `RoomState`).
    pub(super) async fn put(&self, room: &RoomId, state: Vec<u8>) -> Result<(), CallError> {
        if state.len() > MAX_SNAPSHOT_BYTES {
            return Err(CallError::TooLarge {
                room: room.clone(),
                len: state.len(),
            });
        }
        let (status, body) = self.call("PUT", self.path(room, true), state).await?;
        if status != 204 {
            return Err(CallError::status(
                format!("storing the snapshot of {room}"),
                status,
                &body,
            ));
        }
        Ok(())
    }

    /// Every node's stored snapshot of `room`.
    pub(super) async fn fetch(&self, room: &RoomId) -> Result<Vec<StoredSnapshot>, CallError> {
        let (status, body) = self.call("GET", self.path(room, false), Vec::new()).await?;
        if status != 200 {
            return Err(CallError::status(
                format!("fetching the snapshots of {room}"),
                status,
                &body,
            ));
        }
        codec::decode(&body).map_err(|e| CallError::Decode(format!("the snapshots of {room}"), e))
    }

    /// Removes this node's snapshot of `room` (it no longer hosts the room).
    pub(super) async fn delete(&self, room: &RoomId) -> Result<(), CallError> {
        let (status, body) = self
            .call("DELETE", self.path(room, true), Vec::new())
            .await?;
        if status != 204 && status != 404 {
            return Err(CallError::status(
                format!("removing the snapshot of {room}"),
                status,
                &body,
            ));
        }
        Ok(())
    }
}
