//! [`Migrations`] over HTTP: the scheduler asks a migration's source node
//! to carry it out (`PUT {node}/v1/migrations/{id}`) and follows it there
//! (`GET {node}/v1/migrations/{id}`), with the cluster's bearer token.
//!
//! The contract the nodes implement is in `docs/scheduler.md` ("Migrations
//! on the nodes"). Calls are blocking `ureq` requests on tokio's blocking
//! pool with a short timeout, so a hung node costs one blocking thread for
//! at most [`NODE_TIMEOUT`], never the tick loop. An order carries the W3C
//! `traceparent` of the span it is sent from, so the source node's
//! migration span joins the scheduler's trace.

use std::time::Duration;

use ferry_proto::MigrationId;
use ferry_proto::api::{ApiError, MigrationView};

use crate::drain::{BoxFuture, Migrations, StartRefused};

/// Longest wait for one answer from a node.
pub const NODE_TIMEOUT: Duration = Duration::from_secs(2);

/// How much of a node's error body goes into a reason.
const MAX_REASON: usize = 300;

/// Carries migrations out by calling the source node's migration endpoints.
#[derive(Clone)]
pub struct HttpMigrations {
    agent: ureq::Agent,
    auth: String,
}

impl std::fmt::Debug for HttpMigrations {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The token stays out of logs.
        f.debug_struct("HttpMigrations").finish_non_exhaustive()
    }
}

impl HttpMigrations {
    /// A client that presents `token` (the cluster API token, the one nodes
    /// use for their heartbeats) to the nodes.
    pub fn new(token: &str) -> Self {
        let agent = ureq::Agent::config_builder()
            .timeout_global(Some(NODE_TIMEOUT))
            .http_status_as_error(false)
            .max_redirects(0)
            .build()
            .new_agent();
        Self {
            agent,
            auth: format!("Bearer {token}"),
        }
    }

    /// The same client with these TLS settings (trusted roots) for nodes that serve HTTPS.
    pub fn with_tls(mut self, tls: ureq::tls::TlsConfig) -> Self {
        self.agent = ureq::Agent::config_builder()
            .timeout_global(Some(NODE_TIMEOUT))
            .http_status_as_error(false)
            .max_redirects(0)
            .tls_config(tls)
            .build()
            .new_agent();
        self
    }
}

fn url(base: &str, id: &MigrationId) -> String {
    format!("{}/v1/migrations/{id}", base.trim_end_matches('/'))
}

/// The node's `{"error": ...}` text, else the start of its body.
fn reason_text(body: &str) -> String {
    let text = match serde_json::from_str::<ApiError>(body) {
        Ok(e) => e.error,
        Err(_) => body.trim().to_owned(),
    };
    match text.char_indices().nth(MAX_REASON) {
        Some((i, _)) => format!("{}…", &text[..i]),
        None => text,
    }
}

impl HttpMigrations {
    fn put(
        &self,
        migration: &MigrationView,
        base: &str,
        traceparent: &str,
    ) -> Result<(), StartRefused> {
        let url = url(base, &migration.id);
        let mut req = self.agent.put(&url).header("Authorization", &self.auth);
        if !traceparent.is_empty() {
            req = req.header(ferry_proto::trace::TRACEPARENT, traceparent);
        }
        let mut resp = req
            .send_json(migration)
            .map_err(|e| StartRefused::Unreachable {
                base: base.to_owned(),
                reason: e.to_string(),
            })?;
        let status = resp.status();
        if status.is_success() {
            return Ok(());
        }
        let body = resp.body_mut().read_to_string().unwrap_or_default();
        Err(StartRefused::Refused {
            status: status.as_u16(),
            reason: reason_text(&body),
        })
    }

    fn get(&self, id: &MigrationId, base: &str) -> Option<MigrationView> {
        let url = url(base, id);
        let mut resp = match self
            .agent
            .get(&url)
            .header("Authorization", &self.auth)
            .call()
        {
            Ok(r) => r,
            Err(e) => {
                tracing::debug!(%id, error = %e, "migration status from the source node");
                return None;
            }
        };
        if !resp.status().is_success() {
            tracing::debug!(%id, status = resp.status().as_u16(), "migration status from the source node");
            return None;
        }
        match resp.body_mut().read_json::<MigrationView>() {
            Ok(v) if v.id == *id => Some(v),
            Ok(v) => {
                tracing::warn!(%id, answered = %v.id, "source node answered about another migration");
                None
            }
            Err(e) => {
                tracing::warn!(%id, error = %e, "source node sent an unreadable migration view");
                None
            }
        }
    }
}

impl Migrations for HttpMigrations {
    fn start(
        &self,
        migration: MigrationView,
        source_http: String,
    ) -> BoxFuture<'_, Result<(), StartRefused>> {
        let this = self.clone();
        // The span the order is sent from (the scheduler's for this migration): the source
        // node's span joins its trace.
        let traceparent = ferry_proto::trace::trace_parent(&tracing::Span::current());
        Box::pin(async move {
            tokio::task::spawn_blocking(move || this.put(&migration, &source_http, &traceparent))
                .await
                .unwrap_or_else(|e| Err(StartRefused::Call(e.to_string())))
        })
    }

    fn status(&self, id: MigrationId, source_http: String) -> BoxFuture<'_, Option<MigrationView>> {
        let this = self.clone();
        Box::pin(async move {
            tokio::task::spawn_blocking(move || this.get(&id, &source_http))
                .await
                .ok()
                .flatten()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_come_from_the_error_field_or_the_body() {
        assert_eq!(
            reason_text(r#"{"error":"no session s1 on this node"}"#),
            "no session s1 on this node"
        );
        assert_eq!(reason_text("  bad gateway\n"), "bad gateway");
        let long = "x".repeat(1000);
        let r = reason_text(&long);
        assert_eq!(r.chars().count(), MAX_REASON + 1);
        assert!(r.ends_with('…'));
    }

    #[test]
    fn urls_join_without_double_slashes() {
        let id = MigrationId::new("m00000001").unwrap_or_else(|e| unreachable!("{e}"));
        assert_eq!(
            url("http://127.0.0.1:8081/", &id),
            "http://127.0.0.1:8081/v1/migrations/m00000001"
        );
        assert_eq!(url("http://n:1", &id), "http://n:1/v1/migrations/m00000001");
    }
}
