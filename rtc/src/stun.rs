//! The subset of STUN (RFC 8489, formerly RFC 5389) that ICE (RFC 8445) and consent freshness
//! (RFC 7675) need: Binding messages, short-term credentials, FINGERPRINT; and, for the TURN
//! client ([`crate::turn`]), the TURN methods and attributes of RFC 8656 through
//! [`StunMessage::parse_turn`] (ICE's [`StunMessage::parse`] still accepts Binding only, so a
//! TURN message reaching an ICE agent is rejected as before).
//!
//! Parsing is zero-copy ([`StunMessage`] borrows the datagram) and never panics on peer input;
//! writing goes into a caller buffer ([`StunWriter`]) so the response path does not allocate.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use hmac::{Hmac, KeyInit, Mac};
use sha1::Sha1;
use subtle::ConstantTimeEq;

/// Fixed value in every RFC 5389+ header.
pub const MAGIC_COOKIE: u32 = 0x2112_A442;
/// Length of the STUN header.
pub const HEADER_LEN: usize = 20;
/// Largest datagram [`StunMessage::parse`] accepts and the largest message [`StunWriter`] writes;
/// a buffer of this size fits any message built here.
pub const MAX_MESSAGE_LEN: usize = 1500;
const FINGERPRINT_XOR: u32 = 0x5354_554E;
const INTEGRITY_LEN: usize = 20;
const MAX_USERNAME_LEN: usize = 512;
const MAX_TEXT_LEN: usize = 763;

/// Attribute types used here (RFC 8489 §18.3, RFC 8445 §16.1).
pub mod attr {
    pub const MAPPED_ADDRESS: u16 = 0x0001;
    pub const USERNAME: u16 = 0x0006;
    pub const MESSAGE_INTEGRITY: u16 = 0x0008;
    pub const ERROR_CODE: u16 = 0x0009;
    pub const UNKNOWN_ATTRIBUTES: u16 = 0x000A;
    pub const XOR_MAPPED_ADDRESS: u16 = 0x0020;
    pub const PRIORITY: u16 = 0x0024;
    pub const USE_CANDIDATE: u16 = 0x0025;
    pub const SOFTWARE: u16 = 0x8022;
    pub const FINGERPRINT: u16 = 0x8028;
    pub const ICE_CONTROLLED: u16 = 0x8029;
    pub const ICE_CONTROLLING: u16 = 0x802A;
    // TURN (RFC 8656 §18).
    pub const CHANNEL_NUMBER: u16 = 0x000C;
    pub const LIFETIME: u16 = 0x000D;
    pub const XOR_PEER_ADDRESS: u16 = 0x0012;
    pub const DATA: u16 = 0x0013;
    pub const REALM: u16 = 0x0014;
    pub const NONCE: u16 = 0x0015;
    pub const XOR_RELAYED_ADDRESS: u16 = 0x0016;
    pub const REQUESTED_TRANSPORT: u16 = 0x0019;
}

/// Comprehension-required attributes this codec understands (RFC 8489 §14: types below 0x8000
/// that a receiver does not know make a request fail with 420).
const KNOWN_REQUIRED: [u16; 8] = [
    attr::MAPPED_ADDRESS,
    attr::USERNAME,
    attr::MESSAGE_INTEGRITY,
    attr::ERROR_CODE,
    attr::UNKNOWN_ATTRIBUTES,
    attr::XOR_MAPPED_ADDRESS,
    attr::PRIORITY,
    attr::USE_CANDIDATE,
];

/// STUN message class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    Request,
    Indication,
    Success,
    Error,
}

/// STUN method: ICE only uses Binding, the rest are TURN's (RFC 8656 §17).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    Binding,
    Allocate,
    Refresh,
    Send,
    Data,
    CreatePermission,
    ChannelBind,
}

impl Method {
    /// The 12-bit method number.
    pub fn number(self) -> u16 {
        match self {
            Method::Binding => 0x001,
            Method::Allocate => 0x003,
            Method::Refresh => 0x004,
            Method::Send => 0x006,
            Method::Data => 0x007,
            Method::CreatePermission => 0x008,
            Method::ChannelBind => 0x009,
        }
    }

    fn from_number(n: u16) -> Option<Method> {
        Some(match n {
            0x001 => Method::Binding,
            0x003 => Method::Allocate,
            0x004 => Method::Refresh,
            0x006 => Method::Send,
            0x007 => Method::Data,
            0x008 => Method::CreatePermission,
            0x009 => Method::ChannelBind,
            _ => return None,
        })
    }
}

/// Why a datagram could not be parsed or a message could not be written.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum StunError {
    #[error("datagram shorter than a STUN header")]
    TooShort,
    #[error("message of {0} bytes exceeds 1500")]
    TooLarge(usize),
    #[error("not a STUN message (first bits or magic cookie)")]
    NotStun,
    #[error("length field disagrees with the datagram")]
    BadLength,
    #[error("unsupported STUN method {0:#05x}")]
    UnsupportedMethod(u16),
    #[error("malformed or misplaced attribute {0:#06x}")]
    BadAttribute(u16),
    #[error("output buffer too small")]
    BufferTooSmall,
    #[error("attribute value too long")]
    ValueTooLong,
    #[error("error code {0} outside 300..=699")]
    InvalidErrorCode(u16),
    #[error("attribute written after MESSAGE-INTEGRITY or FINGERPRINT")]
    AttributeOrder,
    #[error("integrity key rejected")]
    InvalidKey,
}

/// ERROR-CODE attribute value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ErrorCode<'a> {
    /// 300..=699.
    pub code: u16,
    pub reason: &'a str,
}

/// Cheap demultiplexing test (RFC 7983): first byte 0..=3, magic cookie in place.
pub fn is_stun(data: &[u8]) -> bool {
    data.len() >= HEADER_LEN && data[0] <= 3 && data[4..8] == MAGIC_COOKIE.to_be_bytes()
}

/// A parsed STUN message borrowing the datagram it came from.
#[derive(Debug, Clone, Copy)]
pub struct StunMessage<'a> {
    raw: &'a [u8],
    class: Class,
    method: Method,
    transaction_id: [u8; 12],
    username: Option<&'a str>,
    priority: Option<u32>,
    use_candidate: bool,
    ice_controlling: Option<u64>,
    ice_controlled: Option<u64>,
    xor_mapped_address: Option<SocketAddr>,
    error_code: Option<ErrorCode<'a>>,
    turn: TurnAttributes<'a>,
    /// Offset of the MESSAGE-INTEGRITY attribute header.
    integrity: Option<usize>,
    /// Offset of the FINGERPRINT attribute header.
    fingerprint: Option<usize>,
}

/// The TURN attributes of a message (RFC 8656 §18), read by [`StunMessage::parse_turn`] only.
#[derive(Debug, Clone, Copy, Default)]
struct TurnAttributes<'a> {
    realm: Option<&'a str>,
    nonce: Option<&'a str>,
    lifetime: Option<u32>,
    channel_number: Option<u16>,
    xor_peer_address: Option<SocketAddr>,
    xor_relayed_address: Option<SocketAddr>,
    data: Option<&'a [u8]>,
}

impl<'a> StunMessage<'a> {
    /// Parses and structurally validates a Binding message (ICE). Of repeated attributes the
    /// first counts; attributes after MESSAGE-INTEGRITY other than FINGERPRINT are ignored (RFC
    /// 8489 §14.5); anything after FINGERPRINT is an error; unknown attributes are skipped (see
    /// [`Self::unknown_required`]). Other methods are [`StunError::UnsupportedMethod`].
    pub fn parse(data: &'a [u8]) -> Result<Self, StunError> {
        Self::parse_with(data, false)
    }

    /// [`Self::parse`] for a TURN client: every [`Method`], and the TURN attributes (REALM,
    /// NONCE, LIFETIME, CHANNEL-NUMBER, XOR-PEER-ADDRESS, XOR-RELAYED-ADDRESS, DATA) decoded.
    pub fn parse_turn(data: &'a [u8]) -> Result<Self, StunError> {
        Self::parse_with(data, true)
    }

    fn parse_with(data: &'a [u8], turn: bool) -> Result<Self, StunError> {
        if data.len() > MAX_MESSAGE_LEN {
            return Err(StunError::TooLarge(data.len()));
        }
        if data.len() < HEADER_LEN {
            return Err(StunError::TooShort);
        }
        if !is_stun(data) {
            return Err(StunError::NotStun);
        }
        let body_len = usize::from(be16(data, 2));
        if body_len % 4 != 0 || HEADER_LEN + body_len != data.len() {
            return Err(StunError::BadLength);
        }
        let (class, method) = decode_type(be16(data, 0))?;
        if !turn && method != Method::Binding {
            return Err(StunError::UnsupportedMethod(method.number()));
        }
        let mut transaction_id = [0u8; 12];
        transaction_id.copy_from_slice(&data[8..HEADER_LEN]);
        let mut msg = StunMessage {
            raw: data,
            class,
            method,
            transaction_id,
            username: None,
            priority: None,
            use_candidate: false,
            ice_controlling: None,
            ice_controlled: None,
            xor_mapped_address: None,
            error_code: None,
            turn: TurnAttributes::default(),
            integrity: None,
            fingerprint: None,
        };
        for item in Attributes::new(data) {
            let (offset, ty, value) = item?;
            if msg.fingerprint.is_some() {
                return Err(StunError::BadAttribute(ty));
            }
            let bad = StunError::BadAttribute(ty);
            match ty {
                attr::FINGERPRINT if value.len() == 4 => msg.fingerprint = Some(offset),
                attr::FINGERPRINT => return Err(bad),
                _ if msg.integrity.is_some() => {}
                attr::MESSAGE_INTEGRITY if value.len() == INTEGRITY_LEN => {
                    msg.integrity = Some(offset)
                }
                attr::MESSAGE_INTEGRITY => return Err(bad),
                attr::USERNAME if msg.username.is_none() => {
                    msg.username = Some(std::str::from_utf8(value).map_err(|_| bad)?);
                }
                attr::PRIORITY if msg.priority.is_none() => {
                    msg.priority = Some(u32::from_be_bytes(value.try_into().map_err(|_| bad)?));
                }
                attr::USE_CANDIDATE if value.is_empty() => msg.use_candidate = true,
                attr::USE_CANDIDATE => return Err(bad),
                attr::ICE_CONTROLLING if msg.ice_controlling.is_none() => {
                    msg.ice_controlling =
                        Some(u64::from_be_bytes(value.try_into().map_err(|_| bad)?));
                }
                attr::ICE_CONTROLLED if msg.ice_controlled.is_none() => {
                    msg.ice_controlled =
                        Some(u64::from_be_bytes(value.try_into().map_err(|_| bad)?));
                }
                attr::XOR_MAPPED_ADDRESS if msg.xor_mapped_address.is_none() => {
                    let addr = decode_xor_address(value, &msg.transaction_id).ok_or(bad)?;
                    msg.xor_mapped_address = Some(addr);
                }
                attr::ERROR_CODE if msg.error_code.is_none() => {
                    msg.error_code = Some(decode_error_code(value).ok_or(bad)?);
                }
                _ if turn => msg.turn_attribute(ty, value)?,
                _ => {}
            }
        }
        Ok(msg)
    }

    fn turn_attribute(&mut self, ty: u16, value: &'a [u8]) -> Result<(), StunError> {
        let bad = StunError::BadAttribute(ty);
        let t = &mut self.turn;
        let text = |v: &'a [u8]| match std::str::from_utf8(v) {
            Ok(s) if s.len() <= MAX_TEXT_LEN => Ok(s),
            _ => Err(bad),
        };
        match ty {
            attr::REALM if t.realm.is_none() => t.realm = Some(text(value)?),
            attr::NONCE if t.nonce.is_none() => t.nonce = Some(text(value)?),
            attr::LIFETIME if t.lifetime.is_none() => {
                t.lifetime = Some(u32::from_be_bytes(value.try_into().map_err(|_| bad)?));
            }
            attr::CHANNEL_NUMBER if t.channel_number.is_none() => {
                let v: [u8; 4] = value.try_into().map_err(|_| bad)?;
                t.channel_number = Some(u16::from_be_bytes([v[0], v[1]]));
            }
            attr::XOR_PEER_ADDRESS if t.xor_peer_address.is_none() => {
                let addr = decode_xor_address(value, &self.transaction_id).ok_or(bad)?;
                t.xor_peer_address = Some(addr);
            }
            attr::XOR_RELAYED_ADDRESS if t.xor_relayed_address.is_none() => {
                let addr = decode_xor_address(value, &self.transaction_id).ok_or(bad)?;
                t.xor_relayed_address = Some(addr);
            }
            attr::DATA if t.data.is_none() => t.data = Some(value),
            _ => {}
        }
        Ok(())
    }

    pub fn class(&self) -> Class {
        self.class
    }
    pub fn method(&self) -> Method {
        self.method
    }
    pub fn transaction_id(&self) -> &[u8; 12] {
        &self.transaction_id
    }
    /// The whole datagram.
    pub fn as_bytes(&self) -> &'a [u8] {
        self.raw
    }
    pub fn username(&self) -> Option<&'a str> {
        self.username
    }
    pub fn priority(&self) -> Option<u32> {
        self.priority
    }
    pub fn use_candidate(&self) -> bool {
        self.use_candidate
    }
    /// ICE-CONTROLLING tie-breaker.
    pub fn ice_controlling(&self) -> Option<u64> {
        self.ice_controlling
    }
    /// ICE-CONTROLLED tie-breaker.
    pub fn ice_controlled(&self) -> Option<u64> {
        self.ice_controlled
    }
    pub fn xor_mapped_address(&self) -> Option<SocketAddr> {
        self.xor_mapped_address
    }
    pub fn error_code(&self) -> Option<ErrorCode<'a>> {
        self.error_code
    }
    /// REALM (TURN messages only).
    pub fn realm(&self) -> Option<&'a str> {
        self.turn.realm
    }
    /// NONCE (TURN messages only).
    pub fn nonce(&self) -> Option<&'a str> {
        self.turn.nonce
    }
    /// LIFETIME in seconds (TURN messages only).
    pub fn lifetime(&self) -> Option<u32> {
        self.turn.lifetime
    }
    /// CHANNEL-NUMBER (TURN messages only).
    pub fn channel_number(&self) -> Option<u16> {
        self.turn.channel_number
    }
    /// XOR-PEER-ADDRESS (TURN messages only).
    pub fn xor_peer_address(&self) -> Option<SocketAddr> {
        self.turn.xor_peer_address
    }
    /// XOR-RELAYED-ADDRESS (TURN messages only).
    pub fn xor_relayed_address(&self) -> Option<SocketAddr> {
        self.turn.xor_relayed_address
    }
    /// DATA (TURN messages only), borrowed from the datagram.
    pub fn data(&self) -> Option<&'a [u8]> {
        self.turn.data
    }
    pub fn has_integrity(&self) -> bool {
        self.integrity.is_some()
    }
    pub fn has_fingerprint(&self) -> bool {
        self.fingerprint.is_some()
    }

    /// Comprehension-required attribute types (below 0x8000) before MESSAGE-INTEGRITY that this
    /// codec does not understand; a request carrying any must be answered with 420.
    pub fn unknown_required(&self) -> impl Iterator<Item = u16> + 'a {
        let end = self.integrity.unwrap_or(self.raw.len());
        Attributes::new(self.raw)
            .map_while(Result::ok)
            .take_while(move |(offset, _, _)| *offset < end)
            .map(|(_, ty, _)| ty)
            .filter(|ty| *ty < 0x8000 && !KNOWN_REQUIRED.contains(ty))
    }

    /// Checks MESSAGE-INTEGRITY (HMAC-SHA1 keyed with `key`, the short-term password) in constant
    /// time. False when the attribute is absent.
    pub fn verify_integrity(&self, key: &[u8]) -> bool {
        let Some(offset) = self.integrity else {
            return false;
        };
        let Some(tag) = self.raw.get(offset + 4..offset + 4 + INTEGRITY_LEN) else {
            return false;
        };
        let length = adjusted_length(offset + 4 + INTEGRITY_LEN);
        match hmac_sha1(key, &[&self.raw[..2], &length, &self.raw[4..offset]]) {
            Some(mac) => bool::from(mac.ct_eq(tag)),
            None => false,
        }
    }

    /// Checks FINGERPRINT (CRC-32 of the message before it, XOR 0x5354554e). False when absent.
    pub fn verify_fingerprint(&self) -> bool {
        let Some(offset) = self.fingerprint else {
            return false;
        };
        let Some(value) = self.raw.get(offset + 4..offset + 8) else {
            return false;
        };
        let length = adjusted_length(offset + 8);
        let mut crc = crc32fast::Hasher::new();
        crc.update(&self.raw[..2]);
        crc.update(&length);
        crc.update(&self.raw[4..offset]);
        (crc.finalize() ^ FINGERPRINT_XOR).to_be_bytes() == value
    }
}

/// Iterates `(offset, type, value)` over a message whose header was validated; yields an error
/// for an attribute that runs past the end.
struct Attributes<'a> {
    data: &'a [u8],
    offset: usize,
}

impl<'a> Attributes<'a> {
    fn new(data: &'a [u8]) -> Self {
        Attributes {
            data,
            offset: HEADER_LEN,
        }
    }
}

impl<'a> Iterator for Attributes<'a> {
    type Item = Result<(usize, u16, &'a [u8]), StunError>;

    fn next(&mut self) -> Option<Self::Item> {
        let offset = self.offset;
        let header = self.data.get(offset..offset + 4)?;
        let ty = u16::from_be_bytes([header[0], header[1]]);
        let len = usize::from(u16::from_be_bytes([header[2], header[3]]));
        let next = offset + 4 + padded(len);
        let value = self.data.get(offset + 4..offset + 4 + len);
        match value {
            Some(value) if next <= self.data.len() => {
                self.offset = next;
                Some(Ok((offset, ty, value)))
            }
            _ => {
                self.offset = self.data.len();
                Some(Err(StunError::BadAttribute(ty)))
            }
        }
    }
}

/// Builds one message in a caller buffer. Attributes are appended in call order; the header's
/// length field is kept current, so MESSAGE-INTEGRITY and FINGERPRINT (in that order, last) cover
/// exactly what precedes them. A failed call leaves the message as it was.
#[derive(Debug)]
pub struct StunWriter<'b> {
    buf: &'b mut [u8],
    len: usize,
    padding: u8,
    sealed: bool,
    fingerprinted: bool,
}

impl<'b> StunWriter<'b> {
    pub fn new(
        buf: &'b mut [u8],
        class: Class,
        method: Method,
        transaction_id: &[u8; 12],
    ) -> Result<Self, StunError> {
        let header = buf.get_mut(..HEADER_LEN).ok_or(StunError::BufferTooSmall)?;
        header[..2].copy_from_slice(&encode_type(class, method).to_be_bytes());
        header[2..4].fill(0);
        header[4..8].copy_from_slice(&MAGIC_COOKIE.to_be_bytes());
        header[8..].copy_from_slice(transaction_id);
        Ok(StunWriter {
            buf,
            len: HEADER_LEN,
            padding: 0,
            sealed: false,
            fingerprinted: false,
        })
    }

    /// Byte used to pad attribute values to 4 bytes (0 by default; receivers ignore it).
    pub fn with_padding(mut self, byte: u8) -> Self {
        self.padding = byte;
        self
    }

    /// Appends an attribute header and padding; returns the value area to fill.
    fn attribute(&mut self, ty: u16, len: usize) -> Result<&mut [u8], StunError> {
        if self.fingerprinted || (self.sealed && ty != attr::FINGERPRINT) {
            return Err(StunError::AttributeOrder);
        }
        let wire_len = u16::try_from(len).map_err(|_| StunError::ValueTooLong)?;
        let end = self.len + 4 + padded(len);
        if end > MAX_MESSAGE_LEN {
            return Err(StunError::TooLarge(end));
        }
        let area = self
            .buf
            .get_mut(self.len..end)
            .ok_or(StunError::BufferTooSmall)?;
        area[..2].copy_from_slice(&ty.to_be_bytes());
        area[2..4].copy_from_slice(&wire_len.to_be_bytes());
        area[4 + len..].fill(self.padding);
        let start = self.len + 4;
        self.len = end;
        let body = adjusted_length(end);
        self.buf[2..4].copy_from_slice(&body);
        Ok(&mut self.buf[start..start + len])
    }

    fn text(&mut self, ty: u16, value: &str, max: usize) -> Result<&mut Self, StunError> {
        if value.len() > max {
            return Err(StunError::ValueTooLong);
        }
        self.attribute(ty, value.len())?
            .copy_from_slice(value.as_bytes());
        Ok(self)
    }

    /// Appends any attribute verbatim (extensions, tests).
    pub fn raw_attribute(&mut self, ty: u16, value: &[u8]) -> Result<&mut Self, StunError> {
        self.attribute(ty, value.len())?.copy_from_slice(value);
        Ok(self)
    }

    pub fn username(&mut self, username: &str) -> Result<&mut Self, StunError> {
        self.text(attr::USERNAME, username, MAX_USERNAME_LEN)
    }

    pub fn software(&mut self, software: &str) -> Result<&mut Self, StunError> {
        self.text(attr::SOFTWARE, software, MAX_TEXT_LEN)
    }

    pub fn priority(&mut self, priority: u32) -> Result<&mut Self, StunError> {
        self.attribute(attr::PRIORITY, 4)?
            .copy_from_slice(&priority.to_be_bytes());
        Ok(self)
    }

    pub fn use_candidate(&mut self) -> Result<&mut Self, StunError> {
        self.attribute(attr::USE_CANDIDATE, 0)?;
        Ok(self)
    }

    pub fn ice_controlling(&mut self, tie_breaker: u64) -> Result<&mut Self, StunError> {
        self.attribute(attr::ICE_CONTROLLING, 8)?
            .copy_from_slice(&tie_breaker.to_be_bytes());
        Ok(self)
    }

    pub fn ice_controlled(&mut self, tie_breaker: u64) -> Result<&mut Self, StunError> {
        self.attribute(attr::ICE_CONTROLLED, 8)?
            .copy_from_slice(&tie_breaker.to_be_bytes());
        Ok(self)
    }

    pub fn xor_mapped_address(&mut self, addr: SocketAddr) -> Result<&mut Self, StunError> {
        self.xor_address(attr::XOR_MAPPED_ADDRESS, addr)
    }

    /// XOR-PEER-ADDRESS (TURN).
    pub fn xor_peer_address(&mut self, addr: SocketAddr) -> Result<&mut Self, StunError> {
        self.xor_address(attr::XOR_PEER_ADDRESS, addr)
    }

    /// XOR-RELAYED-ADDRESS (TURN; servers and tests).
    pub fn xor_relayed_address(&mut self, addr: SocketAddr) -> Result<&mut Self, StunError> {
        self.xor_address(attr::XOR_RELAYED_ADDRESS, addr)
    }

    /// REALM (TURN long-term credentials).
    pub fn realm(&mut self, realm: &str) -> Result<&mut Self, StunError> {
        self.text(attr::REALM, realm, MAX_TEXT_LEN)
    }

    /// NONCE (TURN long-term credentials).
    pub fn nonce(&mut self, nonce: &str) -> Result<&mut Self, StunError> {
        self.text(attr::NONCE, nonce, MAX_TEXT_LEN)
    }

    /// LIFETIME in seconds (TURN).
    pub fn lifetime(&mut self, seconds: u32) -> Result<&mut Self, StunError> {
        self.attribute(attr::LIFETIME, 4)?
            .copy_from_slice(&seconds.to_be_bytes());
        Ok(self)
    }

    /// REQUESTED-TRANSPORT with an IP protocol number (17: UDP).
    pub fn requested_transport(&mut self, protocol: u8) -> Result<&mut Self, StunError> {
        self.attribute(attr::REQUESTED_TRANSPORT, 4)?
            .copy_from_slice(&[protocol, 0, 0, 0]);
        Ok(self)
    }

    /// CHANNEL-NUMBER (TURN).
    pub fn channel_number(&mut self, number: u16) -> Result<&mut Self, StunError> {
        let n = number.to_be_bytes();
        self.attribute(attr::CHANNEL_NUMBER, 4)?
            .copy_from_slice(&[n[0], n[1], 0, 0]);
        Ok(self)
    }

    /// DATA (TURN Send and Data indications).
    pub fn data(&mut self, data: &[u8]) -> Result<&mut Self, StunError> {
        self.raw_attribute(attr::DATA, data)
    }

    fn xor_address(&mut self, ty: u16, addr: SocketAddr) -> Result<&mut Self, StunError> {
        let mut mask = [0u8; 16];
        mask[..4].copy_from_slice(&MAGIC_COOKIE.to_be_bytes());
        mask[4..].copy_from_slice(&self.buf[8..HEADER_LEN]);
        let port = (addr.port() ^ (MAGIC_COOKIE >> 16) as u16).to_be_bytes();
        let (family, octets, n): (u8, [u8; 16], usize) = match addr.ip() {
            IpAddr::V4(ip) => {
                let mut o = [0u8; 16];
                o[..4].copy_from_slice(&ip.octets());
                (1, o, 4)
            }
            IpAddr::V6(ip) => (2, ip.octets(), 16),
        };
        let value = self.attribute(ty, 4 + n)?;
        value[..4].copy_from_slice(&[0, family, port[0], port[1]]);
        for (dst, (o, m)) in value[4..].iter_mut().zip(octets.iter().zip(mask.iter())) {
            *dst = o ^ m;
        }
        Ok(self)
    }

    pub fn error_code(&mut self, code: u16, reason: &str) -> Result<&mut Self, StunError> {
        if !(300..=699).contains(&code) {
            return Err(StunError::InvalidErrorCode(code));
        }
        if reason.len() > MAX_TEXT_LEN {
            return Err(StunError::ValueTooLong);
        }
        let value = self.attribute(attr::ERROR_CODE, 4 + reason.len())?;
        value[..4].copy_from_slice(&[0, 0, (code / 100) as u8, (code % 100) as u8]);
        value[4..].copy_from_slice(reason.as_bytes());
        Ok(self)
    }

    pub fn unknown_attributes(&mut self, types: &[u16]) -> Result<&mut Self, StunError> {
        let value = self.attribute(attr::UNKNOWN_ATTRIBUTES, 2 * types.len())?;
        for (dst, ty) in value.chunks_exact_mut(2).zip(types) {
            dst.copy_from_slice(&ty.to_be_bytes());
        }
        Ok(self)
    }

    /// Appends MESSAGE-INTEGRITY keyed with `key`; afterwards only FINGERPRINT may follow.
    pub fn message_integrity(&mut self, key: &[u8]) -> Result<&mut Self, StunError> {
        let start = self.len;
        let saved = [self.buf[2], self.buf[3]];
        self.attribute(attr::MESSAGE_INTEGRITY, INTEGRITY_LEN)?;
        let Some(mac) = hmac_sha1(key, &[&self.buf[..start]]) else {
            // Roll back so a failed call leaves the message unchanged.
            self.len = start;
            self.buf[2..4].copy_from_slice(&saved);
            return Err(StunError::InvalidKey);
        };
        self.buf[start + 4..start + 4 + INTEGRITY_LEN].copy_from_slice(&mac);
        self.sealed = true;
        Ok(self)
    }

    /// Appends FINGERPRINT; nothing may follow.
    pub fn fingerprint(&mut self) -> Result<&mut Self, StunError> {
        let start = self.len;
        self.attribute(attr::FINGERPRINT, 4)?;
        let crc = crc32fast::hash(&self.buf[..start]) ^ FINGERPRINT_XOR;
        self.buf[start + 4..start + 8].copy_from_slice(&crc.to_be_bytes());
        self.fingerprinted = true;
        Ok(self)
    }

    /// Length of the message written so far.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: a message has at least its header.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Finishes the message; returns its length.
    pub fn finish(self) -> usize {
        self.len
    }
}

/// Binding success response: XOR-MAPPED-ADDRESS, MESSAGE-INTEGRITY, FINGERPRINT.
pub fn write_binding_success(
    buf: &mut [u8],
    transaction_id: &[u8; 12],
    mapped: SocketAddr,
    integrity_key: &[u8],
) -> Result<usize, StunError> {
    let mut w = StunWriter::new(buf, Class::Success, Method::Binding, transaction_id)?;
    w.xor_mapped_address(mapped)?
        .message_integrity(integrity_key)?
        .fingerprint()?;
    Ok(w.finish())
}

/// Binding error response: ERROR-CODE, MESSAGE-INTEGRITY when a key is given, FINGERPRINT.
pub fn write_binding_error(
    buf: &mut [u8],
    transaction_id: &[u8; 12],
    code: u16,
    reason: &str,
    integrity_key: Option<&[u8]>,
) -> Result<usize, StunError> {
    let mut w = StunWriter::new(buf, Class::Error, Method::Binding, transaction_id)?;
    w.error_code(code, reason)?;
    if let Some(key) = integrity_key {
        w.message_integrity(key)?;
    }
    w.fingerprint()?;
    Ok(w.finish())
}

/// ICE connectivity check (RFC 8445 §7.2.2): USERNAME, PRIORITY, ICE-CONTROLLING when
/// `controlling_tie_breaker` is given, USE-CANDIDATE, MESSAGE-INTEGRITY, FINGERPRINT.
pub fn write_binding_request(
    buf: &mut [u8],
    transaction_id: &[u8; 12],
    username: &str,
    priority: u32,
    controlling_tie_breaker: Option<u64>,
    use_candidate: bool,
    integrity_key: &[u8],
) -> Result<usize, StunError> {
    let mut w = StunWriter::new(buf, Class::Request, Method::Binding, transaction_id)?;
    w.username(username)?.priority(priority)?;
    if let Some(tie_breaker) = controlling_tie_breaker {
        w.ice_controlling(tie_breaker)?;
    }
    if use_candidate {
        w.use_candidate()?;
    }
    w.message_integrity(integrity_key)?.fingerprint()?;
    Ok(w.finish())
}

/// Fuzz body: parses arbitrary input, exercises every accessor and both checks, and answers a
/// parsed message through the writer, which must produce a parseable response.
#[cfg(any(test, feature = "fuzzing"))]
pub fn fuzz_stun(data: &[u8]) {
    let _ = is_stun(data);
    let Ok(msg) = StunMessage::parse(data) else {
        return;
    };
    let _ = (
        msg.class(),
        msg.method(),
        msg.username(),
        msg.priority(),
        msg.use_candidate(),
    );
    let _ = (
        msg.ice_controlling(),
        msg.ice_controlled(),
        msg.error_code(),
        msg.as_bytes(),
    );
    let _ = msg.unknown_required().count();
    let _ = (msg.verify_integrity(b"fuzz-key"), msg.verify_fingerprint());
    let mapped = msg
        .xor_mapped_address()
        .unwrap_or(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 9));
    let mut out = [0u8; MAX_MESSAGE_LEN];
    let written = write_binding_success(&mut out, msg.transaction_id(), mapped, b"fuzz-key");
    let Ok(n) = written else {
        panic!("writing a success response failed: {written:?}");
    };
    let reply = StunMessage::parse(&out[..n]);
    assert!(
        matches!(reply, Ok(r) if r.xor_mapped_address() == Some(mapped)
        && r.verify_integrity(b"fuzz-key") && r.verify_fingerprint())
    );
}

fn be16(data: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([data[at], data[at + 1]])
}

fn padded(len: usize) -> usize {
    (len + 3) & !3
}

/// Length field value for a message that ends at `end`.
fn adjusted_length(end: usize) -> [u8; 2] {
    // Callers only pass ends within MAX_MESSAGE_LEN, so the cast cannot truncate.
    ((end - HEADER_LEN) as u16).to_be_bytes()
}

fn hmac_sha1(key: &[u8], parts: &[&[u8]]) -> Option<[u8; INTEGRITY_LEN]> {
    let mut mac = <Hmac<Sha1> as KeyInit>::new_from_slice(key).ok()?;
    for part in parts {
        mac.update(part);
    }
    let mut out = [0u8; INTEGRITY_LEN];
    out.copy_from_slice(&mac.finalize().into_bytes());
    Some(out)
}

fn encode_type(class: Class, method: Method) -> u16 {
    let m = method.number();
    let c: u16 = match class {
        Class::Request => 0b00,
        Class::Indication => 0b01,
        Class::Success => 0b10,
        Class::Error => 0b11,
    };
    (m & 0x000F) | ((m & 0x0070) << 1) | ((m & 0x0F80) << 2) | ((c & 1) << 4) | ((c & 2) << 7)
}

fn decode_type(t: u16) -> Result<(Class, Method), StunError> {
    let class = match ((t >> 4) & 1) | ((t >> 7) & 2) {
        0b00 => Class::Request,
        0b01 => Class::Indication,
        0b10 => Class::Success,
        _ => Class::Error,
    };
    let method = (t & 0x000F) | ((t >> 1) & 0x0070) | ((t >> 2) & 0x0F80);
    match Method::from_number(method) {
        Some(m) => Ok((class, m)),
        None => Err(StunError::UnsupportedMethod(method)),
    }
}

fn decode_xor_address(value: &[u8], transaction_id: &[u8; 12]) -> Option<SocketAddr> {
    let cookie = MAGIC_COOKIE.to_be_bytes();
    let port = u16::from_be_bytes([value.get(2).copied()?, value.get(3).copied()?]) ^ 0x2112;
    match (value.get(1), value.len()) {
        (Some(1), 8) => {
            let mut ip = [0u8; 4];
            for (i, b) in ip.iter_mut().enumerate() {
                *b = value[4 + i] ^ cookie[i];
            }
            Some(SocketAddr::new(IpAddr::V4(Ipv4Addr::from(ip)), port))
        }
        (Some(2), 20) => {
            let mut ip = [0u8; 16];
            for (i, b) in ip.iter_mut().enumerate() {
                let mask = if i < 4 {
                    cookie[i]
                } else {
                    transaction_id[i - 4]
                };
                *b = value[4 + i] ^ mask;
            }
            Some(SocketAddr::new(IpAddr::V6(Ipv6Addr::from(ip)), port))
        }
        _ => None,
    }
}

fn decode_error_code(value: &[u8]) -> Option<ErrorCode<'_>> {
    let class = u16::from(value.get(2)? & 0x07);
    let number = u16::from(*value.get(3)?);
    if !(3..=6).contains(&class) || number > 99 {
        return None;
    }
    let reason = std::str::from_utf8(value.get(4..)?).ok()?;
    Some(ErrorCode {
        code: class * 100 + number,
        reason,
    })
}

#[cfg(test)]
mod tests;
