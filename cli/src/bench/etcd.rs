//! A real etcd cluster on loopback for the HA bench: `etcd` members started as processes
//! (Debian `etcd-server`), each with its own data directory, killable one by one.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// A running etcd cluster; its members are killed and their data removed on drop.
pub(crate) struct EtcdCluster {
    members: Vec<Option<Child>>,
    clients: Vec<String>,
    dir: PathBuf,
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            self.kill(i);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A loopback port free at the time of asking.
fn free_port() -> Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

impl EtcdCluster {
    /// Starts `n` members and waits until the cluster answers.
    pub(crate) fn start(n: usize) -> Result<EtcdCluster> {
        let etcd = which("etcd").context(
            "etcd is not installed (Debian: apt install etcd-server); the HA bench starts a real cluster",
        )?;
        // One directory per cluster (tests start several in one process).
        static STARTED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let nth = STARTED.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let dir = std::env::temp_dir().join(format!("ferry-etcd-{}-{nth}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        let ports: Vec<(u16, u16)> = (0..n)
            .map(|_| Ok((free_port()?, free_port()?)))
            .collect::<Result<_>>()?;
        let initial = ports
            .iter()
            .enumerate()
            .map(|(i, (_, peer))| format!("m{i}=http://127.0.0.1:{peer}"))
            .collect::<Vec<_>>()
            .join(",");
        let mut c = EtcdCluster {
            members: Vec::new(),
            clients: Vec::new(),
            dir,
        };
        for (i, (client, peer)) in ports.iter().enumerate() {
            let client_url = format!("http://127.0.0.1:{client}");
            let peer_url = format!("http://127.0.0.1:{peer}");
            let data = c.dir.join(format!("m{i}"));
            let log = std::fs::File::create(c.dir.join(format!("m{i}.log")))?;
            let child = Command::new(&etcd)
                .args(["--name", &format!("m{i}")])
                .arg("--data-dir")
                .arg(&data)
                .args(["--listen-client-urls", &client_url])
                .args(["--advertise-client-urls", &client_url])
                .args(["--listen-peer-urls", &peer_url])
                .args(["--initial-advertise-peer-urls", &peer_url])
                .args(["--initial-cluster", &initial])
                .args(["--initial-cluster-state", "new"])
                .args([
                    "--initial-cluster-token",
                    &format!("ferry-{}", std::process::id()),
                ])
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .context("starting etcd")?;
            c.members.push(Some(child));
            c.clients.push(client_url);
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        while !c.healthy() {
            if Instant::now() > deadline {
                bail!(
                    "the etcd cluster did not become healthy (logs in {})",
                    c.dir.display()
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        Ok(c)
    }

    /// Every running member answers `/health` with `"health":"true"`.
    fn healthy(&self) -> bool {
        self.clients.iter().zip(&self.members).all(|(url, m)| {
            m.is_none()
                || super::cluster::get_text(&format!("{url}/health"))
                    .is_some_and(|b| b.contains("\"health\":\"true\""))
        })
    }

    /// The client URLs, comma-separated.
    pub(crate) fn endpoints(&self) -> String {
        self.clients.join(",")
    }

    /// The index of the member that is etcd's raft leader now.
    pub(crate) fn raft_leader(&self) -> Result<usize> {
        for (i, url) in self.clients.iter().enumerate() {
            if self.members[i].is_none() {
                continue;
            }
            let status: serde_json::Value = ureq::post(&format!("{url}/v3/maintenance/status"))
                .send_json(serde_json::json!({}))?
                .body_mut()
                .read_json()?;
            if status["leader"].is_string() && status["leader"] == status["header"]["member_id"] {
                return Ok(i);
            }
        }
        bail!("no etcd member says it leads")
    }

    /// Whether `key` exists, as a running member answers.
    pub(crate) fn has_key(&self, key: &str) -> Result<bool> {
        use base64::Engine as _;
        let body = serde_json::json!({
            "key": base64::engine::general_purpose::STANDARD.encode(key),
            "count_only": true,
        });
        let mut last = None;
        for (i, url) in self.clients.iter().enumerate() {
            if self.members[i].is_none() {
                continue;
            }
            match ureq::post(&format!("{url}/v3/kv/range")).send_json(&body) {
                Ok(mut r) => {
                    let v: serde_json::Value = r.body_mut().read_json()?;
                    // The JSON gateway leaves out zero counts.
                    return Ok(v["count"].as_str().is_some_and(|c| c != "0"));
                }
                Err(e) => last = Some(e),
            }
        }
        bail!("no etcd member answers: {last:?}")
    }

    /// SIGKILLs member `i`.
    pub(crate) fn kill(&mut self, i: usize) {
        if let Some(mut m) = self.members[i].take() {
            let _ = m.kill();
            let _ = m.wait();
        }
    }
}

/// The path of `program` on `$PATH`.
fn which(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(program))
            .find(|p| p.is_file())
    })
}

/// On a real etcd: the scheduler's store refuses a deposed leader's write; nodes live by their
/// etcd lease; the routing table's version is the revision that stored it.
#[cfg(all(test, feature = "etcd"))]
mod tests {
    use std::time::{Duration, Instant};

    use anyhow::{Context, Result, bail, ensure};
    use base64::Engine as _;
    use base64::engine::general_purpose::STANDARD as B64;
    use std::sync::Arc;

    use ferry_proto::NodeId;
    use ferry_proto::api::{Heartbeat, NodeState};
    use ferry_scheduler::cluster::{Cluster, ClusterConfig, Persisted};
    use ferry_scheduler::drain::NoMigrator;
    use ferry_scheduler::ha::{EtcdConfig, EtcdStore};
    use ferry_scheduler::service::Scheduler;
    use ferry_scheduler::store::{Store, StoreError};
    use serde_json::{Value, json};

    use super::EtcdCluster;

    /// POSTs to etcd's JSON gateway (`/v3/…`), keys and values in base64.
    fn etcd(etcd: &EtcdCluster, path: &str, body: &Value) -> Result<Value> {
        let url = format!("{}{path}", etcd.clients[0]);
        Ok(ureq::post(&url).send_json(body)?.body_mut().read_json()?)
    }

    /// The state key's value and modification revision.
    fn state(e: &EtcdCluster, key: &str) -> Result<(String, String)> {
        let r = etcd(e, "/v3/kv/range", &json!({ "key": B64.encode(key) }))?;
        let kv = &r["kvs"][0];
        Ok((
            kv["value"].as_str().context("no state")?.to_owned(),
            kv["mod_revision"].as_str().context("revision")?.to_owned(),
        ))
    }

    fn until(what: &str, mut f: impl FnMut() -> bool) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(15);
        while !f() {
            if Instant::now() > deadline {
                bail!("timed out waiting until {what}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    }

    #[test]
    fn a_deposed_leaders_stale_write_is_fenced_by_etcd() -> Result<()> {
        let e = EtcdCluster::start(1)?;
        let config = |who: &str| EtcdConfig {
            endpoints: vec![e.clients[0].clone()],
            prefix: "/fence-test".into(),
            lease_ttl: Duration::from_secs(5),
            advertise: format!("http://{who}.invalid"),
            node_lease_ttl: Duration::from_secs(3),
        };
        let now = Instant::now();
        // States that differ (their weights carry the wall clock they were saved at).
        let at = |unix_ms: u64| -> Result<Persisted> {
            let c = Cluster::new(ClusterConfig::default(), now)?;
            Ok(c.persisted(now, unix_ms))
        };
        let (mut a, lead_a) = EtcdStore::connect(config("a"))?;
        until("a leads", || lead_a.is_leader())?;
        a.save(&at(1_000)?)?;
        let (mut b, lead_b) = EtcdStore::connect(config("b"))?;
        std::thread::sleep(Duration::from_millis(500));
        ensure!(!lead_b.is_leader(), "two leaders");
        ensure!(
            matches!(b.save(&at(2_000)?), Err(StoreError::Fenced(_))),
            "a follower's write went through"
        );

        // a is deposed behind its back (its election key goes, as when its lease ends while
        // the process is paused): b wins, while a still believes it leads.
        let (key, _) = lead_a.fence().context("a's fence")?;
        etcd(
            &e,
            "/v3/kv/deleterange",
            &json!({ "key": B64.encode(&key) }),
        )?;
        until("b leads", || lead_b.is_leader())?;
        ensure!(
            lead_a.is_leader(),
            "a noticed on its own (the test needs it not to)"
        );
        b.save(&at(3_000)?)?;
        let before = state(&e, "/fence-test/state")?;

        // a's stale command: refused by etcd, and a steps down.
        match a.save(&at(4_000)?) {
            Err(StoreError::Fenced(_)) => {}
            other => bail!("the deposed leader's write was not fenced: {other:?}"),
        }
        ensure!(!lead_a.is_leader(), "a still leads after its fenced write");
        ensure!(
            state(&e, "/fence-test/state")? == before,
            "the deposed leader changed the state"
        );
        // b leads on, and its writes go through.
        b.save(&at(5_000)?)?;
        ensure!(
            state(&e, "/fence-test/state")? != before,
            "b's write was lost"
        );
        Ok(())
    }

    /// The lease bound to `key`, if the key exists.
    fn lease_of(e: &EtcdCluster, key: &str) -> Result<Option<String>> {
        let r = etcd(e, "/v3/kv/range", &json!({ "key": B64.encode(key) }))?;
        Ok(r["kvs"][0]["lease"].as_str().map(str::to_owned))
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_node_is_down_when_its_etcd_lease_ends_and_routing_versions_are_revisions()
    -> Result<()> {
        let e = tokio::task::spawn_blocking(|| EtcdCluster::start(1)).await??;
        let cfg = EtcdConfig {
            endpoints: vec![e.clients[0].clone()],
            prefix: "/lease-test".into(),
            lease_ttl: Duration::from_secs(5),
            advertise: "http://a.invalid".into(),
            node_lease_ttl: Duration::from_secs(2),
        };
        let (store, lead) = tokio::task::spawn_blocking(move || EtcdStore::connect(cfg)).await??;
        let leases = store.node_leases();
        let s = Scheduler::open_replica(
            ClusterConfig::default(),
            Box::new(store),
            "token".into(),
            Arc::new(NoMigrator),
            lead.clone(),
            Some(leases),
        )?;
        tokio::spawn(s.clone().run());
        let deadline = Instant::now() + Duration::from_secs(15);
        while !lead.is_leader() {
            ensure!(Instant::now() < deadline, "the replica never led");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let id = NodeId::new("n1")?;
        let hb = || Heartbeat {
            http: "http://n1.invalid".into(),
            media: "127.0.0.1:1".into(),
            ..Heartbeat::default()
        };
        // Beats for twice its lease, every 500 ms: alive throughout (the lease is renewed).
        for _ in 0..8 {
            s.heartbeat(&id, hb())?;
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        let state = |s: &Scheduler| s.with(|c| c.node_state(&id));
        ensure!(state(&s) == Some(NodeState::Active), "{:?}", state(&s));
        let key = "/lease-test/nodes/n1";
        let lease = lease_of(&e, key)?.context("the node has no key in etcd")?;
        ensure!(lease != "0", "the node's key has no lease");

        // The table that holds n1 carries the revision that stored it; heartbeats rewrote the
        // state since without changing the table, and its version stayed.
        let t = s.routing_table();
        ensure!(t.nodes.iter().any(|n| n.id == id), "n1 not in the table");
        let (_, rev) = state_at(&e)?;
        ensure!(
            t.version > 1 && t.version < rev,
            "version {} vs the state's revision {rev}",
            t.version
        );

        // Silence: down when etcd ends the lease (2 s; etcd looks every 500 ms), not before.
        let stopped = Instant::now();
        while state(&s) != Some(NodeState::Down) {
            ensure!(
                stopped.elapsed() < Duration::from_secs(8),
                "n1 not down 8 s after its last heartbeat"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let after = stopped.elapsed();
        ensure!(
            after >= Duration::from_millis(1500),
            "down after {after:?}, before its lease ended"
        );
        ensure!(
            lease_of(&e, key)?.is_none(),
            "the expired node's key is still there"
        );
        let deadline = Instant::now() + Duration::from_secs(5);
        let t2 = loop {
            let t2 = s.routing_table();
            if t2.version > t.version {
                break t2;
            }
            ensure!(
                Instant::now() < deadline,
                "the down node's table was not published"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        ensure!(
            t2.nodes
                .iter()
                .any(|n| n.id == id && n.state == NodeState::Down),
            "the published table does not show n1 down"
        );
        let (_, rev2) = state_at(&e)?;
        ensure!(
            t2.version <= rev2,
            "version {} past the state's revision {rev2}",
            t2.version
        );

        // Its next heartbeat: a new lease, up again.
        s.heartbeat(&id, hb())?;
        ensure!(state(&s) == Some(NodeState::Active), "n1 not back");
        let deadline = Instant::now() + Duration::from_secs(5);
        while lease_of(&e, key)?.is_none_or(|l| l == lease) {
            ensure!(Instant::now() < deadline, "n1 got no new lease");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(())
    }

    /// The scheduler state's value and revision in the lease test.
    fn state_at(e: &EtcdCluster) -> Result<(String, u64)> {
        let (v, rev) = state(e, "/lease-test/state")?;
        Ok((v, rev.parse()?))
    }
}
