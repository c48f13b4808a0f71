//! Helpers for Ferry's end-to-end tests: real browsers against real sockets.
//!
//! - [`Browser`] launches headless Chromium on one page (fake camera and microphone) and kills it,
//!   helpers and all, on drop.
//! - [`FerryNode`] runs a real `ferry node` process; [`http`] is a bare HTTP/1.1 client.
//! - [`sdk`] drives Rust SDK sessions in process (synthetic media, frames shown).
//! - [`Collector`] serves the test pages in `tests/pages/` and collects the JSON reports they post
//!   every second; a test waits on them with [`Collector::wait_until`].
//!
//! The pages (all take `id=`, the name their reports are filed under):
//!
//! | page | query | what it does |
//! |---|---|---|
//! | `publish.html` | `whip=URL&codec=vp8\|h264&audio=1` | publishes the fake camera (640x360@30) and microphone over WHIP |
//! | `view.html` | `whep=URL` | plays a stream over WHEP into a muted `<video>` |
//! | `sdk-publish.html` | `sdk=URL&base=URL&stream=S&codec=…[&endpoint=URL]` | publishes with the browser SDK (`/sdk/ferry.js`), which follows every migration and recovers by itself |
//! | `sdk-play.html` | `sdk=URL&base=URL&stream=S[&endpoint=URL][&ticket=T]` | plays with the browser SDK; measures every frame shown (gaps, RTP timestamps) across transports |
//! | `room.html` | `sdk=URL&base=URL&room=R&participant=P[&publish=1]` | joins a room with the browser SDK (`client.join`), logs its events; commands `mute`, `unmute`, `hand`, `chat-hello`, `chat-retry`, `leave` |
//! | `loopback.html` | | two peer connections in one page, no server: checks the harness itself |
//!
//! `publish.html` and `view.html` (plain WHIP/WHEP clients, no SDK) also take `trickle=1` (send
//! candidates with `PATCH`), and obey
//! the commands `delete` and `close` (see [`Collector::command`]). Report fields are documented
//! at the top of each page.

mod area;
mod chromium;
pub mod cluster;
mod collector;
pub mod coturn;
pub mod etcd;
pub mod gstreamer;
pub mod netns;
mod node;
pub mod sdk;

pub use area::{AreaGuard, area};
pub use chromium::{Browser, CHROMIUM_ENV};
pub use collector::{Collector, Reports, num};
pub use node::{
    FERRY_BIN_ENV, FerryNode, FerryProcess, LossCounters, Response, api_call, ferry_bin, http,
};
