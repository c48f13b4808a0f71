//! The Rust SDK's public face: [`FerryClient`] publishes and plays; a [`Session`] is one
//! publish or play that stays alive by itself (see [`crate::fsm`]).

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ferry_rtc::codec::Codec;
use ferry_rtc::peer::{PeerRole, ReceivedFrame};
use tokio::sync::{mpsc, oneshot, watch};

use crate::driver::{Driver, FRAME_QUEUE, MediaSetup, Msg, Setup, Shared, Stats};
use crate::error::SdkError;
use crate::fsm::{Config, Event, Kind, Machine, State};
use crate::quality::Quality;
use crate::ticket::load_ticket;
use crate::turn::{IceServer, RelayError, RelaySetup};

/// How a session's media is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Media {
    /// Encoded frames from and to the app ([`Session::send_video`], [`Session::next_frame`]).
    #[default]
    Frames,
    /// Synthetic media at this video bitrate (benchmarks, load tests): stamped payloads whose
    /// latency and completeness the receiving side measures.
    Synthetic {
        /// Video bitrate.
        bitrate_bps: u32,
    },
}

/// Options of [`FerryClient::publish`].
#[derive(Debug, Clone)]
pub struct PublishOptions {
    /// Video codec (`Opus` means audio only).
    pub video: Codec,
    /// Send an Opus track.
    pub audio: bool,
    /// Frames from the app, or synthetic.
    pub media: Media,
    /// Where the session's ticket is kept: a restarted app resumes its session from it.
    pub ticket_file: Option<PathBuf>,
    /// State machine settings.
    pub config: Config,
    /// Randomness (ICE credentials, SSRCs, jitter); `None` draws one.
    pub seed: Option<u64>,
    /// Synthetic media: share wall clock and latency epoch with the receivers.
    pub clocks: Option<(ferry_rtc::time::WallClock, Instant)>,
    /// Where the first offer goes (a node's WHIP endpoint) instead of the gateway's; every
    /// later one (a recovery) goes through the gateway.
    pub endpoint: Option<String>,
    /// Send through the gateway's TURN relays (`POST /v1/turn/credentials`), falling back to
    /// direct when none works (an `Event::Error` with code `turn-unavailable` says so).
    pub turn: bool,
    /// Only through a relay (the gateway's, and `ice_servers`), never directly: a relay that
    /// does not allocate fails over to the next; none → [`SdkError::Relay`].
    pub relay_only: bool,
    /// Who relay credentials are asked for (`None`: a random name per session).
    pub user: Option<String>,
    /// The app's own relays (`turn:` over UDP), tried before the gateway's; given alone, they
    /// are used like `turn`.
    pub ice_servers: Vec<IceServer>,
}

impl PublishOptions {
    /// `video` (+ Opus when `audio`), frames from the app.
    pub fn new(video: Codec, audio: bool) -> Self {
        PublishOptions {
            video,
            audio,
            media: Media::Frames,
            ticket_file: None,
            config: Config::default(),
            seed: None,
            clocks: None,
            endpoint: None,
            turn: false,
            relay_only: false,
            user: None,
            ice_servers: Vec::new(),
        }
    }
}

/// Options of [`FerryClient::play`].
#[derive(Debug, Clone, Default)]
pub struct PlayOptions {
    /// Frames to the app, or synthetic (measured, not handed over).
    pub media: Media,
    /// Where the session's ticket is kept.
    pub ticket_file: Option<PathBuf>,
    /// State machine settings.
    pub config: Config,
    /// Randomness; `None` draws one.
    pub seed: Option<u64>,
    /// Synthetic media: the wall clock and latency epoch the publisher uses.
    pub clocks: Option<(ferry_rtc::time::WallClock, Instant)>,
    /// Where the first offer goes (a node's WHEP endpoint) instead of the gateway's; every
    /// later one (a recovery) goes through the gateway.
    pub endpoint: Option<String>,
    /// As [`PublishOptions::turn`].
    pub turn: bool,
    /// As [`PublishOptions::relay_only`].
    pub relay_only: bool,
    /// As [`PublishOptions::user`].
    pub user: Option<String>,
    /// As [`PublishOptions::ice_servers`].
    pub ice_servers: Vec<IceServer>,
}

/// A client of one Ferry cluster (its gateway, or any node).
#[derive(Debug, Clone)]
pub struct FerryClient {
    pub(crate) base: String,
    pub(crate) token: Option<String>,
}

impl FerryClient {
    /// A client of the cluster at `base_url` (`http://127.0.0.1:8080`).
    pub fn new(base_url: impl Into<String>) -> Self {
        FerryClient {
            base: base_url.into().trim_end_matches('/').to_owned(),
            token: None,
        }
    }

    /// Sends `Authorization: Bearer token` with every POST.
    pub fn with_token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }

    /// Publishes `stream`; returns once the session is connected.
    pub async fn publish(&self, stream: &str, opts: PublishOptions) -> Result<Session, SdkError> {
        let timeout = opts.config.connect_timeout * 2;
        let session = self.start(
            Kind::Publish,
            stream,
            MediaSetup {
                role: PeerRole::Publisher {
                    video: opts.video,
                    audio: opts.audio,
                },
                synthetic: matches!(opts.media, Media::Synthetic { .. }),
                bitrate_bps: match opts.media {
                    Media::Synthetic { bitrate_bps } => bitrate_bps,
                    Media::Frames => 1_000_000,
                },
                clocks: opts.clocks,
            },
            opts.config,
            opts.seed,
            opts.ticket_file,
            opts.endpoint,
            RelaySetup {
                turn: opts.turn,
                relay_only: opts.relay_only,
                user: opts.user,
                ice_servers: opts.ice_servers,
            },
        )?;
        session.connected(timeout).await
    }

    /// Plays `stream`; returns once the session is connected.
    pub async fn play(&self, stream: &str, opts: PlayOptions) -> Result<Session, SdkError> {
        let timeout = opts.config.connect_timeout * 2;
        let session = self.start(
            Kind::Play,
            stream,
            MediaSetup {
                role: PeerRole::Viewer,
                synthetic: matches!(opts.media, Media::Synthetic { .. }),
                bitrate_bps: 1_000_000,
                clocks: opts.clocks,
            },
            opts.config,
            opts.seed,
            opts.ticket_file,
            opts.endpoint,
            RelaySetup {
                turn: opts.turn,
                relay_only: opts.relay_only,
                user: opts.user,
                ice_servers: opts.ice_servers,
            },
        )?;
        session.connected(timeout).await
    }

    #[allow(clippy::too_many_arguments)]
    fn start(
        &self,
        kind: Kind,
        stream: &str,
        media: MediaSetup,
        config: Config,
        seed: Option<u64>,
        ticket_file: Option<PathBuf>,
        first_endpoint: Option<String>,
        relays: RelaySetup,
    ) -> Result<Session, SdkError> {
        if let Err(e) = ferry_proto::StreamId::new(stream) {
            return Err(SdkError::Invalid(format!("stream name {stream:?}: {e}")));
        }
        let seed = seed.unwrap_or_else(rand::random);
        let key_seed = format!("{:016x}{:016x}", rand::random::<u64>(), seed);
        let machine = Machine::new(kind, config, (seed as u32) | 1, key_seed);
        let path = match kind {
            Kind::Publish => "whip",
            Kind::Play => "whep",
        };
        let (tx, rx) = mpsc::unbounded_channel();
        let (events_tx, events) = mpsc::unbounded_channel();
        let (state_tx, state) = watch::channel(State::Idle);
        let (frames_tx, frames) = match (kind, media.synthetic) {
            (Kind::Play, false) => {
                let (t, r) = mpsc::channel(FRAME_QUEUE);
                (Some(t), Some(r))
            }
            _ => (None, None),
        };
        let shared = Arc::new(Mutex::new(Shared::default()));
        let ticket = ticket_file.as_deref().and_then(load_ticket);
        let setup = Setup {
            kind,
            endpoint: format!("{}/{path}/{stream}", self.base),
            first_endpoint,
            token: self.token.clone(),
            machine,
            media,
            seed,
            ticket,
            ticket_file,
            events: events_tx,
            frames: frames_tx,
            state: state_tx,
            shared: shared.clone(),
            base: self.base.clone(),
            stream: stream.to_owned(),
            relays,
        };
        let driver = Driver::new(setup, tx.clone());
        tokio::spawn(driver.run(rx));
        Ok(Session {
            kind,
            tx,
            events,
            frames,
            state,
            shared,
        })
    }
}

/// One publish or play session. It follows migrations and recovers from lost nodes by itself;
/// dropping it ends the session like [`Session::close`].
#[derive(Debug)]
pub struct Session {
    kind: Kind,
    tx: mpsc::UnboundedSender<Msg>,
    events: mpsc::UnboundedReceiver<Event>,
    frames: Option<mpsc::Receiver<ReceivedFrame>>,
    state: watch::Receiver<State>,
    shared: Arc<Mutex<Shared>>,
}

impl Session {
    async fn connected(mut self, timeout: Duration) -> Result<Session, SdkError> {
        let wait = self.state.wait_for(|s| {
            matches!(
                s,
                State::Connected | State::Degraded | State::Closed | State::Failed
            )
        });
        match tokio::time::timeout(timeout, wait).await {
            Ok(Ok(s)) if matches!(*s, State::Connected | State::Degraded) => {}
            Ok(Ok(_)) => {
                if let Some(e) = relay_error(&self.shared) {
                    return Err(SdkError::Relay(e));
                }
                let mut reason = "closed".to_owned();
                while let Ok(e) = self.events.try_recv() {
                    if let Event::State {
                        reason: Some(r), ..
                    } = e
                    {
                        reason = r;
                    }
                }
                return Err(SdkError::Ended(reason));
            }
            Ok(Err(_)) => return Err(SdkError::Closed),
            Err(_) => {
                let _ = self.tx.send(Msg::Close(oneshot::channel().0));
                if let Some(e) = relay_error(&self.shared) {
                    return Err(SdkError::Relay(e));
                }
                return Err(SdkError::Timeout(timeout));
            }
        }
        Ok(self)
    }

    /// Publish or play.
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// Where the session is.
    pub fn state(&self) -> State {
        *self.state.borrow()
    }

    /// Waits until the state is one `f` accepts.
    pub async fn wait_state(&mut self, f: impl FnMut(&State) -> bool) -> Result<State, SdkError> {
        self.state
            .wait_for(f)
            .await
            .map(|s| *s)
            .map_err(|_| SdkError::Closed)
    }

    fn shared(&self) -> std::sync::MutexGuard<'_, Shared> {
        self.shared.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The session id.
    pub fn id(&self) -> Option<String> {
        self.shared().session.clone()
    }

    /// The node serving the session.
    pub fn node(&self) -> Option<String> {
        self.shared().node.clone()
    }

    /// The session's URL on that node.
    pub fn location(&self) -> Option<String> {
        self.shared().location.clone()
    }

    /// The next event (`None` once the session has ended and every event was read).
    pub async fn next_event(&mut self) -> Option<Event> {
        self.events.recv().await
    }

    /// An event, if one is waiting.
    pub fn try_event(&mut self) -> Option<Event> {
        self.events.try_recv().ok()
    }

    /// Takes the session's events out, to read them elsewhere (another task) while this handle
    /// keeps sending, reading stats and closing; [`Session::next_event`] sees none from then on.
    pub fn take_events(&mut self) -> Events {
        let (_, empty) = mpsc::unbounded_channel();
        Events(std::mem::replace(&mut self.events, empty))
    }

    /// Play: the next frame received (VP8 frame, H.264 access unit in Annex B, Opus packet).
    pub async fn next_frame(&mut self) -> Option<ReceivedFrame> {
        match self.frames.as_mut() {
            Some(f) => f.recv().await,
            None => None,
        }
    }

    /// Publish: sends one encoded video frame (VP8 frame, or H.264 access unit in Annex B)
    /// lasting `duration`.
    pub fn send_video(
        &self,
        data: Vec<u8>,
        duration: Duration,
        keyframe: bool,
    ) -> Result<(), SdkError> {
        self.send(true, data, duration, keyframe)
    }

    /// Publish: sends one Opus packet lasting `duration`.
    pub fn send_audio(&self, data: Vec<u8>, duration: Duration) -> Result<(), SdkError> {
        self.send(false, data, duration, false)
    }

    fn send(
        &self,
        video: bool,
        data: Vec<u8>,
        duration: Duration,
        keyframe: bool,
    ) -> Result<(), SdkError> {
        if self.kind != Kind::Publish {
            return Err(SdkError::Invalid("only a publisher sends media".into()));
        }
        self.tx
            .send(Msg::Send {
                video,
                data,
                duration,
                keyframe,
            })
            .map_err(|_| SdkError::Closed)
    }

    /// Publish: whether the receiving side wants a keyframe (a viewer joined or switched, a
    /// new transport); reading it clears it. An encoder should make the next frame a keyframe.
    pub fn take_keyframe_request(&self) -> bool {
        std::mem::take(&mut self.shared().keyframe_wanted)
    }

    /// Play: caps what the node sends this viewer ([`Quality`]; `Quality::default()` leaves it
    /// to the node's estimate again): `POST` to the session's layer URL (the answer's `Link`
    /// with rel `urn:ietf:params:whep:ext:core:layer`, else `{location}/layer`). The caps stay
    /// with the session: the SDK sends them again to the node serving it after every move or
    /// recovery (a failure then is an [`Event::Error`] with code `set-quality-failed`). Returns
    /// once the node took them; [`SdkError::Rejected`] if it refused or did not answer (they are
    /// kept, and sent again after the next move), [`SdkError::Invalid`] for a value outside the
    /// node's ranges or a publisher.
    pub async fn set_quality(&self, quality: Quality) -> Result<(), SdkError> {
        if self.kind != Kind::Play {
            return Err(SdkError::Invalid("only a player has caps".into()));
        }
        quality.validate()?;
        let (tx, rx) = oneshot::channel();
        self.tx
            .send(Msg::SetQuality(quality, tx))
            .map_err(|_| SdkError::Closed)?;
        rx.await.map_err(|_| SdkError::Closed)?
    }

    /// Play: the caps asked for last (`None` if never).
    pub fn quality(&self) -> Option<Quality> {
        self.shared().quality
    }

    /// A snapshot: state, node, counters of the current transport.
    pub async fn stats(&self) -> Result<Stats, SdkError> {
        let (tx, rx) = oneshot::channel();
        self.tx.send(Msg::Stats(tx)).map_err(|_| SdkError::Closed)?;
        rx.await.map_err(|_| SdkError::Closed)
    }

    /// Benchmarks: starts a new window for the largest packet-arrival gap of the current
    /// transport.
    pub fn reset_arrival_gaps(&self) {
        let _ = self.tx.send(Msg::ResetGaps);
    }

    /// Ends the session (DELETE) and waits until it is closed.
    pub async fn close(self) {
        let (tx, rx) = oneshot::channel();
        if self.tx.send(Msg::Close(tx)).is_ok() {
            let _ = rx.await;
        }
    }

    /// Hands the session over instead of ending it: the SDK stops here without telling the
    /// server (no `DELETE`), so whoever holds the session's ticket (its `ticket_file`) resumes
    /// it — on the same node make before break: a publisher's viewers switch to the new
    /// transport at its first keyframe. This transport goes silent; the node closes it once the
    /// resumed one carries media, or when its consent expires.
    pub async fn detach(self) {
        let (tx, rx) = oneshot::channel();
        if self.tx.send(Msg::Detach(tx)).is_ok() {
            let _ = rx.await;
        }
    }
}

/// A session's events, taken out of it with [`Session::take_events`].
#[derive(Debug)]
pub struct Events(mpsc::UnboundedReceiver<Event>);

impl Events {
    /// The next event (`None` once the session has ended and every event was read).
    pub async fn next(&mut self) -> Option<Event> {
        self.0.recv().await
    }
}

/// Why a relay-only session could not use a relay, if that is why it ended.
fn relay_error(shared: &Mutex<Shared>) -> Option<RelayError> {
    shared
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .relay_error
        .clone()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[tokio::test]
    async fn bad_stream_names_are_refused_at_once() {
        let c = FerryClient::new("http://127.0.0.1:9");
        let e = c
            .play("bad name", PlayOptions::default())
            .await
            .unwrap_err();
        assert!(matches!(e, SdkError::Invalid(_)), "{e}");
    }

    #[tokio::test]
    async fn an_unreachable_cluster_is_retried_then_given_up() {
        let c = FerryClient::new("http://127.0.0.1:9");
        let cfg = Config {
            max_attempts: 2,
            backoff_base: Duration::from_millis(10),
            ..Config::default()
        };
        let e = c
            .play(
                "cam",
                PlayOptions {
                    config: cfg,
                    ..PlayOptions::default()
                },
            )
            .await
            .unwrap_err();
        assert!(
            matches!(&e, SdkError::Ended(r) if r.contains("gave up")),
            "{e}"
        );
    }
}
