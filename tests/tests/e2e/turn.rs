//! The TURN fleet against real coturn (Debian `coturn`): three `turnserver`s on loopback with
//! `use-auth-secret`, a `ferry scheduler` configured with their URIs and the same secret only
//! (`FERRY_TURN_URIS`, `FERRY_TURN_SECRET`). `POST /v1/turn/credentials` answers a primary and
//! two backups; coturn itself accepts the credential on each of them (an allocation through the
//! relay, `turnutils_uclient`) and refuses a wrong or an expired one, proving the HMAC scheme
//! matches. Access: no token → 401, a token for another stream → 403, a play token for the
//! stream → 200. Then headless Chromium, relay only (`iceTransportPolicy: "relay"`), publishes
//! and plays through `ferry dev` with the browser SDK fetching the gateway's relays: both
//! peer connections run on a relay candidate pair and the viewer decodes. A plain WHIP client
//! gets the same relays from the node's answer (`Link: rel="ice-server"` with the credential),
//! which coturn accepts.

use std::process::Command;

use anyhow::{Context, Result, ensure};
use ferry_proto::turn::credential;
use ferry_tests::cluster::{
    drain_relay, open_sdk_page, open_sdk_publisher, relay_id, start_dev_with_relays,
    start_scheduler,
};
use ferry_tests::coturn::Coturn;
use ferry_tests::{Collector, ferry_bin, http, num};
use serde_json::{Value, json};

const OFFER: &str = include_str!("../../../rtc/src/sdp/testdata/chrome_offer.sdp");
const SECRET: &str = "turn-test-secret";
const TOKEN_SECRET: &str = "turn-test-token-secret";

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// `ferry token --secret TOKEN_SECRET` with `args`.
fn token(args: &[&str]) -> Result<String> {
    let out = Command::new(ferry_bin()?)
        .args(["token", "--secret", TOKEN_SECRET])
        .args(args)
        .env_remove("FERRY_TOKEN_SECRET")
        .output()?;
    ensure!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8(out.stdout)?.trim().to_owned())
}

#[test]
fn scheduler_issued_turn_credentials_are_accepted_by_coturn_itself() -> Result<()> {
    let _area = ferry_tests::area(module_path!());
    let relays = Coturn::start_fleet(SECRET, 3)?;
    let uris = format!(
        "{};zone=eu,{};zone=eu,{};zone=us",
        relays[0].uri(),
        relays[1].uri(),
        relays[2].uri()
    );
    let api = "turn-test-api-token";
    let scheduler = start_scheduler(
        &["--token", api, "--token-secret", TOKEN_SECRET],
        &[("FERRY_TURN_URIS", &uris), ("FERRY_TURN_SECRET", SECRET)],
    )?;
    let base = scheduler.after("http")?;
    let url = format!("{base}/v1/turn/credentials");
    let ask = |bearer: Option<&str>, body: &Value| {
        let auth = bearer.map(|t| format!("Bearer {t}"));
        let mut headers = vec![("content-type", "application/json")];
        if let Some(a) = &auth {
            headers.push(("authorization", a));
        }
        http(&url, "POST", &headers, body.to_string().as_bytes())
    };

    // Who may ask.
    let body = json!({"user": "alice", "stream": "cam"});
    let r = ask(None, &body)?;
    ensure!(r.status == 401, "no token: {} {}", r.status, r.body);
    let other = token(&["--stream", "other", "--play", "--ttl", "10m"])?;
    let r = ask(Some(&other), &body)?;
    ensure!(
        r.status == 403,
        "another stream's token: {} {}",
        r.status,
        r.body
    );
    let r = ask(Some(&other), &json!({"user": "alice"}))?;
    ensure!(
        r.status == 403,
        "an access token without a stream: {} {}",
        r.status,
        r.body
    );
    let r = ask(Some(api), &json!({"user": "a:b"}))?;
    ensure!(r.status == 400, "a user with ':': {} {}", r.status, r.body);
    let play = token(&["--stream", "cam", "--play", "--ttl", "10m"])?;
    let r = ask(
        Some(&play),
        &json!({"user": "alice", "stream": "cam", "zone": "us"}),
    )?;
    ensure!(r.status == 200, "a play token: {} {}", r.status, r.body);

    // A primary (in the user's zone) and two backups, one credential for all, valid an hour.
    let v: Value = serde_json::from_str(&r.body)?;
    let servers = v["ice_servers"].as_array().context("ice_servers")?;
    ensure!(servers.len() == 3 && v["ttl"] == 3600, "{v}");
    ensure!(
        servers[0]["urls"][0] == relays[2].uri(),
        "primary not in zone us: {v}"
    );
    let username = servers[0]["username"].as_str().context("username")?;
    let password = servers[0]["credential"].as_str().context("credential")?;
    let expiry: u64 = username
        .strip_suffix(":alice")
        .context("username is expiry:user")?
        .parse()?;
    let now = unix_now();
    ensure!(
        (now + 3590..=now + 3610).contains(&expiry),
        "expiry {expiry}"
    );

    // coturn accepts it on every relay it names, and refuses a wrong and an expired one.
    for s in servers {
        let uri = s["urls"][0].as_str().context("url")?;
        let relay = relays
            .iter()
            .find(|r| r.uri() == uri)
            .with_context(|| format!("unknown relay {uri}"))?;
        ensure!(
            relay.allocate(username, password)?,
            "{uri} refused the credential"
        );
    }
    ensure!(
        !relays[0].allocate(username, "d3Jvbmcgd3JvbmcgcGFzcw==")?,
        "coturn accepted a wrong password"
    );
    let expired = credential(SECRET.as_bytes(), "alice", now - 60);
    ensure!(
        !relays[0].allocate(&expired.username, &expired.password)?,
        "coturn accepted an expired credential"
    );
    let forged = credential(b"another-secret", "alice", now + 600);
    ensure!(
        !relays[0].allocate(&forged.username, &forged.password)?,
        "coturn accepted a credential signed with another secret"
    );

    // The scheduler counts what it handed out.
    let m = http(&format!("{base}/metrics"), "GET", &[], b"")?;
    ensure!(
        m.body.contains("ferry_turn_credentials_issued_total 1"),
        "metrics: {}",
        m.body
    );
    // Per relay, the live credentials that name it first: one, on one of the three.
    let live: Vec<&str> = m
        .body
        .lines()
        .filter(|l| l.starts_with("ferry_turn_credentials_live{"))
        .collect();
    ensure!(
        live.len() == 3 && live.iter().filter(|l| l.ends_with(" 1")).count() == 1,
        "live credentials per relay: {live:?}"
    );
    Ok(())
}

#[test]
fn a_scheduler_without_relays_says_so() -> Result<()> {
    let _area = ferry_tests::area(module_path!());
    let scheduler = start_scheduler(
        &["--token", "t"],
        &[("FERRY_TURN_URIS", ""), ("FERRY_TURN_SECRET", "")],
    )?;
    let base = scheduler.after("http")?;
    let r = http(
        &format!("{base}/v1/turn/credentials"),
        "POST",
        &[
            ("content-type", "application/json"),
            ("authorization", "Bearer t"),
        ],
        br#"{"user":"alice"}"#,
    )?;
    ensure!(
        r.status == 503 && r.body.contains("FERRY_TURN_URIS"),
        "{} {}",
        r.status,
        r.body
    );
    // A relay list without a secret is refused at start.
    let out = Command::new(ferry_bin()?)
        .args(["scheduler", "--http", "127.0.0.1:0", "--state-file", "none"])
        .env("FERRY_TURN_URIS", "turn:127.0.0.1:3478")
        .env_remove("FERRY_TURN_SECRET")
        .output()?;
    ensure!(
        !out.status.success() && String::from_utf8_lossy(&out.stderr).contains("--turn-secret"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

/// `POST /v1/turn/credentials` for `user` at the scheduler `base`: (username, credential).
fn issue(base: &str, api: &str, user: &str) -> Result<(String, String)> {
    let r = http(
        &format!("{base}/v1/turn/credentials"),
        "POST",
        &[
            ("content-type", "application/json"),
            ("authorization", &format!("Bearer {api}")),
        ],
        json!({ "user": user }).to_string().as_bytes(),
    )?;
    ensure!(r.status == 200, "{} {}", r.status, r.body);
    let v: Value = serde_json::from_str(&r.body)?;
    let s = &v["ice_servers"][0];
    Ok((
        s["username"].as_str().context("username")?.to_owned(),
        s["credential"].as_str().context("credential")?.to_owned(),
    ))
}

/// Rotating the shared secret with stock coturn: the scheduler signs with the newest of
/// `FERRY_TURN_SECRET` ("new,old"); coturn holding both during the rotation accepts the new
/// credentials and the old ones clients still hold; after it, only new ones pass.
#[test]
fn a_secret_rotation_keeps_credentials_valid_across_the_switch() -> Result<()> {
    let _area = ferry_tests::area(module_path!());
    // A scheduler handing out `relay` with `secret` signs a credential for `user`.
    let issued = |relay: &Coturn, secret: &str, user: &str| -> Result<(String, String)> {
        let api = "turn-rotation-api-token";
        let env = [
            ("FERRY_TURN_URIS", relay.uri()),
            ("FERRY_TURN_SECRET", secret.to_owned()),
        ];
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let s = start_scheduler(&["--token", api], &env)?;
        issue(&s.after("http")?, api, user)
    };
    // Before: everything on the old secret.
    let old_relay = Coturn::start("old-secret")?;
    let (u1, p1) = issued(&old_relay, "old-secret", "alice")?;
    ensure!(
        old_relay.allocate(&u1, &p1)?,
        "the old credential on the old relay"
    );
    // During: relays take both, the scheduler signs with the new one.
    let both = Coturn::start("new-secret,old-secret")?;
    let (u2, p2) = issued(&both, "new-secret,old-secret", "bob")?;
    ensure!(
        both.allocate(&u2, &p2)?,
        "the new credential during the rotation"
    );
    ensure!(
        both.allocate(&u1, &p1)?,
        "the old credential a client holds, during the rotation"
    );
    ensure!(
        !old_relay.allocate(&u2, &p2)?,
        "the scheduler signed with the old secret, not the newest"
    );
    // After: only the new secret.
    let new_relay = Coturn::start("new-secret")?;
    ensure!(
        new_relay.allocate(&u2, &p2)?,
        "the new credential after the rotation"
    );
    ensure!(
        !new_relay.allocate(&u1, &p1)?,
        "an old credential after the rotation"
    );
    Ok(())
}

/// The scheduler's STUN health probes: a relay that stops answering is handed to nobody
/// (`ferry_turn_relay_up{relay} 0`), the others keep their users.
#[test]
fn a_relay_that_stops_answering_stun_is_handed_to_nobody() -> Result<()> {
    let _area = ferry_tests::area(module_path!());
    let mut relays = Coturn::start_fleet(SECRET, 3)?;
    let uris: Vec<String> = relays.iter().map(Coturn::uri).collect();
    let api = "turn-probe-api-token";
    let scheduler = start_scheduler(
        &["--token", api, "--turn-probe-interval-s", "1"],
        &[
            ("FERRY_TURN_URIS", &uris.join(",")),
            ("FERRY_TURN_SECRET", SECRET),
        ],
    )?;
    let base = scheduler.after("http")?;
    let up_lines = || -> Result<Vec<String>> {
        let m = http(&format!("{base}/metrics"), "GET", &[], b"")?;
        Ok(m.body
            .lines()
            .filter(|l| l.starts_with("ferry_turn_relay_up{"))
            .map(str::to_owned)
            .collect())
    };
    let started = std::time::Instant::now();
    loop {
        let lines = up_lines()?;
        if lines.len() == 3 && lines.iter().all(|l| l.ends_with(" 1")) {
            break;
        }
        ensure!(started.elapsed().as_secs() < 10, "relays not up: {lines:?}");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let dead = relays.remove(1);
    let dead_uri = dead.uri();
    let dead_port = dead_uri
        .rsplit(':')
        .next()
        .unwrap_or_default()
        .split('?')
        .next()
        .unwrap_or_default()
        .to_owned();
    drop(dead);
    let killed = std::time::Instant::now();
    loop {
        let lines = up_lines()?;
        let down: Vec<&String> = lines.iter().filter(|l| l.ends_with(" 0")).collect();
        if !down.is_empty() {
            ensure!(
                down.len() == 1 && down[0].contains(&dead_port),
                "the wrong relay is down: {lines:?}"
            );
            break;
        }
        ensure!(
            killed.elapsed().as_secs() < 10,
            "the dead relay is still up: {lines:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    println!(
        "the killed relay is down {} ms after its coturn stopped",
        killed.elapsed().as_millis()
    );
    let auth = format!("Bearer {api}");
    for u in 0..40 {
        let r = http(
            &format!("{base}/v1/turn/credentials"),
            "POST",
            &[
                ("content-type", "application/json"),
                ("authorization", &auth),
            ],
            json!({ "user": format!("user{u}") }).to_string().as_bytes(),
        )?;
        ensure!(r.status == 200, "{} {}", r.status, r.body);
        let v: Value = serde_json::from_str(&r.body)?;
        let urls: Vec<&str> = v["ice_servers"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s["urls"][0].as_str())
            .collect();
        ensure!(!urls.is_empty(), "user{u}: no relay");
        ensure!(
            !urls.contains(&dead_uri.as_str()),
            "user{u} got the dead relay: {urls:?}"
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chromium_publishes_and_plays_relay_only_through_coturn() -> Result<()> {
    let _area = ferry_tests::area(module_path!());
    let relays = Coturn::start_fleet(SECRET, 2)?;
    let dev = start_dev_with_relays(&relays, SECRET).await?;
    let collector = Collector::start()?;
    let relay_only = [("relay", "1")];
    let setup = std::time::Duration::from_secs(45);
    let _a = open_sdk_publisher(&collector, &dev, "relayed", "A", &relay_only, setup)
        .await
        .context("the relay-only publisher did not connect")?;
    let _b = open_sdk_page(
        &collector,
        &dev,
        "sdk-play.html",
        "relayed",
        "B",
        &relay_only,
    )?;
    let reports = collector
        .wait_until(std::time::Duration::from_secs(45), |r| {
            r.get("B").is_some_and(|b| num(b, "/frames/count") > 60.0)
        })
        .await
        .context("the relay-only viewer did not play")?;
    for id in ["A", "B"] {
        let r = &reports[id];
        let pair = &r["transport"]["pair"];
        ensure!(
            pair["local"]["candidateType"] == "relay",
            "{id} is not on a relayed pair: {pair}"
        );
        ensure!(
            r["sdkErrors"].as_array().is_some_and(Vec::is_empty),
            "{id}: {}",
            r["sdkErrors"]
        );
    }
    ensure!(
        num(&reports["B"], "/inbound/video/framesDecoded") > 30.0,
        "the viewer decodes: {}",
        reports["B"]["inbound"]
    );

    // A plain WHIP client (no SDK) gets the fleet's relays from the node's answer, as
    // `Link: <turn:…>; rel="ice-server"` with a REST credential (RFC 9725 §4.6), and coturn
    // accepts that credential.
    let r = http(
        &format!("{}/whip/links", dev.node_a),
        "POST",
        &[
            ("content-type", "application/sdp"),
            ("authorization", &format!("Bearer {}", dev.token)),
        ],
        OFFER.as_bytes(),
    )?;
    ensure!(r.status == 201, "WHIP: {} {}", r.status, r.body);
    let session = r
        .header("ferry-session")
        .context("ferry-session")?
        .to_owned();
    let links: Vec<&str> = r
        .all("link")
        .into_iter()
        .filter(|l| l.contains("rel=\"ice-server\""))
        .collect();
    ensure!(links.len() == 2, "one Link per relay: {links:?}");
    let attr = |link: &str, key: &str| -> Option<String> {
        let start = link.find(&format!("{key}=\""))? + key.len() + 2;
        let rest = &link[start..];
        Some(rest[..rest.find('"')?].to_owned())
    };
    for relay in &relays {
        let link = links
            .iter()
            .find(|l| l.starts_with(&format!("<{}>", relay.uri())))
            .with_context(|| format!("no Link for {}: {links:?}", relay.uri()))?;
        let username = attr(link, "username").context("username")?;
        let credential = attr(link, "credential").context("credential")?;
        ensure!(
            username.ends_with(&format!(":{session}")),
            "the credential is the session's: {username}"
        );
        ensure!(
            relay.allocate(&username, &credential)?,
            "coturn refused the node's credential {username}"
        );
    }
    Ok(())
}

/// Draining a relay while a relay-only SDK viewer plays through it (scope 4): the operator's
/// `POST /v1/turn/relays/{id}/drain`, the node's `turn-drain` event, the SDK's ICE restart onto
/// fresh relays from the gateway (DTLS goes on): the viewer moves to another relay without a
/// freeze, and the drained coturn ends with no allocations (its relay sockets, counted in /proc).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn draining_a_relay_moves_its_sdk_viewer_to_another_relay_without_a_freeze() -> Result<()> {
    let _area = ferry_tests::area(module_path!());
    use std::time::{Duration, Instant};
    let relays = Coturn::start_fleet(SECRET, 3)?;
    let uris: Vec<String> = relays.iter().map(Coturn::uri).collect();
    let dev = start_dev_with_relays(&relays, SECRET).await?;
    let collector = Collector::start()?;
    // The publisher sends directly; the viewer only through relays.
    let _a = open_sdk_publisher(
        &collector,
        &dev,
        "drained",
        "A",
        &[],
        Duration::from_secs(45),
    )
    .await
    .context("the publisher did not connect")?;
    let _b = open_sdk_page(
        &collector,
        &dev,
        "sdk-play.html",
        "drained",
        "B",
        &[("relay", "1")],
    )?;
    let before = collector
        .wait_until(Duration::from_secs(45), |r| {
            r.get("B").is_some_and(|b| {
                num(b, "/frames/count") > 60.0 && b["transport"]["pair"]["local"]["port"].is_u64()
            })
        })
        .await
        .context("the relay-only viewer did not play")?;
    let local = &before["B"]["transport"]["pair"]["local"];
    ensure!(local["candidateType"] == "relay", "not relayed: {local}");
    let port = local["port"].as_u64().context("port")? as u16;
    let used = relays
        .iter()
        .position(|c| c.relays_on(port))
        .with_context(|| format!("relay port {port} is no coturn's"))?;
    let freezes = num(&before["B"], "/totals/freezeCount");
    ensure!(
        relays[used].allocations()? > 0,
        "the relay in use shows no allocation"
    );

    // The operator drains that relay.
    let auth = format!("Bearer {}", dev.token);
    let id = relay_id(&dev.gateway, &uris[used])?;
    let drain_url = format!("{}/v1/turn/relays/{id}/drain", dev.gateway);
    let r = http(&drain_url, "POST", &[], b"")?;
    ensure!(r.status == 401, "a drain needs the API token: {}", r.status);
    let r = http(
        &format!("{}/v1/turn/relays/nope/drain", dev.gateway),
        "POST",
        &[("authorization", &auth)],
        b"",
    )?;
    ensure!(r.status == 404, "unknown relay: {} {}", r.status, r.body);
    drain_relay(&dev.gateway, &dev.token, &id, 60)?;
    let started = Instant::now();

    // The viewer moves (relay-moved), onto another relay, and keeps playing without a freeze.
    let moved = collector
        .wait_until(Duration::from_secs(20), |r| {
            r.get("B").is_some_and(|b| {
                b["sdk"]
                    .as_array()
                    .is_some_and(|l| l.iter().any(|e| e["event"] == "relay-moved"))
            })
        })
        .await
        .context("the viewer was not moved off the draining relay")?;
    let moved_after = started.elapsed();
    let event = moved["B"]["sdk"]
        .as_array()
        .and_then(|l| l.iter().find(|e| e["event"] == "relay-moved"))
        .cloned()
        .unwrap_or_default();
    let frames_then = num(&moved["B"], "/frames/count");
    let after = collector
        .wait_until(Duration::from_secs(20), |r| {
            r.get("B")
                .is_some_and(|b| num(b, "/frames/count") > frames_then + 60.0)
        })
        .await
        .context("the viewer stopped playing after the move")?;
    let b = &after["B"];
    let local = &b["transport"]["pair"]["local"];
    ensure!(local["candidateType"] == "relay", "not relayed: {local}");
    let port = local["port"].as_u64().context("port")? as u16;
    ensure!(
        !relays[used].relays_on(port),
        "still on the drained relay: {local}"
    );
    ensure!(
        relays.iter().any(|c| c.relays_on(port)),
        "on no coturn: {local}"
    );
    ensure!(
        num(b, "/totals/freezeCount") == freezes,
        "freezeCount rose from {freezes} to {}",
        b["totals"]["freezeCount"]
    );
    ensure!(
        b["totals"]["transports"] == 1,
        "one transport: {}",
        b["totals"]
    );
    ensure!(
        b["sdkErrors"].as_array().is_some_and(Vec::is_empty),
        "{}",
        b["sdkErrors"]
    );

    // The drained coturn ends with no allocations (the browser releases the old relay
    // candidates' allocations once their connections die); the scheduler says drained.
    let deadline = Instant::now() + Duration::from_secs(120);
    let empty_after = loop {
        if relays[used].allocations()? == 0 {
            break started.elapsed();
        }
        ensure!(
            Instant::now() < deadline,
            "the drained relay still holds {} allocations",
            relays[used].allocations()?
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    let view = loop {
        let list = http(&format!("{}/v1/turn/relays", dev.gateway), "GET", &[], b"")?;
        let list: Value = serde_json::from_str(&list.body)?;
        let view = list
            .as_array()
            .and_then(|a| a.iter().find(|r| r["id"] == id.as_str()))
            .cloned()
            .unwrap_or_default();
        if view["state"] == "drained" {
            break view;
        }
        ensure!(Instant::now() < deadline, "not drained: {view}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    // The operator's CLI sees it, and puts it back into service.
    let ferry = |args: &[&str]| -> Result<String> {
        let out = Command::new(ferry_bin()?)
            .args(args)
            .args(["--scheduler", &dev.gateway, "--token", &dev.token])
            .output()?;
        ensure!(
            out.status.success(),
            "ferry {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(String::from_utf8(out.stdout)?)
    };
    // Drained as `empty` (no live credential names it primary) or at the deadline: the nodes'
    // WHIP/WHEP answers hold credentials too (Link headers, one per session), and one of those
    // may name this relay until it expires.
    let table = ferry(&["turn", "relays"])?;
    ensure!(
        table.lines().any(|l| l.starts_with(id.as_str())
            && l.contains("drained")
            && (l.contains("empty") || l.contains("deadline"))),
        "ferry turn relays:\n{table}"
    );
    ferry(&["turn", "undrain", &uris[used]])?;
    let list: Value = serde_json::from_str(&ferry(&["turn", "relays", "--json"])?)?;
    ensure!(
        list.as_array()
            .and_then(|a| a.iter().find(|r| r["id"] == id.as_str()))
            .is_some_and(|r| r["state"] == "active"),
        "not back in service: {list}"
    );
    let metrics = http(&format!("{}/metrics", dev.gateway), "GET", &[], b"")?.body;
    let relay_left = metrics
        .lines()
        .find_map(|l| l.strip_prefix("ferry_turn_reallocations_total{reason=\"relay-left\"} "))
        .and_then(|v| v.trim().parse::<u64>().ok());
    ensure!(
        metrics.contains("ferry_turn_load_cv ") && relay_left >= Some(1),
        "TURN metrics (the viewer's move is a reallocation): {metrics}"
    );
    eprintln!(
        "relay drain: viewer moved {} ms after the drain (SDK: {} ms, {} → {}), drained coturn empty after {} ms, scheduler: {}, freezeCount {freezes} → {}",
        moved_after.as_millis(),
        event["ms"],
        event["from"],
        event["to"],
        empty_after.as_millis(),
        view["drain"],
        b["totals"]["freezeCount"],
    );
    Ok(())
}

/// Scale-out and scale-in through the API (scope 1 and 4): a relay added with
/// `POST /v1/turn/relays` (the `ferry turn add` CLI) ramps in — users asking again after it
/// joined land on it, about its share, and coturn accepts their credential there — and leaves
/// only once drained: `DELETE` of a relay in service is 409, after its drain 204, and then it is
/// in nobody's answer.
#[test]
fn relays_join_and_leave_the_fleet_through_the_api() -> Result<()> {
    let _area = ferry_tests::area(module_path!());
    let first = Coturn::start(SECRET)?;
    let second = Coturn::start(SECRET)?;
    let api = "turn-fleet-api-token";
    let scheduler = start_scheduler(
        &["--token", api, "--turn-probe-interval-s", "1"],
        &[
            ("FERRY_TURN_URIS", &first.uri()),
            ("FERRY_TURN_SECRET", SECRET),
        ],
    )?;
    let base = scheduler.after("http")?;
    let auth = format!("Bearer {api}");
    let primaries = |tag: &str| -> Result<Vec<String>> {
        (0..200)
            .map(|u| {
                let r = http(
                    &format!("{base}/v1/turn/credentials"),
                    "POST",
                    &[
                        ("content-type", "application/json"),
                        ("authorization", &auth),
                    ],
                    json!({ "user": format!("{tag}{u}") })
                        .to_string()
                        .as_bytes(),
                )?;
                ensure!(r.status == 200, "{} {}", r.status, r.body);
                let v: Value = serde_json::from_str(&r.body)?;
                Ok(v["ice_servers"][0]["urls"][0]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned())
            })
            .collect()
    };
    ensure!(
        primaries("u")?.iter().all(|p| *p == first.uri()),
        "one relay"
    );
    // Bad input and auth.
    let add = |body: &str, token: &str| {
        http(
            &format!("{base}/v1/turn/relays"),
            "POST",
            &[
                ("content-type", "application/json"),
                ("authorization", &format!("Bearer {token}")),
            ],
            body.as_bytes(),
        )
    };
    let r = add(&json!({ "uri": second.uri() }).to_string(), "wrong")?;
    ensure!(r.status == 401, "{} {}", r.status, r.body);
    let r = add(r#"{"uri": "http://nope"}"#, api)?;
    ensure!(r.status == 400, "{} {}", r.status, r.body);
    let r = add(&json!({ "uri": first.uri() }).to_string(), api)?;
    ensure!(r.status == 409, "{} {}", r.status, r.body);
    let r = add(
        &json!({ "uri": format!("{};weight=50", second.uri()) }).to_string(),
        api,
    )?;
    ensure!(
        r.status == 400 && r.body.contains("weight 50"),
        "{} {}",
        r.status,
        r.body
    );
    // The CLI adds the second relay (weight 3: three quarters of the users).
    let out = Command::new(ferry_bin()?)
        .args(["turn", "add", &format!("{};weight=3", second.uri())])
        .args(["--scheduler", &base, "--token", api])
        .output()?;
    ensure!(
        out.status.success(),
        "ferry turn add: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let after = primaries("u")?;
    let on_new = after.iter().filter(|p| **p == second.uri()).count();
    ensure!(
        (110..=190).contains(&on_new),
        "{on_new} of 200 users on the new relay of weight 3 (of 4)"
    );
    println!("{on_new} of 200 users moved to the added relay (weight 3 of 4)");
    let (username, password) = {
        let r = http(
            &format!("{base}/v1/turn/credentials"),
            "POST",
            &[
                ("content-type", "application/json"),
                ("authorization", &auth),
            ],
            json!({ "user": "joiner" }).to_string().as_bytes(),
        )?;
        let v: Value = serde_json::from_str(&r.body)?;
        let s = &v["ice_servers"][0];
        (
            s["username"].as_str().unwrap_or_default().to_owned(),
            s["credential"].as_str().unwrap_or_default().to_owned(),
        )
    };
    ensure!(
        second.allocate(&username, &password)?,
        "the new relay refused the scheduler's credential"
    );
    // Scale-in: not while in service; drained (deadline 1 s: users still hold it), then gone.
    let id = relay_id(&base, &second.uri())?;
    let del = || {
        http(
            &format!("{base}/v1/turn/relays/{id}"),
            "DELETE",
            &[("authorization", &auth)],
            b"",
        )
    };
    let r = del()?;
    ensure!(
        r.status == 409 && r.body.contains("drain it first"),
        "{} {}",
        r.status,
        r.body
    );
    drain_relay(&base, api, &id, 1)?;
    let started = std::time::Instant::now();
    loop {
        let list = http(&format!("{base}/v1/turn/relays"), "GET", &[], b"")?;
        let list: Value = serde_json::from_str(&list.body)?;
        let r = list
            .as_array()
            .and_then(|a| a.iter().find(|r| r["id"] == id.as_str()))
            .cloned()
            .unwrap_or_default();
        if r["state"] == "drained" {
            ensure!(r["drain"]["done_reason"] == "deadline", "{r}");
            break;
        }
        ensure!(started.elapsed().as_secs() < 10, "not drained: {r}");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let r = del()?;
    ensure!(r.status == 204, "{} {}", r.status, r.body);
    ensure!(del()?.status == 404, "removed twice");
    ensure!(
        primaries("u")?.iter().all(|p| *p == first.uri()),
        "a removed relay was handed out"
    );
    Ok(())
}
