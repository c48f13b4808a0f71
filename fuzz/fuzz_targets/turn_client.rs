#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ferry_rtc::turn::fuzz_turn_client(data));
