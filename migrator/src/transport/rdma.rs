//! RDMA transport (feature `rdma`): reliable-connected queue pairs set up
//! with librdmacm, carrying the same length-prefixed frames as QUIC
//! ([`crate::frame`]).
//!
//! **Compile-checked only**: the build machines have no RDMA device, so
//! none of this has run. What it does: each node dials its peers for what
//! it sends (one RC connection per direction, like the QUIC transport); a
//! frame is cut into segments of at most [`SEGMENT`] bytes, each one
//! two-sided SEND into a ring of receive buffers the other side keeps
//! posted; the receiver feeds the segments, which RC delivers in order, to
//! a [`FrameDecoder`]. Flow control is the hardware's: the connection asks
//! for infinite receiver-not-ready retries, so a sender waits while the
//! receiver's ring is full. The verbs calls block, so each connection runs
//! on its own OS thread and hands messages to tokio through channels.
//!
//! Not done here: the one-sided RDMA WRITE of snapshot chunks into a
//! registered buffer that DESIGN §4 sketches (it needs a credit protocol
//! whose correctness cannot be checked without a device), and
//! authentication: there is no TLS, the dialler names itself in a hello
//! frame and the acceptor only checks that the connection comes from that
//! node's configured IP address. Use it on an isolated fabric.

#![allow(unsafe_code)]

use std::collections::HashMap;
use std::ffi::CString;
use std::net::{IpAddr, SocketAddr};
use std::ptr::null_mut;
use std::sync::{Arc, Mutex, MutexGuard, mpsc as std_mpsc};

use ferry_proto::NodeId;
use rdma_sys::{
    RAI_PASSIVE, ibv_mr, ibv_qp_init_attr, ibv_send_flags, ibv_wc, ibv_wc_status, rdma_accept,
    rdma_addrinfo, rdma_cm_id, rdma_conn_param, rdma_connect, rdma_create_ep, rdma_dereg_mr,
    rdma_destroy_ep, rdma_disconnect, rdma_freeaddrinfo, rdma_get_peer_addr, rdma_get_recv_comp,
    rdma_get_request, rdma_get_send_comp, rdma_getaddrinfo, rdma_listen, rdma_port_space,
    rdma_post_recv, rdma_post_send, rdma_reg_msgs,
};
use tokio::sync::mpsc;

use super::{Transport, TransportError};
use crate::frame::{FrameDecoder, encode_frame};
use crate::wire::Message;

/// Largest segment of one SEND.
pub const SEGMENT: usize = 64 * 1024;
/// Receive buffers kept posted per connection.
const RING: usize = 32;
/// The first SEND of a connection: this prefix, then the dialler's node ID.
const HELLO: &[u8] = b"ferry-migration rdma 1 ";

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn os_err(what: &str) -> TransportError {
    let e = std::io::Error::last_os_error();
    TransportError::Io(std::io::Error::new(e.kind(), format!("{what}: {e}")))
}

/// An RC endpoint (`rdma_cm_id` with its QP) and what is registered on it.
struct Endpoint {
    id: *mut rdma_cm_id,
    mr: *mut ibv_mr,
    /// Registered memory: `RING` receive slots, or one send segment. Never
    /// moved or resized while registered.
    buf: Box<[u8]>,
}

// SAFETY: the raw pointers are owned by this value and used by one thread at
// a time (the value moves into the thread that drives the connection).
unsafe impl Send for Endpoint {}

impl Drop for Endpoint {
    fn drop(&mut self) {
        // SAFETY: `mr` and `id` were created by librdmacm for this endpoint
        // and are released exactly once, the MR before the endpoint.
        unsafe {
            if !self.mr.is_null() {
                rdma_dereg_mr(self.mr);
            }
            if !self.id.is_null() {
                rdma_disconnect(self.id);
                rdma_destroy_ep(self.id);
            }
        }
    }
}

fn qp_attr(max_send: u32, max_recv: u32) -> ibv_qp_init_attr {
    // SAFETY: a plain C struct for which all-zero is a valid value.
    let mut attr: ibv_qp_init_attr = unsafe { std::mem::zeroed() };
    attr.cap.max_send_wr = max_send;
    attr.cap.max_recv_wr = max_recv;
    attr.cap.max_send_sge = 1;
    attr.cap.max_recv_sge = 1;
    attr.sq_sig_all = 1;
    attr
}

fn conn_param() -> rdma_conn_param {
    // SAFETY: a plain C struct for which all-zero is a valid value.
    let mut p: rdma_conn_param = unsafe { std::mem::zeroed() };
    p.responder_resources = 1;
    p.initiator_depth = 1;
    p.retry_count = 7;
    // 7 = retry forever: the sender waits for the receiver to repost.
    p.rnr_retry_count = 7;
    p
}

/// Resolves `addr` with `rdma_getaddrinfo` (passive for a listener).
fn addrinfo(addr: SocketAddr, passive: bool) -> Result<*mut rdma_addrinfo, TransportError> {
    let host = CString::new(addr.ip().to_string()).map_err(|_| os_err("address"))?;
    let port = CString::new(addr.port().to_string()).map_err(|_| os_err("port"))?;
    // SAFETY: zeroed hints are valid; the strings outlive the call; `res` is
    // written by the library on success and freed by the caller.
    unsafe {
        let mut hints: rdma_addrinfo = std::mem::zeroed();
        hints.ai_port_space = rdma_port_space::RDMA_PS_TCP as i32;
        if passive {
            hints.ai_flags = RAI_PASSIVE as i32;
        }
        let mut res: *mut rdma_addrinfo = null_mut();
        if rdma_getaddrinfo(host.as_ptr(), port.as_ptr(), &hints, &mut res) != 0 {
            return Err(os_err("rdma_getaddrinfo"));
        }
        Ok(res)
    }
}

impl Endpoint {
    /// Dials `addr` and registers one send segment.
    fn dial(addr: SocketAddr) -> Result<Self, TransportError> {
        let res = addrinfo(addr, false)?;
        let mut attr = qp_attr(1, 1);
        let mut id: *mut rdma_cm_id = null_mut();
        // SAFETY: `res` came from rdma_getaddrinfo and is freed once here.
        let rc = unsafe {
            let rc = rdma_create_ep(&mut id, res, null_mut(), &mut attr);
            rdma_freeaddrinfo(res);
            rc
        };
        if rc != 0 {
            return Err(os_err("rdma_create_ep"));
        }
        let mut ep = Endpoint {
            id,
            mr: null_mut(),
            buf: vec![0u8; SEGMENT].into_boxed_slice(),
        };
        // SAFETY: `buf` is heap memory owned by `ep` that outlives the MR
        // (Drop deregisters first); `id` is a live endpoint.
        ep.mr = unsafe { rdma_reg_msgs(ep.id, ep.buf.as_mut_ptr().cast(), ep.buf.len()) };
        if ep.mr.is_null() {
            return Err(os_err("rdma_reg_msgs"));
        }
        let mut p = conn_param();
        // SAFETY: `id` is live and `p` outlives the call.
        if unsafe { rdma_connect(ep.id, &mut p) } != 0 {
            return Err(os_err("rdma_connect"));
        }
        Ok(ep)
    }

    /// Sends `bytes` as SEGMENT-sized SENDs, one at a time.
    fn send_all(&mut self, bytes: &[u8]) -> Result<(), TransportError> {
        for seg in bytes.chunks(SEGMENT) {
            self.buf[..seg.len()].copy_from_slice(seg);
            let flags = ibv_send_flags::IBV_SEND_SIGNALED.0 as i32;
            // SAFETY: the segment lies inside the registered `buf`; the
            // completion is awaited before `buf` is written again.
            let ok = unsafe {
                rdma_post_send(
                    self.id,
                    null_mut(),
                    self.buf.as_mut_ptr().cast(),
                    seg.len(),
                    self.mr,
                    flags,
                ) == 0
            };
            if !ok {
                return Err(os_err("rdma_post_send"));
            }
            // SAFETY: zeroed ibv_wc is valid; the library fills it.
            let mut wc: ibv_wc = unsafe { std::mem::zeroed() };
            // SAFETY: `id` is live; blocks until the SEND completes.
            let n = unsafe { rdma_get_send_comp(self.id, &mut wc) };
            if n <= 0 || wc.status != ibv_wc_status::IBV_WC_SUCCESS {
                return Err(os_err("send completion"));
            }
        }
        Ok(())
    }

    /// Posts receive slot `slot` of the ring.
    fn post_recv(&mut self, slot: usize) -> Result<(), TransportError> {
        let off = slot * SEGMENT;
        // SAFETY: the slot lies inside the registered ring; the slot index
        // travels as the work request's context and comes back in `wr_id`.
        let rc = unsafe {
            rdma_post_recv(
                self.id,
                slot as *mut std::ffi::c_void,
                self.buf[off..].as_mut_ptr().cast(),
                SEGMENT,
                self.mr,
            )
        };
        if rc != 0 {
            return Err(os_err("rdma_post_recv"));
        }
        Ok(())
    }
}

/// Migration transport over RDMA RC connections.
#[derive(Debug)]
pub struct RdmaTransport {
    me: NodeId,
    peers: Arc<Mutex<HashMap<NodeId, SocketAddr>>>,
    links: Mutex<HashMap<NodeId, std_mpsc::Sender<Vec<u8>>>>,
    inbound: mpsc::Receiver<(NodeId, Message)>,
}

impl RdmaTransport {
    /// Listens on `listen` (an address of an RDMA-capable interface) as
    /// node `me`; `peers` are the other nodes' listen addresses.
    pub fn bind(
        me: NodeId,
        listen: SocketAddr,
        peers: HashMap<NodeId, SocketAddr>,
    ) -> Result<Self, TransportError> {
        let res = addrinfo(listen, true)?;
        let mut attr = qp_attr(1, RING as u32);
        let mut listen_id: *mut rdma_cm_id = null_mut();
        // SAFETY: `res` came from rdma_getaddrinfo and is freed once here.
        let rc = unsafe {
            let rc = rdma_create_ep(&mut listen_id, res, null_mut(), &mut attr);
            rdma_freeaddrinfo(res);
            if rc == 0 {
                rdma_listen(listen_id, 16)
            } else {
                rc
            }
        };
        if rc != 0 {
            return Err(os_err("rdma listen"));
        }
        let listener = Endpoint {
            id: listen_id,
            mr: null_mut(),
            buf: Box::new([]),
        };
        let peers = Arc::new(Mutex::new(peers));
        let (tx, inbound) = mpsc::channel(1024);
        let p = peers.clone();
        std::thread::Builder::new()
            .name("ferry-rdma-listen".into())
            .spawn(move || accept_loop(listener, p, tx))?;
        Ok(Self {
            me,
            peers,
            links: Mutex::new(HashMap::new()),
            inbound,
        })
    }
}

impl Transport for RdmaTransport {
    fn local_node(&self) -> &NodeId {
        &self.me
    }

    fn send(&self, to: &NodeId, msg: Message) -> Result<(), TransportError> {
        let mut links = lock(&self.links);
        if !links.contains_key(to) {
            let addr = *lock(&self.peers)
                .get(to)
                .ok_or_else(|| TransportError::UnknownPeer(to.clone()))?;
            let (tx, rx) = std_mpsc::channel();
            let me = self.me.clone();
            let peer = to.clone();
            std::thread::Builder::new()
                .name(format!("ferry-rdma-{to}"))
                .spawn(move || write_loop(me, peer, addr, rx))?;
            links.insert(to.clone(), tx);
        }
        let frame = encode_frame(&msg);
        let alive = links.get(to).is_some_and(|tx| tx.send(frame).is_ok());
        if !alive {
            // The writer gave up on a dead link: the next send dials again.
            links.remove(to);
        }
        Ok(())
    }

    async fn recv(&mut self) -> Result<(NodeId, Message), TransportError> {
        self.inbound.recv().await.ok_or(TransportError::Closed)
    }
}

fn hello(me: &NodeId) -> Vec<u8> {
    [HELLO, me.as_str().as_bytes()].concat()
}

fn write_loop(me: NodeId, peer: NodeId, addr: SocketAddr, rx: std_mpsc::Receiver<Vec<u8>>) {
    let dialled = Endpoint::dial(addr).and_then(|mut ep| ep.send_all(&hello(&me)).map(|()| ep));
    let mut ep = match dialled {
        Ok(ep) => ep,
        Err(e) => {
            tracing::warn!(%peer, error = %e, "rdma dial");
            return;
        }
    };
    while let Ok(frame) = rx.recv() {
        if let Err(e) = ep.send_all(&frame) {
            tracing::warn!(%peer, error = %e, "rdma send; link closed");
            return;
        }
    }
}

fn accept_loop(
    listener: Endpoint,
    peers: Arc<Mutex<HashMap<NodeId, SocketAddr>>>,
    tx: mpsc::Sender<(NodeId, Message)>,
) {
    loop {
        let mut id: *mut rdma_cm_id = null_mut();
        // SAFETY: `listener.id` is a live listening endpoint.
        if unsafe { rdma_get_request(listener.id, &mut id) } != 0 {
            tracing::warn!(error = %os_err("rdma_get_request"), "rdma listener stops");
            return;
        }
        let ep = Endpoint {
            id,
            mr: null_mut(),
            buf: vec![0u8; RING * SEGMENT].into_boxed_slice(),
        };
        let peers = peers.clone();
        let tx = tx.clone();
        let spawned = std::thread::Builder::new()
            .name("ferry-rdma-conn".into())
            .spawn(move || {
                if let Err(e) = serve(ep, &peers, &tx) {
                    tracing::warn!(error = %e, "rdma connection closed");
                }
            });
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "rdma connection thread");
        }
    }
}

fn peer_ip(id: *mut rdma_cm_id) -> Option<IpAddr> {
    // SAFETY: `id` is a live connected endpoint; the sockaddr it points to
    // is valid while it is, and is read according to its family.
    unsafe {
        let sa = rdma_get_peer_addr(&*id);
        match i32::from(sa.sa_family) {
            libc_af::INET => {
                let sin = &*(std::ptr::from_ref(sa).cast::<libc_af::SockaddrIn>());
                Some(IpAddr::from(u32::from_be(sin.addr).to_be_bytes()))
            }
            libc_af::INET6 => {
                let sin6 = &*(std::ptr::from_ref(sa).cast::<libc_af::SockaddrIn6>());
                Some(IpAddr::from(sin6.addr))
            }
            _ => None,
        }
    }
}

/// The two socket address layouts `peer_ip` reads (Linux ABI).
mod libc_af {
    pub const INET: i32 = 2;
    pub const INET6: i32 = 10;

    #[repr(C)]
    pub struct SockaddrIn {
        pub family: u16,
        pub port: u16,
        pub addr: u32,
        pub zero: [u8; 8],
    }

    #[repr(C)]
    pub struct SockaddrIn6 {
        pub family: u16,
        pub port: u16,
        pub flowinfo: u32,
        pub addr: [u8; 16],
        pub scope_id: u32,
    }
}

/// One accepted connection: post the ring, accept, read frames.
fn serve(
    mut ep: Endpoint,
    peers: &Mutex<HashMap<NodeId, SocketAddr>>,
    tx: &mpsc::Sender<(NodeId, Message)>,
) -> Result<(), TransportError> {
    // SAFETY: the ring is heap memory owned by `ep`, deregistered in Drop
    // before it is freed.
    ep.mr = unsafe { rdma_reg_msgs(ep.id, ep.buf.as_mut_ptr().cast(), ep.buf.len()) };
    if ep.mr.is_null() {
        return Err(os_err("rdma_reg_msgs"));
    }
    for slot in 0..RING {
        ep.post_recv(slot)?;
    }
    let mut p = conn_param();
    // SAFETY: `id` is a connection request endpoint; `p` outlives the call.
    if unsafe { rdma_accept(ep.id, &mut p) } != 0 {
        return Err(os_err("rdma_accept"));
    }
    let from_ip = peer_ip(ep.id);
    let mut frames = FrameDecoder::new();
    let mut peer: Option<NodeId> = None;
    loop {
        // SAFETY: zeroed ibv_wc is valid; the library fills it.
        let mut wc: ibv_wc = unsafe { std::mem::zeroed() };
        // SAFETY: `id` is live; blocks until a SEND lands in the ring.
        let n = unsafe { rdma_get_recv_comp(ep.id, &mut wc) };
        if n <= 0 || wc.status != ibv_wc_status::IBV_WC_SUCCESS {
            return Err(os_err("receive completion"));
        }
        let slot = wc.wr_id as usize;
        let len = (wc.byte_len as usize).min(SEGMENT);
        if slot >= RING {
            return Err(os_err("receive slot"));
        }
        let bytes = &ep.buf[slot * SEGMENT..slot * SEGMENT + len];
        let Some(p) = &peer else {
            peer = Some(check_hello(bytes, from_ip, peers)?);
            ep.post_recv(slot)?;
            continue;
        };
        frames.push(bytes);
        ep.post_recv(slot)?;
        while let Some(msg) = frames.next_message()? {
            if tx.blocking_send((p.clone(), msg)).is_err() {
                return Ok(());
            }
        }
    }
}

/// The first SEND names the dialler; it must come from that node's IP.
fn check_hello(
    bytes: &[u8],
    from_ip: Option<IpAddr>,
    peers: &Mutex<HashMap<NodeId, SocketAddr>>,
) -> Result<NodeId, TransportError> {
    let name = bytes
        .strip_prefix(HELLO)
        .and_then(|n| std::str::from_utf8(n).ok())
        .ok_or_else(|| os_err("rdma peer sent no hello"))?;
    let node = NodeId::new(name).map_err(|_| os_err("rdma hello names no node"))?;
    let expected = lock(peers).get(&node).map(SocketAddr::ip);
    if expected.is_none() || expected != from_ip {
        return Err(TransportError::Connect {
            peer: node,
            reason: format!("connection from {from_ip:?}, configured {expected:?}"),
        });
    }
    Ok(node)
}
