//! Source description and goodbye packets (RFC 3550 §6.5, §6.6).

use super::{PT_BYE, PT_SDES, RtcpError, be32, reserve, write_header};

/// SDES item type of the canonical name.
pub const SDES_CNAME: u8 = 1;

/// A list of 32-bit SSRCs on the wire (BYE sources, REMB feedback SSRCs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SsrcList<'a> {
    raw: &'a [u8],
}

impl<'a> SsrcList<'a> {
    pub(crate) fn new(raw: &'a [u8]) -> SsrcList<'a> {
        SsrcList { raw }
    }

    /// Number of SSRCs.
    pub fn len(&self) -> usize {
        self.raw.len() / 4
    }

    /// True when the list is empty.
    pub fn is_empty(&self) -> bool {
        self.raw.len() < 4
    }

    /// The SSRCs in order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = u32> + 'a {
        self.raw
            .chunks_exact(4)
            .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]))
    }
}

/// A goodbye packet (PT 203).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bye<'a> {
    /// Sources leaving.
    pub ssrcs: SsrcList<'a>,
    /// Optional reason text (not validated as UTF-8).
    pub reason: Option<&'a [u8]>,
}

impl<'a> Bye<'a> {
    pub(crate) fn parse(count: u8, body: &'a [u8]) -> Result<Bye<'a>, RtcpError> {
        let n = 4 * usize::from(count);
        let (Some(raw), Some(rest)) = (body.get(..n), body.get(n..)) else {
            return Err(RtcpError::Malformed {
                pt: PT_BYE,
                what: "SSRC list exceeds the packet",
            });
        };
        let reason = match rest.split_first() {
            None => None,
            Some((&len, text)) => {
                Some(text.get(..usize::from(len)).ok_or(RtcpError::Malformed {
                    pt: PT_BYE,
                    what: "reason exceeds the packet",
                })?)
            }
        };
        Ok(Bye {
            ssrcs: SsrcList { raw },
            reason,
        })
    }
}

/// A source description packet (PT 202); chunks are validated on parse and decoded on access.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sdes<'a> {
    count: u8,
    body: &'a [u8],
}

/// One SDES item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SdesItem<'a> {
    /// SSRC/CSRC of the chunk the item belongs to.
    pub ssrc: u32,
    /// Item type ([`SDES_CNAME`] = 1, ...).
    pub kind: u8,
    /// Item text (not validated as UTF-8).
    pub value: &'a [u8],
}

impl<'a> Sdes<'a> {
    pub(crate) fn parse(count: u8, body: &'a [u8]) -> Result<Sdes<'a>, RtcpError> {
        let mut items = SdesItems {
            body,
            pos: 0,
            chunks_left: count,
            ssrc: None,
        };
        let _ = items.by_ref().count();
        if items.chunks_left > 0 {
            return Err(RtcpError::Malformed {
                pt: PT_SDES,
                what: "SDES chunk exceeds the packet",
            });
        }
        Ok(Sdes { count, body })
    }

    /// Number of chunks (the SC field).
    pub fn chunk_count(&self) -> u8 {
        self.count
    }

    /// The packet body (chunks), for forwarding.
    pub fn raw(&self) -> &'a [u8] {
        self.body
    }

    /// All items of all chunks in order.
    pub fn items(&self) -> SdesItems<'a> {
        SdesItems {
            body: self.body,
            pos: 0,
            chunks_left: self.count,
            ssrc: None,
        }
    }

    /// The first CNAME item, as `(ssrc, cname)`.
    pub fn cname(&self) -> Option<(u32, &'a [u8])> {
        self.items()
            .find(|i| i.kind == SDES_CNAME)
            .map(|i| (i.ssrc, i.value))
    }
}

/// Iterator over SDES items; stops at the first malformed chunk.
#[derive(Debug, Clone)]
pub struct SdesItems<'a> {
    body: &'a [u8],
    pos: usize,
    chunks_left: u8,
    /// SSRC of the chunk being read, `None` between chunks.
    ssrc: Option<u32>,
}

impl<'a> Iterator for SdesItems<'a> {
    type Item = SdesItem<'a>;

    fn next(&mut self) -> Option<SdesItem<'a>> {
        loop {
            let Some(ssrc) = self.ssrc else {
                if self.chunks_left == 0 || self.pos + 4 > self.body.len() {
                    return None;
                }
                self.ssrc = Some(be32(self.body, self.pos));
                self.pos += 4;
                continue;
            };
            let Some(&kind) = self.body.get(self.pos) else {
                self.body = &[];
                return None;
            };
            if kind == 0 {
                // End of the item list; null octets pad the chunk to a 32-bit boundary.
                self.pos = ((self.pos + 1).div_ceil(4) * 4).min(self.body.len());
                self.chunks_left -= 1;
                self.ssrc = None;
                continue;
            }
            let value = self
                .body
                .get(self.pos + 1)
                .and_then(|&len| self.body.get(self.pos + 2..self.pos + 2 + usize::from(len)));
            let Some(value) = value else {
                self.body = &[];
                return None;
            };
            self.pos += 2 + value.len();
            return Some(SdesItem { ssrc, kind, value });
        }
    }
}

/// Writes an SDES packet with one chunk holding one CNAME item; returns its length.
pub fn write_sdes_cname(buf: &mut [u8], ssrc: u32, cname: &str) -> Result<usize, RtcpError> {
    let name = cname.as_bytes();
    let name_len = u8::try_from(name.len())
        .map_err(|_| RtcpError::InvalidInput("CNAME longer than 255 bytes"))?;
    // SSRC, type, length, text, then at least one null octet up to a 32-bit boundary.
    let chunk_len = (4 + 2 + name.len() + 1).div_ceil(4) * 4;
    let len = 4 + chunk_len;
    let out = reserve(buf, len)?;
    out.fill(0);
    write_header(out, 1, PT_SDES, len);
    out[4..8].copy_from_slice(&ssrc.to_be_bytes());
    out[8] = SDES_CNAME;
    out[9] = name_len;
    out[10..10 + name.len()].copy_from_slice(name);
    Ok(len)
}

/// Writes a BYE for up to 31 sources, without a reason; returns its length.
pub fn write_bye(buf: &mut [u8], ssrcs: &[u32]) -> Result<usize, RtcpError> {
    let count = u8::try_from(ssrcs.len())
        .ok()
        .filter(|&n| n <= 31)
        .ok_or(RtcpError::InvalidInput("more than 31 BYE sources"))?;
    let len = 4 + 4 * ssrcs.len();
    let out = reserve(buf, len)?;
    write_header(out, count, PT_BYE, len);
    for (chunk, ssrc) in out[4..].chunks_exact_mut(4).zip(ssrcs) {
        chunk.copy_from_slice(&ssrc.to_be_bytes());
    }
    Ok(len)
}
