#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ferry_rtc::codec::vp9::fuzz_vp9(data));
