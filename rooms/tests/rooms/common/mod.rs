#![allow(dead_code, clippy::unwrap_used)]

use ferry_room::{
    Command, IdempotencyKey, ParticipantId, Register, Replica, ReplicaConfig, ReplicaId, RoomId,
    TrackKind, Value,
};

pub fn rid(s: &str) -> ReplicaId {
    ReplicaId::new(s).unwrap()
}

pub fn pid(s: &str) -> ParticipantId {
    ParticipantId::new(s).unwrap()
}

pub fn key(s: &str) -> IdempotencyKey {
    IdempotencyKey::new(s).unwrap()
}

pub fn room() -> RoomId {
    RoomId::new("room-1").unwrap()
}

/// `n` replicas `r0..` of `room-1`, all peers of each other.
pub fn replicas(n: usize) -> Vec<Replica> {
    let ids: Vec<ReplicaId> = (0..n).map(|i| rid(&format!("r{i}"))).collect();
    ids.iter()
        .map(|me| {
            let peers = ids.iter().filter(|p| *p != me).cloned().collect();
            Replica::new(ReplicaConfig::new(me.clone(), room(), peers))
        })
        .collect()
}

pub fn join(p: &str) -> Command {
    Command::Join {
        participant: pid(p),
        name: p.to_uppercase(),
        metadata: String::new(),
    }
}

pub fn leave(p: &str) -> Command {
    Command::Leave {
        participant: pid(p),
    }
}

pub fn mute(p: &str, on: bool) -> Command {
    Command::Set {
        participant: pid(p),
        register: Register::AudioMuted,
        value: Value::Flag(on),
    }
}

pub fn publish(p: &str, track: &str) -> Command {
    Command::Publish {
        participant: pid(p),
        track: track.parse().unwrap(),
        stream: format!("s-{p}").parse().unwrap(),
        kind: TrackKind::Video,
    }
}

/// A small universe of commands, picked by number, for property tests.
pub fn command(choice: u8, p: u8) -> Command {
    let p = format!("p{}", p % 4);
    match choice % 10 {
        0 | 1 => join(&p),
        2 => leave(&p),
        3 => mute(&p, choice.is_multiple_of(3)),
        4 => Command::Set {
            participant: pid(&p),
            register: Register::Attribute(format!("k{}", choice % 2)),
            value: Value::Text((!choice.is_multiple_of(5)).then(|| format!("v{choice}"))),
        },
        5 => publish(&p, &format!("t{}", choice % 2)),
        6 => Command::Unpublish {
            participant: pid(&p),
            track: format!("t{}", choice % 2).parse().unwrap(),
        },
        7 => Command::React {
            participant: pid(&p),
            delta: if choice.is_multiple_of(4) { -1 } else { 1 },
        },
        8 => Command::Chat {
            participant: pid(&p),
            text: format!("m{choice}"),
        },
        _ => Command::Set {
            participant: pid(&p),
            register: Register::HandRaised,
            value: Value::Flag(choice.is_multiple_of(2)),
        },
    }
}
