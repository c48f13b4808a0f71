//! Fuzz target bodies (feature `fuzzing`): what the SDK reads from the network besides media
//! (the session's server-sent events, `Location` headers). The `fuzz/` crate wraps them in
//! libFuzzer targets; the bodies compile with the crate so they cannot rot.

/// Arbitrary bytes as server-sent event data (for each event name the SDK reads), as a whole
/// event stream line, and as a `Location` relative to an endpoint. Must never panic.
pub fn fuzz_events(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    for name in ["migrate", "ticket", "end", "turn-drain", "other"] {
        let _ = crate::signalling::session_event(name, text);
    }
    let (name, rest) = text.split_once('\n').unwrap_or((text, ""));
    let _ = crate::signalling::session_event(name, rest);
    let _ = crate::signalling::resolve("http://127.0.0.1:8080/whep/cam", text);
    let _ = crate::signalling::origin(text);
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    ferry_testkit::replay_test!(
        "sdk_events",
        "ferry_sdk::fuzz::fuzz_events",
        super::fuzz_events
    );

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn event_data_never_panics(data in proptest::collection::vec(any::<u8>(), 0..400)) {
            super::fuzz_events(&data);
        }

        #[test]
        fn json_shaped_events_never_panic(mode in "[a-z-]{0,12}", loc in "\\PC{0,40}", t in "\\PC{0,20}") {
            let data = format!(r#"{{"mode":"{mode}","target":"n","location":"{loc}","ticket":"{t}"}}"#);
            super::fuzz_events(data.as_bytes());
        }
    }
}
