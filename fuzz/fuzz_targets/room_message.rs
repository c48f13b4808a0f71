#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ferry_room::fuzz::fuzz_message(data));
