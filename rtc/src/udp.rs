//! Media sockets.
//!
//! One socket carries every session of a node (or every client of an edge),
//! tens of thousands of datagrams a second. The kernel's default receive
//! buffer (~208 KiB, about a hundred full-size datagrams) overflows whenever
//! the process is not scheduled for a few milliseconds, and what overflows is
//! lost before we see it. We ask for [`BUFFER_BYTES`] each way; the kernel
//! caps the request at `net.core.rmem_max` / `wmem_max`.
//!
//! Datagrams go in and out in batches — `recvmmsg` / `sendmmsg`, up to [`BATCH`] per system
//! call — so a fan-out to a hundred subscribers costs two system calls, not a hundred: the one
//! UDP loop, [`serve`], drives the node's workers, the edge and the bench peers (each a
//! [`Datagrams`] core).
//!
//! The kernel stamps every datagram it queues for us (`SO_TIMESTAMPNS`): how long a datagram
//! waited in the receive buffer ([`RecvBatch::waited`]) is the node's queueing delay, which an
//! overloaded node keeps bounded by shedding work (`ferry_sfu::node::overload`).

// The driver: it reads the clock and gives the cores `now`.
#![allow(clippy::disallowed_methods)]

use std::io::{IoSlice, IoSliceMut};
use std::net::{SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::AsRawFd;

use nix::sys::socket::{ControlMessageOwned, MsgFlags, MultiHeaders, SockaddrStorage};
use nix::sys::time::TimeSpec;
use socket2::{Domain, Protocol, Socket, Type};
use tokio::io::Interest;
use tokio::net::UdpSocket;

/// Datagrams per `recvmmsg` / `sendmmsg`.
pub const BATCH: usize = 64;

/// Largest datagram received (larger ones are cut).
pub const MAX_DATAGRAM: usize = 2048;

/// Requested kernel buffer per direction.
pub const BUFFER_BYTES: usize = 8 << 20;

/// Binds a non-blocking UDP socket with large send and receive buffers.
pub fn bind(addr: SocketAddr) -> std::io::Result<UdpSocket> {
    open(addr, false)
}

/// Binds `n` sockets to one address, as [`bind`] does: with `n` > 1 they share it
/// (`SO_REUSEPORT`; the kernel spreads senders over them by 4-tuple), a port of 0 being the
/// one the first socket got.
pub fn bind_shared(addr: SocketAddr, n: usize) -> std::io::Result<Vec<UdpSocket>> {
    if n <= 1 {
        return Ok(vec![bind(addr)?]);
    }
    let mut sockets: Vec<UdpSocket> = Vec::with_capacity(n);
    for _ in 0..n {
        let at = match sockets.first() {
            Some(s) => s.local_addr()?,
            None => addr,
        };
        sockets.push(open(at, true)?);
    }
    Ok(sockets)
}

fn open(addr: SocketAddr, reuse_port: bool) -> std::io::Result<UdpSocket> {
    let socket = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    if reuse_port {
        socket.set_reuse_port(true)?;
    }
    // Best effort: a smaller buffer is still a working socket.
    let _ = socket.set_recv_buffer_size(BUFFER_BYTES);
    let _ = socket.set_send_buffer_size(BUFFER_BYTES);
    socket.set_nonblocking(true)?;
    // Best effort too: without stamps the node cannot see its queueing delay, and still works.
    let _ = nix::sys::socket::setsockopt(
        &socket,
        nix::sys::socket::sockopt::ReceiveTimestampns,
        &true,
    );
    socket.bind(&addr.into())?;
    UdpSocket::from_std(socket.into())
}

/// Waits until a sans-IO core's next deadline (`poll_timeout`); forever when it has none.
pub async fn sleep_until(deadline: Option<std::time::Instant>) {
    match deadline {
        Some(t) => tokio::time::sleep_until(t.into()).await,
        None => std::future::pending().await,
    }
}

/// The kernel's receive buffer of `socket`, in bytes (what it granted).
pub fn recv_buffer_bytes(socket: &UdpSocket) -> std::io::Result<usize> {
    socket2::SockRef::from(socket).recv_buffer_size()
}

fn to_std(a: &SockaddrStorage) -> Option<SocketAddr> {
    if let Some(v4) = a.as_sockaddr_in() {
        Some(SocketAddr::V4(SocketAddrV4::from(*v4)))
    } else {
        a.as_sockaddr_in6()
            .map(|v6| SocketAddr::V6(SocketAddrV6::from(*v6)))
    }
}

fn nix_io(e: nix::errno::Errno) -> std::io::Error {
    std::io::Error::from_raw_os_error(e as i32)
}

/// Buffers for [`try_recv_batch`]: up to [`BATCH`] datagrams with their lengths, senders and
/// kernel receive times.
#[derive(Debug)]
pub struct RecvBatch {
    bufs: Vec<Vec<u8>>,
    lens: Vec<usize>,
    from: Vec<SocketAddr>,
    /// When the kernel queued each datagram (`CLOCK_REALTIME`), if the socket stamps them.
    stamps: Vec<Option<std::time::SystemTime>>,
    /// Datagrams the last call received: the next asks for twice as many (at least
    /// [`MIN_RECV`], at most [`BATCH`]), so a socket that gets one datagram per wake-up does
    /// not set up 64 message headers (~14 KiB, zeroed) for each.
    last: usize,
    /// Datagrams the last call asked for.
    asked: usize,
}

/// Fewest datagrams one [`try_recv_batch`] asks for.
pub const MIN_RECV: usize = 4;

impl Default for RecvBatch {
    fn default() -> Self {
        RecvBatch {
            bufs: vec![vec![0u8; MAX_DATAGRAM]; BATCH],
            lens: Vec::with_capacity(BATCH),
            from: Vec::with_capacity(BATCH),
            stamps: Vec::with_capacity(BATCH),
            last: BATCH,
            asked: BATCH,
        }
    }
}

impl RecvBatch {
    /// Datagrams held.
    pub fn len(&self) -> usize {
        self.lens.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.lens.is_empty()
    }

    /// Whether the last [`try_recv_batch`] got all it asked for (more may be waiting).
    pub fn full(&self) -> bool {
        self.lens.len() >= self.asked
    }

    /// Datagram `i` and its sender (mutable: the node decrypts in place).
    pub fn get_mut(&mut self, i: usize) -> (&mut [u8], SocketAddr) {
        (&mut self.bufs[i][..self.lens[i]], self.from[i])
    }

    /// How long datagram `i` waited in the socket's receive buffer before `now` (zero when
    /// the socket does not stamp datagrams or the clock stepped back).
    pub fn waited(&self, i: usize, now: std::time::SystemTime) -> std::time::Duration {
        self.stamps
            .get(i)
            .copied()
            .flatten()
            .and_then(|t| now.duration_since(t).ok())
            .unwrap_or_default()
    }
}

fn stamp(m: &nix::sys::socket::RecvMsg<'_, '_, SockaddrStorage>) -> Option<std::time::SystemTime> {
    m.cmsgs().ok()?.find_map(|c| match c {
        ControlMessageOwned::ScmTimestampns(ts) => {
            let (s, ns) = (
                u64::try_from(ts.tv_sec()).ok()?,
                u32::try_from(ts.tv_nsec()).ok()?,
            );
            Some(std::time::UNIX_EPOCH + std::time::Duration::new(s, ns))
        }
        _ => None,
    })
}

/// Receives what is waiting, up to [`BATCH`] datagrams in one `recvmmsg`, without waiting:
/// `WouldBlock` when nothing is (and the socket's readiness is cleared, so
/// `socket.readable()` waits for the next).
pub fn try_recv_batch(socket: &UdpSocket, batch: &mut RecvBatch) -> std::io::Result<usize> {
    socket.try_io(Interest::READABLE, || recv_now(socket, batch))
}

/// [`try_recv_batch`] without asking tokio whether the socket is readable: its readiness is
/// only as fresh as the last time the runtime polled, which a worker busy sending does not
/// do. `WouldBlock` when nothing waits.
fn recv_now(socket: &UdpSocket, batch: &mut RecvBatch) -> std::io::Result<usize> {
    batch.lens.clear();
    batch.from.clear();
    batch.stamps.clear();
    let fd = socket.as_raw_fd();
    let want = batch.last.saturating_mul(2).clamp(MIN_RECV, BATCH);
    batch.asked = want;
    let RecvBatch {
        bufs,
        lens,
        from,
        stamps,
        last,
        ..
    } = batch;
    let mut headers =
        MultiHeaders::<SockaddrStorage>::preallocate(want, Some(nix::cmsg_space!(TimeSpec)));
    let mut slices: Vec<[IoSliceMut<'_>; 1]> = bufs[..want]
        .iter_mut()
        .map(|b| [IoSliceMut::new(&mut b[..])])
        .collect();
    let got = nix::sys::socket::recvmmsg(
        fd,
        &mut headers,
        slices.iter_mut(),
        MsgFlags::MSG_DONTWAIT,
        None,
    )
    .map_err(nix_io)?;
    for m in got {
        if let Some(a) = m.address.as_ref().and_then(to_std) {
            lens.push(m.bytes);
            from.push(a);
            stamps.push(stamp(&m));
        }
    }
    *last = lens.len();
    Ok(lens.len())
}

/// Sends `packets` (data, destination) in `sendmmsg` calls of up to [`BATCH`], waiting while
/// the socket's send buffer is full. Returns the number that failed (a destination the
/// kernel refused: unreachable, wrong family); those are skipped.
pub async fn send_batch(socket: &UdpSocket, packets: &[(&[u8], SocketAddr)]) -> usize {
    let mut sent = 0;
    let mut failed = 0;
    while sent < packets.len() {
        let chunk = &packets[sent..packets.len().min(sent + BATCH)];
        match try_send(socket, chunk) {
            Ok(n) => sent += n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if socket.writable().await.is_err() {
                    return failed + packets.len() - sent;
                }
            }
            Err(_) => {
                // The first datagram of the chunk was refused: skip it, go on with the rest.
                sent += 1;
                failed += 1;
            }
        }
    }
    failed
}

/// Sends `items` (at most [`BATCH`], each seen as data and destination through `view`) like
/// [`send_batch`], without allocating. Returns the number refused.
pub async fn send_each<'a, T>(
    socket: &UdpSocket,
    items: &'a [T],
    view: impl Fn(&'a T) -> (&'a [u8], SocketAddr),
) -> usize {
    let items = &items[..items.len().min(BATCH)];
    let mut packets = [(&[][..], SocketAddr::from(([0, 0, 0, 0], 0))); BATCH];
    for (p, t) in packets.iter_mut().zip(items) {
        *p = view(t);
    }
    send_batch(socket, &packets[..items.len()]).await
}

/// Fills `out` (emptied first) with up to [`BATCH`] items from `next` and sends them in one
/// batch; `None` when `next` had nothing. The items stay in `out` for the caller to reclaim
/// (pooled buffers). Returns the number refused.
pub async fn send_next_batch<T>(
    socket: &UdpSocket,
    out: &mut Vec<T>,
    mut next: impl FnMut() -> Option<T>,
    view: impl for<'x> Fn(&'x T) -> (&'x [u8], SocketAddr),
) -> Option<usize> {
    out.clear();
    while out.len() < BATCH {
        match next() {
            Some(t) => out.push(t),
            None => break,
        }
    }
    if out.is_empty() {
        return None;
    }
    Some(send_each(socket, out, view).await)
}

/// `recvmmsg` batches [`serve`] reads per wake-up before it looks at its other inputs.
pub const RECV_ROUNDS: usize = 4;

/// A sans-IO core that [`serve`] drives on one socket: datagrams in and out, a timer, and one
/// input of its own (commands, datagrams another worker handed over, a metrics tick). The
/// node's workers, the edge and the bench peers are each one of these; what they decide
/// stays in the core, the loop only moves bytes.
pub trait Datagrams {
    /// What it sends, seen as bytes and destination through [`Datagrams::view`].
    type Transmit;
    /// Its own input.
    type Event;
    /// Whether what one datagram produced goes out before the next is handled (a node's
    /// fan-out returns its pooled buffers at once, so the pool stays one fan-out deep), or
    /// once per received batch.
    const FLUSH_EACH: bool = false;

    /// The bytes of `t` and where they go.
    fn view(t: &Self::Transmit) -> (&[u8], SocketAddr);
    /// A datagram from `from` that waited `waited` in the socket (zero when not stamped).
    fn handle_datagram(
        &mut self,
        now: std::time::Instant,
        from: SocketAddr,
        data: &mut [u8],
        waited: std::time::Duration,
    );
    /// Its deadline ([`Datagrams::poll_timeout`]) passed.
    fn handle_timeout(&mut self, now: std::time::Instant);
    /// The next datagram to send.
    fn poll_transmit(&mut self) -> Option<Self::Transmit>;
    /// When it wants [`Datagrams::handle_timeout`]; `None`: not until something arrives.
    fn poll_timeout(&mut self) -> Option<std::time::Instant>;
    /// A batch went out, `refused` of it refused by the kernel; the items are the core's
    /// to reclaim (pooled buffers).
    fn sent(&mut self, batch: &mut Vec<Self::Transmit>, refused: usize) {
        let _ = (batch, refused);
    }
    /// Waits for its own input; `None` stops [`serve`].
    fn next_event(&mut self) -> impl Future<Output = Option<Self::Event>> + Send;
    /// Its own input, if more is ready at once (drained after [`Datagrams::next_event`]).
    fn try_event(&mut self) -> Option<Self::Event> {
        None
    }
    /// Its own input that should not wait behind the rest of a batch of datagrams (a node
    /// worker's jobs: a migration's next step, an HTTP command someone waits for): taken
    /// between datagrams.
    fn try_urgent(&mut self) -> Option<Self::Event> {
        None
    }
    /// Handles its own input.
    fn handle_event(&mut self, event: Self::Event);
    /// Whether [`serve`] reads the socket between the send batches of a long output (a
    /// fan-out) and offers each datagram to [`Datagrams::divert`]: a node of several cores
    /// hands another core's datagrams over at once instead of making them wait behind this
    /// core's fan-out. What is not diverted is handled afterwards, in the order it came.
    fn diverts(&self) -> bool {
        false
    }
    /// A datagram read while this core was sending ([`Datagrams::diverts`]): true when it
    /// was given elsewhere (done with here).
    fn divert(&mut self, from: SocketAddr, data: &mut [u8], waited: std::time::Duration) -> bool {
        let _ = (from, data, waited);
        false
    }
}

/// Datagrams read between send batches that stay with this core, copied out of the receive
/// batch (buffers reused), handled once the output that was going out is done.
#[derive(Default)]
struct Early {
    /// Made at the first read (a loop that does not divert holds no second batch).
    batch: Option<Box<RecvBatch>>,
    /// Sender, bytes, how long it had waited in the socket, when it was read.
    kept:
        std::collections::VecDeque<(SocketAddr, Vec<u8>, std::time::Duration, std::time::Instant)>,
    pool: Vec<Vec<u8>>,
}

/// At most this many datagrams wait in [`Early`]; past it, reading between sends pauses.
const EARLY_MAX: usize = 1024;

impl Early {
    /// Reads what waits in the socket and offers it to `core`'s [`Datagrams::divert`].
    fn read<D: Datagrams>(&mut self, socket: &UdpSocket, core: &mut D) {
        if self.kept.len() >= EARLY_MAX {
            return;
        }
        let batch = self.batch.get_or_insert_with(Box::default);
        let Ok(k) = recv_now(socket, batch) else {
            return;
        };
        let (now, wall) = (std::time::Instant::now(), std::time::SystemTime::now());
        for j in 0..k {
            let waited = batch.waited(j, wall);
            let (data, from) = batch.get_mut(j);
            if core.divert(from, data, waited) {
                continue;
            }
            let mut buf = self.pool.pop().unwrap_or_default();
            buf.clear();
            buf.extend_from_slice(data);
            self.kept.push_back((from, buf, waited, now));
        }
    }
}

/// The one batched UDP loop: serves `core` on `socket` (`recvmmsg` in, [`RECV_ROUNDS`]
/// batches per wake-up; `sendmmsg` out, [`BATCH`] per call) until its events end.
pub async fn serve<D: Datagrams>(socket: &UdpSocket, core: &mut D) {
    let mut batch = RecvBatch::default();
    let mut out = Vec::with_capacity(BATCH);
    let mut early = Early::default();
    let early = &mut early;
    loop {
        flush(socket, core, &mut out, early).await;
        // What was read between sends and kept, before anything newer.
        handle_kept(socket, core, &mut out, early).await;
        flush(socket, core, &mut out, early).await;
        let sleep = sleep_until(core.poll_timeout());
        tokio::select! {
            r = socket.readable() => {
                if r.is_err() {
                    continue;
                }
                for _ in 0..RECV_ROUNDS {
                    let Ok(k) = try_recv_batch(socket, &mut batch) else {
                        break;
                    };
                    let now = std::time::Instant::now();
                    let wall = std::time::SystemTime::now();
                    for j in 0..k {
                        let waited = batch.waited(j, wall);
                        let (data, from) = batch.get_mut(j);
                        core.handle_datagram(now, from, data, waited);
                        while let Some(e) = core.try_urgent() {
                            core.handle_event(e);
                        }
                        if D::FLUSH_EACH {
                            flush(socket, core, &mut out, early).await;
                        }
                    }
                    flush(socket, core, &mut out, early).await;
                    if !early.kept.is_empty() {
                        // Newer datagrams were read between sends: those first.
                        break;
                    }
                    if !batch.full() {
                        break;
                    }
                }
            }
            e = core.next_event() => {
                let Some(mut e) = e else { return };
                loop {
                    core.handle_event(e);
                    if D::FLUSH_EACH {
                        flush(socket, core, &mut out, early).await;
                        // What came to the socket while that went out, before the next event:
                        // a worker whose own media is handed to it (its publisher's datagrams
                        // reach another worker's socket) would otherwise serve only its inbox
                        // for as long as that has media, and its viewers' RTCP and consent
                        // checks would wait behind all of it.
                        handle_kept(socket, core, &mut out, early).await;
                    }
                    match core.try_event() {
                        Some(next) => e = next,
                        None => break,
                    }
                }
            }
            () = sleep => core.handle_timeout(std::time::Instant::now()),
        }
    }
}

/// Handles the datagrams [`Early`] kept, oldest first (and those read while they are handled).
async fn handle_kept<D: Datagrams>(
    socket: &UdpSocket,
    core: &mut D,
    out: &mut Vec<D::Transmit>,
    early: &mut Early,
) {
    while let Some((from, mut buf, waited, read_at)) = early.kept.pop_front() {
        // The time it was kept here counts as waiting too (the overload controller's input).
        let now = std::time::Instant::now();
        core.handle_datagram(now, from, &mut buf, waited + (now - read_at));
        early.pool.push(buf);
        while let Some(e) = core.try_urgent() {
            core.handle_event(e);
        }
        if D::FLUSH_EACH {
            flush(socket, core, out, early).await;
        }
    }
}

/// Sends everything `core` has to send, in [`BATCH`]es; between batches, for a core that
/// [`Datagrams::diverts`], reads the socket into `early`.
async fn flush<D: Datagrams>(
    socket: &UdpSocket,
    core: &mut D,
    out: &mut Vec<D::Transmit>,
    early: &mut Early,
) {
    while let Some(refused) = send_next_batch(socket, out, || core.poll_transmit(), D::view).await {
        core.sent(out, refused);
        if core.diverts() {
            early.read(socket, core);
        }
    }
}

/// One `sendmmsg` of `packets` (at most [`BATCH`]); how many the kernel took.
fn try_send(socket: &UdpSocket, packets: &[(&[u8], SocketAddr)]) -> std::io::Result<usize> {
    let fd = socket.as_raw_fd();
    socket.try_io(Interest::WRITABLE, || {
        let mut headers = MultiHeaders::<SockaddrStorage>::preallocate(packets.len(), None);
        let slices: Vec<[IoSlice<'_>; 1]> =
            packets.iter().map(|(d, _)| [IoSlice::new(d)]).collect();
        let addrs: Vec<Option<SockaddrStorage>> = packets
            .iter()
            .map(|(_, a)| Some(SockaddrStorage::from(*a)))
            .collect();
        let sent = nix::sys::socket::sendmmsg(
            fd,
            &mut headers,
            slices.iter(),
            &addrs,
            [],
            MsgFlags::MSG_DONTWAIT,
        )
        .map_err(nix_io)?
        .count();
        Ok(sent)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn batches_go_out_and_come_in_with_their_senders() {
        let a = bind("127.0.0.1:0".parse().expect("addr")).expect("bind");
        let b = bind("127.0.0.1:0".parse().expect("addr")).expect("bind");
        let c = bind("127.0.0.1:0".parse().expect("addr")).expect("bind");
        let (b_at, c_at) = (b.local_addr().expect("b"), c.local_addr().expect("c"));
        // 150 datagrams (three sendmmsg calls), alternating between b and c, each numbered;
        // one to a port of another family in the middle is refused and skipped.
        let data: Vec<Vec<u8>> = (0..150u8).map(|i| vec![i; 1 + usize::from(i)]).collect();
        let mut packets: Vec<(&[u8], SocketAddr)> = data
            .iter()
            .enumerate()
            .map(|(i, d)| (&d[..], if i % 2 == 0 { b_at } else { c_at }))
            .collect();
        packets.insert(70, (b"x", "[::1]:9".parse().expect("v6")));
        assert_eq!(send_batch(&a, &packets).await, 1);
        let mut batch = RecvBatch::default();
        let mut got = Vec::new();
        for s in [&b, &c] {
            let mut n = 0;
            while n < 75 {
                s.readable().await.expect("readable");
                match try_recv_batch(s, &mut batch) {
                    Ok(k) => {
                        assert!(k <= BATCH);
                        for i in 0..k {
                            let (d, from) = batch.get_mut(i);
                            assert_eq!(from, a.local_addr().expect("a"));
                            got.push(d.to_vec());
                        }
                        n += k;
                    }
                    Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock),
                }
            }
            assert!(matches!(
                try_recv_batch(s, &mut batch),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock
            ));
        }
        got.sort();
        let mut want = data.clone();
        want.sort();
        assert_eq!(got, want);
    }

    #[tokio::test]
    async fn the_kernel_stamps_how_long_a_datagram_waited() {
        let a = bind("127.0.0.1:0".parse().expect("addr")).expect("bind");
        let b = bind("127.0.0.1:0".parse().expect("addr")).expect("bind");
        let to = b.local_addr().expect("b");
        let mut batch = RecvBatch::default();
        // The kernel turns receive stamps on a moment after the first socket of the machine
        // asks (a deferred static key); until then a datagram is stamped when it is read. Wait
        // until a datagram that sat 5 ms says so (a node's sockets live far longer than that).
        let mut on = false;
        for _ in 0..200 {
            assert_eq!(send_batch(&a, &[(b"w", to)]).await, 0);
            std::thread::sleep(std::time::Duration::from_millis(5));
            b.readable().await.expect("readable");
            if let Ok(k) = try_recv_batch(&b, &mut batch) {
                let now = std::time::SystemTime::now();
                if (0..k).any(|i| batch.waited(i, now) >= std::time::Duration::from_millis(4)) {
                    on = true;
                    break;
                }
            }
        }
        assert!(on, "the kernel never stamped a received datagram");
        assert_eq!(send_batch(&a, &[(b"x", to), (b"y", to)]).await, 0);
        std::thread::sleep(std::time::Duration::from_millis(30));
        let mut waited = Vec::new();
        while waited.len() < 2 {
            b.readable().await.expect("readable");
            let Ok(k) = try_recv_batch(&b, &mut batch) else {
                continue;
            };
            let now = std::time::SystemTime::now();
            waited.extend((0..k).map(|i| batch.waited(i, now)));
            // Out of range: nothing waited.
            assert_eq!(batch.waited(9, now), std::time::Duration::ZERO);
        }
        for w in waited {
            assert!(w >= std::time::Duration::from_millis(29), "{w:?}");
            assert!(w < std::time::Duration::from_secs(60), "{w:?}");
        }
    }

    /// Echoes every datagram back (uppercased), sends `n` datagrams to a peer when asked,
    /// and notes its timer; stops when its command channel closes.
    struct Echo {
        rx: tokio::sync::mpsc::Receiver<(SocketAddr, u8)>,
        out: std::collections::VecDeque<(Vec<u8>, SocketAddr)>,
        deadline: Option<std::time::Instant>,
        timeouts: usize,
        sent: usize,
    }

    impl Datagrams for Echo {
        type Transmit = (Vec<u8>, SocketAddr);
        type Event = (SocketAddr, u8);

        fn view(t: &Self::Transmit) -> (&[u8], SocketAddr) {
            (&t.0[..], t.1)
        }

        fn handle_datagram(
            &mut self,
            _: std::time::Instant,
            from: SocketAddr,
            data: &mut [u8],
            _: std::time::Duration,
        ) {
            data.make_ascii_uppercase();
            self.out.push_back((data.to_vec(), from));
        }

        fn handle_timeout(&mut self, _: std::time::Instant) {
            self.timeouts += 1;
            self.deadline = None;
        }

        fn poll_transmit(&mut self) -> Option<Self::Transmit> {
            self.out.pop_front()
        }

        fn poll_timeout(&mut self) -> Option<std::time::Instant> {
            self.deadline
        }

        fn sent(&mut self, batch: &mut Vec<Self::Transmit>, refused: usize) {
            self.sent += batch.len() - refused;
        }

        async fn next_event(&mut self) -> Option<Self::Event> {
            self.rx.recv().await
        }

        fn try_event(&mut self) -> Option<Self::Event> {
            self.rx.try_recv().ok()
        }

        fn handle_event(&mut self, (to, n): Self::Event) {
            self.out.extend((0..n).map(|i| (vec![b'a' + i % 26], to)));
        }
    }

    #[tokio::test]
    async fn serve_answers_datagrams_events_and_its_timer_and_stops_with_its_events() {
        let node = bind("127.0.0.1:0".parse().expect("addr")).expect("bind");
        let peer = bind("127.0.0.1:0".parse().expect("addr")).expect("bind");
        let (node_at, peer_at) = (node.local_addr().expect("a"), peer.local_addr().expect("b"));
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let mut core = Echo {
            rx,
            out: Default::default(),
            deadline: Some(std::time::Instant::now() + std::time::Duration::from_millis(20)),
            timeouts: 0,
            sent: 0,
        };
        let task = tokio::spawn(async move {
            serve(&node, &mut core).await;
            core
        });
        // 200 datagrams in (several recvmmsg batches), each answered.
        let data: Vec<Vec<u8>> = (0..200u8).map(|i| vec![b'a' + i % 26; 3]).collect();
        let packets: Vec<(&[u8], SocketAddr)> = data.iter().map(|d| (&d[..], node_at)).collect();
        assert_eq!(send_batch(&peer, &packets).await, 0);
        // And an event that sends 130 (three sendmmsg batches).
        tx.send((peer_at, 130)).await.expect("event");
        let mut got = Vec::new();
        let mut batch = RecvBatch::default();
        while got.len() < 330 {
            tokio::time::timeout(std::time::Duration::from_secs(5), peer.readable())
                .await
                .expect("answers")
                .expect("readable");
            let Ok(k) = try_recv_batch(&peer, &mut batch) else {
                continue;
            };
            for i in 0..k {
                let (d, from) = batch.get_mut(i);
                assert_eq!(from, node_at);
                got.push(d.to_vec());
            }
        }
        assert_eq!(got.iter().filter(|d| d.len() == 3).count(), 200);
        assert!(
            got.iter()
                .filter(|d| d.len() == 3)
                .all(|d| d[0].is_ascii_uppercase())
        );
        assert_eq!(got.iter().filter(|d| d.len() == 1).count(), 130);
        tokio::time::sleep(std::time::Duration::from_millis(30)).await;
        drop(tx);
        let core = tokio::time::timeout(std::time::Duration::from_secs(5), task)
            .await
            .expect("serve stops when its events end")
            .expect("task");
        assert_eq!(core.timeouts, 1);
        assert_eq!(core.sent, 330);
    }

    /// Starts with `out` to send; diverts what comes from `divert_from`, notes the rest (and
    /// its events: datagrams another worker handed over) with how much was still to send when
    /// it was handled. Each event queues `per_event` sends to `to`; while the first one's go
    /// out, `poke` puts 10 datagrams in its socket.
    struct Diverter {
        out: std::collections::VecDeque<(Vec<u8>, SocketAddr)>,
        divert_from: SocketAddr,
        diverted: Vec<(u8, usize)>,
        handled: Vec<(u8, usize)>,
        sent: usize,
        rx: tokio::sync::mpsc::Receiver<u8>,
        per_event: usize,
        to: SocketAddr,
        poke: Option<(std::net::UdpSocket, SocketAddr)>,
    }

    impl Datagrams for Diverter {
        type Transmit = (Vec<u8>, SocketAddr);
        type Event = u8;
        const FLUSH_EACH: bool = true;

        fn view(t: &Self::Transmit) -> (&[u8], SocketAddr) {
            (&t.0[..], t.1)
        }

        fn handle_datagram(
            &mut self,
            _: std::time::Instant,
            _: SocketAddr,
            data: &mut [u8],
            _: std::time::Duration,
        ) {
            self.handled.push((data[0], self.out.len()));
        }

        fn handle_timeout(&mut self, _: std::time::Instant) {}

        fn poll_transmit(&mut self) -> Option<Self::Transmit> {
            self.out.pop_front()
        }

        fn poll_timeout(&mut self) -> Option<std::time::Instant> {
            None
        }

        fn sent(&mut self, batch: &mut Vec<Self::Transmit>, refused: usize) {
            self.sent += batch.len() - refused;
        }

        async fn next_event(&mut self) -> Option<Self::Event> {
            self.rx.recv().await
        }

        fn try_event(&mut self) -> Option<Self::Event> {
            self.rx.try_recv().ok()
        }

        fn handle_event(&mut self, e: u8) {
            self.handled.push((e, self.out.len()));
            let to = self.to;
            self.out
                .extend((0..self.per_event).map(|_| (vec![0u8; 100], to)));
            if let Some((s, at)) = self.poke.take() {
                for i in 0..10u8 {
                    s.send_to(&[100 + i], at).expect("poke");
                }
            }
        }

        fn diverts(&self) -> bool {
            true
        }

        fn divert(&mut self, from: SocketAddr, data: &mut [u8], _: std::time::Duration) -> bool {
            if from != self.divert_from {
                return false;
            }
            self.diverted.push((data[0], self.out.len()));
            true
        }
    }

    #[tokio::test]
    async fn datagrams_read_between_a_fan_out_s_batches_are_diverted_or_kept_in_order() {
        let node = bind("127.0.0.1:0".parse().expect("addr")).expect("bind");
        let (a, b, sink) = (
            bind("127.0.0.1:0".parse().expect("addr")).expect("bind"),
            bind("127.0.0.1:0".parse().expect("addr")).expect("bind"),
            bind("127.0.0.1:0".parse().expect("addr")).expect("bind"),
        );
        let node_at = node.local_addr().expect("node");
        // Waiting in the node's socket before its loop starts with 640 datagrams to send.
        for i in 0..10u8 {
            a.send_to(&[i], node_at).await.expect("a");
            b.send_to(&[100 + i], node_at).await.expect("b");
        }
        let (tx, rx) = tokio::sync::mpsc::channel(1);
        let to = sink.local_addr().expect("sink");
        let mut core = Diverter {
            out: (0..640).map(|_| (vec![0u8; 100], to)).collect(),
            divert_from: a.local_addr().expect("a"),
            diverted: Vec::new(),
            handled: Vec::new(),
            sent: 0,
            rx,
            per_event: 0,
            to,
            poke: None,
        };
        let task = tokio::spawn(async move {
            serve(&node, &mut core).await;
            core
        });
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        drop(tx);
        let core = tokio::time::timeout(std::time::Duration::from_secs(5), task)
            .await
            .expect("serve stops")
            .expect("task");
        assert_eq!(core.sent, 640);
        // a's datagrams were given away between the first send batches, not after the 640.
        assert_eq!(
            core.diverted.iter().map(|d| d.0).collect::<Vec<u8>>(),
            (0..10).collect::<Vec<u8>>()
        );
        assert!(
            core.diverted.iter().all(|d| d.1 >= 500),
            "{:?}",
            core.diverted
        );
        // b's were kept and handled in order once the output was out.
        assert_eq!(
            core.handled,
            (100..110).map(|i| (i, 0)).collect::<Vec<(u8, usize)>>()
        );
    }

    #[tokio::test]
    async fn datagrams_that_came_while_a_handed_over_one_went_out_go_before_the_next() {
        let node = bind("127.0.0.1:0".parse().expect("addr")).expect("bind");
        let sink = bind("127.0.0.1:0".parse().expect("addr")).expect("bind");
        let poke = std::net::UdpSocket::bind("127.0.0.1:0").expect("poke");
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        for e in 1..=3 {
            tx.send(e).await.expect("event");
        }
        drop(tx);
        let to = sink.local_addr().expect("sink");
        let mut core = Diverter {
            out: std::collections::VecDeque::new(),
            // Nothing comes from there: all is this core's.
            divert_from: to,
            diverted: Vec::new(),
            handled: Vec::new(),
            sent: 0,
            rx,
            per_event: 200,
            to,
            poke: Some((poke, node.local_addr().expect("node"))),
        };
        tokio::time::timeout(std::time::Duration::from_secs(5), serve(&node, &mut core))
            .await
            .expect("serve stops when its events end");
        // The socket's datagrams are not left until the inbox is empty.
        let mut want = vec![1];
        want.extend(100..110);
        want.extend([2, 3]);
        assert_eq!(core.handled.iter().map(|h| h.0).collect::<Vec<u8>>(), want);
        assert_eq!(core.sent, 600);
    }

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
