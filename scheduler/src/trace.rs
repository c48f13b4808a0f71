//! The scheduler's spans of a request's trace (see [`ferry_proto::trace`]).
//!
//! - An API call that starts work on the nodes — `POST /whip/{stream}`, `POST /whep/{stream}`,
//!   `POST /v1/migrations` — is a server span, the child of whatever `traceparent` the request
//!   carries.
//! - A migration the scheduler hands to its source node and follows is a `migration.scheduler`
//!   span, a child of the API call that created it (none for a drain's migrations). The order
//!   to the source node carries its `traceparent`, so the nodes' `migration.source` and
//!   `migration.target` spans join the trace.
//! - A WHIP/WHEP 307 puts the gateway span's `traceparent` in the `Location` query: the node's
//!   span for the client's POST there joins the trace too.

use axum::http::HeaderMap;
use ferry_proto::api::{MigrationState, MigrationView};
use ferry_proto::trace::{TARGET, TRACEPARENT};
use tracing::Span;
use tracing::field::Empty;

/// The `traceparent` a request carries, in its query or else its header; empty if none.
pub(crate) fn incoming<'a>(query: Option<&'a str>, headers: &'a HeaderMap) -> &'a str {
    ferry_proto::trace::from_query(query)
        .or_else(|| headers.get(TRACEPARENT).and_then(|v| v.to_str().ok()))
        .unwrap_or("")
}

/// The span of API call `POST {route}`, a child of the trace context the request carries.
/// `stream`, `node.url`, `migration.id` and `session.id` are recorded as they become known,
/// the answer with [`ferry_proto::trace::record_status`].
pub(crate) fn request_span(route: &'static str, query: Option<&str>, headers: &HeaderMap) -> Span {
    let span = tracing::info_span!(
        target: TARGET,
        "request",
        otel.name = %format!("POST {route}"),
        otel.kind = "server",
        otel.status_code = Empty,
        http.request.method = "POST",
        http.route = route,
        http.response.status_code = Empty,
        stream = Empty,
        node.url = Empty,
        migration.id = Empty,
        session.id = Empty,
    );
    ferry_proto::trace::set_parent(&span, incoming(query, headers));
    span
}

/// The trace context a WHIP/WHEP redirect hands on to the node: the current (gateway) span's,
/// else, when the scheduler exports no traces, the one the client sent, so that a traced
/// client's trace still reaches the node.
pub(crate) fn for_redirect(query: Option<&str>, headers: &HeaderMap) -> String {
    let own = ferry_proto::trace::trace_parent(&Span::current());
    if !own.is_empty() {
        return own;
    }
    let theirs = incoming(query, headers).trim();
    match ferry_proto::trace::parse_trace_parent(theirs) {
        Some(_) => theirs.to_owned(),
        None => String::new(),
    }
}

/// The span of migration `m` from its order to the source node until it ends, a child of the
/// current span (the `POST /v1/migrations` that created it, if any).
pub(crate) fn migration_span(m: &MigrationView) -> Span {
    let target = m.target.as_ref().map_or("", |t| t.as_str());
    tracing::info_span!(
        target: TARGET,
        "migration",
        otel.name = "migration.scheduler",
        otel.status_code = Empty,
        otel.status_description = Empty,
        migration.id = %m.id,
        session.id = %m.session,
        migration.source = %m.source,
        migration.target = target,
        migration.mode = ?m.mode,
        migration.state = Empty,
    )
}

/// Records how the migration of the current [`migration_span`] ended.
pub(crate) fn record_end(m: &MigrationView) {
    let span = Span::current();
    let state = serde_json::to_value(m.state)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default();
    span.record("migration.state", state.as_str());
    if m.state == MigrationState::Committed {
        span.record("otel.status_code", "ok");
    } else {
        span.record("otel.status_code", "error");
        span.record(
            "otel.status_description",
            m.error.as_deref().unwrap_or(state.as_str()),
        );
    }
}
