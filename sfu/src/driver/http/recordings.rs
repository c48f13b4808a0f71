//! `/v1/recordings`: the operator records a stream live on this node.
//!
//! - `POST /v1/recordings {"stream": S, "target"?: "dir | file:///dir | s3://bucket/prefix"}` →
//!   201 with the recording (`{id, stream, target, state, segments, bytes, …}`); without a
//!   target it goes under the node's recordings directory.
//! - `GET /v1/recordings`, `GET /v1/recordings/{id}`.
//! - `DELETE /v1/recordings/{id}` stops it: 200 once the playlist with `EXT-X-ENDLIST` is stored.
//!
//! Moving a recording (the scheduler calls these; docs/recording.md "Moving a recording"):
//! - `PUT /v1/recordings/{id} {"stream", "target", "from": "handover"}` on the target: it waits
//!   for the source's state, holding the stream's packets (202); `"from": "crash"`: it continues
//!   from the state stored under `target` by a node that died (201, gap marked).
//! - `POST /v1/recordings/{id}/handover` on the source: hands over at the next keyframe; 200 with
//!   the recorder's state once its last objects are stored (504 when no keyframe came in time).
//! - `POST /v1/recordings/{id}/resume` (body: that state) on the target: it records on.
//!
//! Every call needs the operator token (the cluster's API token): recordings write wherever the
//! node can.

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use ferry_proto::RecordingId;
use ferry_proto::api::check_recording_target;
use ferry_proto::auth::Grant;

use super::app::{AppState, parse_stream};
use crate::driver::recording_writer::RecordingApiError;

/// How long `DELETE` waits for the recording's last objects to be stored.
const STOP_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct StartBody {
    stream: String,
    #[serde(default)]
    target: Option<String>,
    /// The scheduler's name for it (cluster-wide); a fresh one otherwise.
    #[serde(default)]
    id: Option<String>,
}

/// Where a recording continued here comes from.
#[derive(serde::Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
enum ContinueFrom {
    /// A live node hands it over: wait for its state.
    Handover,
    /// Its node died: continue from the state it stored.
    Crash,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ContinueBody {
    stream: String,
    target: String,
    from: ContinueFrom,
}

/// How long `POST …/handover` waits for the stream's next keyframe.
const HANDOVER_WAIT: std::time::Duration = std::time::Duration::from_secs(8);

fn api_error(status: u16, reason: impl Into<String>) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST);
    (
        status,
        axum::Json(ferry_proto::api::ApiError {
            error: reason.into(),
        }),
    )
        .into_response()
}

fn recording_error(e: RecordingApiError) -> Response {
    let mut r = api_error(e.status, e.reason);
    if e.status == 503 {
        r.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
    }
    r
}

/// The operator token: the cluster's bearer token, or a token the node's verifier takes for
/// every stream (the API token it was given).
fn check_operator(st: &AppState, headers: &HeaderMap) -> Result<(), Response> {
    let authorization = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    let token = ferry_proto::auth::request_token(authorization, None);
    if st.node.authorized(token.as_deref()) {
        return Ok(());
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let every_stream = st
        .access
        .tokens
        .authorize(token.as_deref(), Grant::Publish, "*", now)
        .is_ok_and(|c| {
            c.pattern(Grant::Publish) == Some("*") && c.pattern(Grant::Play) == Some("*")
        });
    if every_stream {
        return Ok(());
    }
    let mut r = api_error(
        401,
        "the recording API needs the operator token (Authorization: Bearer ...)",
    );
    r.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Bearer realm=\"ferry-node\""),
    );
    Err(r)
}

fn parse_id(id: &str) -> Result<RecordingId, Response> {
    RecordingId::new(id).map_err(|e| api_error(400, format!("recording id: {e}")))
}

/// The operator token checked, then the recording id of the path.
fn operator_id(st: &AppState, headers: &HeaderMap, id: &str) -> Result<RecordingId, Response> {
    check_operator(st, headers)?;
    parse_id(id)
}

/// A JSON body of `shape` (named in the error).
fn json_body<T: serde::de::DeserializeOwned>(body: &[u8], shape: &str) -> Result<T, Response> {
    serde_json::from_slice(body).map_err(|e| api_error(400, format!("body is not {shape}: {e}")))
}

fn stream_and_target(
    stream: &str,
    target: Option<&str>,
) -> Result<ferry_proto::StreamId, Response> {
    let stream =
        parse_stream(stream).map_err(|_| api_error(400, format!("bad stream name {stream:?}")))?;
    if let Some(t) = target {
        check_recording_target(t).map_err(|why| api_error(400, why.to_string()))?;
    }
    Ok(stream)
}

/// A node's answer: `status` with the view, or the error's status with its reason.
fn answer<T: serde::Serialize>(
    status: StatusCode,
    r: Result<T, RecordingApiError>,
) -> Result<Response, Response> {
    r.map(|v| (status, axum::Json(&v)).into_response())
        .map_err(recording_error)
}

/// `POST /v1/recordings`.
pub(super) async fn create(
    State(st): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, Response> {
    check_operator(&st, &headers)?;
    let req: StartBody = json_body(&body, "{\"stream\": ..., \"target\"?: ..., \"id\"?: ...}")?;
    let stream = stream_and_target(&req.stream, req.target.as_deref())?;
    let id = req.id.as_deref().map(parse_id).transpose()?;
    let v = st
        .node
        .start_recording(id, stream, req.target)
        .await
        .map_err(recording_error)?;
    let mut r = (StatusCode::CREATED, axum::Json(&v)).into_response();
    if let Ok(loc) = HeaderValue::from_str(&format!("/v1/recordings/{}", v.id)) {
        r.headers_mut().insert(header::LOCATION, loc);
    }
    Ok(r)
}

/// `PUT /v1/recordings/{id}`: continue a recording here (target of a move, or after a crash).
pub(super) async fn continue_here(
    State(st): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, Response> {
    let id = operator_id(&st, &headers, &id)?;
    let req: ContinueBody = json_body(
        &body,
        "{\"stream\": ..., \"target\": ..., \"from\": \"handover\" | \"crash\"}",
    )?;
    let stream = stream_and_target(&req.stream, Some(&req.target))?;
    match req.from {
        ContinueFrom::Handover => answer(
            StatusCode::ACCEPTED,
            st.node.await_recording(id, stream, req.target).await,
        ),
        ContinueFrom::Crash => answer(
            StatusCode::CREATED,
            st.node.resume_crashed(id, stream, req.target).await,
        ),
    }
}

/// `POST /v1/recordings/{id}/handover`: the source hands the recording over.
pub(super) async fn hand_over(
    State(st): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, Response> {
    let id = operator_id(&st, &headers, &id)?;
    answer(StatusCode::OK, st.node.hand_over(id, HANDOVER_WAIT).await)
}

/// `POST /v1/recordings/{id}/resume`: the target takes the source's state.
pub(super) async fn resume(
    State(st): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, Response> {
    let id = operator_id(&st, &headers, &id)?;
    let state = ferry_record::RecorderState::from_json(&body)
        .map_err(|e| api_error(400, format!("body is not a recorder state: {e}")))?;
    check_recording_target(&state.target)
        .map_err(|why| api_error(400, format!("state's target: {why}")))?;
    answer(StatusCode::OK, st.node.resume_awaiting(id, state).await)
}

/// `GET /v1/recordings`.
pub(super) async fn list(
    State(st): State<AppState>,
    headers: HeaderMap,
) -> Result<Response, Response> {
    check_operator(&st, &headers)?;
    answer(StatusCode::OK, st.node.recordings().await)
}

/// `GET /v1/recordings/{id}`.
pub(super) async fn show(
    State(st): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, Response> {
    let id = operator_id(&st, &headers, &id)?;
    answer(StatusCode::OK, st.node.recording(id).await)
}

/// `DELETE /v1/recordings/{id}`: stops it.
pub(super) async fn stop(
    State(st): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, Response> {
    let id = operator_id(&st, &headers, &id)?;
    answer(StatusCode::OK, st.node.stop_recording(id, STOP_WAIT).await)
}
