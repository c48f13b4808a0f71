//! Viewers of a stream published on another node: the request waits in the core, not in the
//! driver, until the stream's relay is offered here.
//!
//! [`Node::request_session`] answers at once where it can. A viewer of a stream that is not
//! here but that the directory places on another node subscribes the relay from that origin
//! and waits; the core answers it ([`Node::poll_answer`]) as soon as the origin's offer made
//! the stream playable, or — no offer within [`RELAY_WAIT`] — with the 404 a viewer of an
//! unknown stream gets. A recording that starts here waits the same way
//! ([`Node::request_stream`]). The deterministic simulation drives this path as the HTTP API
//! does.

mod book;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use ferry_proto::StreamId;

use super::Node;
use crate::node::signal::{SessionKind, SignalError};
pub(super) use book::Waiting;
pub use book::{Answer, Requested};
use book::{Parked, Want};
use ferry_proto::api::TicketClaims;

/// How long a viewer's request waits for the relay of a stream published elsewhere.
pub const RELAY_WAIT: Duration = Duration::from_millis(1500);

/// While a request waits, how often the relay's subscription is sent again (it or the origin's
/// offer was lost; the relay's own refresh comes once a second).
pub const SUBSCRIBE_RETRY: Duration = Duration::from_millis(200);

impl Node {
    /// [`Node::create_session`], except for a viewer of a stream published on another node
    /// (the directory's origin, [`Node::repoint_relays`]): that one subscribes the relay and
    /// waits ([`Requested::Waiting`]).
    pub fn request_session(
        &mut self,
        now: Instant,
        kind: SessionKind,
        stream: &StreamId,
        offer: &str,
        key: Option<&str>,
        ticket: Option<&TicketClaims>,
    ) -> Result<Requested, SignalError> {
        let retried = match key {
            Some(k) => self
                .idempotent_answer(now, k, kind, stream, offer)?
                .is_some(),
            None => false,
        };
        let origin = match kind {
            SessionKind::View if !retried && !self.has_stream(stream) => self.relay_origin(stream),
            _ => None,
        };
        let Some(origin) = origin else {
            return self
                .create_session(now, kind, stream, offer, key, ticket)
                .map(Requested::Answer);
        };
        tracing::debug!(%stream, %origin, "viewer waits for the stream's relay");
        let want = Want::Viewer {
            offer: offer.to_owned(),
            key: key.map(str::to_owned),
            ticket: ticket.cloned(),
        };
        Ok(Requested::Waiting(self.park(now, stream, origin, want)))
    }

    /// Brings `stream` here (a recording starts): `None` when it is here or no other node is
    /// known to publish it; else the id under which [`Node::poll_answer`] says whether it came
    /// within [`RELAY_WAIT`].
    pub fn request_stream(&mut self, now: Instant, stream: &StreamId) -> Option<u64> {
        if self.has_stream(stream) {
            return None;
        }
        let origin = self.relay_origin(stream)?;
        Some(self.park(now, stream, origin, Want::Stream))
    }

    /// Subscribes the relay of `stream` for a viewer migrating in, asking again every
    /// [`SUBSCRIBE_RETRY`] until the offer comes (for at most [`RELAY_WAIT`]).
    pub(super) fn subscribe_relay_for_import(
        &mut self,
        now: Instant,
        stream: &StreamId,
        origin: SocketAddr,
    ) {
        self.park(now, stream, origin, Want::Import);
    }

    fn park(&mut self, now: Instant, stream: &StreamId, origin: SocketAddr, want: Want) -> u64 {
        self.subscribe_relay(now, stream, origin);
        let w = &mut self.waiting;
        let id = w.next_id;
        w.next_id += 1;
        let ask_again = now + SUBSCRIBE_RETRY;
        w.parked.push(Parked {
            id,
            stream: stream.clone(),
            want,
            until: now + RELAY_WAIT,
            ask_again,
        });
        self.next_timeout = Some(self.next_timeout.map_or(ask_again, |n| n.min(ask_again)));
        id
    }

    /// The answer to a request that waited ([`Requested::Waiting`], [`Node::request_stream`]),
    /// in the order they came.
    pub fn poll_answer(&mut self) -> Option<(u64, Answer)> {
        self.waiting.answers.pop_front()
    }

    /// Requests waiting for a relay.
    pub fn waiting_requests(&self) -> usize {
        self.waiting.parked.len()
    }

    /// Where a stream not here is published, if the directory says and a relay can bring it.
    fn relay_origin(&self, stream: &StreamId) -> Option<SocketAddr> {
        self.config.cluster_key.as_ref()?;
        let me = self
            .config
            .cluster_addr
            .or(self.config.candidates.first().copied());
        self.origins.get(stream).copied().filter(|o| Some(*o) != me)
    }

    /// Answers the requests whose stream became playable, and those that waited
    /// [`RELAY_WAIT`] in vain (404); when it wants to look again.
    pub(super) fn answer_waiting(&mut self, now: Instant) -> Option<Instant> {
        if self.waiting.parked.is_empty() {
            return None;
        }
        let parked = std::mem::take(&mut self.waiting.parked);
        let mut next: Option<Instant> = None;
        for mut p in parked {
            if !self.has_stream(&p.stream) && now < p.until {
                if now >= p.ask_again {
                    p.ask_again = now + SUBSCRIBE_RETRY;
                    self.ask_relay_again(&p.stream);
                }
                let t = p.until.min(p.ask_again);
                next = Some(next.map_or(t, |n| n.min(t)));
                self.waiting.parked.push(p);
                continue;
            }
            if matches!(p.want, Want::Import) {
                // Nobody asked: the relay's own refresh goes on.
                continue;
            }
            // Playable now, or not in time: the node answers (and counts) either.
            if self.has_stream(&p.stream) {
                self.out.metrics.relay_waits_answered += 1;
            } else {
                tracing::info!(stream = %p.stream, "no relay offer in time: 404");
                self.out.metrics.relay_waits_timed_out += 1;
            }
            let answer = match p.want {
                Want::Viewer { offer, key, ticket } => Answer::Session(self.create_session(
                    now,
                    SessionKind::View,
                    &p.stream,
                    &offer,
                    key.as_deref(),
                    ticket.as_ref(),
                )),
                Want::Stream => Answer::Stream(self.has_stream(&p.stream)),
                Want::Import => continue,
            };
            self.waiting.answers.push_back((p.id, answer));
        }
        next
    }
}
