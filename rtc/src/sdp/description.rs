//! The description's data: sessions, m-sections, attributes and the parse error. Reading it is
//! `parse.rs`, writing it `write.rs`, the typed accessors `access.rs`.

use super::grammar::parse_pt;

/// Largest description [`SessionDescription::parse`] and [`SdpFrag::parse`] accept, in bytes.
pub const MAX_SDP_SIZE: usize = 64 * 1024;
/// Longest line accepted, in bytes, without its line ending.
pub const MAX_LINE_LEN: usize = 4096;
/// Most m-sections accepted in one description or fragment.
pub const MAX_MEDIA: usize = 64;

/// Why a description or fragment was rejected. Line numbers are 1-based.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SdpError {
    /// The input is longer than [`MAX_SDP_SIZE`].
    #[error("SDP is {size} bytes, more than the {max} allowed")]
    TooLarge {
        /// Input size in bytes.
        size: usize,
        /// The limit.
        max: usize,
    },
    /// A line is longer than [`MAX_LINE_LEN`].
    #[error("line {line}: longer than {max} bytes")]
    LineTooLong {
        /// The offending line.
        line: usize,
        /// The limit.
        max: usize,
    },
    /// More m-sections than [`MAX_MEDIA`].
    #[error("line {line}: more than {max} m= sections")]
    TooManyMedia {
        /// The first m= line over the limit.
        line: usize,
        /// The limit.
        max: usize,
    },
    /// The input is not UTF-8 (only from [`SessionDescription::parse_bytes`]).
    #[error("SDP is not valid UTF-8")]
    NotUtf8,
    /// A line breaks the SDP grammar.
    #[error("line {line}: {reason}")]
    Syntax {
        /// The offending line (for a missing line: where it was expected).
        line: usize,
        /// What is wrong.
        reason: &'static str,
    },
    /// A known attribute does not match its grammar.
    #[error("line {line}: a={name}: {reason}")]
    Attribute {
        /// The offending line.
        line: usize,
        /// The attribute name.
        name: String,
        /// What is wrong.
        reason: &'static str,
    },
}

/// One `a=` line: `a=<name>` (a flag, `value` is `None`) or `a=<name>:<value>` (value verbatim).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Attribute {
    /// Attribute name, e.g. `rtpmap`.
    pub name: String,
    /// Everything after the first `:`, unmodified.
    pub value: Option<String>,
}

impl Attribute {
    /// `a=<name>:<value>`.
    pub fn new(name: impl Into<String>, value: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            value: Some(value.into()),
        }
    }

    /// `a=<name>`, a property attribute such as `rtcp-mux`.
    pub fn flag(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            value: None,
        }
    }
}

/// `o=<username> <sess-id> <sess-version> <nettype> <addrtype> <unicast-address>`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Origin {
    /// Usually `-`.
    pub username: String,
    /// Session id.
    pub session_id: u64,
    /// Incremented on every new offer/answer of the session.
    pub session_version: u64,
    /// `IN`.
    pub net_type: String,
    /// `IP4` or `IP6`.
    pub addr_type: String,
    /// Address; WebRTC puts a placeholder here.
    pub address: String,
}

impl Origin {
    /// The JSEP origin `- <id> <version> IN IP4 127.0.0.1`.
    pub fn new(session_id: u64, session_version: u64) -> Self {
        Self {
            username: "-".into(),
            session_id,
            session_version,
            net_type: "IN".into(),
            addr_type: "IP4".into(),
            address: "127.0.0.1".into(),
        }
    }
}

/// `t=<start> <stop>`; WebRTC always uses `t=0 0`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Timing {
    /// NTP start time, 0 for unbounded.
    pub start: u64,
    /// NTP stop time, 0 for unbounded.
    pub stop: u64,
}

/// `c=<nettype> <addrtype> <connection-address>`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Connection {
    /// `IN`.
    pub net_type: String,
    /// `IP4` or `IP6`.
    pub addr_type: String,
    /// Address, verbatim (may carry `/ttl` for multicast).
    pub address: String,
}

impl Connection {
    /// `c=IN IP4 <address>` or `c=IN IP6 <address>`, picking the type from the address.
    pub fn new(address: impl Into<String>) -> Self {
        let address = address.into();
        let addr_type = if address.contains(':') { "IP6" } else { "IP4" };
        Self {
            net_type: "IN".into(),
            addr_type: addr_type.into(),
            address,
        }
    }
}

/// `b=<bwtype>:<bandwidth>`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Bandwidth {
    /// `AS`, `TIAS`, `CT`, ...
    pub kind: String,
    /// Value in the unit of `kind` (kbit/s for `AS`, bit/s for `TIAS`).
    pub value: u64,
}

/// The `<media>` of an m= line.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum MediaKind {
    /// `audio`.
    Audio,
    /// `video`.
    Video,
    /// `application` (data channels).
    Application,
    /// Anything else, verbatim. Never holds `audio`, `video` or `application`.
    Other(String),
}

impl MediaKind {
    /// Maps the m= token; the match is exact (case-sensitive).
    pub fn from_token(token: &str) -> Self {
        match token {
            "audio" => Self::Audio,
            "video" => Self::Video,
            "application" => Self::Application,
            other => Self::Other(other.to_string()),
        }
    }

    /// The m= token.
    pub fn as_str(&self) -> &str {
        match self {
            Self::Audio => "audio",
            Self::Video => "video",
            Self::Application => "application",
            Self::Other(s) => s,
        }
    }
}

/// A whole offer or answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionDescription {
    /// `o=` line.
    pub origin: Origin,
    /// `s=` value, verbatim (`-` in WebRTC).
    pub session_name: String,
    /// Session-level `c=`.
    pub connection: Option<Connection>,
    /// Session-level `b=` lines.
    pub bandwidth: Vec<Bandwidth>,
    /// `t=` line.
    pub timing: Timing,
    /// Session-level `a=` lines in order.
    pub attributes: Vec<Attribute>,
    /// m-sections in order.
    pub media: Vec<MediaDescription>,
}

impl SessionDescription {
    /// An empty description: the given origin, `s=-`, `t=0 0`, no attributes or media.
    pub fn new(origin: Origin) -> Self {
        Self {
            origin,
            session_name: "-".into(),
            connection: None,
            bandwidth: Vec::new(),
            timing: Timing::default(),
            attributes: Vec::new(),
            media: Vec::new(),
        }
    }

    /// Appends a session-level attribute (`value` `None` for a flag).
    pub fn push_attr(&mut self, name: impl Into<String>, value: Option<&str>) -> &mut Self {
        self.attributes.push(Attribute {
            name: name.into(),
            value: value.map(str::to_string),
        });
        self
    }

    /// Appends a session-level attribute built from a typed value (`&RtpMap`, `Setup`, ...).
    pub fn push(&mut self, attr: impl Into<Attribute>) -> &mut Self {
        self.attributes.push(attr.into());
        self
    }

    /// Appends an m-section.
    pub fn push_media(&mut self, media: MediaDescription) -> &mut Self {
        self.media.push(media);
        self
    }
}

/// One m-section: the m= line, its `c=`, `b=` and `a=` lines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MediaDescription {
    /// `<media>`.
    pub kind: MediaKind,
    /// `<port>`; 9 (discard) in WebRTC offers, 0 for a rejected section.
    pub port: u16,
    /// The `/<number of ports>` suffix, when present.
    pub num_ports: Option<u16>,
    /// `<proto>`, e.g. `UDP/TLS/RTP/SAVPF` or `UDP/DTLS/SCTP`.
    pub proto: String,
    /// `<fmt>` list: payload types for RTP, e.g. `webrtc-datachannel` for SCTP.
    pub formats: Vec<String>,
    /// Media-level `c=`.
    pub connection: Option<Connection>,
    /// Media-level `b=` lines.
    pub bandwidth: Vec<Bandwidth>,
    /// Media-level `a=` lines in order.
    pub attributes: Vec<Attribute>,
}

impl MediaDescription {
    /// An m-section with no `c=`, `b=` or attributes. `formats` must not be empty for the result to
    /// parse back.
    pub fn new<F: Into<String>>(
        kind: MediaKind,
        port: u16,
        proto: impl Into<String>,
        formats: impl IntoIterator<Item = F>,
    ) -> Self {
        Self {
            kind,
            port,
            num_ports: None,
            proto: proto.into(),
            formats: formats.into_iter().map(Into::into).collect(),
            connection: None,
            bandwidth: Vec::new(),
            attributes: Vec::new(),
        }
    }

    /// Sets the media-level `c=` line (builder style).
    pub fn with_connection(mut self, connection: Connection) -> Self {
        self.connection = Some(connection);
        self
    }

    /// Appends an attribute (builder style; `value` `None` for a flag).
    pub fn with_attr(mut self, name: impl Into<String>, value: Option<&str>) -> Self {
        self.push_attr(name, value);
        self
    }

    /// Appends an attribute (`value` `None` for a flag).
    pub fn push_attr(&mut self, name: impl Into<String>, value: Option<&str>) -> &mut Self {
        self.attributes.push(Attribute {
            name: name.into(),
            value: value.map(str::to_string),
        });
        self
    }

    /// Appends an attribute built from a typed value (`&RtpMap`, `&Candidate`, `Direction`, ...).
    pub fn push(&mut self, attr: impl Into<Attribute>) -> &mut Self {
        self.attributes.push(attr.into());
        self
    }

    /// Removes every attribute with this name; returns how many were removed.
    pub fn remove_attrs(&mut self, name: &str) -> usize {
        let before = self.attributes.len();
        self.attributes.retain(|a| a.name != name);
        before - self.attributes.len()
    }

    /// True when the proto carries RTP (`.../RTP/...`), so formats are payload types.
    pub fn is_rtp(&self) -> bool {
        self.proto.split('/').any(|p| p == "RTP")
    }

    /// Formats that are payload types, in m= line order.
    pub fn payload_types(&self) -> Vec<u8> {
        self.formats
            .iter()
            .filter_map(|f| parse_pt(f).ok())
            .collect()
    }
}
