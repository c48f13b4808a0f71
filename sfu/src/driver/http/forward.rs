//! The URL a client holds keeps working after its session migrated: DELETE and PATCH that
//! reach the node the session left are forwarded to the node that has it now (WHIP/WHEP
//! clients such as GStreamer do not follow redirects on the session URL, RFC 9725 §4.6).

use super::error::{FERRY_ERROR, error};
use axum::body::Bytes;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

/// How many nodes a request has been forwarded through (a session that moved A → B → A and
/// then ended leaves both pointing at each other: the count ends such a loop).
pub const FORWARDED: &str = "ferry-forwarded";
const MAX_HOPS: u8 = 3;

/// The request methods forwarded.
#[derive(Debug, Clone, Copy)]
pub enum Verb {
    Delete,
    Patch,
}

/// Sends `verb` with `body` to `url`, the session's URL on the node that has it now, and
/// answers with what that node answered.
pub async fn forward(
    tls: ureq::tls::TlsConfig,
    verb: Verb,
    url: String,
    headers: &HeaderMap,
    body: Bytes,
) -> Response {
    let hops = headers
        .get(FORWARDED)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u8>().ok())
        .unwrap_or(0);
    if hops >= MAX_HOPS {
        return error(
            StatusCode::NOT_FOUND,
            "no such session (it moved between nodes and is gone)",
        );
    }
    let pass = |name: header::HeaderName| {
        headers
            .get(&name)
            .and_then(|v| v.to_str().ok())
            .map(|v| (name, v.to_owned()))
    };
    let passed: Vec<_> = [
        header::CONTENT_TYPE,
        header::IF_MATCH,
        header::AUTHORIZATION,
    ]
    .into_iter()
    .filter_map(pass)
    .collect();
    let target = url.clone();
    let sent = tokio::task::spawn_blocking(move || {
        let agent = ureq::Agent::config_builder()
            .tls_config(tls)
            .timeout_global(Some(std::time::Duration::from_secs(5)))
            .http_status_as_error(false)
            .max_redirects(0)
            .build()
            .new_agent();
        let hops = (hops + 1).to_string();
        let mut r = match verb {
            Verb::Delete => {
                let mut b = agent.delete(&target).header(FORWARDED, &hops);
                for (k, v) in &passed {
                    b = b.header(k.as_str(), v);
                }
                b.call()?
            }
            Verb::Patch => {
                let mut b = agent.patch(&target).header(FORWARDED, &hops);
                for (k, v) in &passed {
                    b = b.header(k.as_str(), v);
                }
                b.send(&body[..])?
            }
        };
        let header = |name: &str| {
            r.headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        let kept = (
            header("content-type"),
            header("etag"),
            header(FERRY_ERROR.as_str()),
        );
        let text = r.body_mut().read_to_string().unwrap_or_default();
        Ok::<_, ureq::Error>((r.status().as_u16(), kept, text))
    })
    .await;
    match sent {
        Ok(Ok((status, (content_type, etag, code), text))) => {
            let status = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY);
            let mut r = (status, text).into_response();
            let h = r.headers_mut();
            for (name, v) in [
                (header::CONTENT_TYPE, content_type),
                (header::ETAG, etag),
                (FERRY_ERROR, code),
            ] {
                if let Some(v) = v.and_then(|v| HeaderValue::from_str(&v).ok()) {
                    h.insert(name, v);
                }
            }
            r
        }
        Ok(Err(e)) => error(
            StatusCode::BAD_GATEWAY,
            format!("the session moved to {url}, which did not answer: {e}"),
        ),
        Err(_) => error(StatusCode::BAD_GATEWAY, "forwarding failed"),
    }
}
