//! A player's caps ([`crate::Session::set_quality`]): sent to the node serving the session, and
//! again to each session URL it moves to — a `reconnect` or a recovery makes a new session on its
//! node, which knows nothing of them; an `edge` or `ice-restart` move carries them in the
//! session's snapshot, where sending them again changes nothing.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

use super::{Driver, Msg};
use crate::error::SdkError;
use crate::fsm::{Event, Kind};
use crate::quality::Quality;
use crate::signalling;

/// Session URLs (and their layer URLs) remembered: a few moves' worth.
const REMEMBERED: usize = 8;

/// What the driver knows of the caps.
#[derive(Debug, Default)]
pub(super) struct Caps {
    /// The caps, once the app set any. Shared with the POSTs, which send the latest when they
    /// run: two calls in a row cannot leave the node with the older caps.
    latest: Arc<Mutex<Option<Quality>>>,
    /// POSTs of caps run one at a time (on the blocking pool).
    order: Arc<Mutex<()>>,
    /// Session URLs that have the latest caps.
    told: VecDeque<String>,
    /// Each session URL's caps URL, from its answer's `Link`.
    urls: VecDeque<(String, String)>,
}

impl Caps {
    fn latest(&self) -> Option<Quality> {
        *self.latest.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Notes `location` as told; whether it had not been.
    fn mark(&mut self, location: &str) -> bool {
        if self.told.iter().any(|l| l == location) {
            return false;
        }
        self.told.push_back(location.to_owned());
        while self.told.len() > REMEMBERED {
            self.told.pop_front();
        }
        true
    }

    /// A POST of the latest caps to the session at `location` (blocking).
    fn post(&self, location: &str) -> impl FnOnce() -> Result<(), SdkError> + Send + 'static {
        let url = self
            .urls
            .iter()
            .find(|(l, _)| l == location)
            .map_or_else(|| format!("{location}/layer"), |(_, u)| u.clone());
        let latest = self.latest.clone();
        let order = self.order.clone();
        move || {
            let _turn = order.lock().unwrap_or_else(|e| e.into_inner());
            let body = latest
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .unwrap_or_default()
                .body();
            signalling::set_layer(&url, &body)
                .map_err(|(status, message)| SdkError::Rejected { status, message })
        }
    }
}

impl Driver {
    /// `Session::set_quality`: the new caps to the node serving the session now (answered on
    /// `reply` once it took them), and to every node the session goes to from now on.
    pub(super) fn set_quality(
        &mut self,
        quality: Quality,
        reply: oneshot::Sender<Result<(), SdkError>>,
    ) {
        if self.s.kind != Kind::Play {
            let _ = reply.send(Err(SdkError::Invalid("only a player has caps".into())));
            return;
        }
        *self.caps.latest.lock().unwrap_or_else(|e| e.into_inner()) = Some(quality);
        self.s
            .shared
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .quality = Some(quality);
        self.caps.told.clear();
        let Some(location) = self.s.machine.location().map(str::to_owned) else {
            // Not answered yet: the first answer gets them.
            let _ = reply.send(Ok(()));
            return;
        };
        self.caps.mark(&location);
        let post = self.caps.post(&location);
        tokio::task::spawn_blocking(move || {
            let _ = reply.send(post());
        });
    }

    /// A session URL answered: where its caps go, and (play, caps set) the caps, before its
    /// media flows.
    pub(super) fn quality_answered(&mut self, location: &str, layer: Option<String>) {
        if let Some(url) = layer {
            self.caps.urls.retain(|(l, _)| l != location);
            self.caps.urls.push_back((location.to_owned(), url));
            while self.caps.urls.len() > REMEMBERED {
                self.caps.urls.pop_front();
            }
        }
        self.resend_quality(location);
    }

    /// After the machine's commands: the session's URL now has the caps (a move changed it).
    pub(super) fn sync_quality(&mut self) {
        if let Some(location) = self.s.machine.location().map(str::to_owned) {
            self.resend_quality(&location);
        }
    }

    fn resend_quality(&mut self, location: &str) {
        if self.s.kind != Kind::Play || self.caps.latest().is_none() || !self.caps.mark(location) {
            return;
        }
        let post = self.caps.post(location);
        let tx = self.tx.clone();
        tokio::task::spawn_blocking(move || {
            if let Err(e) = post() {
                let _ = tx.send(Msg::QualityFailed(e));
            }
        });
    }

    /// Caps sent again after a move were refused or not answered.
    pub(super) fn quality_failed(&self, e: SdkError) {
        tracing::warn!(error = %e, "caps not taken");
        let status = match &e {
            SdkError::Rejected { status, .. } => *status,
            _ => 0,
        };
        let _ = self.s.events.send(Event::Error {
            code: "set-quality-failed".into(),
            status,
            message: e.to_string(),
        });
    }
}
