//! The fuzz target body (feature `fuzzing`) of room replication and the room WebSocket: the
//! `fuzz/` crate's `room_message` target wraps it, the corpus replay in `tests/` runs it.

/// Room replication messages (ops, deltas, sync-tree summaries and watermarks, anti-entropy)
/// from another node, and room snapshots (a node's PUT to the scheduler, the scheduler's answer
/// to a node's GET): decoding arbitrary bytes is a typed error, never a panic; a decoded message
/// re-encodes. And the room WebSocket's binary frames (a client's to its node, a node's to the
/// SDK): decoded to their JSON form, which converts back.
pub fn fuzz_message(data: &[u8]) {
    if let Ok(m) = crate::decode::<crate::Message>(data) {
        let _ = crate::encode(&m);
    }
    let _ = crate::decode::<crate::Op>(data);
    let _ = crate::decode::<crate::Delta>(data);
    if let Ok(room) = crate::RoomId::new("fuzz") {
        let _ = crate::snapshot::check(&room, data);
    }
    let _ = crate::decode::<Vec<crate::snapshot::StoredSnapshot>>(data);
    if let Ok(v) = ferry_proto::room::decode_client(data) {
        let _ = ferry_proto::room::encode_client(&v);
    }
    if let Ok(v) = ferry_proto::room::decode_server(data) {
        let _ = ferry_proto::room::encode_server(&v);
    }
}

#[cfg(test)]
mod tests {
    ferry_testkit::replay_test!(
        "room_message",
        "ferry_room::fuzz::fuzz_message",
        super::fuzz_message
    );
}
