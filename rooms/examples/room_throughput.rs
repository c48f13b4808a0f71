//! Rough single-core numbers for docs/rooms.md: `cargo run --release -p ferry-room --example
//! room_throughput`. Not a benchmark gate; speed is never asserted in tests.

use std::time::Instant;

use ferry_room::{
    Command, IdempotencyKey, ParticipantId, Register, Replica, ReplicaConfig, ReplicaId, RoomId,
    Value, encode,
};

fn main() -> anyhow::Result<()> {
    let (a, b) = (ReplicaId::new("node-a")?, ReplicaId::new("node-b")?);
    let room = RoomId::new("bench")?;
    let mut cfg = ReplicaConfig::new(a.clone(), room.clone(), vec![b.clone()]);
    cfg.idempotency_capacity = 1 << 20;
    let mut ra = Replica::new(cfg);
    let mut rb = Replica::new(ReplicaConfig::new(b.clone(), room, vec![a.clone()]));
    let participants = 10_000u64;
    let mut ops = Vec::new();
    let start = Instant::now();
    let mut n = 0u64;
    for i in 0..participants {
        let p = ParticipantId::new(format!("p{i}"))?;
        for cmd in [
            Command::Join {
                participant: p.clone(),
                name: format!("User {i}"),
                metadata: String::new(),
            },
            Command::Set {
                participant: p.clone(),
                register: Register::AudioMuted,
                value: Value::Flag(true),
            },
            Command::Set {
                participant: p,
                register: Register::AudioMuted,
                value: Value::Flag(false),
            },
        ] {
            n += 1;
            let out =
                ra.handle_command(1_000 + n / 10, IdempotencyKey::new(format!("k{n}"))?, cmd)?;
            ops.extend(out.op);
        }
    }
    let cmd_s = start.elapsed().as_secs_f64();
    let start = Instant::now();
    for op in &ops {
        rb.handle_op(2_000_000, op)?;
    }
    let apply_s = start.elapsed().as_secs_f64();
    let mut rc = Replica::new(ReplicaConfig::new(
        ReplicaId::new("node-c")?,
        RoomId::new("bench")?,
        vec![a.clone()],
    ));
    let start = Instant::now();
    let delta = ra.delta_for(&ReplicaId::new("node-c")?);
    let cut_s = start.elapsed().as_secs_f64();
    let start = Instant::now();
    rc.handle_delta(2_000_000, &delta)?;
    let merge_s = start.elapsed().as_secs_f64();
    let start = Instant::now();
    let digest = ra.state().digest();
    let digest_s = start.elapsed().as_secs_f64();
    let op_bytes: usize = ops.iter().map(|o| encode(o).map_or(0, |b| b.len())).sum();
    println!(
        "{participants} participants, {} ops (join + mute + unmute each)",
        ops.len()
    );
    println!(
        "handle_command: {:.0} ops/s; handle_op (remote apply): {:.0} ops/s; mean op {} B encoded",
        ops.len() as f64 / cmd_s,
        ops.len() as f64 / apply_s,
        op_bytes / ops.len()
    );
    println!(
        "full delta: cut {:.1} ms, merge {:.1} ms, {} B encoded; state {} B",
        cut_s * 1e3,
        merge_s * 1e3,
        encode(&delta)?.len(),
        encode(ra.state())?.len()
    );
    println!(
        "digest: {:.1} ms, {} leaves, {} B encoded",
        digest_s * 1e3,
        digest.leaves.len(),
        encode(&digest)?.len()
    );
    Ok(())
}
