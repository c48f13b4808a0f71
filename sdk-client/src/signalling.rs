//! The SDK's HTTP side (blocking, run off the async runtime): WHIP/WHEP POST with the SDK's
//! headers and one redirect followed, the ICE-restart PATCH, DELETE, the viewer's video switch,
//! the node probe and the session's server-sent events (`docs/sdk.md`).

use std::io::BufRead;
use std::time::Duration;

use crate::fsm::{Input, MigrateEvent};

/// A POST that could not be completed: the status (0 when no response came) and why.
pub(crate) type Refusal = (u16, String);

/// What a 201 told us.
#[derive(Debug, Clone)]
pub(crate) struct Created {
    pub answer: String,
    pub location: String,
    pub session: String,
    pub node: Option<String>,
    pub ticket: Option<String>,
    /// A viewer's caps URL, from the answer's `Link` (WHEP's layer extension).
    pub layer: Option<String>,
}

/// The `Link` relation of WHEP's video layer selection extension: where a viewer's caps go.
pub(crate) const LAYER_REL: &str = "urn:ietf:params:whep:ext:core:layer";

/// Timeout of a signalling request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// Timeout of an ICE-restart PATCH (a dead node refuses at once; a hung one is given up on).
const PATCH_TIMEOUT: Duration = Duration::from_secs(1);
/// Timeout of a node's health probe.
const PROBE_TIMEOUT: Duration = Duration::from_millis(500);

fn agent(timeout: Duration) -> ureq::Agent {
    ureq::Agent::config_builder()
        .timeout_global(Some(timeout))
        .http_status_as_error(false)
        .max_redirects(0)
        .build()
        .into()
}

/// `base` joined with a possibly relative `location`.
pub(crate) fn resolve(base: &str, location: &str) -> String {
    if location.starts_with("http://") || location.starts_with("https://") {
        return location.to_owned();
    }
    let origin_end = base
        .find("://")
        .and_then(|i| base[i + 3..].find('/').map(|j| i + 3 + j))
        .unwrap_or(base.len());
    if location.starts_with('/') {
        format!("{}{location}", &base[..origin_end])
    } else {
        let dir = base
            .rfind('/')
            .filter(|&i| i >= origin_end)
            .unwrap_or(base.len());
        format!("{}/{location}", &base[..dir])
    }
}

/// The scheme, host and port of `url`.
pub(crate) fn origin(url: &str) -> &str {
    let end = url
        .find("://")
        .and_then(|i| url[i + 3..].find('/').map(|j| i + 3 + j))
        .unwrap_or(url.len());
    &url[..end]
}

/// Everything a POST carries.
#[derive(Debug, Clone)]
pub(crate) struct PostRequest {
    pub url: String,
    pub offer: String,
    pub idempotency_key: String,
    pub ticket: Option<String>,
    pub failed_node: Option<String>,
    pub token: Option<String>,
}

/// POSTs an offer, following one redirect (the gateway's 307).
pub(crate) fn post_offer(req: &PostRequest) -> Result<Created, Refusal> {
    let agent = agent(REQUEST_TIMEOUT);
    let mut url = req.url.clone();
    for _ in 0..2 {
        let mut r = agent
            .post(&url)
            .header("Content-Type", "application/sdp")
            .header("Idempotency-Key", &req.idempotency_key);
        if let Some(t) = &req.ticket {
            r = r.header("Ferry-Ticket", t);
        }
        if let Some(n) = &req.failed_node {
            r = r.header("Ferry-Failed-Node", n);
        }
        if let Some(t) = &req.token {
            r = r.header("Authorization", &format!("Bearer {t}"));
        }
        let mut resp = r.send(req.offer.as_str()).map_err(|e| (0, e.to_string()))?;
        let status = resp.status().as_u16();
        let header = |name: &str| {
            resp.headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        if matches!(status, 301 | 302 | 303 | 307 | 308) {
            let to = header("location").ok_or((status, "redirect without Location".into()))?;
            url = resolve(&url, &to);
            continue;
        }
        let location = header("location");
        let session = header("ferry-session");
        let node = header("ferry-node");
        let ticket = header("ferry-ticket");
        let links: Vec<String> = resp
            .headers()
            .get_all("link")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .map(str::to_owned)
            .collect();
        let body = resp.body_mut().read_to_string().unwrap_or_default();
        if status != 201 {
            return Err((status, body.trim().to_owned()));
        }
        let location = resolve(&url, &location.ok_or((502, "201 without Location".into()))?);
        let session = session
            .or_else(|| location.rsplit('/').next().map(str::to_owned))
            .unwrap_or_default();
        let layer = links
            .iter()
            .find_map(|l| link_target(l, LAYER_REL))
            .map(|target| resolve(&location, &target));
        return Ok(Created {
            answer: body,
            location,
            session,
            node,
            ticket,
            layer,
        });
    }
    Err((508, format!("too many redirects from {}", req.url)))
}

/// PATCHes an ICE-restart fragment; the answer fragment.
pub(crate) fn patch_restart(location: &str, frag: &str) -> Result<String, Refusal> {
    let mut resp = agent(PATCH_TIMEOUT)
        .patch(location)
        .header("Content-Type", "application/trickle-ice-sdpfrag")
        .header("If-Match", "*")
        .send(frag)
        .map_err(|e| (0, e.to_string()))?;
    let status = resp.status().as_u16();
    let body = resp.body_mut().read_to_string().unwrap_or_default();
    if status == 200 {
        Ok(body)
    } else {
        Err((status, body.trim().to_owned()))
    }
}

/// DELETE on the session (best effort).
pub(crate) fn delete(location: &str) -> u16 {
    agent(REQUEST_TIMEOUT)
        .delete(location)
        .call()
        .map_or(0, |r| r.status().as_u16())
}

/// A viewer asks its node to stop or resume forwarding video.
pub(crate) fn set_video(location: &str, enabled: bool) -> u16 {
    agent(REQUEST_TIMEOUT)
        .post(&format!("{location}/video"))
        .header("Content-Type", "application/json")
        .send(format!("{{\"enabled\":{enabled}}}").as_str())
        .map_or(0, |r| r.status().as_u16())
}

/// A viewer's caps (`body`, JSON) to its node's layer URL: `Ok` on a 2xx, else the status (0
/// without an answer) and the node's reason.
pub(crate) fn set_layer(url: &str, body: &str) -> Result<(), Refusal> {
    let mut resp = agent(REQUEST_TIMEOUT)
        .post(url)
        .header("Content-Type", "application/json")
        .send(body)
        .map_err(|e| (0, e.to_string()))?;
    let status = resp.status().as_u16();
    if resp.status().is_success() {
        return Ok(());
    }
    let reason = resp.body_mut().read_to_string().unwrap_or_default();
    Err((status, reason.trim().to_owned()))
}

/// The target of the first link in one `Link` header value (RFC 8288: links separated by
/// commas, which quoted parameters may hold too) whose `rel` names `rel`, as written.
pub(crate) fn link_target(header: &str, rel: &str) -> Option<String> {
    let mut rest = header;
    while let Some(start) = rest.find('<') {
        let end = start + rest[start..].find('>')?;
        let target = &rest[start + 1..end];
        // The parameters run to the next comma outside quotes.
        let after = &rest[end + 1..];
        let mut quoted = false;
        let stop = after
            .char_indices()
            .find(|&(_, c)| {
                if c == '"' {
                    quoted = !quoted;
                }
                c == ',' && !quoted
            })
            .map_or(after.len(), |(i, _)| i);
        let params = &after[..stop];
        let rels = params.split(';').find_map(|p| {
            let (k, v) = p.split_once('=')?;
            k.trim()
                .eq_ignore_ascii_case("rel")
                .then(|| v.trim().trim_matches('"').to_owned())
        });
        if rels.is_some_and(|r| r.split_whitespace().any(|r| r.eq_ignore_ascii_case(rel))) {
            return Some(target.to_owned());
        }
        rest = &after[stop..];
    }
    None
}

/// Whether the node serving `location` answers its health check.
pub(crate) fn probe(location: &str) -> bool {
    agent(PROBE_TIMEOUT)
        .get(&format!("{}/healthz", origin(location)))
        .call()
        .is_ok_and(|r| r.status().is_success())
}

/// One server-sent event of a session that the SDK acts on.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum SessionEvent {
    /// `migrate`, `ticket`, `end`: an input of the state machine.
    Input(Input),
    /// `turn-drain`: these TURN relays drain (their URIs); a transport on one moves off it.
    TurnDrain(Vec<String>),
}

/// Reads the session's server-sent events until the stream ends; each event goes to `deliver`,
/// which returns false to stop reading (a newer subscription took over). Returns when the
/// stream ended or failed.
pub(crate) fn follow_events(location: &str, mut deliver: impl FnMut(SessionEvent) -> bool) {
    let Ok(resp) = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .new_agent()
        .get(&format!("{location}/events"))
        .header("Accept", "text/event-stream")
        .call()
    else {
        return;
    };
    if !resp.status().is_success() {
        return;
    }
    let reader = std::io::BufReader::new(resp.into_body().into_reader());
    let mut name = String::new();
    let mut data = String::new();
    for line in reader.lines() {
        let Ok(line) = line else { return };
        if line.is_empty() {
            if let Some(event) = session_event(&name, &data)
                && !deliver(event)
            {
                return;
            }
            name.clear();
            data.clear();
        } else if let Some(v) = line.strip_prefix("event:") {
            name = v.trim().to_owned();
        } else if let Some(v) = line.strip_prefix("data:") {
            data.push_str(v.trim_start());
        }
    }
}

/// What one server-sent event means to the SDK (`None` for anything else, and for a
/// `turn-drain` that names no relay).
pub(crate) fn session_event(name: &str, data: &str) -> Option<SessionEvent> {
    let v: serde_json::Value = serde_json::from_str(data).ok()?;
    let input = match name {
        "migrate" => serde_json::from_value::<MigrateEvent>(v)
            .ok()
            .map(Input::Migrate)?,
        "ticket" => Input::Ticket {
            ticket: v["ticket"].as_str()?.to_owned(),
        },
        "end" => Input::Ended {
            reason: v["reason"].as_str().unwrap_or("ended").to_owned(),
        },
        "turn-drain" => {
            let relays: Vec<String> = v["relays"]
                .as_array()?
                .iter()
                .filter_map(|r| r.as_str().filter(|r| !r.is_empty()).map(str::to_owned))
                .collect();
            return (!relays.is_empty()).then_some(SessionEvent::TurnDrain(relays));
        }
        _ => return None,
    };
    Some(SessionEvent::Input(input))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_resolve_against_where_the_request_went() {
        let at = "http://127.0.0.1:8081/whip/cam";
        assert_eq!(
            resolve(at, "/whip/cam/s1"),
            "http://127.0.0.1:8081/whip/cam/s1"
        );
        assert_eq!(resolve(at, "cam/s1"), "http://127.0.0.1:8081/whip/cam/s1");
        assert_eq!(resolve(at, "http://10.0.0.1:80/x"), "http://10.0.0.1:80/x");
        assert_eq!(
            origin("http://127.0.0.1:8081/whip/cam/s1"),
            "http://127.0.0.1:8081"
        );
        assert_eq!(origin("http://h:1"), "http://h:1");
    }

    fn input(name: &str, data: &str) -> Option<Input> {
        match session_event(name, data)? {
            SessionEvent::Input(i) => Some(i),
            SessionEvent::TurnDrain(_) => None,
        }
    }

    #[test]
    fn events_become_inputs() {
        let m = input(
            "migrate",
            r#"{"mode":"ice-restart","from":"node-a","target":"node-b","location":"http://b/whep/cam/s1","epoch":2}"#,
        );
        assert!(
            matches!(m, Some(Input::Migrate(MigrateEvent { ref target, .. })) if target == "node-b")
        );
        assert_eq!(
            input("ticket", r#"{"ticket":"t","expires":1}"#),
            Some(Input::Ticket { ticket: "t".into() })
        );
        assert_eq!(
            input("end", r#"{"reason":"deleted"}"#),
            Some(Input::Ended {
                reason: "deleted".into()
            })
        );
        assert_eq!(input("migrate", "{}"), None);
        assert_eq!(session_event("other", "{}"), None);
        assert_eq!(input("ticket", "not json"), None);
    }

    #[test]
    fn the_layer_link_is_found_among_others() {
        let events = "</whep/cam/s1/events>; rel=\"urn:ietf:params:whep:ext:core:server-sent-events\"; events=\"migrate,ticket,end\"";
        let both = format!("{events}, <http://n:1/whep/cam/s1/layer>; rel=\"{LAYER_REL}\"");
        assert_eq!(
            link_target(&both, LAYER_REL).as_deref(),
            Some("http://n:1/whep/cam/s1/layer")
        );
        assert_eq!(
            link_target(&format!("<layer>; rel={LAYER_REL}"), LAYER_REL).as_deref(),
            Some("layer")
        );
        assert_eq!(link_target(events, LAYER_REL), None);
        assert_eq!(
            link_target("<turn:h:3478>; rel=\"ice-server\"", LAYER_REL),
            None
        );
        assert_eq!(link_target("garbage", LAYER_REL), None);
        assert_eq!(
            resolve("http://n:1/whep/cam/s1", "layer"),
            "http://n:1/whep/cam/layer",
            "relative targets resolve against the session URL (as a browser does)"
        );
    }

    #[test]
    fn turn_drain_names_the_draining_relays() {
        assert_eq!(
            session_event(
                "turn-drain",
                r#"{"relays":["turn:127.0.0.1:3478?transport=udp",7,"","turn:h:3479"]}"#
            ),
            Some(SessionEvent::TurnDrain(vec![
                "turn:127.0.0.1:3478?transport=udp".into(),
                "turn:h:3479".into()
            ]))
        );
        assert_eq!(session_event("turn-drain", r#"{"relays":[]}"#), None);
        assert_eq!(session_event("turn-drain", r#"{"relays":"turn:h"}"#), None);
        assert_eq!(session_event("turn-drain", "{}"), None);
    }
}
