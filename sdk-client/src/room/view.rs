//! A room's state as a participant sees it (docs/rooms.md, `STATE` and `EVENT`): server events
//! go in ([`RoomView::apply`]); a new connection's welcome is turned into the events that lead
//! there from what the room had ([`RoomView::resync`]). Pure: no socket, no clock.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use super::frames::WelcomeState;
use super::model::{ChatMessage, Participant, RegisterValue, RoomEvent, Track};

/// Participants, chat and reactions, kept from the welcome and the server's events.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct RoomView {
    pub participants: BTreeMap<String, Participant>,
    pub chat: Vec<ChatMessage>,
    /// The stamps of the chat messages held.
    stamps: HashSet<String>,
    pub reactions: i64,
}

impl RoomView {
    /// Applies one server event; false when it is to be dropped (a chat message already held,
    /// or not a server event).
    pub(crate) fn apply(&mut self, ev: &RoomEvent) -> bool {
        match ev {
            RoomEvent::Joined {
                participant,
                name,
                metadata,
                ..
            } => {
                // A refresh (a join again after a reconnect) keeps the registers.
                let p = self.participants.entry(participant.clone()).or_default();
                p.name.clone_from(name);
                p.metadata.clone_from(metadata);
            }
            RoomEvent::Left { participant, .. } => {
                self.participants.remove(participant);
            }
            RoomEvent::Register {
                participant, value, ..
            } => {
                // Someone the room does not hold (a lazy subscription without `joined`): only
                // told.
                if let Some(p) = self.participants.get_mut(participant) {
                    match value {
                        RegisterValue::AudioMuted(on) => p.audio_muted = *on,
                        RegisterValue::VideoMuted(on) => p.video_muted = *on,
                        RegisterValue::HandRaised(on) => p.hand_raised = *on,
                        RegisterValue::Layout(l) => p.layout.clone_from(l),
                        RegisterValue::Attribute { name, value: None } => {
                            p.attributes.remove(name);
                        }
                        RegisterValue::Attribute {
                            name,
                            value: Some(v),
                        } => {
                            p.attributes.insert(name.clone(), v.clone());
                        }
                    }
                }
            }
            RoomEvent::Published {
                participant,
                track,
                stream,
                kind,
                ..
            } => {
                if let Some(p) = self.participants.get_mut(participant) {
                    let t = Track {
                        stream: stream.clone(),
                        kind: kind.clone(),
                    };
                    p.tracks.insert(track.clone(), t);
                }
            }
            RoomEvent::Unpublished {
                participant, track, ..
            } => {
                if let Some(p) = self.participants.get_mut(participant) {
                    p.tracks.remove(track);
                }
            }
            RoomEvent::Chat {
                participant,
                text,
                stamp,
                at,
                ..
            } => {
                if !self.stamps.insert(stamp.clone()) {
                    return false;
                }
                self.chat.push(ChatMessage {
                    participant: participant.clone(),
                    text: text.clone(),
                    stamp: stamp.clone(),
                    at: *at,
                });
            }
            RoomEvent::Reactions { total, .. } => self.reactions = *total,
            RoomEvent::Connected { .. }
            | RoomEvent::Reconnecting { .. }
            | RoomEvent::Moved { .. }
            | RoomEvent::Error { .. } => return false,
        }
        true
    }

    /// Takes the state to a welcome's `state`; the events that did it (`resync: true`): left,
    /// then per participant joined (new, or a new name/metadata), registers, unpublished,
    /// published; chat not held before; reactions.
    pub(crate) fn resync(&mut self, state: &WelcomeState) -> Vec<RoomEvent> {
        let events = resync_events(self, state);
        events.into_iter().filter(|ev| self.apply(ev)).collect()
    }
}

/// The events that take `view` to `state` (see [`RoomView::resync`]).
fn resync_events(view: &RoomView, state: &WelcomeState) -> Vec<RoomEvent> {
    let resync = true;
    let mut out = Vec::new();
    for id in view.participants.keys() {
        if !state.participants.contains_key(id) {
            out.push(RoomEvent::Left {
                participant: id.clone(),
                resync,
            });
        }
    }
    let blank = Participant::default();
    for (id, p) in &state.participants {
        let mine = view.participants.get(id);
        if mine.is_none_or(|m| m.name != p.name || m.metadata != p.metadata) {
            out.push(RoomEvent::Joined {
                participant: id.clone(),
                name: p.name.clone(),
                metadata: p.metadata.clone(),
                resync,
            });
        }
        let base = mine.unwrap_or(&blank);
        let mut register = |value| {
            out.push(RoomEvent::Register {
                participant: id.clone(),
                value,
                resync,
            });
        };
        if base.audio_muted != p.audio_muted {
            register(RegisterValue::AudioMuted(p.audio_muted));
        }
        if base.video_muted != p.video_muted {
            register(RegisterValue::VideoMuted(p.video_muted));
        }
        if base.hand_raised != p.hand_raised {
            register(RegisterValue::HandRaised(p.hand_raised));
        }
        if base.layout != p.layout {
            register(RegisterValue::Layout(p.layout.clone()));
        }
        let names: BTreeSet<&String> = base.attributes.keys().chain(p.attributes.keys()).collect();
        for name in names {
            let now = p.attributes.get(name);
            if base.attributes.get(name) != now {
                register(RegisterValue::Attribute {
                    name: name.clone(),
                    value: now.cloned(),
                });
            }
        }
        for track in base.tracks.keys() {
            if !p.tracks.contains_key(track) {
                out.push(RoomEvent::Unpublished {
                    participant: id.clone(),
                    track: track.clone(),
                    resync,
                });
            }
        }
        for (track, t) in &p.tracks {
            if base.tracks.get(track) != Some(t) {
                out.push(RoomEvent::Published {
                    participant: id.clone(),
                    track: track.clone(),
                    stream: t.stream.clone(),
                    kind: t.kind.clone(),
                    resync,
                });
            }
        }
    }
    for m in &state.chat {
        if !view.stamps.contains(&m.stamp) {
            out.push(RoomEvent::Chat {
                participant: m.participant.clone(),
                text: m.text.clone(),
                stamp: m.stamp.clone(),
                at: m.at,
                resync,
            });
        }
    }
    if state.reactions != view.reactions {
        out.push(RoomEvent::Reactions {
            total: state.reactions,
            resync,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn participant(name: &str) -> Participant {
        Participant {
            name: name.into(),
            ..Participant::default()
        }
    }

    fn message(who: &str, text: &str, stamp: &str) -> ChatMessage {
        ChatMessage {
            participant: who.into(),
            text: text.into(),
            stamp: stamp.into(),
            at: 1,
        }
    }

    #[test]
    fn events_keep_the_state() {
        let mut v = RoomView::default();
        let joined = RoomEvent::Joined {
            participant: "bob".into(),
            name: "Bob".into(),
            metadata: String::new(),
            resync: false,
        };
        assert!(v.apply(&joined));
        let mute = RoomEvent::Register {
            participant: "bob".into(),
            value: RegisterValue::AudioMuted(true),
            resync: false,
        };
        assert!(v.apply(&mute));
        // A join again keeps the registers.
        assert!(v.apply(&joined));
        assert!(v.participants["bob"].audio_muted);
        let attr = |value: Option<&str>| RoomEvent::Register {
            participant: "bob".into(),
            value: RegisterValue::Attribute {
                name: "lang".into(),
                value: value.map(str::to_owned),
            },
            resync: false,
        };
        v.apply(&attr(Some("de")));
        assert_eq!(v.participants["bob"].attributes["lang"], "de");
        v.apply(&attr(None));
        assert!(v.participants["bob"].attributes.is_empty());
        // Registers of someone not held are told, not kept.
        let stranger = RoomEvent::Register {
            participant: "eve".into(),
            value: RegisterValue::HandRaised(true),
            resync: false,
        };
        assert!(v.apply(&stranger));
        assert!(!v.participants.contains_key("eve"));
        // A chat message is held once.
        let chat = RoomEvent::Chat {
            participant: "bob".into(),
            text: "hi".into(),
            stamp: "1.0.a".into(),
            at: 1,
            resync: false,
        };
        assert!(v.apply(&chat));
        assert!(!v.apply(&chat));
        assert_eq!(v.chat.len(), 1);
        assert!(v.apply(&RoomEvent::Left {
            participant: "bob".into(),
            resync: false
        }));
        assert!(v.participants.is_empty());
        assert!(!v.apply(&RoomEvent::Connected { node: "n".into() }));
    }

    #[test]
    fn a_welcome_is_diffed_into_events() {
        let mut v = RoomView::default();
        let mut alice = participant("Alice");
        alice.audio_muted = true;
        alice.attributes.insert("lang".into(), "de".into());
        alice.tracks.insert(
            "cam".into(),
            Track {
                stream: "r.alice.cam".into(),
                kind: "video".into(),
            },
        );
        let first = WelcomeState {
            participants: [
                ("alice".to_owned(), alice.clone()),
                ("carol".to_owned(), participant("Carol")),
            ]
            .into(),
            chat: vec![message("alice", "hi", "1.0.a")],
            reactions: 2,
        };
        let events = v.resync(&first);
        assert_eq!(events.len(), 7, "{events:?}");
        assert_eq!(v.participants, first.participants);
        assert_eq!(v.chat, first.chat);
        // The same welcome again: nothing happened.
        assert!(v.resync(&first).is_empty());

        // Meanwhile: carol left, alice unmuted, changed an attribute, swapped her track, dave
        // joined, a chat message and a reaction.
        let mut alice2 = alice.clone();
        alice2.audio_muted = false;
        alice2.attributes.clear();
        alice2.attributes.insert("team".into(), "red".into());
        alice2.tracks.clear();
        alice2.tracks.insert(
            "mic".into(),
            Track {
                stream: "r.alice.mic".into(),
                kind: "audio".into(),
            },
        );
        let second = WelcomeState {
            participants: [
                ("alice".to_owned(), alice2),
                ("dave".to_owned(), participant("Dave")),
            ]
            .into(),
            chat: vec![
                message("alice", "hi", "1.0.a"),
                message("dave", "yo", "2.0.b"),
            ],
            reactions: 3,
        };
        let a = || "alice".to_owned();
        let resync = true;
        assert_eq!(
            v.resync(&second),
            vec![
                RoomEvent::Left {
                    participant: "carol".into(),
                    resync
                },
                RoomEvent::Register {
                    participant: a(),
                    value: RegisterValue::AudioMuted(false),
                    resync
                },
                RoomEvent::Register {
                    participant: a(),
                    value: RegisterValue::Attribute {
                        name: "lang".into(),
                        value: None
                    },
                    resync
                },
                RoomEvent::Register {
                    participant: a(),
                    value: RegisterValue::Attribute {
                        name: "team".into(),
                        value: Some("red".into())
                    },
                    resync
                },
                RoomEvent::Unpublished {
                    participant: a(),
                    track: "cam".into(),
                    resync
                },
                RoomEvent::Published {
                    participant: a(),
                    track: "mic".into(),
                    stream: "r.alice.mic".into(),
                    kind: "audio".into(),
                    resync
                },
                RoomEvent::Joined {
                    participant: "dave".into(),
                    name: "Dave".into(),
                    metadata: String::new(),
                    resync
                },
                RoomEvent::Chat {
                    participant: "dave".into(),
                    text: "yo".into(),
                    stamp: "2.0.b".into(),
                    at: 1,
                    resync
                },
                RoomEvent::Reactions { total: 3, resync },
            ]
        );
        assert_eq!(v.participants, second.participants);
        assert_eq!(v.chat, second.chat);
        assert_eq!(v.reactions, 3);
        assert!(v.resync(&second).is_empty());
    }

    #[test]
    fn a_new_name_is_a_joined_event_and_registers_of_a_newcomer_count_from_blank() {
        let mut v = RoomView::default();
        let mut bob = participant("Bob");
        bob.hand_raised = true;
        bob.layout = Some("grid".into());
        let state = WelcomeState {
            participants: [("bob".to_owned(), bob.clone())].into(),
            ..WelcomeState::default()
        };
        let kinds: Vec<RegisterValue> = v
            .resync(&state)
            .into_iter()
            .filter_map(|e| match e {
                RoomEvent::Register { value, .. } => Some(value),
                _ => None,
            })
            .collect();
        assert_eq!(
            kinds,
            vec![
                RegisterValue::HandRaised(true),
                RegisterValue::Layout(Some("grid".into()))
            ]
        );
        bob.name = "Robert".into();
        let state = WelcomeState {
            participants: [("bob".to_owned(), bob)].into(),
            ..WelcomeState::default()
        };
        assert_eq!(
            v.resync(&state),
            vec![RoomEvent::Joined {
                participant: "bob".into(),
                name: "Robert".into(),
                metadata: String::new(),
                resync: true
            }]
        );
    }
}
