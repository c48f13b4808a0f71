//! DTLS-SRTP for one peer connection, on the sans-IO `dimpl` engine.
//!
//! After the handshake WebRTC uses DTLS only to key SRTP (we carry no data
//! channels), so what a migration must move is the outcome: role,
//! certificate, the verified peer fingerprint and the exported SRTP keys.
//! `dimpl`'s record layer cannot be exported; a restored transport is
//! therefore `Connected` without an engine, keeps the keys, and ignores
//! further DTLS records (an ICE restart keeps the association, RFC 8829 §5.4).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use dimpl::{Dtls, DtlsCertificate, Output};
use ferry_proto::state::DtlsState;

use crate::cert;

/// Which side of the handshake we are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DtlsRole {
    /// We send the ClientHello (`a=setup:active`).
    Client,
    /// We wait for it (`a=setup:passive`).
    Server,
}

/// Where the transport is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DtlsPhase {
    /// Handshake not finished.
    Handshaking,
    /// Keys exported; SRTP may flow.
    Connected,
    /// The handshake failed or the peer presented the wrong certificate.
    Failed,
    /// Closed by either side.
    Closed,
}

/// SRTP keys exported from the handshake (RFC 5764 §4.2), split by direction.
#[derive(Clone, PartialEq, Eq)]
pub struct SrtpKeys {
    /// The SRTP protection profile id (`0x0001`, `0x0007`, `0x0008`).
    pub profile: u16,
    /// Our master key and salt (we encrypt with these).
    pub local_key: Vec<u8>,
    /// Our master salt.
    pub local_salt: Vec<u8>,
    /// The peer's master key (we decrypt with these).
    pub remote_key: Vec<u8>,
    /// The peer's master salt.
    pub remote_salt: Vec<u8>,
}

impl std::fmt::Debug for SrtpKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SrtpKeys")
            .field("profile", &self.profile)
            .finish_non_exhaustive()
    }
}

/// Something the caller must act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DtlsEvent {
    /// Handshake done, peer verified: install SRTP.
    Connected(SrtpKeys),
    /// The peer closed the association.
    Closed,
    /// The handshake failed.
    Failed(String),
}

/// Key and salt lengths for the profiles we implement.
fn key_salt_len(profile: u16) -> Option<(usize, usize)> {
    match profile {
        0x0001 => Some((16, 14)),
        0x0007 => Some((16, 12)),
        0x0008 => Some((32, 12)),
        _ => None,
    }
}

fn profile_id(p: dimpl::SrtpProfile) -> u16 {
    match p {
        dimpl::SrtpProfile::AES128_CM_SHA1_80 => 0x0001,
        dimpl::SrtpProfile::AEAD_AES_128_GCM => 0x0007,
        dimpl::SrtpProfile::AEAD_AES_256_GCM => 0x0008,
        // A profile added to dimpl later; split_keys rejects it.
        _ => 0xffff,
    }
}

/// One DTLS association.
pub struct DtlsTransport {
    role: DtlsRole,
    cert: Arc<DtlsCertificate>,
    remote_fingerprint: Vec<u8>,
    engine: Option<Dtls>,
    phase: DtlsPhase,
    keys: Option<SrtpKeys>,
    profile: u16,
    peer_verified: bool,
    timeout: Option<Instant>,
    transmits: VecDeque<Vec<u8>>,
    events: VecDeque<DtlsEvent>,
}

impl std::fmt::Debug for DtlsTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DtlsTransport")
            .field("role", &self.role)
            .field("phase", &self.phase)
            .finish_non_exhaustive()
    }
}

/// The engine configuration Ferry uses; `seed` makes the handshake's
/// randomness reproducible in simulations.
pub fn engine_config(seed: Option<u64>) -> Arc<dimpl::Config> {
    let mut b = dimpl::Config::builder().mtu(1200);
    if let Some(seed) = seed {
        b = b.dangerously_set_rng_seed(seed);
    }
    // The builder only fails on inconsistent PSK settings, which we never set.
    Arc::new(b.build().unwrap_or_default())
}

impl DtlsTransport {
    /// A transport that will handshake in `role`, accepting only a peer
    /// certificate whose SHA-256 is `remote_fingerprint`.
    pub fn new(
        role: DtlsRole,
        cert: Arc<DtlsCertificate>,
        remote_fingerprint: Vec<u8>,
        config: Arc<dimpl::Config>,
        now: Instant,
    ) -> Self {
        let mut engine = match role {
            DtlsRole::Client => Dtls::new_12(config, (*cert).clone(), now),
            DtlsRole::Server => Dtls::new_auto(config, (*cert).clone(), now),
        };
        if role == DtlsRole::Client {
            engine.set_active(true);
        }
        Self {
            role,
            cert,
            remote_fingerprint,
            engine: Some(engine),
            phase: DtlsPhase::Handshaking,
            keys: None,
            profile: 0,
            peer_verified: false,
            timeout: None,
            transmits: VecDeque::new(),
            events: VecDeque::new(),
        }
    }

    /// Our role.
    pub fn role(&self) -> DtlsRole {
        self.role
    }

    /// Current phase.
    pub fn phase(&self) -> DtlsPhase {
        self.phase
    }

    /// Exported keys once connected.
    pub fn keys(&self) -> Option<&SrtpKeys> {
        self.keys.as_ref()
    }

    /// Our certificate's fingerprint.
    pub fn local_fingerprint(&self) -> [u8; 32] {
        cert::fingerprint(&self.cert.certificate)
    }

    /// Starts the handshake (the client sends its ClientHello).
    pub fn start(&mut self, now: Instant) {
        self.handle_timeout(now);
    }

    /// Feeds one DTLS datagram.
    pub fn handle_packet(&mut self, now: Instant, data: &[u8]) {
        let Some(engine) = self.engine.as_mut() else {
            return;
        };
        let r = engine
            .handle_timeout(now)
            .and_then(|()| engine.handle_packet(data));
        if let Err(e) = r {
            self.fail(e.to_string());
            return;
        }
        self.drain();
    }

    /// Drives retransmissions.
    pub fn handle_timeout(&mut self, now: Instant) {
        let Some(engine) = self.engine.as_mut() else {
            return;
        };
        if let Err(e) = engine.handle_timeout(now) {
            self.fail(e.to_string());
            return;
        }
        self.drain();
    }

    /// Sends close_notify (when the engine is still here) and closes.
    pub fn close(&mut self) {
        if let Some(engine) = self.engine.as_mut()
            && engine.close().is_ok()
        {
            self.drain();
        }
        self.phase = DtlsPhase::Closed;
        self.timeout = None;
    }

    /// Next record to send.
    pub fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        self.transmits.pop_front()
    }

    /// Next event.
    pub fn poll_event(&mut self) -> Option<DtlsEvent> {
        self.events.pop_front()
    }

    /// When to call [`DtlsTransport::handle_timeout`]; `None` once connected.
    pub fn poll_timeout(&self) -> Option<Instant> {
        match self.phase {
            DtlsPhase::Handshaking => self.timeout,
            _ => None,
        }
    }

    fn fail(&mut self, reason: String) {
        if matches!(self.phase, DtlsPhase::Handshaking | DtlsPhase::Connected) {
            self.phase = DtlsPhase::Failed;
            self.events.push_back(DtlsEvent::Failed(reason));
        }
        self.engine = None;
        self.timeout = None;
    }

    fn drain(&mut self) {
        let mut buf = vec![0u8; 2048];
        let mut keying: Option<(Vec<u8>, u16)> = None;
        let mut connected = false;
        let mut closed = false;
        let mut bad_cert = false;
        loop {
            let Some(engine) = self.engine.as_mut() else {
                return;
            };
            match engine.poll_output(&mut buf) {
                Output::Packet(p) => self.transmits.push_back(p.to_vec()),
                Output::BufferTooSmall { needed } => buf.resize(needed, 0),
                Output::Timeout(t) => {
                    self.timeout = Some(t);
                    break;
                }
                Output::Connected => connected = true,
                Output::PeerCert(der) => {
                    if cert::fingerprint(der).as_slice() == self.remote_fingerprint.as_slice() {
                        self.peer_verified = true;
                    } else {
                        bad_cert = true;
                    }
                }
                Output::KeyingMaterial(km, profile) => {
                    keying = Some((km.to_vec(), profile_id(profile)))
                }
                Output::CloseNotify => closed = true,
                _ => {}
            }
        }
        if bad_cert {
            self.fail("peer certificate does not match the SDP fingerprint".into());
            return;
        }
        if let Some((km, profile)) = keying {
            match self.split_keys(&km, profile) {
                Some(keys) => {
                    self.profile = keys.profile;
                    self.keys = Some(keys);
                }
                None => {
                    self.fail(format!("unsupported SRTP profile {profile:#06x}"));
                    return;
                }
            }
        }
        if connected && self.phase == DtlsPhase::Handshaking {
            match (&self.keys, self.peer_verified) {
                (Some(keys), true) => {
                    self.phase = DtlsPhase::Connected;
                    self.events.push_back(DtlsEvent::Connected(keys.clone()));
                }
                (None, _) => {
                    self.fail("peer negotiated no SRTP profile".into());
                    return;
                }
                (_, false) => {
                    self.fail("peer presented no certificate".into());
                    return;
                }
            }
        }
        if closed {
            self.phase = DtlsPhase::Closed;
            self.engine = None;
            self.events.push_back(DtlsEvent::Closed);
        }
    }

    fn split_keys(&self, km: &[u8], profile: u16) -> Option<SrtpKeys> {
        let (k, s) = key_salt_len(profile)?;
        if km.len() < 2 * (k + s) {
            return None;
        }
        let client_key = km[..k].to_vec();
        let server_key = km[k..2 * k].to_vec();
        let client_salt = km[2 * k..2 * k + s].to_vec();
        let server_salt = km[2 * k + s..2 * (k + s)].to_vec();
        Some(match self.role {
            DtlsRole::Client => SrtpKeys {
                profile,
                local_key: client_key,
                local_salt: client_salt,
                remote_key: server_key,
                remote_salt: server_salt,
            },
            DtlsRole::Server => SrtpKeys {
                profile,
                local_key: server_key,
                local_salt: server_salt,
                remote_key: client_key,
                remote_salt: client_salt,
            },
        })
    }

    /// Exports the association. SRTP keys themselves travel with the SRTP
    /// contexts; this holds the identity and handshake outcome.
    pub fn snapshot(&self) -> DtlsState {
        DtlsState {
            client: self.role == DtlsRole::Client,
            certificate_der: self.cert.certificate.clone(),
            private_key_der: self.cert.private_key.clone(),
            remote_fingerprint: self.remote_fingerprint.clone(),
            phase: match self.phase {
                DtlsPhase::Handshaking => 0,
                DtlsPhase::Connected => 1,
                DtlsPhase::Failed => 2,
                DtlsPhase::Closed => 3,
            },
            srtp_profile: u32::from(self.profile),
        }
    }

    /// Rebuilds a transport. A connected one comes back without an engine;
    /// one still handshaking restarts its handshake (the peer retransmits).
    pub fn restore(state: &DtlsState, config: Arc<dimpl::Config>, now: Instant) -> Self {
        let cert = Arc::new(DtlsCertificate {
            certificate: state.certificate_der.clone(),
            private_key: state.private_key_der.clone(),
        });
        let role = if state.client {
            DtlsRole::Client
        } else {
            DtlsRole::Server
        };
        let phase = match state.phase {
            0 => return Self::new(role, cert, state.remote_fingerprint.clone(), config, now),
            1 => DtlsPhase::Connected,
            2 => DtlsPhase::Failed,
            _ => DtlsPhase::Closed,
        };
        // No engine to build (that costs ~0.3 ms): the handshake is over.
        Self {
            role,
            cert,
            remote_fingerprint: state.remote_fingerprint.clone(),
            engine: None,
            phase,
            keys: None,
            profile: u16::try_from(state.srtp_profile).unwrap_or(0),
            peer_verified: true,
            timeout: None,
            transmits: VecDeque::new(),
            events: VecDeque::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(now: Instant) -> (DtlsTransport, DtlsTransport) {
        let a = Arc::new(cert::generate([1; 32]).unwrap());
        let b = Arc::new(cert::generate([2; 32]).unwrap());
        let fa = cert::fingerprint(&a.certificate).to_vec();
        let fb = cert::fingerprint(&b.certificate).to_vec();
        let client = DtlsTransport::new(DtlsRole::Client, a, fb, engine_config(Some(1)), now);
        let server = DtlsTransport::new(DtlsRole::Server, b, fa, engine_config(Some(2)), now);
        (client, server)
    }

    fn pump(a: &mut DtlsTransport, b: &mut DtlsTransport, now: Instant) {
        for _ in 0..20 {
            let mut moved = false;
            while let Some(p) = a.poll_transmit() {
                b.handle_packet(now, &p);
                moved = true;
            }
            while let Some(p) = b.poll_transmit() {
                a.handle_packet(now, &p);
                moved = true;
            }
            if !moved {
                break;
            }
        }
    }

    #[test]
    fn handshake_exports_mirrored_keys() {
        let now = Instant::now();
        let (mut c, mut s) = pair(now);
        c.start(now);
        s.start(now);
        pump(&mut c, &mut s, now);
        let Some(DtlsEvent::Connected(kc)) = c.poll_event() else {
            panic!("client not connected: {:?}", c.phase());
        };
        let Some(DtlsEvent::Connected(ks)) = s.poll_event() else {
            panic!("server not connected");
        };
        assert_eq!(kc.local_key, ks.remote_key);
        assert_eq!(kc.remote_salt, ks.local_salt);
        assert!(key_salt_len(kc.profile).is_some());
        let snap = c.snapshot();
        let r = DtlsTransport::restore(&snap, engine_config(None), now);
        assert_eq!(r.phase(), DtlsPhase::Connected);
        assert_eq!(r.snapshot(), snap);
    }

    #[test]
    fn wrong_fingerprint_fails() {
        let now = Instant::now();
        let a = Arc::new(cert::generate([1; 32]).unwrap());
        let b = Arc::new(cert::generate([2; 32]).unwrap());
        let fa = cert::fingerprint(&a.certificate).to_vec();
        let mut c = DtlsTransport::new(
            DtlsRole::Client,
            a,
            vec![0; 32],
            engine_config(Some(1)),
            now,
        );
        let mut s = DtlsTransport::new(DtlsRole::Server, b, fa, engine_config(Some(2)), now);
        c.start(now);
        pump(&mut c, &mut s, now);
        assert!(matches!(c.poll_event(), Some(DtlsEvent::Failed(_))));
        assert_eq!(c.phase(), DtlsPhase::Failed);
    }
}
