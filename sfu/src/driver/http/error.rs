//! Refusals as the node's HTTP API writes them: a status, a plain-text reason, and where a
//! client acts on it, a machine-readable `Ferry-Error` header.

use axum::http::{HeaderName, StatusCode, header};
use axum::response::{IntoResponse, Response};

/// Machine-readable reason of a refusal (tickets, idempotency keys).
pub(super) const FERRY_ERROR: HeaderName = HeaderName::from_static("ferry-error");

/// A refusal: `status` with `reason` as its plain-text body.
pub(super) fn error(status: StatusCode, reason: impl Into<String>) -> Response {
    let mut reason = reason.into();
    reason.push('\n');
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        reason,
    )
        .into_response()
}
