//! The SRTP protection profiles DTLS-SRTP negotiates (RFC 5764, RFC 7714) and their key sizes.

/// AES-CM: 80-bit HMAC-SHA1 tag (RFC 3711 §4.2.1, §5.2).
pub(crate) const CM_TAG_LEN: usize = 10;
/// AEAD_AES_128_GCM: 16-octet tag (RFC 7714 §7).
pub(crate) const GCM_TAG_LEN: usize = 16;
/// The E flag and 31-bit SRTCP index.
pub(crate) const SRTCP_TRAILER_LEN: usize = 4;

/// An SRTP protection profile (RFC 5764 §4.1.2, RFC 7714 §14.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SrtpProfile {
    /// SRTP_AES128_CM_HMAC_SHA1_80: AES-128 counter mode, 80-bit HMAC-SHA1 tag.
    Aes128CmHmacSha1_80,
    /// SRTP_AEAD_AES_128_GCM: AES-128-GCM with a 16-octet tag.
    AeadAes128Gcm,
    /// AEAD_AES_256_GCM (RFC 7714): 32-byte key, 12-byte salt, 16-byte tag.
    AeadAes256Gcm,
}

impl SrtpProfile {
    /// The profile for a DTLS `use_srtp` protection profile id, if supported.
    pub fn from_dtls_id(id: u16) -> Option<Self> {
        match id {
            0x0001 => Some(Self::Aes128CmHmacSha1_80),
            0x0007 => Some(Self::AeadAes128Gcm),
            0x0008 => Some(Self::AeadAes256Gcm),
            _ => None,
        }
    }

    /// The DTLS `use_srtp` protection profile id.
    pub fn dtls_id(self) -> u16 {
        match self {
            Self::Aes128CmHmacSha1_80 => 0x0001,
            Self::AeadAes128Gcm => 0x0007,
            Self::AeadAes256Gcm => 0x0008,
        }
    }

    /// Master key length in bytes.
    pub fn master_key_len(self) -> usize {
        match self {
            Self::AeadAes256Gcm => 32,
            Self::Aes128CmHmacSha1_80 | Self::AeadAes128Gcm => 16,
        }
    }

    /// Master salt length in bytes.
    pub fn master_salt_len(self) -> usize {
        match self {
            Self::Aes128CmHmacSha1_80 => 14,
            Self::AeadAes128Gcm | Self::AeadAes256Gcm => 12,
        }
    }

    /// Bytes [`SrtpContext::protect_rtp`] appends: the authentication tag.
    pub fn rtp_overhead(self) -> usize {
        self.tag_len()
    }

    /// Bytes [`SrtpContext::protect_rtcp`] appends: the E flag and SRTCP index, and the tag.
    pub fn rtcp_overhead(self) -> usize {
        SRTCP_TRAILER_LEN + self.tag_len()
    }

    pub(super) fn tag_len(self) -> usize {
        match self {
            Self::Aes128CmHmacSha1_80 => CM_TAG_LEN,
            Self::AeadAes128Gcm | Self::AeadAes256Gcm => GCM_TAG_LEN,
        }
    }
}
