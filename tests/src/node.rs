//! A real `ferry` process for end-to-end tests, and a minimal HTTP/1.1
//! client to talk to it (status, headers and body, nothing hidden).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail};

/// Environment variable naming the `ferry` binary (default: next to the test binary).
pub const FERRY_BIN_ENV: &str = "FERRY_BIN";

/// The `ferry` binary built in the same target dir as the running test.
pub fn ferry_bin() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os(FERRY_BIN_ENV) {
        return Ok(PathBuf::from(p));
    }
    // target/<profile>/deps/<test> → target/<profile>/ferry
    let exe = std::env::current_exe().context("current_exe")?;
    let bin = exe
        .parent()
        .and_then(|d| d.parent())
        .map(|d| d.join("ferry"))
        .context("locating the ferry binary")?;
    if !bin.exists() {
        bail!(
            "{} not found: build it first (cargo build --release -p ferry) or set {FERRY_BIN_ENV}",
            bin.display()
        );
    }
    Ok(bin)
}

/// A running `ferry` process, killed on drop. Its first stdout line is kept
/// (the commands print their addresses there); the rest is forwarded to stderr.
#[derive(Debug)]
pub struct FerryProcess {
    child: Child,
    words: Vec<String>,
    warnings: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

/// Most WARN/ERROR lines a [`FerryProcess`] keeps.
const MAX_WARNINGS: usize = 1_000;

/// A log line without its terminal colours (`ESC [ … letter`).
fn without_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            for d in chars.by_ref() {
                if d.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

impl FerryProcess {
    /// Starts `ferry` with `args` and waits for its first line.
    pub fn spawn(args: &[&str]) -> Result<FerryProcess> {
        FerryProcess::spawn_env(args, &[])
    }

    /// [`FerryProcess::spawn`] with `env` added to its environment.
    pub fn spawn_env(args: &[&str], env: &[(&str, &str)]) -> Result<FerryProcess> {
        let mut child = Command::new(ferry_bin()?)
            .args(args)
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("spawning ferry {args:?}"))?;
        let stdout = child.stdout.take().context("ferry stdout")?;
        let mut line = String::new();
        let mut reader = BufReader::new(stdout);
        reader
            .read_line(&mut line)
            .context("reading ferry's first line")?;
        // Keep draining its stdout (logs) so it never writes into a closed pipe; its warnings
        // and errors are kept for [`FerryProcess::warnings`].
        let warnings = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let kept = warnings.clone();
        std::thread::spawn(move || {
            let mut sink = String::new();
            while reader.read_line(&mut sink).is_ok_and(|n| n > 0) {
                eprint!("[ferry] {sink}");
                let plain = without_ansi(&sink);
                if (plain.contains(" WARN ") || plain.contains(" ERROR "))
                    && let Ok(mut w) = kept.lock()
                    && w.len() < MAX_WARNINGS
                {
                    w.push(plain.trim_end().to_owned());
                }
                sink.clear();
            }
        });
        Ok(FerryProcess {
            child,
            words: line.split_whitespace().map(str::to_owned).collect(),
            warnings,
        })
    }

    /// The WARN and ERROR lines it logged so far (the first [`MAX_WARNINGS`]).
    pub fn warnings(&self) -> Vec<String> {
        self.warnings.lock().map(|w| w.clone()).unwrap_or_default()
    }

    /// The word after `key` on the first line.
    pub fn after(&self, key: &str) -> Result<String> {
        self.words
            .windows(2)
            .find(|w| w[0] == key)
            .map(|w| w[1].clone())
            .with_context(|| format!("no {key:?} in {:?}", self.words.join(" ")))
    }
}

impl FerryProcess {
    /// SIGKILL: the process dies at once, as in a crash.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGSTOP: the process stops where it stands (to its peers, a hung or
    /// dead process) until [`FerryProcess::resume`].
    pub fn pause(&self) -> Result<()> {
        self.signal(rustix::process::Signal::STOP)
    }

    /// SIGCONT after [`FerryProcess::pause`].
    pub fn resume(&self) -> Result<()> {
        self.signal(rustix::process::Signal::CONT)
    }

    fn signal(&self, signal: rustix::process::Signal) -> Result<()> {
        let pid = rustix::process::Pid::from_child(&self.child);
        rustix::process::kill_process(pid, signal).context("signalling the ferry process")?;
        Ok(())
    }
}

impl Drop for FerryProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The API token [`FerryNode::spawn`] gives a node (unless `extra` names one): also its
/// WHIP/WHEP credential for every stream.
pub const NODE_TOKEN: &str = "ferry-test-node-token";

/// A running `ferry node`, killed on drop.
#[derive(Debug)]
pub struct FerryNode {
    _process: FerryProcess,
    /// `http://127.0.0.1:PORT` of its WHIP/WHEP API.
    pub http: String,
    /// Its media UDP address.
    pub udp: SocketAddr,
    /// Its API token (`--token`), which WHIP/WHEP accept for every stream.
    pub token: String,
}

impl FerryNode {
    /// Starts `ferry node` on ephemeral ports with `extra` arguments (and `--token`
    /// [`NODE_TOKEN`] unless they give one) and waits for it to print its addresses.
    pub fn spawn(extra: &[&str]) -> Result<FerryNode> {
        FerryNode::spawn_at("127.0.0.1", extra)
    }

    /// [`FerryNode::spawn`] with its HTTP and media sockets on address `ip` (a network
    /// namespace's host end, which peers in the namespace and on the host both reach).
    pub fn spawn_at(ip: &str, extra: &[&str]) -> Result<FerryNode> {
        let (http, udp) = (format!("{ip}:0"), format!("{ip}:0"));
        let mut args = vec!["node", "--http", http.as_str(), "--udp", udp.as_str()];
        let token = match extra.iter().position(|a| *a == "--token") {
            Some(i) => extra
                .get(i + 1)
                .context("--token without a value")?
                .to_string(),
            None => {
                args.extend(["--token", NODE_TOKEN]);
                NODE_TOKEN.to_owned()
            }
        };
        args.extend_from_slice(extra);
        let process = FerryProcess::spawn(&args)?;
        // "node node-a http http://127.0.0.1:PORT media udp 127.0.0.1:PORT (candidate ...)"
        let http = process.after("http")?;
        let udp = process.after("udp")?.parse().context("udp address")?;
        Ok(FerryNode {
            _process: process,
            http,
            udp,
            token,
        })
    }

    /// `Bearer {token}`: the `Authorization` value of a WHIP/WHEP POST.
    pub fn bearer(&self) -> String {
        format!("Bearer {}", self.token)
    }

    /// Sends `data` to the node's media port from a fresh socket.
    pub fn send_udp(&self, data: &[u8]) -> Result<()> {
        let s = UdpSocket::bind("127.0.0.1:0")?;
        s.send_to(data, self.udp)?;
        Ok(())
    }

    /// The value of counter `ferry_node_{name}_total`.
    pub fn metric(&self, name: &str) -> Result<u64> {
        let r = http(&format!("{}/metrics", self.http), "GET", &[], b"")?;
        let key = format!("ferry_node_{name}_total ");
        r.body
            .lines()
            .find_map(|l| l.strip_prefix(&key))
            .and_then(|v| v.trim().parse().ok())
            .context(format!("metric {name} not found"))
    }
}

/// An HTTP response.
#[derive(Debug, Clone)]
pub struct Response {
    /// Status code.
    pub status: u16,
    /// Header (lower-cased name, value) pairs in order.
    pub headers: Vec<(String, String)>,
    /// Body as text.
    pub body: String,
}

impl Response {
    /// First header value by (case-insensitive) name.
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
    }

    /// Every value of a header.
    pub fn all(&self, name: &str) -> Vec<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .filter(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
            .collect()
    }
}

/// One HTTP/1.1 request to `url` (`http://host:port/path`), `Connection: close`.
pub fn http(url: &str, method: &str, headers: &[(&str, &str)], body: &[u8]) -> Result<Response> {
    let rest = url.strip_prefix("http://").context("only http:// URLs")?;
    let (host, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let mut s = TcpStream::connect(host).with_context(|| format!("connecting {host}"))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes())?;
    s.write_all(body)?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").context("no header end")?;
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .context("status line")?;
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    Ok(Response {
        status,
        headers,
        body: body.to_owned(),
    })
}

/// `{method} {base}{path}` with the bearer `token` and a JSON body (none for `null`): the
/// status and the JSON answer (the body as a JSON string when it is not JSON).
pub fn api_call(
    base: &str,
    token: &str,
    method: &str,
    path: &str,
    body: &serde_json::Value,
) -> Result<(u16, serde_json::Value)> {
    let auth = format!("Bearer {token}");
    let body = if body.is_null() {
        Vec::new()
    } else {
        body.to_string().into_bytes()
    };
    let r = http(
        &format!("{base}{path}"),
        method,
        &[
            ("Authorization", auth.as_str()),
            ("Content-Type", "application/json"),
        ],
        &body,
    )?;
    let v = serde_json::from_str(&r.body).unwrap_or(serde_json::Value::String(r.body.clone()));
    Ok((r.status, v))
}

/// Counters of the places a datagram can be lost on its way to a client: each named base URL's
/// `/metrics` counters that drop, fence, refuse or fail to send (node, edge, gateway), and the
/// kernel's UDP receive-buffer, send-buffer and error counts (`/proc/net/snmp`, the whole
/// machine). A test that sees a client lose packets prints what moved ([`LossCounters::since`]),
/// which tells a dropping Ferry from a starved receiver.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LossCounters(std::collections::BTreeMap<String, u64>);

/// The words of a counter name that counts a loss.
const LOSS_WORDS: [&str; 6] = [
    "dropped",
    "fenced",
    "refused",
    "send_errors",
    "unroutable",
    "shed",
];

impl LossCounters {
    /// Reads them now from `bases` (`(name, base URL)`; an unreachable one is left out, as a
    /// killed node is).
    pub fn read(bases: &[(&str, &str)]) -> LossCounters {
        let mut m = std::collections::BTreeMap::new();
        for (name, base) in bases {
            let Ok(r) = http(&format!("{base}/metrics"), "GET", &[], b"") else {
                continue;
            };
            for line in r.body.lines().filter(|l| !l.starts_with('#')) {
                let Some((key, value)) = line.rsplit_once(' ') else {
                    continue;
                };
                if LOSS_WORDS.iter().any(|w| key.contains(w))
                    && let Ok(v) = value.trim().parse::<f64>()
                {
                    m.insert(format!("{name} {key}"), v as u64);
                }
            }
        }
        if let Ok(snmp) = std::fs::read_to_string("/proc/net/snmp") {
            let udp: Vec<&str> = snmp.lines().filter(|l| l.starts_with("Udp:")).collect();
            if let [names, values] = udp[..] {
                for (k, v) in names
                    .split_whitespace()
                    .zip(values.split_whitespace())
                    .skip(1)
                {
                    if k.contains("Errors")
                        && let Ok(v) = v.parse()
                    {
                        m.insert(format!("kernel udp {k}"), v);
                    }
                }
            }
        }
        LossCounters(m)
    }

    /// The counters that grew since `before`, one `name +n` per line (`none grew` if none).
    pub fn since(&self, before: &LossCounters) -> String {
        let grew: Vec<String> = self
            .0
            .iter()
            .filter_map(|(k, v)| {
                let d = v.saturating_sub(before.0.get(k).copied().unwrap_or(0));
                (d > 0).then(|| format!("{k} +{d}"))
            })
            .collect();
        if grew.is_empty() {
            "none grew".into()
        } else {
            grew.join("\n")
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn log_lines_lose_their_colours() {
        let line =
            "\x1b[2m2026-12-06T02:09:21Z\x1b[0m \x1b[33m WARN\x1b[0m \x1b[1mrequest\x1b[0m: x";
        assert_eq!(
            super::without_ansi(line),
            "2026-12-06T02:09:21Z  WARN request: x"
        );
    }
}
