//! Moving a transport off a draining TURN relay (the node's `turn-drain` event), make before
//! break, as the browser SDK does: fresh relays from the gateway (which hands out no draining
//! one), an allocation on the new primary while the old relay keeps carrying the media, an
//! ICE restart of the same peer whose checks go through the new relay (the ICE-lite node
//! switches its path at the first nominating check from the new relayed address), then the
//! rest of the traffic; the old relay is deallocated once media came through the new one.
//! DTLS and SRTP go on untouched. A move that fails at any step leaves the old relay in use.
//!
//! [`RelayMove`] and [`Retiring`] decide; the driver (`driver/relay.rs`) owns the sockets, the
//! HTTP requests and the clock.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use ferry_rtc::turn::TurnState;

use crate::turn::{Candidate, Progress, Relay, drains};

/// From the restart answer to a working path through the new relay, at most (the browser
/// SDK's `RELAY_MOVE_WAIT`).
pub(crate) const MOVE_WAIT: Duration = Duration::from_secs(5);
/// After the switch, the old relay still hands over what was in flight, until media came
/// through the new one or for this long.
pub(crate) const RETIRE_GRACE: Duration = Duration::from_secs(1);
/// A deallocation that is not answered within this long is given up on (the allocation then
/// expires on the relay by itself).
pub(crate) const CLOSE_WAIT: Duration = Duration::from_secs(3);

/// Where a move is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Fresh relays are being fetched from the gateway.
    Gathering,
    /// Allocating on the new relay (failing over to its backups).
    Allocating,
    /// The ICE-restart PATCH is out.
    Restarting,
    /// The restart is answered: checks go through the new relay, the rest through the old one.
    Checking,
}

/// What the driver does next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Step {
    /// Nothing yet.
    Wait,
    /// The new relay is allocated: ICE-restart the peer (PATCH) through it.
    Restart,
    /// The move failed (`relay-move-failed`): the old relay stays.
    Failed(String),
}

/// One transport's move off a draining relay.
#[derive(Debug)]
pub(crate) struct RelayMove {
    /// The relays the node said drain.
    pub drained: Vec<String>,
    /// The relay being left.
    pub from: String,
    /// Its address.
    from_server: SocketAddr,
    started: Instant,
    phase: Phase,
    /// Checking: when the move is given up on.
    deadline: Option<Instant>,
    /// The relay being moved to.
    next: Option<Relay>,
}

/// Whether the peer's datagram `d` is an ICE check (STUN, RFC 7983's first byte 0–3).
fn is_stun(d: &[u8]) -> bool {
    d.first().is_some_and(|b| *b <= 3)
}

impl RelayMove {
    /// A move off `from` (a relay among `drained`, at `from_server`), starting with fresh
    /// relays.
    pub fn new(drained: Vec<String>, from: String, from_server: SocketAddr, now: Instant) -> Self {
        RelayMove {
            drained,
            from,
            from_server,
            started: now,
            phase: Phase::Gathering,
            deadline: None,
            next: None,
        }
    }

    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// The relay being moved to, once allocating.
    pub fn next(&self) -> Option<&Relay> {
        self.next.as_ref()
    }

    pub fn next_mut(&mut self) -> Option<&mut Relay> {
        self.next.as_mut()
    }

    /// The relays fetched: allocate on the first that is neither draining nor the one left
    /// (the rest are its backups).
    pub fn gathered(&mut self, candidates: Vec<Candidate>, seed: u64, now: Instant) -> Step {
        if self.phase != Phase::Gathering {
            return Step::Wait;
        }
        let fresh: Vec<Candidate> = candidates
            .into_iter()
            .filter(|c| {
                c.uri != self.from
                    && c.server != self.from_server
                    && !drains(&c.uri, c.server, &self.drained)
            })
            .collect();
        match Relay::start(fresh, seed, now) {
            Some(r) => {
                self.next = Some(r);
                self.phase = Phase::Allocating;
                Step::Wait
            }
            None => Step::Failed("no other relay to move to".into()),
        }
    }

    /// Runs the new relay's timers and reads its events; gives up on a path that does not
    /// come up in time.
    pub fn progress(&mut self, now: Instant) -> Step {
        let Some(next) = self.next.as_mut() else {
            return Step::Wait;
        };
        match next.progress(now) {
            Progress::Allocated if self.phase == Phase::Allocating => {
                self.phase = Phase::Restarting;
                return Step::Restart;
            }
            Progress::Allocated | Progress::Pending => {}
            Progress::Exhausted(e) | Progress::Lost(e) => return Step::Failed(e.to_string()),
        }
        if self.deadline.is_some_and(|d| d <= now) {
            return Step::Failed(format!(
                "no path through {} within {} ms",
                next.uri,
                MOVE_WAIT.as_millis()
            ));
        }
        Step::Wait
    }

    /// The node answered the restart and the peer took its credentials: checks go through
    /// the new relay from now on.
    pub fn restart_answered(&mut self, now: Instant) {
        if self.phase == Phase::Restarting {
            self.phase = Phase::Checking;
            self.deadline = Some(now + MOVE_WAIT);
        }
    }

    /// Whether the peer's datagram `d` goes through the new relay (an ICE check after the
    /// restart); everything else goes through the old one until the switch.
    pub fn routes(&self, d: &[u8]) -> bool {
        self.phase == Phase::Checking && is_stun(d)
    }

    /// When [`Self::progress`] wants to run.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let relay = self.next.as_ref().and_then(Relay::poll_timeout);
        match (relay, self.deadline) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The path through the new relay works (`ice_connected`: the restarted agent got an
    /// answer to a check that went through it): the new relay, and how long the move took.
    pub fn finish(&mut self, ice_connected: bool, now: Instant) -> Option<(Relay, u64)> {
        if self.phase != Phase::Checking
            || !ice_connected
            || !self.next.as_ref().is_some_and(Relay::is_allocated)
        {
            return None;
        }
        let ms = now.saturating_duration_since(self.started).as_millis() as u64;
        self.next.take().map(|r| (r, ms))
    }

    /// Gives the move up: the new relay, deallocated (its datagrams are flushed by the
    /// caller).
    pub fn abandon(&mut self, now: Instant) -> Option<Relay> {
        let mut next = self.next.take()?;
        next.client.close(now);
        Some(next)
    }
}

/// The relay a transport moved off: it hands over what is still in flight, then deallocates.
#[derive(Debug)]
pub(crate) struct Retiring {
    pub relay: Relay,
    since: Instant,
    /// Media came through the new relay since.
    media_moved: bool,
    /// When the deallocation was sent.
    closing: Option<Instant>,
}

impl Retiring {
    pub fn new(relay: Relay, now: Instant) -> Self {
        Retiring {
            relay,
            since: now,
            media_moved: false,
            closing: None,
        }
    }

    /// Media (not a check) came through the new relay: nothing more comes through this one.
    pub fn media_moved(&mut self) {
        self.media_moved = true;
    }

    /// Still handing over what arrives through it (not deallocating yet).
    pub fn is_open(&self) -> bool {
        self.closing.is_none()
    }

    /// Deallocates once media came through the new relay ([`Self::media_moved`]) or the
    /// grace is over; false when it is done (deallocated, or the deallocation went unanswered)
    /// and can be dropped.
    pub fn progress(&mut self, now: Instant) -> bool {
        let c = &mut self.relay.client;
        if c.poll_timeout().is_some_and(|t| t <= now) {
            c.handle_timeout(now);
        }
        while c.poll_event().is_some() {}
        match self.closing {
            None if self.media_moved || now >= self.since + RETIRE_GRACE => {
                c.close(now);
                self.closing = Some(now);
                !matches!(c.state(), TurnState::Closed | TurnState::Failed)
            }
            None => true,
            Some(at) => {
                !matches!(c.state(), TurnState::Closed | TurnState::Failed) && now < at + CLOSE_WAIT
            }
        }
    }

    /// When [`Self::progress`] wants to run.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let t = self.relay.client.poll_timeout();
        let grace = self.is_open().then_some(self.since + RETIRE_GRACE);
        let close = self.closing.map(|at| at + CLOSE_WAIT);
        [t, grace, close].into_iter().flatten().min()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use ferry_rtc::stun::{Class, MAX_MESSAGE_LEN, Method, StunMessage, StunWriter};
    use ferry_rtc::turn::long_term_key;

    use super::*;
    use crate::turn::{IceServer, resolve};

    const REALM: &str = "ferry";

    fn candidates(urls: &[&str]) -> Vec<Candidate> {
        resolve(&[IceServer {
            urls: urls.iter().map(|u| (*u).to_owned()).collect(),
            username: "1:u".into(),
            credential: "c".into(),
        }])
        .0
    }

    fn at(port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    fn drained() -> Vec<String> {
        vec!["turn:127.0.0.1:3478?transport=udp".into()]
    }

    /// A relay that answers like coturn: 401 with a nonce, then success to everything
    /// authenticated. Returns the methods it answered with success.
    fn answer(relay: &mut Relay, now: Instant) -> Vec<(Method, Option<u32>)> {
        let key = long_term_key("1:u", REALM, "c");
        let mut done = Vec::new();
        while let Some(d) = relay.client.poll_transmit() {
            let msg = StunMessage::parse_turn(&d).unwrap();
            let id = *msg.transaction_id();
            let mut buf = vec![0u8; MAX_MESSAGE_LEN];
            let n = if msg.has_integrity() {
                let mut w = StunWriter::new(&mut buf, Class::Success, msg.method(), &id).unwrap();
                match msg.method() {
                    Method::Allocate => {
                        w.xor_relayed_address("127.0.0.1:50001".parse().unwrap())
                            .unwrap()
                            .lifetime(600)
                            .unwrap();
                    }
                    Method::Refresh => {
                        w.lifetime(msg.lifetime().unwrap()).unwrap();
                    }
                    _ => {}
                }
                done.push((msg.method(), msg.lifetime()));
                w.message_integrity(&key).unwrap().fingerprint().unwrap();
                w.finish()
            } else {
                let mut w = StunWriter::new(&mut buf, Class::Error, msg.method(), &id).unwrap();
                w.error_code(401, "Unauthorized")
                    .unwrap()
                    .realm(REALM)
                    .unwrap()
                    .nonce("n1")
                    .unwrap()
                    .fingerprint()
                    .unwrap();
                w.finish()
            };
            buf.truncate(n);
            assert_eq!(relay.client.handle_datagram(now, &mut buf), None);
        }
        done
    }

    /// A move whose new relay (`turn:127.0.0.1:3479`) allocated; the restart is asked for.
    fn allocated(t0: Instant) -> RelayMove {
        let mut m = RelayMove::new(
            drained(),
            "turn:127.0.0.1:3478?transport=udp".into(),
            at(3478),
            t0,
        );
        m.gathered(candidates(&["turn:127.0.0.1:3479"]), 1, t0);
        answer(m.next_mut().unwrap(), t0);
        assert_eq!(m.progress(t0), Step::Restart);
        assert_eq!(m.phase(), Phase::Restarting);
        m
    }

    #[test]
    fn the_draining_relay_and_the_one_left_are_not_moved_to() {
        let t0 = Instant::now();
        let mut m = RelayMove::new(drained(), "turn:127.0.0.1:3480".into(), at(3480), t0);
        let step = m.gathered(
            candidates(&[
                "turn:127.0.0.1:3478?transport=udp",
                "turn:127.0.0.1:3480",
                "turn:127.0.0.1:3479",
            ]),
            1,
            t0,
        );
        assert_eq!(step, Step::Wait);
        assert_eq!(m.phase(), Phase::Allocating);
        assert_eq!(m.next().unwrap().uri, "turn:127.0.0.1:3479");
        // Nor one at the left relay's address under another name.
        let mut m2 = RelayMove::new(drained(), "turn:localhost:3479".into(), at(3479), t0);
        m2.gathered(
            candidates(&["turn:127.0.0.1:3479", "turn:127.0.0.1:3481"]),
            1,
            t0,
        );
        assert_eq!(m2.next().unwrap().uri, "turn:127.0.0.1:3481");
        // Nothing goes through it before the restart is answered.
        assert!(!m.routes(&[0, 1, 0, 0]));
        // A second answer to the fetch changes nothing.
        let again = m.gathered(candidates(&["turn:127.0.0.1:3481"]), 2, t0);
        assert_eq!(again, Step::Wait);
        assert_eq!(m.next().unwrap().uri, "turn:127.0.0.1:3479");
    }

    #[test]
    fn no_other_relay_fails_the_move() {
        let t0 = Instant::now();
        let mut m = RelayMove::new(
            drained(),
            "turn:127.0.0.1:3478?transport=udp".into(),
            at(3478),
            t0,
        );
        let step = m.gathered(candidates(&["turn:127.0.0.1:3478"]), 1, t0);
        assert_eq!(step, Step::Failed("no other relay to move to".into()));
        assert!(m.next().is_none());
        assert_eq!(m.progress(t0), Step::Wait);
    }

    #[test]
    fn a_new_relay_that_does_not_allocate_fails_the_move() {
        let t0 = Instant::now();
        let mut m = RelayMove::new(drained(), "turn:127.0.0.1:3478".into(), at(3478), t0);
        m.gathered(candidates(&["turn:127.0.0.1:9"]), 1, t0);
        assert_eq!(m.progress(t0), Step::Wait);
        assert!(m.next_mut().unwrap().client.poll_transmit().is_some());
        assert!(m.poll_timeout().unwrap() > t0);
        match m.progress(t0 + Duration::from_secs(3)) {
            Step::Failed(r) => assert!(r.contains("turn:127.0.0.1:9"), "{r}"),
            s => panic!("{s:?}"),
        }
        // Given up before it allocated: nothing to deallocate.
        let next = m.abandon(t0).unwrap();
        assert_eq!(next.client.state(), TurnState::Closed);
        assert!(m.next().is_none());
    }

    #[test]
    fn checks_go_through_the_new_relay_once_the_restart_is_answered() {
        let t0 = Instant::now();
        let mut m = allocated(t0);
        assert!(!m.routes(&[0x00, 0x01, 0x00, 0x00]));
        // Allocated once: asked for once.
        assert_eq!(m.progress(t0), Step::Wait);
        assert!(m.finish(true, t0).is_none(), "not restarted yet");
        let t1 = t0 + Duration::from_millis(40);
        m.restart_answered(t1);
        assert_eq!(m.phase(), Phase::Checking);
        assert!(m.routes(&[0x00, 0x01, 0x00, 0x00]), "STUN");
        assert!(!m.routes(&[22, 254, 253]), "DTLS");
        assert!(!m.routes(&[0x80, 0x60]), "RTP");
        assert!(!m.routes(&[]));
        assert!(m.finish(false, t1).is_none(), "no check answered yet");
        let (next, ms) = m.finish(true, t1 + Duration::from_millis(10)).unwrap();
        assert_eq!(next.uri, "turn:127.0.0.1:3479");
        assert_eq!(ms, 50);
        assert!(m.next().is_none());
    }

    #[test]
    fn a_path_that_does_not_come_up_in_time_fails_the_move() {
        let t0 = Instant::now();
        let mut m = allocated(t0);
        m.restart_answered(t0);
        assert_eq!(m.poll_timeout().unwrap(), t0 + MOVE_WAIT);
        assert_eq!(m.progress(t0 + MOVE_WAIT / 2), Step::Wait);
        assert_eq!(
            m.progress(t0 + MOVE_WAIT),
            Step::Failed("no path through turn:127.0.0.1:3479 within 5000 ms".into())
        );
        // Given up after it allocated: deallocated.
        let mut next = m.abandon(t0 + MOVE_WAIT).unwrap();
        assert_eq!(
            answer(&mut next, t0 + MOVE_WAIT),
            [(Method::Refresh, Some(0))]
        );
    }

    #[test]
    fn the_old_relay_deallocates_once_media_came_through_the_new_one() {
        let t0 = Instant::now();
        let old = allocated(t0).next.take().unwrap();
        let mut r = Retiring::new(old, t0);
        assert!(r.progress(t0) && r.is_open());
        assert!(r.relay.client.poll_transmit().is_none());
        assert!(r.poll_timeout().unwrap() <= t0 + RETIRE_GRACE);
        let t1 = t0 + Duration::from_millis(30);
        r.media_moved();
        assert!(r.progress(t1), "the deallocation is not answered yet");
        assert!(!r.is_open());
        assert_eq!(answer(&mut r.relay, t1), [(Method::Refresh, Some(0))]);
        assert!(!r.progress(t1), "deallocated");
    }

    #[test]
    fn the_old_relay_deallocates_after_the_grace_or_gives_up_on_an_unanswered_close() {
        let t0 = Instant::now();
        let old = allocated(t0).next.take().unwrap();
        let mut r = Retiring::new(old, t0);
        assert!(r.progress(t0 + RETIRE_GRACE / 2) && r.is_open());
        let t1 = t0 + RETIRE_GRACE;
        assert!(r.progress(t1) && !r.is_open());
        let sent = r.relay.client.poll_transmit().unwrap();
        let refresh = StunMessage::parse_turn(&sent).unwrap();
        assert_eq!(
            (refresh.method(), refresh.lifetime()),
            (Method::Refresh, Some(0))
        );
        // The relay never answers.
        assert!(r.progress(t1 + CLOSE_WAIT / 2));
        assert!(!r.progress(t1 + CLOSE_WAIT));
    }

    #[test]
    fn the_event_is_the_browser_sdks_relay_moved() {
        let e = crate::fsm::Event::RelayMoved {
            drained: drained(),
            from: "turn:127.0.0.1:3478?transport=udp".into(),
            to: "turn:127.0.0.1:3479?transport=udp".into(),
            ms: 12,
        };
        assert_eq!(
            serde_json::to_value(&e).unwrap(),
            serde_json::json!({
                "event": "relay-moved",
                "drained": ["turn:127.0.0.1:3478?transport=udp"],
                "from": "turn:127.0.0.1:3478?transport=udp",
                "to": "turn:127.0.0.1:3479?transport=udp",
                "ms": 12,
            })
        );
    }
}
