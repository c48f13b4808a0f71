//! The room server's HTTP routes, merged into the node's API:
//! `POST /v1/rooms/{room}/join`, `GET /v1/rooms/{room}/ws` (WebSocket),
//! `POST /v1/rooms/replica` (between nodes), `GET /v1/rooms`, `GET /v1/rooms/{room}`.

use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::ws::{Message as WsMessage, WebSocket, WebSocketUpgrade};
use axum::extract::{DefaultBodyLimit, Path, Query, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures_util::{SinkExt, StreamExt};
use serde::Deserialize;
use serde_json::json;
use tower_http::cors::{Any, CorsLayer};

use super::replication::Batch;
use super::{Format, OutFrame, RoomServer};
use crate::codec;
use crate::ids::{ParticipantId, RoomId};
use crate::join::{self, JoinAnswer, JoinRequest};
use ferry_proto::auth::Grant;

/// Largest client frame, bytes.
const MAX_FRAME: usize = 64 << 10;
/// Bytes a connection reads at a time. Client frames are small (a chat message is at most
/// 4 KiB); the WebSocket default, 128 KiB, is zeroed on every read — in a join storm of
/// thousands of connections that zeroing was a tenth of the node's CPU. A larger frame
/// still arrives whole (the buffer grows for it).
const READ_BUFFER: usize = 8 << 10;

/// The routes, for `Router::merge` into the node's API.
pub fn routes(server: Arc<RoomServer>) -> Router {
    let cors = CorsLayer::new()
        .allow_origin(Any)
        .allow_methods([Method::GET, Method::POST, Method::OPTIONS])
        .allow_headers([header::CONTENT_TYPE, header::AUTHORIZATION]);
    Router::new()
        .route("/v1/rooms", get(list_rooms))
        .route("/v1/rooms/replica", post(replica))
        .route("/v1/rooms/{room}", get(show))
        .route("/v1/rooms/{room}/join", post(join_room))
        .route("/v1/rooms/{room}/ws", get(websocket))
        .layer(DefaultBodyLimit::max(codec::MAX_MESSAGE_BYTES))
        .layer(cors)
        .with_state(server)
}

fn error(status: StatusCode, message: impl Into<String>) -> Response {
    (status, axum::Json(json!({"error": message.into()}))).into_response()
}

/// Checks a client's access token (grant `join` on `room`) when the node requires one: the
/// refusal (401/403 with the reason), if any.
fn refused(
    s: &RoomServer,
    room: &RoomId,
    query: Option<&str>,
    headers: &HeaderMap,
) -> Option<(StatusCode, String)> {
    let tokens = s.config.tokens.as_ref()?;
    let authorization = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    let token = ferry_proto::auth::request_token(authorization, query);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let e = tokens
        .authorize(token.as_deref(), Grant::Join, room.as_str(), now)
        .err()?;
    let status = StatusCode::from_u16(e.status()).unwrap_or(StatusCode::UNAUTHORIZED);
    Some((status, e.to_string()))
}

fn fresh_participant() -> String {
    let n: u64 = rand::random();
    format!("p-{n:016x}")
}

async fn join_room(
    State(s): State<Arc<RoomServer>>,
    Path(room): Path<String>,
    axum::extract::RawQuery(query): axum::extract::RawQuery,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let req: JoinRequest = if body.is_empty() {
        JoinRequest::default()
    } else {
        // `null` is no request, as an empty body is.
        match serde_json::from_slice::<Option<_>>(&body) {
            Ok(r) => r.unwrap_or_default(),
            Err(e) => return error(StatusCode::BAD_REQUEST, format!("bad join request: {e}")),
        }
    };
    let (room, participant) = match join::parse(&room, &req, fresh_participant) {
        Ok(x) => x,
        Err(e) => return error(StatusCode::BAD_REQUEST, e.to_string()),
    };
    if let Some((status, why)) = refused(&s, &room, query.as_deref(), &headers) {
        return error(status, why);
    }
    let Some(host) = headers.get(header::HOST).and_then(|h| h.to_str().ok()) else {
        return error(StatusCode::BAD_REQUEST, "no Host header");
    };
    let scheme = if s.config.tls { "https" } else { "http" };
    let answer = JoinAnswer::new(
        room,
        participant,
        s.config.node.clone(),
        &format!("{scheme}://{host}"),
    );
    axum::Json(answer).into_response()
}

#[derive(Deserialize)]
struct WsQuery {
    participant: Option<String>,
    /// The initial subscription's event types, comma-separated (as `subscribe`'s `events`).
    events: Option<String>,
    /// The initial subscription's participants, comma-separated.
    participants: Option<String>,
    /// `protobuf` (binary frames, the default) or `json` (text frames).
    format: Option<String>,
}

fn list(s: Option<String>) -> Option<Vec<String>> {
    s.map(|s| {
        s.split(',')
            .filter(|x| !x.is_empty())
            .map(str::to_owned)
            .collect()
    })
}

async fn websocket(
    State(s): State<Arc<RoomServer>>,
    Path(room): Path<String>,
    Query(q): Query<WsQuery>,
    axum::extract::RawQuery(query): axum::extract::RawQuery,
    headers: HeaderMap,
    upgrade: WebSocketUpgrade,
) -> Response {
    let room = match RoomId::new(room) {
        Ok(r) => r,
        Err(e) => return error(StatusCode::BAD_REQUEST, format!("bad room id: {e}")),
    };
    let Some(p) = q.participant else {
        return error(StatusCode::BAD_REQUEST, "participant is required");
    };
    let participant = match ParticipantId::new(p) {
        Ok(p) => p,
        Err(e) => return error(StatusCode::BAD_REQUEST, format!("bad participant id: {e}")),
    };
    let subscription = match super::Subscription::new(list(q.events), list(q.participants)) {
        Ok(s) => s,
        Err(e) => return error(StatusCode::BAD_REQUEST, e.message),
    };
    let format = match Format::parse(q.format.as_deref()) {
        Ok(f) => f,
        Err(e) => return error(StatusCode::BAD_REQUEST, e.to_string()),
    };
    let upgrade = upgrade
        .max_message_size(MAX_FRAME)
        .read_buffer_size(READ_BUFFER);
    // A browser cannot read the status of a refused upgrade: a bad token gets the WebSocket,
    // an error frame and close code 4401 / 4403 (4000 + the HTTP status) with the reason.
    if let Some((status, why)) = refused(&s, &room, query.as_deref(), &headers) {
        return upgrade.on_upgrade(move |socket| refuse(socket, format, status, why));
    }
    upgrade.on_upgrade(move |socket| serve(s, room, participant, subscription, format, socket))
}

async fn refuse(mut socket: WebSocket, format: Format, status: StatusCode, why: String) {
    let code = if status == StatusCode::FORBIDDEN {
        "forbidden"
    } else {
        "unauthorized"
    };
    let e = super::FrameError {
        code,
        message: why.clone(),
    };
    let frame = OutFrame::new(super::error_frame(None, &e));
    let _ = socket.send(frame.message(format)).await;
    let _ = socket
        .send(WsMessage::Close(Some(axum::extract::ws::CloseFrame {
            code: 4000 + status.as_u16(),
            reason: why.chars().take(100).collect::<String>().into(),
        })))
        .await;
}

/// How long a new connection waits for its node's replica to catch up before its welcome.
const CATCH_UP: std::time::Duration = std::time::Duration::from_secs(1);

/// One connection: the welcome, then client frames in and room frames out.
async fn serve(
    s: Arc<RoomServer>,
    room: RoomId,
    participant: ParticipantId,
    subscription: super::Subscription,
    format: Format,
    socket: WebSocket,
) {
    let deadline = tokio::time::Instant::now() + CATCH_UP;
    while !s.open(&room) && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    let (id, mut rx, welcome) = s.connect(&room, &participant, subscription);
    let (mut sink, mut stream) = socket.split();
    let mut left = false;
    let send = |text: String| OutFrame::new(text).message(format);
    if sink.send(welcome.message(format)).await.is_ok() {
        loop {
            tokio::select! {
                frame = rx.recv() => match frame {
                    Some(f) => {
                        if sink.send(f.message(format)).await.is_err() {
                            break;
                        }
                    }
                    // Dropped as too slow.
                    None => break,
                },
                // Text frames are JSON, binary frames protobuf, whatever the connection's
                // format (which only says how the node answers).
                msg = stream.next() => {
                    let reply = match msg {
                        Some(Ok(WsMessage::Text(t))) => s.frame(&room, id, t.as_str()),
                        Some(Ok(WsMessage::Binary(b))) => match ferry_proto::room::decode_client(&b) {
                            Ok(v) => s.frame(&room, id, &v.to_string()),
                            Err(e) => s.not_a_frame(e),
                        },
                        Some(Ok(WsMessage::Close(_))) | Some(Err(_)) | None => break,
                        Some(Ok(_)) => continue,
                    };
                    left |= reply.1;
                    if !reply.0.is_empty() && sink.send(send(reply.0)).await.is_err() {
                        break;
                    }
                }
            }
        }
    }
    s.disconnect(&room, id, left);
}

async fn replica(State(s): State<Arc<RoomServer>>, headers: HeaderMap, body: Bytes) -> Response {
    if let Some(token) = &s.config.cluster_token {
        let bearer = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        let ok = bearer.is_some_and(|b| {
            use subtle::ConstantTimeEq;
            bool::from(b.as_bytes().ct_eq(token.as_bytes()))
        });
        if !ok {
            return error(StatusCode::UNAUTHORIZED, "the cluster token is required");
        }
    }
    let batch: Batch = match codec::decode(&body) {
        Ok(b) => b,
        Err(e) => return error(StatusCode::BAD_REQUEST, format!("bad replica batch: {e}")),
    };
    let mut answer = Batch {
        from: s.config.node.clone(),
        rooms: Vec::new(),
        gone: Vec::new(),
    };
    for (room, messages) in batch.rooms {
        match s.receive(&batch.from, &room, messages) {
            Some(replies) if !replies.is_empty() => answer.rooms.push((room, replies)),
            Some(_) => {}
            None => answer.gone.push(room),
        }
    }
    match codec::encode(&answer) {
        Ok(bytes) => ([(header::CONTENT_TYPE, "application/octet-stream")], bytes).into_response(),
        Err(e) => error(StatusCode::INSUFFICIENT_STORAGE, e.to_string()),
    }
}

async fn list_rooms(State(s): State<Arc<RoomServer>>) -> Response {
    axum::Json(s.list()).into_response()
}

async fn show(State(s): State<Arc<RoomServer>>, Path(room): Path<String>) -> Response {
    let room = match RoomId::new(room) {
        Ok(r) => r,
        Err(e) => return error(StatusCode::BAD_REQUEST, format!("bad room id: {e}")),
    };
    match s.show(&room) {
        Some(j) => axum::Json(j).into_response(),
        None => error(
            StatusCode::NOT_FOUND,
            format!("room {room} is not hosted here"),
        ),
    }
}
