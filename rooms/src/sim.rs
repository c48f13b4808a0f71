//! Deterministic simulation of one room's replicas over a lossy network.
//!
//! Seeded: clients at random replicas issue random commands (and retries), replicas push ops
//! down their fan-out trees (a chain to a flat broadcast), exchange deltas and acks and run anti-entropy over a network that loses, duplicates
//! and reorders datagrams, with skewed and backwards-stepping wall clocks, and a partition
//! that heals. At the heal, client traffic stops and exactly one anti-entropy round runs; every
//! replica must then have the same digest, and every operation a replica acknowledged to a
//! client must be in the state unless a later acknowledged operation removed it.

// Replicas are addressed by index on both ends of every datagram.
#![allow(clippy::needless_range_loop)]

use std::collections::{BTreeMap, BTreeSet};

use ferry_proto::ids::TrackId;
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::codec::{Message, decode, encode};
use crate::context::Dot;
use crate::ids::{IdempotencyKey, ParticipantId, ReplicaId, RoomId};
use crate::op::{Command, CommandError, Layout, OpKind, Register, TrackKind, Value};
use crate::replica::{Replica, ReplicaConfig};

const TICK_MS: u64 = 5;
const DELTA_EVERY_MS: u64 = 100;
const GC_EVERY_MS: u64 = 500;
const AE_EVERY_MS: u64 = 1_000;

/// What one seeded run measured.
#[derive(Debug, Default, Clone)]
pub(crate) struct Report {
    pub ops_acked: usize,
    pub retries: usize,
    pub refused: usize,
    pub sent: usize,
    pub lost: usize,
    pub duplicated: usize,
    pub cut_by_partition: usize,
    pub clock_refusals: usize,
    pub ae_subtrees_after_heal: usize,
    pub delta_rounds_to_converge: usize,
    pub digest_leaves: usize,
    pub digest_bytes: usize,
    pub state_bytes: usize,
    pub tombstones_before_gc: usize,
    pub participants_present: usize,
    pub replayed: usize,
}

struct Envelope {
    to: usize,
    from: usize,
    bytes: Vec<u8>,
}

struct Net {
    rng: ChaCha8Rng,
    queue: BTreeMap<(u64, u64), Envelope>,
    seq: u64,
    loss: f64,
    dup: f64,
    max_delay_ms: u64,
    /// Side of each replica while partitioned.
    partition: Option<Vec<bool>>,
    /// Every op and delta ever sent, for a final replay of ancient duplicates.
    archive: Vec<Vec<u8>>,
    /// Ops go down push trees of this fan-out ([`crate::fanout`]): a replica passes on an op it
    /// did not have.
    fanout: usize,
}

impl Net {
    fn cut(&self, a: usize, b: usize) -> bool {
        self.partition
            .as_ref()
            .is_some_and(|side| side[a] != side[b])
    }

    fn send(&mut self, now: u64, from: usize, to: usize, msg: &Message, report: &mut Report) {
        report.sent += 1;
        if self.cut(from, to) {
            report.cut_by_partition += 1;
            return;
        }
        if self.rng.random_bool(self.loss) {
            report.lost += 1;
            return;
        }
        let copies = if self.rng.random_bool(self.dup) {
            report.duplicated += 1;
            2
        } else {
            1
        };
        let bytes = encode(msg).unwrap();
        if matches!(msg, Message::Op(_) | Message::Delta(_)) {
            self.archive.push(bytes.clone());
        }
        for _ in 0..copies {
            let at = now + self.rng.random_range(1..=self.max_delay_ms);
            self.seq += 1;
            self.queue.insert(
                (at, self.seq),
                Envelope {
                    to,
                    from,
                    bytes: bytes.clone(),
                },
            );
        }
    }

    fn due(&mut self, now: u64) -> Vec<Envelope> {
        let later = self.queue.split_off(&(now + 1, 0));
        let due = std::mem::replace(&mut self.queue, later);
        due.into_values().collect()
    }
}

struct Client {
    participant: ParticipantId,
    home: usize,
    last: Option<(usize, IdempotencyKey, Command, crate::idempotency::Receipt)>,
}

/// What clients were told: acknowledged operations.
#[derive(Default)]
struct Ledger {
    joins: Vec<(ParticipantId, Dot)>,
    removed: BTreeSet<Dot>,
    chat: Vec<Dot>,
    reactions: i64,
}

fn id<T: std::str::FromStr>(s: &str) -> T
where
    T::Err: std::fmt::Debug,
{
    s.parse().unwrap()
}

/// A random command of `participant`: a join when it is not `present`, else any other kind.
pub(crate) fn random_command(
    rng: &mut ChaCha8Rng,
    participant: ParticipantId,
    present: bool,
) -> Command {
    if !present {
        return Command::Join {
            name: format!("Name {}", rng.random_range(0..100)),
            metadata: String::new(),
            participant,
        };
    }
    let track: TrackId = id(&format!("t{}", rng.random_range(0..3)));
    match rng.random_range(0..100) {
        0..8 => Command::Leave { participant },
        8..38 => Command::Set {
            participant,
            register: if rng.random_bool(0.5) {
                Register::AudioMuted
            } else {
                Register::VideoMuted
            },
            value: Value::Flag(rng.random_bool(0.5)),
        },
        38..46 => Command::Set {
            participant,
            register: Register::HandRaised,
            value: Value::Flag(rng.random_bool(0.5)),
        },
        46..52 => Command::Set {
            participant,
            register: Register::Layout,
            value: Value::Layout(
                [Layout::Grid, Layout::Speaker, Layout::Sidebar][rng.random_range(0..3)],
            ),
        },
        52..60 => Command::Set {
            participant,
            register: Register::Attribute(format!("k{}", rng.random_range(0..3))),
            value: Value::Text(
                rng.random_bool(0.8)
                    .then(|| format!("v{}", rng.random_range(0..9))),
            ),
        },
        60..70 => Command::Publish {
            participant,
            stream: id(&format!("s-{}", rng.random_range(0..3))),
            kind: if rng.random_bool(0.5) {
                TrackKind::Audio
            } else {
                TrackKind::Video
            },
            track,
        },
        70..76 => Command::Unpublish { participant, track },
        76..88 => Command::React {
            participant,
            delta: if rng.random_bool(0.8) { 1 } else { -1 },
        },
        _ => Command::Chat {
            participant,
            text: format!("hello {}", rng.random_range(0..1000)),
        },
    }
}

/// `n` replicas `node-0`… of `room`, each knowing all the others.
pub(crate) fn replicas_of(room: &str, n: usize) -> (Vec<ReplicaId>, Vec<Replica>) {
    let room: RoomId = id(room);
    let ids: Vec<ReplicaId> = (0..n).map(|i| id(&format!("node-{i}"))).collect();
    let replicas = ids
        .iter()
        .map(|me| {
            let peers = ids.iter().filter(|p| *p != me).cloned().collect();
            Replica::new(ReplicaConfig::new(me.clone(), room.clone(), peers))
        })
        .collect();
    (ids, replicas)
}

/// Runs one seed. `Err` names the broken invariant.
pub(crate) fn run(seed: u64) -> Result<Report, String> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let n = rng.random_range(3..=5usize);
    let mut report = Report::default();
    let (ids, mut replicas) = replicas_of("room-1", n);
    let mut skew: Vec<i64> = (0..n).map(|_| rng.random_range(-100..=100)).collect();
    let mut net = Net {
        rng: ChaCha8Rng::seed_from_u64(seed ^ 0x5eed),
        queue: BTreeMap::new(),
        seq: 0,
        loss: rng.random_range(0.0..0.25),
        dup: rng.random_range(0.0..0.10),
        max_delay_ms: rng.random_range(5..=150),
        partition: None,
        archive: Vec::new(),
        // 1: a chain through every replica; n − 1: the origin sends to all.
        fanout: rng.random_range(1..n),
    };
    let mut clients: Vec<Client> = (0..rng.random_range(4..=12))
        .map(|i| Client {
            participant: id(&format!("p{i}")),
            home: rng.random_range(0..n),
            last: None,
        })
        .collect();
    let mut ledger = Ledger::default();
    let mut next_key = 0u64;

    let partition_at = rng.random_range(500..3_000u64);
    let heal_at = partition_at + rng.random_range(500..4_000u64);
    let op_rate = rng.random_range(0.05..0.4);

    let base_ms = 1_700_000_000_000u64;
    let wall = |skew: &[i64], i: usize, t: u64| base_ms.saturating_add_signed(t as i64 + skew[i]);

    let mut t = 0u64;
    while t < heal_at {
        if t == partition_at {
            let mut side: Vec<bool> = (0..n).map(|_| rng.random_bool(0.5)).collect();
            if side.iter().all(|s| *s) || side.iter().all(|s| !*s) {
                side[0] = !side[0];
            }
            net.partition = Some(side);
        }
        // A wall clock occasionally steps back (NTP slew gone wrong), within bounds.
        if rng.random_bool(0.002) {
            let i = rng.random_range(0..n);
            skew[i] = (skew[i] - 150).max(-250);
        }
        for env in net.due(t) {
            if net.cut(env.from, env.to) {
                report.cut_by_partition += 1;
                continue;
            }
            deliver(
                &mut replicas,
                &mut net,
                &mut report,
                wall(&skew, env.to, t),
                t,
                env,
            )?;
        }
        if rng.random_bool(op_rate) {
            let ci = rng.random_range(0..clients.len());
            if rng.random_bool(0.1) {
                clients[ci].home = rng.random_range(0..n);
            }
            let at = clients[ci].home;
            let now = wall(&skew, at, t);
            if let (true, Some((r, key, cmd, receipt))) =
                (rng.random_bool(0.1), clients[ci].last.clone())
            {
                // A retry of the last command with the same key, at the same replica.
                let before = replicas[r].state().digest();
                let out = replicas[r]
                    .handle_command(wall(&skew, r, t), key, cmd)
                    .map_err(|e| format!("retry refused: {e}"))?;
                if out.receipt != receipt
                    || out.op.is_some()
                    || replicas[r].state().digest() != before
                {
                    return Err("a retry with the same key changed something".into());
                }
                report.retries += 1;
            } else {
                let present = replicas[at].state().is_present(&clients[ci].participant);
                let cmd = random_command(&mut rng, clients[ci].participant.clone(), present);
                next_key += 1;
                let key: IdempotencyKey = id(&format!("c{next_key}"));
                match replicas[at].handle_command(now, key.clone(), cmd.clone()) {
                    Ok(out) => {
                        let op = out.op.ok_or("fresh key gave no op")?;
                        report.ops_acked += 1;
                        match &op.kind {
                            OpKind::Join { participant, .. } => {
                                ledger.joins.push((participant.clone(), op.dot.clone()))
                            }
                            OpKind::Leave { removed, .. } | OpKind::Unpublish { removed, .. } => {
                                ledger.removed.extend(removed.iter().cloned())
                            }
                            OpKind::Chat { .. } => ledger.chat.push(op.dot.clone()),
                            OpKind::React { .. } => {
                                if let Command::React { delta, .. } = &cmd {
                                    ledger.reactions += delta;
                                }
                            }
                            _ => {}
                        }
                        for peer in replicas[at].fanout_children(&ids[at], net.fanout) {
                            let peer = index_of(&ids, &peer)?;
                            net.send(t, at, peer, &Message::Op(op.clone()), &mut report);
                        }
                        clients[ci].last = Some((at, key, cmd, out.receipt));
                    }
                    Err(CommandError::UnknownTrack | CommandError::NotInRoom) => {
                        report.refused += 1
                    }
                    Err(e) => return Err(format!("unexpected refusal: {e}")),
                }
            }
        }
        if t.is_multiple_of(DELTA_EVERY_MS) {
            for from in 0..n {
                sync_round(&mut replicas, from, &ids, t, &mut net, &mut report)?;
            }
        }
        if t.is_multiple_of(GC_EVERY_MS) {
            for r in &mut replicas {
                r.collect_garbage();
            }
        }
        if t.is_multiple_of(AE_EVERY_MS) {
            let from = rng.random_range(0..n);
            let to = (from + rng.random_range(1..n)) % n;
            let req = replicas[from].start_anti_entropy();
            net.send(t, from, to, &Message::AeRequest(req), &mut report);
        }
        t += TICK_MS;
    }

    // Heal. Client traffic stops; in-flight datagrams stay in flight for now.
    net.partition = None;
    let now = |skew: &[i64], i: usize| wall(skew, i, t);

    // Measure (on copies) how many reliable delta rounds convergence would take without
    // anti-entropy.
    {
        let mut copy = replicas.clone();
        let mut rounds = 0;
        while !converged(&copy) && rounds < 50 {
            rounds += 1;
            reliable_sync_round(&mut copy, &ids, net.fanout, |i| now(&skew, i))?;
        }
        report.delta_rounds_to_converge = rounds;
    }

    // Exactly one anti-entropy round: every pair once, over a reliable channel, encoded.
    for a in 0..n {
        for b in (a + 1)..n {
            let req = roundtrip(Message::AeRequest(replicas[a].start_anti_entropy()))?;
            let Message::AeRequest(req) = req else {
                unreachable!()
            };
            let reply = replicas[b]
                .handle_ae_request(&req)
                .map_err(|e| e.to_string())?;
            report.ae_subtrees_after_heal += reply.subtrees.len();
            let Message::AeReply(reply) = roundtrip(Message::AeReply(reply))? else {
                unreachable!()
            };
            let fin = replicas[a]
                .handle_ae_reply(now(&skew, a), &reply)
                .map_err(|e| e.to_string())?;
            report.ae_subtrees_after_heal += fin.subtrees.len();
            let Message::AeFinish(fin) = roundtrip(Message::AeFinish(fin))? else {
                unreachable!()
            };
            replicas[b]
                .handle_ae_finish(now(&skew, b), &fin)
                .map_err(|e| e.to_string())?;
        }
    }
    if !converged(&replicas) {
        let roots: Vec<String> = replicas
            .iter()
            .map(|r| format!("{:02x?}", &r.state().digest().root[..4]))
            .collect();
        return Err(format!(
            "digests differ after one anti-entropy round: {roots:?}"
        ));
    }
    check_ledger(&replicas, &ledger)?;
    let view = replicas[0].state().view();
    let digest = replicas[0].state().digest();
    report.digest_leaves = digest.leaves.len();
    report.digest_bytes = encode(&digest).map_err(|e| e.to_string())?.len();
    report.state_bytes = encode(replicas[0].state())
        .map_err(|e| e.to_string())?
        .len();
    report.tombstones_before_gc = replicas[0].state().tombstones();
    report.participants_present = view.participants.len();

    // Late datagrams (stale ops, deltas, duplicates) arrive; then reliable delta rounds make
    // every removal causally stable and GC runs. Nothing visible may change.
    for env in net.due(u64::MAX - 1) {
        let to = env.to;
        deliver(&mut replicas, &mut net, &mut report, now(&skew, to), t, env)?;
    }
    // Deltas up the sync tree and back down (everyone converged), then the summaries up and
    // the watermark down: three times its depth, and a round to start.
    let depth = crate::fanout::depth(n, net.fanout.max(1));
    for _ in 0..3 * depth + 3 {
        reliable_sync_round(&mut replicas, &ids, net.fanout, |i| now(&skew, i))?;
    }
    // And stale copies of everything once more, after collection.
    for env in net.due(u64::MAX - 1) {
        let to = env.to;
        deliver(&mut replicas, &mut net, &mut report, now(&skew, to), t, env)?;
    }
    for r in &replicas {
        if r.state().view() != view {
            return Err(format!(
                "{}: visible state changed after late datagrams + GC",
                r.id()
            ));
        }
        if r.state().tombstones() != 0 {
            return Err(format!(
                "{}: {} tombstones left after everything was acknowledged",
                r.id(),
                r.state().tombstones()
            ));
        }
    }
    if !converged(&replicas) {
        return Err("digests differ after GC".into());
    }
    // Every op and delta ever sent arrives once more, at every replica, after collection:
    // nothing collected may come back.
    let archive = std::mem::take(&mut net.archive);
    report.replayed = archive.len() * n;
    let mut replay_report = Report::default();
    for bytes in &archive {
        for to in 0..n {
            let env = Envelope {
                to,
                from: (to + 1) % n,
                bytes: bytes.clone(),
            };
            deliver(
                &mut replicas,
                &mut net,
                &mut replay_report,
                now(&skew, to),
                t,
                env,
            )?;
        }
    }
    for r in &replicas {
        if r.state().view() != view || r.state().tombstones() != 0 {
            return Err(format!(
                "{}: replayed history resurrected collected entries",
                r.id()
            ));
        }
    }
    if !converged(&replicas) {
        return Err("digests differ after replaying history".into());
    }
    // Replay every acknowledged join's op again: GC must not let it resurrect.
    check_ledger(&replicas, &ledger)?;
    Ok(report)
}

/// Replica `from`'s sync-tree round on the simulated network: deltas to the neighbours that
/// lack something, its summary up, its watermark down (as the node's room server does).
fn sync_round(
    replicas: &mut [Replica],
    from: usize,
    ids: &[ReplicaId],
    t: u64,
    net: &mut Net,
    report: &mut Report,
) -> Result<(), String> {
    let round = replicas[from].sync_round(net.fanout);
    for p in round.parent.iter().map(|(p, _)| p).chain(&round.children) {
        let delta = replicas[from].delta_for(p);
        if !delta.is_empty() {
            net.send(t, from, index_of(ids, p)?, &Message::Delta(delta), report);
        }
    }
    if let Some((p, summary)) = round.parent {
        net.send(
            t,
            from,
            index_of(ids, &p)?,
            &Message::Summary(summary),
            report,
        );
    }
    for c in &round.children {
        let w = Message::Watermark(round.watermark.clone());
        net.send(t, from, index_of(ids, c)?, &w, report);
    }
    Ok(())
}

/// One sync-tree round of every replica over a reliable channel, each message handled at
/// once: deltas and their acks on the tree's edges, summaries up, watermarks down.
fn reliable_sync_round(
    replicas: &mut [Replica],
    ids: &[ReplicaId],
    fanout: usize,
    now: impl Fn(usize) -> u64,
) -> Result<(), String> {
    for from in 0..replicas.len() {
        let round = replicas[from].sync_round(fanout);
        for p in round.parent.iter().map(|(p, _)| p).chain(&round.children) {
            let to = index_of(ids, p)?;
            let delta = replicas[from].delta_for(p);
            let ack = replicas[to]
                .handle_delta(now(to), &delta)
                .map_err(|e| format!("delta refused: {e}"))?;
            replicas[from].handle_ack(&ack);
        }
        if let Some((p, summary)) = &round.parent {
            replicas[index_of(ids, p)?].handle_summary(summary);
        }
        for c in &round.children {
            replicas[index_of(ids, c)?]
                .handle_watermark(&round.watermark)
                .map_err(|e| e.to_string())?;
        }
    }
    Ok(())
}

fn roundtrip(msg: Message) -> Result<Message, String> {
    decode(&encode(&msg).map_err(|e| e.to_string())?).map_err(|e| e.to_string())
}

fn converged(replicas: &[Replica]) -> bool {
    let first = replicas[0].state().digest();
    replicas.iter().all(|r| r.state().digest() == first)
}

fn check_ledger(replicas: &[Replica], ledger: &Ledger) -> Result<(), String> {
    for r in replicas {
        let state = r.state();
        for (p, dot) in &ledger.joins {
            let live = state
                .participant(p)
                .is_some_and(|s| s.joins.contains_key(dot) && !s.removed.contains_key(dot));
            if !live && !ledger.removed.contains(dot) {
                return Err(format!("{}: acknowledged join {dot:?} of {p} lost", r.id()));
            }
            if live && ledger.removed.contains(dot) {
                return Err(format!("{}: removed join {dot:?} of {p} is alive", r.id()));
            }
        }
        let chat: BTreeSet<&Dot> = state.data().chat.keys().map(|c| &c.dot).collect();
        if let Some(lost) = ledger.chat.iter().find(|d| !chat.contains(d)) {
            return Err(format!(
                "{}: acknowledged chat message {lost:?} lost",
                r.id()
            ));
        }
        if state.data().chat.len() != ledger.chat.len() {
            return Err(format!("{}: chat holds unacknowledged messages", r.id()));
        }
        let reactions = state.view().reactions;
        if reactions != ledger.reactions {
            return Err(format!(
                "{}: reactions {reactions}, acknowledged {}",
                r.id(),
                ledger.reactions
            ));
        }
    }
    Ok(())
}

fn index_of(ids: &[ReplicaId], id: &ReplicaId) -> Result<usize, String> {
    ids.iter()
        .position(|x| x == id)
        .ok_or_else(|| format!("{id} is no replica"))
}

fn deliver(
    replicas: &mut [Replica],
    net: &mut Net,
    report: &mut Report,
    now_ms: u64,
    t: u64,
    env: Envelope,
) -> Result<(), String> {
    let msg: Message = decode(&env.bytes).map_err(|e| format!("decode: {e}"))?;
    let (to, from) = (env.to, env.from);
    let ids: Vec<ReplicaId> = replicas.iter().map(|r| r.id().clone()).collect();
    let r = &mut replicas[to];
    let result = match msg {
        Message::Op(op) => match r.handle_pushed_op(now_ms, &op, net.fanout) {
            Ok((_, next)) => {
                for child in next {
                    let child = index_of(&ids, &child)?;
                    net.send(t, to, child, &Message::Op(op.clone()), report);
                }
                Ok(None)
            }
            Err(e) => Err(e),
        },
        Message::Delta(d) => r
            .handle_delta(now_ms, &d)
            .map(|ack| Some(Message::Ack(ack))),
        Message::Ack(a) => {
            r.handle_ack(&a);
            Ok(None)
        }
        Message::AeRequest(q) => r.handle_ae_request(&q).map(|x| Some(Message::AeReply(x))),
        Message::AeReply(x) => r
            .handle_ae_reply(now_ms, &x)
            .map(|f| Some(Message::AeFinish(f))),
        Message::AeFinish(f) => r.handle_ae_finish(now_ms, &f).map(|()| None),
        Message::Subtrees(_) => Ok(None),
        Message::Summary(summary) => {
            r.handle_summary(&summary);
            Ok(None)
        }
        Message::Watermark(w) => r.handle_watermark(&w).map(|()| None),
    };
    match result {
        Ok(Some(reply)) => net.send(t, to, from, &reply, report),
        Ok(None) => {}
        Err(crate::state::SyncError::Clock(_)) => report.clock_refusals += 1,
        Err(e) => return Err(format!("refused: {e}")),
    }
    Ok(())
}

#[test]
fn simulation_converges_after_partition_for_200_seeds() {
    let seeds = 200u64;
    let mut failures = Vec::new();
    let mut total = Report::default();
    let mut max_rounds = 0;
    let mut max_state = 0;
    let mut max_digest = 0;
    for seed in 0..seeds {
        match run(seed) {
            Ok(r) => {
                total.ops_acked += r.ops_acked;
                total.retries += r.retries;
                total.refused += r.refused;
                total.sent += r.sent;
                total.lost += r.lost;
                total.duplicated += r.duplicated;
                total.cut_by_partition += r.cut_by_partition;
                total.clock_refusals += r.clock_refusals;
                total.ae_subtrees_after_heal += r.ae_subtrees_after_heal;
                total.delta_rounds_to_converge += r.delta_rounds_to_converge;
                total.tombstones_before_gc += r.tombstones_before_gc;
                total.replayed += r.replayed;
                max_rounds = max_rounds.max(r.delta_rounds_to_converge);
                max_state = max_state.max(r.state_bytes);
                max_digest = max_digest.max(r.digest_bytes);
            }
            Err(e) => {
                eprintln!("sim seed {seed} FAILED: {e}  (replay: sim::run({seed}))");
                failures.push(seed);
            }
        }
    }
    eprintln!(
        "sim: {seeds} seeds, {} ops acknowledged, {} retries, {} refused; {} datagrams sent, {} lost, \
         {} duplicated, {} cut by partitions, {} clock refusals; one AE round after heal shipped {} \
         subtrees in all; reliable delta rounds to converge without AE: mean {:.2}, max {}; \
         largest state {} B, largest digest {} B; {} tombstones collected at the end; {} stale datagrams replayed after GC",
        total.ops_acked,
        total.retries,
        total.refused,
        total.sent,
        total.lost,
        total.duplicated,
        total.cut_by_partition,
        total.clock_refusals,
        total.ae_subtrees_after_heal,
        total.delta_rounds_to_converge as f64 / seeds as f64,
        max_rounds,
        max_state,
        max_digest,
        total.tombstones_before_gc,
        total.replayed,
    );
    assert!(failures.is_empty(), "failing seeds: {failures:?}");
}

/// Ops alone, on a network that loses nothing, reach every one of 40 replicas down their push
/// trees (fan-out 3: 1 + 3 + 9 + 27, three hops deep): each replica gets each op exactly once, no
/// replica sends one op to more than 3, the farthest is `depth` hops from the origin, and the
/// replicas agree without a delta or anti-entropy.
#[test]
fn ops_alone_reach_every_replica_down_their_trees() {
    let (n, fanout) = (40usize, 3usize);
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let (ids, mut replicas) = replicas_of("big-room", n);
    let mut received = BTreeMap::<(usize, Dot), usize>::new();
    let (mut max_sends, mut max_hops, mut ops) = (0usize, 0usize, 0usize);
    for k in 0..300u64 {
        let at = rng.random_range(0..n);
        let p: ParticipantId = id(&format!("p{}", rng.random_range(0..50)));
        let cmd = if replicas[at].state().is_present(&p) {
            Command::Chat {
                participant: p,
                text: format!("m{k}"),
            }
        } else {
            Command::Join {
                participant: p,
                name: String::new(),
                metadata: String::new(),
            }
        };
        let now = 1_700_000_000_000 + k * 10;
        let out = replicas[at]
            .handle_command(now, id(&format!("k{k}")), cmd)
            .unwrap();
        let op = out.op.unwrap();
        ops += 1;
        // (to, hops) in the order sent: a FIFO network.
        let first = replicas[at].fanout_children(&ids[at], fanout);
        max_sends = max_sends.max(first.len());
        let mut queue: std::collections::VecDeque<(usize, usize)> = first
            .iter()
            .map(|c| (ids.iter().position(|x| x == c).unwrap(), 1))
            .collect();
        while let Some((to, hops)) = queue.pop_front() {
            *received.entry((to, op.dot.clone())).or_default() += 1;
            max_hops = max_hops.max(hops);
            let fresh = !replicas[to].state().context().covers(&op.dot);
            assert!(fresh, "{} got {:?} twice", ids[to], op.dot);
            let (_, next) = replicas[to]
                .handle_pushed_op(now + hops as u64, &op, fanout)
                .unwrap();
            max_sends = max_sends.max(next.len());
            queue.extend(
                next.iter()
                    .map(|c| (ids.iter().position(|x| x == c).unwrap(), hops + 1)),
            );
        }
    }
    assert_eq!(
        received.len(),
        ops * (n - 1),
        "every replica but the origin got every op"
    );
    assert!(received.values().all(|c| *c == 1));
    assert!(max_sends <= fanout, "a replica sent one op to {max_sends}");
    assert_eq!(max_hops, crate::fanout::depth(n, fanout));
    assert!(
        converged(&replicas),
        "the replicas differ after the ops alone"
    );
}

/// 40 replicas, sync tree of fan-out 3 (depth 3), reliable rounds: a replica sends at most
/// 3 children + 1 parent deltas, 1 summary and 3 watermarks a round (all pairs: 39 deltas and
/// 39 acks), and a leave's tombstone is collected at every replica within `3·depth + 3` rounds.
#[test]
fn the_sync_tree_converges_and_collects_with_a_bounded_fan_out() {
    let (n, fanout) = (40usize, 3usize);
    let (ids, mut replicas) = replicas_of("big-room", n);
    let alice: ParticipantId = id("alice");
    let key = |s: &str| -> IdempotencyKey { id(s) };
    let join = Command::Join {
        participant: alice.clone(),
        name: "Alice".into(),
        metadata: String::new(),
    };
    // Joined at the last replica (a leaf), left at the 20th: no pushes, deltas only.
    replicas[n - 1]
        .handle_command(1_000, key("k1"), join)
        .unwrap();
    let mut rounds = 0;
    while !replicas[19].state().is_present(&alice) {
        reliable_sync_round(&mut replicas, &ids, fanout, |_| 2_000).unwrap();
        rounds += 1;
        assert!(rounds <= 10, "the join did not reach replica 19");
    }
    replicas[19]
        .handle_command(
            3_000,
            key("k2"),
            Command::Leave {
                participant: alice.clone(),
            },
        )
        .unwrap();
    let depth = crate::fanout::depth(n, fanout);
    assert_eq!(depth, 3);
    for _ in 0..3 * depth + 3 {
        for r in &mut replicas {
            let round = r.sync_round(fanout);
            assert!(round.children.len() <= fanout);
        }
        reliable_sync_round(&mut replicas, &ids, fanout, |_| 4_000).unwrap();
    }
    for r in &replicas {
        assert!(!r.state().is_present(&alice), "{}", r.id());
        assert_eq!(r.state().tombstones(), 0, "{}: tombstone left", r.id());
        assert!(r.state().participant(&alice).is_none(), "{}", r.id());
    }
    assert!(converged(&replicas));
}
