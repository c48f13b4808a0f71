//! ICE candidates (`a=candidate`, RFC 8839).

use std::fmt;

use super::grammar::{check_ice_chars, check_token, parse_digits};

/// An ICE candidate (RFC 8839 §5.1): `<foundation> <component> <transport> <priority> <address>
/// <port> typ <type> [raddr <addr>] [rport <port>] *(<ext-name> <ext-value>)`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Candidate {
    /// 1 to 32 ice-chars.
    pub foundation: String,
    /// 1 for RTP (RTCP is muxed in WebRTC).
    pub component: u16,
    /// `udp` / `tcp`, as written; compare case-insensitively.
    pub transport: String,
    /// Priority.
    pub priority: u32,
    /// IP address or FQDN (mDNS `*.local` in browsers).
    pub address: String,
    /// Port.
    pub port: u16,
    /// `host`, `srflx`, `prflx`, `relay`.
    pub typ: String,
    /// Related address.
    pub raddr: Option<String>,
    /// Related port.
    pub rport: Option<u16>,
    /// Extension pairs in order (`generation 0`, `tcptype passive`, `ufrag x`, ...).
    pub extensions: Vec<(String, String)>,
}

impl Candidate {
    /// Parses an attribute value, also accepting a leading `candidate:` or `a=candidate:` (the form
    /// in `RTCIceCandidate.candidate`).
    pub fn parse(value: &str) -> Result<Self, &'static str> {
        let value = value.trim();
        let value = value.strip_prefix("a=").unwrap_or(value);
        let value = value.strip_prefix("candidate:").unwrap_or(value);
        let mut it = value.split_ascii_whitespace();
        let mut field = |reason| it.next().ok_or(reason);
        let foundation = field("missing foundation")?;
        check_ice_chars(foundation, 1, 32, "bad foundation")?;
        let component = match parse_digits::<u16>(field("missing component")?, "bad component")? {
            c @ 1..=256 => c,
            _ => return Err("component out of range"),
        };
        let transport = field("missing transport")?;
        check_token(transport, "bad transport")?;
        let priority = parse_digits(field("missing priority")?, "bad priority")?;
        let address = field("missing address")?.to_string();
        let port = parse_digits(field("missing port")?, "bad port")?;
        if field("missing typ")? != "typ" {
            return Err("expected typ");
        }
        let typ = field("missing candidate type")?;
        check_token(typ, "bad candidate type")?;
        let mut cand = Self {
            foundation: foundation.to_string(),
            component,
            transport: transport.to_string(),
            priority,
            address,
            port,
            typ: typ.to_string(),
            raddr: None,
            rport: None,
            extensions: Vec::new(),
        };
        while let Some(name) = it.next() {
            let value = it.next().ok_or("extension without value")?;
            match name {
                "raddr" if cand.raddr.is_none() => cand.raddr = Some(value.to_string()),
                "rport" if cand.rport.is_none() => {
                    cand.rport = Some(parse_digits(value, "bad rport")?);
                }
                _ => cand.extensions.push((name.to_string(), value.to_string())),
            }
        }
        Ok(cand)
    }

    /// Value of an extension (`generation`, `tcptype`, `ufrag`, ...).
    pub fn extension(&self, name: &str) -> Option<&str> {
        self.extensions
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Writes the attribute value, without the `candidate:` prefix.
impl fmt::Display for Candidate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} {} {} {} {} typ {}",
            self.foundation,
            self.component,
            self.transport,
            self.priority,
            self.address,
            self.port,
            self.typ
        )?;
        if let Some(a) = &self.raddr {
            write!(f, " raddr {a}")?;
        }
        if let Some(p) = self.rport {
            write!(f, " rport {p}")?;
        }
        self.extensions
            .iter()
            .try_for_each(|(k, v)| write!(f, " {k} {v}"))
    }
}
