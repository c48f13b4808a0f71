//! Cross-check against an independent implementation: webrtc-rs `rtc-srtp` 0.8 (built on
//! RustCrypto's previous major versions). Both sides are deterministic, so beyond decrypting
//! each other's packets they must produce byte-identical ciphertext.

use rtc_srtp::context::Context;
use rtc_srtp::protection_profile::ProtectionProfile;

use super::tests_behaviour::{context, keys, protect, protect_rtcp, rtcp_sr, rtp, unprotect};
use super::*;

const SSRC: u32 = 0xcafe_f00d;

fn theirs(profile: SrtpProfile) -> Context {
    let (key, salt) = keys(profile);
    let profile = match profile {
        SrtpProfile::Aes128CmHmacSha1_80 => ProtectionProfile::Aes128CmHmacSha1_80,
        SrtpProfile::AeadAes128Gcm => ProtectionProfile::AeadAes128Gcm,
        SrtpProfile::AeadAes256Gcm => ProtectionProfile::AeadAes256Gcm,
    };
    Context::new(&key, &salt, profile, None, None).unwrap()
}

#[test]
fn rtc_srtp_and_we_agree_on_srtp_across_a_rollover() {
    for profile in [
        SrtpProfile::Aes128CmHmacSha1_80,
        SrtpProfile::AeadAes128Gcm,
        SrtpProfile::AeadAes256Gcm,
    ] {
        let (mut ours_tx, mut ours_rx) = (context(profile), context(profile));
        let (mut their_tx, mut their_rx) = (theirs(profile), theirs(profile));
        for seq in (65520..=65535).chain(0..=20) {
            let plain = rtp(seq, SSRC, &[seq as u8; 100]);
            let ours = protect(&mut ours_tx, &plain).unwrap();
            let their = their_tx.encrypt_rtp(&plain).unwrap();
            assert_eq!(
                ours,
                their.to_vec(),
                "{profile:?} seq {seq}: ciphertext differs"
            );
            assert_eq!(their_rx.decrypt_rtp(&ours).unwrap().to_vec(), plain);
            assert_eq!(unprotect(&mut ours_rx, &their).unwrap(), plain);
        }
        assert_eq!(ours_rx.rtp_index(SSRC), Some(0x1_0014));
    }
}

#[test]
fn rtc_srtp_and_we_agree_on_srtcp() {
    for profile in [
        SrtpProfile::Aes128CmHmacSha1_80,
        SrtpProfile::AeadAes128Gcm,
        SrtpProfile::AeadAes256Gcm,
    ] {
        let (mut ours_tx, mut ours_rx) = (context(profile), context(profile));
        let (mut their_tx, mut their_rx) = (theirs(profile), theirs(profile));
        // rtc-srtp numbers its first SRTCP packet 1; RFC 3711 §3.4 and we start at 0.
        ours_tx.skip_rtcp_index_to(SSRC, 0);
        for fill in 0..10 {
            let plain = rtcp_sr(SSRC, fill);
            let ours = protect_rtcp(&mut ours_tx, &plain).unwrap();
            let their = their_tx.encrypt_rtcp(&plain).unwrap();
            assert_eq!(
                ours,
                their.to_vec(),
                "{profile:?} report {fill}: ciphertext differs"
            );
            assert_eq!(their_rx.decrypt_rtcp(&ours).unwrap().to_vec(), plain);
            let mut buf = their.to_vec();
            let n = ours_rx.unprotect_rtcp(&mut buf).unwrap();
            assert_eq!(buf[..n], plain);
        }
    }
}
