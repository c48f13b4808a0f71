#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use proptest::prelude::*;

use super::*;

const CHROME: &str = include_str!("testdata/chrome_offer.sdp");

fn token() -> impl Strategy<Value = String> {
    "[A-Za-z0-9][A-Za-z0-9.+_-]{0,11}"
}

/// Free text: no CR, LF or NUL, and not only whitespace.
fn text() -> impl Strategy<Value = String> {
    "[^\r\n\0]{0,30}".prop_filter("whitespace-only lines are dropped", |s| {
        !s.trim().is_empty()
    })
}

/// Valid examples of attributes the parser checks, plus unknown ones with any value.
fn attribute() -> impl Strategy<Value = Attribute> {
    let known = prop::sample::select(vec![
        Attribute::new("mid", "0"),
        Attribute::new("ice-ufrag", "Kx7q"),
        Attribute::new("ice-pwd", "3hF9tLm2QwErTy8UiOpAsDfG"),
        Attribute::new("ice-options", "trickle ice2"),
        Attribute::flag("ice-lite"),
        Attribute::new("setup", "actpass"),
        Attribute::new("rtpmap", "111 opus/48000/2"),
        Attribute::new("fmtp", "111 minptime=10;useinbandfec=1"),
        Attribute::new("rtcp-fb", "* nack"),
        Attribute::new("extmap", "15/sendonly urn:x attr"),
        Attribute::new("ssrc", "1 cname:x"),
        Attribute::new("ssrc-group", "SIM 1 2 3"),
        Attribute::new("rid", "q send pt=96;max-fps=30"),
        Attribute::new("simulcast", "send q,~h;f recv r"),
        Attribute::new("msid", "- t"),
        Attribute::new("candidate", "1 1 udp 1 192.0.2.1 9 typ host generation 0"),
        Attribute::new("group", "BUNDLE 0 1"),
        Attribute::flag("sendonly"),
        Attribute::flag("end-of-candidates"),
    ]);
    let unknown =
        (token(), prop::option::of("[^\r\n\0]{0,30}")).prop_map(|(name, value)| Attribute {
            name: format!("x-{name}"),
            value,
        });
    prop_oneof![known, unknown]
}

fn connection() -> impl Strategy<Value = Option<Connection>> {
    prop::option::of(
        (token(), token(), token()).prop_map(|(net_type, addr_type, address)| Connection {
            net_type,
            addr_type,
            address,
        }),
    )
}

fn bandwidth() -> impl Strategy<Value = Vec<Bandwidth>> {
    prop::collection::vec(
        (token(), any::<u64>()).prop_map(|(kind, value)| Bandwidth { kind, value }),
        0..3,
    )
}

fn media() -> impl Strategy<Value = MediaDescription> {
    let kind = prop_oneof![
        Just(MediaKind::Audio),
        Just(MediaKind::Video),
        Just(MediaKind::Application),
        Just(MediaKind::Other("text".into())),
    ];
    let rtp = prop::collection::vec((0u8..=127).prop_map(|pt| pt.to_string()), 1..6)
        .prop_map(|f| ("UDP/TLS/RTP/SAVPF".to_string(), f));
    let other = prop::collection::vec(token(), 1..3).prop_map(|f| ("UDP/DTLS/SCTP".to_string(), f));
    (
        kind,
        any::<u16>(),
        prop::option::of(any::<u16>()),
        prop_oneof![rtp, other],
        connection(),
        bandwidth(),
        prop::collection::vec(attribute(), 0..8),
    )
        .prop_map(
            |(kind, port, num_ports, (proto, formats), connection, bandwidth, attributes)| {
                MediaDescription {
                    kind,
                    port,
                    num_ports,
                    proto,
                    formats,
                    connection,
                    bandwidth,
                    attributes,
                }
            },
        )
}

fn session() -> impl Strategy<Value = SessionDescription> {
    (
        (
            token(),
            any::<u64>(),
            any::<u64>(),
            token(),
            token(),
            token(),
        ),
        prop_oneof![Just(String::new()), text()],
        connection(),
        bandwidth(),
        (any::<u64>(), any::<u64>()),
        prop::collection::vec(attribute(), 0..8),
        prop::collection::vec(media(), 0..4),
    )
        .prop_map(
            |(o, session_name, connection, bandwidth, (start, stop), attributes, media)| {
                SessionDescription {
                    origin: Origin {
                        username: o.0,
                        session_id: o.1,
                        session_version: o.2,
                        net_type: o.3,
                        addr_type: o.4,
                        address: o.5,
                    },
                    session_name,
                    connection,
                    bandwidth,
                    timing: Timing { start, stop },
                    attributes,
                    media,
                }
            },
        )
}

const FIREFOX: &str = include_str!("testdata/firefox_offer.sdp");

/// A real offer with lines dropped, replaced by random or near-valid ones, or inserted, so the
/// parser gets deep into its grammar and some mutants still parse.
fn sdp_like() -> impl Strategy<Value = String> {
    let random = prop_oneof![
        "[a-z]=[ -~]{0,40}",
        "m=(audio|video|x) [0-9/]{0,7} (RTP/AVP|[A-Z/]{0,12}) [0-9 ]{0,10}",
        "a=(candidate|rtpmap|fmtp|extmap|simulcast|rid|fingerprint|ssrc|group|setup):[ -~]{0,40}",
        "a=[a-z-]{1,12}(:[ -~]{0,20})?",
    ];
    let edit = prop_oneof![
        97 => Just(None),
        2 => Just(Some(String::new())),
        1 => random.prop_map(Some),
    ];
    let base = prop_oneof![Just(CHROME), Just(FIREFOX)];
    (base, prop::collection::vec(edit, 150), prop::bool::ANY).prop_map(|(base, edits, crlf)| {
        let eol = if crlf { "\r\n" } else { "\n" };
        let mut out = String::new();
        for (i, line) in base.lines().enumerate() {
            // Index 0 (v=0) is never edited so most mutants get past the first check.
            match edits.get(i).filter(|_| i > 0).cloned().flatten() {
                Some(edited) => out.push_str(&edited),
                None => out.push_str(line),
            }
            out.push_str(eol);
        }
        out
    })
}

proptest! {
    #[test]
    fn arbitrary_text_never_panics(s in "\\PC{0,400}") {
        fuzz_sdp(s.as_bytes());
    }

    #[test]
    fn arbitrary_bytes_never_panic(b in prop::collection::vec(any::<u8>(), 0..400)) {
        fuzz_sdp(&b);
    }

    #[test]
    fn sdp_like_text_never_panics_and_round_trips(s in sdp_like()) {
        // fuzz_sdp asserts parse(write(parse(s))) == parse(s) whenever s parses.
        fuzz_sdp(s.as_bytes());
    }

    #[test]
    fn written_descriptions_parse_back(sdp in session()) {
        let written = sdp.to_string();
        prop_assert_eq!(SessionDescription::parse(&written), Ok(sdp));
    }

    #[test]
    fn written_fragments_parse_back(
        attributes in prop::collection::vec(attribute(), 0..6),
        media in prop::collection::vec(media(), 0..3),
    ) {
        let frag = SdpFrag { attributes, media };
        prop_assert_eq!(SdpFrag::parse(&frag.to_string()), Ok(frag));
    }

    #[test]
    fn typed_candidates_round_trip(
        foundation in "[A-Za-z0-9+/]{1,32}",
        component in 1u16..=256,
        priority in any::<u32>(),
        port in any::<u16>(),
        typ in prop::sample::select(vec!["host", "srflx", "prflx", "relay"]),
        related in prop::option::of(("[0-9.]{1,15}", any::<u16>())),
        extensions in prop::collection::vec(("[a-z-]{1,10}", "[A-Za-z0-9]{1,8}"), 0..3),
    ) {
        let (raddr, rport) = related.map_or((None, None), |(a, p)| (Some(a), Some(p)));
        let extensions: Vec<(String, String)> = extensions
            .into_iter()
            .filter(|(k, _)| k != "raddr" && k != "rport")
            .collect();
        let c = Candidate {
            foundation, component, transport: "udp".into(), priority, address: "192.0.2.1".into(),
            port, typ: typ.into(), raddr, rport, extensions,
        };
        prop_assert_eq!(Candidate::parse(&c.to_string()), Ok(c));
    }
}
