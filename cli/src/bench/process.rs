//! Child processes of the benchmarks (killed on drop), CPU pinning, CPU time and memory read
//! from `/proc`, and the wall clock and CPU clock pair a measurement window is taken with.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use ferry_sfu::time::WallClock;

/// A child process of ours (`ferry node` or `ferry bench relay`), killed on drop.
pub(crate) struct ChildProc {
    child: Child,
    words: Vec<String>,
}

impl ChildProc {
    pub(crate) fn spawn(args: &[&str]) -> Result<ChildProc> {
        let exe = std::env::current_exe().context("current_exe")?;
        let mut child = Command::new(exe)
            .args(args)
            .env(
                "RUST_LOG",
                std::env::var("FERRY_BENCH_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("spawning ferry {args:?}"))?;
        let stdout = child.stdout.take().context("stdout")?;
        let mut reader = BufReader::new(stdout);
        let mut line = String::new();
        reader.read_line(&mut line)?;
        std::thread::spawn(move || {
            let mut sink = String::new();
            while reader.read_line(&mut sink).is_ok_and(|n| n > 0) {
                sink.clear();
            }
        });
        Ok(ChildProc {
            child,
            words: line.split_whitespace().map(str::to_owned).collect(),
        })
    }

    pub(crate) fn after(&self, key: &str) -> Result<String> {
        self.words
            .windows(2)
            .find(|w| w[0] == key)
            .map(|w| w[1].clone())
            .with_context(|| format!("no {key} in {:?}", self.words))
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for ChildProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Pins every thread of process `pid` to `cpus` (`sched_setaffinity`; threads created later
/// inherit it from their creator).
pub(crate) fn pin_process(pid: u32, cpus: &[usize]) -> Result<()> {
    use nix::sched::sched_setaffinity;
    use nix::unistd::Pid;
    let set = cpu_set(cpus)?;
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))? {
        let Some(tid) = task?.file_name().to_str().and_then(|t| t.parse().ok()) else {
            continue;
        };
        // A thread may end between the listing and the call.
        if let Err(e) = sched_setaffinity(Pid::from_raw(tid), &set)
            && e != nix::errno::Errno::ESRCH
        {
            bail!("pinning thread {tid} of process {pid} to CPUs {cpus:?}: {e}");
        }
    }
    Ok(())
}

/// Starts `ferry args…` on `cpus` only: the calling thread takes that mask while it creates
/// the child, which inherits it (so that the child's own thread pinning stays within it).
pub(crate) fn spawn_on(args: &[&str], cpus: &[usize]) -> Result<ChildProc> {
    use nix::sched::{sched_getaffinity, sched_setaffinity};
    let me = nix::unistd::Pid::from_raw(0);
    let before = sched_getaffinity(me)?;
    sched_setaffinity(me, &cpu_set(cpus)?).with_context(|| format!("CPUs {cpus:?}"))?;
    let child = ChildProc::spawn(args);
    sched_setaffinity(me, &before)?;
    child
}

/// The affinity mask of `cpus`.
fn cpu_set(cpus: &[usize]) -> Result<nix::sched::CpuSet> {
    let mut set = nix::sched::CpuSet::new();
    for &c in cpus {
        set.set(c).with_context(|| format!("CPU {c}"))?;
    }
    Ok(set)
}

/// CPUs this process may run on, as it started (before [`pin_process`] narrowed it).
pub(crate) fn cpu_count() -> usize {
    static CPUS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CPUS.get_or_init(|| std::thread::available_parallelism().map_or(1, usize::from))
}

pub(crate) fn clock_ticks() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

/// User + system CPU seconds of a process.
pub(crate) fn cpu_seconds(pid: u32, ticks: f64) -> Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let rest = stat.rsplit_once(')').context("stat")?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = f.get(11).context("utime")?.parse()?;
    let stime: f64 = f.get(12).context("stime")?.parse()?;
    Ok((utime + stime) / ticks)
}

/// Resident memory of a process in bytes.
pub(crate) fn rss_bytes(pid: u32) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .context("VmRSS")?;
    Ok(kb * 1024)
}

#[derive(Clone)]
pub(crate) struct Clocks {
    pub(crate) wall: WallClock,
    pub(crate) epoch: Instant,
}

impl Clocks {
    /// Wall clock and latency epoch anchored now.
    pub(crate) fn now() -> Self {
        let now = Instant::now();
        Clocks {
            wall: WallClock {
                base: now,
                unix_at_base: std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap_or_default(),
            },
            epoch: now,
        }
    }
}

pub(crate) async fn wait_for<F, Fut>(timeout: Duration, mut check: F) -> Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<bool>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if check().await? {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("timed out after {timeout:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
