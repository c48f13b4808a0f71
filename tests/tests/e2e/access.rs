//! Access tokens and HTTPS, end to end.
//!
//! - A `ferry node --token-secret S`: WHIP/WHEP without a token, with an expired one or one
//!   signed with another secret → 401 with `WWW-Authenticate`; a play token used to publish or
//!   a token for stream A used on stream B → 403; tokens minted by `ferry token` work, and so
//!   does the node's API token (every stream).
//! - `ferry dev` over HTTPS (`--tls-cert/--tls-key` from a test CA, `--tls-ca` for its own
//!   calls): Chromium, trusting the test CA, publishes and plays with the browser SDK using a
//!   token from `ferry token`; then the certificate files are replaced and the listeners serve
//!   the new certificate without a restart.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use ferry_proto::auth::{Claims, Signer};
use ferry_tests::cluster::start_dev_with;
use ferry_tests::{Browser, Collector, FerryNode, Reports, ferry_bin, http, num};

const OFFER: &str = include_str!("../../../rtc/src/sdp/testdata/chrome_offer.sdp");
const SECRET: &str = "access-test-secret";

/// Runs `command`; its stdout when it succeeds, else an error with its stderr.
fn run(mut command: Command) -> Result<Vec<u8>> {
    let out = command
        .env_remove("FERRY_TOKEN_SECRET")
        .output()
        .with_context(|| format!("running {command:?}"))?;
    ensure!(
        out.status.success(),
        "{command:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(out.stdout)
}

/// `ferry token` with `args`: the token it prints.
fn token(args: &[&str]) -> Result<String> {
    let mut c = Command::new(ferry_bin()?);
    c.arg("token").args(args);
    Ok(String::from_utf8(run(c)?)?.trim().to_owned())
}

/// `ferry token --secret SECRET` with `args`.
fn ferry_token(args: &[&str]) -> Result<String> {
    let mut all = vec!["--secret", SECRET];
    all.extend_from_slice(args);
    token(&all)
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[test]
fn whip_and_whep_need_a_token_for_the_stream_and_the_action() -> Result<()> {
    let _area = ferry_tests::area(module_path!());
    let node = FerryNode::spawn(&["--token-secret", SECRET])?;
    let post = |path: &str, token: Option<&str>| {
        let bearer = token.map(|t| format!("Bearer {t}"));
        let mut headers = vec![("Content-Type", "application/sdp")];
        if let Some(b) = &bearer {
            headers.push(("Authorization", b.as_str()));
        }
        http(
            &format!("{}{path}", node.http),
            "POST",
            &headers,
            OFFER.as_bytes(),
        )
    };
    let refused = |r: &ferry_tests::Response, status: u16, code: &str| -> Result<()> {
        ensure!(
            r.status == status && r.header("ferry-error") == Some(code),
            "expected {status} {code}, got {} {:?}: {}",
            r.status,
            r.header("ferry-error"),
            r.body
        );
        if status == 401 {
            let challenge = r.header("www-authenticate").unwrap_or_default();
            ensure!(
                challenge.starts_with("Bearer realm=\"ferry\""),
                "401 without a Bearer challenge: {challenge:?}"
            );
        }
        Ok(())
    };

    // No token, an expired one, a forged one (another secret), garbage.
    refused(&post("/whip/cam-a", None)?, 401, "token-missing")?;
    let past = unix_now() - 3600;
    let expired = Signer::hs256(SECRET.as_bytes())?
        .sign(&Claims::new("t", past).issued_at(past - 60).publish("*"))?;
    refused(&post("/whip/cam-a", Some(&expired))?, 401, "token-expired")?;
    let forged =
        Signer::hs256(b"not-the-secret")?.sign(&Claims::new("t", unix_now() + 600).publish("*"))?;
    refused(&post("/whip/cam-a", Some(&forged))?, 401, "token-invalid")?;
    refused(&post("/whip/cam-a", Some("a.b.c"))?, 401, "token-invalid")?;

    // The wrong action, the wrong stream, a prefix that does not match.
    let play_a = ferry_token(&["--stream", "cam-a", "--play", "--ttl", "10m"])?;
    refused(
        &post("/whip/cam-a", Some(&play_a))?,
        403,
        "token-wrong-grant",
    )?;
    let publish_a = ferry_token(&["--stream", "cam-a", "--publish", "--ttl", "10m"])?;
    refused(
        &post("/whip/cam-b", Some(&publish_a))?,
        403,
        "token-wrong-stream",
    )?;
    let studio = ferry_token(&["--stream", "studio-*", "--publish"])?;
    refused(
        &post("/whip/cam-a", Some(&studio))?,
        403,
        "token-wrong-stream",
    )?;

    // The right ones: a publish token for the stream, a prefix, the API token; the play token
    // plays what was published (also as `?access_token=`, for clients without headers).
    let r = post("/whip/cam-a", Some(&publish_a))?;
    ensure!(
        r.status == 201,
        "publish with its token: {} {}",
        r.status,
        r.body
    );
    let r = post("/whip/studio-1", Some(&studio))?;
    ensure!(
        r.status == 201,
        "publish with a prefix token: {} {}",
        r.status,
        r.body
    );
    let r = post("/whip/cam-c", Some(&node.token))?;
    ensure!(
        r.status == 201,
        "publish with the API token: {} {}",
        r.status,
        r.body
    );
    refused(
        &post("/whep/cam-a", Some(&publish_a))?,
        403,
        "token-wrong-grant",
    )?;
    let r = post(&format!("/whep/cam-a?access_token={play_a}"), None)?;
    ensure!(
        r.status == 201,
        "play with ?access_token: {} {}",
        r.status,
        r.body
    );
    Ok(())
}

/// EdDSA: a node that checks tokens with an Ed25519 public key accepts what `ferry token
/// --private-key` signs with the matching private key, and nothing signed with another key.
#[test]
fn eddsa_tokens_are_checked_with_the_public_key() -> Result<()> {
    let _area = ferry_tests::area(module_path!());
    let dir = std::env::temp_dir().join(format!("ferry-eddsa-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    for name in ["ours", "theirs"] {
        openssl(
            &dir,
            &[
                "genpkey",
                "-algorithm",
                "ed25519",
                "-out",
                &format!("{name}.pem"),
            ],
        )?;
    }
    openssl(
        &dir,
        &["pkey", "-in", "ours.pem", "-pubout", "-out", "ours.pub.pem"],
    )?;
    let path = |f: &str| dir.join(f).to_string_lossy().into_owned();
    let node = FerryNode::spawn(&["--token-public-key", &path("ours.pub.pem")])?;
    let mint = |key: &str| token(&["--stream", "cam", "--publish", "--private-key", key]);
    let post = |token: &str| {
        http(
            &format!("{}/whip/cam", node.http),
            "POST",
            &[
                ("Content-Type", "application/sdp"),
                ("Authorization", &format!("Bearer {token}")),
            ],
            OFFER.as_bytes(),
        )
    };
    let r = post(&mint(&path("theirs.pem"))?)?;
    ensure!(
        r.status == 401 && r.header("ferry-error") == Some("token-invalid"),
        "another key's token: {} {}",
        r.status,
        r.body
    );
    // An HS256 token cannot pass for EdDSA (no algorithm confusion).
    let hs = Signer::hs256(b"any")?.sign(&Claims::new("t", unix_now() + 600).publish("*"))?;
    let r = post(&hs)?;
    ensure!(
        r.status == 401,
        "an HS256 token at an EdDSA node: {} {}",
        r.status,
        r.body
    );
    let r = post(&mint(&path("ours.pem"))?)?;
    ensure!(r.status == 201, "our key's token: {} {}", r.status, r.body);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// Runs `openssl` with `args` in `dir`.
fn openssl(dir: &Path, args: &[&str]) -> Result<Vec<u8>> {
    let mut c = Command::new("openssl");
    c.args(args).current_dir(dir);
    run(c)
}

/// A leaf certificate for 127.0.0.1 signed by the test CA, written to `cert.pem` (the full
/// chain: leaf, then the CA) and `key.pem`, through temporary files renamed in place as a
/// deploy tool would.
fn issue_leaf(dir: &Path, serial: &str) -> Result<()> {
    openssl(
        dir,
        &[
            "ecparam",
            "-name",
            "prime256v1",
            "-genkey",
            "-noout",
            "-out",
            "new-key.pem",
        ],
    )?;
    openssl(
        dir,
        &[
            "req",
            "-new",
            "-key",
            "new-key.pem",
            "-subj",
            "/CN=127.0.0.1",
            "-out",
            "leaf.csr",
        ],
    )?;
    std::fs::write(
        dir.join("leaf.ext"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\n",
    )?;
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "leaf.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca-key.pem",
            "-set_serial",
            serial,
            "-days",
            "2",
            "-extfile",
            "leaf.ext",
            "-out",
            "new-cert.pem",
        ],
    )?;
    let mut chain = std::fs::read(dir.join("new-cert.pem"))?;
    chain.extend(std::fs::read(dir.join("ca.pem"))?);
    std::fs::write(dir.join("new-chain.pem"), chain)?;
    std::fs::rename(dir.join("new-key.pem"), dir.join("key.pem"))?;
    std::fs::rename(dir.join("new-chain.pem"), dir.join("cert.pem"))?;
    Ok(())
}

/// The serial number of the certificate `https://{addr}` serves.
fn served_serial(dir: &Path, addr: &str) -> Result<String> {
    let mut s = Command::new("openssl")
        .args(["s_client", "-connect", addr, "-CAfile", "ca.pem"])
        .current_dir(dir)
        .stdin(std::process::Stdio::null())
        .output()
        .context("openssl s_client")?;
    ensure!(
        String::from_utf8_lossy(&s.stdout).contains("Verify return code: 0 (ok)"),
        "the served chain does not verify against the test CA: {}",
        String::from_utf8_lossy(&s.stdout)
    );
    let pem = std::mem::take(&mut s.stdout);
    std::fs::write(dir.join("served.txt"), pem)?;
    let out = openssl(dir, &["x509", "-in", "served.txt", "-noout", "-serial"])?;
    Ok(String::from_utf8(out)?.trim().to_owned())
}

fn playing(r: &serde_json::Value) -> bool {
    num(r, "/inbound/video/framesDecoded") > 30.0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chromium_publishes_and_plays_over_https_with_tokens_and_the_certificate_reloads()
-> Result<()> {
    let _area = ferry_tests::area(module_path!());
    let dir = std::env::temp_dir().join(format!("ferry-tls-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    openssl(
        &dir,
        &[
            "ecparam",
            "-name",
            "prime256v1",
            "-genkey",
            "-noout",
            "-out",
            "ca-key.pem",
        ],
    )?;
    openssl(
        &dir,
        &[
            "req",
            "-x509",
            "-new",
            "-key",
            "ca-key.pem",
            "-subj",
            "/CN=Ferry test CA",
            "-days",
            "2",
            "-out",
            "ca.pem",
        ],
    )?;
    issue_leaf(&dir, "1001")?;
    // Chromium trusts the test CA by its public key's hash (the CA is in the served chain).
    let spki = {
        let der = openssl(&dir, &["x509", "-in", "ca.pem", "-noout", "-pubkey"])?;
        std::fs::write(dir.join("ca-pub.pem"), der)?;
        let der = openssl(
            &dir,
            &["pkey", "-pubin", "-in", "ca-pub.pem", "-outform", "der"],
        )?;
        std::fs::write(dir.join("ca-pub.der"), der)?;
        let hash = openssl(&dir, &["dgst", "-sha256", "-binary", "ca-pub.der"])?;
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode(hash)
    };
    let path = |f: &str| dir.join(f).to_string_lossy().into_owned();
    let (cert, key, ca) = (path("cert.pem"), path("key.pem"), path("ca.pem"));
    let dev = start_dev_with(
        false,
        &[
            "--tls-cert",
            &cert,
            "--tls-key",
            &key,
            "--tls-ca",
            &ca,
            "--token-secret",
            SECRET,
        ],
    )?;
    ensure!(
        dev.gateway.starts_with("https://") && dev.node_a.starts_with("https://"),
        "ferry dev serves HTTPS: {} {}",
        dev.gateway,
        dev.node_a
    );
    let gateway_addr = dev.gateway.trim_start_matches("https://").to_owned();
    ensure!(
        served_serial(&dir, &gateway_addr)?.ends_with("=03E9"),
        "serial 1001 served"
    );
    // Plain HTTP to an HTTPS listener gets nowhere.
    let plain = http(&format!("http://{gateway_addr}/healthz"), "GET", &[], b"");
    ensure!(
        plain.map_or(true, |r| r.status != 200),
        "plain HTTP was served"
    );
    // The nodes reach the scheduler over HTTPS (trusting --tls-ca): they register.
    let tokio_gateway = dev.gateway.clone();
    wait_registered_https(&dir, &tokio_gateway, 2).await?;

    let stream = "tls-cam";
    let token = ferry_token(&["--stream", stream, "--publish", "--play", "--ttl", "10m"])?;
    let collector = Collector::start()?;
    let flag = format!("--ignore-certificate-errors-spki-list={spki}");
    let page = |file: &str, id: &str| {
        collector.page_url(
            file,
            &[
                ("sdk", dev.gateway.as_str()),
                ("base", dev.gateway.as_str()),
                ("stream", stream),
                ("codec", "vp8"),
                ("id", id),
                ("token", token.as_str()),
            ],
        )
    };
    let _publisher = Browser::open_with(&page("sdk-publish.html", "A"), &[&flag])?;
    collector
        .wait_until(Duration::from_secs(30), |r| {
            r.get("A").is_some_and(|a| a["state"] == "connected")
        })
        .await?;
    // The publisher's node reports the stream (heartbeat) before a viewer asks for it.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let _viewer = Browser::open_with(&page("sdk-play.html", "B"), &[&flag])?;
    let reports: Reports = collector
        .wait_until(Duration::from_secs(60), |r| r.get("B").is_some_and(playing))
        .await?;
    eprintln!(
        "over https: B decoded {}",
        num(&reports["B"], "/inbound/video/framesDecoded")
    );

    // A new certificate in place of the old: served without a restart, by the gateway and
    // by node-a alike. Each process checks the files on its own one-second tick, so one may
    // serve the new certificate up to a tick before the other.
    issue_leaf(&dir, "1002")?;
    let node_addr = dev.node_a.trim_start_matches("https://").to_owned();
    for (who, addr) in [("the gateway", &gateway_addr), ("node-a", &node_addr)] {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let serial = served_serial(&dir, addr)?;
            if serial.ends_with("=03EA") {
                break;
            }
            if Instant::now() > deadline {
                bail!("{who} still serves {serial} 10 s after the certificate files changed");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    // Media went on through the reload.
    let before = num(&collector.reports()["B"], "/inbound/video/framesDecoded");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = num(&collector.reports()["B"], "/inbound/video/framesDecoded");
    ensure!(
        after > before + 20.0,
        "B stopped playing: {before} → {after}"
    );
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// Waits until the scheduler at `gateway` (HTTPS) lists `n` nodes, asking with curl.
async fn wait_registered_https(dir: &Path, gateway: &str, n: usize) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let out = Command::new("curl")
            .args(["-sS", "--cacert", "ca.pem", &format!("{gateway}/v1/nodes")])
            .current_dir(dir)
            .output()?;
        let nodes: serde_json::Value =
            serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
        if nodes.as_array().is_some_and(|a| a.len() >= n) {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "{n} nodes did not register over HTTPS: {}",
                String::from_utf8_lossy(&out.stdout)
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
