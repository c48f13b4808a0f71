//! H.264 NAL unit headers (ITU-T H.264 §7.3.1) and the RTP payload structure types of RFC 6184
//! §5.2: the few facts the Annex B splitter, the packetizer and the assembler share.

/// Coded slice of a non-IDR picture.
pub const NON_IDR: u8 = 1;
/// Coded slice data partition A (carries a slice header).
pub const PARTITION_A: u8 = 2;
/// Coded slice of an IDR picture.
pub const IDR: u8 = 5;
/// Supplemental enhancement information.
pub const SEI: u8 = 6;
/// Sequence parameter set.
pub const SPS: u8 = 7;
/// Picture parameter set.
pub const PPS: u8 = 8;
/// Access unit delimiter.
pub const AUD: u8 = 9;
/// RTP single-time aggregation packet (RFC 6184 §5.7.1).
pub const STAP_A: u8 = 24;
/// RTP fragmentation unit without decoding order number (RFC 6184 §5.8).
pub const FU_A: u8 = 28;

/// The `nal_unit_type` of a NAL header byte.
pub fn nal_type(header: u8) -> u8 {
    header & 0x1f
}

/// Whether a NAL type carries coded slice data (types 1–5).
pub fn is_vcl(t: u8) -> bool {
    (NON_IDR..=IDR).contains(&t)
}

/// Whether `nal` (header byte included) is a slice whose header starts with
/// `first_mb_in_slice == 0`: the first slice of a picture. The field is the slice header's
/// first ue(v), and a ue(v) is 0 exactly when its first bit is 1.
pub fn is_first_slice(nal: &[u8]) -> bool {
    let Some(&h) = nal.first() else {
        return false;
    };
    matches!(nal_type(h), NON_IDR | PARTITION_A | IDR) && nal.get(1).is_some_and(|b| b & 0x80 != 0)
}

/// Whether a NAL type starts a new access unit when it follows a VCL unit of the current one
/// (H.264 §7.4.1.2.3: AUD, SPS, PPS, SEI and types 14–18).
pub fn starts_access_unit_after_vcl(t: u8) -> bool {
    matches!(t, SEI | SPS | PPS | AUD | 14..=18)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_slice_is_read_from_the_first_bit_of_the_slice_header() {
        assert!(is_first_slice(&[0x65, 0x88, 0x84]));
        assert!(is_first_slice(&[0x41, 0x9a]));
        assert!(!is_first_slice(&[0x41, 0x1a]), "first_mb_in_slice != 0");
        assert!(!is_first_slice(&[0x67, 0x88]), "not a slice");
        assert!(!is_first_slice(&[0x65]));
        assert!(!is_first_slice(&[]));
        assert!(is_vcl(IDR) && is_vcl(NON_IDR) && !is_vcl(SEI) && !is_vcl(0));
        assert!(starts_access_unit_after_vcl(AUD) && !starts_access_unit_after_vcl(IDR));
    }
}
