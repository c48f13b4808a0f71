//! A viewer answering a server's offer ([`Peer::accept_offer`]) against a full ICE agent in the
//! controlling role, as Janus's libnice is.

#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use super::offer::tests::JANUS_OFFER;
use super::*;
use crate::stun::{Class, MAX_MESSAGE_LEN};

const JANUS_PWD: &str = "PK7FmPKcRphi4aUH1lnuvA";

fn janus() -> SocketAddr {
    "10.203.0.2:39896".parse().unwrap()
}

fn viewer(now: Instant) -> Peer {
    let cfg = PeerConfig::new(
        PeerRole::Viewer,
        5,
        "10.203.0.1:40000".parse().unwrap(),
        now,
    );
    Peer::new(cfg, Arc::new(cert::generate([5; 32]).unwrap()), now)
}

#[test]
fn viewer_answers_an_offer_checks_as_controlled_and_answers_the_servers_checks() {
    let t0 = Instant::now();
    let mut peer = viewer(t0);
    let answer = peer.accept_offer(t0, JANUS_OFFER).unwrap();
    assert!(answer.contains("a=setup:active\r\n"));
    assert!(answer.contains("a=candidate:1 1 udp 2130706431 10.203.0.1 40000 typ host\r\n"));
    assert_eq!(peer.remote_addr(), Some(janus()));
    assert_eq!(
        peer.accept_offer(t0, JANUS_OFFER),
        Err(PeerError::AlreadyAnswered)
    );

    // Our first check goes out at once, claiming the controlled role.
    let (to, check) = peer.poll_transmit().unwrap();
    assert_eq!(to, janus());
    let msg = StunMessage::parse(&check).unwrap();
    let ufrag = peer.local_ice().ufrag.clone();
    assert_eq!(msg.username(), Some(format!("3EiH:{ufrag}").as_str()));
    assert!(msg.ice_controlled().is_some() && msg.ice_controlling().is_none());
    assert!(!msg.use_candidate());
    assert!(msg.verify_integrity(JANUS_PWD.as_bytes()));
    assert!(peer.poll_transmit().is_none());

    // The server's nominating check is answered with a success keyed with our password.
    let mut buf = [0u8; MAX_MESSAGE_LEN];
    let pwd = peer.local_ice().pwd.clone();
    let n = stun::write_binding_request(
        &mut buf,
        &[3; 12],
        &format!("{ufrag}:3EiH"),
        1,
        Some(77),
        true,
        pwd.as_bytes(),
    )
    .unwrap();
    peer.handle_datagram(t0, janus(), &mut buf[..n]);
    let (to, resp) = peer.poll_transmit().unwrap();
    assert_eq!(to, janus());
    let resp = StunMessage::parse(&resp).unwrap();
    assert_eq!(resp.class(), Class::Success);
    assert_eq!(resp.transaction_id(), &[3; 12]);
    assert!(resp.verify_integrity(pwd.as_bytes()));
    assert_eq!(peer.stats().ice_errors, 0);

    // A check we cannot authenticate is not answered.
    let n = stun::write_binding_request(
        &mut buf,
        &[4; 12],
        &format!("{ufrag}:3EiH"),
        1,
        Some(77),
        true,
        b"not our password",
    )
    .unwrap();
    peer.handle_datagram(t0, janus(), &mut buf[..n]);
    assert!(peer.poll_transmit().is_none());
    assert_eq!(peer.stats().ice_errors, 1);

    // The server's answer to our check connects ICE; as the DTLS client we say hello.
    let n = stun::write_binding_success(
        &mut buf,
        msg.transaction_id(),
        "10.203.0.1:40000".parse().unwrap(),
        JANUS_PWD.as_bytes(),
    )
    .unwrap();
    peer.handle_datagram(t0, janus(), &mut buf[..n]);
    let (to, hello) = peer.poll_transmit().unwrap();
    assert_eq!(to, janus());
    // A DTLS handshake record (content type 22).
    assert_eq!(hello[0], 22);
}

#[test]
fn only_a_viewer_answers_offers() {
    let t0 = Instant::now();
    let role = PeerRole::Publisher {
        video: Codec::Vp8,
        audio: true,
    };
    let cfg = PeerConfig::new(role, 5, "10.203.0.1:40000".parse().unwrap(), t0);
    let mut peer = Peer::new(cfg, Arc::new(cert::generate([5; 32]).unwrap()), t0);
    assert!(matches!(
        peer.accept_offer(t0, JANUS_OFFER),
        Err(PeerError::BadOffer(_))
    ));
    // A viewer that offered itself cannot also answer.
    let mut v = viewer(t0);
    let _ = v.create_offer();
    assert!(v.accept_offer(t0, "v=0\r\n").is_err());
}

#[test]
fn a_viewer_without_transport_cc_answers_an_offer_that_has_it_with_neither_extension_nor_feedback()
{
    let t0 = Instant::now();
    let abs = "a=extmap:2 http://www.webrtc.org/experiments/rtp-hdrext/abs-send-time\r\n";
    let offer = JANUS_OFFER.replace(
        abs,
        &format!(
            "{abs}a=extmap:5 {}\r\n",
            crate::sdp::extmap::EXT_TRANSPORT_CC
        ),
    );
    let answered = |transport_cc: bool| {
        let mut cfg = PeerConfig::new(PeerRole::Viewer, 5, "10.203.0.1:40000".parse().unwrap(), t0);
        cfg.transport_cc = transport_cc;
        let mut peer = Peer::new(cfg, Arc::new(cert::generate([5; 32]).unwrap()), t0);
        peer.accept_offer(t0, &offer).unwrap()
    };
    let with = answered(true);
    assert!(with.contains(
        "a=extmap:5 http://www.ietf.org/id/draft-holmer-rmcat-transport-wide-cc-extensions-01\r\n"
    ));
    assert!(with.contains(" transport-cc\r\n"));
    let without = answered(false);
    assert!(!without.contains("transport-wide-cc"), "{without}");
    assert!(!without.contains("transport-cc"), "{without}");
}
