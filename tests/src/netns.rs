//! A network namespace joined to this host by a veth pair, for peers that will not use
//! loopback: libnice (GStreamer's webrtcbin) and aiortc gather no candidates on `lo`. The host
//! end has `host_ip`, the namespace end `peer_ip` (a /24 of their own); both go when the
//! value is dropped. Needs root (CAP_NET_ADMIN), as CI and the dev machine have.

use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

use anyhow::{Context, Result, ensure};

/// One namespace and its veth pair.
#[derive(Debug)]
pub struct Netns {
    name: String,
    host_if: String,
    /// The host's address on the link (what the peers reach Ferry at).
    pub host_ip: String,
    /// The namespace's address.
    pub peer_ip: String,
}

fn ip(args: &[&str]) -> Result<()> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .context("running `ip` (iproute2)")?;
    ensure!(
        out.status.success(),
        "ip {}: {} (network namespaces need root: CAP_NET_ADMIN)",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(())
}

impl Netns {
    /// Makes a namespace with its link up.
    pub fn create() -> Result<Netns> {
        static N: AtomicU32 = AtomicU32::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        // A subnet per process and namespace: 10.(200 + pid % 50).(n % 250).0/24.
        let (b, c) = (200 + pid % 50, n % 250);
        let tag = format!("{:x}{n}", pid % 0xffff);
        let ns = Netns {
            name: format!("ferry-{tag}"),
            host_if: format!("fh{tag}"),
            host_ip: format!("10.{b}.{c}.1"),
            peer_ip: format!("10.{b}.{c}.2"),
        };
        let peer_if = format!("fp{tag}");
        ip(&["netns", "add", &ns.name])?;
        ip(&[
            "link",
            "add",
            &ns.host_if,
            "type",
            "veth",
            "peer",
            "name",
            &peer_if,
            "netns",
            &ns.name,
        ])?;
        ip(&[
            "addr",
            "add",
            &format!("{}/24", ns.host_ip),
            "dev",
            &ns.host_if,
        ])?;
        ip(&["link", "set", &ns.host_if, "up"])?;
        let inside = |args: &[&str]| {
            let mut all = vec!["netns", "exec", ns.name.as_str(), "ip"];
            all.extend_from_slice(args);
            ip(&all)
        };
        inside(&[
            "addr",
            "add",
            &format!("{}/24", ns.peer_ip),
            "dev",
            &peer_if,
        ])?;
        inside(&["link", "set", &peer_if, "up"])?;
        inside(&["link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// Shapes what the host sends into the namespace to `kbit` kbit/s with a token bucket
    /// (`tc … tbf`; the kernel here has no netem): a viewer on a slow link. `latency_ms` bounds
    /// the queue (what waits longer is dropped, as a real bottleneck's buffer does).
    pub fn limit_to_peer(&self, kbit: u64, latency_ms: u64) -> Result<()> {
        // A burst of a few full packets at least: tbf refuses one smaller than the MTU.
        let burst = (kbit * 1000 / 8 / 50).max(4_000);
        let out = Command::new("tc")
            .args([
                "qdisc",
                "replace",
                "dev",
                &self.host_if,
                "root",
                "tbf",
                "rate",
                &format!("{kbit}kbit"),
                "burst",
                &burst.to_string(),
                "latency",
                &format!("{latency_ms}ms"),
            ])
            .output()
            .context("running `tc` (iproute2)")?;
        ensure!(
            out.status.success(),
            "tc qdisc replace dev {} root tbf: {}",
            self.host_if,
            String::from_utf8_lossy(&out.stderr).trim()
        );
        Ok(())
    }

    /// Lifts [`Netns::limit_to_peer`].
    pub fn unlimit(&self) -> Result<()> {
        let out = Command::new("tc")
            .args(["qdisc", "del", "dev", &self.host_if, "root"])
            .output()
            .context("running `tc` (iproute2)")?;
        ensure!(
            out.status.success(),
            "tc qdisc del dev {} root: {}",
            self.host_if,
            String::from_utf8_lossy(&out.stderr).trim()
        );
        Ok(())
    }

    /// The namespace's name (`ip netns exec NAME …`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `program` run inside the namespace.
    pub fn command(&self, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name, program]);
        c
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        // Deleting the namespace deletes its end of the pair, and so the pair.
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .output();
        let _ = Command::new("ip")
            .args(["link", "del", &self.host_if])
            .output();
    }
}
