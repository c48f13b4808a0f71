//! A node on several cores (`--workers N`): N sans-IO cores ([`crate::node::Node`]), each
//! owning the streams whose relay id falls to it, behind the node's one media address.
//!
//! - **Streams decide.** A stream, its publisher, its viewers, its relay links and its
//!   recordings live on shard [`shard_of`]`(stream)`, so forwarding never crosses shards;
//!   every signalling request names its stream (or its session, found by asking the shards).
//! - **Datagrams follow ownership.** Each worker reads its own `SO_REUSEPORT` socket (the
//!   kernel spreads clients by 4-tuple); a datagram that belongs to another shard is handed
//!   to it. [`Router::route`] says which: relay datagrams by their relay id (a hash of the
//!   stream), STUN by the ICE ufrag, the rest by the client's address — the keys each core
//!   announces as it starts and stops owning them ([`RouteChange`]). What no shard owns is
//!   handled where it arrived (and refused there, counted).
//! - Every shard sends from its own socket, all bound to the same address: clients, edges
//!   and other nodes see one node.

use std::collections::HashMap;
use std::net::SocketAddr;

use ferry_proto::StreamId;

use crate::cluster::relay;
use crate::cluster::tunnel;
use crate::stun::StunMessage;

/// The shard of a node with `n` shards that owns `stream`.
pub fn shard_of(stream: &StreamId, n: usize) -> usize {
    relay_shard(relay::relay_id(stream), n)
}

fn relay_shard(relay_id: u32, n: usize) -> usize {
    relay_id as usize % n.max(1)
}

/// A key a shard starts (`true`) or stops (`false`) owning.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RouteChange {
    /// A local ICE ufrag (of a session, or of the forwarding pointer of one that moved away).
    Ufrag(String, bool),
    /// A client address.
    Addr(SocketAddr, bool),
}

/// Which shard owns what: the keys the shards announced, each with its owner and how many of
/// the owner's tables hold it.
#[derive(Debug, Default)]
pub struct Router {
    shards: usize,
    ufrags: HashMap<String, (usize, u32)>,
    addrs: HashMap<SocketAddr, (usize, u32)>,
}

fn apply<K: std::hash::Hash + Eq>(
    map: &mut HashMap<K, (usize, u32)>,
    key: K,
    shard: usize,
    owned: bool,
) {
    use std::collections::hash_map::Entry;
    match (map.entry(key), owned) {
        (Entry::Vacant(v), true) => {
            v.insert((shard, 1));
        }
        // The key changed hands (the other shard's removal may still be on its way).
        (Entry::Occupied(mut o), true) if o.get().0 != shard => *o.get_mut() = (shard, 1),
        (Entry::Occupied(mut o), true) => o.get_mut().1 += 1,
        (Entry::Occupied(mut o), false) if o.get().0 == shard => {
            o.get_mut().1 -= 1;
            if o.get().1 == 0 {
                o.remove();
            }
        }
        // A removal by a shard that no longer owns the key.
        _ => {}
    }
}

impl Router {
    /// A router for `shards` shards.
    pub fn new(shards: usize) -> Self {
        Router {
            shards: shards.max(1),
            ..Router::default()
        }
    }

    /// Shards routed between.
    pub fn shards(&self) -> usize {
        self.shards
    }

    /// Applies `shard`'s announcement.
    pub fn apply(&mut self, shard: usize, change: RouteChange) {
        match change {
            RouteChange::Ufrag(u, owned) => apply(&mut self.ufrags, u, shard, owned),
            RouteChange::Addr(a, owned) => apply(&mut self.addrs, a, shard, owned),
        }
    }

    /// Keys known (ufrags, addresses).
    pub fn len(&self) -> (usize, usize) {
        (self.ufrags.len(), self.addrs.len())
    }

    /// The shard that owns datagram `data` from `from`; `None` when none does (the shard that
    /// received it handles it). Reads headers only: the owner authenticates.
    pub fn route(&self, from: SocketAddr, data: &[u8]) -> Option<usize> {
        if self.shards == 1 {
            return Some(0);
        }
        match *data.first()? {
            relay::MEDIA => relay::peek_media_relay_id(data).map(|r| self.relay(r)),
            relay::CONTROL => relay::peek_control_relay_id(data).map(|r| self.relay(r)),
            tunnel::TUNNEL => {
                let (h, inner) = tunnel::peek(data)?;
                if h.has(tunnel::CLAIM) {
                    return None;
                }
                if h.has(tunnel::TO_CLIENT) {
                    return self.addr(h.client);
                }
                self.client(h.client, &data[inner])
            }
            _ => self.client(from, data),
        }
    }

    fn relay(&self, relay_id: u32) -> usize {
        relay_shard(relay_id, self.shards)
    }

    fn addr(&self, a: SocketAddr) -> Option<usize> {
        self.addrs.get(&a).map(|o| o.0)
    }

    /// A client's datagram: STUN by the ufrag it names, the rest by address.
    fn client(&self, from: SocketAddr, data: &[u8]) -> Option<usize> {
        if matches!(data.first(), Some(0..=3)) {
            let by_ufrag = StunMessage::parse(data).ok().and_then(|m| {
                let local = m.username()?.split(':').next()?;
                self.ufrags.get(local).map(|o| o.0)
            });
            if by_ufrag.is_some() {
                return by_ufrag;
            }
        }
        self.addr(from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::relay::ClusterKey;

    fn stream(s: &str) -> StreamId {
        StreamId::new(s).unwrap()
    }

    #[test]
    fn a_stream_always_maps_to_one_shard_and_streams_spread() {
        let mut per = [0usize; 4];
        for i in 0..400 {
            let s = stream(&format!("cam-{i}"));
            assert_eq!(shard_of(&s, 4), shard_of(&s, 4));
            per[shard_of(&s, 4)] += 1;
        }
        assert!(per.iter().all(|&n| n > 60), "{per:?}");
        assert_eq!(shard_of(&stream("x"), 1), 0);
    }

    #[test]
    fn relay_datagrams_go_to_their_streams_shard() {
        let key = ClusterKey::new(&[7; 32]);
        let mut seal = crate::cluster::relay_seal::RelaySealer::new(&key.seal_keys(), 1);
        let r = Router::new(3);
        let s = stream("lobby");
        let from: SocketAddr = "10.0.0.2:4000".parse().unwrap();
        let sub = relay::write_control(
            &mut seal,
            &relay::Control {
                body: Some(relay::control::Body::Subscribe(relay::Subscribe {
                    stream: s.to_string(),
                    direct: false,
                    load: 0,
                })),
            },
        );
        assert_eq!(r.route(from, &sub), Some(shard_of(&s, 3)));
        let nack = relay::write_control(
            &mut seal,
            &relay::Control {
                body: Some(relay::control::Body::Nack(relay::RelayNack {
                    relay_id: relay::relay_id(&s),
                    ..Default::default()
                })),
            },
        );
        assert_eq!(r.route(from, &nack), Some(shard_of(&s, 3)));
        let h = relay::MediaHeader {
            relay_id: relay::relay_id(&s),
            track: 0,
            src: crate::media::munger::SourcePacket {
                ssrc: 1,
                ext_seq: 1,
                ext_ts: 1,
                keyframe_start: false,
                clock_rate: 0,
                vp8: None,
                dd_frame: None,
            },
        };
        let mut media = Vec::new();
        relay::write_media(&mut seal, &h, &[0x80; 20], &mut media);
        assert_eq!(r.route(from, &media), Some(shard_of(&s, 3)));
        // Garbage that only looks like relay traffic stays where it arrived.
        assert_eq!(r.route(from, &[relay::MEDIA, 1]), None);
        assert_eq!(r.route(from, &[relay::CONTROL, 1, 0xff]), None);
    }

    #[test]
    fn clients_follow_the_ufrag_then_the_address_their_shard_announced() {
        use crate::stun::{Class, Method, StunWriter};
        let mut r = Router::new(2);
        let client: SocketAddr = "192.0.2.9:5000".parse().unwrap();
        let mut check = vec![0u8; 200];
        let mut w = StunWriter::new(&mut check, Class::Request, Method::Binding, &[1; 12]).unwrap();
        w.username("srvufrag:cliufrag").unwrap();
        w.message_integrity(b"pwd").unwrap();
        let n = w.finish();
        check.truncate(n);
        let srtp = [0x80u8; 40];
        assert_eq!(r.route(client, &check), None);
        r.apply(1, RouteChange::Ufrag("srvufrag".into(), true));
        assert_eq!(r.route(client, &check), Some(1));
        assert_eq!(r.route(client, &srtp), None);
        r.apply(1, RouteChange::Addr(client, true));
        assert_eq!(r.route(client, &srtp), Some(1));
        // Held by two of shard 1's tables (session + forwarding pointer): one removal keeps it.
        r.apply(1, RouteChange::Addr(client, true));
        r.apply(1, RouteChange::Addr(client, false));
        assert_eq!(r.route(client, &srtp), Some(1));
        // Taken over by shard 0; shard 1's late removal does not unroute it.
        r.apply(0, RouteChange::Addr(client, true));
        r.apply(1, RouteChange::Addr(client, false));
        assert_eq!(r.route(client, &srtp), Some(0));
        r.apply(0, RouteChange::Addr(client, false));
        assert_eq!(r.route(client, &srtp), None);
        assert_eq!(r.len(), (1, 0));
    }

    #[test]
    fn tunnelled_datagrams_route_by_the_client_inside() {
        let key = ClusterKey::new(&[3; 32]);
        let mut r = Router::new(2);
        let edge: SocketAddr = "10.1.0.1:7000".parse().unwrap();
        let client: SocketAddr = "192.0.2.44:6000".parse().unwrap();
        r.apply(1, RouteChange::Addr(client, true));
        for flags in [0, tunnel::TO_CLIENT, tunnel::FORWARDED] {
            let mut out = Vec::new();
            let h = tunnel::TunnelHeader {
                flags,
                epoch: 3,
                client,
            };
            tunnel::write(&key, &h, &[0x80; 30], &mut out);
            assert_eq!(r.route(edge, &out), Some(1), "flags {flags}");
        }
        let mut claim = Vec::new();
        let h = tunnel::TunnelHeader {
            flags: tunnel::CLAIM,
            epoch: 3,
            client,
        };
        tunnel::write(&key, &h, b"ufrag", &mut claim);
        assert_eq!(r.route(edge, &claim), None);
        assert_eq!(r.route(edge, &[tunnel::TUNNEL, 1, 0]), None);
    }

    #[test]
    fn one_shard_takes_everything() {
        let r = Router::new(1);
        assert_eq!(r.route("1.2.3.4:5".parse().unwrap(), b"junk"), Some(0));
    }
}
