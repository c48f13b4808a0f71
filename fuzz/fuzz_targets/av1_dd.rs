#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ferry_rtc::codec::av1::fuzz_dependency_descriptor(data));
