//! HTTPS for the node's and the scheduler's HTTP listeners, with certificate reload.
//!
//! [`ServerTls`] holds the certificate chain and key read from two PEM files behind a rustls
//! certificate resolver; [`ServerTls::reload`] reads the files again and swaps the certified
//! key atomically (a handshake sees the old pair or the new one, never a mix), so connections
//! that are already open keep theirs and new ones get the new certificate, without a restart.
//! [`ServerTls::watch`] reloads on `SIGHUP` and when either file changes (polled every second).
//! [`ServerTls::listener`] wraps a bound `TcpListener` into an [`axum::serve::Listener`] that
//! hands [`serve`] finished TLS connections (handshakes run in their own tasks, so a slow
//! client never holds up the others). [`serve`] bounds what a slow client can hold: its TLS
//! handshake, its request head and its request body each have a deadline.
//!
//! [`client_tls`] is the other side: the TLS settings of this process's own HTTPS calls
//! (heartbeats, migrations, probes), which trust the public web roots or, with `--tls-ca`, the
//! certificates of that file only.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

/// How long a client may take to finish its TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a client may take to send a request's head (request line and headers), counted
/// from when the server starts reading it — on a kept-alive connection, from the end of the
/// previous response: a client that trickles its headers, or opens connections and sends
/// nothing (slowloris), holds each one this long at most.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a client may take to send a request's body once its head is in.
pub const BODY_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// How often [`ServerTls::watch`] looks at the files.
const WATCH_INTERVAL: Duration = Duration::from_secs(1);

/// A certificate or key that could not be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// A file could not be read.
    #[error("reading {path}: {error}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        error: String,
    },
    /// The certificate file holds no certificate.
    #[error("{0}: no certificate (PEM `CERTIFICATE` block) in the file")]
    NoCertificate(PathBuf),
    /// The key is not usable or does not belong to the certificate.
    #[error("the key does not fit the certificate: {0}")]
    Key(String),
}

/// The certified key a handshake gets: the current one, swapped whole on reload.
#[derive(Debug)]
struct Resolver(RwLock<Arc<CertifiedKey>>);

impl ResolvesServerCert for Resolver {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.read().unwrap_or_else(|e| e.into_inner()).clone())
    }
}

/// The rustls provider of every TLS endpoint here (ring, already in the tree).
fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The certificate chain and key of `cert` and `key` (PEM), checked against each other.
pub fn load_certified_key(cert: &Path, key: &Path) -> Result<CertifiedKey, TlsError> {
    let read = |path: &Path| {
        std::fs::read(path).map_err(|e| TlsError::Read {
            path: path.to_owned(),
            error: e.to_string(),
        })
    };
    let cert_pem = read(cert)?;
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<_, _>>()
        .map_err(|e| TlsError::Read {
            path: cert.to_owned(),
            error: e.to_string(),
        })?;
    if chain.is_empty() {
        return Err(TlsError::NoCertificate(cert.to_owned()));
    }
    let key_pem = read(key)?;
    let key_der = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| TlsError::Read {
        path: key.to_owned(),
        error: e.to_string(),
    })?;
    CertifiedKey::from_der(chain, key_der, &provider()).map_err(|e| TlsError::Key(e.to_string()))
}

/// What identifies a version of a file: a replaced or rewritten file changes one of these.
fn fingerprint(path: &Path) -> Option<(std::time::SystemTime, u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some((m.modified().ok()?, m.len(), m.ino()))
}

/// The TLS side of one or more HTTPS listeners: certificate and key files, the certified key
/// read from them, and the rustls configuration that serves it.
#[derive(Debug)]
pub struct ServerTls {
    cert: PathBuf,
    key: PathBuf,
    resolver: Arc<Resolver>,
    config: Arc<rustls::ServerConfig>,
}

impl ServerTls {
    /// Reads the certificate chain (`cert`, PEM, leaf first) and its private key (`key`, PEM:
    /// PKCS#8, PKCS#1 or SEC1).
    pub fn load(cert: &Path, key: &Path) -> Result<Arc<Self>, TlsError> {
        let certified = load_certified_key(cert, key)?;
        let resolver = Arc::new(Resolver(RwLock::new(Arc::new(certified))));
        let mut config = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Key(e.to_string()))?
            .with_no_client_auth()
            .with_cert_resolver(resolver.clone());
        // The HTTP servers speak HTTP/1.1 only.
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Arc::new(ServerTls {
            cert: cert.to_owned(),
            key: key.to_owned(),
            resolver,
            config: Arc::new(config),
        }))
    }

    /// Reads the files again and, when they hold a usable pair, serves it to every new
    /// connection from now on. On an error the current pair stays.
    pub fn reload(&self) -> Result<(), TlsError> {
        let certified = Arc::new(load_certified_key(&self.cert, &self.key)?);
        *self.resolver.0.write().unwrap_or_else(|e| e.into_inner()) = certified;
        Ok(())
    }

    /// The end-entity certificate served now (DER).
    pub fn current_certificate(&self) -> Option<CertificateDer<'static>> {
        let key = self
            .resolver
            .0
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        key.end_entity_cert().ok().map(|c| c.clone().into_owned())
    }

    /// Reloads on `SIGHUP` and whenever the certificate or key file changes (checked every
    /// second), for as long as the process runs. Call once per process.
    pub fn watch(self: &Arc<Self>) -> std::io::Result<tokio::task::JoinHandle<()>> {
        use tokio::signal::unix::{SignalKind, signal};
        let mut hup = signal(SignalKind::hangup())?;
        let tls = self.clone();
        Ok(tokio::spawn(async move {
            let seen = |t: &ServerTls| (fingerprint(&t.cert), fingerprint(&t.key));
            let mut last = seen(&tls);
            let mut tick = tokio::time::interval(WATCH_INTERVAL);
            loop {
                let why = tokio::select! {
                    s = hup.recv() => match s {
                        Some(()) => "SIGHUP",
                        None => return,
                    },
                    _ = tick.tick() => {
                        let now = seen(&tls);
                        if now == last {
                            continue;
                        }
                        last = now;
                        "the files changed"
                    }
                };
                match tls.reload() {
                    Ok(()) => {
                        tracing::info!(cert = %tls.cert.display(), "TLS certificate reloaded ({why})")
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "TLS certificate not reloaded ({why}); the previous one stays")
                    }
                }
            }
        }))
    }

    /// An HTTPS listener on `tcp` for `axum::serve`.
    pub fn listener(&self, tcp: TcpListener) -> std::io::Result<TlsListener> {
        let local = tcp.local_addr()?;
        let acceptor = TlsAcceptor::from(self.config.clone());
        let (tx, rx) = mpsc::channel(64);
        let task = tokio::spawn(accept_loop(tcp, acceptor, tx));
        Ok(TlsListener {
            rx,
            local,
            _task: AbortOnDrop(task),
        })
    }
}

/// Accepts TCP connections and runs each handshake in its own task; finished ones go to `tx`.
async fn accept_loop(
    tcp: TcpListener,
    acceptor: TlsAcceptor,
    tx: mpsc::Sender<(TlsStream<TcpStream>, SocketAddr)>,
) {
    loop {
        let (stream, peer) = match tcp.accept().await {
            Ok(c) => c,
            Err(e) => {
                // Out of file descriptors and the like: wait instead of spinning.
                tracing::warn!(error = %e, "accepting a TCP connection");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let (acceptor, done) = (acceptor.clone(), tx.clone());
        tokio::spawn(async move {
            match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                Ok(Ok(tls)) => {
                    let _ = done.send((tls, peer)).await;
                }
                Ok(Err(e)) => tracing::debug!(error = %e, "TLS handshake failed"),
                Err(_) => tracing::debug!("TLS handshake timed out"),
            }
        });
        if tx.is_closed() {
            return;
        }
    }
}

/// Aborts the accept loop when the listener goes away.
#[derive(Debug)]
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// TLS connections for `axum::serve` (see [`ServerTls::listener`]).
#[derive(Debug)]
pub struct TlsListener {
    rx: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    local: SocketAddr,
    _task: AbortOnDrop,
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.rx.recv().await {
            Some(c) => c,
            // The accept loop only ends with the listener.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.local)
    }
}

/// The address a connection came from, for handlers and middleware
/// (`ConnectInfo<ClientAddr>`), over plain TCP and TLS alike.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientAddr(pub SocketAddr);

/// Serves `app` on `tcp`: HTTPS with `tls`, else plain HTTP (HTTP/1.1, upgrades such as
/// WebSockets included), with [`HEADER_READ_TIMEOUT`] and [`BODY_READ_TIMEOUT`]. Runs until
/// the task is dropped.
pub async fn serve(
    tcp: TcpListener,
    tls: Option<Arc<ServerTls>>,
    app: axum::Router,
) -> std::io::Result<()> {
    let app = app.layer(tower_http::timeout::RequestBodyTimeoutLayer::new(
        BODY_READ_TIMEOUT,
    ));
    match tls {
        Some(tls) => serve_connections(tls.listener(tcp)?, app).await,
        None => serve_connections(tcp, app).await,
    }
}

/// Each accepted connection in its own task. Handlers and middleware see the client's address
/// (`ConnectInfo<ClientAddr>`).
async fn serve_connections<L>(mut listener: L, app: axum::Router) -> std::io::Result<()>
where
    L: axum::serve::Listener<Addr = SocketAddr>,
{
    use axum::extract::ConnectInfo;
    use tower_service::Service as _;
    loop {
        let (io, peer) = listener.accept().await;
        let app = app.clone();
        let service =
            hyper::service::service_fn(move |mut req: hyper::Request<hyper::body::Incoming>| {
                req.extensions_mut().insert(ConnectInfo(ClientAddr(peer)));
                let mut app = app.clone();
                app.call(req.map(axum::body::Body::new))
            });
        tokio::spawn(async move {
            let mut http = hyper::server::conn::http1::Builder::new();
            http.timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(HEADER_READ_TIMEOUT);
            let conn = http
                .serve_connection(hyper_util::rt::TokioIo::new(io), service)
                .with_upgrades();
            if let Err(e) = conn.await {
                tracing::trace!(%peer, error = %e, "HTTP connection ended");
            }
        });
    }
}

/// `https` with TLS, else `http`.
pub fn scheme(tls: bool) -> &'static str {
    if tls { "https" } else { "http" }
}

/// TLS settings for this process's own HTTPS calls: the certificates in `ca` (PEM) are the
/// only trusted roots when given, else the public web roots.
pub fn client_tls(ca: Option<&Path>) -> Result<ureq::tls::TlsConfig, TlsError> {
    let builder = ureq::tls::TlsConfig::builder().provider(ureq::tls::TlsProvider::Rustls);
    let Some(ca) = ca else {
        return Ok(builder.build());
    };
    let pem = std::fs::read(ca).map_err(|e| TlsError::Read {
        path: ca.to_owned(),
        error: e.to_string(),
    })?;
    let certs: Vec<ureq::tls::Certificate<'static>> = CertificateDer::pem_slice_iter(&pem)
        .map(|c| c.map(|c| ureq::tls::Certificate::from_der(&c).to_owned()))
        .collect::<Result<_, _>>()
        .map_err(|e| TlsError::Read {
            path: ca.to_owned(),
            error: e.to_string(),
        })?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate(ca.to_owned()));
    }
    Ok(builder
        .root_certs(ureq::tls::RootCerts::new_with_certs(&certs))
        .build())
}
