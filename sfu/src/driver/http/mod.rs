//! WHIP (RFC 9725) and WHEP endpoints of one node, with CORS so a player page
//! from another origin can publish and play.

// Handlers short-circuit with a ready `Response` as their error value.
#![allow(clippy::result_large_err)]

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, RawQuery, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use ferry_proto::SessionId;
use ferry_proto::auth::{AuthError, Grant};
use ferry_proto::trace::TRACEPARENT;
use tower_http::cors::{Any, CorsLayer};
use tracing::Instrument;

mod app;
mod error;
mod forward;
pub mod limits;
mod recordings;
mod turn;

use crate::driver::handle::NodeHandle;
use crate::node::signal::{PatchOutcome, SessionKind, SignalError, TicketError};
pub use app::{Access, ProcessMetrics};
use app::{AppState, parse_stream};
use error::{FERRY_ERROR, error};
pub use turn::IceServer;

const SDP: &str = "application/sdp";
const SDPFRAG: &str = "application/trickle-ice-sdpfrag";
/// A session ticket: resumes the session it names (request), the session's next one (201).
const FERRY_TICKET: HeaderName = HeaderName::from_static("ferry-ticket");
/// When the ticket of a 201 expires (Unix seconds).
const FERRY_TICKET_EXPIRES: HeaderName = HeaderName::from_static("ferry-ticket-expires");
/// The session id (201).
const FERRY_SESSION: HeaderName = HeaderName::from_static("ferry-session");
/// The node serving the session (201).
const FERRY_NODE: HeaderName = HeaderName::from_static("ferry-node");
/// The client's key for a POST: a retry with it gets the same session back.
const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");
/// A node the client could not reach (read by the scheduler; allowed here for CORS).
const FERRY_FAILED_NODE: HeaderName = HeaderName::from_static("ferry-failed-node");
/// How often a session's event stream carries a fresh ticket.
const TICKET_REFRESH: std::time::Duration = std::time::Duration::from_secs(30);
/// Largest accepted SDP body.
pub const MAX_BODY: usize = 64 * 1024;

/// `/readyz`: 200 when the node should get new sessions; 503 with the reason before the
/// scheduler acknowledged a heartbeat and while the node drains (`/healthz` only says the
/// process runs).
async fn readyz(State(s): State<AppState>) -> Response {
    match s.node.readiness().check() {
        Ok(()) => "ok\n".into_response(),
        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")).into_response(),
    }
}

/// The node's HTTP routes: WHIP, WHEP, health, sessions and metrics. WHIP/WHEP `POST`s need an
/// access token that `access` accepts. `limits` is only reported here (`/metrics`); the caller
/// applies it to the whole app ([`limits::HttpLimits::apply`]).
pub fn router(
    node: NodeHandle,
    ice_servers: Vec<IceServer>,
    process_metrics: Option<ProcessMetrics>,
    access: Access,
    limits: limits::HttpLimits,
) -> Router {
    let cors = CorsLayer::new()
        .allow_origin(Any)
        .allow_methods([
            Method::GET,
            Method::POST,
            Method::PATCH,
            Method::DELETE,
            Method::PUT,
            Method::OPTIONS,
        ])
        .allow_headers([
            header::CONTENT_TYPE,
            header::IF_MATCH,
            header::AUTHORIZATION,
            FERRY_TICKET,
            IDEMPOTENCY_KEY,
            FERRY_FAILED_NODE,
            HeaderName::from_static(TRACEPARENT),
        ])
        .expose_headers([
            header::LOCATION,
            header::ETAG,
            header::LINK,
            HeaderName::from_static("accept-patch"),
            FERRY_TICKET,
            FERRY_TICKET_EXPIRES,
            FERRY_SESSION,
            FERRY_NODE,
            FERRY_ERROR,
            header::WWW_AUTHENTICATE,
        ]);
    Router::new()
        .route("/whip/{stream}", post(whip_post).options(options))
        .route("/whep/{stream}", post(whep_post).options(options))
        .route(
            "/whip/{stream}/{session}",
            axum::routing::patch(patch_session)
                .delete(delete_session)
                .options(options),
        )
        .route(
            "/whep/{stream}/{session}",
            axum::routing::patch(patch_session)
                .delete(delete_session)
                .options(options),
        )
        .route("/whip/{stream}/{session}/events", get(session_events))
        .route("/whep/{stream}/{session}/events", get(session_events))
        .route("/whep/{stream}/{session}/video", post(set_video))
        .route("/whep/{stream}/{session}/layer", post(set_layer))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/v1/sessions", get(sessions))
        .route("/v1/sessions/{id}", get(session_view))
        .route("/metrics", get(metrics))
        .route(
            "/v1/migrations/{id}",
            axum::routing::put(put_migration).get(get_migration),
        )
        .route(
            "/v1/recordings",
            post(recordings::create).get(recordings::list),
        )
        .route(
            "/v1/recordings/{id}",
            get(recordings::show)
                .put(recordings::continue_here)
                .delete(recordings::stop),
        )
        .route("/v1/recordings/{id}/handover", post(recordings::hand_over))
        .route("/v1/recordings/{id}/resume", post(recordings::resume))
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .layer(cors)
        .with_state(AppState {
            node,
            ice_servers,
            turn: turn::TurnLinks::default(),
            process_metrics,
            access,
            limits,
        })
}

fn signal_error(e: SignalError) -> Response {
    let status = StatusCode::from_u16(e.status()).unwrap_or(StatusCode::BAD_REQUEST);
    let mut r = error(status, e.to_string());
    if let Some(code) = e.code() {
        r.headers_mut()
            .insert(FERRY_ERROR, HeaderValue::from_static(code));
    }
    if let SignalError::Moved(url) = &e {
        insert(r.headers_mut(), header::LOCATION, url);
    }
    if status == StatusCode::SERVICE_UNAVAILABLE {
        r.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
    }
    r
}

fn content_type_is(headers: &HeaderMap, want: &str) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case(want))
}

fn body_text(body: &Bytes) -> Result<&str, Response> {
    std::str::from_utf8(body).map_err(|_| error(StatusCode::BAD_REQUEST, "body is not UTF-8"))
}

async fn whip_post(
    state: State<AppState>,
    Path(stream): Path<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    traced_create(state, SessionKind::Publish, stream, query, headers, body).await
}

async fn whep_post(
    state: State<AppState>,
    Path(stream): Path<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    traced_create(state, SessionKind::View, stream, query, headers, body).await
}

/// The `traceparent` a request carries: in its query (put there by the scheduler's 307,
/// whose span it names), else in its header (a traced client's own).
fn request_trace_parent<'a>(query: Option<&'a str>, headers: &'a HeaderMap) -> &'a str {
    ferry_proto::trace::from_query(query)
        .or_else(|| headers.get(TRACEPARENT).and_then(|v| v.to_str().ok()))
        .unwrap_or("")
}

/// [`create`] in a span of its own (`POST /whip/{stream}` or `POST /whep/{stream}`), a child
/// of the trace context the request carries: the gateway's redirect puts the scheduler's span
/// there, so publishing or playing through the scheduler is one trace.
async fn traced_create(
    state: State<AppState>,
    kind: SessionKind,
    stream: String,
    query: Option<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let span = tracing::info_span!(
        target: ferry_proto::trace::TARGET,
        "request",
        otel.name = if kind == SessionKind::Publish { "POST /whip/{stream}" } else { "POST /whep/{stream}" },
        otel.kind = "server",
        otel.status_code = tracing::field::Empty,
        http.request.method = "POST",
        http.route = if kind == SessionKind::Publish { "/whip/{stream}" } else { "/whep/{stream}" },
        http.response.status_code = tracing::field::Empty,
        stream = %stream,
        node.id = %state.node.id(),
        session.id = tracing::field::Empty,
    );
    ferry_proto::trace::set_parent(&span, request_trace_parent(query.as_deref(), &headers));
    let r = create(state, kind, stream, query, headers, body)
        .instrument(span.clone())
        .await;
    if let Some(session) = r.headers().get(FERRY_SESSION).and_then(|v| v.to_str().ok()) {
        span.record("session.id", session);
    }
    ferry_proto::trace::record_status(&span, r.status().as_u16());
    r
}

/// 401 (no, bad or expired token) or 403 (a token that does not allow this), with the reason,
/// its `Ferry-Error` code and the `WWW-Authenticate` challenge (RFC 6750 §3).
fn auth_error(e: AuthError) -> Response {
    let status = StatusCode::from_u16(e.status()).unwrap_or(StatusCode::UNAUTHORIZED);
    let mut r = error(status, e.to_string());
    let h = r.headers_mut();
    h.insert(FERRY_ERROR, HeaderValue::from_static(e.code()));
    insert(h, header::WWW_AUTHENTICATE, &e.challenge());
    r
}

/// Checks the request's access token (`Authorization: Bearer`, else `?access_token=`) for
/// `kind` on `stream`.
fn authorize(
    access: &Access,
    kind: SessionKind,
    stream: &str,
    query: Option<&str>,
    headers: &HeaderMap,
) -> Result<(), Response> {
    let authorization = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    let token = ferry_proto::auth::request_token(authorization, query);
    let grant = match kind {
        SessionKind::Publish => Grant::Publish,
        SessionKind::View => Grant::Play,
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    access
        .tokens
        .authorize(token.as_deref(), grant, stream, now)
        .map(|_| ())
        .map_err(auth_error)
}

async fn create(
    State(st): State<AppState>,
    kind: SessionKind,
    stream: String,
    query: Option<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Err(r) = authorize(&st.access, kind, &stream, query.as_deref(), &headers) {
        return r;
    }
    if !content_type_is(&headers, SDP) {
        return error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "Content-Type must be application/sdp",
        );
    }
    let stream = match parse_stream(&stream) {
        Ok(s) => s,
        Err(r) => return r,
    };
    let offer = match body_text(&body) {
        Ok(s) => s.to_owned(),
        Err(r) => return r,
    };
    let ticket = match headers.get(FERRY_TICKET).map(|v| v.to_str()) {
        None => None,
        Some(Ok(t)) => Some(t.trim().to_owned()),
        Some(Err(_)) => return signal_error(SignalError::BadTicket(TicketError::Malformed)),
    };
    let key = match idempotency_key(&headers) {
        Ok(k) => k,
        Err(r) => return r,
    };
    let result = st
        .node
        .create(kind, stream.clone(), offer, key, ticket)
        .await;
    match result {
        Ok(answer) => {
            let relays = st
                .turn
                .for_session(&st.node, &answer.session, &stream)
                .await;
            let path = format!("/{}/{}/{}", kind.path(), stream, answer.session);
            // Absolute, so a client that came through the gateway's redirect (or a proxy)
            // sends PATCH and DELETE here.
            let location = match headers.get(header::HOST).and_then(|h| h.to_str().ok()) {
                Some(host) => format!("{}://{host}{path}", scheme(&st.access, &headers)),
                None => path.clone(),
            };
            let mut r = (StatusCode::CREATED, answer.sdp).into_response();
            let h = r.headers_mut();
            h.insert(header::CONTENT_TYPE, HeaderValue::from_static(SDP));
            insert(h, header::LOCATION, &location);
            insert(h, header::ETAG, &answer.etag);
            insert(h, FERRY_SESSION, answer.session.as_str());
            insert(h, FERRY_NODE, st.node.id().as_str());
            if let Some((ticket, expires)) = &answer.ticket {
                insert(h, FERRY_TICKET, ticket);
                insert(h, FERRY_TICKET_EXPIRES, &expires.to_string());
            }
            h.insert(
                HeaderName::from_static("accept-patch"),
                HeaderValue::from_static(SDPFRAG),
            );
            for s in st.ice_servers.iter().chain(&relays) {
                append(h, header::LINK, &s.link());
            }
            // Server-sent events of the session (WHEP's SSE extension): where it goes when it
            // migrates, fresh tickets, its end.
            append(
                h,
                header::LINK,
                &format!(
                    "<{location}/events>; rel=\"urn:ietf:params:whep:ext:core:server-sent-events\"; events=\"migrate,ticket,end\""
                ),
            );
            // A viewer's caps on the layers it gets (WHEP's video layer selection extension).
            if kind == SessionKind::View {
                append(
                    h,
                    header::LINK,
                    &format!("<{location}/layer>; rel=\"urn:ietf:params:whep:ext:core:layer\""),
                );
            }
            r
        }
        Err(e) => signal_error(e),
    }
}

/// `https` when this node serves TLS or, behind a proxy that says so, `https`; else `http`.
fn scheme(access: &Access, headers: &HeaderMap) -> &'static str {
    if access.scheme == "https" {
        return "https";
    }
    match headers
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
    {
        Some(p) if p.eq_ignore_ascii_case("https") => "https",
        _ => "http",
    }
}

/// The `Idempotency-Key` of a request: 1–255 visible ASCII characters.
fn idempotency_key(headers: &HeaderMap) -> Result<Option<String>, Response> {
    let Some(v) = headers.get(IDEMPOTENCY_KEY) else {
        return Ok(None);
    };
    let bad = || {
        error(
            StatusCode::BAD_REQUEST,
            "Idempotency-Key must be 1-255 visible ASCII characters",
        )
    };
    let k = v.to_str().map_err(|_| bad())?.trim();
    if k.is_empty()
        || k.len() > crate::node::MAX_IDEMPOTENCY_KEY_LEN
        || !k.bytes().all(|b| b.is_ascii_graphic())
    {
        return Err(bad());
    }
    Ok(Some(k.to_owned()))
}

fn insert(h: &mut HeaderMap, name: HeaderName, value: &str) {
    if let Ok(v) = HeaderValue::from_str(value) {
        h.insert(name, v);
    }
}

fn append(h: &mut HeaderMap, name: HeaderName, value: &str) {
    if let Ok(v) = HeaderValue::from_str(value) {
        h.append(name, v);
    }
}

async fn options(State(st): State<AppState>) -> Response {
    let mut r = StatusCode::NO_CONTENT.into_response();
    let h = r.headers_mut();
    h.insert(
        HeaderName::from_static("accept-post"),
        HeaderValue::from_static(SDP),
    );
    h.insert(
        HeaderName::from_static("accept-patch"),
        HeaderValue::from_static(SDPFRAG),
    );
    for s in &st.ice_servers {
        append(h, header::LINK, &s.link());
    }
    r
}

async fn patch_session(
    State(st): State<AppState>,
    Path((_stream, session)): Path<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let original = body.clone();
    if !content_type_is(&headers, SDPFRAG) {
        return error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "Content-Type must be application/trickle-ice-sdpfrag",
        );
    }
    let Ok(session) = SessionId::new(session.clone()) else {
        return signal_error(SignalError::SessionNotFound(session));
    };
    let if_match = match headers.get(header::IF_MATCH).map(|v| v.to_str()) {
        None => None,
        Some(Ok(v)) => Some(v.to_owned()),
        Some(Err(_)) => return error(StatusCode::BAD_REQUEST, "If-Match is not ASCII"),
    };
    let frag = match body_text(&body) {
        Ok(s) => s.to_owned(),
        Err(r) => return r,
    };
    match st.node.patch(session, frag, if_match).await {
        Ok(PatchOutcome::Trickled) => StatusCode::NO_CONTENT.into_response(),
        Ok(PatchOutcome::Restarted { sdpfrag, etag }) => {
            let mut r = (StatusCode::OK, sdpfrag).into_response();
            let h = r.headers_mut();
            h.insert(header::CONTENT_TYPE, HeaderValue::from_static(SDPFRAG));
            insert(h, header::ETAG, &etag);
            r
        }
        Err(SignalError::Moved(url)) => {
            let tls = st.node.peer_tls();
            forward::forward(tls, forward::Verb::Patch, url, &headers, original).await
        }
        Err(e) => signal_error(e),
    }
}

async fn delete_session(
    State(st): State<AppState>,
    Path((_stream, session)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    let Ok(id) = SessionId::new(session.clone()) else {
        return signal_error(SignalError::SessionNotFound(session));
    };
    match st.node.delete(id).await {
        Ok(()) => StatusCode::OK.into_response(),
        // It migrated away: the node that has it now ends it (the client's URL is this one).
        Err(SignalError::Moved(url)) => {
            let tls = st.node.peer_tls();
            forward::forward(tls, forward::Verb::Delete, url, &headers, Bytes::new()).await
        }
        Err(e) => signal_error(e),
    }
}

async fn sessions(State(st): State<AppState>) -> Response {
    match st.node.sessions().await {
        Ok(list) => axum::Json(list).into_response(),
        Err(e) => signal_error(e),
    }
}

/// `GET /v1/sessions/{id}`: one session, with a viewer's bandwidth estimate, allocation,
/// layers and the last minute of its estimate (`docs/adaptation.md`).
async fn session_view(State(st): State<AppState>, Path(id): Path<String>) -> Response {
    let Ok(id) = SessionId::new(id.clone()) else {
        return signal_error(SignalError::SessionNotFound(id));
    };
    match st.node.session_view(id).await {
        Ok(v) => axum::Json(v).into_response(),
        Err(e) => signal_error(e),
    }
}

async fn metrics(State(st): State<AppState>) -> Response {
    match st.node.metrics_text().await {
        Ok(mut text) => {
            if let Some(extra) = &st.process_metrics {
                text.push_str(&(extra.0)());
            }
            text.push_str(&st.limits.metrics_text());
            ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response()
        }
        Err(e) => signal_error(e),
    }
}

fn migration_error(e: crate::driver::membership::MigrationApiError) -> Response {
    let status = StatusCode::from_u16(e.status).unwrap_or(StatusCode::BAD_REQUEST);
    (
        status,
        axum::Json(ferry_proto::api::ApiError { error: e.reason }),
    )
        .into_response()
}

fn check_bearer(st: &AppState, headers: &HeaderMap) -> Result<(), Response> {
    // The header only: a cluster token never travels in a URL.
    let bearer = ferry_proto::auth::request_token(
        headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok()),
        None,
    );
    if st.node.authorized(bearer.as_deref()) {
        return Ok(());
    }
    let mut r = migration_error(crate::driver::membership::MigrationApiError::new(
        401,
        "the migration API needs the cluster token (Authorization: Bearer ...)",
    ));
    r.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Bearer realm=\"ferry-node\""),
    );
    Err(r)
}

fn parse_migration_id(id: &str) -> Result<ferry_proto::MigrationId, Response> {
    ferry_proto::MigrationId::new(id).map_err(|e| {
        migration_error(crate::driver::membership::MigrationApiError::new(
            400,
            format!("migration id: {e}"),
        ))
    })
}

/// `PUT /v1/migrations/{id}`: the scheduler asks this (source) node to move
/// one of its sessions; idempotent per id.
async fn put_migration(
    State(st): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Err(r) = check_bearer(&st, &headers) {
        return r;
    }
    let id = match parse_migration_id(&id) {
        Ok(id) => id,
        Err(r) => return r,
    };
    let view: ferry_proto::api::MigrationView = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => {
            return migration_error(crate::driver::membership::MigrationApiError::new(
                400,
                format!("body is not a migration: {e}"),
            ));
        }
    };
    if view.id != id {
        return migration_error(crate::driver::membership::MigrationApiError::new(
            400,
            format!("the body names migration {}, the path {id}", view.id),
        ));
    }
    // The scheduler's span that ordered it: the migration's spans join its trace.
    let parent = headers
        .get(TRACEPARENT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    match st.node.migrate(view, parent).await {
        Ok(v) => (StatusCode::ACCEPTED, axum::Json(v)).into_response(),
        Err(e) => migration_error(e),
    }
}

/// `GET /v1/migrations/{id}`: a migration as this node saw it.
async fn get_migration(
    State(st): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    if let Err(r) = check_bearer(&st, &headers) {
        return r;
    }
    let id = match parse_migration_id(&id) {
        Ok(id) => id,
        Err(r) => return r,
    };
    match st.node.migration(id).await {
        Ok(v) => axum::Json(v).into_response(),
        Err(e) => migration_error(e),
    }
}

/// `POST /whep/{stream}/{session}/video` `{"enabled": bool}`: a viewer's client turns video
/// off (degraded mode) or back on; video resumes at a keyframe.
async fn set_video(
    State(st): State<AppState>,
    Path((_stream, session)): Path<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    #[derive(serde::Deserialize)]
    struct Video {
        enabled: bool,
    }
    if !content_type_is(&headers, "application/json") {
        return error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "Content-Type must be application/json",
        );
    }
    let Ok(v) = serde_json::from_slice::<Video>(&body) else {
        return error(
            StatusCode::BAD_REQUEST,
            r#"body must be {"enabled": true|false}"#,
        );
    };
    let Ok(id) = SessionId::new(session.clone()) else {
        return signal_error(SignalError::SessionNotFound(session));
    };
    match st.node.set_video(id, v.enabled).await {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(e) => signal_error(e),
    }
}

/// `POST /whep/{stream}/{session}/layer` (WHEP's video layer selection extension, with
/// Ferry's fields): `{"maxHeight"?, "maxWidth"?, "maxFps"?, "maxBitrate"?}` caps what the
/// viewer gets whatever its link carries; `{}` leaves it to the estimate again. 204.
async fn set_layer(
    State(st): State<AppState>,
    Path((_stream, session)): Path<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if !content_type_is(&headers, "application/json") {
        return error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "Content-Type must be application/json",
        );
    }
    let prefs = match crate::media::adapt::prefs::Preferences::parse(&body) {
        Ok(p) => p,
        Err(e) => return error(StatusCode::BAD_REQUEST, e.to_string()),
    };
    let Ok(id) = SessionId::new(session.clone()) else {
        return signal_error(SignalError::SessionNotFound(session));
    };
    match st.node.set_preferences(id, prefs).await {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(e) => signal_error(e),
    }
}

/// `GET /{whip|whep}/{stream}/{session}/events`: server-sent events of one session
/// (`docs/sdk.md`). `ticket` (`{ticket, expires}`): at once and every 30 s, a fresh ticket that
/// resumes the session. `migrate` (`{mode, from, target, location, ticket?, epoch}`): the
/// session moved — `edge`: its URL is `location` now; `ice-restart`: PATCH `location` with new
/// ICE credentials (DTLS and SRTP carry on); `reconnect`: POST a new offer to `location` with
/// the ticket. `end` (`{reason}`): the node ended the session.
async fn session_events(
    State(st): State<AppState>,
    Path((_stream, session)): Path<(String, String)>,
) -> Response {
    use axum::response::sse::{Event, KeepAlive, Sse};
    let Ok(id) = SessionId::new(session.clone()) else {
        return error(StatusCode::BAD_REQUEST, "bad session id");
    };
    // Subscribe before the first ticket, so nothing sent in between is missed.
    let rx = st.node.session_events(&id);
    let first = match st.node.ticket(id.clone()).await {
        Ok(t) => t,
        Err(SignalError::SessionNotFound(_)) => {
            // It moved away before its client's stream reconnected here: the client gets the
            // `migrate` event it missed, then the stream ends.
            if let Some((name, data)) = st.node.unheard_event(&id) {
                let e = Event::default().event(name).data(data);
                let once = futures_util::stream::iter([Ok::<_, std::convert::Infallible>(e)]);
                return Sse::new(once).into_response();
            }
            return error(StatusCode::NOT_FOUND, format!("no session {session} here"));
        }
        Err(e) => return signal_error(e),
    };
    let ticket_event = |t: Option<(String, u64)>| {
        t.map(|(ticket, expires)| {
            Event::default()
                .event("ticket")
                .data(serde_json::json!({ "ticket": ticket, "expires": expires }).to_string())
        })
    };
    struct Feed {
        rx: tokio::sync::broadcast::Receiver<crate::driver::membership::SessionEvent>,
        node: NodeHandle,
        id: SessionId,
        first: Option<Event>,
        next_ticket: tokio::time::Instant,
        ended: bool,
    }
    let feed = Feed {
        rx,
        node: st.node.clone(),
        id,
        first: ticket_event(first),
        next_ticket: tokio::time::Instant::now() + TICKET_REFRESH,
        ended: false,
    };
    // An async stream (a `recv` future kept between polls, so its waker stays registered and
    // an event goes out at once).
    let stream = futures_util::stream::unfold(feed, move |mut f| async move {
        if let Some(e) = f.first.take() {
            return Some((Ok::<_, std::convert::Infallible>(e), f));
        }
        if f.ended {
            return None;
        }
        loop {
            tokio::select! {
                r = f.rx.recv() => match r {
                    Ok((name, data)) => {
                        f.ended = name == "end";
                        return Some((Ok(Event::default().event(name).data(data)), f));
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return None,
                },
                () = tokio::time::sleep_until(f.next_ticket) => {
                    f.next_ticket += TICKET_REFRESH;
                    // The session left this node (or ended): its events go on elsewhere.
                    let Ok(t) = f.node.ticket(f.id.clone()).await else { return None };
                    if let Some(e) = ticket_event(t) {
                        return Some((Ok(e), f));
                    }
                }
            }
        }
    });
    Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response()
}
