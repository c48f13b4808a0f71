//! Typed forms of the attributes WebRTC relies on: their grammar (used by the parser to reject
//! malformed known attributes), their decoding and their writing.

use std::fmt::{self, Write as _};

use super::Attribute;
pub use super::candidate::Candidate;
pub use super::codec::{ExtMap, Fmtp, RtcpFb, RtpMap};
pub use super::streams::{Rid, RidDirection, Simulcast, SimulcastRid, SsrcAttr, SsrcGroup};

pub(crate) type AttrResult<T> = Result<T, &'static str>;

/// Checks a known attribute against its grammar; unknown names pass.
pub(crate) fn check(attr: &Attribute) -> AttrResult<()> {
    let value = attr.value.as_deref();
    let need = || value.ok_or("missing value");
    match attr.name.as_str() {
        "mid" => check_token(need()?, "bad mid"),
        "ice-ufrag" | "ice-pwd" => check_ice_chars(need()?, 1, 256, "bad ICE credential"),
        "ice-options" => match need()?.split_ascii_whitespace().next() {
            Some(_) => Ok(()),
            None => Err("empty ice-options"),
        },
        "fingerprint" => Fingerprint::parse(need()?).map(drop),
        "setup" => Setup::parse(need()?).map(drop),
        "rtpmap" => RtpMap::parse(need()?).map(drop),
        "fmtp" => check_fmtp(need()?),
        "rtcp-fb" => RtcpFb::parse(need()?).map(drop),
        "extmap" => ExtMap::parse(need()?).map(drop),
        "ssrc" => SsrcAttr::parse(need()?).map(drop),
        "ssrc-group" => SsrcGroup::parse(need()?).map(drop),
        "rid" => Rid::parse(need()?).map(drop),
        "simulcast" => Simulcast::parse(need()?).map(drop),
        "msid" => Msid::parse(need()?).map(drop),
        "candidate" => Candidate::parse(need()?).map(drop),
        "group" => Group::parse(need()?).map(drop),
        "rtcp" => match need()?.split_ascii_whitespace().next() {
            Some(port) => parse_digits::<u16>(port, "bad rtcp port").map(drop),
            None => Err("missing rtcp port"),
        },
        "sctp-port" => parse_digits::<u16>(need()?.trim(), "bad sctp-port").map(drop),
        "max-message-size" => parse_digits::<u64>(need()?.trim(), "bad max-message-size").map(drop),
        _ => Ok(()),
    }
}

/// Parses an all-digits number (no sign, no spaces) that fits `T`.
pub(crate) fn parse_digits<T: std::str::FromStr>(s: &str, reason: &'static str) -> AttrResult<T> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(reason);
    }
    s.parse().map_err(|_| reason)
}

/// An RTP payload type, 0..=127.
pub(crate) fn parse_pt(s: &str) -> AttrResult<u8> {
    match parse_digits::<u8>(s, "bad payload type")? {
        pt @ 0..=127 => Ok(pt),
        _ => Err("payload type out of range"),
    }
}

/// RFC 8866 `token` characters.
pub(crate) fn is_token_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`{|}~".contains(c)
}

pub(crate) fn check_token(s: &str, reason: &'static str) -> AttrResult<()> {
    if !s.is_empty() && s.chars().all(is_token_char) {
        Ok(())
    } else {
        Err(reason)
    }
}

pub(crate) fn check_ice_chars(
    s: &str,
    min: usize,
    max: usize,
    reason: &'static str,
) -> AttrResult<()> {
    let ok = (min..=max).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'+' || b == b'/');
    if ok { Ok(()) } else { Err(reason) }
}

fn check_fmtp(value: &str) -> AttrResult<()> {
    let format = value
        .split_ascii_whitespace()
        .next()
        .ok_or("missing format")?;
    check_token(format, "bad format")
}

/// Splits `k=v;k;k=v` into trimmed pairs, skipping empty items.
pub(crate) fn split_params(s: &str) -> Vec<(String, Option<String>)> {
    s.split(';')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (k.trim().to_string(), Some(v.trim().to_string())),
            None => (p.to_string(), None),
        })
        .collect()
}

pub(crate) fn write_params(
    f: &mut fmt::Formatter<'_>,
    params: &[(String, Option<String>)],
) -> fmt::Result {
    for (i, (k, v)) in params.iter().enumerate() {
        if i > 0 {
            f.write_char(';')?;
        }
        f.write_str(k)?;
        if let Some(v) = v {
            write!(f, "={v}")?;
        }
    }
    Ok(())
}

pub(crate) fn lookup<'a>(params: &'a [(String, Option<String>)], key: &str) -> Option<&'a str> {
    params
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(key))
        .and_then(|(_, v)| v.as_deref())
}

/// Implements `From<T>` and `From<&T>` for `Attribute` using the type's `Display` as value.
macro_rules! into_attribute {
    ($($ty:ty => $name:literal),* $(,)?) => {$(
        impl From<&$ty> for Attribute {
            fn from(v: &$ty) -> Self {
                Attribute::new($name, v.to_string())
            }
        }
        impl From<$ty> for Attribute {
            fn from(v: $ty) -> Self {
                Attribute::from(&v)
            }
        }
    )*};
}

into_attribute! {
    Setup => "setup",
    Fingerprint => "fingerprint",
    RtpMap => "rtpmap",
    Fmtp => "fmtp",
    RtcpFb => "rtcp-fb",
    ExtMap => "extmap",
    SsrcAttr => "ssrc",
    SsrcGroup => "ssrc-group",
    Rid => "rid",
    Simulcast => "simulcast",
    Msid => "msid",
    Candidate => "candidate",
    Group => "group",
}

/// Media direction (`a=sendrecv` etc.); also the direction of an `a=extmap`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    /// `sendrecv` (the default).
    SendRecv,
    /// `sendonly`.
    SendOnly,
    /// `recvonly`.
    RecvOnly,
    /// `inactive`.
    Inactive,
}

impl Direction {
    /// The attribute name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::SendRecv => "sendrecv",
            Self::SendOnly => "sendonly",
            Self::RecvOnly => "recvonly",
            Self::Inactive => "inactive",
        }
    }

    /// Maps an attribute name; `None` for anything else.
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "sendrecv" => Some(Self::SendRecv),
            "sendonly" => Some(Self::SendOnly),
            "recvonly" => Some(Self::RecvOnly),
            "inactive" => Some(Self::Inactive),
            _ => None,
        }
    }

    /// The direction seen from the other side (`sendonly` ↔ `recvonly`).
    pub fn reverse(self) -> Self {
        match self {
            Self::SendOnly => Self::RecvOnly,
            Self::RecvOnly => Self::SendOnly,
            other => other,
        }
    }
}

impl From<Direction> for Attribute {
    fn from(d: Direction) -> Self {
        Attribute::flag(d.as_str())
    }
}

/// `a=setup` (RFC 4145 / RFC 8842).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Setup {
    /// `active`: this side opens the DTLS connection.
    Active,
    /// `passive`.
    Passive,
    /// `actpass`: either (offers use this).
    ActPass,
    /// `holdconn`.
    HoldConn,
}

impl Setup {
    /// Parses the attribute value (after `a=<name>:`); the error names the broken part.
    pub fn parse(value: &str) -> Result<Self, &'static str> {
        match value.trim() {
            "active" => Ok(Self::Active),
            "passive" => Ok(Self::Passive),
            "actpass" => Ok(Self::ActPass),
            "holdconn" => Ok(Self::HoldConn),
            _ => Err("unknown setup role"),
        }
    }
}

impl fmt::Display for Setup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Active => "active",
            Self::Passive => "passive",
            Self::ActPass => "actpass",
            Self::HoldConn => "holdconn",
        })
    }
}

/// `a=fingerprint:<hash-func> <XX:XX:...>` (RFC 8122).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Fingerprint {
    /// Hash function, lowercased (`sha-256`).
    pub algorithm: String,
    /// Digest bytes; the length matches the algorithm when it is a known one.
    pub bytes: Vec<u8>,
}

impl Fingerprint {
    /// Parses the attribute value (after `a=<name>:`); the error names the broken part.
    pub fn parse(value: &str) -> Result<Self, &'static str> {
        let mut it = value.split_ascii_whitespace();
        let (Some(algo), Some(hex), None) = (it.next(), it.next(), it.next()) else {
            return Err("expected <hash-func> <fingerprint>");
        };
        check_token(algo, "bad hash function")?;
        let algorithm = algo.to_ascii_lowercase();
        let bytes = hex
            .split(':')
            .map(|pair| match pair.len() {
                2 => u8::from_str_radix(pair, 16).map_err(|_| "bad fingerprint hex"),
                _ => Err("bad fingerprint hex"),
            })
            .collect::<AttrResult<Vec<u8>>>()?;
        let expected = match algorithm.as_str() {
            "md2" | "md5" => Some(16),
            "sha-1" => Some(20),
            "sha-224" => Some(28),
            "sha-256" => Some(32),
            "sha-384" => Some(48),
            "sha-512" => Some(64),
            _ => None,
        };
        if expected.is_some_and(|n| n != bytes.len()) || bytes.len() > 64 {
            return Err("fingerprint length does not match its hash function");
        }
        Ok(Self { algorithm, bytes })
    }
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.algorithm)?;
        for (i, b) in self.bytes.iter().enumerate() {
            write!(f, "{}{b:02X}", if i == 0 { ' ' } else { ':' })?;
        }
        Ok(())
    }
}

/// `a=msid:<stream id> [<track id>]` (RFC 8830); `-` as stream id means no stream.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Msid {
    /// MediaStream id.
    pub stream_id: String,
    /// Track id, when given.
    pub track_id: Option<String>,
}

impl Msid {
    /// Parses the attribute value (after `a=<name>:`); the error names the broken part.
    pub fn parse(value: &str) -> Result<Self, &'static str> {
        let mut it = value.split_ascii_whitespace();
        let stream_id = it.next().ok_or("missing stream id")?.to_string();
        let track_id = it.next().map(str::to_string);
        if it.next().is_some() {
            return Err("too many msid fields");
        }
        Ok(Self {
            stream_id,
            track_id,
        })
    }
}

impl fmt::Display for Msid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.stream_id)?;
        match &self.track_id {
            Some(t) => write!(f, " {t}"),
            None => Ok(()),
        }
    }
}

/// `a=group:<semantics> <mid>...` (RFC 5888; `BUNDLE` per RFC 8843).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Group {
    /// `BUNDLE`, `LS`, ...
    pub semantics: String,
    /// Mids in order.
    pub mids: Vec<String>,
}

impl Group {
    /// Parses the attribute value (after `a=<name>:`); the error names the broken part.
    pub fn parse(value: &str) -> Result<Self, &'static str> {
        let mut it = value.split_ascii_whitespace();
        let semantics = it.next().ok_or("missing semantics")?;
        check_token(semantics, "bad semantics")?;
        let mids = it
            .map(|m| check_token(m, "bad mid").map(|()| m.to_string()))
            .collect::<AttrResult<_>>()?;
        Ok(Self {
            semantics: semantics.to_string(),
            mids,
        })
    }
}

impl fmt::Display for Group {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.semantics)?;
        self.mids.iter().try_for_each(|m| write!(f, " {m}"))
    }
}
