//! Codec and RTP attributes: `a=rtpmap`, `a=fmtp`, `a=rtcp-fb`, `a=extmap`.

use std::fmt;

use super::direction::Direction;
use super::grammar::{check_token, lookup, parse_digits, parse_pt, split_params, write_params};

/// `a=rtpmap:<pt> <encoding>/<clock rate>[/<channels>]`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RtpMap {
    /// Payload type.
    pub pt: u8,
    /// Encoding name as written (`opus`, `VP8`, `H264`, `rtx`); compare case-insensitively.
    pub encoding: String,
    /// RTP clock rate in Hz.
    pub clock_rate: u32,
    /// Audio channel count, when given.
    pub channels: Option<u16>,
}

impl RtpMap {
    /// Parses the attribute value (after `a=<name>:`); the error names the broken part.
    pub fn parse(value: &str) -> Result<Self, &'static str> {
        let (pt, rest) = value
            .trim()
            .split_once(' ')
            .ok_or("expected <pt> <encoding>/<rate>")?;
        let pt = parse_pt(pt)?;
        let mut parts = rest.trim().split('/');
        let encoding = parts.next().unwrap_or_default();
        check_token(encoding, "bad encoding name")?;
        let clock_rate = parse_digits(parts.next().ok_or("missing clock rate")?, "bad clock rate")?;
        let channels = parts
            .next()
            .map(|c| parse_digits(c, "bad channel count"))
            .transpose()?;
        if parts.next().is_some() {
            return Err("too many rtpmap fields");
        }
        Ok(Self {
            pt,
            encoding: encoding.to_string(),
            clock_rate,
            channels,
        })
    }

    /// True for an RTX (RFC 4588) mapping.
    pub fn is_rtx(&self) -> bool {
        self.encoding.eq_ignore_ascii_case("rtx")
    }
}

impl fmt::Display for RtpMap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}/{}", self.pt, self.encoding, self.clock_rate)?;
        match self.channels {
            Some(ch) => write!(f, "/{ch}"),
            None => Ok(()),
        }
    }
}

/// `a=fmtp:<pt> <params>`; parameters are `;`-separated `key=value` (or bare, like RED's `111/111`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Fmtp {
    /// Payload type.
    pub pt: u8,
    /// Parameters in order, trimmed; bare items have no value.
    pub params: Vec<(String, Option<String>)>,
}

impl Fmtp {
    /// Parses the attribute value (after `a=<name>:`); the error names the broken part.
    pub fn parse(value: &str) -> Result<Self, &'static str> {
        let value = value.trim_start();
        let (pt, params) = value.split_once([' ', '\t']).unwrap_or((value, ""));
        Ok(Self {
            pt: parse_pt(pt)?,
            params: split_params(params),
        })
    }

    /// Value of a parameter; names compare case-insensitively (RFC 4855).
    pub fn param(&self, key: &str) -> Option<&str> {
        lookup(&self.params, key)
    }

    /// The RTX `apt=` (associated payload type).
    pub fn apt(&self) -> Option<u8> {
        self.param("apt").and_then(|v| parse_pt(v).ok())
    }
}

impl fmt::Display for Fmtp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.pt)?;
        if self.params.is_empty() {
            return Ok(());
        }
        f.write_str(" ")?;
        write_params(f, &self.params)
    }
}

/// `a=rtcp-fb:<pt|*> <type> [<param>]` (RFC 4585).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RtcpFb {
    /// Payload type; `None` for the `*` wildcard.
    pub pt: Option<u8>,
    /// Feedback type (`nack`, `ccm`, `goog-remb`, `transport-cc`).
    pub kind: String,
    /// The rest (`pli`, `fir`), space-joined.
    pub param: Option<String>,
}

impl RtcpFb {
    /// Parses the attribute value (after `a=<name>:`); the error names the broken part.
    pub fn parse(value: &str) -> Result<Self, &'static str> {
        let mut it = value.split_ascii_whitespace();
        let pt = match it.next().ok_or("missing payload type")? {
            "*" => None,
            pt => Some(parse_pt(pt)?),
        };
        let kind = it.next().ok_or("missing feedback type")?;
        check_token(kind, "bad feedback type")?;
        let rest: Vec<&str> = it.collect();
        let param = if rest.is_empty() {
            None
        } else {
            Some(rest.join(" "))
        };
        Ok(Self {
            pt,
            kind: kind.to_string(),
            param,
        })
    }
}

impl fmt::Display for RtcpFb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.pt {
            Some(pt) => write!(f, "{pt} {}", self.kind)?,
            None => write!(f, "* {}", self.kind)?,
        }
        match &self.param {
            Some(p) => write!(f, " {p}"),
            None => Ok(()),
        }
    }
}

/// `a=extmap:<id>[/<direction>] <uri> [<attributes>]` (RFC 8285).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ExtMap {
    /// 1..=14 fits the one-byte header form; 15..=255 needs the two-byte form.
    pub id: u8,
    /// Direction, when given.
    pub direction: Option<Direction>,
    /// Extension URI.
    pub uri: String,
    /// Extension attributes after the URI, verbatim.
    pub attributes: Option<String>,
}

impl ExtMap {
    /// Parses the attribute value (after `a=<name>:`); the error names the broken part.
    pub fn parse(value: &str) -> Result<Self, &'static str> {
        let mut it = value.split_ascii_whitespace();
        let head = it.next().ok_or("missing id")?;
        let (id, direction) = match head.split_once('/') {
            Some((id, dir)) => (
                id,
                Some(Direction::from_name(dir).ok_or("bad extmap direction")?),
            ),
            None => (head, None),
        };
        let id = match parse_digits::<u8>(id, "bad extmap id")? {
            0 => return Err("bad extmap id"),
            id => id,
        };
        let uri = it.next().ok_or("missing extension URI")?.to_string();
        let rest: Vec<&str> = it.collect();
        let attributes = if rest.is_empty() {
            None
        } else {
            Some(rest.join(" "))
        };
        Ok(Self {
            id,
            direction,
            uri,
            attributes,
        })
    }

    /// True when the id needs the two-byte header form (and so `a=extmap-allow-mixed`).
    pub fn needs_two_byte(&self) -> bool {
        self.id > 14
    }
}

impl fmt::Display for ExtMap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.id)?;
        if let Some(d) = self.direction {
            write!(f, "/{}", d.as_str())?;
        }
        write!(f, " {}", self.uri)?;
        match &self.attributes {
            Some(a) => write!(f, " {a}"),
            None => Ok(()),
        }
    }
}
