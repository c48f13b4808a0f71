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
        let dir = std::env::temp_dir().join(format!("ferry-etcd-{}", std::process::id()));
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
                || crate::bench_migrate::get_text(&format!("{url}/health"))
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

/// Fencing on a real etcd: the scheduler's store refuses a deposed leader's write.
#[cfg(all(test, feature = "etcd"))]
mod tests {
    use std::time::{Duration, Instant};

    use anyhow::{Context, Result, bail, ensure};
    use base64::Engine as _;
    use base64::engine::general_purpose::STANDARD as B64;
    use ferry_scheduler::cluster::{Cluster, ClusterConfig, Persisted};
    use ferry_scheduler::ha::{EtcdConfig, EtcdStore};
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
        };
        let now = Instant::now();
        // States that differ (their weights carry the wall clock they were saved at).
        let at = |unix_ms: u64| -> Result<Persisted> {
            let c = Cluster::new(ClusterConfig::default(), now).map_err(anyhow::Error::msg)?;
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
}
