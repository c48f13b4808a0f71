//! H.264 Annex B byte streams (ITU-T H.264 Annex B): splitting at start codes into NAL units and
//! grouping those into access units (one coded picture each), over a byte slice held whole.
//!
//! ```
//! use ferry_rtc::media::annexb;
//! let stream = [0, 0, 0, 1, 0x67, 0x42, 0, 0, 1, 0x68, 0xce, 0, 0, 1, 0x65, 0x88, 0x80,
//!               0, 0, 0, 1, 0x41, 0x9a, 0x01];
//! let aus: Vec<_> = annexb::access_units(&stream).collect();
//! assert_eq!(aus.len(), 2);
//! assert!(aus[0].keyframe && !aus[1].keyframe);
//! assert_eq!(aus[1].data, &[0, 0, 0, 1, 0x41, 0x9a, 0x01]);
//! ```

use super::nal::{self, AUD, IDR};

/// Where one NAL unit lies in a stream.
#[derive(Debug, Clone, Copy)]
struct Span {
    /// First byte of its start code (the zero_byte of a 4-byte one included).
    prefix: usize,
    /// First byte of the NAL header.
    start: usize,
    /// One past its last byte (trailing zero bytes trimmed).
    end: usize,
}

/// Index of the next `00 00 01` at or after `from`.
fn find_start_code(data: &[u8], from: usize) -> Option<usize> {
    let mut i = from;
    while i + 2 < data.len() {
        // The third byte decides how far to skip: anything above 1 cannot be in a start code.
        match data[i + 2] {
            1 if data[i] == 0 && data[i + 1] == 0 => return Some(i),
            0 | 1 => i += 1,
            _ => i += 3,
        }
    }
    None
}

/// The NAL units of an Annex B stream, without their start codes, in stream order. Bytes before
/// the first start code, empty units and trailing zero bytes (`trailing_zero_8bits`, the
/// `zero_byte` of the next 4-byte start code) are left out.
#[derive(Debug, Clone)]
pub struct NalUnits<'a> {
    data: &'a [u8],
    pos: usize,
}

/// Splits an Annex B stream (start codes `00 00 01` and `00 00 00 01`) into NAL units.
pub fn nal_units(stream: &[u8]) -> NalUnits<'_> {
    NalUnits {
        data: stream,
        pos: 0,
    }
}

impl NalUnits<'_> {
    fn next_span(&mut self) -> Option<Span> {
        loop {
            let sc = find_start_code(self.data, self.pos)?;
            let start = sc + 3;
            let next = find_start_code(self.data, start).unwrap_or(self.data.len());
            self.pos = next;
            let mut end = next;
            while end > start && self.data[end - 1] == 0 {
                end -= 1;
            }
            if end > start {
                let prefix = if sc > 0 && self.data[sc - 1] == 0 {
                    sc - 1
                } else {
                    sc
                };
                return Some(Span { prefix, start, end });
            }
        }
    }
}

impl<'a> Iterator for NalUnits<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        let s = self.next_span()?;
        Some(&self.data[s.start..s.end])
    }
}

/// One access unit: the NAL units of one coded picture and what precedes it (AUD, SPS, PPS,
/// SEI), as the stretch of the stream that holds them, start codes included.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AccessUnit<'a> {
    /// The unit's bytes in the stream, from its first start code to the end of its last NAL
    /// unit.
    pub data: &'a [u8],
    /// It contains an IDR slice (NAL type 5).
    pub keyframe: bool,
    /// Number of NAL units in it.
    pub nal_count: usize,
}

impl<'a> AccessUnit<'a> {
    /// Its NAL units, without start codes.
    pub fn nal_units(&self) -> NalUnits<'a> {
        nal_units(self.data)
    }
}

/// Access units of an Annex B stream, in stream order. A new unit starts at an access unit
/// delimiter, at an SPS, PPS or SEI (or types 14–18) that follows a slice, and at a slice with
/// `first_mb_in_slice == 0` that follows a slice (H.264 §7.4.1.2.3, for streams without
/// arbitrary slice order).
#[derive(Debug, Clone)]
pub struct AccessUnits<'a> {
    nals: NalUnits<'a>,
    pending: Option<Span>,
}

/// Groups an Annex B stream's NAL units into access units.
pub fn access_units(stream: &[u8]) -> AccessUnits<'_> {
    AccessUnits {
        nals: nal_units(stream),
        pending: None,
    }
}

impl<'a> Iterator for AccessUnits<'a> {
    type Item = AccessUnit<'a>;

    fn next(&mut self) -> Option<AccessUnit<'a>> {
        let data = self.nals.data;
        let first = self.pending.take().or_else(|| self.nals.next_span())?;
        let t = nal::nal_type(data[first.start]);
        let mut has_vcl = nal::is_vcl(t);
        let mut keyframe = t == IDR;
        let mut end = first.end;
        let mut nal_count = 1;
        while let Some(n) = self.nals.next_span() {
            let unit = &data[n.start..n.end];
            let t = nal::nal_type(unit[0]);
            let new_au = t == AUD
                || (has_vcl && (nal::starts_access_unit_after_vcl(t) || nal::is_first_slice(unit)));
            if new_au {
                self.pending = Some(n);
                break;
            }
            has_vcl |= nal::is_vcl(t);
            keyframe |= t == IDR;
            end = n.end;
            nal_count += 1;
        }
        Some(AccessUnit {
            data: &data[first.prefix..end],
            keyframe,
            nal_count,
        })
    }
}

/// Fuzz target body: splits arbitrary bytes into NAL and access units, checking that the units
/// are non-empty, cover the NALs exactly once and never end in a zero byte.
#[cfg(any(test, feature = "fuzzing"))]
pub fn fuzz_annexb(data: &[u8]) {
    let nals: Vec<&[u8]> = nal_units(data).collect();
    assert!(nals.iter().all(|n| n.last().is_some_and(|b| *b != 0)));
    let mut count = 0;
    for au in access_units(data) {
        assert!(au.nal_count > 0 && !au.data.is_empty());
        let inner: Vec<&[u8]> = au.nal_units().collect();
        assert_eq!(inner.len(), au.nal_count);
        assert_eq!(au.keyframe, inner.iter().any(|n| n[0] & 0x1f == IDR));
        assert_eq!(inner[..], nals[count..count + au.nal_count]);
        count += au.nal_count;
    }
    assert_eq!(count, nals.len());
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const SPS: &[u8] = &[0x67, 0x42, 0xe0, 0x1f, 0x8d];
    const PPS: &[u8] = &[0x68, 0xce, 0x3c, 0x80];
    const SEI: &[u8] = &[0x06, 0x05, 0x01, 0x80];
    const AUD_P: &[u8] = &[0x09, 0xf0];

    /// A slice NAL of `t`: first slice when `first`.
    fn slice(t: u8, first: bool, fill: u8) -> Vec<u8> {
        let mut v = vec![0x60 | t, if first { 0x88 } else { 0x44 }];
        v.extend(std::iter::repeat_n(fill, 20));
        v
    }

    fn stream(units: &[(&[u8], bool)]) -> Vec<u8> {
        let mut out = Vec::new();
        for (u, long) in units {
            if *long {
                out.push(0);
            }
            out.extend_from_slice(&[0, 0, 1]);
            out.extend_from_slice(u);
        }
        out
    }

    #[test]
    fn splits_at_three_and_four_byte_start_codes() {
        let idr = slice(IDR, true, 0xaa);
        let mut s = vec![0xff, 0x00];
        s.extend(stream(&[(SPS, true), (PPS, false), (&idr, true)]));
        // trailing_zero_8bits after the last unit, and an empty unit.
        s.extend_from_slice(&[0, 0, 0, 0, 1, 0, 0, 1]);
        let nals: Vec<&[u8]> = nal_units(&s).collect();
        assert_eq!(nals, vec![SPS, PPS, &idr[..]]);
        assert_eq!(nal_units(&[]).count(), 0);
        assert_eq!(nal_units(&[0, 0, 1]).count(), 0);
        assert_eq!(nal_units(&[1, 2, 3, 4]).count(), 0, "no start code");
    }

    #[test]
    fn groups_parameter_sets_with_the_idr_and_splits_pictures() {
        let idr0 = slice(IDR, true, 1);
        let idr1 = slice(IDR, false, 2);
        let p0 = slice(1, true, 3);
        let p1 = slice(1, false, 4);
        let p2 = slice(1, true, 5);
        let s = stream(&[
            (SPS, true),
            (PPS, true),
            (SEI, true),
            (&idr0, true),
            (&idr1, false),
            (&p0, true),
            (&p1, true),
            (SEI, true),
            (&p2, true),
            (AUD_P, true),
            (&slice(1, true, 6), true),
        ]);
        let aus: Vec<AccessUnit<'_>> = access_units(&s).collect();
        let shape: Vec<(bool, usize)> = aus.iter().map(|a| (a.keyframe, a.nal_count)).collect();
        assert_eq!(
            shape,
            vec![(true, 5), (false, 2), (false, 2), (false, 2)],
            "SPS+PPS+SEI+2 IDR slices; P slices 0 and 1; SEI starts the third; AUD the fourth"
        );
        // The units tile the stream.
        let joined: Vec<u8> = aus.iter().flat_map(|a| a.data.iter().copied()).collect();
        assert_eq!(joined, s);
        let second: Vec<&[u8]> = aus[1].nal_units().collect();
        assert_eq!(second, vec![&p0[..], &p1[..]]);
        assert_eq!(&aus[1].data[..5], &[0, 0, 0, 1, p0[0]]);
    }

    #[test]
    fn aud_always_starts_a_unit_and_leading_non_vcl_stays_together() {
        let s = stream(&[
            (AUD_P, false),
            (SPS, false),
            (AUD_P, false),
            (PPS, false),
            (&slice(1, true, 1), false),
        ]);
        let counts: Vec<usize> = access_units(&s).map(|a| a.nal_count).collect();
        assert_eq!(counts, vec![2, 3]);
        assert_eq!(access_units(&[]).count(), 0);
    }

    proptest! {
        #[test]
        fn arbitrary_streams_split_consistently(data in proptest::collection::vec(
            prop_oneof![Just(0u8), Just(1u8), any::<u8>()], 0..400)) {
            fuzz_annexb(&data);
        }
    }
}
