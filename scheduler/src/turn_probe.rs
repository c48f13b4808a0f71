//! Health of the TURN relays: a STUN Binding request to each relay every interval (coturn
//! answers it without credentials, RFC 8489 §6.3); a relay that misses `misses` probes in a row is
//! down — handed to nobody ([`crate::turn::TurnFleet::set_up`]) — until it answers again.
//! `turn:`/`stun:` URIs with `transport=udp` (or none) are probed over UDP, `transport=tcp`
//! and `turns:` by a TCP connection.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use ferry_proto::NodeId;

use crate::service::Scheduler;

const MAGIC_COOKIE: [u8; 4] = [0x21, 0x12, 0xa4, 0x42];
/// How long a probe waits for its answer.
const PROBE_TIMEOUT: Duration = Duration::from_millis(1000);

/// A fresh transaction id (unique per probe; it only matches answers to requests).
fn transaction_id() -> [u8; 12] {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let mut id = [0u8; 12];
    id[..8].copy_from_slice(&nanos.to_be_bytes());
    id[8..].copy_from_slice(&N.fetch_add(1, Ordering::Relaxed).to_be_bytes());
    id
}

/// A STUN Binding request with transaction id `txid` (no attributes).
pub fn binding_request(txid: [u8; 12]) -> [u8; 20] {
    let mut m = [0u8; 20];
    m[..2].copy_from_slice(&0x0001u16.to_be_bytes());
    m[4..8].copy_from_slice(&MAGIC_COOKIE);
    m[8..].copy_from_slice(&txid);
    m
}

/// Whether `msg` is a Binding success response to `txid`.
pub fn is_binding_success(msg: &[u8], txid: &[u8; 12]) -> bool {
    msg.len() >= 20
        && msg[..2] == 0x0101u16.to_be_bytes()
        && msg[4..8] == MAGIC_COOKIE
        && msg[8..20] == txid[..]
}

/// How a relay is probed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Probe {
    /// A Binding request over UDP.
    Udp(String),
    /// A TCP connection (`transport=tcp`, `turns:`).
    Tcp(String),
}

/// The probe for a relay URI (`turn:host:port?transport=udp`), if it names a host and port.
pub fn probe_for(uri: &str) -> Option<Probe> {
    let (scheme, rest) = uri.split_once(':')?;
    let (hostport, query) = rest.split_once('?').unwrap_or((rest, ""));
    let default_port = if scheme == "turns" { 5349 } else { 3478 };
    let hostport = if hostport
        .rsplit_once(':')
        .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
    {
        hostport.to_owned()
    } else {
        format!("{hostport}:{default_port}")
    };
    let tcp = scheme == "turns" || query.split('&').any(|kv| kv == "transport=tcp");
    Some(if tcp {
        Probe::Tcp(hostport)
    } else {
        Probe::Udp(hostport)
    })
}

async fn resolve(hostport: &str) -> Option<SocketAddr> {
    tokio::net::lookup_host(hostport).await.ok()?.next()
}

/// One probe: whether the relay answered within [`PROBE_TIMEOUT`].
pub async fn probe_once(probe: &Probe) -> bool {
    let attempt = async {
        match probe {
            Probe::Udp(hostport) => {
                let to = resolve(hostport).await?;
                let local: SocketAddr = if to.is_ipv4() {
                    ([0, 0, 0, 0], 0).into()
                } else {
                    ([0u16; 8], 0).into()
                };
                let socket = tokio::net::UdpSocket::bind(local).await.ok()?;
                let txid = transaction_id();
                let req = binding_request(txid);
                let mut buf = [0u8; 512];
                // Twice: a single lost datagram is not a dead relay.
                for _ in 0..2 {
                    socket.send_to(&req, to).await.ok()?;
                    let wait = tokio::time::timeout(PROBE_TIMEOUT / 2, async {
                        loop {
                            let (n, from) = socket.recv_from(&mut buf).await.ok()?;
                            if from == to && is_binding_success(&buf[..n], &txid) {
                                return Some(());
                            }
                        }
                    });
                    if let Ok(Some(())) = wait.await {
                        return Some(());
                    }
                }
                None
            }
            Probe::Tcp(hostport) => {
                let to = resolve(hostport).await?;
                tokio::net::TcpStream::connect(to).await.ok().map(|_| ())
            }
        }
    };
    matches!(
        tokio::time::timeout(PROBE_TIMEOUT, attempt).await,
        Ok(Some(()))
    )
}

/// Probes every relay of the scheduler's fleet every `every`, forever; `misses` failures in a
/// row take a relay down, one answer brings it back.
pub async fn run(scheduler: Arc<Scheduler>, every: Duration, misses: u32) {
    let mut missed: std::collections::BTreeMap<NodeId, u32> = Default::default();
    let mut tick = tokio::time::interval(every);
    loop {
        tick.tick().await;
        let relays = scheduler.turn_relays();
        let probes = relays.iter().map(|(id, uri)| async move {
            let ok = match probe_for(uri) {
                Some(p) => probe_once(&p).await,
                None => false,
            };
            (id.clone(), uri.clone(), ok)
        });
        for (id, uri, ok) in futures_util::future::join_all(probes).await {
            let n = missed.entry(id.clone()).or_default();
            *n = if ok { 0 } else { n.saturating_add(1) };
            let up = *n < misses;
            if scheduler.set_turn_relay_up(&id, up) {
                if up {
                    tracing::info!(relay = %uri, "TURN relay answers again: back in the rotation");
                } else {
                    tracing::warn!(relay = %uri, missed = *n, "TURN relay does not answer STUN: handed to nobody");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_and_responses() {
        let txid = [7u8; 12];
        let req = binding_request(txid);
        assert_eq!(&req[..4], &[0, 1, 0, 0]);
        let mut resp = req;
        resp[..2].copy_from_slice(&[0x01, 0x01]);
        assert!(is_binding_success(&resp, &txid));
        assert!(!is_binding_success(&resp, &[8u8; 12]));
        assert!(!is_binding_success(&req, &txid), "a request is no answer");
        assert!(!is_binding_success(&resp[..19], &txid));
    }

    #[test]
    fn uris_map_to_probes() {
        assert_eq!(
            probe_for("turn:10.0.0.1:3478?transport=udp"),
            Some(Probe::Udp("10.0.0.1:3478".into()))
        );
        assert_eq!(
            probe_for("turn:relay.example?transport=tcp"),
            Some(Probe::Tcp("relay.example:3478".into()))
        );
        assert_eq!(
            probe_for("turns:relay.example"),
            Some(Probe::Tcp("relay.example:5349".into()))
        );
        assert_eq!(
            probe_for("turn:[2001:db8::1]:3479"),
            Some(Probe::Udp("[2001:db8::1]:3479".into()))
        );
        assert_eq!(probe_for("nonsense"), None);
    }

    #[tokio::test]
    async fn a_closed_port_is_down() {
        // Nothing listens there (bound, then dropped).
        let port = std::net::UdpSocket::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        assert!(!probe_once(&Probe::Udp(format!("127.0.0.1:{port}"))).await);
    }
}
