//! `Display`: CRLF lines in RFC 8866 order.

use std::fmt;

use super::description::{
    Attribute, Bandwidth, Connection, MediaDescription, Origin, SessionDescription, Timing,
};
use super::frag::SdpFrag;

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} {} {} {} {}",
            self.username,
            self.session_id,
            self.session_version,
            self.net_type,
            self.addr_type,
            self.address
        )
    }
}

impl fmt::Display for Timing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.start, self.stop)
    }
}

impl fmt::Display for Connection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} {}", self.net_type, self.addr_type, self.address)
    }
}

impl fmt::Display for Bandwidth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.kind, self.value)
    }
}

/// Writes `<name>[:<value>]`, without `a=`.
impl fmt::Display for Attribute {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)?;
        match &self.value {
            Some(v) => write!(f, ":{v}"),
            None => Ok(()),
        }
    }
}

fn write_attrs(f: &mut fmt::Formatter<'_>, attrs: &[Attribute]) -> fmt::Result {
    attrs.iter().try_for_each(|a| write!(f, "a={a}\r\n"))
}

/// Writes the whole m-section: `m=`, `c=`, `b=`, `a=` lines, each ending in CRLF.
impl fmt::Display for MediaDescription {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "m={} {}", self.kind.as_str(), self.port)?;
        if let Some(n) = self.num_ports {
            write!(f, "/{n}")?;
        }
        write!(f, " {}", self.proto)?;
        self.formats
            .iter()
            .try_for_each(|fmt| write!(f, " {fmt}"))?;
        f.write_str("\r\n")?;
        if let Some(c) = &self.connection {
            write!(f, "c={c}\r\n")?;
        }
        self.bandwidth
            .iter()
            .try_for_each(|b| write!(f, "b={b}\r\n"))?;
        write_attrs(f, &self.attributes)
    }
}

impl fmt::Display for SessionDescription {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "v=0\r\no={}\r\ns={}\r\n", self.origin, self.session_name)?;
        if let Some(c) = &self.connection {
            write!(f, "c={c}\r\n")?;
        }
        self.bandwidth
            .iter()
            .try_for_each(|b| write!(f, "b={b}\r\n"))?;
        write!(f, "t={}\r\n", self.timing)?;
        write_attrs(f, &self.attributes)?;
        self.media.iter().try_for_each(|m| write!(f, "{m}"))
    }
}

impl fmt::Display for SdpFrag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_attrs(f, &self.attributes)?;
        self.media.iter().try_for_each(|m| write!(f, "{m}"))
    }
}
