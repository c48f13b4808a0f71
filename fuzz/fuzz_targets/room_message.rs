#![no_main]

// Room replication messages (ops, deltas, sync-tree summaries and watermarks, anti-entropy)
// from another node, and room snapshots (a node's PUT to the scheduler, the scheduler's answer
// to a node's GET): decoding arbitrary bytes is a typed error, never a panic; a decoded message
// re-encodes. And the room WebSocket's binary frames (a client's to its node, a node's to the
// SDK): decoded to their JSON form, which converts back.
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Ok(m) = ferry_room::decode::<ferry_room::Message>(data) {
        let _ = ferry_room::encode(&m);
    }
    let _ = ferry_room::decode::<ferry_room::Op>(data);
    let _ = ferry_room::decode::<ferry_room::Delta>(data);
    if let Ok(room) = ferry_room::RoomId::new("fuzz") {
        let _ = ferry_room::snapshot::check(&room, data);
    }
    let _ = ferry_room::decode::<Vec<ferry_room::snapshot::StoredSnapshot>>(data);
    if let Ok(v) = ferry_proto::room::decode_client(data) {
        let _ = ferry_proto::room::encode_client(&v);
    }
    if let Ok(v) = ferry_proto::room::decode_server(data) {
        let _ = ferry_proto::room::encode_server(&v);
    }
});
