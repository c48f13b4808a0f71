//! RFC 3711 §4.3 key derivation with the AES-CM PRF (§4.3.3), key derivation rate 0.

use aes::cipher::{InnerIvInit, KeyInit, StreamCipherCore};
use aes::{Aes128, Aes256};
use ctr::CtrCore;
use ctr::flavors::Ctr128BE;

pub(crate) const LABEL_RTP_ENCRYPTION: u8 = 0x00;
pub(crate) const LABEL_RTP_AUTH: u8 = 0x01;
pub(crate) const LABEL_RTP_SALT: u8 = 0x02;
pub(crate) const LABEL_RTCP_ENCRYPTION: u8 = 0x03;
pub(crate) const LABEL_RTCP_AUTH: u8 = 0x04;
pub(crate) const LABEL_RTCP_SALT: u8 = 0x05;

/// Fills `out` with `PRF_n(k_master, x)` for `label`.
///
/// With a key derivation rate of 0, `r = 0` and `x = label * 2^48 XOR master_salt`, so the label
/// lands on octet 7 of the 112-bit salt. RFC 7714 §11 uses the same function with a 96-bit
/// master salt padded on the right with zeros to 112 bits, which is what copying a shorter
/// salt into the front of the zeroed block does. The AES-CM input block is `x * 2^16`.
///
/// A 256-bit master key uses the AES-256 counter-mode PRF (RFC 6188 §7, RFC 7714 §11).
pub(crate) fn derive(master_key: &[u8], master_salt: &[u8], label: u8, out: &mut [u8]) {
    let mut iv = [0u8; 16];
    let salt_len = master_salt.len().min(14);
    iv[..salt_len].copy_from_slice(&master_salt[..salt_len]);
    iv[7] ^= label;
    out.fill(0);
    if let Ok(k) = <[u8; 32]>::try_from(master_key) {
        let aes = Aes256::new(&k.into());
        CtrCore::<&Aes256, Ctr128BE>::inner_iv_init(&aes, &iv.into())
            .apply_keystream_partial(out.into());
    } else {
        let mut k = [0u8; 16];
        let n = master_key.len().min(16);
        k[..n].copy_from_slice(&master_key[..n]);
        let aes = Aes128::new(&k.into());
        CtrCore::<&Aes128, Ctr128BE>::inner_iv_init(&aes, &iv.into())
            .apply_keystream_partial(out.into());
    }
}
