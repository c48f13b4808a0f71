//! The migration protocol core: one [`Migrator`] per node, pure (no clock,
//! no IO, no tasks). It drives the node's [`SessionHost`] directly and
//! hands messages, events and timeouts to its driver.

mod finished;
mod out;
mod plan;
mod source;
mod target;

use std::collections::{HashMap, VecDeque};
use std::time::Instant;

use ferry_proto::{MigrationId, NodeId, SessionId};

use crate::SessionHost;
use crate::config::Config;
use crate::report::{MigrationEvent, Outcome, Role};
use crate::wire::{Abort, Body, Message};
use finished::{Finish, FinishedLog};
use out::Out;
pub use plan::MigrationPlan;
use source::Outgoing;
use target::Incoming;

/// Why [`Migrator::start`] refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// The target is this node.
    #[error("cannot migrate a session to the node it is on")]
    SelfTarget,
    /// The ID is in use (running or recently finished).
    #[error("migration {0} exists already")]
    DuplicateId(MigrationId),
    /// The session is being migrated (from or to here).
    #[error("session {0} is already migrating")]
    Busy(SessionId),
}

/// Why [`Migrator::abort`] refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AbortError {
    /// No such running migration here.
    #[error("no running migration {0}")]
    Unknown(MigrationId),
    /// Past the point where this node may undo it (source: `Commit` sent;
    /// target: `Ready`, the source may have committed).
    #[error("migration {0} is past its commit point")]
    TooLate(MigrationId),
}

/// One node's migration protocol engine, source and target side at once.
///
/// Drive it like any Ferry core: feed [`Migrator::start`],
/// [`Migrator::handle_message`] and [`Migrator::handle_timeout`] with the
/// current time and the node's [`SessionHost`]; after each, drain
/// [`Migrator::poll_transmit`] (to the transport) and
/// [`Migrator::poll_event`], and arm a timer at [`Migrator::poll_timeout`].
#[derive(Debug)]
pub struct Migrator {
    me: NodeId,
    cfg: Config,
    outgoing: HashMap<MigrationId, Outgoing>,
    incoming: HashMap<MigrationId, Incoming>,
    finished: FinishedLog,
    transmits: VecDeque<(NodeId, Message)>,
    events: VecDeque<MigrationEvent>,
}

impl std::fmt::Debug for Outgoing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Outgoing")
            .field("plan", &self.plan)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for Incoming {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Incoming")
            .field("id", &self.id)
            .field("prepare", &self.prepare)
            .finish_non_exhaustive()
    }
}

impl Migrator {
    /// The engine of node `me`.
    pub fn new(me: NodeId, cfg: Config) -> Self {
        let finished = FinishedLog::new(cfg.finished_capacity);
        Self {
            me,
            cfg,
            outgoing: HashMap::new(),
            incoming: HashMap::new(),
            finished,
            transmits: VecDeque::new(),
            events: VecDeque::new(),
        }
    }

    /// This node.
    pub fn node(&self) -> &NodeId {
        &self.me
    }

    /// Its configuration.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Migrations running here (either side).
    pub fn running(&self) -> usize {
        self.outgoing.len() + self.incoming.len()
    }

    /// Whether `id` is running here.
    pub fn is_running(&self, id: &MigrationId) -> bool {
        self.outgoing.contains_key(id) || self.incoming.contains_key(id)
    }

    /// The outcome of a recently finished migration, if remembered.
    pub fn outcome(&self, id: &MigrationId) -> Option<Outcome> {
        self.finished.get(id).map(|r| r.outcome)
    }

    fn busy(&self, session: &SessionId) -> bool {
        self.outgoing.values().any(|o| &o.plan.session == session)
            || self
                .incoming
                .values()
                .any(|i| &i.prepare.session == session)
    }

    fn out(
        &mut self,
    ) -> (
        Out<'_>,
        &mut HashMap<MigrationId, Outgoing>,
        &mut HashMap<MigrationId, Incoming>,
    ) {
        (
            Out::new(&self.cfg, &self.me, &mut self.transmits, &mut self.events),
            &mut self.outgoing,
            &mut self.incoming,
        )
    }

    /// Source side: starts moving `plan.session` to `plan.target`. The host
    /// is not called until the target has prewarmed.
    pub fn start<H: SessionHost>(
        &mut self,
        now: Instant,
        _host: &mut H,
        plan: MigrationPlan,
    ) -> Result<(), StartError> {
        if plan.target == self.me {
            return Err(StartError::SelfTarget);
        }
        if self.is_running(&plan.id) || self.finished.get(&plan.id).is_some() {
            return Err(StartError::DuplicateId(plan.id));
        }
        if self.busy(&plan.session) {
            return Err(StartError::Busy(plan.session));
        }
        let id = plan.id.clone();
        let (mut out, outgoing, _) = self.out();
        let o = Outgoing::start(now, plan, &mut out);
        outgoing.insert(id, o);
        Ok(())
    }

    /// Gives up a running migration before its commit point (operator
    /// cancel): the source resumes / the target discards, and the peer is
    /// told.
    pub fn abort<H: SessionHost>(
        &mut self,
        now: Instant,
        host: &mut H,
        id: &MigrationId,
        reason: &str,
    ) -> Result<(), AbortError> {
        let (mut out, outgoing, incoming) = self.out();
        if let Some(o) = outgoing.get_mut(id) {
            let f = o
                .abort(now, host, reason.to_owned(), &mut out)
                .ok_or_else(|| AbortError::TooLate(id.clone()))?;
            self.finish_outgoing(id, f);
            return Ok(());
        }
        if let Some(i) = incoming.get_mut(id) {
            if i.is_ready() {
                return Err(AbortError::TooLate(id.clone()));
            }
            let f = i.abort(host, now, reason.to_owned(), &mut out);
            self.finish_incoming(id, f);
            return Ok(());
        }
        Err(AbortError::Unknown(id.clone()))
    }

    /// A message from node `from` (as authenticated by the transport).
    pub fn handle_message<H: SessionHost>(
        &mut self,
        now: Instant,
        host: &mut H,
        from: &NodeId,
        msg: Message,
    ) {
        let Message { id, body } = msg;
        let (mut out, outgoing, incoming) = self.out();
        if let Some(o) = outgoing.get_mut(&id) {
            // Only the target speaks to a source, and only in its direction.
            if from != &o.plan.target || body.to_target() {
                return;
            }
            if let Some(f) = o.on_message(now, host, body, &mut out) {
                self.finish_outgoing(&id, f);
            }
            return;
        }
        if let Some(i) = incoming.get_mut(&id) {
            if from != i.source() || !(body.to_target() || matches!(body, Body::Abort(_))) {
                return;
            }
            if let Some(f) = i.on_message(now, host, body, &mut out) {
                self.finish_incoming(&id, f);
            }
            return;
        }
        if let Some(rec) = self.finished.get(&id) {
            // A replay of a finished migration: the same final answer, and
            // nothing else. Terminal messages are never answered, so two
            // nodes cannot bounce replies forever.
            if &rec.peer == from
                && !matches!(body, Body::Abort(_) | Body::Committed(_))
                && let Some(reply) = rec.reply.clone()
            {
                self.transmits
                    .push_back((from.clone(), Message::new(id, reply)));
            }
            return;
        }
        match body {
            Body::Prepare(p) => {
                if self.busy(&p.session) {
                    let reason = format!("session {} is already migrating here", p.session);
                    let reply = Body::Prepared(crate::wire::Prepared { ok: false, reason });
                    self.transmits
                        .push_back((from.clone(), Message::new(id, reply)));
                    return;
                }
                let session = p.session.clone();
                let (mut out, _, incoming) = self.out();
                match Incoming::accept(now, host, id.clone(), from, p, &mut out) {
                    Ok(i) => {
                        incoming.insert(id, i);
                    }
                    Err(f) => {
                        self.finished.insert(id.clone(), from.clone(), &f);
                        let f = *f;
                        let report = crate::report::MigrationReport {
                            id,
                            session,
                            role: Role::Target,
                            peer: from.clone(),
                            outcome: f.outcome,
                            reason: f.reason,
                            epoch: f.epoch,
                            phases: Default::default(),
                            snapshot_bytes: 0,
                            wal_bytes: 0,
                            wal_records: 0,
                            blackout: None,
                        };
                        self.events
                            .push_back(MigrationEvent::Finished(Box::new(report)));
                    }
                }
            }
            Body::Abort(_) | Body::Committed(_) => {}
            _ => {
                let reply = Body::Abort(Abort {
                    reason: "unknown migration".into(),
                });
                self.transmits
                    .push_back((from.clone(), Message::new(id, reply)));
            }
        }
    }

    /// Timers: retransmissions, WAL pacing and phase timeouts.
    pub fn handle_timeout<H: SessionHost>(&mut self, now: Instant, host: &mut H) {
        let due_out: Vec<MigrationId> = self
            .outgoing
            .iter()
            .filter(|(_, o)| o.next_timeout(&self.cfg) <= now)
            .map(|(id, _)| id.clone())
            .collect();
        let due_in: Vec<MigrationId> = self
            .incoming
            .iter()
            .filter(|(_, i)| i.next_timeout(&self.cfg) <= now)
            .map(|(id, _)| id.clone())
            .collect();
        for id in due_out {
            let (mut out, outgoing, _) = self.out();
            let Some(o) = outgoing.get_mut(&id) else {
                continue;
            };
            if let Some(f) = o.on_timeout(now, host, &mut out) {
                self.finish_outgoing(&id, f);
            }
        }
        for id in due_in {
            let (mut out, _, incoming) = self.out();
            let Some(i) = incoming.get_mut(&id) else {
                continue;
            };
            if let Some(f) = i.on_timeout(now, host, &mut out) {
                self.finish_incoming(&id, f);
            }
        }
    }

    /// The next message to send, and to whom.
    pub fn poll_transmit(&mut self) -> Option<(NodeId, Message)> {
        self.transmits.pop_front()
    }

    /// The next event (phase change or final report).
    pub fn poll_event(&mut self) -> Option<MigrationEvent> {
        self.events.pop_front()
    }

    /// When [`Migrator::handle_timeout`] should be called next.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let a = self.outgoing.values().map(|o| o.next_timeout(&self.cfg));
        let b = self.incoming.values().map(|i| i.next_timeout(&self.cfg));
        a.chain(b).min()
    }

    fn finish_outgoing(&mut self, id: &MigrationId, f: Finish) {
        if let Some(o) = self.outgoing.remove(id) {
            self.finished.insert(id.clone(), o.plan.target.clone(), &f);
            self.events
                .push_back(MigrationEvent::Finished(Box::new(o.report(&f))));
        }
    }

    fn finish_incoming(&mut self, id: &MigrationId, f: Finish) {
        if let Some(i) = self.incoming.remove(id) {
            self.finished.insert(id.clone(), i.source().clone(), &f);
            self.events
                .push_back(MigrationEvent::Finished(Box::new(i.report(&f))));
        }
    }
}
