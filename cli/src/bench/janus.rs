//! `ferry bench janus`: the fan-out of `ferry bench forward` through Janus 1.1 (the Debian
//! `janus` package, 1.1.2 on bookworm) as a named baseline.
//!
//! Janus runs in a network namespace of its own, joined to the host by a veth pair
//! ([`HOST_IP`] here, [`JANUS_IP`] there): libnice gathers no candidates on `lo`. Its streaming
//! plugin has one RTP mountpoint (Opus pt 111, VP8 pt 96) fed with plain RTP from the host by an
//! [`RtpSource`], the synthetic publisher's own frames, sizes and pacing without SRTP. The N
//! viewers are the synthetic peers of `forward`, signalled over Janus's HTTP API: Janus 1.1
//! always offers to a streaming viewer (the viewer-offer flow WHEP uses came later), so each
//! viewer answers with [`Peer::accept_offer`]. Janus is a full ICE agent in the controlling
//! role; the viewer checks as the controlled one and answers its checks.
//!
//! Everything made for a run (namespace, veth, the Janus process, its config directory) is
//! removed by [`JanusEnv`]'s `Drop`, on errors and on Ctrl-C too.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use ferry_sfu::codec::Codec;
use ferry_sfu::peer::{LatencyStats, Peer, PeerConfig, PeerRole, PeerStats, RtpSource};
use serde::Serialize;
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};

use super::fanout::{PeerHandle, Side, all_stats, drive_peer, side};
use super::process::{Clocks, clock_ticks, cpu_seconds, wait_for};

/// The host's end of the veth pair: the RTP source and every viewer socket.
const HOST_IP: Ipv4Addr = Ipv4Addr::new(10, 203, 0, 1);
/// Janus's end, in the namespace.
const JANUS_IP: Ipv4Addr = Ipv4Addr::new(10, 203, 0, 2);
/// Janus's HTTP API port (in the namespace, so nothing else holds it).
const HTTP_PORT: u16 = 8088;
/// The mountpoint's RTP ports.
const AUDIO_PORT: u16 = 5002;
const VIDEO_PORT: u16 = 5004;
/// The mountpoint's id.
const MOUNTPOINT: u64 = 1;
/// The one plugin and the one transport that stay enabled.
const PLUGIN: &str = "libjanus_streaming.so";
const TRANSPORT: &str = "libjanus_http.so";

/// Options of `ferry bench janus`.
#[derive(clap::Args, Debug)]
pub struct JanusArgs {
    /// Subscriber counts to measure.
    #[arg(long, value_delimiter = ',', default_value = "1,10,100")]
    subscribers: Vec<usize>,
    /// Measured seconds per run (after warm-up).
    #[arg(long, default_value_t = 5.0)]
    duration: f64,
    /// Publisher video bitrate in bit/s.
    #[arg(long, default_value_t = 4_000_000)]
    bitrate: u32,
    /// Pin Janus (every thread) to this CPU and this benchmark (RTP source, viewers) to the
    /// others, as `forward` pins the node to CPU 0 (`--pin-cpu 0` compares with it).
    #[arg(long)]
    pin_cpu: Option<usize>,
    /// Where the JSON goes.
    #[arg(long, default_value = "target/bench/janus.json")]
    out: PathBuf,
}

#[derive(Debug, Serialize)]
struct Row {
    subscribers: usize,
    duration_s: f64,
    publisher_bitrate_bps: u32,
    /// RTP packets per second the source sent to the mountpoint.
    publisher_pps: f64,
    /// Mean RTP payload bytes of those packets.
    packet_bytes: f64,
    pin_cpu: Option<usize>,
    janus: Side,
}

/// `ferry bench janus`.
pub(crate) async fn janus(args: JanusArgs) -> Result<()> {
    // Asked for by name, a missing Janus is an error; `forward` skips its column instead.
    let Some(version) = janus_version()? else {
        bail!("janus is not installed (apt-get install janus)");
    };
    println!("{version}; {} bit/s of VP8 + Opus", args.bitrate);
    if let Some(cpu) = args.pin_cpu {
        let cpus = std::thread::available_parallelism().map_or(1, usize::from);
        let others: Vec<usize> = (0..cpus).filter(|&c| c != cpu).collect();
        ensure!(!others.is_empty(), "--pin-cpu needs at least 2 CPUs");
        super::process::pin_process(std::process::id(), &others)?;
    }
    println!(
        "{:>5} | {:>10} {:>6} {:>10} | {:>8} {:>8} {:>8} | {:>7}",
        "subs", "janus pps", "cores", "pps/core", "p50 µs", "p99 µs", "max µs", "missing"
    );
    let mut rows = Vec::new();
    for &n in &args.subscribers {
        let run = interruptible(measure(n, args.bitrate, args.duration, args.pin_cpu))
            .await
            .with_context(|| format!("janus run, {n} subscribers"))?;
        let s = &run.side;
        println!(
            "{:>5} | {:>10.0} {:>6.2} {:>10.0} | {:>8} {:>8} {:>8} | {:>7}",
            n,
            s.out_pps,
            s.cpu_cores,
            s.pps_per_core,
            s.latency_p50_us.unwrap_or(0),
            s.latency_p99_us.unwrap_or(0),
            s.latency_max_us.unwrap_or(0),
            s.missing
        );
        rows.push(Row {
            subscribers: n,
            duration_s: args.duration,
            publisher_bitrate_bps: args.bitrate,
            publisher_pps: run.publisher_pps,
            packet_bytes: run.packet_bytes,
            pin_cpu: args.pin_cpu,
            janus: run.side,
        });
    }
    if let Some(dir) = args.out.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&args.out, serde_json::to_string_pretty(&rows)?)?;
    println!("wrote {}", args.out.display());
    Ok(())
}

const SKIPPED: &str = "Janus baseline skipped: janus is not installed (apt-get install janus)";

/// One publisher fanned out to `n` viewers through Janus, measured as `forward` measures Ferry:
/// `None` (after saying so) when the `janus` binary is missing. `pin_cpu` pins Janus only; the
/// caller pins itself elsewhere, as `forward` does.
pub(crate) async fn measure_janus(
    n: usize,
    bitrate: u32,
    duration: f64,
    pin_cpu: Option<usize>,
) -> Result<Option<Side>> {
    if janus_version()?.is_none() {
        println!("{SKIPPED}");
        return Ok(None);
    }
    let run = interruptible(measure(n, bitrate, duration, pin_cpu)).await?;
    Ok(Some(run.side))
}

/// Runs `f` unless Ctrl-C comes first; either way its guards are dropped before we return, so
/// the namespace and the Janus process go too.
async fn interruptible<T>(f: impl std::future::Future<Output = Result<T>>) -> Result<T> {
    tokio::select! {
        r = f => r,
        _ = tokio::signal::ctrl_c() => bail!("interrupted"),
    }
}

/// `janus --version`'s first line, `None` when there is no `janus` on `PATH`.
fn janus_version() -> Result<Option<String>> {
    let found = std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join("janus").is_file()));
    if !found {
        return Ok(None);
    }
    let out = Command::new("janus")
        .arg("--version")
        .output()
        .context("running janus --version")?;
    let text = String::from_utf8_lossy(&out.stdout);
    Ok(Some(
        text.lines()
            .find(|l| l.contains("Janus"))
            .unwrap_or("janus")
            .trim()
            .to_owned(),
    ))
}

struct JanusRun {
    side: Side,
    publisher_pps: f64,
    packet_bytes: f64,
}

async fn measure(
    n: usize,
    bitrate: u32,
    duration: f64,
    pin_cpu: Option<usize>,
) -> Result<JanusRun> {
    let ticks = clock_ticks();
    let env = tokio::task::spawn_blocking(JanusEnv::start).await??;
    let pid = env.pid;
    if let Some(cpu) = pin_cpu {
        super::process::pin_process(pid, &[cpu])?;
    }
    let api = env.api();
    let envr = &env;
    wait_for(Duration::from_secs(20), || {
        let api = api.clone();
        async move {
            envr.check_alive()?;
            Ok(http_json(format!("{api}/info"), None).await.is_ok())
        }
    })
    .await
    .with_context(|| format!("Janus's HTTP API did not come up{}", env.log_tail()))?;

    let clocks = Clocks::now();
    let (stop_tx, stop_rx) = oneshot::channel();
    let (stats_tx, stats_rx) = mpsc::channel(1);
    let source = tokio::spawn(feed(bitrate, clocks.clone(), stop_rx, stats_rx));

    let mut viewers = Vec::new();
    for i in 0..n {
        let v = start_viewer(&api, 100 + i as u64, bitrate, &clocks)
            .await
            .with_context(|| format!("viewer {i}{}", env.log_tail()))?;
        viewers.push(v);
    }
    wait_for(Duration::from_secs(60), || async {
        env.check_alive()?;
        super::fanout::all_playing(&viewers).await
    })
    .await
    .with_context(|| format!("viewers did not all start playing{}", env.log_tail()))?;
    // Threads Janus made for the viewers inherit the affinity of their creators; pin again
    // anyway so none escapes.
    if let Some(cpu) = pin_cpu {
        super::process::pin_process(pid, &[cpu])?;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;

    let received = |stats: &[PeerStats]| -> u64 {
        stats
            .iter()
            .flat_map(|s| s.received.iter().map(|r| r.packets))
            .sum()
    };
    let s0 = all_stats(&viewers).await?;
    let p0 = source_stats(&stats_tx).await?;
    let cpu0 = cpu_seconds(pid, ticks)?;
    let t0 = Instant::now();
    tokio::time::sleep(Duration::from_secs_f64(duration)).await;
    let s1 = all_stats(&viewers).await?;
    let p1 = source_stats(&stats_tx).await?;
    let cpu1 = cpu_seconds(pid, ticks)?;
    let dur = t0.elapsed().as_secs_f64();
    let _ = stop_tx.send(());
    source.await??;

    let mut lat = LatencyStats::default();
    let mut missing = 0;
    for s in &s1 {
        for r in s.video() {
            lat.merge(&r.latency);
            missing += r.received.missing();
        }
    }
    let pkts = p1.0.saturating_sub(p0.0);
    drop(viewers);
    drop(env);
    Ok(JanusRun {
        side: side(
            received(&s1).saturating_sub(received(&s0)),
            dur,
            cpu1 - cpu0,
            &lat,
            missing,
        ),
        publisher_pps: pkts as f64 / dur,
        packet_bytes: p1.1.saturating_sub(p0.1) as f64 / pkts.max(1) as f64,
    })
}

type StatsQuery = oneshot::Sender<(u64, u64)>;

/// (packets, payload bytes) the source sent so far.
async fn source_stats(tx: &mpsc::Sender<StatsQuery>) -> Result<(u64, u64)> {
    let (reply, rx) = oneshot::channel();
    tx.send(reply).await.ok().context("RTP source gone")?;
    rx.await.context("RTP source gone")
}

/// Sends the synthetic publisher's media (the `forward` publisher's seed, rate and sizes) as
/// plain RTP to the mountpoint until `stop`.
async fn feed(
    bitrate: u32,
    clocks: Clocks,
    mut stop: oneshot::Receiver<()>,
    mut stats: mpsc::Receiver<StatsQuery>,
) -> Result<()> {
    let socket = ferry_sfu::udp::bind(SocketAddr::from((HOST_IP, 0)))?;
    let now = Instant::now();
    let role = PeerRole::Publisher {
        video: Codec::Vp8,
        audio: true,
    };
    let mut cfg = PeerConfig::new(role, 1, socket.local_addr()?, now);
    cfg.wall = clocks.wall;
    cfg.latency_epoch = clocks.epoch;
    cfg.video_bitrate_bps = bitrate;
    let mut src = RtpSource::new(&cfg, now);
    let video = SocketAddr::from((JANUS_IP, VIDEO_PORT));
    let audio = SocketAddr::from((JANUS_IP, AUDIO_PORT));
    loop {
        let next = src.poll_timeout().context("the source has no media")?;
        tokio::select! {
            () = tokio::time::sleep_until(next.into()) => {
                src.handle_timeout(Instant::now());
                while let Some(p) = src.poll_packet() {
                    // Before Janus binds the ports, datagrams are lost, not errors.
                    let _ = socket.send_to(&p.data, if p.video { video } else { audio }).await;
                }
            }
            q = stats.recv() => match q {
                Some(reply) => {
                    let s = src.stats();
                    let _ = reply.send((
                        s.iter().map(|x| x.packets).sum(),
                        s.iter().map(|x| x.bytes).sum(),
                    ));
                }
                None => return Ok(()),
            },
            _ = &mut stop => return Ok(()),
        }
    }
}

/// A viewer on its own socket at [`HOST_IP`], watching the mountpoint.
async fn start_viewer(api: &str, seed: u64, bitrate: u32, clocks: &Clocks) -> Result<PeerHandle> {
    let socket = ferry_sfu::udp::bind(SocketAddr::from((HOST_IP, 0)))?;
    let local = socket.local_addr()?;
    let now = Instant::now();
    let mut cfg = PeerConfig::new(PeerRole::Viewer, seed, local, now);
    cfg.wall = clocks.wall;
    cfg.latency_epoch = clocks.epoch;
    cfg.video_bitrate_bps = bitrate;
    let mut secret = [0x22u8; 32];
    secret[..8].copy_from_slice(&seed.to_le_bytes());
    let cert = ferry_sfu::cert::generate(secret)?;
    let mut peer = Peer::new(cfg, Arc::new(cert), now);

    let session = janus_id(&http_json(api.to_owned(), Some(request("create", json!({})))).await?)?;
    let session_url = format!("{api}/{session}");
    let attach = request("attach", json!({ "plugin": "janus.plugin.streaming" }));
    let handle = janus_id(&http_json(session_url.clone(), Some(attach)).await?)?;
    let handle_url = format!("{session_url}/{handle}");
    let watch = request(
        "message",
        json!({ "body": { "request": "watch", "id": MOUNTPOINT } }),
    );
    expect_ack(&http_json(handle_url.clone(), Some(watch)).await?)?;
    let offer = next_offer(&session_url).await?;
    let answer = peer
        .accept_offer(Instant::now(), &offer)
        .context("answering Janus's offer")?;
    let start = request(
        "message",
        json!({
            "body": { "request": "start" },
            "jsep": { "type": "answer", "sdp": answer },
        }),
    );
    expect_ack(&http_json(handle_url, Some(start)).await?)?;
    let (tx, rx) = mpsc::channel(4);
    tokio::spawn(drive_peer(peer, socket, rx));
    Ok(PeerHandle { tx })
}

/// A Janus API request with a fresh transaction id.
fn request(janus: &str, mut extra: Value) -> Value {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let tx = NEXT.fetch_add(1, Ordering::Relaxed);
    if let Value::Object(m) = &mut extra {
        m.insert("janus".into(), janus.into());
        m.insert("transaction".into(), format!("ferry{tx}").into());
    }
    extra
}

/// `data.id` of a `success` reply (a session or a handle).
fn janus_id(reply: &Value) -> Result<u64> {
    ensure!(reply["janus"] == "success", "Janus said {reply}");
    reply["data"]["id"].as_u64().context("no data.id")
}

fn expect_ack(reply: &Value) -> Result<()> {
    ensure!(reply["janus"] == "ack", "Janus said {reply}");
    Ok(())
}

/// Long-polls the session's events until the plugin's offer arrives.
async fn next_offer(session_url: &str) -> Result<String> {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        let events = http_json(format!("{session_url}?maxev=10"), None).await?;
        let events = match events {
            Value::Array(v) => v,
            one => vec![one],
        };
        for e in events {
            if let Some(err) = e["plugindata"]["data"].get("error") {
                bail!("watch failed: {err}");
            }
            if e["jsep"]["type"] == "offer"
                && let Some(sdp) = e["jsep"]["sdp"].as_str()
            {
                return Ok(sdp.to_owned());
            }
        }
    }
    bail!("no offer from Janus within 20 s")
}

/// GET (`body` None) or POST a JSON request; the reply parsed.
async fn http_json(url: String, body: Option<Value>) -> Result<Value> {
    tokio::task::spawn_blocking(move || -> Result<Value> {
        let mut resp = match body {
            Some(b) => ureq::post(&url)
                .header("Content-Type", "application/json")
                .send(b.to_string().as_bytes()),
            None => ureq::get(&url).call(),
        }
        .with_context(|| format!("Janus API {url}"))?;
        let text = resp.body_mut().read_to_string()?;
        serde_json::from_str(&text).with_context(|| format!("Janus API {url}: {text}"))
    })
    .await?
}

/// The namespace, its veth pair, Janus's config directory and the Janus process; all removed
/// on drop.
struct JanusEnv {
    netns: String,
    host_if: String,
    dir: PathBuf,
    child: Option<Child>,
    /// The Janus process (`ip netns exec` execs it: our child itself).
    pid: u32,
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

impl JanusEnv {
    /// Makes the namespace, writes the config and starts Janus in it.
    fn start() -> Result<JanusEnv> {
        let pid = std::process::id();
        let used = Command::new("ip")
            .args(["-4", "-o", "addr", "show", "to", &format!("{HOST_IP}/24")])
            .output()
            .context("running `ip` (iproute2)")?;
        ensure!(
            used.stdout.is_empty(),
            "{HOST_IP}/24 is already on this host (another `ferry bench janus`, or a leftover \
             namespace: `ip netns list`): {}",
            String::from_utf8_lossy(&used.stdout).trim()
        );
        let mut env = JanusEnv {
            netns: format!("ferry-bench-janus-{pid}"),
            host_if: format!("fbjh{pid}"),
            dir: std::env::temp_dir().join(format!("ferry-bench-janus-{pid}")),
            child: None,
            pid: 0,
        };
        let peer_if = format!("fbjn{pid}");
        ip(&["netns", "add", &env.netns])?;
        ip(&[
            "link",
            "add",
            &env.host_if,
            "type",
            "veth",
            "peer",
            "name",
            &peer_if,
            "netns",
            &env.netns,
        ])?;
        ip(&["addr", "add", &format!("{HOST_IP}/24"), "dev", &env.host_if])?;
        ip(&["link", "set", &env.host_if, "up"])?;
        let inside = |args: &[&str]| {
            let mut all = vec!["netns", "exec", env.netns.as_str(), "ip"];
            all.extend_from_slice(args);
            ip(&all)
        };
        inside(&["addr", "add", &format!("{JANUS_IP}/24"), "dev", &peer_if])?;
        inside(&["link", "set", &peer_if, "up"])?;
        inside(&["link", "set", "lo", "up"])?;

        let _ = std::fs::remove_dir_all(&env.dir);
        std::fs::create_dir_all(&env.dir)?;
        write_config(&env.dir, &peer_if)?;
        let log = std::fs::File::create(env.dir.join("janus.log"))?;
        let child = Command::new("ip")
            .args(["netns", "exec", &env.netns, "janus", "-F"])
            .arg(&env.dir)
            .arg("-C")
            .arg(env.dir.join("janus.jcfg"))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("starting janus")?;
        env.pid = child.id();
        env.child = Some(child);
        env.wait_exec()?;
        Ok(env)
    }

    fn api(&self) -> String {
        format!("http://{JANUS_IP}:{HTTP_PORT}/janus")
    }

    /// Waits until `ip netns exec` has exec'd Janus, so `pid` is the process to measure.
    fn wait_exec(&self) -> Result<()> {
        let pid = self.pid;
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            if comm.trim() == "janus" {
                return Ok(());
            }
            self.check_alive()?;
            ensure!(
                Instant::now() < deadline,
                "process {pid} is {comm:?}, not janus"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn check_alive(&self) -> Result<()> {
        // `try_wait` needs `&mut`; the exit shows as a zombie or a missing entry instead.
        let pid = self.pid;
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let state = stat
            .rsplit_once(')')
            .and_then(|(_, r)| r.split_whitespace().next());
        ensure!(
            matches!(state, Some(s) if s != "Z" && s != "X"),
            "janus exited{}",
            self.log_tail()
        );
        Ok(())
    }

    /// The end of Janus's log, for errors.
    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.dir.join("janus.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        let tail = lines[lines.len().saturating_sub(15)..].join("\n");
        if tail.is_empty() {
            String::new()
        } else {
            format!("\n--- janus log ---\n{tail}")
        }
    }
}

impl Drop for JanusEnv {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        // Deleting the namespace deletes its end of the veth pair, and so the pair.
        let _ = ip(&["netns", "del", &self.netns]);
        let _ = Command::new("ip")
            .args(["link", "del", &self.host_if])
            .stderr(Stdio::null())
            .status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The folder of the Debian package's plugins (`/usr/lib/<multiarch>/janus`).
fn janus_lib() -> Result<PathBuf> {
    let mut dirs = vec![
        PathBuf::from("/usr/lib/janus"),
        PathBuf::from("/usr/local/lib/janus"),
    ];
    if let Ok(entries) = std::fs::read_dir("/usr/lib") {
        dirs.extend(entries.flatten().map(|e| e.path().join("janus")));
    }
    dirs.into_iter()
        .find(|d| d.join("plugins").join(PLUGIN).is_file())
        .with_context(|| {
            format!("no janus/plugins/{PLUGIN} under /usr/lib (apt-get install janus)")
        })
}

/// Every `libjanus_*.so` in `dir` but `keep`, for a `disable = "..."` list.
fn all_but(dir: &Path, keep: &str) -> String {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|e| e.file_name().to_str().map(str::to_owned))
                .filter(|n| n.starts_with("libjanus_") && n.ends_with(".so") && n != keep)
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names.join(",")
}

/// janus.jcfg, the HTTP transport's and the streaming plugin's config, into `dir`.
fn write_config(dir: &Path, janus_if: &str) -> Result<()> {
    let lib = janus_lib()?;
    let d = dir.display();
    let l = lib.display();
    let janus = format!(
        r#"general: {{
	configs_folder = "{d}"
	plugins_folder = "{l}/plugins"
	transports_folder = "{l}/transports"
	events_folder = "{l}/events"
	loggers_folder = "{l}/loggers"
	debug_level = 3
	# No keepalives to send: viewers live as long as the run.
	session_timeout = 0
}}
media: {{
	rtp_port_range = "20000-40000"
}}
nat: {{
	nice_debug = false
	# Full ICE (no ice_lite), host candidates on the veth only.
	ice_enforce_list = "{janus_if}"
}}
plugins: {{
	disable = "{plugins}"
}}
transports: {{
	disable = "{transports}"
}}
loggers: {{
	disable = "{loggers}"
}}
events: {{
	broadcast = false
}}
"#,
        plugins = all_but(&lib.join("plugins"), PLUGIN),
        transports = all_but(&lib.join("transports"), TRANSPORT),
        loggers = all_but(&lib.join("loggers"), ""),
    );
    let http = format!(
        r#"general: {{
	json = "plain"
	base_path = "/janus"
	http = true
	port = {HTTP_PORT}
	interface = "{janus_if}"
	https = false
}}
admin: {{
	admin_http = false
}}
"#
    );
    let streaming = format!(
        r#"general: {{
}}
ferry-bench: {{
	type = "rtp"
	id = {MOUNTPOINT}
	description = "ferry bench: synthetic VP8 + Opus"
	media = (
		{{ type = "audio" mid = "0" port = {AUDIO_PORT} pt = {apt} codec = "opus" }},
		{{ type = "video" mid = "1" port = {VIDEO_PORT} pt = {vpt} codec = "vp8" }}
	)
}}
"#,
        apt = ferry_sfu::peer::SOURCE_AUDIO_PT,
        vpt = ferry_sfu::peer::SOURCE_VIDEO_PT,
    );
    std::fs::write(dir.join("janus.jcfg"), janus)?;
    std::fs::write(dir.join("janus.transport.http.jcfg"), http)?;
    std::fs::write(dir.join("janus.plugin.streaming.jcfg"), streaming)?;
    Ok(())
}
