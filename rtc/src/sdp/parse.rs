//! Line splitting and the session / m-section grammar.

use super::attrs;
use super::description::{
    Attribute, Bandwidth, Connection, MAX_LINE_LEN, MAX_MEDIA, MAX_SDP_SIZE, MediaDescription,
    MediaKind, Origin, SdpError, SessionDescription, Timing,
};
use super::frag::SdpFrag;
use super::grammar::{is_token_char, parse_pt};

impl SessionDescription {
    /// Parses an offer or answer; see the module docs for what is checked.
    pub fn parse(input: &str) -> Result<Self, SdpError> {
        parse_session(input)
    }

    /// [`parse`](Self::parse) on a raw HTTP body; checks the size before UTF-8.
    pub fn parse_bytes(input: &[u8]) -> Result<Self, SdpError> {
        if input.len() > MAX_SDP_SIZE {
            return Err(SdpError::TooLarge {
                size: input.len(),
                max: MAX_SDP_SIZE,
            });
        }
        let text = std::str::from_utf8(input).map_err(|_| SdpError::NotUtf8)?;
        Self::parse(text)
    }
}

impl SdpFrag {
    /// Parses a fragment. Only `a=`, `m=` and (inside an m-section) `c=`/`b=` lines are read; other
    /// line types are ignored. Size, line and m-section caps are those of a full description.
    pub fn parse(input: &str) -> Result<Self, SdpError> {
        parse_frag(input)
    }
}

/// One `<type>=<value>` line.
#[derive(Debug, Clone, Copy)]
struct Line<'a> {
    no: usize,
    kind: u8,
    value: &'a str,
}

impl Line<'_> {
    fn err(&self, reason: &'static str) -> SdpError {
        SdpError::Syntax {
            line: self.no,
            reason,
        }
    }
}

fn split_lines(input: &str) -> Result<Vec<Line<'_>>, SdpError> {
    if input.len() > MAX_SDP_SIZE {
        return Err(SdpError::TooLarge {
            size: input.len(),
            max: MAX_SDP_SIZE,
        });
    }
    let mut lines = Vec::new();
    for (idx, raw) in input.split('\n').enumerate() {
        let no = idx + 1;
        let raw = raw.strip_suffix('\r').unwrap_or(raw);
        if raw.len() > MAX_LINE_LEN {
            return Err(SdpError::LineTooLong {
                line: no,
                max: MAX_LINE_LEN,
            });
        }
        if raw.trim().is_empty() {
            continue;
        }
        if raw.contains(['\r', '\0']) {
            return Err(SdpError::Syntax {
                line: no,
                reason: "CR or NUL inside a line",
            });
        }
        match (raw.as_bytes().first(), raw.as_bytes().get(1), raw.get(2..)) {
            (Some(&kind), Some(b'='), Some(value)) if kind.is_ascii_alphabetic() => {
                lines.push(Line { no, kind, value });
            }
            _ => {
                return Err(SdpError::Syntax {
                    line: no,
                    reason: "expected <type>=<value>",
                });
            }
        }
    }
    Ok(lines)
}

fn num<T: std::str::FromStr>(
    line: &Line<'_>,
    s: &str,
    not_number: &'static str,
    out_of_range: &'static str,
) -> Result<T, SdpError> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(line.err(not_number));
    }
    s.parse().map_err(|_| line.err(out_of_range))
}

fn parse_origin(line: &Line<'_>) -> Result<Origin, SdpError> {
    let f: Vec<&str> = line.value.split_ascii_whitespace().collect();
    let [username, id, version, net_type, addr_type, address] = f.as_slice() else {
        return Err(line.err("o= line needs 6 fields"));
    };
    Ok(Origin {
        username: username.to_string(),
        session_id: num(
            line,
            id,
            "o= session id is not a number",
            "o= session id out of range",
        )?,
        session_version: num(
            line,
            version,
            "o= session version is not a number",
            "o= session version out of range",
        )?,
        net_type: net_type.to_string(),
        addr_type: addr_type.to_string(),
        address: address.to_string(),
    })
}

fn parse_timing(line: &Line<'_>) -> Result<Timing, SdpError> {
    let f: Vec<&str> = line.value.split_ascii_whitespace().collect();
    let [start, stop] = f.as_slice() else {
        return Err(line.err("t= line needs 2 fields"));
    };
    let bad = "t= time is not a number";
    let big = "t= time out of range";
    Ok(Timing {
        start: num(line, start, bad, big)?,
        stop: num(line, stop, bad, big)?,
    })
}

fn parse_connection(line: &Line<'_>) -> Result<Connection, SdpError> {
    let f: Vec<&str> = line.value.split_ascii_whitespace().collect();
    let [net_type, addr_type, address] = f.as_slice() else {
        return Err(line.err("c= line needs 3 fields"));
    };
    Ok(Connection {
        net_type: net_type.to_string(),
        addr_type: addr_type.to_string(),
        address: address.to_string(),
    })
}

fn parse_bandwidth(line: &Line<'_>) -> Result<Bandwidth, SdpError> {
    let (kind, value) = line
        .value
        .split_once(':')
        .ok_or(line.err("b= line needs <type>:<value>"))?;
    if kind.is_empty() || !kind.chars().all(is_token_char) {
        return Err(line.err("b= bad bandwidth type"));
    }
    let value = num(
        line,
        value,
        "b= bandwidth is not a number",
        "b= bandwidth out of range",
    )?;
    Ok(Bandwidth {
        kind: kind.to_string(),
        value,
    })
}

fn parse_media_line(line: &Line<'_>) -> Result<MediaDescription, SdpError> {
    let mut f = line.value.split_ascii_whitespace();
    let (Some(kind), Some(port), Some(proto), Some(first_fmt)) =
        (f.next(), f.next(), f.next(), f.next())
    else {
        return Err(line.err("m= line needs at least 4 fields"));
    };
    let (port, num_ports) = match port.split_once('/') {
        Some((p, n)) => (p, Some(n)),
        None => (port, None),
    };
    let port = num(
        line,
        port,
        "m= port is not a number",
        "m= port out of range",
    )?;
    let num_ports = num_ports
        .map(|n| {
            num(
                line,
                n,
                "m= port count is not a number",
                "m= port count out of range",
            )
        })
        .transpose()?;
    if !proto.chars().all(|c| is_token_char(c) || c == '/') {
        return Err(line.err("m= bad proto"));
    }
    let mut media = MediaDescription::new(
        MediaKind::from_token(kind),
        port,
        proto,
        std::iter::once(first_fmt).chain(f),
    );
    media.num_ports = num_ports;
    if media.is_rtp() {
        for fmt in &media.formats {
            parse_pt(fmt).map_err(|_| line.err("m= payload type must be 0..=127"))?;
        }
    }
    Ok(media)
}

fn parse_attribute(line: &Line<'_>) -> Result<Attribute, SdpError> {
    let (name, value) = match line.value.split_once(':') {
        Some((n, v)) => (n, Some(v)),
        None => (line.value, None),
    };
    if name.is_empty() || !name.chars().all(is_token_char) {
        return Err(line.err("bad attribute name"));
    }
    let attr = Attribute {
        name: name.to_string(),
        value: value.map(str::to_string),
    };
    attrs::check(&attr).map_err(|reason| SdpError::Attribute {
        line: line.no,
        name: attr.name.clone(),
        reason,
    })?;
    Ok(attr)
}

/// Reads a line inside an m-section. Returns false if the line is not a media-level one.
fn media_line(media: &mut MediaDescription, line: &Line<'_>) -> Result<bool, SdpError> {
    match line.kind {
        b'a' => media.attributes.push(parse_attribute(line)?),
        b'b' => media.bandwidth.push(parse_bandwidth(line)?),
        b'c' if media.connection.is_some() => return Err(line.err("duplicate c= line")),
        b'c' => media.connection = Some(parse_connection(line)?),
        b'm' | b'v' | b'o' | b's' | b't' => return Ok(false),
        // i=, k= and unknown types are allowed and dropped.
        _ => {}
    }
    Ok(true)
}

fn start_media(media: &mut Vec<MediaDescription>, line: &Line<'_>) -> Result<(), SdpError> {
    if media.len() >= MAX_MEDIA {
        return Err(SdpError::TooManyMedia {
            line: line.no,
            max: MAX_MEDIA,
        });
    }
    media.push(parse_media_line(line)?);
    Ok(())
}

pub(super) fn parse_session(input: &str) -> Result<SessionDescription, SdpError> {
    let lines = split_lines(input)?;
    let mut it = lines.iter();
    let v = it.next().ok_or(SdpError::Syntax {
        line: 1,
        reason: "empty description",
    })?;
    if v.kind != b'v' || v.value != "0" {
        return Err(v.err("first line must be v=0"));
    }
    let (mut origin, mut name, mut timing) = (None, None, None);
    let mut sdp = SessionDescription::new(Origin::new(0, 0));
    for line in it {
        if let Some(media) = sdp.media.last_mut() {
            if media_line(media, line)? {
                continue;
            }
            if line.kind != b'm' {
                return Err(line.err("session-level line after m="));
            }
        }
        match line.kind {
            b'v' => return Err(line.err("duplicate v= line")),
            b'o' if origin.is_some() => return Err(line.err("duplicate o= line")),
            b'o' => origin = Some(parse_origin(line)?),
            b's' if name.is_some() => return Err(line.err("duplicate s= line")),
            b's' => name = Some(line.value.to_string()),
            b't' if timing.is_some() => return Err(line.err("more than one t= line")),
            b't' => timing = Some(parse_timing(line)?),
            b'c' if sdp.connection.is_some() => return Err(line.err("duplicate c= line")),
            b'c' => sdp.connection = Some(parse_connection(line)?),
            b'b' => sdp.bandwidth.push(parse_bandwidth(line)?),
            b'a' => sdp.attributes.push(parse_attribute(line)?),
            b'm' => start_media(&mut sdp.media, line)?,
            // i=, u=, e=, p=, r=, z=, k= and unknown types are allowed and dropped.
            _ => {}
        }
    }
    let missing_at = v.no + 1;
    let missing = |reason| SdpError::Syntax {
        line: missing_at,
        reason,
    };
    sdp.origin = origin.ok_or(missing("missing o= line"))?;
    sdp.session_name = name.ok_or(missing("missing s= line"))?;
    sdp.timing = timing.ok_or(missing("missing t= line"))?;
    Ok(sdp)
}

pub(super) fn parse_frag(input: &str) -> Result<SdpFrag, SdpError> {
    let lines = split_lines(input)?;
    let mut frag = SdpFrag::default();
    for line in &lines {
        if let Some(media) = frag.media.last_mut()
            && media_line(media, line)?
        {
            continue;
        }
        match line.kind {
            b'a' => frag.attributes.push(parse_attribute(line)?),
            b'm' => start_media(&mut frag.media, line)?,
            // RFC 8840 fragments carry only a= and m= lines; anything else is ignored.
            _ => {}
        }
    }
    Ok(frag)
}
