//! The lexical rules the attribute grammars share: digits, payload types, RFC 8866 tokens,
//! ICE characters, and `k=v;k` parameter lists.

use std::fmt::{self, Write as _};

pub(crate) type AttrResult<T> = Result<T, &'static str>;

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
