//! The edge (DESIGN §2): a UDP ingress that owns the public address and
//! forwards each client's datagrams to the node that owns its session, in a
//! tunnel ([`crate::cluster::tunnel`]) that tells the node the client's address.
//!
//! Routes are keyed by the session's ICE ufrag (the local part of a STUN
//! USERNAME) and then by the client's address. A node *claims* a session's
//! ufrag at an ownership epoch; a migration's target claims it at a higher
//! epoch, which flips the route atomically — the client keeps talking to the
//! same address. Datagrams a node sends to a client carry its epoch: the
//! edge sends them only if that is the session's newest epoch and the node
//! its owner, so a stale owner can never reach the client (fencing).
//!
//! Pure core, driven like the node: `handle_datagram` / `handle_timeout`,
//! then `poll_transmit` / `poll_timeout`.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::cluster::relay::ClusterKey;
use crate::cluster::tunnel::{self, CLAIM, TO_CLIENT, TunnelHeader};
use crate::stun::StunMessage;

/// A route or client entry unused this long is forgotten.
pub const ROUTE_TTL: Duration = Duration::from_secs(60);
/// Largest datagram the edge forwards.
pub const MAX_DATAGRAM: usize = 1500;

/// Counters of the edge.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EdgeMetrics {
    /// Datagrams from clients forwarded to nodes.
    pub to_nodes: u64,
    /// Datagrams from nodes sent to clients.
    pub to_clients: u64,
    /// Client datagrams without a route (unknown ufrag or address).
    pub unroutable: u64,
    /// Node datagrams dropped because their epoch or node is stale.
    pub fenced: u64,
    /// Node datagrams refused (unauthenticated, malformed).
    pub refused: u64,
    /// Claims accepted.
    pub claims: u64,
    /// Routes that moved to another node (migrations).
    pub flips: u64,
    /// Routing-table versions applied.
    pub table_versions: u64,
}

impl EdgeMetrics {
    /// Prometheus text exposition, prefixed `ferry_edge_`.
    pub fn to_prometheus(&self, routes: usize) -> String {
        let rows = [
            (
                "to_nodes",
                "Datagrams from clients forwarded to nodes.",
                self.to_nodes,
            ),
            (
                "to_clients",
                "Datagrams from nodes sent to clients.",
                self.to_clients,
            ),
            (
                "unroutable",
                "Client datagrams without a route.",
                self.unroutable,
            ),
            (
                "fenced",
                "Node datagrams dropped: stale epoch or node.",
                self.fenced,
            ),
            (
                "refused",
                "Node datagrams refused: unauthenticated or malformed.",
                self.refused,
            ),
            ("claims", "Ownership claims accepted.", self.claims),
            ("flips", "Routes moved to another node.", self.flips),
            (
                "table_versions",
                "Routing-table versions applied.",
                self.table_versions,
            ),
        ];
        let mut s = String::new();
        for (name, help, v) in rows {
            s.push_str(&format!(
                "# HELP ferry_edge_{name}_total {help}\n# TYPE ferry_edge_{name}_total counter\nferry_edge_{name}_total {v}\n"
            ));
        }
        s.push_str(&format!(
            "# HELP ferry_edge_routes Sessions routed.\n# TYPE ferry_edge_routes gauge\nferry_edge_routes {routes}\n"
        ));
        s
    }
}

/// Where one session is owned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route {
    /// The owning node's cluster address.
    pub node: SocketAddr,
    /// Its ownership epoch.
    pub epoch: u64,
    last_used: Instant,
}

/// A datagram the edge sends.
#[derive(Debug)]
pub struct EdgeTransmit {
    /// Destination.
    pub to: SocketAddr,
    /// Bytes.
    pub data: Vec<u8>,
}

/// One routing-table entry: the session with ICE ufrag `ufrag` is owned by
/// `node` at `epoch`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteUpdate {
    /// ICE ufrag of the session.
    pub ufrag: String,
    /// Owning node's cluster address.
    pub node: SocketAddr,
    /// Ownership epoch.
    pub epoch: u64,
}

/// The edge core.
#[derive(Debug)]
pub struct Edge {
    key: ClusterKey,
    routes: HashMap<String, Route>,
    clients: HashMap<SocketAddr, (String, Instant)>,
    out: VecDeque<EdgeTransmit>,
    metrics: EdgeMetrics,
    table_version: u64,
    next_sweep: Instant,
}

impl Edge {
    /// An edge with no routes.
    pub fn new(key: ClusterKey, now: Instant) -> Self {
        Self {
            key,
            routes: HashMap::new(),
            clients: HashMap::new(),
            out: VecDeque::new(),
            metrics: EdgeMetrics::default(),
            table_version: 0,
            next_sweep: now + ROUTE_TTL,
        }
    }

    /// Counters.
    pub fn metrics(&self) -> &EdgeMetrics {
        &self.metrics
    }

    /// The route of the session with ICE ufrag `ufrag`.
    pub fn route(&self, ufrag: &str) -> Option<Route> {
        self.routes.get(ufrag).copied()
    }

    /// Sessions routed.
    pub fn routes(&self) -> usize {
        self.routes.len()
    }

    /// Next datagram to send.
    pub fn poll_transmit(&mut self) -> Option<EdgeTransmit> {
        self.out.pop_front()
    }

    /// When to call [`Edge::handle_timeout`].
    pub fn poll_timeout(&self) -> Option<Instant> {
        Some(self.next_sweep)
    }

    /// Forgets routes and clients unused for [`ROUTE_TTL`].
    pub fn handle_timeout(&mut self, now: Instant) {
        if now < self.next_sweep {
            return;
        }
        self.next_sweep = now + ROUTE_TTL / 4;
        self.routes
            .retain(|_, r| now.saturating_duration_since(r.last_used) < ROUTE_TTL);
        self.clients
            .retain(|_, (_, t)| now.saturating_duration_since(*t) < ROUTE_TTL);
    }

    /// Applies a routing-table version as one step: nothing of it is
    /// visible before all of it is, and an older version changes nothing.
    /// Entries only ever move a session to a newer epoch. Returns whether
    /// the version was applied.
    pub fn apply_table(&mut self, now: Instant, version: u64, entries: &[RouteUpdate]) -> bool {
        if version <= self.table_version {
            return false;
        }
        for e in entries {
            self.claim(now, &e.ufrag, e.node, e.epoch);
        }
        self.table_version = version;
        self.metrics.table_versions += 1;
        true
    }

    /// The routing-table version applied last.
    pub fn table_version(&self) -> u64 {
        self.table_version
    }

    fn claim(&mut self, now: Instant, ufrag: &str, node: SocketAddr, epoch: u64) -> bool {
        match self.routes.get_mut(ufrag) {
            Some(r) if epoch > r.epoch => {
                if r.node != node {
                    self.metrics.flips += 1;
                }
                r.node = node;
                r.epoch = epoch;
                r.last_used = now;
            }
            Some(r) if epoch == r.epoch && node == r.node => r.last_used = now,
            Some(_) => {
                self.metrics.fenced += 1;
                return false;
            }
            None => {
                self.routes.insert(
                    ufrag.to_owned(),
                    Route {
                        node,
                        epoch,
                        last_used: now,
                    },
                );
            }
        }
        self.metrics.claims += 1;
        true
    }

    /// Feeds one received datagram: from a client, or a tunnel datagram
    /// from a node.
    pub fn handle_datagram(&mut self, now: Instant, from: SocketAddr, data: &[u8]) {
        if data.len() > MAX_DATAGRAM + 64 {
            self.metrics.unroutable += 1;
            return;
        }
        if data.first() == Some(&tunnel::TUNNEL) {
            self.node_datagram(now, from, data);
        } else {
            self.client_datagram(now, from, data);
        }
    }

    fn client_datagram(&mut self, now: Instant, from: SocketAddr, data: &[u8]) {
        let ufrag = match data.first() {
            Some(0..=3) => StunMessage::parse(data).ok().and_then(|m| {
                m.username()
                    .and_then(|u| u.split(':').next())
                    .map(str::to_owned)
            }),
            _ => None,
        };
        let ufrag = match ufrag {
            Some(u) if self.routes.contains_key(&u) => {
                self.clients.insert(from, (u.clone(), now));
                u
            }
            _ => match self.clients.get_mut(&from) {
                Some((u, t)) => {
                    *t = now;
                    u.clone()
                }
                None => {
                    self.metrics.unroutable += 1;
                    return;
                }
            },
        };
        let Some(r) = self.routes.get_mut(&ufrag) else {
            self.metrics.unroutable += 1;
            return;
        };
        r.last_used = now;
        let (node, epoch) = (r.node, r.epoch);
        let mut buf = Vec::with_capacity(data.len() + 64);
        tunnel::write(
            &self.key,
            &TunnelHeader {
                flags: 0,
                epoch,
                client: from,
            },
            data,
            &mut buf,
        );
        self.metrics.to_nodes += 1;
        self.out.push_back(EdgeTransmit {
            to: node,
            data: buf,
        });
    }

    fn node_datagram(&mut self, now: Instant, from: SocketAddr, data: &[u8]) {
        let Ok((h, inner)) = tunnel::read(&self.key, data) else {
            self.metrics.refused += 1;
            return;
        };
        if h.has(CLAIM) {
            match std::str::from_utf8(inner) {
                Ok(u) if !u.is_empty() && u.len() <= 256 => {
                    self.claim(now, u, from, h.epoch);
                }
                _ => self.metrics.refused += 1,
            }
            return;
        }
        if !h.has(TO_CLIENT) {
            self.metrics.refused += 1;
            return;
        }
        let Some(r) = self
            .clients
            .get(&h.client)
            .and_then(|(u, _)| self.routes.get_mut(u))
        else {
            self.metrics.unroutable += 1;
            return;
        };
        if h.epoch > r.epoch {
            // The session's new owner speaks first: the route flips now.
            if r.node != from {
                self.metrics.flips += 1;
            }
            r.node = from;
            r.epoch = h.epoch;
        } else if h.epoch < r.epoch || r.node != from {
            self.metrics.fenced += 1;
            return;
        }
        r.last_used = now;
        self.metrics.to_clients += 1;
        self.out.push_back(EdgeTransmit {
            to: h.client,
            data: inner.to_vec(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    fn key() -> ClusterKey {
        ClusterKey::new(&[9; 32])
    }

    fn claim(node: SocketAddr, ufrag: &str, epoch: u64) -> (SocketAddr, Vec<u8>) {
        let mut b = Vec::new();
        tunnel::write(
            &key(),
            &TunnelHeader {
                flags: CLAIM,
                epoch,
                client: addr("0.0.0.0:0"),
            },
            ufrag.as_bytes(),
            &mut b,
        );
        (node, b)
    }

    fn to_client(client: SocketAddr, epoch: u64, payload: &[u8]) -> Vec<u8> {
        let mut b = Vec::new();
        tunnel::write(
            &key(),
            &TunnelHeader {
                flags: TO_CLIENT,
                epoch,
                client,
            },
            payload,
            &mut b,
        );
        b
    }

    fn stun_check(ufrag: &str) -> Vec<u8> {
        let mut buf = vec![0u8; 256];
        let n = crate::stun::write_binding_request(
            &mut buf,
            &[1; 12],
            &format!("{ufrag}:peer"),
            1,
            Some(7),
            true,
            b"password-password-pass",
        )
        .unwrap();
        buf.truncate(n);
        buf
    }

    #[test]
    fn routes_by_ufrag_then_address_and_flips_on_a_newer_epoch() {
        let t = Instant::now();
        let mut e = Edge::new(key(), t);
        let (a, b, c) = (
            addr("10.0.0.1:5000"),
            addr("10.0.0.2:5000"),
            addr("192.0.2.9:40000"),
        );
        let (from, d) = claim(a, "ufrg", 1);
        e.handle_datagram(t, from, &d);
        // The client's check goes to A, tunnelled with the client's address.
        e.handle_datagram(t, c, &stun_check("ufrg"));
        let tx = e.poll_transmit().unwrap();
        assert_eq!(tx.to, a);
        let (h, inner) = tunnel::read(&key(), &tx.data).unwrap();
        assert_eq!((h.client, h.epoch), (c, 1));
        assert_eq!(inner, stun_check("ufrg"));
        // Then media from the same address, without a ufrag.
        e.handle_datagram(t, c, &[0x80, 96, 0, 1]);
        assert_eq!(e.poll_transmit().unwrap().to, a);
        // A answers: sent to the client.
        e.handle_datagram(t, a, &to_client(c, 1, b"hello"));
        let tx = e.poll_transmit().unwrap();
        assert_eq!((tx.to, tx.data.as_slice()), (c, &b"hello"[..]));
        // B takes over at epoch 2: from now on A is fenced.
        let (from, d) = claim(b, "ufrg", 2);
        e.handle_datagram(t, from, &d);
        assert_eq!(e.metrics().flips, 1);
        e.handle_datagram(t, a, &to_client(c, 1, b"stale"));
        assert!(e.poll_transmit().is_none());
        assert_eq!(e.metrics().fenced, 1);
        e.handle_datagram(t, c, &[0x80, 96, 0, 2]);
        assert_eq!(e.poll_transmit().unwrap().to, b);
        // A stale claim changes nothing.
        let (from, d) = claim(a, "ufrg", 1);
        e.handle_datagram(t, from, &d);
        assert_eq!(e.route("ufrg").unwrap().node, b);
    }

    #[test]
    fn the_new_owners_first_datagram_flips_the_route() {
        let t = Instant::now();
        let mut e = Edge::new(key(), t);
        let (a, b, c) = (
            addr("10.0.0.1:5000"),
            addr("10.0.0.2:5000"),
            addr("192.0.2.9:40000"),
        );
        let (from, d) = claim(a, "ufrg", 3);
        e.handle_datagram(t, from, &d);
        e.handle_datagram(t, c, &stun_check("ufrg"));
        let _ = e.poll_transmit();
        // Same epoch from another node: fenced.
        e.handle_datagram(t, b, &to_client(c, 3, b"x"));
        assert!(e.poll_transmit().is_none());
        e.handle_datagram(t, b, &to_client(c, 4, b"y"));
        assert_eq!(e.poll_transmit().unwrap().to, c);
        assert_eq!(e.route("ufrg").unwrap().node, b);
        e.handle_datagram(t, a, &to_client(c, 3, b"z"));
        assert!(e.poll_transmit().is_none());
    }

    #[test]
    fn refuses_forged_and_unroutable_datagrams_and_tables_apply_whole() {
        let t = Instant::now();
        let mut e = Edge::new(key(), t);
        let c = addr("192.0.2.9:40000");
        let mut forged = Vec::new();
        tunnel::write(
            &ClusterKey::new(&[1; 32]),
            &TunnelHeader {
                flags: CLAIM,
                epoch: 9,
                client: addr("0.0.0.0:0"),
            },
            b"ufrg",
            &mut forged,
        );
        e.handle_datagram(t, addr("10.0.0.3:1"), &forged);
        assert_eq!(e.metrics().refused, 1);
        e.handle_datagram(t, c, &stun_check("ufrg"));
        assert_eq!(e.metrics().unroutable, 1);
        let entries = [
            RouteUpdate {
                ufrag: "u1".into(),
                node: addr("10.0.0.1:5000"),
                epoch: 1,
            },
            RouteUpdate {
                ufrag: "u2".into(),
                node: addr("10.0.0.2:5000"),
                epoch: 1,
            },
        ];
        assert!(e.apply_table(t, 5, &entries));
        assert_eq!(e.routes(), 2);
        assert!(!e.apply_table(t, 4, &[]));
        assert_eq!(e.table_version(), 5);
        // Routes expire when unused.
        e.handle_timeout(t + ROUTE_TTL);
        assert_eq!(e.routes(), 0);
    }
}
