//! The TURN fleet: relays (stock coturn with `use-auth-secret`) registered by configuration,
//! chosen per user by the placement core — bounded-load consistent hashing keyed by the user,
//! so a relay joining or leaving moves only the users it gains or loses, and none is filled
//! past `(1 + ε)` times its share of the allocations handed out — and credentials coturn checks
//! by itself ([`ferry_proto::turn`]).
//!
//! The load of a relay is the number of credentials whose primary it was and that have not
//! expired (each replica counts what it handed out). A draining relay gets no new users; it
//! stays a backup of nobody.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

use ferry_proto::NodeId;
use ferry_proto::api::{IceServerEntry, TurnCredentialsRequest, TurnCredentialsResponse};
use ferry_proto::turn::{Family, TurnServerSpec};

use crate::placement::{self, NodeSpec, PlacementConfig, Requirements};

/// What the fleet is configured with.
#[derive(Debug, Clone)]
pub struct TurnConfig {
    /// Shared secrets, newest first (the newest signs).
    pub secrets: Vec<Vec<u8>>,
    /// The relays.
    pub servers: Vec<TurnServerSpec>,
    /// Lifetime of a credential.
    pub ttl: Duration,
}

/// Why no credentials could be given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TurnError {
    /// The request is unusable.
    #[error("{0}")]
    BadRequest(String),
    /// No relay can take the user.
    #[error("no TURN relay can take this user: {0}")]
    NoRelay(String),
}

/// The relays and what they were handed.
#[derive(Debug)]
pub struct TurnFleet {
    config: TurnConfig,
    placement: placement::Cluster,
    /// Relay id → its spec.
    servers: BTreeMap<NodeId, TurnServerSpec>,
    draining: BTreeSet<NodeId>,
    /// Relays whose health probes fail (see [`crate::turn_probe`]).
    down: BTreeSet<NodeId>,
    /// Live credentials per relay (as primary).
    loads: BTreeMap<NodeId, u64>,
    /// When each live credential expires, in order.
    expiries: VecDeque<(u64, NodeId)>,
    /// Credentials handed out.
    pub issued: u64,
}

/// A relay's id: its URI with what ids do not allow replaced (`turn:10.0.0.1:3478` →
/// `turn-10.0.0.1-3478`).
fn relay_id(uri: &str) -> NodeId {
    let mut s: String = uri
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '-'
            }
        })
        .collect();
    s.truncate(64);
    NodeId::new(s).unwrap_or_else(|_| unreachable!("only allowed characters, at most 64"))
}

impl TurnFleet {
    /// A fleet of `config.servers`; an error names what is unusable.
    pub fn new(config: TurnConfig) -> Result<TurnFleet, String> {
        if config.secrets.is_empty() || config.secrets.iter().any(Vec::is_empty) {
            return Err("TURN needs a non-empty secret (FERRY_TURN_SECRET)".into());
        }
        if config.ttl < Duration::from_secs(60) {
            return Err("the TURN credential TTL must be at least 60 s".into());
        }
        // One placement zone for all relays: shares follow the weights across zones, and a
        // relay that joins or leaves moves only the users it takes or had. A user's zone is a
        // filter (the relay's region).
        let pcfg = PlacementConfig {
            weight_scale: config.servers.iter().map(|s| s.weight).fold(1.0, f64::max),
            ..PlacementConfig::default()
        };
        let mut placement =
            placement::Cluster::new(pcfg).map_err(|e| format!("TURN placement: {e}"))?;
        let mut servers = BTreeMap::new();
        for s in &config.servers {
            let id = relay_id(&s.uri);
            if servers.contains_key(&id) {
                return Err(format!("two TURN URIs map to the same relay id {id}"));
            }
            placement
                .upsert(spec_of(&id, s))
                .map_err(|e| format!("TURN relay {}: {e}", s.uri))?;
            servers.insert(id, s.clone());
        }
        Ok(TurnFleet {
            config,
            placement,
            servers,
            draining: BTreeSet::new(),
            down: BTreeSet::new(),
            loads: BTreeMap::new(),
            expiries: VecDeque::new(),
            issued: 0,
        })
    }

    /// The relays, with their ids, live credentials and whether they drain.
    pub fn servers(&self) -> impl Iterator<Item = (&NodeId, &TurnServerSpec, u64, bool)> {
        self.servers.iter().map(|(id, s)| {
            (
                id,
                s,
                self.loads.get(id).copied().unwrap_or(0),
                self.draining.contains(id),
            )
        })
    }

    /// Stops (or resumes) giving relay `id` to anyone. Whether it is known.
    pub fn set_draining(&mut self, id: &NodeId, draining: bool) -> bool {
        if !self.servers.contains_key(id) {
            return false;
        }
        if draining {
            self.draining.insert(id.clone());
        } else {
            self.draining.remove(id);
        }
        self.sync(id);
        true
    }

    /// Records whether relay `id` answers its health probes; whether that changed anything.
    /// A relay that does not is handed to nobody until it answers again.
    pub fn set_up(&mut self, id: &NodeId, up: bool) -> bool {
        if !self.servers.contains_key(id) {
            return false;
        }
        let changed = if up {
            self.down.remove(id)
        } else {
            self.down.insert(id.clone())
        };
        if changed {
            self.sync(id);
        }
        changed
    }

    /// Whether relay `id` answered its last health probes.
    pub fn is_up(&self, id: &NodeId) -> bool {
        !self.down.contains(id)
    }

    /// Each relay's id and URI (what the health probes reach).
    pub fn uris(&self) -> Vec<(NodeId, String)> {
        self.servers
            .iter()
            .map(|(id, s)| (id.clone(), s.uri.clone()))
            .collect()
    }

    /// A relay is in the placement when it neither drains nor is down. Back in, its slot
    /// returns (the tombstone is reused): its old users map to it again.
    fn sync(&mut self, id: &NodeId) {
        let Some(s) = self.servers.get(id) else {
            return;
        };
        if self.draining.contains(id) || self.down.contains(id) {
            self.placement.remove(id);
        } else {
            let _ = self.placement.upsert(spec_of(id, s));
        }
    }

    fn expire(&mut self, unix_s: u64) {
        while let Some((exp, _)) = self.expiries.front() {
            if *exp > unix_s {
                break;
            }
            let Some((_, id)) = self.expiries.pop_front() else {
                break;
            };
            if let Some(l) = self.loads.get_mut(&id) {
                *l = l.saturating_sub(1);
            }
        }
    }

    /// `POST /v1/turn/credentials` at `unix_s`: a primary relay and its backups for the user,
    /// with one credential for all of them.
    pub fn credentials(
        &mut self,
        unix_s: u64,
        req: &TurnCredentialsRequest,
    ) -> Result<TurnCredentialsResponse, TurnError> {
        let user = req.user.trim();
        if user.is_empty() || user.len() > 128 || user.contains(':') {
            return Err(TurnError::BadRequest(
                "user must be 1–128 characters without ':'".into(),
            ));
        }
        let mut caps = Vec::new();
        if let Some(isp) = &req.isp {
            caps.push(format!("isp:{isp}"));
        }
        match req.family.as_deref() {
            None => {}
            Some("v4") => caps.push("family:v4".into()),
            Some("v6") => caps.push("family:v6".into()),
            Some(f) => {
                return Err(TurnError::BadRequest(format!(
                    "family {f:?} is not v4 or v6"
                )));
            }
        }
        self.expire(unix_s);
        let total: u64 = self.loads.values().sum::<u64>() + 1;
        let loads = &self.loads;
        let load = |id: &NodeId| loads.get(id).copied().unwrap_or(0);
        // The user's zone first (its primary and the backups it has there), then the others.
        let anywhere = Requirements {
            capabilities: caps,
            ..Requirements::default()
        };
        let in_zone = req.zone.as_ref().and_then(|z| {
            let wanted = Requirements {
                region: Some(z.clone()),
                ..anywhere.clone()
            };
            self.placement
                .place(user.as_bytes(), &wanted, &load, total)
                .ok()
        });
        let any = self
            .placement
            .place(user.as_bytes(), &anywhere, &load, total);
        let want = 1 + self.placement.config().backups;
        let mut chosen: Vec<NodeId> = Vec::with_capacity(want);
        for p in in_zone.iter().chain(any.as_ref().ok()) {
            for id in std::iter::once(&p.node).chain(&p.backups) {
                if chosen.len() < want && !chosen.contains(id) {
                    chosen.push(id.clone());
                }
            }
        }
        let Some(primary) = chosen.first().cloned() else {
            return Err(TurnError::NoRelay(match any {
                Err(e) => e.to_string(),
                Ok(_) => "none fits".into(),
            }));
        };
        let expires = unix_s + self.config.ttl.as_secs();
        let secret = &self.config.secrets[0];
        let c = ferry_proto::turn::credential(secret, user, expires);
        let ice_servers = chosen
            .iter()
            .filter_map(|id| self.servers.get(id))
            .map(|s| IceServerEntry {
                urls: vec![s.uri.clone()],
                username: c.username.clone(),
                credential: c.password.clone(),
            })
            .collect();
        *self.loads.entry(primary.clone()).or_default() += 1;
        self.expiries.push_back((expires, primary));
        self.issued += 1;
        Ok(TurnCredentialsResponse {
            ice_servers,
            ttl: self.config.ttl.as_secs(),
        })
    }
}

/// Relay `s` as the placement core sees it: all in one zone, its zone as the region filter,
/// its ISP line and address families as capabilities.
fn spec_of(id: &NodeId, s: &TurnServerSpec) -> NodeSpec {
    let mut spec = NodeSpec::new(id.clone(), "turn", s.weight);
    spec.region = s.zone.clone();
    spec.host = s.uri.clone();
    spec.capabilities = capabilities(s);
    spec
}

fn capabilities(s: &TurnServerSpec) -> BTreeSet<String> {
    let mut caps = BTreeSet::from([format!("isp:{}", s.isp)]);
    match s.family {
        Family::V4 => {
            caps.insert("family:v4".into());
        }
        Family::V6 => {
            caps.insert("family:v6".into());
        }
        Family::Any => {
            caps.insert("family:v4".into());
            caps.insert("family:v6".into());
        }
    }
    caps
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fleet(n: usize) -> TurnFleet {
        let uris: Vec<String> = (0..n)
            .map(|i| {
                let zone = if i % 2 == 0 { "eu" } else { "us" };
                format!("turn:10.0.0.{i}:3478;zone={zone}")
            })
            .collect();
        TurnFleet::new(TurnConfig {
            secrets: vec![b"new".to_vec(), b"old".to_vec()],
            servers: ferry_proto::turn::parse_uris(&uris.join(",")).unwrap(),
            ttl: Duration::from_secs(3600),
        })
        .unwrap()
    }

    fn ask(f: &mut TurnFleet, user: &str, zone: Option<&str>) -> TurnCredentialsResponse {
        f.credentials(
            1_000,
            &TurnCredentialsRequest {
                user: user.into(),
                stream: None,
                zone: zone.map(Into::into),
                isp: None,
                family: None,
            },
        )
        .unwrap()
    }

    #[test]
    fn a_user_gets_a_primary_and_two_backups_signed_with_the_newest_secret() {
        let mut f = fleet(6);
        let r = ask(&mut f, "alice", None);
        assert_eq!(r.ice_servers.len(), 3);
        assert_eq!(r.ttl, 3600);
        let e = &r.ice_servers[0];
        assert_eq!(e.username, "4600:alice");
        assert_eq!(
            e.credential,
            ferry_proto::turn::password(b"new", "4600:alice")
        );
        let urls: BTreeSet<_> = r.ice_servers.iter().map(|e| e.urls[0].clone()).collect();
        assert_eq!(urls.len(), 3, "distinct relays");
        // In the user's zone when asked.
        let r = ask(&mut f, "bob", Some("us"));
        let primary = f
            .servers
            .values()
            .find(|s| s.uri == r.ice_servers[0].urls[0])
            .unwrap();
        assert_eq!(primary.zone, "us");
    }

    #[test]
    fn loads_stay_within_the_bound_and_a_draining_relay_gets_nobody() {
        let mut f = fleet(5);
        for i in 0..5_000 {
            ask(&mut f, &format!("user-{i}"), None);
        }
        let loads: Vec<u64> = f.servers().map(|(_, _, l, _)| l).collect();
        let max = *loads.iter().max().unwrap() as f64;
        // ε = 0.25 over an even share of 1,000.
        assert!(max <= 1_250.0 + 1.0, "{loads:?}");
        let drained = f.servers().next().unwrap().0.clone();
        assert!(f.set_draining(&drained, true));
        for i in 0..1_000 {
            let r = ask(&mut f, &format!("late-{i}"), None);
            assert!(
                r.ice_servers
                    .iter()
                    .all(|e| relay_id(&e.urls[0]) != drained),
                "a draining relay was handed out"
            );
        }
        assert!(!f.set_draining(&NodeId::new("nope").unwrap(), true));
    }

    #[test]
    fn a_relay_that_fails_its_probes_gets_nobody_until_it_answers_again() {
        let mut f = fleet(4);
        let dead = f.uris()[1].0.clone();
        let before: Vec<_> = (0..200)
            .map(|u| ask(&mut f, &format!("u{u}"), None).ice_servers[0].urls[0].clone())
            .collect();
        assert!(f.set_up(&dead, false));
        assert!(!f.set_up(&dead, false), "no change the second time");
        assert!(!f.is_up(&dead));
        let uri = f.servers.get(&dead).map(|s| s.uri.clone()).unwrap();
        for u in 0..200 {
            let r = ask(&mut f, &format!("u{u}"), None);
            assert!(
                r.ice_servers.iter().all(|s| s.urls[0] != uri),
                "a down relay was handed out"
            );
        }
        // Answering again, it gets its users back (the same slot).
        assert!(f.set_up(&dead, true));
        let after: Vec<_> = (0..200)
            .map(|u| ask(&mut f, &format!("u{u}"), None).ice_servers[0].urls[0].clone())
            .collect();
        let back = before
            .iter()
            .zip(&after)
            .filter(|(b, a)| **b == uri && **a == uri)
            .count();
        assert!(back > 0 && before.iter().filter(|b| **b == uri).count() >= back);
        // Draining and down combine: up again but draining stays out.
        assert!(f.set_draining(&dead, true));
        assert!(!f.set_up(&dead, true));
        for u in 0..50 {
            let r = ask(&mut f, &format!("v{u}"), None);
            assert!(r.ice_servers.iter().all(|s| s.urls[0] != uri));
        }
    }

    #[test]
    fn adding_a_relay_moves_only_the_users_it_takes() {
        let users: Vec<String> = (0..4_000).map(|i| format!("u{i}")).collect();
        let primaries = |f: &mut TurnFleet| -> Vec<String> {
            users
                .iter()
                .map(|u| {
                    let r = ask(f, u, None);
                    // Not counted: every user asks once per fleet, loads reset below.
                    f.loads.clear();
                    f.expiries.clear();
                    r.ice_servers[0].urls[0].clone()
                })
                .collect()
        };
        let before = primaries(&mut fleet(8));
        let after = primaries(&mut fleet(9));
        let new = "turn:10.0.0.8:3478";
        let moved = before.iter().zip(&after).filter(|(a, b)| a != b).count();
        let to_new = after.iter().filter(|a| *a == new).count();
        assert_eq!(moved, to_new, "users moved between old relays");
        // About 1/9 of the users (the new relay's share).
        assert!((300..600).contains(&moved), "{moved} of 4000 moved");
    }

    #[test]
    fn bad_requests_say_why() {
        let mut f = fleet(3);
        for (user, family) in [("", None), ("a:b", None), ("ok", Some("v5"))] {
            let r = f.credentials(
                0,
                &TurnCredentialsRequest {
                    user: user.into(),
                    stream: None,
                    zone: None,
                    isp: None,
                    family: family.map(Into::into),
                },
            );
            assert!(
                matches!(r, Err(TurnError::BadRequest(_))),
                "{user} {family:?}"
            );
        }
        assert!(
            TurnFleet::new(TurnConfig {
                secrets: vec![],
                servers: vec![],
                ttl: Duration::from_secs(600)
            })
            .is_err()
        );
    }
}
