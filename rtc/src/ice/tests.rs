#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use crate::stun::{ErrorCode, MAX_MESSAGE_LEN, Method, StunMessage, attr};

fn creds(ufrag: &str, pwd: &str) -> IceCredentials {
    IceCredentials {
        ufrag: ufrag.into(),
        pwd: pwd.into(),
    }
}

fn server() -> IceCredentials {
    creds("srvU", "server-password-0123456")
}

fn client() -> IceCredentials {
    creds("cliU", "client-password-0123456")
}

fn lite() -> IceLite {
    IceLite::new(server(), client())
}

const A: &str = "192.0.2.10:5000";
const B: &str = "198.51.100.7:6000";
const TXID: [u8; 12] = [7; 12];

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

/// A check as a controlling client sends it, with the credentials given.
fn check(username: &str, pwd: &str, use_candidate: bool) -> Vec<u8> {
    let mut buf = [0u8; MAX_MESSAGE_LEN];
    let n = stun::write_binding_request(
        &mut buf,
        &TXID,
        username,
        1,
        Some(9),
        use_candidate,
        pwd.as_bytes(),
    )
    .unwrap();
    buf[..n].to_vec()
}

fn good_check(use_candidate: bool) -> Vec<u8> {
    check("srvU:cliU", "server-password-0123456", use_candidate)
}

type Outcome = Result<(usize, Option<IceEvent>), IceError>;

fn handle(lite: &mut IceLite, now: Instant, from: &str, data: &[u8]) -> (Outcome, Vec<u8>) {
    let msg = StunMessage::parse(data).unwrap();
    let mut out = [0u8; MAX_MESSAGE_LEN];
    let result = lite.handle_binding_request(now, addr(from), &msg, &mut out);
    let len = match result {
        Ok((n, _)) => n,
        Err(IceError {
            response: Some(n), ..
        }) => n,
        Err(_) => 0,
    };
    (result, out[..len].to_vec())
}

/// Asserts `response` is a Binding error with `code`, our transaction id, a valid FINGERPRINT,
/// and MESSAGE-INTEGRITY exactly when `authenticated`.
fn assert_error_response(response: &[u8], code: u16, reason: &str, authenticated: bool) {
    let msg = StunMessage::parse(response).unwrap();
    assert_eq!(msg.class(), Class::Error);
    assert_eq!(msg.method(), Method::Binding);
    assert_eq!(msg.transaction_id(), &TXID);
    assert_eq!(msg.error_code(), Some(ErrorCode { code, reason }));
    assert!(msg.verify_fingerprint());
    assert_eq!(msg.has_integrity(), authenticated);
    if authenticated {
        assert!(msg.verify_integrity(b"server-password-0123456"));
    }
}

#[test]
fn client_and_lite_connect() {
    let t0 = Instant::now();
    let client_addr = addr(A);
    let server_addr = addr(B);
    let mut cl = IceClient::new(client(), server(), server_addr, 0x1122_3344_5566_7788, 42);
    let mut lite = lite();
    let mut buf = [0u8; MAX_MESSAGE_LEN];

    assert_eq!(cl.poll_timeout(), None);
    let (n, to) = cl.poll_transmit(t0, &mut buf).unwrap();
    assert_eq!(to, server_addr);
    assert_eq!(cl.poll_timeout(), Some(t0 + CHECK_INTERVAL));
    assert_eq!(
        cl.poll_transmit(t0 + Duration::from_millis(49), &mut buf),
        None
    );

    let sent = buf[..n].to_vec();
    let request = StunMessage::parse(&sent).unwrap();
    assert_eq!(request.username(), Some("srvU:cliU"));
    assert_eq!(request.priority(), Some(CLIENT_PRIORITY));
    assert_eq!(request.ice_controlling(), Some(0x1122_3344_5566_7788));
    assert!(request.use_candidate() && request.verify_fingerprint());

    let mut out = [0u8; MAX_MESSAGE_LEN];
    let (len, event) = lite
        .handle_binding_request(t0, client_addr, &request, &mut out)
        .unwrap();
    assert_eq!(event, Some(IceEvent::Connected(client_addr)));
    assert_eq!(lite.selected(), Some(client_addr));
    assert_eq!(lite.poll_timeout(), Some(t0 + CONSENT_TIMEOUT));
    // Header, XOR-MAPPED-ADDRESS (12), MESSAGE-INTEGRITY (24), FINGERPRINT (8).
    assert_eq!(len, 20 + 12 + 24 + 8);

    let response = StunMessage::parse(&out[..len]).unwrap();
    assert_eq!(response.class(), Class::Success);
    assert_eq!(response.transaction_id(), request.transaction_id());
    assert_eq!(response.xor_mapped_address(), Some(client_addr));

    let t1 = t0 + Duration::from_millis(20);
    assert!(!cl.is_connected());
    assert_eq!(
        cl.handle_response(t1, &response),
        Some(IceClientEvent::Connected {
            mapped: client_addr
        })
    );
    assert!(cl.is_connected());
    assert_eq!(cl.mapped_address(), Some(client_addr));
    assert_eq!(cl.poll_timeout(), Some(t1 + CONSENT_INTERVAL));
    // The same answer again (duplicate datagram) is no longer outstanding.
    assert_eq!(cl.handle_response(t1, &response), None);

    // Consent checks flow every 2.5 s and keep the lite side fresh without events.
    let t2 = t1 + CONSENT_INTERVAL;
    assert_eq!(
        cl.poll_transmit(t2 - Duration::from_millis(1), &mut buf),
        None
    );
    let (n, _) = cl.poll_transmit(t2, &mut buf).unwrap();
    let refresh = StunMessage::parse(&buf[..n]).unwrap();
    assert_ne!(refresh.transaction_id(), request.transaction_id());
    let (_, event) = lite
        .handle_binding_request(t2, client_addr, &refresh, &mut out)
        .unwrap();
    assert_eq!(event, None);
    assert_eq!(lite.poll_timeout(), Some(t2 + CONSENT_TIMEOUT));
    assert_eq!(cl.poll_timeout(), Some(t2 + CONSENT_INTERVAL));
}

#[test]
fn client_ignores_forged_and_unsolicited_responses() {
    let t0 = Instant::now();
    let mut cl = IceClient::new(client(), server(), addr(B), 1, 2);
    let mut buf = [0u8; MAX_MESSAGE_LEN];
    let (n, _) = cl.poll_transmit(t0, &mut buf).unwrap();
    let txid = *StunMessage::parse(&buf[..n]).unwrap().transaction_id();
    let mut out = [0u8; MAX_MESSAGE_LEN];

    let n = stun::write_binding_success(&mut out, &txid, addr(A), b"wrong password").unwrap();
    assert_eq!(
        cl.handle_response(t0, &StunMessage::parse(&out[..n]).unwrap()),
        None
    );
    let n =
        stun::write_binding_success(&mut out, &[0; 12], addr(A), server().pwd.as_bytes()).unwrap();
    assert_eq!(
        cl.handle_response(t0, &StunMessage::parse(&out[..n]).unwrap()),
        None
    );
    assert!(!cl.is_connected());
    // An unauthenticated 401 for our own transaction is reported.
    let n = stun::write_binding_error(&mut out, &txid, 401, "Unauthorized", None).unwrap();
    let event = cl.handle_response(t0, &StunMessage::parse(&out[..n]).unwrap());
    assert_eq!(event, Some(IceClientEvent::ErrorResponse { code: 401 }));
}

#[test]
fn regular_nomination_checks_first_then_nominates_at_once() {
    let t0 = Instant::now();
    let mut cl =
        IceClient::new(client(), server(), addr(B), 7, 8).with_nomination(Nomination::Regular);
    let mut lite = lite();
    let mut buf = [0u8; MAX_MESSAGE_LEN];
    let (n, _) = cl.poll_transmit(t0, &mut buf).unwrap();
    let first = StunMessage::parse(&buf[..n]).unwrap();
    assert!(!first.use_candidate() && first.ice_controlling() == Some(7));
    let mut out = [0u8; MAX_MESSAGE_LEN];
    let (len, event) = lite
        .handle_binding_request(t0, addr(A), &first, &mut out)
        .unwrap();
    assert_eq!(event, None, "a check without USE-CANDIDATE selects nothing");
    let t1 = t0 + Duration::from_millis(20);
    let event = cl.handle_response(t1, &StunMessage::parse(&out[..len]).unwrap());
    assert!(matches!(event, Some(IceClientEvent::Connected { .. })));
    // The nominating check is due at once, not after the consent interval.
    assert_eq!(cl.poll_timeout(), Some(t1));
    let (n, _) = cl.poll_transmit(t1, &mut buf).unwrap();
    let second = StunMessage::parse(&buf[..n]).unwrap();
    assert!(second.use_candidate());
    let (_, event) = lite
        .handle_binding_request(t1, addr(A), &second, &mut out)
        .unwrap();
    assert_eq!(event, Some(IceEvent::Connected(addr(A))));
}

#[test]
fn controlled_client_claims_the_controlled_role_and_never_nominates() {
    let t0 = Instant::now();
    let mut cl = IceClient::new(client(), server(), addr(B), 0xabcd, 3).controlled();
    assert!(!cl.is_controlling());
    let mut buf = [0u8; MAX_MESSAGE_LEN];
    let (n, to) = cl.poll_transmit(t0, &mut buf).unwrap();
    assert_eq!(to, addr(B));
    let check = StunMessage::parse(&buf[..n]).unwrap();
    assert_eq!(check.username(), Some("srvU:cliU"));
    assert_eq!(check.priority(), Some(CLIENT_PRIORITY));
    assert_eq!(check.ice_controlled(), Some(0xabcd));
    assert_eq!(check.ice_controlling(), None);
    assert!(!check.use_candidate());
    assert!(check.verify_fingerprint());
    assert!(check.verify_integrity(server().pwd.as_bytes()));
    // The remote's success response connects it as it does a controlling client.
    let mut out = [0u8; MAX_MESSAGE_LEN];
    let m = stun::write_binding_success(
        &mut out,
        check.transaction_id(),
        addr(A),
        server().pwd.as_bytes(),
    )
    .unwrap();
    assert_eq!(
        cl.handle_response(t0, &StunMessage::parse(&out[..m]).unwrap()),
        Some(IceClientEvent::Connected { mapped: addr(A) })
    );
}

/// A check the remote (controlling, full) agent sends us: USERNAME `ours:theirs`, keyed with
/// our password.
fn remote_check(username: &str, pwd: &str) -> Vec<u8> {
    check(username, pwd, true)
}

#[test]
fn client_answers_the_remote_agents_authenticated_checks() {
    let cl = IceClient::new(client(), server(), addr(B), 1, 2).controlled();
    let mut out = [0u8; MAX_MESSAGE_LEN];
    let req = remote_check("cliU:srvU", "client-password-0123456");
    let msg = StunMessage::parse(&req).unwrap();
    let n = cl.handle_request(addr(B), &msg, &mut out).unwrap();
    let resp = StunMessage::parse(&out[..n]).unwrap();
    assert_eq!(resp.class(), Class::Success);
    assert_eq!(resp.method(), Method::Binding);
    assert_eq!(resp.transaction_id(), &TXID);
    assert_eq!(resp.xor_mapped_address(), Some(addr(B)));
    assert!(resp.verify_integrity(client().pwd.as_bytes()));
    assert!(resp.verify_fingerprint());
    // A controlling client answers too.
    let ctl = IceClient::new(client(), server(), addr(B), 1, 2);
    assert_eq!(ctl.handle_request(addr(A), &msg, &mut out), Some(n));
    assert_eq!(
        StunMessage::parse(&out[..n]).unwrap().xor_mapped_address(),
        Some(addr(A))
    );
}

#[test]
fn client_ignores_checks_it_cannot_authenticate() {
    let cl = IceClient::new(client(), server(), addr(B), 1, 2).controlled();
    let mut out = [0u8; MAX_MESSAGE_LEN];
    let ignored = |data: &[u8], out: &mut [u8]| {
        cl.handle_request(addr(B), &StunMessage::parse(data).unwrap(), out)
    };
    // Wrong password, reversed or foreign username.
    assert_eq!(
        ignored(
            &remote_check("cliU:srvU", "wrong-password-000000000"),
            &mut out
        ),
        None
    );
    assert_eq!(
        ignored(
            &remote_check("srvU:cliU", "client-password-0123456"),
            &mut out
        ),
        None
    );
    assert_eq!(
        ignored(
            &remote_check("cliU:other", "client-password-0123456"),
            &mut out
        ),
        None
    );
    // A response is not a check.
    let n = stun::write_binding_success(&mut out, &TXID, addr(A), client().pwd.as_bytes()).unwrap();
    let resp = out[..n].to_vec();
    assert_eq!(ignored(&resp, &mut out), None);
    // A corrupted FINGERPRINT.
    let mut bad = remote_check("cliU:srvU", "client-password-0123456");
    let last = bad.len() - 1;
    bad[last] ^= 1;
    assert_eq!(ignored(&bad, &mut out), None);
}

#[test]
fn client_transaction_ids_follow_the_seed() {
    let t0 = Instant::now();
    let ids = |seed| {
        let mut cl = IceClient::new(client(), server(), addr(B), 1, seed);
        let mut buf = [0u8; MAX_MESSAGE_LEN];
        (0..3)
            .map(|i| {
                let (n, _) = cl.poll_transmit(t0 + CHECK_INTERVAL * i, &mut buf).unwrap();
                *StunMessage::parse(&buf[..n]).unwrap().transaction_id()
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(ids(5), ids(5));
    assert_ne!(ids(5), ids(6));
    let a = ids(5);
    assert!(a[0] != a[1] && a[1] != a[2] && a[0] != a[2]);
}

#[test]
fn wrong_username_is_401_without_integrity() {
    let mut lite = lite();
    let (result, response) = handle(
        &mut lite,
        Instant::now(),
        A,
        &check("srvU:other", "server-password-0123456", true),
    );
    assert_eq!(result.unwrap_err().reason, IceReject::UnknownUsername);
    assert_error_response(&response, 401, "Unauthorized", false);
    // Reversed fragments are not accepted either.
    let (result, _) = handle(
        &mut lite,
        Instant::now(),
        A,
        &check("cliU:srvU", "server-password-0123456", true),
    );
    assert_eq!(result.unwrap_err().reason, IceReject::UnknownUsername);
    assert_eq!(lite.selected(), None);
}

#[test]
fn wrong_password_is_401_without_integrity() {
    let mut lite = lite();
    // Keyed with the client's own password instead of the server's.
    let (result, response) = handle(
        &mut lite,
        Instant::now(),
        A,
        &check("srvU:cliU", "client-password-0123456", true),
    );
    assert_eq!(result.unwrap_err().reason, IceReject::BadIntegrity);
    assert_error_response(&response, 401, "Unauthorized", false);
    assert_eq!(lite.selected(), None);
}

#[test]
fn missing_integrity_or_username_is_400() {
    let mut lite = lite();
    let mut buf = [0u8; MAX_MESSAGE_LEN];
    let mut w = StunWriter::new(&mut buf, Class::Request, Method::Binding, &TXID).unwrap();
    w.username("srvU:cliU")
        .unwrap()
        .ice_controlling(1)
        .unwrap()
        .use_candidate()
        .unwrap();
    w.fingerprint().unwrap();
    let n = w.finish();
    let (result, response) = handle(&mut lite, Instant::now(), A, &buf[..n]);
    assert_eq!(result.unwrap_err().reason, IceReject::MissingIntegrity);
    assert_error_response(&response, 400, "Bad Request", false);

    let mut w = StunWriter::new(&mut buf, Class::Request, Method::Binding, &TXID).unwrap();
    w.ice_controlling(1)
        .unwrap()
        .message_integrity(server().pwd.as_bytes())
        .unwrap();
    let n = w.finish();
    let (result, response) = handle(&mut lite, Instant::now(), A, &buf[..n]);
    assert_eq!(result.unwrap_err().reason, IceReject::MissingUsername);
    assert_error_response(&response, 400, "Bad Request", false);
    assert_eq!(lite.selected(), None);
}

/// An authenticated request built with the writer; `extra` adds attributes before integrity.
fn authenticated(extra: impl FnOnce(&mut StunWriter<'_>)) -> Vec<u8> {
    let mut buf = [0u8; MAX_MESSAGE_LEN];
    let mut w = StunWriter::new(&mut buf, Class::Request, Method::Binding, &TXID).unwrap();
    w.username("srvU:cliU").unwrap().priority(1).unwrap();
    extra(&mut w);
    w.message_integrity(server().pwd.as_bytes())
        .unwrap()
        .fingerprint()
        .unwrap();
    let n = w.finish();
    buf[..n].to_vec()
}

#[test]
fn role_errors() {
    let mut lite = lite();
    let controlled = authenticated(|w| {
        w.ice_controlled(5).unwrap().use_candidate().unwrap();
    });
    let (result, response) = handle(&mut lite, Instant::now(), A, &controlled);
    assert_eq!(result.unwrap_err().reason, IceReject::RoleConflict);
    assert_error_response(&response, 487, "Role Conflict", true);

    let no_role = authenticated(|w| {
        w.use_candidate().unwrap();
    });
    let (result, response) = handle(&mut lite, Instant::now(), A, &no_role);
    assert_eq!(result.unwrap_err().reason, IceReject::MissingRole);
    assert_error_response(&response, 400, "Bad Request", true);
    assert_eq!(lite.selected(), None);
}

#[test]
fn unknown_required_attribute_is_420() {
    let mut lite = lite();
    let request = authenticated(|w| {
        w.ice_controlling(1)
            .unwrap()
            .raw_attribute(0x0014, b"realm")
            .unwrap();
    });
    let (result, response) = handle(&mut lite, Instant::now(), A, &request);
    assert_eq!(
        result.unwrap_err().reason,
        IceReject::UnknownAttribute(0x0014)
    );
    assert_error_response(&response, 420, "Unknown Attribute", true);
    let unknown = [0x00, 0x0A, 0x00, 0x02, 0x00, 0x14];
    assert!(response.windows(6).any(|w| w == unknown));
    // Comprehension-optional unknowns (here GOOG-NETWORK-INFO) are fine.
    let request = authenticated(|w| {
        w.ice_controlling(1)
            .unwrap()
            .raw_attribute(0xC057, &[0, 1, 0, 0])
            .unwrap();
    });
    assert!(handle(&mut lite, Instant::now(), A, &request).0.is_ok());
}

#[test]
fn bad_fingerprint_and_non_requests_are_dropped_silently() {
    let mut lite = lite();
    let mut data = good_check(true);
    let last = data.len() - 1;
    data[last] ^= 1;
    let (result, _) = handle(&mut lite, Instant::now(), A, &data);
    assert_eq!(
        result,
        Err(IceError {
            reason: IceReject::BadFingerprint,
            response: None
        })
    );

    let mut buf = [0u8; MAX_MESSAGE_LEN];
    let n = stun::write_binding_success(&mut buf, &TXID, addr(A), server().pwd.as_bytes()).unwrap();
    let (result, _) = handle(&mut lite, Instant::now(), A, &buf[..n]);
    assert_eq!(
        result,
        Err(IceError {
            reason: IceReject::NotRequest,
            response: None
        })
    );

    let mut small = [0u8; 40];
    let good = good_check(true);
    let msg = StunMessage::parse(&good).unwrap();
    let result = lite.handle_binding_request(Instant::now(), addr(A), &msg, &mut small);
    assert_eq!(
        result.unwrap_err().reason,
        IceReject::Write(StunError::BufferTooSmall)
    );
    assert_eq!(lite.selected(), None);
}

#[test]
fn checks_without_use_candidate_do_not_select() {
    let t0 = Instant::now();
    let mut lite = lite();
    let (result, response) = handle(&mut lite, t0, A, &good_check(false));
    assert_eq!(result.unwrap().1, None);
    assert_eq!(
        StunMessage::parse(&response).unwrap().xor_mapped_address(),
        Some(addr(A))
    );
    assert_eq!((lite.selected(), lite.candidate()), (None, Some(addr(A))));
    assert_eq!(lite.poll_timeout(), None);
    assert!(!lite.is_expired(t0 + Duration::from_secs(3600)));
}

#[test]
fn nomination_from_a_new_address_switches_path() {
    let t0 = Instant::now();
    let mut lite = lite();
    let event = handle(&mut lite, t0, A, &good_check(true)).0.unwrap().1;
    assert_eq!(event, Some(IceEvent::Connected(addr(A))));
    // A plain check from B is remembered, not selected.
    let event = handle(&mut lite, t0, B, &good_check(false)).0.unwrap().1;
    assert_eq!(event, None);
    assert_eq!(
        (lite.selected(), lite.candidate()),
        (Some(addr(A)), Some(addr(B)))
    );
    let t1 = t0 + Duration::from_secs(1);
    let event = handle(&mut lite, t1, B, &good_check(true)).0.unwrap().1;
    assert_eq!(
        event,
        Some(IceEvent::PathSwitched {
            from: addr(A),
            to: addr(B)
        })
    );
    assert_eq!(lite.selected(), Some(addr(B)));
    assert_eq!(lite.poll_timeout(), Some(t1 + CONSENT_TIMEOUT));
    let event = handle(&mut lite, t1, B, &good_check(true)).0.unwrap().1;
    assert_eq!(event, None);
    let event = handle(&mut lite, t1, A, &good_check(true)).0.unwrap().1;
    assert_eq!(
        event,
        Some(IceEvent::PathSwitched {
            from: addr(B),
            to: addr(A)
        })
    );
}

#[test]
fn authenticated_srtcp_from_the_selected_address_keeps_consent_as_libnice_peers_need() {
    let t0 = Instant::now();
    let mut lite = lite();
    // Before a nomination nothing is selected: traffic refreshes nothing.
    lite.authenticated_traffic(t0, addr(A));
    assert_eq!(lite.poll_timeout(), None);
    handle(&mut lite, t0, A, &good_check(true)).0.unwrap();
    // From another address: no refresh.
    lite.authenticated_traffic(t0 + Duration::from_secs(20), addr(B));
    assert_eq!(lite.poll_timeout(), Some(t0 + Duration::from_secs(30)));
    // From the selected address: consent runs 30 s from it.
    let t1 = t0 + Duration::from_secs(25);
    lite.authenticated_traffic(t1, addr(A));
    assert_eq!(lite.poll_timeout(), Some(t1 + Duration::from_secs(30)));
    assert!(!lite.is_expired(t0 + Duration::from_secs(54)));
    assert!(lite.is_expired(t1 + Duration::from_secs(30)));
}

#[test]
fn consent_expires_exactly_30s_after_the_last_check_from_the_selected_address() {
    let t0 = Instant::now();
    let mut lite = lite();
    handle(&mut lite, t0, A, &good_check(true)).0.unwrap();
    assert_eq!(lite.poll_timeout(), Some(t0 + Duration::from_secs(30)));
    assert!(!lite.is_expired(t0 + Duration::from_secs(30) - Duration::from_nanos(1)));
    assert!(lite.is_expired(t0 + Duration::from_secs(30)));

    // A refresh from the selected address counts, with or without USE-CANDIDATE ...
    let t1 = t0 + Duration::from_secs(10);
    handle(&mut lite, t1, A, &good_check(false)).0.unwrap();
    // ... a check from another address does not.
    handle(
        &mut lite,
        t0 + Duration::from_secs(20),
        B,
        &good_check(false),
    )
    .0
    .unwrap();
    // Nor does a rejected one from the selected address.
    let bad = check("srvU:cliU", "nope", false);
    assert!(
        handle(&mut lite, t0 + Duration::from_secs(25), A, &bad)
            .0
            .is_err()
    );
    assert_eq!(lite.poll_timeout(), Some(t1 + Duration::from_secs(30)));
    assert!(!lite.is_expired(t0 + Duration::from_secs(39)));
    assert!(lite.is_expired(t0 + Duration::from_secs(40)));
}

#[test]
fn restart_switches_credentials_and_keeps_the_path() {
    let t0 = Instant::now();
    let mut lite = lite();
    handle(&mut lite, t0, A, &good_check(true)).0.unwrap();
    lite.restart(
        creds("srv2", "server-password-NEW-456"),
        creds("cli2", "client-password-NEW-456"),
    );
    assert_eq!(lite.local().ufrag, "srv2");
    assert_eq!(lite.remote().ufrag, "cli2");
    assert_eq!(lite.selected(), Some(addr(A)));
    assert_eq!(lite.poll_timeout(), Some(t0 + CONSENT_TIMEOUT));

    let t1 = t0 + Duration::from_secs(5);
    let (result, response) = handle(&mut lite, t1, A, &good_check(true));
    assert_eq!(result.unwrap_err().reason, IceReject::UnknownUsername);
    assert_error_response(&response, 401, "Unauthorized", false);
    // Old ufrags with the new password: still the old username, still rejected.
    let stale = check("srvU:cliU", "server-password-NEW-456", true);
    assert_eq!(
        handle(&mut lite, t1, A, &stale).0.unwrap_err().reason,
        IceReject::UnknownUsername
    );
    // New ufrags with the old password.
    let stale = check("srv2:cli2", "server-password-0123456", true);
    assert_eq!(
        handle(&mut lite, t1, A, &stale).0.unwrap_err().reason,
        IceReject::BadIntegrity
    );
    assert_eq!(lite.poll_timeout(), Some(t0 + CONSENT_TIMEOUT));

    let fresh = check("srv2:cli2", "server-password-NEW-456", true);
    let (result, response) = handle(&mut lite, t1, A, &fresh);
    assert_eq!(result.unwrap().1, None);
    assert!(
        StunMessage::parse(&response)
            .unwrap()
            .verify_integrity(b"server-password-NEW-456")
    );
    assert_eq!(lite.poll_timeout(), Some(t1 + CONSENT_TIMEOUT));
    let event = handle(&mut lite, t1, B, &fresh).0.unwrap().1;
    assert_eq!(
        event,
        Some(IceEvent::PathSwitched {
            from: addr(A),
            to: addr(B)
        })
    );
}

#[test]
fn snapshot_restore_round_trip() {
    use prost::Message;
    let t0 = Instant::now();
    let mut lite = lite();
    handle(&mut lite, t0, A, &good_check(true)).0.unwrap();
    handle(
        &mut lite,
        t0 + Duration::from_secs(5),
        "[2001:db8::1]:7000",
        &good_check(false),
    )
    .0
    .unwrap();
    let state = lite.snapshot(t0 + Duration::from_secs(12));
    assert_eq!(
        state,
        IceState {
            local_ufrag: "srvU".into(),
            local_pwd: "server-password-0123456".into(),
            remote_ufrag: "cliU".into(),
            remote_pwd: "client-password-0123456".into(),
            selected_addr: A.into(),
            consent_age_ms: Some(12_000),
            candidate_addr: "[2001:db8::1]:7000".into(),
        }
    );
    let decoded = IceState::decode(state.encode_to_vec().as_slice()).unwrap();
    assert_eq!(decoded, state);

    // Restored elsewhere, later on that host's clock.
    let t1 = t0 + Duration::from_secs(100);
    let restored = IceLite::restore(&decoded, t1);
    assert_eq!(restored.snapshot(t1), state);
    assert_eq!(restored.selected(), Some(addr(A)));
    assert_eq!(restored.candidate(), Some(addr("[2001:db8::1]:7000")));
    assert_eq!(restored.poll_timeout(), Some(t1 + Duration::from_secs(18)));
    assert!(!restored.is_expired(t1 + Duration::from_millis(17_999)));
    assert!(restored.is_expired(t1 + Duration::from_secs(18)));
    assert_eq!(restored.local(), lite.local());

    // An expired consent stays expired across a restore.
    let expired = lite.snapshot(t0 + Duration::from_secs(45));
    assert_eq!(expired.consent_age_ms, Some(45_000));
    let restored = IceLite::restore(&expired, t1);
    assert!(restored.is_expired(t1));
    assert_eq!(restored.snapshot(t1).consent_age_ms, Some(45_000));

    // Nothing nominated: no consent age, empty address.
    let fresh = IceLite::new(server(), client()).snapshot(t0);
    assert_eq!(
        (fresh.selected_addr.as_str(), fresh.consent_age_ms),
        ("", None)
    );
    let restored = IceLite::restore(&fresh, t1);
    assert_eq!((restored.selected(), restored.poll_timeout()), (None, None));
}

#[test]
fn credentials_debug_hides_the_password() {
    let text = format!("{:?}", lite());
    assert!(text.contains("srvU") && !text.contains("server-password"));
    assert_eq!(attr::USE_CANDIDATE, 0x0025);
}
