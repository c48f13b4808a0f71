//! The TURN fleet: relays (stock coturn with `use-auth-secret`) registered by configuration,
//! chosen per user by the placement core — bounded-load consistent hashing keyed by the user,
//! so a relay joining or leaving moves only the users it gains or loses, and none is filled
//! past `(1 + ε)` times its share of the allocations handed out — and credentials coturn checks
//! by itself ([`ferry_proto::turn`]).
//!
//! The load of a relay is the number of users whose live credential names it as primary (each
//! replica counts what it handed out): a user's new credential replaces its old one, an
//! unrenewed one counts until it expires. A draining relay gets no new users; it stays a backup
//! of nobody. A user whose primary changes is a reallocation: *needed* when its old relay left
//! (drains, is down or removed), *rebalanced* otherwise — the first is the theoretical minimum
//! of a scale event, the second what consistent hashing with bounded loads adds to it.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::time::Duration;

use ferry_proto::NodeId;
use ferry_proto::api::{IceServerEntry, TurnCredentialsRequest, TurnCredentialsResponse};
use ferry_proto::turn::{Family, TurnServerSpec};

use crate::placement::{self, NodeSpec, PlacementConfig, Requirements};

pub mod scale;

/// The heaviest relay that can be added at runtime when none configured is heavier.
pub const MAX_ADDED_WEIGHT: f64 = 10.0;

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
    /// Each user's live credential: its primary and sequence number.
    users: HashMap<String, (NodeId, u64)>,
    /// When each credential expires (with its user and sequence number), in order.
    expiries: VecDeque<(u64, String, u64)>,
    /// Credentials handed out.
    pub issued: u64,
    /// Users whose primary changed because their relay left (drain, down, removed).
    pub reallocations_needed: u64,
    /// Users whose primary changed although their relay stayed (rebalancing).
    pub reallocations_rebalanced: u64,
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

/// Why a TURN fleet could not be made, or a relay not added to it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FleetError {
    /// No secret, or an empty one.
    #[error("TURN needs a non-empty secret (FERRY_TURN_SECRET)")]
    NoSecret,
    /// Credentials would expire too soon to be used.
    #[error("the TURN credential TTL must be at least 60 s")]
    ShortTtl,
    /// The fleet's placement configuration.
    #[error("TURN placement: {0}")]
    Placement(#[from] crate::placement::ConfigError),
    /// Two URIs hash to one relay id.
    #[error("two TURN URIs map to the same relay id {0}")]
    SameId(NodeId),
    /// The placement refused a relay.
    #[error("TURN relay {0}: {1}")]
    Relay(String, crate::placement::ChangeError),
    /// The relay is in the fleet already.
    #[error("TURN relay {0} is already in the fleet")]
    InFleet(NodeId),
    /// Heavier than the fleet's scale.
    #[error("weight {weight} is above this fleet's largest, {scale}")]
    TooHeavy {
        /// The relay's weight.
        weight: f64,
        /// The fleet's largest.
        scale: f64,
    },
}

impl TurnFleet {
    /// A fleet of `config.servers`; an error names what is unusable.
    pub fn new(config: TurnConfig) -> Result<TurnFleet, FleetError> {
        if config.secrets.is_empty() || config.secrets.iter().any(Vec::is_empty) {
            return Err(FleetError::NoSecret);
        }
        if config.ttl < Duration::from_secs(60) {
            return Err(FleetError::ShortTtl);
        }
        // One placement zone for all relays: shares follow the weights across zones, and a
        // relay that joins or leaves moves only the users it takes or had. A user's zone is a
        // filter (the relay's region).
        // Relays added at runtime may weigh up to the heaviest configured one, and at least
        // up to MAX_ADDED_WEIGHT.
        let pcfg = PlacementConfig {
            weight_scale: config
                .servers
                .iter()
                .map(|s| s.weight)
                .fold(MAX_ADDED_WEIGHT, f64::max),
            ..PlacementConfig::default()
        };
        let mut placement = placement::Cluster::new(pcfg)?;
        let mut servers = BTreeMap::new();
        for s in &config.servers {
            let id = relay_id(&s.uri);
            if servers.contains_key(&id) {
                return Err(FleetError::SameId(id));
            }
            placement
                .upsert(spec_of(&id, s))
                .map_err(|e| FleetError::Relay(s.uri.to_string(), e))?;
            servers.insert(id, s.clone());
        }
        Ok(TurnFleet {
            config,
            placement,
            servers,
            draining: BTreeSet::new(),
            down: BTreeSet::new(),
            loads: BTreeMap::new(),
            users: HashMap::new(),
            expiries: VecDeque::new(),
            issued: 0,
            reallocations_needed: 0,
            reallocations_rebalanced: 0,
        })
    }

    /// Adds relay `s` (a scale-out): it ramps in — bounded loads send it the users the others
    /// cannot take, consistent hashing the users whose keys it owns.
    pub fn add_server(&mut self, s: TurnServerSpec) -> Result<NodeId, FleetError> {
        self.can_add(&s)?;
        let id = relay_id(&s.uri);
        self.placement
            .upsert(spec_of(&id, &s))
            .map_err(|e| FleetError::Relay(s.uri.to_string(), e))?;
        self.servers.insert(id.clone(), s);
        Ok(id)
    }

    /// Whether relay `s` can join: not in the fleet yet, and no heavier than the fleet's scale
    /// (the heaviest configured relay, at least [`MAX_ADDED_WEIGHT`]).
    pub fn can_add(&self, s: &TurnServerSpec) -> Result<(), FleetError> {
        let id = relay_id(&s.uri);
        if self.servers.contains_key(&id) {
            return Err(FleetError::InFleet(id));
        }
        let scale = self.placement.config().weight_scale;
        if s.weight > scale {
            return Err(FleetError::TooHeavy {
                weight: s.weight,
                scale,
            });
        }
        Ok(())
    }

    /// Removes relay `id` (scale-in, once drained); whether it was there. Its users are
    /// reallocated when they next ask.
    pub fn remove_server(&mut self, id: &NodeId) -> bool {
        if self.servers.remove(id).is_none() {
            return false;
        }
        self.placement.remove(id);
        self.draining.remove(id);
        self.down.remove(id);
        true
    }

    /// Forgets every credential handed out (loads to zero; benchmarks re-ask every user).
    pub fn reset_loads(&mut self) {
        self.loads.clear();
        self.users.clear();
        self.expiries.clear();
    }

    /// Users on relay `id` now (live credentials naming it primary).
    pub fn load(&self, id: &NodeId) -> u64 {
        self.loads.get(id).copied().unwrap_or(0)
    }

    /// Coefficient of variation (standard deviation over mean) of the weight-normalised loads
    /// of the relays that take users (0 when there are none or no users).
    pub fn load_cv(&self) -> f64 {
        let per_weight: Vec<f64> = self
            .servers
            .iter()
            .filter(|(id, _)| !self.draining.contains(*id) && !self.down.contains(*id))
            .map(|(id, s)| self.load(id) as f64 / s.weight.max(f64::MIN_POSITIVE))
            .collect();
        let n = per_weight.len() as f64;
        if per_weight.is_empty() {
            return 0.0;
        }
        let mean = per_weight.iter().sum::<f64>() / n;
        if mean <= 0.0 {
            return 0.0;
        }
        let var = per_weight.iter().map(|l| (l - mean).powi(2)).sum::<f64>() / n;
        var.sqrt() / mean
    }

    /// Makes exactly the relays in `ids` draining (the drains stored for the cluster); whether
    /// anything changed.
    pub fn apply_drains(&mut self, ids: &BTreeSet<NodeId>) -> bool {
        let wanted: BTreeSet<NodeId> = ids
            .iter()
            .filter(|id| self.servers.contains_key(*id))
            .cloned()
            .collect();
        if wanted == self.draining {
            return false;
        }
        let changed: Vec<NodeId> = wanted
            .symmetric_difference(&self.draining)
            .cloned()
            .collect();
        self.draining = wanted;
        for id in &changed {
            self.sync(id);
        }
        true
    }

    /// Adds and removes relays as `registry` says (the API's changes to the configured fleet:
    /// id → its spec, or `None` for removed); whether anything changed. Unusable specs are
    /// skipped (the API checked them before storing).
    pub fn apply_registry(&mut self, registry: &BTreeMap<String, Option<String>>) -> bool {
        let mut changed = false;
        for (id, spec) in registry {
            let Ok(id) = NodeId::new(id.clone()) else {
                continue;
            };
            match spec {
                Some(spec) if !self.servers.contains_key(&id) => {
                    if let Ok(s) = TurnServerSpec::parse(spec)
                        && relay_id(&s.uri) == id
                    {
                        changed |= self.add_server(s).is_ok();
                    }
                }
                None if self.servers.contains_key(&id) => {
                    changed |= self.remove_server(&id);
                }
                _ => {}
            }
        }
        changed
    }

    /// The id relay URI `uri` gets.
    pub fn id_of(uri: &str) -> NodeId {
        relay_id(uri)
    }

    /// Relay `id`'s URI, if it is in the fleet.
    pub fn uri_of(&self, id: &NodeId) -> Option<&str> {
        self.servers.get(id).map(|s| s.uri.as_str())
    }

    /// The URIs of the draining relays.
    pub fn draining_uris(&self) -> Vec<String> {
        self.draining
            .iter()
            .filter_map(|id| self.servers.get(id))
            .map(|s| s.uri.clone())
            .collect()
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
        while let Some((exp, _, _)) = self.expiries.front() {
            if *exp > unix_s {
                break;
            }
            let Some((_, user, seq)) = self.expiries.pop_front() else {
                break;
            };
            // Only the user's current credential counts (a newer one replaced older ones).
            if self.users.get(&user).is_some_and(|(_, s)| *s == seq)
                && let Some((id, _)) = self.users.remove(&user)
                && let Some(l) = self.loads.get_mut(&id)
            {
                *l = l.saturating_sub(1);
            }
        }
    }

    /// Whether relay `id` takes users now.
    fn in_service(&self, id: &NodeId) -> bool {
        self.servers.contains_key(id) && !self.draining.contains(id) && !self.down.contains(id)
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
        // The user's new credential replaces its old one: its old relay is not counted while
        // choosing (a user re-asking must not be pushed off its own relay by its own load).
        let previous = self.users.get(user).map(|(id, _)| id.clone());
        if let Some(id) = &previous
            && let Some(l) = self.loads.get_mut(id)
        {
            *l = l.saturating_sub(1);
        }
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
            // The old credential still counts.
            if let Some(id) = &previous {
                *self.loads.entry(id.clone()).or_default() += 1;
            }
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
        if let Some(old) = &previous
            && *old != primary
        {
            if self.in_service(old) {
                self.reallocations_rebalanced += 1;
            } else {
                self.reallocations_needed += 1;
            }
        }
        *self.loads.entry(primary.clone()).or_default() += 1;
        self.issued += 1;
        let seq = self.issued;
        self.users.insert(user.to_owned(), (primary, seq));
        self.expiries.push_back((expires, user.to_owned(), seq));
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
                    f.reset_loads();
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
