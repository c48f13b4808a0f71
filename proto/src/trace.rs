//! W3C trace context (`traceparent`) between Ferry processes, so that one request is one trace.
//!
//! A request that crosses processes carries its caller's span as a `traceparent`
//! (`00-{trace id}-{span id}-{flags}`, W3C Trace Context level 1): in an HTTP header, in the
//! query of a URL a client is redirected to (a 307 cannot set the client's headers), or in a
//! migration's `Prepare`. The callee opens its span as a child of it with [`set_parent`]; the
//! exporter then files both under one trace id.
//!
//! Spans that belong in such traces use [`TARGET`] as their `tracing` target, which the
//! binary's exporter lets through whatever `RUST_LOG` says. Without an OpenTelemetry layer
//! nothing here does anything: [`trace_parent`] is empty and nothing is added to a request.

use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The `tracing` target of request spans (the scheduler's API calls, a node's WHIP/WHEP).
pub const TARGET: &str = "ferry::trace";

/// Name of the header, and of the query parameter, that carry the trace context.
pub const TRACEPARENT: &str = "traceparent";

/// The W3C `traceparent` of `span`'s OpenTelemetry context: empty when no OpenTelemetry layer
/// records it (nothing is exported then).
pub fn trace_parent(span: &tracing::Span) -> String {
    let cx = span.context();
    let sc = cx.span().span_context().clone();
    if !sc.is_valid() {
        return String::new();
    }
    format!(
        "00-{}-{}-{:02x}",
        sc.trace_id(),
        sc.span_id(),
        sc.trace_flags().to_u8()
    )
}

/// Reads a W3C `traceparent` (version 00) from a peer; `None` for anything else, including
/// the all-zero ids the spec forbids.
pub fn parse_trace_parent(s: &str) -> Option<SpanContext> {
    let mut parts = s.split('-');
    let (version, trace, span, flags) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let hex = |p: &str, n: usize| p.len() == n && p.bytes().all(|b| b.is_ascii_hexdigit());
    if version != "00"
        || parts.next().is_some()
        || !hex(trace, 32)
        || !hex(span, 16)
        || !hex(flags, 2)
    {
        return None;
    }
    let sc = SpanContext::new(
        TraceId::from_hex(trace).ok()?,
        SpanId::from_hex(span).ok()?,
        TraceFlags::new(u8::from_str_radix(flags, 16).ok()?),
        true,
        TraceState::default(),
    );
    sc.is_valid().then_some(sc)
}

/// Makes `span` a child of the remote span `traceparent` names. Call it before the span is
/// entered. Whether it did: not for an empty or malformed value (a peer's input is never
/// trusted further than that), nor without an OpenTelemetry layer.
pub fn set_parent(span: &tracing::Span, traceparent: &str) -> bool {
    let Some(sc) = parse_trace_parent(traceparent.trim()) else {
        return false;
    };
    span.set_parent(opentelemetry::Context::new().with_remote_span_context(sc))
        .is_ok()
}

/// The `traceparent` parameter of a URL query (`a=1&traceparent=00-…`), if any. Its value is
/// hex digits and dashes, so no percent-decoding applies.
pub fn from_query(query: Option<&str>) -> Option<&str> {
    query?
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .find(|(k, _)| *k == TRACEPARENT)
        .map(|(_, v)| v)
}

/// `url` with `traceparent` added to its query; `url` itself when `traceparent` is empty.
pub fn with_trace_parent(url: &str, traceparent: &str) -> String {
    if traceparent.is_empty() {
        return url.to_owned();
    }
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}{TRACEPARENT}={traceparent}")
}

/// Records an HTTP answer on a request span (declared with `http.response.status_code` and
/// `otel.status_code` fields): 5xx marks the span as an error (OpenTelemetry's HTTP server
/// conventions; a 4xx is the client's doing).
pub fn record_status(span: &tracing::Span, status: u16) {
    span.record("http.response.status_code", status);
    if status >= 500 {
        span.record("otel.status_code", "error");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trace_parents_are_read_strictly() {
        let good = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        let sc = parse_trace_parent(good).expect("valid traceparent");
        assert_eq!(
            format!("{}", sc.trace_id()),
            "0af7651916cd43dd8448eb211c80319c"
        );
        assert_eq!(format!("{}", sc.span_id()), "b7ad6b7169203331");
        assert!(sc.is_sampled() && sc.is_remote());
        for bad in [
            "",
            "00",
            "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "00-00000000000000000000000000000000-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
            "00-0af7651916cd43dd8448eb211c80319-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-00",
            "00-+af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b716920333g-01",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-1",
            "00-ü0af7651916cd43dd8448eb211c8031-b7ad6b7169203331-01",
        ] {
            assert!(parse_trace_parent(bad).is_none(), "{bad:?} accepted");
        }
    }

    #[test]
    fn without_an_opentelemetry_layer_nothing_is_carried() {
        let span = tracing::info_span!(target: TARGET, "request");
        assert_eq!(trace_parent(&span), "");
        assert!(!set_parent(
            &span,
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
        ));
        assert_eq!(
            with_trace_parent("http://n/whip/cam", ""),
            "http://n/whip/cam"
        );
    }

    #[test]
    fn urls_carry_the_trace_parent_in_their_query() {
        let tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        let plain = with_trace_parent("http://n:1/whip/cam", tp);
        assert_eq!(plain, format!("http://n:1/whip/cam?traceparent={tp}"));
        let with_token = with_trace_parent("http://n:1/whip/cam?access_token=x", tp);
        assert_eq!(
            with_token,
            format!("http://n:1/whip/cam?access_token=x&traceparent={tp}")
        );
        let query = |url: &str| url.split_once('?').map(|(_, q)| q.to_owned());
        assert_eq!(from_query(query(&plain).as_deref()), Some(tp));
        assert_eq!(from_query(query(&with_token).as_deref()), Some(tp));
        assert_eq!(from_query(Some("access_token=x")), None);
        assert_eq!(from_query(Some("traceparentx=1&x")), None);
        assert_eq!(from_query(None), None);
    }
}
