//! Migration on the node (DESIGN §4): the steps the migrator's protocol
//! drives on the source (export, WAL, freeze, then release or resume) and
//! on the target (prewarm, import, WAL, final state, then activate or
//! discard).
//!
//! A frozen or imported session is *inactive*: it sends nothing, runs no
//! timers, is not part of its stream's fan-out, and its datagrams are held.
//! The target activates only on commit, so the two nodes never send for a
//! session at the same time, and no SRTP index is used twice: a rollback
//! resumes the source exactly where it froze.

mod book;

use std::net::SocketAddr;
use std::time::Instant;

use ferry_migrator::SessionHost;
use ferry_proto::state::{SessionSnapshot, WalRecord, wal_record::Change};
use ferry_proto::{NodeId, SessionId, StreamId};

use super::Node;
use super::tunnelling::{FORWARD_GRACE, Forward, MOVED_GRACE};
use crate::cluster::relay::{self, RelayIn, RelayOut};
use crate::media::line::MediaLine;
use crate::media::munger::DropReason;
use crate::node::session::{Role, Session, WalLog};
pub(super) use book::Takeover;

/// Why a migration step failed on this node.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MigrateError {
    /// No such session here.
    #[error("no session {0} on this node")]
    UnknownSession(SessionId),
    /// The node takes no more sessions.
    #[error("node is at its session limit")]
    Full,
    /// The stream already has a publisher here.
    #[error("stream {0} already has a publisher on this node")]
    StreamBusy(StreamId),
    /// The session exists here already.
    #[error("session {0} already exists on this node")]
    Exists(SessionId),
    /// The session is not in the state the step needs.
    #[error("session {0} is {1}")]
    WrongState(SessionId, &'static str),
    /// The snapshot cannot be restored.
    #[error("snapshot refused: {0}")]
    BadSnapshot(#[from] crate::media::line::RestoreError),
    /// The target node's address is not known here.
    #[error("no address known for node {0}")]
    UnknownPeer(NodeId),
    /// The WAL capture overflowed (the migration took too long).
    #[error("WAL of session {0} overflowed")]
    WalOverflow(SessionId),
}

impl Node {
    fn key_of(&self, id: &SessionId) -> Result<usize, MigrateError> {
        self.by_id
            .get(id)
            .copied()
            .filter(|&k| self.sessions[k].is_some())
            .ok_or_else(|| MigrateError::UnknownSession(id.clone()))
    }

    fn session_mut(&mut self, key: usize) -> &mut Session {
        // `key_of` only returns occupied slots.
        self.sessions[key]
            .as_mut()
            .unwrap_or_else(|| unreachable!("checked by key_of"))
    }

    /// Where the stream comes from, as seen here.
    fn origin_of(&self, stream: &StreamId) -> Option<SocketAddr> {
        let e = self.streams.get(stream)?;
        if e.publisher.is_some() {
            return self.cluster_addr();
        }
        e.relay_in.as_ref().map(|r| r.origin)
    }

    /// Whether a publisher of `stream` has been imported and awaits activation.
    pub(super) fn importing_publisher(&self, stream: &StreamId) -> bool {
        self.imports.keys().any(|&k| {
            self.sessions[k]
                .as_ref()
                .is_some_and(|s| s.stream == *stream && matches!(s.role, Role::Publisher(_)))
        })
    }

    /// Whether a viewer of `stream` has been imported and awaits activation (its stream's
    /// relay must stay: the viewer is not attached to the stream before it activates).
    pub(super) fn importing_viewer(&self, stream: &StreamId) -> bool {
        self.imports.keys().any(|&k| {
            self.sessions[k]
                .as_ref()
                .is_some_and(|s| s.stream == *stream && matches!(s.role, Role::Viewer(_)))
        })
    }

    fn drop_import(&mut self, key: usize) {
        let Some(s) = self.sessions[key].take() else {
            return;
        };
        self.free.push(key);
        self.by_id.remove(&s.id);
        self.note_held();
        self.by_ufrag.remove(&s.ice.local().ufrag);
        self.by_addr.retain(|_, k| *k != key);
        self.held.remove(&key);
        self.imports.remove(&key);
        // A relay subscribed for it is torn down by the relay tick when no
        // viewer uses it.
    }

    /// A viewer activated here continues where the source stopped: every
    /// cached packet after the last one it forwarded is sent now.
    fn catch_up(&mut self, now: Instant, key: usize) {
        let Some(s) = self.sessions[key].as_ref() else {
            return;
        };
        let Role::Viewer(tracks) = &s.role else {
            return;
        };
        let stream = s.stream.clone();
        let todo: Vec<(usize, usize, u32, u64, u64)> = tracks
            .iter()
            .enumerate()
            .filter_map(|(ti, t)| {
                let (ssrc, seq, ts) = t.munger.last_source()?;
                Some((ti, t.source()?, ssrc, seq, ts))
            })
            .collect();
        let span = self.config.nack_cache as u64;
        for (ti, line, ssrc, last, last_ts) in todo {
            for ext in last + 1..=last + span {
                let Some((pkt, src)) = self.cached_source_packet(&stream, line, ssrc, ext, last_ts)
                else {
                    continue;
                };
                let mut buf = self.out.buffer();
                let Some(v) = self.sessions[key].as_mut() else {
                    return;
                };
                let Role::Viewer(vt) = &mut v.role else {
                    return;
                };
                match vt[ti].forward(now, &pkt, &src, &mut buf) {
                    Ok(n) => {
                        if v.send_rtp(now, &mut self.out, buf, n) {
                            self.out.metrics.rtp_forwarded += 1;
                        }
                    }
                    Err(DropReason::WaitingKeyframe | DropReason::Late) => self.out.recycle(buf),
                }
            }
        }
    }
}

/// The migrator drives a node through these steps (see
/// [`ferry_migrator::SessionHost`] for the contract).
impl SessionHost for Node {
    type Error = MigrateError;

    /// Target: whether this node can take the session; nothing is reserved.
    fn prewarm(
        &mut self,
        _now: Instant,
        session: &SessionId,
        stream: &StreamId,
        publisher: bool,
    ) -> Result<(), MigrateError> {
        if let Some(&k) = self.by_id.get(session)
            && self.sessions[k].as_ref().is_some_and(|s| s.active)
        {
            return Err(MigrateError::Exists(session.clone()));
        }
        if self.check_capacity().is_err() {
            return Err(MigrateError::Full);
        }
        if publisher
            && (self
                .streams
                .get(stream)
                .is_some_and(|e| e.publisher.is_some())
                || self.importing_publisher(stream))
        {
            return Err(MigrateError::StreamBusy(stream.clone()));
        }
        Ok(())
    }

    /// Source: the full state of a session; WAL capture starts now.
    fn export_snapshot(
        &mut self,
        now: Instant,
        id: &SessionId,
    ) -> Result<SessionSnapshot, MigrateError> {
        let key = self.key_of(id)?;
        let s = self.session_mut(key);
        if !s.active {
            return Err(MigrateError::WrongState(id.clone(), "not active"));
        }
        let mut snap = s.snapshot(now);
        s.wal = Some(WalLog::new());
        let stream = s.stream.clone();
        snap.origin = self
            .origin_of(&stream)
            .map(|a| a.to_string())
            .unwrap_or_default();
        Ok(snap)
    }

    /// Source: WAL records captured since the last call.
    fn take_wal(&mut self, id: &SessionId) -> Result<Vec<WalRecord>, MigrateError> {
        let key = self.key_of(id)?;
        let s = self.session_mut(key);
        let Some(w) = s.wal.as_mut() else {
            return Err(MigrateError::WrongState(id.clone(), "not being exported"));
        };
        if w.overflowed {
            return Err(MigrateError::WalOverflow(id.clone()));
        }
        w.bytes = 0;
        Ok(std::mem::take(&mut w.records))
    }

    /// Source: quiesces the session (it stops sending; its datagrams are
    /// held) and returns its final state without packet caches, plus the
    /// last WAL records.
    fn freeze(
        &mut self,
        now: Instant,
        id: &SessionId,
    ) -> Result<(SessionSnapshot, Vec<WalRecord>), MigrateError> {
        let key = self.key_of(id)?;
        let records = self.take_wal(id)?;
        let me = self.cluster_addr();
        let s = self.session_mut(key);
        if !s.active {
            return Err(MigrateError::WrongState(id.clone(), "frozen already"));
        }
        s.active = false;
        s.wal = None;
        let mut snap = s.snapshot(now);
        for t in &mut snap.incoming {
            for st in &mut t.streams {
                st.cache = None;
            }
        }
        // The target reaches the client through the same edge, or through
        // us (forwarding pointer) until the client moves over.
        if s.via.is_none()
            && let Some(me) = me
        {
            snap.via = me.to_string();
        }
        let stream = s.stream.clone();
        let publisher = matches!(s.role, Role::Publisher(_));
        snap.origin = self
            .origin_of(&stream)
            .map(|a| a.to_string())
            .unwrap_or_default();
        let recorded = self.recordings.records(&stream);
        if publisher && let Some(e) = self.streams.get(&stream) {
            let mut to: Vec<String> = e.relay_out.iter().map(|r| r.addr.to_string()).collect();
            // Local viewers and recordings stay here, fed by the target.
            if (!e.viewers.is_empty() || recorded)
                && let Some(me) = me
            {
                to.push(me.to_string());
            }
            snap.relay_to = to;
        }
        Ok((snap, records))
    }

    /// Source, rollback: the session runs on at ownership `epoch` from where
    /// it froze; held datagrams are processed.
    fn resume(&mut self, now: Instant, id: &SessionId, epoch: u64) -> Result<(), MigrateError> {
        let key = self.key_of(id)?;
        let s = self.session_mut(key);
        s.wal = None;
        if s.active {
            // Not frozen yet (or resumed already): nothing to undo.
            s.epoch = s.epoch.max(epoch);
            return Ok(());
        }
        s.active = true;
        s.epoch = s.epoch.max(epoch);
        let (ufrag, epoch, via) = (s.ice.local().ufrag.clone(), s.epoch, s.via);
        if via.is_some() && via == self.config.edge {
            self.send_claim(&ufrag, epoch);
        }
        self.out.metrics.migrations_rolled_back += 1;
        self.replay_held(now, key);
        self.note_deadline(key);
        Ok(())
    }

    /// Source, commit: the session is gone from here. Its held and later
    /// datagrams go to `target` (forwarding pointer); a publisher's local
    /// viewers now get the stream relayed from there.
    fn release(
        &mut self,
        now: Instant,
        id: &SessionId,
        target: &NodeId,
    ) -> Result<(), MigrateError> {
        let to = *self
            .peers
            .get(target)
            .ok_or_else(|| MigrateError::UnknownPeer(target.clone()))?;
        let key = self.key_of(id)?;
        if self.sessions[key].as_ref().is_some_and(|s| s.active) {
            return Err(MigrateError::WrongState(id.clone(), "not frozen"));
        }
        let Some(session) = self.sessions[key].take() else {
            return Err(MigrateError::UnknownSession(id.clone()));
        };
        self.free.push(key);
        self.by_id.remove(&session.id);
        self.note_held();
        self.by_ufrag.remove(&session.ice.local().ufrag);
        self.by_addr.retain(|_, k| *k != key);
        self.imports.remove(&key);
        let ufrag = session.ice.local().ufrag.clone();
        let epoch = session.epoch + 1;
        for addr in [session.ice.selected(), session.ice.candidate()]
            .into_iter()
            .flatten()
        {
            self.forward_addrs.insert(addr, ufrag.clone());
        }
        self.forwards.insert(
            ufrag.clone(),
            Forward {
                ufrag,
                target: to,
                epoch,
                expires: now + FORWARD_GRACE,
            },
        );
        let stream = session.stream.clone();
        let cache = self.config.nack_cache;
        let mut subscribed = None;
        let recorded = self.recordings.records(&stream);
        if let Some(entry) = self.streams.get_mut(&stream) {
            match session.role {
                Role::Publisher(tracks) => {
                    entry.publisher = None;
                    // The target relays to them now.
                    entry.relay_out.clear();
                    self.moved_streams
                        .insert(stream.clone(), (to, now + MOVED_GRACE));
                    if !entry.viewers.is_empty() || recorded {
                        let mut r = RelayIn::new(to, now, cache);
                        let media: Vec<_> = session.media.iter().map(MediaLine::to_state).collect();
                        let rid = relay::relay_id(&stream);
                        r.offered(rid, &media);
                        // The target relays to us at activation; refresh later.
                        r.next_refresh = now + relay::REFRESH;
                        for mut t in tracks {
                            for st in &mut t.streams {
                                let c = std::mem::replace(
                                    st.cache_mut(),
                                    crate::nack::PacketCache::new(1),
                                );
                                r.seed(t.index as u8, st.ssrc, c);
                            }
                        }
                        entry.relay_in = Some(r);
                        subscribed = Some(rid);
                    }
                }
                Role::Viewer(_) => entry.viewers.retain(|k| *k != key),
            }
            if entry.unused() {
                self.streams.remove(&stream);
            }
        }
        if let Some(rid) = subscribed {
            // The viewers left here play the stream relayed back from the target now.
            self.map_source_extensions(&stream, None);
            self.relay_ids.insert(rid, stream);
        }
        for h in self.held.remove(&key).unwrap_or_default() {
            self.forward(now, to, epoch, h.from, &h.data);
        }
        self.out.metrics.migrations_out += 1;
        self.note_relay_deadline(now);
        Ok(())
    }

    /// Target: installs a session from a snapshot, inactive. A viewer's
    /// stream is relayed in from its origin if it is not here.
    fn import_snapshot(
        &mut self,
        now: Instant,
        snapshot: SessionSnapshot,
    ) -> Result<(), MigrateError> {
        let dtls_config = self.dtls_config();
        let mut session = Session::restore(&snapshot, &self.scfg, dtls_config, now)
            .map_err(MigrateError::BadSnapshot)?;
        if let Some(&k) = self.by_id.get(&session.id) {
            if self.imports.contains_key(&k) {
                // A retried import replaces the earlier one.
                self.drop_import(k);
            } else {
                return Err(MigrateError::Exists(session.id.clone()));
            }
        }
        // Checked at the prewarm too, but nothing was reserved then.
        if self.check_capacity().is_err() {
            return Err(MigrateError::Full);
        }
        session.active = false;
        if session.via.is_some() && session.via == self.cluster_addr() {
            // It comes back to the node that forwarded for it: direct again.
            session.via = None;
        }
        let origin: Option<SocketAddr> = snapshot.origin.parse().ok();
        let stream = session.stream.clone();
        let viewer = matches!(session.role, Role::Viewer(_));
        // Where the viewer's tracks stand in the source's numbering: (source line, SSRC, ext seq).
        let forwarded: Vec<(u8, u32, u64)> = match &session.role {
            Role::Viewer(tracks) => tracks
                .iter()
                .filter_map(|t| {
                    let (ssrc, seq, _) = t.munger.last_source()?;
                    Some((u8::try_from(t.source()?).ok()?, ssrc, seq))
                })
                .collect(),
            Role::Publisher(_) => Vec::new(),
        };
        let key = self.insert_detached(session);
        self.out.metrics.sessions_created -= 1;
        self.imports.insert(
            key,
            Takeover {
                relay_to: Vec::new(),
                previous_origin: origin,
            },
        );
        if viewer
            && self.origin_of(&stream).is_none()
            && let Some(origin) = origin.filter(|o| Some(*o) != self.cluster_addr())
        {
            self.subscribe_relay_for_import(now, &stream, origin);
            // What the source sent between this subscription and the relay's first packet is
            // asked for again, from where the viewer stood.
            if let Some(r) = self
                .streams
                .get_mut(&stream)
                .and_then(|e| e.relay_in.as_mut())
            {
                for &(track, ssrc, seq) in &forwarded {
                    r.expect(now, track, ssrc, seq);
                }
            }
        }
        Ok(())
    }

    /// Target: applies WAL records (a record applied before is skipped).
    fn apply_wal(
        &mut self,
        _now: Instant,
        id: &SessionId,
        records: &[WalRecord],
    ) -> Result<(), MigrateError> {
        let key = self.key_of(id)?;
        let s = self.session_mut(key);
        if s.active {
            return Err(MigrateError::WrongState(id.clone(), "active already"));
        }
        for r in records {
            if r.position <= s.wal_applied {
                continue;
            }
            s.wal_applied = r.position;
            let (Some(Change::CachePacket(p)), Role::Publisher(tracks)) = (&r.change, &mut s.role)
            else {
                continue;
            };
            if let Some(st) = tracks
                .iter_mut()
                .find(|t| t.index == p.track as usize)
                .and_then(|t| t.streams.iter_mut().find(|st| st.ssrc == p.ssrc))
            {
                st.cache_mut().insert(p.ext_seq, &p.data);
            }
        }
        Ok(())
    }

    /// Target: replaces the imported state with the final one, keeping the
    /// caches built from snapshot and WAL. Still inactive.
    fn install_final(
        &mut self,
        now: Instant,
        final_state: SessionSnapshot,
    ) -> Result<(), MigrateError> {
        let id = SessionId::new(final_state.session_id.clone())
            .map_err(|e| MigrateError::BadSnapshot(e.into()))?;
        let key = self.key_of(&id)?;
        if !self.imports.contains_key(&key) {
            return Err(MigrateError::WrongState(id, "not imported"));
        }
        let dtls_config = self.dtls_config();
        let mut new = Session::restore(&final_state, &self.scfg, dtls_config, now)
            .map_err(MigrateError::BadSnapshot)?;
        new.active = false;
        if new.via.is_some() && new.via == self.cluster_addr() {
            new.via = None;
        }
        let Some(mut old) = self.sessions[key].take() else {
            return Err(MigrateError::UnknownSession(id));
        };
        new.wal_applied = old.wal_applied;
        if let (Role::Publisher(nt), Role::Publisher(ot)) = (&mut new.role, &mut old.role) {
            for t in nt.iter_mut() {
                let Some(o) = ot.iter_mut().find(|o| o.index == t.index) else {
                    continue;
                };
                for st in &mut t.streams {
                    if let Some(os) = o.streams.iter_mut().find(|os| os.ssrc == st.ssrc) {
                        std::mem::swap(st.cache_mut(), os.cache_mut());
                    }
                }
            }
        }
        self.by_ufrag.remove(&old.ice.local().ufrag);
        self.by_addr.retain(|_, k| *k != key);
        self.by_ufrag.insert(new.ice.local().ufrag.clone(), key);
        if let Some(a) = new.ice.selected() {
            self.by_addr.insert(a, key);
        }
        self.sessions[key] = Some(new);
        let me = self.cluster_addr();
        let t = self.imports.entry(key).or_default();
        t.relay_to = final_state
            .relay_to
            .iter()
            .filter_map(|a| a.parse().ok())
            .filter(|a| Some(*a) != me)
            .collect();
        if let Ok(o) = final_state.origin.parse() {
            t.previous_origin = Some(o);
        }
        Ok(())
    }

    /// Target, commit: the session runs here from now on at `epoch`.
    fn activate(&mut self, now: Instant, id: &SessionId, epoch: u64) -> Result<(), MigrateError> {
        let key = self.key_of(id)?;
        let Some(takeover) = self.imports.remove(&key) else {
            let s = self.session_mut(key);
            if s.active && s.epoch >= epoch {
                // Activated before: a replayed commit changes nothing.
                return Ok(());
            }
            return Err(MigrateError::WrongState(id.clone(), "not imported"));
        };
        let edge = self.config.edge;
        let s = self.session_mut(key);
        s.active = true;
        s.epoch = s.epoch.max(epoch);
        s.ice.refresh_consent(now);
        // A viewer keeps its layers a while on arrival (`adapt::allocator::MOVE_HOLD`).
        if let Role::Viewer(tracks) = &mut s.role {
            for t in tracks.iter_mut() {
                t.hold_after_move(now);
            }
        }
        s.next_report = now + crate::node::session::REPORT_INTERVAL;
        let (stream, ufrag, epoch, via) = (
            s.stream.clone(),
            s.ice.local().ufrag.clone(),
            s.epoch,
            s.via,
        );
        let publisher = matches!(s.role, Role::Publisher(_));
        // Until now we forwarded for it (it had moved away and comes back): the source's last
        // datagrams to the client went out through that pointer; from here on we own it.
        self.drop_forward(&ufrag);
        self.attach(key);
        if via.is_some() && via == edge {
            self.send_claim(&ufrag, epoch);
        }
        if publisher {
            if let Some(e) = self.streams.get_mut(&stream) {
                for &addr in &takeover.relay_to {
                    if !e.relay_out.iter().any(|r| r.addr == addr) {
                        e.relay_out.push(RelayOut::new(addr, now, 0));
                    }
                }
            }
            for addr in takeover.relay_to {
                self.send_offer_from(&stream, addr, true, takeover.previous_origin);
            }
        } else {
            self.catch_up(now, key);
        }
        self.out.metrics.migrations_in += 1;
        self.replay_held(now, key);
        self.note_deadline(key);
        self.note_relay_deadline(now);
        Ok(())
    }

    /// Target, abort: forgets an imported session.
    fn discard(&mut self, _now: Instant, id: &SessionId) {
        if let Some(&key) = self.by_id.get(id)
            && self.imports.contains_key(&key)
        {
            self.drop_import(key);
        }
    }

    /// Source, before the freeze: the target refused or went silent; WAL
    /// capture stops and what it held is dropped. The session never stopped.
    fn cancel_export(&mut self, _now: Instant, id: &SessionId) {
        if let Ok(key) = self.key_of(id) {
            self.session_mut(key).wal = None;
        }
    }
}
