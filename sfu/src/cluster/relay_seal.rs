//! The seal of relay datagrams between nodes: AES-128-GCM keyed from the cluster key, with
//! replay protection.
//!
//! Every sending core has a sender id of 64 bits (drawn from its seed) and a counter. Its key
//! is derived from the cluster key and the id (HMAC-SHA-256, the first 16 bytes), so two
//! senders never share a key, and the counter is the nonce: a (key, nonce) pair is never used
//! twice. The datagram carries the id and the counter in clear after its own clear header:
//!
//! ```text
//! header (clear, authenticated) | sender id (8) | counter (8) | body | tag (16)
//! ```
//!
//! Media bodies (the relayed RTP packet, header and payload) are encrypted: nobody on the
//! network between two nodes reads a relayed stream. Control bodies stay clear but
//! authenticated (the receiving node routes them to the owning core by what they name, and they
//! carry stream names and offers, not media). A receiver keeps, per sender, a window of the
//! last [`WINDOW`] counters it accepted and refuses a datagram it has seen or one older than
//! the window: a datagram captured on the link and sent again does nothing. The window is
//! per receiving core and the counter counts everything the sender sends to every node, so
//! the reordering tolerated is [`WINDOW`] divided by the nodes a core relays to at once.
//!
//! Trust: whoever holds the cluster key (which sits beside the cluster CA that issues the
//! nodes' migration identities, `ferry secrets`) can read and forge relay traffic, as with the
//! HMAC envelope this replaces; a node without it can do neither.

use std::collections::BTreeMap;

use aes_gcm::{AeadInOut, Aes128Gcm, KeyInit as _};
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// Bytes of the sender id and the counter after a datagram's clear header.
pub const ENVELOPE: usize = 8 + 8;
/// Bytes of the GCM tag at the end.
pub const SEAL_TAG: usize = 16;
/// Counters a receiver remembers per sender.
pub const WINDOW: u64 = 1024;
/// Senders a receiver remembers; past that the one with the lowest id is forgotten (its next
/// datagram derives its key again and starts a new window).
const MAX_SENDERS: usize = 1024;

/// Why a sealed datagram was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SealError {
    /// Too short for its envelope and tag.
    #[error("sealed datagram too short")]
    Malformed,
    /// The tag does not match: another key, or changed on the way.
    #[error("sealed datagram failed authentication")]
    BadTag,
    /// Seen before, or older than the receiver's window.
    #[error("sealed datagram replayed")]
    Replayed,
}

/// The keys of every sender, from the cluster key ([`crate::cluster::relay::ClusterKey`]).
#[derive(Clone)]
pub struct SealKeys(Hmac<Sha256>);

impl std::fmt::Debug for SealKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SealKeys(..)")
    }
}

impl SealKeys {
    /// The keys from the 32 secret bytes of the cluster key.
    pub fn new(secret: &[u8; 32]) -> Self {
        // HMAC takes keys of any length, so this cannot fail.
        Self(
            <Hmac<Sha256> as hmac::KeyInit>::new_from_slice(secret)
                .unwrap_or_else(|_| unreachable!()),
        )
    }

    /// The cipher of sender `id`: the first 16 bytes of HMAC-SHA-256(secret, label ‖ id).
    fn cipher(&self, id: u64) -> Aes128Gcm {
        let mut mac = self.0.clone();
        mac.update(b"ferry relay seal v2\0");
        mac.update(&id.to_be_bytes());
        let full = mac.finalize().into_bytes();
        let mut k = [0u8; 16];
        k.copy_from_slice(&full[..16]);
        Aes128Gcm::new(&k.into())
    }
}

/// A sending core's seal.
pub struct RelaySealer {
    id: u64,
    next: u64,
    cipher: Aes128Gcm,
}

impl std::fmt::Debug for RelaySealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RelaySealer")
            .field("id", &self.id)
            .field("next", &self.next)
            .finish_non_exhaustive()
    }
}

fn nonce(counter: u64) -> [u8; 12] {
    let mut n = [0u8; 12];
    n[4..].copy_from_slice(&counter.to_be_bytes());
    n
}

impl RelaySealer {
    /// The seal of the sender `id` (unique per sending core; drawn from its seed).
    pub fn new(keys: &SealKeys, id: u64) -> Self {
        Self {
            id,
            next: 0,
            cipher: keys.cipher(id),
        }
    }

    /// Seals `buf` = a clear header of `header` bytes followed by the body: inserts the
    /// envelope after the header, encrypts the body when `encrypt` (else authenticates it
    /// with the header), appends the tag.
    pub fn seal(&mut self, buf: &mut Vec<u8>, header: usize, encrypt: bool) {
        let counter = self.next;
        self.next = self.next.wrapping_add(1);
        let mut envelope = [0u8; ENVELOPE];
        envelope[..8].copy_from_slice(&self.id.to_be_bytes());
        envelope[8..].copy_from_slice(&counter.to_be_bytes());
        buf.splice(header..header, envelope);
        let body_at = if encrypt {
            header + ENVELOPE
        } else {
            buf.len()
        };
        let (aad, body) = buf.split_at_mut(body_at);
        // Encryption fails only for bodies past GCM's limit (64 GiB).
        let tag = self
            .cipher
            .encrypt_inout_detached(&nonce(counter).into(), aad, body.into())
            .unwrap_or_default();
        buf.extend_from_slice(&tag);
    }
}

/// What a receiving core knows of one sender.
struct Sender {
    cipher: Aes128Gcm,
    window: CounterWindow,
}

/// A receiving core's check of sealed datagrams.
pub struct RelayOpener {
    keys: SealKeys,
    senders: BTreeMap<u64, Sender>,
}

impl std::fmt::Debug for RelayOpener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RelayOpener")
            .field("senders", &self.senders.len())
            .finish_non_exhaustive()
    }
}

impl RelayOpener {
    /// The check with the cluster's keys.
    pub fn new(keys: SealKeys) -> Self {
        Self {
            keys,
            senders: BTreeMap::new(),
        }
    }

    /// Checks `data` = clear header of `header` bytes, envelope, body, tag; decrypts the body in
    /// place when it was encrypted. Returns the body. A datagram whose tag does not match
    /// changes nothing (it cannot move a sender's window or make a sender known).
    pub fn open<'a>(
        &mut self,
        data: &'a mut [u8],
        header: usize,
        encrypted: bool,
    ) -> Result<&'a [u8], SealError> {
        if data.len() < header + ENVELOPE + SEAL_TAG {
            return Err(SealError::Malformed);
        }
        let word = |i: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&data[i..i + 8]);
            u64::from_be_bytes(b)
        };
        let (id, counter) = (word(header), word(header + 8));
        let known = self.senders.get(&id);
        if let Some(s) = known
            && !s.window.fresh(counter)
        {
            return Err(SealError::Replayed);
        }
        let derived;
        let cipher = match known {
            Some(s) => &s.cipher,
            None => {
                derived = self.keys.cipher(id);
                &derived
            }
        };
        let end = data.len() - SEAL_TAG;
        let (sealed, tag) = data.split_at_mut(end);
        let tag: [u8; SEAL_TAG] = (&*tag).try_into().map_err(|_| SealError::Malformed)?;
        let body_at = if encrypted { header + ENVELOPE } else { end };
        let (aad, body) = sealed.split_at_mut(body_at);
        cipher
            .decrypt_inout_detached(&nonce(counter).into(), aad, body.into(), &tag.into())
            .map_err(|_| SealError::BadTag)?;
        match self.senders.get_mut(&id) {
            Some(s) => s.window.accept(counter),
            None => {
                if self.senders.len() >= MAX_SENDERS {
                    self.senders.pop_first();
                }
                let mut window = CounterWindow::default();
                window.accept(counter);
                self.senders.insert(
                    id,
                    Sender {
                        cipher: self.keys.cipher(id),
                        window,
                    },
                );
            }
        }
        let body_start = header + ENVELOPE;
        Ok(&data[body_start..end])
    }
}

/// The counters of one sender seen lately: the highest, and which of the [`WINDOW`] below it.
#[derive(Default)]
struct CounterWindow {
    /// Highest counter accepted plus one (0: none yet).
    top: u64,
    /// Bit `c % WINDOW` for counter `c` in `top - WINDOW .. top`.
    seen: [u64; (WINDOW / 64) as usize],
}

impl CounterWindow {
    fn fresh(&self, c: u64) -> bool {
        if c >= self.top {
            return true;
        }
        if self.top - c > WINDOW {
            return false;
        }
        let i = (c % WINDOW) as usize;
        self.seen[i / 64] & (1 << (i % 64)) == 0
    }

    fn accept(&mut self, c: u64) {
        if c >= self.top {
            if c - self.top >= WINDOW {
                self.seen = Default::default();
            } else {
                for old in self.top..c {
                    let i = (old % WINDOW) as usize;
                    self.seen[i / 64] &= !(1 << (i % 64));
                }
            }
            self.top = c + 1;
        }
        let i = (c % WINDOW) as usize;
        self.seen[i / 64] |= 1 << (i % 64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sealed(s: &mut RelaySealer, header: &[u8], body: &[u8], encrypt: bool) -> Vec<u8> {
        let mut buf = header.to_vec();
        buf.extend_from_slice(body);
        s.seal(&mut buf, header.len(), encrypt);
        buf
    }

    #[test]
    fn a_sealed_body_opens_once_and_is_not_readable_on_the_wire() {
        let key = SealKeys::new(&[7; 32]);
        let mut tx = RelaySealer::new(&key, 11);
        let mut rx = RelayOpener::new(key.clone());
        let body = b"a relayed RTP packet: header and payload".to_vec();
        let wire = sealed(&mut tx, b"HEAD", &body, true);
        assert_eq!(wire.len(), 4 + ENVELOPE + body.len() + SEAL_TAG);
        assert!(!wire.windows(8).any(|w| body.windows(8).any(|b| b == w)));
        let mut d = wire.clone();
        assert_eq!(rx.open(&mut d, 4, true), Ok(&body[..]));
        let mut again = wire.clone();
        assert_eq!(rx.open(&mut again, 4, true), Err(SealError::Replayed));
        // The next one opens; one with a changed header, body or envelope does not.
        let next = sealed(&mut tx, b"HEAD", &body, true);
        for i in [0, 5, 13, 4 + ENVELOPE + 3, next.len() - 1] {
            let mut bad = next.clone();
            bad[i] ^= 1;
            assert!(rx.open(&mut bad, 4, true).is_err(), "byte {i}");
        }
        let mut d = next.clone();
        assert_eq!(rx.open(&mut d, 4, true), Ok(&body[..]));
        // Another cluster's key opens nothing.
        let mut other = RelayOpener::new(SealKeys::new(&[8; 32]));
        let mut d = sealed(&mut tx, b"HEAD", &body, true);
        assert_eq!(other.open(&mut d, 4, true), Err(SealError::BadTag));
        assert_eq!(rx.open(&mut [0; 10], 4, true), Err(SealError::Malformed));
    }

    #[test]
    fn a_clear_body_is_authenticated_and_a_forgery_moves_no_window() {
        let key = SealKeys::new(&[7; 32]);
        let mut tx = RelaySealer::new(&key, 3);
        let mut rx = RelayOpener::new(key.clone());
        let wire = sealed(&mut tx, b"C", b"subscribe cam", false);
        assert!(wire.windows(13).any(|w| w == b"subscribe cam"));
        let mut forged = wire.clone();
        forged[1 + ENVELOPE] ^= 1;
        assert_eq!(rx.open(&mut forged, 1, false), Err(SealError::BadTag));
        // A forged datagram with a far-ahead counter of a known sender moves nothing.
        let mut d = wire.clone();
        assert_eq!(rx.open(&mut d, 1, false), Ok(&b"subscribe cam"[..]));
        let mut ahead = sealed(&mut tx, b"C", b"x", false);
        ahead[1 + 8..1 + 16].copy_from_slice(&(u64::MAX - 1).to_be_bytes());
        assert_eq!(rx.open(&mut ahead, 1, false), Err(SealError::BadTag));
        let mut d = sealed(&mut tx, b"C", b"y", false);
        assert_eq!(rx.open(&mut d, 1, false), Ok(&b"y"[..]));
    }

    #[test]
    fn reordering_within_the_window_is_accepted_and_older_is_refused() {
        let key = SealKeys::new(&[7; 32]);
        let mut tx = RelaySealer::new(&key, 5);
        let mut rx = RelayOpener::new(key.clone());
        let wires: Vec<Vec<u8>> = (0..WINDOW + 10)
            .map(|i| sealed(&mut tx, b"H", &i.to_be_bytes(), true))
            .collect();
        // The newest first, then the one just inside the window, then the one just outside.
        let last = wires.len() - 1;
        let mut d = wires[last].clone();
        assert!(rx.open(&mut d, 1, true).is_ok());
        let mut d = wires[last + 1 - WINDOW as usize].clone();
        assert!(rx.open(&mut d, 1, true).is_ok());
        let mut d = wires[last - WINDOW as usize].clone();
        assert_eq!(rx.open(&mut d, 1, true), Err(SealError::Replayed));
        // Each of the rest inside the window opens once, in any order.
        for i in (last + 2 - WINDOW as usize..last).rev() {
            let mut d = wires[i].clone();
            assert!(rx.open(&mut d, 1, true).is_ok(), "{i}");
            let mut d = wires[i].clone();
            assert_eq!(rx.open(&mut d, 1, true), Err(SealError::Replayed), "{i}");
        }
    }

    #[test]
    fn senders_have_keys_of_their_own() {
        let key = SealKeys::new(&[7; 32]);
        let (mut a, mut b) = (RelaySealer::new(&key, 1), RelaySealer::new(&key, 2));
        // The same counter and body under two senders: different ciphertexts.
        let wa = sealed(&mut a, b"H", b"same body", true);
        let wb = sealed(&mut b, b"H", b"same body", true);
        assert_ne!(wa[1 + ENVELOPE..], wb[1 + ENVELOPE..]);
        let mut rx = RelayOpener::new(key.clone());
        let (mut da, mut db) = (wa.clone(), wb.clone());
        assert!(rx.open(&mut da, 1, true).is_ok());
        assert!(rx.open(&mut db, 1, true).is_ok());
    }
}
