//! `ferry migrate`: asks the scheduler to move one session and follows the
//! migration until it ends.
//!
//! Exit status: 0 when the migration committed (or, with `--no-wait`, was
//! accepted), 1 when it rolled back, failed or did not end within
//! [`WAIT`], 2 on a usage or HTTP error (the error text is printed).

use std::io::Write;
use std::time::{Duration, Instant};

use ferry_proto::api::{ApiError, CutoverMode, MigrationAccepted, MigrationState, MigrationView};

/// How long `ferry migrate` follows a migration.
const WAIT: Duration = Duration::from_secs(30);
/// Pause between two status reads.
const POLL: Duration = Duration::from_millis(100);
/// Longest wait for one answer from the scheduler.
const HTTP_TIMEOUT: Duration = Duration::from_secs(5);

/// Options of `ferry migrate`.
#[derive(clap::Args, Debug, Clone)]
pub struct MigrateArgs {
    /// Scheduler base URL.
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    pub scheduler: String,
    /// API bearer token (default: $FERRY_API_TOKEN).
    #[arg(long, env = "FERRY_API_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// The session to move.
    #[arg(long)]
    pub session: String,
    /// Target node (default: chosen by the scheduler's placement).
    #[arg(long, visible_alias = "to")]
    pub target: Option<String>,
    /// Cutover mode.
    #[arg(long, value_enum, default_value_t = Mode::Edge)]
    pub mode: Mode,
    /// Print the migration id once accepted and return without following it.
    #[arg(long)]
    pub no_wait: bool,
    /// Print JSON (the final migration view, or `{"id": ...}` with `--no-wait`).
    #[arg(long)]
    pub json: bool,
}

/// `--mode`.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The edge flips its routing entry.
    Edge,
    /// The client restarts ICE towards the target.
    IceRestart,
    /// The client reconnects with a ticket.
    Reconnect,
}

impl From<Mode> for CutoverMode {
    fn from(m: Mode) -> Self {
        match m {
            Mode::Edge => CutoverMode::Edge,
            Mode::IceRestart => CutoverMode::IceRestart,
            Mode::Reconnect => CutoverMode::Reconnect,
        }
    }
}

/// Runs `ferry migrate` and ends the process with its exit status.
pub async fn run(args: MigrateArgs) -> anyhow::Result<()> {
    let code = tokio::task::spawn_blocking(move || {
        let mut out = std::io::stdout().lock();
        match execute(&args, &mut out) {
            Ok(code) => code,
            Err(e) => {
                eprintln!("ferry migrate: {e}");
                2
            }
        }
    })
    .await?;
    std::process::exit(code)
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .timeout_global(Some(HTTP_TIMEOUT))
        .http_status_as_error(false)
        .build()
        .new_agent()
}

/// The scheduler's `{"error": ...}` text, else its body.
fn error_text(body: &str) -> String {
    serde_json::from_str::<ApiError>(body)
        .map(|e| e.error)
        .unwrap_or_else(|_| body.trim().to_owned())
}

/// Does the work; `Ok` carries the exit status, `Err` a usage or HTTP
/// error (status 2).
pub fn execute(args: &MigrateArgs, out: &mut dyn Write) -> Result<i32, String> {
    let token = args
        .token
        .as_deref()
        .filter(|t| !t.is_empty())
        .ok_or("an API token is needed: --token or $FERRY_API_TOKEN")?;
    let base = args.scheduler.trim_end_matches('/');
    let request = serde_json::json!({
        "session": args.session,
        "target": args.target,
        "mode": CutoverMode::from(args.mode),
    });
    let agent = agent();
    let mut resp = agent
        .post(format!("{base}/v1/migrations"))
        .header("Authorization", format!("Bearer {token}"))
        .send_json(&request)
        .map_err(|e| format!("POST {base}/v1/migrations: {e}"))?;
    let status = resp.status().as_u16();
    let body = resp.body_mut().read_to_string().unwrap_or_default();
    if status != 202 {
        return Err(format!(
            "scheduler answered {status}: {}",
            error_text(&body)
        ));
    }
    let accepted: MigrationAccepted = serde_json::from_str(&body)
        .map_err(|e| format!("scheduler answered 202 with an unreadable body ({e}): {body}"))?;
    let print = |out: &mut dyn Write, line: String| {
        writeln!(out, "{line}").map_err(|e| format!("writing the result: {e}"))
    };
    if args.no_wait {
        let line = if args.json {
            serde_json::json!({ "id": accepted.id }).to_string()
        } else {
            format!("migration {} accepted", accepted.id)
        };
        print(out, line)?;
        return Ok(0);
    }
    let url = format!("{base}/v1/migrations/{}", accepted.id);
    let deadline = Instant::now() + WAIT;
    loop {
        let mut resp = agent
            .get(&url)
            .call()
            .map_err(|e| format!("GET {url}: {e}"))?;
        let status = resp.status().as_u16();
        let body = resp.body_mut().read_to_string().unwrap_or_default();
        if status != 200 {
            return Err(format!(
                "scheduler answered {status}: {}",
                error_text(&body)
            ));
        }
        let view: MigrationView = serde_json::from_str(&body)
            .map_err(|e| format!("scheduler sent an unreadable migration ({e}): {body}"))?;
        let ended = !matches!(
            view.state,
            MigrationState::Planned | MigrationState::Running
        );
        let timed_out = !ended && Instant::now() >= deadline;
        if ended || timed_out {
            let line = if args.json {
                serde_json::to_string(&view).map_err(|e| e.to_string())?
            } else if timed_out {
                format!(
                    "{} (still {} after {} s)",
                    summary(&view),
                    state_name(view.state),
                    WAIT.as_secs()
                )
            } else {
                summary(&view)
            };
            print(out, line)?;
            return Ok(if view.state == MigrationState::Committed {
                0
            } else {
                1
            });
        }
        std::thread::sleep(POLL);
    }
}

fn state_name(s: MigrationState) -> &'static str {
    match s {
        MigrationState::Planned => "planned",
        MigrationState::Running => "running",
        MigrationState::Committed => "committed",
        MigrationState::RolledBack => "rolled_back",
        MigrationState::Failed => "failed",
    }
}

/// One line for people: id, state, route, phases, blackout, bytes, error.
fn summary(v: &MigrationView) -> String {
    let target = v.target.as_ref().map_or("?", |t| t.as_str());
    let mut s = format!(
        "migration {} {}: session {} {} -> {}",
        v.id,
        state_name(v.state),
        v.session,
        v.source,
        target
    );
    if !v.phases_ms.is_empty() {
        let phases: Vec<String> = v
            .phases_ms
            .iter()
            .map(|(p, ms)| format!("{p} {ms} ms"))
            .collect();
        s.push_str(&format!("; phases {}", phases.join(", ")));
    }
    if let Some(b) = v.blackout_ms {
        s.push_str(&format!("; blackout {b} ms"));
    }
    s.push_str(&format!("; {} bytes", v.bytes));
    if let Some(e) = &v.error {
        s.push_str(&format!("; error: {e}"));
    }
    s
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::sync::{Arc, Mutex};

    use axum::Json;
    use axum::extract::{Path, State};
    use axum::http::{HeaderMap, StatusCode};
    use axum::routing::{get, post};
    use serde_json::{Value, json};

    use super::*;

    fn view(state: &str) -> Value {
        json!({
            "id": "m00000007", "session": "s1", "source": "a", "target": "b",
            "mode": "edge", "state": state,
            "phases_ms": {"cutover": 2, "prewarm": 5}, "blackout_ms": 4.5,
            "bytes": 1200, "error": null
        })
    }

    #[derive(Default)]
    struct Fake {
        posted: Mutex<Vec<(Option<String>, Value)>>,
        reads: Mutex<u32>,
    }

    /// A scheduler that accepts one migration and reports it running twice,
    /// then `last`.
    async fn fake_scheduler(last: &'static str) -> (String, Arc<Fake>) {
        let fake = Arc::new(Fake::default());
        let app = axum::Router::new()
            .route(
                "/v1/migrations",
                post(
                    |State(f): State<Arc<Fake>>, h: HeaderMap, Json(body): Json<Value>| async move {
                        let auth = h
                            .get("authorization")
                            .and_then(|v| v.to_str().ok())
                            .map(str::to_owned);
                        f.posted.lock().unwrap().push((auth, body.clone()));
                        if body["session"] == "nope" {
                            return (
                                StatusCode::NOT_FOUND,
                                Json(json!({"error": "no session nope"})),
                            );
                        }
                        (StatusCode::ACCEPTED, Json(json!({"id": "m00000007"})))
                    },
                ),
            )
            .route(
                "/v1/migrations/{id}",
                get(
                    move |State(f): State<Arc<Fake>>, Path(_id): Path<String>| async move {
                        let mut n = f.reads.lock().unwrap();
                        *n += 1;
                        Json(view(if *n <= 2 { "running" } else { last }))
                    },
                ),
            )
            .with_state(fake.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        (base, fake)
    }

    fn args(base: &str) -> MigrateArgs {
        MigrateArgs {
            scheduler: base.to_owned(),
            token: Some("tok".into()),
            session: "s1".into(),
            target: Some("b".into()),
            mode: Mode::IceRestart,
            no_wait: false,
            json: false,
        }
    }

    async fn exec(a: MigrateArgs) -> (Result<i32, String>, String) {
        tokio::task::spawn_blocking(move || {
            let mut out = Vec::new();
            let r = execute(&a, &mut out);
            (r, String::from_utf8(out).unwrap())
        })
        .await
        .unwrap()
    }

    #[derive(clap::Parser, Debug)]
    struct Cmd {
        #[command(flatten)]
        args: MigrateArgs,
    }

    #[test]
    fn flags_parse_as_documented() {
        use clap::{CommandFactory, Parser};
        Cmd::command().debug_assert();
        let a = Cmd::try_parse_from([
            "migrate",
            "--scheduler",
            "http://s:1",
            "--token",
            "t",
            "--session",
            "s1",
            "--to",
            "b",
            "--mode",
            "reconnect",
            "--no-wait",
            "--json",
        ])
        .unwrap()
        .args;
        assert_eq!(
            (a.scheduler.as_str(), a.token.as_deref(), a.session.as_str()),
            ("http://s:1", Some("t"), "s1")
        );
        assert_eq!((a.target.as_deref(), a.mode), (Some("b"), Mode::Reconnect));
        assert!(a.no_wait && a.json);
        let a = Cmd::try_parse_from(["migrate", "--session", "s1", "--target", "c"])
            .unwrap()
            .args;
        assert_eq!(a.scheduler, "http://127.0.0.1:8080");
        assert_eq!((a.target.as_deref(), a.mode), (Some("c"), Mode::Edge));
        assert!(
            Cmd::try_parse_from(["migrate"]).is_err(),
            "--session is required"
        );
        assert!(Cmd::try_parse_from(["migrate", "--session", "s", "--mode", "teleport"]).is_err());
    }

    #[tokio::test]
    async fn follows_a_migration_to_commit_and_prints_one_line() {
        let (base, fake) = fake_scheduler("committed").await;
        let (r, out) = exec(args(&base)).await;
        assert_eq!(r, Ok(0));
        assert_eq!(
            out,
            "migration m00000007 committed: session s1 a -> b; phases cutover 2 ms, prewarm 5 ms; \
             blackout 4.5 ms; 1200 bytes\n"
        );
        let posted = fake.posted.lock().unwrap().clone();
        assert_eq!(
            posted,
            vec![(
                Some("Bearer tok".to_owned()),
                json!({"session": "s1", "target": "b", "mode": "ice-restart"})
            )]
        );
        assert_eq!(*fake.reads.lock().unwrap(), 3);
    }

    #[tokio::test]
    async fn failed_migrations_exit_1_and_json_prints_the_view() {
        let (base, _) = fake_scheduler("failed").await;
        let mut a = args(&base);
        a.json = true;
        let (r, out) = exec(a).await;
        assert_eq!(r, Ok(1));
        let v: Value = serde_json::from_str(out.trim()).unwrap();
        assert_eq!(v, view("failed"));
    }

    #[tokio::test]
    async fn no_wait_prints_the_id_and_http_errors_carry_the_text() {
        let (base, fake) = fake_scheduler("committed").await;
        let mut a = args(&base);
        a.no_wait = true;
        a.json = true;
        let (r, out) = exec(a.clone()).await;
        assert_eq!((r, out.as_str()), (Ok(0), "{\"id\":\"m00000007\"}\n"));
        assert_eq!(*fake.reads.lock().unwrap(), 0);
        a.session = "nope".into();
        let (r, _) = exec(a.clone()).await;
        assert_eq!(r, Err("scheduler answered 404: no session nope".to_owned()));
        a.token = None;
        let (r, _) = exec(a).await;
        assert!(r.unwrap_err().contains("FERRY_API_TOKEN"));
    }
}
