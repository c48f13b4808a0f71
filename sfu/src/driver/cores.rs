//! The node's cores and their workers (`--workers N`, [`crate::cluster::shards`] has the design).
//!
//! Each core is a [`Node`] owned outright by one worker thread, which also owns a socket of the
//! node's address (`SO_REUSEPORT` when there are several): read a batch → for each datagram the
//! [`Router`] names the core that owns it → handle it here or hand it to that core's worker →
//! send what the core produced. Nothing else touches a core's state: the control task sends
//! an HTTP command to the core's worker as a job ([`Cores::drive`]) and waits for its answer,
//! so a datagram — in or out — takes no lock of the core.
//!
//! In a cluster each core runs the migrations of its own sessions: its own [`Migrator`], with
//! its [`Node`] as the [`ferry_migrator::SessionHost`]. The control task routes each migration
//! message from a peer to the core of its migration ([`MigrationRoutes`]); a core sends its
//! migrator's messages on the node's one QUIC transport itself ([`QuicSender`]) and reports
//! its migrations' phases and ends to the control task ([`Report`]).

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::{Duration, Instant};

use ferry_migrator::transport::QuicSender;
use ferry_migrator::wire::{Body, Message};
use ferry_migrator::{MigrationEvent, Migrator};
use ferry_proto::{MigrationId, NodeId, RecordingId, SessionId, StreamId};
use tokio::net::UdpSocket;
use tokio::sync::mpsc;

use crate::cluster::shards::Router;
use crate::driver::membership::SessionEvents;
use crate::driver::recording_writer::Writers;
use crate::node::Node;

/// Datagrams waiting for a core from other workers; beyond, they are dropped (counted).
const INBOX: usize = 4096;

/// Who waits for a core's answer ([`crate::node::Answer`]).
pub(super) enum Waiter {
    /// A viewer's WHEP request.
    Session(super::handle::Reply<crate::node::signal::SessionAnswer>),
    /// A recording starting: whether the stream came.
    Stream(super::handle::Reply<bool>),
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

/// What one worker owns: its core and what waits on it.
pub(super) struct CoreState {
    pub(super) node: Node,
    /// Replies to requests waiting in this core (a viewer waiting for its stream's relay),
    /// by the core's request id.
    waiting: HashMap<u64, Waiter>,
    /// The node's recording writers (shared by its cores: a recording moves between them).
    pub(super) writers: Arc<Mutex<Writers>>,
    /// The migrations of this core's sessions, and where their messages go (in a cluster).
    pub(super) migrator: Option<(Migrator, QuicSender)>,
    /// What this core tells the control task.
    reports: mpsc::UnboundedSender<Report>,
}

/// What a core tells the control task.
#[derive(Debug)]
pub(super) enum Report {
    /// A migration's phase or end (for the node's [`super::membership::MigrationBook`]).
    Migration(MigrationEvent),
}

impl CoreState {
    /// Keeps the reply to the core's waiting request `id` until the core answers it (within
    /// the job that made the request, so the answer cannot come first).
    pub(super) fn await_answer(&mut self, id: u64, waiter: Waiter) {
        self.waiting.insert(id, waiter);
    }

    /// The recording writers, locked.
    pub(super) fn writers(&self) -> MutexGuard<'_, Writers> {
        relock(&self.writers)
    }
}

/// Work for a core, run by its worker between datagrams.
type Job = Box<dyn FnOnce(&mut CoreState) + Send>;

#[derive(Debug)]
struct Core {
    inbox: mpsc::Sender<Handed>,
    jobs: mpsc::UnboundedSender<Job>,
}

/// Every core of one node.
pub(super) struct Cores {
    cores: Vec<Core>,
    router: RwLock<Router>,
    pub(super) writers: Arc<Mutex<Writers>>,
    pub(super) events: SessionEvents,
    id: NodeId,
}

/// A core's worker: its core, its inbox and its socket.
pub(super) struct Worker {
    index: usize,
    core: CoreState,
    inbox: mpsc::Receiver<Handed>,
    jobs: mpsc::UnboundedReceiver<Job>,
    socket: UdpSocket,
}

fn relock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while it was held leaves the state as it was; carry on with it.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

std::thread_local! {
    /// The core whose worker this thread is (a job that drove its own core would wait forever).
    static WORKER_OF: std::cell::Cell<Option<usize>> = const { std::cell::Cell::new(None) };
}

impl Cores {
    /// Cores from `nodes` (one per worker; each already configured), each worker reading one of
    /// `sockets` (as many as nodes). The cores share the first one's session limit. In a
    /// cluster (`migrators`) each core gets a migrator that sends on the node's transport.
    /// Called within the node's runtime,
    /// where recording writers run. What the cores report comes out of the receiver.
    pub(super) fn new(
        nodes: Vec<Node>,
        sockets: Vec<UdpSocket>,
        events: SessionEvents,
        id: NodeId,
        migrators: Option<(ferry_migrator::Config, QuicSender)>,
    ) -> (Arc<Cores>, Vec<Worker>, mpsc::UnboundedReceiver<Report>) {
        let n = nodes.len();
        let admission = Arc::new(crate::node::admission::Admission::new(
            nodes.first().map_or(0, Node::max_sessions),
            n,
        ));
        let writers = Arc::new(Mutex::new(Writers::new(tokio::runtime::Handle::current())));
        let (reports, reported) = mpsc::unbounded_channel();
        let mut router = Router::new(n);
        let mut cores = Vec::with_capacity(n);
        let mut workers = Vec::with_capacity(n);
        for (index, (mut node, socket)) in nodes.into_iter().zip(sockets).enumerate() {
            if n > 1 {
                node.announce_routes();
                node.share_admission(admission.clone(), index);
                // Keys held before announcing started (none for a fresh node) reach the router.
                let mut changes = Vec::new();
                node.take_route_changes(&mut changes);
                for c in changes {
                    router.apply(index, c);
                }
            }
            let (tx, rx) = mpsc::channel(INBOX);
            let (jobs_tx, jobs_rx) = mpsc::unbounded_channel();
            cores.push(Core {
                inbox: tx,
                jobs: jobs_tx,
            });
            workers.push(Worker {
                index,
                core: CoreState {
                    node,
                    waiting: HashMap::new(),
                    writers: writers.clone(),
                    migrator: migrators
                        .clone()
                        .map(|(cfg, out)| (Migrator::new(id.clone(), cfg), out)),
                    reports: reports.clone(),
                },
                inbox: rx,
                jobs: jobs_rx,
                socket,
            });
        }
        let cores = Arc::new(Cores {
            cores,
            router: RwLock::new(router),
            writers,
            events,
            id,
        });
        (cores, workers, reported)
    }

    /// Number of cores.
    pub(super) fn len(&self) -> usize {
        self.cores.len()
    }

    /// The node's id.
    pub(super) fn id(&self) -> &NodeId {
        &self.id
    }

    /// Runs `f` on core `i` (on its worker, between datagrams) and waits for what it returns.
    pub(super) fn drive<T: Send + 'static>(
        &self,
        i: usize,
        f: impl FnOnce(&mut Node) -> T + Send + 'static,
    ) -> T {
        self.drive_core(i, move |c| f(&mut c.node))
    }

    /// Runs `f` on core `i`'s worker without waiting for it.
    pub(super) fn post(&self, i: usize, f: impl FnOnce(&mut CoreState) + Send + 'static) {
        // A worker that is gone has panicked; its log says so.
        let _ = self.cores[i].jobs.send(Box::new(f));
    }

    /// [`Cores::drive`] with what the worker owns besides the core (its waiting requests, the
    /// recording writers).
    ///
    /// # Panics
    /// When core `i`'s worker is gone (it panicked) or when called from a worker.
    pub(super) fn drive_core<T: Send + 'static>(
        &self,
        i: usize,
        f: impl FnOnce(&mut CoreState) -> T + Send + 'static,
    ) -> T {
        assert!(
            WORKER_OF.with(std::cell::Cell::get).is_none(),
            "a core's worker drove a core: it would wait for itself"
        );
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let job: Job = Box::new(move |c| {
            let _ = tx.send(f(c));
        });
        if self.cores[i].jobs.send(job).is_err() {
            panic!("core {i}'s worker is gone");
        }
        // The control task waits as it waited for a core's lock: until the worker is between
        // datagrams.
        match rx.recv() {
            Ok(t) => t,
            Err(_) => panic!("core {i}'s worker dropped a job"),
        }
    }

    /// Publishes what core `i` now owns (ICE ufrags, client addresses) to the router.
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

    /// The first core for which `f` holds.
    fn find(&self, f: impl Fn(&Node) -> bool + Clone + Send + 'static) -> Option<usize> {
        (0..self.cores.len()).find(|&i| {
            let f = f.clone();
            self.drive(i, move |n| f(n))
        })
    }

    /// The core that has `session`.
    pub(super) fn of_session(&self, session: &SessionId) -> Option<usize> {
        let s = session.clone();
        self.find(move |n| n.session(&s).is_some())
    }

    /// The core that `session` moved away from (it answers where the session went).
    pub(super) fn moved_from(&self, now: Instant, session: &SessionId) -> Option<usize> {
        let s = session.clone();
        self.find(move |n| n.moved_away(now, &s))
    }

    /// The core that has recording `id`.
    pub(super) fn of_recording(&self, id: &RecordingId) -> Option<usize> {
        let id = id.clone();
        self.find(move |n| n.recording(&id).is_some())
    }

    /// Runs `f` on every core (in order).
    pub(super) fn drive_all(&self, f: impl Fn(&mut Node) + Clone + Send + 'static) {
        for i in 0..self.cores.len() {
            self.drive(i, f.clone());
        }
    }

    /// What `f` reads from each core, in order.
    fn each<T: Send + 'static>(&self, f: impl Fn(&Node) -> T + Clone + Send + 'static) -> Vec<T> {
        (0..self.cores.len())
            .map(|i| {
                let f = f.clone();
                self.drive(i, move |n| f(n))
            })
            .collect()
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
        for (i, k) in self.each(Node::session_count).into_iter().enumerate() {
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
        self.each(Node::sessions).into_iter().flatten().collect()
    }

    /// Streams relayed in on all cores, with where each comes from.
    pub(super) fn relay_sources(&self) -> Vec<(StreamId, SocketAddr)> {
        self.each(Node::relay_sources)
            .into_iter()
            .flatten()
            .collect()
    }

    /// Counters of all cores, summed.
    pub(super) fn metrics(&self) -> crate::node::metrics::NodeMetrics {
        let mut m = crate::node::metrics::NodeMetrics::default();
        for c in self.each(|n| n.metrics().clone()) {
            m.add(&c);
        }
        m
    }

    /// The overload gauges: the worst core's.
    pub(super) fn overload_prometheus(&self) -> String {
        let (mut lag, mut ratio) = (Duration::ZERO, 0f64);
        for (l, r) in self.each(|n| (n.overload().lag(), n.overload().ratio())) {
            lag = lag.max(l);
            ratio = ratio.max(r);
        }
        crate::node::overload::prometheus(lag, ratio)
    }

    /// Recordings running on all cores.
    pub(super) fn active_recordings(&self) -> usize {
        self.each(Node::active_recordings).into_iter().sum()
    }

    /// How recordings came and went, all cores.
    pub(super) fn recording_counters(&self) -> crate::node::RecordingCounters {
        let mut c = crate::node::RecordingCounters::default();
        for k in self.each(Node::recording_counters) {
            c.add(k);
        }
        c
    }

    /// Recordings on all cores.
    pub(super) fn recordings(&self) -> Vec<crate::node::RecordingInfo> {
        self.each(Node::recordings).into_iter().flatten().collect()
    }
}

/// Which core runs each migration: the core of its session (source) or of its stream
/// (target, from its `Prepare`), and for a while after it ended (a replayed message gets
/// the same answer from the same core's migrator).
#[derive(Debug)]
pub(super) struct MigrationRoutes {
    /// Each migration's core, and whether it ended.
    by_id: HashMap<MigrationId, Route>,
    /// Ended migrations, oldest first: forgotten beyond `keep`.
    ended: VecDeque<MigrationId>,
    keep: usize,
}

/// Where a migration's messages go.
#[derive(Debug, Clone, Copy)]
struct Route {
    core: usize,
    ended: bool,
}

impl MigrationRoutes {
    /// Routes that keep `keep` ended migrations (as many as a migrator remembers outcomes,
    /// [`ferry_migrator::Config::finished_capacity`]).
    pub(super) fn new(keep: usize) -> MigrationRoutes {
        MigrationRoutes {
            by_id: HashMap::new(),
            ended: VecDeque::new(),
            keep,
        }
    }

    /// Migration `id` runs on core `i`.
    pub(super) fn insert(&mut self, id: MigrationId, i: usize) {
        self.by_id.insert(
            id,
            Route {
                core: i,
                ended: false,
            },
        );
    }

    /// The core a message of a migration goes to: its own; for a new one, the core of the
    /// stream its `Prepare` names; else the first (whose migrator answers "unknown").
    pub(super) fn route(&mut self, cores: &Cores, msg: &Message) -> usize {
        if let Some(r) = self.by_id.get(&msg.id) {
            return r.core;
        }
        match &msg.body {
            Body::Prepare(p) => {
                let i = cores.of_stream(&p.stream);
                self.insert(msg.id.clone(), i);
                i
            }
            _ => 0,
        }
    }

    /// Migration `id` ended: its route is kept for a while.
    pub(super) fn ended(&mut self, id: &MigrationId) {
        match self.by_id.get_mut(id) {
            Some(r) if !r.ended => r.ended = true,
            _ => return,
        }
        self.ended.push_back(id.clone());
        while self.ended.len() > self.keep {
            if let Some(old) = self.ended.pop_front() {
                self.by_id.remove(&old);
            }
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
        core,
        inbox,
        jobs,
        socket,
    } = w;
    // Registered again with the worker's own runtime below.
    let socket = socket.into_std()?;
    std::thread::Builder::new()
        .name(format!("ferry-core-{index}"))
        .spawn(move || {
            WORKER_OF.with(|w| w.set(Some(index)));
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
                let mut worker = WorkerLoop {
                    cores,
                    index,
                    core,
                    inbox,
                    jobs,
                };
                crate::udp::serve(&socket, &mut worker).await;
            });
        })?;
    Ok(())
}

/// One core as the UDP loop sees it: a datagram goes to the core the [`Router`] names
/// (this one, or another's inbox); what this core produces goes out on this worker's socket.
struct WorkerLoop {
    cores: Arc<Cores>,
    index: usize,
    core: CoreState,
    inbox: mpsc::Receiver<Handed>,
    jobs: mpsc::UnboundedReceiver<Job>,
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

    fn handle(&mut self, now: Instant, from: SocketAddr, data: &mut [u8], waited: Duration) {
        let node = &mut self.core.node;
        // How long it waited in the socket: the overload controller's input.
        node.note_ingress_lag(now, waited);
        node.handle_datagram(now, from, data);
        self.cores.publish_routes(self.index, node);
    }

    /// Gives a datagram to the worker of core `owner`.
    fn hand(&mut self, owner: usize, data: &[u8], from: SocketAddr, waited: Duration) {
        let h = Handed {
            data: data.to_vec(),
            from,
            waited,
        };
        let sent = self.cores.cores[owner].inbox.try_send(h).is_ok();
        let m = self.core.node.metrics_mut();
        if sent {
            m.handed_off += 1;
        } else {
            m.handoff_dropped += 1;
        }
    }
}

/// A worker's own input besides its socket and its timer.
enum WorkerEvent {
    /// A datagram another worker received for this core.
    Handed(Handed),
    /// A job from the control task.
    Job(Job),
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
            Some(o) => self.hand(o, data, from, waited),
            None => self.handle(now, from, data, waited),
        }
    }

    fn diverts(&self) -> bool {
        self.cores.len() > 1
    }

    fn divert(&mut self, from: SocketAddr, data: &mut [u8], waited: Duration) -> bool {
        let Some(o) = self.other_owner(from, data) else {
            return false;
        };
        self.hand(o, data, from, waited);
        true
    }

    fn handle_timeout(&mut self, now: Instant) {
        let core = &mut self.core;
        core.node.handle_timeout(now);
        if let Some((m, _)) = core.migrator.as_mut()
            && m.poll_timeout().is_some_and(|t| t <= now)
        {
            m.handle_timeout(now, &mut core.node);
        }
        self.cores.publish_routes(self.index, &mut core.node);
    }

    fn poll_transmit(&mut self) -> Option<Self::Transmit> {
        self.core.node.poll_transmit()
    }

    fn poll_timeout(&mut self) -> Option<Instant> {
        housekeeping(&self.cores, self.index, &mut self.core);
        let migrations = self
            .core
            .migrator
            .as_ref()
            .and_then(|(m, _)| m.poll_timeout());
        match (self.core.node.poll_timeout(), migrations) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn sent(&mut self, batch: &mut Vec<Self::Transmit>, refused: usize) {
        let node = &mut self.core.node;
        node.metrics_mut().send_errors += refused as u64;
        for t in batch.drain(..) {
            node.recycle(t.data);
        }
    }

    async fn next_event(&mut self) -> Option<WorkerEvent> {
        tokio::select! {
            h = self.inbox.recv() => h.map(WorkerEvent::Handed),
            j = self.jobs.recv() => j.map(WorkerEvent::Job),
        }
    }

    fn try_event(&mut self) -> Option<WorkerEvent> {
        if let Ok(j) = self.jobs.try_recv() {
            return Some(WorkerEvent::Job(j));
        }
        self.inbox.try_recv().ok().map(WorkerEvent::Handed)
    }

    fn try_urgent(&mut self) -> Option<WorkerEvent> {
        self.jobs.try_recv().ok().map(WorkerEvent::Job)
    }

    fn handle_event(&mut self, event: WorkerEvent) {
        match event {
            WorkerEvent::Handed(mut h) => {
                let now = Instant::now();
                self.handle(now, h.from, &mut h.data, h.waited);
            }
            WorkerEvent::Job(job) => {
                // A job that panics is dropped with its answer (its caller learns so); the
                // core carries on as it was, as it did behind a poisoned lock.
                let core = &mut self.core;
                if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job(core))).is_err() {
                    tracing::error!(core = self.index, "a job panicked on the core");
                }
                // What it produced goes now (a migration's next message), not after the rest
                // of the batch of datagrams the job came between.
                housekeeping(&self.cores, self.index, &mut self.core);
            }
        }
    }
}

/// A migration of a session of this core ended: the core that planned the move says what
/// its client is told.
fn migration_ended(cores: &Cores, node: &mut Node, e: &MigrationEvent) {
    let MigrationEvent::Finished(r) = e else {
        return;
    };
    if r.role != ferry_migrator::Role::Source || !node.has_planned_move(&r.session) {
        return;
    }
    let committed = matches!(
        r.outcome,
        ferry_migrator::Outcome::Committed | ferry_migrator::Outcome::Unconfirmed
    );
    let notice = if committed {
        node.move_committed(Instant::now(), &r.session, r.epoch)
    } else {
        node.move_abandoned(&r.session);
        None
    };
    if let Some(m) = notice {
        let heard = cores.events.send(&m.session, ("migrate", m.data));
        tracing::info!(session = %m.session, target = %m.target, mode = ?m.mode, heard, "client told where its session went");
    }
}

/// What a core produced besides datagrams: answers to whoever waits, recording objects to
/// their writers, session events to their streams, migration messages and events to the
/// control task, ownership to the router.
fn housekeeping(cores: &Cores, i: usize, core: &mut CoreState) {
    if let Some((m, out)) = core.migrator.as_mut() {
        while let Some((to, msg)) = m.poll_transmit() {
            tracing::debug!(migration = %msg.id, body = msg.body.name(), %to, "migration message out");
            if let Err(e) = out.send(&to, msg) {
                // To the protocol a lost message: the migration times out and rolls back.
                tracing::warn!(peer = %to, error = %e, "migration message not sent");
            }
        }
        while let Some(e) = m.poll_event() {
            migration_ended(cores, &mut core.node, &e);
            let _ = core.reports.send(Report::Migration(e));
        }
    }
    let node = &mut core.node;
    while let Some((id, answer)) = node.poll_answer() {
        let waiter = core.waiting.remove(&id);
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
    if let Some(o) = node.poll_recording() {
        let mut writers = relock(&core.writers);
        writers.handle(o);
        while let Some(o) = node.poll_recording() {
            writers.handle(o);
        }
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
    fn ended_routes_are_kept_up_to_the_limit_once_each() {
        let id = |i: usize| MigrationId::new(format!("m-{i}")).expect("id");
        let mut routes = MigrationRoutes::new(2);
        for i in 0..4 {
            routes.insert(id(i), i);
        }
        // Ended twice counts once; unknown ids are not kept.
        routes.ended(&id(0));
        routes.ended(&id(0));
        routes.ended(&id(9));
        assert_eq!(routes.ended.len(), 1);
        routes.ended(&id(1));
        assert_eq!(routes.by_id.len(), 4);
        // A third ended one forgets the oldest; running ones stay.
        routes.ended(&id(2));
        assert!(!routes.by_id.contains_key(&id(0)));
        assert_eq!(routes.by_id.get(&id(1)).map(|r| r.core), Some(1));
        assert_eq!(
            routes.by_id.get(&id(3)).map(|r| (r.core, r.ended)),
            Some((3, false))
        );
        assert_eq!(routes.ended.len(), 2);
    }

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
