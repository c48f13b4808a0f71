//! Stream identification attributes: `a=ssrc`, `a=ssrc-group`, `a=rid`, `a=simulcast`.

use std::fmt::{self, Write as _};

use super::grammar::{
    AttrResult, check_token, lookup, parse_digits, parse_pt, split_params, write_params,
};

/// `a=ssrc:<ssrc> <attribute>[:<value>]` (RFC 5576).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SsrcAttr {
    /// SSRC.
    pub ssrc: u32,
    /// Source attribute name (`cname`, `msid`).
    pub attribute: String,
    /// Its value, verbatim.
    pub value: Option<String>,
}

impl SsrcAttr {
    /// Parses the attribute value (after `a=<name>:`); the error names the broken part.
    pub fn parse(value: &str) -> Result<Self, &'static str> {
        let (ssrc, rest) = value
            .trim_start()
            .split_once(' ')
            .ok_or("expected <ssrc> <attribute>")?;
        let ssrc = parse_digits(ssrc, "bad ssrc")?;
        let rest = rest.trim_start();
        let (attribute, value) = match rest.split_once(':') {
            Some((a, v)) => (a, Some(v.to_string())),
            None => (rest, None),
        };
        check_token(attribute, "bad ssrc attribute")?;
        Ok(Self {
            ssrc,
            attribute: attribute.to_string(),
            value,
        })
    }
}

impl fmt::Display for SsrcAttr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.ssrc, self.attribute)?;
        match &self.value {
            Some(v) => write!(f, ":{v}"),
            None => Ok(()),
        }
    }
}

/// `a=ssrc-group:<semantics> <ssrc>...` (`FID` pairs media with RTX, `SIM` lists simulcast layers).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SsrcGroup {
    /// `FID`, `SIM`, `FEC-FR`, ...
    pub semantics: String,
    /// SSRCs in order.
    pub ssrcs: Vec<u32>,
}

impl SsrcGroup {
    /// Parses the attribute value (after `a=<name>:`); the error names the broken part.
    pub fn parse(value: &str) -> Result<Self, &'static str> {
        let mut it = value.split_ascii_whitespace();
        let semantics = it.next().ok_or("missing semantics")?;
        check_token(semantics, "bad semantics")?;
        let ssrcs = it
            .map(|s| parse_digits(s, "bad ssrc"))
            .collect::<AttrResult<Vec<u32>>>()?;
        if ssrcs.is_empty() {
            return Err("ssrc-group without ssrcs");
        }
        Ok(Self {
            semantics: semantics.to_string(),
            ssrcs,
        })
    }
}

impl fmt::Display for SsrcGroup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.semantics)?;
        self.ssrcs.iter().try_for_each(|s| write!(f, " {s}"))
    }
}

/// Direction of an `a=rid`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RidDirection {
    /// `send`: the offerer sends this stream.
    Send,
    /// `recv`.
    Recv,
}

impl RidDirection {
    fn parse(s: &str) -> AttrResult<Self> {
        match s {
            "send" => Ok(Self::Send),
            "recv" => Ok(Self::Recv),
            _ => Err("direction must be send or recv"),
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Self::Send => "send",
            Self::Recv => "recv",
        }
    }
}

fn check_rid_id(id: &str) -> AttrResult<()> {
    let ok = !id.is_empty()
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if ok { Ok(()) } else { Err("bad rid id") }
}

/// `a=rid:<id> <send|recv> [<params>]` (RFC 8851).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Rid {
    /// RTP stream id.
    pub id: String,
    /// Direction.
    pub direction: RidDirection,
    /// Restrictions in order (`pt=96,97`, `max-width=1280`, ...).
    pub params: Vec<(String, Option<String>)>,
}

impl Rid {
    /// Parses the attribute value (after `a=<name>:`); the error names the broken part.
    pub fn parse(value: &str) -> Result<Self, &'static str> {
        let value = value.trim();
        let (id, rest) = value.split_once(char::is_whitespace).unwrap_or((value, ""));
        check_rid_id(id)?;
        let rest = rest.trim_start();
        let (direction, params) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
        let direction = RidDirection::parse(direction)?;
        let params = split_params(params);
        Ok(Self {
            id: id.to_string(),
            direction,
            params,
        })
    }

    /// Value of a restriction.
    pub fn param(&self, key: &str) -> Option<&str> {
        lookup(&self.params, key)
    }

    /// The `pt=` restriction; empty when absent.
    pub fn payload_types(&self) -> Vec<u8> {
        self.param("pt")
            .map(|v| {
                v.split(',')
                    .filter_map(|p| parse_pt(p.trim()).ok())
                    .collect()
            })
            .unwrap_or_default()
    }
}

impl fmt::Display for Rid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.id, self.direction.as_str())?;
        if !self.params.is_empty() {
            f.write_char(' ')?;
            write_params(f, &self.params)?;
        }
        Ok(())
    }
}

/// One rid in an `a=simulcast` list.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SimulcastRid {
    /// The rid.
    pub id: String,
    /// Written `~id`: offered but paused.
    pub paused: bool,
}

/// `a=simulcast:send <list> [recv <list>]` (RFC 8853). Each list is streams separated by `;`, each
/// stream a list of alternative rids separated by `,`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Simulcast {
    /// Streams the offerer sends; each inner list holds alternatives.
    pub send: Vec<Vec<SimulcastRid>>,
    /// Streams the offerer receives.
    pub recv: Vec<Vec<SimulcastRid>>,
}

impl Simulcast {
    /// Parses the attribute value (after `a=<name>:`); the error names the broken part.
    pub fn parse(value: &str) -> Result<Self, &'static str> {
        let mut out = Self::default();
        let mut it = value.split_ascii_whitespace();
        let (mut seen_send, mut seen_recv) = (false, false);
        while let Some(dir) = it.next() {
            let (slot, seen) = match dir {
                "send" => (&mut out.send, &mut seen_send),
                "recv" => (&mut out.recv, &mut seen_recv),
                _ => return Err("expected send or recv"),
            };
            if std::mem::replace(seen, true) {
                return Err("direction given twice");
            }
            *slot = Self::parse_list(it.next().ok_or("missing rid list")?)?;
        }
        if !seen_send && !seen_recv {
            return Err("empty simulcast");
        }
        Ok(out)
    }

    fn parse_list(list: &str) -> AttrResult<Vec<Vec<SimulcastRid>>> {
        list.split(';')
            .map(|stream| {
                stream
                    .split(',')
                    .map(|rid| {
                        let (id, paused) = match rid.strip_prefix('~') {
                            Some(id) => (id, true),
                            None => (rid, false),
                        };
                        check_rid_id(id)?;
                        Ok(SimulcastRid {
                            id: id.to_string(),
                            paused,
                        })
                    })
                    .collect()
            })
            .collect()
    }

    fn write_list(
        f: &mut fmt::Formatter<'_>,
        dir: &str,
        list: &[Vec<SimulcastRid>],
    ) -> fmt::Result {
        f.write_str(dir)?;
        for (i, stream) in list.iter().enumerate() {
            f.write_char(if i == 0 { ' ' } else { ';' })?;
            for (j, rid) in stream.iter().enumerate() {
                let sep = if j == 0 { "" } else { "," };
                write!(f, "{sep}{}{}", if rid.paused { "~" } else { "" }, rid.id)?;
            }
        }
        Ok(())
    }
}

impl fmt::Display for Simulcast {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.send.is_empty() {
            Self::write_list(f, "send", &self.send)?;
        }
        if !self.recv.is_empty() {
            if !self.send.is_empty() {
                f.write_char(' ')?;
            }
            Self::write_list(f, "recv", &self.recv)?;
        }
        Ok(())
    }
}
