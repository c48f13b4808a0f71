//! Real encoded frames into RTP payloads: VP8 (RFC 7741), H.264 packetization-mode 1 (RFC 6184:
//! single NAL unit packets, STAP-A, FU-A) and Opus (RFC 7587: one packet per frame). The caller
//! writes the RTP headers and sets the marker on the last payload of a frame.

use crate::codec::Codec;

use super::annexb;
use super::nal::{self, FU_A, STAP_A};

/// Bytes of the VP8 payload descriptor we write: X=1; I=1 with a 15-bit picture ID.
pub const VP8_DESCRIPTOR_LEN: usize = 4;
/// Bytes of an FU-A's indicator and header.
const FU_HEADER_LEN: usize = 2;

/// Why a frame could not be packetized.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PacketizeError {
    /// The frame has no bytes.
    #[error("empty frame")]
    EmptyFrame,
    /// The payload budget cannot hold the codec's headers and one byte of data.
    #[error("payload budget of {0} bytes is too small")]
    BudgetTooSmall(usize),
    /// A codec this packetizer does not carry (VP9 and AV1 are forwarded by the node, not
    /// sent by Ferry's own peers).
    #[error("{0} frames cannot be packetized here")]
    UnsupportedCodec(&'static str),
    /// An H.264 access unit without a start code or with only empty NAL units.
    #[error("no NAL unit in the access unit")]
    NoNalUnits,
    /// An H.264 NAL unit with `forbidden_zero_bit` set or of a type RTP reserves (0, 24–31).
    #[error("NAL unit header {0:#04x} cannot be sent")]
    BadNalUnit(u8),
    /// An Opus packet larger than the payload budget (Opus frames are never fragmented).
    #[error("Opus packet of {len} bytes exceeds the payload budget of {max}")]
    TooLarge {
        /// The packet's size.
        len: usize,
        /// The budget.
        max: usize,
    },
}

/// The RTP payloads of one frame, in one buffer that keeps its allocation from frame to frame.
#[derive(Debug, Clone, Default)]
pub struct Payloads {
    buf: Vec<u8>,
    ends: Vec<usize>,
}

impl Payloads {
    /// No payloads.
    pub fn new() -> Self {
        Self::default()
    }

    /// Forgets the payloads, keeping the memory.
    pub fn clear(&mut self) {
        self.buf.clear();
        self.ends.clear();
    }

    /// Number of payloads.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Payload `i`.
    pub fn get(&self, i: usize) -> Option<&[u8]> {
        let end = *self.ends.get(i)?;
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        self.buf.get(start..end)
    }

    /// The payloads in order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = &[u8]> + '_ {
        (0..self.ends.len()).map(|i| {
            let start = if i == 0 { 0 } else { self.ends[i - 1] };
            &self.buf[start..self.ends[i]]
        })
    }

    /// Copies the payloads out, one vector each.
    pub fn to_vecs(&self) -> Vec<Vec<u8>> {
        self.iter().map(<[u8]>::to_vec).collect()
    }

    /// Where the payload being written starts.
    fn open(&self) -> usize {
        self.ends.last().copied().unwrap_or(0)
    }

    fn close(&mut self) {
        self.ends.push(self.buf.len());
    }
}

/// Sizes of `n` parts summing to `total`, as equal as possible.
fn split(total: usize, n: usize) -> impl Iterator<Item = usize> {
    let n = n.max(1);
    (0..n).map(move |i| total / n + usize::from(i < total % n))
}

/// Packetizes one frame of `codec` into `out` (cleared first): a raw VP8 frame with
/// `picture_id` (15 bits), an H.264 Annex B access unit, or an Opus packet. Every payload is at
/// most `max_payload` bytes.
pub fn packetize(
    codec: Codec,
    frame: &[u8],
    picture_id: u16,
    max_payload: usize,
    out: &mut Payloads,
) -> Result<(), PacketizeError> {
    match codec {
        Codec::Vp8 => packetize_vp8(frame, picture_id, max_payload, out),
        Codec::H264 => packetize_h264(frame, max_payload, out),
        Codec::Opus => packetize_opus(frame, max_payload, out),
        Codec::Vp9 | Codec::Av1 => Err(PacketizeError::UnsupportedCodec(codec.encoding_name())),
    }
}

/// A VP8 frame behind RFC 7741 descriptors (X=1, I=1 with the 15-bit `picture_id`, S=1 on the
/// first payload, partition index 0), split into payloads of equal size.
pub fn packetize_vp8(
    frame: &[u8],
    picture_id: u16,
    max_payload: usize,
    out: &mut Payloads,
) -> Result<(), PacketizeError> {
    out.clear();
    if frame.is_empty() {
        return Err(PacketizeError::EmptyFrame);
    }
    let room = max_payload
        .checked_sub(VP8_DESCRIPTOR_LEN)
        .filter(|r| *r > 0)
        .ok_or(PacketizeError::BudgetTooSmall(max_payload))?;
    let pid = picture_id & 0x7fff;
    let mut at = 0;
    for (i, len) in split(frame.len(), frame.len().div_ceil(room)).enumerate() {
        let start = if i == 0 { 0x10 } else { 0 };
        out.buf
            .extend_from_slice(&[0x80 | start, 0x80, 0x80 | (pid >> 8) as u8, pid as u8]);
        out.buf.extend_from_slice(&frame[at..at + len]);
        at += len;
        out.close();
    }
    Ok(())
}

/// An Opus packet as one payload.
pub fn packetize_opus(
    packet: &[u8],
    max_payload: usize,
    out: &mut Payloads,
) -> Result<(), PacketizeError> {
    out.clear();
    if packet.is_empty() {
        return Err(PacketizeError::EmptyFrame);
    }
    if packet.len() > max_payload {
        return Err(PacketizeError::TooLarge {
            len: packet.len(),
            max: max_payload,
        });
    }
    out.buf.extend_from_slice(packet);
    out.close();
    Ok(())
}

/// An H.264 Annex B access unit with start codes stripped: consecutive NAL units that fit
/// together share an STAP-A (SPS and PPS before an IDR, typically), a unit that fits alone goes
/// as a single NAL unit packet, and a unit larger than `max_payload` as FU-A fragments of equal
/// size.
pub fn packetize_h264(
    au: &[u8],
    max_payload: usize,
    out: &mut Payloads,
) -> Result<(), PacketizeError> {
    out.clear();
    if au.is_empty() {
        return Err(PacketizeError::EmptyFrame);
    }
    if max_payload <= FU_HEADER_LEN {
        return Err(PacketizeError::BudgetTooSmall(max_payload));
    }
    // NAL units in the payload being written: 0 none open, 1 a single NAL unit, more an STAP-A.
    let mut open = 0usize;
    for unit in annexb::nal_units(au) {
        let h = unit[0];
        if h & 0x80 != 0 || matches!(nal::nal_type(h), 0 | 24..=31) {
            out.clear();
            return Err(PacketizeError::BadNalUnit(h));
        }
        if unit.len() > max_payload {
            if open > 0 {
                out.close();
                open = 0;
            }
            fu_a(unit, max_payload, out);
            continue;
        }
        if open > 0 {
            let start = out.open();
            let size = out.buf.len() - start;
            // Turning a single NAL unit into an STAP-A costs its header and a length.
            let grow = if open == 1 { 3 } else { 0 } + 2 + unit.len();
            if size + grow <= max_payload {
                if open == 1 {
                    let first = out.buf[start];
                    let len = (size as u16).to_be_bytes();
                    out.buf
                        .splice(start..start, [STAP_A | (first & 0x60), len[0], len[1]]);
                }
                out.buf[start] = STAP_A | (out.buf[start] & 0x60).max(h & 0x60);
                out.buf
                    .extend_from_slice(&(unit.len() as u16).to_be_bytes());
                out.buf.extend_from_slice(unit);
                open += 1;
                continue;
            }
            out.close();
        }
        out.buf.extend_from_slice(unit);
        open = 1;
    }
    if open > 0 {
        out.close();
    }
    if out.is_empty() {
        return Err(PacketizeError::NoNalUnits);
    }
    Ok(())
}

/// Fragments one NAL unit longer than `max_payload` (so at least two fragments).
fn fu_a(unit: &[u8], max_payload: usize, out: &mut Payloads) {
    let h = unit[0];
    let body = &unit[1..];
    let room = max_payload - FU_HEADER_LEN;
    let n = body.len().div_ceil(room).max(2);
    let mut at = 0;
    for (i, len) in split(body.len(), n).enumerate() {
        let se = match i {
            0 => 0x80,
            i if i + 1 == n => 0x40,
            _ => 0,
        };
        out.buf
            .extend_from_slice(&[(h & 0xe0) | FU_A, se | nal::nal_type(h)]);
        out.buf.extend_from_slice(&body[at..at + len]);
        at += len;
        out.close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::vp8_descriptor;

    fn sizes(p: &Payloads) -> Vec<usize> {
        p.iter().map(<[u8]>::len).collect()
    }

    #[test]
    fn vp8_frames_get_descriptors_and_equal_parts() {
        let frame: Vec<u8> = (0..2500u32).map(|i| i as u8).collect();
        let mut p = Payloads::new();
        packetize_vp8(&frame, 0x8123, 1000, &mut p).unwrap();
        assert_eq!(sizes(&p), vec![838, 837, 837]);
        for (i, pl) in p.iter().enumerate() {
            let d = vp8_descriptor(pl).unwrap();
            assert_eq!((d.start, d.partition), (i == 0, 0));
            assert_eq!((d.picture_id, d.len), (Some((0x0123, true)), 4));
        }
        let joined: Vec<u8> = p.iter().flat_map(|pl| pl[4..].to_vec()).collect();
        assert_eq!(joined, frame);
        assert_eq!(p.get(0).unwrap()[..5], [0x90, 0x80, 0x81, 0x23, 0]);
        assert_eq!(p.get(3), None);
        packetize_vp8(&frame[..10], 5, 1000, &mut p).unwrap();
        assert_eq!(
            p.to_vecs(),
            vec![[&[0x90, 0x80, 0x80, 5][..], &frame[..10]].concat()]
        );
        assert_eq!(
            packetize_vp8(&[], 5, 1000, &mut p),
            Err(PacketizeError::EmptyFrame)
        );
        assert_eq!(
            packetize_vp8(&frame, 5, 4, &mut p),
            Err(PacketizeError::BudgetTooSmall(4))
        );
        assert!(p.is_empty());
    }

    fn au(units: &[&[u8]]) -> Vec<u8> {
        units
            .iter()
            .flat_map(|u| [&[0, 0, 0, 1][..], u].concat())
            .collect()
    }

    #[test]
    fn h264_aggregates_small_units_and_fragments_large_ones() {
        let sps = [0x67, 0x42, 0xe0, 0x1f];
        let pps = [0x68, 0xce, 0x3c, 0x80];
        let mut idr = vec![0x65, 0x88];
        idr.extend((0..2000u32).map(|i| (i % 250 + 1) as u8));
        let mut p = Payloads::new();
        packetize_h264(&au(&[&sps, &pps, &idr]), 1000, &mut p).unwrap();
        assert_eq!(
            p.get(0).unwrap(),
            [
                0x78, 0, 4, 0x67, 0x42, 0xe0, 0x1f, 0, 4, 0x68, 0xce, 0x3c, 0x80
            ]
        );
        assert_eq!(sizes(&p)[1..], [669, 669, 669]);
        assert_eq!(p.get(1).unwrap()[..3], [0x7c, 0x85, 0x88]);
        assert_eq!(p.get(2).unwrap()[..2], [0x7c, 0x05]);
        assert_eq!(p.get(3).unwrap()[..2], [0x7c, 0x45]);
        let body: Vec<u8> = p.iter().skip(1).flat_map(|f| f[2..].to_vec()).collect();
        assert_eq!(body, idr[1..]);

        // Small slices alone; SPS + PPS + a small IDR all in one STAP-A; NRI is the largest.
        packetize_h264(&au(&[&[0x41, 0x9a, 1]]), 1000, &mut p).unwrap();
        assert_eq!(p.to_vecs(), vec![vec![0x41, 0x9a, 1]]);
        packetize_h264(&au(&[&[0x06, 5], &sps, &[0x25, 0x88]]), 1000, &mut p).unwrap();
        assert_eq!(
            p.to_vecs(),
            vec![vec![
                0x78, 0, 2, 0x06, 5, 0, 4, 0x67, 0x42, 0xe0, 0x1f, 0, 2, 0x25, 0x88
            ]]
        );
        // What does not fit starts the next payload.
        packetize_h264(&au(&[&sps, &pps, &sps]), 13, &mut p).unwrap();
        assert_eq!(sizes(&p), vec![13, 4]);
        // A unit exactly the budget goes alone, one byte more is fragmented.
        packetize_h264(&au(&[&sps, &[0x41; 12][..]]), 12, &mut p).unwrap();
        assert_eq!(sizes(&p), vec![4, 12]);
        packetize_h264(&au(&[&[0x41; 13][..]]), 12, &mut p).unwrap();
        assert_eq!(sizes(&p), vec![8, 8]);
    }

    #[test]
    fn h264_rejects_what_rtp_cannot_carry() {
        let mut p = Payloads::new();
        for (frame, err) in [
            (vec![], PacketizeError::EmptyFrame),
            (vec![0x65, 0x88], PacketizeError::NoNalUnits),
            (vec![0, 0, 1, 0, 0, 1], PacketizeError::NoNalUnits),
            (au(&[&[0x7c, 0x85]]), PacketizeError::BadNalUnit(0x7c)),
            (au(&[&[0x67], &[0xe5, 1]]), PacketizeError::BadNalUnit(0xe5)),
        ] {
            assert_eq!(packetize_h264(&frame, 1000, &mut p), Err(err), "{frame:?}");
            assert!(p.is_empty());
        }
        assert_eq!(
            packetize_h264(&au(&[&[0x67]]), 2, &mut p),
            Err(PacketizeError::BudgetTooSmall(2))
        );
    }

    #[test]
    fn opus_is_one_payload() {
        let mut p = Payloads::new();
        packetize(Codec::Opus, &[0xfc, 1, 2], 0, 1000, &mut p).unwrap();
        assert_eq!(p.to_vecs(), vec![vec![0xfc, 1, 2]]);
        assert_eq!(
            packetize_opus(&[0; 20], 10, &mut p),
            Err(PacketizeError::TooLarge { len: 20, max: 10 })
        );
        assert_eq!(
            packetize_opus(&[], 10, &mut p),
            Err(PacketizeError::EmptyFrame)
        );
    }
}
