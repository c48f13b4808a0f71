//! RTP/AVPF feedback messages: generic NACK and PLI (RFC 4585), FIR (RFC 5104), REMB
//! (draft-alvestrand-rmcat-remb) and the transport-wide CC envelope.

use std::slice::ChunksExact;

use super::sdes::SsrcList;
use super::{PT_PSFB, PT_RTPFB, RtcpError, RtcpPacket, be32, reserve, write_header};

const FMT_NACK: u8 = 1;
const FMT_TWCC: u8 = 15;
const FMT_PLI: u8 = 1;
const FMT_FIR: u8 = 4;
const FMT_AFB: u8 = 15;
const REMB_ID: &[u8; 4] = b"REMB";
const REMB_MAX_MANTISSA: u64 = 0x3_FFFF;

/// A generic NACK; the lost sequence numbers are expanded from the (PID, BLP) pairs on access.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Nack<'a> {
    /// SSRC of the packet sender.
    pub sender_ssrc: u32,
    /// SSRC of the media source whose packets were lost.
    pub media_ssrc: u32,
    fci: &'a [u8],
}

impl<'a> Nack<'a> {
    /// The raw `(pid, blp)` pairs.
    pub fn pairs(&self) -> NackPairs<'a> {
        NackPairs(self.fci.chunks_exact(4))
    }

    /// Every sequence number reported lost, pair by pair (duplicates possible if pairs overlap).
    pub fn lost(&self) -> NackLost<'a> {
        NackLost {
            pairs: self.pairs(),
            pid: 0,
            blp: 0,
            bit: 17,
        }
    }
}

/// Iterator over a NACK's `(pid, blp)` pairs.
#[derive(Debug, Clone)]
pub struct NackPairs<'a>(ChunksExact<'a, u8>);

impl Iterator for NackPairs<'_> {
    type Item = (u16, u16);

    fn next(&mut self) -> Option<(u16, u16)> {
        let c = self.0.next()?;
        Some((
            u16::from_be_bytes([c[0], c[1]]),
            u16::from_be_bytes([c[2], c[3]]),
        ))
    }
}

/// Iterator over the lost sequence numbers of a NACK.
#[derive(Debug, Clone)]
pub struct NackLost<'a> {
    pairs: NackPairs<'a>,
    pid: u16,
    blp: u16,
    /// Next BLP bit to look at (1..=16); 17 when the next pair must be loaded.
    bit: u8,
}

impl Iterator for NackLost<'_> {
    type Item = u16;

    fn next(&mut self) -> Option<u16> {
        loop {
            if self.bit > 16 {
                (self.pid, self.blp) = self.pairs.next()?;
                self.bit = 1;
                return Some(self.pid);
            }
            let bit = self.bit;
            self.bit += 1;
            if self.blp & (1 << (bit - 1)) != 0 {
                return Some(self.pid.wrapping_add(u16::from(bit)));
            }
        }
    }
}

/// A full intra request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fir<'a> {
    /// SSRC of the packet sender.
    pub sender_ssrc: u32,
    /// Unused by FIR (RFC 5104 §4.3.1.2: SHALL be 0), kept as received.
    pub media_ssrc: u32,
    fci: &'a [u8],
}

impl<'a> Fir<'a> {
    /// The `(media ssrc, command sequence number)` entries.
    pub fn entries(&self) -> FirEntries<'a> {
        FirEntries(self.fci.chunks_exact(8))
    }
}

/// Iterator over FIR entries `(ssrc, seq_nr)`.
#[derive(Debug, Clone)]
pub struct FirEntries<'a>(ChunksExact<'a, u8>);

impl Iterator for FirEntries<'_> {
    type Item = (u32, u8);

    fn next(&mut self) -> Option<(u32, u8)> {
        let c = self.0.next()?;
        Some((be32(c, 0), c[4]))
    }
}

/// A receiver estimated maximum bitrate message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Remb<'a> {
    /// SSRC of the packet sender.
    pub sender_ssrc: u32,
    /// Estimated total bitrate in bits per second.
    pub bitrate_bps: u64,
    /// The media sources the estimate applies to.
    pub ssrcs: SsrcList<'a>,
}

fn malformed(pt: u8, what: &'static str) -> RtcpError {
    RtcpError::Malformed { pt, what }
}

pub(crate) fn parse(pt: u8, fmt: u8, body: &[u8]) -> Result<RtcpPacket<'_>, RtcpError> {
    if body.len() < 8 {
        return Err(malformed(pt, "feedback message shorter than its two SSRCs"));
    }
    let sender_ssrc = be32(body, 0);
    let media_ssrc = be32(body, 4);
    let fci = &body[8..];
    Ok(match (pt, fmt) {
        (PT_RTPFB, FMT_NACK) => {
            if fci.is_empty() || !fci.len().is_multiple_of(4) {
                return Err(malformed(pt, "NACK FCI is not a whole number of pairs"));
            }
            RtcpPacket::Nack(Nack {
                sender_ssrc,
                media_ssrc,
                fci,
            })
        }
        (PT_RTPFB, FMT_TWCC) => RtcpPacket::TransportCc {
            sender_ssrc,
            media_ssrc,
            fci,
        },
        (PT_PSFB, FMT_PLI) => RtcpPacket::Pli {
            sender_ssrc,
            media_ssrc,
        },
        (PT_PSFB, FMT_FIR) => {
            if fci.is_empty() || !fci.len().is_multiple_of(8) {
                return Err(malformed(pt, "FIR FCI is not a whole number of entries"));
            }
            RtcpPacket::Fir(Fir {
                sender_ssrc,
                media_ssrc,
                fci,
            })
        }
        (PT_PSFB, FMT_AFB) if fci.starts_with(REMB_ID) => {
            let (Some(&n), Some(&b5), Some(&b6), Some(&b7)) =
                (fci.get(4), fci.get(5), fci.get(6), fci.get(7))
            else {
                return Err(malformed(pt, "REMB shorter than its bitrate field"));
            };
            let exp = u32::from(b5 >> 2);
            let mantissa = (u64::from(b5 & 0x03) << 16) | (u64::from(b6) << 8) | u64::from(b7);
            let bitrate_bps = mantissa << exp;
            if bitrate_bps >> exp != mantissa {
                return Err(malformed(pt, "REMB bitrate overflows 64 bits"));
            }
            let Some(raw) = fci.get(8..8 + 4 * usize::from(n)) else {
                return Err(malformed(pt, "REMB SSRC list exceeds the packet"));
            };
            RtcpPacket::Remb(Remb {
                sender_ssrc,
                bitrate_bps,
                ssrcs: SsrcList::new(raw),
            })
        }
        _ => RtcpPacket::Unknown { pt, fmt },
    })
}

fn write_ssrcs(out: &mut [u8], sender_ssrc: u32, media_ssrc: u32) {
    out[4..8].copy_from_slice(&sender_ssrc.to_be_bytes());
    out[8..12].copy_from_slice(&media_ssrc.to_be_bytes());
}

/// Position of `seq` in an order that starts half the sequence space before `reference`, so that
/// sequence numbers wrapping past 65535 sort after those just below it.
fn order_key(seq: u16, reference: u16) -> u32 {
    u32::from(seq.wrapping_sub(reference).wrapping_add(0x8000))
}

/// Calls `emit` with the `(pid, blp)` pairs covering `lost`, in wrap-aware ascending order.
fn nack_pairs(lost: &[u16], mut emit: impl FnMut(u16, u16)) {
    let Some(&reference) = lost.first() else {
        return;
    };
    // Keys at or below `covered` are already in an emitted pair. Each round picks the smallest
    // uncovered key as PID and sets BLP bits for the 16 keys after it: O(n × pairs), no allocation.
    let mut covered: Option<u32> = None;
    loop {
        let pid = lost
            .iter()
            .map(|&s| (order_key(s, reference), s))
            .filter(|&(k, _)| covered.is_none_or(|c| k > c))
            .min_by_key(|&(k, _)| k);
        let Some((pid_key, pid)) = pid else {
            return;
        };
        let mut blp = 0u16;
        for &s in lost {
            let k = order_key(s, reference);
            if k > pid_key && k <= pid_key + 16 {
                blp |= 1 << (k - pid_key - 1);
            }
        }
        emit(pid, blp);
        covered = Some(pid_key + 16);
    }
}

/// Writes a generic NACK for `lost` (any order, duplicates and wrap-around allowed); returns its length.
pub fn write_nack(
    buf: &mut [u8],
    sender_ssrc: u32,
    media_ssrc: u32,
    lost: &[u16],
) -> Result<usize, RtcpError> {
    if lost.is_empty() {
        return Err(RtcpError::InvalidInput("NACK without lost packets"));
    }
    let mut pairs = 0;
    nack_pairs(lost, |_, _| pairs += 1);
    let len = 12 + 4 * pairs;
    let out = reserve(buf, len)?;
    write_header(out, FMT_NACK, PT_RTPFB, len);
    write_ssrcs(out, sender_ssrc, media_ssrc);
    let mut at = 12;
    nack_pairs(lost, |pid, blp| {
        out[at..at + 2].copy_from_slice(&pid.to_be_bytes());
        out[at + 2..at + 4].copy_from_slice(&blp.to_be_bytes());
        at += 4;
    });
    Ok(len)
}

/// Writes a picture loss indication; returns its length (12).
pub fn write_pli(buf: &mut [u8], sender_ssrc: u32, media_ssrc: u32) -> Result<usize, RtcpError> {
    let out = reserve(buf, 12)?;
    write_header(out, FMT_PLI, PT_PSFB, 12);
    write_ssrcs(out, sender_ssrc, media_ssrc);
    Ok(12)
}

/// Writes a FIR with one entry per `(media ssrc, command sequence number)`; returns its length.
pub fn write_fir(
    buf: &mut [u8],
    sender_ssrc: u32,
    entries: &[(u32, u8)],
) -> Result<usize, RtcpError> {
    if entries.is_empty() {
        return Err(RtcpError::InvalidInput("FIR without entries"));
    }
    let len = 12 + 8 * entries.len();
    let out = reserve(buf, len)?;
    write_header(out, FMT_FIR, PT_PSFB, len);
    write_ssrcs(out, sender_ssrc, 0);
    for (chunk, &(ssrc, seq)) in out[12..].chunks_exact_mut(8).zip(entries) {
        chunk.copy_from_slice(&[0; 8]);
        chunk[..4].copy_from_slice(&ssrc.to_be_bytes());
        chunk[4] = seq;
    }
    Ok(len)
}

/// Splits `bitrate_bps` into the 6-bit exponent and 18-bit mantissa of REMB, rounding down so the
/// advertised rate never exceeds the estimate.
pub(crate) fn remb_exp_mantissa(bitrate_bps: u64) -> (u8, u32) {
    let mut mantissa = bitrate_bps;
    let mut exp = 0u8;
    while mantissa > REMB_MAX_MANTISSA {
        mantissa >>= 1;
        exp += 1;
    }
    (exp, mantissa as u32)
}

/// Writes a REMB for up to 255 media SSRCs; returns its length.
pub fn write_remb(
    buf: &mut [u8],
    sender_ssrc: u32,
    bitrate_bps: u64,
    ssrcs: &[u32],
) -> Result<usize, RtcpError> {
    let n = u8::try_from(ssrcs.len())
        .map_err(|_| RtcpError::InvalidInput("more than 255 REMB SSRCs"))?;
    let len = 20 + 4 * ssrcs.len();
    let out = reserve(buf, len)?;
    write_header(out, FMT_AFB, PT_PSFB, len);
    write_ssrcs(out, sender_ssrc, 0);
    out[12..16].copy_from_slice(REMB_ID);
    let (exp, mantissa) = remb_exp_mantissa(bitrate_bps);
    out[16..20]
        .copy_from_slice(&((u32::from(n) << 24) | (u32::from(exp) << 18) | mantissa).to_be_bytes());
    for (chunk, ssrc) in out[20..].chunks_exact_mut(4).zip(ssrcs) {
        chunk.copy_from_slice(&ssrc.to_be_bytes());
    }
    Ok(len)
}
