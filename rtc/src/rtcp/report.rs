//! Sender and receiver reports (RFC 3550 §6.4).

use super::{PT_RR, PT_SR, RtcpError, be32, reserve, write_header};

/// One reception report block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReportBlock {
    /// SSRC of the source this block reports on.
    pub ssrc: u32,
    /// Fraction lost since the previous report, in 1/256.
    pub fraction_lost: u8,
    /// Cumulative packets lost, a 24-bit signed value (clamped when written).
    pub cumulative_lost: i32,
    /// Extended highest sequence number received.
    pub ext_highest_seq: u32,
    /// Interarrival jitter in timestamp units.
    pub jitter: u32,
    /// Middle 32 bits of the NTP timestamp of the last SR received (LSR), 0 if none.
    pub last_sr: u32,
    /// Delay since that SR in 1/65536 s (DLSR).
    pub delay_since_last_sr: u32,
}

impl ReportBlock {
    /// Encoded length.
    pub const LEN: usize = 24;
    const MAX_LOST: i32 = 0x7F_FFFF;
    const MIN_LOST: i32 = -0x80_0000;

    fn parse(b: &[u8]) -> ReportBlock {
        // Shift the 24-bit field to the top so the arithmetic shift back sign-extends it.
        let lost = (be32(b, 4) << 8) as i32 >> 8;
        ReportBlock {
            ssrc: be32(b, 0),
            fraction_lost: b.get(4).copied().unwrap_or(0),
            cumulative_lost: lost,
            ext_highest_seq: be32(b, 8),
            jitter: be32(b, 12),
            last_sr: be32(b, 16),
            delay_since_last_sr: be32(b, 20),
        }
    }

    fn write(&self, out: &mut [u8]) {
        let lost = self.cumulative_lost.clamp(Self::MIN_LOST, Self::MAX_LOST) as u32 & 0x00FF_FFFF;
        let word = (u32::from(self.fraction_lost) << 24) | lost;
        for (i, v) in [
            self.ssrc,
            word,
            self.ext_highest_seq,
            self.jitter,
            self.last_sr,
            self.delay_since_last_sr,
        ]
        .into_iter()
        .enumerate()
        {
            out[4 * i..4 * i + 4].copy_from_slice(&v.to_be_bytes());
        }
    }
}

/// The report blocks of an SR or RR, decoded on access.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReportBlocks<'a> {
    raw: &'a [u8],
}

impl<'a> ReportBlocks<'a> {
    /// Number of blocks.
    pub fn len(&self) -> usize {
        self.raw.len() / ReportBlock::LEN
    }

    /// True when there are no blocks.
    pub fn is_empty(&self) -> bool {
        self.raw.is_empty()
    }

    /// The `i`-th block.
    pub fn get(&self, i: usize) -> Option<ReportBlock> {
        self.raw
            .get(i * ReportBlock::LEN..(i + 1) * ReportBlock::LEN)
            .map(ReportBlock::parse)
    }

    /// All blocks in order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = ReportBlock> + 'a {
        self.raw
            .chunks_exact(ReportBlock::LEN)
            .map(ReportBlock::parse)
    }
}

/// The sender information of an SR.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SenderReportData {
    /// SSRC of the sender.
    pub ssrc: u32,
    /// 64-bit NTP timestamp of the moment `rtp_ts` corresponds to.
    pub ntp: u64,
    /// RTP timestamp corresponding to `ntp`.
    pub rtp_ts: u32,
    /// Packets sent.
    pub packet_count: u32,
    /// Payload octets sent.
    pub octet_count: u32,
}

/// A sender report (PT 200). Profile-specific extensions after the blocks are ignored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SenderReport<'a> {
    /// Sender information.
    pub info: SenderReportData,
    /// Reception report blocks.
    pub blocks: ReportBlocks<'a>,
}

/// A receiver report (PT 201). Profile-specific extensions after the blocks are ignored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReceiverReport<'a> {
    /// SSRC of the packet sender.
    pub ssrc: u32,
    /// Reception report blocks.
    pub blocks: ReportBlocks<'a>,
}

fn blocks(pt: u8, count: u8, body: &[u8], at: usize) -> Result<ReportBlocks<'_>, RtcpError> {
    let end = at + usize::from(count) * ReportBlock::LEN;
    match body.get(at..end) {
        Some(raw) => Ok(ReportBlocks { raw }),
        None => Err(RtcpError::Malformed {
            pt,
            what: "report blocks exceed the packet",
        }),
    }
}

impl<'a> SenderReport<'a> {
    pub(crate) fn parse(count: u8, body: &'a [u8]) -> Result<SenderReport<'a>, RtcpError> {
        if body.len() < 24 {
            return Err(RtcpError::Malformed {
                pt: PT_SR,
                what: "SR shorter than its sender info",
            });
        }
        let info = SenderReportData {
            ssrc: be32(body, 0),
            ntp: (u64::from(be32(body, 4)) << 32) | u64::from(be32(body, 8)),
            rtp_ts: be32(body, 12),
            packet_count: be32(body, 16),
            octet_count: be32(body, 20),
        };
        Ok(SenderReport {
            info,
            blocks: blocks(PT_SR, count, body, 24)?,
        })
    }
}

impl<'a> ReceiverReport<'a> {
    pub(crate) fn parse(count: u8, body: &'a [u8]) -> Result<ReceiverReport<'a>, RtcpError> {
        if body.len() < 4 {
            return Err(RtcpError::Malformed {
                pt: PT_RR,
                what: "RR without SSRC",
            });
        }
        Ok(ReceiverReport {
            ssrc: be32(body, 0),
            blocks: blocks(PT_RR, count, body, 4)?,
        })
    }
}

fn check_blocks(blocks: &[ReportBlock]) -> Result<u8, RtcpError> {
    u8::try_from(blocks.len())
        .ok()
        .filter(|&n| n <= 31)
        .ok_or(RtcpError::InvalidInput("more than 31 report blocks"))
}

fn write_blocks(out: &mut [u8], blocks: &[ReportBlock]) {
    for (chunk, block) in out.chunks_exact_mut(ReportBlock::LEN).zip(blocks) {
        block.write(chunk);
    }
}

/// Writes an SR with up to 31 report blocks; returns its length.
pub fn write_sender_report(
    buf: &mut [u8],
    sr: &SenderReportData,
    blocks: &[ReportBlock],
) -> Result<usize, RtcpError> {
    let count = check_blocks(blocks)?;
    let len = 28 + ReportBlock::LEN * blocks.len();
    let out = reserve(buf, len)?;
    write_header(out, count, PT_SR, len);
    out[4..8].copy_from_slice(&sr.ssrc.to_be_bytes());
    out[8..16].copy_from_slice(&sr.ntp.to_be_bytes());
    out[16..20].copy_from_slice(&sr.rtp_ts.to_be_bytes());
    out[20..24].copy_from_slice(&sr.packet_count.to_be_bytes());
    out[24..28].copy_from_slice(&sr.octet_count.to_be_bytes());
    write_blocks(&mut out[28..], blocks);
    Ok(len)
}

/// Writes an RR with up to 31 report blocks; returns its length.
pub fn write_receiver_report(
    buf: &mut [u8],
    ssrc: u32,
    blocks: &[ReportBlock],
) -> Result<usize, RtcpError> {
    let count = check_blocks(blocks)?;
    let len = 8 + ReportBlock::LEN * blocks.len();
    let out = reserve(buf, len)?;
    write_header(out, count, PT_RR, len);
    out[4..8].copy_from_slice(&ssrc.to_be_bytes());
    write_blocks(&mut out[8..], blocks);
    Ok(len)
}
