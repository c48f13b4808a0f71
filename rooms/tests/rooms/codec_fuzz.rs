//! Decoding arbitrary bytes never panics: a typed error or a value, nothing else.

#![allow(clippy::unwrap_used)]

use crate::common;

use common::*;
use ferry_room::{Delta, Message, Op, decode, encode};
use proptest::prelude::*;

fn sample_messages() -> Vec<Vec<u8>> {
    let mut rs = replicas(2);
    let mut out = Vec::new();
    for (i, c) in [join("a"), mute("a", true), publish("a", "cam"), leave("a")]
        .into_iter()
        .enumerate()
    {
        let op = rs[0]
            .handle_command(1_000 + i as u64, key(&format!("k{i}")), c)
            .unwrap()
            .op
            .unwrap();
        out.push(encode(&Message::Op(op.clone())).unwrap());
        out.push(encode(&op).unwrap());
    }
    let b = rs[1].id().clone();
    out.push(encode(&Message::Delta(rs[0].delta_for(&b))).unwrap());
    out.push(encode(&Message::AeRequest(rs[0].start_anti_entropy())).unwrap());
    let round = rs[1].sync_round(64);
    let (_, summary) = round.parent.unwrap();
    out.push(encode(&Message::Summary(summary)).unwrap());
    out.push(encode(&Message::Watermark(rs[0].sync_round(64).watermark)).unwrap());
    out
}

#[test]
fn encoded_messages_round_trip_and_reject_damage() {
    for bytes in sample_messages() {
        let msg: Result<Message, _> = decode(&bytes);
        let op: Result<Op, _> = decode(&bytes);
        assert!(msg.is_ok() || op.is_ok());
        assert!(decode::<Message>(&[]).is_err());
        let mut v2 = bytes.clone();
        v2[0] = 2;
        assert!(decode::<Message>(&v2).is_err(), "unknown version");
        let mut long = bytes.clone();
        long.push(0);
        assert!(
            decode::<Message>(&long).is_err() && decode::<Op>(&long).is_err(),
            "trailing byte"
        );
        assert!(decode::<Message>(&bytes[..bytes.len() - 1]).is_err() || bytes.len() < 3);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4096))]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = decode::<Message>(&bytes);
        let _ = decode::<Op>(&bytes);
        let _ = decode::<Delta>(&bytes);
        let mut v = vec![ferry_room::codec::WIRE_VERSION];
        v.extend_from_slice(&bytes);
        let _ = decode::<Message>(&v);
        let _ = decode::<Op>(&v);
        let _ = decode::<Delta>(&v);
    }

    /// Valid messages with a few bytes flipped, cut or extended: the nastiest inputs.
    #[test]
    fn mutated_messages_never_panic(
        which in 0usize..10,
        flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..8),
        cut in any::<usize>(),
    ) {
        let samples = sample_messages();
        let mut bytes = samples[which % samples.len()].clone();
        for (at, val) in flips {
            let i = at % bytes.len();
            bytes[i] = val;
        }
        let _ = decode::<Message>(&bytes);
        let _ = decode::<Op>(&bytes);
        let _ = decode::<Delta>(&bytes);
        let cut = cut % (bytes.len() + 1);
        let _ = decode::<Message>(&bytes[..cut]);
    }
}
