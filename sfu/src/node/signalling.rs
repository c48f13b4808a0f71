//! Signalling on the node: WHIP/WHEP offers, PATCH (trickle, ICE restart),
//! DELETE, and moving sessions in and out as snapshots.

use std::time::Instant;

use ferry_proto::state::SessionSnapshot;
use ferry_proto::{SessionId, StreamId};
use rand::RngExt;
use rand_chacha::ChaCha20Rng;

use super::Node;
use crate::dtls::DtlsTransport;
use crate::egress::OutgoingTrack;
use crate::ice::{IceCredentials, IceLite};
use crate::ingest::IncomingTrack;
use crate::negotiate::{self, AnswerParams, Negotiated};
use crate::sdp::{IceRestartAnswer, MediaDescription, MediaKind, SdpFrag};
use crate::session::{CloseReason, Role, Session};
use crate::signal::{PatchOutcome, SessionAnswer, SignalError};

impl Node {
    /// WHIP: creates a publisher session for `stream` from an SDP offer.
    pub fn publish(
        &mut self,
        now: Instant,
        stream: &StreamId,
        offer: &str,
    ) -> Result<SessionAnswer, SignalError> {
        if self
            .streams
            .get(stream)
            .is_some_and(|e| e.publisher.is_some())
        {
            return self.reject(SignalError::StreamBusy(stream.clone()));
        }
        self.create(
            now,
            stream,
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
        let Some(sources) = self.source_lines(stream) else {
            return self.reject(SignalError::StreamNotFound(stream.clone()));
        };
        self.create(
            now,
            stream,
            |params, rng| negotiate::negotiate_view(offer, &sources, params, &mut || rng.random()),
            |node, neg| {
                let mut tracks = Vec::new();
                for (i, m) in neg.media.iter().enumerate().filter(|(_, m)| m.accepted) {
                    let rng = &mut node.rng;
                    let mut t =
                        OutgoingTrack::new(i, m.clone(), rng.random(), rng.random(), rng.random());
                    if let Some(src) = m.source.and_then(|s| sources.get(s)) {
                        t.set_source_extmap(&src.extmap);
                    }
                    tracks.push(t);
                }
                Role::Viewer(tracks)
            },
        )
    }

    /// What publishing and viewing share: our ICE credentials, the
    /// negotiation, the DTLS transport, a fresh id, and the bookkeeping.
    fn create(
        &mut self,
        now: Instant,
        stream: &StreamId,
        negotiate: impl FnOnce(&AnswerParams<'_>, &mut ChaCha20Rng) -> Result<Negotiated, SignalError>,
        tracks: impl FnOnce(&mut Self, &Negotiated) -> Role,
    ) -> Result<SessionAnswer, SignalError> {
        if let Err(e) = self.check_capacity() {
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
        };
        let (ufrag, epoch) = (session.ice.local().ufrag.clone(), session.epoch);
        self.insert(session);
        self.send_claim(&ufrag, epoch);
        self.next_claim = now + super::tunnelling::CLAIM_REPEAT;
        self.note_claim_deadline();
        Ok(answer)
    }

    /// PATCH: trickle (204) or ICE restart (200 with our new credentials).
    pub fn patch(
        &mut self,
        _now: Instant,
        id: &SessionId,
        frag: &str,
        if_match: Option<&str>,
    ) -> Result<PatchOutcome, SignalError> {
        let Some(&key) = self.by_id.get(id) else {
            return self.reject(SignalError::SessionNotFound(id.to_string()));
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
        session.etag = crate::session::etag_for(&local);
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
    pub fn delete(&mut self, _now: Instant, id: &SessionId) -> Result<(), SignalError> {
        let Some(&key) = self.by_id.get(id) else {
            return self.reject(SignalError::SessionNotFound(id.to_string()));
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
        let entry = self.streams.get(&session.stream);
        match &mut session.role {
            Role::Publisher(_) => {
                if entry.is_some_and(|e| e.publisher.is_some()) {
                    return self.reject(SignalError::StreamBusy(session.stream.clone()));
                }
            }
            Role::Viewer(tracks) => {
                let publisher = entry
                    .and_then(|e| e.publisher)
                    .and_then(|k| self.sessions[k].as_ref());
                if let Some(p) = publisher {
                    for t in tracks.iter_mut() {
                        if let Some(src) = t.source().and_then(|s| p.media.get(s)) {
                            t.set_source_extmap(&src.extmap);
                        }
                    }
                }
            }
        }
        let id = session.id.clone();
        self.insert(session);
        Ok(id)
    }
}
