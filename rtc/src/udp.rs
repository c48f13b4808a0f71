//! Media sockets.
//!
//! One socket carries every session of a node (or every client of an edge),
//! tens of thousands of datagrams a second. The kernel's default receive
//! buffer (~208 KiB, about a hundred full-size datagrams) overflows whenever
//! the process is not scheduled for a few milliseconds, and what overflows is
//! lost before we see it. We ask for [`BUFFER_BYTES`] each way; the kernel
//! caps the request at `net.core.rmem_max` / `wmem_max`.

use std::net::SocketAddr;

use socket2::{Domain, Protocol, Socket, Type};
use tokio::net::UdpSocket;

/// Requested kernel buffer per direction.
pub const BUFFER_BYTES: usize = 8 << 20;

/// Binds a non-blocking UDP socket with large send and receive buffers.
pub fn bind(addr: SocketAddr) -> std::io::Result<UdpSocket> {
    let socket = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    // Best effort: a smaller buffer is still a working socket.
    let _ = socket.set_recv_buffer_size(BUFFER_BYTES);
    let _ = socket.set_send_buffer_size(BUFFER_BYTES);
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    UdpSocket::from_std(socket.into())
}

/// The kernel's receive buffer of `socket`, in bytes (what it granted).
pub fn recv_buffer_bytes(socket: &UdpSocket) -> std::io::Result<usize> {
    socket2::SockRef::from(socket).recv_buffer_size()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn binds_with_a_larger_buffer_than_the_default() {
        let big = bind("127.0.0.1:0".parse().expect("addr")).expect("bind");
        let plain = UdpSocket::bind("127.0.0.1:0").await.expect("bind");
        let (b, p) = (
            recv_buffer_bytes(&big).expect("size"),
            recv_buffer_bytes(&plain).expect("size"),
        );
        assert!(b >= p, "{b} < {p}");
        big.send_to(b"x", plain.local_addr().expect("addr"))
            .await
            .expect("send");
        let mut buf = [0u8; 4];
        let (n, from) = plain.recv_from(&mut buf).await.expect("recv");
        assert_eq!((n, from), (1, big.local_addr().expect("addr")));
    }
}
