//! Abuse limits on an HTTP listener: each client address may make `burst` requests at once
//! and `per_second` after that; more get `429 Too Many Requests` with `Retry-After` and a
//! reason. An IPv6 client counts by its /64 (one host usually holds a whole /64). Health,
//! readiness and metrics probes are not counted; CORS preflights are answered before this.
//! Requests with the cluster's own bearer token (the scheduler driving migrations, other
//! nodes, the operator) are not limited: a drain of thousands of sessions polls the node
//! faster than any client should.
//!
//! [`RateLimiter`] is the pure part (token buckets per key, the caller passes the time);
//! [`HttpLimits`] applies it to a router. The table of buckets is bounded: when it is full,
//! the buckets that refilled (clients idle long enough to start afresh) are dropped, and while
//! it is still full new clients are refused — a flood from many addresses cannot grow it.

use std::collections::HashMap;
use std::hash::Hash;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::connect_info::ConnectInfo;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;

use super::error::{FERRY_ERROR, error};
use crate::driver::tls::ClientAddr;

/// How often one client may ask.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateLimit {
    /// Requests a second, sustained (0: no limit).
    pub per_second: f64,
    /// Requests at once (the bucket's size).
    pub burst: u32,
}

impl RateLimit {
    /// No limit.
    pub const OFF: RateLimit = RateLimit {
        per_second: 0.0,
        burst: 0,
    };

    fn is_off(&self) -> bool {
        !(self.per_second.is_finite() && self.per_second > 0.0)
    }
}

/// Most clients remembered at once.
pub const MAX_CLIENTS: usize = 65_536;

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

/// Token buckets per key. See the [module docs](self).
#[derive(Debug)]
pub struct RateLimiter<K> {
    limit: RateLimit,
    buckets: HashMap<K, Bucket>,
    max_keys: usize,
    /// Requests refused so far.
    pub refused: u64,
}

impl<K: Hash + Eq + Clone> RateLimiter<K> {
    /// A limiter that remembers at most `max_keys` clients.
    pub fn new(limit: RateLimit, max_keys: usize) -> Self {
        Self {
            limit,
            buckets: HashMap::new(),
            max_keys: max_keys.max(1),
            refused: 0,
        }
    }

    fn burst(&self) -> f64 {
        f64::from(self.limit.burst.max(1))
    }

    fn refilled(&self, b: &Bucket, now: Instant) -> f64 {
        let secs = now.saturating_duration_since(b.at).as_secs_f64();
        (b.tokens + secs * self.limit.per_second).min(self.burst())
    }

    /// May `key` make a request at `now`? `Err(wait)`: not before `wait` from now.
    pub fn check(&mut self, now: Instant, key: &K) -> Result<(), Duration> {
        if self.limit.is_off() {
            return Ok(());
        }
        let burst = self.burst();
        if !self.buckets.contains_key(key) && self.buckets.len() >= self.max_keys {
            // Full: forget the clients whose bucket refilled (they start afresh anyway).
            let limit = self.limit;
            self.buckets.retain(|_, b| {
                let secs = now.saturating_duration_since(b.at).as_secs_f64();
                b.tokens + secs * limit.per_second < burst
            });
            if self.buckets.len() >= self.max_keys {
                self.refused += 1;
                return Err(Duration::from_secs(1));
            }
        }
        let b = self.buckets.get(key).copied().unwrap_or(Bucket {
            tokens: burst,
            at: now,
        });
        let tokens = self.refilled(&b, now);
        if tokens >= 1.0 {
            self.buckets.insert(
                key.clone(),
                Bucket {
                    tokens: tokens - 1.0,
                    at: now,
                },
            );
            Ok(())
        } else {
            self.buckets.insert(key.clone(), Bucket { tokens, at: now });
            self.refused += 1;
            Err(Duration::from_secs_f64(
                (1.0 - tokens) / self.limit.per_second,
            ))
        }
    }

    /// Clients remembered now.
    pub fn clients(&self) -> usize {
        self.buckets.len()
    }
}

/// What a client is counted as: its IPv4 address, or its IPv6 /64.
pub fn client_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let s = v6.segments();
                IpAddr::V6(Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
            }
        },
    }
}

/// Paths never limited: what load balancers and Prometheus poll.
const PROBES: [&str; 3] = ["/healthz", "/readyz", "/metrics"];

/// Whether a bearer token is the cluster's own.
pub type TrustedBearer = Arc<dyn Fn(&str) -> bool + Send + Sync>;

/// A rate limit shared by the routes of one listener.
#[derive(Clone)]
pub struct HttpLimits {
    inner: Arc<Mutex<RateLimiter<IpAddr>>>,
    trusted: Option<TrustedBearer>,
}

impl std::fmt::Debug for HttpLimits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpLimits")
            .field("inner", &self.inner)
            .field("trusted", &self.trusted.is_some())
            .finish()
    }
}

impl HttpLimits {
    /// Limits of `limit` per client address.
    pub fn new(limit: RateLimit) -> Self {
        Self {
            inner: Arc::new(Mutex::new(RateLimiter::new(limit, MAX_CLIENTS))),
            trusted: None,
        }
    }

    /// Requests whose `Authorization: Bearer` token `trusted` accepts are not limited.
    pub fn trusting(mut self, trusted: impl Fn(&str) -> bool + Send + Sync + 'static) -> Self {
        self.trusted = Some(Arc::new(trusted));
        self
    }

    /// Requests refused so far.
    pub fn refused(&self) -> u64 {
        self.inner.lock().map(|l| l.refused).unwrap_or(0)
    }

    /// Prometheus text of the counter.
    pub fn metrics_text(&self) -> String {
        format!(
            "# HELP ferry_http_rate_limited_total HTTP requests refused with 429: their client address had made too many.\n\
             # TYPE ferry_http_rate_limited_total counter\n\
             ferry_http_rate_limited_total {}\n",
            self.refused()
        )
    }

    /// `app` with every request counted against its client's limit. Served without
    /// `ConnectInfo<ClientAddr>` (in-process tests), nothing is limited.
    pub fn apply(&self, app: Router) -> Router {
        app.layer(axum::middleware::from_fn_with_state(self.clone(), limit))
    }

    fn check(&self, ip: IpAddr) -> Result<(), Duration> {
        match self.inner.lock() {
            Ok(mut l) => l.check(Instant::now(), &client_key(ip)),
            Err(_) => Ok(()),
        }
    }
}

async fn limit(State(limits): State<HttpLimits>, req: Request, next: Next) -> Response {
    let client = req
        .extensions()
        .get::<ConnectInfo<ClientAddr>>()
        .map(|c| c.0.0.ip());
    let Some(ip) = client else {
        return next.run(req).await;
    };
    if PROBES.contains(&req.uri().path()) {
        return next.run(req).await;
    }
    if let Some(trusted) = &limits.trusted {
        let bearer = ferry_proto::auth::request_token(
            req.headers()
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok()),
            None,
        );
        if bearer.is_some_and(|b| trusted(&b)) {
            return next.run(req).await;
        }
    }
    match limits.check(ip) {
        Ok(()) => next.run(req).await,
        Err(wait) => {
            let secs = wait.as_secs_f64().ceil().max(1.0) as u64;
            tracing::debug!(client = %client_key(ip), retry_after_s = secs, "rate limited");
            let mut r = error(
                StatusCode::TOO_MANY_REQUESTS,
                format!(
                    "too many requests from {}: retry in {secs} s",
                    client_key(ip)
                ),
            );
            if let Ok(v) = HeaderValue::from_str(&secs.to_string()) {
                r.headers_mut().insert(header::RETRY_AFTER, v);
            }
            r.headers_mut()
                .insert(FERRY_ERROR, HeaderValue::from_static("rate-limited"));
            r
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_client_gets_its_burst_then_its_rate() {
        let t0 = Instant::now();
        let mut l = RateLimiter::new(
            RateLimit {
                per_second: 10.0,
                burst: 5,
            },
            100,
        );
        let a = 1u32;
        assert!((0..5).all(|_| l.check(t0, &a).is_ok()));
        let wait = l.check(t0, &a).unwrap_err();
        assert_eq!(wait, ms(100), "one token every 100 ms");
        // Another client is not affected.
        assert!(l.check(t0, &2).is_ok());
        // 250 ms later: two tokens (and a half).
        assert!(l.check(t0 + ms(250), &a).is_ok());
        assert!(l.check(t0 + ms(250), &a).is_ok());
        assert_eq!(l.check(t0 + ms(250), &a), Err(ms(50)));
        assert_eq!(l.refused, 2);
        // Idle long enough: the whole burst again, no more.
        let t1 = t0 + Duration::from_secs(10);
        assert!((0..5).all(|_| l.check(t1, &a).is_ok()));
        assert!(l.check(t1, &a).is_err());
        // Off: everything passes, nothing is remembered.
        let mut off = RateLimiter::new(RateLimit::OFF, 1);
        assert!((0..1000u32).all(|k| off.check(t0, &k).is_ok()));
        assert_eq!(off.clients(), 0);
    }

    #[test]
    fn the_table_is_bounded_and_forgets_idle_clients_first() {
        let t0 = Instant::now();
        let limit = RateLimit {
            per_second: 1.0,
            burst: 2,
        };
        let mut l = RateLimiter::new(limit, 3);
        for k in 0..3u32 {
            assert!(l.check(t0, &k).is_ok());
        }
        // Full of clients that are not idle: a new one waits.
        assert_eq!(l.check(t0, &9), Err(Duration::from_secs(1)));
        assert_eq!(l.clients(), 3);
        // A second later their buckets have refilled: they are forgotten, the new one is in.
        assert!(l.check(t0 + Duration::from_secs(1), &9).is_ok());
        assert!(l.clients() <= 3);
    }

    #[test]
    fn ipv6_clients_count_by_their_64() {
        let a: IpAddr = "2001:db8:1:2:aaaa::1"
            .parse()
            .unwrap_or(IpAddr::from([0; 4]));
        let b: IpAddr = "2001:db8:1:2:bbbb::9"
            .parse()
            .unwrap_or(IpAddr::from([0; 4]));
        let c: IpAddr = "2001:db8:1:3::1".parse().unwrap_or(IpAddr::from([0; 4]));
        assert_eq!(client_key(a), client_key(b));
        assert_ne!(client_key(a), client_key(c));
        let mapped: IpAddr = "::ffff:192.0.2.7".parse().unwrap_or(IpAddr::from([0; 4]));
        assert_eq!(client_key(mapped), IpAddr::from([192, 0, 2, 7]));
    }
}
