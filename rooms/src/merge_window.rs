//! Merge window for outgoing room events (storm control).
//!
//! Changes are collected for a window (50 ms by default; 50/100/200 ms are the configured
//! choices) that opens with the first change. When it closes, one `Batch` goes out: joins and
//! leaves as two lists (the final membership of each participant in the window), register
//! writes collapsed to each register's final value (a mute/unmute/mute flurry is one event),
//! and the rest (tracks, chat, reactions) in arrival order. Pure: time is an argument.

use ferry_proto::ids::{StreamId, TrackId};
use std::collections::BTreeMap;

use crate::hlc::Hlc;
use crate::ids::ParticipantId;
use crate::op::{Op, OpKind, Register, TrackKind, Value};

/// The default window.
pub const DEFAULT_WINDOW_MS: u64 = 50;
/// The longest window accepted.
pub const MAX_WINDOW_MS: u64 = 1_000;

/// One observable change of the room.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Change {
    /// A participant joined (or rejoined).
    Joined {
        /// Who.
        participant: ParticipantId,
        /// Display name.
        name: String,
    },
    /// A participant left.
    Left {
        /// Who.
        participant: ParticipantId,
    },
    /// A register changed.
    Register {
        /// Whose.
        participant: ParticipantId,
        /// Which.
        register: Register,
        /// New value.
        value: Value,
    },
    /// A track was published.
    Published {
        /// Whose.
        participant: ParticipantId,
        /// Track id.
        track: TrackId,
        /// WHIP stream.
        stream: StreamId,
        /// Audio or video.
        kind: TrackKind,
    },
    /// A track was withdrawn.
    Unpublished {
        /// Whose.
        participant: ParticipantId,
        /// Track id.
        track: TrackId,
    },
    /// Someone reacted.
    Reacted {
        /// Who.
        participant: ParticipantId,
    },
    /// A chat message.
    Chat {
        /// Author.
        participant: ParticipantId,
        /// Order key.
        stamp: Hlc,
        /// Text.
        text: String,
    },
}

impl Change {
    /// The change an applied operation makes visible.
    pub fn from_op(op: &Op) -> Change {
        let participant = op.kind.participant().clone();
        match &op.kind {
            OpKind::Join { name, .. } => Change::Joined {
                participant,
                name: name.clone(),
            },
            OpKind::Leave { .. } => Change::Left { participant },
            OpKind::Set {
                register, value, ..
            } => Change::Register {
                participant,
                register: register.clone(),
                value: value.clone(),
            },
            OpKind::Publish {
                track,
                stream,
                kind,
                ..
            } => Change::Published {
                participant,
                track: track.clone(),
                stream: stream.clone(),
                kind: *kind,
            },
            OpKind::Unpublish { track, .. } => Change::Unpublished {
                participant,
                track: track.clone(),
            },
            OpKind::React { .. } => Change::Reacted { participant },
            OpKind::Chat { text, .. } => Change::Chat {
                participant,
                stamp: op.stamp.clone(),
                text: text.clone(),
            },
        }
    }
}

/// What one window sends.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct Batch {
    /// Participants whose last membership change in the window was a join, with their name.
    pub joined: Vec<(ParticipantId, String)>,
    /// Participants whose last membership change in the window was a leave.
    pub left: Vec<ParticipantId>,
    /// Final register values (none for participants that left).
    pub registers: Vec<(ParticipantId, Register, Value)>,
    /// Everything else, in arrival order.
    pub others: Vec<Change>,
    /// How many changes went in.
    pub pushed: usize,
}

impl Batch {
    /// How many events the batch carries.
    pub fn len(&self) -> usize {
        self.joined.len() + self.left.len() + self.registers.len() + self.others.len()
    }

    /// Whether it carries nothing (every change collapsed away).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A window length outside `1..=MAX_WINDOW_MS`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WindowError {
    /// Out of range.
    #[error("merge window of {0} ms is outside 1..=1000 ms")]
    OutOfRange(u64),
}

/// Collects changes for one outgoing stream.
#[derive(Clone, Debug)]
pub struct MergeWindow {
    window_ms: u64,
    opened_at: Option<u64>,
    membership: BTreeMap<ParticipantId, Option<String>>,
    registers: BTreeMap<(ParticipantId, Register), Value>,
    others: Vec<Change>,
    pushed: usize,
}

impl MergeWindow {
    /// A window of `window_ms` (50, 100 or 200 in configuration; 1..=1000 accepted).
    pub fn new(window_ms: u64) -> Result<Self, WindowError> {
        if window_ms == 0 || window_ms > MAX_WINDOW_MS {
            return Err(WindowError::OutOfRange(window_ms));
        }
        Ok(Self {
            window_ms,
            opened_at: None,
            membership: BTreeMap::new(),
            registers: BTreeMap::new(),
            others: Vec::new(),
            pushed: 0,
        })
    }

    /// The window length.
    pub fn window_ms(&self) -> u64 {
        self.window_ms
    }

    /// Adds one change at `now_ms`; the first change opens the window.
    pub fn push(&mut self, now_ms: u64, change: Change) {
        self.opened_at.get_or_insert(now_ms);
        self.pushed += 1;
        match change {
            Change::Joined { participant, name } => {
                self.membership.insert(participant, Some(name));
            }
            Change::Left { participant } => {
                self.registers.retain(|(p, _), _| p != &participant);
                self.membership.insert(participant, None);
            }
            Change::Register {
                participant,
                register,
                value,
            } => {
                self.registers.insert((participant, register), value);
            }
            other => self.others.push(other),
        }
    }

    /// When the open window closes, if one is open.
    pub fn poll_timeout(&self) -> Option<u64> {
        self.opened_at.map(|t| t.saturating_add(self.window_ms))
    }

    /// The batch, once the window has closed.
    pub fn poll(&mut self, now_ms: u64) -> Option<Batch> {
        if now_ms < self.poll_timeout()? {
            return None;
        }
        self.opened_at = None;
        let mut batch = Batch {
            pushed: std::mem::take(&mut self.pushed),
            others: std::mem::take(&mut self.others),
            ..Batch::default()
        };
        for (p, m) in std::mem::take(&mut self.membership) {
            match m {
                Some(name) => batch.joined.push((p, name)),
                None => batch.left.push(p),
            }
        }
        batch.registers = std::mem::take(&mut self.registers)
            .into_iter()
            .map(|((p, r), v)| (p, r, v))
            .collect();
        Some(batch)
    }
}

impl Default for MergeWindow {
    fn default() -> Self {
        Self {
            window_ms: DEFAULT_WINDOW_MS,
            opened_at: None,
            membership: BTreeMap::new(),
            registers: BTreeMap::new(),
            others: Vec::new(),
            pushed: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> ParticipantId {
        ParticipantId::new(s).unwrap()
    }

    fn mute(who: &str, on: bool) -> Change {
        Change::Register {
            participant: p(who),
            register: Register::AudioMuted,
            value: Value::Flag(on),
        }
    }

    #[test]
    fn mute_flips_collapse_to_the_final_state() {
        let mut w = MergeWindow::new(50).unwrap();
        assert_eq!(w.poll_timeout(), None);
        w.push(1_000, mute("alice", true));
        w.push(1_010, mute("alice", false));
        w.push(1_020, mute("bob", true));
        w.push(1_049, mute("alice", true));
        assert_eq!(w.poll_timeout(), Some(1_050));
        assert_eq!(w.poll(1_049), None);
        let b = w.poll(1_050).unwrap();
        assert_eq!(b.pushed, 4);
        assert_eq!(
            b.registers,
            vec![
                (p("alice"), Register::AudioMuted, Value::Flag(true)),
                (p("bob"), Register::AudioMuted, Value::Flag(true)),
            ]
        );
        assert_eq!(w.poll_timeout(), None);
        assert_eq!(w.poll(5_000), None);
    }

    #[test]
    fn joins_and_leaves_go_out_as_one_batch() {
        let mut w = MergeWindow::new(100).unwrap();
        for (i, who) in ["a", "b", "c", "d"].iter().enumerate() {
            w.push(
                i as u64,
                Change::Joined {
                    participant: p(who),
                    name: who.to_uppercase(),
                },
            );
        }
        w.push(5, mute("c", true));
        w.push(
            6,
            Change::Left {
                participant: p("c"),
            },
        );
        w.push(
            7,
            Change::Left {
                participant: p("e"),
            },
        );
        let b = w.poll(100).unwrap();
        assert_eq!(
            b.joined,
            vec![
                (p("a"), "A".into()),
                (p("b"), "B".into()),
                (p("d"), "D".into())
            ]
        );
        assert_eq!(b.left, vec![p("c"), p("e")]);
        assert!(b.registers.is_empty(), "c left: its mute is moot");
        assert_eq!((b.pushed, b.len()), (7, 5));
    }

    #[test]
    fn window_lengths_are_checked() {
        for ms in [50, 100, 200] {
            assert_eq!(MergeWindow::new(ms).unwrap().window_ms(), ms);
        }
        assert_eq!(MergeWindow::new(0).unwrap_err(), WindowError::OutOfRange(0));
        assert!(MergeWindow::new(1_001).is_err());
        assert_eq!(MergeWindow::default().window_ms(), DEFAULT_WINDOW_MS);
    }
}
