//! A viewer's transport-wide congestion control feedback: offered like a browser, sent as SRTCP
//! on the recorder's timer once the answer negotiates the sequence number extension.

#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::*;
use crate::sdp::extmap::EXT_TRANSPORT_CC;
use crate::twcc::TwccFeedback;

const AUDIO_SSRC: u32 = 1111;
const KEY: [u8; 16] = [1; 16];
const SALT: [u8; 12] = [2; 12];
const SERVER_KEY: [u8; 16] = [3; 16];
const SERVER_SALT: [u8; 12] = [4; 12];

fn server() -> SocketAddr {
    "10.0.0.1:5000".parse().unwrap()
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A server's answer to our viewer offer, with or without the transport-wide sequence number.
fn answer(twcc: bool) -> String {
    let fp = cert::format_fingerprint(&[0xAB; 32]);
    let ext = if twcc {
        format!("a=extmap:3 {EXT_TRANSPORT_CC}\r\n")
    } else {
        String::new()
    };
    let fb = |pt: u8| {
        if twcc {
            format!("a=rtcp-fb:{pt} transport-cc\r\n")
        } else {
            String::new()
        }
    };
    let common = format!(
        "c=IN IP4 0.0.0.0\r\na=ice-ufrag:srv1\r\na=ice-pwd:{}\r\na=fingerprint:sha-256 {fp}\r\n\
         a=setup:passive\r\n{ext}a=sendonly\r\na=rtcp-mux\r\n",
        "p".repeat(24)
    );
    format!(
        "v=0\r\no=- 1 2 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\na=group:BUNDLE 0 1\r\na=ice-lite\r\n\
         m=audio 9 UDP/TLS/RTP/SAVPF 111\r\n{common}a=mid:0\r\na=rtpmap:111 opus/48000/2\r\n{}\
         a=ssrc:{AUDIO_SSRC} cname:srv\r\n\
         a=candidate:1 1 udp 2130706431 10.0.0.1 5000 typ host\r\n\
         m=video 9 UDP/TLS/RTP/SAVPF 96\r\n{common}a=mid:1\r\na=rtpmap:96 VP8/90000\r\n{}\
         a=rtcp-fb:96 nack\r\na=ssrc:2222 cname:srv\r\n",
        fb(111),
        fb(96)
    )
}

/// A viewer that applied `answer` and whose SRTP is keyed (the DTLS handshake skipped), with
/// the server's SRTP contexts (protect, unprotect).
fn connected_viewer(t0: Instant, answer: &str) -> (Peer, SrtpContext, SrtpContext) {
    let cfg = PeerConfig::new(PeerRole::Viewer, 9, "10.0.0.2:40000".parse().unwrap(), t0);
    let mut peer = Peer::new(cfg, Arc::new(cert::generate([9; 32]).unwrap()), t0);
    let offer = peer.create_offer();
    // Chrome's id, on both receiving lines, with the feedback on every payload type.
    let ext = format!("a=extmap:3 {EXT_TRANSPORT_CC}\r\n");
    assert_eq!(offer.matches(&ext).count(), 2, "{offer}");
    for pt in [111, 96, 102] {
        assert!(offer.contains(&format!("a=rtcp-fb:{pt} transport-cc\r\n")));
    }
    peer.apply_answer(t0, answer).unwrap();
    let keys = dtls::SrtpKeys {
        profile: SrtpProfile::AeadAes128Gcm.dtls_id(),
        local_key: KEY.to_vec(),
        local_salt: SALT.to_vec(),
        remote_key: SERVER_KEY.to_vec(),
        remote_salt: SERVER_SALT.to_vec(),
    };
    peer.on_keys(t0, &keys);
    while peer.poll_transmit().is_some() {}
    let profile = SrtpProfile::AeadAes128Gcm;
    (
        peer,
        SrtpContext::new(profile, &SERVER_KEY, &SERVER_SALT).unwrap(),
        SrtpContext::new(profile, &KEY, &SALT).unwrap(),
    )
}

/// An SRTP-protected Opus packet carrying transport-wide sequence number `twcc` as extension 3.
fn opus(tx: &mut SrtpContext, seq: u16, twcc: u16) -> Vec<u8> {
    let mut p = vec![0x90, 111];
    p.extend(seq.to_be_bytes());
    p.extend((u32::from(seq) * 960).to_be_bytes());
    p.extend(AUDIO_SSRC.to_be_bytes());
    p.extend([0xBE, 0xDE, 0, 1, 0x31]);
    p.extend(twcc.to_be_bytes());
    p.extend([0; 1]);
    p.extend([0xFC; 40]);
    let len = p.len();
    p.resize(len + tx.profile().rtp_overhead(), 0);
    let n = tx.protect_rtp(&mut p, len).unwrap();
    p.truncate(n);
    p
}

/// The transport-cc packets the peer sent, decoded: (packet before it in the compound, media
/// SSRC, statuses).
type Sent = (Option<u8>, u32, Vec<(u16, Option<i64>)>);

fn sent_feedback(peer: &mut Peer, rx: &mut SrtpContext) -> Vec<Sent> {
    let mut out = Vec::new();
    while let Some((to, mut d)) = peer.poll_transmit() {
        assert_eq!(to, server());
        if !matches!(d.first(), Some(128..=191)) || !rtp::is_rtcp(&d) {
            continue;
        }
        let n = rx.unprotect_rtcp(&mut d).unwrap();
        let packets: Vec<_> = RtcpIter::new(&d[..n]).map(Result::unwrap).collect();
        for (i, p) in packets.iter().enumerate() {
            if let RtcpPacket::TransportCc {
                media_ssrc, fci, ..
            } = p
            {
                let before = i.checked_sub(1).map(|j| match packets[j] {
                    RtcpPacket::ReceiverReport(_) => crate::rtcp::PT_RR,
                    _ => 0,
                });
                let f = TwccFeedback::parse(fci).unwrap();
                out.push((before, *media_ssrc, f.packets().collect()));
            }
        }
    }
    out
}

#[test]
fn a_viewer_sends_transport_cc_feedback_when_negotiated() {
    let t0 = Instant::now();
    let (mut peer, mut tx, mut rx) = connected_viewer(t0, &answer(true));
    // Transport-wide 12 is lost; RTP sequence numbers have no gap (another stream had it).
    for (i, twcc) in [10u16, 11, 13].into_iter().enumerate() {
        let now = t0 + ms(1 + i as u64);
        let mut p = opus(&mut tx, 500 + i as u16, twcc);
        peer.handle_datagram(now, server(), &mut p);
    }
    assert_eq!(peer.stats().srtp_errors, 0);
    assert!(peer.poll_timeout().is_some_and(|t| t <= t0 + ms(51)));
    peer.handle_timeout(t0 + ms(50));
    assert_eq!(sent_feedback(&mut peer, &mut rx), []);
    peer.handle_timeout(t0 + ms(51));
    assert_eq!(
        sent_feedback(&mut peer, &mut rx),
        [(
            Some(crate::rtcp::PT_RR),
            AUDIO_SSRC,
            vec![
                (10, Some(0)),
                (11, Some(1_000)),
                (12, None),
                (13, Some(2_000))
            ]
        )]
    );
    assert_eq!(peer.stats().twcc_feedback_sent, 1);

    // The next feedback continues the sequence, on the same time base; a packet that waited in
    // the socket counts from when it arrived.
    let mut p = opus(&mut tx, 503, 14);
    peer.handle_datagram_waited(t0 + ms(100), server(), &mut p, ms(4));
    peer.handle_timeout(t0 + ms(150));
    assert_eq!(
        sent_feedback(&mut peer, &mut rx),
        [(
            Some(crate::rtcp::PT_RR),
            AUDIO_SSRC,
            vec![(14, Some(95_000))]
        )]
    );
    assert_eq!(peer.stats().twcc_feedback_sent, 2);
}

#[test]
fn no_feedback_without_the_extension_in_the_answer() {
    let t0 = Instant::now();
    let (mut peer, mut tx, mut rx) = connected_viewer(t0, &answer(false));
    for (i, twcc) in [10u16, 11, 13].into_iter().enumerate() {
        let mut p = opus(&mut tx, 500 + i as u16, twcc);
        peer.handle_datagram(t0 + ms(1 + i as u64), server(), &mut p);
    }
    peer.handle_timeout(t0 + ms(200));
    assert_eq!(sent_feedback(&mut peer, &mut rx), []);
    assert_eq!(peer.stats().twcc_feedback_sent, 0);
    assert_eq!(peer.stats().srtp_errors, 0);
}
