//! One room socket: the join endpoint (`POST …/join`, ureq off the runtime), the WebSocket it
//! names (tokio-tungstenite; `ws://` only, the SDK builds it without TLS) and its welcome, then
//! a reader task that hands the driver every frame and, at the end, how the socket closed.

use std::time::Duration;

use futures_util::StreamExt;
use futures_util::stream::SplitStream;
use serde::Deserialize;
use serde_json::Value;
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream, connect_async};

use super::frames::{self, ServerFrame, Welcome};
use super::model::JOIN_TIMEOUT;
use crate::error::SdkError;

/// A room WebSocket.
pub(crate) type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// From a socket's reader task.
#[derive(Debug)]
pub(crate) enum Incoming {
    Frame(ServerFrame),
    Closed { code: Option<u16>, reason: String },
}

/// The join endpoint's answer.
#[derive(Debug, Deserialize)]
pub(crate) struct Answer {
    #[serde(default)]
    pub participant: String,
    #[serde(default)]
    pub node: String,
    pub http: String,
    pub ws: String,
}

/// A socket open and welcomed, not yet the room's.
pub(crate) struct Dialed {
    pub ws: Ws,
    pub welcome: Welcome,
    pub answer: Answer,
}

/// Everything one connection attempt needs (owned: it runs while the driver handles frames).
#[derive(Debug, Clone)]
pub(crate) struct DialRequest {
    pub post_url: String,
    pub token: Option<String>,
    pub participant: Option<String>,
    pub name: Option<String>,
    pub events: Option<Vec<String>>,
    pub participants: Option<Vec<String>>,
}

/// Close codes 4401 / 4403: the node refused the access token (4000 + the HTTP status).
pub(crate) fn refusal(code: Option<u16>, reason: &str) -> Option<SdkError> {
    match code {
        Some(4401) => Some(SdkError::Unauthorized(reason.to_owned())),
        Some(4403) => Some(SdkError::Forbidden(reason.to_owned())),
        _ => None,
    }
}

/// One socket's frames to the driver, then how it closed.
pub(crate) async fn read(
    id: u64,
    mut stream: SplitStream<Ws>,
    inbox: mpsc::UnboundedSender<(u64, Incoming)>,
) {
    let (mut code, mut reason) = (None, "the node closed the room connection".to_owned());
    while let Some(m) = stream.next().await {
        match m {
            Ok(Message::Binary(b)) => {
                if let Some(f) = frames::parse_binary(&b)
                    && inbox.send((id, Incoming::Frame(f))).is_err()
                {
                    return;
                }
            }
            // A node of an older version (or asked for JSON) sends text frames.
            Ok(Message::Text(t)) => {
                if let Some(f) = frames::parse(t.as_str())
                    && inbox.send((id, Incoming::Frame(f))).is_err()
                {
                    return;
                }
            }
            Ok(Message::Close(c)) => {
                if let Some(c) = c {
                    code = Some(u16::from(c.code));
                    if !c.reason.is_empty() {
                        reason = c.reason.as_str().to_owned();
                    }
                }
            }
            Ok(_) => {}
            Err(e) => {
                reason = e.to_string();
                break;
            }
        }
    }
    let _ = inbox.send((id, Incoming::Closed { code, reason }));
}

/// POSTs the join endpoint, opens the socket it names and reads its welcome, by `deadline`.
pub(crate) async fn dial(req: DialRequest, deadline: Instant) -> Result<Dialed, SdkError> {
    let post = req.clone();
    let left = deadline.saturating_duration_since(Instant::now());
    let answer = tokio::task::spawn_blocking(move || post_join(&post, left))
        .await
        .map_err(|e| SdkError::JoinFailed {
            status: 0,
            message: e.to_string(),
        })??;
    let url = frames::ws_url(
        &answer.ws,
        &req.post_url,
        req.token.as_deref(),
        req.events.as_deref(),
        req.participants.as_deref(),
    );
    let (mut ws, _) = match tokio::time::timeout_at(deadline, connect_async(url.as_str())).await {
        Err(_) => return Err(SdkError::Timeout(JOIN_TIMEOUT)),
        // Not `url`: it carries the token.
        Ok(Err(e)) => {
            return Err(SdkError::Disconnected(format!(
                "opening {}: {e}",
                answer.ws
            )));
        }
        Ok(Ok(x)) => x,
    };
    let mut refused: Option<String> = None;
    loop {
        let m = tokio::time::timeout_at(deadline, ws.next())
            .await
            .map_err(|_| SdkError::Timeout(JOIN_TIMEOUT))?;
        let frame = match &m {
            Some(Ok(Message::Binary(b))) => frames::parse_binary(b),
            Some(Ok(Message::Text(t))) => frames::parse(t.as_str()),
            _ => None,
        };
        match m {
            Some(Ok(Message::Binary(_) | Message::Text(_))) => match frame {
                Some(ServerFrame::Welcome(welcome)) => {
                    return Ok(Dialed {
                        ws,
                        welcome: *welcome,
                        answer,
                    });
                }
                Some(ServerFrame::Error { message, .. }) => refused = Some(message),
                _ => {}
            },
            Some(Ok(Message::Close(c))) => {
                let code = c.as_ref().map(|c| u16::from(c.code));
                let reason = c
                    .as_ref()
                    .map(|c| c.reason.as_str().to_owned())
                    .filter(|r| !r.is_empty())
                    .or(refused)
                    .unwrap_or_default();
                return Err(refusal(code, &reason).unwrap_or_else(|| {
                    SdkError::Disconnected(format!(
                        "closed before the welcome ({}): {reason}",
                        code.unwrap_or(1006)
                    ))
                }));
            }
            Some(Ok(_)) => {}
            Some(Err(e)) => return Err(SdkError::Disconnected(e.to_string())),
            None => {
                return Err(SdkError::Disconnected("closed before the welcome".into()));
            }
        }
    }
}

/// `POST {post_url}` `{participant, name}` with the bearer token (blocking).
fn post_join(req: &DialRequest, timeout: Duration) -> Result<Answer, SdkError> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(timeout.max(Duration::from_millis(1))))
        .http_status_as_error(false)
        .build()
        .into();
    let mut body = serde_json::Map::new();
    if let Some(p) = &req.participant {
        body.insert("participant".into(), Value::String(p.clone()));
    }
    if let Some(n) = &req.name {
        body.insert("name".into(), Value::String(n.clone()));
    }
    let mut r = agent
        .post(&req.post_url)
        .header("Content-Type", "application/json");
    if let Some(t) = &req.token {
        r = r.header("Authorization", &format!("Bearer {t}"));
    }
    let mut resp = r
        .send(Value::Object(body).to_string().as_str())
        .map_err(|e| SdkError::JoinFailed {
            status: 0,
            message: format!("{}: {e}", req.post_url),
        })?;
    let status = resp.status().as_u16();
    let text = resp.body_mut().read_to_string().unwrap_or_default();
    // Error answers are `{"error": "…"}`.
    let message = serde_json::from_str::<Value>(&text)
        .ok()
        .and_then(|v| v.get("error").and_then(Value::as_str).map(str::to_owned))
        .unwrap_or_else(|| text.trim().to_owned());
    match status {
        200 => serde_json::from_str(&text).map_err(|e| SdkError::JoinFailed {
            status,
            message: format!("an answer without ws/http ({e}): {}", text.trim()),
        }),
        401 => Err(SdkError::Unauthorized(message)),
        403 => Err(SdkError::Forbidden(message)),
        _ => Err(SdkError::JoinFailed { status, message }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn close_codes_4401_and_4403_are_refusals() {
        assert_eq!(
            refusal(Some(4401), "bad token"),
            Some(SdkError::Unauthorized("bad token".into()))
        );
        assert!(matches!(
            refusal(Some(4403), ""),
            Some(SdkError::Forbidden(_))
        ));
        assert_eq!(refusal(Some(1000), ""), None);
        assert_eq!(refusal(None, ""), None);
    }
}
