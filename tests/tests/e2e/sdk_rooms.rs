//! The Rust SDK's rooms (`FerryClient::join`, docs/sdk.md "Rooms (Rust)") on `ferry dev`: two
//! participants the gateway places on both nodes see each other's join, mute and chat; a retried
//! `send` with the same key is answered `duplicate: true` and the other participant sees one
//! message; a refused command carries the node's code; `move_to` the other node keeps events
//! flowing both ways, and past the old node's grace period the participant is still in the room;
//! `leave` is seen by the other.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use ferry_sdk::{FerryClient, JoinOptions, MediaKind, RegisterValue, Room, RoomEvent, RoomState};
use ferry_sdk::{Receipt, SdkError};
use ferry_tests::cluster::{Dev, room_join, start_dev_registered};

use serde_json::json;

/// Where the gateway places `participant` of `room`: its node and that node's HTTP base.
fn placement(dev: &Dev, room: &str, participant: &str) -> Result<(String, String)> {
    let v = room_join(&dev.gateway, &dev.token, room, participant)?;
    Ok((
        v["node"].as_str().context("node")?.to_owned(),
        v["http"].as_str().context("http")?.to_owned(),
    ))
}

/// A participant: its room and every event read so far.
struct Member {
    id: String,
    room: Room,
    log: Vec<RoomEvent>,
}

impl Member {
    async fn join(client: &FerryClient, room: &str, id: &str, name: &str) -> Result<Member> {
        let opts = JoinOptions {
            participant: Some(id.to_owned()),
            name: Some(name.to_owned()),
            ..JoinOptions::default()
        };
        let room = client
            .join(room, opts)
            .await
            .with_context(|| format!("{id} joins"))?;
        Ok(Member {
            id: id.to_owned(),
            room,
            log: Vec::new(),
        })
    }

    /// The first event (from the start) `pred` accepts, reading up to 5 s for it.
    async fn wait(&mut self, what: &str, pred: impl Fn(&RoomEvent) -> bool) -> Result<RoomEvent> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        loop {
            if let Some(e) = self.log.iter().find(|e| pred(e)) {
                return Ok(e.clone());
            }
            match tokio::time::timeout_at(deadline, self.room.next_event()).await {
                Ok(Some(e)) => self.log.push(e),
                Ok(None) => bail!(
                    "{}: the room ended waiting for {what}: {:?}",
                    self.id,
                    self.log
                ),
                Err(_) => bail!("{}: no {what} within 5 s: {:?}", self.id, self.log),
            }
        }
    }

    /// Reads the events waiting.
    fn drain(&mut self) {
        while let Some(e) = self.room.try_event() {
            self.log.push(e);
        }
    }
}

fn chat_of(text: &'static str) -> impl Fn(&RoomEvent) -> bool {
    move |e| matches!(e, RoomEvent::Chat { text: t, .. } if t == text)
}

fn register_of(who: &str, value: RegisterValue) -> impl Fn(&RoomEvent) -> bool + '_ {
    move |e| {
        matches!(e, RoomEvent::Register { participant, value: v, .. }
            if participant == who && *v == value)
    }
}

fn fresh(r: &Receipt) -> Result<()> {
    ensure!(
        !r.duplicate && !r.key.is_empty() && !r.stamp.is_empty(),
        "{r:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rust_sdk_participants_on_both_nodes_share_a_room_and_move() -> Result<()> {
    let _area = ferry_tests::area(module_path!());
    let dev = start_dev_registered(&[], &[]).await?;
    let room = "sdk-standup";
    let (a_node, a_http) = placement(&dev, room, "alice")?;
    let mut bob_id = None;
    for i in 0..64 {
        let id = format!("bob{i}");
        if placement(&dev, room, &id)?.0 != a_node {
            bob_id = Some(id);
            break;
        }
    }
    let bob_id = bob_id.context("the gateway never placed a participant on the other node")?;
    let bob_is = |e: &RoomEvent| -> bool {
        matches!(e, RoomEvent::Left { participant, .. } if *participant == bob_id)
    };

    let client = FerryClient::new(&dev.gateway).with_token(&dev.token);
    let mut alice = Member::join(&client, room, "alice", "Alice").await?;
    let mut bob = Member::join(&client, room, &bob_id, "Bob").await?;
    let (na, nb) = (alice.room.node(), bob.room.node());
    eprintln!("alice on {na}, {bob_id} on {nb}");
    ensure!(
        na == a_node && nb != na,
        "placed on {na} and {nb} (expected alice on {a_node}, bob elsewhere)"
    );

    // Joins: alice sees bob's as an event; bob found alice in his welcome, and sees his own.
    let joined = alice
        .wait("bob's join", |e| {
            matches!(e, RoomEvent::Joined { participant, name, .. }
                if *participant == bob_id && name == "Bob")
        })
        .await?;
    ensure!(matches!(joined, RoomEvent::Joined { resync: false, .. }));
    ensure!(
        bob.room
            .participants()
            .get("alice")
            .is_some_and(|p| p.name == "Alice"),
        "bob's welcome: {:?}",
        bob.room.participants()
    );
    bob.wait(
        "his own join",
        |e| matches!(e, RoomEvent::Joined { participant, .. } if *participant == bob_id),
    )
    .await?;

    // Mute, both ways.
    let t = Instant::now();
    fresh(&bob.room.set_muted(MediaKind::Audio, true).await?)?;
    alice
        .wait(
            "bob's mute",
            register_of(&bob_id, RegisterValue::AudioMuted(true)),
        )
        .await?;
    let mute_ms = t.elapsed().as_millis();
    ensure!(alice.room.participants()[&bob_id].audio_muted);
    fresh(&alice.room.set_muted(MediaKind::Video, true).await?)?;
    bob.wait(
        "alice's mute",
        register_of("alice", RegisterValue::VideoMuted(true)),
    )
    .await?;

    // Chat, both ways.
    let t = Instant::now();
    fresh(&alice.room.send_chat("hello from alice").await?)?;
    bob.wait("alice's chat", chat_of("hello from alice"))
        .await?;
    let chat_ms = t.elapsed().as_millis();
    fresh(&bob.room.send_chat("hello from bob").await?)?;
    alice.wait("bob's chat", chat_of("hello from bob")).await?;
    eprintln!("mute seen after {mute_ms} ms, chat after {chat_ms} ms (command to event)");

    // A retried command with the same key: the first receipt again, one message.
    let frame = json!({"type": "chat", "key": "sdk-retry-1", "text": "only once"});
    let first = bob.room.send(frame.clone()).await?;
    let retry = bob.room.send(frame).await?;
    ensure!(
        first.key == "sdk-retry-1"
            && !first.duplicate
            && retry.duplicate
            && first.stamp == retry.stamp,
        "{first:?} {retry:?}"
    );
    alice.wait("the retried chat", chat_of("only once")).await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    alice.drain();
    let seen = alice.log.iter().filter(|e| chat_of("only once")(e)).count();
    let held = alice
        .room
        .chat()
        .iter()
        .filter(|m| m.text == "only once")
        .count();
    ensure!(seen == 1 && held == 1, "alice saw {seen}, holds {held}");

    // A refused command carries the node's code (the frame went as protobuf); the room goes on.
    // A value no frame can carry is refused by the SDK itself.
    match alice
        .room
        .send(json!({"type": "set", "register": "volume", "value": true}))
        .await
    {
        Err(SdkError::Refused { code, .. }) if code == "bad_request" => {}
        other => bail!("a bad register: {other:?}"),
    }
    match alice
        .room
        .send(json!({"type": "set", "register": "audio_muted", "value": 3}))
        .await
    {
        Err(SdkError::Invalid(_)) => {}
        other => bail!("a value no frame carries: {other:?}"),
    }

    // Bob moves to alice's node: events keep flowing both ways.
    bob.room.move_to(&a_http).await?;
    ensure!(bob.room.node() == a_node, "bob on {}", bob.room.node());
    bob.wait(
        "moved",
        |e| matches!(e, RoomEvent::Moved { from, to } if *from == nb && *to == a_node),
    )
    .await?;
    fresh(&alice.room.send_chat("after the move").await?)?;
    bob.wait("alice's chat after the move", chat_of("after the move"))
        .await?;
    fresh(&bob.room.raise_hand(true).await?)?;
    alice
        .wait(
            "bob's hand after the move",
            register_of(&bob_id, RegisterValue::HandRaised(true)),
        )
        .await?;
    fresh(&bob.room.set_attribute("lang", Some("de")).await?)?;
    alice
        .wait(
            "bob's attribute",
            register_of(
                &bob_id,
                RegisterValue::Attribute {
                    name: "lang".into(),
                    value: Some("de".into()),
                },
            ),
        )
        .await?;

    // Past the old node's grace period (10 s) for bob's old socket, bob is still in the room:
    // his join on the new node is the latest.
    tokio::time::sleep(Duration::from_secs(11)).await;
    alice.drain();
    bob.drain();
    ensure!(
        !alice.log.iter().any(bob_is),
        "alice saw bob leave: {:?}",
        alice.log
    );
    let seen_by_alice = alice.room.participants();
    let bob_seen = seen_by_alice.get(&bob_id).context("bob gone for alice")?;
    ensure!(bob_seen.audio_muted && bob_seen.hand_raised, "{bob_seen:?}");
    ensure!(bob.room.participants().len() == 2);

    // Leave: alice sees it; bob's room ends.
    fresh(&bob.room.leave().await?)?;
    alice.wait("bob's leave", bob_is).await?;
    let ended = tokio::time::timeout(Duration::from_secs(5), async {
        while bob.room.next_event().await.is_some() {}
    })
    .await;
    ensure!(ended.is_ok(), "bob's room did not end after leave");
    ensure!(
        bob.room.state() == RoomState::Left,
        "{:?}",
        bob.room.state()
    );
    Ok(())
}
