//! Ferry's Rust client SDK (DESIGN §6, `docs/sdk.md`).
//!
//! A [`FerryClient`] publishes and plays streams of a Ferry cluster; each [`Session`] keeps
//! itself alive: it follows live migrations in every cutover mode (`edge`, `ice-restart`,
//! `reconnect` with a ticket), recovers from a node that dies (an ICE restart at the same URL,
//! then a POST with its ticket through the gateway, which places it on a live node), retries
//! with exponential backoff, and turns video off when the network cannot carry it. Events and
//! numbers about each of these come out of [`Session::next_event`] and [`Session::stats`].
//!
//! Like the browser SDK, a session can send its media through TURN relays: `turn` asks the
//! gateway for credentials and falls back to direct when no relay works, `relay_only` never
//! sends directly (fails over across the relays, else [`SdkError::Relay`]), `ice_servers` adds
//! the app's own; [`Stats::relay`] says which relay is in use and the relayed address. A relay
//! being drained (the node's `turn-drain` event) is left for another by an ICE restart, make
//! before break ([`Event::RelayMoved`]).
//!
//! A player can cap what the node sends it ([`Session::set_quality`], a [`Quality`]); the caps
//! follow the session to every node it moves to.
//!
//! ```no_run
//! # async fn demo() -> Result<(), ferry_sdk::SdkError> {
//! use std::time::Duration;
//! use ferry_sdk::{FerryClient, PlayOptions, PublishOptions, codec::Codec};
//!
//! let client = FerryClient::new("http://127.0.0.1:8080");
//! let publisher = client.publish("cam", PublishOptions::new(Codec::Vp8, false)).await?;
//! publisher.send_video(vec![/* a VP8 frame */], Duration::from_millis(33), true)?;
//! let mut player = client.play("cam", PlayOptions::default()).await?;
//! while let Some(frame) = player.next_frame().await {
//!     println!("{} bytes, keyframe {}", frame.data.len(), frame.keyframe);
//! }
//! # Ok(()) }
//! ```
//!
//! Rooms: [`FerryClient::join`] returns a [`Room`] (participants and their state, chat,
//! reactions, commands answered by receipts, events), which reconnects by itself and can move
//! to another node ([`Room::move_to`]); see `docs/sdk.md`, "Rooms (Rust)".
//!
//! [`fsm`] is the state machine the browser SDK (`js/`, served at `/sdk/ferry.js`) shares; the
//! transports are [`ferry_rtc`]'s sans-IO peer, the same code the media node is built from.

mod client;
mod driver;
mod error;
pub mod fsm;
#[cfg(any(test, feature = "fuzzing"))]
pub mod fuzz;
mod h264;
pub mod js;
mod quality;
mod room;
mod signalling;
mod ticket;
mod turn;
mod turn_move;

pub use client::{Events, FerryClient, Media, PlayOptions, PublishOptions, Session};
pub use driver::Stats;
pub use error::SdkError;
pub use ferry_rtc::codec;
pub use ferry_rtc::media;
pub use ferry_rtc::peer::{PeerStats, ReceivedFrame};
pub use ferry_rtc::turn::{TurnError, TurnStats};
pub use fsm::{Event, State};
pub use quality::Quality;
pub use room::{
    ChatMessage, JOIN_TIMEOUT, JoinOptions, MediaKind, Participant, Receipt, RegisterValue, Room,
    RoomEvent, RoomState, Track,
};
pub use turn::{IceServer, RelayError, RelayStats};
