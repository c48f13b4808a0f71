#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use proptest::prelude::*;

use super::*;

fn bytes(s: &str) -> Vec<u8> {
    hex::decode(s.replace(' ', "")).unwrap()
}

fn parse_all(data: &[u8]) -> Vec<Result<RtcpPacket<'_>, RtcpError>> {
    RtcpIter::new(data).collect()
}

fn one(data: &[u8]) -> RtcpPacket<'_> {
    match parse_all(data).as_slice() {
        [Ok(p)] => *p,
        other => panic!("expected one packet, got {other:?}"),
    }
}

fn write(f: impl FnOnce(&mut [u8]) -> Result<usize, RtcpError>) -> Vec<u8> {
    let mut buf = [0xEEu8; 1500];
    let n = f(&mut buf).unwrap();
    buf[..n].to_vec()
}

/// The report block of the captured compound packet below.
const BLOCK: ReportBlock = ReportBlock {
    ssrc: 0xbc5e_9a40,
    fraction_lost: 0,
    cumulative_lost: 0,
    ext_highest_seq: 0x46e1,
    jitter: 273,
    last_sr: 0x09f3_6432,
    delay_since_last_sr: 150_137,
};

/// Compound RTCP captured from a browser (RR + SDES CNAME + BYE + PLI + RRR), as used by the
/// pion/webrtc-rs test suites.
const CAPTURED_COMPOUND: &str = "81c90007 902f9e2e bc5e9a40 00000000 000046e1 00000111 09f36432 00024a79 \
     81ca000c 902f9e2e 0126 7b39633030656239322d316166622d396434392d613437642d393166363465656536396635 7d 00000000 \
     81cb0001 902f9e2e \
     81ce0002 902f9e2e 902f9e2e \
     85cd0002 902f9e2e 902f9e2e";
const CNAME: &str = "{9c00eb92-1afb-9d49-a47d-91f64eee69f5}";

#[test]
fn parses_captured_compound() {
    let data = bytes(CAPTURED_COMPOUND);
    let packets: Vec<_> = parse_all(&data).into_iter().map(Result::unwrap).collect();
    assert_eq!(packets.len(), 5);
    let RtcpPacket::ReceiverReport(rr) = packets[0] else {
        panic!("{:?}", packets[0])
    };
    assert_eq!(rr.ssrc, 0x902f_9e2e);
    assert_eq!(rr.blocks.iter().collect::<Vec<_>>(), [BLOCK]);
    let RtcpPacket::Sdes(sdes) = packets[1] else {
        panic!("{:?}", packets[1])
    };
    assert_eq!(sdes.cname(), Some((0x902f_9e2e, CNAME.as_bytes())));
    assert_eq!(sdes.items().count(), 1);
    let RtcpPacket::Bye(bye) = packets[2] else {
        panic!("{:?}", packets[2])
    };
    assert_eq!(
        (bye.ssrcs.iter().collect::<Vec<_>>(), bye.reason),
        (vec![0x902f_9e2e], None)
    );
    assert_eq!(
        packets[3],
        RtcpPacket::Pli {
            sender_ssrc: 0x902f_9e2e,
            media_ssrc: 0x902f_9e2e
        }
    );
    // Rapid resynchronisation request (RFC 6051) is not decoded.
    assert_eq!(packets[4], RtcpPacket::Unknown { pt: 205, fmt: 5 });
}

#[test]
fn builders_reproduce_captured_compound() {
    let mut buf = [0u8; 200];
    let ssrc = 0x902f_9e2e;
    let mut n = write_receiver_report(&mut buf, ssrc, &[BLOCK]).unwrap();
    n += write_sdes_cname(&mut buf[n..], ssrc, CNAME).unwrap();
    n += write_bye(&mut buf[n..], &[ssrc]).unwrap();
    n += write_pli(&mut buf[n..], ssrc, ssrc).unwrap();
    assert_eq!(buf[..n], bytes(CAPTURED_COMPOUND)[..n]);
    assert_eq!(n, 104);
}

#[test]
fn parses_chrome_remb() {
    // Sent by Chrome while receiving a 6 Mb/s stream (pion/rtcp test vector):
    // exponent 6, mantissa 139487 → 8 927 168 b/s.
    let data = [
        143, 206, 0, 5, 0, 0, 0, 1, 0, 0, 0, 0, 82, 69, 77, 66, 1, 26, 32, 223, 72, 116, 237, 22,
    ];
    let RtcpPacket::Remb(remb) = one(&data) else {
        panic!()
    };
    assert_eq!((remb.sender_ssrc, remb.bitrate_bps), (1, 8_927_168));
    assert_eq!(remb.ssrcs.iter().collect::<Vec<_>>(), [1_215_622_422]);
    assert_eq!(
        write(|b| write_remb(b, 1, 8_927_168, &[1_215_622_422])),
        data
    );
}

#[test]
fn parses_firefox_transport_cc() {
    // Transport-wide CC feedback from Firefox (webrtc-rs/srtp issue 7).
    let data = [
        143, 205, 0, 6, 65, 227, 184, 49, 118, 243, 78, 96, 42, 63, 0, 5, 12, 162, 166, 0, 32, 5,
        200, 4, 0, 4, 0, 0,
    ];
    let RtcpPacket::TransportCc {
        sender_ssrc,
        media_ssrc,
        fci,
    } = one(&data)
    else {
        panic!()
    };
    assert_eq!(
        (sender_ssrc, media_ssrc, fci),
        (0x41e3_b831, 0x76f3_4e60, &data[12..])
    );
}

#[test]
fn writes_sender_report() {
    let info = SenderReportData {
        ssrc: 0x902f_9e2e,
        ntp: 0xda8b_d1fc_dddd_a05a,
        rtp_ts: 0xaaf4_edd5,
        packet_count: 1,
        octet_count: 2,
    };
    let block = ReportBlock {
        fraction_lost: 0x40,
        cumulative_lost: -3,
        ..BLOCK
    };
    let out = write(|b| write_sender_report(b, &info, &[block]));
    assert_eq!(
        out,
        bytes(
            "81c8000c 902f9e2e da8bd1fc dddda05a aaf4edd5 00000001 00000002 \
             bc5e9a40 40fffffd 000046e1 00000111 09f36432 00024a79"
        )
    );
    let RtcpPacket::SenderReport(sr) = one(&out) else {
        panic!()
    };
    assert_eq!(
        (sr.info, sr.blocks.len(), sr.blocks.get(0)),
        (info, 1, Some(block))
    );
    assert_eq!(
        write(|b| write_sender_report(b, &info, &[])),
        bytes("80c80006 902f9e2e da8bd1fc dddda05a aaf4edd5 00000001 00000002")
    );
}

#[test]
fn cumulative_lost_is_24_bit_signed_and_clamped() {
    let lost = |v| {
        let out = write(|b| {
            write_receiver_report(
                b,
                1,
                &[ReportBlock {
                    cumulative_lost: v,
                    ..BLOCK
                }],
            )
        });
        let RtcpPacket::ReceiverReport(rr) = one(&out) else {
            panic!()
        };
        (
            hex::encode(&out[13..16]),
            rr.blocks.get(0).unwrap().cumulative_lost,
        )
    };
    assert_eq!(lost(0x7F_FFFF), ("7fffff".into(), 0x7F_FFFF));
    assert_eq!(lost(0x100_0000), ("7fffff".into(), 0x7F_FFFF));
    assert_eq!(lost(-1), ("ffffff".into(), -1));
    assert_eq!(lost(-0x80_0000), ("800000".into(), -0x80_0000));
    assert_eq!(lost(i32::MIN), ("800000".into(), -0x80_0000));
}

#[test]
fn writes_receiver_report_sdes_and_bye() {
    assert_eq!(
        write(|b| write_receiver_report(b, 7, &[])),
        bytes("80c90001 00000007")
    );
    // 4 + 2 + 2 bytes then 4 nulls would overshoot: one null plus padding to 12.
    assert_eq!(
        write(|b| write_sdes_cname(b, 1, "ab")),
        bytes("81ca0003 00000001 0102 6162 00000000")
    );
    // Text ending on a word boundary still needs a terminating null word.
    assert_eq!(
        write(|b| write_sdes_cname(b, 1, "abcdef")),
        bytes("81ca0004 00000001 0106 616263646566 00000000")
    );
    assert_eq!(
        write(|b| write_bye(b, &[1, 2])),
        bytes("82cb0002 00000001 00000002")
    );
    assert_eq!(write(|b| write_bye(b, &[])), bytes("80cb0000"));
}

#[test]
fn writes_nack_pairs() {
    assert_eq!(
        write(|b| write_nack(b, 1, 2, &[100, 101, 116, 117])),
        bytes("81cd0004 00000001 00000002 00648001 00750000")
    );
    // Unsorted with duplicates.
    assert_eq!(
        write(|b| write_nack(b, 1, 2, &[5, 3, 3, 4])),
        bytes("81cd0003 00000001 00000002 00030003")
    );
    // Wrapping: 65535, 0, 1 are one run starting at 65535, whatever order they come in.
    let wrapped = bytes("81cd0003 00000001 00000002 ffff0003");
    assert_eq!(write(|b| write_nack(b, 1, 2, &[1, 65535, 0])), wrapped);
    assert_eq!(write(|b| write_nack(b, 1, 2, &[0, 1, 65535])), wrapped);
    let RtcpPacket::Nack(nack) = one(&wrapped) else {
        panic!()
    };
    assert_eq!(nack.lost().collect::<Vec<_>>(), [65535, 0, 1]);
    assert_eq!(nack.pairs().collect::<Vec<_>>(), [(65535, 3)]);
    assert_eq!(
        write_nack(&mut [0; 64], 1, 2, &[]),
        Err(RtcpError::InvalidInput("NACK without lost packets"))
    );
}

#[test]
fn writes_pli_fir_remb() {
    assert_eq!(
        write(|b| write_pli(b, 1, 2)),
        bytes("81ce0002 00000001 00000002")
    );
    assert_eq!(
        write(|b| write_fir(b, 1, &[(0x1122_3344, 7), (0x5566_7788, 8)])),
        bytes("84ce0006 00000001 00000000 11223344 07000000 55667788 08000000")
    );
    // u64::MAX: exponent 46, mantissa 0x3ffff.
    let remb = write(|b| write_remb(b, 0x0102_0304, u64::MAX, &[]));
    assert_eq!(remb, bytes("8fce0004 01020304 00000000 52454d42 00bbffff"));
    let RtcpPacket::Remb(parsed) = one(&remb) else {
        panic!()
    };
    assert_eq!(parsed.bitrate_bps, 0x3FFFF << 46);
    // Below 2^18 the mantissa holds the rate exactly; just above it loses the low bit.
    assert_eq!(
        write(|b| write_remb(b, 1, 0x3FFFF, &[9]))[16..20],
        [1, 0x03, 0xff, 0xff]
    );
    assert_eq!(
        write(|b| write_remb(b, 1, 0x40001, &[]))[16..20],
        [0, 0x06, 0x00, 0x00]
    );
}

#[test]
fn builders_refuse_small_buffers_and_oversized_input() {
    let mut small = [0u8; 11];
    assert_eq!(
        write_pli(&mut small, 1, 2),
        Err(RtcpError::BufferTooSmall {
            needed: 12,
            capacity: 11
        })
    );
    assert_eq!(
        write_receiver_report(&mut [0; 2000], 1, &[BLOCK; 32]),
        Err(RtcpError::InvalidInput("more than 31 report blocks"))
    );
    assert!(matches!(
        write_bye(&mut [0; 200], &[0; 32]),
        Err(RtcpError::InvalidInput(_))
    ));
    assert!(matches!(
        write_remb(&mut [0; 2000], 1, 1, &[0; 256]),
        Err(RtcpError::InvalidInput(_))
    ));
    assert!(matches!(
        write_sdes_cname(&mut [0; 400], 1, &"x".repeat(256)),
        Err(RtcpError::InvalidInput(_))
    ));
    assert!(matches!(
        write_fir(&mut [0; 64], 1, &[]),
        Err(RtcpError::InvalidInput(_))
    ));
    assert_eq!(
        write_nack(&mut [0; 15], 1, 2, &[1]),
        Err(RtcpError::BufferTooSmall {
            needed: 16,
            capacity: 15
        })
    );
}

#[test]
fn malformed_input_yields_one_error_and_stops() {
    use RtcpError::*;
    let first_err = |s: &str| parse_all(&bytes(s)).into_iter().find_map(Result::err);
    assert!(parse_all(&[]).is_empty());
    assert_eq!(first_err("81c9"), Some(TooShort(2)));
    assert_eq!(first_err("41c90001 00000000"), Some(BadVersion(1)));
    assert_eq!(
        first_err("81c90007 902f9e2e"),
        Some(BadLength {
            declared: 32,
            available: 8
        })
    );
    assert_eq!(
        first_err("81c90001 902f9e2e"),
        Some(Malformed {
            pt: 201,
            what: "report blocks exceed the packet"
        })
    );
    assert_eq!(
        first_err("80c80001 902f9e2e"),
        Some(Malformed {
            pt: 200,
            what: "SR shorter than its sender info"
        })
    );
    assert_eq!(first_err("a0c90001 00000000"), Some(BadPadding(0)));
    assert_eq!(first_err("a0c90001 00000009"), Some(BadPadding(9)));
    assert!(matches!(
        first_err("81cd0002 00000001 00000002"),
        Some(Malformed { pt: 205, .. })
    ));
    assert!(matches!(
        first_err("81cd0003 00000001 00000002 0001"),
        Some(BadLength { .. })
    ));
    assert!(matches!(
        first_err("84ce0003 00000001 00000000 11223344"),
        Some(Malformed { pt: 206, .. })
    ));
    assert!(matches!(
        first_err("81ce0001 00000001"),
        Some(Malformed { pt: 206, .. })
    ));
    // REMB exponent 63 with a mantissa of 2^17 does not fit 64 bits.
    assert!(matches!(
        first_err("8fce0004 00000001 00000000 52454d42 00fe0000"),
        Some(Malformed { .. })
    ));
    assert!(matches!(
        first_err("8fce0004 00000001 00000000 52454d42 02000001 00000005"),
        Some(Malformed { .. })
    ));
    assert!(matches!(
        first_err("81cb0002 902f9e2e 05464f4f"),
        Some(Malformed { pt: 203, .. })
    ));
    assert!(matches!(
        first_err("82cb0001 902f9e2e"),
        Some(Malformed { pt: 203, .. })
    ));
    assert!(matches!(
        first_err("81ca0002 00000001 01026162"),
        Some(Malformed { pt: 202, .. })
    ));
    assert!(matches!(
        first_err("82ca0003 00000001 01016100 00000002"),
        Some(Malformed { pt: 202, .. })
    ));
    assert!(matches!(
        first_err("80cc0002 00000001 4142"),
        Some(BadLength { .. })
    ));
    assert!(matches!(
        first_err("80cc0001 00000001"),
        Some(Malformed { pt: 204, .. })
    ));

    // The error ends iteration: nothing after it is returned, even a valid packet.
    let data = bytes("81ce0002 00000001 00000002 81c90007 00000001 81ce0002 00000001 00000002");
    let items = parse_all(&data);
    assert_eq!(items.len(), 2);
    assert!(items[0].is_ok() && items[1].is_err());
    let trailing = bytes("81ce0002 00000001 00000002 8100");
    assert_eq!(parse_all(&trailing)[1], Err(TooShort(2)));
}

#[test]
fn accepts_padding_reasons_and_unknown_types() {
    let padded = bytes("a0c90002 902f9e2e 00000004");
    let RtcpPacket::ReceiverReport(rr) = one(&padded) else {
        panic!()
    };
    assert_eq!((rr.ssrc, rr.blocks.is_empty()), (0x902f_9e2e, true));
    let with_reason = bytes("81cb0002 902f9e2e 03464f4f");
    let RtcpPacket::Bye(bye) = one(&with_reason) else {
        panic!()
    };
    assert_eq!(bye.reason, Some(&b"FOO"[..]));
    assert_eq!(
        one(&bytes("8fce0003 00000001 00000000 41424344")),
        RtcpPacket::Unknown { pt: 206, fmt: 15 }
    );
    assert_eq!(
        one(&bytes("83cf0001 00000001")),
        RtcpPacket::Unknown { pt: 207, fmt: 3 }
    );
    assert_eq!(
        one(&bytes("83cc0003 00000001 46455252 aabbccdd")),
        RtcpPacket::App {
            subtype: 3,
            ssrc: 1,
            name: *b"FERR",
            data: &[0xaa, 0xbb, 0xcc, 0xdd]
        }
    );
    // SDES with two chunks, one with two items and one with none.
    let two_chunks = bytes("82ca0005 00000001 01016102 02626300 00000002 00000000");
    let RtcpPacket::Sdes(sdes) = one(&two_chunks) else {
        panic!()
    };
    let items: Vec<_> = sdes.items().map(|i| (i.ssrc, i.kind, i.value)).collect();
    assert_eq!(items, [(1, 1, &b"a"[..]), (1, 2, &b"bc"[..])]);
}

#[test]
fn ntp_helpers() {
    assert_eq!(ntp_from_unix(Duration::ZERO), 0x83AA_7E80_0000_0000);
    assert_eq!(
        ntp_from_unix(Duration::from_millis(1500)),
        (2_208_988_801 << 32) | 0x8000_0000
    );
    assert_eq!(
        unix_from_ntp((2_208_988_801 << 32) | 0x8000_0000),
        Duration::from_millis(1500)
    );
    // 2036-02-07T06:28:16Z is NTP era 1 second 0.
    let era1 = Duration::from_secs((1 << 32) - 2_208_988_800);
    assert_eq!(ntp_from_unix(era1), 0);
    assert_eq!(unix_from_ntp(0), era1);
    assert_eq!(ntp_short(0xda8b_d1fc_dddd_a05a), 0xd1fc_dddd);
    assert_eq!(dlsr_from_duration(Duration::from_millis(1500)), 0x1_8000);
    assert_eq!(dlsr_from_duration(Duration::from_secs(1 << 20)), u32::MAX);
    assert_eq!(duration_from_dlsr(0x1_8000), Duration::from_millis(1500));
    assert_eq!(
        rtt(0x0003_0000, 0x0001_0000, 0x0001_8000),
        Some(Duration::from_millis(500))
    );
    assert_eq!(
        rtt(0x0000_1000, 0xFFFF_F000, 0x0000_1000),
        Some(Duration::from_micros(62_500))
    );
    assert_eq!(
        rtt(0x0001_0000, 0x0001_0000, 0x0000_0001),
        Some(Duration::ZERO)
    );
    assert_eq!(rtt(0x0001_0000, 0, 0), None);
}

fn block() -> impl Strategy<Value = ReportBlock> + Clone {
    (any::<[u32; 5]>(), any::<u8>(), -0x80_0000i32..=0x7F_FFFF).prop_map(
        |(w, fraction_lost, cumulative_lost)| ReportBlock {
            ssrc: w[0],
            fraction_lost,
            cumulative_lost,
            ext_highest_seq: w[1],
            jitter: w[2],
            last_sr: w[3],
            delay_since_last_sr: w[4],
        },
    )
}

fn sender_data() -> impl Strategy<Value = SenderReportData> {
    (any::<u32>(), any::<u64>(), any::<[u32; 3]>()).prop_map(|(ssrc, ntp, w)| SenderReportData {
        ssrc,
        ntp,
        rtp_ts: w[0],
        packet_count: w[1],
        octet_count: w[2],
    })
}

/// One packet to write, for compound round trips.
#[derive(Debug, Clone)]
enum Spec {
    Sr(SenderReportData, Vec<ReportBlock>),
    Rr(u32, Vec<ReportBlock>),
    Sdes(u32, String),
    Bye(Vec<u32>),
    Nack(u32, u32, Vec<u16>),
    Pli(u32, u32),
    Fir(u32, Vec<(u32, u8)>),
    Remb(u32, u64, Vec<u32>),
}

fn spec() -> impl Strategy<Value = Spec> {
    let blocks = prop::collection::vec(block(), 0..=31);
    prop_oneof![
        (sender_data(), blocks.clone()).prop_map(|(d, b)| Spec::Sr(d, b)),
        (any::<u32>(), blocks).prop_map(|(s, b)| Spec::Rr(s, b)),
        (any::<u32>(), "[ -~]{0,255}").prop_map(|(s, c)| Spec::Sdes(s, c)),
        prop::collection::vec(any::<u32>(), 0..=31).prop_map(Spec::Bye),
        (
            any::<u32>(),
            any::<u32>(),
            prop::collection::vec(any::<u16>(), 1..100)
        )
            .prop_map(|(a, b, l)| Spec::Nack(a, b, l)),
        (any::<u32>(), any::<u32>()).prop_map(|(a, b)| Spec::Pli(a, b)),
        (
            any::<u32>(),
            prop::collection::vec(any::<(u32, u8)>(), 1..10)
        )
            .prop_map(|(s, e)| Spec::Fir(s, e)),
        (
            any::<u32>(),
            any::<u64>(),
            prop::collection::vec(any::<u32>(), 0..10)
        )
            .prop_map(|(s, b, l)| Spec::Remb(s, b, l)),
    ]
}

impl Spec {
    fn write(&self, buf: &mut [u8]) -> usize {
        match self {
            Spec::Sr(d, b) => write_sender_report(buf, d, b),
            Spec::Rr(s, b) => write_receiver_report(buf, *s, b),
            Spec::Sdes(s, c) => write_sdes_cname(buf, *s, c),
            Spec::Bye(l) => write_bye(buf, l),
            Spec::Nack(a, b, l) => write_nack(buf, *a, *b, l),
            Spec::Pli(a, b) => write_pli(buf, *a, *b),
            Spec::Fir(s, e) => write_fir(buf, *s, e),
            Spec::Remb(s, b, l) => write_remb(buf, *s, *b, l),
        }
        .unwrap()
    }

    /// Asserts that `p` is what `self` wrote.
    fn check(&self, p: RtcpPacket<'_>) {
        match (self, p) {
            (Spec::Sr(d, b), RtcpPacket::SenderReport(sr)) => {
                assert_eq!(
                    (sr.info, sr.blocks.iter().collect::<Vec<_>>()),
                    (*d, b.clone())
                );
            }
            (Spec::Rr(s, b), RtcpPacket::ReceiverReport(rr)) => {
                assert_eq!(
                    (rr.ssrc, rr.blocks.iter().collect::<Vec<_>>()),
                    (*s, b.clone())
                );
            }
            (Spec::Sdes(s, c), RtcpPacket::Sdes(sdes)) => {
                let items: Vec<_> = sdes.items().collect();
                assert_eq!(
                    items,
                    [SdesItem {
                        ssrc: *s,
                        kind: 1,
                        value: c.as_bytes()
                    }]
                );
            }
            (Spec::Bye(l), RtcpPacket::Bye(bye)) => {
                assert_eq!(
                    (bye.ssrcs.iter().collect::<Vec<_>>(), bye.reason),
                    (l.clone(), None)
                );
            }
            (Spec::Nack(a, b, l), RtcpPacket::Nack(nack)) => {
                assert_eq!((nack.sender_ssrc, nack.media_ssrc), (*a, *b));
                let mut got: Vec<u16> = nack.lost().collect();
                let n = got.len();
                got.sort_unstable();
                got.dedup();
                assert_eq!(got.len(), n, "a sequence number was sent twice");
                let mut want = l.clone();
                want.sort_unstable();
                want.dedup();
                assert_eq!(got, want);
            }
            (
                Spec::Pli(a, b),
                RtcpPacket::Pli {
                    sender_ssrc,
                    media_ssrc,
                },
            ) => {
                assert_eq!((sender_ssrc, media_ssrc), (*a, *b));
            }
            (Spec::Fir(s, e), RtcpPacket::Fir(fir)) => {
                assert_eq!(
                    (fir.sender_ssrc, fir.entries().collect::<Vec<_>>()),
                    (*s, e.clone())
                );
            }
            (Spec::Remb(s, b, l), RtcpPacket::Remb(remb)) => {
                assert_eq!(
                    (remb.sender_ssrc, remb.ssrcs.iter().collect::<Vec<_>>()),
                    (*s, l.clone())
                );
                let (exp, _) = feedback::remb_exp_mantissa(*b);
                assert!(remb.bitrate_bps <= *b && *b - remb.bitrate_bps < 1 << exp);
                assert_eq!(remb.bitrate_bps, (*b >> exp) << exp);
            }
            (s, p) => panic!("wrote {s:?}, parsed {p:?}"),
        }
    }
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(data in prop::collection::vec(any::<u8>(), 0..600)) {
        fuzz_rtcp(&data);
    }

    #[test]
    fn compound_round_trip(specs in prop::collection::vec(spec(), 1..6)) {
        let mut buf = vec![0u8; 8192];
        let mut n = 0;
        for s in &specs {
            n += s.write(&mut buf[n..]);
        }
        let packets: Vec<_> = RtcpIter::new(&buf[..n]).collect();
        prop_assert_eq!(packets.len(), specs.len());
        for (s, p) in specs.iter().zip(packets) {
            s.check(p.unwrap());
        }
        fuzz_rtcp(&buf[..n]);
    }

    #[test]
    fn mutated_compounds_never_panic(specs in prop::collection::vec(spec(), 1..4), at in any::<prop::sample::Index>(), v in any::<u8>()) {
        let mut buf = vec![0u8; 8192];
        let mut n = 0;
        for s in &specs {
            n += s.write(&mut buf[n..]);
        }
        let i = at.index(n);
        buf[i] = v;
        fuzz_rtcp(&buf[..n]);
        fuzz_rtcp(&buf[..i]);
    }

    #[test]
    fn nack_packs_runs_across_the_wrap(start in any::<u16>(), len in 1usize..200) {
        let lost: Vec<u16> = (0..len).map(|i| start.wrapping_add(i as u16)).rev().collect();
        let out = write(|b| write_nack(b, 1, 2, &lost));
        let RtcpPacket::Nack(nack) = one(&out) else { panic!() };
        prop_assert_eq!(nack.pairs().count(), len.div_ceil(17));
        prop_assert_eq!(nack.lost().collect::<Vec<_>>(), lost.into_iter().rev().collect::<Vec<_>>());
    }

    #[test]
    fn remb_is_exact_when_representable(mantissa in 0u64..(1 << 18), exp in 0u32..=46) {
        let bitrate = mantissa << exp;
        let out = write(|b| write_remb(b, 1, bitrate, &[]));
        let RtcpPacket::Remb(remb) = one(&out) else { panic!() };
        prop_assert_eq!(remb.bitrate_bps, bitrate);
    }

    #[test]
    fn ntp_round_trips_to_the_nanosecond(secs in 0u64..4_000_000_000, nanos in 0u32..1_000_000_000) {
        let d = Duration::new(secs, nanos);
        prop_assert_eq!(unix_from_ntp(ntp_from_unix(d)), d);
    }
}
