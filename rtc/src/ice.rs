//! ICE-lite (RFC 8445 §2.5) for the server, and a minimal controlling agent for test peers.
//!
//! Both are pure state machines: the caller passes `now` and parsed STUN messages, and gets bytes
//! to send plus events. No clock, socket or randomness is touched here.

use std::fmt;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::stun::{self, Class, StunError, StunMessage, StunWriter};
use ferry_proto::state::ice::IceState;

/// Consent expires this long after the last valid check from the selected address (RFC 7675 §5.1).
pub const CONSENT_TIMEOUT: Duration = Duration::from_secs(30);
/// [`IceClient`] check interval before it is connected.
pub const CHECK_INTERVAL: Duration = Duration::from_millis(50);
/// [`IceClient`] consent-refresh interval once connected.
pub const CONSENT_INTERVAL: Duration = Duration::from_millis(2500);
/// PRIORITY sent by [`IceClient`]: a peer-reflexive candidate (type preference 110) of
/// component 1, as RFC 8445 §7.1.1 asks.
pub const CLIENT_PRIORITY: u32 = (110 << 24) | (65535 << 8) | 255;
/// How many outstanding transaction ids [`IceClient`] still accepts answers for.
const PENDING: usize = 8;

/// ICE username fragment and password of one side.
#[derive(Clone, PartialEq, Eq)]
pub struct IceCredentials {
    pub ufrag: String,
    pub pwd: String,
}

impl fmt::Debug for IceCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IceCredentials")
            .field("ufrag", &self.ufrag)
            .field("pwd", &"<redacted>")
            .finish()
    }
}

/// What a valid check changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IceEvent {
    /// First nomination: media may flow to this address.
    Connected(SocketAddr),
    /// A nomination from another address replaced the selected one (NAT rebinding, network
    /// change, or the controlling agent picking another pair).
    PathSwitched { from: SocketAddr, to: SocketAddr },
}

/// Why a binding request was rejected.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum IceReject {
    #[error("not a request")]
    NotRequest,
    #[error("FINGERPRINT does not match")]
    BadFingerprint,
    #[error("USERNAME missing")]
    MissingUsername,
    #[error("MESSAGE-INTEGRITY missing")]
    MissingIntegrity,
    #[error("USERNAME is not local:remote ufrag")]
    UnknownUsername,
    #[error("MESSAGE-INTEGRITY does not verify")]
    BadIntegrity,
    #[error("unknown comprehension-required attribute {0:#06x}")]
    UnknownAttribute(u16),
    #[error("peer claims the controlled role")]
    RoleConflict,
    #[error("ICE-CONTROLLING missing")]
    MissingRole,
    #[error("response did not fit the output buffer: {0}")]
    Write(StunError),
}

/// A rejected binding request: the reason (for counters) and, where RFC 8445/8489 ask for an error
/// response, its length in the output buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("binding request rejected: {reason}")]
pub struct IceError {
    pub reason: IceReject,
    /// Send `out[..n]` back to the sender when `Some(n)`.
    pub response: Option<usize>,
}

/// Server side of ICE-lite for one peer connection. The peer must be a full agent in the
/// controlling role; this side is always controlled and never sends checks.
///
/// Nomination: a valid check with USE-CANDIDATE selects its source address (the peer nominates
/// aggressively or regularly; both end in such a check). A later nomination from another address
/// is a path switch. A valid check *without* USE-CANDIDATE from an address other than the selected
/// one only records that address as [`IceLite::candidate`] (diagnostics); it never selects, so a
/// stray or probing check cannot move media. Consent (RFC 7675) is refreshed only by valid checks
/// from the selected address; the agent never expires before a first nomination (the driver owns
/// the setup timeout), and does not latch expiry: the driver tears down when
/// [`IceLite::is_expired`] first reports it.
#[derive(Debug, Clone)]
pub struct IceLite {
    local: IceCredentials,
    remote: IceCredentials,
    selected: Option<SocketAddr>,
    candidate: Option<SocketAddr>,
    /// Instant consent runs out: last valid check from `selected` + [`CONSENT_TIMEOUT`]. Kept as a
    /// deadline rather than the check time so a restored agent never needs an `Instant` before
    /// the host's epoch.
    consent_deadline: Option<Instant>,
}

impl IceLite {
    pub fn new(local: IceCredentials, remote: IceCredentials) -> Self {
        IceLite {
            local,
            remote,
            selected: None,
            candidate: None,
            consent_deadline: None,
        }
    }

    pub fn local(&self) -> &IceCredentials {
        &self.local
    }

    pub fn remote(&self) -> &IceCredentials {
        &self.remote
    }

    /// Handles a STUN message that arrived from `from`. Checks, in RFC 8489 §6.3 order: class,
    /// FINGERPRINT when present (mismatch: dropped silently), USERNAME and MESSAGE-INTEGRITY
    /// present (400), USERNAME == `"{local.ufrag}:{remote.ufrag}"` (401), MESSAGE-INTEGRITY with
    /// `local.pwd` (401), unknown comprehension-required attributes (420), role: ICE-CONTROLLED
    /// is a conflict (487, a lite agent cannot become controlling), ICE-CONTROLLING missing (400).
    /// 400/401 before authentication carry no MESSAGE-INTEGRITY; later ones do.
    ///
    /// On success writes the Binding success response into `out` (at least
    /// [`stun::MAX_MESSAGE_LEN`] bytes is always enough) and returns its length and what changed.
    pub fn handle_binding_request(
        &mut self,
        now: Instant,
        from: SocketAddr,
        msg: &StunMessage,
        out: &mut [u8],
    ) -> Result<(usize, Option<IceEvent>), IceError> {
        let txid = msg.transaction_id();
        let silent = |reason| IceError {
            reason,
            response: None,
        };
        if msg.class() != Class::Request {
            return Err(silent(IceReject::NotRequest));
        }
        if msg.has_fingerprint() && !msg.verify_fingerprint() {
            return Err(silent(IceReject::BadFingerprint));
        }
        let Some(username) = msg.username() else {
            return Err(reject(out, txid, IceReject::MissingUsername, None));
        };
        if !msg.has_integrity() {
            return Err(reject(out, txid, IceReject::MissingIntegrity, None));
        }
        if !self.username_matches(username) {
            return Err(reject(out, txid, IceReject::UnknownUsername, None));
        }
        let key = self.local.pwd.as_bytes();
        if !msg.verify_integrity(key) {
            return Err(reject(out, txid, IceReject::BadIntegrity, None));
        }
        if let Some(ty) = msg.unknown_required().next() {
            return Err(reject(
                out,
                txid,
                IceReject::UnknownAttribute(ty),
                Some(key),
            ));
        }
        if msg.ice_controlled().is_some() {
            return Err(reject(out, txid, IceReject::RoleConflict, Some(key)));
        }
        if msg.ice_controlling().is_none() {
            return Err(reject(out, txid, IceReject::MissingRole, Some(key)));
        }
        let len = stun::write_binding_success(out, txid, from, key)
            .map_err(|e| silent(IceReject::Write(e)))?;
        Ok((len, self.on_valid_check(now, from, msg.use_candidate())))
    }

    fn username_matches(&self, username: &str) -> bool {
        username
            .strip_prefix(self.local.ufrag.as_str())
            .and_then(|rest| rest.strip_prefix(':'))
            .is_some_and(|rest| rest == self.remote.ufrag)
    }

    fn on_valid_check(
        &mut self,
        now: Instant,
        from: SocketAddr,
        nominate: bool,
    ) -> Option<IceEvent> {
        if !nominate && self.selected != Some(from) {
            self.candidate = Some(from);
            return None;
        }
        self.consent_deadline = now.checked_add(CONSENT_TIMEOUT);
        match self.selected.replace(from) {
            None => Some(IceEvent::Connected(from)),
            Some(old) if old != from => Some(IceEvent::PathSwitched {
                from: old,
                to: from,
            }),
            Some(_) => None,
        }
    }

    /// Authenticated SRTCP from the selected address refreshes consent too. Peers that keep
    /// the pair alive with Binding indications (libnice, as in GStreamer's webrtcbin: RFC 8445
    /// §11 keepalives) send no consent checks to a lite agent, which cannot send its own; their
    /// SRTCP is authenticated with the DTLS-SRTP keys and so shows, as a consent check does
    /// (RFC 7675 §1), that the peer at that address still wants the session.
    pub fn authenticated_traffic(&mut self, now: Instant, from: SocketAddr) {
        if self.selected == Some(from) {
            self.consent_deadline = now.checked_add(CONSENT_TIMEOUT);
        }
    }

    /// Consent starts afresh (a session activated on a new node: its
    /// client's last check went to the old one).
    pub fn refresh_consent(&mut self, now: Instant) {
        if self.selected.is_some() {
            self.consent_deadline = now.checked_add(CONSENT_TIMEOUT);
        }
    }

    /// The nominated remote address media goes to.
    pub fn selected(&self) -> Option<SocketAddr> {
        self.selected
    }

    /// Last address that passed a check without nominating and is not selected.
    pub fn candidate(&self) -> Option<SocketAddr> {
        self.candidate
    }

    /// When consent expires unless refreshed; `None` before the first nomination.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.consent_deadline
    }

    /// True from exactly [`CONSENT_TIMEOUT`] after the last valid check from the selected address.
    pub fn is_expired(&self, now: Instant) -> bool {
        self.consent_deadline
            .is_some_and(|deadline| now >= deadline)
    }

    /// ICE restart: new credentials on both sides; checks with the old ones fail from now on.
    /// The selected address and its consent stay until a check under the new credentials
    /// refreshes or replaces them.
    pub fn restart(&mut self, local: IceCredentials, remote: IceCredentials) {
        self.local = local;
        self.remote = remote;
        self.candidate = None;
    }

    pub fn snapshot(&self, now: Instant) -> IceState {
        let consent_age = self
            .consent_deadline
            .filter(|_| self.selected.is_some())
            .map(|deadline| {
                if deadline >= now {
                    CONSENT_TIMEOUT.saturating_sub(deadline - now)
                } else {
                    CONSENT_TIMEOUT.saturating_add(now - deadline)
                }
            });
        IceState {
            local_ufrag: self.local.ufrag.clone(),
            local_pwd: self.local.pwd.clone(),
            remote_ufrag: self.remote.ufrag.clone(),
            remote_pwd: self.remote.pwd.clone(),
            selected_addr: addr_to_string(self.selected),
            consent_age_ms: consent_age
                .map(|age| u64::try_from(age.as_millis()).unwrap_or(u64::MAX)),
            candidate_addr: addr_to_string(self.candidate),
        }
    }

    /// Rebuilds an agent from [`Self::snapshot`] output; `now` is the restore instant, against
    /// which the stored ages count. An unparseable address restores as none (the peer's next
    /// nomination selects again).
    pub fn restore(state: &IceState, now: Instant) -> Self {
        let selected = state.selected_addr.parse().ok();
        let consent_deadline = state
            .consent_age_ms
            .filter(|_| selected.is_some())
            .map(|ms| {
                let age = Duration::from_millis(ms);
                match CONSENT_TIMEOUT.checked_sub(age) {
                    Some(left) => now.checked_add(left).unwrap_or(now),
                    // Already expired: place the deadline in the past, or at `now` if the host's
                    // clock cannot go back that far (still expired either way).
                    None => now.checked_sub(age - CONSENT_TIMEOUT).unwrap_or(now),
                }
            });
        IceLite {
            local: IceCredentials {
                ufrag: state.local_ufrag.clone(),
                pwd: state.local_pwd.clone(),
            },
            remote: IceCredentials {
                ufrag: state.remote_ufrag.clone(),
                pwd: state.remote_pwd.clone(),
            },
            selected,
            candidate: state.candidate_addr.parse().ok(),
            consent_deadline,
        }
    }
}

fn addr_to_string(addr: Option<SocketAddr>) -> String {
    addr.map(|a| a.to_string()).unwrap_or_default()
}

/// Writes the error response `reason` calls for; `key` adds MESSAGE-INTEGRITY.
fn reject(out: &mut [u8], txid: &[u8; 12], reason: IceReject, key: Option<&[u8]>) -> IceError {
    let (code, phrase, unknown) = match reason {
        IceReject::MissingUsername | IceReject::MissingIntegrity | IceReject::MissingRole => {
            (400, "Bad Request", None)
        }
        IceReject::UnknownUsername | IceReject::BadIntegrity => (401, "Unauthorized", None),
        IceReject::UnknownAttribute(ty) => (420, "Unknown Attribute", Some(ty)),
        IceReject::RoleConflict => (487, "Role Conflict", None),
        _ => {
            return IceError {
                reason,
                response: None,
            };
        }
    };
    let written = (|| {
        let mut w = StunWriter::new(out, Class::Error, stun::Method::Binding, txid)?;
        w.error_code(code, phrase)?;
        if let Some(ty) = unknown {
            w.unknown_attributes(&[ty])?;
        }
        if let Some(key) = key {
            w.message_integrity(key)?;
        }
        w.fingerprint()?;
        Ok::<_, StunError>(w.finish())
    })();
    IceError {
        reason,
        response: written.ok(),
    }
}

/// What a response to an [`IceClient`] check changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IceClientEvent {
    /// First authenticated success response; `mapped` is our address as the server saw it.
    Connected { mapped: SocketAddr },
    /// The server answered one of our checks with an error.
    ErrorResponse { code: u16 },
}

/// How a controlling [`IceClient`] nominates its pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Nomination {
    /// USE-CANDIDATE on every check.
    #[default]
    Aggressive,
    /// RFC 8445 §8.1.1, as browsers do: checks without USE-CANDIDATE until one succeeds (media
    /// may use the pair from then on), then at once a check that nominates it.
    Regular,
}

/// Minimal full agent for test peers and the load generator: one local and one remote
/// candidate, checks every [`CHECK_INTERVAL`] until connected, then every [`CONSENT_INTERVAL`].
/// Controlling by default, with aggressive nomination (USE-CANDIDATE on every check; regular
/// after [`IceClient::with_nomination`]); after
/// [`IceClient::controlled`] (the remote agent made the offer) its checks carry ICE-CONTROLLED and
/// the remote nominates. Either way it answers the remote's checks ([`IceClient::handle_request`]),
/// as a full remote agent (libnice) only uses a pair its own check succeeded on. Transaction ids
/// derive from the caller's seed, so runs are reproducible.
#[derive(Debug, Clone)]
pub struct IceClient {
    local: IceCredentials,
    remote: IceCredentials,
    remote_addr: SocketAddr,
    tie_breaker: u64,
    controlling: bool,
    nomination: Nomination,
    seed: u64,
    counter: u64,
    /// `"{remote.ufrag}:{local.ufrag}"`, built once.
    username: String,
    next_send: Option<Instant>,
    pending: [Option<[u8; 12]>; PENDING],
    pending_next: usize,
    connected: bool,
    mapped: Option<SocketAddr>,
    last_response: Option<Instant>,
}

impl IceClient {
    pub fn new(
        local: IceCredentials,
        remote: IceCredentials,
        remote_addr: SocketAddr,
        tie_breaker: u64,
        seed: u64,
    ) -> Self {
        let username = format!("{}:{}", remote.ufrag, local.ufrag);
        IceClient {
            local,
            remote,
            remote_addr,
            tie_breaker,
            controlling: true,
            nomination: Nomination::Aggressive,
            seed,
            counter: 0,
            username,
            next_send: None,
            pending: [None; PENDING],
            pending_next: 0,
            connected: false,
            mapped: None,
            last_response: None,
        }
    }

    /// Writes the next check into `buf` when one is due; returns its length and destination.
    /// `buf` of [`stun::MAX_MESSAGE_LEN`] always fits; if it does not, the check is skipped.
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<(usize, SocketAddr)> {
        if self.next_send.is_some_and(|due| now < due) {
            return None;
        }
        let interval = if self.connected {
            CONSENT_INTERVAL
        } else {
            CHECK_INTERVAL
        };
        self.next_send = now.checked_add(interval);
        let txid = self.next_transaction_id();
        let key = self.remote.pwd.as_bytes();
        let len = if self.controlling {
            stun::write_binding_request(
                buf,
                &txid,
                &self.username,
                CLIENT_PRIORITY,
                Some(self.tie_breaker),
                self.nomination == Nomination::Aggressive || self.connected,
                key,
            )
        } else {
            (|| {
                let mut w = StunWriter::new(buf, Class::Request, stun::Method::Binding, &txid)?;
                w.username(&self.username)?
                    .priority(CLIENT_PRIORITY)?
                    .ice_controlled(self.tie_breaker)?
                    .message_integrity(key)?
                    .fingerprint()?;
                Ok::<_, StunError>(w.finish())
            })()
        }
        .ok()?;
        self.pending[self.pending_next] = Some(txid);
        self.pending_next = (self.pending_next + 1) % PENDING;
        Some((len, self.remote_addr))
    }

    /// The remote agent controls (it made the offer): checks carry ICE-CONTROLLED and never
    /// USE-CANDIDATE.
    pub fn controlled(mut self) -> Self {
        self.controlling = false;
        self
    }

    /// How our checks nominate while we control.
    pub fn with_nomination(mut self, nomination: Nomination) -> Self {
        self.nomination = nomination;
        self
    }

    /// Whether our checks claim the controlling role.
    pub fn is_controlling(&self) -> bool {
        self.controlling
    }

    /// Answers a check of the remote agent that arrived from `from`: a Binding request whose
    /// USERNAME is `"{local.ufrag}:{remote.ufrag}"` and whose MESSAGE-INTEGRITY verifies with our
    /// password gets a success response (XOR-MAPPED-ADDRESS `from`) written into `out`
    /// ([`stun::MAX_MESSAGE_LEN`] always fits); returns its length. Anything else (not a request,
    /// bad FINGERPRINT, other credentials) is ignored: an unauthenticated request gets no answer
    /// here, as our one pair needs none.
    pub fn handle_request(
        &self,
        from: SocketAddr,
        msg: &StunMessage,
        out: &mut [u8],
    ) -> Option<usize> {
        if msg.class() != Class::Request || msg.method() != stun::Method::Binding {
            return None;
        }
        if msg.has_fingerprint() && !msg.verify_fingerprint() {
            return None;
        }
        let username = msg.username()?;
        let ours = username
            .strip_prefix(self.local.ufrag.as_str())
            .and_then(|rest| rest.strip_prefix(':'))
            .is_some_and(|rest| rest == self.remote.ufrag);
        let key = self.local.pwd.as_bytes();
        if !ours || !msg.verify_integrity(key) {
            return None;
        }
        stun::write_binding_success(out, msg.transaction_id(), from, key).ok()
    }

    /// Handles a response; anything that is not an answer to one of our recent checks, or that
    /// fails FINGERPRINT or MESSAGE-INTEGRITY (keyed with the remote password), is ignored.
    pub fn handle_response(&mut self, now: Instant, msg: &StunMessage) -> Option<IceClientEvent> {
        if !matches!(msg.class(), Class::Success | Class::Error) {
            return None;
        }
        if msg.has_fingerprint() && !msg.verify_fingerprint() {
            return None;
        }
        let key = self.remote.pwd.as_bytes();
        // 400/401 answers carry no MESSAGE-INTEGRITY (the server could not authenticate us).
        let authenticated = msg.verify_integrity(key);
        if (msg.class() == Class::Success || msg.has_integrity()) && !authenticated {
            return None;
        }
        let slot = self
            .pending
            .iter_mut()
            .find(|p| p.as_ref() == Some(msg.transaction_id()))?;
        *slot = None;
        if msg.class() == Class::Error {
            let code = msg.error_code().map_or(0, |e| e.code);
            return Some(IceClientEvent::ErrorResponse { code });
        }
        self.last_response = Some(now);
        let mapped = msg.xor_mapped_address()?;
        self.mapped = Some(mapped);
        if self.connected {
            return None;
        }
        self.connected = true;
        self.next_send = if self.controlling && self.nomination == Nomination::Regular {
            // The pair works: nominate it now.
            Some(now)
        } else {
            // Switch to the consent cadence right away rather than after one more check interval.
            self.last_response
                .and_then(|t| t.checked_add(CONSENT_INTERVAL))
        };
        Some(IceClientEvent::Connected { mapped })
    }

    /// When [`Self::poll_transmit`] next has something to send; `None` before the first call,
    /// which sends at once.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.next_send
    }

    pub fn is_connected(&self) -> bool {
        self.connected
    }

    /// Our address as the server last reported it.
    pub fn mapped_address(&self) -> Option<SocketAddr> {
        self.mapped
    }

    /// When the last authenticated success response arrived (for a consent check by the caller).
    pub fn last_response(&self) -> Option<Instant> {
        self.last_response
    }

    pub fn local(&self) -> &IceCredentials {
        &self.local
    }

    fn next_transaction_id(&mut self) -> [u8; 12] {
        self.counter = self.counter.wrapping_add(1);
        // SplitMix64 is a bijection, so distinct counters give distinct ids for one seed.
        let a = splitmix64(
            self.seed
                .wrapping_add(self.counter.wrapping_mul(0x9E37_79B9_7F4A_7C15)),
        );
        let b = splitmix64(a);
        let mut txid = [0u8; 12];
        txid[..8].copy_from_slice(&a.to_be_bytes());
        txid[8..].copy_from_slice(&b.to_be_bytes()[..4]);
        txid
    }
}

fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests;
