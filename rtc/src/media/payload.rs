//! What an RTP payload of ours says about its place in a frame (RFC 7741 VP8 descriptors,
//! RFC 6184 single NAL unit packets, STAP-A and FU-A), and undoing the H.264 packetization.

use crate::codec::{Codec, vp8_descriptor};

use super::nal::{self, AUD, FU_A, IDR, PPS, SEI, SPS, STAP_A};

/// Start code the assembler writes before every H.264 NAL unit.
pub const START_CODE: [u8; 4] = [0, 0, 0, 1];

/// What a payload says about its packet's place in a frame.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Kind {
    /// The payload did not parse: the packet only holds its place.
    pub(super) bad: bool,
    /// Codec header bytes before the frame data (the VP8 descriptor).
    pub(super) skip: usize,
    /// May be the first packet of a frame.
    pub(super) may_start: bool,
    /// Is the first packet of a frame whatever came before it, so it starts one even when the
    /// packet before it is missing (VP8: S=1 in partition 0; H.264: an AUD or SPS first).
    pub(super) sure_start: bool,
    /// Carries keyframe evidence (VP8: P=0 at the frame start; H.264: an IDR slice).
    pub(super) key: bool,
    /// May be the first packet of a keyframe.
    pub(super) maybe_key: bool,
}

impl Kind {
    /// A payload that did not parse.
    pub(super) const BAD: Kind = Kind {
        bad: true,
        skip: 0,
        may_start: false,
        sure_start: false,
        key: false,
        maybe_key: false,
    };

    /// Reads payload `p` of a `codec` stream.
    pub(super) fn classify(codec: Codec, p: &[u8]) -> Kind {
        match codec {
            Codec::Opus if !p.is_empty() => Kind {
                bad: false,
                skip: 0,
                may_start: true,
                sure_start: true,
                key: true,
                maybe_key: true,
            },
            Codec::Opus => Kind::BAD,
            Codec::Vp8 => Self::vp8(p).unwrap_or(Kind::BAD),
            Codec::H264 => Self::h264(p).unwrap_or(Kind::BAD),
            Codec::Vp9 | Codec::Av1 => Kind::BAD,
        }
    }

    fn vp8(p: &[u8]) -> Option<Kind> {
        let d = vp8_descriptor(p)?;
        let first = *p.get(d.len)?;
        let start = d.start && d.partition == 0;
        let key = start && first & 0x01 == 0;
        Some(Kind {
            bad: false,
            skip: d.len,
            may_start: start,
            sure_start: start,
            key,
            maybe_key: key,
        })
    }

    fn h264(p: &[u8]) -> Option<Kind> {
        let h = *p.first()?;
        if h & 0x80 != 0 {
            return None;
        }
        // The header of the payload's first NAL unit, when the packet starts one.
        let (first, key) = match nal::nal_type(h) {
            1..=23 => (h, nal::nal_type(h) == IDR),
            STAP_A => {
                let mut key = false;
                let mut units = stap_a_units(p);
                let first = units.next()?.ok()?;
                for u in std::iter::once(Ok(first)).chain(units) {
                    key |= nal::nal_type(u.ok()?[0]) == IDR;
                }
                (first[0], key)
            }
            FU_A => {
                let fu = *p.get(1)?;
                let t = nal::nal_type(fu);
                let (s, e) = (fu & 0x80 != 0, fu & 0x40 != 0);
                if (s && e) || !(1..=23).contains(&t) || p.len() < 3 {
                    return None;
                }
                if !s {
                    return Some(Kind {
                        bad: false,
                        skip: 2,
                        ..Kind::BAD
                    });
                }
                ((h & 0xe0) | t, t == IDR)
            }
            _ => return None,
        };
        let t = nal::nal_type(first);
        Some(Kind {
            bad: false,
            skip: 0,
            may_start: true,
            // Only these are sure: an SPS, PPS or SEI may follow an AUD in a lost packet, and a
            // first slice its parameter sets.
            sure_start: matches!(t, AUD | SPS),
            key,
            maybe_key: key || matches!(t, AUD | SPS | PPS | SEI),
        })
    }
}

/// The NAL units of an STAP-A payload; an error for a malformed one.
fn stap_a_units(p: &[u8]) -> impl Iterator<Item = Result<&[u8], ()>> {
    let mut i = 1;
    let mut failed = false;
    std::iter::from_fn(move || {
        if failed || i >= p.len() {
            return None;
        }
        let unit = p
            .get(i..i + 2)
            .map(|s| usize::from(u16::from_be_bytes([s[0], s[1]])))
            .filter(|n| *n > 0)
            .and_then(|n| p.get(i + 2..i + 2 + n))
            .filter(|u| u[0] & 0x80 == 0 && (1..=23).contains(&nal::nal_type(u[0])));
        match unit {
            Some(u) => {
                i += 2 + u.len();
                Some(Ok(u))
            }
            None => {
                failed = true;
                Some(Err(()))
            }
        }
    })
}

/// Undoes STAP-A and FU-A: writes the NAL units of `payloads` behind start codes.
pub(super) fn h264_access_unit<'a>(
    payloads: impl Iterator<Item = &'a [u8]>,
    out: &mut Vec<u8>,
) -> Option<()> {
    // The type of the unit an FU-A is rebuilding.
    let mut open: Option<u8> = None;
    for p in payloads {
        let h = *p.first()?;
        match nal::nal_type(h) {
            1..=23 if open.is_none() => {
                out.extend_from_slice(&START_CODE);
                out.extend_from_slice(p);
            }
            STAP_A if open.is_none() => {
                for u in stap_a_units(p) {
                    out.extend_from_slice(&START_CODE);
                    out.extend_from_slice(u.ok()?);
                }
            }
            FU_A => {
                let fu = *p.get(1)?;
                let t = nal::nal_type(fu);
                match (fu & 0x80 != 0, open) {
                    (true, None) => {
                        out.extend_from_slice(&START_CODE);
                        out.push((h & 0xe0) | t);
                    }
                    (false, Some(o)) if o == t => {}
                    _ => return None,
                }
                out.extend_from_slice(p.get(2..)?);
                open = (fu & 0x40 == 0).then_some(t);
            }
            _ => return None,
        }
    }
    open.is_none().then_some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn starts(codec: Codec, p: &[u8]) -> (bool, bool, bool, bool) {
        let k = Kind::classify(codec, p);
        (k.bad, k.may_start, k.sure_start, k.key)
    }

    #[test]
    fn payloads_are_classified_by_their_headers() {
        // VP8: start of partition 0 with P=0 is a keyframe start; a descriptor alone is bad.
        assert_eq!(
            starts(Codec::Vp8, &[0x90, 0x80, 0x81, 0x23, 0x10]),
            (false, true, true, true)
        );
        assert_eq!(
            starts(Codec::Vp8, &[0x80, 0x80, 0x81, 0x23, 0x10]),
            (false, false, false, false)
        );
        assert_eq!(
            starts(Codec::Vp8, &[0x91, 0x80, 0x81, 0x23, 0x10]),
            (false, false, false, false)
        );
        assert!(Kind::classify(Codec::Vp8, &[0x90, 0x80, 0x81, 0x23]).bad);
        // H.264: SPS first is a sure start, a slice only a possible one; an IDR anywhere is key.
        assert_eq!(
            starts(Codec::H264, &[0x67, 0x42]),
            (false, true, true, false)
        );
        assert_eq!(
            starts(Codec::H264, &[0x41, 0x9a]),
            (false, true, false, false)
        );
        assert_eq!(
            starts(Codec::H264, &[0x78, 0, 2, 0x06, 1, 0, 2, 0x65, 0x88]),
            (false, true, false, true)
        );
        assert_eq!(
            starts(Codec::H264, &[0x7c, 0x85, 0x88]),
            (false, true, false, true)
        );
        assert_eq!(
            starts(Codec::H264, &[0x7c, 0x05, 0x88]),
            (false, false, false, false)
        );
        for bad in [
            &[][..],
            &[0xe7, 0x42],          // forbidden_zero_bit
            &[0x79, 0, 1, 0x41],    // STAP-B
            &[0x78, 0, 3, 0x41, 1], // STAP-A unit runs past the end
            &[0x78, 0, 0],          // empty STAP-A unit
            &[0x78, 0, 1, 0x7c],    // an FU-A inside an STAP-A
            &[0x78],                // no units
            &[0x7c, 0xc5, 0x88],    // FU-A both start and end
            &[0x7c, 0x85],          // FU-A without data
            &[0x7c, 0x9c, 1],       // FU-A of an FU-A
        ] {
            assert!(Kind::classify(Codec::H264, bad).bad, "{bad:02x?}");
        }
        assert!(Kind::classify(Codec::Opus, &[]).bad);
        assert!(Kind::classify(Codec::Opus, &[0xfc]).sure_start);
    }

    #[test]
    fn access_units_are_rebuilt_with_four_byte_start_codes() {
        let mut out = Vec::new();
        let pkts: [&[u8]; 4] = [
            &[0x78, 0, 2, 0x67, 0x42, 0, 1, 0x68],
            &[0x7c, 0x85, 1, 2],
            &[0x7c, 0x45, 3],
            &[0x41, 0x9a],
        ];
        assert_eq!(h264_access_unit(pkts.into_iter(), &mut out), Some(()));
        assert_eq!(
            out,
            [
                0, 0, 0, 1, 0x67, 0x42, 0, 0, 0, 1, 0x68, 0, 0, 0, 1, 0x65, 1, 2, 3, 0, 0, 0, 1,
                0x41, 0x9a
            ]
        );
        // An FU-A left open, a continuation without a start, one of another type.
        for broken in [
            &[&[0x7c, 0x85, 1][..]][..],
            &[&[0x7c, 0x05, 1][..]][..],
            &[&[0x7c, 0x85, 1][..], &[0x7c, 0x41, 1][..]][..],
            &[&[0x7c, 0x85, 1][..], &[0x41, 0x9a][..]][..],
        ] {
            assert_eq!(
                h264_access_unit(broken.iter().copied(), &mut Vec::new()),
                None
            );
        }
    }
}
