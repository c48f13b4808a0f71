//! The scheduler's recordings, carried out on the nodes: start (placed where the stream is
//! published), stop, and the orders of the core — a move (the target waits, the source hands
//! over at a keyframe, the target resumes: no gap, no duplicate) and a resumption from storage
//! after a node died (the gap marked). Each move or resumption is a span.

use std::sync::Arc;
use std::time::Instant;

use ferry_proto::api::RecordingReport;
use ferry_proto::{NodeId, RecordingId, StreamId};
use tracing::Instrument;

use super::Scheduler;
use crate::cluster::{ClusterError, RecordingOrder};
use crate::task_client::{NodeError, TaskClient, report_of};

/// Why a recording or transcode request failed, with its HTTP status.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}")]
pub struct RecordingRequestError {
    /// HTTP status.
    pub status: u16,
    /// Why.
    pub reason: String,
}

impl From<ClusterError> for RecordingRequestError {
    fn from(e: ClusterError) -> Self {
        let status = match e {
            ClusterError::NotFound(_) => 404,
            ClusterError::BadRequest(_) => 400,
            ClusterError::Conflict(_) => 409,
            ClusterError::Unavailable(_) => 503,
        };
        Self {
            status,
            reason: e.to_string(),
        }
    }
}

impl From<NodeError> for RecordingRequestError {
    fn from(e: NodeError) -> Self {
        // The node's 4xx is the caller's to fix; anything else is the node failing.
        let status = e.status.filter(|s| (400..500).contains(s)).unwrap_or(502);
        Self {
            status,
            reason: e.reason,
        }
    }
}

impl Scheduler {
    pub(super) fn task_client(&self) -> &TaskClient {
        self.task_client
            .get_or_init(|| TaskClient::new(&self.token, self.node_tls.get().cloned()))
    }

    /// `POST /v1/recordings`: records `stream` on the node where it is published (or, that one
    /// being unable, where it is relayed; or on the node `on` the operator names), under an id
    /// the scheduler gives it.
    pub async fn start_recording(
        self: &Arc<Self>,
        stream: StreamId,
        target: Option<String>,
        on: Option<NodeId>,
    ) -> Result<RecordingReport, RecordingRequestError> {
        let (node, http) = self.with(|c| c.place_recording(&stream, on.as_ref()))?;
        let id = RecordingId::new(format!("rec-{:016x}", rand::random::<u64>())).map_err(|e| {
            RecordingRequestError {
                status: 500,
                reason: e.to_string(),
            }
        })?;
        let r = self
            .task_client()
            .start(&http, &id, &stream, target.as_deref())
            .await?;
        tracing::info!(recording = %id, %stream, %node, target = %r.target, "recording started");
        self.mutate(|c| {
            c.add_recording(id.clone(), stream.clone(), r.target.clone(), node.clone())
        });
        self.flush().map_err(|e| RecordingRequestError {
            status: 503,
            reason: format!("the recording was not stored: {e}"),
        })?;
        self.wake();
        Ok(report_of(&r, &stream, &node))
    }

    /// `DELETE /v1/recordings/{id}`: stops it on its node; answers once its playlist with
    /// `EXT-X-ENDLIST` is stored.
    pub async fn stop_recording(
        self: &Arc<Self>,
        id: RecordingId,
    ) -> Result<RecordingReport, RecordingRequestError> {
        let task = self
            .with(|c| c.recording_task(&id).cloned())
            .ok_or_else(|| RecordingRequestError {
                status: 404,
                reason: format!("no recording {id}"),
            })?;
        if matches!(
            task.state,
            crate::cluster::TaskState::Stopped | crate::cluster::TaskState::Lost
        ) {
            return Err(RecordingRequestError {
                status: 409,
                reason: format!("recording {id} is {}", task.state.as_str()),
            });
        }
        let http = self
            .with(|c| c.node_http(&task.node))
            .map(|(h, _)| h)
            .unwrap_or_default();
        let r = self.task_client().stop(&http, &id).await;
        // A recording whose node is gone is stopped here all the same.
        match r {
            Ok(_) | Err(NodeError { status: None, .. }) => {}
            Err(
                e @ NodeError {
                    status: Some(s), ..
                },
            ) if s != 404 && s != 409 => {
                return Err(e.into());
            }
            Err(_) => {}
        }
        self.mutate(|c| c.recording_stopped(&id));
        let _ = self.flush();
        self.with(|c| c.recording_view(&id)).map_err(Into::into)
    }

    /// Carries out an order of the core (a move or a resumption) in its own task.
    pub(super) fn carry_out_recording(self: &Arc<Self>, o: RecordingOrder) {
        let s = self.clone();
        let span = tracing::info_span!(
            "recording.move",
            recording.id = %o.id,
            recording.stream = %o.stream,
            recording.from = o.from.as_ref().map_or("", |f| f.0.as_str()),
            recording.to = %o.to.0,
            recording.kind = if o.from.is_some() { "handover" } else { "resume" },
            otel.status_code = tracing::field::Empty,
        );
        tokio::spawn(
            async move {
                let started = Instant::now();
                let c = s.task_client().clone();
                match &o.from {
                    Some(from) => {
                        let result = move_recording(&c, &o, from).await;
                        let ms = started.elapsed().as_millis();
                        match &result {
                            Ok(to) => tracing::info!(%to, ms, "recording moved"),
                            Err((e, handed)) => {
                                tracing::Span::current().record("otel.status_code", "ERROR");
                                tracing::warn!(error = %e, handed_over = handed, ms, "recording move failed");
                            }
                        }
                        s.mutate(|cl| cl.recording_move_done(Instant::now(), &o.id, result));
                    }
                    None => {
                        let r = c
                            .continue_on(&o.to.1, &o.id, &o.stream, &o.target, "crash")
                            .await;
                        let result = match r {
                            Ok(_) => Ok(o.to.0.clone()),
                            // Resumed there already (an order repeated by a new leader).
                            Err(NodeError {
                                status: Some(409), ..
                            }) if running_on(&c, &o.to.1, &o.id).await => Ok(o.to.0.clone()),
                            Err(e) => Err(crate::cluster::OrderFailed(e.reason)),
                        };
                        match &result {
                            Ok(on) => tracing::info!(%on, ms = started.elapsed().as_millis(), "recording resumed from storage"),
                            Err(e) => {
                                tracing::Span::current().record("otel.status_code", "ERROR");
                                tracing::warn!(error = %e, "recording not resumed (tried again)");
                            }
                        }
                        s.mutate(|cl| cl.recording_resume_done(&o.id, result));
                    }
                }
                let _ = s.flush();
                s.wake();
            }
            .instrument(span),
        );
    }
}

/// Whether recording `id` runs on the node at `base`.
async fn running_on(c: &TaskClient, base: &str, id: &RecordingId) -> bool {
    c.show(base, id).await.is_ok_and(|r| r.state == "recording")
}

/// The three steps of a move; the error says whether the source had handed over already.
async fn move_recording(
    c: &TaskClient,
    o: &RecordingOrder,
    from: &(NodeId, String),
) -> Result<NodeId, (String, bool)> {
    let (to, to_http) = &o.to;
    c.continue_on(to_http, &o.id, &o.stream, &o.target, "handover")
        .await
        .map_err(|e| (format!("target {to} does not take it: {}", e.reason), false))?;
    let state = match c.hand_over(&from.1, &o.id).await {
        Ok(s) => s,
        Err(e) => {
            // The target lets go of what it waited for; the source records on (or, if it is
            // gone, the recording resumes from storage once its node is down).
            let _ = c.stop(to_http, &o.id).await;
            return Err((
                format!("source {} did not hand it over: {}", from.0, e.reason),
                false,
            ));
        }
    };
    c.resume(to_http, &o.id, state)
        .await
        .map_err(|e| (format!("target {to} did not resume it: {}", e.reason), true))?;
    Ok(to.clone())
}
