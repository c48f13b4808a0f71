//! The control task: commands from the HTTP layer ([`super::handle::NodeHandle`]), each sent to
//! the core it concerns; migration messages from peer nodes to the core of their migration;
//! what the cores report.

use std::sync::Arc;
use std::time::Instant;

use ferry_migrator::MigrationPlan;
use ferry_migrator::transport::{QuicTransport, Transport as _};
use ferry_proto::api::MigrationView;
use ferry_proto::{SessionId, StreamId};
use tokio::sync::mpsc;

use super::cores::{self, Cores};
use super::handle::{Command, CreateRequest};
use crate::driver::membership::{MigrationApiError, MigrationBook};
use crate::node::Requested;
use crate::node::signal::SignalError;

/// The node's side of migrations in a cluster, owned by the control task: the transport,
/// which core runs each migration, and the book the HTTP API reads. The migrations
/// themselves run on the cores ([`cores::CoreState::migrator`]).
pub(super) struct Migrations {
    pub(super) transport: QuicTransport,
    pub(super) routes: cores::MigrationRoutes,
    pub(super) book: MigrationBook,
}

impl Migrations {
    /// What a core reported.
    fn report(&mut self, me: &ferry_proto::NodeId, r: cores::Report) {
        match r {
            cores::Report::Migration(e) => {
                if let ferry_migrator::MigrationEvent::Finished(r) = &e {
                    self.routes.ended(&r.id);
                }
                self.book.event(me, e);
            }
        }
    }
}

/// The next migration message from a peer node (never, outside a cluster).
pub(super) async fn migration_message(
    cluster: &mut Option<Migrations>,
) -> Result<
    (ferry_proto::NodeId, ferry_migrator::wire::Message),
    ferry_migrator::transport::TransportError,
> {
    match cluster {
        Some(c) => c.transport.recv().await,
        None => std::future::pending().await,
    }
}

/// Starts the workers (a thread each, worker `i` on `cpus[i]` when given) and the control task.
pub(super) fn run(
    cores: Arc<Cores>,
    workers: Vec<cores::Worker>,
    reports: mpsc::UnboundedReceiver<cores::Report>,
    cpus: &[usize],
    rx: mpsc::Receiver<Command>,
    cluster: Option<Migrations>,
) -> std::io::Result<()> {
    for (i, w) in workers.into_iter().enumerate() {
        cores::start_worker(cores.clone(), w, cpus.get(i).copied())?;
    }
    tokio::spawn(control(cores, reports, rx, cluster));
    Ok(())
}

/// The control task: commands from the HTTP layer, each sent to the core it concerns;
/// migration messages from peers to the core of their migration; what the cores report.
pub(super) async fn control(
    cores: Arc<Cores>,
    mut reports: mpsc::UnboundedReceiver<cores::Report>,
    mut rx: mpsc::Receiver<Command>,
    mut cluster: Option<Migrations>,
) {
    // Until every core's worker is gone (each holds a sender).
    let mut reporting = true;
    loop {
        tokio::select! {
            cmd = rx.recv() => {
                let Some(cmd) = cmd else { break };
                command(&cores, cluster.as_mut(), cmd);
            }
            r = reports.recv(), if reporting => match (r, cluster.as_mut()) {
                (Some(r), Some(c)) => c.report(cores.id(), r),
                (Some(_), None) => {}
                (None, _) => reporting = false,
            },
            m = migration_message(&mut cluster) => {
                let (Ok((from, msg)), Some(c)) = (m, cluster.as_mut()) else { continue };
                tracing::debug!(migration = %msg.id, body = msg.body.name(), %from, "migration message in");
                let i = c.routes.route(&cores, &msg);
                cores.post(i, move |core| {
                    let Some((m, _)) = core.migrator.as_mut() else { return };
                    let t = Instant::now();
                    let what = msg.body.name();
                    m.handle_message(t, &mut core.node, &from, msg);
                    let took = t.elapsed();
                    if took > std::time::Duration::from_millis(2) {
                        tracing::warn!(?took, what, "slow migration step");
                    }
                });
            }
        }
    }
}

pub(super) fn migrate(
    cores: &Cores,
    cluster: Option<&mut Migrations>,
    now: Instant,
    view: MigrationView,
    parent: &str,
) -> Result<MigrationView, MigrationApiError> {
    let Some(c) = cluster else {
        return Err(MigrationApiError::new(
            503,
            "this node is not part of a cluster (no --cluster-dir)",
        ));
    };
    if let Some(v) = c.book.get(&view.id) {
        return if v.session == view.session && v.target == view.target {
            Ok(v.clone())
        } else {
            Err(MigrationApiError::new(
                409,
                format!("migration {} exists for another session or target", view.id),
            ))
        };
    }
    let Some(target) = view.target.clone() else {
        return Err(MigrationApiError::new(400, "a target node is required"));
    };
    if &target == cores.id() {
        return Err(MigrationApiError::new(
            400,
            "the target is the node the session is on",
        ));
    }

    let missing = || {
        MigrationApiError::new(
            404,
            format!("no session {} on {}", view.session, cores.id()),
        )
    };
    let shard = cores.of_session(&view.session).ok_or_else(missing)?;
    let (session, peer, me) = (view.session.clone(), target.clone(), cores.id().clone());
    let (stream, publisher, epoch) = cores
        .drive(shard, move |node| {
            let s = node.session(&session).ok_or(NotStarted::Gone)?;
            if !s.active {
                return Err(NotStarted::Refused(MigrationApiError::new(
                    409,
                    format!("session {session} is migrating"),
                )));
            }
            if !node.has_peer(&peer) {
                return Err(NotStarted::Refused(MigrationApiError::new(
                    503,
                    format!("target {peer} is not known to {me} yet"),
                )));
            }
            Ok((
                s.stream.clone(),
                matches!(s.role, crate::node::session::Role::Publisher(_)),
                s.epoch,
            ))
        })
        .map_err(|e| e.into_api(missing))?;
    let me = cores.id().clone();
    // The span opens before `Prepare` leaves, which carries its context.
    let fresh = !c.book.is_traced(&view.id);
    let trace_parent = c.book.trace_source(&view, &me, &target, parent);
    let plan = MigrationPlan {
        id: view.id.clone(),
        session: view.session.clone(),
        stream,
        publisher,
        target: target.clone(),
        epoch,
        mode: view.mode,
        trace_parent,
    };
    // The session's core notes what the client will be told at the commit and runs the
    // migration.
    let (session, mode) = (view.session.clone(), view.mode);
    let started = cores
        .drive_core(shard, move |core| {
            let Some((m, _)) = core.migrator.as_mut() else {
                return Err(NotStarted::Refused(MigrationApiError::new(
                    503,
                    "this core runs no migrator",
                )));
            };
            // Planning fails only for a session that is not here.
            core.node
                .plan_move(&session, &plan.target, mode)
                .map_err(|_| NotStarted::Gone)?;
            m.start(now, &mut core.node, plan).map_err(|e| {
                core.node.move_abandoned(&session);
                let status = match e {
                    ferry_migrator::StartError::SelfTarget => 400,
                    _ => 409,
                };
                NotStarted::Refused(MigrationApiError::new(status, e.to_string()))
            })
        })
        .map_err(|e| {
            if fresh {
                c.book.untrace(&view.id);
            }
            e.into_api(missing)
        });
    started?;
    c.routes.insert(view.id.clone(), shard);
    let id = view.id.clone();
    c.book.started(view, &me, &target);
    c.book
        .get(&id)
        .cloned()
        .ok_or_else(|| MigrationApiError::new(500, "migration not recorded"))
}

/// Why a session's core did not start its migration.
enum NotStarted {
    /// The session is not on the core (any more): the caller's "not found".
    Gone,
    /// The core refused, for the reason given.
    Refused(MigrationApiError),
}

impl NotStarted {
    fn into_api(self, missing: impl FnOnce() -> MigrationApiError) -> MigrationApiError {
        match self {
            NotStarted::Gone => missing(),
            NotStarted::Refused(e) => e,
        }
    }
}

pub(super) fn command(cores: &Cores, cluster: Option<&mut Migrations>, cmd: Command) {
    let now = Instant::now();
    let of_stream = |stream: &StreamId| cores.of_stream(stream);
    // Commands about a session go to the core that has it, or knows where it went (an unknown
    // session: any core answers "not found").
    let of_session = |id: &SessionId| {
        cores
            .of_session(id)
            .or_else(|| cores.moved_from(now, id))
            .unwrap_or(0)
    };
    // A dropped reply only means the HTTP client went away.
    match cmd {
        Command::Idempotent(key, kind, stream, offer, r) => {
            let answer = cores.drive(of_stream(&stream), move |n| {
                n.idempotent_answer(now, &key, kind, &stream, &offer)
            });
            let _ = r.send(answer);
        }
        Command::CheckTicket(ticket, kind, stream, r) => {
            let checked = cores.drive(of_stream(&stream), move |n| {
                let checked = n.check_ticket(now, &ticket, &stream, kind);
                if checked.is_err() {
                    n.metrics_mut().signal_rejected += 1;
                }
                checked
            });
            let _ = r.send(checked.map_err(SignalError::BadTicket));
        }
        Command::Create(req, r) => {
            let CreateRequest {
                kind,
                stream,
                offer,
                key,
                ticket,
            } = *req;
            let shard = of_stream(&stream);
            // The core admits it against the node's limit, which its cores share.
            cores.drive_core(shard, move |c| {
                let requested = c.node.request_session(
                    now,
                    kind,
                    &stream,
                    &offer,
                    key.as_deref(),
                    ticket.as_ref(),
                );
                match requested {
                    Ok(Requested::Answer(a)) => {
                        let _ = r.send(Ok(a));
                    }
                    // A viewer waiting for its stream's relay: the core answers it.
                    Ok(Requested::Waiting(id)) => c.await_answer(id, cores::Waiter::Session(r)),
                    Err(e) => {
                        let _ = r.send(Err(e));
                    }
                }
            });
        }
        Command::Ticket(id, r) => {
            let _ = r.send(cores.drive(of_session(&id), move |n| match n.session(&id) {
                Some(_) => Ok(n.issue_ticket(now, &id)),
                None => Err(SignalError::SessionNotFound(id.to_string())),
            }));
        }
        Command::SetVideo(id, enabled, r) => {
            let _ = r.send(cores.drive(of_session(&id), move |n| n.set_video(now, &id, enabled)));
        }
        Command::SetPreferences(id, prefs, r) => {
            let _ =
                r.send(cores.drive(of_session(&id), move |n| n.set_preferences(now, &id, prefs)));
        }
        Command::Patch(id, frag, if_match, r) => {
            let result = cores.drive(of_session(&id), move |n| {
                n.patch(now, &id, &frag, if_match.as_deref())
            });
            let _ = r.send(result);
        }
        Command::Delete(id, r) => {
            let _ = r.send(cores.drive(of_session(&id), move |n| n.delete(now, &id)));
        }
        Command::Sessions(r) => {
            let _ = r.send(Ok(cores.sessions()));
        }
        Command::SessionView(id, r) => {
            let _ = r.send(cores.drive(of_session(&id), move |n| n.session_view(now, &id)));
        }
        Command::Metrics(r) => {
            let mut text = cores.metrics().to_prometheus();
            text.push_str(&cores.overload_prometheus());
            text.push_str(&cores.prometheus());
            let active = cores.active_recordings();
            let counters = cores.recording_counters();
            text.push_str(
                &cores
                    .writers
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .prometheus(active, counters),
            );
            if let Some(c) = &cluster {
                text.push_str(&c.book.to_prometheus());
            }
            let _ = r.send(Ok(text));
        }
        Command::Snapshot(id, r) => {
            let _ = r.send(cores.drive(of_session(&id), move |n| n.snapshot_session(now, &id)));
        }
        Command::Restore(snap, r) => {
            let shard = StreamId::new(snap.stream.clone()).map_or(0, |s| of_stream(&s));
            let _ = r.send(cores.drive(shard, move |n| n.restore_session(now, *snap)));
        }
        Command::Report(r) => {
            let _ = r.send(Ok((
                cores.sessions(),
                cores.metrics(),
                cores.relay_sources(),
            )));
        }
        Command::Migrate(view, parent, r) => {
            let _ = r.send(migrate(cores, cluster, now, *view, &parent));
        }
        Command::MigrationStatus(id, r) => {
            let found = cluster.and_then(|c| c.book.get(&id).cloned());
            let _ = r.send(found.ok_or_else(|| {
                MigrationApiError::new(404, format!("no migration {id} on this node"))
            }));
        }
        Command::Directory(d) => {
            for (id, (_, quic)) in &d.peers {
                if let (Some(quic), Some(c)) = (quic, cluster.as_ref()) {
                    c.transport.add_peer(id.clone(), *quic);
                }
            }
            let d = Arc::new(d);
            cores.drive_all(move |node| {
                for (id, base) in &d.http {
                    node.set_peer_http(id.clone(), base.clone());
                }
                for (id, (udp, _)) in &d.peers {
                    if let Some(udp) = udp {
                        node.set_peer(id.clone(), *udp);
                    }
                }
                node.repoint_relays(now, &d.origins, &d.down);
            });
        }
        Command::Recording(cmd) => super::recordings::handle(cores, now, cmd),
        Command::StreamHere(stream, r) => {
            let shard = of_stream(&stream);
            cores.drive_core(shard, move |c| match c.node.request_stream(now, &stream) {
                Some(id) => c.await_answer(id, cores::Waiter::Stream(r)),
                None => {
                    let _ = r.send(Ok(c.node.has_stream(&stream)));
                }
            });
        }
    }
}
