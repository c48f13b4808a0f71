//! The room WebSocket's JSON frames (docs/rooms.md, "Signalling"): what clients send, what
//! they get, and the events a merge window produces (the difference of two room views).

use std::collections::{BTreeSet, HashSet};

use serde::Deserialize;
use serde_json::{Value as Json, json};

use crate::hlc::Hlc;
use crate::ids::{IdempotencyKey, ParticipantId};
use crate::op::{Command, CommandError, Layout, Register, TrackKind, Value};
use crate::state::{ChatMessage, ParticipantView, RoomState, RoomView, Touched};
use ferry_proto::ids::{StreamId, TrackId};

/// A frame from a client.
#[derive(Clone, PartialEq, Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum ClientFrame {
    /// Enter the room.
    Join {
        /// Idempotency key.
        key: String,
        /// Display name.
        #[serde(default)]
        name: String,
        /// Opaque metadata.
        #[serde(default)]
        metadata: String,
    },
    /// Leave the room.
    Leave {
        /// Idempotency key.
        key: String,
    },
    /// Write a register.
    Set {
        /// Idempotency key.
        key: String,
        /// `audio_muted`, `video_muted`, `hand_raised`, `layout`, `attribute`.
        register: String,
        /// The attribute's name (`register: attribute` only).
        #[serde(default)]
        name: Option<String>,
        /// The value.
        value: Json,
    },
    /// Announce a track.
    Publish {
        /// Idempotency key.
        key: String,
        /// Track id.
        track: String,
        /// WHIP stream.
        stream: String,
        /// `audio` / `video`.
        kind: String,
    },
    /// Withdraw a track.
    Unpublish {
        /// Idempotency key.
        key: String,
        /// Track id.
        track: String,
    },
    /// Reactions.
    React {
        /// Idempotency key.
        key: String,
        /// Step.
        delta: i64,
    },
    /// Chat.
    Chat {
        /// Idempotency key.
        key: String,
        /// Text.
        text: String,
    },
    /// Lazy subscription.
    Subscribe {
        /// Echoed in the `subscribed` (or `error`) answer, to match it (not an idempotency key).
        #[serde(default)]
        key: Option<String>,
        /// Event types wanted (`None`: all).
        #[serde(default)]
        events: Option<Vec<String>>,
        /// Whose register events are wanted (`None`: everyone's).
        #[serde(default)]
        participants: Option<Vec<String>>,
    },
}

/// A refused frame: the `error` frame's `code` and `message`.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct FrameError {
    /// Machine-readable.
    pub code: &'static str,
    /// For people.
    pub message: String,
}

impl FrameError {
    pub(crate) fn bad(message: impl Into<String>) -> Self {
        FrameError {
            code: "bad_request",
            message: message.into(),
        }
    }
}

impl From<CommandError> for FrameError {
    fn from(e: CommandError) -> Self {
        let code = match e {
            CommandError::TooLarge { .. } => "too_large",
            CommandError::BadValue(_) => "bad_value",
            CommandError::NotInRoom => "not_in_room",
            CommandError::TooManyAttributes => "too_many_attributes",
            CommandError::UnknownTrack => "unknown_track",
            CommandError::KeyReused => "key_reused",
            CommandError::Overloaded { .. } => "overloaded",
        };
        FrameError {
            code,
            message: e.to_string(),
        }
    }
}

pub use ferry_proto::room::EVENT_TYPES;

/// What one connection wants to hear (lazy subscription).
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct Subscription {
    /// Event types (`None`: all).
    pub events: Option<HashSet<String>>,
    /// Whose register events (`None`: everyone's).
    pub participants: Option<HashSet<String>>,
}

impl Subscription {
    /// Parses the `subscribe` frame's lists.
    pub fn new(
        events: Option<Vec<String>>,
        participants: Option<Vec<String>>,
    ) -> Result<Self, FrameError> {
        if let Some(bad) = events
            .iter()
            .flatten()
            .find(|e| !EVENT_TYPES.contains(&e.as_str()))
        {
            return Err(FrameError::bad(format!("unknown event type {bad:?}")));
        }
        if let Some(bad) = participants
            .iter()
            .flatten()
            .find(|p| ParticipantId::new(p.as_str()).is_err())
        {
            return Err(FrameError::bad(format!("bad participant id {bad:?}")));
        }
        Ok(Subscription {
            events: events.map(|v| v.into_iter().collect()),
            participants: participants.map(|v| v.into_iter().collect()),
        })
    }

    /// Whether `event` (an `events` entry) passes.
    pub fn wants(&self, event: &Json) -> bool {
        let kind = event["type"].as_str().unwrap_or_default();
        if let Some(events) = &self.events
            && !events.contains(kind)
        {
            return false;
        }
        if kind == "register"
            && let Some(ps) = &self.participants
        {
            return ps.contains(event["participant"].as_str().unwrap_or_default());
        }
        true
    }
}

/// The command a frame asks for, with its key (`None` for `subscribe`).
pub fn command(
    participant: &ParticipantId,
    frame: ClientFrame,
) -> Result<Option<(IdempotencyKey, Command)>, FrameError> {
    let p = participant.clone();
    let key = |k: String| {
        IdempotencyKey::new(k).map_err(|e| FrameError::bad(format!("bad idempotency key: {e}")))
    };
    let track = |t: String| TrackId::new(t).map_err(|e| FrameError::bad(format!("bad track: {e}")));
    Ok(Some(match frame {
        ClientFrame::Join {
            key: k,
            name,
            metadata,
        } => (
            key(k)?,
            Command::Join {
                participant: p,
                name,
                metadata,
            },
        ),
        ClientFrame::Leave { key: k } => (key(k)?, Command::Leave { participant: p }),
        ClientFrame::Set {
            key: k,
            register,
            name,
            value,
        } => {
            let (register, value) = register_value(&register, name, &value)?;
            (
                key(k)?,
                Command::Set {
                    participant: p,
                    register,
                    value,
                },
            )
        }
        ClientFrame::Publish {
            key: k,
            track: t,
            stream,
            kind,
        } => (
            key(k)?,
            Command::Publish {
                participant: p,
                track: track(t)?,
                stream: StreamId::new(stream)
                    .map_err(|e| FrameError::bad(format!("bad stream: {e}")))?,
                kind: match kind.as_str() {
                    "audio" => TrackKind::Audio,
                    "video" => TrackKind::Video,
                    _ => return Err(FrameError::bad("kind must be audio or video")),
                },
            },
        ),
        ClientFrame::Unpublish { key: k, track: t } => (
            key(k)?,
            Command::Unpublish {
                participant: p,
                track: track(t)?,
            },
        ),
        ClientFrame::React { key: k, delta } => (
            key(k)?,
            Command::React {
                participant: p,
                delta,
            },
        ),
        ClientFrame::Chat { key: k, text } => (
            key(k)?,
            Command::Chat {
                participant: p,
                text,
            },
        ),
        ClientFrame::Subscribe { .. } => return Ok(None),
    }))
}

fn register_value(
    register: &str,
    name: Option<String>,
    value: &Json,
) -> Result<(Register, Value), FrameError> {
    let flag = || {
        value
            .as_bool()
            .map(Value::Flag)
            .ok_or_else(|| FrameError::bad(format!("{register} takes true or false")))
    };
    Ok(match register {
        "audio_muted" => (Register::AudioMuted, flag()?),
        "video_muted" => (Register::VideoMuted, flag()?),
        "hand_raised" => (Register::HandRaised, flag()?),
        "layout" => {
            let l = match value.as_str() {
                Some("grid") => Layout::Grid,
                Some("speaker") => Layout::Speaker,
                Some("sidebar") => Layout::Sidebar,
                _ => return Err(FrameError::bad("layout is grid, speaker or sidebar")),
            };
            (Register::Layout, Value::Layout(l))
        }
        "attribute" => {
            let name = name.ok_or_else(|| FrameError::bad("an attribute needs its name"))?;
            let text = match value {
                Json::Null => None,
                Json::String(s) => Some(s.clone()),
                _ => return Err(FrameError::bad("an attribute is a string or null")),
            };
            (Register::Attribute(name), Value::Text(text))
        }
        other => return Err(FrameError::bad(format!("unknown register {other:?}"))),
    })
}

/// `wall.logical.replica`: sortable by wall clock, unique.
pub fn stamp(h: &Hlc) -> String {
    format!("{}.{}.{}", h.wall_ms, h.logical, h.replica)
}

fn layout_name(l: Layout) -> &'static str {
    match l {
        Layout::Grid => "grid",
        Layout::Speaker => "speaker",
        Layout::Sidebar => "sidebar",
    }
}

fn kind_name(k: TrackKind) -> &'static str {
    match k {
        TrackKind::Audio => "audio",
        TrackKind::Video => "video",
    }
}

fn participant_json(p: &ParticipantView) -> Json {
    let tracks: serde_json::Map<String, Json> = p
        .tracks
        .iter()
        .map(|(id, t)| {
            (
                id.to_string(),
                json!({"stream": t.stream.as_str(), "kind": kind_name(t.kind)}),
            )
        })
        .collect();
    json!({
        "name": p.name,
        "metadata": p.metadata,
        "audio_muted": p.audio_muted,
        "video_muted": p.video_muted,
        "hand_raised": p.hand_raised,
        "layout": p.layout.map(layout_name),
        "attributes": p.attributes,
        "tracks": tracks,
    })
}

/// The `state` of a `welcome` frame.
pub fn state_json(view: &RoomView) -> Json {
    state_for(view, &Subscription::default())
}

/// The `state` of a `welcome` frame for a connection with `sub`: a participant is listed when
/// the connection wants `joined` events or names it; chat when it wants `chat`
/// (`participant_count` always). A lazy client of a 10,000-person room gets a small welcome.
pub fn state_for(view: &RoomView, sub: &Subscription) -> Json {
    let wants = |kind: &str| sub.events.as_ref().is_none_or(|e| e.contains(kind));
    let all = wants("joined");
    let participants: serde_json::Map<String, Json> = view
        .participants
        .iter()
        .filter(|(id, _)| {
            all || sub
                .participants
                .as_ref()
                .is_some_and(|ps| ps.contains(id.as_str()))
        })
        .map(|(id, p)| (id.to_string(), participant_json(p)))
        .collect();
    let chat: Vec<Json> = if wants("chat") {
        view.chat
            .iter()
            .map(|m| {
                json!({"participant": m.participant.as_str(), "text": m.text,
                       "stamp": stamp(&m.stamp), "at": m.stamp.wall_ms})
            })
            .collect()
    } else {
        Vec::new()
    };
    json!({"participants": participants, "participant_count": view.participants.len(),
           "chat": chat, "reactions": view.reactions})
}

fn register_events(id: &str, old: Option<&ParticipantView>, new: &ParticipantView) -> Vec<Json> {
    let mut out = Vec::new();
    let flags = [
        ("audio_muted", old.map(|o| o.audio_muted), new.audio_muted),
        ("video_muted", old.map(|o| o.video_muted), new.video_muted),
        ("hand_raised", old.map(|o| o.hand_raised), new.hand_raised),
    ];
    for (name, before, now) in flags {
        if before.unwrap_or(false) != now {
            out.push(
                json!({"type": "register", "participant": id, "register": name, "value": now}),
            );
        }
    }
    if old.and_then(|o| o.layout) != new.layout {
        out.push(
            json!({"type": "register", "participant": id, "register": "layout",
                         "value": new.layout.map(layout_name)}),
        );
    }
    let keys: BTreeSet<&String> = new
        .attributes
        .keys()
        .chain(old.iter().flat_map(|o| o.attributes.keys()))
        .collect();
    for k in keys {
        let before = old.and_then(|o| o.attributes.get(k));
        let now = new.attributes.get(k);
        if before != now {
            out.push(
                json!({"type": "register", "participant": id, "register": "attribute",
                             "name": k, "value": now}),
            );
        }
    }
    for (track, t) in &new.tracks {
        if old.and_then(|o| o.tracks.get(track)) != Some(t) {
            out.push(
                json!({"type": "published", "participant": id, "track": track.as_str(),
                             "stream": t.stream.as_str(), "kind": kind_name(t.kind)}),
            );
        }
    }
    for track in old.iter().flat_map(|o| o.tracks.keys()) {
        if !new.tracks.contains_key(track) {
            out.push(json!({"type": "unpublished", "participant": id, "track": track.as_str()}));
        }
    }
    out
}

/// What changed from `old` to `new`, as events: joins first, then registers and tracks, then
/// leaves, chat in order, the reaction total. A change undone within the window is no event.
pub fn diff(old: &RoomView, new: &RoomView) -> Vec<Json> {
    let mut out = Vec::new();
    for (id, p) in &new.participants {
        participant_events(&mut out, id, old.participants.get(id), p);
    }
    for id in old.participants.keys() {
        if !new.participants.contains_key(id) {
            out.push(left_event(id));
        }
    }
    if new.chat.len() != old.chat.len() || new.chat.last() != old.chat.last() {
        let seen: HashSet<&Hlc> = old.chat.iter().map(|m| &m.stamp).collect();
        out.extend(
            new.chat
                .iter()
                .filter(|m| !seen.contains(&m.stamp))
                .map(chat_event),
        );
    }
    if new.reactions != old.reactions {
        out.push(reactions_event(new.reactions));
    }
    out
}

/// A participant's `joined` (new, or a new name or metadata) and register and track events.
fn participant_events(
    out: &mut Vec<Json>,
    id: &ParticipantId,
    before: Option<&ParticipantView>,
    p: &ParticipantView,
) {
    if before.is_none_or(|b| b.name != p.name || b.metadata != p.metadata) {
        out.push(
            json!({"type": "joined", "participant": id.as_str(), "name": p.name,
                        "metadata": p.metadata}),
        );
    }
    out.extend(register_events(id.as_str(), before, p));
}

fn left_event(id: &ParticipantId) -> Json {
    json!({"type": "left", "participant": id.as_str()})
}

fn chat_event(m: &ChatMessage) -> Json {
    json!({"type": "chat", "participant": m.participant.as_str(), "text": m.text,
           "stamp": stamp(&m.stamp), "at": m.stamp.wall_ms})
}

fn reactions_event(total: i64) -> Json {
    json!({"type": "reactions", "total": total})
}

/// What changed, as [`diff`] says it, looking only at what `touched` names: `told` (what
/// clients were told) becomes the view of `state` again at the cost of the change, not of the
/// room's size. `touched` must name every participant and chat message merged since `told`
/// was the view of `state` (what [`RoomState::take_touched`] gives).
pub fn advance(told: &mut RoomView, state: &RoomState, touched: &Touched) -> Vec<Json> {
    let mut out = Vec::new();
    let mut leaves = Vec::new();
    for id in &touched.participants {
        match state.participant_view(id) {
            Some(p) => {
                participant_events(&mut out, id, told.participants.get(id), &p);
                told.participants.insert(id.clone(), p);
            }
            None => {
                if told.participants.remove(id).is_some() {
                    leaves.push(left_event(id));
                }
            }
        }
    }
    out.extend(leaves);
    for id in &touched.chat {
        let Some(m) = state.chat_message(id) else {
            continue;
        };
        let at = told.chat.partition_point(|c| c.stamp < m.stamp);
        if told.chat.get(at).is_some_and(|c| c.stamp == m.stamp) {
            continue;
        }
        out.push(chat_event(&m));
        // Mostly the newest; one stamped earlier elsewhere goes to its place in the order.
        told.chat.insert(at, m);
    }
    if touched.reactions {
        let total = state.reactions();
        if total != told.reactions {
            out.push(reactions_event(total));
            told.reactions = total;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Replica, ReplicaConfig, ReplicaId, RoomId};

    fn key(n: u32) -> IdempotencyKey {
        IdempotencyKey::new(format!("k{n}")).unwrap()
    }

    #[test]
    fn frames_become_commands() {
        let p = ParticipantId::new("alice").unwrap();
        let f: ClientFrame = serde_json::from_str(
            r#"{"type":"set","key":"k1","register":"attribute","name":"lang","value":"de"}"#,
        )
        .unwrap();
        let (_, cmd) = command(&p, f).unwrap().unwrap();
        assert_eq!(
            cmd,
            Command::Set {
                participant: p.clone(),
                register: Register::Attribute("lang".into()),
                value: Value::Text(Some("de".into()))
            }
        );
        for bad in [
            r#"{"type":"set","key":"k1","register":"audio_muted","value":"yes"}"#,
            r#"{"type":"set","key":"k1","register":"volume","value":1}"#,
            r#"{"type":"publish","key":"k1","track":"cam","stream":"s","kind":"smell"}"#,
            r#"{"type":"chat","key":"a b","text":"x"}"#,
        ] {
            let f: ClientFrame = serde_json::from_str(bad).unwrap();
            assert_eq!(command(&p, f).unwrap_err().code, "bad_request", "{bad}");
        }
        assert!(serde_json::from_str::<ClientFrame>(r#"{"type":"dance"}"#).is_err());
        assert!(Subscription::new(Some(vec!["gossip".into()]), None).is_err());
    }

    #[test]
    fn diff_reports_the_final_state_of_a_window() {
        let a = ReplicaId::new("node-a").unwrap();
        let mut r = Replica::new(ReplicaConfig::new(a, RoomId::new("r").unwrap(), Vec::new()));
        let alice = ParticipantId::new("alice").unwrap();
        let before = r.state().view();
        let mut n = 0;
        let mut run = |r: &mut Replica, c: Command| {
            n += 1;
            r.handle_command(1_000 + u64::from(n), key(n), c).unwrap();
        };
        run(
            &mut r,
            Command::Join {
                participant: alice.clone(),
                name: "Alice".into(),
                metadata: String::new(),
            },
        );
        let mute = |on| Command::Set {
            participant: alice.clone(),
            register: Register::AudioMuted,
            value: Value::Flag(on),
        };
        run(&mut r, mute(true));
        run(
            &mut r,
            Command::Chat {
                participant: alice.clone(),
                text: "hi".into(),
            },
        );
        let mid = r.state().view();
        let events = diff(&before, &mid);
        let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
        assert_eq!(kinds, ["joined", "register", "chat"]);
        // Unmute then mute again within one window: no event.
        run(&mut r, mute(false));
        run(&mut r, mute(true));
        assert!(diff(&mid, &r.state().view()).is_empty());
        run(
            &mut r,
            Command::Leave {
                participant: alice.clone(),
            },
        );
        let after = diff(&mid, &r.state().view());
        assert_eq!(after, vec![json!({"type": "left", "participant": "alice"})]);
        let sub = Subscription::new(Some(vec!["chat".into()]), None).unwrap();
        assert_eq!(events.iter().filter(|e| sub.wants(e)).count(), 1);
        let state = state_json(&mid);
        assert_eq!(state["participants"]["alice"]["audio_muted"], true);
        assert_eq!(state["chat"][0]["text"], "hi");
    }

    /// A window's events cut from what merges touched are the full view diff's, and what
    /// clients were told becomes the view: three replicas, random commands (the simulation's)
    /// and deltas, windows closed at random points, a full merge of every state at the end.
    #[test]
    fn touched_window_events_equal_the_full_diff() {
        use rand::{RngExt, SeedableRng};
        let close = |r: &mut Replica, told: &mut RoomView| {
            let before = told.clone();
            let touched = r.take_touched();
            let events = advance(told, r.state(), &touched);
            assert_eq!(events, diff(&before, &r.state().view()));
            assert_eq!(*told, r.state().view());
        };
        for seed in 0..200 {
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
            let (ids, mut rs) = crate::sim::replicas_of("r", 3);
            let mut told: Vec<RoomView> = rs.iter().map(|r| r.state().view()).collect();
            for i in 0..rng.random_range(0..80u64) {
                let now = 1_000 + i;
                let at = rng.random_range(0..3);
                if rng.random_bool(0.25) {
                    let to = (at + rng.random_range(1..3)) % 3;
                    let delta = rs[at].delta_for(&ids[to]);
                    rs[to].handle_delta(now, &delta).unwrap();
                } else {
                    let p = ParticipantId::new(format!("p{}", rng.random_range(0..4))).unwrap();
                    let present = rs[at].state().is_present(&p);
                    let cmd = crate::sim::random_command(&mut rng, p, present);
                    let k = IdempotencyKey::new(format!("k{i}")).unwrap();
                    let _ = rs[at].handle_command(now, k, cmd);
                }
                if rng.random_bool(0.3) {
                    for (r, t) in rs.iter_mut().zip(told.iter_mut()) {
                        close(r, t);
                    }
                }
            }
            let all: Vec<RoomState> = rs.iter().map(|r| r.state().clone()).collect();
            for (r, t) in rs.iter_mut().zip(told.iter_mut()) {
                for other in &all {
                    r.merge_snapshot(10_000, other).unwrap();
                }
                close(r, t);
            }
        }
    }
}
