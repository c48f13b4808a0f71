//! Following the migrations the scheduler ordered: once the source node took the order
//! ([`Cluster::migration_ordered`]), the cluster asks it how the migration goes
//! ([`Action::AskMigration`]) soon after and then every [`MAX_ASK`] at most, records each
//! answer ([`Cluster::migration_status`]) until the migration ends, and fails a migration whose
//! source said nothing for [`STATUS_SILENCE`], so a vanished node cannot hold a drain forever.
//! An ended migration comes out as [`Action::MigrationEnded`] (its trace ends).
//!
//! What is followed is not stored: a new leader orders the migrations in flight again (the
//! source answers a repeated order with the migration it runs) and follows them from there.

use std::time::{Duration, Instant};

use ferry_proto::MigrationId;
use ferry_proto::api::{MigrationState, MigrationView};

use super::{Action, Cluster};

/// How long a running migration may go without a status from its source node before the
/// scheduler records it as failed.
pub const STATUS_SILENCE: Duration = Duration::from_secs(10);

/// The first question after the order: most migrations end within tens of milliseconds.
const FIRST_ASK: Duration = Duration::from_millis(10);

/// The longest wait between two questions (the wait doubles up to it).
const MAX_ASK: Duration = Duration::from_millis(100);

/// A migration being followed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Follow {
    /// When to ask next (when no question is out).
    next: Instant,
    /// The wait after the next answer.
    wait: Duration,
    /// When the source last answered (or took the order).
    heard: Instant,
    /// A question is out: no other until its answer.
    asking: bool,
}

/// Whether a migration in `state` has ended.
fn ended(state: MigrationState) -> bool {
    !matches!(state, MigrationState::Planned | MigrationState::Running)
}

impl Cluster {
    /// The source node took the order of migration `id`: it is followed from `now`.
    pub fn migration_ordered(&mut self, now: Instant, id: &MigrationId) {
        if self.migrations.get(id).is_none_or(|m| ended(m.state)) {
            return;
        }
        self.follows.insert(
            id.clone(),
            Follow {
                next: now + FIRST_ASK,
                wait: FIRST_ASK * 2,
                heard: now,
                asking: false,
            },
        );
    }

    /// The order of migration `id` did not reach its source or was refused: it failed.
    pub fn migration_refused(&mut self, id: &MigrationId, reason: String) {
        self.end_followed(id, reason);
    }

    /// What the source of migration `id` answered (`None`: no answer). It may change the
    /// migration's progress, never what migration it is.
    pub fn migration_status(
        &mut self,
        now: Instant,
        id: &MigrationId,
        status: Option<MigrationView>,
    ) {
        let Some(f) = self.follows.get_mut(id) else {
            return;
        };
        f.asking = false;
        f.next = now + f.wait;
        f.wait = (f.wait * 2).min(MAX_ASK);
        let Some(view) = status else {
            return;
        };
        f.heard = now;
        let Some(mut next) = self.migrations.get(id).cloned() else {
            self.follows.remove(id);
            return;
        };
        next.state = view.state;
        next.phases_ms = view.phases_ms;
        next.blackout_ms = view.blackout_ms;
        next.bytes = view.bytes;
        next.error = view.error;
        let done = ended(next.state);
        self.update_migration(next.clone());
        if done {
            self.follows.remove(id);
            self.ended_migrations.push(next);
        }
    }

    /// The questions due, the silent sources' migrations failed, the ended ones reported.
    pub(super) fn drive_follows(&mut self, now: Instant) -> Vec<Action> {
        let mut actions = Vec::new();
        let silent: Vec<MigrationId> = self
            .follows
            .iter()
            .filter(|(_, f)| now.saturating_duration_since(f.heard) >= STATUS_SILENCE)
            .map(|(id, _)| id.clone())
            .collect();
        for id in silent {
            let source = self
                .migrations
                .get(&id)
                .map(|m| m.source.to_string())
                .unwrap_or_default();
            self.end_followed(
                &id,
                format!(
                    "source node {source} gave no status for {} s",
                    STATUS_SILENCE.as_secs()
                ),
            );
        }
        for (id, f) in &mut self.follows {
            if f.asking || f.next > now {
                continue;
            }
            let Some(m) = self.migrations.get(id) else {
                continue;
            };
            // A source no longer known has no address to ask: silence, then failure.
            let Some(http) = self.nodes.get(&m.source).map(|n| n.heartbeat.http.clone()) else {
                continue;
            };
            f.asking = true;
            actions.push(Action::AskMigration {
                id: id.clone(),
                source_http: http,
            });
        }
        actions.extend(self.ended_migrations.drain(..).map(Action::MigrationEnded));
        actions
    }

    /// When [`Cluster::drive_follows`] has something to do next.
    pub(super) fn follows_timeout(&self, now: Instant) -> Option<Instant> {
        let ended = (!self.ended_migrations.is_empty()).then_some(now);
        self.follows
            .values()
            .map(|f| {
                let silence = f.heard + STATUS_SILENCE;
                if f.asking {
                    silence
                } else {
                    silence.min(f.next)
                }
            })
            .chain(ended)
            .min()
    }

    /// Migration `id` failed for `reason`; it is no longer followed.
    fn end_followed(&mut self, id: &MigrationId, reason: String) {
        self.follows.remove(id);
        let Some(mut failed) = self.migrations.get(id).cloned() else {
            return;
        };
        failed.state = MigrationState::Failed;
        failed.error = Some(reason);
        self.update_migration(failed.clone());
        self.ended_migrations.push(failed);
    }

    /// Migrations followed now.
    pub fn migrations_followed(&self) -> usize {
        self.follows.len()
    }
}

#[cfg(test)]
mod tests {
    use ferry_proto::api::{MigrationRequest, SessionKind};
    use ferry_proto::{NodeId, SessionId};

    use super::super::tests::beat_with;
    use super::*;
    use crate::cluster::ClusterConfig;

    const MS: Duration = Duration::from_millis(1);

    /// A cluster of nodes a (with session `s1`) and b, and a migration of `s1` to b.
    fn ordered(t0: Instant) -> (Cluster, MigrationId) {
        let mut c = Cluster::new(ClusterConfig::default(), t0).unwrap();
        let (a, b) = (NodeId::new("a").unwrap(), NodeId::new("b").unwrap());
        beat_with(&mut c, t0, &a, &[("s1", SessionKind::Publish)]);
        beat_with(&mut c, t0, &b, &[]);
        let m = c
            .create_migration(&MigrationRequest {
                session: SessionId::new("s1").unwrap(),
                target: Some(b),
                mode: Default::default(),
            })
            .unwrap();
        c.migration_ordered(t0, &m.id);
        (c, m.id)
    }

    fn asks(actions: &[Action]) -> Vec<(MigrationId, String)> {
        actions
            .iter()
            .filter_map(|a| match a {
                Action::AskMigration { id, source_http } => Some((id.clone(), source_http.clone())),
                _ => None,
            })
            .collect()
    }

    fn ended_views(actions: &[Action]) -> Vec<MigrationView> {
        actions
            .iter()
            .filter_map(|a| match a {
                Action::MigrationEnded(m) => Some(m.clone()),
                _ => None,
            })
            .collect()
    }

    fn status(c: &Cluster, id: &MigrationId, state: MigrationState) -> MigrationView {
        let mut v = c.migration(id).unwrap();
        v.state = state;
        v
    }

    #[test]
    fn a_followed_migration_is_asked_after_10_ms_then_less_often_and_ends_with_its_answer() {
        let t0 = Instant::now();
        let (mut c, id) = ordered(t0);
        assert_eq!(
            c.poll_timeout(t0),
            t0 + 10 * MS,
            "the first question's time"
        );
        assert!(asks(&c.tick(t0 + 9 * MS)).is_empty());
        let a = c.tick(t0 + 10 * MS);
        assert_eq!(asks(&a), vec![(id.clone(), "http://a.test".to_owned())]);
        // One question out at a time.
        assert!(asks(&c.tick(t0 + 50 * MS)).is_empty());
        // Answers: running; the waits double (20, 40, 80) up to 100 ms.
        let mut t = t0 + 50 * MS;
        let mut waits = Vec::new();
        for _ in 0..5 {
            let running = status(&c, &id, MigrationState::Running);
            c.migration_status(t, &id, Some(running));
            assert_eq!(c.migration(&id).unwrap().state, MigrationState::Running);
            let next = c.poll_timeout(t);
            waits.push((next - t).as_millis());
            assert_eq!(asks(&c.tick(next)).len(), 1);
            t = next;
        }
        assert_eq!(waits, vec![20, 40, 80, 100, 100]);
        // No answer (the node's HTTP call failed): asked again after the wait.
        c.migration_status(t, &id, None);
        assert_eq!(asks(&c.tick(t + 100 * MS)).len(), 1);
        // Committed: recorded, ended once, no longer followed.
        let mut done = status(&c, &id, MigrationState::Committed);
        done.blackout_ms = Some(1.5);
        c.migration_status(t + 120 * MS, &id, Some(done));
        assert_eq!(c.migration(&id).unwrap().state, MigrationState::Committed);
        assert_eq!(c.migration(&id).unwrap().blackout_ms, Some(1.5));
        let a = c.tick(t + 121 * MS);
        assert_eq!(ended_views(&a).len(), 1);
        assert!(asks(&a).is_empty());
        assert_eq!(c.migrations_followed(), 0);
        assert!(ended_views(&c.tick(t + 500 * MS)).is_empty());
        // A late answer changes nothing.
        c.migration_status(
            t + 600 * MS,
            &id,
            Some(status(&c, &id, MigrationState::Running)),
        );
        assert_eq!(c.migration(&id).unwrap().state, MigrationState::Committed);
    }

    #[test]
    fn a_source_silent_for_10_s_fails_its_migration_and_frees_its_drain_slot() {
        let t0 = Instant::now();
        let (mut c, id) = ordered(t0);
        let mut t = t0;
        // Questions go out, nothing comes back (the node is gone).
        while t < t0 + STATUS_SILENCE - 200 * MS {
            let next = c.poll_timeout(t);
            let a = c.tick(next);
            assert!(ended_views(&a).is_empty(), "{:?}", next - t0);
            for (q, _) in asks(&a) {
                c.migration_status(next + 5 * MS, &q, None);
            }
            t = next + 5 * MS;
        }
        assert_eq!(c.migration(&id).unwrap().state, MigrationState::Planned);
        let a = c.tick(t0 + STATUS_SILENCE);
        let ended = ended_views(&a);
        assert_eq!(ended.len(), 1);
        assert_eq!(ended[0].state, MigrationState::Failed);
        let reason = ended[0].error.clone().unwrap();
        assert!(
            reason.contains("source node a gave no status for 10 s"),
            "{reason}"
        );
        assert_eq!(c.migration(&id).unwrap().state, MigrationState::Failed);
        assert_eq!(c.migrations_followed(), 0);
        // An answer from the silence's other side is not taken.
        c.migration_status(
            t0 + STATUS_SILENCE + MS,
            &id,
            Some(status(&c, &id, MigrationState::Committed)),
        );
        assert_eq!(c.migration(&id).unwrap().state, MigrationState::Failed);
    }

    #[test]
    fn a_refused_order_fails_at_once_and_an_ended_migration_is_not_followed() {
        let t0 = Instant::now();
        let (mut c, id) = ordered(t0);
        c.migration_refused(&id, "source refused: 409".into());
        let m = c.migration(&id).unwrap();
        assert_eq!(m.state, MigrationState::Failed);
        assert_eq!(m.error.as_deref(), Some("source refused: 409"));
        assert_eq!(ended_views(&c.tick(t0 + MS)).len(), 1);
        // Ordered again (a new leader) after it ended: nothing to follow.
        c.migration_ordered(t0 + 2 * MS, &id);
        assert_eq!(c.migrations_followed(), 0);
        assert!(asks(&c.tick(t0 + 100 * MS)).is_empty());
    }
}
