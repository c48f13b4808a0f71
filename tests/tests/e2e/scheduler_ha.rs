//! The scheduler's high availability, end to end: `ferry bench ha` on a real 3-member etcd
//! cluster (Debian `etcd-server`) with two `ferry scheduler --store etcd` replicas, an edge,
//! three nodes and 50 SDK viewers. It SIGKILLs the leading replica during a drain of the 50
//! viewers, then one etcd member, then a node, and fails when an invariant breaks; this test
//! checks its measurements again from the JSON it writes.
//!
//! Needs `ferry` built with `--features etcd` (`./scripts/test` does).

use std::process::Command;

use anyhow::{Context, Result, ensure};
use ferry_tests::ferry_bin;
use serde_json::Value;

#[test]
fn leader_etcd_member_and_node_kills_lose_nothing() -> Result<()> {
    let _area = ferry_tests::area(module_path!());
    let out = std::env::temp_dir().join(format!("ferry-ha-{}.json", std::process::id()));
    let lease_ttl_s = 5.0;
    let status = Command::new(ferry_bin()?)
        .args([
            "bench",
            "ha",
            "--sessions",
            "50",
            "--lease-ttl-s",
            "5",
            "--out",
        ])
        .arg(&out)
        .status()
        .context("running ferry bench ha")?;
    ensure!(
        status.success(),
        "ferry bench ha failed ({status}): its last lines say which invariant broke"
    );
    let r: Value = serde_json::from_slice(&std::fs::read(&out).context("the bench's JSON")?)?;
    let _ = std::fs::remove_file(&out);
    let num = |k: &str| r[k].as_f64().with_context(|| format!("{k} in {r}"));
    // A new leader within the lease TTL (plus the campaign's round trips).
    ensure!(
        num("failover_ms")? <= lease_ttl_s * 1000.0 + 1000.0,
        "failover took {} ms with a {lease_ttl_s} s lease",
        num("failover_ms")?
    );
    ensure!(
        num("drain_committed")? >= 50.0 && num("drain_packets_missing")? == 0.0,
        "the drain across the failover: {r}"
    );
    ensure!(
        r["leader_kept_with_member_down"] == true
            && num("moves_with_member_down")? == 10.0
            && num("moves_committed_with_member_down")? == num("moves_with_member_down")?
            && num("member_down_packets_missing")? == 0.0,
        "an etcd member's death was visible: {r}"
    );
    // Nodes live by etcd leases (3 s) that the new leader adopted: none went down in the gap.
    ensure!(
        num("nodes_down_after_failover")? == 0.0,
        "nodes declared down by the failover: {r}"
    );
    // The killed node: down (its viewers' reports, or its lease) and its lease ended in etcd.
    ensure!(
        num("node_down_ms")? <= 4500.0 && num("node_lease_expired_ms")? <= 4500.0,
        "the killed node's lease: {r}"
    );
    ensure!(
        num("node_kill_viewers")? > 0.0 && num("node_kill_recovered")? == num("node_kill_viewers")?,
        "viewers of the killed node: {r}"
    );
    eprintln!("ferry bench ha: {r}");
    Ok(())
}
