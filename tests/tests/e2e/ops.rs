//! The operator CLI against `ferry dev`: `ferry status` (tables and `--json`), `ferry drain
//! NODE --wait`, `ferry undrain NODE` (`DELETE /v1/nodes/{id}/drain`), their errors, and nodes
//! that start together at full weight (no ramp-in for a cluster that starts).

use std::process::{Command, Output};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use ferry_tests::cluster::{start_dev, wait_registered};
use ferry_tests::{ferry_bin, http};
use serde_json::Value;

fn ferry(args: &[&str]) -> Result<Output> {
    Command::new(ferry_bin()?)
        .args(args)
        .env_remove("FERRY_API_TOKEN")
        .output()
        .with_context(|| format!("running ferry {args:?}"))
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Waits until node `base`'s `/readyz` answers `status` (its heartbeat brings the news).
async fn ready_is(base: &str, status: u16) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let r = http(&format!("{base}/readyz"), "GET", &[], b"")?;
        if r.status == status {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("{base}/readyz is {} {}, not {status}", r.status, r.body);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn status_json(gateway: &str) -> Result<Value> {
    let o = ferry(&["status", "--scheduler", gateway, "--json"])?;
    ensure!(o.status.success(), "ferry status --json: {o:?}");
    Ok(serde_json::from_slice(&o.stdout)?)
}

fn node_state(status: &Value, id: &str) -> Option<String> {
    status["nodes"]
        .as_array()?
        .iter()
        .find(|n| n["id"] == id)
        .and_then(|n| n["state"].as_str().map(str::to_owned))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_drain_and_undrain_from_the_cli() -> Result<()> {
    let _area = ferry_tests::area(module_path!());
    let dev = start_dev(false)?;
    wait_registered(&dev.gateway, 2).await?;
    // A dead replica first in the list: the CLI moves on to the one that answers.
    let schedulers = format!("http://127.0.0.1:9,{}", dev.gateway);

    // Nodes that start together start at their target weight (an idle node's target is below
    // 1: its score); a 10-minute ramp-in would hold them near 0 for minutes.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let s = status_json(&schedulers)?;
        let weights: Vec<f64> = s["nodes"]
            .as_array()
            .context("nodes")?
            .iter()
            .filter_map(|n| n["weight"].as_f64())
            .collect();
        if weights.len() == 2 && weights.iter().all(|w| *w >= 0.3) {
            // Each node reports its cores (`--workers`, FERRY_WORKERS or one per CPU).
            let want = std::env::var("FERRY_WORKERS")
                .ok()
                .and_then(|w| w.parse::<u64>().ok())
                .filter(|&w| w > 0)
                .unwrap_or(std::thread::available_parallelism().map_or(1, |n| n.get() as u64));
            for n in s["nodes"].as_array().context("nodes")? {
                ensure!(n["workers"] == want, "{n} runs {want} cores");
            }
            break;
        }
        if Instant::now() > deadline {
            bail!("the nodes of a starting cluster are ramping: {s}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let o = ferry(&["status", "--scheduler", &schedulers])?;
    let text = stdout(&o);
    eprintln!("{text}");
    ensure!(o.status.success(), "ferry status: {o:?}");
    for want in [
        "NODES (2)",
        "CORES",
        "node-a",
        "node-b",
        "active",
        "SESSIONS (0)",
        "MIGRATIONS RUNNING (0)",
    ] {
        ensure!(text.contains(want), "ferry status lacks {want:?}:\n{text}");
    }

    // Errors: no token, an unknown node, nothing answering.
    let o = ferry(&["drain", "node-b", "--scheduler", &schedulers])?;
    ensure!(
        o.status.code() == Some(2) && String::from_utf8_lossy(&o.stderr).contains("API token"),
        "drain without a token: {o:?}"
    );
    let o = ferry(&[
        "drain",
        "nosuch",
        "--scheduler",
        &schedulers,
        "--token",
        &dev.token,
    ])?;
    ensure!(
        o.status.code() == Some(2) && String::from_utf8_lossy(&o.stderr).contains("404"),
        "drain of an unknown node: {o:?}"
    );
    let o = ferry(&["status", "--scheduler", "http://127.0.0.1:9"])?;
    ensure!(
        o.status.code() == Some(2) && String::from_utf8_lossy(&o.stderr).contains("127.0.0.1:9"),
        "status with no scheduler: {o:?}"
    );

    ready_is(&dev.node_b, 200).await?;
    let healthz = http(&format!("{}/healthz", dev.node_b), "GET", &[], b"")?;
    ensure!(healthz.status == 200, "healthz {}", healthz.status);

    // Drain node-b and follow it; then it is drained.
    let o = ferry(&[
        "drain",
        "node-b",
        "--wait",
        "--scheduler",
        &schedulers,
        "--token",
        &dev.token,
    ])?;
    eprintln!("{}{}", String::from_utf8_lossy(&o.stderr), stdout(&o));
    ensure!(o.status.success(), "ferry drain --wait: {o:?}");
    ensure!(stdout(&o).contains("node-b drained"), "{}", stdout(&o));
    ensure!(
        node_state(&status_json(&schedulers)?, "node-b").as_deref() == Some("drained"),
        "node-b is not drained"
    );
    // A drained node is alive but not ready.
    ready_is(&dev.node_b, 503).await?;
    let healthz = http(&format!("{}/healthz", dev.node_b), "GET", &[], b"")?;
    ensure!(
        healthz.status == 200,
        "a drained node's healthz: {}",
        healthz.status
    );

    // Undrain: active again, and an active node undrains to itself.
    for _ in 0..2 {
        let o = ferry(&[
            "undrain",
            "node-b",
            "--scheduler",
            &schedulers,
            "--token",
            &dev.token,
        ])?;
        ensure!(o.status.success(), "ferry undrain: {o:?}");
        ensure!(stdout(&o).contains("node-b is active"), "{}", stdout(&o));
    }
    ensure!(
        node_state(&status_json(&schedulers)?, "node-b").as_deref() == Some("active"),
        "node-b is not active after undrain"
    );
    ready_is(&dev.node_b, 200).await?;
    Ok(())
}
