//! Known-answer tests: RFC 3711 Appendix B, RFC 7714 §16/§17, and libsrtp's `srtp_validate`
//! packets (which exercise key derivation and packet protection end to end).

use super::kdf::{self, LABEL_RTP_AUTH, LABEL_RTP_ENCRYPTION, LABEL_RTP_SALT};
use super::transform::{CmKeys, GcmKeys, Transform};
use super::*;

fn unhex(s: &str) -> Vec<u8> {
    let clean: String = s.chars().filter(|c| !c.is_whitespace()).collect();
    hex::decode(clean).unwrap()
}

fn arr<const N: usize>(s: &str) -> [u8; N] {
    unhex(s).try_into().unwrap()
}

/// Protects `plain` with `f` into a buffer with room for the overhead and returns the result.
fn protect_with(
    plain: &[u8],
    f: impl FnOnce(&mut [u8], usize) -> Result<usize, SrtpError>,
) -> Vec<u8> {
    let mut buf = vec![0u8; plain.len() + 64];
    buf[..plain.len()].copy_from_slice(plain);
    let n = f(&mut buf, plain.len()).unwrap();
    buf.truncate(n);
    buf
}

// RFC 3711 Appendix B.2: AES-CM keystream. Session key 2B7E1516..., session salt
// F0F1...FCFD, SSRC 0, ROC 0, SEQ 0, so the IV is F0F1F2F3F4F5F6F7F8F9FAFBFCFD0000.
#[test]
fn rfc3711_b2_aes_cm_keystream() {
    let keys = CmKeys::from_session(
        &arr("2B7E151628AED2A6ABF7158809CF4F3C"),
        &[0; 20],
        &arr("F0F1F2F3F4F5F6F7F8F9FAFBFCFD"),
    );
    let mut stream = vec![0u8; 0xff02 * 16];
    keys.apply_keystream(0, 0, &mut stream);
    let block = |counter: usize| &stream[counter * 16..counter * 16 + 16];
    assert_eq!(block(0x0000), unhex("E03EAD0935C95E80E166B16DD92B4EB4"));
    assert_eq!(block(0x0001), unhex("D23513162B02D0F72A43A2FE4A5F97AB"));
    assert_eq!(block(0x0002), unhex("41E95B3BB0A2E8DD477901E4FCA894C0"));
    assert_eq!(block(0xfeff), unhex("EC8CDF7398607CB0F2D21675EA9EA1E4"));
    assert_eq!(block(0xff00), unhex("362B7C3C6773516318A077D7FC5073AE"));
    assert_eq!(block(0xff01), unhex("6A2CC3787889374FBEB4C81B17BA6C44"));
}

// RFC 3711 Appendix B.3: key derivation, packet index 0, key derivation rate 0.
#[test]
fn rfc3711_b3_key_derivation() {
    let master_key = arr::<16>("E1F97A0D3E018BE0D64FA32C06DE4139");
    let master_salt = unhex("0EC675AD498AFEEBB6960B3AABE6");

    let mut cipher_key = [0u8; 16];
    kdf::derive(
        &master_key,
        &master_salt,
        LABEL_RTP_ENCRYPTION,
        &mut cipher_key,
    );
    assert_eq!(
        cipher_key.to_vec(),
        unhex("C61E7A93744F39EE10734AFE3FF7A087")
    );

    let mut cipher_salt = [0u8; 14];
    kdf::derive(&master_key, &master_salt, LABEL_RTP_SALT, &mut cipher_salt);
    assert_eq!(cipher_salt.to_vec(), unhex("30CBBC08863D8C85D49DB34A9AE1"));

    // The RFC lists 94 octets of auth key output; HMAC-SHA1 uses the first 20.
    let mut auth_key = [0u8; 94];
    kdf::derive(&master_key, &master_salt, LABEL_RTP_AUTH, &mut auth_key);
    assert_eq!(
        auth_key.to_vec(),
        unhex(
            "CEBE321F6FF7716B6FD4AB49AF256A15 6D38BAA48F0A0ACF3C34E2359E6CDBCE
             E049646C43D9327AD175578EF7227098 6371C10C9A369AC2F94A8C5FBCDDDC25
             6D6E919A48B610EF17C2041E47403576 6B68642C59BBFC2F34DB60DBDFB2"
        )
    );
}

// RFC 7714 §16-§17 material: the vectors give session keys directly (no KDF step).
const GCM_KEY: &str = "000102030405060708090a0b0c0d0e0f";
const GCM_SALT: &str = "517569642070726f2071756f"; // "Quid pro quo"

/// RFC 7714 §16.1: RTP packet, SSRC 5501a0b2, SEQ f17b, ROC 0,
/// payload "Gallia est omnis divisa in partes tres".
const RFC7714_RTP: &str = "8040f17b 8041f8d3 5501a0b2 47616c6c 69612065 7374206f
                           6d6e6973 20646976 69736120 696e2070 61727465 73207472 6573";
/// RFC 7714 §16.1.1: the same packet protected with AEAD_AES_128_GCM.
const RFC7714_SRTP_128: &str = "8040f17b 8041f8d3 5501a0b2 f24de3a3 fb34de6c acba861c
                                9d7e4bca be633bd5 0d294e6f 42a5f47a 51c7d19b 36de3adf
                                8833899d 7f27beb1 6a9152cf 765ee439 0cce";
/// RFC 7714 §17: RTCP sender report, sender SSRC 4d617273 ("Mars"), SRTCP index 0x5d4.
const RFC7714_RTCP: &str = "81c8000d 4d617273 4e545031 4e545032 52545020 0000042a
                            0000e930 4c756e61 deadbeef deadbeef deadbeef deadbeef deadbeef";
/// RFC 7714 §17.1: SRTCP AEAD_AES_128_GCM encryption (E = 1).
const RFC7714_SRTCP_128: &str = "81c8000d 4d617273 63e94885 dcdab67c a727d766 2f6b7e99
                                 7ff5c0f7 6c06f32d c676a5f1 730d6fda 4ce09b46 86303ded
                                 0bb9275b c84aa458 96cf4d2f c5abf872 45d9eade 800005d4";
/// RFC 7714 §17.3: SRTCP AEAD_AES_128_GCM authentication only (E = 0).
const RFC7714_SRTCP_128_AUTH_ONLY: &str = "81c8000d 4d617273 4e545031 4e545032 52545020
                                           0000042a 0000e930 4c756e61 deadbeef deadbeef
                                           deadbeef deadbeef deadbeef 841dd968 3dd78ec9
                                           2ae58790 125f62b3 000005d4";
const MARS: u32 = 0x4d61_7273;

fn rfc7714_context() -> SrtpContext {
    let keys = GcmKeys::from_session(&arr::<16>(GCM_KEY), &arr(GCM_SALT));
    SrtpContext::with_transform(
        SrtpProfile::AeadAes128Gcm,
        Transform::Gcm {
            rtp: keys.clone(),
            rtcp: keys,
        },
    )
}

// RFC 7714 §16.1 (IV 51753c6580c2726f20718414) and §17.1 (IV 517524055203726f207170bb).
#[test]
fn rfc7714_iv_construction() {
    let keys = GcmKeys::from_session(&arr::<16>(GCM_KEY), &arr(GCM_SALT));
    assert_eq!(
        keys.nonce(0x5501_a0b2, 0xf17b).to_vec(),
        unhex("51753c6580c2726f20718414")
    );
    assert_eq!(
        keys.nonce(MARS, 0x5d4).to_vec(),
        unhex("517524055203726f207170bb")
    );
}

// RFC 7714 §16.1.1 (encryption) and §16.1.2 (decryption).
#[test]
fn rfc7714_16_1_srtp_aead_aes_128_gcm() {
    let mut tx = rfc7714_context();
    let protected = protect_with(&unhex(RFC7714_RTP), |b, n| tx.protect_rtp(b, n));
    assert_eq!(protected, unhex(RFC7714_SRTP_128));

    let mut rx = rfc7714_context();
    let mut buf = unhex(RFC7714_SRTP_128);
    let n = rx.unprotect_rtp(&mut buf).unwrap();
    assert_eq!(buf[..n], unhex(RFC7714_RTP));
    assert_eq!(rx.rtp_index(0x5501_a0b2), Some(0xf17b));
}

// RFC 7714 §17.1: SRTCP encryption with index 0x5d4, and its decryption.
#[test]
fn rfc7714_17_1_srtcp_aead_aes_128_gcm() {
    let mut tx = rfc7714_context();
    tx.skip_rtcp_index_to(MARS, 0x5d3);
    let protected = protect_with(&unhex(RFC7714_RTCP), |b, n| tx.protect_rtcp(b, n));
    assert_eq!(protected, unhex(RFC7714_SRTCP_128));
    assert_eq!(tx.rtcp_index(MARS), Some(0x5d4));

    let mut rx = rfc7714_context();
    let mut buf = unhex(RFC7714_SRTCP_128);
    let n = rx.unprotect_rtcp(&mut buf).unwrap();
    assert_eq!(buf[..n], unhex(RFC7714_RTCP));
    assert_eq!(rx.rtcp_index(MARS), Some(0x5d4));
}

// RFC 7714 §17.3: SRTCP authentication tagging only (E = 0), and its verification.
#[test]
fn rfc7714_17_3_srtcp_auth_only() {
    let mut tx = rfc7714_context();
    tx.skip_rtcp_index_to(MARS, 0x5d3);
    let protected = protect_with(&unhex(RFC7714_RTCP), |b, n| {
        tx.protect_rtcp_inner(b, n, false)
    });
    assert_eq!(protected, unhex(RFC7714_SRTCP_128_AUTH_ONLY));

    let mut rx = rfc7714_context();
    let mut tampered = unhex(RFC7714_SRTCP_128_AUTH_ONLY);
    tampered[20] ^= 1;
    let before = tampered.clone();
    assert_eq!(rx.unprotect_rtcp(&mut tampered), Err(SrtpError::AuthFailed));
    assert_eq!(tampered, before, "a rejected packet is left as it was");

    let mut buf = unhex(RFC7714_SRTCP_128_AUTH_ONLY);
    let n = rx.unprotect_rtcp(&mut buf).unwrap();
    assert_eq!(buf[..n], unhex(RFC7714_RTCP));
}

// libsrtp test/srtp_driver.c `srtp_validate`: default AES_CM_128_HMAC_SHA1_80 policy, master
// key E1F97A0D..., salt 0EC675AD... (the B.3 material), SSRC cafebabe, SEQ 0x1234. libsrtp
// numbers its first SRTCP packet 1, so the test skips index 0.
#[test]
fn libsrtp_validate_aes_cm_128_hmac_sha1_80() {
    let key = unhex("E1F97A0D3E018BE0D64FA32C06DE4139");
    let salt = unhex("0EC675AD498AFEEBB6960B3AABE6");
    let profile = SrtpProfile::Aes128CmHmacSha1_80;
    let rtp = unhex("800f1234 decafbad cafebabe abababab abababab abababab abababab");
    let srtp = unhex(
        "800f1234 decafbad cafebabe 4e55dc4c e79978d8 8ca4d215 949d2402 b78d6acc 99ea179b 8dbb",
    );
    let rtcp = unhex("81c8000b cafebabe abababab abababab abababab abababab");
    let srtcp = unhex(
        "81c8000b cafebabe 7128035b e487b9bd bef89041 f977a5a8 80000001 993e08cd 54d6c123 0798",
    );

    let mut tx = SrtpContext::new(profile, &key, &salt).unwrap();
    assert_eq!(protect_with(&rtp, |b, n| tx.protect_rtp(b, n)), srtp);
    tx.skip_rtcp_index_to(0xcafe_babe, 0);
    assert_eq!(protect_with(&rtcp, |b, n| tx.protect_rtcp(b, n)), srtcp);

    let mut rx = SrtpContext::new(profile, &key, &salt).unwrap();
    let mut buf = srtp.clone();
    let n = rx.unprotect_rtp(&mut buf).unwrap();
    assert_eq!(buf[..n], rtp);
    let mut buf = srtcp.clone();
    let n = rx.unprotect_rtcp(&mut buf).unwrap();
    assert_eq!(buf[..n], rtcp);
}

// libsrtp `srtp_validate_gcm`: AEAD_AES_128_GCM through the KDF with a 96-bit master salt
// (RFC 7714 §11), master key 000102...0f, salt a0a1...ab, SSRC cafebabe, SEQ 0x1234.
#[test]
fn libsrtp_validate_aead_aes_128_gcm() {
    let key = unhex(GCM_KEY);
    let salt = unhex("a0a1a2a3a4a5a6a7a8a9aaab");
    let profile = SrtpProfile::AeadAes128Gcm;
    let rtp = unhex("800f1234 decafbad cafebabe abababab abababab abababab abababab");
    let srtp = unhex(
        "800f1234 decafbad cafebabe c5002ede 04cfdd2e b91159e0 880aa06e d2976826
         f796b201 df3131a1 27e8a392",
    );
    let rtcp = unhex("81c8000b cafebabe abababab abababab abababab abababab");
    let srtcp = unhex(
        "81c8000b cafebabe c98b8b5d f0392a55 852b6c21 ac8e7025 c52c6fbe a2b3b446
         ea31123b a88ce61e 80000001",
    );

    let mut tx = SrtpContext::new(profile, &key, &salt).unwrap();
    assert_eq!(protect_with(&rtp, |b, n| tx.protect_rtp(b, n)), srtp);
    tx.skip_rtcp_index_to(0xcafe_babe, 0);
    assert_eq!(protect_with(&rtcp, |b, n| tx.protect_rtcp(b, n)), srtcp);

    let mut rx = SrtpContext::new(profile, &key, &salt).unwrap();
    let mut buf = srtp.clone();
    let n = rx.unprotect_rtp(&mut buf).unwrap();
    assert_eq!(buf[..n], rtp);
    let mut buf = srtcp.clone();
    let n = rx.unprotect_rtcp(&mut buf).unwrap();
    assert_eq!(buf[..n], rtcp);
}
