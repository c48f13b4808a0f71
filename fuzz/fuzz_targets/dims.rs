#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ferry_rtc::codec::dims::fuzz_dims(data));
