//! A node's transcodes and their HTTP API, mounted on the node's HTTP server:
//!
//! - `POST /v1/transcodes {"stream", "ladder": ["720p", "360p"], "id"?}` → `201` the transcode
//!   (once its rungs are published here, at most 15 s; `400` a bad ladder or name, `409` the id runs here,
//!   `503` ffmpeg is missing);
//! - `GET /v1/transcodes`, `GET /v1/transcodes/{id}`;
//! - `DELETE /v1/transcodes/{id}` → `200` once its ffmpegs ended and its rungs' sessions closed
//!   (detached instead, after a handover);
//! - `POST /v1/transcodes/{id}/handover` → the rungs' session tickets, for the node the transcode
//!   moves to (`POST /v1/transcodes` there with `tickets`: its rungs resume those sessions);
//!   `DELETE` of it takes the handover back (the move failed).
//!
//! Every call needs the node's API token (the cluster's). The encoder is chosen once: NVENC when
//! the node reports a GPU and a one-frame `h264_nvenc` probe succeeds, x264 otherwise (the view
//! says why, `encoder_note`).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use ferry_proto::api::{
    ApiError, NodeTranscodeRequest, TranscodeHandover, TranscodeRungView, TranscodeView,
};
use ferry_proto::{StreamId, TranscodeId};
use subtle::ConstantTimeEq;

use crate::encoder::{Encoder, probe_args};
use crate::ladder;
use crate::worker::{Progress, Worker, WorkerSetup};

/// Transcodes a node keeps listing after they ended.
const MAX_ENDED: usize = 100;

/// How long `POST /v1/transcodes` waits for the rungs' publishers (the source's first frame,
/// then one WHIP session per rung); the scheduler's call waits 20 s.
const RUNGS_WAIT: Duration = Duration::from_secs(15);

struct Task {
    id: TranscodeId,
    stream: StreamId,
    /// The rungs' ticket files' directory.
    tickets: Option<PathBuf>,
    /// Handed over to another node (`POST …/handover`): stopping it detaches its rungs.
    handing_over: bool,
    worker: Option<Worker>,
    /// The last progress (kept once the worker is gone).
    last: Progress,
}

struct Inner {
    token: String,
    /// The node's own base URL, once its server listens.
    node: OnceLock<String>,
    ffmpeg: PathBuf,
    gpu: bool,
    /// The encoder and, when it is not the first choice, why.
    encoder: tokio::sync::OnceCell<(Encoder, Option<String>)>,
    tickets: Option<PathBuf>,
    tasks: Mutex<BTreeMap<TranscodeId, Task>>,
}

/// A node's transcodes.
#[derive(Clone)]
pub struct Transcoders {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Transcoders {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transcoders").finish_non_exhaustive()
    }
}

fn relock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A refused call: its status and why (`{"error": …}`).
#[derive(Debug)]
pub struct Refusal(pub StatusCode, pub String);

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        (self.0, axum::Json(ApiError { error: self.1 })).into_response()
    }
}

fn error(status: StatusCode, msg: impl Into<String>) -> Refusal {
    Refusal(status, msg.into())
}

impl Transcoders {
    /// Transcodes of a node that takes `token` for its API and for WHIP/WHEP, with a GPU or
    /// not (what it reports to the scheduler), running `ffmpeg`; rung session tickets go under
    /// `state_dir/transcodes/{id}/`.
    pub fn new(token: &str, gpu: bool, ffmpeg: PathBuf, state_dir: Option<PathBuf>) -> Self {
        Transcoders {
            inner: Arc::new(Inner {
                token: token.to_owned(),
                node: OnceLock::new(),
                ffmpeg,
                gpu,
                encoder: tokio::sync::OnceCell::new(),
                tickets: state_dir.map(|d| d.join("transcodes")),
                tasks: Mutex::default(),
            }),
        }
    }

    /// The node's own base URL (its workers are clients of it); the first call wins.
    pub fn set_node(&self, base: String) {
        let _ = self.inner.node.set(base);
    }

    /// The routes to mount on the node's HTTP server.
    pub fn routes<S: Clone + Send + Sync + 'static>(&self) -> Router<S> {
        Router::new()
            .route("/v1/transcodes", get(list).post(create))
            .route("/v1/transcodes/{id}", get(show).delete(stop))
            .route(
                "/v1/transcodes/{id}/handover",
                post(handover).delete(cancel_handover),
            )
            .with_state(self.clone())
    }

    /// `/metrics` text: running transcodes and their rungs' figures.
    pub fn prometheus(&self) -> String {
        let tasks = relock(&self.inner.tasks);
        let (mut running, mut frames, mut cpu) = (0u64, 0u64, 0f64);
        let mut rtf_min: Option<f64> = None;
        for t in tasks.values() {
            let p = t
                .worker
                .as_ref()
                .map_or_else(|| t.last.clone(), Worker::progress);
            if p.state == "running" {
                running += 1;
                for r in &p.rungs {
                    if r.frames > 30 {
                        rtf_min =
                            Some(rtf_min.map_or(r.realtime_factor, |m| m.min(r.realtime_factor)));
                    }
                }
            }
            for r in &p.rungs {
                frames += r.frames;
                cpu += r.cpu_s;
            }
        }
        format!(
            "# HELP ferry_transcodes_running Transcodes running on this node.\n\
             # TYPE ferry_transcodes_running gauge\n\
             ferry_transcodes_running {running}\n\
             # HELP ferry_transcode_frames_total Rung frames published.\n\
             # TYPE ferry_transcode_frames_total counter\n\
             ferry_transcode_frames_total {frames}\n\
             # HELP ferry_transcode_cpu_seconds_total CPU seconds the rungs' encoders used.\n\
             # TYPE ferry_transcode_cpu_seconds_total counter\n\
             ferry_transcode_cpu_seconds_total {cpu}\n\
             # HELP ferry_transcode_realtime_factor_min The slowest running rung's media seconds per wall second.\n\
             # TYPE ferry_transcode_realtime_factor_min gauge\n\
             ferry_transcode_realtime_factor_min {}\n",
            rtf_min.unwrap_or(0.0)
        )
    }

    async fn encoder(&self) -> (Encoder, Option<String>) {
        let inner = &self.inner;
        inner
            .encoder
            .get_or_init(|| async {
                if !inner.gpu {
                    return (Encoder::X264, None);
                }
                match probe(&inner.ffmpeg, Encoder::Nvenc).await {
                    Ok(()) => (Encoder::Nvenc, None),
                    Err(why) => {
                        tracing::warn!(%why, "the node reports a GPU but h264_nvenc does not work: transcoding with libx264");
                        (
                            Encoder::X264,
                            Some(format!("h264_nvenc unavailable: {why}")),
                        )
                    }
                }
            })
            .await
            .clone()
    }

    fn authorized(&self, headers: &HeaderMap) -> Result<(), Refusal> {
        let ok = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .is_some_and(|t| bool::from(t.trim().as_bytes().ct_eq(self.inner.token.as_bytes())));
        if ok {
            Ok(())
        } else {
            Err(error(
                StatusCode::UNAUTHORIZED,
                "the transcode API needs the node's API token (Authorization: Bearer ...)",
            ))
        }
    }

    fn view(&self, t: &Task) -> TranscodeView {
        let p = t
            .worker
            .as_ref()
            .map_or_else(|| t.last.clone(), Worker::progress);
        let (encoder, note) = self
            .inner
            .encoder
            .get()
            .cloned()
            .map_or((String::new(), None), |(e, n)| {
                (e.ffmpeg_name().to_owned(), n)
            });
        TranscodeView {
            id: t.id.to_string(),
            stream: t.stream.to_string(),
            node: String::new(),
            state: p.state.clone(),
            encoder,
            encoder_note: note,
            frames_in: p.frames_in,
            rungs: p
                .rungs
                .iter()
                .map(|r| TranscodeRungView {
                    name: r.name.clone(),
                    stream: r.stream.clone(),
                    frames: r.frames,
                    keyframes: r.keyframes,
                    media_s: r.media_s,
                    cpu_s: r.cpu_s,
                    realtime_factor: r.realtime_factor,
                    error: r.error.clone(),
                })
                .collect(),
            moves: 0,
            error: p.error.clone(),
        }
    }

    /// Starts transcoding `req.stream` here (resuming its rungs' sessions with `req.tickets`
    /// when it moves here).
    pub async fn start(&self, req: NodeTranscodeRequest) -> Result<TranscodeView, Refusal> {
        let stream = StreamId::new(req.stream.clone())
            .map_err(|e| error(StatusCode::BAD_REQUEST, format!("stream name: {e}")))?;
        let rungs = ladder::parse(&stream, &req.ladder)
            .map_err(|e| error(StatusCode::BAD_REQUEST, e.to_string()))?;
        let id = match req.id {
            Some(id) => TranscodeId::new(id)
                .map_err(|e| error(StatusCode::BAD_REQUEST, format!("transcode id: {e}")))?,
            None => TranscodeId::new(format!("tc-{:016x}", rand::random::<u64>()))
                .map_err(|e| error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?,
        };
        let node = self.inner.node.get().cloned().ok_or_else(|| {
            error(
                StatusCode::SERVICE_UNAVAILABLE,
                "the node is not listening yet",
            )
        })?;
        probe(&self.inner.ffmpeg, Encoder::X264)
            .await
            .map_err(|why| {
                error(
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!("ffmpeg with libx264 cannot run here ({why}): apt-get install ffmpeg"),
                )
            })?;
        let (encoder, _) = self.encoder().await;
        let tickets = self.inner.tickets.as_ref().map(|d| d.join(id.as_str()));
        if let Some(dir) = &tickets
            && let Err(e) = tokio::fs::create_dir_all(dir).await
        {
            tracing::warn!(dir = %dir.display(), error = %e, "no directory for the rungs' tickets");
        }
        if !req.tickets.is_empty() {
            // A move: each rung's publisher resumes its session from its ticket file.
            let dir = tickets.as_ref().ok_or_else(|| {
                error(
                    StatusCode::CONFLICT,
                    "this node keeps no state directory: it cannot take a transcode over",
                )
            })?;
            for (rung, ticket) in &req.tickets {
                if !rungs.iter().any(|r| r.name() == *rung) {
                    return Err(error(
                        StatusCode::BAD_REQUEST,
                        format!("a ticket for rung {rung}, which is not in the ladder"),
                    ));
                }
                let path = dir.join(format!("{rung}.ticket"));
                tokio::fs::write(&path, ticket).await.map_err(|e| {
                    error(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        format!("{}: {e}", path.display()),
                    )
                })?;
            }
        } else if let Some(dir) = &tickets {
            // A new transcode: no ticket of an earlier one with this id resumes anything.
            for r in &rungs {
                let _ = tokio::fs::remove_file(dir.join(format!("{}.ticket", r.name()))).await;
            }
        }
        let setup = WorkerSetup {
            node,
            token: self.inner.token.clone(),
            stream: stream.clone(),
            ladder: rungs,
            encoder,
            ffmpeg: self.inner.ffmpeg.clone(),
            tickets: tickets.clone(),
        };
        {
            let mut tasks = relock(&self.inner.tasks);
            if tasks.get(&id).is_some_and(|t| t.worker.is_some()) {
                return Err(error(
                    StatusCode::CONFLICT,
                    format!("transcode {id} runs here already"),
                ));
            }
            let worker = Worker::start(setup);
            let task = Task {
                id: id.clone(),
                stream,
                tickets,
                handing_over: false,
                last: worker.progress(),
                worker: Some(worker),
            };
            tasks.insert(id.clone(), task);
            let ended: Vec<TranscodeId> = tasks
                .values()
                .filter(|t| t.worker.is_none())
                .map(|t| t.id.clone())
                .collect();
            for old in ended.iter().take(ended.len().saturating_sub(MAX_ENDED)) {
                tasks.remove(old);
            }
        }
        // Answered once its rungs are published here (a viewer right after the answer finds
        // them), or it failed, or after RUNGS_WAIT (the view says `starting` then).
        let deadline = tokio::time::Instant::now() + RUNGS_WAIT;
        loop {
            let view = {
                let tasks = relock(&self.inner.tasks);
                let task = tasks.get(&id).ok_or_else(|| {
                    error(
                        StatusCode::CONFLICT,
                        format!("transcode {id} was stopped while it started"),
                    )
                })?;
                self.view(task)
            };
            if view.state != "starting" || tokio::time::Instant::now() >= deadline {
                return Ok(view);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Stops transcode `id`.
    pub async fn stop(&self, id: &TranscodeId) -> Result<TranscodeView, Refusal> {
        let (worker, handing_over) = {
            let mut tasks = relock(&self.inner.tasks);
            let t = tasks
                .get_mut(id)
                .ok_or_else(|| error(StatusCode::NOT_FOUND, format!("no transcode {id} here")))?;
            let w = t.worker.take().ok_or_else(|| {
                error(StatusCode::CONFLICT, format!("transcode {id} has stopped"))
            })?;
            (w, t.handing_over)
        };
        let last = if handing_over {
            worker.hand_over().await
        } else {
            worker.stop().await
        };
        let mut tasks = relock(&self.inner.tasks);
        let t = tasks
            .get_mut(id)
            .ok_or_else(|| error(StatusCode::NOT_FOUND, format!("no transcode {id} here")))?;
        t.last = last;
        Ok(self.view(t))
    }

    /// Hands transcode `id` over to another node: its rungs' current session tickets (kept
    /// in their ticket files by the SDK). It runs on until stopped, which then detaches its
    /// rungs' sessions for the worker that resumed them.
    pub fn handover(&self, id: &TranscodeId) -> Result<TranscodeHandover, Refusal> {
        let mut tasks = relock(&self.inner.tasks);
        let t = tasks
            .get_mut(id)
            .ok_or_else(|| error(StatusCode::NOT_FOUND, format!("no transcode {id} here")))?;
        let Some(w) = &t.worker else {
            return Err(error(
                StatusCode::CONFLICT,
                format!("transcode {id} has stopped"),
            ));
        };
        let dir = t.tickets.clone().ok_or_else(|| {
            error(
                StatusCode::CONFLICT,
                "this node keeps no state directory: its transcodes cannot move",
            )
        })?;
        let p = w.progress();
        if p.state != "running" {
            return Err(error(
                StatusCode::CONFLICT,
                format!("transcode {id} is {}: only a running one moves", p.state),
            ));
        }
        let mut tickets = std::collections::BTreeMap::new();
        for r in &p.rungs {
            let path = dir.join(format!("{}.ticket", r.name));
            let ticket = std::fs::read_to_string(&path)
                .ok()
                .map(|t| t.trim().to_owned())
                .filter(|t| !t.is_empty())
                .ok_or_else(|| {
                    error(
                        StatusCode::CONFLICT,
                        format!("rung {} of transcode {id} holds no session ticket", r.name),
                    )
                })?;
            tickets.insert(r.name.clone(), ticket);
        }
        t.handing_over = true;
        Ok(TranscodeHandover { tickets })
    }

    /// Takes a handover back (the move failed): stopping it ends its rungs again.
    pub fn cancel_handover(&self, id: &TranscodeId) -> Result<(), Refusal> {
        let mut tasks = relock(&self.inner.tasks);
        let t = tasks
            .get_mut(id)
            .ok_or_else(|| error(StatusCode::NOT_FOUND, format!("no transcode {id} here")))?;
        t.handing_over = false;
        Ok(())
    }

    /// Every transcode here.
    pub fn list(&self) -> Vec<TranscodeView> {
        relock(&self.inner.tasks)
            .values()
            .map(|t| self.view(t))
            .collect()
    }
}

/// Whether `encoder` encodes a frame here.
/// Why an encoder does not work here: ffmpeg's own words.
#[derive(Debug, thiserror::Error)]
enum ProbeError {
    /// ffmpeg did not run.
    #[error("{0}: {1}")]
    Run(String, std::io::Error),
    /// It ran and the encoder failed.
    #[error("{0}")]
    Encoder(String),
}

async fn probe(ffmpeg: &std::path::Path, encoder: Encoder) -> Result<(), ProbeError> {
    let out = tokio::process::Command::new(ffmpeg)
        .args(probe_args(encoder))
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .map_err(|e| ProbeError::Run(ffmpeg.display().to_string(), e))?;
    if out.status.success() {
        return Ok(());
    }
    // The encoder's own line says why (`[h264_nvenc @ 0x…] Cannot load libcuda.so.1`); ffmpeg's
    // last one only that it failed.
    let text = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let why = lines
        .iter()
        .find_map(|l| {
            l.strip_prefix('[')
                .and_then(|l| l.split_once("] "))
                .map(|(_, w)| w)
        })
        .or(lines.last().copied())
        .unwrap_or("failed");
    Err(ProbeError::Encoder(why.to_owned()))
}

async fn create(
    State(t): State<Transcoders>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Result<Response, Refusal> {
    t.authorized(&headers)?;
    let req: NodeTranscodeRequest = serde_json::from_slice(&body).map_err(|e| {
        error(
            StatusCode::BAD_REQUEST,
            format!("body is not {{\"stream\": ..., \"ladder\": [...], \"id\"?: ...}}: {e}"),
        )
    })?;
    if req.node.is_some() {
        return Err(error(
            StatusCode::BAD_REQUEST,
            "\"node\" is for the scheduler: a node transcodes on itself",
        ));
    }
    let v = t.start(req).await?;
    Ok((StatusCode::CREATED, axum::Json(v)).into_response())
}

async fn handover(
    State(t): State<Transcoders>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, Refusal> {
    let id = t.authorized_id(&headers, &id)?;
    Ok(axum::Json(t.handover(&id)?).into_response())
}

async fn cancel_handover(
    State(t): State<Transcoders>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, Refusal> {
    let id = t.authorized_id(&headers, &id)?;
    t.cancel_handover(&id)?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

async fn list(State(t): State<Transcoders>, headers: HeaderMap) -> Result<Response, Refusal> {
    t.authorized(&headers)?;
    Ok(axum::Json(t.list()).into_response())
}

impl Transcoders {
    /// A call on one transcode: the token checked, then its id.
    fn authorized_id(&self, headers: &HeaderMap, id: &str) -> Result<TranscodeId, Refusal> {
        self.authorized(headers)?;
        parse_id(id)
    }
}

fn parse_id(id: &str) -> Result<TranscodeId, Refusal> {
    TranscodeId::new(id).map_err(|e| error(StatusCode::BAD_REQUEST, format!("transcode id: {e}")))
}

async fn show(
    State(t): State<Transcoders>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, Refusal> {
    let id = t.authorized_id(&headers, &id)?;
    t.list()
        .into_iter()
        .find(|v| v.id == id.as_str())
        .map(|v| axum::Json(v).into_response())
        .ok_or_else(|| error(StatusCode::NOT_FOUND, format!("no transcode {id} here")))
}

async fn stop(
    State(t): State<Transcoders>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, Refusal> {
    let id = t.authorized_id(&headers, &id)?;
    let v = t.stop(&id).await?;
    Ok(axum::Json(v).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_proto::api::RungName;

    fn request(stream: &str) -> NodeTranscodeRequest {
        NodeTranscodeRequest {
            stream: stream.into(),
            ladder: vec![RungName::P360],
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn refusals_carry_their_status_and_reason() {
        let t = Transcoders::new("tok", false, PathBuf::from("ffmpeg"), None);
        let id = TranscodeId::new("t1").unwrap();
        assert_eq!(t.handover(&id).unwrap_err().0, StatusCode::NOT_FOUND);
        assert_eq!(t.cancel_handover(&id).unwrap_err().0, StatusCode::NOT_FOUND);
        assert_eq!(t.stop(&id).await.unwrap_err().0, StatusCode::NOT_FOUND);
        let bad = t.start(request("no/slash")).await.unwrap_err();
        assert_eq!(bad.0, StatusCode::BAD_REQUEST, "{}", bad.1);
        let rung = t.start(request("cam~360p")).await.unwrap_err();
        assert_eq!(
            rung.0,
            StatusCode::BAD_REQUEST,
            "a rung of a rung: {}",
            rung.1
        );
        let early = t.start(request("cam")).await.unwrap_err();
        assert_eq!(early.0, StatusCode::SERVICE_UNAVAILABLE, "{}", early.1);
        // A move's tickets need a state directory to keep them in.
        t.set_node("http://127.0.0.1:9".into());
        let mut moved = request("cam");
        moved.tickets.insert("360p".into(), "T".into());
        let no_dir = t.start(moved).await.unwrap_err();
        assert_eq!(no_dir.0, StatusCode::CONFLICT, "{}", no_dir.1);
        assert!(t.list().is_empty());
        let mut headers = HeaderMap::new();
        assert_eq!(
            t.authorized(&headers).unwrap_err().0,
            StatusCode::UNAUTHORIZED
        );
        headers.insert(header::AUTHORIZATION, "Bearer nope".parse().unwrap());
        assert!(t.authorized(&headers).is_err());
        headers.insert(header::AUTHORIZATION, "Bearer tok".parse().unwrap());
        assert!(t.authorized(&headers).is_ok());
    }
}
