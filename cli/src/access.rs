//! Who may publish and play, and HTTPS: the options `ferry node`, `ferry scheduler` and
//! `ferry dev` share (`--token-secret`/`--token-public-key`, `--tls-cert`/`--tls-key`/`--tls-ca`),
//! and `ferry token`, which mints access tokens.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use ferry_proto::auth::{Claims, Signer, Verifier};
use ferry_sfu::driver::tls::ServerTls;

/// How WHIP/WHEP access tokens are checked.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct TokenKeyArgs {
    /// HS256 secret that access tokens are signed with (default: $FERRY_TOKEN_SECRET, else a
    /// random one: then only the API token may publish and play).
    #[arg(
        long,
        env = "FERRY_TOKEN_SECRET",
        hide_env_values = true,
        conflicts_with = "token_public_key"
    )]
    pub token_secret: Option<String>,
    /// Ed25519 public key (PEM) that access tokens (EdDSA) are checked with, instead of a secret.
    #[arg(long)]
    pub token_public_key: Option<PathBuf>,
}

/// How many requests one client address may make on a node's HTTP listener
/// (`ferry_sfu::driver::http::limits`).
#[derive(clap::Args, Debug, Clone)]
pub struct HttpLimitArgs {
    /// Requests a second one client address (an IPv6 client: its /64) may make on the HTTP
    /// listener, sustained; more get 429 with Retry-After. 0: no limit. Health, readiness and
    /// metrics probes do not count.
    #[arg(long, default_value_t = 50.0, value_parser = parse_rate)]
    pub http_rate: f64,
    /// Requests one client address may make at once (before --http-rate applies).
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u32).range(1..))]
    pub http_burst: u32,
}

impl HttpLimitArgs {
    /// The limit these flags set.
    pub fn limit(&self) -> ferry_sfu::driver::http::limits::RateLimit {
        ferry_sfu::driver::http::limits::RateLimit {
            per_second: self.http_rate,
            burst: self.http_burst,
        }
    }
}

fn parse_rate(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(r) if r.is_finite() && r >= 0.0 => Ok(r),
        Ok(_) => Err("a rate is a finite number of requests a second, 0 or more".into()),
        Err(e) => Err(e.to_string()),
    }
}

/// HTTPS on this process's HTTP listeners, and whom its own HTTPS calls trust.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct TlsArgs {
    /// Certificate chain (PEM, leaf first): serve HTTPS. Reloaded on SIGHUP and when the file
    /// changes.
    #[arg(long, requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// Private key of --tls-cert (PEM).
    #[arg(long, requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// CA certificates (PEM) trusted by this process's own HTTPS calls (heartbeats, migrations,
    /// health probes) instead of the public web roots.
    #[arg(long, env = "FERRY_TLS_CA")]
    pub tls_ca: Option<PathBuf>,
}

/// The token keys of one process.
#[derive(Debug)]
pub struct TokenKeys {
    /// Checks tokens.
    pub verifier: Verifier,
    /// Mints tokens (with a secret; not with a public key).
    pub signer: Option<Signer>,
    /// Whether the secret was made up (no --token-secret / $FERRY_TOKEN_SECRET).
    pub generated: bool,
}

/// 32 random bytes as hex.
pub fn random_secret() -> String {
    use rand::RngExt;
    let b: [u8; 32] = rand::rng().random();
    b.iter().map(|x| format!("{x:02x}")).collect()
}

impl TokenKeyArgs {
    /// With a random secret filled in when neither a secret nor a public key is given, so that
    /// several parts of one process (`ferry dev`) share it.
    pub fn resolved(&self) -> TokenKeyArgs {
        let mut a = self.clone();
        if a.token_secret.as_deref().is_none_or(str::is_empty) && a.token_public_key.is_none() {
            a.token_secret = Some(random_secret());
        }
        a
    }

    /// The keys these options name.
    pub fn keys(&self) -> Result<TokenKeys> {
        if let Some(path) = &self.token_public_key {
            let pem = std::fs::read(path)
                .with_context(|| format!("reading --token-public-key {}", path.display()))?;
            let verifier = Verifier::ed25519_pem(&pem)
                .with_context(|| format!("--token-public-key {}", path.display()))?;
            return Ok(TokenKeys {
                verifier,
                signer: None,
                generated: false,
            });
        }
        let (secret, generated) = match self.token_secret.as_deref().filter(|s| !s.is_empty()) {
            Some(s) => (s.to_owned(), false),
            None => (random_secret(), true),
        };
        Ok(TokenKeys {
            verifier: Verifier::hs256(secret.as_bytes())?,
            signer: Some(Signer::hs256(secret.as_bytes())?),
            generated,
        })
    }
}

impl TlsArgs {
    /// The listeners' TLS (with its reload watcher started), when --tls-cert is given.
    pub fn server(&self) -> Result<Option<Arc<ServerTls>>> {
        let (Some(cert), Some(key)) = (&self.tls_cert, &self.tls_key) else {
            return Ok(None);
        };
        let tls = ServerTls::load(cert, key).context("--tls-cert/--tls-key")?;
        tls.watch().context("watching the TLS files")?;
        Ok(Some(tls))
    }

    /// TLS settings of this process's own HTTPS calls.
    pub fn client(&self) -> Result<ureq::tls::TlsConfig> {
        ferry_sfu::driver::tls::client_tls(self.tls_ca.as_deref()).context("--tls-ca")
    }
}

/// Options of `ferry token`.
#[derive(clap::Args, Debug)]
pub struct TokenArgs {
    /// Stream name, or a prefix ending in `*` (`*`: every stream).
    #[arg(long)]
    stream: String,
    /// Grant publishing (WHIP).
    #[arg(long)]
    publish: bool,
    /// Grant playing (WHEP).
    #[arg(long)]
    play: bool,
    /// Lifetime: seconds, or a number with s, m, h or d (`90s`, `30m`, `1h`, `7d`).
    #[arg(long, default_value = "1h", value_parser = parse_ttl)]
    ttl: Duration,
    /// Who the token is for (the `sub` claim).
    #[arg(long, default_value = "ferry")]
    sub: String,
    /// HS256 secret (default: $FERRY_TOKEN_SECRET).
    #[arg(
        long,
        visible_alias = "token-secret",
        env = "FERRY_TOKEN_SECRET",
        hide_env_values = true
    )]
    secret: Option<String>,
    /// Ed25519 private key (PKCS#8 PEM): sign with EdDSA instead of a secret.
    #[arg(long, conflicts_with = "secret")]
    private_key: Option<PathBuf>,
}

/// `90`, `90s`, `30m`, `1h`, `7d`.
pub fn parse_ttl(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (digits, unit) = match s.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => (&s[..i], c),
        _ => (s, 's'),
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("{s:?}: expected a number with s, m, h or d"))?;
    let secs = match unit {
        's' => Some(n),
        'm' => n.checked_mul(60),
        'h' => n.checked_mul(3600),
        'd' => n.checked_mul(86_400),
        _ => return Err(format!("{s:?}: the unit is s, m, h or d")),
    }
    .ok_or_else(|| format!("{s:?} is too long"))?;
    if secs == 0 {
        return Err("the lifetime must be above zero".into());
    }
    Ok(Duration::from_secs(secs))
}

/// Now, Unix seconds.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A token granting `publish` and/or `play` on `stream` for `ttl`.
pub fn mint(
    signer: &Signer,
    sub: &str,
    stream: &str,
    publish: bool,
    play: bool,
    ttl: Duration,
) -> Result<String> {
    let now = unix_now();
    let mut claims = Claims::new(sub, now.saturating_add(ttl.as_secs())).issued_at(now);
    if publish {
        claims = claims.publish(stream);
    }
    if play {
        claims = claims.play(stream);
    }
    Ok(signer.sign(&claims)?)
}

/// `ferry token`: prints a token on stdout.
pub fn run_token(args: TokenArgs) -> Result<()> {
    ensure!(
        args.publish || args.play,
        "say what the token grants: --publish, --play or both"
    );
    ensure!(!args.stream.is_empty(), "--stream must not be empty");
    let signer = match (&args.private_key, args.secret.as_deref()) {
        (Some(path), _) => Signer::ed25519_pem(&read(path)?)
            .with_context(|| format!("--private-key {}", path.display()))?,
        (None, Some(secret)) if !secret.is_empty() => Signer::hs256(secret.as_bytes())?,
        _ => bail!("no key: give --secret (or $FERRY_TOKEN_SECRET) or --private-key"),
    };
    println!(
        "{}",
        mint(
            &signer,
            &args.sub,
            &args.stream,
            args.publish,
            args.play,
            args.ttl
        )?
    );
    Ok(())
}

fn read(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).with_context(|| format!("reading {}", path.display()))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use ferry_proto::auth::Grant;

    #[test]
    fn ttls() {
        assert_eq!(parse_ttl("90"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_ttl("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_ttl("30m"), Ok(Duration::from_secs(1800)));
        assert_eq!(parse_ttl("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_ttl("7d"), Ok(Duration::from_secs(7 * 86_400)));
        for bad in ["", "h", "1x", "0", "-1h", "1.5h", "99999999999999999999d"] {
            assert!(parse_ttl(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn minted_tokens_pass_the_verifier_of_the_same_secret() {
        let args = TokenKeyArgs {
            token_secret: Some("s3cret".into()),
            token_public_key: None,
        };
        let keys = args.keys().unwrap();
        assert!(!keys.generated);
        let signer = keys.signer.as_ref().unwrap();
        let t = mint(signer, "me", "cam*", true, false, Duration::from_secs(60)).unwrap();
        let now = unix_now();
        assert!(
            keys.verifier
                .authorize(Some(&t), Grant::Publish, "cam2", now)
                .is_ok()
        );
        assert!(
            keys.verifier
                .authorize(Some(&t), Grant::Play, "cam2", now)
                .is_err()
        );
        // A random secret is made once, so every part of a process shares it.
        let resolved = TokenKeyArgs::default().resolved();
        assert!(resolved.token_secret.is_some());
        assert_eq!(resolved.resolved().token_secret, resolved.token_secret);
        assert!(TokenKeyArgs::default().keys().unwrap().generated);
    }
}
