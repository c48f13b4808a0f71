//! The Rust SDK through real coturn relays (Debian `coturn`, `use-auth-secret`): `ferry dev`
//! hands out two relays (`FERRY_TURN_URIS`, `FERRY_TURN_SECRET`); a synthetic Rust SDK
//! publisher and viewer, both `relay_only`, fetch the gateway's credentials, allocate on
//! coturn and play through it — the SDK drops every datagram that does not come through the
//! relay, so frames at the viewer went node → coturn → viewer, and the node answered checks
//! that came from the relayed addresses (coturn's own sockets, checked with `ss`). Closing
//! the sessions deallocates (coturn frees the relay ports). A gateway that signs with another
//! secret than coturn's makes a relay-only session fail at once with `SdkError::Relay`
//! (coturn's 401), and a session with `turn` whose credentials are refused reports
//! `turn-unavailable` and plays directly. Draining the relay under a relay-only viewer
//! (`POST /v1/turn/relays/{id}/drain`) moves it to another coturn by an ICE restart, make
//! before break: no gap in its media, and the drained coturn is left with no allocation within
//! seconds (the SDK deallocates the old relay).

use std::net::SocketAddr;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use ferry_sdk::codec::Codec;
use ferry_sdk::{
    Event, FerryClient, PlayOptions, PublishOptions, RelayError, SdkError, Session, TurnError,
};
use ferry_tests::cluster::{drain_relay, relay_id, start_dev_with_relays, start_scheduler};
use ferry_tests::coturn::Coturn;
use ferry_tests::sdk::{frames_over, synthetic};

const SECRET: &str = "sdk-turn-test-secret";

/// The UDP sockets `turnserver` holds on 127.0.0.1 (`ss -uanp`).
fn coturn_sockets() -> Result<Vec<SocketAddr>> {
    let out = Command::new("ss")
        .args(["-uanp"])
        .output()
        .context("running ss (apt-get install iproute2)")?;
    ensure!(out.status.success(), "ss -uanp failed");
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains("\"turnserver\""))
        .filter_map(|l| l.split_whitespace().nth(3)?.parse().ok())
        .collect())
}

/// Plays `stream`, again while the stream is not there yet (404).
async fn play(client: &FerryClient, stream: &str, opts: &PlayOptions) -> Result<Session> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match client.play(stream, opts.clone()).await {
            Ok(s) => return Ok(s),
            Err(e) if Instant::now() < deadline && e.to_string().contains("404") => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => bail!("play {stream}: {e}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_only_rust_sdk_sessions_play_through_coturn() -> Result<()> {
    let _area = ferry_tests::area(module_path!());
    let relays = Coturn::start_fleet(SECRET, 2)?;
    let uris = format!("{},{}", relays[0].uri(), relays[1].uri());
    let dev = start_dev_with_relays(&relays, SECRET).await?;
    let client = FerryClient::new(&dev.gateway).with_token(&dev.token);
    let relay_ports: Vec<u16> = relays.iter().map(|r| r.port).collect();

    let mut p = PublishOptions::new(Codec::Vp8, false);
    p.media = synthetic();
    p.relay_only = true;
    p.user = Some("alice".into());
    let started = Instant::now();
    let publisher = client
        .publish("relayed", p)
        .await
        .context("the relay-only publisher did not connect")?;
    let publish_ms = started.elapsed().as_millis();
    let view = PlayOptions {
        media: synthetic(),
        relay_only: true,
        user: Some("bob".into()),
        ..PlayOptions::default()
    };
    let mut viewer = play(&client, "relayed", &view)
        .await
        .context("the relay-only viewer did not connect")?;
    let frames = frames_over(&viewer, 30, Duration::from_secs(10)).await?;

    let sockets = coturn_sockets()?;
    let mut relayed = Vec::new();
    for (who, s) in [("publisher", &publisher), ("viewer", &viewer)] {
        let st = s.stats().await?;
        let r = st
            .relay
            .with_context(|| format!("the {who} is not on a relay"))?;
        ensure!(
            relay_ports.contains(&r.server.port()),
            "the {who}'s relay {} is not one of the gateway's ({uris})",
            r.server
        );
        ensure!(
            sockets.contains(&r.relayed) && !relay_ports.contains(&r.relayed.port()),
            "the {who}'s relayed address {} is not a coturn relay socket: {sockets:?}",
            r.relayed
        );
        ensure!(
            r.turn.channel_data_sent > 0 && r.turn.received > 0,
            "the {who}'s media did not go through the relay: {:?}",
            r.turn
        );
        println!(
            "{who}: relay {} relayed {} allocated in {} ms, {:?}",
            r.uri, r.relayed, r.allocation_ms, r.turn
        );
        relayed.push(r.relayed);
    }
    println!("publisher connected in {publish_ms} ms; viewer {frames} frames");
    while let Some(e) = viewer.try_event() {
        ensure!(!matches!(e, Event::Error { .. }), "viewer error: {e:?}");
    }

    // Closing deallocates: coturn frees both relayed ports.
    viewer.close().await;
    publisher.close().await;
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let sockets = coturn_sockets()?;
        let left: Vec<&SocketAddr> = relayed.iter().filter(|a| sockets.contains(a)).collect();
        if left.is_empty() {
            break;
        }
        ensure!(
            Instant::now() < deadline,
            "coturn still holds {left:?} after the sessions closed"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // `turn` without usable credentials (a user name with ':' is refused): reported, and the
    // session plays directly.
    let direct = PlayOptions {
        media: synthetic(),
        turn: true,
        user: Some("not:valid".into()),
        ..PlayOptions::default()
    };
    let mut p = PublishOptions::new(Codec::Vp8, false);
    p.media = synthetic();
    let publisher = client.publish("direct", p).await?;
    let mut viewer = play(&client, "direct", &direct).await?;
    frames_over(&viewer, 10, Duration::from_secs(10)).await?;
    ensure!(
        viewer.stats().await?.relay.is_none(),
        "no relay, yet one in use"
    );
    let mut unavailable = None;
    while let Some(e) = viewer.try_event() {
        if let Event::Error { code, status, .. } = &e
            && code == "turn-unavailable"
        {
            unavailable = Some(*status);
        }
    }
    ensure!(
        unavailable == Some(400),
        "turn-unavailable (400) not reported: {unavailable:?}"
    );
    viewer.close().await;
    publisher.close().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_only_session_with_a_credential_coturn_refuses_fails_with_a_typed_error()
-> Result<()> {
    let _area = ferry_tests::area(module_path!());
    let relays = Coturn::start_fleet(SECRET, 2)?;
    let uris = format!("{},{}", relays[0].uri(), relays[1].uri());
    // A gateway that signs with another secret than the relays check.
    let token = "sdk-turn-wrong-secret-token";
    let gateway = start_scheduler(
        &["--token", token],
        &[
            ("FERRY_TURN_URIS", &uris),
            ("FERRY_TURN_SECRET", "not-the-relays-secret"),
        ],
    )?;
    let client = FerryClient::new(gateway.after("http")?).with_token(token);
    let started = Instant::now();
    let opts = PlayOptions {
        media: synthetic(),
        relay_only: true,
        ..PlayOptions::default()
    };
    let r = client.play("cam", opts).await;
    let took = started.elapsed();
    match r {
        Err(SdkError::Relay(RelayError::Turn {
            error: TurnError::Unauthorized(_),
            uri,
        })) => {
            ensure!(
                uri == relays[1].uri() || uri == relays[0].uri(),
                "the error names {uri}"
            );
        }
        Err(e) => bail!("wrong error: {e:?}"),
        Ok(_) => bail!("a refused credential connected"),
    }
    ensure!(
        took < Duration::from_secs(5),
        "the refusal took {took:?} (both relays answer 401 at once)"
    );
    println!("relay-only with a refused credential failed in {took:?}");
    Ok(())
}

/// The largest gap between two new video packets at the session since its last
/// `reset_arrival_gaps` (as `ferry bench recovery` measures a blackout).
async fn largest_video_gap(s: &Session) -> Result<Duration> {
    let st = s.stats().await?;
    let peer = st.peer.context("no transport")?;
    Ok(peer
        .received
        .iter()
        .filter(|r| r.is_video())
        .map(|r| r.max_arrival_gap)
        .max()
        .unwrap_or_default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn draining_the_relay_moves_a_rust_sdk_viewer_without_a_gap_and_frees_the_relay() -> Result<()>
{
    let _area = ferry_tests::area(module_path!());
    let relays = Coturn::start_fleet(SECRET, 3)?;
    let uris: Vec<String> = relays.iter().map(Coturn::uri).collect();
    let dev = start_dev_with_relays(&relays, SECRET).await?;
    let client = FerryClient::new(&dev.gateway).with_token(&dev.token);

    // The publisher sends directly; the viewer only through a relay.
    let mut p = PublishOptions::new(Codec::Vp8, false);
    p.media = synthetic();
    let publisher = client.publish("drained", p).await?;
    let view = PlayOptions {
        media: synthetic(),
        relay_only: true,
        user: Some("carol".into()),
        ..PlayOptions::default()
    };
    let mut viewer = play(&client, "drained", &view)
        .await
        .context("the relay-only viewer did not connect")?;
    frames_over(&viewer, 30, Duration::from_secs(10)).await?;
    let before = viewer.stats().await?;
    let relay = before.relay.context("the viewer is not on a relay")?;
    let used = relays
        .iter()
        .position(|c| c.port == relay.server.port())
        .with_context(|| format!("relay {} is no coturn of the test", relay.server))?;
    ensure!(
        relays[used].relays_on(relay.relayed.port()),
        "relayed address {} is not on {}",
        relay.relayed,
        uris[used]
    );
    ensure!(
        relays[used].allocations()? == 1,
        "the relay in use holds {} allocations",
        relays[used].allocations()?
    );

    // The operator drains that relay.
    let id = relay_id(&dev.gateway, &uris[used])?;
    while viewer.try_event().is_some() {}
    viewer.reset_arrival_gaps();
    drain_relay(&dev.gateway, &dev.token, &id, 60)?;
    let drained_at = Instant::now();

    // The node passes the drain on at its next heartbeat (~1 s); the viewer moves.
    let deadline = drained_at + Duration::from_secs(5);
    let (from, to, sdk_ms) = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, viewer.next_event()).await {
            Ok(Some(Event::RelayMoved {
                drained,
                from,
                to,
                ms,
            })) => {
                ensure!(
                    drained.contains(&uris[used]),
                    "the drain names {drained:?}, not {}",
                    uris[used]
                );
                break (from, to, ms);
            }
            Ok(Some(Event::Error {
                code,
                status,
                message,
            })) => bail!("viewer error {code} {status}: {message}"),
            Ok(Some(_)) => {}
            Ok(None) => bail!("the viewer ended"),
            Err(_) => bail!("no relay-moved within 5 s of the drain"),
        }
    };
    let moved_after = drained_at.elapsed();
    ensure!(from == uris[used], "moved from {from}, not {}", uris[used]);

    // The SDK deallocates the old relay: the drained coturn is left with nothing (coturn
    // closes the socket of a deallocated relay about a second later).
    let moved_at = Instant::now();
    let deadline = moved_at + Duration::from_secs(5);
    let empty_after = loop {
        let n = relays[used].allocations()?;
        if n == 0 {
            break moved_at.elapsed();
        }
        ensure!(
            Instant::now() < deadline,
            "the drained relay still holds {n} allocations"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };

    // On another coturn, the same transport, and media flows on it.
    let frames_then = viewer.stats().await?.frames;
    frames_over(&viewer, frames_then + 30, Duration::from_secs(5))
        .await
        .context("the viewer stopped playing after the move")?;
    let after = viewer.stats().await?;
    let relay = after.relay.context("the viewer left the relays")?;
    let now_on = relays
        .iter()
        .position(|c| c.port == relay.server.port())
        .with_context(|| format!("relay {} is no coturn of the test", relay.server))?;
    ensure!(now_on != used, "still on the drained relay {}", uris[used]);
    ensure!(
        to == uris[now_on],
        "relay-moved says {to}, stats {}",
        uris[now_on]
    );
    ensure!(
        relays[now_on].relays_on(relay.relayed.port()),
        "relayed address {} is not on {}",
        relay.relayed,
        uris[now_on]
    );
    ensure!(
        relay.turn.channel_data_sent > 0 && relay.turn.received > 30,
        "the media does not go through the new relay: {:?}",
        relay.turn
    );
    ensure!(after.relay_moves == 1, "{} relay moves", after.relay_moves);
    ensure!(
        after.transports == before.transports && after.reconnects == 0,
        "the viewer did not keep its transport: {} → {} transports, {} reconnects",
        before.transports,
        after.transports,
        after.reconnects
    );
    let gap = largest_video_gap(&viewer).await?;
    ensure!(
        gap < Duration::from_millis(500),
        "a {} ms gap in the video across the move",
        gap.as_millis()
    );

    ensure!(
        relays[now_on].allocations()? == 1,
        "the new relay holds {} allocations",
        relays[now_on].allocations()?
    );
    while let Some(e) = viewer.try_event() {
        ensure!(!matches!(e, Event::Error { .. }), "viewer error: {e:?}");
    }
    eprintln!(
        "relay drain (Rust SDK): relay-moved {} ms after the drain (SDK: {sdk_ms} ms from the \
         event, {from} → {to}); largest video gap {} ms; drained coturn empty {} ms after the \
         move",
        moved_after.as_millis(),
        gap.as_millis(),
        empty_after.as_millis(),
    );
    viewer.close().await;
    publisher.close().await;
    Ok(())
}
