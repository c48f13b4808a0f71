//! One transport of a session: a sans-IO [`Peer`], its UDP socket and, with relays, the TURN
//! relay its datagrams go through (and, while it moves off a draining relay, the one it moves
//! to and the one it left).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use ferry_rtc::cert;
use ferry_rtc::peer::{MediaSource, Peer, PeerConfig};
use tokio::net::UdpSocket;
use tokio::sync::mpsc;

use super::{Driver, Msg};
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

impl Driver {
    pub(super) fn close_transport(&mut self, t: u32) {
        if let Some(mut tr) = self.transports.remove(&t) {
            let now = Instant::now();
            tr.peer.close();
            while let Some((to, d)) = tr.peer.poll_transmit() {
                tr.send(now, to, &d);
            }
            // Dropping it deallocates its relays.
        }
        if self.current == Some(t) {
            self.current = None;
        }
    }

    /// A new transport: a socket, a peer, its offer.
    pub(super) async fn open(&mut self, t: u32) -> Option<String> {
        let socket = ferry_rtc::udp::bind(([0, 0, 0, 0], 0).into()).ok()?;
        let local = socket.local_addr().ok()?;
        let now = Instant::now();
        let seed = self.s.seed.wrapping_add(u64::from(t) * 0x9e37_79b9);
        let mut cfg = PeerConfig::new(self.s.media.role, seed, local, now);
        if let Some((wall, epoch)) = self.s.media.clocks {
            cfg.wall = wall;
            cfg.latency_epoch = epoch;
        }
        cfg.video_bitrate_bps = self.s.media.bitrate_bps;
        cfg.media = if self.s.media.synthetic {
            MediaSource::Synthetic
        } else {
            MediaSource::External
        };
        let mut secret = [0u8; 32];
        secret[..8].copy_from_slice(&seed.to_le_bytes());
        secret[8] = 0x5d;
        let cert = cert::generate(secret).ok()?;
        let mut peer = Peer::new(cfg, Arc::new(cert), now);
        let offer = peer.create_offer();
        let socket = Arc::new(socket);
        let reader = tokio::spawn(read_socket(t, socket.clone(), self.tx.clone()));
        self.transports.insert(
            t,
            Transport {
                peer,
                socket,
                reader,
                offer: offer.clone(),
                answered: false,
                connected: false,
                restarting: false,
                frames: 0,
                heard: (0, now),
                probing: false,
                window: None,
                relay: None,
                gathering: false,
                waiting: None,
                direct: false,
                relay_only: self.s.relays.relay_only,
                moving: None,
                retiring: None,
            },
        );
        Some(offer)
    }

    pub(super) fn flush(&mut self) {
        let now = Instant::now();
        for tr in self.transports.values_mut() {
            while let Some((to, d)) = tr.peer.poll_transmit() {
                tr.send(now, to, &d);
            }
            tr.flush_relay();
        }
    }
}

async fn read_socket(t: u32, socket: Arc<UdpSocket>, tx: mpsc::UnboundedSender<Msg>) {
    let mut buf = vec![0u8; 2048];
    loop {
        match socket.recv_from(&mut buf).await {
            Ok((n, from)) => {
                if tx.send(Msg::Datagram(t, from, buf[..n].to_vec())).is_err() {
                    return;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {}
            Err(_) => return,
        }
    }
}
