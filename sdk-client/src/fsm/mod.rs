//! The session state machine both SDKs share (DESIGN §6), as a sans-IO core.
//!
//! One [`Machine`] runs one publish or play session. The driver (the Rust SDK's tokio task, or
//! the browser SDK's `ferry.js`) feeds it [`Input`]s with the time they happened, carries out the
//! [`Command`]s it returns and calls [`Machine::handle_timeout`] at [`Machine::poll_timeout`]. It
//! never reads the clock, never does IO and draws its randomness (backoff jitter) from a seeded
//! generator, so a test replays any sequence exactly. `js/fsm.js` is the same machine in
//! JavaScript; both run the scenarios in `sdk-client/fsm-scenarios.json`.
//!
//! ```text
//!            start                 answered + connected
//!   idle ───────────▶ connecting ─────────────────────▶ connected ◀──────────┐
//!                         │                              │   ▲  │            │ switch done
//!                         │ retries (backoff)            │   │  │ migrate    │
//!                         ▼                  lost        │   │  └──────▶ migrating
//!                   reconnecting ◀───────────────────────┘   │                │ timeout / refused
//!                     │  ▲    │  1. ICE restart at the same Location          │
//!                     │  └────┘  2. POST with the ticket through the gateway ◀─┘
//!                     │ too many attempts                       degraded ⇄ connected
//!                     ▼                                         (throughput, loss)
//!                   failed                    close ──▶ closed
//! ```
//!
//! How a session follows each cutover mode:
//! - `edge`: nothing to do on the wire; the session's URL moves to the target (events follow it).
//! - `ice-restart`: an ICE restart by PATCH at the target; DTLS and SRTP continue.
//! - `reconnect`: a new transport POSTed to the target with the event's ticket; the old one is
//!   closed once the new one carries media.
//! - no event at all (the node died): an ICE restart at the same URL, then a POST with the
//!   ticket through the gateway, which places the session on a live node; retries back off
//!   exponentially (base 100 ms, cap 5 s, +0–50 % jitter).

#[cfg(test)]
mod tests;
mod types;

use std::collections::VecDeque;
use std::time::{Duration, Instant};

pub use types::{
    Command, Config, Endpoint, Event, Input, Kind, LossCause, MigrateEvent, Mode, State,
};

/// Why a transport is being set up or restarted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Purpose {
    /// The first connection.
    Initial,
    /// Following a `migrate` event.
    Migrate(Mode),
    /// Recovering from a loss (or a failed migration).
    Recover,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// POST (or PATCH) sent, waiting for the answer.
    Asking,
    /// Answered; waiting for the path (publish) or a frame (play).
    Waiting,
}

/// A transport being set up, or the current one being restarted.
#[derive(Debug, Clone)]
struct Pending {
    transport: u32,
    /// An ICE restart of `transport` (else a POST of it).
    restart: bool,
    phase: Phase,
    purpose: Purpose,
    /// The session's URL once this succeeds.
    location: Option<String>,
    /// The node it will be on.
    node: Option<String>,
    /// Idempotency key of the POST (a retry reuses it).
    key: String,
    /// A ticket went with the POST.
    ticketed: bool,
    /// Frames of the transport when the answer came (play: the next one is the first).
    frames_at_answer: u64,
    /// When this attempt must have succeeded.
    deadline: Instant,
}

/// A switch whose blackout is being measured.
#[derive(Debug, Clone)]
struct Switch {
    mode: Mode,
    from: Option<String>,
    to: Option<String>,
    started: Instant,
    window_start: Instant,
    /// When media flowed again (the first frame, or the new path).
    done: Option<Instant>,
}

/// The next recovery attempt: when, and the request it repeats (transport, key) if the last
/// one got no answer.
#[derive(Debug, Clone)]
struct Retry {
    at: Instant,
    repeat: Option<(u32, String)>,
}

/// The state machine. See the module docs.
#[derive(Debug)]
pub struct Machine {
    cfg: Config,
    kind: Kind,
    state: State,
    rng: u32,
    key_seed: String,
    keys: u32,
    transports: u32,
    /// The transport media flows on.
    current: Option<u32>,
    pending: Option<Pending>,
    location: Option<String>,
    session: Option<String>,
    node: Option<String>,
    ticket: Option<String>,
    /// Attempts since the last success.
    attempt: u32,
    retry: Option<Retry>,
    /// When the loss began (downtime of a recovery).
    lost_at: Option<Instant>,
    /// Recovery step 1 (ICE restart at the same URL) was tried for this loss.
    restarted_same: bool,
    /// The session is a fresh one after a refused ticket.
    fresh: bool,
    switch: Option<Switch>,
    /// Frames each transport decoded so far (play).
    totals: Vec<(u32, u64)>,
    /// When the frames the app sees grew (play), last few seconds.
    frames: VecDeque<Instant>,
    /// Degradation.
    degraded: bool,
    bad_run: u32,
    good_run: u32,
    degraded_at: Option<Instant>,
    probe_after: Duration,
    restored_at: Option<Instant>,
    out: VecDeque<Command>,
}

/// Frame times kept for blackout measurement.
const FRAME_HISTORY: Duration = Duration::from_secs(4);
/// Video that had to go off again this soon after coming back waits twice as long next time.
const FLAP_WINDOW: Duration = Duration::from_secs(10);
/// Longest wait before trying video again.
const MAX_PROBE_AFTER: Duration = Duration::from_secs(80);

impl Machine {
    /// A machine for one session. `seed` drives backoff jitter; `key_seed` (random, at least
    /// 16 characters in production) prefixes every idempotency key, so keys of different
    /// clients never collide.
    pub fn new(kind: Kind, cfg: Config, seed: u32, key_seed: impl Into<String>) -> Self {
        Machine {
            probe_after: cfg.probe_after,
            cfg,
            kind,
            state: State::Idle,
            rng: seed.max(1),
            key_seed: key_seed.into(),
            keys: 0,
            transports: 0,
            current: None,
            pending: None,
            location: None,
            session: None,
            node: None,
            ticket: None,
            attempt: 0,
            retry: None,
            lost_at: None,
            restarted_same: false,
            fresh: false,
            switch: None,
            totals: Vec::new(),
            frames: VecDeque::new(),
            degraded: false,
            bad_run: 0,
            good_run: 0,
            degraded_at: None,
            restored_at: None,
            out: VecDeque::new(),
        }
    }

    /// Publish or play.
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// Current state.
    pub fn state(&self) -> State {
        self.state
    }

    /// The session's URL on the node serving it.
    pub fn location(&self) -> Option<&str> {
        self.location.as_deref()
    }

    /// The session id.
    pub fn session(&self) -> Option<&str> {
        self.session.as_deref()
    }

    /// The node serving the session.
    pub fn node(&self) -> Option<&str> {
        self.node.as_deref()
    }

    /// The transport media flows on.
    pub fn current_transport(&self) -> Option<u32> {
        self.current
    }

    /// The ticket that would resume the session now.
    pub fn ticket(&self) -> Option<&str> {
        self.ticket.as_deref()
    }

    /// Next command for the driver.
    pub fn poll_command(&mut self) -> Option<Command> {
        self.out.pop_front()
    }

    /// When [`Machine::handle_timeout`] has work.
    pub fn poll_timeout(&self) -> Option<Instant> {
        if matches!(self.state, State::Closed | State::Failed) {
            return None;
        }
        let retry = self.retry.as_ref().map(|r| r.at);
        let pending = self.pending.as_ref().map(|p| p.deadline);
        let settle = self
            .switch
            .as_ref()
            .and_then(|s| s.done)
            .map(|d| d + self.cfg.settle);
        [retry, pending, settle].into_iter().flatten().min()
    }

    fn emit(&mut self, e: Event) {
        self.out.push_back(Command::Emit(e));
    }

    fn set_state(&mut self, state: State, reason: Option<String>) {
        if self.state == state {
            return;
        }
        let previous = self.state;
        self.state = state;
        self.emit(Event::State {
            state,
            previous,
            reason,
        });
    }

    /// The state that media flowing means: connected, or degraded.
    fn flowing(&self) -> State {
        if self.degraded {
            State::Degraded
        } else {
            State::Connected
        }
    }

    fn is_flowing(&self) -> bool {
        matches!(self.state, State::Connected | State::Degraded)
    }

    fn next_key(&mut self) -> String {
        self.keys += 1;
        format!("{}-{}", self.key_seed, self.keys)
    }

    fn next_transport(&mut self) -> u32 {
        self.transports += 1;
        self.transports
    }

    fn random(&mut self) -> u32 {
        // xorshift32: the same sequence in js/fsm.js.
        let mut x = self.rng;
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        self.rng = x;
        x
    }

    /// Delay before attempt `n` (1-based): base·2^(n-1), capped, plus 0–50 % jitter.
    pub fn backoff(&mut self, n: u32) -> Duration {
        let base = self.cfg.backoff_base.as_millis() as u64;
        let cap = self.cfg.backoff_cap.as_millis() as u64;
        let d = base
            .saturating_mul(1u64 << n.saturating_sub(1).min(20))
            .min(cap);
        let jitter = d * u64::from(self.random() % 501) / 1000;
        Duration::from_millis(d + jitter)
    }

    /// Feeds one input that happened at `now`.
    pub fn handle_input(&mut self, now: Instant, input: Input) {
        if matches!(self.state, State::Closed | State::Failed) {
            return;
        }
        match input {
            Input::Start { ticket } => self.on_start(now, ticket),
            Input::Answered {
                transport,
                location,
                session,
                node,
                ticket,
            } => self.on_answered(transport, location, session, node, ticket),
            Input::PostFailed {
                transport,
                status,
                reason,
            } => self.on_post_failed(now, transport, status, reason),
            Input::Connected { transport } => self.on_connected(now, transport),
            Input::Lost { transport, cause } => self.on_lost(now, transport, cause),
            Input::Migrate(m) => self.on_migrate(now, m),
            Input::RestartAnswered { transport } => self.on_restart_answered(transport),
            Input::RestartFailed {
                transport,
                status,
                reason,
            } => self.on_restart_failed(now, transport, status, reason),
            Input::Frames { transport, total } => self.on_frames(now, transport, total),
            Input::Throughput { bps, loss } => self.on_throughput(now, bps, loss),
            Input::Ticket { ticket } => self.store_ticket(Some(ticket)),
            Input::Ended { reason } => {
                self.store_ticket(None);
                self.finish(State::Closed, reason);
            }
            Input::Close => self.close(),
        }
    }

    /// Drives timers: retries, switch deadlines, the end of a blackout window.
    pub fn handle_timeout(&mut self, now: Instant) {
        if matches!(self.state, State::Closed | State::Failed) {
            return;
        }
        if let Some(s) = &self.switch
            && let Some(done) = s.done
            && now >= done + self.cfg.settle
        {
            self.report_switch();
        }
        if let Some(p) = self.pending.clone()
            && now >= p.deadline
        {
            self.pending_timed_out(now, p);
        }
        if let Some(r) = self.retry.clone()
            && now >= r.at
        {
            self.retry = None;
            self.attempt_recovery(now, r.repeat);
        }
    }

    fn store_ticket(&mut self, ticket: Option<String>) {
        if ticket == self.ticket {
            return;
        }
        self.ticket = ticket.clone();
        self.out.push_back(Command::StoreTicket { ticket });
    }

    fn on_start(&mut self, now: Instant, ticket: Option<String>) {
        if self.state != State::Idle {
            return;
        }
        self.ticket = ticket;
        self.set_state(State::Connecting, None);
        let transport = self.next_transport();
        let key = self.next_key();
        self.post(now, transport, Endpoint::Gateway, Purpose::Initial, key);
    }

    /// POSTs an offer of `transport`; the ticket we hold goes along.
    fn post(
        &mut self,
        now: Instant,
        transport: u32,
        endpoint: Endpoint,
        purpose: Purpose,
        key: String,
    ) {
        let ticket = self.ticket.clone();
        let failed_node = match purpose {
            Purpose::Recover => self.node.clone(),
            _ => None,
        };
        let timeout = match purpose {
            Purpose::Initial => self.cfg.connect_timeout,
            _ => self.cfg.switch_timeout,
        };
        self.pending = Some(Pending {
            transport,
            restart: false,
            phase: Phase::Asking,
            purpose,
            location: None,
            node: None,
            key: key.clone(),
            ticketed: ticket.is_some(),
            frames_at_answer: 0,
            deadline: now + timeout,
        });
        self.out.push_back(Command::Post {
            transport,
            endpoint,
            idempotency_key: key,
            ticket,
            failed_node,
        });
    }

    /// An ICE restart of the current transport at `location`.
    fn restart(&mut self, now: Instant, location: String, purpose: Purpose, node: Option<String>) {
        let Some(transport) = self.current else {
            return;
        };
        let timeout = match purpose {
            Purpose::Recover => self.cfg.restart_timeout,
            _ => self.cfg.switch_timeout,
        };
        self.pending = Some(Pending {
            transport,
            restart: true,
            phase: Phase::Asking,
            purpose,
            location: Some(location.clone()),
            node,
            key: String::new(),
            ticketed: false,
            frames_at_answer: self.total(transport),
            deadline: now + timeout,
        });
        self.out.push_back(Command::RestartIce {
            transport,
            location,
        });
    }

    fn total(&self, transport: u32) -> u64 {
        self.totals
            .iter()
            .find(|(t, _)| *t == transport)
            .map_or(0, |(_, n)| *n)
    }

    fn on_answered(
        &mut self,
        transport: u32,
        location: String,
        session: String,
        node: Option<String>,
        ticket: Option<String>,
    ) {
        let Some(p) = self.pending.as_mut() else {
            return;
        };
        if p.transport != transport || p.restart || p.phase != Phase::Asking {
            return;
        }
        p.phase = Phase::Waiting;
        p.location = Some(location.clone());
        p.node = node.clone();
        let ticketed = p.ticketed;
        if ticketed && self.session.as_deref().is_some_and(|s| s != session) {
            // A ticket that could not resume the session: the server made a new one.
            self.fresh = true;
        }
        self.session = Some(session);
        if self.current.is_none() {
            // The first connection: DELETE goes here even before media flows.
            self.location = Some(location);
            if node.is_some() {
                self.node = node;
            }
        }
        // The ticket we sent is spent; the answer carries the next one.
        if ticketed {
            self.ticket = None;
        }
        match ticket {
            Some(t) => self.store_ticket(Some(t)),
            None if ticketed => self.out.push_back(Command::StoreTicket { ticket: None }),
            None => {}
        }
    }

    fn on_post_failed(&mut self, now: Instant, transport: u32, status: u16, reason: String) {
        let Some(p) = self.pending.clone() else {
            return;
        };
        if p.transport != transport || p.restart || p.phase != Phase::Asking {
            return;
        }
        self.pending = None;
        // A ticket the server refuses (malformed 400, forged 403, replayed 409, expired 410): a
        // clean new session instead, at once (a 400 for anything else fails on the retry).
        if p.ticketed && matches!(status, 400 | 403 | 409 | 410) {
            self.emit(Event::Error {
                code: "ticket-rejected".into(),
                status,
                message: reason,
            });
            self.store_ticket(None);
            self.fresh = true;
            self.out.push_back(Command::CloseTransport { transport });
            let t = self.next_transport();
            let key = self.next_key();
            let purpose = match p.purpose {
                Purpose::Initial => Purpose::Initial,
                _ => Purpose::Recover,
            };
            self.post(now, t, Endpoint::Gateway, purpose, key);
            return;
        }
        self.emit(Event::Error {
            code: "post-failed".into(),
            status,
            message: reason.clone(),
        });
        let initial = p.purpose == Purpose::Initial && self.current.is_none();
        // No answer, overload, or (while recovering) a stream not back yet: try again.
        let retryable = status == 0
            || status == 429
            || status >= 500
            || (status == 404 && !initial)
            || (status == 409 && !initial);
        if !retryable {
            self.out.push_back(Command::CloseTransport { transport });
            if self.current.is_some() && p.purpose == Purpose::Migrate(Mode::Reconnect) {
                // The old transport may still work: recover from there.
                self.recover(now, format!("reconnect refused ({status})"));
                return;
            }
            self.finish(State::Failed, format!("POST answered {status}: {reason}"));
            return;
        }
        // Without an answer the server may have made the session: repeat the same request.
        let repeat = (status == 0).then(|| (transport, p.key.clone()));
        if repeat.is_none() {
            self.out.push_back(Command::CloseTransport { transport });
        }
        if p.purpose != Purpose::Initial && self.lost_at.is_none() {
            self.lost_at = Some(now);
        }
        if let Purpose::Migrate(_) = p.purpose {
            self.recover(now, format!("migration POST failed ({status})"));
            return;
        }
        self.schedule_retry(now, format!("POST failed ({status}): {reason}"), repeat);
    }

    /// Waits (exponential backoff) before the next attempt.
    fn schedule_retry(&mut self, now: Instant, reason: String, repeat: Option<(u32, String)>) {
        self.attempt += 1;
        if self.attempt > self.cfg.max_attempts {
            self.emit(Event::Error {
                code: "gave-up".into(),
                status: 0,
                message: reason.clone(),
            });
            self.finish(
                State::Failed,
                format!("gave up after {} attempts: {reason}", self.cfg.max_attempts),
            );
            return;
        }
        let delay = self.backoff(self.attempt);
        self.emit(Event::Reconnecting {
            attempt: self.attempt + 1,
            delay_ms: delay.as_millis() as u64,
            reason,
        });
        self.retry = Some(Retry {
            at: now + delay,
            repeat,
        });
    }

    /// The transport is lost (or a migration failed): recover.
    fn recover(&mut self, now: Instant, reason: String) {
        if self.lost_at.is_none() {
            self.lost_at = Some(now);
        }
        self.restarted_same = false;
        self.set_state(State::Reconnecting, Some(reason.clone()));
        self.emit(Event::Reconnecting {
            attempt: self.attempt + 1,
            delay_ms: 0,
            reason,
        });
        self.attempt_recovery(now, None);
    }

    /// One recovery attempt: an ICE restart at the same URL first, then POSTs with the ticket
    /// through the gateway (`repeat`: the request that got no answer, sent again).
    fn attempt_recovery(&mut self, now: Instant, repeat: Option<(u32, String)>) {
        if self.state == State::Connecting && self.current.is_none() {
            // Still the first connection: try it again.
            let (t, key) = match repeat {
                Some(r) => r,
                None => (self.next_transport(), self.next_key()),
            };
            self.post(now, t, Endpoint::Gateway, Purpose::Initial, key);
            return;
        }
        if !self.restarted_same
            && let (Some(_), Some(location)) = (self.current, self.location.clone())
        {
            self.restarted_same = true;
            let node = self.node.clone();
            self.restart(now, location, Purpose::Recover, node);
            return;
        }
        let (t, key) = match repeat {
            Some(r) => r,
            None => (self.next_transport(), self.next_key()),
        };
        self.post(now, t, Endpoint::Gateway, Purpose::Recover, key);
    }

    fn pending_timed_out(&mut self, now: Instant, p: Pending) {
        self.pending = None;
        let waited = if p.phase == Phase::Asking {
            "no answer"
        } else {
            "no media"
        };
        if !p.restart && Some(p.transport) != self.current {
            self.out.push_back(Command::CloseTransport {
                transport: p.transport,
            });
        }
        match p.purpose {
            Purpose::Initial => {
                self.schedule_retry(now, format!("connecting: {waited}"), None);
            }
            Purpose::Migrate(mode) => {
                self.emit(Event::Error {
                    code: "migration-timeout".into(),
                    status: 0,
                    message: format!("{}: {waited}", mode.as_str()),
                });
                self.switch = None;
                self.recover(now, format!("migration: {waited}"));
            }
            Purpose::Recover if p.restart => {
                // Step 1 did not work in time: the ticket through the gateway, now.
                self.attempt_recovery(now, None);
            }
            Purpose::Recover => {
                self.schedule_retry(now, format!("reconnect: {waited}"), None);
            }
        }
    }

    fn on_connected(&mut self, now: Instant, transport: u32) {
        let Some(p) = self.pending.clone() else {
            return;
        };
        if p.transport != transport || p.phase != Phase::Waiting {
            return;
        }
        // Publishers are through when the path works; players at their first frame — unless
        // video is off (degraded: no frame comes), and the first connection counts as soon as
        // the path works.
        if self.kind == Kind::Publish || p.purpose == Purpose::Initial || self.degraded {
            self.switched(now, p);
        }
    }

    fn on_restart_answered(&mut self, transport: u32) {
        let frames = self.total(transport);
        let Some(p) = self.pending.as_mut() else {
            return;
        };
        if p.transport != transport || !p.restart || p.phase != Phase::Asking {
            return;
        }
        p.phase = Phase::Waiting;
        p.frames_at_answer = frames;
        let location = p.location.clone();
        // The PATCH was answered by the session's node: DELETE and events go there now.
        if let Some(l) = location {
            self.location = Some(l.clone());
            self.out.push_back(Command::Subscribe { location: l });
        }
    }

    fn on_restart_failed(&mut self, now: Instant, transport: u32, status: u16, reason: String) {
        let Some(p) = self.pending.clone() else {
            return;
        };
        if p.transport != transport || !p.restart || p.phase != Phase::Asking {
            return;
        }
        self.pending = None;
        self.emit(Event::Error {
            code: "restart-failed".into(),
            status,
            message: reason,
        });
        match p.purpose {
            Purpose::Recover => self.attempt_recovery(now, None),
            _ => {
                self.switch = None;
                self.recover(now, format!("ICE restart at the target failed ({status})"));
            }
        }
    }

    fn on_frames(&mut self, now: Instant, transport: u32, total: u64) {
        if self.kind != Kind::Play {
            return;
        }
        let before = self.total(transport);
        if total <= before {
            return;
        }
        match self.totals.iter_mut().find(|(t, _)| *t == transport) {
            Some(e) => e.1 = total,
            None => self.totals.push((transport, total)),
        }
        if Some(transport) == self.current {
            self.frame_seen(now);
        }
        let Some(p) = self.pending.clone() else {
            return;
        };
        if p.transport != transport || p.phase != Phase::Waiting {
            return;
        }
        if p.restart && total <= p.frames_at_answer {
            return;
        }
        self.switched(now, p);
    }

    fn frame_seen(&mut self, now: Instant) {
        self.frames.push_back(now);
        while self
            .frames
            .front()
            .is_some_and(|t| now.saturating_duration_since(*t) > FRAME_HISTORY)
        {
            self.frames.pop_front();
        }
    }

    /// `p` carries media now.
    fn switched(&mut self, now: Instant, p: Pending) {
        self.pending = None;
        let old = self.current;
        if !p.restart {
            self.current = Some(p.transport);
            self.out.push_back(Command::Adopt {
                transport: p.transport,
            });
            self.totals.retain(|(t, _)| *t == p.transport);
            if self.kind == Kind::Play {
                // The new transport's first frame is the first the app sees.
                self.frame_seen(now);
            }
        }
        let from = self.node.clone();
        if let Some(l) = p.location.clone()
            && (self.location.as_ref() != Some(&l) || !p.restart)
        {
            self.location = Some(l.clone());
            if !p.restart {
                self.out.push_back(Command::Subscribe { location: l });
            }
        }
        if p.node.is_some() {
            self.node = p.node.clone();
        }
        self.attempt = 0;
        self.retry = None;
        let previous = self.state;
        match p.purpose {
            Purpose::Initial if old.is_none() => {
                self.lost_at = None;
                self.fresh = false;
                self.set_state(self.flowing(), None);
            }
            Purpose::Migrate(mode) => {
                if let Some(s) = self.switch.as_mut() {
                    s.done = Some(now);
                    s.to = self.node.clone().or(s.to.take());
                }
                let _ = mode;
                self.set_state(self.flowing(), None);
            }
            Purpose::Initial | Purpose::Recover => {
                let downtime = self
                    .lost_at
                    .take()
                    .map_or(0, |t| now.saturating_duration_since(t).as_millis() as u64);
                let how = if p.restart {
                    Mode::IceRestart
                } else {
                    Mode::Reconnect
                };
                self.set_state(self.flowing(), None);
                if previous != State::Connecting || old.is_some() {
                    self.emit(Event::Reconnected {
                        downtime_ms: downtime,
                        how,
                        resumed: !self.fresh,
                        node: self.node.clone(),
                    });
                }
                self.fresh = false;
                let _ = from;
            }
        }
    }

    fn on_lost(&mut self, now: Instant, transport: u32, cause: LossCause) {
        if Some(transport) != self.current {
            return;
        }
        if let Some(p) = &self.pending {
            // A switch is under way; its own deadline decides.
            if p.purpose != Purpose::Initial {
                return;
            }
        }
        if !self.is_flowing() {
            return;
        }
        let reason = match cause {
            LossCause::Ice => "ICE disconnected",
            LossCause::NodeUnreachable => "node unreachable",
            LossCause::Stalled => "media stalled and the node does not answer",
        };
        self.recover(now, reason.into());
    }

    fn on_migrate(&mut self, now: Instant, m: MigrateEvent) {
        if !self.is_flowing() {
            // Mid-recovery: the ticket through the gateway finds the session wherever it went.
            if m.mode == Mode::Edge {
                self.location = Some(m.location.clone());
                self.node = Some(m.target.clone());
            }
            return;
        }
        let from = m.from.clone().or_else(|| self.node.clone());
        let window_start = match m.mode {
            Mode::Edge => now.checked_sub(self.cfg.edge_lookback).unwrap_or(now),
            _ => now,
        };
        self.switch = Some(Switch {
            mode: m.mode,
            from,
            to: Some(m.target.clone()),
            started: now,
            window_start,
            done: None,
        });
        self.set_state(State::Migrating, None);
        match m.mode {
            Mode::Edge => {
                // The edge moved the session already: follow its URL and events.
                self.location = Some(m.location.clone());
                self.node = Some(m.target);
                self.out.push_back(Command::Subscribe {
                    location: m.location,
                });
                if let Some(s) = self.switch.as_mut() {
                    s.done = Some(now);
                }
                self.set_state(self.flowing(), None);
            }
            Mode::IceRestart => {
                self.restart(
                    now,
                    m.location,
                    Purpose::Migrate(Mode::IceRestart),
                    Some(m.target),
                );
            }
            Mode::Reconnect => {
                if let Some(t) = m.ticket {
                    self.store_ticket(Some(t));
                }
                let t = self.next_transport();
                let key = self.next_key();
                self.post(
                    now,
                    t,
                    Endpoint::Url(m.location),
                    Purpose::Migrate(Mode::Reconnect),
                    key,
                );
            }
        }
    }

    /// Emits `migrated` for the switch whose window just closed.
    fn report_switch(&mut self) {
        let Some(s) = self.switch.take() else {
            return;
        };
        let Some(done) = s.done else {
            return;
        };
        let first_frame_ms = done.saturating_duration_since(s.started).as_millis() as u64;
        let blackout_ms = match (self.kind, s.mode) {
            (Kind::Play, _) => {
                let end = done + self.cfg.settle;
                let mut largest = Duration::ZERO;
                let mut prev: Option<Instant> = None;
                for &t in &self.frames {
                    if let Some(p) = prev
                        && t > s.window_start
                        && p <= end
                    {
                        largest = largest.max(t.min(end) - p);
                    }
                    prev = Some(t);
                }
                largest.as_millis() as u64
            }
            (Kind::Publish, Mode::Edge) => 0,
            (Kind::Publish, _) => first_frame_ms,
        };
        self.emit(Event::Migrated {
            mode: s.mode,
            from: s.from,
            to: s.to,
            blackout_ms,
            first_frame_ms,
        });
    }

    fn on_throughput(&mut self, now: Instant, bps: u64, loss: f64) {
        if !self.is_flowing() {
            return;
        }
        // A player's bitrate is what its publisher sends (a still scene is cheap), and with video
        // off only loss tells how the network is; a publisher's is what its path carries.
        let bad = match self.kind {
            Kind::Publish if !self.degraded => {
                bps < self.cfg.min_video_bps || loss > self.cfg.max_loss
            }
            _ => loss > self.cfg.max_loss,
        };
        if bad {
            self.bad_run += 1;
            self.good_run = 0;
        } else {
            self.bad_run = 0;
            self.good_run += 1;
        }
        if !self.degraded && self.bad_run >= self.cfg.bad_samples {
            if self
                .restored_at
                .is_some_and(|t| now.saturating_duration_since(t) < FLAP_WINDOW)
            {
                self.probe_after = (self.probe_after * 2).min(MAX_PROBE_AFTER);
            }
            self.degraded = true;
            self.degraded_at = Some(now);
            self.bad_run = 0;
            self.out.push_back(Command::SetVideo { enabled: false });
            self.emit(Event::Degraded {
                active: true,
                bps,
                loss,
            });
            self.set_state(State::Degraded, None);
        } else if self.degraded
            && !bad
            && self
                .degraded_at
                .is_some_and(|t| now.saturating_duration_since(t) >= self.probe_after)
        {
            self.degraded = false;
            self.restored_at = Some(now);
            self.good_run = 0;
            self.out.push_back(Command::SetVideo { enabled: true });
            self.emit(Event::Degraded {
                active: false,
                bps,
                loss,
            });
            self.set_state(State::Connected, None);
        } else if !self.degraded
            && self
                .restored_at
                .is_some_and(|t| now.saturating_duration_since(t) >= FLAP_WINDOW)
        {
            // Video held: the next degradation starts from the configured wait again.
            self.probe_after = self.cfg.probe_after;
            self.restored_at = None;
        }
    }

    fn close(&mut self) {
        if let Some(l) = self.location.clone() {
            self.out.push_back(Command::Delete { location: l });
        }
        self.store_ticket(None);
        self.finish(State::Closed, "closed".into());
    }

    /// Ends the machine: every transport closed, nothing pending.
    fn finish(&mut self, state: State, reason: String) {
        let mut ts: Vec<u32> = self.totals.iter().map(|(t, _)| *t).collect();
        ts.extend(self.current);
        ts.extend(self.pending.as_ref().map(|p| p.transport));
        ts.extend(
            self.retry
                .as_ref()
                .and_then(|r| r.repeat.as_ref())
                .map(|r| r.0),
        );
        self.pending = None;
        self.retry = None;
        self.switch = None;
        ts.sort_unstable();
        ts.dedup();
        for transport in ts {
            self.out.push_back(Command::CloseTransport { transport });
        }
        self.current = None;
        self.set_state(state, Some(reason));
    }
}
