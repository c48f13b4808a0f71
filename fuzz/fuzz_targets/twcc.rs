#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ferry_rtc::twcc::fuzz_twcc(data));
