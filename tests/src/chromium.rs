//! Headless Chromium, one process per page.
//!
//! Each [`Browser`] is a fresh Chromium process with its own throw-away profile, a fake camera and
//! microphone, and permission prompts auto-accepted. Dropping it kills every process it started
//! and then removes the profile: no Chromium outlives the test that opened it. Most helpers
//! (zygotes, renderers, GPU, network, audio and capture services) share the browser's process
//! group; the crash handler daemonizes out of it, but its command line names the crash database,
//! which lives in our temp dir because `XDG_CONFIG_HOME` points there.

use std::env;
use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};
use rustix::process::{Pid, Signal, kill_process, kill_process_group};

/// Environment variable naming the Chromium binary; otherwise `chromium` is looked up on `PATH`.
pub const CHROMIUM_ENV: &str = "FERRY_CHROMIUM";

/// Flags for every page: the fixed headless and fake-media set, then what keeps a page that nobody
/// looks at running at full speed, then logging.
const FLAGS: &[&str] = &[
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    // The fake camera runs at 20 fps unless told otherwise.
    "--use-fake-device-for-media-stream=fps=30",
    "--use-fake-ui-for-media-stream",
    "--allow-loopback-in-peer-connection",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
    "--no-first-run",
    // Unwatched pages run at full speed; muted media plays without a gesture.
    "--autoplay-policy=no-user-gesture-required",
    "--disable-renderer-backgrounding",
    "--disable-background-timer-throttling",
    "--disable-backgrounding-occluded-windows",
    // Console messages go to the log, which `Drop` prints (captured by libtest unless a test fails).
    "--enable-logging=stderr",
];

/// How long `Drop` waits for Chromium's processes to disappear after SIGKILL.
const REAP_TIMEOUT: Duration = Duration::from_secs(5);

/// Log lines `Drop` prints: the page's console and the browser's last words.
const LOG_TAIL_LINES: usize = 40;

/// One headless Chromium showing one page. Killed (with all its helpers) on drop.
#[derive(Debug)]
pub struct Browser {
    child: Child,
    /// Holds `profile/` (the `--user-data-dir`), `config/` (`XDG_CONFIG_HOME`, where the crash
    /// handler keeps its database) and `chromium.log`; removed on drop.
    dir: PathBuf,
    url: String,
}

impl Browser {
    /// Launches Chromium on `url`.
    ///
    /// The binary is `$FERRY_CHROMIUM`, else `chromium` on `PATH`; a missing binary is an error
    /// that says how to install it.
    pub fn open(url: &str) -> Result<Browser> {
        Browser::open_with(url, &[])
    }

    /// [`Browser::open`] with `extra` command-line flags (e.g. a test CA to trust).
    pub fn open_with(url: &str, extra: &[&str]) -> Result<Browser> {
        Browser::launch(None, url, extra)
    }

    /// [`Browser::open_with`] inside network namespace `ns` (a viewer behind a shaped link):
    /// the page is fetched, and media sent and received, on the namespace's veth.
    pub fn open_in(ns: &crate::netns::Netns, url: &str, extra: &[&str]) -> Result<Browser> {
        Browser::launch(Some(ns.name()), url, extra)
    }

    fn launch(netns: Option<&str>, url: &str, extra: &[&str]) -> Result<Browser> {
        let binary = chromium_binary()?;
        let dir = fresh_dir()?;
        let profile = dir.join("profile");
        let config = dir.join("config");
        for sub in [&profile, &config] {
            fs::create_dir(sub).with_context(|| format!("creating {}", sub.display()))?;
        }
        let log = File::create(dir.join("chromium.log")).context("creating the Chromium log")?;

        // `ip netns exec` execs the browser: the child is the browser itself, as without it.
        let mut command = match netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns]).arg(&binary);
                c
            }
            None => Command::new(&binary),
        };
        command
            .args(FLAGS)
            .args(extra)
            .arg(format!("--user-data-dir={}", profile.display()))
            .arg(url)
            .env("XDG_CONFIG_HOME", &config)
            .stdin(Stdio::null())
            .stdout(log.try_clone().context("duplicating the log handle")?)
            .stderr(log);
        // Own process group: `Drop` kills the group, which reaches helpers that the browser forks.
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
        let child = match command.spawn() {
            Ok(child) => child,
            Err(error) => {
                let _ = fs::remove_dir_all(&dir);
                return Err(error).with_context(|| format!("starting {}", binary.display()));
            }
        };
        Ok(Browser {
            child,
            dir,
            url: url.to_owned(),
        })
    }

    /// The page this browser was opened on.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The temp dir holding this browser's profile and log; every Chromium process of this
    /// browser names it on its command line. Removed on drop.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The browser's process id, which is also its process group id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether the browser process is still running.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// The last `lines` lines of Chromium's log (its stderr, which carries the page's console
    /// messages), without the headless browser's complaints about having no D-Bus.
    pub fn log_tail(&self, lines: usize) -> String {
        // Lossy: Chromium's log is not always valid UTF-8.
        let log = fs::read(self.dir.join("chromium.log")).unwrap_or_default();
        let log = String::from_utf8_lossy(&log);
        let kept: Vec<&str> = log
            .lines()
            .filter(|l| !l.contains(":ERROR:dbus/"))
            .collect();
        kept[kept.len().saturating_sub(lines)..].join("\n")
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let group = Pid::from_child(&self.child);
        let _ = kill_process_group(group, Signal::KILL);
        let _ = self.child.kill();
        // Helpers are not our children: wait until none is alive, so that nothing outlives the
        // test and nobody writes into the directory we remove next. Reaping the dead is init's
        // business, and some inits take their time. The browser itself is reaped only after
        // that: until then its pid, hence the group id, cannot be reused by someone else.
        let deadline = Instant::now() + REAP_TIMEOUT;
        loop {
            let strays = live_processes(group, &self.dir);
            if strays.is_empty() {
                break;
            }
            for &pid in &strays {
                let _ = kill_process(pid, Signal::KILL);
            }
            if Instant::now() >= deadline {
                eprintln!("chromium processes still running after SIGKILL: {strays:?}");
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.wait();
        // libtest captures this and shows it only when the test fails.
        eprintln!(
            "--- chromium log for {} ---\n{}\n---",
            self.url,
            self.log_tail(LOG_TAIL_LINES)
        );
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// Live (not zombie) processes in process group `group` or whose command line mentions `dir`
/// (a unique temp dir: only this browser's processes can).
fn live_processes(group: Pid, dir: &Path) -> Vec<Pid> {
    let group = group.as_raw_pid().to_string();
    let needle = dir.as_os_str().as_encoded_bytes();
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| {
            let pid = Pid::from_raw(entry.file_name().to_str()?.parse().ok()?)?;
            let stat = fs::read_to_string(entry.path().join("stat")).ok()?;
            // `pid (comm) state ppid pgrp ...`; comm may hold spaces and parentheses.
            let mut fields = stat.rsplit_once(')')?.1.split_whitespace();
            let (state, pgrp) = (fields.next()?, fields.nth(1)?);
            if state == "Z" || state == "X" {
                return None;
            }
            let cmdline = fs::read(entry.path().join("cmdline")).unwrap_or_default();
            let ours = pgrp == group || cmdline.windows(needle.len()).any(|w| w == needle);
            ours.then_some(pid)
        })
        .collect()
}

/// `$FERRY_CHROMIUM`, else `chromium` on `PATH`.
fn chromium_binary() -> Result<PathBuf> {
    const HINT: &str = "the end-to-end tests need headless Chromium: install it with \
                        `apt-get install chromium` (or set FERRY_CHROMIUM to its binary)";
    if let Some(binary) = env::var_os(CHROMIUM_ENV).filter(|b| !b.is_empty()) {
        let binary = PathBuf::from(binary);
        if is_executable(&binary) {
            return Ok(binary);
        }
        bail!(
            "{CHROMIUM_ENV}={} is not an executable file; {HINT}",
            binary.display()
        );
    }
    env::var_os("PATH")
        .iter()
        .flat_map(env::split_paths)
        .map(|dir| dir.join("chromium"))
        .find(|candidate| is_executable(candidate))
        .with_context(|| format!("`chromium` is not on PATH; {HINT}"))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// A new, empty directory under the system temp dir.
fn fresh_dir() -> Result<PathBuf> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default();
    loop {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let dir = env::temp_dir().join(format!(
            "ferry-chromium-{}-{n}-{nanos:08x}",
            std::process::id()
        ));
        match fs::create_dir(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e).with_context(|| format!("creating {}", dir.display())),
        }
    }
}
