//! A real `ferry node` answers bad input with the specific error — an HTTP
//! status with a reason, or a dropped datagram with a counter — and keeps
//! serving. Also checks the WHIP/WHEP headers (RFC 9725) and CORS.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use ferry_tests::{FerryNode, Response, http};

const OFFER: &str = include_str!("../../../rtc/src/sdp/testdata/chrome_offer.sdp");
const SDP: (&str, &str) = ("Content-Type", "application/sdp");
const FRAG: (&str, &str) = ("Content-Type", "application/trickle-ice-sdpfrag");

fn expect(r: &Response, status: u16, reason: &str) -> Result<()> {
    ensure!(
        r.status == status && r.body.contains(reason),
        "expected {status} containing {reason:?}, got {} {:?}",
        r.status,
        r.body
    );
    Ok(())
}

/// `ferry_http_rate_limited_total` in a `/metrics` response.
fn rate_limited_total(metrics: &Response) -> Result<u64> {
    metrics
        .body
        .lines()
        .find_map(|l| l.strip_prefix("ferry_http_rate_limited_total "))
        .and_then(|v| v.trim().parse().ok())
        .context("ferry_http_rate_limited_total")
}

fn wait_metric(node: &FerryNode, name: &str, at_least: u64) -> Result<u64> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let v = node.metric(name)?;
        if v >= at_least || Instant::now() > deadline {
            return Ok(v);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn signalling_errors_are_specific() -> Result<()> {
    let _area = ferry_tests::area(module_path!());
    let node = FerryNode::spawn(&["--ice-server", "stun:stun.example.org:3478"])?;
    let url = |p: &str| format!("{}{p}", node.http);
    let bearer = node.bearer();
    let auth = ("Authorization", bearer.as_str());

    let r = http(&url("/whip/cam"), "POST", &[SDP, auth], b"this is not sdp")?;
    expect(&r, 400, "bad SDP")?;
    let r = http(
        &url("/whip/cam"),
        "POST",
        &[("Content-Type", "text/plain"), auth],
        OFFER.as_bytes(),
    )?;
    expect(&r, 415, "application/sdp")?;
    let plain = "v=0\r\no=- 1 2 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\nm=audio 5004 RTP/AVP 0\r\na=rtpmap:0 PCMU/8000\r\n";
    let r = http(&url("/whip/cam"), "POST", &[SDP, auth], plain.as_bytes())?;
    expect(&r, 422, "not a WebRTC offer")?;
    let r = http(
        &url("/whip/bad%20name"),
        "POST",
        &[SDP, auth],
        OFFER.as_bytes(),
    )?;
    expect(&r, 400, "stream name")?;
    let big = vec![b'a'; 70 * 1024];
    let r = http(&url("/whip/cam"), "POST", &[SDP, auth], &big)?;
    ensure!(r.status == 413, "oversized body: {}", r.status);
    let r = http(&url("/whep/nobody"), "POST", &[SDP, auth], OFFER.as_bytes())?;
    expect(&r, 404, "no publisher")?;

    // A publisher: 201 with the RFC 9725 headers.
    let r = http(
        &url("/whip/cam"),
        "POST",
        &[SDP, ("Origin", "http://player.example"), auth],
        OFFER.as_bytes(),
    )?;
    ensure!(r.status == 201, "{} {}", r.status, r.body);
    let location = r.header("location").context("Location")?.to_owned();
    let etag = r.header("etag").context("ETag")?.to_owned();
    ensure!(
        location.starts_with(&format!("{}/whip/cam/", node.http)),
        "absolute Location: {location}"
    );
    let id = r.header("ferry-session").context("Ferry-Session")?;
    ensure!(location.ends_with(id), "{location} vs {id}");
    ensure!(r.header("ferry-node").is_some(), "Ferry-Node");
    ensure!(r.header("content-type") == Some("application/sdp"));
    ensure!(r.header("accept-patch") == Some("application/trickle-ice-sdpfrag"));
    ensure!(
        r.all("link").iter().any(|l| l.contains("<stun:stun.example.org:3478>") && l.contains("rel=\"ice-server\"")),
        "Link: {:?}",
        r.all("link")
    );
    ensure!(r.header("access-control-allow-origin") == Some("*"));
    let exposed = r
        .header("access-control-expose-headers")
        .unwrap_or("")
        .to_ascii_lowercase();
    for h in [
        "location",
        "etag",
        "link",
        "accept-patch",
        "ferry-session",
        "ferry-ticket",
        "ferry-node",
        "ferry-error",
        "www-authenticate",
    ] {
        ensure!(exposed.contains(h), "{h} not exposed: {exposed}");
    }
    ensure!(r.body.starts_with("v=0"), "answer: {}", r.body);

    let r = http(&url("/whip/cam"), "POST", &[SDP, auth], OFFER.as_bytes())?;
    expect(&r, 409, "already has a publisher")?;
    // A node outside a cluster has no key to check tickets with.
    let r = http(
        &url("/whep/cam"),
        "POST",
        &[SDP, ("Ferry-Ticket", "AAAA"), auth],
        OFFER.as_bytes(),
    )?;
    expect(&r, 403, "not in a cluster")?;
    ensure!(r.header("ferry-error") == Some("ticket-unsupported"));
    // A retried POST with the same Idempotency-Key is the same session.
    let keyed = [SDP, ("Idempotency-Key", "k-1"), auth];
    let v1 = http(&url("/whep/cam"), "POST", &keyed, OFFER.as_bytes())?;
    let v2 = http(&url("/whep/cam"), "POST", &keyed, OFFER.as_bytes())?;
    ensure!(
        v1.status == 201 && v2.status == 201,
        "{} {}",
        v1.status,
        v2.status
    );
    ensure!(v1.header("location") == v2.header("location") && v1.body == v2.body);

    // One payload type for two codecs in the BUNDLE group (GStreamer's payloaders all default
    // to 96): 400 with the reason.
    let clash = OFFER
        .replace("SAVPF 111 ", "SAVPF 96 ")
        .replace("a=rtpmap:111 opus", "a=rtpmap:96 opus");
    let r = http(&url("/whep/cam"), "POST", &[SDP, auth], clash.as_bytes())?;
    expect(&r, 400, "RFC 8843")?;
    // A line the node does not accept: the answer rejects it, the session view says why.
    let mut seen = 0;
    let no_video = OFFER
        .lines()
        .map(|l| {
            if l == "a=sendrecv" {
                seen += 1;
                if seen == 2 {
                    return "a=sendonly";
                }
            }
            l
        })
        .collect::<Vec<_>>()
        .join("\r\n")
        + "\r\n";
    let r = http(&url("/whep/cam"), "POST", &[SDP, auth], no_video.as_bytes())?;
    ensure!(r.status == 201, "{} {}", r.status, r.body);
    let viewer = r
        .header("ferry-session")
        .context("Ferry-Session")?
        .to_owned();
    let r = http(&url(&format!("/v1/sessions/{viewer}")), "GET", &[auth], b"")?;
    ensure!(r.status == 200, "{} {}", r.status, r.body);
    let view: serde_json::Value = serde_json::from_str(&r.body)?;
    ensure!(
        view["rejected"][0]["mid"] == "1"
            && view["rejected"][0]["reason"]
                .as_str()
                .is_some_and(|w| w.contains("must receive")),
        "{view}"
    );

    // CORS preflight from another origin.
    let r = http(
        &url("/whip/cam"),
        "OPTIONS",
        &[
            ("Origin", "http://player.example"),
            ("Access-Control-Request-Method", "POST"),
            ("Access-Control-Request-Headers", "content-type"),
        ],
        b"",
    )?;
    ensure!((200..300).contains(&r.status), "preflight {}", r.status);
    ensure!(r.header("access-control-allow-origin") == Some("*"));

    // PATCH rules.
    let session = location.clone();
    let trickle = "a=ice-ufrag:Kx7q\r\na=ice-pwd:3hF9tLm2QwErTy8UiOpAsDfG\r\nm=audio 9 UDP/TLS/RTP/SAVPF 0\r\na=mid:0\r\na=candidate:1 1 udp 2122260223 127.0.0.1 40000 typ host\r\n";
    let r = http(
        &url("/whip/cam/0000000000000000"),
        "PATCH",
        &[FRAG, ("If-Match", "*")],
        trickle.as_bytes(),
    )?;
    expect(&r, 404, "no session")?;
    let r = http(&session, "PATCH", &[FRAG], trickle.as_bytes())?;
    expect(&r, 428, "If-Match")?;
    let r = http(
        &session,
        "PATCH",
        &[FRAG, ("If-Match", "\"stale\"")],
        trickle.as_bytes(),
    )?;
    expect(&r, 412, "ETag")?;
    let r = http(
        &session,
        "PATCH",
        &[SDP, ("If-Match", &etag)],
        trickle.as_bytes(),
    )?;
    expect(&r, 415, "trickle-ice-sdpfrag")?;
    let r = http(&session, "PATCH", &[FRAG, ("If-Match", &etag)], b"garbage")?;
    expect(&r, 400, "bad SDP")?;
    let r = http(
        &session,
        "PATCH",
        &[FRAG, ("If-Match", &etag)],
        trickle.as_bytes(),
    )?;
    ensure!(r.status == 204, "trickle: {} {}", r.status, r.body);
    let restart = "a=ice-ufrag:Nw9z\r\na=ice-pwd:abcdefghijklmnopqrstuvwx\r\nm=audio 9 UDP/TLS/RTP/SAVPF 0\r\na=mid:0\r\n";
    let r = http(
        &session,
        "PATCH",
        &[FRAG, ("If-Match", "*")],
        restart.as_bytes(),
    )?;
    ensure!(r.status == 200, "restart: {} {}", r.status, r.body);
    let new_etag = r.header("etag").context("new ETag")?;
    ensure!(new_etag != etag, "ETag changes on ICE restart");
    ensure!(
        r.body.contains("a=ice-ufrag:") && r.body.contains("a=ice-pwd:"),
        "{}",
        r.body
    );
    ensure!(r.header("content-type") == Some("application/trickle-ice-sdpfrag"));
    let r = http(
        &session,
        "PATCH",
        &[FRAG, ("If-Match", &etag)],
        restart.as_bytes(),
    )?;
    ensure!(
        r.status == 204 || r.status == 412,
        "old ETag after restart: {}",
        r.status
    );

    let r = http(&session, "DELETE", &[], b"")?;
    ensure!(r.status == 200, "DELETE {}", r.status);
    let r = http(&session, "DELETE", &[], b"")?;
    expect(&r, 404, "no session")?;
    ensure!(
        node.metric("signal_rejected")? >= 10,
        "rejections are counted"
    );
    let r = http(&url("/healthz"), "GET", &[], b"")?;
    ensure!(r.status == 200);
    Ok(())
}

#[test]
fn bad_datagrams_are_dropped_and_counted() -> Result<()> {
    let _area = ferry_tests::area(module_path!());
    let node = FerryNode::spawn(&[])?;
    // Larger than any datagram we accept (STUN or RTP sized).
    let mut stun_like = vec![0u8; 2000];
    stun_like[4..8].copy_from_slice(&0x2112_A442u32.to_be_bytes());
    node.send_udp(&stun_like)?;
    let mut rtp_like = vec![0x80u8; 1800];
    rtp_like[1] = 96;
    node.send_udp(&rtp_like)?;
    ensure!(
        wait_metric(&node, "dropped_oversize", 2)? == 2,
        "oversize counted"
    );
    node.send_udp(&[0xff; 40])?;
    ensure!(wait_metric(&node, "dropped_unknown_protocol", 1)? == 1);
    // A STUN header with a broken body, and a binding request for an unknown ufrag.
    let mut bad_stun = vec![0, 1, 0, 8];
    bad_stun.extend_from_slice(&0x2112_A442u32.to_be_bytes());
    bad_stun.extend_from_slice(&[7; 12]);
    bad_stun.extend_from_slice(&[0, 6, 0, 40, 1, 2, 3, 4]);
    node.send_udp(&bad_stun)?;
    ensure!(wait_metric(&node, "stun_errors", 1)? >= 1);
    // SRTP from an address that belongs to no session.
    node.send_udp(&rtp_like[..200])?;
    ensure!(wait_metric(&node, "dropped_unknown_source", 1)? == 1);
    let r = http(&format!("{}/healthz", node.http), "GET", &[], b"")?;
    ensure!(r.status == 200, "node still serves");
    Ok(())
}

#[test]
fn a_full_node_answers_503_with_retry_after() -> Result<()> {
    let _area = ferry_tests::area(module_path!());
    // Two cores, each stream on its own: the limit is the node's, not each core's.
    let node = FerryNode::spawn(&["--max-sessions", "1", "--workers", "2"])?;
    let on_core = |core: usize| {
        (0..)
            .map(|k| format!("full-{k}"))
            .find(|s| {
                ferry_proto::StreamId::new(s.as_str())
                    .is_ok_and(|id| ferry_sfu::cluster::shards::shard_of(&id, 2) == core)
            })
            .unwrap_or_default()
    };
    let bearer = node.bearer();
    let auth = ("Authorization", bearer.as_str());
    let r = http(
        &format!("{}/whip/{}", node.http, on_core(0)),
        "POST",
        &[SDP, auth],
        OFFER.as_bytes(),
    )?;
    ensure!(r.status == 201, "{}", r.status);
    let r = http(
        &format!("{}/whip/{}", node.http, on_core(1)),
        "POST",
        &[SDP, auth],
        OFFER.as_bytes(),
    )?;
    expect(&r, 503, "full")?;
    ensure!(r.header("retry-after").is_some(), "Retry-After");
    Ok(())
}

#[test]
fn a_flood_from_one_address_gets_429_with_retry_after_and_probes_still_pass() -> Result<()> {
    let _area = ferry_tests::area(module_path!());
    let node = FerryNode::spawn(&["--http-rate", "2", "--http-burst", "10"])?;
    let url = |p: &str| format!("{}{p}", node.http);
    // A flood of WHEP POSTs from one address, without a token (every request counts).
    let mut statuses = Vec::new();
    let mut limited = None;
    for _ in 0..30 {
        let r = http(&url("/whep/flood"), "POST", &[SDP], OFFER.as_bytes())?;
        statuses.push(r.status);
        if r.status == 429 && limited.is_none() {
            limited = Some(r);
        }
    }
    let passed = statuses.iter().filter(|&&s| s != 429).count();
    // The burst, plus what the rate refilled while the flood ran (2 a second).
    ensure!(
        (10..=14).contains(&passed),
        "{passed} of 30 passed: {statuses:?}"
    );
    ensure!(
        statuses.iter().all(|&s| s == 401 || s == 429),
        "{statuses:?}"
    );
    let r = limited.context("no 429")?;
    expect(&r, 429, "too many requests from 127.0.0.1")?;
    let retry: u64 = r
        .header("retry-after")
        .and_then(|v| v.parse().ok())
        .context("Retry-After in seconds")?;
    ensure!(retry == 1, "Retry-After {retry}");
    ensure!(r.header("ferry-error") == Some("rate-limited"));
    // Probes and metrics are not limited, and count what was refused.
    ensure!(http(&url("/healthz"), "GET", &[], b"")?.status == 200);
    let m = http(&url("/metrics"), "GET", &[], b"")?;
    let refused = rate_limited_total(&m)?;
    ensure!(refused == 30 - passed as u64, "refused {refused}");
    // The cluster's own token (the scheduler polling migrations) is not limited, even now.
    let bearer = node.bearer();
    let auth = ("Authorization", bearer.as_str());
    for _ in 0..5 {
        let r = http(&url("/v1/sessions"), "GET", &[auth], b"")?;
        ensure!(r.status == 200, "{} {}", r.status, r.body);
    }
    let r = http(&url("/whep/flood"), "POST", &[SDP, auth], OFFER.as_bytes())?;
    ensure!(r.status != 429, "{} {}", r.status, r.body);
    // After Retry-After the client is served again.
    std::thread::sleep(Duration::from_secs(retry));
    let r = http(&url("/whep/flood"), "POST", &[SDP], OFFER.as_bytes())?;
    ensure!(r.status == 401, "{} {}", r.status, r.body);
    Ok(())
}

#[test]
fn rate_limit_flags_are_checked() -> Result<()> {
    let _area = ferry_tests::area(module_path!());
    for (flag, value) in [
        ("--http-rate", "-1"),
        ("--http-rate", "NaN"),
        ("--http-burst", "0"),
    ] {
        let out = std::process::Command::new(ferry_tests::ferry_bin()?)
            .args(["node", &format!("{flag}={value}")])
            .output()?;
        ensure!(!out.status.success(), "{flag} {value} accepted");
        let err = String::from_utf8_lossy(&out.stderr);
        ensure!(err.contains(flag), "{flag} {value}: {err}");
    }
    Ok(())
}

/// What one slow client got: seconds until the node closed its connection, and what it sent.
fn slow_client(
    addr: std::net::SocketAddr,
    first: Vec<u8>,
    trickle: Option<u8>,
) -> std::thread::JoinHandle<Result<(f64, String)>> {
    std::thread::spawn(move || {
        use std::io::{Read, Write};
        let start = Instant::now();
        let mut s = std::net::TcpStream::connect(addr)?;
        s.write_all(&first)?;
        s.set_read_timeout(Some(Duration::from_millis(500)))?;
        let mut got = Vec::new();
        let mut buf = [0u8; 1024];
        while start.elapsed() < Duration::from_secs(40) {
            match s.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    // One more byte of header every half second, as a slowloris client does.
                    if let Some(b) = trickle
                        && s.write_all(&[b]).is_err()
                    {
                        break;
                    }
                }
                Err(_) => break,
            }
        }
        Ok((
            start.elapsed().as_secs_f64(),
            String::from_utf8_lossy(&got).into_owned(),
        ))
    })
}

#[test]
fn slow_clients_are_cut_off_at_the_header_and_body_deadlines_while_others_are_served() -> Result<()>
{
    let _area = ferry_tests::area(module_path!());
    let node = FerryNode::spawn(&[])?;
    let addr: std::net::SocketAddr = node
        .http
        .trim_start_matches("http://")
        .parse()
        .context("the node's HTTP address")?;
    // Sends nothing; trickles a header forever; sends its head and 10 of 100 body bytes.
    // (The last with the cluster's token: its body is read, not refused unread.)
    let idle = slow_client(addr, Vec::new(), None);
    let trickle = slow_client(
        addr,
        b"POST /whep/cam HTTP/1.1\r\nHost: a\r\nX-Slow: ".to_vec(),
        Some(b'a'),
    );
    let head = format!(
        "POST /whep/cam HTTP/1.1\r\nHost: a\r\nAuthorization: {}\r\n\
         Content-Type: application/sdp\r\nContent-Length: 100\r\n\r\nv=0\r\no=- 1",
        node.bearer()
    );
    let body = slow_client(addr, head.into_bytes(), None);
    // Meanwhile the node serves everybody else.
    for _ in 0..5 {
        ensure!(http(&format!("{}/healthz", node.http), "GET", &[], b"")?.status == 200);
        std::thread::sleep(Duration::from_secs(1));
    }
    let join = |h: std::thread::JoinHandle<Result<(f64, String)>>| {
        h.join()
            .map_err(|_| anyhow::anyhow!("client thread panicked"))?
    };
    let (idle, trickle, body) = (join(idle)?, join(trickle)?, join(body)?);
    eprintln!(
        "closed after: idle {:.1} s, trickled header {:.1} s, slow body {:.1} s ({:?})",
        idle.0,
        trickle.0,
        body.0,
        body.1.lines().next()
    );
    // The header deadline is 10 s, the body's 10 s after the head.
    for (what, (secs, _)) in [("idle", &idle), ("trickled header", &trickle)] {
        ensure!(
            (9.0..15.0).contains(secs),
            "{what}: closed after {secs:.1} s"
        );
    }
    ensure!(
        (9.0..15.0).contains(&body.0),
        "slow body: closed after {:.1} s",
        body.0
    );
    ensure!(
        body.1.starts_with("HTTP/1.1 4"),
        "slow body: answered {:?}",
        body.1.lines().next()
    );
    ensure!(http(&format!("{}/healthz", node.http), "GET", &[], b"")?.status == 200);
    Ok(())
}

#[test]
fn the_schedulers_listener_limits_each_address_but_not_the_api_token() -> Result<()> {
    let _area = ferry_tests::area(module_path!());
    let api = "limits-test-api-token";
    let scheduler = ferry_tests::cluster::start_scheduler(
        &["--token", api, "--http-rate", "2", "--http-burst", "5"],
        &[],
    )?;
    let base = scheduler.after("http")?;
    let nodes = format!("{base}/v1/nodes");
    let mut statuses = Vec::new();
    let mut limited = None;
    for _ in 0..20 {
        let r = http(&nodes, "GET", &[], b"")?;
        statuses.push(r.status);
        if r.status == 429 && limited.is_none() {
            limited = Some(r);
        }
    }
    let passed = statuses.iter().filter(|&&s| s != 429).count();
    eprintln!("scheduler: {passed} of 20 passed: {statuses:?}");
    ensure!(
        (5..=8).contains(&passed),
        "{passed} of 20 passed: {statuses:?}"
    );
    let r = limited.context("no 429")?;
    expect(&r, 429, "too many requests from 127.0.0.1")?;
    ensure!(r.header("retry-after").is_some(), "no Retry-After");
    // The API token (the nodes' heartbeats, the operator) is never limited.
    let auth = format!("Bearer {api}");
    for _ in 0..10 {
        let r = http(&nodes, "GET", &[("Authorization", &auth)], b"")?;
        ensure!(r.status == 200, "{} {}", r.status, r.body);
    }
    // Probes are not limited either, and the scheduler's metrics count the refusals.
    let m = http(
        &format!("{base}/metrics"),
        "GET",
        &[("Authorization", &auth)],
        b"",
    )?;
    ensure!(m.status == 200, "{} {}", m.status, m.body);
    let refused = rate_limited_total(&m)?;
    ensure!(refused == 20 - passed as u64, "refused {refused}");
    ensure!(
        m.body.contains("ferry_scheduler_"),
        "the scheduler's own metrics are kept"
    );
    Ok(())
}
