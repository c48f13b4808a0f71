//! The operator's commands against the scheduler API (DESIGN §10): `ferry status` (nodes,
//! sessions and running migrations as tables, or `--json`), `ferry drain NODE [--wait]` with a
//! progress bar, and `ferry undrain NODE`. Each takes the scheduler replicas as a list
//! (`--scheduler URL[,URL…]`) and uses whichever answers (a follower's redirect to the leader is
//! followed).
//!
//! Exit status: 0 done, 1 a drain that ended with failed migrations or did not end within
//! `--timeout-s`, 2 a usage or HTTP error (printed).

use std::io::Write;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use ferry_sfu::driver::scheduler_link::SchedulerLink;
use serde_json::Value;

/// Longest wait for one answer.
pub(crate) const HTTP_TIMEOUT: Duration = Duration::from_secs(5);

/// Where the scheduler is and how to talk to it.
#[derive(clap::Args, Debug, Clone)]
pub struct ApiArgs {
    /// Scheduler replicas' base URLs, comma-separated.
    #[arg(long, env = "FERRY_SCHEDULER", default_value = "http://127.0.0.1:8080")]
    pub scheduler: String,
    /// API bearer token (default: $FERRY_API_TOKEN).
    #[arg(long, env = "FERRY_API_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// CA certificates (PEM) to trust for `https://` schedulers.
    #[arg(long, env = "FERRY_TLS_CA")]
    pub tls_ca: Option<std::path::PathBuf>,
}

impl ApiArgs {
    pub(crate) fn link(&self, needs_token: bool) -> Result<SchedulerLink> {
        let token = self.token.clone().unwrap_or_default();
        if needs_token && token.is_empty() {
            bail!("an API token is needed: --token or $FERRY_API_TOKEN");
        }
        let mut link = SchedulerLink::new(&self.scheduler, &token);
        if link.urls.is_empty() {
            bail!("--scheduler names no URL");
        }
        link.tls =
            ferry_sfu::driver::tls::client_tls(self.tls_ca.as_deref()).context("--tls-ca")?;
        Ok(link)
    }
}

/// Options of `ferry status`.
#[derive(clap::Args, Debug)]
pub struct StatusArgs {
    #[command(flatten)]
    api: ApiArgs,
    /// Print `{"nodes", "sessions", "migrations"}` as JSON instead of tables.
    #[arg(long)]
    json: bool,
}

/// Options of `ferry drain`.
#[derive(clap::Args, Debug)]
pub struct DrainArgs {
    /// The node to drain.
    node: String,
    #[command(flatten)]
    api: ApiArgs,
    /// Follow the drain with a progress bar until every session has moved.
    #[arg(long)]
    wait: bool,
    /// How long `--wait` follows the drain.
    #[arg(long, default_value_t = 600)]
    timeout_s: u64,
    /// Print the drain's status as JSON (the last one with `--wait`).
    #[arg(long)]
    json: bool,
}

/// Options of `ferry undrain`.
#[derive(clap::Args, Debug)]
pub struct UndrainArgs {
    /// The node to put back into service.
    node: String,
    #[command(flatten)]
    api: ApiArgs,
}

/// A JSON answer with `status`, else the scheduler's error.
pub(crate) fn expect(
    answer: ferry_sfu::driver::scheduler_link::SchedulerAnswer,
    status: &[u16],
) -> Result<Value> {
    if !status.contains(&answer.status) {
        let reason = serde_json::from_str::<Value>(&answer.body)
            .ok()
            .and_then(|v| v["error"].as_str().map(str::to_owned))
            .unwrap_or(answer.body);
        bail!("{}: {}", answer.status, reason.trim());
    }
    serde_json::from_str(&answer.body).context("the scheduler's answer is not JSON")
}

pub(crate) fn get(link: &SchedulerLink, path: &str) -> Result<Value> {
    expect(link.call(path, None, HTTP_TIMEOUT)?, &[200])
}

/// Runs a command's body on a blocking thread and exits with its status.
pub async fn run<F>(name: &'static str, f: F) -> Result<()>
where
    F: FnOnce(&mut dyn Write) -> Result<i32> + Send + 'static,
{
    let code = tokio::task::spawn_blocking(move || {
        let mut out = std::io::stdout().lock();
        match f(&mut out) {
            Ok(code) => code,
            Err(e) => {
                eprintln!("ferry {name}: {e:#}");
                2
            }
        }
    })
    .await?;
    std::process::exit(code)
}

pub(crate) fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        v => v.to_string(),
    }
}

/// Prints rows as a table with a header, columns padded to their widest cell.
pub(crate) fn table(out: &mut dyn Write, header: &[&str], rows: &[Vec<String>]) -> Result<()> {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cells: Vec<String>| {
        cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect::<Vec<_>>()
            .join("  ")
            .trim_end()
            .to_owned()
    };
    writeln!(
        out,
        "{}",
        line(header.iter().map(|h| h.to_string()).collect())
    )?;
    for r in rows {
        writeln!(out, "{}", line(r.clone()))?;
    }
    Ok(())
}

/// `ferry status`.
pub fn status(args: &StatusArgs, out: &mut dyn Write) -> Result<i32> {
    let link = args.api.link(false)?;
    let nodes = get(&link, "/v1/nodes")?;
    let sessions = get(&link, "/v1/sessions")?;
    let migrations = get(&link, "/v1/migrations")?;
    let running: Vec<&Value> = migrations
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["state"] == "running")
        .collect();
    if args.json {
        let all = serde_json::json!({
            "nodes": nodes,
            "sessions": sessions,
            "migrations": running,
        });
        writeln!(out, "{}", serde_json::to_string_pretty(&all)?)?;
        return Ok(0);
    }
    let nodes = nodes.as_array().cloned().unwrap_or_default();
    let sessions = sessions.as_array().cloned().unwrap_or_default();
    writeln!(out, "NODES ({})", nodes.len())?;
    let rows: Vec<Vec<String>> = nodes
        .iter()
        .map(|n| {
            vec![
                text(&n["id"]),
                text(&n["state"]),
                format!("{:.2}", n["weight"].as_f64().unwrap_or(0.0)),
                format!("{}/{}", text(&n["sessions"]), text(&n["session_capacity"])),
                text(&n["workers"]),
                format!("{:.0}%", n["cpu"].as_f64().unwrap_or(0.0) * 100.0),
                text(&n["zone"]),
                format!("{} ms", text(&n["last_heartbeat_ms"])),
                text(&n["http"]),
            ]
        })
        .collect();
    table(
        out,
        &[
            "ID",
            "STATE",
            "WEIGHT",
            "SESSIONS",
            "CORES",
            "CPU",
            "ZONE",
            "HEARTBEAT",
            "HTTP",
        ],
        &rows,
    )?;
    writeln!(out, "\nSESSIONS ({})", sessions.len())?;
    let rows: Vec<Vec<String>> = sessions
        .iter()
        .map(|s| {
            vec![
                text(&s["id"]),
                text(&s["stream"]),
                text(&s["kind"]),
                text(&s["node"]),
                text(&s["state"]),
            ]
        })
        .collect();
    table(out, &["ID", "STREAM", "KIND", "NODE", "STATE"], &rows)?;
    writeln!(out, "\nMIGRATIONS RUNNING ({})", running.len())?;
    let rows: Vec<Vec<String>> = running
        .iter()
        .map(|m| {
            vec![
                text(&m["id"]),
                text(&m["session"]),
                text(&m["source"]),
                text(&m["target"]),
                text(&m["mode"]),
            ]
        })
        .collect();
    table(out, &["ID", "SESSION", "FROM", "TO", "MODE"], &rows)?;
    Ok(0)
}

/// A progress bar: `[#####-----] 12/50`.
fn bar(done: u64, total: u64) -> String {
    const WIDTH: u64 = 30;
    let filled = (done * WIDTH)
        .checked_div(total)
        .unwrap_or(WIDTH)
        .min(WIDTH);
    format!(
        "[{}{}] {done}/{total}",
        "#".repeat(filled as usize),
        "-".repeat((WIDTH - filled) as usize)
    )
}

/// `ferry drain`.
pub fn drain(args: &DrainArgs, out: &mut dyn Write) -> Result<i32> {
    let link = args.api.link(true)?;
    let path = format!("/v1/nodes/{}/drain", args.node);
    let started = expect(link.call(&path, Some(&Value::Null), HTTP_TIMEOUT)?, &[202])?;
    if !args.wait {
        if args.json {
            writeln!(out, "{started}")?;
        } else {
            writeln!(
                out,
                "draining {}: {} sessions to move (ferry drain {} --wait follows it)",
                args.node,
                text(&started["sessions_left"]),
                args.node
            )?;
        }
        return Ok(0);
    }
    let total = started["sessions_left"].as_u64().unwrap_or(0);
    let deadline = Instant::now() + Duration::from_secs(args.timeout_s);
    let begun = Instant::now();
    let tty = !args.json && std::io::IsTerminal::is_terminal(&std::io::stderr());
    let mut last_line = String::new();
    loop {
        let s = get(&link, &path)?;
        let left = s["sessions_left"].as_u64().unwrap_or(0);
        let moved = total.saturating_sub(left);
        let line = format!(
            "{} {} · {} committed, {} failed · {:.1} s",
            text(&s["state"]),
            bar(moved, total),
            text(&s["migrations_committed"]),
            text(&s["migrations_failed"]),
            begun.elapsed().as_secs_f64()
        );
        if !args.json && line != last_line {
            if tty {
                eprint!("\r{line}");
            } else {
                eprintln!("{line}");
            }
            last_line = line;
        }
        if s["state"] == "drained" || s["state"] == "active" {
            if tty {
                eprintln!();
            }
            let failed = s["migrations_failed"].as_u64().unwrap_or(0);
            if args.json {
                writeln!(out, "{s}")?;
            } else {
                writeln!(
                    out,
                    "{} {} in {:.1} s: {} moved, {failed} failed",
                    args.node,
                    text(&s["state"]),
                    begun.elapsed().as_secs_f64(),
                    text(&s["migrations_committed"])
                )?;
            }
            return Ok(if s["state"] == "drained" && failed == 0 {
                0
            } else {
                1
            });
        }
        if Instant::now() > deadline {
            if tty {
                eprintln!();
            }
            eprintln!(
                "ferry drain: {} is still {} after {} s",
                args.node,
                text(&s["state"]),
                args.timeout_s
            );
            return Ok(1);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// `ferry undrain`.
pub fn undrain(args: &UndrainArgs, out: &mut dyn Write) -> Result<i32> {
    let link = args.api.link(true)?;
    let path = format!("/v1/nodes/{}/drain", args.node);
    let s = expect(link.delete(&path, HTTP_TIMEOUT)?, &[200])?;
    writeln!(
        out,
        "{} is {} (it ramps back up to its weight)",
        args.node,
        text(&s["state"])
    )?;
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_pad_columns_and_bars_fill() {
        let mut out = Vec::new();
        table(
            &mut out,
            &["ID", "STATE"],
            &[
                vec!["node-a".into(), "active".into()],
                vec!["b".into(), "-".into()],
            ],
        )
        .unwrap_or_default();
        assert_eq!(
            String::from_utf8_lossy(&out),
            "ID      STATE\nnode-a  active\nb       -\n"
        );
        assert_eq!(bar(0, 0), format!("[{}] 0/0", "#".repeat(30)));
        assert_eq!(
            bar(5, 10),
            format!("[{}{}] 5/10", "#".repeat(15), "-".repeat(15))
        );
    }
}
