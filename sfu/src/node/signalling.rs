//! Signalling on the node: WHIP/WHEP offers, PATCH (trickle, ICE restart),
//! DELETE, and moving sessions in and out as snapshots.

use std::time::Instant;

use ferry_proto::state::SessionSnapshot;
use ferry_proto::{SessionId, StreamId};
use rand::RngExt;
use rand_chacha::ChaCha20Rng;

use super::Node;
use crate::dtls::DtlsTransport;
use crate::ice::{IceCredentials, IceLite};
use crate::media::egress::OutgoingTrack;
use crate::media::ingest::IncomingTrack;
use crate::node::negotiate::{self, AnswerParams, Negotiated};
use crate::node::session::{CloseReason, Role, Session};
use crate::node::signal::{PatchOutcome, SessionAnswer, SessionKind, SignalError};
use crate::sdp::{IceRestartAnswer, MediaDescription, MediaKind, SdpFrag};
use ferry_proto::api::TicketClaims;

impl Node {
    /// WHIP: creates a publisher session for `stream` from an SDP offer.
    pub fn publish(
        &mut self,
        now: Instant,
        stream: &StreamId,
        offer: &str,
    ) -> Result<SessionAnswer, SignalError> {
        self.publish_replacing(now, stream, offer, None)
    }

    /// WHIP, replacing the stream's publisher session `replacing` (its client reconnected):
    /// the stream's viewers stay and switch to the new source at its first keyframe.
    fn publish_replacing(
        &mut self,
        now: Instant,
        stream: &StreamId,
        offer: &str,
        replacing: Option<usize>,
    ) -> Result<SessionAnswer, SignalError> {
        if self
            .streams
            .get(stream)
            .and_then(|e| e.publisher)
            .is_some_and(|p| Some(p) != replacing)
        {
            return self.reject(SignalError::StreamBusy(stream.clone()));
        }
        // A client resuming its session on this node takes no new place.
        self.create(
            now,
            stream,
            replacing.is_none(),
            |params, _| negotiate::negotiate_publish(offer, params),
            |node, neg| {
                Role::Publisher(
                    neg.media
                        .iter()
                        .enumerate()
                        .filter(|(_, m)| m.accepted)
                        .map(|(i, m)| {
                            IncomingTrack::new(i, m.clone(), node.scfg.nack, node.scfg.cache)
                        })
                        .collect(),
                )
            },
        )
    }

    /// WHEP: creates a viewer session for `stream` from an SDP offer.
    pub fn view(
        &mut self,
        now: Instant,
        stream: &StreamId,
        offer: &str,
    ) -> Result<SessionAnswer, SignalError> {
        self.view_taking(now, stream, offer, true)
    }

    /// WHEP; `new_place`: whether the session counts against the node's limit (not when it
    /// replaces a viewer session held here).
    fn view_taking(
        &mut self,
        now: Instant,
        stream: &StreamId,
        offer: &str,
        new_place: bool,
    ) -> Result<SessionAnswer, SignalError> {
        let Some(sources) = self.source_lines(stream) else {
            return self.reject(SignalError::StreamNotFound(stream.clone()));
        };
        self.create(
            now,
            stream,
            new_place,
            |params, rng| negotiate::negotiate_view(offer, &sources, params, &mut || rng.random()),
            |node, neg| {
                let mut tracks = Vec::new();
                for (i, m) in neg.media.iter().enumerate().filter(|(_, m)| m.accepted) {
                    let rng = &mut node.rng;
                    // Its source's header extensions are mapped when it joins the stream.
                    tracks.push(OutgoingTrack::new(
                        i,
                        m.clone(),
                        rng.random(),
                        rng.random(),
                        rng.random(),
                    ));
                }
                Role::Viewer(tracks)
            },
        )
    }

    /// What publishing and viewing share: the node's admission (unless the session only
    /// replaces one held here: `new_place` false), our ICE credentials, the negotiation, the
    /// DTLS transport, a fresh id, and the bookkeeping.
    fn create(
        &mut self,
        now: Instant,
        stream: &StreamId,
        new_place: bool,
        negotiate: impl FnOnce(&AnswerParams<'_>, &mut ChaCha20Rng) -> Result<Negotiated, SignalError>,
        tracks: impl FnOnce(&mut Self, &Negotiated) -> Role,
    ) -> Result<SessionAnswer, SignalError> {
        if new_place && let Err(e) = self.check_capacity() {
            return self.reject(e);
        }
        let local = self.new_local_ice();
        let candidates = self.config.candidates.clone();
        let params = AnswerParams {
            local_ice: &local,
            fingerprint: &self.fingerprint,
            candidates: &candidates,
            origin_id: self.rng.random::<u32>().into(),
            stream: stream.as_str(),
        };
        let neg = match negotiate(&params, &mut self.rng) {
            Ok(n) => n,
            Err(e) => return self.reject(e),
        };
        let role = tracks(self, &neg);
        let dtls_config = self.dtls_config();
        let dtls = DtlsTransport::new(
            neg.dtls_role,
            self.cert.clone(),
            neg.remote_fingerprint,
            dtls_config,
            now,
        );
        let id = loop {
            let candidate = format!("{:016x}", self.rng.random::<u64>());
            if let Ok(id) = SessionId::new(candidate)
                && !self.by_id.contains_key(&id)
            {
                break id;
            }
        };
        for m in &neg.media {
            if let Some(reason) = &m.rejected {
                tracing::info!(session = %id, %stream, mid = %m.mid, %reason, "m-line not accepted");
            }
        }
        let session = Session::new(
            id,
            stream.clone(),
            IceLite::new(local, neg.remote_ice),
            dtls,
            neg.media,
            role,
            self.rng.random(),
            neg.answer.clone(),
            now,
            &self.scfg,
        );
        let mut session = session;
        // Behind an edge, the client reaches us through it from the start.
        session.via = self.config.edge;
        let answer = SessionAnswer {
            session: session.id.clone(),
            sdp: neg.answer,
            etag: session.etag.clone(),
            ticket: None,
        };
        let (ufrag, epoch) = (session.ice.local().ufrag.clone(), session.epoch);
        self.insert(session);
        self.send_claim(&ufrag, epoch);
        self.next_claim = now + super::tunnelling::CLAIM_REPEAT;
        self.note_claim_deadline();
        Ok(answer)
    }

    /// A WHIP/WHEP request as the HTTP layer gets it: `key` (`Idempotency-Key`) makes a retry
    /// get the same session back; `ticket` (checked by [`Node::check_ticket`], and consumed
    /// cluster-wide by the driver) resumes the session it names. The answer carries a fresh
    /// ticket.
    pub fn create_session(
        &mut self,
        now: Instant,
        kind: SessionKind,
        stream: &StreamId,
        offer: &str,
        key: Option<&str>,
        ticket: Option<&TicketClaims>,
    ) -> Result<SessionAnswer, SignalError> {
        self.last_now = now;
        if let Some(k) = key
            && let Some(a) = self.idempotent.get(now, k, kind, stream, offer)?
        {
            return Ok(a);
        }
        let mut answer = match (kind, ticket) {
            (SessionKind::Publish, None) => self.publish(now, stream, offer)?,
            (SessionKind::View, None) => self.view(now, stream, offer)?,
            (kind, Some(claims)) => self.resume(now, kind, stream, offer, claims)?,
        };
        answer.ticket = self.issue_ticket(now, &answer.session);
        if let Some(k) = key {
            self.idempotent.put(now, k, kind, stream, offer, &answer);
        }
        Ok(answer)
    }

    /// The answer an earlier request with `key` got (a retry), if any.
    pub fn idempotent_answer(
        &mut self,
        now: Instant,
        key: &str,
        kind: SessionKind,
        stream: &StreamId,
        offer: &str,
    ) -> Result<Option<SessionAnswer>, SignalError> {
        self.idempotent.get(now, key, kind, stream, offer)
    }

    /// A new transport for the session a ticket names: the session keeps its id (and, for a
    /// publisher, its viewers; they switch to the new source at its first keyframe). Where the
    /// session still exists here its old transport is closed; where it does not (its node died,
    /// or it lived elsewhere) it is made anew under its id.
    fn resume(
        &mut self,
        now: Instant,
        kind: SessionKind,
        stream: &StreamId,
        offer: &str,
        claims: &TicketClaims,
    ) -> Result<SessionAnswer, SignalError> {
        let id = claims.sid.clone();
        let old = self.by_id.get(&id).copied();
        let old_ok = old.is_none_or(|k| {
            self.sessions[k]
                .as_ref()
                .is_some_and(|s| s.kind() == kind && s.stream == *stream)
        });
        if !old_ok {
            return self.reject(SignalError::BadTicket(super::TicketError::Mismatch));
        }
        if kind == SessionKind::Publish {
            self.check_resumed_codecs(stream, offer)?;
        }
        self.consume_ticket(now, claims);
        // The transport that carries the session now: the old one, or — when the old one is
        // itself a new transport that never carried media — the one it was to replace.
        let unfinished = old.filter(|k| self.replacing.contains_key(k));
        let working = old.map(|k| self.replacing.get(&k).copied().unwrap_or(k));
        let mut answer = match kind {
            SessionKind::Publish => self.publish_replacing(now, stream, offer, working)?,
            SessionKind::View => self.view_taking(now, stream, offer, old.is_none())?,
        };
        if let Some(k) = unfinished {
            self.close(k, CloseReason::Replaced);
        }
        if let Some(key) = self.by_id.remove(&answer.session) {
            if let Some(s) = self.sessions[key].as_mut() {
                s.id = id.clone();
                s.ticket_generation = claims.r#gen.saturating_add(1);
            }
            self.by_id.insert(id.clone(), key);
            if let Some(working) = working.filter(|w| self.sessions[*w].is_some()) {
                // Make before break: the working transport goes on (a publisher's still feeds
                // the viewers) until the new one carries media; then it is closed.
                if kind == SessionKind::Publish
                    && let Some(e) = self.streams.get_mut(stream)
                {
                    e.publisher = Some(working);
                }
                self.replacing.insert(key, working);
            }
        }
        answer.session = id;
        self.out.metrics.sessions_resumed += 1;
        Ok(answer)
    }

    /// A publisher resuming on a stream with viewers must offer the codecs they negotiated,
    /// line by line: they keep their sessions, so they cannot renegotiate.
    fn check_resumed_codecs(&mut self, stream: &StreamId, offer: &str) -> Result<(), SignalError> {
        let Some(sources) = self.source_lines(stream) else {
            return Ok(());
        };
        let watched = self
            .streams
            .get(stream)
            .is_some_and(|e| !e.viewers.is_empty());
        if !watched {
            return Ok(());
        }
        let probe = IceCredentials {
            ufrag: "probe".into(),
            pwd: "probeprobeprobeprobeprobe".into(),
        };
        let params = AnswerParams {
            local_ice: &probe,
            fingerprint: &self.fingerprint,
            candidates: &[],
            origin_id: 0,
            stream: stream.as_str(),
        };
        let neg = match negotiate::negotiate_publish(offer, &params) {
            Ok(n) => n,
            Err(e) => return self.reject(e),
        };
        let same = sources
            .iter()
            .enumerate()
            .filter(|(_, a)| a.accepted)
            .all(|(i, a)| {
                neg.media
                    .get(i)
                    .is_some_and(|b| b.accepted && a.codec == b.codec && a.video == b.video)
            });
        if !same {
            return self.reject(SignalError::Unsupported(
                "a resumed publisher must send the codecs its viewers negotiated, in the same order"
                    .into(),
            ));
        }
        Ok(())
    }

    /// Turns video forwarding to viewer `id` off or on (its client's degraded mode). Video
    /// resumes at a keyframe.
    pub fn set_video(
        &mut self,
        now: Instant,
        id: &SessionId,
        enabled: bool,
    ) -> Result<(), SignalError> {
        let Some(&key) = self.by_id.get(id) else {
            return self.reject(SignalError::SessionNotFound(id.to_string()));
        };
        let Some(s) = self.sessions[key].as_mut() else {
            return self.reject(SignalError::SessionNotFound(id.to_string()));
        };
        let Role::Viewer(tracks) = &mut s.role else {
            return self.reject(SignalError::Unsupported(
                "video on/off is for viewers (a publisher stops sending instead)".into(),
            ));
        };
        if s.video_paused != enabled {
            return Ok(());
        }
        s.video_paused = !enabled;
        let mut lines = Vec::new();
        for t in tracks.iter_mut().filter(|t| t.line.video) {
            t.restart_at_keyframe();
            lines.extend(t.source().map(|l| (l, t.layer.target)));
        }
        let stream = s.stream.clone();
        if enabled {
            for (line, ssrc) in lines {
                self.request_keyframe(now, &stream, line, ssrc);
            }
        }
        Ok(())
    }

    /// PATCH: trickle (204) or ICE restart (200 with our new credentials).
    pub fn patch(
        &mut self,
        now: Instant,
        id: &SessionId,
        frag: &str,
        if_match: Option<&str>,
    ) -> Result<PatchOutcome, SignalError> {
        let Some(&key) = self.by_id.get(id) else {
            return self.reject(self.not_here(now, id));
        };
        let Some(if_match) = if_match else {
            return self.reject(SignalError::PreconditionRequired);
        };
        let frag = match SdpFrag::parse(frag) {
            Ok(f) => f,
            Err(e) => return self.reject(SignalError::BadSdp(e.to_string())),
        };
        let media_attr = |name: &str| {
            frag.media
                .iter()
                .find_map(|m| m.attr(name).and_then(|a| a.value.clone()))
        };
        let ufrag = frag
            .ice_ufrag()
            .map(str::to_owned)
            .or_else(|| media_attr("ice-ufrag"));
        let pwd = frag
            .ice_pwd()
            .map(str::to_owned)
            .or_else(|| media_attr("ice-pwd"));
        let Some(session) = self.sessions[key].as_mut() else {
            return self.reject(SignalError::SessionNotFound(id.to_string()));
        };
        let if_match = if_match.trim();
        let restart = ufrag
            .as_ref()
            .is_some_and(|u| *u != session.ice.remote().ufrag);
        if !restart {
            if if_match != session.etag && if_match != "*" {
                return self.reject(SignalError::PreconditionFailed);
            }
            return Ok(PatchOutcome::Trickled);
        }
        if if_match != "*" && if_match != session.etag {
            return self.reject(SignalError::PreconditionFailed);
        }
        let (Some(ufrag), Some(pwd)) = (ufrag, pwd) else {
            return self.reject(SignalError::BadSdp(
                "ICE restart needs a=ice-ufrag and a=ice-pwd".into(),
            ));
        };
        if ufrag.len() < 4 || pwd.len() < 22 {
            return self.reject(SignalError::BadSdp(
                "ICE ufrag must be ≥ 4 and pwd ≥ 22 characters".into(),
            ));
        }
        let local = self.new_local_ice();
        let Some(session) = self.sessions[key].as_mut() else {
            return self.reject(SignalError::SessionNotFound(id.to_string()));
        };
        self.by_ufrag.remove(&session.ice.local().ufrag);
        session
            .ice
            .restart(local.clone(), IceCredentials { ufrag, pwd });
        session.etag = crate::node::session::etag_for(&local);
        let epoch = session.epoch;
        self.by_ufrag.insert(local.ufrag.clone(), key);
        let first = session.media.iter().find(|m| m.accepted);
        let media = first.map(|m| {
            let kind = if m.video {
                MediaKind::Video
            } else {
                MediaKind::Audio
            };
            (
                MediaDescription::new(kind, 9, "UDP/TLS/RTP/SAVPF", [m.pt.to_string()]),
                m.mid.clone(),
            )
        });
        let candidates = self
            .config
            .candidates
            .iter()
            .enumerate()
            .filter_map(|(i, c)| {
                let line = format!(
                    "{} 1 udp {} {} {} typ host",
                    i + 1,
                    (126u32 << 24) | ((65535 - i as u32) << 8) | 255,
                    c.ip(),
                    c.port()
                );
                crate::sdp::Candidate::parse(&line).ok()
            })
            .collect();
        let answer = IceRestartAnswer {
            ice_lite: true,
            ice_options: Vec::new(),
            ufrag: local.ufrag,
            pwd: local.pwd,
            bundle: None,
            media,
            candidates,
            end_of_candidates: true,
        };
        let etag = session.etag.clone();
        let ufrag = answer.ufrag.clone();
        // Behind an edge, checks under the new ufrag come through it too.
        self.send_claim(&ufrag, epoch);
        Ok(PatchOutcome::Restarted {
            sdpfrag: answer.into_frag().to_string(),
            etag,
        })
    }

    /// DELETE: ends a session (and, for a publisher, its viewers).
    pub fn delete(&mut self, now: Instant, id: &SessionId) -> Result<(), SignalError> {
        self.last_now = now;
        let Some(&key) = self.by_id.get(id) else {
            return self.reject(self.not_here(now, id));
        };
        self.close(key, CloseReason::Deleted);
        Ok(())
    }

    /// Exports a session's state.
    pub fn snapshot_session(
        &self,
        now: Instant,
        id: &SessionId,
    ) -> Result<SessionSnapshot, SignalError> {
        self.session(id)
            .map(|s| s.snapshot(now))
            .ok_or_else(|| SignalError::SessionNotFound(id.to_string()))
    }

    /// Installs a session from a snapshot (taken on this or another node).
    pub fn restore_session(
        &mut self,
        now: Instant,
        snapshot: SessionSnapshot,
    ) -> Result<SessionId, SignalError> {
        let dtls_config = self.dtls_config();
        let mut session = Session::restore(&snapshot, &self.scfg, dtls_config, now)
            .map_err(|e| SignalError::Unsupported(format!("snapshot: {e}")))?;
        if self.by_id.contains_key(&session.id) {
            return self.reject(SignalError::Unsupported(format!(
                "session {} already exists",
                session.id
            )));
        }
        if let Err(e) = self.check_capacity() {
            return self.reject(e);
        }
        let entry = self.streams.get(&session.stream);
        match &mut session.role {
            Role::Publisher(_) => {
                if entry.is_some_and(|e| e.publisher.is_some()) {
                    return self.reject(SignalError::StreamBusy(session.stream.clone()));
                }
            }
            // Its source's header extensions are mapped when it joins the stream.
            Role::Viewer(_) => {}
        }
        let id = session.id.clone();
        self.insert(session);
        Ok(id)
    }
}
