//! Access tokens for publishing and playing (WHIP/WHEP `POST`): JWTs signed with HS256 (a
//! shared secret) or EdDSA (Ed25519; the verifiers hold only the public key).
//!
//! The node (`ferry-sfu`) and the scheduler's gateway (`ferry-scheduler`) both check tokens with
//! [`Verifier::authorize`]; `ferry token` mints them with [`Signer`]. It lives in `ferry-proto`
//! (behind the `jwt` feature) because both already link this crate and must never link each
//! other; crates that do not check tokens (the SDK, the migrator) do not build `jsonwebtoken`.
//!
//! Pure: the caller passes the time (`now`, Unix seconds); nothing here reads a clock.
//!
//! ```
//! use ferry_proto::auth::{Claims, Grant, Signer, Verifier};
//!
//! let now = 1_700_000_000;
//! let token = Signer::hs256(b"secret")?.sign(&Claims::new("alice", now + 3600).publish("cam*"))?;
//! let verifier = Verifier::hs256(b"secret")?;
//! assert!(verifier.authorize(Some(&token), Grant::Publish, "cam1", now).is_ok());
//! assert!(verifier.authorize(Some(&token), Grant::Play, "cam1", now).is_err());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};
use subtle::ConstantTimeEq;

/// Seconds a token is still accepted after its `exp` (clock skew between the minter and us).
pub const LEEWAY_S: u64 = 30;

/// What a request wants to do with a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Grant {
    /// WHIP `POST`: publish the stream.
    Publish,
    /// WHEP `POST`: play the stream.
    Play,
    /// Join a room (the room WebSocket, `POST /v1/rooms/{room}/join`); the pattern names rooms.
    Join,
}

impl Grant {
    /// The claim that carries this grant (`publish` / `play`).
    pub fn claim(self) -> &'static str {
        match self {
            Grant::Publish => "publish",
            Grant::Play => "play",
            Grant::Join => "join",
        }
    }
}

/// The claims of an access token.
///
/// `publish` and `play` are stream patterns: a stream name (`cam1`), a prefix ending in `*`
/// (`cam*`), or `*` for every stream. A grant that is absent is not given.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claims {
    /// Who the token was issued to (free text, for logs and audits).
    #[serde(default)]
    pub sub: String,
    /// Expiry, Unix seconds (required).
    pub exp: u64,
    /// When the token was issued, Unix seconds (informational).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iat: Option<u64>,
    /// Streams this token may publish.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub publish: Option<String>,
    /// Streams this token may play.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub play: Option<String>,
    /// Rooms this token may join.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub join: Option<String>,
}

impl Claims {
    /// Claims for `sub` expiring at `exp`, with no grant yet.
    pub fn new(sub: impl Into<String>, exp: u64) -> Self {
        Claims {
            sub: sub.into(),
            exp,
            iat: None,
            publish: None,
            play: None,
            join: None,
        }
    }

    /// Adds the `publish` grant for `pattern`.
    pub fn publish(mut self, pattern: impl Into<String>) -> Self {
        self.publish = Some(pattern.into());
        self
    }

    /// Adds the `play` grant for `pattern`.
    pub fn play(mut self, pattern: impl Into<String>) -> Self {
        self.play = Some(pattern.into());
        self
    }

    /// Adds the `join` grant for the room `pattern`.
    pub fn join(mut self, pattern: impl Into<String>) -> Self {
        self.join = Some(pattern.into());
        self
    }

    /// Sets `iat`.
    pub fn issued_at(mut self, iat: u64) -> Self {
        self.iat = Some(iat);
        self
    }

    /// The pattern of `grant`, if given.
    pub fn pattern(&self, grant: Grant) -> Option<&str> {
        match grant {
            Grant::Publish => self.publish.as_deref(),
            Grant::Play => self.play.as_deref(),
            Grant::Join => self.join.as_deref(),
        }
    }

    /// What the operator API token stands for: every grant on every stream, forever.
    pub fn operator() -> Self {
        Claims::new("operator", u64::MAX)
            .publish("*")
            .play("*")
            .join("*")
    }
}

/// Whether stream pattern `pattern` covers `stream`: `*` covers every stream, `pre*` every
/// stream that starts with `pre`, anything else only the stream of that exact name.
pub fn pattern_matches(pattern: &str, stream: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => stream.starts_with(prefix),
        None => pattern == stream,
    }
}

/// The query parameter that carries a token where no header can (RFC 6750 §2.3): browsers drop
/// `Authorization` when they follow a redirect to another origin.
pub const QUERY_PARAM: &str = "access_token";

/// The token a request carries: `Authorization: Bearer …` (the scheme in any case), else the
/// `access_token` parameter of its query string (percent-decoded).
pub fn request_token(authorization: Option<&str>, query: Option<&str>) -> Option<String> {
    let bearer = authorization.and_then(|v| {
        let v = v.trim_start();
        let (scheme, rest) = v.split_at_checked(7)?;
        scheme
            .eq_ignore_ascii_case("bearer ")
            .then(|| rest.trim().to_owned())
    });
    bearer.filter(|t| !t.is_empty()).or_else(|| {
        query?
            .split('&')
            .filter_map(|pair| pair.split_once('='))
            .find(|(k, _)| *k == QUERY_PARAM)
            .and_then(|(_, v)| percent_decode(v))
            .filter(|t| !t.is_empty())
    })
}

/// `url` with `access_token=token` added to its query string.
pub fn with_access_token(url: &str, token: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    let mut out = format!("{url}{sep}{QUERY_PARAM}=");
    for b in token.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `%XX` and `+` decoded; `None` for a bad escape or text that is not UTF-8.
fn percent_decode(s: &str) -> Option<String> {
    let mut out = Vec::with_capacity(s.len());
    let mut bytes = s.bytes();
    while let Some(b) = bytes.next() {
        match b {
            b'%' => {
                let hi = char::from(bytes.next()?).to_digit(16)?;
                let lo = char::from(bytes.next()?).to_digit(16)?;
                out.push(u8::try_from(hi * 16 + lo).ok()?);
            }
            b'+' => out.push(b' '),
            b => out.push(b),
        }
    }
    String::from_utf8(out).ok()
}

/// Why a request was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AuthError {
    /// No token in the request.
    #[error("an access token is required (Authorization: Bearer … or ?access_token=…)")]
    Missing,
    /// Not a token signed with our key (bad signature, shape, algorithm or claims).
    #[error("the access token is not valid here")]
    Invalid,
    /// The token's `exp` has passed.
    #[error("the access token has expired")]
    Expired,
    /// The token does not grant this action (`publish` for a WHIP, `play` for a WHEP).
    #[error("the access token does not grant this action")]
    WrongGrant,
    /// The token's grant does not cover this stream.
    #[error("the access token does not cover this stream")]
    WrongStream,
}

impl AuthError {
    /// The HTTP status: 401 when the client must get a (new) token, 403 when the token is
    /// fine but does not allow this.
    pub fn status(self) -> u16 {
        match self {
            AuthError::Missing | AuthError::Invalid | AuthError::Expired => 401,
            AuthError::WrongGrant | AuthError::WrongStream => 403,
        }
    }

    /// The machine-readable code (`Ferry-Error` header).
    pub fn code(self) -> &'static str {
        match self {
            AuthError::Missing => "token-missing",
            AuthError::Invalid => "token-invalid",
            AuthError::Expired => "token-expired",
            AuthError::WrongGrant => "token-wrong-grant",
            AuthError::WrongStream => "token-wrong-stream",
        }
    }

    /// The `WWW-Authenticate` challenge (RFC 6750 §3): no error code when the request carried
    /// no credentials, `invalid_token` for a bad or expired one, `insufficient_scope` for a
    /// token that does not allow the request.
    pub fn challenge(self) -> String {
        let error = match self {
            AuthError::Missing => return format!("Bearer realm=\"{REALM}\""),
            AuthError::Invalid | AuthError::Expired => "invalid_token",
            AuthError::WrongGrant | AuthError::WrongStream => "insufficient_scope",
        };
        format!("Bearer realm=\"{REALM}\", error=\"{error}\", error_description=\"{self}\"")
    }
}

/// The realm of the `WWW-Authenticate` challenges.
pub const REALM: &str = "ferry";

/// A key that could not be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// An empty HS256 secret.
    #[error("the token secret is empty")]
    EmptySecret,
    /// A PEM file that does not hold an Ed25519 key of the expected kind.
    #[error("not an Ed25519 key in PEM: {0}")]
    BadPem(String),
}

/// A token that could not be signed.
#[derive(Debug, thiserror::Error)]
#[error("signing the token: {0}")]
pub struct SignError(String);

/// Checks access tokens: JWTs signed with its key, and the operator API token (the cluster's
/// bearer token), which grants everything.
pub struct Verifier {
    key: Option<(DecodingKey, Algorithm)>,
    operator: Option<String>,
}

impl std::fmt::Debug for Verifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Keys and tokens stay out of logs.
        f.debug_struct("Verifier")
            .field("algorithm", &self.key.as_ref().map(|(_, a)| a))
            .field("operator_token", &self.operator.is_some())
            .finish()
    }
}

impl Verifier {
    /// Accepts HS256 tokens signed with `secret`.
    pub fn hs256(secret: &[u8]) -> Result<Self, KeyError> {
        let key = DecodingKey::from_secret(secret).map_err(|_| KeyError::EmptySecret)?;
        Ok(Verifier {
            key: Some((key, Algorithm::HS256)),
            operator: None,
        })
    }

    /// Accepts EdDSA tokens signed with the private half of this Ed25519 public key (PEM,
    /// `-----BEGIN PUBLIC KEY-----`).
    pub fn ed25519_pem(pem: &[u8]) -> Result<Self, KeyError> {
        let key = DecodingKey::from_ed_pem(pem).map_err(|e| KeyError::BadPem(e.to_string()))?;
        Ok(Verifier {
            key: Some((key, Algorithm::EdDSA)),
            operator: None,
        })
    }

    /// Accepts no JWT at all: only the operator token (see [`Verifier::with_operator_token`]).
    pub fn operator_only() -> Self {
        Verifier {
            key: None,
            operator: None,
        }
    }

    /// Also accepts `token` (the operator API token) as a credential for every stream. An empty
    /// token is ignored.
    pub fn with_operator_token(mut self, token: impl Into<String>) -> Self {
        let token = token.into();
        self.operator = (!token.is_empty()).then_some(token);
        self
    }

    /// Whether `token` is the operator API token (compared in constant time).
    pub fn is_operator_token(&self, token: &str) -> bool {
        self.operator
            .as_ref()
            .is_some_and(|op| bool::from(op.as_bytes().ct_eq(token.trim().as_bytes())))
    }

    /// Checks `token` (none: the request carried none) for `grant` on `stream` at `now` (Unix
    /// seconds); the token's claims when it allows the request.
    pub fn authorize(
        &self,
        token: Option<&str>,
        grant: Grant,
        stream: &str,
        now: u64,
    ) -> Result<Claims, AuthError> {
        let token = token.map(str::trim).filter(|t| !t.is_empty());
        let Some(token) = token else {
            return Err(AuthError::Missing);
        };
        if let Some(op) = &self.operator
            && bool::from(op.as_bytes().ct_eq(token.as_bytes()))
        {
            return Ok(Claims::operator());
        }
        let Some((key, alg)) = &self.key else {
            return Err(AuthError::Invalid);
        };
        let mut validation = Validation::new(*alg);
        // Expiry is checked below against the caller's `now`; `exp` must still be there.
        validation.validate_exp = false;
        validation.validate_aud = false;
        validation.set_required_spec_claims(&["exp"]);
        let claims = jsonwebtoken::decode::<Claims>(token, key, &validation)
            .map_err(|_| AuthError::Invalid)?
            .claims;
        if claims.exp.saturating_add(LEEWAY_S) < now {
            return Err(AuthError::Expired);
        }
        let Some(pattern) = claims.pattern(grant) else {
            return Err(AuthError::WrongGrant);
        };
        if !pattern_matches(pattern, stream) {
            return Err(AuthError::WrongStream);
        }
        Ok(claims)
    }
}

/// Mints access tokens (`ferry token`, `ferry dev`'s dev token, tests).
pub struct Signer {
    key: EncodingKey,
    alg: Algorithm,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Signer")
            .field("algorithm", &self.alg)
            .finish_non_exhaustive()
    }
}

impl Signer {
    /// Signs HS256 tokens with `secret`.
    pub fn hs256(secret: &[u8]) -> Result<Self, KeyError> {
        let key = EncodingKey::from_secret(secret).map_err(|_| KeyError::EmptySecret)?;
        Ok(Signer {
            key,
            alg: Algorithm::HS256,
        })
    }

    /// Signs EdDSA tokens with this Ed25519 private key (PKCS#8 PEM,
    /// `-----BEGIN PRIVATE KEY-----`).
    pub fn ed25519_pem(pem: &[u8]) -> Result<Self, KeyError> {
        let key = EncodingKey::from_ed_pem(pem).map_err(|e| KeyError::BadPem(e.to_string()))?;
        Ok(Signer {
            key,
            alg: Algorithm::EdDSA,
        })
    }

    /// The token for `claims`.
    pub fn sign(&self, claims: &Claims) -> Result<String, SignError> {
        jsonwebtoken::encode(&Header::new(self.alg), claims, &self.key)
            .map_err(|e| SignError(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    const NOW: u64 = 1_700_000_000;
    const SECRET: &[u8] = b"0123456789abcdef0123456789abcdef";

    // An Ed25519 key pair made for these tests (openssl genpkey -algorithm ed25519).
    const ED_PRIVATE: &str = "-----BEGIN PRIVATE KEY-----
MC4CAQAwBQYDK2VwBCIEIAirzBez+mwoX7YjpasUUK9GJx44KPVGvt4EMCgKkBIU
-----END PRIVATE KEY-----
";
    const ED_PUBLIC: &str = "-----BEGIN PUBLIC KEY-----
MCowBQYDK2VwAyEAw2fyFA0tTUb7hjtfN3E2CtsNElTXFMCO6XcOZrjA2+w=
-----END PUBLIC KEY-----
";
    // Another key pair: its tokens must not pass for the first one's.
    const ED_OTHER_PRIVATE: &str = "-----BEGIN PRIVATE KEY-----
MC4CAQAwBQYDK2VwBCIEIEQaeHJ/UisccluQiOV4/SvCIHyaB9mNpD9gJxV2wTuv
-----END PRIVATE KEY-----
";

    fn hs(claims: &Claims) -> String {
        Signer::hs256(SECRET).unwrap().sign(claims).unwrap()
    }

    fn verifier() -> Verifier {
        Verifier::hs256(SECRET).unwrap()
    }

    fn publisher(pattern: &str) -> Claims {
        Claims::new("alice", NOW + 600).publish(pattern)
    }

    #[test]
    fn a_publish_token_publishes_its_stream() {
        let t = hs(&publisher("cam1"));
        let c = verifier()
            .authorize(Some(&t), Grant::Publish, "cam1", NOW)
            .unwrap();
        assert_eq!(c, publisher("cam1"));
    }

    #[test]
    fn missing_and_blank_tokens() {
        let v = verifier();
        assert_eq!(
            v.authorize(None, Grant::Play, "cam1", NOW),
            Err(AuthError::Missing)
        );
        assert_eq!(
            v.authorize(Some("  "), Grant::Play, "cam1", NOW),
            Err(AuthError::Missing)
        );
    }

    #[test]
    fn forged_signature_is_invalid() {
        let other = Signer::hs256(b"another secret").unwrap();
        let t = other.sign(&publisher("*")).unwrap();
        assert_eq!(
            verifier().authorize(Some(&t), Grant::Publish, "cam1", NOW),
            Err(AuthError::Invalid)
        );
        // A valid token with its payload swapped for one that grants more.
        let good = hs(&publisher("cam1"));
        let forged_payload = {
            use base64::Engine;
            base64::engine::general_purpose::URL_SAFE_NO_PAD
                .encode(serde_json::to_vec(&publisher("*")).unwrap())
        };
        let mut parts: Vec<&str> = good.split('.').collect();
        parts[1] = &forged_payload;
        let forged = parts.join(".");
        assert_eq!(
            verifier().authorize(Some(&forged), Grant::Publish, "cam2", NOW),
            Err(AuthError::Invalid)
        );
    }

    #[test]
    fn garbage_and_unsigned_tokens_are_invalid() {
        let v = verifier();
        for t in ["x", "a.b.c", "a.b", "....", "eyJhbGciOiJub25lIn0.e30."] {
            assert_eq!(
                v.authorize(Some(t), Grant::Publish, "cam1", NOW),
                Err(AuthError::Invalid),
                "{t}"
            );
        }
        // alg "none" with a publish-everything payload.
        let none = {
            use base64::Engine;
            let e = base64::engine::general_purpose::URL_SAFE_NO_PAD;
            format!(
                "{}.{}.",
                e.encode(br#"{"alg":"none","typ":"JWT"}"#),
                e.encode(serde_json::to_vec(&publisher("*")).unwrap())
            )
        };
        assert_eq!(
            v.authorize(Some(&none), Grant::Publish, "cam1", NOW),
            Err(AuthError::Invalid)
        );
    }

    #[test]
    fn exp_is_required() {
        #[derive(Serialize)]
        struct NoExp {
            sub: &'static str,
            publish: &'static str,
        }
        let t = jsonwebtoken::encode(
            &Header::new(Algorithm::HS256),
            &NoExp {
                sub: "a",
                publish: "*",
            },
            &EncodingKey::from_secret(SECRET).unwrap(),
        )
        .unwrap();
        assert_eq!(
            verifier().authorize(Some(&t), Grant::Publish, "cam1", NOW),
            Err(AuthError::Invalid)
        );
    }

    #[test]
    fn expired_after_the_leeway() {
        let t = hs(&Claims::new("a", NOW).publish("*"));
        let v = verifier();
        assert!(
            v.authorize(Some(&t), Grant::Publish, "s", NOW + LEEWAY_S)
                .is_ok()
        );
        assert_eq!(
            v.authorize(Some(&t), Grant::Publish, "s", NOW + LEEWAY_S + 1),
            Err(AuthError::Expired)
        );
    }

    #[test]
    fn wrong_grant_and_wrong_stream() {
        let v = verifier();
        let play = hs(&Claims::new("a", NOW + 60).play("cam1"));
        assert_eq!(
            v.authorize(Some(&play), Grant::Publish, "cam1", NOW),
            Err(AuthError::WrongGrant)
        );
        assert!(v.authorize(Some(&play), Grant::Play, "cam1", NOW).is_ok());
        assert_eq!(
            v.authorize(Some(&play), Grant::Play, "cam2", NOW),
            Err(AuthError::WrongStream)
        );
        let both = hs(&Claims::new("a", NOW + 60).publish("a*").play("b*"));
        assert!(v.authorize(Some(&both), Grant::Publish, "a1", NOW).is_ok());
        assert!(v.authorize(Some(&both), Grant::Play, "b1", NOW).is_ok());
        assert_eq!(
            v.authorize(Some(&both), Grant::Publish, "b1", NOW),
            Err(AuthError::WrongStream)
        );
    }

    #[test]
    fn patterns() {
        assert!(pattern_matches("*", "anything"));
        assert!(pattern_matches("cam*", "cam"));
        assert!(pattern_matches("cam*", "cam-1"));
        assert!(!pattern_matches("cam*", "ca"));
        assert!(!pattern_matches("cam*", "xcam"));
        assert!(pattern_matches("cam", "cam"));
        assert!(!pattern_matches("cam", "cam1"));
        assert!(!pattern_matches("", "cam"));
        // Only a trailing `*` is a wildcard.
        assert!(!pattern_matches("c*m", "cam"));
        assert!(!pattern_matches("*cam", "xcam"));
    }

    #[test]
    fn the_operator_token_grants_everything() {
        let v = verifier().with_operator_token("op-token");
        for grant in [Grant::Publish, Grant::Play] {
            assert_eq!(
                v.authorize(Some("op-token"), grant, "any", NOW),
                Ok(Claims::operator())
            );
        }
        assert_eq!(
            v.authorize(Some("op-token2"), Grant::Play, "any", NOW),
            Err(AuthError::Invalid)
        );
        assert!(v.is_operator_token("op-token"));
        assert!(!v.is_operator_token("op-token2") && !v.is_operator_token(""));
        assert!(
            !verifier().is_operator_token("op-token"),
            "no operator token set"
        );
        // Without a key only the operator token gets in; an empty one is no token.
        let only = Verifier::operator_only().with_operator_token("op");
        assert!(only.authorize(Some("op"), Grant::Play, "s", NOW).is_ok());
        let t = hs(&publisher("*"));
        assert_eq!(
            only.authorize(Some(&t), Grant::Publish, "s", NOW),
            Err(AuthError::Invalid)
        );
        let empty = verifier().with_operator_token("");
        assert_eq!(
            empty.authorize(Some(""), Grant::Play, "s", NOW),
            Err(AuthError::Missing)
        );
    }

    #[test]
    fn eddsa_tokens() {
        let signer = Signer::ed25519_pem(ED_PRIVATE.as_bytes()).unwrap();
        let v = Verifier::ed25519_pem(ED_PUBLIC.as_bytes()).unwrap();
        let t = signer.sign(&publisher("cam*")).unwrap();
        assert!(v.authorize(Some(&t), Grant::Publish, "cam9", NOW).is_ok());
        assert_eq!(
            v.authorize(Some(&t), Grant::Publish, "dog", NOW),
            Err(AuthError::WrongStream)
        );
        let other = Signer::ed25519_pem(ED_OTHER_PRIVATE.as_bytes())
            .unwrap()
            .sign(&publisher("cam*"))
            .unwrap();
        assert_eq!(
            v.authorize(Some(&other), Grant::Publish, "cam9", NOW),
            Err(AuthError::Invalid)
        );
        // An HS256 token is refused by an EdDSA verifier (no algorithm confusion), and the
        // other way round.
        assert_eq!(
            v.authorize(Some(&hs(&publisher("*"))), Grant::Publish, "cam9", NOW),
            Err(AuthError::Invalid)
        );
        assert_eq!(
            verifier().authorize(Some(&t), Grant::Publish, "cam9", NOW),
            Err(AuthError::Invalid)
        );
        assert!(Verifier::ed25519_pem(b"not a key").is_err());
        assert!(Verifier::hs256(b"").is_err());
    }

    #[test]
    fn tokens_from_the_header_or_the_query() {
        assert_eq!(
            request_token(Some("Bearer abc"), None).as_deref(),
            Some("abc")
        );
        assert_eq!(
            request_token(Some("bearer  abc "), None).as_deref(),
            Some("abc")
        );
        assert_eq!(
            request_token(Some("Bearer h"), Some("access_token=q")).as_deref(),
            Some("h")
        );
        assert_eq!(
            request_token(Some("Basic xyz"), Some("a=1&access_token=q%2Bx.y")).as_deref(),
            Some("q+x.y")
        );
        assert_eq!(request_token(None, Some("access_token=")), None);
        assert_eq!(request_token(None, Some("access_token=%zz")), None);
        assert_eq!(request_token(None, Some("other=1")), None);
        assert_eq!(request_token(Some("Bearer"), None), None);
        assert_eq!(request_token(None, None), None);
        let url = with_access_token("http://n:1/whip/s", "a.b-c_d");
        assert_eq!(url, "http://n:1/whip/s?access_token=a.b-c_d");
        let url = with_access_token("http://n:1/whip/s?x=1", "a b/c");
        assert_eq!(url, "http://n:1/whip/s?x=1&access_token=a%20b%2Fc");
        let query = url.split_once('?').map(|(_, q)| q);
        assert_eq!(request_token(None, query).as_deref(), Some("a b/c"));
    }

    #[test]
    fn errors_map_to_statuses_codes_and_challenges() {
        assert_eq!(AuthError::Missing.status(), 401);
        assert_eq!(AuthError::Expired.status(), 401);
        assert_eq!(AuthError::Invalid.status(), 401);
        assert_eq!(AuthError::WrongGrant.status(), 403);
        assert_eq!(AuthError::WrongStream.status(), 403);
        assert_eq!(AuthError::WrongStream.code(), "token-wrong-stream");
        assert_eq!(AuthError::Missing.challenge(), "Bearer realm=\"ferry\"");
        assert_eq!(
            AuthError::Expired.challenge(),
            "Bearer realm=\"ferry\", error=\"invalid_token\", error_description=\"the access token has expired\""
        );
        assert!(
            AuthError::WrongGrant
                .challenge()
                .contains("error=\"insufficient_scope\"")
        );
    }
}
