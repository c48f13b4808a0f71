//! TURN relays in WHIP/WHEP answers: `Link: <turn:…>; rel="ice-server"` with a REST credential
//! (RFC 9725 §4.6), from the scheduler's TURN fleet (`POST /v1/turn/credentials`: a primary and
//! backups chosen by bounded-load hashing of the session). Clients that read Link headers
//! (GStreamer `use-link-headers=true`, say) then reach the node through a relay when they must.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ferry_proto::api::TurnCredentialsResponse;
use ferry_proto::{SessionId, StreamId};

use crate::driver::handle::NodeHandle;

/// An ICE server announced in `Link: rel="ice-server"` headers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IceServer {
    /// `stun:host:port` or `turn:host:port?transport=udp`.
    pub url: String,
    /// TURN username.
    pub username: Option<String>,
    /// TURN credential.
    pub credential: Option<String>,
}

impl IceServer {
    pub(super) fn link(&self) -> String {
        let mut s = format!("<{}>; rel=\"ice-server\"", self.url);
        if let (Some(u), Some(c)) = (&self.username, &self.credential) {
            s.push_str(&format!(
                "; username=\"{u}\"; credential=\"{c}\"; credential-type=\"password\""
            ));
        }
        s
    }
}

/// How long the node waits for the scheduler's relays before answering without them.
const ASK_TIMEOUT: Duration = Duration::from_millis(500);
/// After the scheduler said it has no relays (503), how long the node stops asking.
const NO_FLEET_BACKOFF_MS: u64 = 60_000;
/// What the scheduler's 503 says when it has no TURN relay to give
/// (`scheduler/src/service.rs`, `scheduler/src/turn.rs`).
const NO_FLEET: &str = "no TURN relay";
/// After the scheduler did not answer, how long new sessions go without relays before the
/// node asks again (sessions must not wait on a scheduler that is down).
const UNREACHABLE_BACKOFF_MS: u64 = 5_000;

/// Remembers that the scheduler has no TURN fleet, so that sessions do not pay a round trip.
#[derive(Debug, Default, Clone)]
pub struct TurnLinks {
    quiet_until_ms: Arc<AtomicU64>,
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl TurnLinks {
    /// The relays for a new session, as ICE servers with their credential; none when the node
    /// has no scheduler, the scheduler has no fleet, or it did not answer in time.
    pub async fn for_session(
        &self,
        node: &NodeHandle,
        session: &SessionId,
        stream: &StreamId,
    ) -> Vec<IceServer> {
        let Some(link) = node.scheduler_link().cloned() else {
            return Vec::new();
        };
        if unix_ms() < self.quiet_until_ms.load(Ordering::Relaxed) {
            return Vec::new();
        }
        let body = serde_json::json!({ "user": session.as_str(), "stream": stream.as_str() });
        let asked = tokio::task::spawn_blocking(move || {
            link.call("/v1/turn/credentials", Some(&body), ASK_TIMEOUT)
        })
        .await;
        let answer = match asked {
            Ok(Ok(a)) => a,
            Ok(Err(e))
                if e.unavailable
                    .as_ref()
                    .is_some_and(|a| a.body.contains(NO_FLEET)) =>
            {
                // No fleet configured (or no relay can take the user): nothing to warn about
                // on every session; ask again in a minute. (A 503 for want of a leader is
                // an unreachable scheduler, below.)
                tracing::debug!(answer = %e.last, "TURN relays: none from the scheduler");
                self.quiet_until_ms
                    .store(unix_ms() + NO_FLEET_BACKOFF_MS, Ordering::Relaxed);
                return Vec::new();
            }
            Ok(Err(e)) => {
                tracing::warn!(error = %e.last, "TURN relays: scheduler unreachable");
                self.quiet_until_ms
                    .store(unix_ms() + UNREACHABLE_BACKOFF_MS, Ordering::Relaxed);
                return Vec::new();
            }
            Err(_) => return Vec::new(),
        };
        match serde_json::from_str::<TurnCredentialsResponse>(&answer.body) {
            Ok(r) if answer.status == 200 => r
                .ice_servers
                .into_iter()
                .flat_map(|s| {
                    s.urls.into_iter().map(move |url| IceServer {
                        url,
                        username: Some(s.username.clone()),
                        credential: Some(s.credential.clone()),
                    })
                })
                .collect(),
            _ => {
                tracing::warn!(status = answer.status, body = %answer.body, "TURN relays: unexpected answer");
                Vec::new()
            }
        }
    }
}
