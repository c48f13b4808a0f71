//! The DTLS client handshake on OpenSSL, for peers whose certificate is RSA.
//!
//! `dimpl` offers only ECDHE-ECDSA suites, which is what browsers use, but GStreamer's
//! webrtcbin (and other OpenSSL-based peers) present an RSA-2048 certificate: as the DTLS
//! server they then answer our ClientHello with "no shared cipher". OpenSSL offers both
//! ECDHE-ECDSA and ECDHE-RSA suites, as browsers do. Only the handshake runs here: its
//! outcome (SRTP keys, the peer's certificate) is what the rest of the transport uses, so a
//! migration moves the same state whichever engine keyed the session.
//!
//! Sans-IO: datagrams go in and out through in-memory queues; OpenSSL's own timer drives
//! retransmission, checked whenever the transport is polled.

use std::collections::VecDeque;
use std::io::{self, Read, Write};

use openssl::pkey::PKey;
use openssl::ssl::{
    ErrorCode, Ssl, SslContext, SslMethod, SslOptions, SslStream, SslVerifyMode, SslVersion,
};
use openssl::x509::X509;

/// Both authentication families, AEAD only (RFC 8827 §6.5; browsers offer the same).
const CIPHERS: &str = "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:\
ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:\
ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305";
/// The SRTP profiles Ferry's SRTP implements (RFC 5764, RFC 7714).
const SRTP_PROFILES: &str = "SRTP_AEAD_AES_128_GCM:SRTP_AEAD_AES_256_GCM:SRTP_AES128_CM_SHA1_80";
/// RFC 5764 §4.2.
const EXPORTER_LABEL: &str = "EXTRACTOR-dtls_srtp";

/// Datagrams in and out of OpenSSL.
#[derive(Default)]
struct Datagrams {
    incoming: VecDeque<Vec<u8>>,
    outgoing: VecDeque<Vec<u8>>,
}

impl Read for Datagrams {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self.incoming.pop_front() {
            Some(d) => {
                let n = d.len().min(buf.len());
                buf[..n].copy_from_slice(&d[..n]);
                Ok(n)
            }
            None => Err(io::ErrorKind::WouldBlock.into()),
        }
    }
}

impl Write for Datagrams {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.outgoing.push_back(buf.to_vec());
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// What the handshake produced once it is done.
pub(super) struct Handshaken {
    /// `2 × (key + salt)` bytes from the exporter.
    pub keying: Vec<u8>,
    /// The SRTP protection profile id.
    pub profile: u16,
    /// The peer's certificate (DER).
    pub peer_der: Vec<u8>,
}

/// What one step produced.
#[derive(Default)]
pub(super) struct Step {
    /// The handshake finished in this step.
    pub done: Option<Handshaken>,
    /// The peer sent close_notify.
    pub closed: bool,
}

/// An OpenSSL DTLS 1.2 client.
pub(super) struct OsslClient {
    stream: SslStream<Datagrams>,
    handshaken: bool,
}

impl OsslClient {
    /// A client with our certificate (DER) and its PKCS#8 private key.
    pub fn new(cert_der: &[u8], key_der: &[u8], mtu: u32) -> Result<Self, OsslError> {
        let e = |what: &'static str, source: openssl::error::ErrorStack| OsslError::Setup {
            what,
            source,
        };
        let mut ctx = SslContext::builder(SslMethod::dtls()).map_err(|err| e("context", err))?;
        ctx.set_min_proto_version(Some(SslVersion::DTLS1_2))
            .map_err(|err| e("version", err))?;
        ctx.set_cipher_list(CIPHERS)
            .map_err(|err| e("ciphers", err))?;
        ctx.set_tlsext_use_srtp(SRTP_PROFILES)
            .map_err(|err| e("use_srtp", err))?;
        let cert = X509::from_der(cert_der).map_err(|err| e("certificate", err))?;
        let key = PKey::private_key_from_pkcs8(key_der).map_err(|err| e("private key", err))?;
        ctx.set_certificate(&cert)
            .map_err(|err| e("certificate", err))?;
        ctx.set_private_key(&key)
            .map_err(|err| e("private key", err))?;
        // Self-signed peers: the SDP fingerprint authenticates the certificate (checked by
        // the transport once the handshake is done), not a CA.
        ctx.set_verify_callback(SslVerifyMode::PEER, |_, _| true);
        ctx.set_options(SslOptions::NO_QUERY_MTU);
        let ctx = ctx.build();
        let mut ssl = Ssl::new(&ctx).map_err(|err| e("session", err))?;
        ssl.set_mtu(mtu).map_err(|err| e("mtu", err))?;
        ssl.set_connect_state();
        let stream = SslStream::new(ssl, Datagrams::default()).map_err(|err| e("stream", err))?;
        Ok(Self {
            stream,
            handshaken: false,
        })
    }

    /// Feeds a datagram (if any) and advances: the handshake while it runs (which also
    /// retransmits when OpenSSL's timer has expired), then alerts and close_notify.
    pub fn step(&mut self, input: Option<&[u8]>) -> Result<Step, OsslError> {
        if let Some(d) = input {
            self.stream.get_mut().incoming.push_back(d.to_vec());
        }
        let mut step = Step::default();
        if !self.handshaken {
            match self.stream.do_handshake() {
                Ok(()) => {
                    self.handshaken = true;
                    step.done = Some(self.outcome()?);
                }
                Err(err) if would_block(&err) => return Ok(step),
                Err(err) => return Err(reason(&err)),
            }
        }
        // After the handshake: only alerts and close_notify matter (no data channels).
        let mut buf = [0u8; 2048];
        while !self.stream.get_ref().incoming.is_empty() {
            match self.stream.ssl_read(&mut buf) {
                Ok(_) => {}
                Err(err) if err.code() == ErrorCode::ZERO_RETURN => {
                    step.closed = true;
                    break;
                }
                Err(err) if would_block(&err) => break,
                Err(err) => return Err(reason(&err)),
            }
        }
        Ok(step)
    }

    /// Sends close_notify.
    pub fn close(&mut self) {
        let _ = self.stream.shutdown();
    }

    /// The next datagram to send.
    pub fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        self.stream.get_mut().outgoing.pop_front()
    }

    fn outcome(&self) -> Result<Handshaken, OsslError> {
        let ssl = self.stream.ssl();
        let peer_der = ssl
            .peer_certificate()
            .ok_or(OsslError::Peer("peer presented no certificate"))?
            .to_der()
            .map_err(OsslError::PeerCertificate)?;
        let profile = ssl
            .selected_srtp_profile()
            .ok_or(OsslError::Peer("peer negotiated no SRTP profile"))?
            .id()
            .as_raw();
        let profile = u16::try_from(profile).unwrap_or(u16::MAX);
        let len = match profile {
            0x0001 => 2 * (16 + 14),
            0x0007 => 2 * (16 + 12),
            0x0008 => 2 * (32 + 12),
            other => return Err(OsslError::Profile(other)),
        };
        let mut keying = vec![0u8; len];
        ssl.export_keying_material(&mut keying, EXPORTER_LABEL, None)
            .map_err(OsslError::Export)?;
        Ok(Handshaken {
            keying,
            profile,
            peer_der,
        })
    }
}

fn would_block(err: &openssl::ssl::Error) -> bool {
    matches!(err.code(), ErrorCode::WANT_READ | ErrorCode::WANT_WRITE)
}

/// OpenSSL's reason, e.g. "sslv3 alert handshake failure" (an alert the peer sent) or
/// "no shared cipher".
fn reason(err: &openssl::ssl::Error) -> OsslError {
    OsslError::Handshake(match err.ssl_error() {
        Some(stack) => {
            let reasons: Vec<String> = stack
                .errors()
                .iter()
                .map(|e| e.reason().unwrap_or("unknown").to_owned())
                .collect();
            reasons.join("; ")
        }
        None => err.to_string(),
    })
}

/// Why the OpenSSL client could not start or finish its handshake.
#[derive(Debug, thiserror::Error)]
pub(super) enum OsslError {
    /// Setting up the context or the session.
    #[error("openssl {what}: {source}")]
    Setup {
        /// The step.
        what: &'static str,
        /// OpenSSL's errors.
        source: openssl::error::ErrorStack,
    },
    /// The handshake failed: OpenSSL's reasons, e.g. an alert the peer sent.
    #[error("DTLS (OpenSSL): {0}")]
    Handshake(String),
    /// The peer left out what DTLS-SRTP needs.
    #[error("{0}")]
    Peer(&'static str),
    /// The peer's certificate could not be encoded.
    #[error("peer certificate: {0}")]
    PeerCertificate(openssl::error::ErrorStack),
    /// An SRTP protection profile we did not offer.
    #[error("unsupported SRTP profile {0:#06x}")]
    Profile(u16),
    /// Exporting the SRTP keying material.
    #[error("exporting SRTP keys: {0}")]
    Export(openssl::error::ErrorStack),
}
