//! The driver's side of TURN relays (`turn`, `relay_only`, `ice_servers`): a transport first
//! allocates on a relay ([`crate::turn`]) and holds its POST until then; from there on every
//! datagram of its peer goes through the relay and what the relay hands back reaches the peer
//! as coming from the node. The node is ICE-lite: it answers the checks from the relayed
//! address like any other (a peer-reflexive candidate), so the peer needs no relay candidates
//! of its own.
//!
//! A `turn-drain` event that names the current transport's relay moves it
//! ([`crate::turn_move`]): fresh relays, an allocation on the new primary, an ICE restart of
//! the same peer through it, then the old relay is deallocated; `Event::RelayMoved`, or an
//! error event `relay-move-failed` and the old relay stays.

use std::net::SocketAddr;
use std::time::Instant;

use super::transport::Transport;
use super::{Driver, Msg};
use crate::fsm::{Event, Input, LossCause};
use crate::signalling::{self, Refusal};
use crate::turn::{self, Gathered, Progress, Relay, RelayError};
use crate::turn_move::{Phase, RelayMove, Retiring, Step};

impl Transport {
    /// Whether its datagrams come through relays (and only through them).
    pub(super) fn relayed(&self) -> bool {
        self.relay.is_some() || self.moving.as_ref().is_some_and(|m| m.next().is_some())
    }

    /// A datagram from `from` while relayed: a relay's answer, or what a relay hands over
    /// from the node, which goes to the peer. Through a relay, nothing is taken from anywhere
    /// else.
    pub(super) fn receive_relayed(&mut self, now: Instant, from: SocketAddr, data: &mut [u8]) {
        let Transport {
            peer,
            relay,
            moving,
            retiring,
            ..
        } = self;
        let current = relay.as_mut().filter(|r| r.server() == from);
        let is_current = current.is_some();
        let client = match current {
            Some(r) => &mut r.client,
            None => match (
                moving.as_mut().and_then(RelayMove::next_mut),
                retiring.as_mut(),
            ) {
                (Some(n), _) if n.server() == from => &mut n.client,
                (_, Some(r)) if r.relay.server() == from => &mut r.relay.client,
                _ => return,
            },
        };
        if let Some((node, payload)) = client.handle_datagram(now, data) {
            if is_current
                && payload.first().is_some_and(|b| *b > 3)
                && let Some(r) = retiring.as_mut()
            {
                r.media_moved();
            }
            peer.handle_datagram(now, node, payload);
        }
    }

    /// When the relays' timers (and a move's deadline) want to run.
    pub(super) fn relay_timeout(&self) -> Option<Instant> {
        [
            self.relay.as_ref().and_then(Relay::poll_timeout),
            self.moving.as_ref().and_then(RelayMove::poll_timeout),
            self.retiring.as_ref().and_then(Retiring::poll_timeout),
        ]
        .into_iter()
        .flatten()
        .min()
    }
}

impl Driver {
    /// Gathers relays for transport `t` off the runtime: the app's, then the gateway's
    /// (fetched once per half credential lifetime), resolved.
    pub(super) fn gather(&mut self, t: u32) {
        let Some(tr) = self.transports.get_mut(&t) else {
            return;
        };
        if tr.gathering {
            return;
        }
        tr.gathering = true;
        self.spawn_gather(true, move |g| Msg::Relays(t, g));
    }

    /// The app's relays and the gateway's (`cached`: those fetched earlier if still fresh),
    /// resolved off the runtime (blocking HTTP and DNS), to the driver as `done`.
    fn spawn_gather(&mut self, cached: bool, done: impl FnOnce(Gathered) -> Msg + Send + 'static) {
        let setup = self.s.relays.clone();
        if self.relay_user.is_empty() {
            self.relay_user = setup
                .user
                .clone()
                .unwrap_or_else(|| format!("u-{:010x}", rand::random::<u64>() >> 24));
        }
        let cached = self
            .relay_cache
            .as_ref()
            .filter(|(_, until)| cached && Instant::now() < *until)
            .map(|(servers, _)| servers.clone());
        let (base, token, stream) = (
            self.s.base.clone(),
            self.s.token.clone(),
            self.s.stream.clone(),
        );
        let user = self.relay_user.clone();
        let tx = self.tx.clone();
        tokio::task::spawn_blocking(move || {
            let mut servers = setup.ice_servers.clone();
            let (mut fetched, mut error) = (None, None);
            if setup.fetch() {
                match cached {
                    Some(c) => servers.extend(c),
                    None => {
                        match turn::fetch_credentials(&base, token.as_deref(), &user, &stream) {
                            Ok((list, ttl)) => {
                                servers.extend(list.iter().cloned());
                                fetched = Some((list, ttl));
                            }
                            Err(e) => error = Some(e),
                        }
                    }
                }
            }
            let (candidates, skipped) = turn::resolve(&servers);
            let _ = tx.send(done(Gathered {
                candidates,
                fetched,
                error,
                skipped,
            }));
        });
    }

    pub(super) fn relays_gathered(&mut self, t: u32, g: Gathered, now: Instant) {
        if let Some((servers, ttl)) = g.fetched {
            self.relay_cache = Some((servers, now + ttl / 2));
        }
        if let Some(e) = &g.error {
            self.turn_error("turn-unavailable", e);
        }
        let seed = self.s.seed ^ u64::from(t).wrapping_mul(0xa076_1d64_78bd_642f);
        let Some(tr) = self.transports.get_mut(&t) else {
            return;
        };
        tr.gathering = false;
        match Relay::start(g.candidates, seed, now) {
            Some(r) => {
                tr.relay = Some(r);
                tr.flush_relay();
            }
            None => {
                let e = g.error.unwrap_or_else(|| {
                    RelayError::NoRelay(if g.skipped.is_empty() {
                        "none configured".into()
                    } else {
                        g.skipped.join("; ")
                    })
                });
                self.relay_gave_up(t, e, false);
            }
        }
    }

    /// Transport `t`'s relays: the current one allocated (the POST goes), failed over,
    /// exhausted or lost; a move's steps; the old relay of a move deallocated.
    pub(super) fn relay_progress(&mut self, t: u32, now: Instant) {
        self.move_progress(t, now);
        let Some(tr) = self.transports.get_mut(&t) else {
            return;
        };
        let Some(r) = tr.relay.as_mut() else {
            return;
        };
        match r.progress(now) {
            Progress::Pending => {}
            Progress::Allocated => {
                // An earlier transport's relay failure no longer says why the session ends.
                self.s
                    .shared
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .relay_error = None;
                // Datagrams the peer made while allocating (none before its answer).
                while let Some((to, d)) = tr.peer.poll_transmit() {
                    tr.send(now, to, &d);
                }
                if let Some(req) = tr.waiting.take() {
                    self.post(t, req);
                }
            }
            Progress::Exhausted(e) => {
                tr.relay = None;
                self.relay_gave_up(t, e, true);
            }
            Progress::Lost(e) => {
                tr.relay = None;
                tr.direct = !tr.relay_only;
                if tr.moving.is_some() {
                    self.fail_move(t, 0, format!("the relay in use was lost: {e}"), now);
                }
                self.turn_error("turn-lost", &e);
                self.input(Input::Lost {
                    transport: t,
                    cause: LossCause::Ice,
                });
            }
        }
    }

    /// No relay for transport `t`: relay only, its POST fails with why (and the session
    /// remembers it for [`crate::SdkError::Relay`]); else it goes on directly.
    fn relay_gave_up(&mut self, t: u32, e: RelayError, report: bool) {
        let relay_only = self.s.relays.relay_only;
        if report || !matches!(e, RelayError::Credentials { .. }) {
            self.turn_error("turn-unavailable", &e);
        }
        let Some(tr) = self.transports.get_mut(&t) else {
            return;
        };
        let waiting = tr.waiting.take();
        if relay_only {
            self.s
                .shared
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .relay_error = Some(e.clone());
            if waiting.is_some() {
                self.input(Input::PostFailed {
                    transport: t,
                    status: e.status(),
                    reason: e.to_string(),
                });
            }
            return;
        }
        tr.direct = true;
        if let Some(req) = waiting {
            self.post(t, req);
        }
    }

    /// An SDK error event about relays (as the browser SDK's `turn-unavailable`).
    pub(super) fn turn_error(&self, code: &str, e: &RelayError) {
        tracing::warn!(code, error = %e, "TURN");
        let status = match e {
            RelayError::Credentials { status, .. } => *status,
            _ => 0,
        };
        let _ = self.s.events.send(Event::Error {
            code: code.into(),
            status,
            message: e.to_string(),
        });
    }

    /// `turn-drain`: the relays the node names drain. Fresh relays are asked for from now on;
    /// the current transport moves if its relay is one of them (one move at a time, not while
    /// the session restarts ICE itself).
    pub(super) fn relays_drained(&mut self, drained: Vec<String>, now: Instant) {
        self.relay_cache = None;
        let located = self.s.machine.location().is_some();
        let Some(t) = self.current else {
            return;
        };
        let Some(tr) = self.transports.get_mut(&t) else {
            return;
        };
        let Some(r) = tr.relay.as_ref().filter(|r| r.is_allocated()) else {
            return;
        };
        if !located
            || tr.moving.is_some()
            || tr.restarting
            || !turn::drains(&r.uri, r.server(), &drained)
        {
            return;
        }
        tracing::info!(relay = %r.uri, ?drained, "TURN relay drains: moving");
        tr.moving = Some(RelayMove::new(drained, r.uri.clone(), r.server(), now));
        self.spawn_gather(false, move |g| Msg::MoveRelays(t, g));
    }

    /// Fresh relays for transport `t`'s move: allocate on the new primary.
    pub(super) fn move_gathered(&mut self, t: u32, g: Gathered, now: Instant) {
        if let Some((servers, ttl)) = g.fetched {
            self.relay_cache = Some((servers, now + ttl / 2));
        }
        // Not the first allocation's seed: other transaction ids on the new relay.
        let seed = (self.s.seed ^ u64::from(t).wrapping_mul(0x2d35_8dcc_aa6c_78a5))
            .wrapping_add(self.relay_moves.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let Some(m) = self
            .transports
            .get_mut(&t)
            .and_then(|tr| tr.moving.as_mut())
            .filter(|m| m.phase() == Phase::Gathering)
        else {
            return;
        };
        if let Some(e) = g.error {
            let status = match &e {
                RelayError::Credentials { status, .. } => *status,
                _ => 0,
            };
            self.fail_move(t, status, e.to_string(), now);
            return;
        }
        if let Step::Failed(why) = m.gathered(g.candidates, seed, now) {
            self.fail_move(t, 0, why, now);
        }
    }

    /// Transport `t`'s move: the new relay allocated (restart through it), the path through
    /// it up (switch), or a failure; and the old relay's deallocation.
    fn move_progress(&mut self, t: u32, now: Instant) {
        let Some(tr) = self.transports.get_mut(&t) else {
            return;
        };
        if let Some(r) = tr.retiring.as_mut()
            && !r.progress(now)
        {
            tracing::debug!(relay = %r.relay.uri, "old TURN relay released");
            tr.retiring = None;
        }
        let Some(m) = tr.moving.as_mut() else {
            return;
        };
        match m.progress(now) {
            Step::Wait => {}
            Step::Restart => return self.move_restart(t),
            Step::Failed(why) => return self.fail_move(t, 0, why, now),
        }
        let connected = tr.peer.ice().is_some_and(|i| i.is_connected());
        let Some((next, ms)) = m.finish(connected, now) else {
            return;
        };
        let Some(m) = tr.moving.take() else {
            return;
        };
        if let Some(mut prev) = tr.retiring.take() {
            // A move right after another: the relay before the last one goes at once.
            prev.relay.client.close(now);
            let server = prev.relay.server();
            while let Some(d) = prev.relay.client.poll_transmit() {
                let _ = tr.socket.try_send_to(&d, server);
            }
        }
        let to = next.uri.clone();
        tr.retiring = tr.relay.replace(next).map(|old| Retiring::new(old, now));
        tracing::info!(from = %m.from, %to, ms, "moved off a draining TURN relay");
        self.relay_moves += 1;
        let _ = self.s.events.send(Event::RelayMoved {
            drained: m.drained,
            from: m.from,
            to,
            ms,
        });
    }

    /// The new relay is allocated: the same peer ICE-restarts (PATCH at the session's URL);
    /// its checks will go through the new relay.
    fn move_restart(&mut self, t: u32) {
        let Some(location) = self.s.machine.location().map(str::to_owned) else {
            return self.fail_move(t, 0, "the session has no URL".into(), Instant::now());
        };
        let Some(tr) = self.transports.get_mut(&t) else {
            return;
        };
        let frag = tr.peer.ice_restart();
        let tx = self.tx.clone();
        tokio::task::spawn_blocking(move || {
            let r = signalling::patch_restart(&location, &frag);
            let _ = tx.send(Msg::MoveRestarted(t, r));
        });
    }

    /// The node answered the move's ICE restart.
    pub(super) fn move_restarted(&mut self, t: u32, result: Result<String, Refusal>, now: Instant) {
        let Some(tr) = self.transports.get_mut(&t) else {
            return;
        };
        let Some(m) = tr
            .moving
            .as_mut()
            .filter(|m| m.phase() == Phase::Restarting)
        else {
            return;
        };
        let (status, why) = match result {
            Ok(frag) => match tr.peer.apply_restart_answer(&frag) {
                Ok(()) => {
                    m.restart_answered(now);
                    return;
                }
                Err(e) => (502, format!("unusable restart answer: {e}")),
            },
            Err((status, reason)) => (status, format!("ICE restart refused: {reason}")),
        };
        self.fail_move(t, status, why, now);
    }

    /// Gives transport `t`'s move up (the new relay is deallocated, the old one stays) and
    /// says why (`relay-move-failed`).
    pub(super) fn fail_move(&mut self, t: u32, status: u16, message: String, now: Instant) {
        let Some(tr) = self.transports.get_mut(&t) else {
            return;
        };
        let Some(mut m) = tr.moving.take() else {
            return;
        };
        if let Some(mut next) = m.abandon(now) {
            let server = next.server();
            while let Some(d) = next.client.poll_transmit() {
                let _ = tr.socket.try_send_to(&d, server);
            }
        }
        tracing::warn!(relay = %m.from, %message, "TURN relay move failed");
        let _ = self.s.events.send(Event::Error {
            code: "relay-move-failed".into(),
            status,
            message,
        });
    }
}
