//! RTCP (RFC 3550) with RTP/AVPF feedback (RFC 4585), FIR (RFC 5104) and REMB
//! (draft-alvestrand-rmcat-remb).
//!
//! [`RtcpIter`] walks a compound packet and yields borrowed views; it never copies or allocates.
//! Builders (`write_*`) serialise one packet into a caller buffer and return its length, so a
//! compound packet is several writes into consecutive parts of one buffer.
//!
//! ```
//! use ferry_rtc::rtcp::{self, RtcpPacket};
//!
//! let mut buf = [0u8; 64];
//! let mut n = rtcp::write_receiver_report(&mut buf, 0x1111, &[])?;
//! n += rtcp::write_pli(&mut buf[n..], 0x1111, 0x2222)?;
//! let kinds: Vec<_> = rtcp::RtcpIter::new(&buf[..n]).collect();
//! assert!(matches!(kinds[1], Ok(RtcpPacket::Pli { sender_ssrc: 0x1111, media_ssrc: 0x2222 })));
//! # Ok::<(), rtcp::RtcpError>(())
//! ```

mod feedback;
mod ntp;
mod report;
mod sdes;

pub use feedback::{
    Fir, FirEntries, Nack, NackLost, NackPairs, Remb, write_fir, write_nack, write_pli, write_remb,
};
pub use ntp::{
    dlsr_from_duration, duration_from_dlsr, ntp_from_unix, ntp_short, rtt, unix_from_ntp,
};
pub use report::{
    ReceiverReport, ReportBlock, ReportBlocks, SenderReport, SenderReportData,
    write_receiver_report, write_sender_report,
};
pub use sdes::{Bye, SDES_CNAME, Sdes, SdesItem, SdesItems, SsrcList, write_bye, write_sdes_cname};

/// Packet type: sender report.
pub const PT_SR: u8 = 200;
/// Packet type: receiver report.
pub const PT_RR: u8 = 201;
/// Packet type: source description.
pub const PT_SDES: u8 = 202;
/// Packet type: goodbye.
pub const PT_BYE: u8 = 203;
/// Packet type: application-defined.
pub const PT_APP: u8 = 204;
/// Packet type: transport-layer feedback (RFC 4585).
pub const PT_RTPFB: u8 = 205;
/// Packet type: payload-specific feedback (RFC 4585).
pub const PT_PSFB: u8 = 206;

/// Why RTCP input was rejected or a packet could not be written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RtcpError {
    /// Fewer than 4 bytes left where a packet header should start.
    #[error("RTCP header truncated: {0} bytes left")]
    TooShort(usize),
    /// The version field is not 2.
    #[error("RTCP version {0}, expected 2")]
    BadVersion(u8),
    /// The length field points past the end of the datagram.
    #[error("RTCP length {declared} bytes exceeds the {available} bytes left")]
    BadLength {
        /// Bytes the header declares (length field + 1, in bytes).
        declared: usize,
        /// Bytes left in the datagram.
        available: usize,
    },
    /// The padding count is zero or larger than the packet body.
    #[error("RTCP padding count {0} is invalid")]
    BadPadding(u8),
    /// The body does not match the layout its packet type and count require.
    #[error("malformed RTCP packet type {pt}: {what}")]
    Malformed {
        /// Packet type.
        pt: u8,
        /// What is wrong.
        what: &'static str,
    },
    /// The caller's buffer cannot hold the packet.
    #[error("buffer too small: need {needed} bytes, have {capacity}")]
    BufferTooSmall {
        /// Bytes required.
        needed: usize,
        /// Bytes available.
        capacity: usize,
    },
    /// The builder's input does not fit the wire format.
    #[error("cannot encode: {0}")]
    InvalidInput(&'static str),
}

/// One RTCP packet, borrowing from the datagram it was parsed from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RtcpPacket<'a> {
    /// SR (PT 200).
    SenderReport(SenderReport<'a>),
    /// RR (PT 201).
    ReceiverReport(ReceiverReport<'a>),
    /// SDES (PT 202).
    Sdes(Sdes<'a>),
    /// BYE (PT 203).
    Bye(Bye<'a>),
    /// Generic NACK (PT 205, FMT 1).
    Nack(Nack<'a>),
    /// Picture loss indication (PT 206, FMT 1).
    Pli {
        /// SSRC of the packet sender.
        sender_ssrc: u32,
        /// SSRC of the media source that should send a keyframe.
        media_ssrc: u32,
    },
    /// Full intra request (PT 206, FMT 4).
    Fir(Fir<'a>),
    /// Receiver estimated maximum bitrate (PT 206, FMT 15, "REMB").
    Remb(Remb<'a>),
    /// Transport-wide congestion control feedback (PT 205, FMT 15); the body is not decoded.
    TransportCc {
        /// SSRC of the packet sender.
        sender_ssrc: u32,
        /// SSRC of the media source.
        media_ssrc: u32,
        /// The feedback control information, undecoded.
        fci: &'a [u8],
    },
    /// Application-defined (PT 204).
    App {
        /// The 5-bit subtype.
        subtype: u8,
        /// SSRC/CSRC.
        ssrc: u32,
        /// Four ASCII characters.
        name: [u8; 4],
        /// Application data.
        data: &'a [u8],
    },
    /// Any other packet type or feedback message, skipped by its length.
    Unknown {
        /// Packet type.
        pt: u8,
        /// The 5-bit count/FMT field.
        fmt: u8,
    },
}

/// Iterator over the packets of a compound RTCP datagram.
///
/// A malformed packet yields one `Err` and ends the iteration: its length cannot be trusted, so
/// nothing after it can be found.
#[derive(Debug, Clone)]
pub struct RtcpIter<'a> {
    rest: &'a [u8],
}

impl<'a> RtcpIter<'a> {
    /// Iterates the packets of `datagram` (already SRTCP-decrypted).
    pub fn new(datagram: &'a [u8]) -> RtcpIter<'a> {
        RtcpIter { rest: datagram }
    }
}

impl<'a> Iterator for RtcpIter<'a> {
    type Item = Result<RtcpPacket<'a>, RtcpError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        match parse_one(self.rest) {
            Ok((packet, len)) => {
                self.rest = self.rest.get(len..).unwrap_or_default();
                Some(Ok(packet))
            }
            Err(e) => {
                self.rest = &[];
                Some(Err(e))
            }
        }
    }
}

impl std::iter::FusedIterator for RtcpIter<'_> {}

pub(crate) fn be32(buf: &[u8], at: usize) -> u32 {
    match buf.get(at..at + 4) {
        Some(b) => u32::from_be_bytes([b[0], b[1], b[2], b[3]]),
        None => 0,
    }
}

/// Parses the packet at the start of `data`; returns it and its length in bytes.
fn parse_one(data: &[u8]) -> Result<(RtcpPacket<'_>, usize), RtcpError> {
    if data.len() < 4 {
        return Err(RtcpError::TooShort(data.len()));
    }
    let version = data[0] >> 6;
    if version != 2 {
        return Err(RtcpError::BadVersion(version));
    }
    let count = data[0] & 0x1F;
    let pt = data[1];
    let len = (usize::from(u16::from_be_bytes([data[2], data[3]])) + 1) * 4;
    if len > data.len() {
        return Err(RtcpError::BadLength {
            declared: len,
            available: data.len(),
        });
    }
    let mut body = &data[4..len];
    if data[0] & 0x20 != 0 {
        let pad = data[len - 1];
        if pad == 0 || usize::from(pad) > body.len() {
            return Err(RtcpError::BadPadding(pad));
        }
        body = &body[..body.len() - usize::from(pad)];
    }
    let packet = match pt {
        PT_SR => RtcpPacket::SenderReport(SenderReport::parse(count, body)?),
        PT_RR => RtcpPacket::ReceiverReport(ReceiverReport::parse(count, body)?),
        PT_SDES => RtcpPacket::Sdes(Sdes::parse(count, body)?),
        PT_BYE => RtcpPacket::Bye(Bye::parse(count, body)?),
        PT_APP => {
            if body.len() < 8 {
                return Err(RtcpError::Malformed {
                    pt,
                    what: "APP shorter than 8 bytes",
                });
            }
            RtcpPacket::App {
                subtype: count,
                ssrc: be32(body, 0),
                name: [body[4], body[5], body[6], body[7]],
                data: &body[8..],
            }
        }
        PT_RTPFB | PT_PSFB => feedback::parse(pt, count, body)?,
        _ => RtcpPacket::Unknown { pt, fmt: count },
    };
    Ok((packet, len))
}

/// Checks that `buf` can hold `needed` bytes and that the length field can express them.
pub(crate) fn reserve(buf: &mut [u8], needed: usize) -> Result<&mut [u8], RtcpError> {
    if needed > 4 * (usize::from(u16::MAX) + 1) {
        return Err(RtcpError::InvalidInput(
            "packet longer than the 16-bit length field allows",
        ));
    }
    let capacity = buf.len();
    buf.get_mut(..needed)
        .ok_or(RtcpError::BufferTooSmall { needed, capacity })
}

/// Writes the 4-byte common header of a packet of `len` bytes (a multiple of 4) into `out`.
pub(crate) fn write_header(out: &mut [u8], count: u8, pt: u8, len: usize) {
    out[0] = 0x80 | (count & 0x1F);
    out[1] = pt;
    let words = u16::try_from(len / 4 - 1).unwrap_or(u16::MAX);
    out[2..4].copy_from_slice(&words.to_be_bytes());
}

/// Fuzz target body: parses arbitrary bytes, walks every nested iterator, and checks that what
/// re-encodes re-parses to the same value.
pub fn fuzz_rtcp(data: &[u8]) {
    let mut scratch = [0u8; 2048];
    for packet in RtcpIter::new(data) {
        let Ok(packet) = packet else {
            break;
        };
        let written = match packet {
            RtcpPacket::SenderReport(sr) => {
                let (blocks, n) = collect::<ReportBlock, 31>(sr.blocks.iter());
                write_sender_report(&mut scratch, &sr.info, &blocks[..n])
            }
            RtcpPacket::ReceiverReport(rr) => {
                let (blocks, n) = collect::<ReportBlock, 31>(rr.blocks.iter());
                write_receiver_report(&mut scratch, rr.ssrc, &blocks[..n])
            }
            RtcpPacket::Sdes(sdes) => {
                let _ = (sdes.items().count(), sdes.cname());
                continue;
            }
            RtcpPacket::Bye(bye) => {
                let (ssrcs, n) = collect::<u32, 31>(bye.ssrcs.iter());
                write_bye(&mut scratch, &ssrcs[..n])
            }
            RtcpPacket::Nack(nack) => {
                let _ = nack.pairs().count();
                let (lost, n) = collect::<u16, 256>(nack.lost());
                if n == 256 {
                    continue;
                }
                let len = write_nack(&mut scratch, nack.sender_ssrc, nack.media_ssrc, &lost[..n]);
                let again = len
                    .ok()
                    .and_then(|len| RtcpIter::new(&scratch[..len]).next());
                let Some(Ok(RtcpPacket::Nack(again))) = again else {
                    panic!("re-encoded NACK does not parse: {again:?}");
                };
                assert_eq!(seq_set(again.lost()), seq_set(lost[..n].iter().copied()));
                continue;
            }
            RtcpPacket::Pli {
                sender_ssrc,
                media_ssrc,
            } => write_pli(&mut scratch, sender_ssrc, media_ssrc),
            RtcpPacket::Fir(fir) => {
                let (entries, n) = collect::<(u32, u8), 64>(fir.entries());
                if n == 64 {
                    continue;
                }
                // Reserved bytes are not kept, so compare the decoded entries.
                let len = write_fir(&mut scratch, fir.sender_ssrc, &entries[..n]);
                let again = len
                    .ok()
                    .and_then(|len| RtcpIter::new(&scratch[..len]).next());
                let Some(Ok(RtcpPacket::Fir(again))) = again else {
                    panic!("re-encoded FIR does not parse: {again:?}");
                };
                assert!(again.sender_ssrc == fir.sender_ssrc && again.entries().eq(fir.entries()));
                continue;
            }
            RtcpPacket::Remb(remb) => {
                let (ssrcs, n) = collect::<u32, 255>(remb.ssrcs.iter());
                write_remb(
                    &mut scratch,
                    remb.sender_ssrc,
                    remb.bitrate_bps,
                    &ssrcs[..n],
                )
            }
            _ => continue,
        };
        let again = written.map(|len| RtcpIter::new(&scratch[..len]).next());
        assert_eq!(again, Ok(Some(Ok(as_written(packet)))));
    }
}

/// Up to `N` items of `iter` in a stack array, and how many there were (capped at `N`).
fn collect<T: Copy + Default, const N: usize>(iter: impl Iterator<Item = T>) -> ([T; N], usize) {
    let mut out = [T::default(); N];
    let mut n = 0;
    for (slot, item) in out.iter_mut().zip(iter) {
        *slot = item;
        n += 1;
    }
    (out, n)
}

/// The set of sequence numbers in `seqs`, as a bitmap.
fn seq_set(seqs: impl Iterator<Item = u16>) -> [u64; 1024] {
    let mut set = [0u64; 1024];
    for s in seqs {
        set[usize::from(s / 64)] |= 1 << (s % 64);
    }
    set
}

/// `packet` as this crate's builders write it: a BYE without reason.
fn as_written(packet: RtcpPacket<'_>) -> RtcpPacket<'_> {
    match packet {
        RtcpPacket::Bye(bye) => RtcpPacket::Bye(Bye {
            reason: None,
            ..bye
        }),
        other => other,
    }
}

#[cfg(test)]
mod tests;
