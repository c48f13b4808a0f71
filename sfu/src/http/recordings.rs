//! `/v1/recordings`: the operator records a stream live on this node.
//!
//! - `POST /v1/recordings {"stream": S, "target"?: "dir | file:///dir | s3://bucket/prefix"}` →
//!   201 with the recording (`{id, stream, target, state, segments, bytes, …}`); without a
//!   target it goes under the node's recordings directory.
//! - `GET /v1/recordings`, `GET /v1/recordings/{id}`.
//! - `DELETE /v1/recordings/{id}` stops it: 200 once the playlist with `EXT-X-ENDLIST` is stored.
//!
//! Every call needs the operator token (the cluster's API token): recordings write wherever the
//! node can.

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use ferry_proto::RecordingId;
use ferry_proto::auth::Grant;

use super::{AppState, parse_stream};
use crate::recording_writer::RecordingApiError;

/// How long `DELETE` waits for the recording's last objects to be stored.
const STOP_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// Longest accepted target.
const MAX_TARGET: usize = 1024;

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct StartBody {
    stream: String,
    #[serde(default)]
    target: Option<String>,
}

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

/// Checks a target's form (the store checks the rest when it opens it).
fn check_target(t: &str) -> Result<(), String> {
    if t.trim().is_empty() {
        return Err("target is empty".into());
    }
    if t.len() > MAX_TARGET {
        return Err(format!("target is longer than {MAX_TARGET} bytes"));
    }
    if t.chars().any(char::is_control) {
        return Err("target holds a control character".into());
    }
    match t.split_once("://") {
        None => Ok(()),
        Some(("file", path)) if path.starts_with('/') => Ok(()),
        Some(("file", _)) => Err("a file:// target needs an absolute path (file:///dir)".into()),
        Some(("s3", rest)) => match rest.split_once('/').map_or(rest, |(b, _)| b) {
            "" => Err("an s3:// target needs a bucket (s3://bucket/prefix)".into()),
            _ => Ok(()),
        },
        Some((scheme, _)) => Err(format!(
            "unsupported target scheme {scheme:?}: use a directory, file:///dir or s3://bucket/prefix"
        )),
    }
}

fn parse_id(id: &str) -> Result<RecordingId, Response> {
    RecordingId::new(id).map_err(|e| api_error(400, format!("recording id: {e}")))
}

/// `POST /v1/recordings`.
pub(super) async fn create(
    State(st): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Err(r) = check_operator(&st, &headers) {
        return r;
    }
    let req: StartBody = match serde_json::from_slice(&body) {
        Ok(b) => b,
        Err(e) => {
            return api_error(
                400,
                format!("body is not {{\"stream\": ..., \"target\"?: ...}}: {e}"),
            );
        }
    };
    let stream = match parse_stream(&req.stream) {
        Ok(s) => s,
        Err(_) => return api_error(400, format!("bad stream name {:?}", req.stream)),
    };
    if let Some(t) = &req.target
        && let Err(why) = check_target(t)
    {
        return api_error(400, why);
    }
    match st.node.start_recording(stream, req.target).await {
        Ok(v) => {
            let mut r = (StatusCode::CREATED, axum::Json(&v)).into_response();
            if let Ok(loc) = HeaderValue::from_str(&format!("/v1/recordings/{}", v.id)) {
                r.headers_mut().insert(header::LOCATION, loc);
            }
            r
        }
        Err(e) => recording_error(e),
    }
}

/// `GET /v1/recordings`.
pub(super) async fn list(State(st): State<AppState>, headers: HeaderMap) -> Response {
    if let Err(r) = check_operator(&st, &headers) {
        return r;
    }
    match st.node.recordings().await {
        Ok(v) => axum::Json(v).into_response(),
        Err(e) => recording_error(e),
    }
}

/// `GET /v1/recordings/{id}`.
pub(super) async fn show(
    State(st): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    if let Err(r) = check_operator(&st, &headers) {
        return r;
    }
    let id = match parse_id(&id) {
        Ok(id) => id,
        Err(r) => return r,
    };
    match st.node.recording(id).await {
        Ok(v) => axum::Json(v).into_response(),
        Err(e) => recording_error(e),
    }
}

/// `DELETE /v1/recordings/{id}`: stops it.
pub(super) async fn stop(
    State(st): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    if let Err(r) = check_operator(&st, &headers) {
        return r;
    }
    let id = match parse_id(&id) {
        Ok(id) => id,
        Err(r) => return r,
    };
    match st.node.stop_recording(id, STOP_WAIT).await {
        Ok(v) => axum::Json(v).into_response(),
        Err(e) => recording_error(e),
    }
}

#[cfg(test)]
mod tests {
    use super::check_target;

    #[test]
    fn targets() {
        for ok in [
            "/var/lib/ferry/rec",
            "rec/r1",
            "file:///tmp/r",
            "s3://bucket",
            "s3://bucket/a/b",
        ] {
            assert_eq!(check_target(ok), Ok(()), "{ok}");
        }
        for bad in [
            "",
            " ",
            "http://x/y",
            "s3://",
            "s3:///prefix",
            "file://relative",
            "a\nb",
        ] {
            assert!(check_target(bad).is_err(), "{bad:?}");
        }
    }
}
