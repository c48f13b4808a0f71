//! What goes in and out of the [`Machine`](super::Machine): inputs, commands, events, settings.
//! Their serde form is the JavaScript machine's object form (`js/fsm.js`).

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Publish (WHIP) or play (WHEP).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// Sends media.
    Publish,
    /// Receives media.
    Play,
}

/// Where a session is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    /// Not started.
    Idle,
    /// First offer/answer and transport setup.
    Connecting,
    /// Media flows.
    Connected,
    /// Following a migration the server announced.
    Migrating,
    /// The transport was lost; recovering (ICE restart, then a ticket through the gateway).
    Reconnecting,
    /// Media flows without video (the network cannot carry it).
    Degraded,
    /// Closed by the app (or the server ended the session).
    Closed,
    /// Gave up.
    Failed,
}

/// How a session moved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// The edge flipped its route; the client saw nothing.
    Edge,
    /// ICE restart at the target.
    IceRestart,
    /// A new transport with a ticket.
    Reconnect,
}

impl Mode {
    /// The mode as the API names it.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Edge => "edge",
            Mode::IceRestart => "ice-restart",
            Mode::Reconnect => "reconnect",
        }
    }
}

/// Why a transport is considered lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LossCause {
    /// ICE went `disconnected` or `failed`.
    Ice,
    /// The session's event stream dropped and the node does not answer.
    NodeUnreachable,
    /// Media stopped and the node does not answer.
    Stalled,
}

/// A `migrate` server-sent event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigrateEvent {
    /// Cutover mode.
    pub mode: Mode,
    /// Node the session left.
    #[serde(default)]
    pub from: Option<String>,
    /// Node the session is on now.
    pub target: String,
    /// `edge`/`ice-restart`: the session's URL on the target; `reconnect`: the target's
    /// WHIP/WHEP endpoint to POST to.
    pub location: String,
    /// `reconnect`: the ticket that resumes the session there.
    #[serde(default)]
    pub ticket: Option<String>,
}

/// Something that happened, as the driver saw it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum Input {
    /// The app asked to publish or play; `ticket` resumes a persisted session.
    Start {
        /// A persisted ticket (page reload, app restart).
        #[serde(default)]
        ticket: Option<String>,
    },
    /// A POST of transport `transport` was answered with 201.
    Answered {
        /// The transport.
        transport: u32,
        /// The session's URL.
        location: String,
        /// The session id.
        session: String,
        /// The node serving it (`Ferry-Node`).
        #[serde(default)]
        node: Option<String>,
        /// A fresh ticket for the session (`Ferry-Ticket`).
        #[serde(default)]
        ticket: Option<String>,
    },
    /// A POST failed: `status` 0 is a network error (or timeout).
    PostFailed {
        /// The transport.
        transport: u32,
        /// HTTP status, 0 when no response came.
        status: u16,
        /// What the server (or the network) said.
        reason: String,
    },
    /// Transport `transport` is connected (ICE and DTLS; after a restart: on the new path).
    Connected {
        /// The transport.
        transport: u32,
    },
    /// Transport `transport` is lost.
    Lost {
        /// The transport.
        transport: u32,
        /// Why.
        cause: LossCause,
    },
    /// A `migrate` event arrived.
    Migrate(MigrateEvent),
    /// The PATCH of an ICE restart was answered with 200 (and the answer applied).
    RestartAnswered {
        /// The transport.
        transport: u32,
    },
    /// The PATCH of an ICE restart failed (`status` 0: no response).
    RestartFailed {
        /// The transport.
        transport: u32,
        /// HTTP status.
        status: u16,
        /// Reason.
        reason: String,
    },
    /// Frames decoded so far on `transport` (play) — sampled, or counted per frame.
    Frames {
        /// The transport.
        transport: u32,
        /// Running total.
        total: u64,
    },
    /// Measured network figures (about once a second).
    Throughput {
        /// Bit/s available (publish: the sender's estimate; play: received).
        bps: u64,
        /// Fraction of packets lost in the last interval (0–1).
        loss: f64,
    },
    /// A refreshed ticket for the session (event stream).
    Ticket {
        /// The ticket.
        ticket: String,
    },
    /// The server ended the session (`end` event), e.g. its publisher left.
    Ended {
        /// Why.
        reason: String,
    },
    /// The app closes the session.
    Close,
}

/// Where a POST goes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "to", content = "url", rename_all = "kebab-case")]
pub enum Endpoint {
    /// The configured endpoint (the gateway's `/whip|whep/{stream}`), which redirects.
    Gateway,
    /// A node's endpoint named by a `migrate` event.
    Url(String),
}

/// Something the driver must do.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum Command {
    /// Make an offer on transport `transport` (a new one unless it exists and has not been
    /// answered: then resend its offer) and POST it with these headers.
    Post {
        /// The transport.
        transport: u32,
        /// Where to.
        endpoint: Endpoint,
        /// `Idempotency-Key`: the same for a retry of the same request.
        idempotency_key: String,
        /// `Ferry-Ticket`.
        ticket: Option<String>,
        /// `Ferry-Failed-Node`: the node that stopped answering (the gateway checks it and
        /// places the session elsewhere).
        failed_node: Option<String>,
    },
    /// ICE restart on `transport`: new credentials PATCHed to `location`, the answer applied.
    RestartIce {
        /// The transport.
        transport: u32,
        /// Where to PATCH.
        location: String,
    },
    /// `transport` is the session's from now on: show its media, close every other.
    Adopt {
        /// The transport.
        transport: u32,
    },
    /// Give up on `transport` and close it.
    CloseTransport {
        /// The transport.
        transport: u32,
    },
    /// Follow the session's events at `location` (closing any earlier subscription).
    Subscribe {
        /// The session's URL.
        location: String,
    },
    /// End the session on the server (DELETE) and stop every subscription.
    Delete {
        /// The session's URL.
        location: String,
    },
    /// Send (publish) or receive (play) video, or not.
    SetVideo {
        /// On or off.
        enabled: bool,
    },
    /// Persist this ticket (`None`: forget it).
    StoreTicket {
        /// The ticket.
        ticket: Option<String>,
    },
    /// Tell the app.
    Emit(Event),
}

/// What the app hears.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "kebab-case")]
pub enum Event {
    /// The state changed.
    State {
        /// New state.
        state: State,
        /// Previous state.
        previous: State,
        /// Why (failed, closed).
        reason: Option<String>,
    },
    /// The session moved to another node and media flows there.
    #[serde(rename_all = "camelCase")]
    Migrated {
        /// Cutover mode.
        mode: Mode,
        /// Node it left.
        from: Option<String>,
        /// Node it is on.
        to: Option<String>,
        /// Play: the largest gap between decoded frames around the switch. Publish: how long
        /// the session had no working path (0 when the edge moved it).
        blackout_ms: u64,
        /// From the event to the first frame decoded after it (play) or the new path
        /// connected (publish).
        first_frame_ms: u64,
    },
    /// The transport was lost; an attempt follows after `delay_ms`.
    #[serde(rename_all = "camelCase")]
    Reconnecting {
        /// The attempt about to be made since the last success: 1 is the one right after
        /// the loss, 2… are retries.
        attempt: u32,
        /// Wait before it.
        delay_ms: u64,
        /// Why.
        reason: String,
    },
    /// Media flows again after a loss.
    #[serde(rename_all = "camelCase")]
    Reconnected {
        /// From the loss to media flowing again.
        downtime_ms: u64,
        /// How: `ice-restart` (same node) or `reconnect` (a new transport, maybe elsewhere).
        how: Mode,
        /// The session kept its identity (its id) — false when a ticket was refused and a
        /// fresh session replaced it.
        resumed: bool,
        /// Node now serving it.
        node: Option<String>,
    },
    /// Video was turned off (or back on) because of the network.
    Degraded {
        /// Degraded now.
        active: bool,
        /// The figures that decided it.
        bps: u64,
        /// Loss fraction.
        loss: f64,
    },
    /// The transport moved off a draining TURN relay (`turn-drain`) onto another by an ICE
    /// restart; DTLS and the media went on (emitted by the driver, as the browser SDK's
    /// `relay-moved`).
    RelayMoved {
        /// The draining relays the node named.
        drained: Vec<String>,
        /// The relay it left.
        from: String,
        /// The relay it sends through now.
        to: String,
        /// From the `turn-drain` event to a path through the new relay.
        ms: u64,
    },
    /// Something went wrong that the machine handled (or could not).
    Error {
        /// Machine-readable: `ticket-rejected`, `post-failed`, `restart-failed`,
        /// `migration-timeout`, `gave-up` (and the driver's `turn-unavailable`, `turn-lost`,
        /// `relay-move-failed`).
        code: String,
        /// HTTP status, 0 if none.
        status: u16,
        /// Details.
        message: String,
    },
}

/// Timings and thresholds.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Config {
    /// First retry delay.
    #[serde(with = "ms")]
    pub backoff_base: Duration,
    /// Largest retry delay.
    #[serde(with = "ms")]
    pub backoff_cap: Duration,
    /// A first connection must be up within this.
    #[serde(with = "ms")]
    pub connect_timeout: Duration,
    /// A switch (migration, ICE restart, reconnect) must carry media within this.
    #[serde(with = "ms")]
    pub switch_timeout: Duration,
    /// After a loss, the ICE restart at the same URL must work within this (a dead node
    /// refuses the PATCH at once; a hung one is given up on after this).
    #[serde(with = "ms")]
    pub restart_timeout: Duration,
    /// Attempts after a loss before giving up.
    pub max_attempts: u32,
    /// Frames around a switch are watched this long after the first new one.
    #[serde(with = "ms")]
    pub settle: Duration,
    /// An edge migration is announced after its cutover: the blackout window starts this much
    /// before the event.
    #[serde(with = "ms")]
    pub edge_lookback: Duration,
    /// A publisher whose path carries less than this (bit/s, the estimate) turns video off.
    pub min_video_bps: u64,
    /// Above this loss fraction the network cannot carry video (publish and play).
    pub max_loss: f64,
    /// Consecutive bad samples before degrading.
    pub bad_samples: u32,
    /// How long video stays off before trying it again (doubles when it fails again soon).
    #[serde(with = "ms")]
    pub probe_after: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            backoff_base: Duration::from_millis(100),
            backoff_cap: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(10),
            switch_timeout: Duration::from_secs(2),
            restart_timeout: Duration::from_millis(1000),
            max_attempts: 12,
            settle: Duration::from_millis(500),
            edge_lookback: Duration::from_millis(1000),
            min_video_bps: 150_000,
            max_loss: 0.15,
            bad_samples: 3,
            probe_after: Duration::from_secs(10),
        }
    }
}

mod ms {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(d.as_millis() as u64)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_millis)
    }
}
