//! Tunnels on the node (DESIGN §2 edge, §4 forwarding pointer): client
//! datagrams that arrive through an edge or from the node a session left,
//! datagrams to clients reached through one, claims to the edge, holding
//! the datagrams of frozen or imported sessions, and the forwarding
//! pointers of sessions that moved away.

mod book;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use super::Node;
use crate::cluster::tunnel::{self, CLAIM, FORWARDED, TO_CLIENT, TunnelHeader};
use crate::node::session::Transmit;
pub(super) use book::{Forward, Held, Ingress};

/// A forwarding pointer lives this long after its last use.
pub const FORWARD_GRACE: Duration = Duration::from_secs(30);
/// Datagrams held per inactive session before the oldest are dropped.
pub const HOLD_MAX: usize = 2048;
/// How long a node answers relay subscribers of a stream whose publisher
/// moved away with the new origin.
pub const MOVED_GRACE: Duration = Duration::from_secs(30);

impl Node {
    /// Wraps a datagram for a client reached through an edge or forwarding
    /// node. `None` when it cannot be sent (no cluster key).
    pub(super) fn wrap(&mut self, mut t: Transmit) -> Option<Transmit> {
        let via = t.via.take()?;
        let Some(key) = self.config.cluster_key.as_ref() else {
            self.out.metrics.tunnel_refused += 1;
            self.out.recycle(t.data);
            return None;
        };
        let mut buf = self.out.buffer();
        tunnel::write(
            key,
            &TunnelHeader {
                flags: TO_CLIENT,
                epoch: via.epoch,
                client: t.to,
            },
            &t.data,
            &mut buf,
        );
        let inner = std::mem::replace(&mut t.data, buf);
        self.out.recycle(inner);
        t.to = via.addr;
        Some(t)
    }

    pub(super) fn handle_tunnel(&mut self, now: Instant, from: SocketAddr, data: &mut [u8]) {
        let Some(key) = self.config.cluster_key.as_ref() else {
            self.out.metrics.tunnel_refused += 1;
            return;
        };
        let (h, range) = match tunnel::read_range(key, data) {
            Ok(x) => x,
            Err(_) => {
                self.out.metrics.tunnel_refused += 1;
                return;
            }
        };
        if h.has(CLAIM) {
            // Claims are for edges.
            self.out.metrics.tunnel_refused += 1;
            return;
        }
        if h.has(TO_CLIENT) {
            self.forward_to_client(now, from, &h, range, data);
            return;
        }
        self.out.metrics.tunnel_received += 1;
        self.ingress = if h.has(FORWARDED) {
            Ingress::Forwarded
        } else {
            Ingress::Edge {
                addr: from,
                epoch: h.epoch,
            }
        };
        self.handle_client(now, h.client, &mut data[range]);
        self.ingress = Ingress::Direct;
    }

    /// This node forwards for a session that moved away and is reached
    /// directly: its new owner's datagrams go out from here, unless a
    /// stale owner sent them (fencing).
    fn forward_to_client(
        &mut self,
        now: Instant,
        from: SocketAddr,
        h: &TunnelHeader,
        range: std::ops::Range<usize>,
        data: &[u8],
    ) {
        let f = self
            .forward_addrs
            .get(&h.client)
            .and_then(|u| self.forwards.get_mut(u));
        match f {
            // Like an edge: a newer epoch is the session's next owner (it
            // moved on from the node we pointed at), an equal one must come
            // from the owner we know.
            Some(f) if h.epoch > f.epoch || (h.epoch == f.epoch && f.target == from) => {
                f.target = from;
                f.epoch = h.epoch;
                f.expires = now + FORWARD_GRACE;
                let mut buf = self.out.buffer();
                buf.extend_from_slice(&data[range]);
                self.out.metrics.forwarded_to_client += 1;
                self.out.send(h.client, buf);
            }
            Some(_) => self.out.metrics.tunnel_fenced += 1,
            None => self.out.metrics.tunnel_refused += 1,
        }
    }

    /// The session a DTLS/SRTP datagram belongs to, by source address. A
    /// datagram of an inactive session is held, one of a session that moved
    /// away is forwarded; both give `None`.
    pub(super) fn session_by_addr(
        &mut self,
        now: Instant,
        from: SocketAddr,
        data: &[u8],
    ) -> Option<usize> {
        if let Some(&key) = self.by_addr.get(&from) {
            if self.sessions[key].as_ref().is_some_and(|s| !s.active) {
                self.hold(key, from, data);
                return None;
            }
            return Some(key);
        }
        if let Some(f) = self
            .forward_addrs
            .get(&from)
            .and_then(|u| self.forwards.get(u))
        {
            let (to, epoch) = (f.target, f.epoch);
            self.forward(now, to, epoch, from, data);
            return None;
        }
        self.out.metrics.dropped_unknown_source += 1;
        None
    }

    /// Keeps a datagram of an inactive session until it is resumed,
    /// activated or released.
    pub(super) fn hold(&mut self, key: usize, from: SocketAddr, data: &[u8]) {
        let held = self.held.entry(key).or_default();
        if held.len() >= HOLD_MAX {
            held.remove(0);
            self.out.metrics.held_dropped += 1;
        }
        held.push(Held {
            from,
            ingress: self.ingress,
            data: data.to_vec(),
        });
        self.out.metrics.held_datagrams += 1;
    }

    /// Processes what was held for a session that runs again.
    pub(super) fn replay_held(&mut self, now: Instant, key: usize) {
        let Some(held) = self.held.remove(&key) else {
            return;
        };
        for mut h in held {
            self.ingress = h.ingress;
            self.handle_client(now, h.from, &mut h.data);
        }
        self.ingress = Ingress::Direct;
    }

    /// Sends a client's datagram on to the session's new owner.
    pub(super) fn forward(
        &mut self,
        now: Instant,
        to: SocketAddr,
        epoch: u64,
        client: SocketAddr,
        data: &[u8],
    ) {
        let Some(key) = self.config.cluster_key.as_ref() else {
            return;
        };
        let mut buf = self.out.buffer();
        tunnel::write(
            key,
            &TunnelHeader {
                flags: FORWARDED,
                epoch,
                client,
            },
            data,
            &mut buf,
        );
        if let Some(f) = self
            .forward_addrs
            .get(&client)
            .and_then(|u| self.forwards.get_mut(u))
        {
            f.expires = now + FORWARD_GRACE;
        }
        self.out.metrics.forwarded_to_owner += 1;
        self.out.send(to, buf);
    }

    /// Tells the edge this node owns the session with ICE ufrag `ufrag`
    /// from `epoch` on.
    pub(super) fn send_claim(&mut self, ufrag: &str, epoch: u64) {
        let (Some(key), Some(edge)) = (self.config.cluster_key.as_ref(), self.config.edge) else {
            return;
        };
        let mut buf = self.out.buffer();
        tunnel::write(
            key,
            &TunnelHeader {
                flags: CLAIM,
                epoch,
                client: SocketAddr::from(([0, 0, 0, 0], 0)),
            },
            ufrag.as_bytes(),
            &mut buf,
        );
        self.out.metrics.edge_claims += 1;
        self.out.send(edge, buf);
    }

    /// Arms the timer for repeating pending claims.
    pub(super) fn note_claim_deadline(&mut self) {
        if self.config.edge.is_some() {
            let t = self.next_claim;
            self.next_timeout = Some(self.next_timeout.map_or(t, |n| n.min(t)));
        }
    }

    /// Expires forwarding pointers and moved-stream notes; repeats claims of
    /// sessions behind the edge that have not connected yet (a lost claim
    /// must not strand a session). Returns when it wants to run again.
    pub(super) fn tunnel_tick(&mut self, now: Instant) -> Option<Instant> {
        let mut next: Option<Instant> = None;
        let before = self.forwards.len();
        self.forwards.retain(|_, f| f.expires > now);
        if self.forwards.len() != before {
            let live: std::collections::HashSet<String> = self.forwards.keys().cloned().collect();
            self.forward_addrs.retain(|_, u| live.contains(u));
        }
        for f in self.forwards.values() {
            next = Some(next.map_or(f.expires, |n: Instant| n.min(f.expires)));
        }
        self.moved_streams.retain(|_, (_, until)| *until > now);
        if self.config.edge.is_some() {
            let pending: Vec<(String, u64)> = self
                .sessions
                .iter()
                .flatten()
                .filter(|s| s.active && s.phase != crate::node::session::Phase::Connected)
                .map(|s| (s.ice.local().ufrag.clone(), s.epoch))
                .collect();
            if !pending.is_empty() {
                if now >= self.next_claim {
                    self.next_claim = now + CLAIM_REPEAT;
                    for (u, e) in pending {
                        self.send_claim(&u, e);
                    }
                }
                next = Some(next.map_or(self.next_claim, |n| n.min(self.next_claim)));
            }
        }
        next
    }
}

/// Claims of sessions that have not connected are repeated this often.
pub const CLAIM_REPEAT: Duration = Duration::from_millis(500);
