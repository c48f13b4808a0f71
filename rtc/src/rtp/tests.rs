#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use proptest::prelude::*;

fn bytes(s: &str) -> Vec<u8> {
    hex::decode(s.replace(' ', "")).unwrap()
}

#[test]
fn demux_by_first_two_bytes() {
    assert!(is_rtcp(&[0x80, 200]));
    assert!(is_rtcp(&[0x81, 0xC9, 0, 7]));
    assert!(is_rtcp(&[0x8F, 223]));
    assert!(!is_rtcp(&[0x80, 0x60])); // pt 96
    assert!(!is_rtcp(&[0x80, 0xE0])); // pt 96 with marker = 224
    assert!(!is_rtcp(&[0x80, 191])); // pt 63 with marker
    assert!(!is_rtcp(&[0x00, 200]));
    assert!(!is_rtcp(&[0x80]));
    assert!(!is_rtcp(&[]));
    assert!(is_rtp_or_rtcp(&[128]) && is_rtp_or_rtcp(&[191]));
    assert!(!is_rtp_or_rtcp(&[127]) && !is_rtp_or_rtcp(&[192]) && !is_rtp_or_rtcp(&[]));
}

#[test]
fn parses_fixed_header() {
    let pkt = bytes("80e0 1234 0000000a 11223344 aabb");
    let h = RtpHeader::parse(&pkt).unwrap();
    assert_eq!(
        h,
        RtpHeader {
            padding: false,
            marker: true,
            payload_type: 96,
            sequence: 0x1234,
            timestamp: 10,
            ssrc: 0x1122_3344,
            csrc_count: 0,
            header_len: 12,
            payload_range: 12..14,
            padding_len: 0,
            extension: None,
        }
    );
    assert_eq!(h.payload(&pkt), [0xAA, 0xBB]);
    assert_eq!(h.extensions(&pkt).count(), 0);
}

#[test]
fn parses_csrcs_and_padding() {
    // P=1, CC=2; payload "aa", then 3 bytes of padding ending in the count.
    let pkt = bytes("a208 0001 00000002 00000003 00000004 00000005 aa 000003");
    let h = RtpHeader::parse(&pkt).unwrap();
    assert!(h.padding && !h.marker);
    assert_eq!((h.payload_type, h.csrc_count, h.header_len), (8, 2, 20));
    assert_eq!(h.csrcs(&pkt).collect::<Vec<_>>(), [4, 5]);
    assert_eq!((h.payload_range.clone(), h.padding_len), (20..21, 3));
    assert_eq!(h.payload(&pkt), [0xAA]);
    // A padding-only packet (empty payload), as Chrome sends for probing.
    let pad_only = bytes("a06f 0001 00000002 00000003 00000004");
    assert_eq!(RtpHeader::parse(&pad_only).unwrap().payload_range, 12..12);
}

#[test]
fn rejects_malformed_headers() {
    use RtpError::*;
    let parse = |s: &str| RtpHeader::parse(&bytes(s));
    assert_eq!(parse(""), Err(TooShort { len: 0, needed: 12 }));
    assert_eq!(
        parse("8060 0001 00000002 000000"),
        Err(TooShort {
            len: 11,
            needed: 12
        })
    );
    assert_eq!(parse("4060 0001 00000002 00000003"), Err(BadVersion(1)));
    assert_eq!(
        parse("8160 0001 00000002 00000003"),
        Err(TooShort {
            len: 12,
            needed: 16
        })
    );
    assert_eq!(
        parse("9060 0001 00000002 00000003 bede"),
        Err(TooShort {
            len: 14,
            needed: 16
        })
    );
    assert_eq!(
        parse("9060 0001 00000002 00000003 bede0001"),
        Err(BadExtension)
    );
    assert_eq!(
        parse("a060 0001 00000002 00000003 aa00"),
        Err(BadPadding(0))
    );
    assert_eq!(
        parse("a060 0001 00000002 00000003 aa03"),
        Err(BadPadding(3))
    );
    let mut big = bytes("8060 0001 00000002 00000003");
    big.resize(MAX_PACKET_LEN + 1, 0);
    assert_eq!(RtpHeader::parse(&big), Err(TooLarge(1501)));
    big.pop();
    assert!(RtpHeader::parse(&big).is_ok());
}

// One-byte form: id 1 len 1, id 2 len 2, a padding byte, id 3 len 1.
const ONE_BYTE: &str = "9060 0001 00000002 00000003 bede0002 10aa 21bbcc 00 30dd 99";
// Two-byte form: id 1 len 0, id 2 len 1, id 20 len 2, padding.
const TWO_BYTE: &str = "9060 0001 00000002 00000003 10000003 0100 0201ff 1402eeee 000000 99";

#[test]
fn iterates_one_byte_extensions() {
    let pkt = bytes(ONE_BYTE);
    let h = RtpHeader::parse(&pkt).unwrap();
    let ext = h.extension.clone().unwrap();
    assert_eq!(
        (ext.form(), ext.profile, ext.range),
        (Some(ExtensionForm::OneByte), 0xBEDE, 16..24)
    );
    let elems: Vec<_> = h.extensions(&pkt).collect();
    assert_eq!(elems, [(1, &[0xAA][..]), (2, &[0xBB, 0xCC]), (3, &[0xDD])]);
    assert_eq!(h.find_extension(&pkt, 2), Some(&[0xBB, 0xCC][..]));
    assert_eq!(h.find_extension(&pkt, 4), None);
    assert_eq!(h.payload(&pkt), [0x99]);
}

#[test]
fn iterates_two_byte_extensions() {
    let pkt = bytes(TWO_BYTE);
    let h = RtpHeader::parse(&pkt).unwrap();
    assert_eq!(
        h.extension.as_ref().unwrap().form(),
        Some(ExtensionForm::TwoByte)
    );
    let elems: Vec<_> = h.extensions(&pkt).collect();
    assert_eq!(elems, [(1, &[][..]), (2, &[0xFF]), (20, &[0xEE, 0xEE])]);
    assert_eq!(h.payload(&pkt), [0x99]);
}

#[test]
fn extension_data_is_rewritten_in_place_in_either_form() {
    for (hex, id, want) in [(ONE_BYTE, 2, [0xBB, 0xCC]), (TWO_BYTE, 20, [0xEE, 0xEE])] {
        let mut pkt = bytes(hex);
        let before = pkt.clone();
        let mut p = RtpPacketMut::new(&mut pkt).unwrap();
        assert!(p.extension_mut(4).is_none());
        let data = p.extension_mut(id).unwrap();
        assert_eq!(data, want);
        data.copy_from_slice(&[1, 2]);
        let h = RtpHeader::parse(&pkt).unwrap();
        assert_eq!(h.find_extension(&pkt, id), Some(&[1, 2][..]));
        // Nothing else moved.
        let changed: Vec<usize> = (0..pkt.len()).filter(|&i| pkt[i] != before[i]).collect();
        assert_eq!(changed.len(), 2, "{changed:?}");
    }
    let mut plain = bytes("8060 0001 00000002 00000003 99");
    assert!(
        RtpPacketMut::new(&mut plain)
            .unwrap()
            .extension_mut(1)
            .is_none()
    );
}

#[test]
fn extension_walk_stops_at_id_15_truncation_and_unknown_profiles() {
    // id 15 ends processing even though an element follows.
    let pkt = bytes("9060 0001 00000002 00000003 bede0001 10aa f010");
    assert_eq!(RtpHeader::parse(&pkt).unwrap().extensions(&pkt).count(), 1);
    // An element whose length runs past the block is not returned.
    let pkt = bytes("9060 0001 00000002 00000003 bede0001 10aa 0030");
    assert_eq!(RtpHeader::parse(&pkt).unwrap().extensions(&pkt).count(), 1);
    let pkt = bytes("9060 0001 00000002 00000003 10000001 0103aabb");
    assert_eq!(RtpHeader::parse(&pkt).unwrap().extensions(&pkt).count(), 0);
    // One-byte id 0 is padding only with length 0; otherwise processing stops.
    let pkt = bytes("9060 0001 00000002 00000003 bede0001 10aa 0230");
    assert_eq!(RtpHeader::parse(&pkt).unwrap().extensions(&pkt).count(), 1);
    // A non-RFC 8285 profile has no elements but is still a valid header.
    let pkt = bytes("9060 0001 00000002 00000003 abcd0001 10aa0000");
    let h = RtpHeader::parse(&pkt).unwrap();
    assert_eq!((h.extensions(&pkt).count(), h.header_len), (0, 20));
}

fn map_of(pairs: &[(u8, u8)]) -> ExtensionIdMap {
    let mut map = [0u8; 256];
    for &(from, to) in pairs {
        map[usize::from(from)] = to;
    }
    map
}

#[test]
fn remaps_one_byte_ids_and_drops_unmapped() {
    let mut pkt = bytes(ONE_BYTE);
    remap_extension_ids(&mut pkt, &map_of(&[(1, 5), (3, 3)])).unwrap();
    assert_eq!(
        pkt,
        bytes("9060 0001 00000002 00000003 bede0002 50aa 000000 00 30dd 99")
    );
    let h = RtpHeader::parse(&pkt).unwrap();
    assert_eq!(
        h.extensions(&pkt).collect::<Vec<_>>(),
        [(5, &[0xAA][..]), (3, &[0xDD])]
    );
}

#[test]
fn one_byte_remap_beyond_14_is_refused_untouched() {
    let mut pkt = bytes(ONE_BYTE);
    let err = remap_extension_ids(&mut pkt, &map_of(&[(1, 5), (3, 15)]));
    assert_eq!(err, Err(RtpError::BadExtensionMap { from: 3, to: 15 }));
    assert_eq!(pkt, bytes(ONE_BYTE));
}

#[test]
fn remaps_two_byte_ids() {
    let mut pkt = bytes(TWO_BYTE);
    let mut rewritten = RtpPacketMut::new(&mut pkt).unwrap();
    rewritten
        .remap_extension_ids(&map_of(&[(2, 200), (20, 1)]))
        .unwrap();
    assert_eq!(
        pkt,
        bytes("9060 0001 00000002 00000003 10000003 0000 c801ff 0102eeee 000000 99")
    );
}

#[test]
fn setters_rewrite_in_place() {
    let mut pkt = bytes("80e0 1234 0000000a 11223344 aabb");
    let mut p = RtpPacketMut::new(&mut pkt).unwrap();
    p.set_sequence(0xFFFE);
    p.set_timestamp(0xDEAD_BEEF);
    p.set_ssrc(0x0102_0304);
    p.set_payload_type(111);
    p.set_marker(false);
    assert_eq!(p.header(), &RtpHeader::parse(p.as_bytes()).unwrap());
    p.payload_mut()[0] = 0x55;
    assert_eq!(pkt, bytes("806f fffe deadbeef 01020304 55bb"));
    let mut p = RtpPacketMut::new(&mut pkt).unwrap();
    p.set_marker(true);
    p.set_payload_type(96);
    assert_eq!(pkt[1], 0xE0);
}

#[test]
fn rtx_wrap_inserts_osn_and_unwrap_restores() {
    let original = bytes("80e0 0005 0000000a 11223344 aabbcc");
    let mut buf = [0u8; 20];
    buf[..15].copy_from_slice(&original);
    let n = rtx_wrap(&mut buf, 15, 97, 0x5566_7788, 0x0100).unwrap();
    assert_eq!(buf[..n], bytes("80e1 0100 0000000a 55667788 0005 aabbcc"));
    let n = rtx_unwrap(&mut buf, n, 96, 0x1122_3344).unwrap();
    assert_eq!(buf[..n], original);
}

#[test]
fn rtx_wrap_drops_padding_and_keeps_extensions() {
    let pkt = bytes("b060 0005 0000000a 11223344 bede0001 10aa0000 aabb 000003");
    let mut buf = pkt.clone();
    let n = rtx_wrap(&mut buf, pkt.len(), 97, 9, 1).unwrap();
    assert_eq!(
        buf[..n],
        bytes("9061 0001 0000000a 00000009 bede0001 10aa0000 0005 aabb")
    );
    // RTX with padding unwraps to the padding-free original.
    let rtx = bytes("a061 0001 0000000a 00000009 0005 aabb 0002");
    let mut buf = rtx.clone();
    let n = rtx_unwrap(&mut buf, rtx.len(), 96, 0x1122_3344).unwrap();
    assert_eq!(buf[..n], bytes("8060 0005 0000000a 11223344 aabb"));
}

#[test]
fn rtx_errors() {
    let pkt = bytes("8060 0005 0000000a 11223344 aabb");
    let mut exact = pkt.clone();
    assert_eq!(
        rtx_wrap(&mut exact, 14, 97, 1, 1),
        Err(RtpError::BufferTooSmall {
            needed: 16,
            capacity: 14
        })
    );
    assert_eq!(exact, pkt);
    assert_eq!(
        rtx_wrap(&mut exact, 15, 97, 1, 1),
        Err(RtpError::BufferTooSmall {
            needed: 15,
            capacity: 14
        })
    );
    let mut short = bytes("8061 0005 0000000a 11223344 aa");
    assert_eq!(rtx_unwrap(&mut short, 13, 96, 1), Err(RtpError::MissingOsn));
    let mut big = vec![0u8; MAX_PACKET_LEN + 10];
    big[..12].copy_from_slice(&pkt[..12]);
    assert_eq!(
        rtx_wrap(&mut big, MAX_PACKET_LEN, 97, 1, 1),
        Err(RtpError::TooLarge(1502))
    );
}

/// An extension block: its form and its `(id, data)` elements.
type ExtSpec = (ExtensionForm, Vec<(u8, Vec<u8>)>);

/// A packet described field by field, for generating valid packets.
#[derive(Debug, Clone)]
struct Spec {
    marker: bool,
    pt: u8,
    seq: u16,
    ts: u32,
    ssrc: u32,
    csrcs: Vec<u32>,
    ext: Option<ExtSpec>,
    payload: Vec<u8>,
    padding: u8,
}

impl Spec {
    fn build(&self) -> Vec<u8> {
        let mut b0 = 0x80 | self.csrcs.len() as u8;
        if self.ext.is_some() {
            b0 |= 0x10;
        }
        if self.padding > 0 {
            b0 |= 0x20;
        }
        let mut out = vec![b0, self.pt | if self.marker { 0x80 } else { 0 }];
        out.extend(self.seq.to_be_bytes());
        out.extend(self.ts.to_be_bytes());
        out.extend(self.ssrc.to_be_bytes());
        for c in &self.csrcs {
            out.extend(c.to_be_bytes());
        }
        if let Some((form, elems)) = &self.ext {
            let mut data = Vec::new();
            for (id, d) in elems {
                match form {
                    ExtensionForm::OneByte => data.push((id << 4) | (d.len() as u8 - 1)),
                    ExtensionForm::TwoByte => data.extend([*id, d.len() as u8]),
                }
                data.extend(d);
            }
            data.resize(data.len().div_ceil(4) * 4, 0);
            let profile = match form {
                ExtensionForm::OneByte => ONE_BYTE_PROFILE,
                ExtensionForm::TwoByte => TWO_BYTE_PROFILE,
            };
            out.extend(profile.to_be_bytes());
            out.extend(((data.len() / 4) as u16).to_be_bytes());
            out.extend(data);
        }
        out.extend(&self.payload);
        if self.padding > 0 {
            out.extend(std::iter::repeat_n(0, usize::from(self.padding) - 1));
            out.push(self.padding);
        }
        out
    }
}

fn ext_strategy() -> impl Strategy<Value = Option<ExtSpec>> {
    let one = prop::collection::vec((1u8..=14, prop::collection::vec(any::<u8>(), 1..=16)), 0..6)
        .prop_map(|e| (ExtensionForm::OneByte, e));
    let two = prop::collection::vec(
        (1u8..=255, prop::collection::vec(any::<u8>(), 0..=20)),
        0..6,
    )
    .prop_map(|e| (ExtensionForm::TwoByte, e));
    prop::option::of(prop_oneof![one, two])
}

prop_compose! {
    fn spec()(
        marker in any::<bool>(), pt in 0u8..128, seq in any::<u16>(), ts in any::<u32>(),
        ssrc in any::<u32>(), csrcs in prop::collection::vec(any::<u32>(), 0..=15),
        ext in ext_strategy(), payload in prop::collection::vec(any::<u8>(), 0..600),
        padding in prop_oneof![Just(0u8), 1u8..=255],
    ) -> Spec {
        Spec { marker, pt, seq, ts, ssrc, csrcs, ext, payload, padding }
    }
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(data in prop::collection::vec(any::<u8>(), 0..1600)) {
        fuzz_rtp(&data);
    }

    #[test]
    fn mutated_valid_packets_never_panic(s in spec(), at in any::<prop::sample::Index>(), v in any::<u8>()) {
        let mut pkt = s.build();
        fuzz_rtp(&pkt);
        let i = at.index(pkt.len());
        pkt[i] = v;
        fuzz_rtp(&pkt);
        pkt.truncate(i);
        fuzz_rtp(&pkt);
    }

    #[test]
    fn parse_reads_back_generated_fields(s in spec()) {
        let pkt = s.build();
        let h = RtpHeader::parse(&pkt).unwrap();
        prop_assert_eq!((h.marker, h.payload_type, h.sequence), (s.marker, s.pt, s.seq));
        prop_assert_eq!((h.timestamp, h.ssrc, h.padding_len), (s.ts, s.ssrc, s.padding));
        prop_assert_eq!(h.csrcs(&pkt).collect::<Vec<_>>(), s.csrcs.clone());
        prop_assert_eq!(h.payload(&pkt), &s.payload[..]);
        let elems: Vec<(u8, Vec<u8>)> = h.extensions(&pkt).map(|(i, d)| (i, d.to_vec())).collect();
        prop_assert_eq!(elems, s.ext.map(|e| e.1).unwrap_or_default());
    }

    #[test]
    fn rtx_round_trip(s in spec(), rtx_pt in 0u8..128, rtx_ssrc in any::<u32>(), rtx_seq in any::<u16>()) {
        let pkt = s.build();
        let mut buf = pkt.clone();
        buf.resize(pkt.len() + 2, 0xFF);
        let n = rtx_wrap(&mut buf, pkt.len(), rtx_pt, rtx_ssrc, rtx_seq).unwrap();
        let h = RtpHeader::parse(&buf[..n]).unwrap();
        prop_assert_eq!((h.payload_type, h.ssrc, h.sequence, h.marker), (rtx_pt, rtx_ssrc, rtx_seq, s.marker));
        prop_assert_eq!(&h.payload(&buf)[..2], &s.seq.to_be_bytes()[..]);
        let n = rtx_unwrap(&mut buf, n, s.pt, s.ssrc).unwrap();
        let unpadded = Spec { padding: 0, ..s }.build();
        prop_assert_eq!(&buf[..n], &unpadded[..]);
    }

    #[test]
    fn remap_matches_model(s in spec(), table in prop::collection::vec(0u8..=14, 256)) {
        let mut pkt = s.build();
        let before = RtpHeader::parse(&pkt).unwrap();
        let expected: Vec<(u8, Vec<u8>)> = before
            .extensions(&pkt)
            .filter(|&(id, _)| table[usize::from(id)] != 0)
            .map(|(id, d)| (table[usize::from(id)], d.to_vec()))
            .collect();
        let map: ExtensionIdMap = table.try_into().unwrap();
        remap_extension_ids(&mut pkt, &map).unwrap();
        let after = RtpHeader::parse(&pkt).unwrap();
        prop_assert_eq!(&after, &before);
        let got: Vec<(u8, Vec<u8>)> = after.extensions(&pkt).map(|(i, d)| (i, d.to_vec())).collect();
        prop_assert_eq!(got, expected);
    }

    #[test]
    fn identity_remap_changes_nothing(s in spec()) {
        let pkt = s.build();
        let mut map = [0u8; 256];
        for (i, m) in map.iter_mut().enumerate() {
            *m = i as u8;
        }
        let mut out = pkt.clone();
        remap_extension_ids(&mut out, &map).unwrap();
        prop_assert_eq!(out, pkt);
    }
}

/// A VP8-ish packet: fixed header (+ one CSRC), then `ext` as the extension block if given.
fn packet_with(ext: Option<(u16, &[u8])>, payload: &[u8]) -> Vec<u8> {
    let mut p = vec![
        0x81, 96, 0, 7, 0, 0, 0, 9, 0, 0, 0, 5, 0xC5, 0xC5, 0xC5, 0xC5,
    ];
    if let Some((profile, data)) = ext {
        p[0] |= 0x10;
        p.extend_from_slice(&profile.to_be_bytes());
        p.extend_from_slice(&((data.len() / 4) as u16).to_be_bytes());
        p.extend_from_slice(data);
    }
    p.extend_from_slice(payload);
    p
}

#[test]
fn ensure_extension_adds_a_block_to_a_packet_without_one() {
    let mut p = packet_with(None, &[1, 2, 3]);
    let at = ensure_extension(&mut p, 5, 2).unwrap();
    p[at..at + 2].copy_from_slice(&[0xAB, 0xCD]);
    let h = RtpHeader::parse(&p).unwrap();
    assert_eq!(
        h.extension.as_ref().map(|e| e.profile),
        Some(ONE_BYTE_PROFILE)
    );
    assert_eq!(h.find_extension(&p, 5), Some(&[0xAB, 0xCD][..]));
    assert_eq!(h.payload(&p), [1, 2, 3]);
    assert_eq!(h.csrcs(&p).collect::<Vec<_>>(), [0xC5C5_C5C5]);
    // An id the one-byte form cannot carry gets the two-byte form.
    let mut p = packet_with(None, &[1, 2, 3]);
    let at = ensure_extension(&mut p, 20, 2).unwrap();
    p[at..at + 2].copy_from_slice(&[7, 8]);
    let h = RtpHeader::parse(&p).unwrap();
    assert_eq!(
        h.extension.as_ref().map(|e| e.profile),
        Some(TWO_BYTE_PROFILE)
    );
    assert_eq!(h.find_extension(&p, 20), Some(&[7, 8][..]));
    assert_eq!(h.payload(&p), [1, 2, 3]);
}

#[test]
fn ensure_extension_reuses_the_element_or_the_padding_else_grows_the_block() {
    // mid "1" (id 1) and 2 bytes of padding: the 3-byte element does not fit the padding.
    let mut p = packet_with(Some((ONE_BYTE_PROFILE, &[0x10, b'1', 0, 0])), &[9; 5]);
    let at = ensure_extension(&mut p, 3, 2).unwrap();
    p[at..at + 2].copy_from_slice(&[0, 42]);
    let h = RtpHeader::parse(&p).unwrap();
    assert_eq!(h.extension.as_ref().map(|e| e.range.len()), Some(8));
    assert_eq!(h.find_extension(&p, 1), Some(&b"1"[..]));
    assert_eq!(h.find_extension(&p, 3), Some(&[0, 42][..]));
    assert_eq!(h.payload(&p), [9; 5]);
    // Asked again: the same element, nothing moves.
    let len = p.len();
    assert_eq!(ensure_extension(&mut p, 3, 2).unwrap(), at);
    assert_eq!(p.len(), len);
    // A dropped element (an id the viewer did not negotiate, zeroed by the remap) is room.
    let mut p = packet_with(
        Some((ONE_BYTE_PROFILE, &[0, 0, 0, 0, 0x10, b'1', 0, 0])),
        &[9; 5],
    );
    let len = p.len();
    let at = ensure_extension(&mut p, 3, 2).unwrap();
    assert_eq!((p.len(), at), (len, 16 + 4 + 1));
    // An element of the id but another length is replaced.
    let mut p = packet_with(Some((ONE_BYTE_PROFILE, &[0x33, 1, 2, 3, 4, 0, 0, 0])), &[9]);
    let at = ensure_extension(&mut p, 3, 2).unwrap();
    p[at..at + 2].copy_from_slice(&[5, 6]);
    let h = RtpHeader::parse(&p).unwrap();
    assert_eq!(h.find_extension(&p, 3), Some(&[5, 6][..]));
    assert_eq!(h.payload(&p), [9]);
    // The one-byte form cannot carry id 20: refused, untouched.
    let mut p = packet_with(Some((ONE_BYTE_PROFILE, &[0x10, b'1', 0, 0])), &[9]);
    let before = p.clone();
    assert!(ensure_extension(&mut p, 20, 2).is_err());
    assert_eq!(p, before);
}

#[test]
fn padding_packets_parse_as_padding_only() {
    let mut p = Vec::new();
    write_padding_packet(&mut p, 97, 0xAABB_CCDD, 100, 9000, 200);
    assert_eq!(p.len(), FIXED_HEADER_LEN + 200);
    let h = RtpHeader::parse(&p).unwrap();
    assert!(h.padding && h.payload_range.is_empty());
    assert_eq!((h.payload_type, h.ssrc, h.sequence), (97, 0xAABB_CCDD, 100));
    // With a transport-wide sequence number it is still padding only.
    ensure_extension(&mut p, 5, 2).unwrap();
    let h = RtpHeader::parse(&p).unwrap();
    assert!(h.padding && h.payload_range.is_empty() && h.find_extension(&p, 5).is_some());
}
