#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ferry_record::fuzz::fuzz_record(data));
