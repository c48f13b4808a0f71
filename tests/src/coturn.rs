//! Real coturn relays (Debian `coturn`) on loopback ports, for the TURN tests: started with
//! `use-auth-secret`, so they check Ferry's credentials themselves; killed and their files
//! removed on drop. `turnutils_uclient` (shipped with coturn) allocates through one.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// A running coturn.
#[derive(Debug)]
pub struct Coturn {
    child: Child,
    dir: PathBuf,
    /// Its listening port (UDP and TCP) on 127.0.0.1.
    pub port: u16,
    /// Its relay ports: `min..=min + 199`.
    min_port: u16,
}

impl Drop for Coturn {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Relay port ranges of the relays this process starts (each gets 1,000 of its own).
static NEXT_RANGE: AtomicU16 = AtomicU16::new(0);

impl Coturn {
    /// Starts `turnserver` with `secret` as its `static-auth-secret` (several, comma-separated:
    /// coturn accepts a credential signed with any of them, as during a rotation) and waits until
    /// it answers STUN.
    pub fn start(secret: &str) -> Result<Coturn> {
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let range = NEXT_RANGE.fetch_add(1, Ordering::SeqCst);
        let min = 50_000 + (std::process::id() as u16 % 10) * 1_000 + (range % 5) * 200;
        let dir = std::env::temp_dir().join(format!("ferry-coturn-{}-{port}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        let child = Command::new("turnserver")
            .args(["-n", "--listening-ip=127.0.0.1", "--relay-ip=127.0.0.1"])
            .arg(format!("--listening-port={port}"))
            .arg(format!("--min-port={min}"))
            .arg(format!("--max-port={}", min + 199))
            .args(["--use-auth-secret", "--realm=ferry"])
            .args(
                secret
                    .split(',')
                    .map(|s| format!("--static-auth-secret={s}")),
            )
            .args([
                "--no-tls",
                "--no-dtls",
                "--no-cli",
                "--allow-loopback-peers",
            ])
            .args(["--simple-log", "--no-stdout-log"])
            .arg(format!("--log-file={}", dir.join("turn.log").display()))
            .arg(format!("--pidfile={}", dir.join("turn.pid").display()))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting turnserver (Debian: apt-get install coturn; ./scripts/test does)")?;
        let c = Coturn {
            child,
            dir,
            port,
            min_port: min,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            // A request sent before the listener is up is never answered: one try per second.
            let ok = Command::new("timeout")
                .args([
                    "1",
                    "turnutils_stunclient",
                    "-p",
                    &port.to_string(),
                    "127.0.0.1",
                ])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if ok {
                return Ok(c);
            }
            if Instant::now() > deadline {
                bail!("coturn on port {port} does not answer STUN");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// `n` relays sharing `secret`.
    pub fn start_fleet(secret: &str, n: usize) -> Result<Vec<Coturn>> {
        (0..n).map(|_| Coturn::start(secret)).collect()
    }

    /// Whether `port` is one of this relay's relay ports (a relayed candidate on it).
    pub fn relays_on(&self, port: u16) -> bool {
        (self.min_port..=self.min_port + 199).contains(&port)
    }

    /// Its allocations now: the UDP sockets the process holds on its relay ports (coturn opens
    /// one per UDP allocation and closes it when the allocation ends).
    pub fn allocations(&self) -> Result<usize> {
        let pid = self.child.id();
        let mut inodes = std::collections::HashSet::new();
        for fd in std::fs::read_dir(format!("/proc/{pid}/fd"))? {
            let Ok(target) = std::fs::read_link(fd?.path()) else {
                continue;
            };
            if let Some(inode) = target
                .to_str()
                .and_then(|t| t.strip_prefix("socket:["))
                .and_then(|t| t.strip_suffix(']'))
            {
                inodes.insert(inode.to_owned());
            }
        }
        let mut n = 0;
        for table in ["/proc/net/udp", "/proc/net/udp6"] {
            let text = std::fs::read_to_string(table).unwrap_or_default();
            for line in text.lines().skip(1) {
                let cols: Vec<&str> = line.split_whitespace().collect();
                let (Some(local), Some(inode)) = (cols.get(1), cols.get(9)) else {
                    continue;
                };
                let port = local
                    .rsplit_once(':')
                    .and_then(|(_, p)| u16::from_str_radix(p, 16).ok());
                if port.is_some_and(|p| self.relays_on(p)) && inodes.contains(*inode) {
                    n += 1;
                }
            }
        }
        Ok(n)
    }

    /// `turn:127.0.0.1:PORT?transport=udp`.
    pub fn uri(&self) -> String {
        format!("turn:127.0.0.1:{}?transport=udp", self.port)
    }

    /// Allocates through this relay with `username` / `password` and sends a few packets to
    /// itself through it (`turnutils_uclient -y`): whether coturn accepted the credential.
    pub fn allocate(&self, username: &str, password: &str) -> Result<bool> {
        let out = Command::new("timeout")
            .args([
                "20",
                "turnutils_uclient",
                "-y",
                "-n",
                "1",
                "-m",
                "1",
                "-l",
                "100",
            ])
            .args(["-p", &self.port.to_string(), "-u", username, "-w", password])
            .arg("127.0.0.1")
            .output()
            .context("running turnutils_uclient")?;
        let text = String::from_utf8_lossy(&out.stdout);
        Ok(out.status.success() && text.contains("Total lost packets 0"))
    }
}
