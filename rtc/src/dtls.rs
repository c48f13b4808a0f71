//! DTLS-SRTP for one peer connection, on the sans-IO `dimpl` engine (and, with the `openssl`
//! feature, OpenSSL for the client side of the handshake: see [`ossl`]).
//!
//! After the handshake WebRTC uses DTLS only to key SRTP (we carry no data
//! channels), so what a migration must move is the outcome: role,
//! certificate, the verified peer fingerprint and the exported SRTP keys.
//! `dimpl`'s record layer cannot be exported; a restored transport is
//! therefore `Connected` without an engine, keeps the keys, and ignores
//! further DTLS records (an ICE restart keeps the association, RFC 8829 §5.4).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use dimpl::{Dtls, DtlsCertificate, Output};
use ferry_proto::state::DtlsState;

use crate::cert;

#[cfg(feature = "openssl")]
mod ossl;

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

/// The handshake engines a node may use.
#[derive(Debug, Clone)]
pub struct DtlsConfig {
    dimpl: Arc<dimpl::Config>,
    /// Our ClientHello from OpenSSL (ECDHE-ECDSA and ECDHE-RSA suites) instead of `dimpl`
    /// (ECDHE-ECDSA only). Off where the handshake must be reproducible (simulations).
    openssl_client: bool,
}

/// The engine running the handshake.
enum Engine {
    Dimpl(Box<Dtls>),
    #[cfg(feature = "openssl")]
    Ossl(Box<ossl::OsslClient>),
}

/// One DTLS association.
pub struct DtlsTransport {
    role: DtlsRole,
    cert: Arc<DtlsCertificate>,
    remote_fingerprint: Vec<u8>,
    engine: Option<Engine>,
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

/// The MTU of our DTLS records (fits any path with ICE/TURN overhead).
const MTU: usize = 1200;

/// The first retransmission of an unanswered handshake flight; doubled on each retry. RFC 6347
/// suggests 1 s, which on a lossy path held a session `Connecting` for 3.8 s (our final flight's
/// answer lost; retries at 1 s and 3 s). libwebrtc starts at twice the ICE RTT, 50 ms to 3 s; an
/// ICE-lite node has no RTT of its own, so 200 ms: above any RTT a media session lives with.
const FLIGHT_START_RTO: Duration = Duration::from_millis(200);
/// Retries per flight: 0.2 + 0.4 + … + 25.6 s reaches past dimpl's 40 s handshake deadline, as
/// its defaults (4 retries from 1 s: 31 s) nearly did.
const FLIGHT_RETRIES: usize = 8;

/// The engine configuration Ferry uses; `seed` makes the handshake's randomness reproducible
/// in simulations (and keeps the client side on `dimpl`, whose randomness is seedable).
pub fn engine_config(seed: Option<u64>) -> Arc<DtlsConfig> {
    let mut b = dimpl::Config::builder()
        .mtu(MTU)
        .flight_start_rto(FLIGHT_START_RTO)
        .flight_retries(FLIGHT_RETRIES);
    if let Some(seed) = seed {
        b = b.dangerously_set_rng_seed(seed);
    }
    Arc::new(DtlsConfig {
        // The builder only fails on inconsistent PSK settings, which we never set.
        dimpl: Arc::new(b.build().unwrap_or_default()),
        openssl_client: cfg!(feature = "openssl") && seed.is_none(),
    })
}

impl DtlsConfig {
    /// Whether our ClientHello comes from OpenSSL (ECDHE-RSA peers accepted).
    pub fn openssl_client(&self) -> bool {
        self.openssl_client
    }
}

impl DtlsTransport {
    /// A transport that will handshake in `role`, accepting only a peer
    /// certificate whose SHA-256 is `remote_fingerprint`.
    pub fn new(
        role: DtlsRole,
        cert: Arc<DtlsCertificate>,
        remote_fingerprint: Vec<u8>,
        config: Arc<DtlsConfig>,
        now: Instant,
    ) -> Self {
        let mut t = Self {
            role,
            cert,
            remote_fingerprint,
            engine: None,
            phase: DtlsPhase::Handshaking,
            keys: None,
            profile: 0,
            peer_verified: false,
            timeout: None,
            transmits: VecDeque::new(),
            events: VecDeque::new(),
        };
        #[cfg(feature = "openssl")]
        if role == DtlsRole::Client && config.openssl_client {
            match ossl::OsslClient::new(&t.cert.certificate, &t.cert.private_key, MTU as u32) {
                Ok(c) => t.engine = Some(Engine::Ossl(Box::new(c))),
                Err(e) => t.fail(e.to_string()),
            }
            return t;
        }
        let config = config.dimpl.clone();
        let mut engine = match role {
            DtlsRole::Client => Dtls::new_12(config, (*t.cert).clone(), now),
            DtlsRole::Server => Dtls::new_auto(config, (*t.cert).clone(), now),
        };
        if role == DtlsRole::Client {
            engine.set_active(true);
        }
        t.engine = Some(Engine::Dimpl(Box::new(engine)));
        t
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
        match self.engine.as_mut() {
            None => {}
            Some(Engine::Dimpl(engine)) => {
                let r = engine
                    .handle_timeout(now)
                    .and_then(|()| engine.handle_packet(data));
                if let Err(e) = r {
                    self.fail(e.to_string());
                    return;
                }
                self.drain();
            }
            #[cfg(feature = "openssl")]
            Some(Engine::Ossl(_)) => self.step_ossl(now, Some(data)),
        }
    }

    /// Drives retransmissions.
    pub fn handle_timeout(&mut self, now: Instant) {
        match self.engine.as_mut() {
            None => {}
            Some(Engine::Dimpl(engine)) => {
                if let Err(e) = engine.handle_timeout(now) {
                    self.fail(e.to_string());
                    return;
                }
                self.drain();
            }
            #[cfg(feature = "openssl")]
            Some(Engine::Ossl(_)) => self.step_ossl(now, None),
        }
    }

    /// Sends close_notify (when the engine is still here) and closes.
    pub fn close(&mut self) {
        match self.engine.as_mut() {
            Some(Engine::Dimpl(engine)) => {
                let closed = engine.close().is_ok();
                if closed {
                    self.drain();
                }
            }
            #[cfg(feature = "openssl")]
            Some(Engine::Ossl(engine)) => {
                engine.close();
                while let Some(p) = engine.poll_transmit() {
                    self.transmits.push_back(p);
                }
            }
            _ => {}
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

    /// Advances the OpenSSL client: its handshake (and retransmissions, which OpenSSL times
    /// itself: we look again every [`OSSL_POLL`] while it runs), then alerts.
    #[cfg(feature = "openssl")]
    fn step_ossl(&mut self, now: Instant, input: Option<&[u8]>) {
        const OSSL_POLL: std::time::Duration = std::time::Duration::from_millis(50);
        let Some(Engine::Ossl(engine)) = self.engine.as_mut() else {
            return;
        };
        let step = engine.step(input);
        while let Some(p) = engine.poll_transmit() {
            self.transmits.push_back(p);
        }
        let step = match step {
            Ok(step) => step,
            Err(e) => {
                self.fail(e.to_string());
                return;
            }
        };
        self.timeout = (self.phase == DtlsPhase::Handshaking).then(|| now + OSSL_POLL);
        if let Some(done) = step.done {
            if cert::fingerprint(&done.peer_der).as_slice() != self.remote_fingerprint.as_slice() {
                self.fail("peer certificate does not match the SDP fingerprint".into());
                return;
            }
            self.peer_verified = true;
            let Some(keys) = self.split_keys(&done.keying, done.profile) else {
                self.fail(format!("unsupported SRTP profile {:#06x}", done.profile));
                return;
            };
            self.profile = keys.profile;
            self.keys = Some(keys.clone());
            self.phase = DtlsPhase::Connected;
            self.timeout = None;
            self.events.push_back(DtlsEvent::Connected(keys));
        }
        if step.closed {
            self.phase = DtlsPhase::Closed;
            self.engine = None;
            self.events.push_back(DtlsEvent::Closed);
        }
    }

    fn drain(&mut self) {
        let mut buf = vec![0u8; 2048];
        let mut keying: Option<(Vec<u8>, u16)> = None;
        let mut connected = false;
        let mut closed = false;
        let mut bad_cert = false;
        loop {
            let Some(Engine::Dimpl(engine)) = self.engine.as_mut() else {
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
    pub fn restore(state: &DtlsState, config: Arc<DtlsConfig>, now: Instant) -> Self {
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
        pair_with(now, engine_config(Some(1)))
    }

    /// A client on `client_config` and a (dimpl) server.
    fn pair_with(now: Instant, client_config: Arc<DtlsConfig>) -> (DtlsTransport, DtlsTransport) {
        let a = Arc::new(cert::generate([1; 32]).unwrap());
        let b = Arc::new(cert::generate([2; 32]).unwrap());
        let fa = cert::fingerprint(&a.certificate).to_vec();
        let fb = cert::fingerprint(&b.certificate).to_vec();
        let client = DtlsTransport::new(DtlsRole::Client, a, fb, client_config, now);
        let server = DtlsTransport::new(DtlsRole::Server, b, fa, engine_config(Some(2)), now);
        (client, server)
    }

    /// Runs the handshake to the end: both sides' keys.
    fn handshake(
        c: &mut DtlsTransport,
        s: &mut DtlsTransport,
        now: Instant,
    ) -> (SrtpKeys, SrtpKeys) {
        c.start(now);
        s.start(now);
        pump(c, s, now);
        let Some(DtlsEvent::Connected(kc)) = c.poll_event() else {
            panic!("client not connected: {:?}", c.phase());
        };
        let Some(DtlsEvent::Connected(ks)) = s.poll_event() else {
            panic!("server not connected: {:?}", s.phase());
        };
        (kc, ks)
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
        let (kc, ks) = handshake(&mut c, &mut s, now);
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

    /// An OpenSSL DTLS server with an RSA-2048 certificate, as GStreamer's webrtcbin is.
    #[cfg(feature = "openssl")]
    mod rsa_peer {
        use super::*;
        use openssl::asn1::Asn1Time;
        use openssl::hash::MessageDigest;
        use openssl::pkey::PKey;
        use openssl::rsa::Rsa;
        use openssl::ssl::{Ssl, SslContext, SslMethod, SslStream, SslVerifyMode};
        use openssl::x509::{X509, X509NameBuilder};
        use std::io::{Read, Write};

        #[derive(Default)]
        pub struct Wire {
            pub incoming: VecDeque<Vec<u8>>,
            pub outgoing: VecDeque<Vec<u8>>,
        }
        impl Read for Wire {
            fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
                let d = self
                    .incoming
                    .pop_front()
                    .ok_or(std::io::ErrorKind::WouldBlock)?;
                buf[..d.len()].copy_from_slice(&d);
                Ok(d.len())
            }
        }
        impl Write for Wire {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                self.outgoing.push_back(buf.to_vec());
                Ok(buf.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }

        /// The server and its certificate's DER.
        pub fn server(ciphers: &str) -> (SslStream<Wire>, Vec<u8>) {
            let key = PKey::from_rsa(Rsa::generate(2048).unwrap()).unwrap();
            let mut name = X509NameBuilder::new().unwrap();
            name.append_entry_by_text("CN", "gstreamer").unwrap();
            let name = name.build();
            let mut b = X509::builder().unwrap();
            b.set_version(2).unwrap();
            b.set_subject_name(&name).unwrap();
            b.set_issuer_name(&name).unwrap();
            b.set_pubkey(&key).unwrap();
            b.set_not_before(&Asn1Time::days_from_now(0).unwrap())
                .unwrap();
            b.set_not_after(&Asn1Time::days_from_now(1).unwrap())
                .unwrap();
            b.sign(&key, MessageDigest::sha256()).unwrap();
            let cert = b.build();
            let mut ctx = SslContext::builder(SslMethod::dtls()).unwrap();
            ctx.set_certificate(&cert).unwrap();
            ctx.set_private_key(&key).unwrap();
            ctx.set_cipher_list(ciphers).unwrap();
            ctx.set_tlsext_use_srtp("SRTP_AES128_CM_SHA1_80").unwrap();
            ctx.set_verify_callback(
                SslVerifyMode::PEER | SslVerifyMode::FAIL_IF_NO_PEER_CERT,
                |_, _| true,
            );
            let mut ssl = Ssl::new(&ctx.build()).unwrap();
            ssl.set_accept_state();
            (
                SslStream::new(ssl, Wire::default()).unwrap(),
                cert.to_der().unwrap(),
            )
        }
    }

    /// Moves datagrams between our client and an OpenSSL server for `rounds`; whether the
    /// server finished its handshake.
    #[cfg(feature = "openssl")]
    fn pump_ossl(
        c: &mut DtlsTransport,
        server: &mut openssl::ssl::SslStream<rsa_peer::Wire>,
        now: Instant,
        rounds: usize,
    ) -> bool {
        let mut done = false;
        for _ in 0..rounds {
            while let Some(p) = c.poll_transmit() {
                server.get_mut().incoming.push_back(p);
            }
            if !done {
                done = server.do_handshake().is_ok();
            }
            while let Some(p) = server.get_mut().outgoing.pop_front() {
                c.handle_packet(now, &p);
            }
        }
        done
    }

    /// GStreamer's webrtcbin answers as the DTLS server with an RSA certificate: our ClientHello
    /// (OpenSSL) offers ECDHE-RSA, the keys match the server's, and its certificate is checked
    /// against the SDP fingerprint.
    #[cfg(feature = "openssl")]
    #[test]
    fn the_client_handshakes_with_an_rsa_certificate_server() {
        let now = Instant::now();
        let (mut server, server_der) = rsa_peer::server("ECDHE-RSA-AES128-GCM-SHA256");
        let ours = Arc::new(cert::generate([3; 32]).unwrap());
        let fp = cert::fingerprint(&server_der).to_vec();
        let mut c =
            DtlsTransport::new(DtlsRole::Client, ours.clone(), fp, engine_config(None), now);
        c.start(now);
        let done = pump_ossl(&mut c, &mut server, now, 10);
        assert!(done, "server side of the handshake did not finish");
        let Some(DtlsEvent::Connected(keys)) = c.poll_event() else {
            panic!("client not connected: {:?}", c.phase());
        };
        assert_eq!(keys.profile, 0x0001);
        let mut km = [0u8; 60];
        server
            .ssl()
            .export_keying_material(&mut km, "EXTRACTOR-dtls_srtp", None)
            .unwrap();
        assert_eq!(keys.local_key, km[..16]);
        assert_eq!(keys.remote_key, km[16..32]);
        assert_eq!(keys.local_salt, km[32..46]);
        assert_eq!(keys.remote_salt, km[46..60]);
        assert_eq!(
            server.ssl().current_cipher().map(|c| c.name()),
            Some("ECDHE-RSA-AES128-GCM-SHA256")
        );
        // The server saw our certificate (ECDSA) for the fingerprint check on its side.
        let peer = server.ssl().peer_certificate().unwrap().to_der().unwrap();
        assert_eq!(peer, ours.certificate);

        // A server certificate other than the fingerprint says: failed, with the reason.
        let (mut server, _) = rsa_peer::server("ECDHE-RSA-AES128-GCM-SHA256");
        let mut c = DtlsTransport::new(
            DtlsRole::Client,
            ours,
            vec![7; 32],
            engine_config(None),
            now,
        );
        c.start(now);
        pump_ossl(&mut c, &mut server, now, 10);
        assert_eq!(
            c.poll_event(),
            Some(DtlsEvent::Failed(
                "peer certificate does not match the SDP fingerprint".into()
            ))
        );
    }

    /// A server that shares no suite ends the handshake with an alert, whose reason is what the
    /// failure says (logged by the node).
    #[cfg(feature = "openssl")]
    #[test]
    fn a_refused_handshake_fails_with_the_alerts_reason() {
        let now = Instant::now();
        let (mut server, der) = rsa_peer::server("AES128-SHA");
        let ours = Arc::new(cert::generate([4; 32]).unwrap());
        let mut c = DtlsTransport::new(
            DtlsRole::Client,
            ours,
            cert::fingerprint(&der).to_vec(),
            engine_config(None),
            now,
        );
        c.start(now);
        pump_ossl(&mut c, &mut server, now, 5);
        let Some(DtlsEvent::Failed(why)) = c.poll_event() else {
            panic!("not failed: {:?}", c.phase());
        };
        assert!(why.contains("handshake failure"), "{why}");
        assert_eq!(c.phase(), DtlsPhase::Failed);
    }

    /// With the OpenSSL client, a browser-like (dimpl, ECDSA) server still connects.
    #[cfg(feature = "openssl")]
    #[test]
    fn the_openssl_client_handshakes_with_an_ecdsa_server() {
        let now = Instant::now();
        let (mut c, mut s) = pair_with(now, engine_config(None));
        assert!(engine_config(None).openssl_client());
        let (kc, ks) = handshake(&mut c, &mut s, now);
        assert_eq!(kc.local_key, ks.remote_key);
        assert_eq!(kc.remote_key, ks.local_key);
        assert_eq!(kc.profile, ks.profile);
    }
}
