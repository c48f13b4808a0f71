//! The TURN fleet under scale events, simulated (`ferry bench turn`): N relays over Z zones,
//! C users each asking [`TurnFleet::credentials`] once, then a sequence of events — a relay
//! joins, one drains, the drained one is removed, five join at once, a whole zone is lost and
//! comes back — after each of which every user asks again (as on a credential refresh or a
//! reconnect: each event's assignment is computed afresh, in the same order of users, so the
//! difference is the event's, not the order's). Per event: users whose primary relay changed, against the theoretical minimum
//! (the new relays' weighted share on a join; the users of the relays that left on a drain or a
//! loss; nobody on the removal of an already drained relay), split into moves the event forced
//! and moves it did not, and the spread of the load (coefficient of variation and the most
//! loaded relay over its share) afterwards. Deterministic: relay weights come from the seed.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use ferry_proto::NodeId;
use ferry_proto::api::TurnCredentialsRequest;
use ferry_proto::turn::TurnServerSpec;
use serde::Serialize;

use super::{TurnConfig, TurnFleet, relay_id};

/// What to simulate.
#[derive(Debug, Clone)]
pub struct TurnScaleParams {
    /// Relays at the start.
    pub servers: usize,
    /// Users.
    pub clients: usize,
    /// Zones the relays are spread over (round robin).
    pub zones: usize,
    /// Seed of the relays' weights (1 or 2).
    pub seed: u64,
}

/// One event's outcome.
#[derive(Debug, Clone, Serialize)]
pub struct TurnScaleRow {
    /// What happened.
    pub event: String,
    /// Relays taking users after it.
    pub relays_in_service: usize,
    /// Users whose primary relay changed.
    pub moved: u64,
    /// The fewest users that had to change for the fleet to follow its weights.
    pub minimum: u64,
    /// `moved / minimum` (1 = optimal; 0 when the minimum is 0).
    pub ratio: f64,
    /// Moves of users whose relay left (drains, is down, was removed).
    pub relay_left: u64,
    /// Moves of users whose relay stayed (what bounded loads add).
    pub rebalanced: u64,
    /// Coefficient of variation of the weight-normalised loads after it.
    pub cv: f64,
    /// The most loaded relay's users over its weighted share after it.
    pub max_over_share: f64,
    /// Wall time of the users' re-asking, seconds.
    pub seconds: f64,
}

fn spec(i: usize, zones: usize, seed: u64) -> TurnServerSpec {
    // A splitmix step per relay: about one relay in four weighs 2.
    let mut x = seed ^ (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^= x >> 31;
    let weight = if x.is_multiple_of(4) { 2.0 } else { 1.0 };
    TurnServerSpec {
        uri: format!(
            "turn:10.{}.{}.1:3478?transport=udp",
            (i / 250) % 256,
            i % 250
        ),
        zone: format!("z{}", i % zones.max(1)),
        isp: "any".into(),
        weight,
        family: ferry_proto::turn::Family::V4,
    }
}

struct Sim {
    fleet: TurnFleet,
    users: Vec<String>,
    primaries: Vec<NodeId>,
    specs: Vec<(NodeId, TurnServerSpec)>,
    down: BTreeSet<NodeId>,
    draining: BTreeSet<NodeId>,
    clock: u64,
}

impl Sim {
    /// Every user asks (again); the primaries they got.
    fn ask_all(&mut self) -> Result<Vec<NodeId>, ScaleError> {
        self.clock += 1;
        let mut out = Vec::with_capacity(self.users.len());
        for u in &self.users {
            let r = self.fleet.credentials(
                self.clock,
                &TurnCredentialsRequest {
                    user: u.clone(),
                    stream: None,
                    zone: None,
                    isp: None,
                    family: None,
                },
            )?;
            let uri = &r.ice_servers[0].urls[0];
            out.push(relay_id(uri));
        }
        Ok(out)
    }

    fn in_service(&self) -> Vec<&(NodeId, TurnServerSpec)> {
        self.specs
            .iter()
            .filter(|(id, _)| !self.down.contains(id) && !self.draining.contains(id))
            .collect()
    }

    /// The users the relays `ids` should hold by weight, with the relays in service now.
    fn share_of(&self, ids: &BTreeSet<NodeId>) -> u64 {
        let live = self.in_service();
        let total: f64 = live.iter().map(|(_, s)| s.weight).sum();
        let mine: f64 = live
            .iter()
            .filter(|(id, _)| ids.contains(id))
            .map(|(_, s)| s.weight)
            .sum();
        if total <= 0.0 {
            return 0;
        }
        (self.users.len() as f64 * mine / total).round() as u64
    }

    fn users_on(&self, ids: &BTreeSet<NodeId>) -> u64 {
        self.primaries.iter().filter(|p| ids.contains(*p)).count() as u64
    }

    fn max_over_share(&self) -> f64 {
        let live = self.in_service();
        let total: f64 = live.iter().map(|(_, s)| s.weight).sum();
        live.iter()
            .map(|(id, s)| {
                let share = self.users.len() as f64 * s.weight / total;
                self.fleet.load(id) as f64 / share.max(f64::MIN_POSITIVE)
            })
            .fold(0.0, f64::max)
    }

    /// The users' assignment after `event` (everyone asks afresh, in the same order as before
    /// it, so what differs is the event's doing); its row, with `minimum`.
    fn measure(&mut self, event: String, minimum: u64) -> Result<TurnScaleRow, ScaleError> {
        let t = Instant::now();
        self.fleet.reset_loads();
        let now = self.ask_all()?;
        let seconds = t.elapsed().as_secs_f64();
        let live: BTreeSet<&NodeId> = self.in_service().into_iter().map(|(id, _)| id).collect();
        let (mut moved, mut forced) = (0u64, 0u64);
        for (a, b) in self.primaries.iter().zip(&now) {
            if a != b {
                moved += 1;
                if !live.contains(a) {
                    forced += 1;
                }
            }
        }
        self.primaries = now;
        Ok(TurnScaleRow {
            event,
            relays_in_service: self.in_service().len(),
            moved,
            minimum,
            ratio: if minimum > 0 {
                moved as f64 / minimum as f64
            } else {
                0.0
            },
            relay_left: forced,
            rebalanced: moved - forced,
            cv: self.fleet.load_cv(),
            max_over_share: self.max_over_share(),
            seconds,
        })
    }

    fn add(&mut self, i: usize, zones: usize, seed: u64) -> Result<NodeId, ScaleError> {
        let s = spec(i, zones, seed);
        let id = self.fleet.add_server(s.clone())?;
        self.specs.push((id.clone(), s));
        Ok(id)
    }
}

/// Why the scenario could not run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ScaleError {
    /// Parameters out of range.
    #[error("need at least 2 relays, 1 client and 1..=relays zones")]
    Params,
    /// The fleet refused its relays.
    #[error(transparent)]
    Fleet(#[from] super::FleetError),
    /// A user got no credentials.
    #[error(transparent)]
    Credentials(#[from] super::TurnError),
}

/// Runs the scenario; `on_row` sees each row as it is measured.
pub fn simulate(
    p: &TurnScaleParams,
    mut on_row: impl FnMut(&TurnScaleRow),
) -> Result<Vec<TurnScaleRow>, ScaleError> {
    if p.servers < 2 || p.clients == 0 || p.zones == 0 || p.zones > p.servers {
        return Err(ScaleError::Params);
    }
    let specs: Vec<TurnServerSpec> = (0..p.servers).map(|i| spec(i, p.zones, p.seed)).collect();
    let fleet = TurnFleet::new(TurnConfig {
        secrets: vec![b"bench".to_vec()],
        servers: specs.clone(),
        // Nothing expires during the run: every user holds one live credential.
        ttl: Duration::from_secs(86_400),
    })?;
    let mut sim = Sim {
        fleet,
        users: (0..p.clients).map(|i| format!("user-{i}")).collect(),
        primaries: Vec::new(),
        specs: specs.into_iter().map(|s| (relay_id(&s.uri), s)).collect(),
        down: BTreeSet::new(),
        draining: BTreeSet::new(),
        clock: 0,
    };
    let mut rows = Vec::new();
    let mut emit = |r: TurnScaleRow, rows: &mut Vec<TurnScaleRow>| {
        on_row(&r);
        rows.push(r);
    };
    // Start: everyone asks once; nobody moves.
    let t = Instant::now();
    sim.primaries = sim.ask_all()?;
    emit(
        TurnScaleRow {
            event: format!("start ({} relays)", p.servers),
            relays_in_service: p.servers,
            moved: 0,
            minimum: 0,
            ratio: 0.0,
            relay_left: 0,
            rebalanced: 0,
            cv: sim.fleet.load_cv(),
            max_over_share: sim.max_over_share(),
            seconds: t.elapsed().as_secs_f64(),
        },
        &mut rows,
    );
    // A relay joins.
    let new = sim.add(p.servers, p.zones, p.seed)?;
    let min = sim.share_of(&BTreeSet::from([new]));
    emit(sim.measure("add 1 relay".into(), min)?, &mut rows);
    // One drains (scale-in, phase one): its users leave it.
    let drained = sim.specs[0].0.clone();
    let min = sim.users_on(&BTreeSet::from([drained.clone()]));
    sim.draining.insert(drained.clone());
    sim.fleet.apply_drains(&sim.draining);
    emit(sim.measure("drain 1 relay".into(), min)?, &mut rows);
    // Removed once drained (phase two): nobody should move.
    sim.fleet.remove_server(&drained);
    sim.draining.remove(&drained);
    sim.specs.retain(|(id, _)| *id != drained);
    sim.fleet.apply_drains(&sim.draining);
    emit(
        sim.measure("remove the drained relay".into(), 0)?,
        &mut rows,
    );
    // Five join at once.
    let mut joined = BTreeSet::new();
    for k in 0..5 {
        joined.insert(sim.add(p.servers + 1 + k, p.zones, p.seed)?);
    }
    let min = sim.share_of(&joined);
    emit(sim.measure("add 5 relays".into(), min)?, &mut rows);
    // A zone is lost (its relays fail their probes), then comes back.
    let zone: BTreeSet<NodeId> = sim
        .specs
        .iter()
        .filter(|(_, s)| s.zone == "z1" || p.zones == 1)
        .map(|(id, _)| id.clone())
        .collect();
    let min = sim.users_on(&zone);
    for id in &zone {
        sim.fleet.set_up(id, false);
        sim.down.insert(id.clone());
    }
    emit(
        sim.measure(format!("lose zone z1 ({} relays)", zone.len()), min)?,
        &mut rows,
    );
    for id in &zone {
        sim.fleet.set_up(id, true);
        sim.down.remove(id);
    }
    let min = sim.share_of(&zone);
    emit(sim.measure("zone z1 back".into(), min)?, &mut rows);
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scale_events_move_about_the_minimum_and_keep_loads_even() {
        let rows = simulate(
            &TurnScaleParams {
                servers: 20,
                clients: 6_000,
                zones: 3,
                seed: 7,
            },
            |_| {},
        )
        .unwrap();
        assert_eq!(rows.len(), 7);
        for r in &rows {
            eprintln!("{r:?}");
        }
        for r in &rows {
            // Within the bounded-load factor (ε = 0.25) of every relay's share.
            assert!(r.max_over_share <= 1.3, "{r:?}");
            assert!(r.cv < 0.15, "{r:?}");
            // Nothing beyond twice the minimum (and at least the minimum a leave forces).
            assert!(r.moved <= 2 * r.minimum + r.minimum / 10 + 60, "{r:?}");
        }
        let drain = &rows[2];
        assert_eq!(
            drain.relay_left, drain.minimum,
            "every user of the drained relay moved"
        );
        assert_eq!(rows[3].moved, 0, "removing a drained relay moves nobody");
        let zone = &rows[5];
        assert_eq!(zone.relay_left, zone.minimum);
    }

    #[test]
    fn bad_parameters_are_refused() {
        let p = TurnScaleParams {
            servers: 1,
            clients: 10,
            zones: 1,
            seed: 0,
        };
        assert!(simulate(&p, |_| {}).is_err());
    }
}
