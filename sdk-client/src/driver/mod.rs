//! The tokio driver of one session: it owns the [`Machine`] and the transports (a sans-IO
//! [`Peer`] and a UDP socket each), carries out the machine's commands (signalling runs on
//! blocking threads), and turns what happens — answers, datagrams, frames, a node that stops
//! answering — into the machine's inputs. Relays (and moving off a draining one) are in
//! [`relay`], a transport's socket and peer in [`transport`].

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ferry_rtc::cert;
use ferry_rtc::peer::{MediaSource, Peer, PeerConfig, PeerRole, PeerStats, ReceivedFrame};
use tokio::net::UdpSocket;
use tokio::sync::{mpsc, oneshot, watch};

use crate::fsm::{Command, Endpoint, Event, Input, Kind, LossCause, Machine, State};
use crate::signalling::{self, Created, PostRequest, Refusal, SessionEvent};
use crate::turn::{Gathered, IceServer, Relay, RelayError, RelaySetup, RelayStats};

mod caps;
mod quality;
mod transport;
mod turn;

use caps::Caps;
use transport::Transport;

/// How often frames, paths and stalls are looked at.
const TICK: Duration = Duration::from_millis(20);
/// How often throughput is measured (and a stats snapshot taken).
const STATS_EVERY: Duration = Duration::from_secs(1);
/// A player that received nothing for this long checks whether its node is alive.
const PLAY_STALL: Duration = Duration::from_millis(1000);
/// A publisher hears from its node (receiver reports, consent answers) about once a second.
const PUBLISH_STALL: Duration = Duration::from_millis(1600);
/// Frames handed to the app and not yet read, at most (older ones are dropped).
pub(crate) const FRAME_QUEUE: usize = 512;

/// What the app and the workers tell the driver.
pub(crate) enum Msg {
    Datagram(u32, SocketAddr, Vec<u8>),
    Posted(u32, Result<Created, Refusal>),
    Restarted(u32, Result<String, Refusal>),
    Input(u64, Input),
    EventsEnded(u64),
    Probed(u32, LossCause, bool),
    /// Relays gathered for a transport.
    Relays(u32, Gathered),
    /// The session's `turn-drain` event: these relays drain.
    TurnDrain(u64, Vec<String>),
    /// Fresh relays for a transport's move off a draining one.
    MoveRelays(u32, Gathered),
    /// The answer to a move's ICE restart.
    MoveRestarted(u32, Result<String, Refusal>),
    Send {
        video: bool,
        data: Vec<u8>,
        duration: Duration,
        keyframe: bool,
    },
    Stats(oneshot::Sender<Stats>),
    Close(oneshot::Sender<()>),
    /// Stop here without ending the session on the server (its ticket resumes it elsewhere).
    Detach(oneshot::Sender<()>),
    /// Benchmarks: start a new window for the current transport's largest arrival gap.
    ResetGaps,
    /// Play: new caps, answered once the node serving the session took them.
    SetQuality(
        crate::quality::Quality,
        oneshot::Sender<Result<(), crate::error::SdkError>>,
    ),
    /// Caps sent again after a move were not taken.
    QualityFailed(crate::error::SdkError),
}

/// A snapshot of a session.
#[derive(Debug, Clone, Default)]
pub struct Stats {
    /// State.
    pub state: Option<State>,
    /// Session id.
    pub session: Option<String>,
    /// Serving node.
    pub node: Option<String>,
    /// The session's URL.
    pub location: Option<String>,
    /// The current transport's counters.
    pub peer: Option<PeerStats>,
    /// Frames received on the current transport (play, frame media) or sent (publish).
    pub frames: u64,
    /// Frames dropped because the app did not read them.
    pub frames_dropped: u64,
    /// Migrations followed.
    pub migrations: u64,
    /// Recoveries after a loss.
    pub reconnects: u64,
    /// Transports used so far.
    pub transports: u32,
    /// The TURN relay the current transport sends through (`None`: directly).
    pub relay: Option<RelayStats>,
    /// Moves off a draining TURN relay ([`Event::RelayMoved`]).
    pub relay_moves: u64,
}

/// Shared with the [`crate::Session`] handle.
#[derive(Debug, Default)]
pub(crate) struct Shared {
    pub session: Option<String>,
    pub node: Option<String>,
    pub location: Option<String>,
    pub keyframe_wanted: bool,
    /// Why the session could not use a relay (`relay_only`: why it could not connect).
    pub relay_error: Option<RelayError>,
    /// Play: the caps asked for last.
    pub quality: Option<crate::quality::Quality>,
}

/// How the session's media is made.
#[derive(Debug, Clone)]
pub(crate) struct MediaSetup {
    pub role: PeerRole,
    pub synthetic: bool,
    pub bitrate_bps: u32,
    pub clocks: Option<(ferry_rtc::time::WallClock, Instant)>,
}

/// Everything the driver needs to start.
pub(crate) struct Setup {
    pub kind: Kind,
    pub endpoint: String,
    /// Where the first offer goes, if not to `endpoint` (the gateway).
    pub first_endpoint: Option<String>,
    pub token: Option<String>,
    pub machine: Machine,
    pub media: MediaSetup,
    pub seed: u64,
    pub ticket: Option<String>,
    pub ticket_file: Option<PathBuf>,
    pub events: mpsc::UnboundedSender<Event>,
    pub frames: Option<mpsc::Sender<ReceivedFrame>>,
    pub state: watch::Sender<State>,
    pub shared: Arc<Mutex<Shared>>,
    /// The gateway (for relay credentials).
    pub base: String,
    /// The stream (relay credentials are asked for it).
    pub stream: String,
    pub relays: RelaySetup,
}

pub(crate) struct Driver {
    s: Setup,
    tx: mpsc::UnboundedSender<Msg>,
    transports: BTreeMap<u32, Transport>,
    current: Option<u32>,
    /// The subscription to the session's events that counts (older readers stop).
    subscription: Arc<AtomicU64>,
    video_enabled: bool,
    next_tick: Instant,
    next_stats: Instant,
    frames_sent: u64,
    frames_dropped: u64,
    migrations: u64,
    reconnects: u64,
    relay_moves: u64,
    closing: Option<oneshot::Sender<()>>,
    /// Detached: the driver stops at once, leaving the session to whoever holds its ticket.
    detached: Option<oneshot::Sender<()>>,
    /// Publish, H.264: the latest SPS/PPS, sent again with IDRs that lack them.
    parameter_sets: crate::h264::ParameterSets,
    /// The gateway's relays and until when to use them (half the credential's lifetime).
    relay_cache: Option<(Vec<IceServer>, Instant)>,
    /// Who relay credentials are asked for.
    relay_user: String,
    /// Play: the caps, and which session URLs have them.
    caps: Caps,
}

fn is_down(state: State) -> bool {
    matches!(state, State::Closed | State::Failed)
}

impl Driver {
    pub(crate) fn new(s: Setup, tx: mpsc::UnboundedSender<Msg>) -> Self {
        let now = Instant::now();
        Driver {
            s,
            tx,
            transports: BTreeMap::new(),
            current: None,
            subscription: Arc::new(AtomicU64::new(0)),
            video_enabled: true,
            next_tick: now,
            next_stats: now + STATS_EVERY,
            frames_sent: 0,
            frames_dropped: 0,
            migrations: 0,
            reconnects: 0,
            relay_moves: 0,
            closing: None,
            detached: None,
            parameter_sets: crate::h264::ParameterSets::default(),
            relay_cache: None,
            relay_user: String::new(),
            caps: Caps::default(),
        }
    }

    /// Runs the session until it is closed or failed and every command is carried out.
    pub(crate) async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Msg>) {
        let ticket = self.s.ticket.take();
        self.s
            .machine
            .handle_input(Instant::now(), Input::Start { ticket });
        loop {
            if let Some(done) = self.detached.take() {
                // No DELETE, no goodbye: the session is someone else's now.
                let _ = done.send(());
                return;
            }
            self.commands().await;
            self.sync_quality();
            self.flush();
            if is_down(self.s.machine.state()) {
                if let Some(done) = self.closing.take() {
                    let _ = done.send(());
                }
                // Answer what is still asked, without doing anything else.
                while let Ok(msg) = rx.try_recv() {
                    self.refuse(msg);
                }
                return;
            }
            let wake = self.wake();
            tokio::select! {
                msg = rx.recv() => match msg {
                    Some(msg) => self.handle(msg),
                    None => {
                        // Every handle is gone: end the session.
                        self.s.machine.handle_input(Instant::now(), Input::Close);
                    }
                },
                () = tokio::time::sleep_until(wake.into()) => self.timers(),
            }
        }
    }

    fn refuse(&mut self, msg: Msg) {
        match msg {
            Msg::Stats(r) => {
                let _ = r.send(self.stats());
            }
            Msg::Close(r) | Msg::Detach(r) => {
                let _ = r.send(());
            }
            Msg::SetQuality(_, r) => {
                let _ = r.send(Err(crate::error::SdkError::Closed));
            }
            _ => {}
        }
    }

    fn wake(&self) -> Instant {
        let mut t = self.next_tick;
        if let Some(m) = self.s.machine.poll_timeout() {
            t = t.min(m);
        }
        for tr in self.transports.values() {
            if let Some(p) = tr.peer.poll_timeout() {
                t = t.min(p);
            }
            if let Some(r) = tr.relay_timeout() {
                t = t.min(r);
            }
        }
        t
    }

    fn input(&mut self, input: Input) {
        self.s.machine.handle_input(Instant::now(), input);
    }

    fn handle(&mut self, msg: Msg) {
        let now = Instant::now();
        match msg {
            Msg::Datagram(t, from, mut data) => {
                let Some(tr) = self.transports.get_mut(&t) else {
                    return;
                };
                if tr.relayed() {
                    tr.receive_relayed(now, from, &mut data);
                    self.relay_progress(t, now);
                } else if !tr.relay_only {
                    tr.peer.handle_datagram(now, from, &mut data);
                }
                self.drain_frames(t);
            }
            Msg::Relays(t, gathered) => self.relays_gathered(t, gathered, now),
            Msg::TurnDrain(sub, relays) => {
                if sub == self.subscription.load(Ordering::Relaxed) {
                    self.relays_drained(relays, now);
                }
            }
            Msg::MoveRelays(t, gathered) => self.move_gathered(t, gathered, now),
            Msg::MoveRestarted(t, result) => self.move_restarted(t, result, now),
            Msg::Posted(t, result) => self.posted(t, result),
            Msg::Restarted(t, result) => self.restarted(t, result),
            Msg::Input(sub, input) => {
                if sub == self.subscription.load(Ordering::Relaxed) {
                    self.input(input);
                }
            }
            Msg::EventsEnded(sub) => {
                if sub == self.subscription.load(Ordering::Relaxed)
                    && let Some(t) = self.current
                {
                    self.probe(t, LossCause::NodeUnreachable);
                }
            }
            Msg::Probed(t, cause, alive) => {
                if let Some(tr) = self.transports.get_mut(&t) {
                    tr.probing = false;
                    tr.heard.1 = now;
                }
                if alive {
                    // The node is there: its events stream just ended (or the stream's
                    // publisher is away). Listen again.
                    if cause == LossCause::NodeUnreachable
                        && let Some(l) = self.s.machine.location().map(str::to_owned)
                    {
                        self.subscribe(l);
                    }
                } else {
                    self.input(Input::Lost {
                        transport: t,
                        cause,
                    });
                }
            }
            Msg::Send {
                video,
                data,
                duration,
                keyframe,
            } => {
                if video && !self.video_enabled {
                    self.frames_dropped += 1;
                    return;
                }
                let data = match self.s.media.role {
                    PeerRole::Publisher {
                        video: ferry_rtc::codec::Codec::H264,
                        ..
                    } if video => self.parameter_sets.complete(data),
                    _ => data,
                };
                if let Some(tr) = self.current.and_then(|t| self.transports.get_mut(&t))
                    && tr
                        .peer
                        .send_frame(now, video, &data, duration, keyframe)
                        .is_ok()
                {
                    if video {
                        self.frames_sent += 1;
                    }
                    if tr.peer.take_keyframe_request() {
                        self.want_keyframe();
                    }
                }
            }
            Msg::Stats(r) => {
                let _ = r.send(self.stats());
            }
            Msg::Close(r) => {
                self.closing = Some(r);
                self.input(Input::Close);
            }
            Msg::Detach(r) => self.detached = Some(r),
            Msg::ResetGaps => {
                if let Some(tr) = self.current.and_then(|t| self.transports.get_mut(&t)) {
                    tr.peer.reset_arrival_gaps();
                }
            }
            Msg::SetQuality(q, r) => self.set_quality(q, r),
            Msg::QualityFailed(e) => self.quality_failed(e),
        }
    }

    fn want_keyframe(&self) {
        self.s
            .shared
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .keyframe_wanted = true;
    }

    fn stats(&self) -> Stats {
        let tr = self.current.and_then(|t| self.transports.get(&t));
        let shared = self.s.shared.lock().unwrap_or_else(|e| e.into_inner());
        Stats {
            state: Some(self.s.machine.state()),
            session: shared.session.clone(),
            node: shared.node.clone(),
            location: shared.location.clone(),
            peer: tr.map(|t| t.peer.stats()),
            frames: match self.s.kind {
                Kind::Publish => self.frames_sent,
                Kind::Play => tr.map_or(0, |t| t.frames),
            },
            frames_dropped: self.frames_dropped,
            migrations: self.migrations,
            reconnects: self.reconnects,
            transports: self.transports.keys().last().copied().unwrap_or(0),
            relay: tr.and_then(|t| t.relay.as_ref()).and_then(Relay::stats),
            relay_moves: self.relay_moves,
        }
    }

    /// Frames the current (or a pending) transport completed: to the app, and counted.
    fn drain_frames(&mut self, t: u32) {
        let current = Some(t) == self.current;
        let Some(tr) = self.transports.get_mut(&t) else {
            return;
        };
        while let Some(f) = tr.peer.poll_frame() {
            if f.video {
                tr.frames += 1;
            }
            if !current {
                continue;
            }
            if let Some(q) = &self.s.frames
                && q.try_send(f).is_err()
            {
                self.frames_dropped += 1;
            }
        }
    }

    fn timers(&mut self) {
        let now = Instant::now();
        let ts: Vec<u32> = self.transports.keys().copied().collect();
        for t in &ts {
            if let Some(tr) = self.transports.get_mut(t)
                && tr.peer.poll_timeout().is_some_and(|d| d <= now)
            {
                tr.peer.handle_timeout(now);
            }
            self.relay_progress(*t, now);
            self.drain_frames(*t);
        }
        if self.s.machine.poll_timeout().is_some_and(|d| d <= now) {
            self.s.machine.handle_timeout(now);
        }
        if now >= self.next_tick {
            self.next_tick = now + TICK;
            for t in ts {
                self.look_at(t, now);
            }
        }
        if now >= self.next_stats {
            self.next_stats = now + STATS_EVERY;
            self.throughput(now);
        }
    }

    /// Frames, a path that came up, a transport that went quiet.
    fn look_at(&mut self, t: u32, now: Instant) {
        let kind = self.s.kind;
        let synthetic = self.s.media.synthetic;
        let current = Some(t) == self.current;
        let Some(tr) = self.transports.get_mut(&t) else {
            return;
        };
        let st = tr.peer.stats();
        if synthetic && kind == Kind::Play {
            tr.frames = st.video().map(|v| v.frames_completed).sum();
        }
        let mut inputs = Vec::new();
        if kind == Kind::Play && tr.frames > 0 {
            inputs.push(Input::Frames {
                transport: t,
                total: tr.frames,
            });
        }
        if tr.answered && !tr.connected && tr.peer.is_connected() {
            tr.connected = true;
            inputs.push(Input::Connected { transport: t });
        }
        if tr.restarting && tr.peer.ice().is_some_and(|i| i.is_connected()) {
            tr.restarting = false;
            inputs.push(Input::Connected { transport: t });
        }
        if st.datagrams_received != tr.heard.0 {
            tr.heard = (st.datagrams_received, now);
        }
        let quiet = match kind {
            Kind::Play => PLAY_STALL,
            Kind::Publish => PUBLISH_STALL,
        };
        let stalled = current
            && tr.connected
            && !tr.probing
            && now.saturating_duration_since(tr.heard.1) >= quiet;
        for i in inputs {
            self.input(i);
        }
        if stalled {
            self.probe(t, LossCause::Stalled);
        }
    }

    fn throughput(&mut self, now: Instant) {
        let kind = self.s.kind;
        let Some(tr) = self.current.and_then(|t| self.transports.get_mut(&t)) else {
            return;
        };
        let st = tr.peer.stats();
        let (bytes, packets, missing) = st.received.iter().fold((0, 0, 0), |a, r| {
            (a.0 + r.bytes, a.1 + r.packets, a.2 + r.received.missing())
        });
        let before = tr.window.replace((now, bytes, packets, missing));
        if !tr.connected {
            return;
        }
        let sample = match kind {
            // The node's estimate of what reaches it.
            Kind::Publish => st.remb_bps.map(|bps| (bps, 0.0)),
            Kind::Play => before.map(|(at, b, p, m)| {
                let secs = now.saturating_duration_since(at).as_secs_f64().max(0.001);
                let got = packets.saturating_sub(p);
                let lost = missing.saturating_sub(m);
                let loss = if got + lost == 0 {
                    0.0
                } else {
                    lost as f64 / (got + lost) as f64
                };
                ((bytes.saturating_sub(b) as f64 * 8.0 / secs) as u64, loss)
            }),
        };
        if let Some((bps, loss)) = sample {
            self.input(Input::Throughput { bps, loss });
        }
    }

    fn probe(&mut self, t: u32, cause: LossCause) {
        let Some(location) = self.s.machine.location().map(str::to_owned) else {
            return;
        };
        let Some(tr) = self.transports.get_mut(&t) else {
            return;
        };
        if tr.probing {
            return;
        }
        tr.probing = true;
        let tx = self.tx.clone();
        tokio::task::spawn_blocking(move || {
            let alive = signalling::probe(&location);
            let _ = tx.send(Msg::Probed(t, cause, alive));
        });
    }

    fn posted(&mut self, t: u32, result: Result<Created, Refusal>) {
        let now = Instant::now();
        let mut layer = None;
        let input = match result {
            Ok(c) => match self.transports.get_mut(&t) {
                Some(tr) => match tr.peer.apply_answer(now, &c.answer) {
                    Ok(()) => {
                        tr.answered = true;
                        layer = Some((c.location.clone(), c.layer));
                        Input::Answered {
                            transport: t,
                            location: c.location,
                            session: c.session,
                            node: c.node,
                            ticket: c.ticket,
                        }
                    }
                    Err(e) => Input::PostFailed {
                        transport: t,
                        status: 502,
                        reason: format!("unusable answer: {e}"),
                    },
                },
                None => return,
            },
            Err((status, reason)) => Input::PostFailed {
                transport: t,
                status,
                reason,
            },
        };
        // A new session on its node: the caps before its media flows.
        if let Some((location, url)) = layer {
            self.quality_answered(&location, url);
        }
        self.input(input);
    }

    fn restarted(&mut self, t: u32, result: Result<String, Refusal>) {
        let input = match result {
            Ok(frag) => match self.transports.get_mut(&t) {
                Some(tr) => match tr.peer.apply_restart_answer(&frag) {
                    Ok(()) => {
                        tr.restarting = true;
                        Input::RestartAnswered { transport: t }
                    }
                    Err(e) => Input::RestartFailed {
                        transport: t,
                        status: 502,
                        reason: format!("unusable restart answer: {e}"),
                    },
                },
                None => return,
            },
            Err((status, reason)) => Input::RestartFailed {
                transport: t,
                status,
                reason,
            },
        };
        self.input(input);
    }

    async fn commands(&mut self) {
        while let Some(c) = self.s.machine.poll_command() {
            self.command(c).await;
        }
    }

    async fn command(&mut self, c: Command) {
        match c {
            Command::Post {
                transport,
                endpoint,
                idempotency_key,
                ticket,
                failed_node,
            } => {
                let offer = match self.transports.get(&transport) {
                    Some(tr) if !tr.answered => tr.offer.clone(),
                    _ => match self.open(transport).await {
                        Some(offer) => offer,
                        None => {
                            self.input(Input::PostFailed {
                                transport,
                                status: 0,
                                reason: "no UDP socket".into(),
                            });
                            return;
                        }
                    },
                };
                // The first offer may go straight to a node; every later one (a recovery) goes
                // through the gateway, which knows which nodes are alive.
                let url = match (endpoint, &self.s.first_endpoint) {
                    (Endpoint::Gateway, Some(first)) if transport == 1 => first.clone(),
                    (Endpoint::Gateway, _) => self.s.endpoint.clone(),
                    (Endpoint::Url(u), _) => u,
                };
                let req = PostRequest {
                    url,
                    offer,
                    idempotency_key,
                    ticket,
                    failed_node,
                    token: self.s.token.clone(),
                };
                // Relays first: the POST waits until this transport has one (or none works).
                if let Some(tr) = self.transports.get_mut(&transport)
                    && self.s.relays.wanted()
                    && !tr.direct
                    && !tr.relay.as_ref().is_some_and(Relay::is_allocated)
                {
                    tr.waiting = Some(req);
                    if tr.relay.is_none() {
                        self.gather(transport);
                    }
                    return;
                }
                self.post(transport, req);
            }
            Command::RestartIce {
                transport,
                location,
            } => {
                // The session's own restart wins over a move off a draining relay.
                self.fail_move(
                    transport,
                    0,
                    "the session restarts ICE (path lost or migration)".into(),
                    Instant::now(),
                );
                let Some(tr) = self.transports.get_mut(&transport) else {
                    return;
                };
                let frag = tr.peer.ice_restart();
                let tx = self.tx.clone();
                tokio::task::spawn_blocking(move || {
                    let r = signalling::patch_restart(&location, &frag);
                    let _ = tx.send(Msg::Restarted(transport, r));
                });
            }
            Command::Adopt { transport } => {
                let switched = self.current.is_some_and(|c| c != transport);
                self.current = Some(transport);
                let others: Vec<u32> = self
                    .transports
                    .keys()
                    .copied()
                    .filter(|t| *t != transport)
                    .collect();
                for t in others {
                    self.close_transport(t);
                }
                let now = Instant::now();
                if let Some(tr) = self.transports.get_mut(&transport) {
                    tr.heard.1 = now;
                    // IDR-aware: whatever the switch, the receiving side asks for a keyframe.
                    if self.s.kind == Kind::Play {
                        tr.peer.request_keyframe(now);
                    }
                }
                if self.s.kind == Kind::Publish && switched {
                    // A new transport: its viewers switch at our next keyframe.
                    self.want_keyframe();
                }
                self.sync_shared();
            }
            Command::CloseTransport { transport } => self.close_transport(transport),
            Command::Subscribe { location } => {
                self.sync_shared();
                self.subscribe(location);
            }
            Command::Delete { location } => {
                self.subscription.fetch_add(1, Ordering::Relaxed);
                let _ = tokio::task::spawn_blocking(move || signalling::delete(&location)).await;
            }
            Command::SetVideo { enabled } => {
                self.video_enabled = enabled;
                if enabled {
                    self.want_keyframe();
                }
                if self.s.kind == Kind::Play
                    && let Some(l) = self.s.machine.location().map(str::to_owned)
                {
                    tokio::task::spawn_blocking(move || signalling::set_video(&l, enabled));
                }
            }
            Command::StoreTicket { ticket } => {
                if let Some(path) = &self.s.ticket_file {
                    crate::ticket::store_ticket(path, ticket.as_deref());
                }
            }
            Command::Emit(e) => {
                let state = match &e {
                    Event::Migrated { .. } => {
                        self.migrations += 1;
                        None
                    }
                    Event::Reconnected { .. } => {
                        self.reconnects += 1;
                        None
                    }
                    Event::State { state, .. } => Some(*state),
                    _ => None,
                };
                self.sync_shared();
                // The event first: whoever waits for the state finds its reason queued.
                let _ = self.s.events.send(e);
                if let Some(state) = state {
                    let _ = self.s.state.send(state);
                }
            }
        }
    }

    fn sync_shared(&self) {
        let mut sh = self.s.shared.lock().unwrap_or_else(|e| e.into_inner());
        sh.session = self.s.machine.session().map(str::to_owned);
        sh.node = self.s.machine.node().map(str::to_owned);
        sh.location = self.s.machine.location().map(str::to_owned);
    }

    fn subscribe(&self, location: String) {
        let sub = self.subscription.fetch_add(1, Ordering::Relaxed) + 1;
        let current = self.subscription.clone();
        let tx = self.tx.clone();
        std::thread::spawn(move || {
            signalling::follow_events(&location, |event| {
                let msg = match event {
                    SessionEvent::Input(input) => Msg::Input(sub, input),
                    SessionEvent::TurnDrain(relays) => Msg::TurnDrain(sub, relays),
                };
                current.load(Ordering::Relaxed) == sub && tx.send(msg).is_ok()
            });
            let _ = tx.send(Msg::EventsEnded(sub));
        });
    }

    fn post(&self, transport: u32, req: PostRequest) {
        let tx = self.tx.clone();
        tokio::task::spawn_blocking(move || {
            let _ = tx.send(Msg::Posted(transport, signalling::post_offer(&req)));
        });
    }
}

/// Opening, flushing and closing the session's transports.
impl Driver {
    pub(super) fn close_transport(&mut self, t: u32) {
        if let Some(mut tr) = self.transports.remove(&t) {
            let now = Instant::now();
            tr.peer.close();
            while let Some((to, d)) = tr.peer.poll_transmit() {
                tr.send(now, to, &d);
            }
            // Dropping it deallocates its relays.
        }
        if self.current == Some(t) {
            self.current = None;
        }
    }

    /// A new transport: a socket, a peer, its offer.
    pub(super) async fn open(&mut self, t: u32) -> Option<String> {
        let socket = ferry_rtc::udp::bind(([0, 0, 0, 0], 0).into()).ok()?;
        let local = socket.local_addr().ok()?;
        let now = Instant::now();
        let seed = self.s.seed.wrapping_add(u64::from(t) * 0x9e37_79b9);
        let mut cfg = PeerConfig::new(self.s.media.role, seed, local, now);
        if let Some((wall, epoch)) = self.s.media.clocks {
            cfg.wall = wall;
            cfg.latency_epoch = epoch;
        }
        cfg.video_bitrate_bps = self.s.media.bitrate_bps;
        cfg.media = if self.s.media.synthetic {
            MediaSource::Synthetic
        } else {
            MediaSource::External
        };
        let mut secret = [0u8; 32];
        secret[..8].copy_from_slice(&seed.to_le_bytes());
        secret[8] = 0x5d;
        let cert = cert::generate(secret).ok()?;
        let mut peer = Peer::new(cfg, Arc::new(cert), now);
        let offer = peer.create_offer();
        let socket = Arc::new(socket);
        let reader = tokio::spawn(read_socket(t, socket.clone(), self.tx.clone()));
        self.transports.insert(
            t,
            Transport {
                peer,
                socket,
                reader,
                offer: offer.clone(),
                answered: false,
                connected: false,
                restarting: false,
                frames: 0,
                heard: (0, now),
                probing: false,
                window: None,
                relay: None,
                gathering: false,
                waiting: None,
                direct: false,
                relay_only: self.s.relays.relay_only,
                moving: None,
                retiring: None,
            },
        );
        Some(offer)
    }

    pub(super) fn flush(&mut self) {
        let now = Instant::now();
        for tr in self.transports.values_mut() {
            while let Some((to, d)) = tr.peer.poll_transmit() {
                tr.send(now, to, &d);
            }
            tr.flush_relay();
        }
    }
}

async fn read_socket(t: u32, socket: Arc<UdpSocket>, tx: mpsc::UnboundedSender<Msg>) {
    let mut buf = vec![0u8; 2048];
    loop {
        match socket.recv_from(&mut buf).await {
            Ok((n, from)) => {
                if tx.send(Msg::Datagram(t, from, buf[..n].to_vec())).is_err() {
                    return;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {}
            Err(_) => return,
        }
    }
}
