//! The scheduler drives migrations on the nodes over real HTTP
//! (`HttpMigrations`): a small axum server plays a node's migration
//! endpoints (`PUT`/`GET /v1/migrations/{id}`) and records what reaches it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::put;
use ferry_proto::api::{Heartbeat, SessionKind, SessionReport};
use ferry_proto::{SessionId, StreamId};
use ferry_scheduler::cluster::ClusterConfig;
use ferry_scheduler::node_client::HttpMigrations;
use ferry_scheduler::service::Scheduler;
use ferry_scheduler::store::MemoryStore;
use serde_json::{Value, json};

const TOKEN: &str = "cluster-token-42";

/// What the fake node saw and holds.
#[derive(Default)]
struct NodeLog {
    /// Every `PUT`: bearer header and body.
    puts: Vec<(Option<String>, Value)>,
    /// Every `GET`: migration id and bearer header.
    gets: Vec<(String, Option<String>)>,
    /// Accepted migrations and how often each was read.
    running: BTreeMap<String, (Value, u32)>,
}

type Node = Arc<Mutex<NodeLog>>;

fn bearer(h: &HeaderMap) -> Option<String> {
    h.get("authorization")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

fn refuse(status: StatusCode, msg: String) -> Response {
    (status, Json(json!({ "error": msg }))).into_response()
}

/// `PUT /v1/migrations/{id}` as the node contract says: 401 without the
/// token, 404 for a session it does not hold (`gone*`), 409 for one already
/// migrating (`busy*`), else 202 with the view, now running.
async fn node_put(
    State(node): State<Node>,
    Path(id): Path<String>,
    h: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    let auth = bearer(&h);
    let mut log = node.lock().unwrap();
    log.puts.push((auth.clone(), body.clone()));
    if auth.as_deref() != Some(&format!("Bearer {TOKEN}")) {
        return refuse(StatusCode::UNAUTHORIZED, "bad token".into());
    }
    let session = body["session"].as_str().unwrap_or_default().to_owned();
    if session.starts_with("gone") {
        return refuse(
            StatusCode::NOT_FOUND,
            format!("session {session} is not on this node"),
        );
    }
    if session.starts_with("busy") {
        return refuse(
            StatusCode::CONFLICT,
            format!("session {session} is already migrating under m-other"),
        );
    }
    let mut view = body;
    view["state"] = json!("running");
    log.running.insert(id, (view.clone(), 0));
    (StatusCode::ACCEPTED, Json(view)).into_response()
}

/// `GET /v1/migrations/{id}`: running on the first read, committed (with
/// phases, blackout and bytes) from the second on.
async fn node_get(State(node): State<Node>, Path(id): Path<String>, h: HeaderMap) -> Response {
    let mut log = node.lock().unwrap();
    log.gets.push((id.clone(), bearer(&h)));
    let Some((view, reads)) = log.running.get_mut(&id) else {
        return refuse(StatusCode::NOT_FOUND, format!("no migration {id}"));
    };
    *reads += 1;
    if *reads >= 2 {
        view["state"] = json!("committed");
        view["phases_ms"] = json!({"prewarm": 7, "export": 3, "cutover": 1});
        view["blackout_ms"] = json!(4.5);
        view["bytes"] = json!(4096);
    }
    Json(view.clone()).into_response()
}

async fn fake_node() -> (String, Node, tokio::task::JoinHandle<()>) {
    let node = Node::default();
    let app = axum::Router::new()
        .route("/v1/migrations/{id}", put(node_put).get(node_get))
        .with_state(node.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let server = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (base, node, server)
}

struct Api {
    base: String,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for Api {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

async fn scheduler() -> Api {
    let scheduler = Scheduler::open(
        ClusterConfig::default(),
        Box::new(MemoryStore::default()),
        TOKEN.into(),
        Arc::new(HttpMigrations::new(TOKEN)),
    )
    .unwrap();
    let ticker = tokio::spawn(scheduler.clone().run());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let app = ferry_scheduler::api::router(scheduler, None);
    let server = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Api {
        base,
        tasks: vec![ticker, server],
    }
}

async fn call(method: &str, url: String, body: Option<Value>) -> (u16, Value) {
    let method = method.to_owned();
    tokio::task::spawn_blocking(move || {
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .new_agent();
        let req = ureq::http::Request::builder()
            .method(method.as_str())
            .uri(&url)
            .header("Authorization", format!("Bearer {TOKEN}"))
            .header("Content-Type", "application/json")
            .body(body.map(|b| b.to_string()).unwrap_or_default())
            .unwrap();
        let mut resp = agent.run(req).unwrap();
        let text = resp.body_mut().read_to_string().unwrap_or_default();
        let json = serde_json::from_str(&text).unwrap_or(Value::String(text));
        (resp.status().as_u16(), json)
    })
    .await
    .unwrap()
}

async fn beat(api: &Api, node: &str, http: &str, sessions: &[&str]) {
    let hb = Heartbeat {
        http: http.to_owned(),
        media: "127.0.0.1:1".into(),
        zone: "z1".into(),
        host: node.into(),
        session_capacity: 100,
        sessions: sessions
            .iter()
            .map(|s| SessionReport {
                id: SessionId::new(*s).unwrap(),
                stream: StreamId::new(format!("cam-{s}")).unwrap(),
                kind: SessionKind::View,
                state: "connected".into(),
            })
            .collect(),
        ..Heartbeat::default()
    };
    let (status, body) = call(
        "POST",
        format!("{}/v1/nodes/{node}/heartbeat", api.base),
        Some(serde_json::to_value(&hb).unwrap()),
    )
    .await;
    assert_eq!(status, 204, "{body}");
}

async fn migrate(api: &Api, req: Value) -> String {
    let (status, body) = call("POST", format!("{}/v1/migrations", api.base), Some(req)).await;
    assert_eq!(status, 202, "{body}");
    body["id"].as_str().unwrap().to_owned()
}

/// Reads the scheduler's view of a migration until it ends.
async fn settled(api: &Api, id: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(4);
    loop {
        let (status, v) = call("GET", format!("{}/v1/migrations/{id}", api.base), None).await;
        assert_eq!(status, 200, "{v}");
        if !matches!(v["state"].as_str(), Some("planned" | "running")) {
            return v;
        }
        assert!(Instant::now() < deadline, "migration {id} did not end: {v}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_migration_reaches_the_source_node_and_converges_to_committed() {
    let (node_a, log, _server) = fake_node().await;
    let api = scheduler().await;
    beat(&api, "a", &node_a, &["s1"]).await;
    beat(&api, "b", "http://127.0.0.1:9", &[]).await;
    // No target given: the scheduler chooses the only other active node.
    let id = migrate(&api, json!({"session": "s1", "mode": "ice-restart"})).await;
    let v = settled(&api, &id).await;
    assert_eq!(v["state"], "committed", "{v}");
    assert_eq!(
        v["phases_ms"],
        json!({"prewarm": 7, "export": 3, "cutover": 1})
    );
    assert_eq!(v["blackout_ms"], 4.5);
    assert_eq!(v["bytes"], 4096);
    assert_eq!(v["error"], Value::Null);

    let log = log.lock().unwrap();
    assert_eq!(log.puts.len(), 1, "one PUT");
    let (auth, body) = &log.puts[0];
    assert_eq!(auth.as_deref(), Some(format!("Bearer {TOKEN}").as_str()));
    assert_eq!(
        body,
        &json!({
            "id": id, "session": "s1", "source": "a", "target": "b",
            "mode": "ice-restart", "state": "planned",
            "phases_ms": {}, "blackout_ms": null, "bytes": 0, "error": null
        })
    );
    assert!(log.gets.len() >= 2, "followed on the node: {:?}", log.gets);
    for (gid, auth) in &log.gets {
        assert_eq!(gid, &id);
        assert_eq!(auth.as_deref(), Some(format!("Bearer {TOKEN}").as_str()));
    }
}

#[tokio::test]
async fn a_node_refusing_with_404_or_409_fails_the_migration_with_its_reason() {
    let (node_a, log, _server) = fake_node().await;
    let api = scheduler().await;
    beat(&api, "a", &node_a, &["gone1", "busy1"]).await;
    beat(&api, "b", "http://127.0.0.1:9", &[]).await;
    for (session, code, reason) in [
        ("gone1", 404, "session gone1 is not on this node"),
        (
            "busy1",
            409,
            "session busy1 is already migrating under m-other",
        ),
    ] {
        let id = migrate(&api, json!({"session": session, "target": "b"})).await;
        let v = settled(&api, &id).await;
        assert_eq!(v["state"], "failed", "{v}");
        let error = v["error"].as_str().unwrap();
        assert!(
            error.contains(reason) && error.contains(&code.to_string()),
            "{error}"
        );
    }
    let log = log.lock().unwrap();
    assert_eq!(log.puts.len(), 2);
    assert!(log.gets.is_empty(), "a refused migration is not followed");
}

#[tokio::test]
async fn an_unreachable_source_node_fails_the_migration() {
    // A port that was just free: nothing listens there.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", l.local_addr().unwrap())
    };
    let api = scheduler().await;
    beat(&api, "a", &closed, &["s1"]).await;
    beat(&api, "b", "http://127.0.0.1:9", &[]).await;
    let id = migrate(&api, json!({"session": "s1"})).await;
    let v = settled(&api, &id).await;
    assert_eq!(v["state"], "failed");
    assert!(v["error"].as_str().unwrap().contains("unreachable"), "{v}");
}

#[tokio::test]
async fn a_drain_orders_every_migration_from_the_node() {
    let (node_a, log, _server) = fake_node().await;
    let api = scheduler().await;
    let sessions = ["v0", "v1", "v2", "v3"];
    beat(&api, "a", &node_a, &sessions).await;
    beat(&api, "b", "http://127.0.0.1:9", &[]).await;
    let (status, body) = call("POST", format!("{}/v1/nodes/a/drain", api.base), None).await;
    assert_eq!(status, 202, "{body}");
    let deadline = Instant::now() + Duration::from_secs(4);
    loop {
        // The nodes report committed sessions on their new home.
        let (_, migrations) = call("GET", format!("{}/v1/migrations", api.base), None).await;
        let moved: Vec<String> = migrations
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["state"] == "committed")
            .map(|m| m["session"].as_str().unwrap().to_owned())
            .collect();
        let left: Vec<&str> = sessions
            .iter()
            .copied()
            .filter(|s| !moved.iter().any(|m| m == s))
            .collect();
        let moved: Vec<&str> = moved.iter().map(String::as_str).collect();
        beat(&api, "a", &node_a, &left).await;
        beat(&api, "b", "http://127.0.0.1:9", &moved).await;
        let (_, st) = call("GET", format!("{}/v1/nodes/a/drain", api.base), None).await;
        if st["state"] == "drained" {
            assert_eq!(st["migrations_committed"], 4, "{st}");
            break;
        }
        assert!(Instant::now() < deadline, "drain did not finish: {st}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let log = log.lock().unwrap();
    let mut put: Vec<&str> = log
        .puts
        .iter()
        .map(|(auth, body)| {
            assert_eq!(auth.as_deref(), Some(format!("Bearer {TOKEN}").as_str()));
            assert_eq!(body["source"], "a");
            assert_eq!(body["target"], "b");
            assert_eq!(body["mode"], "edge");
            assert_eq!(body["state"], "planned");
            body["session"].as_str().unwrap()
        })
        .collect();
    put.sort_unstable();
    assert_eq!(put, sessions, "one PUT per session, to the source node");
}

#[tokio::test]
async fn a_migration_with_nowhere_to_go_is_refused_with_503() {
    let (node_a, log, _server) = fake_node().await;
    let api = scheduler().await;
    beat(&api, "a", &node_a, &["s1"]).await;
    let (status, body) = call(
        "POST",
        format!("{}/v1/migrations", api.base),
        Some(json!({"session": "s1"})),
    )
    .await;
    assert_eq!(status, 503, "{body}");
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("no active node other than a"),
        "{body}"
    );
    assert!(log.lock().unwrap().puts.is_empty());
}
