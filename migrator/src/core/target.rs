//! The target side of one migration: prewarm → import the snapshot → apply
//! WAL → install the final state (inactive) → activate on `Commit`, or
//! discard on abort.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use ferry_proto::state::{SessionSnapshot, WalRecord};
use ferry_proto::{MigrationId, NodeId};
use prost::Message as _;

use super::finished::Finish;
use super::out::Out;
use crate::SessionHost;
use crate::report::{MigrationReport, Outcome, Phase, PhaseDurations, Role};
use crate::wire::{
    Abort, Body, Committed, Cutover, MAX_CHUNK, Prepare, Prepared, Ready, SnapshotAck,
    SnapshotChunk, SnapshotNack, WalAck, decode_snapshot,
};

pub(crate) struct Incoming {
    pub(crate) id: MigrationId,
    pub(crate) prepare: Prepare,
    phase: TargetPhase,
    phase_at: Instant,
    last_heard: Instant,
    retry_at: Instant,
    /// Highest WAL position applied.
    applied: u64,
    phases: PhaseDurations,
    snapshot_bytes: u64,
    wal_bytes: u64,
    wal_records: u64,
}

enum TargetPhase {
    /// Prewarmed; chunks arriving.
    Snapshot {
        total: u32,
        chunks: BTreeMap<u32, Vec<u8>>,
        /// Chunks `1..=through` are held.
        through: u32,
        started: bool,
    },
    /// Snapshot imported; WAL being applied.
    Wal,
    /// Final state installed, inactive; waiting for `Commit`.
    Ready,
}

impl Incoming {
    /// Handles a new `Prepare`: checks it and prewarms. `Err` is the refusal
    /// to record (already sent).
    pub(crate) fn accept<H: SessionHost>(
        now: Instant,
        host: &mut H,
        id: MigrationId,
        from: &NodeId,
        prepare: Prepare,
        out: &mut Out<'_>,
    ) -> Result<Self, Box<Finish>> {
        let refuse = |reason: String, out: &mut Out<'_>| {
            let reply = Body::Prepared(Prepared {
                ok: false,
                reason: reason.clone(),
            });
            out.send(from, &id, reply.clone());
            Box::new(Finish {
                outcome: Outcome::Refused,
                reason: Some(reason),
                epoch: prepare.epoch,
                reply: Some(reply),
                blackout: None,
            })
        };
        if &prepare.target != out.me {
            return Err(refuse(
                format!("this is {}, not {}", out.me, prepare.target),
                out,
            ));
        }
        if &prepare.source != from {
            return Err(refuse(
                format!(
                    "Prepare names source {} but came from {from}",
                    prepare.source
                ),
                out,
            ));
        }
        if prepare.snapshot_version > out.cfg.snapshot_version {
            return Err(refuse(
                format!(
                    "snapshot version {} is newer than {} read here",
                    prepare.snapshot_version, out.cfg.snapshot_version
                ),
                out,
            ));
        }
        if let Err(e) = host.prewarm(now, &prepare.session, &prepare.stream, prepare.publisher) {
            return Err(refuse(format!("prewarm failed: {e}"), out));
        }
        out.send(
            from,
            &id,
            Body::Prepared(Prepared {
                ok: true,
                reason: String::new(),
            }),
        );
        out.accepted(&id, &prepare);
        out.phase(&id, Role::Target, Phase::Prepare);
        Ok(Self {
            id,
            prepare,
            phase: TargetPhase::Snapshot {
                total: 0,
                chunks: BTreeMap::new(),
                through: 0,
                started: false,
            },
            phase_at: now,
            last_heard: now,
            retry_at: now,
            applied: 0,
            phases: PhaseDurations::default(),
            snapshot_bytes: 0,
            wal_bytes: 0,
            wal_records: 0,
        })
    }

    pub(crate) fn source(&self) -> &NodeId {
        &self.prepare.source
    }

    pub(crate) fn is_ready(&self) -> bool {
        matches!(self.phase, TargetPhase::Ready)
    }

    pub(crate) fn next_timeout(&self, cfg: &crate::Config) -> Instant {
        match self.phase {
            TargetPhase::Ready => (self.phase_at + cfg.commit_wait).min(self.retry_at),
            _ => self.last_heard + cfg.idle_timeout,
        }
    }

    pub(crate) fn on_message<H: SessionHost>(
        &mut self,
        now: Instant,
        host: &mut H,
        body: Body,
        out: &mut Out<'_>,
    ) -> Option<Finish> {
        self.last_heard = now;
        match body {
            Body::Prepare(_) => {
                // Our Prepared was lost.
                self.send(
                    out,
                    Body::Prepared(Prepared {
                        ok: true,
                        reason: String::new(),
                    }),
                );
                None
            }
            Body::SnapshotChunk(c) => self.on_chunk(now, host, c, out),
            Body::Wal(w) => {
                if matches!(self.phase, TargetPhase::Snapshot { .. }) {
                    return None;
                }
                if !self.is_ready()
                    && let Err(e) = self.apply(now, host, &w.records)
                {
                    return Some(self.abort(host, now, e.to_string(), out));
                }
                self.send(
                    out,
                    Body::WalAck(WalAck {
                        position: self.applied,
                    }),
                );
                None
            }
            Body::Cutover(c) => match self.phase {
                TargetPhase::Snapshot { .. } => None,
                TargetPhase::Wal => self.on_cutover(now, host, c, out),
                TargetPhase::Ready => {
                    self.send(
                        out,
                        Body::Ready(Ready {
                            position: self.applied,
                        }),
                    );
                    None
                }
            },
            Body::Commit(c) => {
                if !self.is_ready() || c.epoch != self.prepare.epoch + 1 {
                    return None;
                }
                self.phases.set(Phase::Commit, now - self.phase_at);
                if let Err(e) = host.activate(now, &self.prepare.session, c.epoch) {
                    // Past the point of no return: the source let go, so the
                    // session is lost. Free what was installed.
                    host.discard(now, &self.prepare.session);
                    let reason = format!("activate failed: {e}");
                    let reply = Body::Abort(Abort {
                        reason: reason.clone(),
                    });
                    self.send(out, reply.clone());
                    return Some(Finish {
                        outcome: Outcome::Lost,
                        reason: Some(reason),
                        epoch: self.prepare.epoch,
                        reply: Some(reply),
                        blackout: None,
                    });
                }
                // The source froze `frozen_us` before sending Commit, which
                // then took about half a round trip to get here.
                let blackout_us = c.frozen_us.saturating_add(c.rtt_us / 2);
                let reply = Body::Committed(Committed {
                    epoch: c.epoch,
                    blackout_us,
                });
                self.send(out, reply.clone());
                Some(Finish {
                    outcome: Outcome::Committed,
                    reason: None,
                    epoch: c.epoch,
                    reply: Some(reply),
                    blackout: Some(Duration::from_micros(blackout_us)),
                })
            }
            Body::Abort(a) => {
                host.discard(now, &self.prepare.session);
                let reason = format!("source aborted: {}", a.reason);
                Some(Finish {
                    outcome: Outcome::RolledBack,
                    reason: Some(reason.clone()),
                    epoch: self.prepare.epoch,
                    reply: Some(Body::Abort(Abort { reason })),
                    blackout: None,
                })
            }
            _ => None,
        }
    }

    pub(crate) fn on_timeout<H: SessionHost>(
        &mut self,
        now: Instant,
        host: &mut H,
        out: &mut Out<'_>,
    ) -> Option<Finish> {
        match self.phase {
            TargetPhase::Ready => {
                if now >= self.phase_at + out.cfg.commit_wait {
                    return Some(self.abort(host, now, "no Commit from the source".into(), out));
                }
                if now >= self.retry_at {
                    self.retry_at = now + out.cfg.retry_interval;
                    self.send(
                        out,
                        Body::Ready(Ready {
                            position: self.applied,
                        }),
                    );
                }
                None
            }
            _ if now >= self.last_heard + out.cfg.idle_timeout => {
                Some(self.abort(host, now, "source silent".into(), out))
            }
            _ => None,
        }
    }

    fn on_chunk<H: SessionHost>(
        &mut self,
        now: Instant,
        host: &mut H,
        c: SnapshotChunk,
        out: &mut Out<'_>,
    ) -> Option<Finish> {
        let TargetPhase::Snapshot {
            total,
            chunks,
            through,
            started,
        } = &mut self.phase
        else {
            // Imported already: the final ack was lost.
            let through_seq = c.total;
            self.send(out, Body::SnapshotAck(SnapshotAck { through_seq }));
            return None;
        };
        let max_chunks = out.cfg.max_snapshot_bytes.div_ceil(MAX_CHUNK).max(1);
        if c.total == 0
            || c.total as usize > max_chunks
            || (*total != 0 && c.total != *total)
            || c.seq == 0
            || c.seq > c.total
        {
            let reason = format!("bad chunk {}/{} (expected total {total})", c.seq, c.total);
            return Some(self.abort(host, now, reason, out));
        }
        if !*started {
            *started = true;
            self.phases.set(Phase::Prepare, now - self.phase_at);
            self.phase_at = now;
            out.phase(&self.id, Role::Target, Phase::Snapshot);
        }
        *total = c.total;
        if !c.is_intact() {
            let seq = c.seq;
            self.send(out, Body::SnapshotNack(SnapshotNack { seq }));
            return None;
        }
        if c.seq > *through {
            chunks.entry(c.seq).or_insert(c.bytes);
            while chunks.contains_key(&(*through + 1)) {
                *through += 1;
            }
        }
        let (through_seq, done) = (*through, *through == *total);
        if done {
            let bytes: Vec<u8> = std::mem::take(chunks).into_values().flatten().collect();
            self.snapshot_bytes = bytes.len() as u64;
            if let Err(e) = self.import(now, host, &bytes, out.cfg.snapshot_version) {
                return Some(self.abort(host, now, e.to_string(), out));
            }
            self.phases.set(Phase::Snapshot, now - self.phase_at);
            self.phase = TargetPhase::Wal;
            self.phase_at = now;
            out.phase(&self.id, Role::Target, Phase::Wal);
        }
        self.send(out, Body::SnapshotAck(SnapshotAck { through_seq }));
        None
    }

    fn decode(&self, bytes: &[u8], max_version: u32) -> Result<SessionSnapshot, TargetError> {
        let snap = decode_snapshot(bytes, max_version)?;
        if snap.session_id != self.prepare.session.as_str() {
            return Err(TargetError::WrongSession {
                got: snap.session_id,
                want: self.prepare.session.to_string(),
            });
        }
        Ok(snap)
    }

    fn import<H: SessionHost>(
        &mut self,
        now: Instant,
        host: &mut H,
        bytes: &[u8],
        max_version: u32,
    ) -> Result<(), TargetError> {
        let snap = self.decode(bytes, max_version)?;
        host.import_snapshot(now, snap)
            .map_err(|e| TargetError::Import(e.to_string()))
    }

    /// Applies the records that continue the applied WAL; a batch that starts
    /// past a hole is dropped (the source resends from the acknowledged
    /// position).
    fn apply<H: SessionHost>(
        &mut self,
        now: Instant,
        host: &mut H,
        records: &[WalRecord],
    ) -> Result<(), TargetError> {
        let mut fresh: Vec<WalRecord> = Vec::new();
        let mut next = self.applied + 1;
        for r in records {
            if r.position < next {
                continue;
            }
            if r.position != next {
                break;
            }
            fresh.push(r.clone());
            next += 1;
        }
        if fresh.is_empty() {
            return Ok(());
        }
        host.apply_wal(now, &self.prepare.session, &fresh)
            .map_err(|e| TargetError::ApplyWal(e.to_string()))?;
        self.applied = next - 1;
        self.wal_records += fresh.len() as u64;
        self.wal_bytes += fresh.iter().map(|r| r.encoded_len() as u64).sum::<u64>();
        Ok(())
    }

    fn on_cutover<H: SessionHost>(
        &mut self,
        now: Instant,
        host: &mut H,
        c: Cutover,
        out: &mut Out<'_>,
    ) -> Option<Finish> {
        self.phases.set(Phase::Wal, now - self.phase_at);
        self.phase_at = now;
        out.phase(&self.id, Role::Target, Phase::Cutover);
        if c.epoch != self.prepare.epoch {
            let reason = format!(
                "cutover at epoch {}, prepared at {}",
                c.epoch, self.prepare.epoch
            );
            return Some(self.abort(host, now, reason, out));
        }
        if let Err(e) = self.apply(now, host, &c.records) {
            return Some(self.abort(host, now, e.to_string(), out));
        }
        if let Some(last) = c.records.last()
            && last.position > self.applied
        {
            let reason = format!("WAL hole before position {}", self.applied + 1);
            return Some(self.abort(host, now, reason, out));
        }
        self.wal_bytes += c.final_state.len() as u64;
        let installed = self
            .decode(&c.final_state, out.cfg.snapshot_version)
            .and_then(|s| {
                host.install_final(now, s)
                    .map_err(|e| TargetError::InstallFinal(e.to_string()))
            });
        if let Err(e) = installed {
            return Some(self.abort(host, now, e.to_string(), out));
        }
        self.phases.set(Phase::Cutover, now - self.phase_at);
        self.phase = TargetPhase::Ready;
        self.phase_at = now;
        self.retry_at = now + out.cfg.retry_interval;
        self.send(
            out,
            Body::Ready(Ready {
                position: self.applied,
            }),
        );
        out.phase(&self.id, Role::Target, Phase::Commit);
        None
    }

    /// Gives up before activation: forgets the session and tells the source.
    pub(crate) fn abort<H: SessionHost>(
        &mut self,
        host: &mut H,
        now: Instant,
        reason: String,
        out: &mut Out<'_>,
    ) -> Finish {
        host.discard(now, &self.prepare.session);
        let reply = Body::Abort(Abort {
            reason: reason.clone(),
        });
        self.send(out, reply.clone());
        Finish {
            outcome: Outcome::RolledBack,
            reason: Some(reason),
            epoch: self.prepare.epoch,
            reply: Some(reply),
            blackout: None,
        }
    }

    fn send(&self, out: &mut Out<'_>, body: Body) {
        out.send(&self.prepare.source, &self.id, body);
    }

    pub(crate) fn report(&self, f: &Finish) -> MigrationReport {
        MigrationReport {
            id: self.id.clone(),
            session: self.prepare.session.clone(),
            role: Role::Target,
            peer: self.prepare.source.clone(),
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

/// Why the target gives up on what the source sent: the reason its abort carries.
#[derive(Debug, thiserror::Error)]
enum TargetError {
    /// The snapshot does not decode (or is of a newer version).
    #[error("snapshot: {0}")]
    Decode(#[from] crate::wire::WireError),
    /// The snapshot is of another session than the one prepared.
    #[error("snapshot is of session {got:?}, not {want}")]
    WrongSession {
        /// The snapshot's session.
        got: String,
        /// The prepared session.
        want: String,
    },
    /// The host refused the snapshot.
    #[error("import failed: {0}")]
    Import(String),
    /// The host refused WAL records.
    #[error("apply_wal failed: {0}")]
    ApplyWal(String),
    /// The host refused the final state.
    #[error("install_final failed: {0}")]
    InstallFinal(String),
}
