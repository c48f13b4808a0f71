//! What the driver knows of a player's caps ([`crate::Session::set_quality`]): the latest, which
//! session URLs have them, and where each takes them.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use crate::error::SdkError;
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
    /// The app set `quality`: no session URL has it yet.
    pub(super) fn set(&mut self, quality: Quality) {
        *self.latest.lock().unwrap_or_else(|e| e.into_inner()) = Some(quality);
        self.told.clear();
    }

    /// The session at `location` takes its caps at `url` (its answer's `Link`).
    pub(super) fn learn_url(&mut self, location: &str, url: String) {
        self.urls.retain(|(l, _)| l != location);
        self.urls.push_back((location.to_owned(), url));
        while self.urls.len() > REMEMBERED {
            self.urls.pop_front();
        }
    }

    pub(super) fn latest(&self) -> Option<Quality> {
        *self.latest.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Notes `location` as told; whether it had not been.
    pub(super) fn mark(&mut self, location: &str) -> bool {
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
    pub(super) fn post(
        &self,
        location: &str,
    ) -> impl FnOnce() -> Result<(), SdkError> + Send + 'static {
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
