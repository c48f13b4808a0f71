#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ferry_rtc::codec::fuzz::fuzz_vp9(data));
