//! The cluster's certificate authority and node identities for mutual TLS
//! between nodes.
//!
//! Every node certificate carries two names: the DNS name [`SERVER_NAME`],
//! shared by all nodes and used only to satisfy TLS server-name checks, and
//! the URI `urn:ferry:node:<node id>`, which is what identifies the node. A
//! peer is who its CA-signed certificate's URI says it is; the DNS name
//! proves nothing on its own.

use std::sync::Arc;

use ferry_proto::NodeId;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// The TLS server name every node certificate holds.
pub const SERVER_NAME: &str = "ferry-node";

/// Prefix of the URI name that carries a node's ID.
pub const NODE_URI_PREFIX: &str = "urn:ferry:node:";

/// ALPN protocol of the migration transport.
pub const ALPN: &[u8] = b"ferry-migration/1";

/// Why certificates or TLS configuration could not be made.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// Key or certificate generation failed.
    #[error("certificate generation: {0}")]
    Generate(#[from] rcgen::Error),
    /// rustls refused the configuration.
    #[error("TLS configuration: {0}")]
    Rustls(#[from] rustls::Error),
    /// A client-certificate verifier could not be built.
    #[error("client verifier: {0}")]
    Verifier(String),
    /// PEM input is not what was expected.
    #[error("PEM: {0}")]
    Pem(String),
    /// A certificate carries no (or an invalid) node ID.
    #[error("certificate names no valid node: {0}")]
    NoNodeId(String),
}

fn ca_params() -> CertificateParams {
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, "Ferry cluster CA");
    params.distinguished_name = dn;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params
}

/// The cluster CA: signs one certificate per node.
pub struct ClusterCa {
    cert: CertificateDer<'static>,
    issuer: Issuer<'static, KeyPair>,
}

impl std::fmt::Debug for ClusterCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterCa").finish_non_exhaustive()
    }
}

impl ClusterCa {
    /// A fresh CA (ECDSA P-256), e.g. for `ferry dev` and tests.
    pub fn generate() -> Result<Self, TlsError> {
        let key = KeyPair::generate()?;
        let cert = ca_params().self_signed(&key)?.der().clone();
        Ok(Self {
            cert,
            issuer: Issuer::new(ca_params(), key),
        })
    }

    /// A CA saved with [`ClusterCa::cert_pem`] and [`ClusterCa::key_pem`].
    pub fn from_pem(cert_pem: &str, key_pem: &str) -> Result<Self, TlsError> {
        let key = KeyPair::from_pem(key_pem)?;
        let cert = CertificateDer::from_pem_slice(cert_pem.as_bytes())
            .map_err(|e| TlsError::Pem(e.to_string()))?;
        Ok(Self {
            cert,
            issuer: Issuer::new(ca_params(), key),
        })
    }

    /// The CA certificate (DER), the trust root of every node.
    pub fn cert_der(&self) -> &CertificateDer<'static> {
        &self.cert
    }

    /// The CA certificate, PEM.
    pub fn cert_pem(&self) -> String {
        pem_encode("CERTIFICATE", &self.cert)
    }

    /// The CA's private key, PKCS#8 PEM. Keep it off the nodes in production.
    pub fn key_pem(&self) -> String {
        self.issuer.key().serialize_pem()
    }

    /// Issues a certificate for `node` (client and server use).
    pub fn issue(&self, node: &NodeId) -> Result<NodeIdentity, TlsError> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(vec![SERVER_NAME.to_owned()])?;
        let uri = format!("{NODE_URI_PREFIX}{node}");
        params.subject_alt_names.push(SanType::URI(
            uri.try_into()
                .map_err(|e: rcgen::Error| TlsError::Generate(e))?,
        ));
        params
            .distinguished_name
            .push(DnType::CommonName, node.as_str());
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok(NodeIdentity {
            node: node.clone(),
            cert: cert.der().clone(),
            key: PrivatePkcs8KeyDer::from(key.serialize_der()).into(),
            ca: self.cert.clone(),
        })
    }
}

fn pem_encode(label: &str, der: &[u8]) -> String {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for line in b64.as_bytes().chunks(64) {
        out.push_str(&String::from_utf8_lossy(line));
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

/// A node's certificate, key and the cluster CA it trusts.
pub struct NodeIdentity {
    node: NodeId,
    cert: CertificateDer<'static>,
    key: PrivateKeyDer<'static>,
    ca: CertificateDer<'static>,
}

impl std::fmt::Debug for NodeIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeIdentity")
            .field("node", &self.node)
            .finish_non_exhaustive()
    }
}

impl Clone for NodeIdentity {
    fn clone(&self) -> Self {
        Self {
            node: self.node.clone(),
            cert: self.cert.clone(),
            key: self.key.clone_key(),
            ca: self.ca.clone(),
        }
    }
}

impl NodeIdentity {
    /// An identity from PEM files: the node's certificate, its private key
    /// and the cluster CA certificate. The node ID is read from the
    /// certificate.
    pub fn from_pem(cert_pem: &str, key_pem: &str, ca_pem: &str) -> Result<Self, TlsError> {
        let pem = |e: rustls::pki_types::pem::Error| TlsError::Pem(e.to_string());
        let cert = CertificateDer::from_pem_slice(cert_pem.as_bytes()).map_err(pem)?;
        let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).map_err(pem)?;
        let ca = CertificateDer::from_pem_slice(ca_pem.as_bytes()).map_err(pem)?;
        let node = node_id_of(&cert)?;
        Ok(Self {
            node,
            cert,
            key,
            ca,
        })
    }

    /// The node these credentials are for.
    pub fn node(&self) -> &NodeId {
        &self.node
    }

    /// The node certificate, PEM.
    pub fn cert_pem(&self) -> String {
        pem_encode("CERTIFICATE", &self.cert)
    }

    /// The node's private key, PKCS#8 PEM.
    pub fn key_pem(&self) -> String {
        pem_encode("PRIVATE KEY", self.key.secret_der())
    }

    fn roots(&self) -> Result<rustls::RootCertStore, TlsError> {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.ca.clone())?;
        Ok(roots)
    }

    /// rustls server configuration: TLS 1.3, client certificates required
    /// and verified against the cluster CA.
    pub fn server_config(&self) -> Result<rustls::ServerConfig, TlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
            Arc::new(self.roots()?),
            provider.clone(),
        )
        .build()
        .map_err(|e| TlsError::Verifier(e.to_string()))?;
        let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])?
            .with_client_cert_verifier(verifier)
            .with_single_cert(vec![self.cert.clone()], self.key.clone_key())?;
        cfg.alpn_protocols = vec![ALPN.to_vec()];
        Ok(cfg)
    }

    /// rustls client configuration: TLS 1.3, the cluster CA as the only
    /// root, this node's certificate as client certificate.
    pub fn client_config(&self) -> Result<rustls::ClientConfig, TlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])?
            .with_root_certificates(self.roots()?)
            .with_client_auth_cert(vec![self.cert.clone()], self.key.clone_key())?;
        cfg.alpn_protocols = vec![ALPN.to_vec()];
        Ok(cfg)
    }
}

/// The node ID a certificate names in its `urn:ferry:node:` URI. Only
/// meaningful for a certificate TLS has verified against the cluster CA.
pub fn node_id_of(cert: &CertificateDer<'_>) -> Result<NodeId, TlsError> {
    let (_, x509) =
        x509_parser::parse_x509_certificate(cert).map_err(|e| TlsError::NoNodeId(e.to_string()))?;
    let san = x509
        .subject_alternative_name()
        .map_err(|e| TlsError::NoNodeId(e.to_string()))?
        .ok_or_else(|| TlsError::NoNodeId("no subject alternative name".into()))?;
    let mut ids = san.value.general_names.iter().filter_map(|n| match n {
        x509_parser::extensions::GeneralName::URI(u) => u.strip_prefix(NODE_URI_PREFIX),
        _ => None,
    });
    match (ids.next(), ids.next()) {
        (Some(id), None) => NodeId::new(id).map_err(|e| TlsError::NoNodeId(e.to_string())),
        (None, _) => Err(TlsError::NoNodeId("no node URI".into())),
        (Some(_), Some(_)) => Err(TlsError::NoNodeId("more than one node URI".into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issued_certificates_name_their_node_and_survive_pem() {
        let ca = ClusterCa::generate().unwrap();
        let node = NodeId::new("node-a").unwrap();
        let id = ca.issue(&node).unwrap();
        assert_eq!(node_id_of(&id.cert).unwrap(), node);
        let again = NodeIdentity::from_pem(&id.cert_pem(), &id.key_pem(), &ca.cert_pem()).unwrap();
        assert_eq!(again.node(), &node);
        assert_eq!(again.cert, id.cert);
        assert!(again.server_config().is_ok() && again.client_config().is_ok());
        let ca2 = ClusterCa::from_pem(&ca.cert_pem(), &ca.key_pem()).unwrap();
        assert_eq!(ca2.cert_der(), ca.cert_der());
        let b = ca2.issue(&NodeId::new("node-b").unwrap()).unwrap();
        assert_eq!(node_id_of(&b.cert).unwrap().as_str(), "node-b");
        // A certificate without the node URI names nobody.
        assert!(node_id_of(ca.cert_der()).is_err());
    }
}
