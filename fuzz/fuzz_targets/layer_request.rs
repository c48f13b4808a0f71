#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ferry_sfu::fuzz::fuzz_layer_request(data));
