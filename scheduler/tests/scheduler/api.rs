//! The operator API over real HTTP: auth, errors, placements that agree
//! with the placement core, WHIP/WHEP redirects, the routing long-poll,
//! drains through the `Migrations` seam, and restarts with the file store.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ferry_proto::api::{
    Heartbeat, MigrationState, MigrationView, NodeView, PlacementResponse, RoutingTable,
    SessionKind, SessionReport,
};
use ferry_proto::{MigrationId, NodeId, SessionId, StreamId};
use ferry_scheduler::cluster::{ClusterConfig, Persisted};
use ferry_scheduler::drain::{BoxFuture, DrainBudget, Migrations, NoMigrator, StartRefused};
use ferry_scheduler::placement::{self, NodeSpec, Requirements};
use ferry_scheduler::service::Scheduler;
use ferry_scheduler::store::{FileStore, MemoryStore, Store};
use serde_json::{Value, json};

const TOKEN: &str = "test-token-0123";

struct Api {
    base: String,
    scheduler: Arc<Scheduler>,
    server: tokio::task::JoinHandle<()>,
    ticker: tokio::task::JoinHandle<()>,
}

impl Drop for Api {
    fn drop(&mut self) {
        self.server.abort();
        self.ticker.abort();
    }
}

async fn start(store: Box<dyn Store<Persisted>>, migrations: Arc<dyn Migrations>) -> Api {
    let config = ClusterConfig {
        drain: DrainBudget {
            max_concurrent: 2,
            max_per_second: 100,
            max_attempts: 3,
        },
        ..ClusterConfig::default()
    };
    let scheduler = Scheduler::open(config, store, TOKEN.into(), migrations).unwrap();
    let ticker = tokio::spawn(scheduler.clone().run());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let app = ferry_scheduler::api::router(scheduler.clone(), None);
    let server = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Api {
        base,
        scheduler,
        server,
        ticker,
    }
}

struct Reply {
    status: u16,
    body: String,
    location: Option<String>,
    www_auth: Option<String>,
}

impl Reply {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }
}

async fn call(method: &str, url: String, token: Option<&str>, body: Option<String>) -> Reply {
    call_with(method, url, token, body, &[]).await
}

async fn call_with(
    method: &str,
    url: String,
    token: Option<&str>,
    body: Option<String>,
    headers: &[(&str, &str)],
) -> Reply {
    let method = method.to_owned();
    let token = token.map(str::to_owned);
    let headers: Vec<(String, String)> = headers
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    tokio::task::spawn_blocking(move || {
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .max_redirects(0)
            .build()
            .new_agent();
        let mut req = ureq::http::Request::builder()
            .method(method.as_str())
            .uri(&url);
        if let Some(t) = token {
            req = req.header("Authorization", format!("Bearer {t}"));
        }
        req = req.header("Content-Type", "application/json");
        for (k, v) in headers {
            req = req.header(k, v);
        }
        let req = req.body(body.unwrap_or_default()).unwrap();
        let mut resp = agent.run(req).unwrap();
        let header = |n: &str| {
            resp.headers()
                .get(n)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        let location = header("location");
        let www_auth = header("www-authenticate");
        Reply {
            status: resp.status().as_u16(),
            location,
            www_auth,
            body: resp.body_mut().read_to_string().unwrap_or_default(),
        }
    })
    .await
    .unwrap()
}

fn hb(port: u16, zone: &str, sessions: Vec<SessionReport>) -> Heartbeat {
    Heartbeat {
        http: format!("http://127.0.0.1:{port}"),
        media: format!("127.0.0.1:{}", port + 1000),
        zone: zone.into(),
        host: format!("host-{port}"),
        session_capacity: 1000,
        sessions,
        ..Heartbeat::default()
    }
}

fn session(id: &str, stream: &str, kind: SessionKind) -> SessionReport {
    SessionReport {
        id: SessionId::new(id).unwrap(),
        stream: StreamId::new(stream).unwrap(),
        kind,
        state: "connected".into(),
    }
}

async fn beat(api: &Api, node: &str, h: &Heartbeat) {
    let r = call(
        "POST",
        format!("{}/v1/nodes/{node}/heartbeat", api.base),
        Some(TOKEN),
        Some(serde_json::to_string(h).unwrap()),
    )
    .await;
    assert_eq!(r.status, 204, "{}", r.body);
}

async fn pin(api: &Api, node: &str, w: f64) {
    let r = call(
        "PUT",
        format!("{}/v1/nodes/{node}/weight", api.base),
        Some(TOKEN),
        Some(json!({ "weight": w }).to_string()),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
}

#[tokio::test]
async fn mutating_calls_need_the_bearer_token() {
    let api = start(Box::new(MemoryStore::default()), Arc::new(NoMigrator)).await;
    let url = |p: &str| format!("{}{p}", api.base);
    let body = Some(json!({"key": "s"}).to_string());
    for token in [None, Some("wrong")] {
        let r = call("POST", url("/v1/placements"), token, body.clone()).await;
        assert_eq!(r.status, 401, "{token:?}");
        assert_eq!(r.www_auth.as_deref(), Some("Bearer"));
        assert!(r.json()["error"].as_str().unwrap().contains("token"));
        let r = call(
            "POST",
            url("/v1/nodes/a/heartbeat"),
            token,
            Some("{}".into()),
        )
        .await;
        assert_eq!(r.status, 401);
        let r = call(
            "PUT",
            url("/v1/nodes/a/weight"),
            token,
            Some("{\"weight\":1}".into()),
        )
        .await;
        assert_eq!(r.status, 401);
        let r = call("POST", url("/v1/nodes/a/drain"), token, None).await;
        assert_eq!(r.status, 401);
        let r = call("POST", url("/v1/migrations"), token, body.clone()).await;
        assert_eq!(r.status, 401);
    }
    for path in [
        "/v1/nodes",
        "/v1/sessions",
        "/v1/migrations",
        "/v1/routing",
        "/healthz",
        "/metrics",
        "/openapi.json",
    ] {
        assert_eq!(
            call("GET", url(path), None, None).await.status,
            200,
            "{path}"
        );
    }
    // The scheme is case-insensitive (RFC 9110 §11.1); the token only in the header, never in
    // the URL (where logs and proxies keep it).
    for (auth, accepted) in [
        (format!("bearer {TOKEN}"), true),
        (format!("BEARER  {TOKEN} "), true),
        (format!("Basic {TOKEN}"), false),
        (TOKEN.to_owned(), false),
    ] {
        let r = call_with(
            "POST",
            url("/v1/placements"),
            None,
            body.clone(),
            &[("Authorization", &auth)],
        )
        .await;
        // Accepted: past the token check (no node to place on yet: 503).
        assert_eq!(
            r.status != 401,
            accepted,
            "{auth:?}: {} {}",
            r.status,
            r.body
        );
    }
    let r = call(
        "POST",
        url(&format!("/v1/placements?access_token={TOKEN}")),
        None,
        body.clone(),
    )
    .await;
    assert_eq!(r.status, 401, "a token in the query: {}", r.body);
}

#[tokio::test]
async fn bad_input_gets_400_and_unknown_ids_404() {
    let api = start(Box::new(MemoryStore::default()), Arc::new(NoMigrator)).await;
    let url = |p: &str| format!("{}{p}", api.base);
    let r = call("POST", url("/v1/placements"), Some(TOKEN), Some("{".into())).await;
    assert_eq!(r.status, 400);
    assert!(
        r.json()["error"].as_str().unwrap().contains("bad JSON"),
        "{}",
        r.body
    );
    let r = call(
        "POST",
        url("/v1/placements"),
        Some(TOKEN),
        Some(json!({"key": "s", "colour": 1}).to_string()),
    )
    .await;
    assert_eq!(r.status, 400, "unknown field: {}", r.body);
    let r = call(
        "POST",
        url("/v1/placements"),
        Some(TOKEN),
        Some(json!({"key": ""}).to_string()),
    )
    .await;
    assert_eq!(r.status, 400, "{}", r.body);
    let mut h = hb(9001, "z", vec![]);
    h.cpu = 2.0;
    let r = call(
        "POST",
        url("/v1/nodes/a/heartbeat"),
        Some(TOKEN),
        Some(serde_json::to_string(&h).unwrap()),
    )
    .await;
    assert_eq!(r.status, 400);
    assert!(r.body.contains("fractions"), "{}", r.body);
    let r = call(
        "PUT",
        url("/v1/nodes/a/weight"),
        Some(TOKEN),
        Some("{\"weight\":\"heavy\"}".into()),
    )
    .await;
    assert_eq!(r.status, 400);

    assert_eq!(
        call("GET", url("/v1/nodes/nope"), None, None).await.status,
        404
    );
    assert_eq!(
        call("GET", url("/v1/nodes/nope/drain"), None, None)
            .await
            .status,
        404
    );
    assert_eq!(
        call("GET", url("/v1/migrations/m1"), None, None)
            .await
            .status,
        404
    );
    let r = call(
        "PUT",
        url("/v1/nodes/nope/weight"),
        Some(TOKEN),
        Some("{\"weight\":0.5}".into()),
    )
    .await;
    assert_eq!(r.status, 404);
    assert_eq!(
        call("POST", url("/v1/nodes/nope/drain"), Some(TOKEN), None)
            .await
            .status,
        404
    );
    let r = call(
        "POST",
        url("/v1/migrations"),
        Some(TOKEN),
        Some(json!({"session": "nope"}).to_string()),
    )
    .await;
    assert_eq!(r.status, 404);
    // No node at all: placement is unavailable, with Retry-After semantics.
    let r = call(
        "POST",
        url("/v1/placements"),
        Some(TOKEN),
        Some(json!({"key": "s"}).to_string()),
    )
    .await;
    assert_eq!(r.status, 503, "{}", r.body);
    // WHIP/WHEP need a token (the API token is one for every stream).
    let r = call("POST", url("/whip/s1"), None, Some("v=0".into())).await;
    assert_eq!(r.status, 401);
    let r = call("POST", url("/whip/s1"), Some("wrong"), Some("v=0".into())).await;
    assert_eq!(r.status, 401);
    let r = call("POST", url("/whip/s1"), Some(TOKEN), Some("v=0".into())).await;
    assert_eq!(r.status, 503);
    let r = call(
        "POST",
        url("/whip/bad%20name"),
        Some(TOKEN),
        Some("v=0".into()),
    )
    .await;
    assert_eq!(r.status, 400);
}

#[tokio::test]
async fn placements_agree_with_the_core_and_whip_whep_redirect() {
    let api = start(Box::new(MemoryStore::default()), Arc::new(NoMigrator)).await;
    let nodes = [
        ("n1", 9101, 1.0),
        ("n2", 9102, 0.5),
        ("n3", 9103, 0.75),
        ("n4", 9104, 0.25),
    ];
    for (id, port, w) in nodes {
        beat(&api, id, &hb(port, "z1", vec![])).await;
        pin(&api, id, w).await;
    }
    // The same cluster built directly from the core. With no sessions yet the
    // service compacts its layout on its next tick; so does this copy.
    let mut core = placement::Cluster::new(ClusterConfig::default().placement).unwrap();
    for (id, port, w) in nodes {
        let mut spec = NodeSpec::new(NodeId::new(id).unwrap(), "z1", w);
        spec.host = format!("host-{port}");
        core.upsert(spec).unwrap();
    }
    core.compact();
    tokio::time::sleep(Duration::from_millis(1200)).await;
    for i in 0..200 {
        let key = format!("stream-{i}");
        let r = call(
            "POST",
            format!("{}/v1/placements", api.base),
            Some(TOKEN),
            Some(json!({ "key": key, "kind": "publish" }).to_string()),
        )
        .await;
        assert_eq!(r.status, 200, "{}", r.body);
        let p: PlacementResponse = serde_json::from_str(&r.body).unwrap();
        let want = core
            .place(key.as_bytes(), &Requirements::default(), &|_: &NodeId| 0, 1)
            .unwrap();
        assert_eq!(p.node, want.node, "key {key}");
        assert_eq!(
            p.http,
            format!(
                "http://127.0.0.1:{}",
                nodes.iter().find(|n| n.0 == p.node.as_str()).unwrap().1
            )
        );
    }
    // WHIP goes where placement says; WHEP goes to the publisher's node.
    let r = call(
        "POST",
        format!("{}/whip/s1", api.base),
        Some(TOKEN),
        Some("v=0".into()),
    )
    .await;
    assert_eq!(r.status, 307);
    let placed = core
        .place(b"s1", &Requirements::default(), &|_: &NodeId| 0, 1)
        .unwrap()
        .node;
    let port = nodes.iter().find(|n| n.0 == placed.as_str()).unwrap().1;
    assert_eq!(
        r.location.as_deref(),
        Some(format!("http://127.0.0.1:{port}/whip/s1?access_token={TOKEN}").as_str())
    );
    beat(
        &api,
        "n4",
        &hb(9104, "z1", vec![session("p1", "s1", SessionKind::Publish)]),
    )
    .await;
    let r = call(
        "POST",
        format!("{}/whep/s1", api.base),
        Some(TOKEN),
        Some("v=0".into()),
    )
    .await;
    assert_eq!(r.status, 307);
    assert_eq!(
        r.location,
        Some(format!(
            "http://127.0.0.1:9104/whep/s1?access_token={TOKEN}"
        ))
    );
    let sessions = call("GET", format!("{}/v1/sessions", api.base), None, None)
        .await
        .json();
    assert_eq!(sessions[0]["node"], "n4");
    assert_eq!(sessions[0]["kind"], "publish");
}

#[tokio::test]
async fn routing_long_poll_wakes_on_change() {
    let api = start(Box::new(MemoryStore::default()), Arc::new(NoMigrator)).await;
    let t: RoutingTable = serde_json::from_str(
        &call("GET", format!("{}/v1/routing", api.base), None, None)
            .await
            .body,
    )
    .unwrap();
    let url = format!("{}/v1/routing?since={}&timeout_s=20", api.base, t.version);
    let waiter = tokio::spawn(call("GET", url, None, None));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiter.is_finished(), "long-poll waits for a change");
    let t0 = Instant::now();
    beat(&api, "n1", &hb(9201, "z1", vec![])).await;
    let r = waiter.await.unwrap();
    assert!(t0.elapsed() < Duration::from_secs(5));
    let t2: RoutingTable = serde_json::from_str(&r.body).unwrap();
    assert!(t2.version > t.version);
    assert_eq!(t2.nodes[0].id.as_str(), "n1");
}

/// A migrator that commits every migration it is given and remembers how
/// many ran at once.
#[derive(Default)]
struct Committing {
    started: Mutex<BTreeMap<MigrationId, MigrationView>>,
    max_in_flight: Mutex<usize>,
}

impl Migrations for Committing {
    fn start(
        &self,
        m: MigrationView,
        _source_http: String,
    ) -> BoxFuture<'_, Result<(), StartRefused>> {
        let mut started = self.started.lock().unwrap();
        let running = started
            .values()
            .filter(|v| v.state == MigrationState::Running)
            .count();
        let mut max = self.max_in_flight.lock().unwrap();
        *max = (*max).max(running + 1);
        let mut v = m;
        v.state = MigrationState::Running;
        started.insert(v.id.clone(), v);
        Box::pin(async { Ok(()) })
    }

    fn status(
        &self,
        id: MigrationId,
        _source_http: String,
    ) -> BoxFuture<'_, Option<MigrationView>> {
        let mut started = self.started.lock().unwrap();
        let v = started.get_mut(&id).map(|v| {
            v.state = MigrationState::Committed;
            v.phases_ms.insert("cutover".into(), 1);
            v.clone()
        });
        Box::pin(async move { v })
    }
}

#[tokio::test]
async fn drain_migrates_every_session_within_the_budget() {
    let migrator = Arc::new(Committing::default());
    let api = start(Box::new(MemoryStore::default()), migrator.clone()).await;
    let sessions: Vec<SessionReport> = (0..6)
        .map(|i| session(&format!("v{i}"), "cam", SessionKind::View))
        .collect();
    beat(&api, "a", &hb(9301, "z1", sessions.clone())).await;
    beat(&api, "b", &hb(9302, "z1", vec![])).await;
    let r = call(
        "POST",
        format!("{}/v1/nodes/a/drain", api.base),
        Some(TOKEN),
        None,
    )
    .await;
    assert_eq!(r.status, 202, "{}", r.body);
    assert_eq!(r.json()["state"], "draining");
    // Placement avoids the draining node.
    pin(&api, "b", 1.0).await;
    for i in 0..20 {
        let r = call(
            "POST",
            format!("{}/v1/placements", api.base),
            Some(TOKEN),
            Some(json!({"key": format!("k{i}")}).to_string()),
        )
        .await;
        assert_eq!(r.json()["node"], "b");
    }
    // As migrations commit, the nodes report the sessions on their new home.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let committed: Vec<SessionId> = migrator
            .started
            .lock()
            .unwrap()
            .values()
            .filter(|m| m.state == MigrationState::Committed)
            .map(|m| m.session.clone())
            .collect();
        let (moved, left): (Vec<_>, Vec<_>) = sessions
            .iter()
            .cloned()
            .partition(|s| committed.contains(&s.id));
        beat(&api, "a", &hb(9301, "z1", left.clone())).await;
        beat(&api, "b", &hb(9302, "z1", moved)).await;
        let st = call("GET", format!("{}/v1/nodes/a/drain", api.base), None, None)
            .await
            .json();
        if st["state"] == "drained" {
            assert_eq!(st["sessions_left"], 0);
            assert_eq!(st["migrations_committed"], 6);
            break;
        }
        assert!(Instant::now() < deadline, "drain did not finish: {st}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        *migrator.max_in_flight.lock().unwrap() <= 2,
        "budget: at most 2 at once"
    );
    let migrations = call("GET", format!("{}/v1/migrations", api.base), None, None)
        .await
        .json();
    assert_eq!(migrations.as_array().unwrap().len(), 6);
    assert_eq!(migrations[0]["state"], "committed");
}

fn temp_state() -> PathBuf {
    std::env::temp_dir()
        .join(format!(
            "ferry-sched-{}-{}",
            std::process::id(),
            rand_suffix()
        ))
        .join("state.json")
}

fn rand_suffix() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

#[tokio::test]
async fn a_restarted_scheduler_keeps_its_state() {
    let path = temp_state();
    let (version, placed) = {
        let api = start(Box::new(FileStore::new(&path)), Arc::new(NoMigrator)).await;
        beat(
            &api,
            "a",
            &hb(9401, "z1", vec![session("p1", "cam", SessionKind::Publish)]),
        )
        .await;
        beat(&api, "b", &hb(9402, "z1", vec![])).await;
        beat(
            &api,
            "c",
            &hb(9403, "z2", vec![session("v9", "cam", SessionKind::View)]),
        )
        .await;
        pin(&api, "b", 0.5).await;
        let r = call(
            "POST",
            format!("{}/v1/nodes/c/drain", api.base),
            Some(TOKEN),
            None,
        )
        .await;
        assert_eq!(r.status, 202);
        let placed: Vec<Value> = {
            let mut v = Vec::new();
            for i in 0..20 {
                let r = call(
                    "POST",
                    format!("{}/v1/placements", api.base),
                    Some(TOKEN),
                    Some(json!({"key": format!("k{i}")}).to_string()),
                )
                .await;
                v.push(r.json()["node"].clone());
            }
            v
        };
        api.scheduler.flush().unwrap();
        (api.scheduler.with(|c| c.routing_version()), placed)
    };
    let api = start(Box::new(FileStore::new(&path)), Arc::new(NoMigrator)).await;
    let nodes: Vec<NodeView> = serde_json::from_str(
        &call("GET", format!("{}/v1/nodes", api.base), None, None)
            .await
            .body,
    )
    .unwrap();
    assert_eq!(nodes.len(), 3);
    let b = nodes.iter().find(|n| n.id.as_str() == "b").unwrap();
    assert_eq!(b.weight_override, Some(0.5));
    let c = nodes.iter().find(|n| n.id.as_str() == "c").unwrap();
    assert_eq!(serde_json::to_value(c.state).unwrap(), "draining");
    let sessions = call("GET", format!("{}/v1/sessions", api.base), None, None)
        .await
        .json();
    assert_eq!(sessions.as_array().unwrap().len(), 2, "{sessions}");
    assert_eq!(sessions[0]["id"], "p1");
    assert!(api.scheduler.with(|c| c.routing_version()) >= version);
    // Identical placements after the restart (same layout, same weights).
    for (i, want) in placed.iter().enumerate() {
        beat(
            &api,
            "a",
            &hb(9401, "z1", vec![session("p1", "cam", SessionKind::Publish)]),
        )
        .await;
        beat(&api, "b", &hb(9402, "z1", vec![])).await;
        let r = call(
            "POST",
            format!("{}/v1/placements", api.base),
            Some(TOKEN),
            Some(json!({"key": format!("k{i}")}).to_string()),
        )
        .await;
        assert_eq!(&r.json()["node"], want, "key k{i}");
    }
    std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
}

#[tokio::test]
async fn openapi_document_lists_every_route() {
    let api = start(Box::new(MemoryStore::default()), Arc::new(NoMigrator)).await;
    let doc = call("GET", format!("{}/openapi.json", api.base), None, None)
        .await
        .json();
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."));
    for path in [
        "/v1/nodes",
        "/v1/nodes/{id}",
        "/v1/nodes/{id}/heartbeat",
        "/v1/nodes/{id}/weight",
        "/v1/nodes/{id}/reclaim-notice",
        "/v1/nodes/{id}/drain",
        "/v1/sessions",
        "/v1/placements",
        "/v1/migrations",
        "/v1/migrations/{id}",
        "/v1/routing",
        "/v1/recordings",
        "/v1/recordings/{id}",
        "/whip/{stream}",
        "/whep/{stream}",
    ] {
        assert!(doc["paths"][path].is_object(), "{path} missing");
    }
    assert_eq!(
        doc["components"]["securitySchemes"]["bearer"]["scheme"],
        "bearer"
    );
    // The recording target's pattern is the one the check is tested against.
    assert_eq!(
        doc["components"]["schemas"]["RecordingRequest"]["properties"]["target"]["pattern"],
        ferry_proto::api::RECORDING_TARGET_PATTERN
    );
    // An unknown path is a JSON 404 like every other error.
    let r = call("GET", format!("{}/v1/recordings/", api.base), None, None).await;
    assert_eq!(r.status, 404);
    assert!(
        r.json()["error"]
            .as_str()
            .is_some_and(|e| e.contains("no such API path"))
    );
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// A ticket the scheduler can route by (it never checks signatures: nodes do).
fn ticket_for(session: &str, stream: &str, kind: SessionKind) -> String {
    use base64::Engine;
    let claims = ferry_proto::api::TicketClaims {
        sid: SessionId::new(session).unwrap(),
        stream: StreamId::new(stream).unwrap(),
        kind,
        node: NodeId::new("n1").unwrap(),
        r#gen: 0,
        exp: unix_now() + 100,
    };
    let mut raw = ferry_proto::api::TICKET_PREFIX.to_vec();
    raw.extend(serde_json::to_vec(&claims).unwrap());
    raw.extend([0u8; 16]);
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw)
}

#[tokio::test]
async fn tickets_are_used_once_and_clients_steer_their_redirects() {
    let api = start(Box::new(MemoryStore::default()), Arc::new(NoMigrator)).await;
    let url = |p: &str| format!("{}{p}", api.base);
    // Nothing listens on these nodes' HTTP ports: a probe of either fails.
    beat(&api, "n1", &hb(9301, "z1", vec![])).await;
    beat(
        &api,
        "n2",
        &hb(9302, "z1", vec![session("s9", "cam2", SessionKind::View)]),
    )
    .await;
    let consume = |g: u32, exp: u64, token: Option<&'static str>| {
        let body = json!({ "session": "s1", "generation": g, "expires": exp }).to_string();
        call("POST", url("/v1/tickets/consume"), token, Some(body))
    };
    let soon = unix_now() + 100;
    assert_eq!(consume(0, soon, None).await.status, 401);
    assert_eq!(consume(0, soon, Some(TOKEN)).await.status, 200, "first use");
    assert_eq!(consume(0, soon, Some(TOKEN)).await.status, 409, "replay");
    assert_eq!(
        consume(1, soon, Some(TOKEN)).await.status,
        200,
        "the next generation"
    );
    assert_eq!(
        consume(0, soon, Some(TOKEN)).await.status,
        409,
        "an older one"
    );
    assert_eq!(
        consume(7, 5, Some(TOKEN)).await.status,
        200,
        "expired: nothing to keep"
    );
    assert_eq!(
        consume(8, u64::MAX, Some(TOKEN)).await.status,
        400,
        "past 2^53"
    );
    let m = call("GET", url("/metrics"), None, None).await.body;
    assert!(
        m.contains("ferry_scheduler_tickets_replayed_total 2"),
        "{m}"
    );
    assert!(
        m.contains("ferry_scheduler_tickets_consumed_total 2"),
        "{m}"
    );

    // A retried request (same Idempotency-Key) goes where the first one went.
    let keyed = [("Idempotency-Key", "k-7")];
    let first = call_with(
        "POST",
        url("/whip/x7"),
        Some(TOKEN),
        Some("v=0".into()),
        &keyed,
    )
    .await;
    assert_eq!(first.status, 307);
    pin(&api, "n1", 0.01).await;
    pin(&api, "n2", 1.0).await;
    for _ in 0..3 {
        let again = call_with(
            "POST",
            url("/whip/x7"),
            Some(TOKEN),
            Some("v=0".into()),
            &keyed,
        )
        .await;
        assert_eq!(again.location, first.location);
    }

    // A resumed session goes to the node holding it.
    let t = ticket_for("s9", "cam2", SessionKind::View);
    let r = call_with(
        "POST",
        url("/whep/cam2"),
        Some(TOKEN),
        Some("v=0".into()),
        &[("Ferry-Ticket", &t)],
    )
    .await;
    assert_eq!(
        r.location.as_deref(),
        Some(format!("http://127.0.0.1:9302/whep/cam2?access_token={TOKEN}").as_str())
    );

    // A client reports n2 unreachable; the scheduler cannot reach it either: n2 is down at
    // once (no waiting for its heartbeats to lapse) and the session goes elsewhere.
    let r = call_with(
        "POST",
        url("/whep/cam2"),
        Some(TOKEN),
        Some("v=0".into()),
        &[("Ferry-Ticket", &t), ("Ferry-Failed-Node", "n2")],
    )
    .await;
    assert_eq!(
        r.location.as_deref(),
        Some(format!("http://127.0.0.1:9301/whep/cam2?access_token={TOKEN}").as_str())
    );
    let nodes = call("GET", url("/v1/nodes"), None, None).await.json();
    let n2 = nodes
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["id"] == "n2")
        .unwrap();
    assert_eq!(n2["state"], "down");
    // A node that answers its health check is not taken down by a report.
    let alive = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = alive.local_addr().unwrap().port();
    let health = axum::Router::new().route("/healthz", axum::routing::get(|| async { "ok" }));
    let server = tokio::spawn(async move {
        let _ = axum::serve(alive, health).await;
    });
    beat(&api, "n3", &hb(port, "z1", vec![])).await;
    let r = call_with(
        "POST",
        url("/whip/x8"),
        Some(TOKEN),
        Some("v=0".into()),
        &[("Ferry-Failed-Node", "n3")],
    )
    .await;
    assert_eq!(r.status, 307);
    let nodes = call("GET", url("/v1/nodes"), None, None).await.json();
    let n3 = nodes
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["id"] == "n3")
        .unwrap();
    assert_eq!(n3["state"], "active");
    let m = call("GET", url("/metrics"), None, None).await.body;
    assert!(
        m.contains("ferry_scheduler_nodes_reported_down_total 1"),
        "{m}"
    );
    server.abort();
}
