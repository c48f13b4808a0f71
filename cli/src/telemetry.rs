//! Logs and traces.
//!
//! Logs go to stderr (stdout's first line is the machine-readable address
//! line scripts and tests read), filtered by `RUST_LOG` (default `info`).
//!
//! Migrations are traced with OpenTelemetry when a collector is configured
//! the standard way — `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (the full URL) or
//! `OTEL_EXPORTER_OTLP_ENDPOINT` (`/v1/traces` is appended) — and exported
//! over OTLP/HTTP (protobuf) in batches (`OTEL_BSP_SCHEDULE_DELAY`, default
//! 5 s). Each node's part of a migration is one span (`migration.source`,
//! `migration.target`) with `migration.id`, `session.id`,
//! `migration.source`, `migration.target` and `migration.mode`, its phases
//! as span events and `migration.outcome`, `migration.epoch` and
//! `migration.blackout_ms` as attributes; the target's span is a child of the source's (W3C trace
//! context in the migration's `Prepare`), so a migration is one trace.
//! `RUST_LOG` does not filter what is exported.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use anyhow::{Context, Result};
use opentelemetry::KeyValue;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_http::{HttpClient, HttpError};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::Layer;
use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// Flushes exported spans when dropped (on a clean exit).
#[derive(Debug)]
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        if let Some(p) = self.provider.take()
            && let Err(e) = p.shutdown()
        {
            eprintln!("OpenTelemetry shutdown: {e}");
        }
    }
}

/// Whether an OTLP endpoint for traces is configured in the environment.
fn otlp_configured() -> bool {
    [
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
    ]
    .iter()
    .any(|v| std::env::var(v).is_ok_and(|s| !s.trim().is_empty()))
}

/// Installs the global subscriber: stderr logs, plus the OTLP exporter of
/// migration spans when configured. `instance` becomes the resource's
/// `service.instance.id` (the node id, `scheduler`, …).
pub fn init(instance: &str) -> Result<Telemetry> {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let logs = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_filter(filter);
    let provider = if otlp_configured() {
        Some(provider(instance)?)
    } else {
        None
    };
    let traces = provider.as_ref().map(|p| {
        tracing_opentelemetry::layer()
            .with_tracer(p.tracer("ferry"))
            .with_location(false)
            .with_threads(false)
            .with_target(false)
            .with_tracked_inactivity(false)
            // Migration spans and the events inside them, and the request spans of the
            // scheduler's API and the nodes' WHIP/WHEP, whatever RUST_LOG says.
            .with_filter(
                Targets::new()
                    .with_target("ferry_sfu::driver::membership", LevelFilter::INFO)
                    .with_target(ferry_proto::trace::TARGET, LevelFilter::INFO)
                    .with_default(LevelFilter::OFF),
            )
    });
    tracing_subscriber::registry()
        .with(logs)
        .with(traces)
        .try_init()
        .context("installing the tracing subscriber")?;
    Ok(Telemetry { provider })
}

fn provider(instance: &str) -> Result<SdkTracerProvider> {
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .with_http_client(UreqClient::new())
        .build()
        .context("OTLP span exporter (check OTEL_EXPORTER_OTLP_*ENDPOINT)")?;
    let resource = Resource::builder()
        .with_service_name("ferry")
        .with_attribute(KeyValue::new("service.instance.id", instance.to_owned()))
        .build();
    Ok(SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource)
        .build())
}

/// OTLP/HTTP over ureq (already our HTTP client; no second stack).
#[derive(Debug)]
struct UreqClient(ureq::Agent);

impl UreqClient {
    fn new() -> Self {
        let config = ureq::Agent::config_builder()
            // The exporter reads the status itself.
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(10)))
            .build();
        Self(config.into())
    }
}

type Sent<'a> =
    Pin<Box<dyn Future<Output = Result<http::Response<bytes::Bytes>, HttpError>> + Send + 'a>>;

impl HttpClient for UreqClient {
    fn send_bytes<'a, 'b>(&'a self, request: http::Request<bytes::Bytes>) -> Sent<'b>
    where
        'a: 'b,
        Self: 'b,
    {
        // The batch span processor exports on its own thread, so a blocking
        // request does not stall any runtime.
        Box::pin(async move {
            let (parts, body) = request.into_parts();
            let response = self
                .0
                .run(http::Request::from_parts(parts, body.to_vec()))?;
            let (parts, body) = response.into_parts();
            let bytes = body.into_with_config().limit(4 << 20).read_to_vec()?;
            Ok(http::Response::from_parts(parts, bytes::Bytes::from(bytes)))
        })
    }
}
