//! TURN server URIs (RFC 7065): `turn:host[:port][?transport=udp]`; the client speaks UDP only.

use super::DEFAULT_PORT;

/// Why a TURN URI is unusable.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TurnUriError {
    /// Not a `turn:` URI (RFC 7065).
    #[error("not a TURN URI: {0}")]
    NotTurn(String),
    /// `turns:` (TLS or DTLS): only UDP is spoken here.
    #[error("turns: is not supported (UDP only): {0}")]
    UnsupportedScheme(String),
    /// `?transport=tcp`: only UDP is spoken here.
    #[error("transport {0} is not supported (UDP only)")]
    UnsupportedTransport(String),
    /// A missing or malformed host or port.
    #[error("bad host or port in {0}")]
    BadAuthority(String),
}

/// A parsed `turn:host[:port][?transport=udp]` URI (RFC 7065).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnUri {
    /// Host name or IP address (IPv6 without brackets).
    pub host: String,
    pub port: u16,
}

impl TurnUri {
    /// Parses a `turn:` URI; `turns:` and transports other than UDP are refused.
    pub fn parse(uri: &str) -> Result<TurnUri, TurnUriError> {
        let uri = uri.trim();
        let lower = uri.to_ascii_lowercase();
        if lower.starts_with("turns:") {
            return Err(TurnUriError::UnsupportedScheme(uri.to_owned()));
        }
        let Some(rest) = lower.strip_prefix("turn:").map(|_| &uri[5..]) else {
            return Err(TurnUriError::NotTurn(uri.to_owned()));
        };
        let (authority, query) = rest.split_once('?').unwrap_or((rest, ""));
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            if let Some(t) = pair.strip_prefix("transport=")
                && !t.eq_ignore_ascii_case("udp")
            {
                return Err(TurnUriError::UnsupportedTransport(t.to_owned()));
            }
        }
        let bad = || TurnUriError::BadAuthority(uri.to_owned());
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let (host, after) = v6.split_once(']').ok_or_else(bad)?;
            match after.strip_prefix(':') {
                Some(p) => (host, Some(p)),
                None if after.is_empty() => (host, None),
                None => return Err(bad()),
            }
        } else {
            match authority.split_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (authority, None),
            }
        };
        if host.is_empty() || host.contains(['/', '@', ' ']) {
            return Err(bad());
        }
        let port = match port {
            Some(p) => p.parse::<u16>().ok().filter(|p| *p != 0).ok_or_else(bad)?,
            None => DEFAULT_PORT,
        };
        Ok(TurnUri {
            host: host.to_owned(),
            port,
        })
    }
}
