//! The test pages' home: serves them and collects what they report.
//!
//! A [`Collector`] is an HTTP server on `127.0.0.1:0`, running on its own thread and runtime so
//! that it keeps answering whatever the test does with its own (blocking calls included). Pages
//! are embedded in the test binary; each one `POST`s a JSON report to `/report/{id}` every second
//! and polls `/command/{id}` for instructions such as `delete`. The test reads the latest report
//! per page with [`Collector::report`] or waits for a condition with [`Collector::wait_until`].
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! use std::time::Duration;
//! use ferry_tests::{Browser, Collector, num};
//!
//! let collector = Collector::start()?;
//! let _page = Browser::open(&collector.page_url("loopback.html", &[("id", "L")]))?;
//! collector
//!     .wait_until(Duration::from_secs(30), |reports| {
//!         let frames = |l| num(l, "/receiver/inbound/video/framesDecoded");
//!         reports.get("L").is_some_and(|l| frames(l) > 60.0)
//!     })
//!     .await?;
//! # Ok(())
//! # }
//! ```

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::net::{SocketAddr, TcpListener as StdTcpListener};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::Value;
use tokio::sync::{oneshot, watch};

/// The latest report of every page, by page id.
pub type Reports = BTreeMap<String, Value>;

/// Files under `/pages/`: name, content type, contents.
const PAGES: &[(&str, &str, &str)] = &[
    ("publish.html", HTML, include_str!("../pages/publish.html")),
    ("view.html", HTML, include_str!("../pages/view.html")),
    (
        "loopback.html",
        HTML,
        include_str!("../pages/loopback.html"),
    ),
    ("broken.html", HTML, include_str!("../pages/broken.html")),
    ("errors.js", JS, include_str!("../pages/errors.js")),
    ("report.js", JS, include_str!("../pages/report.js")),
    ("stats.js", JS, include_str!("../pages/stats.js")),
    ("whip.js", JS, include_str!("../pages/whip.js")),
    (
        "sdk-transport.js",
        JS,
        include_str!("../../sdk-client/js/transport.js"),
    ),
    ("demo-probe.js", JS, include_str!("../pages/demo-probe.js")),
    (
        "sdk-play.html",
        HTML,
        include_str!("../pages/sdk-play.html"),
    ),
    (
        "sdk-publish.html",
        HTML,
        include_str!("../pages/sdk-publish.html"),
    ),
    (
        "sdk-session.js",
        JS,
        include_str!("../pages/sdk-session.js"),
    ),
    ("room.html", HTML, include_str!("../pages/room.html")),
];

/// The `ferry dev` demo page, served at `/demo/` with the error catcher and a probe injected.
const DEMO: &str = include_str!("../../cli/src/demo/index.html");
const DEMO_INJECT: &str = r#"<script src="/pages/errors.js"></script><script type="module" src="/pages/demo-probe.js"></script>"#;

const HTML: &str = "text/html; charset=utf-8";
const JS: &str = "text/javascript; charset=utf-8";

/// Serves the test pages and keeps their latest reports. Stops on drop.
#[derive(Debug)]
pub struct Collector {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

#[derive(Debug)]
struct Shared {
    reports: watch::Sender<Reports>,
    /// Commands queued for each page, handed out on its next poll.
    commands: Mutex<HashMap<String, Vec<String>>>,
}

impl Collector {
    /// Binds `127.0.0.1:0` and starts serving on a thread of its own.
    pub fn start() -> Result<Collector> {
        Collector::start_at("127.0.0.1")
    }

    /// [`Collector::start`] on address `ip` (a network namespace's host end, for a browser in
    /// that namespace).
    pub fn start_at(ip: &str) -> Result<Collector> {
        let listener = StdTcpListener::bind(format!("{ip}:0")).context("binding the collector")?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            reports: watch::Sender::new(Reports::new()),
            commands: Mutex::default(),
        });
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("building the collector runtime")?;
        let app = router(shared.clone());
        let (stop, stopped) = oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("collector".into())
            .spawn(move || {
                runtime.block_on(async move {
                    let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
                        return;
                    };
                    tokio::select! {
                        _ = axum::serve(listener, app) => {}
                        _ = stopped => {}
                    }
                });
                // Dropping the runtime here aborts connections a browser still holds open.
            })
            .context("spawning the collector thread")?;
        Ok(Collector {
            addr,
            shared,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// `http://ADDRESS:PORT` followed by `path` (which starts with `/`).
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// The URL of test page `page` (e.g. `"publish.html"`) with query `params`, percent-encoded.
    pub fn page_url(&self, page: &str, params: &[(&str, &str)]) -> String {
        let mut url = self.url(&format!("/pages/{page}"));
        for (i, (key, value)) in params.iter().enumerate() {
            url.push(if i == 0 { '?' } else { '&' });
            url.push_str(&percent_encode(key));
            url.push('=');
            url.push_str(&percent_encode(value));
        }
        url
    }

    /// The URL of the `ferry dev` demo page, instrumented to report as page `id`.
    pub fn demo_url(&self, id: &str) -> String {
        self.url(&format!("/demo/?id={}", percent_encode(id)))
    }

    /// The latest report from page `id`, if it has sent one.
    pub fn report(&self, id: &str) -> Option<Value> {
        self.shared.reports.borrow().get(id).cloned()
    }

    /// The latest report from every page.
    pub fn reports(&self) -> Reports {
        self.shared.reports.borrow().clone()
    }

    /// Queues `command` for page `id`; the page runs it within a quarter second or so and then
    /// lists it under `commands` in its reports. The pages know `delete` (end the session with
    /// `DELETE` on its `Location`, then close the peer connection) and `close` (close the peer
    /// connection without telling the server, like a crashed tab).
    pub fn command(&self, id: &str, command: &str) {
        self.shared
            .commands
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(id.to_owned())
            .or_default()
            .push(command.to_owned());
    }

    /// Waits until `done` holds for the reports received so far (checked on every new report),
    /// and returns those reports. On timeout the error shows the latest reports.
    pub async fn wait_until(
        &self,
        timeout: Duration,
        mut done: impl FnMut(&Reports) -> bool,
    ) -> Result<Reports> {
        let mut updates = self.shared.reports.subscribe();
        let wait = async {
            loop {
                {
                    let reports = updates.borrow_and_update();
                    if done(&reports) {
                        return Ok(reports.clone());
                    }
                }
                if updates.changed().await.is_err() {
                    bail!("the collector stopped");
                }
            }
        };
        match tokio::time::timeout(timeout, wait).await {
            Ok(result) => result,
            Err(_) => bail!(
                "timed out after {timeout:?}; latest reports:\n{}",
                describe(&self.reports())
            ),
        }
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The number at JSON `pointer` (e.g. `"/inbound/video/framesDecoded"`) in `report`, or `0.0`
/// when it is absent or not a number, which is what "not there yet" means to a waiting test.
pub fn num(report: &Value, pointer: &str) -> f64 {
    report
        .pointer(pointer)
        .and_then(Value::as_f64)
        .unwrap_or(0.0)
}

fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/pages/{file}", get(page))
        .route("/demo/", get(demo))
        .route("/report/{id}", post(report))
        .route("/command/{id}", get(command))
        .with_state(shared)
}

async fn page(Path(file): Path<String>) -> Response {
    match PAGES.iter().find(|(name, _, _)| *name == file) {
        Some((_, content_type, body)) => {
            ([(header::CONTENT_TYPE, *content_type)], *body).into_response()
        }
        None => (StatusCode::NOT_FOUND, format!("no page {file}")).into_response(),
    }
}

async fn demo() -> Response {
    // Before anything of the page's own, so that its errors are caught from the first line.
    let html = match DEMO.find("<head>") {
        Some(at) => {
            let at = at + "<head>".len();
            format!("{}{DEMO_INJECT}{}", &DEMO[..at], &DEMO[at..])
        }
        None => format!("{DEMO_INJECT}{DEMO}"),
    };
    ([(header::CONTENT_TYPE, HTML)], html).into_response()
}

/// Any content type: `navigator.sendBeacon` posts `text/plain`.
async fn report(
    State(shared): State<Arc<Shared>>,
    Path(id): Path<String>,
    body: Bytes,
) -> Response {
    match serde_json::from_slice::<Value>(&body) {
        Ok(report) => {
            shared.reports.send_modify(|reports| {
                reports.insert(id, report);
            });
            StatusCode::NO_CONTENT.into_response()
        }
        Err(error) => (
            StatusCode::BAD_REQUEST,
            format!("report is not JSON: {error}"),
        )
            .into_response(),
    }
}

async fn command(State(shared): State<Arc<Shared>>, Path(id): Path<String>) -> Response {
    let pending = shared
        .commands
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .remove(&id)
        .unwrap_or_default();
    ([(header::CACHE_CONTROL, "no-store")], axum::Json(pending)).into_response()
}

/// Reports for an error message, one page per line.
fn describe(reports: &Reports) -> String {
    if reports.is_empty() {
        return "(no page has reported)".to_owned();
    }
    let mut out = String::new();
    for (id, report) in reports {
        let _ = writeln!(out, "{id}: {report}");
    }
    out
}

/// Percent-encodes everything but RFC 3986 unreserved characters.
fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for byte in s.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(char::from(byte));
        } else {
            let _ = write!(out, "%{byte:02X}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_encode_keeps_unreserved_and_escapes_the_rest() {
        assert_eq!(
            percent_encode("http://127.0.0.1:8080/whip/a b&c=é"),
            "http%3A%2F%2F127.0.0.1%3A8080%2Fwhip%2Fa%20b%26c%3D%C3%A9"
        );
    }

    #[test]
    fn num_reads_numbers_and_treats_anything_else_as_zero() {
        let report = serde_json::json!({"a": {"b": 61, "c": "x"}});
        assert_eq!(num(&report, "/a/b"), 61.0);
        assert_eq!(num(&report, "/a/c"), 0.0);
        assert_eq!(num(&report, "/a/missing"), 0.0);
    }

    /// One HTTP/1.1 request over a fresh connection; returns status line and body.
    fn request(collector: &Collector, method: &str, path: &str, body: &str) -> (String, String) {
        use std::io::{Read, Write};
        let mut stream = std::net::TcpStream::connect(collector.addr).unwrap();
        write!(
            stream,
            "{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\
             Content-Type: text/plain\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).unwrap();
        let (head, body) = response.split_once("\r\n\r\n").unwrap();
        (head.lines().next().unwrap().to_owned(), body.to_owned())
    }

    #[tokio::test]
    async fn serves_pages_and_collects_reports_and_hands_out_commands() {
        let collector = Collector::start().unwrap();
        let (status, body) = request(&collector, "GET", "/pages/report.js", "");
        assert_eq!(status, "HTTP/1.1 200 OK");
        assert!(body.contains("export function startReporting"));
        assert_eq!(
            request(&collector, "GET", "/pages/nope.html", "").0,
            "HTTP/1.1 404 Not Found"
        );
        let (status, body) = request(&collector, "GET", "/demo/?id=d", "");
        assert_eq!(status, "HTTP/1.1 200 OK");
        assert!(
            body.contains(&format!("<head>{DEMO_INJECT}")),
            "probe injected first"
        );

        let waiter = collector.wait_until(Duration::from_secs(5), |r| {
            r.get("A").is_some_and(|a| num(a, "/seq") >= 2.0)
        });
        let posts = async {
            for seq in 1..=2 {
                let body = format!(r#"{{"seq": {seq}}}"#);
                let (status, _) = request(&collector, "POST", "/report/A", &body);
                assert_eq!(status, "HTTP/1.1 204 No Content");
            }
        };
        let (reports, ()) = tokio::join!(waiter, posts);
        assert_eq!(reports.unwrap()["A"], serde_json::json!({"seq": 2}));
        assert_eq!(collector.report("A"), Some(serde_json::json!({"seq": 2})));
        assert_eq!(
            request(&collector, "POST", "/report/A", "{oops").0,
            "HTTP/1.1 400 Bad Request"
        );

        collector.command("A", "delete");
        collector.command("A", "close");
        collector.command("B", "delete");
        assert_eq!(
            request(&collector, "GET", "/command/A", "").1,
            r#"["delete","close"]"#
        );
        assert_eq!(request(&collector, "GET", "/command/A", "").1, "[]");
        assert_eq!(
            request(&collector, "GET", "/command/B", "").1,
            r#"["delete"]"#
        );
    }

    #[tokio::test]
    async fn wait_until_times_out_with_the_latest_reports() {
        let collector = Collector::start().unwrap();
        request(
            &collector,
            "POST",
            "/report/A",
            r#"{"phase": "negotiating"}"#,
        );
        let error = collector
            .wait_until(Duration::from_millis(100), |_| false)
            .await
            .unwrap_err()
            .to_string();
        assert!(error.contains(r#"A: {"phase":"negotiating"}"#), "{error}");
    }
}
