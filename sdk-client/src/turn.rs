//! TURN relays for the SDK's transports (options `turn`, `relay_only`, `ice_servers`, as in
//! the browser SDK): the gateway's credentials (`POST /v1/turn/credentials`), relay URIs
//! resolved to addresses, and per transport a [`Relay`] — one [`TurnClient`] allocation at a
//! time, failing over to the next relay when one does not allocate.

use std::collections::VecDeque;
use std::net::{SocketAddr, ToSocketAddrs};
use std::time::{Duration, Instant};

use ferry_rtc::turn::{self, TurnClient, TurnConfig, TurnError, TurnStats, TurnUri};
use serde::{Deserialize, Serialize};

/// How long one relay may take to allocate before the next is tried.
const ALLOCATE_TIMEOUT: Duration = Duration::from_secs(3);
/// Initial retransmission timeout towards a relay (RFC 8489's 500 ms is slow for a session
/// waiting on it).
const RTO: Duration = Duration::from_millis(250);
/// Timeout of the credentials request.
const CREDENTIALS_TIMEOUT: Duration = Duration::from_secs(5);

/// One TURN server, shaped like `RTCIceServer` (and the gateway's `ice_servers` entries).
/// Only `turn:` URIs over UDP are used; others are skipped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IceServer {
    /// `turn:host:port?transport=udp`.
    pub urls: Vec<String>,
    /// Long-term credential user name (the gateway's: `"{expiry}:{user}"`).
    pub username: String,
    /// Long-term credential password.
    pub credential: String,
}

/// Why a session could not send through a relay.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RelayError {
    /// `POST /v1/turn/credentials` failed (`status` 0: no response).
    #[error("TURN credentials: {status} {message}")]
    Credentials {
        /// HTTP status, 0 if none.
        status: u16,
        /// The gateway's reason.
        message: String,
    },
    /// No relay to try: none configured, or none usable (`turns:`, TCP, unresolvable).
    #[error("no usable TURN relay: {0}")]
    NoRelay(String),
    /// Every relay was tried; this is the last one's failure.
    #[error("TURN relay {uri}: {error}")]
    Turn {
        /// The relay.
        uri: String,
        /// What it answered (or that it did not).
        error: TurnError,
    },
}

impl RelayError {
    /// The status a failed POST reports to the state machine: refusals that a retry cannot
    /// fix (a credential the gateway or the relay refuses) end the session; the rest are
    /// retried with backoff.
    pub(crate) fn status(&self) -> u16 {
        match self {
            RelayError::Credentials { status, .. } => *status,
            RelayError::Turn {
                error: TurnError::Unauthorized(_),
                ..
            } => 401,
            RelayError::Turn {
                error: TurnError::Rejected { code: 403, .. },
                ..
            } => 403,
            _ => 0,
        }
    }
}

/// A session's relay options.
#[derive(Debug, Clone, Default)]
pub(crate) struct RelaySetup {
    /// Ask the gateway for relays.
    pub turn: bool,
    /// Never send directly.
    pub relay_only: bool,
    /// Who the relays are for (`None`: a random name per session).
    pub user: Option<String>,
    /// Relays of the app's own, tried before the gateway's.
    pub ice_servers: Vec<IceServer>,
}

impl RelaySetup {
    /// Whether transports go through a relay at all.
    pub fn wanted(&self) -> bool {
        self.turn || self.relay_only || !self.ice_servers.is_empty()
    }
    /// Whether the gateway is asked.
    pub fn fetch(&self) -> bool {
        self.turn || self.relay_only
    }
}

/// A relay to try.
#[derive(Debug, Clone)]
pub(crate) struct Candidate {
    pub uri: String,
    pub server: SocketAddr,
    pub username: String,
    pub credential: String,
}

/// What gathering produced.
#[derive(Debug)]
pub(crate) struct Gathered {
    pub candidates: Vec<Candidate>,
    /// Freshly fetched from the gateway: the servers and how long to keep them.
    pub fetched: Option<(Vec<IceServer>, Duration)>,
    /// Credentials could not be had (the explicit servers, if any, are still tried).
    pub error: Option<RelayError>,
    /// URIs that were skipped, and why.
    pub skipped: Vec<String>,
}

#[derive(Deserialize)]
struct CredentialsBody {
    ice_servers: Vec<IceServer>,
    ttl: u64,
}

/// `POST {base}/v1/turn/credentials` (blocking): the primary relay first, then its backups,
/// and the credential's lifetime.
pub(crate) fn fetch_credentials(
    base: &str,
    token: Option<&str>,
    user: &str,
    stream: &str,
) -> Result<(Vec<IceServer>, Duration), RelayError> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(CREDENTIALS_TIMEOUT))
        .http_status_as_error(false)
        .build()
        .into();
    let body = serde_json::json!({ "user": user, "stream": stream }).to_string();
    let mut r = agent
        .post(&format!("{base}/v1/turn/credentials"))
        .header("Content-Type", "application/json");
    if let Some(t) = token {
        r = r.header("Authorization", &format!("Bearer {t}"));
    }
    let failed = |status, message: String| RelayError::Credentials { status, message };
    let mut resp = r
        .send(body.as_str())
        .map_err(|e| failed(0, e.to_string()))?;
    let status = resp.status().as_u16();
    let text = resp.body_mut().read_to_string().unwrap_or_default();
    if status != 200 {
        return Err(failed(status, text.trim().to_owned()));
    }
    let body: CredentialsBody =
        serde_json::from_str(&text).map_err(|e| failed(502, format!("unreadable answer: {e}")))?;
    Ok((body.ice_servers, Duration::from_secs(body.ttl)))
}

/// The usable relays of `servers`, in order, resolved (blocking DNS) to IPv4 addresses (the
/// transports' sockets are IPv4); what was skipped and why.
pub(crate) fn resolve(servers: &[IceServer]) -> (Vec<Candidate>, Vec<String>) {
    let mut out = Vec::new();
    let mut skipped = Vec::new();
    for s in servers {
        for url in &s.urls {
            let uri = match TurnUri::parse(url) {
                Ok(u) => u,
                Err(e) => {
                    skipped.push(e.to_string());
                    continue;
                }
            };
            let addr = (uri.host.as_str(), uri.port)
                .to_socket_addrs()
                .ok()
                .and_then(|mut a| a.find(SocketAddr::is_ipv4));
            match addr {
                Some(server) => out.push(Candidate {
                    uri: url.clone(),
                    server,
                    username: s.username.clone(),
                    credential: s.credential.clone(),
                }),
                None => skipped.push(format!("{url}: no IPv4 address")),
            }
        }
    }
    (out, skipped)
}

/// The `host:port` a TURN/STUN URI names (`turn:10.0.0.1:3478?transport=udp` →
/// `10.0.0.1:3478`; port 3478, or 5349 for `turns:`, when none is given), lower-cased, as the
/// browser SDK's `relayAddress`; `None` when it is no such URI.
pub(crate) fn relay_address(uri: &str) -> Option<String> {
    let uri = uri.trim();
    let (scheme, rest) = uri.split_once(':')?;
    let scheme = scheme.to_ascii_lowercase();
    let default_port = match scheme.as_str() {
        "turns" => 5349,
        "turn" | "stun" => turn::DEFAULT_PORT,
        _ => return None,
    };
    let authority = rest.split(['?', ';']).next().unwrap_or_default();
    let (host, port) = if authority.starts_with('[') {
        let end = authority.find(']')?;
        (&authority[..=end], &authority[end + 1..])
    } else {
        match authority.split_once(':') {
            Some((h, _)) => (h, authority.get(h.len()..).unwrap_or_default()),
            None => (authority, ""),
        }
    };
    if host.is_empty() {
        return None;
    }
    let port = match port.strip_prefix(':') {
        Some(p) => p.parse::<u16>().ok()?,
        None if port.is_empty() => default_port,
        None => return None,
    };
    Some(format!("{}:{port}", host.to_ascii_lowercase()))
}

/// Whether the relay `uri` (at `server`) is one of `drained`: the same `host:port`, or an IP
/// literal that is its address.
pub(crate) fn drains(uri: &str, server: SocketAddr, drained: &[String]) -> bool {
    let ours = relay_address(uri);
    drained.iter().filter_map(|d| relay_address(d)).any(|d| {
        ours.as_deref() == Some(d.as_str()) || d.parse::<SocketAddr>().is_ok_and(|a| a == server)
    })
}

/// Where a transport's relay stands.
#[derive(Debug)]
pub(crate) enum Progress {
    /// Allocating (maybe on a backup by now), or allocated and running.
    Pending,
    /// Just allocated (reported once).
    Allocated,
    /// No relay allocated: the last failure.
    Exhausted(RelayError),
    /// The allocation was lost after it worked.
    Lost(RelayError),
}

/// One transport's relay: the current allocation and the relays left to fail over to.
#[derive(Debug)]
pub(crate) struct Relay {
    pub client: TurnClient,
    pub uri: String,
    started: Instant,
    deadline: Option<Instant>,
    allocation_ms: Option<u64>,
    backups: VecDeque<Candidate>,
    seed: u64,
}

/// What [`crate::Stats`] says about the relay in use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelayStats {
    /// The relay's URI.
    pub uri: String,
    /// The relay's address.
    pub server: SocketAddr,
    /// The relayed address: where the node sees this transport.
    pub relayed: SocketAddr,
    /// From the first Allocate to the allocation on this relay (earlier relays' tries
    /// included).
    pub allocation_ms: u64,
    /// The TURN client's counters.
    pub turn: TurnStats,
}

fn client(c: &Candidate, seed: u64, now: Instant) -> TurnClient {
    let mut cfg = TurnConfig::new(c.server, c.username.clone(), c.credential.clone());
    cfg.seed = seed;
    cfg.rto = RTO;
    cfg.software = Some(concat!("ferry-sdk/", env!("CARGO_PKG_VERSION")).into());
    TurnClient::new(cfg, now)
}

impl Relay {
    /// Starts allocating on the first of `candidates` (`None` if there is none).
    pub fn start(candidates: Vec<Candidate>, seed: u64, now: Instant) -> Option<Relay> {
        let mut backups: VecDeque<Candidate> = candidates.into();
        let first = backups.pop_front()?;
        Some(Relay {
            client: client(&first, seed, now),
            uri: first.uri,
            started: now,
            deadline: Some(now + ALLOCATE_TIMEOUT),
            allocation_ms: None,
            backups,
            seed,
        })
    }

    pub fn server(&self) -> SocketAddr {
        self.client.server()
    }

    pub fn is_allocated(&self) -> bool {
        self.allocation_ms.is_some() && self.client.state() == turn::TurnState::Allocated
    }

    /// When [`Self::progress`] and the client's timers want to run.
    pub fn poll_timeout(&self) -> Option<Instant> {
        match (self.client.poll_timeout(), self.deadline) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    pub fn stats(&self) -> Option<RelayStats> {
        Some(RelayStats {
            uri: self.uri.clone(),
            server: self.server(),
            relayed: self.client.relayed_address()?,
            allocation_ms: self.allocation_ms?,
            turn: self.client.stats(),
        })
    }

    /// Runs due timers, reads the client's events, fails over when a relay does not allocate.
    pub fn progress(&mut self, now: Instant) -> Progress {
        if self.client.poll_timeout().is_some_and(|t| t <= now) {
            self.client.handle_timeout(now);
        }
        while let Some(ev) = self.client.poll_event() {
            match ev {
                turn::Event::Allocated { relayed, .. } => {
                    let ms = now.saturating_duration_since(self.started).as_millis() as u64;
                    self.allocation_ms = Some(ms);
                    self.deadline = None;
                    tracing::debug!(relay = %self.uri, %relayed, ms, "TURN allocation");
                    return Progress::Allocated;
                }
                turn::Event::Failed(error) => {
                    let e = RelayError::Turn {
                        uri: self.uri.clone(),
                        error,
                    };
                    if self.allocation_ms.is_some() {
                        return Progress::Lost(e);
                    }
                    return self.next(now, e);
                }
                turn::Event::PermissionFailed { peer, error } => {
                    tracing::warn!(relay = %self.uri, %peer, %error, "TURN permission refused");
                }
                turn::Event::Closed => {}
            }
        }
        if self.deadline.is_some_and(|d| d <= now) {
            let e = RelayError::Turn {
                uri: self.uri.clone(),
                error: TurnError::Timeout(ferry_rtc::stun::Method::Allocate),
            };
            return self.next(now, e);
        }
        Progress::Pending
    }

    /// The next relay, or the end.
    fn next(&mut self, now: Instant, error: RelayError) -> Progress {
        tracing::warn!(%error, "TURN relay failed");
        let Some(c) = self.backups.pop_front() else {
            self.deadline = None;
            return Progress::Exhausted(error);
        };
        self.seed = self.seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        self.client = client(&c, self.seed, now);
        self.uri = c.uri;
        self.deadline = Some(now + ALLOCATE_TIMEOUT);
        Progress::Pending
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn server(urls: &[&str]) -> IceServer {
        IceServer {
            urls: urls.iter().map(|u| (*u).to_owned()).collect(),
            username: "1:u".into(),
            credential: "c".into(),
        }
    }

    #[test]
    fn only_udp_turn_uris_are_used_in_order() {
        let (c, skipped) = resolve(&[
            server(&["turns:127.0.0.1:5349", "turn:127.0.0.1:3478?transport=udp"]),
            server(&["turn:127.0.0.1:3479?transport=tcp", "turn:127.0.0.2:3480"]),
        ]);
        let addrs: Vec<String> = c.iter().map(|c| c.server.to_string()).collect();
        assert_eq!(addrs, ["127.0.0.1:3478", "127.0.0.2:3480"]);
        assert_eq!(skipped.len(), 2, "{skipped:?}");
    }

    #[test]
    fn a_relay_that_does_not_answer_fails_over_then_gives_up() {
        let t0 = Instant::now();
        let (c, _) = resolve(&[server(&["turn:127.0.0.1:9", "turn:127.0.0.1:10"])]);
        let mut r = Relay::start(c, 1, t0).unwrap();
        assert!(matches!(r.progress(t0), Progress::Pending));
        let t1 = r.poll_timeout().unwrap();
        assert!(t1 <= t0 + ALLOCATE_TIMEOUT);
        let t = t0 + ALLOCATE_TIMEOUT;
        assert!(matches!(r.progress(t), Progress::Pending));
        assert_eq!(r.server().port(), 10);
        match r.progress(t + ALLOCATE_TIMEOUT) {
            Progress::Exhausted(RelayError::Turn { uri, error }) => {
                assert_eq!(uri, "turn:127.0.0.1:10");
                assert_eq!(error, TurnError::Timeout(ferry_rtc::stun::Method::Allocate));
            }
            p => panic!("{p:?}"),
        }
    }

    #[test]
    fn relay_addresses_are_host_and_port_as_in_the_browser_sdk() {
        let a = |u| relay_address(u);
        assert_eq!(
            a("turn:127.0.0.1:3478?transport=udp").as_deref(),
            Some("127.0.0.1:3478")
        );
        assert_eq!(
            a("TURN:Relay.Example").as_deref(),
            Some("relay.example:3478")
        );
        assert_eq!(
            a("turns:relay.example").as_deref(),
            Some("relay.example:5349")
        );
        assert_eq!(a("stun:[::1]:3479").as_deref(), Some("[::1]:3479"));
        assert_eq!(a("turn:[::1]").as_deref(), Some("[::1]:3478"));
        assert_eq!(a("http://relay.example"), None);
        assert_eq!(a("turn::3478"), None);
        assert_eq!(a("turn:h:x"), None);
        assert_eq!(a("turn:[::1"), None);
    }

    #[test]
    fn a_drain_matches_the_relay_by_host_and_port_or_address() {
        let server: SocketAddr = "127.0.0.1:3478".parse().unwrap();
        let ours = "turn:127.0.0.1:3478?transport=udp";
        let d = |l: &[&str]| l.iter().map(|u| (*u).to_owned()).collect::<Vec<_>>();
        assert!(drains(ours, server, &d(&["turn:127.0.0.1:3478"])));
        assert!(drains(
            ours,
            server,
            &d(&["turn:127.0.0.1:3479", "turn:127.0.0.1:3478?transport=tcp"])
        ));
        assert!(!drains(ours, server, &d(&["turn:127.0.0.1:3479"])));
        assert!(!drains(ours, server, &d(&[])));
        // The gateway named it by name, the drain by address.
        let named = "turn:relay.example:3478";
        assert!(drains(named, server, &d(&["turn:127.0.0.1:3478"])));
        assert!(!drains(named, server, &d(&["turn:127.0.0.2:3478"])));
    }

    #[test]
    fn refusals_end_the_session_and_the_rest_retry() {
        let turn = |error| RelayError::Turn {
            uri: "u".into(),
            error,
        };
        assert_eq!(turn(TurnError::Unauthorized("x".into())).status(), 401);
        assert_eq!(
            turn(TurnError::Timeout(ferry_rtc::stun::Method::Allocate)).status(),
            0
        );
        assert_eq!(RelayError::NoRelay("none".into()).status(), 0);
        let creds = RelayError::Credentials {
            status: 403,
            message: "no".into(),
        };
        assert_eq!(creds.status(), 403);
    }
}
