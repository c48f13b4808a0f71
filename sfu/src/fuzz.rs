//! Fuzz target bodies (feature `fuzzing`): every network parser of the node,
//! plus the node itself fed arbitrary signalling and datagrams. The
//! `fuzz/` crate wraps each in a libFuzzer target; the bodies compile with
//! the crate so they cannot rot.

// Fuzz bodies pick a start time.
#![allow(clippy::disallowed_methods)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferry_proto::{NodeId, SessionId, StreamId};

pub use ferry_rtc::media::annexb::fuzz_annexb;
pub use ferry_rtc::media::depacketize::fuzz_depacketize;
pub use ferry_rtc::media::ivf::fuzz_ivf;

pub use crate::rtcp::fuzz_rtcp;
pub use crate::rtp::fuzz_rtp;
pub use crate::sdp::fuzz_sdp;
pub use crate::srtp::fuzz_unprotect;
pub use crate::stun::fuzz_stun;

use crate::node::{Node, NodeConfig};
use crate::time::WallClock;

const OFFER: &str = include_str!("../../rtc/src/sdp/testdata/chrome_offer.sdp");

fn node(now: Instant) -> Option<Node> {
    static CERT: std::sync::OnceLock<Option<Arc<dimpl::DtlsCertificate>>> =
        std::sync::OnceLock::new();
    let cert = CERT
        .get_or_init(|| crate::cert::generate([7; 32]).ok().map(Arc::new))
        .clone()?;
    let wall = WallClock {
        base: now,
        unix_at_base: Duration::from_secs(1_700_000_000),
    };
    let addr: SocketAddr = "127.0.0.1:5000".parse().ok()?;
    let mut config = NodeConfig::new(NodeId::new("fuzz").ok()?, vec![addr], [1; 32], wall);
    config.deterministic_dtls = true;
    config.cluster_key = Some(crate::cluster::relay::ClusterKey::new(&[9; 32]));
    Some(Node::new(config, cert, now))
}

/// Signalling with arbitrary bodies: as a WHIP offer, a WHEP offer and a
/// PATCH fragment (with and without a valid ETag). Must never panic.
pub fn fuzz_signal(data: &[u8]) {
    let now = Instant::now();
    let Some(mut node) = node(now) else { return };
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(stream) = StreamId::new("s") else {
        return;
    };
    let _ = node.publish(now, &stream, text);
    let Ok(other) = StreamId::new("t") else {
        return;
    };
    if let Ok(answer) = node.publish(now, &other, OFFER) {
        let _ = node.view(now, &other, text);
        let _ = node.patch(now, &answer.session, text, Some(&answer.etag));
        let _ = node.patch(now, &answer.session, text, Some("*"));
        let _ = node.patch(now, &answer.session, text, None);
    }
    if let Ok(id) = SessionId::new("unknown") {
        let _ = node.patch(now, &id, text, Some("*"));
    }
}

/// A node with a published stream (`s`) and one viewer of it: where a layer request lands.
fn with_viewer(now: Instant) -> Option<(Node, SessionId)> {
    let mut node = node(now)?;
    let stream = StreamId::new("s").ok()?;
    node.publish(now, &stream, OFFER).ok()?;
    let viewer = node.view(now, &stream, OFFER).ok()?;
    Some((node, viewer.session))
}

/// A viewer's layer request (`POST {WHEP session}/layer`, what the SDKs' `setQuality` sends):
/// the body parsed as the HTTP driver parses it, then set on a viewer, whose next allocation
/// runs on the node's timers. Must never panic.
pub fn fuzz_layer_request(data: &[u8]) {
    let Ok(prefs) = crate::media::adapt::prefs::Preferences::parse(data) else {
        return;
    };
    let _ = prefs.admits(Some((u16::MAX, u16::MAX)));
    let _ = prefs.admits(Some((0, 0)));
    let now = Instant::now();
    let Some((mut node, viewer)) = with_viewer(now) else {
        return;
    };
    let _ = node.set_preferences(now, &viewer, prefs);
    node.handle_timeout(now + Duration::from_secs(1));
    while node.poll_transmit().is_some() {}
}

/// A `Ferry-Ticket` header of arbitrary bytes at a node of a cluster with a publisher and a
/// viewer: checked for both kinds, and (if it passes) used to resume. Also the same bytes as an
/// `Idempotency-Key` of a retried request. Must never panic.
pub fn fuzz_ticket(data: &[u8]) {
    use crate::node::signal::SessionKind;
    let now = Instant::now();
    let Some(mut node) = node(now) else { return };
    let Ok(stream) = StreamId::new("s") else {
        return;
    };
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = node.create_session(now, SessionKind::Publish, &stream, OFFER, Some(text), None);
    let _ = node.create_session(now, SessionKind::Publish, &stream, text, Some(text), None);
    for kind in [SessionKind::Publish, SessionKind::View] {
        if let Ok(claims) = node.check_ticket(now, text, &stream, kind) {
            let _ = node.create_session(now, kind, &stream, OFFER, None, Some(&claims));
        }
    }
}

/// An access token of arbitrary bytes, as `Authorization: Bearer …` and as the query string's
/// `access_token`, checked for both grants by verifiers with a secret and with the API token.
/// Must never panic.
pub fn fuzz_access_token(data: &[u8]) {
    use ferry_proto::auth::{Grant, Verifier, request_token};
    let text = String::from_utf8_lossy(data);
    let header = format!("Bearer {text}");
    let tokens = [
        request_token(Some(&header), None),
        request_token(None, Some(&text)),
        request_token(Some(&text), Some(&format!("a=1&access_token={text}"))),
        Some(text.clone().into_owned()),
    ];
    let Ok(verifier) = Verifier::hs256(b"fuzz-secret") else {
        return;
    };
    let verifiers = [
        verifier.with_operator_token("op"),
        Verifier::operator_only(),
    ];
    for token in tokens.iter().flatten() {
        for v in &verifiers {
            for grant in [Grant::Publish, Grant::Play] {
                let _ = v.authorize(Some(token), grant, "s", 1_796_000_000);
                let _ = v.authorize(Some(token), grant, &text, u64::MAX);
            }
        }
    }
}

/// Arbitrary datagrams at a node with a publisher, from the address a
/// client would use. Must never panic.
pub fn fuzz_datagram(data: &[u8]) {
    let now = Instant::now();
    let Some(mut node) = node(now) else { return };
    let Ok(stream) = StreamId::new("s") else {
        return;
    };
    let _ = node.publish(now, &stream, OFFER);
    let Ok(from) = "127.0.0.1:6000".parse::<SocketAddr>() else {
        return;
    };
    let mut buf = data.to_vec();
    node.handle_datagram(now, from, &mut buf);
    node.handle_timeout(now + Duration::from_secs(1));
    while node.poll_transmit().is_some() {}
}

/// A migration message from a peer node (QUIC stream payload): decoded,
/// then handled by a node's migrator as it arrives from `node-b`, plus the
/// `traceparent` reader on the same bytes. Must never panic.
pub fn fuzz_migration(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = ferry_proto::trace::parse_trace_parent(text);
    }
    let Ok(msg) = ferry_migrator::Message::decode(data) else {
        return;
    };
    let now = Instant::now();
    let Some(mut node) = node(now) else { return };
    let (Ok(me), Ok(from)) = (NodeId::new("fuzz"), NodeId::new("node-b")) else {
        return;
    };
    let mut migrator = ferry_migrator::Migrator::new(me, ferry_migrator::Config::default());
    migrator.handle_message(now, &mut node, &from, msg);
    migrator.handle_timeout(now + Duration::from_secs(1), &mut node);
    while migrator.poll_transmit().is_some() {}
    while migrator.poll_event().is_some() {}
}

/// A munger's state as a peer node's session snapshot carries it (`MungerState`, with the
/// layered numbering window of a viewer that gets only some of its layer's packets): restored
/// (`LayeredMap::restore` refuses a window that does not describe one), then driven with
/// packets, drops and NACK lookups drawn from the same bytes, and snapshotted and restored
/// again. Must never panic.
pub fn fuzz_munger_state(data: &[u8]) {
    use prost::Message;

    use crate::media::munger::{Munger, SourcePacket};

    let Ok(state) = ferry_proto::state::media::MungerState::decode(data) else {
        return;
    };
    let now = Instant::now();
    let mut m = Munger::restore(&state, now);
    let ssrc = state.src_ssrc.unwrap_or(1);
    for (i, chunk) in data.chunks(4).take(64).enumerate() {
        let mut word = [0u8; 4];
        word[..chunk.len()].copy_from_slice(chunk);
        let x = u32::from_le_bytes(word);
        let at = now + Duration::from_millis(i as u64 * 10);
        let p = SourcePacket {
            ssrc: if x & 4 == 0 { ssrc } else { ssrc ^ 1 },
            // Around the last source number, as the ingest's unwrapper extends them: never
            // below 0 or near the top of u64, where no extended number comes from.
            ext_seq: state
                .last_src_seq
                .saturating_add(u64::from(x % 97))
                .saturating_sub(48),
            ext_ts: u64::from(x >> 3),
            keyframe_start: x & 1 == 1,
            clock_rate: 90_000,
            vp8: Some((((x >> 8) & 0x7fff) as u16, Some((x >> 24) as u8))),
            dd_frame: (x & 8 == 0).then_some((x >> 16) as u16),
        };
        if x & 2 == 0 {
            let _ = m.process(at, &p);
        } else {
            let _ = m.drop_packet(&p);
        }
        let back = m
            .last_out_seq()
            .unwrap_or(0)
            .wrapping_sub(u64::from(x % 1100));
        let _ = m.reverse(back);
        let _ = m.extend_out_seq((x >> 16) as u16);
    }
    let again = Munger::restore(&m.snapshot(now), now);
    let _ = again.last_out_seq();
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn migration_messages_never_panic(data in proptest::collection::vec(any::<u8>(), 0..600)) {
            super::fuzz_migration(&data);
        }

        #[test]
        fn tickets_and_media_files_never_panic(data in proptest::collection::vec(any::<u8>(), 0..600)) {
            super::fuzz_ticket(&data);
            super::fuzz_access_token(&data);
            super::fuzz_ivf(&data);
            super::fuzz_annexb(&data);
            super::fuzz_depacketize(&data);
        }

        #[test]
        fn munger_states_never_panic(data in proptest::collection::vec(any::<u8>(), 0..600)) {
            super::fuzz_munger_state(&data);
        }

        #[test]
        fn signalling_and_datagrams_never_panic(data in proptest::collection::vec(any::<u8>(), 0..600)) {
            super::fuzz_signal(&data);
            super::fuzz_datagram(&data);
        }

        #[test]
        fn mutated_access_tokens_never_panic(cut in 0usize..400, byte in any::<u8>()) {
            // A real token's shape (header.claims.signature) with one byte changed.
            let mut token = b"eyJ0eXAiOiJKV1QiLCJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4IiwiZXhwIjo5OTk5OTk5OTk5LCJwdWJsaXNoIjoiKiJ9.c2ln".to_vec();
            let i = cut % token.len();
            token[i] = byte;
            super::fuzz_access_token(&token);
        }

        #[test]
        fn mutated_offers_never_panic(cut in 0usize..4000, byte in any::<u8>()) {
            let mut offer = super::OFFER.as_bytes().to_vec();
            let i = cut % offer.len();
            offer[i] = byte;
            super::fuzz_signal(&offer);
        }
    }
}

/// The kept corpora (`fuzz/corpus/`, `scripts/fuzz`) through the bodies their targets wrap.
#[cfg(test)]
mod corpus {
    use ferry_testkit::fuzz_corpus;

    /// Target, the body its source calls, the body.
    type Body = (&'static str, &'static str, fn(&[u8]));

    /// Every target whose body is here or in ferry-rtc.
    const HERE: &[Body] = &[
        (
            "access_token",
            "ferry_sfu::fuzz::fuzz_access_token",
            super::fuzz_access_token,
        ),
        ("annexb", "ferry_sfu::fuzz::fuzz_annexb", super::fuzz_annexb),
        (
            "av1_dd",
            "ferry_rtc::codec::fuzz::fuzz_dependency_descriptor",
            ferry_rtc::codec::fuzz::fuzz_dependency_descriptor,
        ),
        (
            "datagram",
            "ferry_sfu::fuzz::fuzz_datagram",
            super::fuzz_datagram,
        ),
        (
            "depacketize",
            "ferry_sfu::fuzz::fuzz_depacketize",
            super::fuzz_depacketize,
        ),
        (
            "dims",
            "ferry_rtc::codec::dims::fuzz_dims",
            ferry_rtc::codec::dims::fuzz_dims,
        ),
        ("ivf", "ferry_sfu::fuzz::fuzz_ivf", super::fuzz_ivf),
        (
            "layer_request",
            "ferry_sfu::fuzz::fuzz_layer_request",
            super::fuzz_layer_request,
        ),
        (
            "migration",
            "ferry_sfu::fuzz::fuzz_migration",
            super::fuzz_migration,
        ),
        (
            "munger_state",
            "ferry_sfu::fuzz::fuzz_munger_state",
            super::fuzz_munger_state,
        ),
        ("rtcp", "ferry_sfu::fuzz::fuzz_rtcp", super::fuzz_rtcp),
        ("rtp", "ferry_sfu::fuzz::fuzz_rtp", super::fuzz_rtp),
        ("sdp", "ferry_sfu::fuzz::fuzz_sdp", super::fuzz_sdp),
        ("signal", "ferry_sfu::fuzz::fuzz_signal", super::fuzz_signal),
        (
            "srtp_unprotect",
            "ferry_sfu::fuzz::fuzz_unprotect",
            super::fuzz_unprotect,
        ),
        ("stun", "ferry_sfu::fuzz::fuzz_stun", super::fuzz_stun),
        ("ticket", "ferry_sfu::fuzz::fuzz_ticket", super::fuzz_ticket),
        (
            "turn_client",
            "ferry_rtc::turn::fuzz_turn_client",
            ferry_rtc::turn::fuzz_turn_client,
        ),
        (
            "twcc",
            "ferry_rtc::twcc::fuzz_twcc",
            ferry_rtc::twcc::fuzz_twcc,
        ),
        (
            "vp9",
            "ferry_rtc::codec::fuzz::fuzz_vp9",
            ferry_rtc::codec::fuzz::fuzz_vp9,
        ),
    ];

    /// The targets whose bodies live in crates this one does not link; their own tests
    /// replay them.
    const ELSEWHERE: &[(&str, &str)] = &[
        ("record", "ferry-record"),
        ("room_message", "ferry-room"),
        ("scheduler_ticket", "ferry-scheduler"),
        ("sdk_events", "ferry-sdk"),
    ];

    #[test]
    fn a_layer_request_reaches_a_viewer() {
        let now = std::time::Instant::now();
        let (mut node, viewer) = super::with_viewer(now).expect("a publisher and a viewer");
        let prefs = crate::media::adapt::prefs::Preferences::parse(br#"{"maxHeight": 180}"#)
            .expect("a layer request");
        node.set_preferences(now, &viewer, prefs)
            .expect("the viewer takes it");
    }

    #[test]
    fn every_fuzz_target_is_replayed_by_some_crate() {
        let mut missing = fuzz_corpus::targets().unwrap();
        missing.retain(|t| {
            !HERE.iter().any(|(h, ..)| h == t) && !ELSEWHERE.iter().any(|(e, _)| e == t)
        });
        assert!(
            missing.is_empty(),
            "fuzz targets no test replays: {missing:?}"
        );
    }

    #[test]
    fn every_kept_fuzz_input_runs_without_a_panic() {
        let mut failed = Vec::new();
        for (target, path, body) in HERE {
            match fuzz_corpus::replay(target, path, body) {
                Ok(n) => eprintln!("{target}: {n} inputs"),
                Err(e) => failed.push(format!("{e:#}")),
            }
        }
        assert!(failed.is_empty(), "{}", failed.join("\n"));
    }
}
