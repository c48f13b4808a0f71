//! The operator API (DESIGN §10) over HTTP/JSON, with its OpenAPI 3
//! document generated from these handlers, bearer-token auth on every
//! mutating call, and WHIP/WHEP `POST` answered with a 307 to the node.

// Handlers short-circuit with a ready `Response` as their error value.
#![allow(clippy::result_large_err)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::rejection::JsonRejection;
use axum::extract::{
    DefaultBodyLimit, FromRequest, FromRequestParts, Path, Query, RawQuery, State,
};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post, put};
use axum::{Extension, Json, middleware};
use ferry_proto::api::{
    ApiError, DrainStatus, Heartbeat, MigrationAccepted, MigrationRequest, MigrationView, NodeView,
    PlacementRequest, PlacementResponse, ReclaimNotice, RecordingReport, RecordingRequest,
    RoutingTable, SessionKind, SessionView, StreamView, TicketUse, TranscodeRequest, TranscodeView,
    TurnCredentialsRequest, TurnCredentialsResponse, TurnDrain, TurnDrainRequest, TurnRelayRequest,
    TurnRelayView, WeightUpdate,
};
use ferry_proto::auth::{AuthError, Claims, Grant, Signer, Verifier};
use ferry_proto::ids::IdError;
use ferry_proto::{MigrationId, NodeId, RecordingId, StreamId, TranscodeId};
use serde::Deserialize;
use subtle::ConstantTimeEq;
use tower_http::cors::{AllowHeaders, Any, CorsLayer};
use tracing::Instrument;
use utoipa::OpenApi;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};

use crate::cluster::ClusterError;
use crate::service::Scheduler;

/// Largest accepted request body.
const MAX_BODY: usize = 256 * 1024;

#[derive(OpenApi)]
#[openapi(
    info(title = "Ferry scheduler API", description = "Placement, nodes, sessions, drains and migrations of a Ferry cluster."),
    paths(
        list_nodes, get_node, heartbeat, set_weight, reclaim_notice, start_drain, cancel_drain, drain_status,
        list_sessions, list_streams, list_recordings, start_recording, get_recording, stop_recording, list_transcodes,
        start_transcode, get_transcode, stop_transcode, place, create_migration, get_migration, list_migrations, routing, healthz,
        readyz, whip, whep, consume_ticket, turn_credentials, turn_relays, add_turn_relay, remove_turn_relay, start_turn_drain, cancel_turn_drain,
        put_room_snapshot, get_room_snapshots, delete_room_snapshot, list_room_snapshots, join_room
    ),
    modifiers(&BearerAuth),
)]
struct ApiDoc;

struct BearerAuth;

impl utoipa::Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

/// The OpenAPI document as JSON.
pub fn openapi_json() -> String {
    ApiDoc::openapi()
        .to_pretty_json()
        .unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
}

fn error(status: StatusCode, msg: impl Into<String>) -> Response {
    (status, Json(ApiError { error: msg.into() })).into_response()
}

fn cluster_error(e: ClusterError) -> Response {
    let status = match e {
        ClusterError::NotFound(_) => StatusCode::NOT_FOUND,
        ClusterError::BadRequest(_) => StatusCode::BAD_REQUEST,
        ClusterError::Conflict(_) => StatusCode::CONFLICT,
        ClusterError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
    };
    let mut r = error(status, e.to_string());
    if status == StatusCode::SERVICE_UNAVAILABLE {
        r.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("2"));
    }
    r
}

/// An id from the request's path, checked: a malformed one is a 404 naming it (nothing with
/// that id can exist). The one prologue of every route that takes one id.
struct PathId<T>(T);

/// What kind of thing a [`PathId`] names, and how its id is checked.
trait Named: Sized {
    /// For the 404: "no node …".
    const WHAT: &'static str;
    fn parse(s: &str) -> Result<Self, IdError>;
}

impl Named for NodeId {
    const WHAT: &'static str = "node";
    fn parse(s: &str) -> Result<Self, IdError> {
        NodeId::new(s)
    }
}

impl Named for RecordingId {
    const WHAT: &'static str = "recording";
    fn parse(s: &str) -> Result<Self, IdError> {
        RecordingId::new(s)
    }
}

impl Named for TranscodeId {
    const WHAT: &'static str = "transcode";
    fn parse(s: &str) -> Result<Self, IdError> {
        TranscodeId::new(s)
    }
}

impl<S: Send + Sync, T: Named> FromRequestParts<S> for PathId<T> {
    type Rejection = Response;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &S,
    ) -> Result<Self, Response> {
        let Path(raw) = Path::<String>::from_request_parts(parts, state)
            .await
            .map_err(|e| error(StatusCode::BAD_REQUEST, e.body_text()))?;
        T::parse(&raw).map(PathId).map_err(|e| {
            error(
                StatusCode::NOT_FOUND,
                format!("no {} {raw:?}: {e}", T::WHAT),
            )
        })
    }
}

/// A JSON request body, checked: a malformed one is a 400 that says why.
struct Body<T>(T);

impl<S: Send + Sync, T: serde::de::DeserializeOwned> FromRequest<S> for Body<T> {
    type Rejection = Response;

    async fn from_request(req: axum::extract::Request, state: &S) -> Result<Self, Response> {
        body(Json::<T>::from_request(req, state).await).map(Body)
    }
}

fn body<T>(r: Result<Json<T>, JsonRejection>) -> Result<T, Response> {
    r.map(|Json(t)| t).map_err(|e| {
        error(
            StatusCode::BAD_REQUEST,
            format!("bad JSON body: {}", e.body_text()),
        )
    })
}

/// Bearer-token check for mutating routes (constant-time compare).
async fn require_token(
    State(s): State<Arc<Scheduler>>,
    req: axum::extract::Request,
    next: middleware::Next,
) -> Response {
    // The header only (the scheme in any case): the operator's token never travels in a URL.
    let ok = ferry_proto::auth::request_token(
        req.headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok()),
        None,
    )
    .is_some_and(|t| bool::from(t.as_bytes().ct_eq(s.token().as_bytes())));
    if !ok {
        let mut r = error(StatusCode::UNAUTHORIZED, "missing or wrong bearer token");
        r.headers_mut()
            .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        return r;
    }
    next.run(req).await
}

/// On a follower replica (etcd HA), state-changing calls go to the leader: a 307 to the same
/// path there (method and body kept), or 503 while no leader is known.
async fn follow_leader(
    State(s): State<Arc<Scheduler>>,
    req: axum::extract::Request,
    next: middleware::Next,
) -> Response {
    if s.is_leader() {
        return next.run(req).await;
    }
    let Some(leader) = s.leader_url() else {
        let mut r = error(
            StatusCode::SERVICE_UNAVAILABLE,
            "no scheduler replica leads at the moment; retry shortly",
        );
        r.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        return r;
    };
    let path = req
        .uri()
        .path_and_query()
        .map_or_else(|| req.uri().path().to_owned(), |p| p.as_str().to_owned());
    let location = format!("{}{path}", leader.trim_end_matches('/'));
    match HeaderValue::from_str(&location) {
        Ok(v) => (StatusCode::TEMPORARY_REDIRECT, [(header::LOCATION, v)]).into_response(),
        Err(_) => error(
            StatusCode::SERVICE_UNAVAILABLE,
            "the leader's address is not a valid URL",
        ),
    }
}

/// `ok` once the change it reports is stored (with etcd: replicated and fenced), else 503 —
/// a write the client saw acknowledged survives the leader's death.
fn committed(s: &Scheduler, ok: Response) -> Response {
    match s.flush() {
        Ok(()) => ok,
        Err(e) => {
            tracing::warn!(error = %e, "a write was not stored");
            error(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("the change was not stored: {e}"),
            )
        }
    }
}

/// Readiness: this replica leads, or follows a known leader (it then redirects writes there).
#[utoipa::path(get, path = "/readyz", responses((status = 200, description = "ready", body = String), (status = 503, body = ApiError)))]
async fn readyz(State(s): State<Arc<Scheduler>>) -> Response {
    if s.is_leader() {
        "ok leader\n".into_response()
    } else if let Some(l) = s.leader_url() {
        format!("ok follower of {l}\n").into_response()
    } else {
        error(
            StatusCode::SERVICE_UNAVAILABLE,
            "no scheduler replica leads at the moment",
        )
    }
}

/// All routes. `extra` is merged in (the `ferry dev` demo page). WHIP/WHEP `POST`s need the
/// API token (see [`router_with_tokens`] for access tokens as well).
pub fn router(s: Arc<Scheduler>, extra: Option<Router<Arc<Scheduler>>>) -> Router {
    router_with_tokens(s, extra, Verifier::operator_only(), None)
}

/// All routes, with WHIP/WHEP `POST`s checked by `tokens` (the scheduler's API token is
/// accepted too, as a credential for every stream). A request that came with the API token is
/// redirected with a token for its stream only, signed by `signer` (without one, the API token
/// goes along). `extra` is merged in (the `ferry dev` demo page).
pub fn router_with_tokens(
    s: Arc<Scheduler>,
    extra: Option<Router<Arc<Scheduler>>>,
    tokens: Verifier,
    signer: Option<Signer>,
) -> Router {
    let tokens = Arc::new(GatewayTokens {
        verifier: tokens.with_operator_token(s.token()),
        signer,
    });
    let mutating = Router::new()
        .route("/v1/nodes/{id}/heartbeat", post(heartbeat))
        .route("/v1/nodes/{id}/weight", put(set_weight))
        .route("/v1/nodes/{id}/reclaim-notice", post(reclaim_notice))
        .route(
            "/v1/nodes/{id}/drain",
            post(start_drain).delete(cancel_drain),
        )
        .route("/v1/placements", post(place))
        .route("/v1/migrations", post(create_migration))
        .route("/v1/recordings", post(start_recording))
        .route("/v1/recordings/{id}", delete(stop_recording))
        .route("/v1/transcodes", post(start_transcode))
        .route("/v1/transcodes/{id}", delete(stop_transcode))
        .route("/v1/tickets/consume", post(consume_ticket))
        .route(
            "/v1/turn/relays/{id}/drain",
            post(start_turn_drain).delete(cancel_turn_drain),
        )
        .route("/v1/turn/relays", post(add_turn_relay))
        .route("/v1/turn/relays/{id}", delete(remove_turn_relay))
        .route_layer(middleware::from_fn_with_state(s.clone(), require_token))
        .route_layer(middleware::from_fn_with_state(s.clone(), follow_leader));
    // Room snapshots: any replica reads and writes them (each node's key is its own); room
    // content is private, so reads need the token too.
    let snapshots = Router::new()
        .route(
            "/v1/rooms/{room}/snapshots/{node}",
            put(put_room_snapshot)
                .delete(delete_room_snapshot)
                .layer(DefaultBodyLimit::max(
                    ferry_room::snapshot::MAX_SNAPSHOT_BYTES + 1,
                )),
        )
        .route("/v1/rooms/{room}/snapshots", get(get_room_snapshots))
        .route("/v1/room-snapshots", get(list_room_snapshots))
        .route_layer(middleware::from_fn_with_state(s.clone(), require_token));
    // The gateway records placements: only the leader answers it.
    let gateway = Router::new()
        .route("/whip/{stream}", post(whip))
        .route("/whep/{stream}", post(whep))
        .route("/v1/rooms/{room}/join", post(join_room))
        .route_layer(middleware::from_fn_with_state(s.clone(), follow_leader))
        .layer(Extension(tokens.clone()));
    // Any replica hands out relays (each counts what it handed out).
    let turn = Router::new()
        .route("/v1/turn/credentials", post(turn_credentials))
        .layer(Extension(tokens));
    let public = Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route(
            "/openapi.json",
            get(|| async { ([(header::CONTENT_TYPE, "application/json")], openapi_json()) }),
        )
        .route("/v1/nodes", get(list_nodes))
        .route("/v1/nodes/{id}", get(get_node))
        .route("/v1/nodes/{id}/drain", get(drain_status))
        .route("/v1/sessions", get(list_sessions))
        .route("/v1/streams", get(list_streams))
        .route("/v1/recordings", get(list_recordings))
        .route("/v1/recordings/{id}", get(get_recording))
        .route("/v1/transcodes", get(list_transcodes))
        .route("/v1/transcodes/{id}", get(get_transcode))
        .route("/v1/migrations", get(list_migrations))
        .route("/v1/migrations/{id}", get(get_migration))
        .route("/v1/routing", get(routing))
        .route("/v1/routing/events", get(routing_events))
        .route("/v1/turn/relays", get(turn_relays));
    let cors = CorsLayer::new()
        .allow_origin(Any)
        .allow_methods(Any)
        // Mirrored rather than `*`: a wildcard does not cover `Authorization` (pages that call
        // the operator API with a token).
        .allow_headers(AllowHeaders::mirror_request())
        .expose_headers([
            header::LOCATION,
            header::ETAG,
            header::LINK,
            header::WWW_AUTHENTICATE,
            HeaderName::from_static(FERRY_ERROR),
        ]);
    let mut app = mutating
        .merge(snapshots)
        .merge(gateway)
        .merge(turn)
        .merge(public);
    if let Some(extra) = extra {
        app = app.merge(extra);
    }
    // An unknown path gets the API's JSON error too (a client following a link it built
    // wrong, say `/v1/recordings/` with an empty id).
    app.fallback(|uri: axum::http::Uri| async move {
        error(
            StatusCode::NOT_FOUND,
            format!("no such API path: {}", uri.path()),
        )
    })
    .layer(DefaultBodyLimit::max(MAX_BODY))
    .layer(cors)
    .with_state(s)
}

fn room_id(room: &str) -> Result<ferry_room::RoomId, Response> {
    ferry_room::RoomId::new(room).map_err(|e| {
        error(
            StatusCode::BAD_REQUEST,
            format!("bad room id {room:?}: {e}"),
        )
    })
}

fn room_and_node(room: &str, node: &str) -> Result<(ferry_room::RoomId, NodeId), Response> {
    let n = NodeId::new(node).map_err(|e| {
        error(
            StatusCode::BAD_REQUEST,
            format!("bad node id {node:?}: {e}"),
        )
    })?;
    Ok((room_id(room)?, n))
}

fn snapshot_error(e: crate::room_snapshots::SnapshotApiError) -> Response {
    use crate::room_snapshots::SnapshotApiError as E;
    use ferry_room::snapshot::SnapshotError;
    let status = match &e {
        E::Bad(SnapshotError::TooLarge(_)) => StatusCode::PAYLOAD_TOO_LARGE,
        E::Bad(_) => StatusCode::BAD_REQUEST,
        _ => StatusCode::SERVICE_UNAVAILABLE,
    };
    error(status, e.to_string())
}

/// Runs a snapshot store call off the runtime's threads.
async fn snapshot_call<T: Send + 'static>(
    s: &Arc<Scheduler>,
    f: impl FnOnce(
        &dyn crate::room_snapshots::RoomSnapshots,
    ) -> Result<T, crate::room_snapshots::SnapshotApiError>
    + Send
    + 'static,
) -> Result<T, Response> {
    let store = s.room_snapshots();
    match tokio::task::spawn_blocking(move || f(store.as_ref())).await {
        Ok(r) => r.map_err(snapshot_error),
        Err(e) => Err(error(StatusCode::SERVICE_UNAVAILABLE, e.to_string())),
    }
}

/// Stores node `node`'s snapshot of `room` (its replica's state, encoded by `ferry-room`'s
/// codec), replacing the one before; the nodes hosting a room call it now and then, so that
/// the room survives a restart of the whole cluster. 400 when the body is no state of `room`.
#[utoipa::path(put, path = "/v1/rooms/{room}/snapshots/{node}", security(("bearer" = [])),
    params(("room" = String, Path, pattern = "^[A-Za-z0-9._-]{1,64}$", description = "Room id"), ("node" = String, Path, pattern = "^[A-Za-z0-9._-]{1,64}$", description = "Node id")),
    request_body(content = String, content_type = "application/octet-stream", description = "The replica's room state, encoded by ferry-room's codec (binary)"),
    responses((status = 204, description = "stored"), (status = 400, body = ApiError), (status = 401, body = ApiError), (status = 413, body = ApiError), (status = 503, body = ApiError)))]
async fn put_room_snapshot(
    State(s): State<Arc<Scheduler>>,
    Path((room, node)): Path<(String, String)>,
    body: axum::body::Bytes,
) -> Response {
    let (room, node) = match room_and_node(&room, &node) {
        Ok(x) => x,
        Err(r) => return r,
    };
    match snapshot_call(&s, move |st| {
        crate::room_snapshots::store(st, &room, &node, &body)
    })
    .await
    {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(r) => r,
    }
}

/// Every node's stored snapshot of `room` (a node opening the room merges them): one
/// `Vec<StoredSnapshot>` encoded by `ferry-room`'s codec, empty when none is stored.
#[utoipa::path(get, path = "/v1/rooms/{room}/snapshots", security(("bearer" = [])),
    params(("room" = String, Path, pattern = "^[A-Za-z0-9._-]{1,64}$", description = "Room id")),
    responses((status = 200, content_type = "application/octet-stream", body = String, description = "Vec<StoredSnapshot>, encoded by ferry-room's codec (binary)"), (status = 400, body = ApiError), (status = 401, body = ApiError), (status = 503, body = ApiError)))]
async fn get_room_snapshots(State(s): State<Arc<Scheduler>>, Path(room): Path<String>) -> Response {
    let room = match room_id(&room) {
        Ok(x) => x,
        Err(r) => return r,
    };
    match snapshot_call(&s, move |st| crate::room_snapshots::fetch(st, &room)).await {
        Ok(bytes) => ([(header::CONTENT_TYPE, "application/octet-stream")], bytes).into_response(),
        Err(r) => r,
    }
}

/// Removes node `node`'s snapshot of `room` (the node stopped hosting the idle room).
#[utoipa::path(delete, path = "/v1/rooms/{room}/snapshots/{node}", security(("bearer" = [])),
    params(("room" = String, Path, pattern = "^[A-Za-z0-9._-]{1,64}$", description = "Room id"), ("node" = String, Path, pattern = "^[A-Za-z0-9._-]{1,64}$", description = "Node id")),
    responses((status = 204, description = "removed"), (status = 400, body = ApiError), (status = 401, body = ApiError), (status = 404, body = ApiError), (status = 503, body = ApiError)))]
async fn delete_room_snapshot(
    State(s): State<Arc<Scheduler>>,
    Path((room, node)): Path<(String, String)>,
) -> Response {
    let (room, node) = match room_and_node(&room, &node) {
        Ok(x) => x,
        Err(r) => return r,
    };
    let (r2, n2) = (room.clone(), node.clone());
    match snapshot_call(&s, move |st| Ok(st.delete(&r2, &n2)?)).await {
        Ok(true) => StatusCode::NO_CONTENT.into_response(),
        Ok(false) => error(
            StatusCode::NOT_FOUND,
            format!("no snapshot of room {room} by node {node}"),
        ),
        Err(r) => r,
    }
}

/// The stored room snapshots: room, node, size, when.
#[utoipa::path(get, path = "/v1/room-snapshots", security(("bearer" = [])),
    responses((status = 200, body = Vec<crate::room_snapshots::SnapshotInfo>), (status = 401, body = ApiError), (status = 503, body = ApiError)))]
async fn list_room_snapshots(State(s): State<Arc<Scheduler>>) -> Response {
    match snapshot_call(&s, crate::room_snapshots::list).await {
        Ok(list) => Json(list).into_response(),
        Err(r) => r,
    }
}

/// Liveness.
#[utoipa::path(get, path = "/healthz", responses((status = 200, description = "alive", body = String)))]
async fn healthz() -> &'static str {
    "ok\n"
}

async fn metrics(State(s): State<Arc<Scheduler>>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        s.metrics_text(),
    )
        .into_response()
}

/// Every node the scheduler knows.
#[utoipa::path(get, path = "/v1/nodes", responses((status = 200, body = Vec<NodeView>)))]
async fn list_nodes(State(s): State<Arc<Scheduler>>) -> Json<Vec<NodeView>> {
    Json(s.with(|c| c.nodes(Instant::now())))
}

/// One node.
#[utoipa::path(get, path = "/v1/nodes/{id}", params(("id" = String, Path, pattern = "^[A-Za-z0-9._-]{1,64}$", description = "node id")),
    responses((status = 200, body = NodeView), (status = 404, body = ApiError)))]
async fn get_node(State(s): State<Arc<Scheduler>>, PathId(id): PathId<NodeId>) -> Response {
    match s.with(|c| c.node(Instant::now(), &id)) {
        Ok(v) => Json(v).into_response(),
        Err(e) => cluster_error(e),
    }
}

/// A node reports its figures and sessions (every second).
#[utoipa::path(post, path = "/v1/nodes/{id}/heartbeat", params(("id" = String, Path, pattern = "^[A-Za-z0-9._-]{1,64}$", description = "node id")),
    request_body = Heartbeat, security(("bearer" = [])),
    responses((status = 204, description = "accepted; Ferry-Node-State: the node's state (active, draining, drained)", headers(("Ferry-Node-State" = String, description = "the node's state at the scheduler"))), (status = 400, body = ApiError), (status = 401, body = ApiError)))]
async fn heartbeat(
    State(s): State<Arc<Scheduler>>,
    Path(id): Path<String>,
    Body(hb): Body<Heartbeat>,
) -> Response {
    let Ok(id) = NodeId::new(id.clone()) else {
        return error(StatusCode::BAD_REQUEST, format!("bad node id {id:?}"));
    };
    // The node's state goes back with the answer (its /readyz follows a drain).
    match s.heartbeat(&id, hb) {
        Ok(state) => {
            let mut r = StatusCode::NO_CONTENT.into_response();
            if let Some(state) = state {
                r.headers_mut()
                    .insert("ferry-node-state", HeaderValue::from_static(state.as_str()));
            }
            // Relays being drained: the node tells its clients on them to move.
            let draining = s.turn_draining_uris();
            if !draining.is_empty()
                && let Ok(v) = HeaderValue::from_str(&draining.join(", "))
            {
                r.headers_mut().insert(TURN_DRAINING, v);
            }
            r
        }
        Err(e) => cluster_error(e),
    }
}

/// Pins a node's weight (or un-pins it with `null`).
#[utoipa::path(put, path = "/v1/nodes/{id}/weight", params(("id" = String, Path, pattern = "^[A-Za-z0-9._-]{1,64}$", description = "node id")),
    request_body = WeightUpdate, security(("bearer" = [])),
    responses((status = 200, body = NodeView), (status = 400, body = ApiError), (status = 401, body = ApiError), (status = 404, body = ApiError)))]
async fn set_weight(
    State(s): State<Arc<Scheduler>>,
    PathId(id): PathId<NodeId>,
    Body(w): Body<WeightUpdate>,
) -> Response {
    match s.mutate(|c| {
        c.set_weight(&id, w.weight)?;
        c.node(Instant::now(), &id)
    }) {
        Ok(v) => committed(&s, Json(v).into_response()),
        Err(e) => cluster_error(e),
    }
}

/// A spot instance will be reclaimed: its weight decays to 0 by the deadline and it drains.
#[utoipa::path(post, path = "/v1/nodes/{id}/reclaim-notice", params(("id" = String, Path, pattern = "^[A-Za-z0-9._-]{1,64}$", description = "node id")),
    request_body = ReclaimNotice, security(("bearer" = [])),
    responses((status = 202, body = DrainStatus), (status = 400, body = ApiError), (status = 401, body = ApiError), (status = 404, body = ApiError), (status = 409, body = ApiError)))]
async fn reclaim_notice(
    State(s): State<Arc<Scheduler>>,
    PathId(id): PathId<NodeId>,
    Body(n): Body<ReclaimNotice>,
) -> Response {
    let now = Instant::now();
    match s.mutate(|c| {
        c.reclaim_notice(now, &id, Duration::from_secs(n.deadline_s))?;
        c.drain_status(&id)
    }) {
        Ok(v) => committed(&s, (StatusCode::ACCEPTED, Json(v)).into_response()),
        Err(e) => cluster_error(e),
    }
}

/// Drains a node: no new sessions, every session migrated away under the budget.
#[utoipa::path(post, path = "/v1/nodes/{id}/drain", params(("id" = String, Path, pattern = "^[A-Za-z0-9._-]{1,64}$", description = "node id")),
    security(("bearer" = [])),
    responses((status = 202, body = DrainStatus), (status = 401, body = ApiError), (status = 404, body = ApiError), (status = 409, body = ApiError)))]
async fn start_drain(State(s): State<Arc<Scheduler>>, PathId(id): PathId<NodeId>) -> Response {
    match s.mutate(|c| c.drain(Instant::now(), &id)) {
        Ok(v) => {
            s.wake();
            committed(&s, (StatusCode::ACCEPTED, Json(v)).into_response())
        }
        Err(e) => cluster_error(e),
    }
}

/// Cancels a node's drain (undrain): the node is active again and ramps back up; migrations
/// already running end as they will. An active node is left as it is.
#[utoipa::path(delete, path = "/v1/nodes/{id}/drain", params(("id" = String, Path, pattern = "^[A-Za-z0-9._-]{1,64}$", description = "node id")),
    security(("bearer" = [])),
    responses((status = 200, description = "the node is active; the cancelled drain's last progress", body = DrainStatus),
        (status = 401, body = ApiError), (status = 404, body = ApiError),
        (status = 409, description = "the node is down", body = ApiError)))]
async fn cancel_drain(State(s): State<Arc<Scheduler>>, PathId(id): PathId<NodeId>) -> Response {
    match s.mutate(|c| c.undrain(Instant::now(), &id)) {
        Ok(v) => {
            s.wake();
            committed(&s, Json(v).into_response())
        }
        Err(e) => cluster_error(e),
    }
}

/// Progress of a node's drain; 404 for an unknown node or one with no drain.
#[utoipa::path(get, path = "/v1/nodes/{id}/drain", params(("id" = String, Path, pattern = "^[A-Za-z0-9._-]{1,64}$", description = "node id")),
    responses((status = 200, body = DrainStatus), (status = 404, body = ApiError)))]
async fn drain_status(State(s): State<Arc<Scheduler>>, PathId(id): PathId<NodeId>) -> Response {
    match s.with(|c| c.drain_of(&id)) {
        Ok(Some(v)) => Json(v).into_response(),
        Ok(None) => error(
            StatusCode::NOT_FOUND,
            format!("node {id} has no drain (never drained, or undrained since)"),
        ),
        Err(e) => cluster_error(e),
    }
}

/// Streams: origin, viewers per node, and whether they are hot (`--hot-stream-viewers`).
#[utoipa::path(get, path = "/v1/streams", responses((status = 200, body = Vec<StreamView>)))]
async fn list_streams(State(s): State<Arc<Scheduler>>) -> Json<Vec<StreamView>> {
    Json(s.with(|c| c.streams()))
}

/// Every recording: those the scheduler keeps going (placed by it; moved when their node
/// drains, resumed elsewhere when it dies), with the figures their node reports, and those
/// started on a node directly that its heartbeat lists.
#[utoipa::path(get, path = "/v1/recordings", responses((status = 200, body = Vec<RecordingReport>)))]
async fn list_recordings(State(s): State<Arc<Scheduler>>) -> Json<Vec<RecordingReport>> {
    Json(s.with(|c| c.recording_views()))
}

fn recording_error(e: crate::service::RecordingRequestError) -> Response {
    let status = StatusCode::from_u16(e.status).unwrap_or(StatusCode::BAD_GATEWAY);
    let mut r = error(status, e.reason);
    if status == StatusCode::SERVICE_UNAVAILABLE {
        r.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("2"));
    }
    r
}

/// Every transcode the scheduler placed: its node, state, encoder and rungs (with the figures its
/// node reports while it runs).
#[utoipa::path(get, path = "/v1/transcodes", responses((status = 200, body = Vec<TranscodeView>)))]
async fn list_transcodes(State(s): State<Arc<Scheduler>>) -> Json<Vec<TranscodeView>> {
    Json(s.transcodes().await)
}

/// One transcode, with its node's figures (frames, real-time factor, CPU per rung).
#[utoipa::path(get, path = "/v1/transcodes/{id}", params(("id" = String, Path, pattern = "^[A-Za-z0-9._-]{1,64}$", description = "transcode id")),
    responses((status = 200, body = TranscodeView), (status = 404, body = ApiError)))]
async fn get_transcode(
    State(s): State<Arc<Scheduler>>,
    PathId(id): PathId<TranscodeId>,
) -> Response {
    match s.transcode(id).await {
        Ok(v) => Json(v).into_response(),
        Err(e) => recording_error(e),
    }
}

/// Transcodes a stream into a ladder of rungs, each published as `{stream}~{rung}` (H.264):
/// placed on a node whose GPU has NVENC sessions left for its rungs when one has, else on the
/// node with the most headroom (or on `node`). Each rung at most once.
#[utoipa::path(post, path = "/v1/transcodes", request_body = TranscodeRequest, security(("bearer" = [])),
    responses((status = 201, body = TranscodeView), (status = 400, body = ApiError), (status = 401, body = ApiError), (status = 404, body = ApiError), (status = 409, body = ApiError), (status = 502, body = ApiError), (status = 503, body = ApiError)))]
async fn start_transcode(
    State(s): State<Arc<Scheduler>>,
    Body(req): Body<TranscodeRequest>,
) -> Response {
    let id = match req.id.map(TranscodeId::new).transpose() {
        Ok(id) => id,
        Err(e) => return error(StatusCode::BAD_REQUEST, format!("transcode id: {e}")),
    };
    let stream = match StreamId::new(req.stream.clone()) {
        Ok(st) => st,
        Err(e) => return error(StatusCode::BAD_REQUEST, format!("stream name: {e}")),
    };
    if req.ladder.is_empty() || req.ladder.len() > 6 {
        return error(StatusCode::BAD_REQUEST, "the ladder has 1 to 6 rungs");
    }
    match s.start_transcode(id, stream, req.ladder, req.node).await {
        Ok(v) => {
            let mut r = (StatusCode::CREATED, Json(&v)).into_response();
            if let Ok(loc) = HeaderValue::from_str(&format!("/v1/transcodes/{}", v.id)) {
                r.headers_mut().insert(header::LOCATION, loc);
            }
            r
        }
        Err(e) => recording_error(e),
    }
}

/// Stops a transcode: its rungs' streams end.
#[utoipa::path(delete, path = "/v1/transcodes/{id}", params(("id" = String, Path, pattern = "^[A-Za-z0-9._-]{1,64}$", description = "transcode id")), security(("bearer" = [])),
    responses((status = 200, body = TranscodeView), (status = 401, body = ApiError), (status = 404, body = ApiError), (status = 409, body = ApiError)))]
async fn stop_transcode(
    State(s): State<Arc<Scheduler>>,
    PathId(id): PathId<TranscodeId>,
) -> Response {
    match s.stop_transcode(id).await {
        Ok(v) => Json(v).into_response(),
        Err(e) => recording_error(e),
    }
}

/// One recording.
#[utoipa::path(get, path = "/v1/recordings/{id}", params(("id" = String, Path, pattern = "^[A-Za-z0-9._-]{1,64}$", description = "recording id")),
    responses((status = 200, body = RecordingReport), (status = 404, body = ApiError)))]
async fn get_recording(
    State(s): State<Arc<Scheduler>>,
    PathId(id): PathId<RecordingId>,
) -> Response {
    match s.with(|c| c.recording_view(&id)) {
        Ok(v) => Json(v).into_response(),
        Err(e) => cluster_error(e),
    }
}

/// Records a stream: on the node where it is published (or where it is relayed when that one
/// cannot take it), into `target` or the node's recordings directory. The scheduler keeps it
/// going: a drain moves it at a keyframe, a dead node's recording resumes on another node.
#[utoipa::path(post, path = "/v1/recordings", request_body = RecordingRequest, security(("bearer" = [])),
    responses((status = 201, body = RecordingReport), (status = 400, body = ApiError), (status = 401, body = ApiError), (status = 404, body = ApiError), (status = 422, body = ApiError), (status = 502, body = ApiError), (status = 503, body = ApiError)))]
async fn start_recording(
    State(s): State<Arc<Scheduler>>,
    Body(req): Body<RecordingRequest>,
) -> Response {
    let stream = match StreamId::new(req.stream.clone()) {
        Ok(st) => st,
        Err(e) => return error(StatusCode::BAD_REQUEST, format!("stream name: {e}")),
    };
    if let Some(t) = &req.target
        && let Err(why) = ferry_proto::api::check_recording_target(t)
    {
        return error(StatusCode::BAD_REQUEST, why.to_string());
    }
    match s.start_recording(stream, req.target, req.node).await {
        Ok(v) => {
            let mut r = (StatusCode::CREATED, Json(&v)).into_response();
            if let Ok(loc) = HeaderValue::from_str(&format!("/v1/recordings/{}", v.id)) {
                r.headers_mut().insert(header::LOCATION, loc);
            }
            r
        }
        Err(e) => recording_error(e),
    }
}

/// Stops a recording; answers once its playlist with `EXT-X-ENDLIST` is stored.
#[utoipa::path(delete, path = "/v1/recordings/{id}", params(("id" = String, Path, pattern = "^[A-Za-z0-9._-]{1,64}$", description = "recording id")), security(("bearer" = [])),
    responses((status = 200, body = RecordingReport), (status = 401, body = ApiError), (status = 404, body = ApiError), (status = 409, body = ApiError), (status = 502, body = ApiError)))]
async fn stop_recording(
    State(s): State<Arc<Scheduler>>,
    PathId(id): PathId<RecordingId>,
) -> Response {
    match s.stop_recording(id).await {
        Ok(v) => Json(v).into_response(),
        Err(e) => recording_error(e),
    }
}

/// Every session in the cluster.
#[utoipa::path(get, path = "/v1/sessions", responses((status = 200, body = Vec<SessionView>)))]
async fn list_sessions(State(s): State<Arc<Scheduler>>) -> Json<Vec<SessionView>> {
    Json(s.with(|c| c.sessions()))
}

/// Places a stream, room or transcode.
#[utoipa::path(post, path = "/v1/placements", request_body = PlacementRequest, security(("bearer" = [])),
    responses((status = 200, body = PlacementResponse), (status = 400, body = ApiError), (status = 401, body = ApiError), (status = 503, body = ApiError)))]
async fn place(State(s): State<Arc<Scheduler>>, Body(req): Body<PlacementRequest>) -> Response {
    match s.mutate(|c| c.place(&req)) {
        Ok(mut p) => {
            // The version under which the table is published (with etcd, a revision).
            p.routing_version = *s.routing_watch().borrow();
            Json(p).into_response()
        }
        Err(e) => cluster_error(e),
    }
}

/// Where a participant's room WebSocket goes (docs/rooms.md): the participant is placed by
/// weighted consistent hashing of `{room}/{participant}` with bounded loads; the access token
/// (bearer or `?access_token=`) needs the `join` grant for the room. The body may be empty.
#[utoipa::path(post, path = "/v1/rooms/{room}/join", request_body(content = Option<ferry_room::join::JoinRequest>, description = "Optional: the participant id and display name"),
    params(("room" = String, Path, pattern = "^[A-Za-z0-9._-]{1,64}$", description = "Room id"),
           ("access_token" = Option<String>, Query, description = "Access token with the join grant, instead of the Authorization header")),
    security(("bearer" = [])),
    responses((status = 200, body = ferry_room::join::JoinAnswer), (status = 400, body = ApiError), (status = 401, body = ApiError), (status = 403, body = ApiError), (status = 503, body = ApiError)))]
async fn join_room(
    State(s): State<Arc<Scheduler>>,
    Extension(tokens): Extension<Arc<GatewayTokens>>,
    Path(room): Path<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    raw: axum::body::Bytes,
) -> Response {
    let req: ferry_room::join::JoinRequest = if raw.is_empty() {
        Default::default()
    } else {
        // `null` is no request, as an empty body is.
        match serde_json::from_slice::<Option<_>>(&raw) {
            Ok(r) => r.unwrap_or_default(),
            Err(e) => return error(StatusCode::BAD_REQUEST, format!("bad join request: {e}")),
        }
    };
    let fresh = || format!("p-{:016x}", rand::random::<u64>());
    let (room, participant) = match ferry_room::join::parse(&room, &req, fresh) {
        Ok(x) => x,
        Err(e) => return error(StatusCode::BAD_REQUEST, e.to_string()),
    };
    let token = request_token(&headers, query.as_deref());
    if let Err(e) =
        tokens
            .verifier
            .authorize(token.as_deref(), Grant::Join, room.as_str(), unix_s())
    {
        return auth_error(e);
    }
    let placement = PlacementRequest {
        key: ferry_room::join::placement_key(&room, &participant),
        kind: Default::default(),
        requirements: Default::default(),
    };
    match s.mutate(|c| c.place(&placement)) {
        Ok(p) => Json(ferry_room::join::JoinAnswer::new(
            room,
            participant,
            p.node,
            &p.http,
        ))
        .into_response(),
        Err(e) => cluster_error(e),
    }
}

/// Starts a migration of one session on its source node (503 when no other node can take it).
#[utoipa::path(post, path = "/v1/migrations", request_body = MigrationRequest, security(("bearer" = [])),
    responses((status = 202, body = MigrationAccepted), (status = 400, body = ApiError), (status = 401, body = ApiError), (status = 404, body = ApiError), (status = 409, body = ApiError), (status = 503, body = ApiError)))]
async fn create_migration(
    State(s): State<Arc<Scheduler>>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    req: Result<Json<MigrationRequest>, JsonRejection>,
) -> Response {
    // The migration's own span (and through it the nodes') is a child of this one. Nothing
    // below awaits, so the guard never crosses an await.
    let span = crate::trace::request_span("/v1/migrations", query.as_deref(), &headers);
    let r = span.in_scope(|| create_migration_in_span(&s, req));
    ferry_proto::trace::record_status(&span, r.status().as_u16());
    r
}

fn create_migration_in_span(
    s: &Arc<Scheduler>,
    req: Result<Json<MigrationRequest>, JsonRejection>,
) -> Response {
    // Parsed here, inside the span: a bad body's 400 is part of the request's trace.
    let req = match body(req) {
        Ok(r) => r,
        Err(r) => return r,
    };
    match s.mutate(|c| c.create_migration(&req)) {
        Ok(m) => {
            let id = m.id.clone();
            let span = tracing::Span::current();
            span.record("migration.id", id.as_str());
            span.record("session.id", m.session.as_str());
            // Stored before the order goes out: a new leader follows it.
            let r = committed(
                s,
                (StatusCode::ACCEPTED, Json(MigrationAccepted { id })).into_response(),
            );
            if r.status() == StatusCode::ACCEPTED {
                s.start_migration(m);
            }
            r
        }
        Err(e) => cluster_error(e),
    }
}

/// One migration: state, per-phase durations, blackout, bytes.
#[utoipa::path(get, path = "/v1/migrations/{id}", params(("id" = String, Path, pattern = "^[A-Za-z0-9._-]{1,64}$", description = "migration id")),
    responses((status = 200, body = MigrationView), (status = 404, body = ApiError)))]
async fn get_migration(State(s): State<Arc<Scheduler>>, Path(id): Path<String>) -> Response {
    let Ok(id) = MigrationId::new(id.clone()) else {
        return error(StatusCode::NOT_FOUND, format!("no migration {id:?}"));
    };
    match s.with(|c| c.migration(&id)) {
        Ok(m) => Json(m).into_response(),
        Err(e) => cluster_error(e),
    }
}

/// Every migration.
#[utoipa::path(get, path = "/v1/migrations", responses((status = 200, body = Vec<MigrationView>)))]
async fn list_migrations(State(s): State<Arc<Scheduler>>) -> Json<Vec<MigrationView>> {
    Json(s.with(|c| c.migrations()))
}

#[derive(Debug, Deserialize)]
struct Since {
    since: Option<u64>,
    timeout_s: Option<u64>,
}

/// The routing table. With `since=V` the call waits (long-poll, up to
/// `timeout_s`, default 25 s) until the version is above V.
#[utoipa::path(get, path = "/v1/routing",
    params(("since" = Option<u64>, Query, description = "wait for a version above this"),
           ("timeout_s" = Option<u64>, Query, maximum = 60, description = "longest wait, default 25, at most 60")),
    responses((status = 200, body = RoutingTable), (status = 400, body = ApiError)))]
async fn routing(
    State(s): State<Arc<Scheduler>>,
    q: Result<Query<Since>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let Ok(Query(q)) = q else {
        return error(
            StatusCode::BAD_REQUEST,
            "since and timeout_s are unsigned integers",
        );
    };
    if let Some(since) = q.since {
        let wait = Duration::from_secs(q.timeout_s.unwrap_or(25).min(60));
        let mut rx = s.routing_watch();
        let _ = tokio::time::timeout(wait, rx.wait_for(|v| *v > since)).await;
    }
    Json(s.routing_table()).into_response()
}

/// The routing table as server-sent events: one `routing` event per version.
async fn routing_events(State(s): State<Arc<Scheduler>>) -> Response {
    let mut versions = s.routing_watch();
    let (tx, mut rx) = tokio::sync::mpsc::channel::<SseEvent>(4);
    tokio::spawn(async move {
        loop {
            let table = s.routing_table();
            let data = serde_json::to_string(&table).unwrap_or_default();
            if tx
                .send(SseEvent::default().event("routing").data(data))
                .await
                .is_err()
            {
                return;
            }
            if versions.changed().await.is_err() {
                return;
            }
        }
    });
    let stream = futures_util::stream::poll_fn(move |cx| {
        rx.poll_recv(cx)
            .map(|e| e.map(Ok::<_, std::convert::Infallible>))
    });
    Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response()
}

/// A node the client could not reach (`Ferry-Failed-Node`).
const FAILED_NODE: &str = "ferry-failed-node";

/// Where a WHIP/WHEP POST goes (a 307). The SDK's headers steer it: `Idempotency-Key` (a retry
/// goes where the first try went), `Ferry-Ticket` (a resumed session goes to the node holding
/// it, if that node is up) and `Ferry-Failed-Node` (a node the client lost: the scheduler
/// probes it and, if it does not answer either, declares it down and places elsewhere).
/// What the gateway checks WHIP/WHEP tokens with, and signs a redirect's own token with.
#[derive(Debug)]
struct GatewayTokens {
    verifier: Verifier,
    signer: Option<Signer>,
}

/// TURN relays for a user: the primary (the placement core's bounded-load consistent hashing
/// keyed by the user) and two backups, with a credential a stock coturn started with the same
/// `static-auth-secret` accepts. With `stream`, an access token for publishing or playing it
/// (or the API token); without, the API token.
#[utoipa::path(post, path = "/v1/turn/credentials", request_body = TurnCredentialsRequest, security(("bearer" = [])),
    responses((status = 200, body = TurnCredentialsResponse), (status = 400, body = ApiError), (status = 401, body = ApiError),
        (status = 403, body = ApiError), (status = 503, body = ApiError, description = "no TURN relays are configured, or none can take the user")))]
async fn turn_credentials(
    State(s): State<Arc<Scheduler>>,
    Extension(tokens): Extension<Arc<GatewayTokens>>,
    headers: HeaderMap,
    Body(req): Body<TurnCredentialsRequest>,
) -> Response {
    let token = request_token(&headers, None);
    let unix_s = unix_s();
    let allowed = match &req.stream {
        // Publishing or playing the stream entitles to relays.
        Some(stream) => tokens
            .verifier
            .authorize(token.as_deref(), Grant::Play, stream, unix_s)
            .or_else(|_| {
                tokens
                    .verifier
                    .authorize(token.as_deref(), Grant::Publish, stream, unix_s)
            }),
        None => tokens
            .verifier
            .authorize(token.as_deref(), Grant::Play, "", unix_s)
            .and_then(|c| {
                if c == Claims::operator() {
                    Ok(c)
                } else {
                    Err(AuthError::WrongStream)
                }
            }),
    };
    if let Err(e) = allowed {
        return auth_error(e);
    }
    match s.turn_credentials(&req) {
        None => error(
            StatusCode::SERVICE_UNAVAILABLE,
            "no TURN relays are configured (FERRY_TURN_URIS, FERRY_TURN_SECRET)",
        ),
        Some(Ok(r)) => Json(r).into_response(),
        Some(Err(e @ crate::turn::TurnError::BadRequest(_))) => {
            error(StatusCode::BAD_REQUEST, e.to_string())
        }
        Some(Err(e)) => error(StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
    }
}

/// The answer to a heartbeat lists the TURN relays being drained (URIs, comma-separated).
const TURN_DRAINING: &str = "ferry-turn-draining";

/// Deadline of a TURN relay's drain when the request names none.
const TURN_DRAIN_DEADLINE_S: u64 = 600;

fn turn_api_error(e: crate::service::TurnApiError) -> Response {
    use crate::service::TurnApiError as E;
    let status = match e {
        E::NoFleet => StatusCode::SERVICE_UNAVAILABLE,
        E::NotFound(_) | E::NoDrain(_) => StatusCode::NOT_FOUND,
        E::BadRelay(_) => StatusCode::BAD_REQUEST,
        E::Exists(_) | E::InService(..) => StatusCode::CONFLICT,
    };
    error(status, e.to_string())
}

/// The TURN relays: state (`active`, `draining`, `drained`, `down`), users on each (as this
/// replica counts them) and drains.
#[utoipa::path(get, path = "/v1/turn/relays",
    responses((status = 200, body = Vec<TurnRelayView>), (status = 503, body = ApiError, description = "no TURN relays are configured")))]
async fn turn_relays(State(s): State<Arc<Scheduler>>) -> Response {
    match s.turn_relay_views() {
        Some(v) => Json(v).into_response(),
        None => turn_api_error(crate::service::TurnApiError::NoFleet),
    }
}

/// Adds a TURN relay to the fleet (scale-out; stored, so every replica hands it out): it ramps
/// in — bounded loads send it users as they ask, consistent hashing those whose keys it owns.
#[utoipa::path(post, path = "/v1/turn/relays", request_body = TurnRelayRequest, security(("bearer" = [])),
    responses((status = 201, body = TurnRelayView), (status = 400, body = ApiError), (status = 401, body = ApiError),
        (status = 409, body = ApiError, description = "the relay is in the fleet already"), (status = 503, body = ApiError)))]
async fn add_turn_relay(
    State(s): State<Arc<Scheduler>>,
    Body(req): Body<TurnRelayRequest>,
) -> Response {
    match s.add_turn_relay(&req.uri) {
        Ok(v) => committed(&s, (StatusCode::CREATED, Json(v)).into_response()),
        Err(e) => turn_api_error(e),
    }
}

/// Removes a TURN relay from the fleet (scale-in), once it is drained (or down).
#[utoipa::path(delete, path = "/v1/turn/relays/{id}", params(("id" = String, Path, description = "relay id or URI")),
    security(("bearer" = [])),
    responses((status = 204, description = "removed"), (status = 401, body = ApiError), (status = 404, body = ApiError),
        (status = 409, body = ApiError, description = "it still takes or holds users: drain it first"), (status = 503, body = ApiError)))]
async fn remove_turn_relay(State(s): State<Arc<Scheduler>>, Path(id): Path<String>) -> Response {
    match s.remove_turn_relay(&id) {
        Ok(()) => committed(&s, StatusCode::NO_CONTENT.into_response()),
        Err(e) => turn_api_error(e),
    }
}

/// Drains a TURN relay (its id or URI, percent-encoded): it gets no new users, nodes tell the
/// SDK clients on it to ICE-restart onto a backup relay, and it is drained once it holds no
/// allocations or after `deadline_s` (default 600). Starting a running drain again keeps it.
#[utoipa::path(post, path = "/v1/turn/relays/{id}/drain", params(("id" = String, Path, description = "relay id or URI")),
    request_body(content = Option<TurnDrainRequest>), security(("bearer" = [])),
    responses((status = 202, body = TurnDrain), (status = 400, body = ApiError), (status = 401, body = ApiError),
        (status = 404, body = ApiError), (status = 503, body = ApiError)))]
async fn start_turn_drain(
    State(s): State<Arc<Scheduler>>,
    Path(id): Path<String>,
    raw: axum::body::Bytes,
) -> Response {
    // The body is optional: none (or only whitespace) means the defaults.
    let req = if raw.iter().all(u8::is_ascii_whitespace) {
        TurnDrainRequest::default()
    } else {
        match serde_json::from_slice::<Option<TurnDrainRequest>>(&raw) {
            Ok(r) => r.unwrap_or_default(),
            Err(e) => return error(StatusCode::BAD_REQUEST, format!("bad JSON body: {e}")),
        }
    };
    let deadline_s = req.deadline_s.unwrap_or(TURN_DRAIN_DEADLINE_S);
    if !(1..=86_400).contains(&deadline_s) {
        return error(
            StatusCode::BAD_REQUEST,
            format!("deadline_s {deadline_s} is not within 1..=86400"),
        );
    }
    match s.start_turn_drain(&id, deadline_s) {
        Ok(d) => committed(&s, (StatusCode::ACCEPTED, Json(d)).into_response()),
        Err(e) => turn_api_error(e),
    }
}

/// Ends a TURN relay's drain: it takes users again.
#[utoipa::path(delete, path = "/v1/turn/relays/{id}/drain", params(("id" = String, Path, description = "relay id or URI")),
    security(("bearer" = [])),
    responses((status = 200, description = "the cancelled drain", body = TurnDrain), (status = 401, body = ApiError),
        (status = 404, body = ApiError), (status = 503, body = ApiError)))]
async fn cancel_turn_drain(State(s): State<Arc<Scheduler>>, Path(id): Path<String>) -> Response {
    match s.cancel_turn_drain(&id) {
        Ok(d) => committed(&s, Json(d).into_response()),
        Err(e) => turn_api_error(e),
    }
}

/// Lifetime of the token a redirect carries in place of the API token.
const REDIRECT_TOKEN_TTL_S: u64 = 60;

/// Machine-readable reason of a refusal (as on the nodes).
const FERRY_ERROR: &str = "ferry-error";

/// 401 (no, bad or expired access token) or 403 (a token that does not allow this), with the
/// reason, its `Ferry-Error` code and the `WWW-Authenticate` challenge (RFC 6750 §3).
/// The access token of a request: its bearer token, else `?access_token=` in `query`.
fn request_token(headers: &HeaderMap, query: Option<&str>) -> Option<String> {
    ferry_proto::auth::request_token(
        headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok()),
        query,
    )
}

/// The wall clock, Unix seconds (token and ticket expiry).
fn unix_s() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn auth_error(e: AuthError) -> Response {
    let status = StatusCode::from_u16(e.status()).unwrap_or(StatusCode::UNAUTHORIZED);
    let mut r = error(status, e.to_string());
    let h = r.headers_mut();
    h.insert(FERRY_ERROR, HeaderValue::from_static(e.code()));
    if let Ok(v) = HeaderValue::from_str(&e.challenge()) {
        h.insert(header::WWW_AUTHENTICATE, v);
    }
    r
}

/// [`redirect`] in a span of its own (`POST /whip/{stream}` or `POST /whep/{stream}`) whose
/// trace context the 307 hands on to the node.
async fn traced_redirect(
    s: &Arc<Scheduler>,
    tokens: &GatewayTokens,
    stream: String,
    kind: SessionKind,
    query: Option<&str>,
    headers: &HeaderMap,
) -> Response {
    let route = match kind {
        SessionKind::Publish => "/whip/{stream}",
        SessionKind::View => "/whep/{stream}",
    };
    let span = crate::trace::request_span(route, query, headers);
    span.record("stream", stream.as_str());
    let r = redirect(s, tokens, stream, kind, query, headers)
        .instrument(span.clone())
        .await;
    ferry_proto::trace::record_status(&span, r.status().as_u16());
    r
}

async fn redirect(
    s: &Arc<Scheduler>,
    tokens: &GatewayTokens,
    stream: String,
    kind: SessionKind,
    query: Option<&str>,
    headers: &HeaderMap,
) -> Response {
    // The token first: nothing (not even a probe of a reported node) for a refused request.
    let token = request_token(headers, query);
    let grant = match kind {
        SessionKind::Publish => Grant::Publish,
        SessionKind::View => Grant::Play,
    };
    let unix_s = unix_s();
    let claims = match tokens
        .verifier
        .authorize(token.as_deref(), grant, &stream, unix_s)
    {
        Ok(c) => c,
        Err(e) => return auth_error(e),
    };
    // The API token must not travel in a URL (logs, referrers): with a key to sign with, the
    // redirect carries a token for this stream and action only, good for a minute.
    let token = match (&tokens.signer, claims == Claims::operator()) {
        (Some(signer), true) => {
            let c = Claims::new("gateway", unix_s + REDIRECT_TOKEN_TTL_S).issued_at(unix_s);
            let c = match grant {
                Grant::Publish => c.publish(stream.clone()),
                Grant::Play => c.play(stream.clone()),
                Grant::Join => c.join(stream.clone()),
            };
            match signer.sign(&c) {
                Ok(t) => Some(t),
                Err(e) => {
                    return error(
                        StatusCode::SERVICE_UNAVAILABLE,
                        format!("signing the redirect's token: {e}"),
                    );
                }
            }
        }
        _ => token,
    };
    let Ok(stream) = StreamId::new(stream.clone()) else {
        return error(
            StatusCode::BAD_REQUEST,
            format!("bad stream name {stream:?}"),
        );
    };
    let text = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    if let Some(failed) = text(FAILED_NODE).and_then(|n| NodeId::new(n).ok()) {
        s.check_reported_node(&failed).await;
    }
    let key = text("idempotency-key")
        .filter(|k| !k.is_empty() && k.len() <= 255)
        .map(|k| format!("{}/{stream}/{k}", kind_path(kind)));
    let resuming = text("ferry-ticket")
        .and_then(crate::ticket::peek)
        .filter(|c| c.stream == stream)
        .map(|c| c.sid);
    let base = match key.as_deref().and_then(|k| s.remembered_redirect(k)) {
        Some(base) => base,
        None => match s.mutate(|c| c.redirect_resuming(&stream, kind, resuming.as_ref())) {
            Ok(base) => base,
            Err(e) => return cluster_error(e),
        },
    };
    if let Some(k) = key {
        s.remember_redirect(k, base.clone());
    }
    // Browsers drop `Authorization` when they follow a redirect to another origin (the node):
    // the token goes along in the query (RFC 6750 §2.3).
    tracing::Span::current().record("node.url", base.as_str());
    let location = format!("{base}/{}/{stream}", kind_path(kind));
    let location = match &token {
        Some(t) => ferry_proto::auth::with_access_token(&location, t),
        None => location,
    };
    // The node's span for the client's POST there joins this request's trace.
    let location = ferry_proto::trace::with_trace_parent(
        &location,
        &crate::trace::for_redirect(query, headers),
    );
    let mut r = StatusCode::TEMPORARY_REDIRECT.into_response();
    match HeaderValue::from_str(&location) {
        Ok(v) => {
            r.headers_mut().insert(header::LOCATION, v);
            r
        }
        Err(_) => error(
            StatusCode::SERVICE_UNAVAILABLE,
            "the placed node has an invalid URL",
        ),
    }
}

fn kind_path(kind: SessionKind) -> &'static str {
    match kind {
        SessionKind::Publish => "whip",
        SessionKind::View => "whep",
    }
}

/// WHIP: answered with 307 to the node that takes the stream (or that holds the session a
/// `Ferry-Ticket` resumes). Needs an access token with a `publish` grant for the stream (or the
/// API token), which the `Location` carries on as `access_token`.
#[utoipa::path(post, path = "/whip/{stream}", params(("stream" = String, Path, pattern = "^[A-Za-z0-9._-]{1,64}$", description = "stream name"),
        ("access_token" = Option<String>, Query, description = "the access token, when no Authorization header can carry it")),
    request_body(content = String, content_type = "application/sdp"), security(("bearer" = [])),
    responses((status = 307, description = "Location: the node's WHIP endpoint, with the token as access_token"), (status = 400, body = ApiError),
        (status = 401, description = "no, bad or expired access token (WWW-Authenticate, Ferry-Error)", body = ApiError),
        (status = 403, description = "the token does not grant publishing this stream (Ferry-Error)", body = ApiError), (status = 503, body = ApiError)))]
async fn whip(
    State(s): State<Arc<Scheduler>>,
    Extension(tokens): Extension<Arc<GatewayTokens>>,
    Path(stream): Path<String>,
    RawQuery(query): RawQuery,
    h: HeaderMap,
) -> Response {
    traced_redirect(
        &s,
        &tokens,
        stream,
        SessionKind::Publish,
        query.as_deref(),
        &h,
    )
    .await
}

/// WHEP: answered with 307 to the node that serves the stream (or that holds the session a
/// `Ferry-Ticket` resumes). Needs an access token with a `play` grant for the stream (or the
/// API token), which the `Location` carries on as `access_token`.
#[utoipa::path(post, path = "/whep/{stream}", params(("stream" = String, Path, pattern = "^[A-Za-z0-9._-]{1,64}$", description = "stream name"),
        ("access_token" = Option<String>, Query, description = "the access token, when no Authorization header can carry it")),
    request_body(content = String, content_type = "application/sdp"), security(("bearer" = [])),
    responses((status = 307, description = "Location: the node's WHEP endpoint, with the token as access_token"), (status = 400, body = ApiError),
        (status = 401, description = "no, bad or expired access token (WWW-Authenticate, Ferry-Error)", body = ApiError),
        (status = 403, description = "the token does not grant playing this stream (Ferry-Error)", body = ApiError), (status = 503, body = ApiError)))]
async fn whep(
    State(s): State<Arc<Scheduler>>,
    Extension(tokens): Extension<Arc<GatewayTokens>>,
    Path(stream): Path<String>,
    RawQuery(query): RawQuery,
    h: HeaderMap,
) -> Response {
    traced_redirect(&s, &tokens, stream, SessionKind::View, query.as_deref(), &h).await
}

/// Records that a node resumed a session with a ticket of this generation (nodes call it,
/// with the cluster token): 200 the first time, 409 for a replay.
#[utoipa::path(post, path = "/v1/tickets/consume", request_body = TicketUse, security(("bearer" = [])),
    responses((status = 200, description = "first use of this generation"), (status = 400, body = ApiError), (status = 401, body = ApiError), (status = 409, body = ApiError)))]
async fn consume_ticket(State(s): State<Arc<Scheduler>>, Body(req): Body<TicketUse>) -> Response {
    let unix_s = unix_s();
    match s.mutate(|c| c.consume_ticket(unix_s, &req)) {
        Ok(()) => committed(&s, Json(serde_json::json!({})).into_response()),
        Err(e) => cluster_error(e),
    }
}
