//! Talking to a running cluster from a test: the scheduler's API for nodes,
//! sessions and migrations, and what the pages report about sessions.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use serde_json::Value;

use crate::collector::num;
use crate::node::http;
use crate::{Browser, Collector};

/// Opens `publish.html` as page `id`, publishing `codec` video and audio to
/// the WHIP endpoint `whip` (`extra` query pairs appended), and waits until
/// it is connected and encoding.
pub async fn open_publisher(
    collector: &Collector,
    whip: &str,
    codec: &str,
    id: &str,
    extra: &[(&str, &str)],
    setup: Duration,
) -> Result<Browser> {
    let mut query = vec![("whip", whip), ("codec", codec), ("audio", "1"), ("id", id)];
    query.extend_from_slice(extra);
    let page = Browser::open(&collector.page_url("publish.html", &query))?;
    collector
        .wait_until(setup, |r| {
            r.get(id).is_some_and(|a| {
                a["connectionState"] == "connected" && num(a, "/outbound/video/framesEncoded") > 0.0
            })
        })
        .await?;
    Ok(page)
}

/// The session id at the end of a page's WHIP/WHEP `Location`.
pub fn session_of(report: &Value) -> Result<String> {
    let loc = report["whip"]["location"]
        .as_str()
        .or_else(|| report["whep"]["location"].as_str())
        .context("no Location in the report")?;
    Ok(loc.rsplit('/').next().unwrap_or_default().to_owned())
}

/// A viewer page is connected and has decoded video.
pub fn playing(report: &Value) -> bool {
    report["connectionState"] == "connected" && num(report, "/inbound/video/framesDecoded") > 0.0
}

/// Waits until `n` nodes are active at the scheduler `gateway`, each with a
/// migration address.
pub async fn wait_registered(gateway: &str, n: usize) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let r = http(&format!("{gateway}/v1/nodes"), "GET", &[], b"")?;
        let nodes: Value = serde_json::from_str(&r.body).unwrap_or(Value::Null);
        if nodes.as_array().is_some_and(|l| {
            l.len() == n
                && l.iter().all(|x| {
                    x["state"] == "active" && x["migration"].as_str().is_some_and(|m| !m.is_empty())
                })
        }) {
            return Ok(());
        }
        ensure!(
            Instant::now() < deadline,
            "nodes did not register: {}",
            r.body
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// `POST /v1/migrations`; the migration's id.
pub fn start_migration(
    gateway: &str,
    token: &str,
    session: &str,
    target: &str,
    mode: &str,
) -> Result<String> {
    let auth = format!("Bearer {token}");
    let body = serde_json::json!({ "session": session, "target": target, "mode": mode });
    let r = http(
        &format!("{gateway}/v1/migrations"),
        "POST",
        &[
            ("Authorization", &auth),
            ("Content-Type", "application/json"),
        ],
        body.to_string().as_bytes(),
    )?;
    ensure!(
        (200..300).contains(&r.status),
        "POST /v1/migrations: {} {}",
        r.status,
        r.body
    );
    Ok(serde_json::from_str::<Value>(&r.body)?["id"]
        .as_str()
        .context("migration id")?
        .to_owned())
}

/// Follows migration `id` until it ends (committed, rolled back or failed);
/// its final view.
pub async fn migration_end(gateway: &str, id: &str) -> Result<Value> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r = http(&format!("{gateway}/v1/migrations/{id}"), "GET", &[], b"")?;
        let v: Value = serde_json::from_str(&r.body).unwrap_or(Value::Null);
        if matches!(
            v["state"].as_str(),
            Some("committed" | "rolled_back" | "failed")
        ) {
            return Ok(v);
        }
        ensure!(
            Instant::now() < deadline,
            "migration {id} did not end: {}",
            r.body
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until the scheduler sees `session` on `node` (heartbeats follow a
/// cutover within a second).
pub async fn wait_session_on(gateway: &str, session: &str, node: &str) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = http(&format!("{gateway}/v1/sessions"), "GET", &[], b"")?;
        let list: Value = serde_json::from_str(&r.body).unwrap_or(Value::Null);
        if list
            .as_array()
            .is_some_and(|l| l.iter().any(|s| s["id"] == session && s["node"] == node))
        {
            return Ok(());
        }
        ensure!(
            Instant::now() < deadline,
            "{session} not on {node}: {}",
            r.body
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
