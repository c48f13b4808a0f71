//! The TURN client's fuzz body (feature `fuzzing`; `fuzz/fuzz_targets/turn_client.rs`).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use super::{DEFAULT_PORT, TurnClient, TurnConfig, long_term_key};
use crate::stun::{self, Class, MAX_MESSAGE_LEN, StunError, StunWriter};

/// Fuzz body: arbitrary bytes as datagrams from the server, raw and with their transaction id
/// replaced by one the client is waiting on, in every phase (allocating, authenticating,
/// allocated with a permission and a bound channel). Must never panic.
#[allow(clippy::disallowed_methods)] // a fuzz body picks the start time
pub fn fuzz_turn_client(data: &[u8]) {
    let now = Instant::now();
    let server = SocketAddr::from(([127, 0, 0, 1], DEFAULT_PORT));
    let peer = SocketAddr::from(([127, 0, 0, 1], 9000));
    let mut c = TurnClient::new(TurnConfig::new(server, "1:user", "pass"), now);
    let feed = |c: &mut TurnClient, data: &[u8]| {
        let mut raw = data.to_vec();
        let _ = c.handle_datagram(now, &mut raw);
        for id in c.pending_ids() {
            let mut d = data.to_vec();
            if let Some(txid) = d.get_mut(8..20) {
                txid.copy_from_slice(&id);
            }
            let _ = c.handle_datagram(now, &mut d);
        }
        let _ = c.send_to(now, peer, data);
        c.handle_timeout(now + Duration::from_secs(700));
        while c.poll_transmit().is_some() {}
        while c.poll_event().is_some() {}
        let _ = (c.poll_timeout(), c.relayed_address(), c.state(), c.stats());
    };
    feed(&mut c, data);
    // Through the whole handshake with a well-behaved server, then the input again.
    let mut c = TurnClient::new(TurnConfig::new(server, "1:user", "pass"), now);
    let key = long_term_key("1:user", "ferry", "pass");
    let answer = |c: &mut TurnClient, ok: bool| {
        for id in c.pending_ids() {
            let Some(method) = c
                .transactions
                .iter()
                .find(|t| t.id == id)
                .map(|t| t.request.method())
            else {
                continue;
            };
            let mut buf = vec![0u8; MAX_MESSAGE_LEN];
            let n = (|| {
                let class = if ok { Class::Success } else { Class::Error };
                let mut w = StunWriter::new(&mut buf, class, method, &id)?;
                if ok {
                    w.xor_relayed_address(SocketAddr::from(([127, 0, 0, 1], 50_000)))?
                        .lifetime(600)?
                        .message_integrity(&key)?;
                } else {
                    w.error_code(401, "Unauthorized")?
                        .realm("ferry")?
                        .nonce("n")?;
                }
                Ok::<usize, StunError>(w.finish())
            })();
            if let Ok(n) = n {
                let _ = c.handle_datagram(now, &mut buf[..n]);
            }
        }
    };
    answer(&mut c, false);
    answer(&mut c, true);
    let _ = c.send_to(now, peer, b"x");
    answer(&mut c, true);
    answer(&mut c, true);
    feed(&mut c, data);
    c.close(now);
    feed(&mut c, data);
    let _ = stun::is_stun(data);
}
