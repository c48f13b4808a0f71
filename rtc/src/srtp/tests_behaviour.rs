//! Behaviour of the context: rollover, replay, tampering, skipping, snapshots, limits.

use proptest::prelude::*;
use prost::Message;

use super::replay::{MAX_RTCP_INDEX, MAX_RTP_INDEX};
use super::*;

const PROFILES: [SrtpProfile; 3] = [
    SrtpProfile::Aes128CmHmacSha1_80,
    SrtpProfile::AeadAes128Gcm,
    SrtpProfile::AeadAes256Gcm,
];
const SSRC: u32 = 0x1234_5678;

pub(super) fn keys(profile: SrtpProfile) -> (Vec<u8>, Vec<u8>) {
    let key = (0..profile.master_key_len() as u8)
        .map(|i| 0x10 + i)
        .collect();
    let salt = (0..profile.master_salt_len() as u8)
        .map(|i| 0xa0 + i)
        .collect();
    (key, salt)
}

pub(super) fn context(profile: SrtpProfile) -> SrtpContext {
    let (key, salt) = keys(profile);
    SrtpContext::new(profile, &key, &salt).unwrap()
}

/// A version 2 RTP packet, payload type 96, 20 ms Opus timestamps.
pub(super) fn rtp(seq: u16, ssrc: u32, payload: &[u8]) -> Vec<u8> {
    let mut p = vec![0x80, 96];
    p.extend_from_slice(&seq.to_be_bytes());
    p.extend_from_slice(&u32::from(seq).wrapping_mul(960).to_be_bytes());
    p.extend_from_slice(&ssrc.to_be_bytes());
    p.extend_from_slice(payload);
    p
}

/// An RTP packet with two CSRCs and a one-byte-header extension of two words.
fn rtp_with_csrc_and_extension(seq: u16, payload: &[u8]) -> Vec<u8> {
    let mut p = vec![0x92, 0xe0];
    p.extend_from_slice(&seq.to_be_bytes());
    p.extend_from_slice(&[0, 0, 0x10, 0]);
    p.extend_from_slice(&SSRC.to_be_bytes());
    p.extend_from_slice(&[0xaa; 8]);
    p.extend_from_slice(&[0xbe, 0xde, 0, 2, 0x10, 0x77, 0x22, 0x01, 0x02, 0x03, 0, 0]);
    p.extend_from_slice(payload);
    p
}

/// A 28-byte RTCP sender report from `ssrc`.
pub(super) fn rtcp_sr(ssrc: u32, fill: u8) -> Vec<u8> {
    let mut p = vec![0x80, 200, 0, 6];
    p.extend_from_slice(&ssrc.to_be_bytes());
    p.extend_from_slice(&[fill; 20]);
    p
}

pub(super) fn protect(ctx: &mut SrtpContext, plain: &[u8]) -> Result<Vec<u8>, SrtpError> {
    let mut buf = vec![0u8; plain.len() + ctx.profile().rtp_overhead()];
    buf[..plain.len()].copy_from_slice(plain);
    let n = ctx.protect_rtp(&mut buf, plain.len())?;
    assert_eq!(n, buf.len());
    Ok(buf)
}

pub(super) fn unprotect(ctx: &mut SrtpContext, packet: &[u8]) -> Result<Vec<u8>, SrtpError> {
    let mut buf = packet.to_vec();
    let n = ctx.unprotect_rtp(&mut buf)?;
    buf.truncate(n);
    Ok(buf)
}

pub(super) fn protect_rtcp(ctx: &mut SrtpContext, plain: &[u8]) -> Result<Vec<u8>, SrtpError> {
    let mut buf = vec![0u8; plain.len() + ctx.profile().rtcp_overhead()];
    buf[..plain.len()].copy_from_slice(plain);
    let n = ctx.protect_rtcp(&mut buf, plain.len())?;
    assert_eq!(n, buf.len());
    Ok(buf)
}

pub(super) fn unprotect_rtcp(ctx: &mut SrtpContext, packet: &[u8]) -> Result<Vec<u8>, SrtpError> {
    let mut buf = packet.to_vec();
    let n = ctx.unprotect_rtcp(&mut buf)?;
    buf.truncate(n);
    Ok(buf)
}

#[test]
fn profile_ids_and_lengths() {
    for profile in PROFILES {
        assert_eq!(SrtpProfile::from_dtls_id(profile.dtls_id()), Some(profile));
    }
    let cm = SrtpProfile::Aes128CmHmacSha1_80;
    let gcm = SrtpProfile::AeadAes128Gcm;
    assert_eq!((cm.dtls_id(), gcm.dtls_id()), (0x0001, 0x0007));
    assert_eq!(SrtpProfile::from_dtls_id(0x0002), None);
    assert_eq!((cm.master_key_len(), cm.master_salt_len()), (16, 14));
    assert_eq!((gcm.master_key_len(), gcm.master_salt_len()), (16, 12));
    assert_eq!((cm.rtp_overhead(), cm.rtcp_overhead()), (10, 14));
    assert_eq!((gcm.rtp_overhead(), gcm.rtcp_overhead()), (16, 20));
}

#[test]
fn new_rejects_wrong_key_and_salt_lengths() {
    let cm = SrtpProfile::Aes128CmHmacSha1_80;
    let gcm = SrtpProfile::AeadAes128Gcm;
    assert_eq!(
        SrtpContext::new(cm, &[0; 15], &[0; 14]).err(),
        Some(SrtpError::BadKeyLength)
    );
    assert_eq!(
        SrtpContext::new(cm, &[0; 16], &[0; 12]).err(),
        Some(SrtpError::BadKeyLength)
    );
    assert_eq!(
        SrtpContext::new(gcm, &[0; 16], &[0; 14]).err(),
        Some(SrtpError::BadKeyLength)
    );
    assert_eq!(context(gcm).profile(), gcm);
}

#[test]
fn round_trip_both_profiles() {
    for profile in PROFILES {
        let (mut tx, mut rx) = (context(profile), context(profile));
        let packets = [
            (rtp(1, SSRC, b"hello, world"), 12),
            (rtp(2, SSRC, b""), 12),
            (rtp_with_csrc_and_extension(3, &[0x55; 1200]), 32),
        ];
        for (plain, header_len) in &packets {
            let protected = protect(&mut tx, plain).unwrap();
            assert_eq!(protected.len(), plain.len() + profile.rtp_overhead());
            assert_eq!(
                protected[..*header_len],
                plain[..*header_len],
                "header stays clear"
            );
            if plain.len() > *header_len {
                assert_ne!(protected[*header_len..plain.len()], plain[*header_len..]);
            }
            assert_eq!(unprotect(&mut rx, &protected).unwrap(), *plain);
        }
        assert_eq!(tx.rtp_index(SSRC), Some(3));
        assert_eq!(rx.rtp_index(SSRC), Some(3));

        let sr = rtcp_sr(SSRC, 0x33);
        let protected = protect_rtcp(&mut tx, &sr).unwrap();
        assert_eq!(protected[..8], sr[..8]);
        assert_ne!(protected[8..sr.len()], sr[8..]);
        assert_eq!(unprotect_rtcp(&mut rx, &protected).unwrap(), sr);
    }
}

#[test]
fn roc_wraps_and_both_sides_agree() {
    for profile in PROFILES {
        let (mut tx, mut rx) = (context(profile), context(profile));
        let mut held_back = None;
        let mut before_wrap = None;
        for seq in (65530..=65535).chain(0..=5) {
            let plain = rtp(seq, SSRC, &seq.to_be_bytes());
            let protected = protect(&mut tx, &plain).unwrap();
            if seq == 65534 {
                held_back = Some((plain, protected));
                continue;
            }
            if seq == 65533 {
                before_wrap = Some(protected.clone());
            }
            assert_eq!(unprotect(&mut rx, &protected).unwrap(), plain, "seq {seq}");
        }
        assert_eq!(tx.rtp_index(SSRC), Some(0x1_0005));
        assert_eq!(rx.rtp_index(SSRC), Some(0x1_0005));

        // A late packet from before the wrap is indexed with the old ROC.
        let (plain, protected) = held_back.unwrap();
        assert_eq!(unprotect(&mut rx, &protected).unwrap(), plain);
        assert_eq!(rx.rtp_index(SSRC), Some(0x1_0005));

        // A retransmission after the wrap reuses its original index: same bytes on the wire.
        let again = protect(&mut tx, &rtp(65533, SSRC, &65533u16.to_be_bytes())).unwrap();
        assert_eq!(Some(again), before_wrap);
        assert_eq!(tx.rtp_index(SSRC), Some(0x1_0005));

        // The same sequence number one ROC later is a different packet index.
        let first = protect(&mut context(profile), &rtp(3, SSRC, b"x")).unwrap();
        let later = protect(&mut tx, &rtp(3, SSRC, b"x")).unwrap();
        assert_ne!(first, later);
    }
}

#[test]
fn replayed_and_too_old_packets_are_rejected() {
    for profile in PROFILES {
        let (mut tx, mut rx) = (context(profile), context(profile));
        let sent: Vec<Vec<u8>> = (1..=200)
            .map(|seq| protect(&mut tx, &rtp(seq, SSRC, b"media")).unwrap())
            .collect();
        for (i, packet) in sent.iter().enumerate() {
            // Hold back seq 100 and 73 (127 behind the highest at the end).
            if i + 1 != 100 && i + 1 != 73 {
                unprotect(&mut rx, packet).unwrap();
            }
        }
        let before = rx.snapshot();
        assert_eq!(unprotect(&mut rx, &sent[199]), Err(SrtpError::Replayed));
        assert_eq!(unprotect(&mut rx, &sent[150]), Err(SrtpError::Replayed));
        assert_eq!(unprotect(&mut rx, &sent[71]), Err(SrtpError::TooOld)); // 128 behind
        assert_eq!(unprotect(&mut rx, &sent[0]), Err(SrtpError::TooOld));
        assert_eq!(rx.snapshot(), before, "rejections change no state");
        unprotect(&mut rx, &sent[99]).unwrap();
        unprotect(&mut rx, &sent[72]).unwrap(); // exactly 127 behind: still in the window
        assert_eq!(unprotect(&mut rx, &sent[72]), Err(SrtpError::Replayed));
    }
}

#[test]
fn tampered_packets_fail_and_change_nothing() {
    for profile in PROFILES {
        let (mut tx, mut rx) = (context(profile), context(profile));
        for seq in 1..=5 {
            unprotect(&mut rx, &protect(&mut tx, &rtp(seq, SSRC, b"ok")).unwrap()).unwrap();
        }
        let plain = rtp_with_csrc_and_extension(6, b"do not touch");
        let good = protect(&mut tx, &plain).unwrap();
        let before = rx.snapshot();
        for at in 0..good.len() {
            for bit in [0x01, 0x80] {
                let mut bad = good.clone();
                bad[at] ^= bit;
                let kept = bad.clone();
                let result = rx.unprotect_rtp(&mut bad);
                assert!(result.is_err(), "byte {at} bit {bit:#x} accepted");
                assert_eq!(bad, kept, "byte {at}: a rejected packet is left as it was");
                assert_eq!(rx.snapshot(), before, "byte {at}: state changed");
            }
        }
        // A forged sequence number far ahead must not move the ROC either.
        let mut forged = good.clone();
        forged[2..4].copy_from_slice(&0x7000u16.to_be_bytes());
        assert_eq!(rx.unprotect_rtp(&mut forged), Err(SrtpError::AuthFailed));
        assert_eq!(unprotect(&mut rx, &good).unwrap(), plain);
        assert_eq!(rx.rtp_index(SSRC), Some(6));

        // Unknown SSRC with a bad tag: no state is created for it.
        let mut stranger = protect(&mut context(profile), &rtp(1, 0xdead_beef, b"?")).unwrap();
        let last = stranger.len() - 1;
        stranger[last] ^= 1;
        assert_eq!(rx.unprotect_rtp(&mut stranger), Err(SrtpError::AuthFailed));
        assert_eq!(rx.rtp_index(0xdead_beef), None);

        // SRTCP too.
        let sr = protect_rtcp(&mut tx, &rtcp_sr(SSRC, 1)).unwrap();
        let before = rx.snapshot();
        for at in 0..sr.len() {
            let mut bad = sr.clone();
            bad[at] ^= 0x04;
            assert!(rx.unprotect_rtcp(&mut bad).is_err(), "rtcp byte {at}");
            assert_eq!(rx.snapshot(), before);
        }
        assert_eq!(unprotect_rtcp(&mut rx, &sr).unwrap(), rtcp_sr(SSRC, 1));
    }
}

#[test]
fn skip_rtp_index_to_never_reuses_an_index() {
    for profile in PROFILES {
        let (mut tx, mut rx) = (context(profile), context(profile));
        for seq in 100..=110 {
            unprotect(&mut rx, &protect(&mut tx, &rtp(seq, SSRC, b"a")).unwrap()).unwrap();
        }
        // Rollback: another node may have used up to index 1110.
        tx.skip_rtp_index_to(SSRC, 1110);
        tx.skip_rtp_index_to(SSRC, 500); // a lower floor never lowers it
        assert_eq!(tx.rtp_index(SSRC), Some(1110));
        for seq in [105, 110, 111, 1000, 1110] {
            assert_eq!(
                protect(&mut tx, &rtp(seq, SSRC, b"b")),
                Err(SrtpError::IndexBelowFloor),
                "seq {seq}"
            );
        }
        let plain = rtp(1111, SSRC, b"c");
        assert_eq!(
            unprotect(&mut rx, &protect(&mut tx, &plain).unwrap()).unwrap(),
            plain
        );
        assert_eq!(tx.rtp_index(SSRC), Some(1111));
        assert_eq!(rx.rtp_index(SSRC), Some(1111));

        // The floor survives a snapshot, and works across a ROC boundary.
        let mut restored = SrtpContext::restore(&tx.snapshot()).unwrap();
        assert_eq!(
            protect(&mut restored, &rtp(1000, SSRC, b"d")),
            Err(SrtpError::IndexBelowFloor)
        );
        restored.skip_rtp_index_to(0x77, 0x0003_fff0);
        let first = protect(&mut restored, &rtp(0xffff, 0x77, b"e")).unwrap();
        let retransmission = protect(&mut restored, &rtp(0xffff, 0x77, b"e")).unwrap();
        assert_eq!(first, retransmission);
        assert_eq!(restored.rtp_index(0x77), Some(0x0003_ffff));
        protect(&mut restored, &rtp(2, 0x77, b"f")).unwrap();
        assert_eq!(restored.rtp_index(0x77), Some(0x0004_0002));
        assert_eq!(
            protect(&mut restored, &rtp(0xfff0, 0x77, b"g")),
            Err(SrtpError::IndexBelowFloor)
        );
    }
}

#[test]
fn snapshot_restore_mid_stream_matches_the_unbroken_context() {
    for profile in PROFILES {
        let (mut tx, mut rx) = (context(profile), context(profile));
        for seq in 65500..=65535 {
            unprotect(&mut rx, &protect(&mut tx, &rtp(seq, SSRC, b"pre")).unwrap()).unwrap();
        }
        for fill in 0..3 {
            let sr = protect_rtcp(&mut tx, &rtcp_sr(SSRC, fill)).unwrap();
            unprotect_rtcp(&mut rx, &sr).unwrap();
        }
        let replay = protect(&mut tx, &rtp(0, SSRC, b"wrap")).unwrap();
        unprotect(&mut rx, &replay).unwrap();

        // Through the wire format, as a migration would carry it.
        let tx_state = SrtpContextState::decode(&*tx.snapshot().encode_to_vec()).unwrap();
        let rx_state = SrtpContextState::decode(&*rx.snapshot().encode_to_vec()).unwrap();
        assert_eq!(tx_state, tx.snapshot());
        let mut tx2 = SrtpContext::restore(&tx_state).unwrap();
        let mut rx2 = SrtpContext::restore(&rx_state).unwrap();
        assert_eq!(tx2.snapshot(), tx.snapshot());
        assert_eq!(rx2.snapshot(), rx.snapshot());

        for seq in 1..=40 {
            let plain = rtp(seq, SSRC, &[seq as u8; 50]);
            let a = protect(&mut tx, &plain).unwrap();
            let b = protect(&mut tx2, &plain).unwrap();
            assert_eq!(a, b, "seq {seq}: restored sender diverged");
            assert_eq!(unprotect(&mut rx, &b).unwrap(), plain);
            assert_eq!(unprotect(&mut rx2, &a).unwrap(), plain);
        }
        let a = protect_rtcp(&mut tx, &rtcp_sr(SSRC, 9)).unwrap();
        let b = protect_rtcp(&mut tx2, &rtcp_sr(SSRC, 9)).unwrap();
        assert_eq!(a, b);
        assert_eq!(tx2.rtcp_index(SSRC), Some(3));
        unprotect_rtcp(&mut rx2, &a).unwrap();
        // The restored receiver remembers what the original had already accepted.
        assert_eq!(unprotect(&mut rx2, &replay), Err(SrtpError::Replayed));
        assert_eq!(rx2.rtp_index(SSRC), Some(0x1_0028));
    }
}

#[test]
fn srtcp_index_increments_and_replays_are_rejected() {
    for profile in PROFILES {
        let (mut tx, mut rx) = (context(profile), context(profile));
        let sent: Vec<Vec<u8>> = (0..200u8)
            .map(|i| protect_rtcp(&mut tx, &rtcp_sr(SSRC, i)).unwrap())
            .collect();
        let trailer_at = |p: &Vec<u8>| match profile {
            SrtpProfile::Aes128CmHmacSha1_80 => p.len() - 14,
            SrtpProfile::AeadAes128Gcm | SrtpProfile::AeadAes256Gcm => p.len() - 4,
        };
        for (i, p) in sent.iter().take(3).enumerate() {
            let at = trailer_at(p);
            assert_eq!(p[at..at + 4], (0x8000_0000u32 | i as u32).to_be_bytes());
        }
        assert_eq!(tx.rtcp_index(SSRC), Some(199));

        for i in [2, 0, 1] {
            assert_eq!(
                unprotect_rtcp(&mut rx, &sent[i]).unwrap(),
                rtcp_sr(SSRC, i as u8)
            );
        }
        assert_eq!(unprotect_rtcp(&mut rx, &sent[1]), Err(SrtpError::Replayed));
        for p in &sent[3..199] {
            unprotect_rtcp(&mut rx, p).unwrap();
        }
        assert_eq!(rx.rtcp_index(SSRC), Some(198));
        assert_eq!(unprotect_rtcp(&mut rx, &sent[70]), Err(SrtpError::TooOld));
        assert_eq!(unprotect_rtcp(&mut rx, &sent[71]), Err(SrtpError::Replayed));
        unprotect_rtcp(&mut rx, &sent[199]).unwrap();
    }
}

#[test]
fn srtcp_without_encryption_is_authenticated() {
    for profile in PROFILES {
        let (mut tx, mut rx) = (context(profile), context(profile));
        let sr = rtcp_sr(SSRC, 0x5a);
        let mut buf = vec![0u8; sr.len() + profile.rtcp_overhead()];
        buf[..sr.len()].copy_from_slice(&sr);
        let n = tx.protect_rtcp_inner(&mut buf, sr.len(), false).unwrap();
        assert_eq!(buf[..sr.len()], sr, "E = 0 leaves the payload clear");
        let mut flipped = buf.clone();
        let at = tx.transform.rtcp_trailer_at(n);
        flipped[at] ^= 0x80; // claim it is encrypted
        assert_eq!(rx.unprotect_rtcp(&mut flipped), Err(SrtpError::AuthFailed));
        assert_eq!(unprotect_rtcp(&mut rx, &buf[..n]).unwrap(), sr);
    }
}

#[test]
fn receive_side_forgets_least_recently_used_ssrcs() {
    for profile in PROFILES {
        let (mut tx, mut rx) = (context(profile), context(profile));
        let total = MAX_RECV_STREAMS as u32 + 6;
        for ssrc in 0..total {
            let p = protect(&mut tx, &rtp(1, ssrc, b"x")).unwrap();
            unprotect(&mut rx, &p).unwrap();
            let p = protect_rtcp(&mut tx, &rtcp_sr(ssrc, 0)).unwrap();
            unprotect_rtcp(&mut rx, &p).unwrap();
        }
        let state = rx.snapshot();
        assert_eq!(
            (state.rtp.len(), state.rtcp.len()),
            (MAX_RECV_STREAMS, MAX_RECV_STREAMS)
        );
        assert_eq!(state.rtp[0].ssrc, 6, "least recently used first");
        assert_eq!(rx.rtp_index(5), None);
        assert_eq!(rx.rtp_index(6), Some(1));
        // The sender keeps every SSRC.
        assert_eq!(tx.snapshot().rtp.len(), total as usize);
    }
}

#[test]
fn send_side_refuses_ssrcs_past_its_cap() {
    let mut tx = context(SrtpProfile::AeadAes128Gcm);
    for ssrc in 0..MAX_SEND_STREAMS as u32 {
        protect(&mut tx, &rtp(1, ssrc, b"")).unwrap();
    }
    let extra = MAX_SEND_STREAMS as u32;
    assert_eq!(
        protect(&mut tx, &rtp(1, extra, b"")),
        Err(SrtpError::TooManyStreams)
    );
    protect(&mut tx, &rtp(2, 0, b"")).unwrap();
    assert_eq!(tx.rtp_index(0), Some(2));
}

#[test]
fn index_space_exhaustion_is_an_error() {
    for profile in PROFILES {
        let mut tx = context(profile);
        tx.skip_rtp_index_to(SSRC, MAX_RTP_INDEX - 1);
        protect(&mut tx, &rtp(0xffff, SSRC, b"")).unwrap();
        assert_eq!(
            protect(&mut tx, &rtp(0, SSRC, b"")),
            Err(SrtpError::IndexExhausted)
        );

        tx.skip_rtcp_index_to(SSRC, MAX_RTCP_INDEX - 1);
        protect_rtcp(&mut tx, &rtcp_sr(SSRC, 0)).unwrap();
        assert_eq!(
            protect_rtcp(&mut tx, &rtcp_sr(SSRC, 0)),
            Err(SrtpError::IndexExhausted)
        );
    }
}

#[test]
fn malformed_input_is_an_error() {
    for profile in PROFILES {
        let mut ctx = context(profile);
        let plain = rtp(1, SSRC, b"abc");
        let mut small = plain.clone();
        assert_eq!(
            ctx.protect_rtp(&mut small, plain.len()),
            Err(SrtpError::BufferTooSmall)
        );
        assert_eq!(
            ctx.protect_rtp(&mut small, usize::MAX),
            Err(SrtpError::BufferTooSmall)
        );
        let mut buf = [0u8; 64];
        assert_eq!(ctx.protect_rtp(&mut buf, 0), Err(SrtpError::TooShort));
        buf[0] = 0x40; // version 1
        assert_eq!(ctx.protect_rtp(&mut buf, 20), Err(SrtpError::InvalidPacket));
        buf[0] = 0x8f; // 15 CSRCs do not fit in 20 bytes
        assert_eq!(ctx.protect_rtp(&mut buf, 20), Err(SrtpError::TooShort));
        buf[0] = 0x90; // extension header claims 0xffff words
        buf[12..16].copy_from_slice(&[0xbe, 0xde, 0xff, 0xff]);
        assert_eq!(ctx.protect_rtp(&mut buf, 20), Err(SrtpError::TooShort));
        assert_eq!(ctx.protect_rtcp(&mut buf, 7), Err(SrtpError::TooShort));
        assert_eq!(
            ctx.protect_rtcp(&mut buf, 60),
            Err(SrtpError::BufferTooSmall)
        );

        // A header with no room for the tag.
        let mut short = rtp(1, SSRC, &[0; 5]);
        assert_eq!(ctx.unprotect_rtp(&mut short), Err(SrtpError::TooShort));
        let mut short = rtcp_sr(SSRC, 0)[..8 + profile.rtcp_overhead() - 1].to_vec();
        assert_eq!(ctx.unprotect_rtcp(&mut short), Err(SrtpError::TooShort));
        assert_eq!(ctx.unprotect_rtp(&mut []), Err(SrtpError::TooShort));
        assert_eq!(ctx.unprotect_rtcp(&mut []), Err(SrtpError::TooShort));
        assert_eq!(ctx.snapshot().rtp.len() + ctx.snapshot().rtcp.len(), 0);
    }
}

#[test]
fn restore_rejects_inconsistent_state() {
    let good = {
        let mut tx = context(SrtpProfile::Aes128CmHmacSha1_80);
        protect(&mut tx, &rtp(1, SSRC, b"")).unwrap();
        protect_rtcp(&mut tx, &rtcp_sr(SSRC, 0)).unwrap();
        tx.snapshot()
    };
    SrtpContext::restore(&good).unwrap();
    let broken = |f: fn(&mut SrtpContextState)| {
        let mut s = good.clone();
        f(&mut s);
        SrtpContext::restore(&s).err()
    };
    assert_eq!(
        broken(|s| s.profile = 2),
        Some(SrtpError::UnknownProfile(2))
    );
    assert_eq!(
        broken(|s| s.profile = 0x1_0001),
        Some(SrtpError::UnknownProfile(0x1_0001))
    );
    assert_eq!(broken(|s| s.profile = 7), Some(SrtpError::BadKeyLength));
    assert_eq!(
        broken(|s| {
            s.master_key.pop();
        }),
        Some(SrtpError::BadKeyLength)
    );
    assert!(matches!(
        broken(|s| s.rtp[0].highest_seq = 0x1_0000),
        Some(SrtpError::InvalidState(_))
    ));
    assert!(matches!(
        broken(|s| s.rtp.push(s.rtp[0].clone())),
        Some(SrtpError::InvalidState(_))
    ));
    assert!(matches!(
        broken(|s| s.rtcp[0].index = 1 << 31),
        Some(SrtpError::InvalidState(_))
    ));
    assert!(matches!(
        broken(|s| s.rtp[0].index_floor = Some(1 << 48)),
        Some(SrtpError::InvalidState(_))
    ));
    // Unknown fields from a newer writer are ignored; missing ones default.
    let mut bytes = good.encode_to_vec();
    bytes.extend_from_slice(&[0xf8, 0x06, 0x01]); // field 111, varint 1
    assert_eq!(SrtpContextState::decode(&*bytes).unwrap(), good);
}

#[test]
fn fuzz_body_handles_edge_inputs() {
    for data in [&[][..], &[0x80], &[0x80; 12], &[0x90; 40], &[0xff; 100]] {
        fuzz_unprotect(data);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..1600)) {
        fuzz_unprotect(&data);
    }

    #[test]
    fn rtp_shaped_garbage_never_panics(
        first in any::<u8>(),
        rest in proptest::collection::vec(any::<u8>(), 0..120),
    ) {
        let mut data = vec![0x80 | (first & 0x3f)];
        data.extend_from_slice(&rest);
        fuzz_unprotect(&data);
    }

    #[test]
    fn any_single_bit_flip_is_rejected(
        gcm in any::<bool>(),
        payload in proptest::collection::vec(any::<u8>(), 0..64),
        bit in any::<usize>(),
    ) {
        let profile = if gcm { PROFILES[1] } else { PROFILES[0] };
        let (mut tx, mut rx) = (context(profile), context(profile));
        let mut packet = protect(&mut tx, &rtp(7, SSRC, &payload)).unwrap();
        let bit = bit % (packet.len() * 8);
        packet[bit / 8] ^= 1 << (bit % 8);
        prop_assert!(unprotect(&mut rx, &packet).is_err());
        prop_assert_eq!(rx.rtp_index(SSRC), None);
    }

    #[test]
    fn reordered_streams_decrypt_and_agree_on_the_index(
        gcm in any::<bool>(),
        start in 60_000u16..=u16::MAX,
        steps in proptest::collection::vec(1u16..=15, 1..300),
        shuffle in proptest::collection::vec(any::<u8>(), 300),
    ) {
        let profile = if gcm { PROFILES[1] } else { PROFILES[0] };
        let (mut tx, mut rx) = (context(profile), context(profile));
        let mut seq = start;
        let mut sent = Vec::new();
        for step in &steps {
            let plain = rtp(seq, SSRC, &seq.to_le_bytes());
            sent.push((protect(&mut tx, &plain).unwrap(), plain));
            seq = seq.wrapping_add(*step);
        }
        // Deliver the first packet first (it fixes the receiver's ROC at 0, as the sender
        // assumed), then the rest reordered within chunks of 8.
        let (first, rest) = sent.split_at_mut(1);
        prop_assert_eq!(unprotect(&mut rx, &first[0].0).unwrap(), first[0].1.clone());
        for (c, chunk) in rest.chunks_mut(8).enumerate() {
            let k = usize::from(shuffle[c % shuffle.len()]) % chunk.len();
            chunk.rotate_left(k);
            for (packet, plain) in chunk.iter() {
                prop_assert_eq!(&unprotect(&mut rx, packet).unwrap(), plain);
            }
        }
        prop_assert_eq!(rx.rtp_index(SSRC), tx.rtp_index(SSRC));
    }
}
