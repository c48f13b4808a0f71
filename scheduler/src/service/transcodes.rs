//! The scheduler's transcodes, carried out on the nodes: placed by the GPU-aware score
//! ([`crate::cluster::Cluster::place_transcode`]), started and stopped on their node, listed with
//! the figures their node reports.

use std::sync::Arc;

use ferry_proto::api::{RungName, TranscodeView};
use ferry_proto::{NodeId, StreamId, TranscodeId};

use super::{RecordingRequestError as RequestError, Scheduler};
use crate::cluster::TranscodeTask;

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
            .start_transcode(&http, &id, &stream, &names)
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
