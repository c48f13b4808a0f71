#![no_main]

// Room replication messages (ops, deltas, anti-entropy) from another node: decoding arbitrary
// bytes is a typed error, never a panic; a decoded message re-encodes.
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Ok(m) = ferry_room::decode::<ferry_room::Message>(data) {
        let _ = ferry_room::encode(&m);
    }
    let _ = ferry_room::decode::<ferry_room::Op>(data);
    let _ = ferry_room::decode::<ferry_room::Delta>(data);
});
