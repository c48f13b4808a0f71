//! RTP (RFC 3550) header access and in-place rewriting, RFC 8285 header extensions and RFC 4588 RTX.
//!
//! Parsing returns plain fields and byte ranges into the caller's buffer; nothing is copied or
//! allocated. Every function here is total over arbitrary input: malformed packets are errors,
//! never panics.

use std::ops::Range;

/// Largest RTP packet accepted (a UDP payload on an Ethernet-sized path).
pub const MAX_PACKET_LEN: usize = 1500;
/// Length of the fixed RTP header, without CSRCs or extension.
pub const FIXED_HEADER_LEN: usize = 12;
/// RFC 8285 one-byte header extension profile.
pub const ONE_BYTE_PROFILE: u16 = 0xBEDE;
/// RFC 8285 two-byte header extension profile (the low 4 "appbits" are free).
pub const TWO_BYTE_PROFILE: u16 = 0x1000;

/// Maps an RFC 8285 extension id (the index) to a new id; 0 drops the element.
pub type ExtensionIdMap = [u8; 256];

/// Why an RTP packet was rejected or could not be rewritten.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RtpError {
    /// The packet ends before a field it declares.
    #[error("RTP packet too short: {len} bytes, need {needed}")]
    TooShort {
        /// Bytes available.
        len: usize,
        /// Bytes the header requires.
        needed: usize,
    },
    /// The version field is not 2.
    #[error("RTP version {0}, expected 2")]
    BadVersion(u8),
    /// The padding count is zero or larger than the payload.
    #[error("RTP padding count {0} is invalid")]
    BadPadding(u8),
    /// The header extension runs past the end of the packet.
    #[error("RTP header extension runs past the packet end")]
    BadExtension,
    /// The packet is larger than [`MAX_PACKET_LEN`].
    #[error("RTP packet of {0} bytes exceeds {MAX_PACKET_LEN}")]
    TooLarge(usize),
    /// A one-byte extension id would be remapped to an id that form cannot carry (15 or more).
    #[error("extension id {from} maps to {to}, which the one-byte form cannot carry")]
    BadExtensionMap {
        /// Id found in the packet.
        from: u8,
        /// Id the map asked for.
        to: u8,
    },
    /// The caller's buffer cannot hold the result (or `len` exceeds the buffer).
    #[error("buffer too small: need {needed} bytes, have {capacity}")]
    BufferTooSmall {
        /// Bytes required.
        needed: usize,
        /// Bytes available.
        capacity: usize,
    },
    /// An RTX packet without the 2-byte original sequence number.
    #[error("RTX packet has no original sequence number")]
    MissingOsn,
}

/// RFC 5761 demultiplexing: true when `data` looks like RTCP (RTP version bits set and a second byte
/// in 192..=223, the RTCP packet types that cannot collide with RTP payload types plus marker).
pub fn is_rtcp(data: &[u8]) -> bool {
    is_rtp_or_rtcp(data) && data.get(1).is_some_and(|b| (192..=223).contains(b))
}

/// RFC 7983 demultiplexing: true when the first byte is in 128..=191 (RTP or RTCP).
pub fn is_rtp_or_rtcp(data: &[u8]) -> bool {
    data.first().is_some_and(|b| (128..=191).contains(b))
}

/// The two RFC 8285 extension layouts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExtensionForm {
    /// Profile 0xBEDE: 4-bit id, 4-bit length-1, ids 1..=14.
    OneByte,
    /// Profile 0x100X: 8-bit id, 8-bit length, ids 1..=255.
    TwoByte,
}

impl ExtensionForm {
    /// The form a header extension profile denotes, `None` for non-RFC 8285 profiles.
    pub fn from_profile(profile: u16) -> Option<ExtensionForm> {
        if profile == ONE_BYTE_PROFILE {
            Some(ExtensionForm::OneByte)
        } else if profile & 0xFFF0 == TWO_BYTE_PROFILE {
            Some(ExtensionForm::TwoByte)
        } else {
            None
        }
    }
}

/// Location of the header extension block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderExtension {
    /// The 16-bit "defined by profile" field.
    pub profile: u16,
    /// Byte range of the extension data (after the 4-byte profile/length word).
    pub range: Range<usize>,
}

impl HeaderExtension {
    /// RFC 8285 form, if the profile is one.
    pub fn form(&self) -> Option<ExtensionForm> {
        ExtensionForm::from_profile(self.profile)
    }
}

/// A parsed RTP header: plain fields plus byte ranges into the buffer it was parsed from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RtpHeader {
    /// The P bit.
    pub padding: bool,
    /// The M bit.
    pub marker: bool,
    /// 7-bit payload type.
    pub payload_type: u8,
    /// Sequence number.
    pub sequence: u16,
    /// RTP timestamp.
    pub timestamp: u32,
    /// Synchronisation source.
    pub ssrc: u32,
    /// Number of CSRCs (0..=15).
    pub csrc_count: u8,
    /// Header length including CSRCs and the extension block.
    pub header_len: usize,
    /// Payload bytes, excluding padding.
    pub payload_range: Range<usize>,
    /// Number of padding bytes at the end (0 when `padding` is false).
    pub padding_len: u8,
    /// The header extension block, if the X bit is set.
    pub extension: Option<HeaderExtension>,
}

fn be16(buf: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*buf.get(at)?, *buf.get(at + 1)?]))
}

impl RtpHeader {
    /// Parses and validates the header of the RTP packet `buf` (the whole datagram).
    pub fn parse(buf: &[u8]) -> Result<RtpHeader, RtpError> {
        let len = buf.len();
        if len > MAX_PACKET_LEN {
            return Err(RtpError::TooLarge(len));
        }
        let too_short = |needed| RtpError::TooShort { len, needed };
        if len < FIXED_HEADER_LEN {
            return Err(too_short(FIXED_HEADER_LEN));
        }
        let b0 = buf[0];
        let version = b0 >> 6;
        if version != 2 {
            return Err(RtpError::BadVersion(version));
        }
        let csrc_count = b0 & 0x0F;
        let mut header_len = FIXED_HEADER_LEN + 4 * usize::from(csrc_count);
        if len < header_len {
            return Err(too_short(header_len));
        }
        let extension = if b0 & 0x10 != 0 {
            let (Some(profile), Some(words)) = (be16(buf, header_len), be16(buf, header_len + 2))
            else {
                return Err(too_short(header_len + 4));
            };
            let start = header_len + 4;
            let end = start + 4 * usize::from(words);
            if end > len {
                return Err(RtpError::BadExtension);
            }
            header_len = end;
            Some(HeaderExtension {
                profile,
                range: start..end,
            })
        } else {
            None
        };
        let padding = b0 & 0x20 != 0;
        let padding_len = if padding { buf[len - 1] } else { 0 };
        if padding && (padding_len == 0 || header_len + usize::from(padding_len) > len) {
            return Err(RtpError::BadPadding(padding_len));
        }
        Ok(RtpHeader {
            padding,
            marker: buf[1] & 0x80 != 0,
            payload_type: buf[1] & 0x7F,
            sequence: u16::from_be_bytes([buf[2], buf[3]]),
            timestamp: u32::from_be_bytes([buf[4], buf[5], buf[6], buf[7]]),
            ssrc: u32::from_be_bytes([buf[8], buf[9], buf[10], buf[11]]),
            csrc_count,
            header_len,
            payload_range: header_len..len - usize::from(padding_len),
            padding_len,
            extension,
        })
    }

    /// The payload (without padding) of `buf`, the buffer this header was parsed from.
    pub fn payload<'a>(&self, buf: &'a [u8]) -> &'a [u8] {
        buf.get(self.payload_range.clone()).unwrap_or_default()
    }

    /// The CSRC list of `buf`.
    pub fn csrcs<'a>(&self, buf: &'a [u8]) -> impl Iterator<Item = u32> + 'a {
        let end = FIXED_HEADER_LEN + 4 * usize::from(self.csrc_count);
        buf.get(FIXED_HEADER_LEN..end)
            .unwrap_or_default()
            .chunks_exact(4)
            .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]))
    }

    /// RFC 8285 extension elements `(id, data)` of `buf`; empty for other profiles.
    pub fn extensions<'a>(&self, buf: &'a [u8]) -> ExtensionIter<'a> {
        match &self.extension {
            Some(ext) => ExtensionIter {
                data: buf.get(ext.range.clone()).unwrap_or_default(),
                pos: 0,
                form: ext.form(),
            },
            None => ExtensionIter {
                data: &[],
                pos: 0,
                form: None,
            },
        }
    }

    /// The data of the first extension element with `id`.
    pub fn find_extension<'a>(&self, buf: &'a [u8], id: u8) -> Option<&'a [u8]> {
        self.extensions(buf)
            .find(|&(i, _)| i == id)
            .map(|(_, data)| data)
    }
}

/// One extension element's position inside the extension data.
#[derive(Debug, Clone, Copy)]
struct Element {
    id: u8,
    start: usize,
    data: usize,
    end: usize,
}

/// Finds the next element at or after `pos`, skipping padding. `None` at the end, at a truncated
/// element, at the one-byte form's id 15 (RFC 8285 §4.2: stop processing) and at its id 0 with a
/// non-zero length.
fn next_element(data: &[u8], mut pos: usize, form: ExtensionForm) -> Option<Element> {
    loop {
        let b = *data.get(pos)?;
        if b == 0 {
            pos += 1;
            continue;
        }
        let (id, data_start, data_len) = match form {
            // Id 0 with a non-zero length is not padding but garbage; stop as libwebrtc does.
            ExtensionForm::OneByte if b >> 4 == 15 || b >> 4 == 0 => return None,
            ExtensionForm::OneByte => (b >> 4, pos + 1, usize::from(b & 0x0F) + 1),
            ExtensionForm::TwoByte => (b, pos + 2, usize::from(*data.get(pos + 1)?)),
        };
        let end = data_start + data_len;
        if end > data.len() {
            return None;
        }
        return Some(Element {
            id,
            start: pos,
            data: data_start,
            end,
        });
    }
}

/// Iterator over RFC 8285 extension elements as `(id, data)`. Stops at a truncated element.
#[derive(Debug, Clone)]
pub struct ExtensionIter<'a> {
    data: &'a [u8],
    pos: usize,
    form: Option<ExtensionForm>,
}

impl<'a> Iterator for ExtensionIter<'a> {
    type Item = (u8, &'a [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        let Some(e) = self.form.and_then(|f| next_element(self.data, self.pos, f)) else {
            self.form = None;
            return None;
        };
        self.pos = e.end;
        Some((e.id, self.data.get(e.data..e.end)?))
    }
}

/// Rewrites RFC 8285 extension ids in place through `map`; elements mapped to 0 become padding.
///
/// The packet length never changes and nothing is allocated. With the one-byte form, every id in use
/// must map into 0..=14; otherwise the packet is left untouched and an error returned.
pub fn remap_extension_ids(buf: &mut [u8], map: &ExtensionIdMap) -> Result<(), RtpError> {
    let header = RtpHeader::parse(buf)?;
    let Some(ext) = header.extension else {
        return Ok(());
    };
    let Some(form) = ext.form() else {
        return Ok(());
    };
    let range = ext.range;
    if form == ExtensionForm::OneByte {
        let data = buf.get(range.clone()).unwrap_or_default();
        let mut pos = 0;
        while let Some(e) = next_element(data, pos, form) {
            let to = map[usize::from(e.id)];
            if to > 14 {
                return Err(RtpError::BadExtensionMap { from: e.id, to });
            }
            pos = e.end;
        }
    }
    let Some(data) = buf.get_mut(range) else {
        return Ok(());
    };
    let mut pos = 0;
    while let Some(e) = next_element(data, pos, form) {
        let to = map[usize::from(e.id)];
        if to == 0 {
            data[e.start..e.end].fill(0);
        } else if form == ExtensionForm::OneByte {
            data[e.start] = (to << 4) | (data[e.start] & 0x0F);
        } else {
            data[e.start] = to;
        }
        pos = e.end;
    }
    Ok(())
}

/// A validated RTP packet whose fixed-header fields can be rewritten in place.
///
/// The cached [`RtpHeader`] is kept in step with every setter.
#[derive(Debug)]
pub struct RtpPacketMut<'a> {
    buf: &'a mut [u8],
    header: RtpHeader,
}

impl<'a> RtpPacketMut<'a> {
    /// Validates `buf` (exactly the packet) and wraps it.
    pub fn new(buf: &'a mut [u8]) -> Result<RtpPacketMut<'a>, RtpError> {
        let header = RtpHeader::parse(buf)?;
        Ok(RtpPacketMut { buf, header })
    }

    /// The header as currently written.
    pub fn header(&self) -> &RtpHeader {
        &self.header
    }

    /// The whole packet.
    pub fn as_bytes(&self) -> &[u8] {
        self.buf
    }

    /// The payload, excluding padding, for in-place payload rewrites (e.g. VP8 picture ids).
    pub fn payload_mut(&mut self) -> &mut [u8] {
        self.buf
            .get_mut(self.header.payload_range.clone())
            .unwrap_or_default()
    }

    /// Sets the sequence number.
    pub fn set_sequence(&mut self, seq: u16) {
        self.buf[2..4].copy_from_slice(&seq.to_be_bytes());
        self.header.sequence = seq;
    }

    /// Sets the RTP timestamp.
    pub fn set_timestamp(&mut self, ts: u32) {
        self.buf[4..8].copy_from_slice(&ts.to_be_bytes());
        self.header.timestamp = ts;
    }

    /// Sets the SSRC.
    pub fn set_ssrc(&mut self, ssrc: u32) {
        self.buf[8..12].copy_from_slice(&ssrc.to_be_bytes());
        self.header.ssrc = ssrc;
    }

    /// Sets the payload type; only the low 7 bits are used.
    pub fn set_payload_type(&mut self, pt: u8) {
        debug_assert!(pt < 128, "payload type {pt} has more than 7 bits");
        self.buf[1] = (self.buf[1] & 0x80) | (pt & 0x7F);
        self.header.payload_type = pt & 0x7F;
    }

    /// Sets or clears the marker bit.
    pub fn set_marker(&mut self, marker: bool) {
        self.buf[1] = (self.buf[1] & 0x7F) | if marker { 0x80 } else { 0 };
        self.header.marker = marker;
    }

    /// The data of the first extension element with `id`, to rewrite in place (its length
    /// stays).
    pub fn extension_mut(&mut self, id: u8) -> Option<&mut [u8]> {
        let ext = self.header.extension.as_ref()?;
        let form = ext.form()?;
        let range = ext.range.clone();
        let data = self.buf.get_mut(range)?;
        let mut pos = 0;
        loop {
            let e = next_element(data, pos, form)?;
            if e.id == id {
                return data.get_mut(e.data..e.end);
            }
            pos = e.end;
        }
    }

    /// Rewrites extension ids in place; see [`remap_extension_ids`].
    pub fn remap_extension_ids(&mut self, map: &ExtensionIdMap) -> Result<(), RtpError> {
        remap_extension_ids(self.buf, map)
    }
}

/// Parses `buf[..len]`, checking `len` against the buffer first.
fn parse_prefix(buf: &[u8], len: usize) -> Result<RtpHeader, RtpError> {
    let packet = buf.get(..len).ok_or(RtpError::BufferTooSmall {
        needed: len,
        capacity: buf.len(),
    })?;
    RtpHeader::parse(packet)
}

/// Turns the RTP packet in `buf[..len]` into its RFC 4588 RTX form, in place.
///
/// The original sequence number is inserted in front of the payload (the payload moves 2 bytes
/// right, so `buf` needs 2 spare bytes unless the packet had padding), padding is dropped, and the
/// payload type, SSRC and sequence number are replaced. Marker, timestamp, CSRCs and extensions are
/// kept. Returns the new length.
pub fn rtx_wrap(
    buf: &mut [u8],
    len: usize,
    rtx_pt: u8,
    rtx_ssrc: u32,
    rtx_seq: u16,
) -> Result<usize, RtpError> {
    let header = parse_prefix(buf, len)?;
    let Range { start, end } = header.payload_range;
    let new_len = end + 2;
    if new_len > MAX_PACKET_LEN {
        return Err(RtpError::TooLarge(new_len));
    }
    if new_len > buf.len() {
        return Err(RtpError::BufferTooSmall {
            needed: new_len,
            capacity: buf.len(),
        });
    }
    buf.copy_within(start..end, start + 2);
    buf[start..start + 2].copy_from_slice(&header.sequence.to_be_bytes());
    buf[0] &= !0x20;
    let mut pkt = RtpPacketMut::new(&mut buf[..new_len])?;
    pkt.set_payload_type(rtx_pt);
    pkt.set_ssrc(rtx_ssrc);
    pkt.set_sequence(rtx_seq);
    Ok(new_len)
}

/// Restores the original packet from the RFC 4588 RTX packet in `buf[..len]`, in place.
///
/// Reads the original sequence number, moves the payload 2 bytes left, drops padding and sets
/// `original_pt`/`original_ssrc`. Returns the new length.
pub fn rtx_unwrap(
    buf: &mut [u8],
    len: usize,
    original_pt: u8,
    original_ssrc: u32,
) -> Result<usize, RtpError> {
    let header = parse_prefix(buf, len)?;
    let Range { start, end } = header.payload_range;
    if end - start < 2 {
        return Err(RtpError::MissingOsn);
    }
    let osn = u16::from_be_bytes([buf[start], buf[start + 1]]);
    buf.copy_within(start + 2..end, start);
    buf[0] &= !0x20;
    let new_len = end - 2;
    let mut pkt = RtpPacketMut::new(&mut buf[..new_len])?;
    pkt.set_payload_type(original_pt);
    pkt.set_ssrc(original_ssrc);
    pkt.set_sequence(osn);
    Ok(new_len)
}

/// Makes sure the RTP packet `buf` (exactly the packet) carries an RFC 8285 extension element
/// `id` with `len` bytes of data, and returns the offset of that data in `buf`: an element that
/// is there already is kept, one of another length is dropped (it becomes padding) and a new
/// one written in the padding of the extension block if it fits, else the block grows (the
/// payload moves right) — or a block is added to a packet without one. The caller then writes
/// the value (a transport-wide sequence number, at send time).
///
/// The one-byte form carries ids 1..=14 and 1..=16 bytes; an element it cannot carry in a packet
/// that uses it is an error (the packet is left as it was), as is a packet that would grow past
/// [`MAX_PACKET_LEN`].
pub fn ensure_extension(buf: &mut Vec<u8>, id: u8, len: usize) -> Result<usize, RtpError> {
    let header = RtpHeader::parse(buf)?;
    if id == 0 || len == 0 || len > 255 {
        return Err(RtpError::BadExtensionMap { from: id, to: id });
    }
    let one_byte_ok = id <= 14 && len <= 16;
    let Some(ext) = header.extension.clone() else {
        // No block: add one after the CSRCs.
        let form = if one_byte_ok {
            ExtensionForm::OneByte
        } else {
            ExtensionForm::TwoByte
        };
        let element = element_len(form, len);
        let words = element.div_ceil(4);
        let grow = 4 + 4 * words;
        let at = FIXED_HEADER_LEN + 4 * usize::from(header.csrc_count);
        insert_gap(buf, at, grow)?;
        let profile = match form {
            ExtensionForm::OneByte => ONE_BYTE_PROFILE,
            ExtensionForm::TwoByte => TWO_BYTE_PROFILE,
        };
        buf[at..at + 2].copy_from_slice(&profile.to_be_bytes());
        buf[at + 2..at + 4].copy_from_slice(&(words as u16).to_be_bytes());
        buf[at + 4..at + grow].fill(0);
        buf[0] |= 0x10;
        return Ok(at + 4 + write_element_head(&mut buf[at + 4..], form, id, len));
    };
    let Some(form) = ext.form() else {
        return Err(RtpError::BadExtension);
    };
    if form == ExtensionForm::OneByte && !one_byte_ok {
        return Err(RtpError::BadExtensionMap { from: id, to: id });
    }
    let range = ext.range.clone();
    let need = element_len(form, len);
    // Walk the elements: the one we want, else the first gap (padding) it fits in.
    let mut pos = 0;
    let mut last_end = 0;
    let mut gap: Option<usize> = None;
    let data = &mut buf[range.clone()];
    let reached_end = loop {
        let Some(e) = next_element(data, pos, form) else {
            // An element the walk cannot pass (id 15, garbage) ends it: what follows is off
            // limits, and the block's tail is free only if the walk reached it.
            break data[pos..].iter().all(|b| *b == 0);
        };
        if gap.is_none() && e.start - last_end >= need {
            gap = Some(last_end);
        }
        if e.id == id {
            if e.end - e.data == len {
                return Ok(range.start + e.data);
            }
            data[e.start..e.end].fill(0);
            if gap.is_none() && e.end - e.start >= need {
                gap = Some(e.start);
            }
        }
        last_end = e.end;
        pos = e.end;
    };
    let tail_free = if reached_end {
        data.len() - last_end
    } else {
        0
    };
    if gap.is_none() && tail_free >= need {
        gap = Some(last_end);
    }
    if let Some(start) = gap {
        let at = range.start + start;
        return Ok(at + write_element_head(&mut buf[at..], form, id, len));
    }
    if !reached_end {
        return Err(RtpError::BadExtension);
    }
    // Grow the block at its end by whole words.
    let words = (need - tail_free).div_ceil(4);
    let at_end = range.end;
    insert_gap(buf, at_end, 4 * words)?;
    buf[at_end..at_end + 4 * words].fill(0);
    let total_words = (range.len() / 4 + words) as u16;
    let len_at = range.start - 2;
    buf[len_at..len_at + 2].copy_from_slice(&total_words.to_be_bytes());
    let at = at_end - tail_free;
    Ok(at + write_element_head(&mut buf[at..], form, id, len))
}

/// Bytes an element of `len` data bytes takes in `form`.
fn element_len(form: ExtensionForm, len: usize) -> usize {
    match form {
        ExtensionForm::OneByte => 1 + len,
        ExtensionForm::TwoByte => 2 + len,
    }
}

/// Writes an element's id/length bytes at the start of `at`; returns their count (the data
/// follows them).
fn write_element_head(at: &mut [u8], form: ExtensionForm, id: u8, len: usize) -> usize {
    match form {
        ExtensionForm::OneByte => {
            at[0] = (id << 4) | (len as u8 - 1);
            1
        }
        ExtensionForm::TwoByte => {
            at[0] = id;
            at[1] = len as u8;
            2
        }
    }
}

/// Opens `n` bytes at `at` in the packet `buf` (what follows moves right).
fn insert_gap(buf: &mut Vec<u8>, at: usize, n: usize) -> Result<(), RtpError> {
    let new_len = buf.len() + n;
    if new_len > MAX_PACKET_LEN {
        return Err(RtpError::TooLarge(new_len));
    }
    let old = buf.len();
    buf.resize(new_len, 0);
    buf.copy_within(at..old, at + n);
    Ok(())
}

/// Writes a padding-only RTP packet (RFC 3550 §5.1: P set, no payload, the last byte counts the
/// padding) of `padding` bytes (1..=255) after the fixed header into `buf` (replacing its
/// contents). Receivers drop it after counting it: what a sender probes the path with.
pub fn write_padding_packet(
    buf: &mut Vec<u8>,
    pt: u8,
    ssrc: u32,
    seq: u16,
    timestamp: u32,
    padding: u8,
) {
    buf.clear();
    buf.extend_from_slice(&[0xA0, pt & 0x7F]);
    buf.extend_from_slice(&seq.to_be_bytes());
    buf.extend_from_slice(&timestamp.to_be_bytes());
    buf.extend_from_slice(&ssrc.to_be_bytes());
    let padding = padding.max(1);
    buf.resize(FIXED_HEADER_LEN + usize::from(padding), 0);
    if let Some(last) = buf.last_mut() {
        *last = padding;
    }
}

/// Fuzz target body: parses arbitrary bytes and exercises every rewrite on a copy, asserting that
/// what succeeds keeps the packet valid.
pub fn fuzz_rtp(data: &[u8]) {
    let _ = is_rtcp(data);
    let Ok(header) = RtpHeader::parse(data) else {
        return;
    };
    assert!(header.payload_range.end <= data.len());
    for (id, ext) in header.extensions(data) {
        assert!(id != 0 && ext.len() <= 256);
    }
    let _ = header.csrcs(data).count();
    // In-place extension access finds what the iterator finds.
    let mut copy = data.to_vec();
    if let Ok(mut p) = RtpPacketMut::new(&mut copy) {
        for id in [1u8, 5, 14, 20] {
            let want = header.find_extension(data, id).map(<[u8]>::to_vec);
            assert_eq!(p.extension_mut(id).map(|e| e.to_vec()), want);
        }
    }

    let mut buf = [0u8; MAX_PACKET_LEN + 2];
    buf[..data.len()].copy_from_slice(data);
    let mut map = [0u8; 256];
    for (i, m) in map.iter_mut().enumerate() {
        *m = (i as u8).wrapping_mul(7) % 15;
    }
    if remap_extension_ids(&mut buf[..data.len()], &map).is_ok() {
        let after = RtpHeader::parse(&buf[..data.len()]);
        assert_eq!(
            after.map(|h| h.payload_range),
            Ok(header.payload_range.clone())
        );
    }

    let mut grown = data.to_vec();
    if let Ok(at) = ensure_extension(&mut grown, 3, 2) {
        grown[at..at + 2].copy_from_slice(&[0xAB, 0xCD]);
        let after = RtpHeader::parse(&grown);
        let after = after.as_ref().ok();
        assert_eq!(
            after.and_then(|h| h.find_extension(&grown, 3)),
            Some(&[0xAB, 0xCD][..])
        );
        assert_eq!(
            after.map(|h| h.payload(&grown)),
            Some(header.payload(data)),
            "the payload is kept"
        );
    }

    buf[..data.len()].copy_from_slice(data);
    if let Ok(n) = rtx_wrap(&mut buf, data.len(), 97, 0xDEAD_BEEF, 7) {
        let wrapped = RtpHeader::parse(&buf[..n]);
        assert!(wrapped.is_ok_and(|w| w.payload_type == 97 && !w.padding));
        let end = header.payload_range.end;
        assert_eq!(
            rtx_unwrap(&mut buf, n, header.payload_type, header.ssrc),
            Ok(end)
        );
        assert_eq!(buf[0], data[0] & !0x20);
        assert_eq!(buf[1..end], data[1..end]);
    }
}

#[cfg(test)]
mod tests;
