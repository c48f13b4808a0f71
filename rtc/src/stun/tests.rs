#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use proptest::prelude::*;

const PASSWORD: &[u8] = b"VOkJxbRl1RmTxUk/WvJxBt";
const TXID: [u8; 12] = [
    0xb7, 0xe7, 0xa7, 0x01, 0xbc, 0x34, 0xd6, 0x86, 0xfa, 0x87, 0xdf, 0xae,
];

// RFC 5769 §2.1: padding bytes are spaces (0x20).
const SAMPLE_REQUEST: &str = "000100582112a442b7e7a701bc34d686fa87dfae\
    802200105354554e207465737420636c69656e74\
    002400046e0001ff80290008932ff9b151263b36\
    000600096576746a3a68367659202020\
    000800149aeaa70cbfd8cb56781ef2b5b2d3f249c1b571a2\
    80280004e57a3bcf";
// RFC 5769 §2.2
const SAMPLE_IPV4_RESPONSE: &str = "0101003c2112a442b7e7a701bc34d686fa87dfae\
    8022000b7465737420766563746f7220\
    002000080001a147e112a643\
    000800142b91f599fd9e90c38c7489f92af9ba53f06be7d7\
    80280004c07d4c96";
// RFC 5769 §2.3
const SAMPLE_IPV6_RESPONSE: &str = "010100482112a442b7e7a701bc34d686fa87dfae\
    8022000b7465737420766563746f7220\
    002000140002a1470113a9faa5d3f179bc25f4b5bed2b9d9\
    00080014a382954e4be67bf11784c97c8292c275bfe3ed41\
    80280004c8fb0b4c";

fn bytes(s: &str) -> Vec<u8> {
    hex::decode(s.replace(char::is_whitespace, "")).unwrap()
}

#[test]
fn rfc5769_sample_request_parses_and_verifies() {
    let data = bytes(SAMPLE_REQUEST);
    assert_eq!(data.len(), 108);
    assert!(is_stun(&data));
    let msg = StunMessage::parse(&data).unwrap();
    assert_eq!(msg.class(), Class::Request);
    assert_eq!(msg.method(), Method::Binding);
    assert_eq!(msg.transaction_id(), &TXID);
    assert_eq!(msg.username(), Some("evtj:h6vY"));
    assert_eq!(msg.priority(), Some(0x6e00_01ff));
    assert_eq!(msg.ice_controlled(), Some(0x932f_f9b1_5126_3b36));
    assert_eq!(msg.ice_controlling(), None);
    assert!(!msg.use_candidate());
    assert_eq!(msg.unknown_required().count(), 0);
    assert!(msg.verify_integrity(PASSWORD));
    assert!(!msg.verify_integrity(b"VOkJxbRl1RmTxUk/WvJxBT"));
    assert!(msg.verify_fingerprint());
}

#[test]
fn rfc5769_sample_request_is_reproduced_by_the_writer() {
    let mut buf = [0u8; MAX_MESSAGE_LEN];
    let mut w = StunWriter::new(&mut buf, Class::Request, Method::Binding, &TXID)
        .unwrap()
        .with_padding(0x20);
    w.software("STUN test client").unwrap();
    w.priority(0x6e00_01ff).unwrap();
    w.ice_controlled(0x932f_f9b1_5126_3b36).unwrap();
    w.username("evtj:h6vY").unwrap();
    w.message_integrity(PASSWORD)
        .unwrap()
        .fingerprint()
        .unwrap();
    let n = w.finish();
    assert_eq!(hex::encode(&buf[..n]), hex::encode(bytes(SAMPLE_REQUEST)));
}

fn check_response_vector(vector: &str, mapped: SocketAddr) {
    let data = bytes(vector);
    let msg = StunMessage::parse(&data).unwrap();
    assert_eq!(msg.class(), Class::Success);
    assert_eq!(msg.transaction_id(), &TXID);
    assert_eq!(msg.xor_mapped_address(), Some(mapped));
    assert!(msg.verify_integrity(PASSWORD));
    assert!(msg.verify_fingerprint());

    let mut buf = [0u8; MAX_MESSAGE_LEN];
    let mut w = StunWriter::new(&mut buf, Class::Success, Method::Binding, &TXID)
        .unwrap()
        .with_padding(0x20);
    w.software("test vector")
        .unwrap()
        .xor_mapped_address(mapped)
        .unwrap();
    w.message_integrity(PASSWORD)
        .unwrap()
        .fingerprint()
        .unwrap();
    let n = w.finish();
    assert_eq!(hex::encode(&buf[..n]), hex::encode(&data));
}

#[test]
fn rfc5769_sample_ipv4_response() {
    check_response_vector(SAMPLE_IPV4_RESPONSE, "192.0.2.1:32853".parse().unwrap());
}

#[test]
fn rfc5769_sample_ipv6_response() {
    let mapped = "[2001:db8:1234:5678:11:2233:4455:6677]:32853"
        .parse()
        .unwrap();
    check_response_vector(SAMPLE_IPV6_RESPONSE, mapped);
}

#[test]
fn any_flipped_bit_fails_integrity_or_fingerprint() {
    let data = bytes(SAMPLE_REQUEST);
    // Flip a bit inside the SOFTWARE value: structure stays valid, both checks must fail.
    let mut tampered = data.clone();
    tampered[25] ^= 0x01;
    let msg = StunMessage::parse(&tampered).unwrap();
    assert!(!msg.verify_integrity(PASSWORD));
    assert!(!msg.verify_fingerprint());
    // Flip a bit of the FINGERPRINT value only: integrity still holds.
    let mut tampered = data;
    tampered[107] ^= 0x80;
    let msg = StunMessage::parse(&tampered).unwrap();
    assert!(msg.verify_integrity(PASSWORD));
    assert!(!msg.verify_fingerprint());
}

#[test]
fn binding_request_round_trip() {
    let mut buf = [0u8; MAX_MESSAGE_LEN];
    let n = write_binding_request(&mut buf, &TXID, "lf:rf", 7, Some(42), true, b"pw").unwrap();
    let msg = StunMessage::parse(&buf[..n]).unwrap();
    assert_eq!(msg.class(), Class::Request);
    assert_eq!(msg.username(), Some("lf:rf"));
    assert_eq!(msg.priority(), Some(7));
    assert_eq!(msg.ice_controlling(), Some(42));
    assert_eq!(msg.ice_controlled(), None);
    assert!(msg.use_candidate());
    assert!(msg.verify_integrity(b"pw"));
    assert!(msg.verify_fingerprint());

    let n = write_binding_request(&mut buf, &TXID, "lf:rf", 7, None, false, b"pw").unwrap();
    let msg = StunMessage::parse(&buf[..n]).unwrap();
    assert_eq!((msg.ice_controlling(), msg.use_candidate()), (None, false));
}

#[test]
fn binding_error_round_trip_with_and_without_integrity() {
    let mut buf = [0u8; MAX_MESSAGE_LEN];
    let n = write_binding_error(&mut buf, &TXID, 487, "Role Conflict", Some(b"pw")).unwrap();
    let msg = StunMessage::parse(&buf[..n]).unwrap();
    assert_eq!(msg.class(), Class::Error);
    assert_eq!(
        msg.error_code(),
        Some(ErrorCode {
            code: 487,
            reason: "Role Conflict"
        })
    );
    assert!(msg.verify_integrity(b"pw") && msg.verify_fingerprint());

    let n = write_binding_error(&mut buf, &TXID, 400, "Bad Request", None).unwrap();
    let msg = StunMessage::parse(&buf[..n]).unwrap();
    assert_eq!(msg.error_code().map(|e| e.code), Some(400));
    assert!(!msg.has_integrity() && msg.verify_fingerprint());
    // ERROR-CODE header + 4 + "Bad Request" padded to 12, FINGERPRINT 8.
    assert_eq!(n, HEADER_LEN + 4 + 16 + 8);

    assert_eq!(
        write_binding_error(&mut buf, &TXID, 200, "OK", None),
        Err(StunError::InvalidErrorCode(200))
    );
}

#[test]
fn writer_errors() {
    let mut small = [0u8; 30];
    let mapped: SocketAddr = "[::1]:1".parse().unwrap();
    assert_eq!(
        write_binding_success(&mut small, &TXID, mapped, b"k"),
        Err(StunError::BufferTooSmall)
    );
    assert_eq!(
        StunWriter::new(&mut small[..19], Class::Request, Method::Binding, &TXID).err(),
        Some(StunError::BufferTooSmall)
    );
    let mut buf = [0u8; MAX_MESSAGE_LEN];
    let mut w = StunWriter::new(&mut buf, Class::Request, Method::Binding, &TXID).unwrap();
    assert_eq!(
        w.username(&"x".repeat(513)).err(),
        Some(StunError::ValueTooLong)
    );
    w.message_integrity(b"k").unwrap();
    assert_eq!(w.priority(1).err(), Some(StunError::AttributeOrder));
    w.fingerprint().unwrap();
    assert_eq!(w.fingerprint().err(), Some(StunError::AttributeOrder));
    assert_eq!(w.len(), HEADER_LEN + 24 + 8);
}

/// Header plus raw attribute bytes, with a correct length field.
fn message(ty: u16, attrs: &[u8]) -> Vec<u8> {
    let mut m = Vec::new();
    m.extend_from_slice(&ty.to_be_bytes());
    m.extend_from_slice(&(attrs.len() as u16).to_be_bytes());
    m.extend_from_slice(&MAGIC_COOKIE.to_be_bytes());
    m.extend_from_slice(&TXID);
    m.extend_from_slice(attrs);
    m
}

#[test]
fn parse_errors() {
    assert_eq!(
        StunMessage::parse(&[0; 19]).err(),
        Some(StunError::TooShort)
    );
    assert_eq!(
        StunMessage::parse(&[0; 1501]).err(),
        Some(StunError::TooLarge(1501))
    );
    let ok = message(0x0001, &[]);
    assert!(StunMessage::parse(&ok).is_ok());
    let mut bad = ok.clone();
    bad[0] = 0x80;
    assert_eq!(StunMessage::parse(&bad).err(), Some(StunError::NotStun));
    let mut bad = ok.clone();
    bad[4] = 0;
    assert_eq!(StunMessage::parse(&bad).err(), Some(StunError::NotStun));
    let mut bad = ok.clone();
    bad[3] = 4;
    assert_eq!(StunMessage::parse(&bad).err(), Some(StunError::BadLength));
    let odd = message(0x0001, &[0, 0x80, 0]);
    assert_eq!(StunMessage::parse(&odd).err(), Some(StunError::BadLength));
    // Allocate (0x003) is not Binding.
    let allocate = message(0x0003, &[]);
    assert_eq!(
        StunMessage::parse(&allocate).err(),
        Some(StunError::UnsupportedMethod(3))
    );
    // PRIORITY claiming 8 bytes with 4 present.
    let truncated = message(0x0001, &[0, 0x24, 0, 8, 1, 2, 3, 4]);
    assert_eq!(
        StunMessage::parse(&truncated).err(),
        Some(StunError::BadAttribute(0x24))
    );
    // PRIORITY of the wrong size.
    let wrong = message(0x0001, &[0, 0x24, 0, 2, 1, 2, 0, 0]);
    assert_eq!(
        StunMessage::parse(&wrong).err(),
        Some(StunError::BadAttribute(0x24))
    );
    // XOR-MAPPED-ADDRESS with family 3.
    let family = message(0x0101, &[0, 0x20, 0, 8, 0, 3, 0, 0, 1, 2, 3, 4]);
    assert_eq!(
        StunMessage::parse(&family).err(),
        Some(StunError::BadAttribute(0x20))
    );
    // Anything after FINGERPRINT.
    let after = message(0x0001, &[0x80, 0x28, 0, 4, 0, 0, 0, 0, 0, 0x25, 0, 0]);
    assert_eq!(
        StunMessage::parse(&after).err(),
        Some(StunError::BadAttribute(0x25))
    );
    // ERROR-CODE class 7.
    let code = message(0x0111, &[0, 9, 0, 4, 0, 0, 7, 0]);
    assert_eq!(
        StunMessage::parse(&code).err(),
        Some(StunError::BadAttribute(9))
    );
}

#[test]
fn unknown_and_late_attributes() {
    let mut attrs = Vec::new();
    attrs.extend_from_slice(&[0xC0, 0x57, 0, 4, 0, 1, 0, 0]); // optional: ignored
    attrs.extend_from_slice(&[0x00, 0x14, 0, 1, b'r', 0, 0, 0]); // REALM: required, unknown
    attrs.extend_from_slice(&[0, 6, 0, 1, b'a', 0, 0, 0]); // USERNAME "a"
    attrs.extend_from_slice(&[0, 6, 0, 1, b'b', 0, 0, 0]); // repeated: first wins
    attrs.extend_from_slice(&[0, 8, 0, 20]);
    attrs.extend_from_slice(&[0; 20]); // MESSAGE-INTEGRITY
    attrs.extend_from_slice(&[0, 0x25, 0, 0]); // after integrity: ignored
    attrs.extend_from_slice(&[0, 0x15, 0, 0]); // NONCE after integrity: not reported
    let data = message(0x0001, &attrs);
    let msg = StunMessage::parse(&data).unwrap();
    assert_eq!(msg.username(), Some("a"));
    assert!(!msg.use_candidate());
    assert!(msg.has_integrity() && !msg.has_fingerprint());
    assert_eq!(msg.unknown_required().collect::<Vec<_>>(), vec![0x0014]);
    assert!(!msg.verify_integrity(b"k"));
    assert!(!msg.verify_fingerprint());
}

#[test]
fn fuzz_body_handles_the_vectors() {
    for v in [SAMPLE_REQUEST, SAMPLE_IPV4_RESPONSE, SAMPLE_IPV6_RESPONSE] {
        fuzz_stun(&bytes(v));
    }
}

/// A datagram with a valid header around arbitrary attribute bytes, to get past the header checks.
fn framed() -> impl Strategy<Value = Vec<u8>> {
    (0u16..4, proptest::collection::vec(any::<u8>(), 0..64)).prop_map(|(class, mut body)| {
        body.truncate(body.len() / 4 * 4);
        message(encode_type_bits(class), &body)
    })
}

fn encode_type_bits(class: u16) -> u16 {
    0x0001 | ((class & 1) << 4) | ((class & 2) << 7)
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..1600)) {
        fuzz_stun(&data);
    }

    #[test]
    fn framed_bytes_never_panic(data in framed()) {
        fuzz_stun(&data);
    }

    #[test]
    fn request_round_trip(
        txid in any::<[u8; 12]>(),
        username in "[a-zA-Z0-9+/:]{1,64}",
        priority in any::<u32>(),
        tie in proptest::option::of(any::<u64>()),
        use_candidate in any::<bool>(),
        key in proptest::collection::vec(any::<u8>(), 0..40),
    ) {
        let mut buf = [0u8; MAX_MESSAGE_LEN];
        let n = write_binding_request(&mut buf, &txid, &username, priority, tie, use_candidate, &key)
            .unwrap();
        let msg = StunMessage::parse(&buf[..n]).unwrap();
        prop_assert_eq!(msg.transaction_id(), &txid);
        prop_assert_eq!(msg.username(), Some(username.as_str()));
        prop_assert_eq!(msg.priority(), Some(priority));
        prop_assert_eq!(msg.ice_controlling(), tie);
        prop_assert_eq!(msg.use_candidate(), use_candidate);
        prop_assert!(msg.verify_integrity(&key));
        prop_assert!(msg.verify_fingerprint());
    }

    #[test]
    fn mapped_address_round_trip(txid in any::<[u8; 12]>(), addr in any::<SocketAddr>()) {
        let mut buf = [0u8; MAX_MESSAGE_LEN];
        let n = write_binding_success(&mut buf, &txid, addr, b"k").unwrap();
        let msg = StunMessage::parse(&buf[..n]).unwrap();
        let expected = match addr {
            // The wire format carries neither flow info nor scope id.
            SocketAddr::V6(v6) => SocketAddr::new(IpAddr::V6(*v6.ip()), v6.port()),
            v4 => v4,
        };
        prop_assert_eq!(msg.xor_mapped_address(), Some(expected));
    }
}
