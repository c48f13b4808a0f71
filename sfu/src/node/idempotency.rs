//! Idempotent session creation (seed 000: an idempotency key on every client request): a client
//! that retries a WHIP/WHEP POST with the same `Idempotency-Key` — its first answer was lost, or
//! it could not tell — gets the same session back (same id, Location, answer) instead of a 409
//! or a second session.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use ferry_proto::StreamId;

use crate::node::signal::{SessionAnswer, SessionKind, SignalError};

/// How long an answer is kept for retries.
pub const IDEMPOTENCY_TTL: Duration = Duration::from_secs(60);
/// Answers kept at most (the oldest go first).
const MAX_ENTRIES: usize = 20_000;
/// Longest key accepted.
pub const MAX_KEY_LEN: usize = 255;

#[derive(Debug)]
struct Entry {
    kind: SessionKind,
    stream: StreamId,
    offer: u32,
    answer: SessionAnswer,
}

/// Answers by key.
#[derive(Debug, Default)]
pub(super) struct Cache {
    entries: HashMap<String, Entry>,
    order: VecDeque<(Instant, String)>,
}

impl Cache {
    fn expire(&mut self, now: Instant) {
        while let Some((at, key)) = self.order.front() {
            if now.saturating_duration_since(*at) < IDEMPOTENCY_TTL
                && self.entries.len() <= MAX_ENTRIES
            {
                break;
            }
            self.entries.remove(key);
            self.order.pop_front();
        }
    }

    /// The answer a request with `key` got before; an error when the key came with another
    /// request.
    pub fn get(
        &mut self,
        now: Instant,
        key: &str,
        kind: SessionKind,
        stream: &StreamId,
        offer: &str,
    ) -> Result<Option<SessionAnswer>, SignalError> {
        self.expire(now);
        let Some(e) = self.entries.get(key) else {
            return Ok(None);
        };
        if e.kind != kind || e.stream != *stream || e.offer != crc32fast::hash(offer.as_bytes()) {
            return Err(SignalError::IdempotencyMismatch(key.to_owned()));
        }
        Ok(Some(e.answer.clone()))
    }

    /// Remembers the answer to a request with `key`.
    pub fn put(
        &mut self,
        now: Instant,
        key: &str,
        kind: SessionKind,
        stream: &StreamId,
        offer: &str,
        answer: &SessionAnswer,
    ) {
        self.expire(now);
        let entry = Entry {
            kind,
            stream: stream.clone(),
            offer: crc32fast::hash(offer.as_bytes()),
            answer: answer.clone(),
        };
        if self.entries.insert(key.to_owned(), entry).is_none() {
            self.order.push_back((now, key.to_owned()));
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn answer(id: &str) -> SessionAnswer {
        SessionAnswer {
            session: ferry_proto::SessionId::new(id).unwrap(),
            sdp: "v=0".into(),
            etag: "\"e\"".into(),
            ticket: None,
        }
    }

    #[test]
    fn a_retry_gets_the_same_answer_until_it_expires() {
        let mut c = Cache::default();
        let now = Instant::now();
        let cam = StreamId::new("cam").unwrap();
        assert_eq!(c.get(now, "k", SessionKind::View, &cam, "o").unwrap(), None);
        c.put(now, "k", SessionKind::View, &cam, "o", &answer("s1"));
        let later = now + Duration::from_secs(30);
        assert_eq!(
            c.get(later, "k", SessionKind::View, &cam, "o").unwrap(),
            Some(answer("s1"))
        );
        assert_eq!(
            c.get(later, "k", SessionKind::View, &cam, "other offer"),
            Err(SignalError::IdempotencyMismatch("k".into()))
        );
        assert!(c.get(later, "k", SessionKind::Publish, &cam, "o").is_err());
        let gone = now + IDEMPOTENCY_TTL + Duration::from_secs(1);
        assert_eq!(
            c.get(gone, "k", SessionKind::View, &cam, "o").unwrap(),
            None
        );
    }

    #[test]
    fn memory_is_bounded() {
        let mut c = Cache::default();
        let now = Instant::now();
        let cam = StreamId::new("cam").unwrap();
        for i in 0..MAX_ENTRIES + 100 {
            c.put(
                now,
                &i.to_string(),
                SessionKind::View,
                &cam,
                "o",
                &answer("s"),
            );
        }
        assert!(c.entries.len() <= MAX_ENTRIES + 1);
        assert_eq!(c.entries.len(), c.order.len());
    }
}
