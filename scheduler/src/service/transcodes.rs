//! The scheduler's transcodes, carried out on the nodes: placed by the GPU-aware score
//! ([`crate::cluster::Cluster::place_transcode`]), started and stopped on their node, listed with
//! the figures their node reports.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::Instrument as _;

use ferry_proto::api::{RungName, TranscodeView};
use ferry_proto::{NodeId, StreamId, TranscodeId};

use super::{RecordingRequestError as RequestError, Scheduler};
use crate::cluster::{TranscodeOrder, TranscodeTask};
use crate::task_client::{NodeError, TaskClient};

impl Scheduler {
    /// `POST /v1/transcodes`: transcodes `stream` into `ladder` on the node the score picks (or
    /// `on`), under `id` (default: a new one).
    pub async fn start_transcode(
        self: &Arc<Self>,
        id: Option<TranscodeId>,
        stream: StreamId,
        ladder: Vec<RungName>,
        on: Option<NodeId>,
    ) -> Result<TranscodeView, RequestError> {
        let names: Vec<String> = ladder.iter().map(|r| r.as_str().to_owned()).collect();
        // The ladder is checked before anything is looked up (the node checks it again).
        let bad = |reason: String| RequestError {
            status: 400,
            reason,
        };
        if names.is_empty() {
            return Err(bad(
                "the ladder is empty: give rungs such as [\"720p\", \"360p\"]".into(),
            ));
        }
        if let Some(r) = names
            .iter()
            .enumerate()
            .find_map(|(i, r)| names[..i].contains(r).then_some(r))
        {
            return Err(bad(format!("rung {r} is in the ladder twice")));
        }
        let (node, http, on_gpu) = self.with(|c| {
            c.check_rungs_free(&stream, &names)?;
            c.place_transcode(&stream, ladder.len(), on.as_ref(), None)
        })?;
        let id = match id {
            Some(id) if self.with(|c| c.transcode_task(&id).is_some()) => {
                return Err(RequestError {
                    status: 409,
                    reason: format!("transcode {id} exists already"),
                });
            }
            Some(id) => id,
            None => {
                TranscodeId::new(format!("tc-{:016x}", rand::random::<u64>())).map_err(|e| {
                    RequestError {
                        status: 500,
                        reason: e.to_string(),
                    }
                })?
            }
        };
        let mut v = self
            .task_client()
            .start_transcode(&http, &id, &stream, &names, &Default::default())
            .await?;
        tracing::info!(transcode = %id, %stream, %node, on_gpu, encoder = %v.encoder, "transcode started");
        self.mutate(|c| {
            c.add_transcode(TranscodeTask {
                id: id.clone(),
                stream: stream.clone(),
                ladder: names,
                node: node.clone(),
                running: true,
                on_gpu,
                moves: 0,
                encoder: v.encoder.clone(),
                encoder_note: v.encoder_note.clone(),
                in_flight: false,
                error: None,
            });
        });
        self.flush().map_err(|e| RequestError {
            status: 503,
            reason: format!("the transcode was not stored: {e}"),
        })?;
        v.node = node.to_string();
        Ok(v)
    }

    /// `GET /v1/transcodes`: every transcode, the running ones with their node's figures
    /// (asked at once; the scheduler's view where a node does not answer).
    pub async fn transcodes(self: &Arc<Self>) -> Vec<TranscodeView> {
        let ids: Vec<TranscodeId> = self.with(|c| {
            c.transcode_views()
                .into_iter()
                .filter_map(|v| TranscodeId::new(v.id).ok())
                .collect()
        });
        let views = futures_util::future::join_all(ids.into_iter().map(|id| self.transcode(id)));
        views.await.into_iter().filter_map(Result::ok).collect()
    }

    /// Carries out an order of the core (a move off a draining node, or a restart after its
    /// node died) in its own task, under a `transcode.move` span.
    pub(super) fn carry_out_transcode(self: &Arc<Self>, o: TranscodeOrder) {
        let s = self.clone();
        let span = tracing::info_span!(
            "transcode.move",
            transcode.id = %o.id,
            transcode.stream = %o.stream,
            transcode.from = o.from.as_ref().map_or("", |f| f.0.as_str()),
            transcode.to = %o.to.0,
            transcode.kind = if o.from.is_some() { "handover" } else { "restart" },
            otel.status_code = tracing::field::Empty,
        );
        tokio::spawn(
            async move {
                let started = Instant::now();
                let c = s.task_client().clone();
                let result = move_transcode(&c, &o).await;
                let ms = started.elapsed().as_millis();
                match &result {
                    Ok(()) => tracing::info!(to = %o.to.0, ms, "transcode moved"),
                    Err(e) => {
                        tracing::Span::current().record("otel.status_code", "ERROR");
                        tracing::warn!(error = %e, ms, "transcode move failed (tried again)");
                    }
                }
                let result = result.map_err(|e| crate::cluster::OrderFailed(e.to_string()));
                s.mutate(|cl| cl.transcode_moved(&o.id, &o.to.0, o.on_gpu, result));
                let _ = s.flush();
                s.wake();
            }
            .instrument(span),
        );
    }

    /// `GET /v1/transcodes/{id}`: the transcode with its node's figures (the scheduler's view
    /// alone when the node does not answer).
    pub async fn transcode(
        self: &Arc<Self>,
        id: TranscodeId,
    ) -> Result<TranscodeView, RequestError> {
        let (task, mine) = self.with(|c| {
            (
                c.transcode_task(&id).cloned(),
                c.transcode_views()
                    .into_iter()
                    .find(|v| v.id == id.as_str()),
            )
        });
        let (task, mine) = task.zip(mine).ok_or_else(|| RequestError {
            status: 404,
            reason: format!("no transcode {id}"),
        })?;
        if !task.running {
            return Ok(mine);
        }
        let http = self
            .with(|c| c.node_http(&task.node))
            .map(|(h, _)| h)
            .unwrap_or_default();
        match self.task_client().transcode(&http, &id).await {
            Ok(mut v) => {
                v.node = task.node.to_string();
                v.moves = task.moves;
                Ok(v)
            }
            Err(_) => Ok(mine),
        }
    }

    /// `DELETE /v1/transcodes/{id}`: stops it on its node.
    pub async fn stop_transcode(
        self: &Arc<Self>,
        id: TranscodeId,
    ) -> Result<TranscodeView, RequestError> {
        let task = self
            .with(|c| c.transcode_task(&id).cloned())
            .ok_or_else(|| RequestError {
                status: 404,
                reason: format!("no transcode {id}"),
            })?;
        if !task.running {
            return Err(RequestError {
                status: 409,
                reason: format!("transcode {id} has stopped"),
            });
        }
        let http = self
            .with(|c| c.node_http(&task.node))
            .map(|(h, _)| h)
            .unwrap_or_default();
        let r = self.task_client().stop_transcode(&http, &id).await;
        self.mutate(|c| c.transcode_stopped(&id));
        let _ = self.flush();
        match r {
            Ok(mut v) => {
                v.node = task.node.to_string();
                Ok(v)
            }
            // Its node is gone or forgot it: stopped here all the same.
            Err(_) => self
                .with(|c| {
                    c.transcode_views()
                        .into_iter()
                        .find(|v| v.id == id.as_str())
                })
                .ok_or_else(|| RequestError {
                    status: 404,
                    reason: format!("no transcode {id}"),
                }),
        }
    }
}

/// How long the new worker has to publish a keyframe on every rung before the old one is let
/// go all the same.
const TAKEOVER_WAIT: Duration = Duration::from_secs(20);

/// Why a transcode's move failed (it is tried again).
#[derive(Debug, thiserror::Error)]
enum MoveError {
    /// The node it leaves gave no tickets.
    #[error("handover on {node}: {reason}")]
    Handover {
        /// The node it leaves.
        node: String,
        /// The node's reason.
        reason: String,
    },
    /// The target did not start it.
    #[error("start on {node}: {reason}")]
    Start {
        /// The target.
        node: String,
        /// The node's reason.
        reason: String,
    },
    /// It failed on the target after starting.
    #[error("on {node}: {reason}")]
    Failed {
        /// The target.
        node: String,
        /// The worker's error.
        reason: String,
    },
}

/// A move's steps: the tickets from the node it leaves, the transcode started with them on the
/// target, its first keyframe on every rung there (the viewers have switched to it), and the old
/// worker stopped — its rungs' sessions detached, not ended.
async fn move_transcode(c: &TaskClient, o: &TranscodeOrder) -> Result<(), MoveError> {
    let tickets = match &o.from {
        Some((_, http)) => {
            c.handover_transcode(http, &o.id)
                .await
                .map_err(|e| MoveError::Handover {
                    node: o.from.as_ref().map_or("", |f| f.0.as_str()).to_owned(),
                    reason: e.reason,
                })?
                .tickets
        }
        None => Default::default(),
    };
    let started = c
        .start_transcode(&o.to.1, &o.id, &o.stream, &o.ladder, &tickets)
        .await;
    match started {
        Ok(_) => {}
        // Started there already (an order repeated by a new leader).
        Err(NodeError {
            status: Some(409), ..
        }) if c
            .transcode(&o.to.1, &o.id)
            .await
            .is_ok_and(|v| v.state == "running" || v.state == "starting") => {}
        Err(e) => {
            // The old worker stays, and ends its rungs again when stopped.
            if let Some((_, http)) = &o.from {
                let _ = c.cancel_transcode_handover(http, &o.id).await;
            }
            return Err(MoveError::Start {
                node: o.to.0.to_string(),
                reason: e.reason,
            });
        }
    }
    let deadline = Instant::now() + TAKEOVER_WAIT;
    loop {
        match c.transcode(&o.to.1, &o.id).await {
            Ok(v) if v.state == "failed" => {
                return Err(MoveError::Failed {
                    node: o.to.0.to_string(),
                    reason: v.error.unwrap_or_else(|| "failed".into()),
                });
            }
            Ok(v) if v.state == "running" && v.rungs.iter().all(|r| r.keyframes > 0) => break,
            _ if Instant::now() >= deadline => {
                tracing::warn!(transcode = %o.id, to = %o.to.0, "no keyframe on every rung of the new worker yet: the old one goes all the same");
                break;
            }
            _ => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    if let Some((node, http)) = &o.from
        && let Err(e) = c.stop_transcode(http, &o.id).await
    {
        tracing::warn!(%node, error = %e.reason, "the old worker did not stop (its node drains)");
    }
    Ok(())
}
