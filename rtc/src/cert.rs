//! The node's DTLS certificate: self-signed ECDSA P-256, as WebRTC expects.
//! Peers authenticate it by the SHA-256 fingerprint in the SDP, not by a CA.

use dimpl::DtlsCertificate;
use p256::ecdsa::{DerSignature, SigningKey, signature::Signer};
use p256::pkcs8::EncodePrivateKey;
use sha2::{Digest, Sha256};

/// Why a certificate could not be made.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CertError {
    /// The 32 secret bytes are not a valid P-256 scalar (zero or ≥ n).
    #[error("secret is not a valid P-256 private key")]
    BadSecret,
    /// Encoding failed.
    #[error("certificate encoding failed: {0}")]
    Encode(String),
}

struct Key<'a> {
    key: &'a SigningKey,
    public: Box<[u8]>,
}

impl rcgen::PublicKeyData for Key<'_> {
    fn der_bytes(&self) -> &[u8] {
        &self.public
    }
    fn algorithm(&self) -> &'static rcgen::SignatureAlgorithm {
        &rcgen::PKCS_ECDSA_P256_SHA256
    }
}

impl rcgen::SigningKey for Key<'_> {
    fn sign(&self, msg: &[u8]) -> Result<Vec<u8>, rcgen::Error> {
        let sig: DerSignature = self.key.sign(msg);
        Ok(sig.to_bytes().to_vec())
    }
}

/// Makes a self-signed certificate from 32 secret bytes (the driver draws
/// them from the OS; simulations pass fixed ones, so runs are reproducible).
pub fn generate(secret: [u8; 32]) -> Result<DtlsCertificate, CertError> {
    let key = SigningKey::from_slice(&secret).map_err(|_| CertError::BadSecret)?;
    let signer = Key {
        public: key.verifying_key().to_sec1_bytes(),
        key: &key,
    };
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new())
        .map_err(|e| CertError::Encode(e.to_string()))?;
    let mut dn = rcgen::DistinguishedName::new();
    dn.push(rcgen::DnType::CommonName, "ferry");
    params.distinguished_name = dn;
    // A unique serial per key (Firefox rejects repeated serials).
    let digest = Sha256::digest(secret);
    let mut serial = digest[..16].to_vec();
    serial[0] &= 0x7f;
    params.serial_number = Some(serial.into());
    let cert = params
        .self_signed(&signer)
        .map_err(|e| CertError::Encode(e.to_string()))?;
    let private_key = key
        .to_pkcs8_der()
        .map_err(|e| CertError::Encode(e.to_string()))?
        .as_bytes()
        .to_vec();
    Ok(DtlsCertificate {
        certificate: cert.der().to_vec(),
        private_key,
    })
}

/// SHA-256 fingerprint of a DER certificate.
pub fn fingerprint(cert_der: &[u8]) -> [u8; 32] {
    Sha256::digest(cert_der).into()
}

/// `AB:CD:...` form used in `a=fingerprint`.
pub fn format_fingerprint(fp: &[u8]) -> String {
    let mut s = String::with_capacity(fp.len() * 3);
    for (i, b) in fp.iter().enumerate() {
        if i > 0 {
            s.push(':');
        }
        s.push_str(&format!("{b:02X}"));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generates_a_parseable_distinct_certificate() {
        let a = generate([7; 32]).unwrap();
        let b = generate([8; 32]).unwrap();
        assert_ne!(fingerprint(&a.certificate), fingerprint(&b.certificate));
        assert_eq!(
            a.certificate,
            generate([7; 32]).unwrap().certificate,
            "deterministic"
        );
        assert!(generate([0; 32]).is_err());
        assert_eq!(format_fingerprint(&[0xab, 0x01]), "AB:01");
    }
}
