//! A player's caps ([`crate::Session::set_quality`]): sent to the node serving the session, and
//! again to each session URL it moves to — a `reconnect` or a recovery makes a new session on its
//! node, which knows nothing of them; an `edge` or `ice-restart` move carries them in the
//! session's snapshot, where sending them again changes nothing.

use tokio::sync::oneshot;

use super::{Driver, Msg};
use crate::error::SdkError;
use crate::fsm::{Event, Kind};
use crate::quality::Quality;

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
        self.caps.set(quality);
        self.s
            .shared
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .quality = Some(quality);
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
            self.caps.learn_url(location, url);
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
