//! The source side of one migration: prepare → snapshot → WAL → freeze and
//! cutover → commit, or rollback before commit.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use ferry_proto::NodeId;
use ferry_proto::state::WalRecord;
use prost::Message as _;

use super::finished::Finish;
use super::out::Out;
use super::plan::MigrationPlan;
use crate::SessionHost;
use crate::report::{MigrationReport, Outcome, Phase, PhaseDurations, Role};
use crate::wire::{Abort, Body, Commit, Cutover, Prepare, SnapshotChunk, Wal, chunk_snapshot};

pub(crate) struct Outgoing {
    pub(crate) plan: MigrationPlan,
    phase: SourcePhase,
    started: Instant,
    phase_at: Instant,
    last_heard: Instant,
    retry_at: Instant,
    phases: PhaseDurations,
    /// `Prepare` → `Prepared`, once known.
    rtt: Option<Duration>,
    snapshot_bytes: u64,
    wal_bytes: u64,
    wal_records: u64,
}

enum SourcePhase {
    Preparing,
    Snapshot {
        chunks: Vec<SnapshotChunk>,
        /// Chunks `1..=acked` are acknowledged.
        acked: u32,
        /// Chunks `1..=sent` were sent at least once.
        sent: u32,
    },
    Wal {
        log: WalLog,
        next_take: Instant,
    },
    Cutover {
        frozen_at: Instant,
        sent_at: Instant,
        msg: Cutover,
    },
    Committing {
        commit: Commit,
        first_sent: Instant,
    },
}

/// WAL records taken from the host and not yet acknowledged.
#[derive(Default)]
struct WalLog {
    unacked: VecDeque<(WalRecord, usize)>,
    unacked_bytes: usize,
    /// Highest acknowledged position.
    acked: u64,
    /// Highest position taken from the host.
    taken: u64,
    /// Highest position sent at least once.
    sent: u64,
}

/// The host's WAL does not continue the log: a position is missing or repeated.
#[derive(Debug, thiserror::Error)]
#[error("host WAL jumps from position {from} to {to}")]
struct WalGap {
    /// The last position taken.
    from: u64,
    /// The position the host gave next.
    to: u64,
}

impl WalLog {
    /// Appends records the host produced, which must continue the log
    /// without gaps.
    fn append(&mut self, records: Vec<WalRecord>) -> Result<u64, WalGap> {
        let mut bytes = 0u64;
        for r in records {
            if r.position != self.taken + 1 {
                return Err(WalGap {
                    from: self.taken,
                    to: r.position,
                });
            }
            self.taken = r.position;
            let len = r.encoded_len();
            bytes += len as u64;
            self.unacked_bytes += len;
            self.unacked.push_back((r, len));
        }
        Ok(bytes)
    }

    fn ack(&mut self, position: u64) -> bool {
        if position <= self.acked || position > self.sent {
            return false;
        }
        while let Some((r, len)) = self.unacked.front() {
            if r.position > position {
                break;
            }
            self.unacked_bytes -= len;
            self.unacked.pop_front();
        }
        self.acked = position;
        true
    }

    /// `Wal` messages for the records after `from`, at most `batch` bytes
    /// each (a larger record goes alone).
    fn batches(&self, from: u64, batch: usize) -> Vec<Wal> {
        let mut out = Vec::new();
        let mut cur = Wal::default();
        let mut cur_bytes = 0;
        for (r, len) in self.unacked.iter().filter(|(r, _)| r.position > from) {
            if !cur.records.is_empty() && cur_bytes + len > batch {
                out.push(std::mem::take(&mut cur));
                cur_bytes = 0;
            }
            cur.records.push(r.clone());
            cur_bytes += len;
        }
        if !cur.records.is_empty() {
            out.push(cur);
        }
        out
    }
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

impl Outgoing {
    pub(crate) fn start(now: Instant, plan: MigrationPlan, out: &mut Out<'_>) -> Self {
        let this = Self {
            plan,
            phase: SourcePhase::Preparing,
            rtt: None,
            started: now,
            phase_at: now,
            last_heard: now,
            retry_at: now + out.cfg.retry_interval,
            phases: PhaseDurations::default(),
            snapshot_bytes: 0,
            wal_bytes: 0,
            wal_records: 0,
        };
        let prepare = this.prepare_msg(out.me, out.cfg.snapshot_version);
        out.send(&this.plan.target, &this.plan.id, prepare);
        out.phase(&this.plan.id, Role::Source, Phase::Prepare);
        this
    }

    fn prepare_msg(&self, me: &NodeId, snapshot_version: u32) -> Body {
        Body::Prepare(Prepare {
            session: self.plan.session.clone(),
            stream: self.plan.stream.clone(),
            publisher: self.plan.publisher,
            source: me.clone(),
            target: self.plan.target.clone(),
            epoch: self.plan.epoch,
            mode: self.plan.mode,
            snapshot_version,
            trace_parent: self.plan.trace_parent.clone(),
        })
    }

    pub(crate) fn is_committing(&self) -> bool {
        matches!(self.phase, SourcePhase::Committing { .. })
    }

    /// How long the frozen source waits for `Ready`.
    fn cutover_wait(&self, cfg: &crate::Config) -> Duration {
        match self.rtt {
            Some(rtt) => (rtt * 4)
                .max(cfg.cutover_timeout_min)
                .min(cfg.cutover_timeout),
            None => cfg.cutover_timeout,
        }
    }

    pub(crate) fn next_timeout(&self, cfg: &crate::Config) -> Instant {
        let deadline = match &self.phase {
            SourcePhase::Preparing => self.started + cfg.prepare_timeout,
            SourcePhase::Snapshot { .. } => self.last_heard + cfg.peer_timeout,
            SourcePhase::Wal { next_take, .. } => (self.last_heard + cfg.peer_timeout)
                .min(self.phase_at + cfg.catch_up_max)
                .min(*next_take),
            SourcePhase::Cutover { frozen_at, .. } => *frozen_at + self.cutover_wait(cfg),
            SourcePhase::Committing { first_sent, .. } => *first_sent + cfg.commit_retry_for,
        };
        deadline.min(self.retry_at)
    }

    pub(crate) fn on_message<H: SessionHost>(
        &mut self,
        now: Instant,
        host: &mut H,
        body: Body,
        out: &mut Out<'_>,
    ) -> Option<Finish> {
        self.last_heard = now;
        if let Body::Abort(a) = &body {
            let reason = format!("target aborted: {}", a.reason);
            return Some(match self.phase {
                SourcePhase::Committing { .. } => Finish {
                    outcome: Outcome::Lost,
                    reason: Some(format!("target failed after commit: {}", a.reason)),
                    epoch: self.plan.epoch + 1,
                    reply: Some(self.commit_body()),
                    blackout: None,
                },
                SourcePhase::Preparing => Finish {
                    outcome: Outcome::Refused,
                    ..self.rollback(now, host, reason, false, out)
                },
                _ => self.rollback(now, host, reason, false, out),
            });
        }
        match (&mut self.phase, body) {
            (SourcePhase::Preparing, Body::Prepared(p)) => {
                if !p.ok {
                    return Some(Finish {
                        outcome: Outcome::Refused,
                        reason: Some(format!("target refused: {}", p.reason)),
                        epoch: self.plan.epoch,
                        reply: Some(Body::Abort(Abort { reason: p.reason })),
                        blackout: None,
                    });
                }
                self.phases.set(Phase::Prepare, now - self.phase_at);
                self.rtt = Some(now - self.started);
                self.begin_snapshot(now, host, out)
            }
            (
                SourcePhase::Snapshot {
                    chunks,
                    acked,
                    sent,
                },
                Body::SnapshotAck(a),
            ) => {
                let total = chunks.len() as u32;
                if a.through_seq <= *acked || a.through_seq > *sent {
                    return None;
                }
                *acked = a.through_seq;
                self.retry_at = now + out.cfg.retry_interval;
                if *acked == total {
                    self.phases.set(Phase::Snapshot, now - self.phase_at);
                    return self.begin_wal(now, host, out);
                }
                self.fill_window(out);
                None
            }
            (
                SourcePhase::Snapshot {
                    chunks,
                    acked,
                    sent,
                },
                Body::SnapshotNack(n),
            ) => {
                if n.seq > *acked
                    && n.seq <= *sent
                    && let Some(c) = chunks.get(n.seq as usize - 1)
                {
                    out.send(
                        &self.plan.target,
                        &self.plan.id,
                        Body::SnapshotChunk(c.clone()),
                    );
                }
                None
            }
            (SourcePhase::Wal { log, .. }, Body::WalAck(a)) => {
                if log.ack(a.position) {
                    self.retry_at = now + out.cfg.retry_interval;
                }
                self.pump_wal(now, host, out)
            }
            (
                SourcePhase::Cutover {
                    frozen_at, sent_at, ..
                },
                Body::Ready(_),
            ) => {
                let (frozen_at, rtt) = (*frozen_at, now - *sent_at);
                self.phases.set(Phase::Cutover, now - frozen_at);
                // Past this call the session is released: a failure before
                // it still rolls back.
                if let Err(e) = host.release(now, &self.plan.session, &self.plan.target) {
                    return Some(self.rollback(
                        now,
                        host,
                        format!("release failed: {e}"),
                        true,
                        out,
                    ));
                }
                let commit = Commit {
                    epoch: self.plan.epoch + 1,
                    frozen_us: micros(now - frozen_at),
                    rtt_us: micros(rtt),
                };
                out.send(
                    &self.plan.target,
                    &self.plan.id,
                    Body::Commit(commit.clone()),
                );
                self.phase = SourcePhase::Committing {
                    commit,
                    first_sent: now,
                };
                self.phase_at = now;
                self.retry_at = now + out.cfg.retry_interval;
                out.phase(&self.plan.id, Role::Source, Phase::Commit);
                None
            }
            (SourcePhase::Committing { commit, .. }, Body::Ready(_)) => {
                // Our Commit was lost: the same Commit again.
                out.send(
                    &self.plan.target,
                    &self.plan.id,
                    Body::Commit(commit.clone()),
                );
                None
            }
            (SourcePhase::Committing { .. }, Body::Committed(c)) => {
                self.phases.set(Phase::Commit, now - self.phase_at);
                Some(Finish {
                    outcome: Outcome::Committed,
                    reason: None,
                    epoch: self.plan.epoch + 1,
                    reply: Some(self.commit_body()),
                    blackout: Some(Duration::from_micros(c.blackout_us)),
                })
            }
            // Duplicates and stale answers change nothing.
            _ => None,
        }
    }

    fn commit_body(&self) -> Body {
        match &self.phase {
            SourcePhase::Committing { commit, .. } => Body::Commit(commit.clone()),
            _ => Body::Abort(Abort {
                reason: "not committed".into(),
            }),
        }
    }

    pub(crate) fn on_timeout<H: SessionHost>(
        &mut self,
        now: Instant,
        host: &mut H,
        out: &mut Out<'_>,
    ) -> Option<Finish> {
        let cfg = out.cfg;
        let retry = now >= self.retry_at;
        let cutover_wait = self.cutover_wait(cfg);
        match &mut self.phase {
            SourcePhase::Preparing => {
                if now >= self.started + cfg.prepare_timeout {
                    return Some(self.rollback(now, host, "prepare timed out".into(), true, out));
                }
                if retry {
                    let p = self.prepare_msg(out.me, cfg.snapshot_version);
                    out.send(&self.plan.target, &self.plan.id, p);
                }
            }
            SourcePhase::Snapshot {
                chunks,
                acked,
                sent,
            } => {
                if now >= self.last_heard + cfg.peer_timeout {
                    return Some(self.rollback(
                        now,
                        host,
                        "target silent during snapshot".into(),
                        true,
                        out,
                    ));
                }
                if retry {
                    // Go back: the target keeps chunks that arrived out of
                    // order and acknowledges through the first hole.
                    for c in chunks.iter().take(*sent as usize).skip(*acked as usize) {
                        out.send(
                            &self.plan.target,
                            &self.plan.id,
                            Body::SnapshotChunk(c.clone()),
                        );
                    }
                }
            }
            SourcePhase::Wal { log, next_take } => {
                if now >= self.last_heard + cfg.peer_timeout {
                    return Some(self.rollback(
                        now,
                        host,
                        "target silent during WAL".into(),
                        true,
                        out,
                    ));
                }
                if now >= self.phase_at + cfg.catch_up_max {
                    return self.quiesce(now, host, out);
                }
                if retry && !log.unacked.is_empty() {
                    for w in log.batches(log.acked, cfg.wal_batch_bytes) {
                        out.send(&self.plan.target, &self.plan.id, Body::Wal(w));
                    }
                }
                let take = now >= *next_take;
                if retry {
                    self.retry_at = now + cfg.retry_interval;
                }
                return if take {
                    self.pump_wal(now, host, out)
                } else {
                    None
                };
            }
            SourcePhase::Cutover {
                frozen_at,
                sent_at,
                msg,
            } => {
                if now >= *frozen_at + cutover_wait {
                    return Some(self.rollback(
                        now,
                        host,
                        "no Ready before the cutover timeout".into(),
                        true,
                        out,
                    ));
                }
                if retry {
                    *sent_at = now;
                    out.send(&self.plan.target, &self.plan.id, Body::Cutover(msg.clone()));
                }
            }
            SourcePhase::Committing { commit, first_sent } => {
                if now >= *first_sent + cfg.commit_retry_for {
                    return Some(Finish {
                        outcome: Outcome::Unconfirmed,
                        reason: Some("no Committed from the target".into()),
                        epoch: self.plan.epoch + 1,
                        reply: Some(Body::Commit(commit.clone())),
                        blackout: None,
                    });
                }
                if retry {
                    out.send(
                        &self.plan.target,
                        &self.plan.id,
                        Body::Commit(commit.clone()),
                    );
                }
            }
        }
        if retry {
            self.retry_at = now + cfg.retry_interval;
        }
        None
    }

    fn begin_snapshot<H: SessionHost>(
        &mut self,
        now: Instant,
        host: &mut H,
        out: &mut Out<'_>,
    ) -> Option<Finish> {
        let snapshot = match host.export_snapshot(now, &self.plan.session) {
            Ok(s) => s,
            Err(e) => {
                // Nothing was exported, so nothing to undo here; the target
                // prewarmed and must discard.
                let reason = format!("export failed: {e}");
                out.send(
                    &self.plan.target,
                    &self.plan.id,
                    Body::Abort(Abort {
                        reason: reason.clone(),
                    }),
                );
                return Some(Finish {
                    outcome: Outcome::RolledBack,
                    reason: Some(reason.clone()),
                    epoch: self.plan.epoch,
                    reply: Some(Body::Abort(Abort { reason })),
                    blackout: None,
                });
            }
        };
        let bytes = snapshot.encode_to_vec();
        self.snapshot_bytes = bytes.len() as u64;
        let chunks = chunk_snapshot(&bytes, out.cfg.chunk_size);
        self.phase = SourcePhase::Snapshot {
            chunks,
            acked: 0,
            sent: 0,
        };
        self.phase_at = now;
        self.retry_at = now + out.cfg.retry_interval;
        out.phase(&self.plan.id, Role::Source, Phase::Snapshot);
        self.fill_window(out);
        None
    }

    fn fill_window(&mut self, out: &mut Out<'_>) {
        if let SourcePhase::Snapshot {
            chunks,
            acked,
            sent,
        } = &mut self.phase
        {
            let end = (*acked + out.cfg.snapshot_window.max(1)).min(chunks.len() as u32);
            while *sent < end {
                if let Some(c) = chunks.get(*sent as usize) {
                    out.send(
                        &self.plan.target,
                        &self.plan.id,
                        Body::SnapshotChunk(c.clone()),
                    );
                }
                *sent += 1;
            }
        }
    }

    fn begin_wal<H: SessionHost>(
        &mut self,
        now: Instant,
        host: &mut H,
        out: &mut Out<'_>,
    ) -> Option<Finish> {
        self.phase = SourcePhase::Wal {
            log: WalLog::default(),
            next_take: now,
        };
        self.phase_at = now;
        out.phase(&self.plan.id, Role::Source, Phase::Wal);
        self.pump_wal(now, host, out)
    }

    /// Takes new WAL from the host, sends it, and quiesces once the
    /// unacknowledged rest is small.
    fn pump_wal<H: SessionHost>(
        &mut self,
        now: Instant,
        host: &mut H,
        out: &mut Out<'_>,
    ) -> Option<Finish> {
        let SourcePhase::Wal { log, next_take } = &mut self.phase else {
            return None;
        };
        let records = match host.take_wal(&self.plan.session) {
            Ok(r) => r,
            Err(e) => {
                return Some(self.rollback(now, host, format!("take_wal failed: {e}"), true, out));
            }
        };
        let n = records.len() as u64;
        match log.append(records) {
            Ok(bytes) => {
                self.wal_bytes += bytes;
                self.wal_records += n;
            }
            Err(gap) => return Some(self.rollback(now, host, gap.to_string(), true, out)),
        }
        for w in log.batches(log.sent, out.cfg.wal_batch_bytes) {
            out.send(&self.plan.target, &self.plan.id, Body::Wal(w));
        }
        log.sent = log.taken;
        *next_take = now + out.cfg.wal_interval;
        if log.unacked_bytes <= out.cfg.catch_up_bytes {
            return self.quiesce(now, host, out);
        }
        None
    }

    fn quiesce<H: SessionHost>(
        &mut self,
        now: Instant,
        host: &mut H,
        out: &mut Out<'_>,
    ) -> Option<Finish> {
        let SourcePhase::Wal { log, .. } = &mut self.phase else {
            return None;
        };
        let (final_state, last) = match host.freeze(now, &self.plan.session) {
            Ok(x) => x,
            Err(e) => {
                return Some(self.rollback(now, host, format!("freeze failed: {e}"), true, out));
            }
        };
        let n = last.len() as u64;
        let appended = log.append(last);
        // From here on the session is frozen: any failure resumes it.
        let mut log = std::mem::take(log);
        self.phase = SourcePhase::Cutover {
            frozen_at: now,
            sent_at: now,
            msg: Cutover::default(),
        };
        match appended {
            Ok(bytes) => {
                self.wal_bytes += bytes;
                self.wal_records += n;
            }
            Err(gap) => return Some(self.rollback(now, host, gap.to_string(), true, out)),
        }
        log.sent = log.taken;
        let msg = Cutover {
            final_state: final_state.encode_to_vec(),
            records: log.unacked.into_iter().map(|(r, _)| r).collect(),
            epoch: self.plan.epoch,
        };
        self.wal_bytes += msg.final_state.len() as u64;
        self.phases.set(Phase::Wal, now - self.phase_at);
        out.send(&self.plan.target, &self.plan.id, Body::Cutover(msg.clone()));
        self.phase = SourcePhase::Cutover {
            frozen_at: now,
            sent_at: now,
            msg,
        };
        self.phase_at = now;
        self.retry_at = now + out.cfg.retry_interval;
        out.phase(&self.plan.id, Role::Source, Phase::Cutover);
        None
    }

    /// Undoes the migration before commit: the session continues here.
    fn rollback<H: SessionHost>(
        &mut self,
        now: Instant,
        host: &mut H,
        reason: String,
        tell_target: bool,
        out: &mut Out<'_>,
    ) -> Finish {
        let mut reason = reason;
        let mut outcome = Outcome::RolledBack;
        let mut epoch = self.plan.epoch;
        match self.phase {
            SourcePhase::Preparing => {}
            SourcePhase::Snapshot { .. } | SourcePhase::Wal { .. } => {
                host.cancel_export(now, &self.plan.session);
            }
            SourcePhase::Cutover { .. } | SourcePhase::Committing { .. } => {
                // The target never sent for the session (it only activates on
                // Commit, which was not sent), so resuming reuses no SRTP
                // index; the new epoch fences anything stale.
                epoch += 1;
                if let Err(e) = host.resume(now, &self.plan.session, epoch) {
                    reason = format!("{reason}; resume failed: {e}");
                    outcome = Outcome::Lost;
                }
            }
        }
        let abort = Abort {
            reason: reason.clone(),
        };
        if tell_target {
            out.send(&self.plan.target, &self.plan.id, Body::Abort(abort.clone()));
        }
        Finish {
            outcome,
            reason: Some(reason),
            epoch,
            reply: Some(Body::Abort(abort)),
            blackout: None,
        }
    }

    /// Operator abort: only before `Commit` was sent.
    pub(crate) fn abort<H: SessionHost>(
        &mut self,
        now: Instant,
        host: &mut H,
        reason: String,
        out: &mut Out<'_>,
    ) -> Option<Finish> {
        if self.is_committing() {
            return None;
        }
        Some(self.rollback(now, host, reason, true, out))
    }

    pub(crate) fn report(&self, f: &Finish) -> MigrationReport {
        MigrationReport {
            id: self.plan.id.clone(),
            session: self.plan.session.clone(),
            role: Role::Source,
            peer: self.plan.target.clone(),
            outcome: f.outcome,
            reason: f.reason.clone(),
            epoch: f.epoch,
            phases: self.phases.clone(),
            snapshot_bytes: self.snapshot_bytes,
            wal_bytes: self.wal_bytes,
            wal_records: self.wal_records,
            blackout: f.blackout,
        }
    }
}
