//! Per-packet cryptography of the two profiles, on keys scheduled once per context.
//!
//! Callers have already checked lengths and header bounds; these functions only index within
//! the ranges they are given and never allocate.

use aes::Aes128;
use aes::cipher::{InnerIvInit, KeyInit, StreamCipherCore};
use aes_gcm::aead::inout::InOutBuf;
use aes_gcm::{AeadInOut, Aes128Gcm, Aes256Gcm};
use ctr::CtrCore;
use ctr::flavors::Ctr128BE;
use hmac::{Hmac, Mac};
use sha1::Sha1;
use subtle::ConstantTimeEq;

use super::error::SrtpError;
use super::kdf::{self, *};
use super::profile::{CM_TAG_LEN, GCM_TAG_LEN, SRTCP_TRAILER_LEN, SrtpProfile};

/// RTCP header and sender SSRC, never encrypted.
pub(crate) const RTCP_CLEAR_LEN: usize = 8;

const E_FLAG: u32 = 0x8000_0000;

/// Where the RTP header ends and who sent the packet.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RtpMeta {
    pub(crate) ssrc: u32,
    pub(crate) header_len: usize,
}

/// AES-CM session keys of one of SRTP or SRTCP.
#[derive(Clone)]
pub(crate) struct CmKeys {
    aes: Aes128,
    salt: [u8; 14],
    mac: Hmac<Sha1>,
}

impl CmKeys {
    fn derive(master_key: &[u8], master_salt: &[u8], labels: [u8; 3]) -> Self {
        let mut key = [0u8; 16];
        let mut auth = [0u8; 20];
        let mut salt = [0u8; 14];
        kdf::derive(master_key, master_salt, labels[0], &mut key);
        kdf::derive(master_key, master_salt, labels[1], &mut auth);
        kdf::derive(master_key, master_salt, labels[2], &mut salt);
        Self::from_session(&key, &auth, &salt)
    }

    pub(crate) fn from_session(key: &[u8; 16], auth: &[u8; 20], salt: &[u8; 14]) -> Self {
        Self {
            aes: Aes128::new(&(*key).into()),
            salt: *salt,
            // HMAC keys of any length are valid; the padded key blocks are hashed once here
            // and every packet starts from a copy of that state.
            mac: <Hmac<Sha1> as KeyInit>::new(&hmac_key(auth).into()),
        }
    }

    /// RFC 3711 §4.1.1: IV = (k_s * 2^16) XOR (SSRC * 2^64) XOR (i * 2^16).
    fn iv(&self, ssrc: u32, index: u64) -> [u8; 16] {
        let mut iv = [0u8; 16];
        iv[..14].copy_from_slice(&self.salt);
        xor_into(&mut iv[4..8], &ssrc.to_be_bytes());
        xor_into(&mut iv[8..14], &index.to_be_bytes()[2..]);
        iv
    }

    pub(crate) fn apply_keystream(&self, ssrc: u32, index: u64, data: &mut [u8]) {
        let iv = self.iv(ssrc, index);
        CtrCore::<&Aes128, Ctr128BE>::inner_iv_init(&self.aes, &iv.into())
            .apply_keystream_partial(data.into());
    }

    fn tag(&self, data: &[u8], roc: Option<u32>) -> [u8; CM_TAG_LEN] {
        let mut mac = self.mac.clone();
        Mac::update(&mut mac, data);
        if let Some(roc) = roc {
            Mac::update(&mut mac, &roc.to_be_bytes());
        }
        let full = mac.finalize().into_bytes();
        let mut tag = [0u8; CM_TAG_LEN];
        tag.copy_from_slice(&full[..CM_TAG_LEN]);
        tag
    }
}

/// HMAC keys are zero-padded to the SHA-1 block, so the 20-byte session key can be passed as
/// a full block and the cloneable `KeyInit::new` used without a fallible slice constructor.
fn hmac_key(auth: &[u8; 20]) -> [u8; 64] {
    let mut block = [0u8; 64];
    block[..20].copy_from_slice(auth);
    block
}

/// AES-GCM with a 128-bit (AEAD_AES_128_GCM) or 256-bit (AEAD_AES_256_GCM) key.
// One per direction of a session; keeping the cipher inline avoids a
// pointer chase per packet.
#[allow(clippy::large_enum_variant)]
#[derive(Clone)]
pub(crate) enum Gcm {
    Aes128(Aes128Gcm),
    Aes256(Aes256Gcm),
}

type GcmTag = aes_gcm::Tag<aes_gcm::aead::consts::U16>;

impl Gcm {
    pub(crate) fn encrypt_inout_detached(
        &self,
        nonce: &aes_gcm::Nonce<aes_gcm::aead::consts::U12>,
        aad: &[u8],
        buf: InOutBuf<'_, '_, u8>,
    ) -> Result<GcmTag, aes_gcm::Error> {
        match self {
            Gcm::Aes128(a) => a.encrypt_inout_detached(nonce, aad, buf),
            Gcm::Aes256(a) => a.encrypt_inout_detached(nonce, aad, buf),
        }
    }

    pub(crate) fn decrypt_inout_detached(
        &self,
        nonce: &aes_gcm::Nonce<aes_gcm::aead::consts::U12>,
        aad: &[u8],
        buf: InOutBuf<'_, '_, u8>,
        tag: &GcmTag,
    ) -> Result<(), aes_gcm::Error> {
        match self {
            Gcm::Aes128(a) => a.decrypt_inout_detached(nonce, aad, buf, tag),
            Gcm::Aes256(a) => a.decrypt_inout_detached(nonce, aad, buf, tag),
        }
    }
}

/// AEAD_AES_128_GCM / AEAD_AES_256_GCM session keys of one of SRTP or SRTCP.
#[derive(Clone)]
pub(crate) struct GcmKeys {
    aead: Gcm,
    salt: [u8; 12],
}

impl GcmKeys {
    fn derive(master_key: &[u8], master_salt: &[u8], labels: [u8; 2]) -> Self {
        let mut key = [0u8; 32];
        let key = &mut key[..master_key.len()];
        let mut salt = [0u8; 12];
        kdf::derive(master_key, master_salt, labels[0], key);
        kdf::derive(master_key, master_salt, labels[1], &mut salt);
        Self::from_session(key, &salt)
    }

    /// Session key of 16 or 32 bytes (anything else is treated as 16 bytes, zero-padded).
    pub(crate) fn from_session(key: &[u8], salt: &[u8; 12]) -> Self {
        let aead = match <[u8; 32]>::try_from(key) {
            Ok(k256) => Gcm::Aes256(Aes256Gcm::new(&k256.into())),
            Err(_) => {
                let mut k128 = [0u8; 16];
                let n = key.len().min(16);
                k128[..n].copy_from_slice(&key[..n]);
                Gcm::Aes128(Aes128Gcm::new(&k128.into()))
            }
        };
        Self { aead, salt: *salt }
    }

    /// RFC 7714 §8.1 / §9.1: `00 00 || SSRC || ROC || SEQ` for SRTP and
    /// `00 00 || SSRC || 00 00 || 0 || SRTCP index` for SRTCP, XOR the salt. Both are the
    /// 48-bit index in the low six octets.
    pub(crate) fn nonce(&self, ssrc: u32, index: u64) -> [u8; 12] {
        let mut iv = self.salt;
        xor_into(&mut iv[2..6], &ssrc.to_be_bytes());
        xor_into(&mut iv[6..12], &index.to_be_bytes()[2..]);
        iv
    }
}

/// The session keys of both SRTP and SRTCP for one profile.
#[allow(clippy::large_enum_variant)]
#[derive(Clone)]
pub(crate) enum Transform {
    AesCm { rtp: CmKeys, rtcp: CmKeys },
    Gcm { rtp: GcmKeys, rtcp: GcmKeys },
}

impl Transform {
    pub(crate) fn derive(profile: SrtpProfile, master_key: &[u8], master_salt: &[u8]) -> Self {
        match profile {
            SrtpProfile::Aes128CmHmacSha1_80 => Transform::AesCm {
                rtp: CmKeys::derive(
                    master_key,
                    master_salt,
                    [LABEL_RTP_ENCRYPTION, LABEL_RTP_AUTH, LABEL_RTP_SALT],
                ),
                rtcp: CmKeys::derive(
                    master_key,
                    master_salt,
                    [LABEL_RTCP_ENCRYPTION, LABEL_RTCP_AUTH, LABEL_RTCP_SALT],
                ),
            },
            SrtpProfile::AeadAes128Gcm | SrtpProfile::AeadAes256Gcm => Transform::Gcm {
                rtp: GcmKeys::derive(
                    master_key,
                    master_salt,
                    [LABEL_RTP_ENCRYPTION, LABEL_RTP_SALT],
                ),
                rtcp: GcmKeys::derive(
                    master_key,
                    master_salt,
                    [LABEL_RTCP_ENCRYPTION, LABEL_RTCP_SALT],
                ),
            },
        }
    }

    /// Encrypts `buf[header_len..len]` and writes the tag at `buf[len..]`.
    /// `buf` holds at least `len + tag length` bytes.
    pub(crate) fn protect_rtp(
        &self,
        buf: &mut [u8],
        len: usize,
        meta: RtpMeta,
        index: u64,
    ) -> Result<(), SrtpError> {
        match self {
            Transform::AesCm { rtp, .. } => {
                rtp.apply_keystream(meta.ssrc, index, &mut buf[meta.header_len..len]);
                let tag = rtp.tag(&buf[..len], Some(roc_of(index)));
                buf[len..len + CM_TAG_LEN].copy_from_slice(&tag);
            }
            Transform::Gcm { rtp, .. } => {
                let nonce = rtp.nonce(meta.ssrc, index);
                let (header, rest) = buf.split_at_mut(meta.header_len);
                let (payload, tail) = rest.split_at_mut(len - meta.header_len);
                let tag = rtp
                    .aead
                    .encrypt_inout_detached(&nonce.into(), header, payload.into())
                    .map_err(|_| SrtpError::InvalidPacket)?;
                tail[..GCM_TAG_LEN].copy_from_slice(&tag);
            }
        }
        Ok(())
    }

    /// Authenticates the whole of `buf` and decrypts its payload in place; returns the
    /// plaintext length. On failure `buf` is left as it was. `buf` holds at least the header
    /// and a tag.
    pub(crate) fn unprotect_rtp(
        &self,
        buf: &mut [u8],
        meta: RtpMeta,
        index: u64,
    ) -> Result<usize, SrtpError> {
        match self {
            Transform::AesCm { rtp, .. } => {
                let end = buf.len() - CM_TAG_LEN;
                let expected = rtp.tag(&buf[..end], Some(roc_of(index)));
                if !bool::from(expected.ct_eq(&buf[end..])) {
                    return Err(SrtpError::AuthFailed);
                }
                rtp.apply_keystream(meta.ssrc, index, &mut buf[meta.header_len..end]);
                Ok(end)
            }
            Transform::Gcm { rtp, .. } => {
                let end = buf.len() - GCM_TAG_LEN;
                let nonce = rtp.nonce(meta.ssrc, index);
                let (body, tag) = buf.split_at_mut(end);
                let (header, payload) = body.split_at_mut(meta.header_len);
                let tag: [u8; GCM_TAG_LEN] = (&*tag).try_into().map_err(|_| SrtpError::TooShort)?;
                rtp.aead
                    .decrypt_inout_detached(&nonce.into(), header, payload.into(), &tag.into())
                    .map_err(|_| SrtpError::AuthFailed)?;
                Ok(end)
            }
        }
    }

    /// Protects the RTCP packet `buf[..len]`: payload after the first 8 octets encrypted when
    /// `encrypt`, then the E flag and `index`, and the tag (RFC 3711 §3.4 / RFC 7714 §9).
    pub(crate) fn protect_rtcp(
        &self,
        buf: &mut [u8],
        len: usize,
        ssrc: u32,
        index: u32,
        encrypt: bool,
    ) -> Result<(), SrtpError> {
        let trailer = (if encrypt { E_FLAG } else { 0 } | index).to_be_bytes();
        let index = u64::from(index);
        match self {
            Transform::AesCm { rtcp, .. } => {
                if encrypt {
                    rtcp.apply_keystream(ssrc, index, &mut buf[RTCP_CLEAR_LEN..len]);
                }
                buf[len..len + SRTCP_TRAILER_LEN].copy_from_slice(&trailer);
                let end = len + SRTCP_TRAILER_LEN;
                let tag = rtcp.tag(&buf[..end], None);
                buf[end..end + CM_TAG_LEN].copy_from_slice(&tag);
            }
            Transform::Gcm { rtcp, .. } => {
                let nonce = rtcp.nonce(ssrc, index).into();
                let tag = if encrypt {
                    // AAD: the first 8 octets, then the E flag and index (RFC 7714 §9.3).
                    let mut aad = [0u8; RTCP_CLEAR_LEN + SRTCP_TRAILER_LEN];
                    aad[..RTCP_CLEAR_LEN].copy_from_slice(&buf[..RTCP_CLEAR_LEN]);
                    aad[RTCP_CLEAR_LEN..].copy_from_slice(&trailer);
                    let payload = &mut buf[RTCP_CLEAR_LEN..len];
                    rtcp.aead
                        .encrypt_inout_detached(&nonce, &aad, payload.into())
                        .map_err(|_| SrtpError::InvalidPacket)?
                } else {
                    // AAD: the whole packet, then the E flag and index (RFC 7714 §9.4). Put
                    // the trailer right behind the packet so the AAD is contiguous, then move
                    // it behind the tag.
                    buf[len..len + SRTCP_TRAILER_LEN].copy_from_slice(&trailer);
                    rtcp.aead
                        .encrypt_inout_detached(
                            &nonce,
                            &buf[..len + SRTCP_TRAILER_LEN],
                            (&mut [][..]).into(),
                        )
                        .map_err(|_| SrtpError::InvalidPacket)?
                };
                buf[len..len + GCM_TAG_LEN].copy_from_slice(&tag);
                let end = len + GCM_TAG_LEN;
                buf[end..end + SRTCP_TRAILER_LEN].copy_from_slice(&trailer);
            }
        }
        Ok(())
    }

    /// Where the E flag and index sit in a protected RTCP packet of length `n`.
    pub(crate) fn rtcp_trailer_at(&self, n: usize) -> usize {
        match self {
            Transform::AesCm { .. } => n - CM_TAG_LEN - SRTCP_TRAILER_LEN,
            Transform::Gcm { .. } => n - SRTCP_TRAILER_LEN,
        }
    }

    /// Authenticates `buf` and decrypts it in place when its E flag is set; returns the RTCP
    /// length. On failure `buf` is left as it was. `buf` holds at least 8 octets, the trailer
    /// and a tag.
    pub(crate) fn unprotect_rtcp(
        &self,
        buf: &mut [u8],
        ssrc: u32,
        index: u32,
        encrypted: bool,
    ) -> Result<usize, SrtpError> {
        let n = buf.len();
        let index = u64::from(index);
        match self {
            Transform::AesCm { rtcp, .. } => {
                let end = n - CM_TAG_LEN;
                let expected = rtcp.tag(&buf[..end], None);
                if !bool::from(expected.ct_eq(&buf[end..])) {
                    return Err(SrtpError::AuthFailed);
                }
                let plain_len = end - SRTCP_TRAILER_LEN;
                if encrypted {
                    rtcp.apply_keystream(ssrc, index, &mut buf[RTCP_CLEAR_LEN..plain_len]);
                }
                Ok(plain_len)
            }
            Transform::Gcm { rtcp, .. } => {
                let plain_len = n - SRTCP_TRAILER_LEN - GCM_TAG_LEN;
                let nonce = rtcp.nonce(ssrc, index).into();
                let mut trailer = [0u8; SRTCP_TRAILER_LEN];
                trailer.copy_from_slice(&buf[n - SRTCP_TRAILER_LEN..]);
                let mut tag = [0u8; GCM_TAG_LEN];
                tag.copy_from_slice(&buf[plain_len..plain_len + GCM_TAG_LEN]);
                if encrypted {
                    let mut aad = [0u8; RTCP_CLEAR_LEN + SRTCP_TRAILER_LEN];
                    aad[..RTCP_CLEAR_LEN].copy_from_slice(&buf[..RTCP_CLEAR_LEN]);
                    aad[RTCP_CLEAR_LEN..].copy_from_slice(&trailer);
                    let payload = &mut buf[RTCP_CLEAR_LEN..plain_len];
                    rtcp.aead
                        .decrypt_inout_detached(&nonce, &aad, payload.into(), &tag.into())
                        .map_err(|_| SrtpError::AuthFailed)?;
                } else {
                    buf[plain_len..plain_len + SRTCP_TRAILER_LEN].copy_from_slice(&trailer);
                    let verified = rtcp.aead.decrypt_inout_detached(
                        &nonce,
                        &buf[..plain_len + SRTCP_TRAILER_LEN],
                        (&mut [][..]).into(),
                        &tag.into(),
                    );
                    if verified.is_err() {
                        buf[plain_len..plain_len + GCM_TAG_LEN].copy_from_slice(&tag);
                        return Err(SrtpError::AuthFailed);
                    }
                }
                Ok(plain_len)
            }
        }
    }
}

fn roc_of(index: u64) -> u32 {
    (index >> 16) as u32
}

fn xor_into(dst: &mut [u8], src: &[u8]) {
    for (d, s) in dst.iter_mut().zip(src) {
        *d ^= s;
    }
}
