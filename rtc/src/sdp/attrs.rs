//! Typed forms of the attributes WebRTC relies on: their grammar (used by the parser to reject
//! malformed known attributes), their decoding and their writing.

use std::fmt;

pub use super::candidate::Candidate;
pub use super::codec::{ExtMap, Fmtp, RtcpFb, RtpMap};
use super::description::Attribute;
pub use super::direction::Direction;
use super::grammar::{AttrResult, check_ice_chars, check_token, parse_digits};
pub use super::streams::{Rid, RidDirection, Simulcast, SimulcastRid, SsrcAttr, SsrcGroup};

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

fn check_fmtp(value: &str) -> AttrResult<()> {
    let format = value
        .split_ascii_whitespace()
        .next()
        .ok_or("missing format")?;
    check_token(format, "bad format")
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
