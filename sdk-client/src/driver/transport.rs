//! One transport of a session: a sans-IO [`Peer`], its UDP socket and, with relays, the TURN
//! relay its datagrams go through (and, while it moves off a draining relay, the one it moves
//! to and the one it left).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use ferry_rtc::peer::Peer;
use tokio::net::UdpSocket;

use crate::signalling::PostRequest;
use crate::turn::Relay;
use crate::turn_move::{RelayMove, Retiring};

pub(super) struct Transport {
    pub(super) peer: Peer,
    pub(super) socket: Arc<UdpSocket>,
    pub(super) reader: tokio::task::JoinHandle<()>,
    pub(super) offer: String,
    pub(super) answered: bool,
    /// ICE+DTLS came up once (reported to the machine).
    pub(super) connected: bool,
    /// After an ICE restart: report when ICE works on the new path.
    pub(super) restarting: bool,
    pub(super) frames: u64,
    /// (datagrams received, when that count last grew).
    pub(super) heard: (u64, Instant),
    pub(super) probing: bool,
    /// Throughput window start: (when, bytes, packets received, missing).
    pub(super) window: Option<(Instant, u64, u64, u64)>,
    /// The TURN relay it sends through (allocating, or allocated).
    pub(super) relay: Option<Relay>,
    /// Relays are being gathered (credentials, DNS).
    pub(super) gathering: bool,
    /// The POST held until the relay is allocated (or given up on).
    pub(super) waiting: Option<PostRequest>,
    /// No relay worked and direct sending is allowed: direct from now on.
    pub(super) direct: bool,
    /// Only through a relay: nothing goes out directly.
    pub(super) relay_only: bool,
    /// Moving off a draining relay (`turn-drain`).
    pub(super) moving: Option<RelayMove>,
    /// The relay it moved off: handing over what is in flight, then deallocating.
    pub(super) retiring: Option<Retiring>,
}

impl Transport {
    /// Sends one datagram of the peer: through the relay when there is one (ICE checks
    /// through the relay being moved to, once its restart is answered; never directly when
    /// relay only), else directly.
    pub(super) fn send(&mut self, now: Instant, to: SocketAddr, d: &[u8]) {
        let relay = match self.moving.as_mut() {
            Some(m) if m.routes(d) => m.next_mut(),
            _ => self.relay.as_mut(),
        };
        match relay {
            Some(r) => {
                // A payload the relay cannot carry is lost, as the network would lose it.
                let _ = r.client.send_to(now, to, d);
            }
            None if self.relay_only || (self.waiting.is_some() && !self.direct) => {}
            // A full socket buffer loses the datagram, as the network would.
            None => {
                let _ = self.socket.try_send_to(d, to);
            }
        }
    }

    /// The relays' datagrams, each to its relay.
    pub(super) fn flush_relay(&mut self) {
        let relays = [
            self.relay.as_mut(),
            self.moving.as_mut().and_then(RelayMove::next_mut),
            self.retiring.as_mut().map(|r| &mut r.relay),
        ];
        for r in relays.into_iter().flatten() {
            let server = r.server();
            while let Some(d) = r.client.poll_transmit() {
                let _ = self.socket.try_send_to(&d, server);
            }
        }
    }
}

impl Drop for Transport {
    fn drop(&mut self) {
        self.reader.abort();
        // Deallocate: the relays free their ports now rather than when the lifetime ends.
        let now = Instant::now();
        if let Some(r) = self.relay.as_mut() {
            r.client.close(now);
        }
        if let Some(r) = self.retiring.as_mut() {
            r.relay.client.close(now);
        }
        let next = self.moving.as_mut().and_then(|m| m.abandon(now));
        self.flush_relay();
        if let Some(mut r) = next {
            while let Some(d) = r.client.poll_transmit() {
                let _ = self.socket.try_send_to(&d, r.server());
            }
        }
    }
}
