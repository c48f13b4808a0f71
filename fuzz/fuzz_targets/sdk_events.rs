#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ferry_sdk::fuzz::fuzz_events(data));
