//! A sans-IO TURN client (RFC 8656) over UDP: one allocation on one server, with the long-term
//! credential mechanism (coturn's `use-auth-secret` REST credentials are long-term credentials),
//! permissions and channels per peer, and every timer (retransmissions, allocation, permission
//! and channel refreshes) driven by the caller's clock.
//!
//! Drive loop (the [`crate::peer::Peer`] contract):
//!
//! ```
//! # use std::time::Instant;
//! # use ferry_rtc::turn::{TurnClient, TurnConfig, Event};
//! let now = Instant::now();
//! let server = "127.0.0.1:3478".parse().unwrap();
//! let mut turn = TurnClient::new(TurnConfig::new(server, "1700000000:alice", "c2VjcmV0"), now);
//! // Everything out goes to `server` over the same UDP socket.
//! while let Some(datagram) = turn.poll_transmit() {
//!     # let _ = datagram;
//!     // socket.send_to(&datagram, server)
//! }
//! // A datagram from `server`: a response (handled inside), or data from a peer.
//! # let mut from_server = vec![0u8; 4];
//! if let Some((peer, payload)) = turn.handle_datagram(now, &mut from_server) {
//!     # let _ = (peer, payload);
//!     // feed `payload` to whatever talks to `peer`
//! }
//! while let Some(event) = turn.poll_event() {
//!     if let Event::Allocated { relayed, .. } = event { /* peers reach us at `relayed` */ }
//! }
//! // Later: turn.send_to(now, peer, &payload), turn.handle_timeout(now) at turn.poll_timeout(),
//! // and turn.close(now) to deallocate.
//! ```
//!
//! Data to a peer waits for its permission (CreatePermission), goes out as Send indications
//! until the peer's channel is bound (ChannelBind), then as ChannelData. There is no
//! `snapshot`/`restore`: an allocation belongs to the UDP 5-tuple it was made from, so it cannot
//! move to another socket or process.

use std::collections::{BTreeMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use md5::{Digest, Md5};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::stun::{Class, MAX_MESSAGE_LEN, Method, StunError, StunMessage, StunWriter};

mod uri;
pub use uri::{TurnUri, TurnUriError};

/// The default TURN port (RFC 8656 §3.1).
pub const DEFAULT_PORT: u16 = 3478;
/// REQUESTED-TRANSPORT: UDP.
const UDP: u8 = 17;
/// Allocation lifetime when the server does not say (RFC 8656 §7.2).
const DEFAULT_LIFETIME: Duration = Duration::from_secs(600);
/// Permissions last 300 s (RFC 8656 §9): refreshed well before.
const PERMISSION_REFRESH: Duration = Duration::from_secs(240);
/// Channel bindings last 600 s (RFC 8656 §12): refreshed well before.
const CHANNEL_REFRESH: Duration = Duration::from_secs(540);
/// Channel numbers (RFC 8656 §12).
const CHANNEL_FIRST: u16 = 0x4000;
const CHANNEL_LAST: u16 = 0x4FFF;
/// Datagrams kept per peer while its permission is being installed.
const MAX_QUEUED: usize = 64;
/// 438 (Stale Nonce) answers followed per request before giving up.
const MAX_STALE_RETRIES: u8 = 3;
/// Rm (RFC 8489 §6.2.1): after the last retransmission, wait this many initial RTOs.
const FINAL_WAIT_RTOS: u32 = 16;

/// What the client needs to allocate.
#[derive(Debug, Clone)]
pub struct TurnConfig {
    /// The TURN server (UDP).
    pub server: SocketAddr,
    /// Long-term credential: user name (coturn REST: `"{expiry}:{user}"`).
    pub username: String,
    /// Long-term credential: password (coturn REST: the base64 HMAC).
    pub password: String,
    /// Seeds the transaction ids (the core draws no randomness of its own).
    pub seed: u64,
    /// LIFETIME asked for in Allocate and Refresh; `None`: the server's default (600 s).
    pub lifetime: Option<Duration>,
    /// Initial retransmission timeout (RFC 8489: 500 ms); it doubles per retransmission.
    pub rto: Duration,
    /// Sends of one request before it times out (RFC 8489 Rc: 7).
    pub max_sends: u32,
    /// SOFTWARE sent with requests.
    pub software: Option<String>,
}

impl TurnConfig {
    /// RFC defaults, seed 0.
    pub fn new(
        server: SocketAddr,
        username: impl Into<String>,
        password: impl Into<String>,
    ) -> Self {
        TurnConfig {
            server,
            username: username.into(),
            password: password.into(),
            seed: 0,
            lifetime: None,
            rto: Duration::from_millis(500),
            max_sends: 7,
            software: None,
        }
    }
}

/// Why a TURN operation failed.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TurnError {
    /// The server refused the credential (401 to an authenticated request).
    #[error("the TURN server refused the credential: {0}")]
    Unauthorized(String),
    /// An error response.
    #[error("{method:?} refused: {code} {reason}")]
    Rejected {
        method: Method,
        code: u16,
        reason: String,
    },
    /// No answer after every retransmission.
    #[error("{0:?}: no answer from the TURN server")]
    Timeout(Method),
    /// A response lacked an attribute it must carry.
    #[error("{method:?} response without {attribute}")]
    MissingAttribute {
        method: Method,
        attribute: &'static str,
    },
    /// The allocation is gone (a Refresh answered 437, or failed).
    #[error("the allocation was lost: {0}")]
    AllocationLost(String),
    /// The client is failed, closing or closed.
    #[error("the TURN client is closed")]
    Closed,
    /// The payload cannot be relayed (larger than ChannelData or a Send indication carries).
    #[error("payload of {0} bytes too large to relay")]
    TooLarge(usize),
    /// A request could not be written (a credential too long for STUN).
    #[error("could not write a TURN message: {0}")]
    Encode(StunError),
}

/// Where the allocation is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TurnState {
    /// Allocate sent (maybe answered 401 and sent again with the credential).
    Allocating,
    /// The relayed address exists; data flows.
    Allocated,
    /// Deallocating (Refresh with lifetime 0).
    Closing,
    /// Deallocated, or closed before it allocated.
    Closed,
    /// Allocation failed or was lost (see [`Event::Failed`]).
    Failed,
}

/// What happened, for the driver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// The allocation exists: peers reach us at `relayed`.
    Allocated {
        relayed: SocketAddr,
        /// Our address as the server sees it.
        mapped: Option<SocketAddr>,
        lifetime: Duration,
    },
    /// A permission for this peer address could not be installed or refreshed; its queued data
    /// was dropped. A later [`TurnClient::send_to`] tries again.
    PermissionFailed { peer: IpAddr, error: TurnError },
    /// The allocation failed or was lost; the client is done.
    Failed(TurnError),
    /// Deallocated after [`TurnClient::close`].
    Closed,
}

/// Counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TurnStats {
    /// Datagrams sent to peers as ChannelData.
    pub channel_data_sent: u64,
    /// Datagrams sent to peers as Send indications.
    pub indications_sent: u64,
    /// Datagrams from peers handed out.
    pub received: u64,
    /// Datagrams dropped: a full queue, a refused permission, unknown channels, bad input.
    pub dropped: u64,
    /// Requests retransmitted.
    pub retransmits: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Request {
    Allocate,
    Refresh { lifetime: u32 },
    CreatePermission(IpAddr),
    ChannelBind { peer: SocketAddr, number: u16 },
}

impl Request {
    fn method(self) -> Method {
        match self {
            Request::Allocate => Method::Allocate,
            Request::Refresh { .. } => Method::Refresh,
            Request::CreatePermission(_) => Method::CreatePermission,
            Request::ChannelBind { .. } => Method::ChannelBind,
        }
    }
}

#[derive(Debug)]
struct Transaction {
    id: [u8; 12],
    request: Request,
    bytes: Vec<u8>,
    authenticated: bool,
    sends: u32,
    /// The next retransmission or, after the last one, when the request times out.
    next: Instant,
    interval: Duration,
    stale_retries: u8,
}

#[derive(Debug, Default)]
struct Permission {
    installed: bool,
    pending: bool,
    refresh_at: Option<Instant>,
}

#[derive(Debug)]
struct PeerLink {
    /// `None` when every channel number is taken: Send indications only.
    channel: Option<u16>,
    bound: bool,
    binding: bool,
    /// A ChannelBind failed: Send indications from now on.
    bind_failed: bool,
    refresh_at: Option<Instant>,
    queued: VecDeque<Vec<u8>>,
}

/// One TURN allocation (see the module docs for the drive loop).
#[derive(Debug)]
pub struct TurnClient {
    cfg: TurnConfig,
    state: TurnState,
    rng: ChaCha8Rng,
    realm: Option<String>,
    nonce: Option<String>,
    key: Option<[u8; 16]>,
    relayed: Option<SocketAddr>,
    mapped: Option<SocketAddr>,
    lifetime: Duration,
    refresh_at: Option<Instant>,
    transactions: Vec<Transaction>,
    permissions: BTreeMap<IpAddr, Permission>,
    peers: BTreeMap<SocketAddr, PeerLink>,
    channels: BTreeMap<u16, SocketAddr>,
    next_channel: u16,
    out: VecDeque<Vec<u8>>,
    events: VecDeque<Event>,
    stats: TurnStats,
}

/// The long-term credential key (RFC 8489 §9.2.2): MD5(username ":" realm ":" password).
pub fn long_term_key(username: &str, realm: &str, password: &str) -> [u8; 16] {
    let mut h = Md5::new();
    h.update(username.as_bytes());
    h.update(b":");
    h.update(realm.as_bytes());
    h.update(b":");
    h.update(password.as_bytes());
    let mut key = [0u8; 16];
    key.copy_from_slice(&h.finalize());
    key
}

/// Whether a datagram is TURN ChannelData (RFC 7983: first byte 64..=79).
pub fn is_channel_data(data: &[u8]) -> bool {
    data.len() >= 4 && (0x40..=0x4F).contains(&data[0])
}

/// Time until the allocation is refreshed: a minute before it ends, or halfway for short ones.
fn refresh_delay(lifetime: Duration) -> Duration {
    if lifetime > Duration::from_secs(120) {
        lifetime - Duration::from_secs(60)
    } else {
        (lifetime / 2).max(Duration::from_secs(1))
    }
}

impl TurnClient {
    /// Starts allocating: the first Allocate (unauthenticated, to learn REALM and NONCE) is
    /// ready in [`Self::poll_transmit`].
    pub fn new(cfg: TurnConfig, now: Instant) -> Self {
        let rng = ChaCha8Rng::seed_from_u64(cfg.seed);
        let mut c = TurnClient {
            cfg,
            state: TurnState::Allocating,
            rng,
            realm: None,
            nonce: None,
            key: None,
            relayed: None,
            mapped: None,
            lifetime: DEFAULT_LIFETIME,
            refresh_at: None,
            transactions: Vec::new(),
            permissions: BTreeMap::new(),
            peers: BTreeMap::new(),
            channels: BTreeMap::new(),
            next_channel: CHANNEL_FIRST,
            out: VecDeque::new(),
            events: VecDeque::new(),
            stats: TurnStats::default(),
        };
        c.start(now, Request::Allocate, 0);
        c
    }

    pub fn server(&self) -> SocketAddr {
        self.cfg.server
    }
    pub fn state(&self) -> TurnState {
        self.state
    }
    /// The relayed transport address, once allocated.
    pub fn relayed_address(&self) -> Option<SocketAddr> {
        self.relayed
    }
    /// Our address as the server sees it (from the Allocate response).
    pub fn mapped_address(&self) -> Option<SocketAddr> {
        self.mapped
    }
    pub fn stats(&self) -> TurnStats {
        self.stats
    }
    /// Whether data to `peer` goes out as ChannelData.
    pub fn is_channel_bound(&self, peer: SocketAddr) -> bool {
        self.peers.get(&peer).is_some_and(|p| p.bound)
    }

    /// The next datagram for the server.
    pub fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        self.out.pop_front()
    }

    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// When [`Self::handle_timeout`] wants to run next.
    pub fn poll_timeout(&self) -> Option<Instant> {
        if matches!(self.state, TurnState::Closed | TurnState::Failed) {
            return None;
        }
        let mut t = self.transactions.iter().map(|t| t.next).min();
        let mut consider = |at: Option<Instant>| {
            if let Some(at) = at {
                t = Some(t.map_or(at, |t| t.min(at)));
            }
        };
        if self.state == TurnState::Allocated {
            consider(self.refresh_at);
            for p in self.permissions.values().filter(|p| !p.pending) {
                consider(p.refresh_at);
            }
            for l in self.peers.values().filter(|l| !l.binding) {
                consider(l.refresh_at);
            }
        }
        t
    }

    /// Retransmits, times requests out, and refreshes the allocation, permissions and channels.
    pub fn handle_timeout(&mut self, now: Instant) {
        let rto = self.cfg.rto;
        let max_sends = self.cfg.max_sends.max(1);
        let mut expired = Vec::new();
        for t in &mut self.transactions {
            if t.next > now {
                continue;
            }
            if t.sends >= max_sends {
                expired.push(t.id);
                continue;
            }
            t.sends += 1;
            t.interval = t.interval.saturating_mul(2);
            t.next = if t.sends >= max_sends {
                now + rto.saturating_mul(FINAL_WAIT_RTOS)
            } else {
                now + t.interval
            };
            self.out.push_back(t.bytes.clone());
            self.stats.retransmits += 1;
        }
        for id in expired {
            if let Some(i) = self.transactions.iter().position(|t| t.id == id) {
                let t = self.transactions.remove(i);
                let method = t.request.method();
                self.on_failure(now, t.request, TurnError::Timeout(method));
            }
        }
        if self.state != TurnState::Allocated {
            return;
        }
        if self.refresh_at.is_some_and(|at| at <= now) {
            self.refresh_at = None;
            let lifetime = self.requested_lifetime();
            self.start(now, Request::Refresh { lifetime }, 0);
        }
        let due: Vec<IpAddr> = self
            .permissions
            .iter()
            .filter(|(_, p)| !p.pending && p.refresh_at.is_some_and(|at| at <= now))
            .map(|(ip, _)| *ip)
            .collect();
        for ip in due {
            self.request_permission(now, ip);
        }
        let due: Vec<(SocketAddr, u16)> = self
            .peers
            .iter()
            .filter(|(_, l)| !l.binding && l.refresh_at.is_some_and(|at| at <= now))
            .filter_map(|(peer, l)| Some((*peer, l.channel?)))
            .collect();
        for (peer, number) in due {
            self.bind(now, peer, number);
        }
    }

    /// A datagram from the server. Responses are handled here (`None`); ChannelData and Data
    /// indications from a peer we hold a permission for give that peer and the payload,
    /// borrowed from `data`. Anything else is dropped and counted.
    pub fn handle_datagram<'a>(
        &mut self,
        now: Instant,
        data: &'a mut [u8],
    ) -> Option<(SocketAddr, &'a mut [u8])> {
        if matches!(self.state, TurnState::Closed | TurnState::Failed) {
            self.stats.dropped += 1;
            return None;
        }
        let found = if is_channel_data(data) {
            self.channel_data(data)
        } else {
            match StunMessage::parse_turn(data) {
                Ok(msg) => self.stun(now, &msg),
                Err(_) => None,
            }
        };
        match found {
            Some((peer, start, end)) => {
                self.stats.received += 1;
                Some((peer, data.get_mut(start..end)?))
            }
            None => None,
        }
    }

    fn channel_data(&mut self, data: &[u8]) -> Option<(SocketAddr, usize, usize)> {
        let number = u16::from_be_bytes([data[0], data[1]]);
        let len = usize::from(u16::from_be_bytes([data[2], data[3]]));
        let peer = self.channels.get(&number).copied();
        match peer {
            Some(peer) if 4 + len <= data.len() => Some((peer, 4, 4 + len)),
            _ => {
                self.stats.dropped += 1;
                None
            }
        }
    }

    fn stun(&mut self, now: Instant, msg: &StunMessage) -> Option<(SocketAddr, usize, usize)> {
        match msg.class() {
            Class::Indication if msg.method() == Method::Data => {
                let (Some(peer), Some(payload)) = (msg.xor_peer_address(), msg.data()) else {
                    self.stats.dropped += 1;
                    return None;
                };
                if !self
                    .permissions
                    .get(&peer.ip())
                    .is_some_and(|p| p.installed)
                {
                    self.stats.dropped += 1;
                    return None;
                }
                // The payload's place in the datagram (it borrows from it).
                let start =
                    (payload.as_ptr() as usize).checked_sub(msg.as_bytes().as_ptr() as usize)?;
                Some((peer, start, start + payload.len()))
            }
            Class::Success | Class::Error => {
                self.response(now, msg);
                None
            }
            _ => {
                self.stats.dropped += 1;
                None
            }
        }
    }

    fn response(&mut self, now: Instant, msg: &StunMessage) {
        let Some(i) = self
            .transactions
            .iter()
            .position(|t| &t.id == msg.transaction_id())
        else {
            return;
        };
        if msg.has_fingerprint() && !msg.verify_fingerprint() {
            return;
        }
        let t = &self.transactions[i];
        if msg.method() != t.request.method() {
            return;
        }
        let code = msg.error_code().map(|e| e.code);
        // 401 and 438 cannot carry integrity (the server does not accept our key); any other
        // answer to an authenticated request must, or it may be forged: ignore it and let the
        // retransmissions go on.
        let unauthenticated_ok = matches!(code, Some(401 | 438))
            || (msg.class() == Class::Error && !msg.has_integrity());
        if t.authenticated && !unauthenticated_ok {
            let verified = self.key.is_some_and(|k| msg.verify_integrity(&k));
            if !verified {
                return;
            }
        }
        let t = self.transactions.remove(i);
        if msg.class() == Class::Success {
            self.on_success(now, t.request, msg);
            return;
        }
        let (code, reason) = msg
            .error_code()
            .map_or((0, String::new()), |e| (e.code, e.reason.to_owned()));
        let method = t.request.method();
        match code {
            401 if !t.authenticated => {
                let (Some(realm), Some(nonce)) = (msg.realm(), msg.nonce()) else {
                    let attribute = if msg.realm().is_none() {
                        "REALM"
                    } else {
                        "NONCE"
                    };
                    self.on_failure(
                        now,
                        t.request,
                        TurnError::MissingAttribute { method, attribute },
                    );
                    return;
                };
                self.key = Some(long_term_key(&self.cfg.username, realm, &self.cfg.password));
                self.realm = Some(realm.to_owned());
                self.nonce = Some(nonce.to_owned());
                self.start(now, t.request, t.stale_retries);
            }
            401 => self.on_failure(now, t.request, TurnError::Unauthorized(reason)),
            438 if t.stale_retries < MAX_STALE_RETRIES && msg.nonce().is_some() => {
                self.nonce = msg.nonce().map(str::to_owned);
                if let Some(realm) = msg.realm()
                    && self.realm.as_deref() != Some(realm)
                {
                    self.key = Some(long_term_key(&self.cfg.username, realm, &self.cfg.password));
                    self.realm = Some(realm.to_owned());
                }
                self.start(now, t.request, t.stale_retries + 1);
            }
            _ => self.on_failure(
                now,
                t.request,
                TurnError::Rejected {
                    method,
                    code,
                    reason,
                },
            ),
        }
    }

    fn on_success(&mut self, now: Instant, request: Request, msg: &StunMessage) {
        match request {
            Request::Allocate => {
                if self.state != TurnState::Allocating {
                    return;
                }
                let Some(relayed) = msg.xor_relayed_address() else {
                    let e = TurnError::MissingAttribute {
                        method: Method::Allocate,
                        attribute: "XOR-RELAYED-ADDRESS",
                    };
                    self.fail(e);
                    return;
                };
                let lifetime = msg
                    .lifetime()
                    .map_or(DEFAULT_LIFETIME, |s| Duration::from_secs(u64::from(s)));
                self.state = TurnState::Allocated;
                self.relayed = Some(relayed);
                self.mapped = msg.xor_mapped_address();
                self.lifetime = lifetime;
                self.refresh_at = Some(now + refresh_delay(lifetime));
                self.events.push_back(Event::Allocated {
                    relayed,
                    mapped: self.mapped,
                    lifetime,
                });
                // Data handed over while allocating: its permissions now.
                let waiting: Vec<IpAddr> = self
                    .peers
                    .iter()
                    .filter(|(_, l)| !l.queued.is_empty())
                    .map(|(p, _)| p.ip())
                    .collect();
                for ip in waiting {
                    self.request_permission(now, ip);
                }
            }
            Request::Refresh { .. } if self.state == TurnState::Closing => self.closed(),
            Request::Refresh { .. } => {
                let lifetime = msg
                    .lifetime()
                    .map_or(self.lifetime, |s| Duration::from_secs(u64::from(s)));
                if lifetime.is_zero() {
                    self.fail(TurnError::AllocationLost("refreshed to lifetime 0".into()));
                    return;
                }
                self.lifetime = lifetime;
                self.refresh_at = Some(now + refresh_delay(lifetime));
            }
            Request::CreatePermission(ip) => {
                let p = self.permissions.entry(ip).or_default();
                p.installed = true;
                p.pending = false;
                p.refresh_at = Some(now + PERMISSION_REFRESH);
                let peers: Vec<SocketAddr> = self
                    .peers
                    .keys()
                    .filter(|p| p.ip() == ip)
                    .copied()
                    .collect();
                for peer in peers {
                    let queued = self
                        .peers
                        .get_mut(&peer)
                        .map(|l| std::mem::take(&mut l.queued))
                        .unwrap_or_default();
                    for payload in queued {
                        // Too large for an indication: dropped and counted there.
                        let _ = self.indicate(peer, &payload);
                    }
                    self.ensure_channel(now, peer);
                }
            }
            Request::ChannelBind { peer, .. } => {
                if let Some(l) = self.peers.get_mut(&peer) {
                    l.bound = true;
                    l.binding = false;
                    l.refresh_at = Some(now + CHANNEL_REFRESH);
                }
            }
        }
    }

    fn on_failure(&mut self, now: Instant, request: Request, error: TurnError) {
        match request {
            Request::Allocate => self.fail(error),
            Request::Refresh { .. } if self.state == TurnState::Closing => self.closed(),
            Request::Refresh { .. } => {
                let e = match error {
                    TurnError::Rejected {
                        code: 437, reason, ..
                    } => TurnError::AllocationLost(reason),
                    e => TurnError::AllocationLost(e.to_string()),
                };
                self.fail(e);
            }
            Request::CreatePermission(ip) => {
                self.permissions.remove(&ip);
                for (peer, l) in &mut self.peers {
                    if peer.ip() == ip {
                        self.stats.dropped += l.queued.len() as u64;
                        l.queued.clear();
                    }
                }
                self.events
                    .push_back(Event::PermissionFailed { peer: ip, error });
            }
            Request::ChannelBind { peer, .. } => {
                if let Some(l) = self.peers.get_mut(&peer) {
                    l.bound = false;
                    l.binding = false;
                    l.bind_failed = true;
                    l.refresh_at = None;
                }
                let _ = now;
            }
        }
    }

    fn fail(&mut self, error: TurnError) {
        self.state = TurnState::Failed;
        self.transactions.clear();
        self.events.push_back(Event::Failed(error));
    }

    fn closed(&mut self) {
        self.state = TurnState::Closed;
        self.transactions.clear();
        self.events.push_back(Event::Closed);
    }

    fn requested_lifetime(&self) -> u32 {
        let l = self.cfg.lifetime.unwrap_or(self.lifetime);
        u32::try_from(l.as_secs()).unwrap_or(u32::MAX)
    }

    /// Relays `payload` to `peer`: ChannelData once the peer's channel is bound, a Send
    /// indication while it is being bound, queued (up to 64 datagrams) until the peer's
    /// permission is installed.
    pub fn send_to(
        &mut self,
        now: Instant,
        peer: SocketAddr,
        payload: &[u8],
    ) -> Result<(), TurnError> {
        if !matches!(self.state, TurnState::Allocating | TurnState::Allocated) {
            return Err(TurnError::Closed);
        }
        if payload.len() > usize::from(u16::MAX) {
            return Err(TurnError::TooLarge(payload.len()));
        }
        if !self.peers.contains_key(&peer) {
            let channel = (self.next_channel <= CHANNEL_LAST).then_some(self.next_channel);
            if let Some(n) = channel {
                self.next_channel += 1;
                self.channels.insert(n, peer);
            }
            self.peers.insert(
                peer,
                PeerLink {
                    channel,
                    bound: false,
                    binding: false,
                    bind_failed: channel.is_none(),
                    refresh_at: None,
                    queued: VecDeque::new(),
                },
            );
        }
        let installed = self
            .permissions
            .get(&peer.ip())
            .is_some_and(|p| p.installed);
        let Some(link) = self.peers.get_mut(&peer) else {
            return Err(TurnError::Closed);
        };
        if let (true, Some(number)) = (link.bound, link.channel) {
            let mut d = Vec::with_capacity(4 + payload.len());
            d.extend_from_slice(&number.to_be_bytes());
            d.extend_from_slice(&(payload.len() as u16).to_be_bytes());
            d.extend_from_slice(payload);
            self.out.push_back(d);
            self.stats.channel_data_sent += 1;
            return Ok(());
        }
        if installed {
            let sent = self.indicate(peer, payload);
            self.ensure_channel(now, peer);
            return sent;
        }
        if link.queued.len() >= MAX_QUEUED {
            link.queued.pop_front();
            self.stats.dropped += 1;
        }
        link.queued.push_back(payload.to_vec());
        if self.state == TurnState::Allocated
            && !self.permissions.get(&peer.ip()).is_some_and(|p| p.pending)
        {
            self.request_permission(now, peer.ip());
        }
        Ok(())
    }

    /// Deallocates (Refresh with LIFETIME 0, sent once more per retransmission until answered).
    pub fn close(&mut self, now: Instant) {
        match self.state {
            TurnState::Allocated => {
                self.transactions.clear();
                self.state = TurnState::Closing;
                self.start(now, Request::Refresh { lifetime: 0 }, 0);
            }
            TurnState::Allocating => {
                self.transactions.clear();
                self.state = TurnState::Closed;
            }
            _ => {}
        }
    }

    fn request_permission(&mut self, now: Instant, ip: IpAddr) {
        let p = self.permissions.entry(ip).or_default();
        if p.pending {
            return;
        }
        p.pending = true;
        self.start(now, Request::CreatePermission(ip), 0);
    }

    fn ensure_channel(&mut self, now: Instant, peer: SocketAddr) {
        let Some(l) = self.peers.get(&peer) else {
            return;
        };
        if l.bound || l.binding || l.bind_failed {
            return;
        }
        if let Some(number) = l.channel {
            self.bind(now, peer, number);
        }
    }

    fn bind(&mut self, now: Instant, peer: SocketAddr, number: u16) {
        if let Some(l) = self.peers.get_mut(&peer) {
            l.binding = true;
            self.start(now, Request::ChannelBind { peer, number }, 0);
        }
    }

    /// A Send indication to `peer`.
    fn indicate(&mut self, peer: SocketAddr, payload: &[u8]) -> Result<(), TurnError> {
        let id = self.transaction_id();
        let mut buf = vec![0u8; MAX_MESSAGE_LEN];
        let written = (|| {
            let mut w = StunWriter::new(&mut buf, Class::Indication, Method::Send, &id)?;
            w.xor_peer_address(peer)?.data(payload)?;
            Ok::<usize, StunError>(w.finish())
        })();
        match written {
            Ok(n) => {
                buf.truncate(n);
                self.out.push_back(buf);
                self.stats.indications_sent += 1;
                Ok(())
            }
            Err(_) => {
                self.stats.dropped += 1;
                Err(TurnError::TooLarge(payload.len()))
            }
        }
    }

    fn transaction_id(&mut self) -> [u8; 12] {
        let mut id = [0u8; 12];
        self.rng.fill_bytes(&mut id);
        id
    }

    /// Sends `request` as a new transaction (authenticated once REALM and NONCE are known).
    fn start(&mut self, now: Instant, request: Request, stale_retries: u8) {
        let id = self.transaction_id();
        let authenticated = self.key.is_some();
        match self.write_request(&id, request) {
            Ok(bytes) => {
                self.out.push_back(bytes.clone());
                let rto = self.cfg.rto;
                let next = if self.cfg.max_sends <= 1 {
                    now + rto.saturating_mul(FINAL_WAIT_RTOS)
                } else {
                    now + rto
                };
                self.transactions.push(Transaction {
                    id,
                    request,
                    bytes,
                    authenticated,
                    sends: 1,
                    next,
                    interval: rto,
                    stale_retries,
                });
            }
            Err(e) => self.on_failure(now, request, TurnError::Encode(e)),
        }
    }

    fn write_request(&self, id: &[u8; 12], request: Request) -> Result<Vec<u8>, StunError> {
        let mut buf = vec![0u8; MAX_MESSAGE_LEN];
        let mut w = StunWriter::new(&mut buf, Class::Request, request.method(), id)?;
        match request {
            Request::Allocate => {
                w.requested_transport(UDP)?;
                if let Some(l) = self.cfg.lifetime {
                    w.lifetime(u32::try_from(l.as_secs()).unwrap_or(u32::MAX))?;
                }
            }
            Request::Refresh { lifetime } => {
                w.lifetime(lifetime)?;
            }
            Request::CreatePermission(ip) => {
                w.xor_peer_address(SocketAddr::new(ip, 0))?;
            }
            Request::ChannelBind { peer, number } => {
                w.channel_number(number)?.xor_peer_address(peer)?;
            }
        }
        if let Some(s) = &self.cfg.software {
            w.software(s)?;
        }
        if let (Some(realm), Some(nonce), Some(key)) = (&self.realm, &self.nonce, &self.key) {
            w.username(&self.cfg.username)?
                .realm(realm)?
                .nonce(nonce)?
                .message_integrity(key)?;
        }
        w.fingerprint()?;
        let n = w.finish();
        buf.truncate(n);
        Ok(buf)
    }

    #[cfg(any(test, feature = "fuzzing"))]
    fn pending_ids(&self) -> Vec<[u8; 12]> {
        self.transactions.iter().map(|t| t.id).collect()
    }
}

#[cfg(any(test, feature = "fuzzing"))]
mod fuzz;
#[cfg(any(test, feature = "fuzzing"))]
pub use fuzz::fuzz_turn_client;

#[cfg(test)]
mod tests;
