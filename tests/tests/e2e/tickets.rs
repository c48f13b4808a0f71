//! Session tickets and idempotency keys over HTTP against a real `ferry dev` (docs/sdk.md):
//! every 201 carries the session's id, node and a ticket; a ticket resumes its session once —
//! a replay is refused on every node of the cluster — and forged, expired, malformed tickets and
//! tickets for another resource each get their own status; a retried POST with the same
//! `Idempotency-Key` gets the same session back, through the gateway too; the session's events
//! start with a fresh ticket.

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use ferry_proto::api::{SessionKind, TicketClaims};
use ferry_tests::cluster::{open_sdk_page, open_sdk_publisher, start_dev, wait_registered};
use ferry_tests::{Response, http};

const OFFER: &str = include_str!("../../../rtc/src/sdp/testdata/chrome_offer.sdp");
const SDP: (&str, &str) = ("Content-Type", "application/sdp");

/// POST `url` with `Authorization: {auth}`, following one 307 (what browsers' `fetch` does).
fn post_as(
    auth: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Result<(Response, String)> {
    let mut all = vec![SDP, ("Authorization", auth)];
    all.extend_from_slice(headers);
    let r = http(url, "POST", &all, body.as_bytes())?;
    if r.status != 307 {
        return Ok((r, url.to_owned()));
    }
    let to = r
        .header("location")
        .context("307 without Location")?
        .to_owned();
    Ok((http(&to, "POST", &all, body.as_bytes())?, to))
}

/// Where a redirect sent the request: the node's URL without its query (the gateway's
/// redirect carries an access token minted for it, issued at the current second).
fn node_url(url: &str) -> &str {
    url.split('?').next().unwrap_or(url)
}

fn refused(r: &Response, status: u16, code: &str) -> Result<()> {
    ensure!(
        r.status == status && r.header("ferry-error") == Some(code),
        "expected {status} {code}, got {} {:?}: {}",
        r.status,
        r.header("ferry-error"),
        r.body
    );
    Ok(())
}

fn header(r: &Response, name: &str) -> Result<String> {
    Ok(r.header(name)
        .with_context(|| format!("no {name} in {:?}", r.headers))?
        .to_owned())
}

/// The first `event: {name}` of a session's server-sent events, with its data.
fn first_event(location: &str, name: &str) -> Result<String> {
    let rest = location.strip_prefix("http://").context("http URL")?;
    let (host, path) = rest.split_at(rest.find('/').context("path")?);
    let mut s = std::net::TcpStream::connect(host)?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(
        s,
        "GET {path}/events HTTP/1.1\r\nHost: {host}\r\nAccept: text/event-stream\r\n\r\n"
    )?;
    let mut text = String::new();
    let mut buf = [0u8; 4096];
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        let n = s.read(&mut buf)?;
        ensure!(n > 0, "events closed: {text}");
        text.push_str(&String::from_utf8_lossy(&buf[..n]));
        if let Some(i) = text.find(&format!("event: {name}\n")) {
            let after = &text[i..];
            if let Some(data) = after.lines().find_map(|l| l.strip_prefix("data: ")) {
                return Ok(data.to_owned());
            }
        }
    }
    anyhow::bail!("no {name} event in {text}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tickets_resume_once_and_every_refusal_is_specific() -> Result<()> {
    let _area = ferry_tests::area(module_path!());
    let dev = start_dev(true)?;
    wait_registered(&dev.gateway, 2).await?;
    let gw = |p: &str| format!("{}{p}", dev.gateway);
    // The API token: a WHIP/WHEP credential for every stream.
    let bearer = format!("Bearer {}", dev.token);
    let auth = ("Authorization", bearer.as_str());
    let post =
        |url: &str, headers: &[(&str, &str)], body: &str| post_as(&bearer, url, headers, body);

    // Idempotency through the gateway: the retry is the same session.
    let key = ("Idempotency-Key", "test-key-1");
    let (first, at) = post(&gw("/whip/tk"), &[key], OFFER)?;
    ensure!(first.status == 201, "{} {}", first.status, first.body);
    let location = header(&first, "location")?;
    ensure!(
        location.starts_with("http://"),
        "absolute Location: {location}"
    );
    let session = header(&first, "ferry-session")?;
    ensure!(
        location.ends_with(&format!("/whip/tk/{session}")),
        "{location}"
    );
    let node = header(&first, "ferry-node")?;
    ensure!(node == "node-a" || node == "node-b", "{node}");
    let t1 = header(&first, "ferry-ticket")?;
    let expires: u64 = header(&first, "ferry-ticket-expires")?.parse()?;
    let (again, again_at) = post(&gw("/whip/tk"), &[key], OFFER)?;
    ensure!(
        again.status == 201 && node_url(&again_at) == node_url(&at),
        "{} at {again_at}",
        again.status
    );
    for h in ["location", "etag", "ferry-session", "ferry-ticket"] {
        ensure!(
            again.header(h) == first.header(h),
            "{h} differs on the retry"
        );
    }
    ensure!(again.body == first.body, "the same answer");
    let other_offer = OFFER.replace("o=-", "o=other");
    let (r, _) = post(&gw("/whip/tk"), &[key], &other_offer)?;
    refused(&r, 422, "idempotency-mismatch")?;
    let (r, _) = post(&at, &[("Idempotency-Key", "has space")], OFFER)?;
    ensure!(r.status == 400, "bad key: {} {}", r.status, r.body);

    // The session's events begin with a ticket.
    let data: serde_json::Value = serde_json::from_str(&first_event(&location, "ticket")?)?;
    ensure!(
        data["ticket"].as_str().is_some_and(|t| !t.is_empty()),
        "{data}"
    );
    ensure!(
        data["expires"].as_u64().is_some_and(|e| e >= expires),
        "{data}"
    );

    // Resume with the ticket, through the gateway: it goes to the node holding the session.
    let (resumed, resumed_at) = post(&gw("/whip/tk"), &[("Ferry-Ticket", &t1)], OFFER)?;
    ensure!(resumed.status == 201, "{} {}", resumed.status, resumed.body);
    ensure!(
        node_url(&resumed_at) == node_url(&at),
        "routed to the session's node ({at}): {resumed_at}"
    );
    ensure!(
        header(&resumed, "ferry-session")? == session,
        "same session id"
    );
    let t2 = header(&resumed, "ferry-ticket")?;
    ensure!(t2 != t1, "a new ticket");

    // Replayed: here, and on the other node (the scheduler records uses cluster-wide).
    let (r, _) = post(&at, &[("Ferry-Ticket", &t1)], OFFER)?;
    refused(&r, 409, "ticket-replayed")?;
    let other = if node == "node-a" {
        &dev.node_b
    } else {
        &dev.node_a
    };
    let r = http(
        &format!("{other}/whip/tk"),
        "POST",
        &[SDP, ("Ferry-Ticket", &t1), auth],
        OFFER.as_bytes(),
    )?;
    refused(&r, 409, "ticket-replayed")?;

    // For another stream, for the other kind.
    let (r, _) = post(&gw("/whip/other"), &[("Ferry-Ticket", &t2)], OFFER)?;
    refused(&r, 403, "ticket-mismatch")?;
    let r = http(
        &at.replace("/whip/", "/whep/"),
        "POST",
        &[SDP, ("Ferry-Ticket", &t2), auth],
        OFFER.as_bytes(),
    )?;
    refused(&r, 403, "ticket-mismatch")?;

    // Forged: one character of the signature changed.
    let mut forged = t2.clone().into_bytes();
    let last = forged.len() - 3;
    forged[last] = if forged[last] == b'A' { b'B' } else { b'A' };
    let forged = String::from_utf8(forged)?;
    let (r, _) = post(&at, &[("Ferry-Ticket", &forged)], OFFER)?;
    refused(&r, 403, "ticket-forged")?;
    let (r, _) = post(&at, &[("Ferry-Ticket", "not a ticket")], OFFER)?;
    refused(&r, 400, "ticket-malformed")?;

    // Expired: genuinely signed with the cluster's key, an hour old.
    let secrets =
        ferry_sfu::driver::membership::ClusterSecrets::load_or_create(&dev.state.join("cluster"))?;
    let claims = TicketClaims {
        sid: ferry_proto::SessionId::new(session.as_str())?,
        stream: ferry_proto::StreamId::new("tk")?,
        kind: SessionKind::Publish,
        node: ferry_proto::NodeId::new(node.as_str())?,
        r#gen: 5,
        exp: expires - 3600,
    };
    let expired = ferry_sfu::node::sign_ticket(&secrets.cluster_key(), &claims);
    let (r, _) = post(&at, &[("Ferry-Ticket", &expired)], OFFER)?;
    refused(&r, 410, "ticket-expired")?;
    // The same claims, current: accepted (the signature is what made it genuine).
    let current = TicketClaims {
        exp: expires,
        ..claims
    };
    let fresh = ferry_sfu::node::sign_ticket(&secrets.cluster_key(), &current);
    let (r, _) = post(&at, &[("Ferry-Ticket", &fresh)], OFFER)?;
    ensure!(
        r.status == 201,
        "a genuine current ticket: {} {}",
        r.status,
        r.body
    );

    // Counted.
    let m = http(&gw("/metrics"), "GET", &[], b"")?.body;
    ensure!(
        m.lines().any(|l| l.starts_with("ferry_scheduler_tickets_replayed_total ") && !l.ends_with(" 0")),
        "scheduler metrics: {m}"
    );
    Ok(())
}

/// The browser SDK with a persisted ticket (as after a page reload): a genuine one resumes the
/// same session; a forged (403), expired (410) or replayed (409) one is refused with its status
/// and the SDK starts a clean session by itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_browser_sdk_resumes_with_its_ticket_or_falls_back_to_a_clean_session() -> Result<()> {
    let _area = ferry_tests::area(module_path!());
    let dev = start_dev(true)?;
    wait_registered(&dev.gateway, 2).await?;
    let collector = ferry_tests::Collector::start()?;
    let stream = "reload";
    let page = |id: &str, ticket: Option<&str>| {
        let ticket = ticket.map(|t| ("ticket", t));
        open_sdk_page(
            &collector,
            &dev,
            "sdk-play.html",
            stream,
            id,
            ticket.as_slice(),
        )
    };
    let _publisher =
        open_sdk_publisher(&collector, &dev, stream, "P", &[], Duration::from_secs(45)).await?;
    let playing = |r: &serde_json::Value| {
        r["state"] == "connected" && ferry_tests::num(r, "/frames/count") > 10.0
    };
    let first = page("V1", None)?;
    let r = collector
        .wait_until(Duration::from_secs(45), |r| {
            r.get("V1").is_some_and(playing)
        })
        .await?;
    let session = r["V1"]["session"]
        .as_str()
        .context("V1's session")?
        .to_owned();
    // The page "reloads": the same ticket, as the SDK persisted it, in a new page.
    let location = r["V1"]["location"].as_str().context("location")?.to_owned();
    let data: serde_json::Value = serde_json::from_str(&first_event(&location, "ticket")?)?;
    let ticket = data["ticket"].as_str().context("ticket")?.to_owned();
    drop(first);
    let _again = page("V2", Some(&ticket))?;
    let r = collector
        .wait_until(Duration::from_secs(45), |r| {
            r.get("V2").is_some_and(playing)
        })
        .await?;
    ensure!(
        r["V2"]["session"] == session.as_str(),
        "resumed {} as {}",
        session,
        r["V2"]["session"]
    );
    // The same ticket again: replayed. A forged one. An expired one.
    let secrets =
        ferry_sfu::driver::membership::ClusterSecrets::load_or_create(&dev.state.join("cluster"))?;
    let mut claims = claims_of(&ticket)?;
    claims.exp -= 3600;
    let expired = ferry_sfu::node::sign_ticket(&secrets.cluster_key(), &claims);
    let mut forged = ticket.clone().into_bytes();
    let last = forged.len() - 3;
    forged[last] = if forged[last] == b'A' { b'B' } else { b'A' };
    let forged = String::from_utf8(forged)?;
    for (id, bad, status) in [
        ("R", &ticket, 409),
        ("F", &forged, 403),
        ("E", &expired, 410),
    ] {
        let _p = page(id, Some(bad))?;
        let r = collector
            .wait_until(Duration::from_secs(45), |r| r.get(id).is_some_and(playing))
            .await?;
        let v = &r[id];
        ensure!(
            v["sdkErrors"].as_array().is_some_and(|e| e
                .iter()
                .any(|x| x["code"] == "ticket-rejected" && x["status"] == status)),
            "{id}: {status} then a clean session: {}",
            v["sdk"]
        );
        ensure!(v["session"] != session.as_str(), "{id} got a new session");
        eprintln!(
            "{id}: ticket refused with {status}, playing as a new session {}",
            v["session"]
        );
    }
    Ok(())
}

/// The claims of a ticket (the test trusts its own cluster's tickets).
fn claims_of(ticket: &str) -> Result<TicketClaims> {
    use base64::Engine;
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(ticket)?;
    let body = raw
        .strip_prefix(ferry_proto::api::TICKET_PREFIX)
        .context("a ticket")?;
    Ok(serde_json::from_slice(&body[..body.len() - 16])?)
}
