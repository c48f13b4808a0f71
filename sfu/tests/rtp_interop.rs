//! Cross-checks against webrtc-rs' sans-IO codecs (`rtc-rtp`, `rtc-rtcp`): what we write parses
//! there with the same meaning, and what they write parses here.

// Tests and benches drive the cores with the real clock (clippy.toml forbids it in the cores).
#![allow(clippy::disallowed_methods)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use bytes::Bytes;
use ferry_sfu::rtcp::{self, ReportBlock, RtcpIter, RtcpPacket, SenderReportData};
use ferry_sfu::rtp::{self, ExtensionForm, RtpHeader};
use proptest::prelude::*;
use rtc_rtcp::goodbye::Goodbye;
use rtc_rtcp::packet::Packet;
use rtc_rtcp::payload_feedbacks::full_intra_request::{FirEntry, FullIntraRequest};
use rtc_rtcp::payload_feedbacks::picture_loss_indication::PictureLossIndication;
use rtc_rtcp::payload_feedbacks::receiver_estimated_maximum_bitrate::ReceiverEstimatedMaximumBitrate;
use rtc_rtcp::receiver_report::ReceiverReport;
use rtc_rtcp::reception_report::ReceptionReport;
use rtc_rtcp::sender_report::SenderReport;
use rtc_rtcp::source_description::{
    SdesType, SourceDescription, SourceDescriptionChunk, SourceDescriptionItem,
};
use rtc_rtcp::transport_feedbacks::transport_layer_nack::{
    TransportLayerNack, nack_pairs_from_sequence_numbers,
};
use rtc_shared::marshal::{Marshal, Unmarshal};

fn theirs(data: &[u8]) -> Vec<Box<dyn Packet>> {
    rtc_rtcp::packet::unmarshal(&mut &data[..]).unwrap()
}

fn cast<T: 'static>(p: &dyn Packet) -> &T {
    p.as_any()
        .downcast_ref::<T>()
        .unwrap_or_else(|| panic!("unexpected packet {p:?}"))
}

fn reception(b: &ReportBlock) -> ReceptionReport {
    ReceptionReport {
        ssrc: b.ssrc,
        fraction_lost: b.fraction_lost,
        total_lost: (b.cumulative_lost as u32) & 0x00FF_FFFF,
        last_sequence_number: b.ext_highest_seq,
        jitter: b.jitter,
        last_sender_report: b.last_sr,
        delay: b.delay_since_last_sr,
    }
}

#[test]
fn our_compound_parses_in_webrtc_rs() -> Result<(), rtcp::RtcpError> {
    let block = ReportBlock {
        ssrc: 0xbc5e_9a40,
        fraction_lost: 12,
        cumulative_lost: -3,
        ext_highest_seq: 0x1_46e1,
        jitter: 273,
        last_sr: 0x09f3_6432,
        delay_since_last_sr: 150_137,
    };
    let info = SenderReportData {
        ssrc: 7,
        ntp: 0xda8b_d1fc_dddd_a05a,
        rtp_ts: 9,
        packet_count: 10,
        octet_count: 11,
    };
    let mut buf = [0u8; 1500];
    let mut n = rtcp::write_sender_report(&mut buf, &info, &[block, block])?;
    n += rtcp::write_sdes_cname(&mut buf[n..], 7, "ferry-cname")?;
    n += rtcp::write_bye(&mut buf[n..], &[7, 8])?;
    n += rtcp::write_nack(&mut buf[n..], 1, 2, &[65534, 2, 65535, 0, 40])?;
    n += rtcp::write_pli(&mut buf[n..], 1, 2)?;
    n += rtcp::write_fir(&mut buf[n..], 1, &[(2, 3), (4, 5)])?;
    n += rtcp::write_remb(&mut buf[n..], 1, 8_927_168, &[2, 3])?;
    n += rtcp::write_receiver_report(&mut buf[n..], 7, &[block])?;

    let p = theirs(&buf[..n]);
    assert_eq!(p.len(), 8);
    let sr = cast::<SenderReport>(&*p[0]);
    assert_eq!(
        (
            sr.ssrc,
            sr.ntp_time,
            sr.rtp_time,
            sr.packet_count,
            sr.octet_count
        ),
        (7, info.ntp, 9, 10, 11)
    );
    assert_eq!(sr.reports, vec![reception(&block), reception(&block)]);
    let sdes = cast::<SourceDescription>(&*p[1]);
    assert_eq!(sdes.chunks[0].source, 7);
    assert_eq!(
        sdes.chunks[0].items[0].text,
        Bytes::from_static(b"ferry-cname")
    );
    assert_eq!(cast::<Goodbye>(&*p[2]).sources, vec![7, 8]);
    let nack = cast::<TransportLayerNack>(&*p[3]);
    let lost: Vec<u16> = nack.nacks.iter().flat_map(|p| p.packet_list()).collect();
    assert_eq!(
        (nack.sender_ssrc, nack.media_ssrc, lost),
        (1, 2, vec![65534, 65535, 0, 2, 40])
    );
    let pli = cast::<PictureLossIndication>(&*p[4]);
    assert_eq!((pli.sender_ssrc, pli.media_ssrc), (1, 2));
    let fir = cast::<FullIntraRequest>(&*p[5]);
    let entries: Vec<_> = fir
        .fir
        .iter()
        .map(|e| (e.ssrc, e.sequence_number))
        .collect();
    assert_eq!((fir.sender_ssrc, entries), (1, vec![(2, 3), (4, 5)]));
    let remb = cast::<ReceiverEstimatedMaximumBitrate>(&*p[6]);
    assert_eq!(
        (remb.sender_ssrc, remb.bitrate, remb.ssrcs.clone()),
        (1, 8_927_168.0, vec![2, 3])
    );
    let rr = cast::<ReceiverReport>(&*p[7]);
    assert_eq!((rr.ssrc, rr.reports.clone()), (7, vec![reception(&block)]));
    Ok(())
}

#[test]
fn webrtc_rs_packets_parse_here() {
    let rr_block = ReceptionReport {
        ssrc: 5,
        fraction_lost: 1,
        total_lost: 0xFF_FFFE,
        ..Default::default()
    };
    let packets: Vec<Box<dyn Packet>> = vec![
        Box::new(ReceiverReport {
            ssrc: 9,
            reports: vec![rr_block],
            ..Default::default()
        }),
        Box::new(SourceDescription {
            chunks: vec![SourceDescriptionChunk {
                source: 9,
                items: vec![SourceDescriptionItem {
                    sdes_type: SdesType::SdesCname,
                    text: Bytes::from_static(b"abc"),
                }],
            }],
        }),
        Box::new(TransportLayerNack {
            sender_ssrc: 9,
            media_ssrc: 5,
            nacks: nack_pairs_from_sequence_numbers(&[10, 11, 30, 65535]),
        }),
        Box::new(FullIntraRequest {
            sender_ssrc: 9,
            media_ssrc: 0,
            fir: vec![FirEntry {
                ssrc: 5,
                sequence_number: 200,
            }],
        }),
        Box::new(ReceiverEstimatedMaximumBitrate {
            sender_ssrc: 9,
            bitrate: 1_500_000.0,
            ssrcs: vec![5, 6],
        }),
        Box::new(Goodbye {
            sources: vec![9],
            reason: Bytes::from_static(b"done"),
        }),
    ];
    let data = rtc_rtcp::packet::marshal(&packets).unwrap();
    let ours: Vec<RtcpPacket<'_>> = RtcpIter::new(&data).map(Result::unwrap).collect();
    assert_eq!(ours.len(), 6);
    let RtcpPacket::ReceiverReport(rr) = ours[0] else {
        panic!()
    };
    let b = rr.blocks.get(0).unwrap();
    assert_eq!(
        (rr.ssrc, b.ssrc, b.fraction_lost, b.cumulative_lost),
        (9, 5, 1, -2)
    );
    let RtcpPacket::Sdes(sdes) = ours[1] else {
        panic!()
    };
    assert_eq!(sdes.cname(), Some((9, &b"abc"[..])));
    let RtcpPacket::Nack(nack) = ours[2] else {
        panic!()
    };
    assert_eq!(nack.lost().collect::<Vec<_>>(), [10, 11, 30, 65535]);
    let RtcpPacket::Fir(fir) = ours[3] else {
        panic!()
    };
    assert_eq!(fir.entries().collect::<Vec<_>>(), [(5, 200)]);
    let RtcpPacket::Remb(remb) = ours[4] else {
        panic!()
    };
    assert_eq!(
        (remb.bitrate_bps, remb.ssrcs.iter().collect::<Vec<_>>()),
        (1_500_000, vec![5, 6])
    );
    let RtcpPacket::Bye(bye) = ours[5] else {
        panic!()
    };
    assert_eq!(bye.reason, Some(&b"done"[..]));
}

fn their_packet(
    form: ExtensionForm,
    elems: &[(u8, Vec<u8>)],
    payload: &[u8],
    marker: bool,
    csrc: Vec<u32>,
) -> rtc_rtp::packet::Packet {
    let mut header = rtc_rtp::header::Header {
        version: 2,
        marker,
        payload_type: 96,
        sequence_number: 65535,
        timestamp: 0xDEAD_BEEF,
        ssrc: 0x1234_5678,
        csrc,
        ..Default::default()
    };
    if !elems.is_empty() {
        header.extension = true;
        header.extension_profile = match form {
            ExtensionForm::OneByte => 0xBEDE,
            ExtensionForm::TwoByte => 0x1000,
        };
        for (id, data) in elems {
            header
                .set_extension(*id, Bytes::copy_from_slice(data))
                .unwrap();
        }
    }
    rtc_rtp::packet::Packet {
        header,
        payload: Bytes::copy_from_slice(payload),
    }
}

fn elems() -> impl Strategy<Value = (ExtensionForm, Vec<(u8, Vec<u8>)>)> {
    // Distinct ids: set_extension replaces an element with the same id.
    let one = prop::sample::subsequence((1u8..=14).collect::<Vec<_>>(), 0..5)
        .prop_flat_map(|ids| {
            ids.into_iter()
                .map(|id| (Just(id), prop::collection::vec(any::<u8>(), 1..=16)))
                .collect::<Vec<_>>()
        })
        .prop_map(|e| (ExtensionForm::OneByte, e));
    let two = prop::sample::subsequence((1u8..=255).collect::<Vec<_>>(), 0..5)
        .prop_flat_map(|ids| {
            ids.into_iter()
                .map(|id| (Just(id), prop::collection::vec(any::<u8>(), 1..=30)))
                .collect::<Vec<_>>()
        })
        .prop_map(|e| (ExtensionForm::TwoByte, e));
    prop_oneof![one, two]
}

proptest! {
    #[test]
    fn their_rtp_parses_here_and_our_rewrites_parse_there(
        (form, ext) in elems(),
        payload in prop::collection::vec(any::<u8>(), 2..300),
        marker in any::<bool>(),
        csrc in prop::collection::vec(any::<u32>(), 0..4),
    ) {
        let pkt = their_packet(form, &ext, &payload, marker, csrc.clone());
        let mut buf = pkt.marshal().unwrap().to_vec();
        let h = RtpHeader::parse(&buf).unwrap();
        prop_assert_eq!((h.marker, h.payload_type, h.sequence), (marker, 96, 65535));
        prop_assert_eq!((h.timestamp, h.ssrc), (0xDEAD_BEEF, 0x1234_5678));
        prop_assert_eq!(h.csrcs(&buf).collect::<Vec<_>>(), csrc);
        prop_assert_eq!(h.payload(&buf), &payload[..]);
        let got: Vec<(u8, Vec<u8>)> = h.extensions(&buf).map(|(i, d)| (i, d.to_vec())).collect();
        prop_assert_eq!(&got, &ext);

        // Remap: shift every id by one (1..=14 stays in range for the one-byte form) and drop id 2.
        let mut map = [0u8; 256];
        for (i, m) in map.iter_mut().enumerate().skip(1) {
            *m = if i == 2 { 0 } else { (i % 14 + 1) as u8 };
        }
        rtp::remap_extension_ids(&mut buf, &map).unwrap();
        let back = rtc_rtp::packet::Packet::unmarshal(&mut &buf[..]).unwrap();
        let want: Vec<(u8, Vec<u8>)> = ext.iter().filter(|e| e.0 != 2).map(|(i, d)| (map[usize::from(*i)], d.clone())).collect();
        let have: Vec<(u8, Vec<u8>)> = back.header.extensions.iter().map(|e| (e.id, e.payload.to_vec())).collect();
        prop_assert_eq!(have, want);

        // RTX: their parser sees the OSN in front of the original payload.
        let len = buf.len();
        buf.resize(len + 2, 0);
        let n = rtp::rtx_wrap(&mut buf, len, 97, 0xCAFE, 7).unwrap();
        let rtx = rtc_rtp::packet::Packet::unmarshal(&mut &buf[..n]).unwrap();
        prop_assert_eq!((rtx.header.payload_type, rtx.header.ssrc, rtx.header.sequence_number), (97, 0xCAFE, 7));
        prop_assert_eq!(&rtx.payload[..2], &[0xFF, 0xFF][..]);
        prop_assert_eq!(&rtx.payload[2..], &payload[..]);
    }
}
