#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::time::{Duration, Instant};

use proptest::prelude::*;

use super::*;
use crate::rtcp::{RtcpIter, RtcpPacket};

fn bytes(s: &str) -> Vec<u8> {
    hex::decode(s.replace(' ', "")).unwrap()
}

/// The FCI of the one transport-cc packet in `packet`.
fn fci_of(packet: &[u8]) -> &[u8] {
    match RtcpIter::new(packet).collect::<Vec<_>>().as_slice() {
        [Ok(RtcpPacket::TransportCc { fci, .. })] => fci,
        other => panic!("expected one transport-cc packet, got {other:?}"),
    }
}

fn statuses(feedback: &TwccFeedback<'_>) -> Vec<(u16, Option<i64>)> {
    feedback.packets().collect()
}

/// `(seq, delta in 250 µs ticks)` from decoded arrivals, the way they were on the wire.
fn wire_deltas(feedback: &TwccFeedback<'_>) -> Vec<(u16, Option<i64>)> {
    let mut prev = feedback.reference_time_us;
    feedback
        .packets()
        .map(|(seq, at)| {
            (
                seq,
                at.map(|at| {
                    let d = (at - prev) / DELTA_TICK_US;
                    prev = at;
                    d
                }),
            )
        })
        .collect()
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Firefox's feedback from `rtcp::tests::parses_firefox_transport_cc`.
const FIREFOX: [u8; 28] = [
    143, 205, 0, 6, 65, 227, 184, 49, 118, 243, 78, 96, 42, 63, 0, 5, 12, 162, 166, 0, 32, 5, 200,
    4, 0, 4, 0, 0,
];

#[test]
fn decodes_firefox_feedback() {
    let feedback = TwccFeedback::parse(fci_of(&FIREFOX)).unwrap();
    let reference = 828_070 * 64_000;
    assert_eq!(
        (
            feedback.base_seq,
            feedback.status_count,
            feedback.reference_time_us,
            feedback.feedback_count
        ),
        (10815, 5, reference, 0)
    );
    // One run-length chunk of five small deltas: 200, 4, 0, 4, 0 ticks; one zero byte of padding.
    assert_eq!(
        statuses(&feedback),
        [
            (10815, Some(reference + 50_000)),
            (10816, Some(reference + 51_000)),
            (10817, Some(reference + 51_000)),
            (10818, Some(reference + 52_000)),
            (10819, Some(reference + 52_000)),
        ]
    );
}

#[test]
fn writes_firefox_feedback_byte_for_byte() {
    let reference = 828_070 * 64_000;
    let arrivals = [50_000, 51_000, 51_000, 52_000, 52_000].map(|d| Some(reference + d));
    let mut buf = [0xEE; 64];
    let n = write_transport_cc(
        &mut buf,
        0x41e3_b831,
        0x76f3_4e60,
        10815,
        reference,
        0,
        &arrivals,
    )
    .unwrap();
    assert_eq!(buf[..n], FIREFOX);
}

/// Every chunk kind and delta size, built by hand from the draft's layouts: base sequence
/// 65530 (the statuses wrap), a negative reference time, 250 statuses.
const HAND_BUILT: &str = "8fcd000d 11223344 55667788 fffa00fa 800001ab \
     2003 a71c d892 4002 00dd a800 \
     0400c8 010203040506ff 10012cfffc007d00 80007fff 2030";

#[test]
fn decodes_hand_built_chrome_style_feedback() {
    let packet = bytes(HAND_BUILT);
    let feedback = TwccFeedback::parse(fci_of(&packet)).unwrap();
    let reference = -8_388_607 * 64_000;
    assert_eq!(
        (
            feedback.base_seq,
            feedback.status_count,
            feedback.reference_time_us,
            feedback.feedback_count
        ),
        (65530, 250, reference, 0xAB)
    );
    let mut expected = vec![
        // Run of 3 small deltas (0x2003).
        (65530, Some(4)),
        (65531, Some(0)),
        (65532, Some(200)),
        // 1-bit vector 1 0 0 1 1 1 0 0 0 1 1 1 0 0 (0xa71c).
        (65533, Some(1)),
        (65534, None),
        (65535, None),
        (0, Some(2)),
        (1, Some(3)),
        (2, Some(4)),
        (3, None),
        (4, None),
        (5, None),
        (6, Some(5)),
        (7, Some(6)),
        (8, Some(255)),
        (9, None),
        (10, None),
        // 2-bit vector small, large, lost, negative, small, lost, large 8 s (0xd892).
        (11, Some(16)),
        (12, Some(300)),
        (13, None),
        (14, Some(-4)),
        (15, Some(0)),
        (16, None),
        (17, Some(32_000)),
        // Run of 2 large deltas, the extremes (0x4002).
        (18, Some(-32_768)),
        (19, Some(32_767)),
    ];
    // Run of 221 not received (0x00dd), then a 1-bit vector cut to 3 statuses (0xa800).
    expected.extend((20..241).map(|seq| (seq, None)));
    expected.extend([(241, Some(32)), (242, None), (243, Some(48))]);
    assert_eq!(wire_deltas(&feedback), expected);
    assert_eq!(
        statuses(&feedback).last(),
        Some(&(243, Some(-536_862_630_250)))
    );
    fuzz_twcc(&packet);
    fuzz_twcc(fci_of(&packet));
}

#[test]
fn writer_picks_run_length_then_one_bit_then_two_bit_chunks() {
    let tick = DELTA_TICK_US;
    // 20 received 1 tick apart: a run.
    let mut arrivals: Vec<Option<i64>> = (1..=20).map(|t| Some(t * tick)).collect();
    // 14 alternating lost/received, no large delta: a 1-bit vector.
    let mut t = 20;
    for k in 0..14 {
        arrivals.push((k % 2 == 1).then(|| {
            t += 1;
            t * tick
        }));
    }
    // A negative delta, a small one and a loss: a 2-bit vector (the last, partial chunk).
    arrivals.extend([Some(23 * tick), Some(24 * tick), None]);
    let mut buf = [0u8; 128];
    let n = write_transport_cc(&mut buf, 1, 2, 10, 0, 3, &arrivals).unwrap();
    let expected = format!(
        "8fcd000d 00000001 00000002 000a0025 00000003 2014 9555 e400 {} {} fffc 01",
        "01".repeat(20),
        "01".repeat(7)
    );
    assert_eq!(buf[..n], bytes(&expected));
    let feedback = TwccFeedback::parse(fci_of(&buf[..n])).unwrap();
    let decoded: Vec<_> = feedback.packets().map(|(_, a)| a).collect();
    assert_eq!(decoded, arrivals);
}

#[test]
fn writer_rounds_to_ticks_and_pads() {
    // 125 µs rounds up, 124 down; the reference time is floored to 64 ms.
    let arrivals = [Some(64_000 + 125), Some(64_000 + 374), None];
    let mut buf = [0xEE; 64];
    let n = write_transport_cc(&mut buf, 1, 2, 7, 64_000 + 63_999, 9, &arrivals).unwrap();
    // 20 + one chunk + two 1-byte deltas = 24: no padding.
    assert_eq!(
        buf[..n],
        bytes("8fcd0005 00000001 00000002 00070003 00000109 d400 0100")[..]
    );
    // 25 bytes: three zero bytes pad the FCI, and the P bit stays clear.
    let arrivals = [Some(0), Some(250), Some(500)];
    let n = write_transport_cc(&mut buf, 1, 2, 7, 0, 9, &arrivals).unwrap();
    assert_eq!(
        buf[..n],
        bytes("8fcd0006 00000001 00000002 00070003 00000009 2003 000101 000000")[..]
    );
}

#[test]
fn writer_rejects_what_the_format_cannot_carry() {
    let mut buf = [0u8; 64];
    let too_far = [Some(0), Some(32_768 * DELTA_TICK_US)];
    assert!(matches!(
        write_transport_cc(&mut buf, 1, 2, 0, 0, 0, &too_far),
        Err(RtcpError::InvalidInput(_))
    ));
    assert!(matches!(
        write_transport_cc(&mut buf, 1, 2, 0, 0, 0, &[]),
        Err(RtcpError::InvalidInput(_))
    ));
    assert_eq!(
        write_transport_cc(&mut buf[..20], 1, 2, 0, 0, 0, &[Some(0)]),
        Err(RtcpError::BufferTooSmall {
            needed: 24,
            capacity: 20
        })
    );
}

#[test]
fn rejects_malformed_fci() {
    assert_eq!(TwccFeedback::parse(&[0; 7]), Err(TwccError::TooShort(7)));
    assert_eq!(
        TwccFeedback::parse(&bytes("00010000 00000000 2001 01")),
        Err(TwccError::Empty)
    );
    // The CVE-class case: a huge status count backed by one chunk.
    assert_eq!(
        TwccFeedback::parse(&bytes("0001ffff 00000000 2001")),
        Err(TwccError::TruncatedChunks {
            covered: 1,
            count: 65535
        })
    );
    assert_eq!(
        TwccFeedback::parse(&bytes("0001ffff 00000000")),
        Err(TwccError::TruncatedChunks {
            covered: 0,
            count: 65535
        })
    );
    // Symbol 3 in a run and in a 2-bit vector.
    assert_eq!(
        TwccFeedback::parse(&bytes("00010001 00000000 6001 0000")),
        Err(TwccError::ReservedSymbol { seq: 1 })
    );
    assert_eq!(
        TwccFeedback::parse(&bytes("00010007 00000000 c300 0000")),
        Err(TwccError::ReservedSymbol { seq: 3 })
    );
    // A run of 8191 large deltas needs 16382 bytes.
    assert_eq!(
        TwccFeedback::parse(&bytes("00011fff 00000000 5fff 0000")),
        Err(TwccError::TruncatedDeltas {
            needed: 16_382,
            available: 2
        })
    );
    // A zero-length run and symbol 3 past the status count are harmless.
    let fci = bytes("00010001 00000000 0000 c300");
    let feedback = TwccFeedback::parse(&fci).unwrap();
    assert_eq!(statuses(&feedback), [(1, None)]);
}

#[test]
fn large_status_count_needs_no_allocation_to_decode() {
    // 65535 lost packets in 9 run-length chunks: valid, and decoded lazily.
    let mut fci = bytes("fff0ffff 00000000");
    for _ in 0..8 {
        fci.extend(MAX_RUN.to_be_bytes());
    }
    fci.extend(7u16.to_be_bytes());
    let feedback = TwccFeedback::parse(&fci).unwrap();
    assert_eq!(feedback.packets().count(), 65535);
    assert!(feedback.packets().all(|(_, a)| a.is_none()));
    assert_eq!(feedback.packets().last(), Some((0xffee, None)));
    fuzz_twcc(&fci);
}

/// A decoded feedback: `(feedback count, base, reference, statuses)`.
type Decoded = (u8, u16, i64, Vec<(u16, Option<i64>)>);

/// Everything the recorder writes at `now`, decoded, after checking each packet's length.
fn drain(rec: &mut TwccRecorder, now: Instant) -> Vec<Decoded> {
    let mut out = Vec::new();
    let mut buf = [0u8; 1500];
    while let Some(n) = rec.poll_feedback(now, 0xAAAA, 0xBBBB, &mut buf) {
        assert!(n <= DEFAULT_MAX_PACKET_LEN, "{n} bytes");
        let f = TwccFeedback::parse(fci_of(&buf[..n])).unwrap();
        out.push((
            f.feedback_count,
            f.base_seq,
            f.reference_time_us,
            statuses(&f),
        ));
        assert!(out.len() < 1000, "poll_feedback never stops");
    }
    out
}

#[test]
fn recorder_reports_gaps_reordering_and_duplicates() {
    let t0 = Instant::now();
    let mut rec = TwccRecorder::default();
    assert_eq!(rec.poll_timeout(), None);
    rec.on_packet(t0, 1);
    rec.on_packet(t0 + ms(5), 2);
    rec.on_packet(t0 + ms(10), 4);
    rec.on_packet(t0 + ms(12), 3);
    rec.on_packet(t0 + ms(13), 3);
    rec.on_packet(t0 + ms(20), 6);
    assert_eq!(rec.poll_timeout(), Some(t0 + ms(50)));
    let mut buf = [0u8; 1500];
    assert_eq!(rec.poll_feedback(t0 + ms(49), 1, 2, &mut buf), None);
    let n = rec.poll_feedback(t0 + ms(50), 1, 2, &mut buf).unwrap();
    // Deltas 0, 20, 28, -8 (large), lost, 40 ticks: one 2-bit vector.
    assert_eq!(
        buf[..n],
        bytes("8fcd0006 00000001 00000002 00010006 00000000 d584 00141cfff828")[..]
    );
    assert_eq!(
        statuses(&TwccFeedback::parse(fci_of(&buf[..n])).unwrap()),
        [
            (1, Some(0)),
            (2, Some(5_000)),
            (3, Some(12_000)),
            (4, Some(10_000)),
            (5, None),
            (6, Some(20_000))
        ]
    );
    assert_eq!(rec.poll_feedback(t0 + ms(50), 1, 2, &mut buf), None);
    assert_eq!(rec.poll_timeout(), None);
    // A duplicate of a reported packet changes nothing.
    rec.on_packet(t0 + ms(60), 4);
    assert_eq!(rec.poll_timeout(), None);
}

#[test]
fn recorder_reports_a_late_packet_again() {
    let t0 = Instant::now();
    let mut rec = TwccRecorder::default();
    rec.on_packet(t0, 1);
    rec.on_packet(t0 + ms(1), 2);
    rec.on_packet(t0 + ms(2), 4);
    assert_eq!(
        drain(&mut rec, t0 + ms(50)),
        [(
            0,
            1,
            0,
            vec![(1, Some(0)), (2, Some(1_000)), (3, None), (4, Some(2_000))]
        )]
    );
    rec.on_packet(t0 + ms(60), 3);
    rec.on_packet(t0 + ms(61), 5);
    assert_eq!(rec.poll_timeout(), Some(t0 + ms(110)));
    assert_eq!(
        drain(&mut rec, t0 + ms(110)),
        [(
            1,
            3,
            0,
            vec![(3, Some(60_000)), (4, Some(2_000)), (5, Some(61_000))]
        )]
    );
}

#[test]
fn recorder_keeps_one_time_base_across_an_idle_period() {
    let t0 = Instant::now();
    let mut rec = TwccRecorder::default();
    rec.on_packet(t0, 1);
    assert_eq!(
        drain(&mut rec, t0 + ms(50)),
        [(0, 1, 0, vec![(1, Some(0))])]
    );
    assert_eq!(rec.poll_timeout(), None);
    rec.on_packet(t0 + ms(20_000), 2);
    rec.on_packet(t0 + ms(20_010), 3);
    assert_eq!(rec.poll_timeout(), Some(t0 + ms(20_050)));
    assert_eq!(
        drain(&mut rec, t0 + ms(20_050)),
        [(
            1,
            2,
            312 * 64_000,
            vec![(2, Some(20_000_000)), (3, Some(20_010_000))]
        )]
    );
}

#[test]
fn recorder_splits_where_a_delta_overflows_16_bits() {
    let t0 = Instant::now();
    let mut rec = TwccRecorder::default();
    rec.on_packet(t0, 1);
    rec.on_packet(t0 + ms(9_000), 2);
    rec.on_packet(t0 + ms(9_001), 3);
    assert_eq!(
        drain(&mut rec, t0 + ms(9_001)),
        [
            (0, 1, 0, vec![(1, Some(0))]),
            (
                1,
                2,
                140 * 64_000,
                vec![(2, Some(9_000_000)), (3, Some(9_001_000))]
            ),
        ]
    );
    assert_eq!(rec.poll_timeout(), None);
}

#[test]
fn recorder_unwraps_sequence_numbers() {
    let t0 = Instant::now();
    let mut rec = TwccRecorder::default();
    for (i, seq) in [65533u16, 65534, 65535, 1, 2].into_iter().enumerate() {
        rec.on_packet(t0 + ms(i as u64), seq);
    }
    let out = drain(&mut rec, t0 + ms(50));
    assert_eq!(
        out,
        [(
            0,
            65533,
            0,
            vec![
                (65533, Some(0)),
                (65534, Some(1_000)),
                (65535, Some(2_000)),
                (0, None),
                (1, Some(3_000)),
                (2, Some(4_000))
            ]
        )]
    );
}

#[test]
fn recorder_splits_feedback_at_the_size_limit() {
    let t0 = Instant::now();
    let mut rec = TwccRecorder::default();
    for i in 0..1500u16 {
        rec.on_packet(t0 + ms(u64::from(i)), 100 + i);
    }
    let out = drain(&mut rec, t0 + ms(1500));
    // 20 header bytes, one run-length chunk, a byte per status, within 1200 bytes.
    let counts: Vec<_> = out
        .iter()
        .map(|(c, base, _, s)| (*c, *base, s.len()))
        .collect();
    assert_eq!(counts, [(0, 100, 1178), (1, 1278, 322)]);
    assert_eq!(out[1].2, 18 * 64_000);
    let all: Vec<_> = out.into_iter().flat_map(|(.., s)| s).collect();
    let expected: Vec<_> = (0..1500u16)
        .map(|i| (100 + i, Some(i64::from(i) * 1_000)))
        .collect();
    assert_eq!(all, expected);
}

#[test]
fn recorder_memory_is_bounded() {
    let t0 = Instant::now();
    let mut rec = TwccRecorder::default();
    for i in 0..20_000u32 {
        rec.on_packet(t0 + Duration::from_micros(u64::from(i) * 100), i as u16);
    }
    assert_eq!(rec.arrivals.len() as u64, MAX_TRACKED);
    let out = drain(&mut rec, t0 + ms(2_000));
    assert_eq!(out[0].1, (20_000 - MAX_TRACKED) as u16);
    assert_eq!(out.iter().map(|(.., s)| s.len()).sum::<usize>(), 16_384);
    assert!(rec.arrivals.len() as u64 <= REPORTED_HISTORY + 1);
    // A jump further than the tracked span starts over instead of filling the gap.
    rec.on_packet(t0 + ms(2_001), 20_000u16.wrapping_add(30_000));
    assert_eq!(rec.arrivals.len(), 1);
    assert_eq!(
        drain(&mut rec, t0 + ms(2_100)),
        [(
            out.len() as u8,
            50_000,
            31 * 64_000,
            vec![(50_000, Some(2_001_000))]
        )]
    );
    // Far older than the history: dropped.
    rec.on_packet(t0 + ms(2_200), 40_000);
    assert_eq!(rec.poll_timeout(), None);
}

#[test]
fn tiny_buffers_and_limits_still_make_progress() {
    let t0 = Instant::now();
    let mut rec = TwccRecorder::new(TwccConfig {
        interval: ms(100),
        max_packet_len: 0,
    });
    for i in 0..10u16 {
        rec.on_packet(t0 + ms(u64::from(i) * 10), i * 2);
    }
    assert_eq!(rec.poll_timeout(), Some(t0 + ms(100)));
    let mut buf = [0u8; 10];
    assert_eq!(rec.poll_feedback(t0 + ms(100), 1, 2, &mut buf), None);
    let out = drain(&mut rec, t0 + ms(100));
    assert!(out.len() > 1);
    let all: Vec<_> = out.into_iter().flat_map(|(.., s)| s).collect();
    assert_eq!(all.len(), 19);
    assert_eq!(all.iter().filter(|(_, a)| a.is_some()).count(), 10);
}

/// A valid transport-cc packet from arbitrary statuses (delta ticks, `None` for lost).
fn valid_packet() -> impl Strategy<Value = Vec<u8>> {
    (
        any::<u16>(),
        -(1i64 << 23)..(1 << 23),
        any::<u8>(),
        proptest::collection::vec(proptest::option::of(-32_768i64..32_768), 1..200),
    )
        .prop_map(|(base, reference, count, deltas)| {
            let reference = reference * REFERENCE_TICK_US;
            let mut at = reference;
            let arrivals: Vec<_> = deltas
                .into_iter()
                .map(|d| {
                    d.map(|d| {
                        at += d * DELTA_TICK_US;
                        at
                    })
                })
                .collect();
            let mut buf = vec![0u8; 1024];
            let n = write_transport_cc(&mut buf, 1, 2, base, reference, count, &arrivals).unwrap();
            buf.truncate(n);
            buf
        })
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..600)) {
        fuzz_twcc(&data);
    }

    #[test]
    fn mutated_packets_never_panic(
        packet in valid_packet(),
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..4),
        cut in any::<prop::sample::Index>(),
    ) {
        fuzz_twcc(&packet);
        let mut fci = packet[12..].to_vec();
        for (at, byte) in edits {
            let i = at.index(fci.len());
            fci[i] = byte;
        }
        fuzz_twcc(&fci);
        fuzz_twcc(&fci[..cut.index(fci.len() + 1)]);
    }

    #[test]
    fn writer_round_trips_within_half_a_tick(
        base in any::<u16>(),
        reference in -(1i64 << 23)..(1 << 23),
        steps in proptest::collection::vec(proptest::option::of((-32_000i64..32_000, -124i64..=124)), 1..300),
    ) {
        let reference = reference * REFERENCE_TICK_US;
        let mut ticks = 0;
        let arrivals: Vec<_> = steps.iter().map(|s| s.map(|(d, jitter)| {
            ticks += d;
            reference + ticks * DELTA_TICK_US + jitter
        })).collect();
        let mut buf = vec![0u8; 2048];
        let n = write_transport_cc(&mut buf, 1, 2, base, reference, 0, &arrivals).unwrap();
        let feedback = TwccFeedback::parse(fci_of(&buf[..n])).unwrap();
        prop_assert_eq!(feedback.reference_time_us, reference);
        prop_assert_eq!(feedback.packets().count(), arrivals.len());
        for ((seq, got), (i, want)) in feedback.packets().zip(arrivals.iter().enumerate()) {
            prop_assert_eq!(seq, base.wrapping_add(i as u16));
            match (got, want) {
                (None, None) => {}
                (Some(got), Some(want)) => prop_assert!((got - want).abs() <= 125),
                other => prop_assert!(false, "{:?}", other),
            }
        }
    }

    /// Drives the recorder with reordering, loss, duplicates, idle gaps and irregular polling,
    /// and checks its feedback against what arrived.
    #[test]
    fn recorder_reports_what_arrived(
        first in any::<u16>(),
        events in proptest::collection::vec((-20i64..40, 0u64..300, any::<bool>()), 1..300),
        max_packet_len in prop_oneof![Just(DEFAULT_MAX_PACKET_LEN), 24usize..200],
    ) {
        let t0 = Instant::now();
        let mut rec = TwccRecorder::new(TwccConfig { interval: DEFAULT_INTERVAL, max_packet_len });
        let mut high = i64::from(first);
        let mut now = t0;
        let mut epoch = None;
        let mut arrived: HashMap<u16, i64> = HashMap::new();
        let mut reported: HashMap<u16, Option<i64>> = HashMap::new();
        let mut next_count = 0u8;
        let mut buf = [0u8; 1500];
        let mut poll = |rec: &mut TwccRecorder, now: Instant, reported: &mut HashMap<u16, Option<i64>>| {
            while let Some(n) = rec.poll_feedback(now, 1, 2, &mut buf) {
                assert!(n <= max_packet_len.max(MIN_PACKET_LEN));
                let f = TwccFeedback::parse(fci_of(&buf[..n])).unwrap();
                assert_eq!(f.feedback_count, next_count);
                next_count = next_count.wrapping_add(1);
                reported.extend(f.packets());
            }
        };
        for (i, (step, dt, do_poll)) in events.into_iter().enumerate() {
            // Up to 20 behind the highest sent: reordering within the recorder's history.
            let truth = if i == 0 { high } else { high + step };
            high = high.max(truth);
            now += ms(dt);
            let seq = truth as u16;
            rec.on_packet(now, seq);
            // Arrivals count from the first packet; those before it cannot be reported.
            let epoch = *epoch.get_or_insert(now);
            if truth >= i64::from(first) {
                arrived.entry(seq).or_insert((now - epoch).as_micros() as i64);
            }
            if do_poll {
                poll(&mut rec, now, &mut reported);
            }
        }
        while let Some(due) = rec.poll_timeout() {
            now = now.max(due);
            poll(&mut rec, now, &mut reported);
        }
        for (seq, status) in &reported {
            match (status, arrived.get(seq)) {
                (Some(got), Some(want)) => prop_assert!((got - want).abs() <= 125, "{seq}: {got} vs {want}"),
                (None, None) => {}
                (status, want) => prop_assert!(false, "{}: reported {:?}, arrived {:?}", seq, status, want),
            }
        }
        for seq in arrived.keys() {
            prop_assert!(reported.contains_key(seq), "{} never reported", seq);
        }
    }
}
