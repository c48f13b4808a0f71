//! The node's cores and their workers (`--workers N`, [`crate::cluster::shards`] has the design).
//!
//! Each core is a [`Node`] behind a mutex, driven by one worker thread that owns a socket of
//! the node's address (`SO_REUSEPORT` when there are several): read a batch → for each
//! datagram the [`Router`] names the core that owns it → handle it here or hand it to that
//! core's worker → send what the core produced. The control task (HTTP commands, the
//! migrator) drives a core through [`Cores::drive`] and wakes its worker.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::{Duration, Instant};

use ferry_proto::state::{SessionSnapshot, WalRecord};
use ferry_proto::{NodeId, RecordingId, SessionId, StreamId};
use tokio::net::UdpSocket;
use tokio::sync::{Notify, mpsc};

use crate::cluster::shards::Router;
use crate::driver::membership::SessionEvents;
use crate::driver::recording_writer::Writers;
use crate::node::{MigrateError, Node};

/// Datagrams waiting for a core from other workers; beyond, they are dropped (counted).
const INBOX: usize = 4096;

/// Who waits for a core's answer ([`crate::node::Answer`]).
pub(super) enum Waiter {
    /// A viewer's WHEP request.
    Session(super::Reply<crate::node::signal::SessionAnswer>),
    /// A recording starting: whether the stream came.
    Stream(super::Reply<bool>),
}

impl std::fmt::Debug for Waiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Waiter::Session(_) => "Waiter::Session",
            Waiter::Stream(_) => "Waiter::Stream",
        })
    }
}

/// A datagram a worker received for another core.
#[derive(Debug)]
pub(super) struct Handed {
    data: Vec<u8>,
    from: SocketAddr,
    /// How long it had waited in the receiving socket.
    waited: Duration,
}

#[derive(Debug)]
struct Core {
    node: Mutex<Node>,
    /// Replies to requests waiting in this core (a viewer waiting for its stream's relay),
    /// by the core's request id.
    waiting: Mutex<std::collections::HashMap<u64, Waiter>>,
    /// Wakes the worker after the control task drove its core.
    wake: Notify,
    inbox: mpsc::Sender<Handed>,
}

/// Every core of one node.
pub(super) struct Cores {
    cores: Vec<Core>,
    router: RwLock<Router>,
    pub(super) writers: Mutex<Writers>,
    pub(super) events: SessionEvents,
    id: NodeId,
}

/// A core's worker: its inbox and its socket.
pub(super) struct Worker {
    index: usize,
    inbox: mpsc::Receiver<Handed>,
    socket: UdpSocket,
}

fn relock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while a core was held leaves its state as it was; carry on with it.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Cores {
    /// Cores from `nodes` (one per worker; each already configured), each worker reading one of
    /// `sockets` (as many as nodes). The cores share the first one's session limit.
    pub(super) fn new(
        nodes: Vec<Node>,
        sockets: Vec<UdpSocket>,
        events: SessionEvents,
        id: NodeId,
    ) -> (Arc<Cores>, Vec<Worker>) {
        let n = nodes.len();
        let admission = Arc::new(crate::node::admission::Admission::new(
            nodes.first().map_or(0, Node::max_sessions),
            n,
        ));
        let mut cores = Vec::with_capacity(n);
        let mut workers = Vec::with_capacity(n);
        for (index, (mut node, socket)) in nodes.into_iter().zip(sockets).enumerate() {
            if n > 1 {
                node.announce_routes();
                node.share_admission(admission.clone(), index);
            }
            let (tx, rx) = mpsc::channel(INBOX);
            cores.push(Core {
                node: Mutex::new(node),
                waiting: Mutex::default(),
                wake: Notify::new(),
                inbox: tx,
            });
            workers.push(Worker {
                index,
                inbox: rx,
                socket,
            });
        }
        let cores = Arc::new(Cores {
            cores,
            router: RwLock::new(Router::new(n)),
            writers: Mutex::default(),
            events,
            id,
        });
        // Keys held before announcing started (none for a fresh node) reach the router now.
        for i in 0..n {
            cores.drive(i, |_| ());
        }
        (cores, workers)
    }

    /// Number of cores.
    pub(super) fn len(&self) -> usize {
        self.cores.len()
    }

    /// The node's id.
    pub(super) fn id(&self) -> &NodeId {
        &self.id
    }

    /// Core `i`, locked, for reading (a change that makes it send must go through
    /// [`Cores::drive`], which wakes its worker).
    pub(super) fn lock(&self, i: usize) -> MutexGuard<'_, Node> {
        relock(&self.cores[i].node)
    }

    /// Runs `f` on core `i`, publishes what it now owns and wakes its worker.
    pub(super) fn drive<T>(&self, i: usize, f: impl FnOnce(&mut Node) -> T) -> T {
        let t = {
            let mut node = self.lock(i);
            let t = f(&mut node);
            self.publish_routes(i, &mut node);
            t
        };
        self.cores[i].wake.notify_one();
        t
    }

    /// Keeps the reply to core `i`'s waiting request `id` until the core answers it. Call it
    /// while holding the core (inside [`Cores::drive`]), so the answer cannot come first.
    pub(super) fn await_answer(&self, i: usize, id: u64, waiter: Waiter) {
        relock(&self.cores[i].waiting).insert(id, waiter);
    }

    fn publish_routes(&self, i: usize, node: &mut Node) {
        if self.cores.len() == 1 {
            return;
        }
        let mut changes = Vec::new();
        node.take_route_changes(&mut changes);
        if !changes.is_empty() {
            let mut router = self.router.write().unwrap_or_else(|e| e.into_inner());
            for c in changes {
                router.apply(i, c);
            }
        }
    }

    /// The core of `stream`.
    pub(super) fn of_stream(&self, stream: &StreamId) -> usize {
        crate::cluster::shards::shard_of(stream, self.cores.len())
    }

    /// The core that has `session`.
    pub(super) fn of_session(&self, session: &SessionId) -> Option<usize> {
        (0..self.cores.len()).find(|&i| self.lock(i).session(session).is_some())
    }

    /// The core that `session` moved away from (it answers where the session went).
    pub(super) fn moved_from(&self, now: Instant, session: &SessionId) -> Option<usize> {
        (0..self.cores.len()).find(|&i| self.lock(i).moved_away(now, session))
    }

    /// The core that planned moving `session` away (it tells the client at the end).
    pub(super) fn of_planned_move(&self, session: &SessionId) -> Option<usize> {
        (0..self.cores.len()).find(|&i| self.lock(i).has_planned_move(session))
    }

    /// The core that has recording `id`.
    pub(super) fn of_recording(&self, id: &RecordingId) -> Option<usize> {
        (0..self.cores.len()).find(|&i| self.lock(i).recording(id).is_some())
    }

    /// Runs `f` on every core (in order) and wakes every worker.
    pub(super) fn drive_all(&self, mut f: impl FnMut(&mut Node)) {
        for i in 0..self.cores.len() {
            self.drive(i, &mut f);
        }
    }

    /// `(sessions, routed keys)` per core, for `/metrics`.
    pub(super) fn prometheus(&self) -> String {
        let n = self.cores.len();
        let mut s = format!(
            "# HELP ferry_node_workers Cores (worker threads) forwarding media.\n\
             # TYPE ferry_node_workers gauge\nferry_node_workers {n}\n\
             # HELP ferry_node_worker_sessions Sessions on each core.\n\
             # TYPE ferry_node_worker_sessions gauge\n"
        );
        for i in 0..n {
            let k = self.lock(i).session_count();
            s.push_str(&format!(
                "ferry_node_worker_sessions{{worker=\"{i}\"}} {k}\n"
            ));
        }
        let (ufrags, addrs) = self.router.read().unwrap_or_else(|e| e.into_inner()).len();
        s.push_str(&format!(
            "# HELP ferry_node_routed_keys ICE ufrags and client addresses the workers route by.\n\
             # TYPE ferry_node_routed_keys gauge\n\
             ferry_node_routed_keys{{key=\"ufrag\"}} {ufrags}\n\
             ferry_node_routed_keys{{key=\"addr\"}} {addrs}\n"
        ));
        s
    }

    /// Sessions on all cores.
    pub(super) fn sessions(&self) -> Vec<crate::node::signal::SessionInfo> {
        (0..self.cores.len())
            .flat_map(|i| self.lock(i).sessions())
            .collect()
    }

    /// Streams relayed in on all cores, with where each comes from.
    pub(super) fn relay_sources(&self) -> Vec<(StreamId, SocketAddr)> {
        (0..self.cores.len())
            .flat_map(|i| self.lock(i).relay_sources())
            .collect()
    }

    /// Counters of all cores, summed.
    pub(super) fn metrics(&self) -> crate::node::metrics::NodeMetrics {
        let mut m = crate::node::metrics::NodeMetrics::default();
        for i in 0..self.cores.len() {
            m.add(self.lock(i).metrics());
        }
        m
    }

    /// The overload gauges: the worst core's.
    pub(super) fn overload_prometheus(&self) -> String {
        let (mut lag, mut ratio) = (Duration::ZERO, 0f64);
        for i in 0..self.cores.len() {
            let node = self.lock(i);
            lag = lag.max(node.overload().lag());
            ratio = ratio.max(node.overload().ratio());
        }
        crate::node::overload::prometheus(lag, ratio)
    }

    /// Recordings running on all cores.
    pub(super) fn active_recordings(&self) -> usize {
        (0..self.cores.len())
            .map(|i| self.lock(i).active_recordings())
            .sum()
    }

    /// How recordings came and went, all cores.
    pub(super) fn recording_counters(&self) -> crate::node::RecordingCounters {
        let mut c = crate::node::RecordingCounters::default();
        for i in 0..self.cores.len() {
            c.add(self.lock(i).recording_counters());
        }
        c
    }

    /// Recordings on all cores.
    pub(super) fn recordings(&self) -> Vec<crate::node::RecordingInfo> {
        (0..self.cores.len())
            .flat_map(|i| self.lock(i).recordings())
            .collect()
    }
}

/// The migrator's view of a node with several cores: each call goes to the core that has
/// the session (or, for a session not here yet, the core of its stream).
pub(super) struct CoresHost<'a>(pub(super) &'a Cores);

impl CoresHost<'_> {
    fn with_session<T>(
        &mut self,
        session: &SessionId,
        f: impl FnOnce(&mut Node) -> Result<T, MigrateError>,
    ) -> Result<T, MigrateError> {
        match self.0.of_session(session) {
            Some(i) => self.0.drive(i, f),
            None => Err(MigrateError::UnknownSession(session.clone())),
        }
    }

    fn of_snapshot(&self, s: &SessionSnapshot) -> usize {
        StreamId::new(s.stream.clone()).map_or(0, |st| self.0.of_stream(&st))
    }
}

impl ferry_migrator::SessionHost for CoresHost<'_> {
    type Error = MigrateError;

    fn prewarm(
        &mut self,
        now: Instant,
        session: &SessionId,
        stream: &StreamId,
        publisher: bool,
    ) -> Result<(), MigrateError> {
        let i = self.0.of_stream(stream);
        self.0
            .drive(i, |n| n.prewarm(now, session, stream, publisher))
    }

    fn export_snapshot(
        &mut self,
        now: Instant,
        session: &SessionId,
    ) -> Result<SessionSnapshot, MigrateError> {
        self.with_session(session, |n| n.export_snapshot(now, session))
    }

    fn take_wal(&mut self, session: &SessionId) -> Result<Vec<WalRecord>, MigrateError> {
        self.with_session(session, |n| n.take_wal(session))
    }

    fn freeze(
        &mut self,
        now: Instant,
        session: &SessionId,
    ) -> Result<(SessionSnapshot, Vec<WalRecord>), MigrateError> {
        self.with_session(session, |n| n.freeze(now, session))
    }

    fn resume(
        &mut self,
        now: Instant,
        session: &SessionId,
        epoch: u64,
    ) -> Result<(), MigrateError> {
        self.with_session(session, |n| n.resume(now, session, epoch))
    }

    fn release(
        &mut self,
        now: Instant,
        session: &SessionId,
        target: &NodeId,
    ) -> Result<(), MigrateError> {
        self.with_session(session, |n| n.release(now, session, target))
    }

    fn import_snapshot(
        &mut self,
        now: Instant,
        snapshot: SessionSnapshot,
    ) -> Result<(), MigrateError> {
        let i = self.of_snapshot(&snapshot);
        self.0.drive(i, |n| n.import_snapshot(now, snapshot))
    }

    fn apply_wal(
        &mut self,
        now: Instant,
        session: &SessionId,
        records: &[WalRecord],
    ) -> Result<(), MigrateError> {
        self.with_session(session, |n| n.apply_wal(now, session, records))
    }

    fn install_final(
        &mut self,
        now: Instant,
        final_state: SessionSnapshot,
    ) -> Result<(), MigrateError> {
        let id = SessionId::new(final_state.session_id.clone())
            .map_err(|e| MigrateError::BadSnapshot(e.into()))?;
        self.with_session(&id, |n| n.install_final(now, final_state))
    }

    fn activate(
        &mut self,
        now: Instant,
        session: &SessionId,
        epoch: u64,
    ) -> Result<(), MigrateError> {
        self.with_session(session, |n| n.activate(now, session, epoch))
    }

    fn discard(&mut self, now: Instant, session: &SessionId) {
        if let Some(i) = self.0.of_session(session) {
            self.0.drive(i, |n| n.discard(now, session));
        }
    }

    fn cancel_export(&mut self, now: Instant, session: &SessionId) {
        if let Some(i) = self.0.of_session(session) {
            self.0.drive(i, |n| n.cancel_export(now, session));
        }
    }
}

/// The CPU of each of `workers` worker threads: the first `workers` of those this process may
/// run on (its affinity mask), or none when there is one worker or fewer CPUs than workers.
///
/// Why pin (`--pin-workers`): a fan-out is a burst (a keyframe to every viewer of a stream:
/// tens of ms of one core's work), and between bursts a worker sleeps. With busy processes
/// beside the node, the kernel's scheduler put two such workers on one CPU to take turns:
/// measured on 2 CPUs, 400 viewers of two streams, p99 latency 60 ms unpinned and 32 ms pinned
/// while the load generator read every packet; with the node alone, no difference
/// (`docs/sfu.md`).
pub(super) fn worker_cpus(workers: usize) -> Vec<usize> {
    if workers < 2 {
        return Vec::new();
    }
    let allowed = allowed_cpus();
    if allowed.len() < workers {
        tracing::info!(
            workers,
            cpus = allowed.len(),
            "more workers than CPUs: worker threads not pinned"
        );
        return Vec::new();
    }
    allowed[..workers].to_vec()
}

/// The CPUs the calling thread may run on (its affinity mask; none if it cannot be read).
fn allowed_cpus() -> Vec<usize> {
    use nix::sched::{CpuSet, sched_getaffinity};
    let Ok(set) = sched_getaffinity(nix::unistd::Pid::from_raw(0)) else {
        return Vec::new();
    };
    (0..CpuSet::count())
        .filter(|&c| set.is_set(c).unwrap_or(false))
        .collect()
}

/// Pins the calling thread to `cpu`.
fn pin_thread(cpu: usize) -> nix::Result<()> {
    let mut set = nix::sched::CpuSet::new();
    set.set(cpu)?;
    nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set)
}

/// Starts core `w.index`'s worker, which runs until the node stops: [`crate::udp::serve`] on its socket.
///
/// Its thread is its own (a current-thread runtime): a worker busy with a fan-out never holds
/// up another core's worker, as two tasks of one shared runtime could. On `cpu` when given.
pub(super) fn start_worker(
    cores: Arc<Cores>,
    w: Worker,
    cpu: Option<usize>,
) -> std::io::Result<()> {
    let Worker {
        index,
        inbox,
        socket,
    } = w;
    // Registered again with the worker's own runtime below.
    let socket = socket.into_std()?;
    std::thread::Builder::new()
        .name(format!("ferry-core-{index}"))
        .spawn(move || {
            if let Some(cpu) = cpu {
                match pin_thread(cpu) {
                    Ok(()) => tracing::info!(core = index, cpu, "worker pinned"),
                    Err(e) => tracing::warn!(core = index, cpu, error = %e, "worker not pinned"),
                }
            }
            let rt = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    tracing::error!(core = index, error = %e, "no runtime for the core's worker");
                    return;
                }
            };
            rt.block_on(async move {
                let socket = match UdpSocket::from_std(socket) {
                    Ok(s) => s,
                    Err(e) => {
                        tracing::error!(core = index, error = %e, "the core's socket");
                        return;
                    }
                };
                let mut core = WorkerLoop {
                    cores,
                    index,
                    inbox,
                    out: VecDeque::with_capacity(crate::udp::BATCH),
                };
                crate::udp::serve(&socket, &mut core).await;
            });
        })?;
    Ok(())
}

/// One core as the UDP loop sees it: a datagram goes to the core the [`Router`] names
/// (this one, or another's inbox); what this core produces goes out on this worker's socket.
struct WorkerLoop {
    cores: Arc<Cores>,
    index: usize,
    inbox: mpsc::Receiver<Handed>,
    /// What the core produced and the loop has not taken yet: taken out a batch at a time, so
    /// the core is locked once per `sendmmsg`, not once per datagram.
    out: VecDeque<crate::node::session::Transmit>,
}

impl WorkerLoop {
    /// The core the [`Router`] names for a datagram, when it is another than this one.
    fn other_owner(&self, from: SocketAddr, data: &[u8]) -> Option<usize> {
        if self.cores.len() == 1 {
            return None;
        }
        self.cores
            .router
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .route(from, data)
            .filter(|o| *o != self.index)
    }
}

/// A worker's own input besides its socket and its timer.
enum WorkerEvent {
    /// A datagram another worker received for this core.
    Handed(Handed),
    /// The control task drove this core: look at its deadline and output again.
    Woken,
}

impl crate::udp::Datagrams for WorkerLoop {
    type Transmit = crate::node::session::Transmit;
    type Event = WorkerEvent;
    const FLUSH_EACH: bool = true;

    fn view(t: &Self::Transmit) -> (&[u8], SocketAddr) {
        (&t.data[..], t.to)
    }

    fn handle_datagram(
        &mut self,
        now: Instant,
        from: SocketAddr,
        data: &mut [u8],
        waited: Duration,
    ) {
        match self.other_owner(from, data) {
            Some(o) => hand(&self.cores, self.index, o, data, from, waited),
            None => handle(&self.cores, self.index, now, from, data, waited),
        }
    }

    fn diverts(&self) -> bool {
        self.cores.len() > 1
    }

    fn divert(&mut self, from: SocketAddr, data: &mut [u8], waited: Duration) -> bool {
        let Some(o) = self.other_owner(from, data) else {
            return false;
        };
        hand(&self.cores, self.index, o, data, from, waited);
        true
    }

    fn handle_timeout(&mut self, now: Instant) {
        let mut node = self.cores.lock(self.index);
        node.handle_timeout(now);
        self.cores.publish_routes(self.index, &mut node);
    }

    fn poll_transmit(&mut self) -> Option<Self::Transmit> {
        if self.out.is_empty() {
            let mut node = self.cores.lock(self.index);
            while self.out.len() < crate::udp::BATCH {
                let Some(t) = node.poll_transmit() else { break };
                self.out.push_back(t);
            }
        }
        self.out.pop_front()
    }

    fn poll_timeout(&mut self) -> Option<Instant> {
        let mut node = self.cores.lock(self.index);
        housekeeping(&self.cores, self.index, &mut node);
        node.poll_timeout()
    }

    fn sent(&mut self, batch: &mut Vec<Self::Transmit>, refused: usize) {
        let mut node = self.cores.lock(self.index);
        node.metrics_mut().send_errors += refused as u64;
        for t in batch.drain(..) {
            node.recycle(t.data);
        }
    }

    async fn next_event(&mut self) -> Option<WorkerEvent> {
        let wake = &self.cores.cores[self.index].wake;
        tokio::select! {
            h = self.inbox.recv() => h.map(WorkerEvent::Handed),
            () = wake.notified() => Some(WorkerEvent::Woken),
        }
    }

    fn try_event(&mut self) -> Option<WorkerEvent> {
        self.inbox.try_recv().ok().map(WorkerEvent::Handed)
    }

    fn handle_event(&mut self, event: WorkerEvent) {
        if let WorkerEvent::Handed(mut h) = event {
            let now = Instant::now();
            handle(&self.cores, self.index, now, h.from, &mut h.data, h.waited);
        }
    }
}

fn handle(
    cores: &Cores,
    i: usize,
    now: Instant,
    from: SocketAddr,
    data: &mut [u8],
    waited: Duration,
) {
    let mut node = cores.lock(i);
    // How long it waited in the socket: the overload controller's input.
    node.note_ingress_lag(now, waited);
    node.handle_datagram(now, from, data);
    cores.publish_routes(i, &mut node);
}

/// Gives a datagram to the worker of core `owner`.
fn hand(cores: &Cores, i: usize, owner: usize, data: &[u8], from: SocketAddr, waited: Duration) {
    let h = Handed {
        data: data.to_vec(),
        from,
        waited,
    };
    let sent = cores.cores[owner].inbox.try_send(h).is_ok();
    let mut node = cores.lock(i);
    let m = node.metrics_mut();
    if sent {
        m.handed_off += 1;
    } else {
        m.handoff_dropped += 1;
    }
}

/// What a core produced besides datagrams: recording objects to their writers, session
/// events to their streams, ownership to the router.
fn housekeeping(cores: &Cores, i: usize, node: &mut Node) {
    while let Some((id, answer)) = node.poll_answer() {
        let waiter = relock(&cores.cores[i].waiting).remove(&id);
        // A dropped reply only means the HTTP client went away.
        match (waiter, answer) {
            (Some(Waiter::Session(r)), crate::node::Answer::Session(a)) => {
                let _ = r.send(a);
            }
            (Some(Waiter::Stream(r)), crate::node::Answer::Stream(here)) => {
                let _ = r.send(Ok(here));
            }
            _ => {}
        }
    }
    while let Some(o) = node.poll_recording() {
        relock(&cores.writers).handle(o);
    }
    while let Some(event) = node.poll_event() {
        match event {
            crate::node::session::Event::Connected(id) => {
                tracing::info!(session = %id, worker = i, "session connected")
            }
            crate::node::session::Event::Closed(id, reason) => {
                tracing::info!(session = %id, ?reason, "session closed");
                // Its client learns that the session ended (not when a new transport of
                // its own replaced it).
                if reason != crate::node::session::CloseReason::Replaced {
                    let data = serde_json::json!({ "reason": reason.as_str() }).to_string();
                    cores.events.send(&id, ("end", data));
                }
            }
            crate::node::session::Event::Layers(id, layers) => {
                let encodings: Vec<serde_json::Value> = layers
                    .iter()
                    .map(|(mid, rid, active)| {
                        serde_json::json!({ "mid": mid, "rid": rid, "active": active })
                    })
                    .collect();
                let data = serde_json::json!({ "encodings": encodings }).to_string();
                cores.events.send(&id, ("active", data));
            }
        }
    }
    cores.publish_routes(i, node);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workers_get_distinct_cpus_of_the_process_s_mask_or_none() {
        let allowed = allowed_cpus();
        assert!(!allowed.is_empty());
        assert_eq!(
            allowed.len(),
            std::thread::available_parallelism().map_or(1, usize::from)
        );
        assert!(
            worker_cpus(1).is_empty(),
            "one worker stays where the kernel puts it"
        );
        assert!(
            worker_cpus(allowed.len() + 1).is_empty(),
            "more workers than CPUs"
        );
        if allowed.len() >= 2 {
            let cpus = worker_cpus(2);
            assert_eq!(cpus.len(), 2);
            assert_ne!(cpus[0], cpus[1]);
            assert!(cpus.iter().all(|c| allowed.contains(c)));
        }
        // A pinned thread runs on its CPU only.
        let cpu = allowed[0];
        std::thread::spawn(move || {
            pin_thread(cpu).expect("pin");
            assert_eq!(allowed_cpus(), vec![cpu]);
        })
        .join()
        .expect("pinned thread");
    }
}
