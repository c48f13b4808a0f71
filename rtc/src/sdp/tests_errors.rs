#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use super::*;

fn syntax(line: usize, reason: &'static str) -> SdpError {
    SdpError::Syntax { line, reason }
}

const MINIMAL: &str = "v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\n";

#[test]
fn errors_carry_line_numbers() {
    let m = |line: &str| format!("{MINIMAL}a=group:BUNDLE 0\r\n{line}\r\na=mid:0\r\n");
    let cases: Vec<(String, SdpError)> = vec![
        ("".into(), syntax(1, "empty description")),
        ("hello world".into(), syntax(1, "expected <type>=<value>")),
        ("\u{1F600}=0".into(), syntax(1, "expected <type>=<value>")),
        (
            "o=- 1 1 IN IP4 x\r\nv=0\r\n".into(),
            syntax(1, "first line must be v=0"),
        ),
        ("v=1\r\n".into(), syntax(1, "first line must be v=0")),
        (
            "v=0\r\ns=-\r\nt=0 0\r\n".into(),
            syntax(2, "missing o= line"),
        ),
        (
            "v=0\r\no=- 1 1 IN IP4 x\r\nt=0 0\r\n".into(),
            syntax(2, "missing s= line"),
        ),
        (
            "v=0\r\no=- 1 1 IN IP4 x\r\ns=-\r\n".into(),
            syntax(2, "missing t= line"),
        ),
        (
            "v=0\r\no=- x 1 IN IP4 x\r\n".into(),
            syntax(2, "o= session id is not a number"),
        ),
        (
            "v=0\r\no=- 1 1 IN IP4\r\n".into(),
            syntax(2, "o= line needs 6 fields"),
        ),
        (
            "v=0\r\no=- 1 99999999999999999999 IN IP4 x\r\n".into(),
            syntax(2, "o= session version out of range"),
        ),
        (format!("{MINIMAL}v=0\r\n"), syntax(5, "duplicate v= line")),
        (
            format!("{MINIMAL}t=1 2\r\n"),
            syntax(5, "more than one t= line"),
        ),
        (
            format!("{MINIMAL}b=AS\r\n"),
            syntax(5, "b= line needs <type>:<value>"),
        ),
        (
            format!("{MINIMAL}b=AS:-1\r\n"),
            syntax(5, "b= bandwidth is not a number"),
        ),
        (
            format!("{MINIMAL}c=IN IP4\r\n"),
            syntax(5, "c= line needs 3 fields"),
        ),
        (format!("{MINIMAL}a=\r\n"), syntax(5, "bad attribute name")),
        (
            format!("{MINIMAL}a=bad name:x\r\n"),
            syntax(5, "bad attribute name"),
        ),
        (
            format!("{MINIMAL} a=mid:0\r\n"),
            syntax(5, "expected <type>=<value>"),
        ),
        (
            format!("{MINIMAL}a=x\rb\r\n"),
            syntax(5, "CR or NUL inside a line"),
        ),
        (
            m("m=audio 9 RTP/AVP"),
            syntax(6, "m= line needs at least 4 fields"),
        ),
        (m("m=audio"), syntax(6, "m= line needs at least 4 fields")),
        (
            m("m=audio nine RTP/AVP 0"),
            syntax(6, "m= port is not a number"),
        ),
        (
            m("m=audio +9 RTP/AVP 0"),
            syntax(6, "m= port is not a number"),
        ),
        (
            m("m=audio 65536 RTP/AVP 0"),
            syntax(6, "m= port out of range"),
        ),
        (
            m("m=audio 9/x RTP/AVP 0"),
            syntax(6, "m= port count is not a number"),
        ),
        (
            m("m=audio 9 UDP/TLS/RTP/SAVPF 111 128"),
            syntax(6, "m= payload type must be 0..=127"),
        ),
        (
            m("m=audio 9 UDP/TLS/RTP/SAVPF opus"),
            syntax(6, "m= payload type must be 0..=127"),
        ),
        (
            m("m=audio 9 RTP/AVP 0\r\no=- 1 1 IN IP4 x"),
            syntax(7, "session-level line after m="),
        ),
        (
            m("m=audio 9 RTP/AVP 0\r\nc=IN IP4 x\r\nc=IN IP4 y"),
            syntax(8, "duplicate c= line"),
        ),
    ];
    for (input, expected) in cases {
        assert_eq!(
            SessionDescription::parse(&input),
            Err(expected),
            "{input:?}"
        );
    }
}

#[test]
fn malformed_known_attributes_are_rejected() {
    let cases = [
        (
            "fingerprint:sha-256 AB:CD",
            "fingerprint length does not match its hash function",
        ),
        ("fingerprint:sha-256 ZZ", "bad fingerprint hex"),
        ("fingerprint:sha-1 ABC:DE", "bad fingerprint hex"),
        ("fingerprint:sha-256", "expected <hash-func> <fingerprint>"),
        ("setup:sideways", "unknown setup role"),
        ("setup", "missing value"),
        ("rtpmap:200 opus/48000", "payload type out of range"),
        ("rtpmap:111 opus", "missing clock rate"),
        ("rtpmap:111 opus/fast", "bad clock rate"),
        ("fmtp:", "missing format"),
        ("rtcp-fb:96", "missing feedback type"),
        ("extmap:0 urn:x", "bad extmap id"),
        ("extmap:256 urn:x", "bad extmap id"),
        ("extmap:3/sideways urn:x", "bad extmap direction"),
        ("extmap:3", "missing extension URI"),
        ("ssrc:4294967296 cname:x", "bad ssrc"),
        ("ssrc-group:FID", "ssrc-group without ssrcs"),
        ("ice-ufrag:bad ufrag", "bad ICE credential"),
        ("ice-pwd:", "bad ICE credential"),
        ("mid:", "bad mid"),
        ("candidate:1 1 udp 1 1.2.3.4 70000 typ host", "bad port"),
        ("candidate:1 1 udp 1 1.2.3.4 5 type host", "expected typ"),
        (
            "candidate:1 0 udp 1 1.2.3.4 5 typ host",
            "component out of range",
        ),
        (
            "candidate:1 1 udp 1 1.2.3.4 5 typ host generation",
            "extension without value",
        ),
        (
            "candidate:1 1 udp 1 1.2.3.4 5 typ srflx raddr 1.1.1.1 rport x",
            "bad rport",
        ),
        ("rid:q", "direction must be send or recv"),
        ("simulcast:send", "missing rid list"),
        ("msid:a b c", "too many msid fields"),
        ("sctp-port:99999", "bad sctp-port"),
        ("rtcp:x IN IP4 0.0.0.0", "bad rtcp port"),
    ];
    for (attr, reason) in cases {
        let input = format!("{MINIMAL}m=audio 9 RTP/AVP 0\r\n\r\na={attr}\r\n");
        let name = attr.split(':').next().unwrap().to_string();
        assert_eq!(
            SessionDescription::parse(&input),
            Err(SdpError::Attribute {
                line: 7,
                name,
                reason
            }),
            "{attr}"
        );
    }
}

#[test]
fn size_caps() {
    let big = format!(
        "{MINIMAL}{}",
        "a=x-pad:0123456789\r\n".repeat(MAX_SDP_SIZE / 20)
    );
    assert_eq!(
        SessionDescription::parse(&big),
        Err(SdpError::TooLarge {
            size: big.len(),
            max: MAX_SDP_SIZE
        })
    );
    assert_eq!(
        SessionDescription::parse_bytes(big.as_bytes()),
        Err(SdpError::TooLarge {
            size: big.len(),
            max: MAX_SDP_SIZE
        })
    );
    let long = format!("{MINIMAL}a=x-long:{}\r\n", "y".repeat(MAX_LINE_LEN));
    assert_eq!(
        SessionDescription::parse(&long),
        Err(SdpError::LineTooLong {
            line: 5,
            max: MAX_LINE_LEN
        })
    );
    let many = format!(
        "{MINIMAL}{}",
        "m=audio 9 RTP/AVP 0\r\n".repeat(MAX_MEDIA + 1)
    );
    assert_eq!(
        SessionDescription::parse(&many),
        Err(SdpError::TooManyMedia {
            line: 5 + MAX_MEDIA,
            max: MAX_MEDIA
        })
    );
    let max_ok = format!("{MINIMAL}{}", "m=audio 9 RTP/AVP 0\r\n".repeat(MAX_MEDIA));
    assert_eq!(
        SessionDescription::parse(&max_ok).unwrap().media.len(),
        MAX_MEDIA
    );
    assert_eq!(
        SessionDescription::parse_bytes(b"v=0\xff"),
        Err(SdpError::NotUtf8)
    );
}

#[test]
fn error_messages_name_the_line() {
    let err = SessionDescription::parse(
        "v=0\r\no=- 1 1 IN IP4 x\r\ns=-\r\nt=0 0\r\nm=audio x RTP/AVP 0\r\n",
    )
    .unwrap_err();
    assert_eq!(err.to_string(), "line 5: m= port is not a number");
    let err = SessionDescription::parse(&format!("{MINIMAL}a=setup:x\r\n")).unwrap_err();
    assert_eq!(err.to_string(), "line 5: a=setup: unknown setup role");
}
