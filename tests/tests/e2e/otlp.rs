//! Migration traces reach an OpenTelemetry collector over OTLP/HTTP.
//!
//! A collector endpoint (axum, decoding the real OTLP protobuf) receives
//! what the scheduler and the nodes of `ferry bench migrate --sessions 1`
//! export while one viewer moves from node-a to node-b through the
//! scheduler's API: one trace from the API call (`POST /v1/migrations` on
//! the scheduler) to a span per node, the target's a child of the source's
//! (W3C trace context carried in the order to the source node and in the
//! migration's `Prepare`), with the migration's identity, its phases as
//! events and its outcome.

use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use axum::body::Bytes;
use axum::extract::State;
use axum::routing::post;
use ferry_tests::cluster::{start_dev_env, wait_registered};
use ferry_tests::{ferry_bin, http};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;

const OFFER: &str = include_str!("../../../rtc/src/sdp/testdata/chrome_offer.sdp");

#[derive(Debug, Clone)]
struct Received {
    instance: String,
    span: Span,
}

type Store = Arc<Mutex<Vec<Received>>>;

fn text(v: &Option<AnyValue>) -> Option<String> {
    match v.as_ref()?.value.as_ref()? {
        any_value::Value::StringValue(s) => Some(s.clone()),
        any_value::Value::IntValue(i) => Some(i.to_string()),
        any_value::Value::DoubleValue(d) => Some(d.to_string()),
        any_value::Value::BoolValue(b) => Some(b.to_string()),
        _ => None,
    }
}

fn attr(attrs: &[KeyValue], key: &str) -> Option<String> {
    attrs
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| text(&kv.value))
}

async fn collect(
    State(store): State<Store>,
    body: Bytes,
) -> Result<Vec<u8>, (axum::http::StatusCode, String)> {
    let req = ExportTraceServiceRequest::decode(body)
        .map_err(|e| (axum::http::StatusCode::BAD_REQUEST, e.to_string()))?;
    let mut store = store.lock().map_err(|_| {
        (
            axum::http::StatusCode::INTERNAL_SERVER_ERROR,
            "poisoned".into(),
        )
    })?;
    for rs in req.resource_spans {
        let instance = rs
            .resource
            .as_ref()
            .and_then(|r| attr(&r.attributes, "service.instance.id"))
            .unwrap_or_default();
        for ss in rs.scope_spans {
            for span in ss.spans {
                store.push(Received {
                    instance: instance.clone(),
                    span,
                });
            }
        }
    }
    // An empty ExportTraceServiceResponse: everything accepted.
    Ok(Vec::new())
}

/// A collector on a free port: what it received, and its address.
async fn collector() -> Result<(Store, std::net::SocketAddr)> {
    let store: Store = Arc::default();
    let app = axum::Router::new()
        .route("/v1/traces", post(collect))
        .with_state(store.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok((store, addr))
}

/// Publishing and playing through the scheduler's gateway (`ferry dev`, over HTTP): the
/// gateway's span of each `POST /whip|whep/{stream}` it answered with a 307 is the parent of the
/// node's span of the POST the client sent to the `Location` (its `traceparent` rides there).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publishing_and_playing_through_the_gateway_is_one_trace_per_request() -> Result<()> {
    let _area = ferry_tests::area(module_path!());
    let (store, addr) = collector().await?;
    let endpoint = format!("http://{addr}/v1/traces");
    let dev = start_dev_env(
        false,
        &[],
        &[
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", endpoint.as_str()),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ],
    )?;
    let (gateway, token) = (dev.gateway.clone(), dev.token.clone());
    wait_registered(&gateway, 2).await?;
    let bearer = format!("Bearer {token}");
    let headers = [
        ("Content-Type", "application/sdp"),
        ("Authorization", bearer.as_str()),
    ];
    for kind in ["whip", "whep"] {
        // The viewer's 307 needs the stream's origin, which the node's heartbeat reports.
        let deadline = Instant::now() + Duration::from_secs(10);
        let location = loop {
            let r = http(
                &format!("{gateway}/{kind}/traced"),
                "POST",
                &headers,
                OFFER.as_bytes(),
            )?;
            if r.status == 307 {
                break r
                    .header("location")
                    .context("307 without Location")?
                    .to_owned();
            }
            ensure!(
                Instant::now() < deadline,
                "gateway {kind}: {} {}",
                r.status,
                r.body
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        ensure!(
            location.contains("traceparent="),
            "the 307 carries no traceparent: {location}"
        );
        let r = http(&location, "POST", &[headers[0]], OFFER.as_bytes())?;
        ensure!(r.status == 201, "node {kind}: {} {}", r.status, r.body);
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    for route in ["POST /whip/{stream}", "POST /whep/{stream}"] {
        loop {
            let spans = store
                .lock()
                .map_err(|_| anyhow::anyhow!("poisoned"))?
                .clone();
            // The gateway's span names the node it sent the client to; the node's its id.
            let gateway_span = spans
                .iter()
                .find(|r| r.span.name == route && attr(&r.span.attributes, "node.url").is_some());
            let node_span = gateway_span.and_then(|g| {
                spans.iter().find(|n| {
                    n.span.name == route
                        && attr(&n.span.attributes, "node.id").is_some()
                        && n.span.trace_id == g.span.trace_id
                        && n.span.parent_span_id == g.span.span_id
                })
            });
            if let (Some(g), Some(n)) = (gateway_span, node_span) {
                eprintln!(
                    "{route}: gateway span → {} span in trace {:02x?}, status {:?}",
                    attr(&n.span.attributes, "node.id").unwrap_or_default(),
                    g.span.trace_id,
                    attr(&n.span.attributes, "http.response.status_code")
                );
                break;
            }
            if Instant::now() > deadline {
                let names: Vec<_> = spans
                    .iter()
                    .map(|r| {
                        (
                            &r.span.name,
                            r.span.trace_id.clone(),
                            r.span.parent_span_id.clone(),
                        )
                    })
                    .collect();
                bail!("no {route} gateway span with the node's span as its child; got {names:?}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    drop(dev);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_migration_is_one_trace_with_a_span_on_each_node() -> Result<()> {
    let _area = ferry_tests::area(module_path!());
    let (store, addr) = collector().await?;

    let dir = std::env::temp_dir().join(format!("ferry-otlp-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let out = dir.join("migrate.json");
    let bin = ferry_bin()?;
    let status = tokio::task::spawn_blocking(move || {
        Command::new(bin)
            .args([
                "bench",
                "migrate",
                "--sessions",
                "1",
                "--mode",
                "edge",
                "--out",
            ])
            .arg(&out)
            .env(
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                format!("http://{addr}/v1/traces"),
            )
            .env("OTEL_BSP_SCHEDULE_DELAY", "100")
            .stdout(Stdio::null())
            .status()
    })
    .await??;
    let _ = std::fs::remove_dir_all(&dir);
    ensure!(status.success(), "ferry bench migrate failed: {status}");

    // The bench keeps the cluster up 2 s after the commit; the nodes export
    // every 100 ms.
    let deadline = Instant::now() + Duration::from_secs(10);
    let (source, target) = loop {
        let spans = store
            .lock()
            .map_err(|_| anyhow::anyhow!("poisoned"))?
            .clone();
        let find = |name: &str| spans.iter().find(|r| r.span.name == name).cloned();
        if let (Some(s), Some(t)) = (find("migration.source"), find("migration.target")) {
            break (s, t);
        }
        if Instant::now() > deadline {
            let names: Vec<_> = spans.iter().map(|r| (&r.instance, &r.span.name)).collect();
            bail!("no source and target span exported; got {names:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let (s, t) = (&source.span, &target.span);
    // The scheduler's span of the API call that ordered the move is in the same trace.
    let deadline = Instant::now() + Duration::from_secs(10);
    let api = loop {
        let spans = store
            .lock()
            .map_err(|_| anyhow::anyhow!("poisoned"))?
            .clone();
        if let Some(r) = spans
            .iter()
            .find(|r| r.span.name == "POST /v1/migrations" && r.span.trace_id == s.trace_id)
        {
            break r.clone();
        }
        if Instant::now() > deadline {
            let names: Vec<_> = spans
                .iter()
                .map(|r| (&r.instance, &r.span.name, r.span.trace_id == s.trace_id))
                .collect();
            bail!("no scheduler span of POST /v1/migrations in the nodes' trace; got {names:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    eprintln!(
        "api span on {}: {} {:?}",
        api.instance, api.span.name, api.span.attributes
    );
    ensure!(
        api.instance == "scheduler",
        "the API span came from {}",
        api.instance
    );
    eprintln!("source span on {}: {:?}", source.instance, s.attributes);
    eprintln!("target span on {}: {:?}", target.instance, t.attributes);
    ensure!(
        source.instance == "node-a" && target.instance == "node-b",
        "instances {} / {}",
        source.instance,
        target.instance
    );
    ensure!(
        s.trace_id.len() == 16 && s.trace_id == t.trace_id,
        "not one trace: {:02x?} / {:02x?}",
        s.trace_id,
        t.trace_id
    );
    ensure!(
        t.parent_span_id == s.span_id,
        "the target's span is not the source's child"
    );
    for key in ["migration.id", "session.id"] {
        let (a, b) = (attr(&s.attributes, key), attr(&t.attributes, key));
        ensure!(a.is_some() && a == b, "{key}: {a:?} / {b:?}");
    }
    for span in [s, t] {
        ensure!(
            attr(&span.attributes, "migration.source").as_deref() == Some("node-a"),
            "source of {}",
            span.name
        );
        ensure!(
            attr(&span.attributes, "migration.target").as_deref() == Some("node-b"),
            "target of {}",
            span.name
        );
        ensure!(
            attr(&span.attributes, "migration.outcome").as_deref() == Some("committed"),
            "outcome of {}: {:?}",
            span.name,
            span.attributes
        );
        ensure!(
            span.end_time_unix_nano > span.start_time_unix_nano,
            "{} has no duration",
            span.name
        );
    }
    let blackout: f64 = attr(&s.attributes, "migration.blackout_ms")
        .context("no blackout_ms")?
        .parse()?;
    ensure!(blackout > 0.0, "blackout {blackout}");
    let phases: Vec<String> = s
        .events
        .iter()
        .filter_map(|e| attr(&e.attributes, "phase"))
        .collect();
    ensure!(
        phases == ["prepare", "snapshot", "wal", "cutover", "commit"],
        "source phase events: {phases:?}"
    );
    let elapsed = (s.end_time_unix_nano - s.start_time_unix_nano) as f64 / 1e6;
    eprintln!("source span {elapsed:.1} ms, phases {phases:?}, blackout {blackout} ms");
    Ok(())
}
