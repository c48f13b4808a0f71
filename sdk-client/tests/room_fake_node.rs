//! The Rust SDK's room against a scripted fake node on loopback (a join endpoint and a room
//! WebSocket the test drives frame by frame): a dropped socket is rejoined through the gateway,
//! the command it did not answer goes again with its key, and the new welcome's difference
//! comes out as events; a refused token is final.

use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use ferry_sdk::{FerryClient, JoinOptions, RoomEvent, SdkError};
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;

type Socket = WebSocketStream<TcpStream>;

/// A fake node: its base URL, the join requests' bodies, the room sockets opened.
struct FakeNode {
    base: String,
    joins: mpsc::UnboundedReceiver<Value>,
    sockets: mpsc::UnboundedReceiver<Socket>,
}

impl FakeNode {
    async fn start() -> Result<FakeNode> {
        let http = TcpListener::bind("127.0.0.1:0").await?;
        let ws = TcpListener::bind("127.0.0.1:0").await?;
        let base = format!("http://{}", http.local_addr()?);
        let ws_port = ws.local_addr()?.port();
        let (joins_tx, joins) = mpsc::unbounded_channel();
        let (sockets_tx, sockets) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = http.accept().await {
                let Ok(body) = read_request(&mut s).await else {
                    continue;
                };
                let p = body["participant"].as_str().unwrap_or("p-1").to_owned();
                let _ = joins_tx.send(body);
                let answer = json!({"room": "r", "participant": p, "node": "fake",
                    "http": format!("http://127.0.0.1:{ws_port}"),
                    "ws": format!("ws://127.0.0.1:{ws_port}/v1/rooms/r/ws?participant={p}")})
                .to_string();
                let head = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    answer.len()
                );
                let _ = s.write_all(head.as_bytes()).await;
                let _ = s.write_all(answer.as_bytes()).await;
            }
        });
        tokio::spawn(async move {
            while let Ok((s, _)) = ws.accept().await {
                if let Ok(socket) = tokio_tungstenite::accept_async(s).await {
                    let _ = sockets_tx.send(socket);
                }
            }
        });
        Ok(FakeNode {
            base,
            joins,
            sockets,
        })
    }

    async fn socket(&mut self) -> Result<Socket> {
        tokio::time::timeout(Duration::from_secs(5), self.sockets.recv())
            .await
            .context("no room socket within 5 s")?
            .context("listener gone")
    }
}

/// One HTTP request: its JSON body.
async fn read_request(s: &mut TcpStream) -> Result<Value> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = s.read(&mut chunk).await?;
        ensure!(n > 0, "request cut short");
        buf.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&buf).into_owned();
        if let Some(end) = text.find("\r\n\r\n") {
            let length: usize = text[..end]
                .lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.eq_ignore_ascii_case("content-length")
                        .then(|| v.trim().parse().ok())?
                })
                .unwrap_or(0);
            if buf.len() >= end + 4 + length {
                return Ok(serde_json::from_slice(&buf[end + 4..end + 4 + length])?);
            }
        }
    }
}

/// Sends a node frame as the node does by default: a protobuf binary frame.
async fn send(s: &mut Socket, frame: Value) -> Result<()> {
    let bytes = ferry_proto::room::encode_server(&frame)?;
    s.send(Message::Binary(bytes.into())).await?;
    Ok(())
}

/// The next frame from the client, in its JSON form (the SDK sends binary frames).
async fn next_frame(s: &mut Socket) -> Result<Value> {
    loop {
        let m = tokio::time::timeout(Duration::from_secs(5), s.next())
            .await
            .context("no frame within 5 s")?
            .context("socket closed")??;
        match m {
            Message::Binary(b) => return Ok(ferry_proto::room::decode_client(&b)?),
            Message::Text(t) => anyhow::bail!("the SDK sent a text frame: {t}"),
            _ => {}
        }
    }
}

fn welcome(state: Value) -> Value {
    json!({"type": "welcome", "room": "r", "participant": "alice", "node": "fake",
           "window_ms": 50, "state": state})
}

fn receipt(key: &Value, duplicate: bool) -> Value {
    json!({"type": "receipt", "key": key, "duplicate": duplicate, "stamp": "1.0.fake"})
}

async fn next_event(room: &mut ferry_sdk::Room) -> Result<RoomEvent> {
    tokio::time::timeout(Duration::from_secs(5), room.next_event())
        .await
        .context("no event within 5 s")?
        .context("room ended")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_socket_is_rejoined_and_its_unanswered_command_resent() -> Result<()> {
    let mut node = FakeNode::start().await?;
    let client = FerryClient::new(&node.base).with_token("tok");
    let opts = JoinOptions {
        participant: Some("alice".into()),
        name: Some("Alice".into()),
        ..JoinOptions::default()
    };
    let joining = tokio::spawn(async move { client.join("r", opts).await });

    // The first socket: welcome (an empty room), join, receipt.
    let mut s1 = node.socket().await?;
    let body = node.joins.recv().await.context("join request")?;
    ensure!(
        body == json!({"participant": "alice", "name": "Alice"}),
        "{body}"
    );
    send(
        &mut s1,
        welcome(json!({"participants": {}, "chat": [], "reactions": 0})),
    )
    .await?;
    let join1 = next_frame(&mut s1).await?;
    ensure!(
        join1["type"] == "join" && join1["name"] == "Alice",
        "{join1}"
    );
    send(&mut s1, receipt(&join1["key"], false)).await?;
    let mut room = joining.await??;
    ensure!(room.participant() == "alice" && room.node() == "fake");
    ensure!(matches!(
        next_event(&mut room).await?,
        RoomEvent::Connected { .. }
    ));

    // A chat message the node takes but does not answer: then the socket drops (no close).
    let room = std::sync::Arc::new(tokio::sync::Mutex::new(room));
    let sender = room.clone();
    let chat = tokio::spawn(async move { sender.lock().await.send_chat("one").await });
    let sent = next_frame(&mut s1).await?;
    ensure!(sent["type"] == "chat" && sent["text"] == "one", "{sent}");
    drop(s1);

    // Through the gateway again; the new welcome has bob and the message (the node had applied
    // it); the join gets a fresh key; the chat goes again with its key and is a duplicate.
    let mut s2 = node.socket().await?;
    let again = node.joins.recv().await.context("second join request")?;
    ensure!(again["participant"] == "alice", "{again}");
    send(
        &mut s2,
        welcome(json!({
            "participants": {
                "alice": {"name": "Alice"},
                "bob": {"name": "Bob", "hand_raised": true}
            },
            "chat": [{"participant": "alice", "text": "one", "stamp": "1.0.fake", "at": 1}],
            "reactions": 0
        })),
    )
    .await?;
    let join2 = next_frame(&mut s2).await?;
    ensure!(
        join2["type"] == "join" && join2["key"] != join1["key"],
        "{join2}"
    );
    send(&mut s2, receipt(&join2["key"], false)).await?;
    let resent = next_frame(&mut s2).await?;
    ensure!(resent == sent, "resent {resent}, first {sent}");
    send(&mut s2, receipt(&sent["key"], true)).await?;
    let r = tokio::time::timeout(Duration::from_secs(5), chat).await???;
    ensure!(
        r.duplicate && Some(r.key.as_str()) == sent["key"].as_str(),
        "{r:?}"
    );

    let mut room = room.lock().await;
    let mut events = Vec::new();
    loop {
        let ev = next_event(&mut room).await?;
        let done = matches!(ev, RoomEvent::Connected { .. });
        events.push(ev);
        if done {
            break;
        }
    }
    let summary: Vec<String> = events
        .iter()
        .map(|e| match e {
            RoomEvent::Reconnecting { attempt, delay, .. } => {
                format!("reconnecting {attempt} {}ms", delay.as_millis())
            }
            RoomEvent::Joined {
                participant,
                resync,
                ..
            } => format!("joined {participant} {resync}"),
            RoomEvent::Register {
                participant,
                resync,
                ..
            } => format!("register {participant} {resync}"),
            RoomEvent::Chat { text, resync, .. } => format!("chat {text} {resync}"),
            RoomEvent::Connected { node } => format!("connected {node}"),
            other => format!("{other:?}"),
        })
        .collect();
    ensure!(
        summary
            == [
                "reconnecting 1 250ms",
                "joined alice true",
                "joined bob true",
                "register bob true",
                "chat one true",
                "connected fake"
            ],
        "{summary:?}"
    );
    ensure!(room.participants()["bob"].hand_raised);
    ensure!(room.chat().len() == 1);
    // The new socket's events come through.
    send(
        &mut s2,
        json!({"type": "events", "events": [{"type": "left", "participant": "bob"}]}),
    )
    .await?;
    let ev = next_event(&mut room).await?;
    ensure!(
        matches!(&ev, RoomEvent::Left { participant, resync: false } if participant == "bob"),
        "{ev:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_token_and_a_refused_command_carry_their_codes() -> Result<()> {
    let mut node = FakeNode::start().await?;
    let client = FerryClient::new(&node.base).with_token("forged");
    let c = client.clone();
    let joining = tokio::spawn(async move { c.join("r", JoinOptions::default()).await });
    let mut s = node.socket().await?;
    send(
        &mut s,
        json!({"type": "error", "key": null, "code": "unauthorized", "message": "bad token"}),
    )
    .await?;
    s.send(Message::Close(Some(CloseFrame {
        code: 4401.into(),
        reason: "bad token".into(),
    })))
    .await?;
    match joining.await? {
        Err(SdkError::Unauthorized(why)) => ensure!(why == "bad token", "{why}"),
        other => bail!("expected Unauthorized, got {other:?}"),
    }

    // A node that refuses a command: the error carries the code.
    // (Its welcome as a text frame: a node asked for JSON, or of an older version, is read too.)
    let joining = tokio::spawn(async move { client.join("r", JoinOptions::default()).await });
    let mut s = node.socket().await?;
    s.send(Message::Text(welcome(json!({})).to_string().into()))
        .await?;
    let join = next_frame(&mut s).await?;
    send(&mut s, receipt(&join["key"], false)).await?;
    let room = joining.await??;
    // A value no frame can carry (a register is a flag, a text or null) stays here.
    match room
        .send(json!({"type": "set", "register": "volume", "value": 3}))
        .await
    {
        Err(SdkError::Invalid(why)) => ensure!(why.contains("value"), "{why}"),
        other => bail!("expected Invalid, got {other:?}"),
    }
    let asking = tokio::spawn(async move {
        let r = room
            .send(json!({"type": "set", "register": "volume", "value": true}))
            .await;
        (r, room)
    });
    let f = next_frame(&mut s).await?;
    send(
        &mut s,
        json!({"type": "error", "key": f["key"], "code": "bad_request", "message": "unknown register"}),
    )
    .await?;
    let (r, _room) = asking.await?;
    match r {
        Err(SdkError::Refused { code, .. }) => ensure!(code == "bad_request", "{code}"),
        other => bail!("expected Refused, got {other:?}"),
    }
    Ok(())
}
