//! A real one-member etcd (Debian `etcd-server`) on loopback ports, for tests of the scheduler's
//! etcd store; killed and its data removed on drop.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use serde_json::{Value, json};

use crate::http;

/// A running etcd member.
#[derive(Debug)]
pub struct Etcd {
    child: Child,
    dir: PathBuf,
    /// Its client URL (`http://127.0.0.1:PORT`).
    pub url: String,
}

impl Drop for Etcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn free_port() -> Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

impl Etcd {
    /// Starts `etcd` (from `$PATH`; `./scripts/test` installs it) and waits until it is healthy.
    pub fn start(name: &str) -> Result<Etcd> {
        let dir = std::env::temp_dir().join(format!("ferry-etcd-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        let (client, peer) = (free_port()?, free_port()?);
        let url = format!("http://127.0.0.1:{client}");
        let peer_url = format!("http://127.0.0.1:{peer}");
        let log = std::fs::File::create(dir.join("etcd.log"))?;
        let child = Command::new("etcd")
            .args(["--name", name])
            .arg("--data-dir")
            .arg(dir.join("data"))
            .args([
                "--listen-client-urls",
                &url,
                "--advertise-client-urls",
                &url,
            ])
            .args(["--listen-peer-urls", &peer_url])
            .args(["--initial-advertise-peer-urls", &peer_url])
            .args(["--initial-cluster", &format!("{name}={peer_url}")])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .context("starting etcd (Debian: apt-get install etcd-server; ./scripts/test does)")?;
        let etcd = Etcd { child, dir, url };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let r = http(&format!("{}/health", etcd.url), "GET", &[], b"");
            if r.is_ok_and(|r| r.body.contains("\"health\":\"true\"")) {
                return Ok(etcd);
            }
            if Instant::now() > deadline {
                bail!(
                    "etcd did not become healthy (log: {})",
                    etcd.dir.join("etcd.log").display()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The value of `key` (etcd's JSON gateway, asked with curl: it answers chunked), if it
    /// has one.
    pub fn get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        let body = json!({ "key": B64.encode(key) }).to_string();
        let out = std::process::Command::new("curl")
            .args(["-sS", "--fail", "-X", "POST", "-d", &body])
            .arg(format!("{}/v3/kv/range", self.url))
            .output()
            .context("running curl")?;
        anyhow::ensure!(
            out.status.success(),
            "etcd range: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: Value = serde_json::from_slice(&out.stdout).context("etcd range answer")?;
        match v["kvs"][0]["value"].as_str() {
            Some(b) => Ok(Some(B64.decode(b)?)),
            None => Ok(None),
        }
    }
}
