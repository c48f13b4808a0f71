//! TURN relays: REST credentials a stock coturn checks by itself (`use-auth-secret` /
//! `static-auth-secret`), and the fleet's configuration (`FERRY_TURN_URIS`).
//!
//! A credential is `username = "{expiry}:{user}"` (Unix seconds), `password =
//! base64(HMAC-SHA1(secret, username))`: coturn recomputes the password from the secrets it
//! knows and refuses an expired username. Secrets rotate: the newest signs, and a coturn
//! configured with both the new and the old secret accepts either while the old credentials
//! live out their TTL.

use base64::Engine as _;
use hmac::{Hmac, KeyInit, Mac};

/// A TURN credential, as `RTCIceServer` carries it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credential {
    /// `"{expiry}:{user}"`.
    pub username: String,
    /// base64 HMAC-SHA1 of the username under the secret.
    pub password: String,
    /// Unix seconds after which the relay refuses it.
    pub expires: u64,
}

/// The password of `username` under `secret` (coturn's `use-auth-secret` scheme).
pub fn password(secret: &[u8], username: &str) -> String {
    // HMAC takes keys of any length.
    let mut mac = <Hmac<sha1::Sha1> as KeyInit>::new_from_slice(secret)
        .unwrap_or_else(|_| unreachable!("HMAC accepts any key length"));
    mac.update(username.as_bytes());
    base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes())
}

/// A credential for `user` valid until `expires` (Unix seconds), signed with `secret`.
pub fn credential(secret: &[u8], user: &str, expires: u64) -> Credential {
    let username = format!("{expires}:{user}");
    Credential {
        password: password(secret, &username),
        username,
        expires,
    }
}

/// Why a TURN setting is unusable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TurnConfigError {
    /// A URI is not `turn:` / `turns:` with a host.
    #[error("TURN URI {0:?} is not turn:HOST[:PORT][?transport=udp|tcp] or turns:…")]
    BadUri(String),
    /// A `;key=value` parameter is unknown or its value unusable.
    #[error("TURN URI {uri:?}: {reason}")]
    BadParam {
        /// The URI.
        uri: String,
        /// What is wrong.
        reason: String,
    },
    /// No secret, or an empty one.
    #[error("a TURN secret is empty")]
    EmptySecret,
    /// The same server twice.
    #[error("TURN URI {0:?} is listed twice")]
    Duplicate(String),
}

/// Address family of a relay (what clients it can serve).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Family {
    /// IPv4 literal.
    V4,
    /// IPv6 literal.
    V6,
    /// A host name (either, as DNS answers).
    Any,
}

/// One relay of the fleet, as configured.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TurnServerSpec {
    /// `turn:host:port?transport=udp` (without the `;` parameters).
    pub uri: String,
    /// Zone (`default` when not given).
    pub zone: String,
    /// ISP line (`any` when not given).
    pub isp: String,
    /// Share of the clients, relative to the others (1 by default).
    pub weight: f64,
    /// Address family of its host.
    pub family: Family,
}

impl TurnServerSpec {
    /// Parses `turn:host:port[?transport=…][;zone=Z][;isp=I][;weight=W]`.
    pub fn parse(s: &str) -> Result<TurnServerSpec, TurnConfigError> {
        let s = s.trim();
        let mut parts = s.split(';');
        let uri = parts.next().unwrap_or_default().trim().to_owned();
        let rest = uri
            .strip_prefix("turn:")
            .or_else(|| uri.strip_prefix("turns:"))
            .ok_or_else(|| TurnConfigError::BadUri(s.to_owned()))?;
        let host_port = rest.split('?').next().unwrap_or_default();
        let host = if let Some(v6) = host_port.strip_prefix('[') {
            v6.split(']').next().unwrap_or_default()
        } else {
            host_port.split(':').next().unwrap_or_default()
        };
        if host.is_empty() || host.chars().any(char::is_whitespace) {
            return Err(TurnConfigError::BadUri(s.to_owned()));
        }
        let family = if host.parse::<std::net::Ipv4Addr>().is_ok() {
            Family::V4
        } else if host.parse::<std::net::Ipv6Addr>().is_ok() {
            Family::V6
        } else {
            Family::Any
        };
        let mut spec = TurnServerSpec {
            uri,
            zone: "default".into(),
            isp: "any".into(),
            weight: 1.0,
            family,
        };
        let bad = |reason: String| TurnConfigError::BadParam {
            uri: spec_uri(s),
            reason,
        };
        for p in parts {
            let (k, v) = p
                .split_once('=')
                .ok_or_else(|| bad(format!("parameter {p:?} is not key=value")))?;
            let v = v.trim();
            match k.trim() {
                "zone" if crate::ids::validate(v).is_ok() => spec.zone = v.to_owned(),
                "isp" if crate::ids::validate(v).is_ok() => spec.isp = v.to_owned(),
                "weight" => {
                    spec.weight = v
                        .parse::<f64>()
                        .ok()
                        .filter(|w| w.is_finite() && *w > 0.0)
                        .ok_or_else(|| bad(format!("weight {v:?} is not a positive number")))?;
                }
                "zone" | "isp" => {
                    return Err(bad(format!("{k} {v:?}: only A-Z a-z 0-9 . _ - allowed")));
                }
                other => return Err(bad(format!("unknown parameter {other:?}"))),
            }
        }
        Ok(spec)
    }
}

fn spec_uri(s: &str) -> String {
    s.split(';').next().unwrap_or_default().trim().to_owned()
}

/// Parses a comma-separated list of relays (`FERRY_TURN_URIS`).
pub fn parse_uris(s: &str) -> Result<Vec<TurnServerSpec>, TurnConfigError> {
    let mut out: Vec<TurnServerSpec> = Vec::new();
    for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let spec = TurnServerSpec::parse(item)?;
        if out.iter().any(|o| o.uri == spec.uri) {
            return Err(TurnConfigError::Duplicate(spec.uri));
        }
        out.push(spec);
    }
    Ok(out)
}

/// Parses a comma-separated list of secrets, newest first (`FERRY_TURN_SECRET`).
pub fn parse_secrets(s: &str) -> Result<Vec<Vec<u8>>, TurnConfigError> {
    let secrets: Vec<Vec<u8>> = s.split(',').map(|x| x.trim().as_bytes().to_vec()).collect();
    if secrets.iter().any(Vec::is_empty) {
        return Err(TurnConfigError::EmptySecret);
    }
    Ok(secrets)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_password_is_coturns_hmac_sha1() {
        // Computed with `printf %s "1796124947:alice" | openssl dgst -sha1 -hmac s3cret -binary
        // | base64`, and accepted by coturn 4.6 started with --static-auth-secret=s3cret.
        let c = credential(b"s3cret", "alice", 1_796_124_947);
        assert_eq!(c.username, "1796124947:alice");
        assert_eq!(c.password, "NvbtM2qM2db+FmHz/IP61sBzAd8=");
        assert_ne!(
            credential(b"other", "alice", 1_796_124_947).password,
            c.password
        );
    }

    #[test]
    fn uris_with_parameters_parse_and_bad_ones_say_why() {
        let v = parse_uris(
            "turn:127.0.0.1:3478?transport=udp;zone=eu-1;weight=2, turns:relay.example.com:5349;isp=line-2,turn:[::1]:3478",
        )
        .unwrap();
        assert_eq!(v.len(), 3);
        assert_eq!(v[0].uri, "turn:127.0.0.1:3478?transport=udp");
        assert_eq!(
            (v[0].zone.as_str(), v[0].weight, v[0].family),
            ("eu-1", 2.0, Family::V4)
        );
        assert_eq!((v[1].isp.as_str(), v[1].family), ("line-2", Family::Any));
        assert_eq!(v[2].family, Family::V6);
        for bad in [
            "stun:1.2.3.4",
            "turn:",
            "turn:1.2.3.4;weight=0",
            "turn:1.2.3.4;weight=x",
            "turn:1.2.3.4;colour=red",
            "turn:1.2.3.4;zone=a b",
            "turn:1.2.3.4;zone",
        ] {
            assert!(parse_uris(bad).is_err(), "{bad}");
        }
        assert_eq!(
            parse_uris("turn:a:1,turn:a:1"),
            Err(TurnConfigError::Duplicate("turn:a:1".into()))
        );
        assert_eq!(
            parse_secrets("new, old").unwrap(),
            vec![b"new".to_vec(), b"old".to_vec()]
        );
        assert_eq!(parse_secrets("new,,old"), Err(TurnConfigError::EmptySecret));
    }
}
