//! The encapsulation between an edge (or a node acting as one for a moved
//! session) and the node that owns a client's session (DESIGN §2).
//!
//! A tunnel datagram carries one client datagram together with the client's
//! address and the ownership epoch of the session it belongs to, in an
//! envelope authenticated with the cluster key:
//!
//! ```text
//! 0xF2 | version | flags | family (4|6) | epoch (u64) | client ip | client port | datagram | tag (16)
//! ```
//!
//! Towards a node ([`TO_CLIENT`] clear) the datagram came from the client;
//! towards an edge ([`TO_CLIENT`] set) it is to be sent to the client, and
//! the edge drops it unless `epoch` is the session's newest (fencing). A
//! [`CLAIM`] carries a session's ICE ufrag instead of a datagram: the node
//! owns that session from `epoch` on.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use crate::cluster::relay::{ClusterKey, RelayError};

/// First byte of tunnel datagrams (unassigned in RFC 7983).
pub const TUNNEL: u8 = 0xF2;
const VERSION: u8 = 1;
/// The datagram goes to the client (else it came from the client).
pub const TO_CLIENT: u8 = 1;
/// Re-sent by a node that no longer owns the session (forwarding pointer):
/// it says nothing about the client's path.
pub const FORWARDED: u8 = 2;
/// The payload is the ufrag of a session the sender owns from `epoch` on.
pub const CLAIM: u8 = 4;
const KNOWN_FLAGS: u8 = TO_CLIENT | FORWARDED | CLAIM;

/// The header of a tunnel datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TunnelHeader {
    /// [`TO_CLIENT`], [`FORWARDED`], [`CLAIM`].
    pub flags: u8,
    /// Ownership epoch of the session.
    pub epoch: u64,
    /// The client's address.
    pub client: SocketAddr,
}

impl TunnelHeader {
    /// Whether `flag` is set.
    pub fn has(&self, flag: u8) -> bool {
        self.flags & flag != 0
    }
}

/// Writes a tunnel datagram around `inner` into `out` (cleared first).
pub fn write(key: &ClusterKey, h: &TunnelHeader, inner: &[u8], out: &mut Vec<u8>) {
    out.clear();
    let family = if h.client.is_ipv4() { 4 } else { 6 };
    out.extend_from_slice(&[TUNNEL, VERSION, h.flags, family]);
    out.extend_from_slice(&h.epoch.to_be_bytes());
    match h.client.ip() {
        IpAddr::V4(ip) => out.extend_from_slice(&ip.octets()),
        IpAddr::V6(ip) => out.extend_from_slice(&ip.octets()),
    }
    out.extend_from_slice(&h.client.port().to_be_bytes());
    out.extend_from_slice(inner);
    key.seal(out);
}

/// Reads an authenticated tunnel datagram: its header and the datagram (or
/// claimed ufrag) inside.
pub fn read<'a>(key: &ClusterKey, data: &'a [u8]) -> Result<(TunnelHeader, &'a [u8]), RelayError> {
    let (h, range) = read_range(key, data)?;
    Ok((h, &data[range]))
}

/// Like [`read`], giving where the inner datagram lies in `data` (so it can
/// be processed in place).
pub fn read_range(
    key: &ClusterKey,
    data: &[u8],
) -> Result<(TunnelHeader, std::ops::Range<usize>), RelayError> {
    parse(key.open(data)?)
}

/// The header and payload range of an opened tunnel datagram.
fn parse(body: &[u8]) -> Result<(TunnelHeader, std::ops::Range<usize>), RelayError> {
    if body.len() < 12 || body[0] != TUNNEL || body[1] != VERSION {
        return Err(RelayError::Malformed);
    }
    let flags = body[2];
    if flags & !KNOWN_FLAGS != 0 {
        return Err(RelayError::Malformed);
    }
    let mut e = [0u8; 8];
    e.copy_from_slice(&body[4..12]);
    let epoch = u64::from_be_bytes(e);
    let (ip, rest): (IpAddr, &[u8]) = match body[3] {
        4 if body.len() >= 12 + 4 + 2 => {
            let mut o = [0u8; 4];
            o.copy_from_slice(&body[12..16]);
            (Ipv4Addr::from(o).into(), &body[16..])
        }
        6 if body.len() >= 12 + 16 + 2 => {
            let mut o = [0u8; 16];
            o.copy_from_slice(&body[12..28]);
            (Ipv6Addr::from(o).into(), &body[28..])
        }
        _ => return Err(RelayError::Malformed),
    };
    let port = u16::from_be_bytes([rest[0], rest[1]]);
    let start = body.len() - rest.len() + 2;
    Ok((
        TunnelHeader {
            flags,
            epoch,
            client: SocketAddr::new(ip, port),
        },
        start..body.len(),
    ))
}

/// The header of a tunnel datagram and where its payload lies, without checking the tag (for
/// routing to the shard that checks it).
pub fn peek(data: &[u8]) -> Option<(TunnelHeader, std::ops::Range<usize>)> {
    let body = data.get(..data.len().checked_sub(crate::cluster::relay::TAG_LEN)?)?;
    parse(body).ok()
}

/// Bytes a tunnel adds around a datagram to an IPv4 client.
pub const OVERHEAD_V4: usize = 4 + 8 + 4 + 2 + 16;

#[cfg(test)]
mod tests {
    use super::*;

    fn key(b: u8) -> ClusterKey {
        ClusterKey::new(&[b; 32])
    }

    #[test]
    fn round_trip_v4_and_v6() {
        for client in ["192.0.2.7:50000", "[2001:db8::1]:443"] {
            let h = TunnelHeader {
                flags: TO_CLIENT,
                epoch: 7,
                client: client.parse().unwrap(),
            };
            let mut out = Vec::new();
            write(&key(1), &h, b"\x80payload", &mut out);
            let (got, inner) = read(&key(1), &out).unwrap();
            assert_eq!(got, h);
            assert_eq!(inner, b"\x80payload");
        }
    }

    #[test]
    fn refuses_other_keys_tampering_and_truncation() {
        let h = TunnelHeader {
            flags: 0,
            epoch: 1,
            client: "192.0.2.7:5".parse().unwrap(),
        };
        let mut out = Vec::new();
        write(&key(1), &h, b"abc", &mut out);
        assert_eq!(read(&key(2), &out), Err(RelayError::BadTag));
        let mut bad = out.clone();
        bad[11] ^= 1;
        assert_eq!(read(&key(1), &bad), Err(RelayError::BadTag));
        for n in 0..out.len() {
            assert!(read(&key(1), &out[..n]).is_err());
        }
    }

    #[test]
    fn unknown_flags_and_families_are_malformed() {
        let k = key(3);
        let mut out = vec![TUNNEL, VERSION, 0x80, 4];
        out.extend_from_slice(&[0; 8 + 4 + 2]);
        k.seal(&mut out);
        assert_eq!(read(&k, &out), Err(RelayError::Malformed));
        let mut out = vec![TUNNEL, VERSION, 0, 5];
        out.extend_from_slice(&[0; 8 + 4 + 2]);
        k.seal(&mut out);
        assert_eq!(read(&k, &out), Err(RelayError::Malformed));
    }
}
