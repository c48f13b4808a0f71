#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;
use crate::stun::{self, Class, Method, StunMessage, StunWriter};

const USER: &str = "1700000000:alice";
const PASS: &str = "c2VjcmV0";
const REALM: &str = "ferry";

fn server_addr() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 3478))
}
fn relayed() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 50_001))
}
fn node() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 40_000))
}

/// A tiny TURN server: the long-term mechanism, one allocation, permissions and channels, as
/// coturn answers them (integrity on every success, 401 and 438 without).
struct Server {
    password: String,
    nonce: String,
    /// Answer the next authenticated request with 438 and this new nonce.
    stale: Option<String>,
    lifetime: u32,
    allocated: bool,
    permissions: Vec<IpAddr>,
    channels: BTreeMap<u16, SocketAddr>,
    /// (method, authenticated) of every request.
    requests: Vec<(Method, bool)>,
    /// What reached peers: (peer, payload, via ChannelData).
    relayed: Vec<(SocketAddr, Vec<u8>, bool)>,
    /// LIFETIME of the Refresh requests.
    refreshes: Vec<u32>,
}

impl Server {
    fn new(password: &str) -> Server {
        Server {
            password: password.into(),
            nonce: "nonce-1".into(),
            stale: None,
            lifetime: 600,
            allocated: false,
            permissions: Vec::new(),
            channels: BTreeMap::new(),
            requests: Vec::new(),
            relayed: Vec::new(),
            refreshes: Vec::new(),
        }
    }

    fn key(&self) -> [u8; 16] {
        long_term_key(USER, REALM, &self.password)
    }

    fn handle(&mut self, data: &[u8]) -> Option<Vec<u8>> {
        if is_channel_data(data) {
            let n = u16::from_be_bytes([data[0], data[1]]);
            let len = usize::from(u16::from_be_bytes([data[2], data[3]]));
            let peer = self.channels.get(&n).copied()?;
            self.relayed.push((peer, data[4..4 + len].to_vec(), true));
            return None;
        }
        let msg = StunMessage::parse_turn(data).unwrap();
        assert!(msg.has_fingerprint() || msg.class() == Class::Indication);
        if msg.class() == Class::Indication {
            assert_eq!(msg.method(), Method::Send);
            let peer = msg.xor_peer_address().unwrap();
            assert!(self.permissions.contains(&peer.ip()), "no permission");
            self.relayed
                .push((peer, msg.data().unwrap().to_vec(), false));
            return None;
        }
        let authenticated = msg.has_integrity();
        self.requests.push((msg.method(), authenticated));
        let id = *msg.transaction_id();
        if !authenticated {
            assert_eq!(msg.username(), None);
            return Some(self.error(&id, msg.method(), 401, true));
        }
        assert_eq!(msg.username(), Some(USER));
        assert_eq!(msg.realm(), Some(REALM));
        if !msg.verify_integrity(&self.key()) {
            return Some(self.error(&id, msg.method(), 401, true));
        }
        if msg.nonce() != Some(self.nonce.as_str()) {
            return Some(self.error(&id, msg.method(), 438, true));
        }
        if let Some(n) = self.stale.take() {
            self.nonce = n;
            return Some(self.error(&id, msg.method(), 438, true));
        }
        let key = self.key();
        let mut buf = vec![0u8; MAX_MESSAGE_LEN];
        let mut w = StunWriter::new(&mut buf, Class::Success, msg.method(), &id).unwrap();
        match msg.method() {
            Method::Allocate => {
                assert_eq!(
                    data_of(&msg, stun::attr::REQUESTED_TRANSPORT),
                    [17, 0, 0, 0]
                );
                self.allocated = true;
                w.xor_relayed_address(relayed())
                    .unwrap()
                    .xor_mapped_address(SocketAddr::from(([127, 0, 0, 1], 5000)))
                    .unwrap()
                    .lifetime(self.lifetime)
                    .unwrap();
            }
            Method::Refresh => {
                if !self.allocated {
                    return Some(self.error(&id, Method::Refresh, 437, false));
                }
                let l = msg.lifetime().unwrap();
                self.refreshes.push(l);
                if l == 0 {
                    self.allocated = false;
                }
                w.lifetime(l).unwrap();
            }
            Method::CreatePermission => {
                self.permissions.push(msg.xor_peer_address().unwrap().ip());
            }
            Method::ChannelBind => {
                let peer = msg.xor_peer_address().unwrap();
                let n = msg.channel_number().unwrap();
                assert!((0x4000..=0x4FFF).contains(&n));
                self.permissions.push(peer.ip());
                self.channels.insert(n, peer);
            }
            m => panic!("unexpected {m:?}"),
        }
        w.message_integrity(&key).unwrap().fingerprint().unwrap();
        let n = w.finish();
        buf.truncate(n);
        Some(buf)
    }

    fn error(&self, id: &[u8; 12], method: Method, code: u16, challenge: bool) -> Vec<u8> {
        let mut buf = vec![0u8; MAX_MESSAGE_LEN];
        let mut w = StunWriter::new(&mut buf, Class::Error, method, id).unwrap();
        w.error_code(code, "error").unwrap();
        if challenge {
            w.realm(REALM).unwrap().nonce(&self.nonce).unwrap();
        }
        w.fingerprint().unwrap();
        let n = w.finish();
        buf.truncate(n);
        buf
    }

    /// ChannelData from `peer` (must be bound).
    fn channel_data(&self, peer: SocketAddr, payload: &[u8]) -> Vec<u8> {
        let n = self.channels.iter().find(|(_, p)| **p == peer).unwrap().0;
        let mut d = n.to_be_bytes().to_vec();
        d.extend_from_slice(&(payload.len() as u16).to_be_bytes());
        d.extend_from_slice(payload);
        d
    }
}

fn data_indication(peer: SocketAddr, payload: &[u8]) -> Vec<u8> {
    let mut buf = vec![0u8; MAX_MESSAGE_LEN];
    let mut w = StunWriter::new(&mut buf, Class::Indication, Method::Data, &[7; 12]).unwrap();
    w.xor_peer_address(peer).unwrap().data(payload).unwrap();
    let n = w.finish();
    buf.truncate(n);
    buf
}

/// The raw value of attribute `ty` in `msg`.
fn data_of(msg: &StunMessage, ty: u16) -> Vec<u8> {
    let raw = msg.as_bytes();
    let mut at = 20;
    while at + 4 <= raw.len() {
        let t = u16::from_be_bytes([raw[at], raw[at + 1]]);
        let len = usize::from(u16::from_be_bytes([raw[at + 2], raw[at + 3]]));
        if t == ty {
            return raw[at + 4..at + 4 + len].to_vec();
        }
        at += 4 + len.div_ceil(4) * 4;
    }
    panic!("no attribute {ty:#06x}");
}

/// Carries every datagram between client and server until both are quiet.
fn exchange(c: &mut TurnClient, s: &mut Server, now: Instant) {
    while let Some(d) = c.poll_transmit() {
        if let Some(mut answer) = s.handle(&d) {
            assert_eq!(c.handle_datagram(now, &mut answer), None);
        }
    }
}

fn client(now: Instant) -> TurnClient {
    let mut cfg = TurnConfig::new(server_addr(), USER, PASS);
    cfg.seed = 7;
    TurnClient::new(cfg, now)
}

fn events(c: &mut TurnClient) -> Vec<Event> {
    std::iter::from_fn(|| c.poll_event()).collect()
}

fn allocated(now: Instant) -> (TurnClient, Server) {
    let mut c = client(now);
    let mut s = Server::new(PASS);
    exchange(&mut c, &mut s, now);
    assert_eq!(c.state(), TurnState::Allocated);
    events(&mut c);
    (c, s)
}

#[test]
fn the_key_is_md5_of_user_realm_password() {
    assert_eq!(
        hex::encode(long_term_key(USER, REALM, PASS)),
        "ae66e6154d5e268def5300d683facdfc"
    );
}

#[test]
fn allocates_after_the_401_challenge_with_the_long_term_credential() {
    let now = Instant::now();
    let mut c = client(now);
    let mut s = Server::new(PASS);
    assert_eq!(c.state(), TurnState::Allocating);
    exchange(&mut c, &mut s, now);
    assert_eq!(
        s.requests,
        [(Method::Allocate, false), (Method::Allocate, true)]
    );
    assert_eq!(c.state(), TurnState::Allocated);
    assert_eq!(c.relayed_address(), Some(relayed()));
    assert_eq!(
        events(&mut c),
        [Event::Allocated {
            relayed: relayed(),
            mapped: Some(SocketAddr::from(([127, 0, 0, 1], 5000))),
            lifetime: Duration::from_secs(600),
        }]
    );
}

#[test]
fn data_waits_for_the_permission_then_goes_as_send_indications_then_channel_data() {
    let now = Instant::now();
    let (mut c, mut s) = allocated(now);
    c.send_to(now, node(), b"first").unwrap();
    // Only the CreatePermission goes out; the datagram waits.
    let out: Vec<Vec<u8>> = std::iter::from_fn(|| c.poll_transmit()).collect();
    assert_eq!(out.len(), 1);
    let msg = StunMessage::parse_turn(&out[0]).unwrap();
    assert_eq!(msg.method(), Method::CreatePermission);
    assert_eq!(msg.xor_peer_address().map(|a| a.ip()), Some(node().ip()));
    let mut answer = s.handle(&out[0]).unwrap();
    c.handle_datagram(now, &mut answer);
    // Permission in: the queued datagram as a Send indication, and a ChannelBind.
    let out: Vec<Vec<u8>> = std::iter::from_fn(|| c.poll_transmit()).collect();
    assert_eq!(out.len(), 2);
    assert!(s.handle(&out[0]).is_none());
    assert_eq!(s.relayed, [(node(), b"first".to_vec(), false)]);
    // Before the channel is bound: Send indications.
    c.send_to(now, node(), b"second").unwrap();
    let second = c.poll_transmit().unwrap();
    assert!(s.handle(&second).is_none());
    assert!(!c.is_channel_bound(node()));
    let mut answer = s.handle(&out[1]).unwrap();
    c.handle_datagram(now, &mut answer);
    assert!(c.is_channel_bound(node()));
    c.send_to(now, node(), b"third").unwrap();
    let third = c.poll_transmit().unwrap();
    assert_eq!(third, [0x40, 0x00, 0, 5, b't', b'h', b'i', b'r', b'd']);
    assert!(s.handle(&third).is_none());
    assert_eq!(
        s.relayed,
        [
            (node(), b"first".to_vec(), false),
            (node(), b"second".to_vec(), false),
            (node(), b"third".to_vec(), true),
        ]
    );
    let st = c.stats();
    assert_eq!((st.indications_sent, st.channel_data_sent), (2, 1));
}

#[test]
fn peer_data_comes_back_from_bound_channels_and_permitted_peers_only() {
    let now = Instant::now();
    let (mut c, mut s) = allocated(now);
    c.send_to(now, node(), b"x").unwrap();
    exchange(&mut c, &mut s, now);
    assert!(c.is_channel_bound(node()));
    let mut d = s.channel_data(node(), b"media");
    assert_eq!(
        c.handle_datagram(now, &mut d),
        Some((node(), &mut b"media".to_vec()[..]))
    );
    let mut d = data_indication(node(), b"check");
    assert_eq!(
        c.handle_datagram(now, &mut d),
        Some((node(), &mut b"check".to_vec()[..]))
    );
    // No permission for this address, an unknown channel, a truncated one.
    let mut d = data_indication(SocketAddr::from(([10, 0, 0, 1], 1)), b"spoof");
    assert_eq!(c.handle_datagram(now, &mut d), None);
    let mut d = vec![0x40, 0x01, 0, 1, 0];
    assert_eq!(c.handle_datagram(now, &mut d), None);
    let mut d = vec![0x40, 0x00, 0, 9, 0];
    assert_eq!(c.handle_datagram(now, &mut d), None);
    assert_eq!(c.stats().received, 2);
    assert_eq!(c.stats().dropped, 3);
}

#[test]
fn a_wrong_password_fails_with_unauthorized() {
    let now = Instant::now();
    let mut c = client(now);
    let mut s = Server::new("another password");
    exchange(&mut c, &mut s, now);
    assert_eq!(c.state(), TurnState::Failed);
    assert!(matches!(
        events(&mut c)[..],
        [Event::Failed(TurnError::Unauthorized(_))]
    ));
    assert_eq!(
        c.send_to(now, node(), b"x"),
        Err(TurnError::Closed),
        "a failed client relays nothing"
    );
    assert_eq!(c.poll_timeout(), None);
}

#[test]
fn a_stale_nonce_is_followed() {
    let now = Instant::now();
    let mut c = client(now);
    let mut s = Server::new(PASS);
    s.stale = Some("nonce-2".into());
    exchange(&mut c, &mut s, now);
    assert_eq!(c.state(), TurnState::Allocated);
    assert_eq!(
        s.requests,
        [
            (Method::Allocate, false),
            (Method::Allocate, true),
            (Method::Allocate, true)
        ]
    );
}

#[test]
fn requests_are_retransmitted_rfc_style_then_time_out() {
    let t0 = Instant::now();
    let mut c = client(t0);
    let first = c.poll_transmit().unwrap();
    let mut at = Vec::new();
    while let Some(t) = c.poll_timeout() {
        c.handle_timeout(t);
        while let Some(d) = c.poll_transmit() {
            assert_eq!(d, first, "a retransmission is the same request");
            at.push((t - t0).as_millis());
        }
        if c.state() == TurnState::Failed {
            at.push((t - t0).as_millis());
            break;
        }
    }
    // RTO 500 ms doubling, 7 sends, then 16 RTOs: 39.5 s in all (RFC 8489 §6.2.1).
    assert_eq!(at, [500, 1500, 3500, 7500, 15_500, 31_500, 39_500]);
    assert_eq!(
        events(&mut c),
        [Event::Failed(TurnError::Timeout(Method::Allocate))]
    );
}

#[test]
fn allocation_permissions_and_channels_are_refreshed_before_they_expire() {
    let t0 = Instant::now();
    let (mut c, mut s) = allocated(t0);
    c.send_to(t0, node(), b"x").unwrap();
    exchange(&mut c, &mut s, t0);
    assert_eq!(c.poll_timeout(), Some(t0 + Duration::from_secs(240)));
    // Permission at 240 s, 480 s; channel at 540 s; allocation at 540 s.
    let mut seen = Vec::new();
    while let Some(t) = c.poll_timeout() {
        if t > t0 + Duration::from_secs(600) {
            break;
        }
        c.handle_timeout(t);
        while let Some(d) = c.poll_transmit() {
            let m = StunMessage::parse_turn(&d).unwrap();
            seen.push(((t - t0).as_secs(), m.method()));
            let mut answer = s.handle(&d).unwrap();
            c.handle_datagram(t, &mut answer);
        }
    }
    seen.sort_by_key(|(t, m)| (*t, m.number()));
    assert_eq!(
        seen,
        [
            (240, Method::CreatePermission),
            (480, Method::CreatePermission),
            (540, Method::Refresh),
            (540, Method::ChannelBind),
        ]
    );
    assert_eq!(s.refreshes, [600]);
    assert_eq!(c.state(), TurnState::Allocated);
}

#[test]
fn close_deallocates_with_lifetime_zero() {
    let now = Instant::now();
    let (mut c, mut s) = allocated(now);
    c.close(now);
    assert_eq!(c.state(), TurnState::Closing);
    exchange(&mut c, &mut s, now);
    assert_eq!(s.refreshes, [0]);
    assert!(!s.allocated);
    assert_eq!(c.state(), TurnState::Closed);
    assert_eq!(events(&mut c), [Event::Closed]);
}

#[test]
fn a_forged_success_is_ignored_and_a_lost_allocation_fails() {
    let now = Instant::now();
    let (mut c, mut s) = allocated(now);
    // Refresh due: answer it with a success that lacks integrity.
    let t = c.poll_timeout().unwrap();
    c.handle_timeout(t);
    let refresh = c.poll_transmit().unwrap();
    let id: [u8; 12] = refresh[8..20].try_into().unwrap();
    let mut buf = vec![0u8; MAX_MESSAGE_LEN];
    let mut w = StunWriter::new(&mut buf, Class::Success, Method::Refresh, &id).unwrap();
    w.lifetime(0).unwrap();
    let n = w.finish();
    c.handle_datagram(t, &mut buf[..n]);
    assert_eq!(c.state(), TurnState::Allocated);
    // The server lost it: 437.
    s.allocated = false;
    let mut answer = s.handle(&refresh).unwrap();
    c.handle_datagram(t, &mut answer);
    assert_eq!(c.state(), TurnState::Failed);
    assert!(matches!(
        events(&mut c)[..],
        [Event::Failed(TurnError::AllocationLost(_))]
    ));
}

#[test]
fn a_refused_permission_drops_its_queue_and_says_so() {
    let now = Instant::now();
    let (mut c, mut s) = allocated(now);
    c.send_to(now, node(), b"x").unwrap();
    let req = c.poll_transmit().unwrap();
    let id: [u8; 12] = req[8..20].try_into().unwrap();
    let mut buf = vec![0u8; MAX_MESSAGE_LEN];
    let mut w = StunWriter::new(&mut buf, Class::Error, Method::CreatePermission, &id).unwrap();
    w.error_code(403, "Forbidden")
        .unwrap()
        .message_integrity(&s.key())
        .unwrap();
    let n = w.finish();
    c.handle_datagram(now, &mut buf[..n]);
    assert_eq!(
        events(&mut c),
        [Event::PermissionFailed {
            peer: node().ip(),
            error: TurnError::Rejected {
                method: Method::CreatePermission,
                code: 403,
                reason: "Forbidden".into()
            }
        }]
    );
    assert_eq!(c.stats().dropped, 1);
    // Trying again asks again.
    c.send_to(now, node(), b"y").unwrap();
    exchange(&mut c, &mut s, now);
    assert_eq!(s.relayed, [(node(), b"y".to_vec(), false)]);
}

#[test]
fn turn_uris() {
    let ok = |u: &str, host: &str, port: u16| {
        assert_eq!(
            TurnUri::parse(u),
            Ok(TurnUri {
                host: host.into(),
                port
            }),
            "{u}"
        );
    };
    ok("turn:127.0.0.1:3478?transport=udp", "127.0.0.1", 3478);
    ok("turn:relay.example.com", "relay.example.com", 3478);
    ok("TURN:relay:5349?transport=UDP", "relay", 5349);
    ok("turn:[::1]:3479", "::1", 3479);
    ok("turn:[2001:db8::1]", "2001:db8::1", 3478);
    assert!(matches!(
        TurnUri::parse("turn:relay:3478?transport=tcp"),
        Err(TurnUriError::UnsupportedTransport(t)) if t == "tcp"
    ));
    assert!(matches!(
        TurnUri::parse("turns:relay:5349"),
        Err(TurnUriError::UnsupportedScheme(_))
    ));
    assert!(matches!(
        TurnUri::parse("stun:relay"),
        Err(TurnUriError::NotTurn(_))
    ));
    for bad in [
        "turn:",
        "turn::3478",
        "turn:relay:0",
        "turn:relay:x",
        "turn:[::1",
    ] {
        assert!(
            matches!(TurnUri::parse(bad), Err(TurnUriError::BadAuthority(_))),
            "{bad}"
        );
    }
}

#[test]
fn the_fuzz_body_runs_on_real_messages() {
    let now = Instant::now();
    let (mut c, mut s) = allocated(now);
    c.send_to(now, node(), b"x").unwrap();
    exchange(&mut c, &mut s, now);
    fuzz_turn_client(&s.channel_data(node(), b"payload"));
    fuzz_turn_client(&data_indication(node(), b"payload"));
    fuzz_turn_client(&s.error(&[1; 12], Method::Allocate, 401, true));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn arbitrary_datagrams_never_panic(data in proptest::collection::vec(any::<u8>(), 0..600)) {
        fuzz_turn_client(&data);
    }

    #[test]
    fn stun_shaped_datagrams_never_panic(
        class in 0u8..4,
        method in prop::sample::select(vec![0x001u16, 0x003, 0x004, 0x006, 0x007, 0x008, 0x009]),
        attrs in proptest::collection::vec((any::<u16>(), proptest::collection::vec(any::<u8>(), 0..24)), 0..6),
    ) {
        let ty = (method & 0x000F) | ((method & 0x0070) << 1) | ((method & 0x0F80) << 2)
            | (u16::from(class & 1) << 4) | (u16::from(class & 2) << 7);
        let mut d = ty.to_be_bytes().to_vec();
        d.extend_from_slice(&[0, 0]);
        d.extend_from_slice(&stun::MAGIC_COOKIE.to_be_bytes());
        d.extend_from_slice(&[3; 12]);
        for (t, v) in attrs {
            let t = [0x000C, 0x000D, 0x0012, 0x0013, 0x0014, 0x0015, 0x0016, 0x0009, t][usize::from(t % 9)];
            d.extend_from_slice(&t.to_be_bytes());
            d.extend_from_slice(&(v.len() as u16).to_be_bytes());
            d.extend_from_slice(&v);
            d.resize(d.len().div_ceil(4) * 4, 0);
        }
        let len = (d.len() - 20) as u16;
        d[2..4].copy_from_slice(&len.to_be_bytes());
        fuzz_turn_client(&d);
    }
}
