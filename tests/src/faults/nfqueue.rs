//! The kernel's nfnetlink_queue protocol, spoken over a raw `AF_NETLINK` /
//! `NETLINK_NETFILTER` socket: bind a queue number, receive each queued packet's id, and
//! send a verdict (accept or drop) for any id, in any order. Only the first bytes of each
//! packet are copied (its IP and port headers, to tell its flow). This is what the harness's
//! packet-level netem (`netem.rs`) stands on, since this kernel has no `tc netem` and no
//! nft `queue` statement; packets reach the queue through iptables' `NFQUEUE` target.
//!
//! Messages are built and parsed here by hand (the layout of `linux/netfilter/nfnetlink.h`
//! and `nfnetlink_queue.h`): the builders and the parser are pure and unit-tested; only
//! `QueueSocket` touches the kernel.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// The nfnetlink subsystem of packet queues (`NFNL_SUBSYS_QUEUE`).
const SUBSYS_QUEUE: u16 = 3;
/// Message types within the subsystem (`NFQNL_MSG_*`).
const MSG_PACKET: u16 = 0;
const MSG_VERDICT: u16 = 1;
const MSG_CONFIG: u16 = 2;
/// Configuration attributes (`NFQA_CFG_*`).
const CFG_CMD: u16 = 1;
const CFG_PARAMS: u16 = 2;
const CFG_QUEUE_MAXLEN: u16 = 3;
const CFG_MASK: u16 = 4;
const CFG_FLAGS: u16 = 5;
/// Configuration commands (`NFQNL_CFG_CMD_*`).
const CMD_BIND: u8 = 1;
const CMD_UNBIND: u8 = 2;
/// Copy the packet's metadata and its first `COPY_RANGE` bytes: verdicts need only the id,
/// and the IP and port headers name the packet's flow (for counting real reordering).
const COPY_PACKET: u8 = 2;
const COPY_RANGE: u32 = 64;
/// `NFQA_CFG_F_FAIL_OPEN`: when the queue is full, or a packet cannot be handed to us, the
/// kernel accepts it rather than dropping it.
const FLAG_FAIL_OPEN: u32 = 1;
/// Packet attributes (`NFQA_*`).
const ATTR_PACKET_HDR: u16 = 1;
const ATTR_VERDICT_HDR: u16 = 2;
const ATTR_PAYLOAD: u16 = 10;
/// The attribute type without its nested/byte-order bits.
const ATTR_TYPE_MASK: u16 = 0x3fff;
/// `NLMSG_ERROR`: an acknowledgement (error 0) or a refusal (a negative errno).
const NLMSG_ERROR: u16 = 2;
const NLM_F_REQUEST: u16 = 1;
const NLM_F_ACK: u16 = 4;
const NLMSG_HDR_LEN: usize = 16;
const NFGEN_HDR_LEN: usize = 4;

/// What to do with a queued packet (`NF_DROP`, `NF_ACCEPT`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Drop = 0,
    Accept = 1,
}

/// One message from the kernel, as far as a verdict-only listener cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Message {
    /// A packet was queued; its verdict is owed by `id`. `flow` names its connection and
    /// direction (a hash of addresses, protocol and ports), when its headers were readable.
    Packet { id: u32, flow: Option<u64> },
    /// The answer to request `seq`: 0 for success, else a positive errno.
    Ack { seq: u32, errno: i32 },
    /// Anything else (ignored).
    Other,
}

fn align4(len: usize) -> usize {
    (len + 3) & !3
}

/// Appends one netlink message of the queue subsystem: the netlink header, the nfnetlink
/// header (family unspecified, version 0, the queue number big-endian), then `attrs`.
fn push_message(out: &mut Vec<u8>, msg: u16, flags: u16, seq: u32, queue: u16, attrs: &[u8]) {
    let len = NLMSG_HDR_LEN + NFGEN_HDR_LEN + attrs.len();
    let len32 = u32::try_from(len).unwrap_or(u32::MAX);
    out.extend_from_slice(&len32.to_ne_bytes());
    out.extend_from_slice(&((SUBSYS_QUEUE << 8) | msg).to_ne_bytes());
    out.extend_from_slice(&flags.to_ne_bytes());
    out.extend_from_slice(&seq.to_ne_bytes());
    out.extend_from_slice(&0u32.to_ne_bytes());
    out.extend_from_slice(&[libc::AF_UNSPEC as u8, 0]);
    out.extend_from_slice(&queue.to_be_bytes());
    out.extend_from_slice(attrs);
    out.resize(out.len() + align4(len) - len, 0);
}

/// Appends one attribute, padded to 4 bytes.
fn push_attr(out: &mut Vec<u8>, kind: u16, payload: &[u8]) {
    let len = 4 + payload.len();
    out.extend_from_slice(&u16::try_from(len).unwrap_or(u16::MAX).to_ne_bytes());
    out.extend_from_slice(&kind.to_ne_bytes());
    out.extend_from_slice(payload);
    out.resize(out.len() + align4(len) - len, 0);
}

/// The request binding `queue` to this socket.
pub fn bind_request(seq: u32, queue: u16) -> Vec<u8> {
    command_request(seq, queue, CMD_BIND)
}

/// The request unbinding `queue`.
pub fn unbind_request(seq: u32, queue: u16) -> Vec<u8> {
    command_request(seq, queue, CMD_UNBIND)
}

fn command_request(seq: u32, queue: u16, command: u8) -> Vec<u8> {
    let mut attrs = Vec::new();
    // nfqnl_msg_config_cmd: the command, a pad byte, a protocol family (unused since 3.8).
    push_attr(&mut attrs, CFG_CMD, &[command, 0, 0, 0]);
    let mut out = Vec::new();
    push_message(
        &mut out,
        MSG_CONFIG,
        NLM_F_REQUEST | NLM_F_ACK,
        seq,
        queue,
        &attrs,
    );
    out
}

/// The request setting a bound queue's parameters: the headers only, at most `max_len`
/// packets held, fail-open.
pub fn params_request(seq: u32, queue: u16, max_len: u32) -> Vec<u8> {
    let mut attrs = Vec::new();
    // nfqnl_msg_config_params (packed): copy_range (big-endian), copy_mode.
    let mut params = COPY_RANGE.to_be_bytes().to_vec();
    params.push(COPY_PACKET);
    push_attr(&mut attrs, CFG_PARAMS, &params);
    push_attr(&mut attrs, CFG_QUEUE_MAXLEN, &max_len.to_be_bytes());
    // The kernel changes only the flags named in the mask.
    push_attr(&mut attrs, CFG_FLAGS, &FLAG_FAIL_OPEN.to_be_bytes());
    push_attr(&mut attrs, CFG_MASK, &FLAG_FAIL_OPEN.to_be_bytes());
    let mut out = Vec::new();
    push_message(
        &mut out,
        MSG_CONFIG,
        NLM_F_REQUEST | NLM_F_ACK,
        seq,
        queue,
        &attrs,
    );
    out
}

/// Appends the verdict on packet `id` of `queue` (several may share one send).
pub fn push_verdict(out: &mut Vec<u8>, queue: u16, id: u32, verdict: Verdict) {
    let mut attrs = Vec::with_capacity(12);
    // nfqnl_msg_verdict_hdr: the verdict, the packet id, both big-endian.
    let mut header = (verdict as u32).to_be_bytes().to_vec();
    header.extend_from_slice(&id.to_be_bytes());
    push_attr(&mut attrs, ATTR_VERDICT_HDR, &header);
    push_message(out, MSG_VERDICT, NLM_F_REQUEST, 0, queue, &attrs);
}

/// Splits one datagram from the kernel into messages; a truncated or malformed tail ends
/// the list (the kernel does not send one, but nothing here trusts that).
pub fn parse(datagram: &[u8]) -> Vec<Message> {
    let mut messages = Vec::new();
    let mut rest = datagram;
    while rest.len() >= NLMSG_HDR_LEN {
        let len = u32::from_ne_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
        if len < NLMSG_HDR_LEN || len > rest.len() {
            break;
        }
        let kind = u16::from_ne_bytes([rest[4], rest[5]]);
        let seq = u32::from_ne_bytes([rest[8], rest[9], rest[10], rest[11]]);
        let body = &rest[NLMSG_HDR_LEN..len];
        messages.push(parse_one(kind, seq, body));
        rest = &rest[align4(len).min(rest.len())..];
    }
    messages
}

fn parse_one(kind: u16, seq: u32, body: &[u8]) -> Message {
    if kind == NLMSG_ERROR {
        // nlmsgerr: a negative errno (0 = acknowledged), then the request's header.
        return match body.get(..4) {
            Some(bytes) => {
                let error = i32::from_ne_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
                Message::Ack { seq, errno: -error }
            }
            None => Message::Other,
        };
    }
    if kind != (SUBSYS_QUEUE << 8) | MSG_PACKET || body.len() < NFGEN_HDR_LEN {
        return Message::Other;
    }
    let (mut id, mut flow) = (None, None);
    let mut attrs = &body[NFGEN_HDR_LEN..];
    while attrs.len() >= 4 {
        let len = u16::from_ne_bytes([attrs[0], attrs[1]]) as usize;
        let kind = u16::from_ne_bytes([attrs[2], attrs[3]]) & ATTR_TYPE_MASK;
        if len < 4 || len > attrs.len() {
            break;
        }
        match kind {
            // nfqnl_msg_packet_hdr: the packet id (big-endian) comes first.
            ATTR_PACKET_HDR if len >= 8 => {
                id = Some(u32::from_be_bytes([attrs[4], attrs[5], attrs[6], attrs[7]]));
            }
            ATTR_PAYLOAD => flow = flow_of(&attrs[4..len]),
            _ => {}
        }
        attrs = &attrs[align4(len).min(attrs.len())..];
    }
    match id {
        Some(id) => Message::Packet { id, flow },
        None => Message::Other,
    }
}

/// A hash of an IP packet's addresses, protocol and (for TCP and UDP) ports: one value per
/// connection and direction. `None` when the headers are not there to read.
pub fn flow_of(packet: &[u8]) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    let (addresses, protocol, transport) = match packet.first()? >> 4 {
        4 => {
            let header_len = usize::from(packet.first()? & 0x0f) * 4;
            (packet.get(12..20)?, *packet.get(9)?, header_len)
        }
        // Extension headers are not walked: the next header is taken as the transport.
        6 => (packet.get(8..40)?, *packet.get(6)?, 40),
        _ => return None,
    };
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    addresses.hash(&mut hasher);
    protocol.hash(&mut hasher);
    if protocol == 6 || protocol == 17 {
        packet.get(transport..transport + 4)?.hash(&mut hasher);
    }
    Some(hasher.finish())
}

/// A netlink socket bound to one queue of the calling thread's network namespace. The
/// kernel unbinds the queue when the socket closes; packets the rule then sends to it are
/// accepted when the rule says `--queue-bypass`, so a listener that dies blackholes nothing.
#[derive(Debug)]
pub struct QueueSocket {
    fd: OwnedFd,
    queue: u16,
    seq: u32,
}

impl QueueSocket {
    /// Opens the socket, binds `queue` (headers only, fail-open, at most `max_len` held).
    pub fn bind(queue: u16, max_len: u32) -> io::Result<QueueSocket> {
        // SAFETY: socket takes plain integers and returns a new descriptor or -1.
        let raw = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                libc::NETLINK_NETFILTER,
            )
        };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a descriptor just returned by socket and owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: sockaddr_nl is plain data; all-zero is valid (pid 0: the kernel picks).
        let mut addr: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        addr.nl_family = libc::AF_NETLINK as libc::sa_family_t;
        // SAFETY: `addr` is a live sockaddr_nl and the length given is its size.
        let rc = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&raw const addr).cast::<libc::sockaddr>(),
                std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        let socket = QueueSocket { fd, queue, seq: 0 };
        // A burst of queued packets must not overflow the socket: the kernel would then
        // accept them undelayed (fail-open). Best effort: FORCE needs CAP_NET_ADMIN.
        let _ = socket.set_int(libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, 8 << 20);
        let _ = socket.set_int(libc::SOL_NETLINK, libc::NETLINK_NO_ENOBUFS, 1);
        let mut socket = socket;
        let seq = socket.next_seq();
        socket.request(&bind_request(seq, queue), seq)?;
        let seq = socket.next_seq();
        socket.request(&params_request(seq, queue, max_len), seq)?;
        Ok(socket)
    }

    fn next_seq(&mut self) -> u32 {
        self.seq = self.seq.wrapping_add(1);
        self.seq
    }

    fn set_int(&self, level: libc::c_int, name: libc::c_int, value: libc::c_int) -> io::Result<()> {
        // SAFETY: the option value points to a live c_int and the length is its size.
        let rc = unsafe {
            libc::setsockopt(
                self.fd.as_raw_fd(),
                level,
                name,
                (&raw const value).cast::<libc::c_void>(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Sends a configuration request and waits for its acknowledgement (packets that arrive
    /// meanwhile cannot: nothing is queued before the queue is bound and configured).
    fn request(&mut self, message: &[u8], seq: u32) -> io::Result<()> {
        self.send(message)?;
        let mut buf = vec![0u8; 8192];
        loop {
            let n = self.recv(&mut buf, true)?;
            for message in parse(&buf[..n]) {
                match message {
                    Message::Ack { seq: got, errno } if got == seq => {
                        return if errno == 0 {
                            Ok(())
                        } else {
                            Err(io::Error::from_raw_os_error(errno))
                        };
                    }
                    _ => {}
                }
            }
        }
    }

    /// Sends `bytes` (one or more messages) to the kernel.
    pub fn send(&self, bytes: &[u8]) -> io::Result<()> {
        // SAFETY: sockaddr_nl is plain data; all-zero with the family set addresses the
        // kernel (pid 0).
        let mut kernel: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        kernel.nl_family = libc::AF_NETLINK as libc::sa_family_t;
        // SAFETY: the buffer and the address are live for the call, lengths are theirs.
        let rc = unsafe {
            libc::sendto(
                self.fd.as_raw_fd(),
                bytes.as_ptr().cast::<libc::c_void>(),
                bytes.len(),
                0,
                (&raw const kernel).cast::<libc::sockaddr>(),
                std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
            )
        };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Receives one datagram into `buf`; without `block`, `WouldBlock` when none is ready.
    pub fn recv(&self, buf: &mut [u8], block: bool) -> io::Result<usize> {
        let flags = if block { 0 } else { libc::MSG_DONTWAIT };
        // SAFETY: `buf` is a live, writable buffer of the length given.
        let n = unsafe {
            libc::recv(
                self.fd.as_raw_fd(),
                buf.as_mut_ptr().cast::<libc::c_void>(),
                buf.len(),
                flags,
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(n as usize)
    }

    /// Waits up to `timeout_ms` for a datagram; true when one is ready.
    pub fn wait_readable(&self, timeout_ms: i32) -> io::Result<bool> {
        let mut poll = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one live pollfd, count 1.
        let rc = unsafe { libc::poll(&mut poll, 1, timeout_ms) };
        match rc {
            n if n > 0 => Ok(true),
            0 => Ok(false),
            _ => {
                let error = io::Error::last_os_error();
                if error.kind() == io::ErrorKind::Interrupted {
                    Ok(false)
                } else {
                    Err(error)
                }
            }
        }
    }

    pub fn queue(&self) -> u16 {
        self.queue
    }

    /// Unbinds the queue (closing the socket would too; this says so to the kernel first).
    pub fn unbind(mut self) -> io::Result<()> {
        let seq = self.next_seq();
        self.send(&unbind_request(seq, self.queue))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_verdict_is_thirty_two_bytes_in_the_kernel_layout() {
        let mut out = Vec::new();
        push_verdict(&mut out, 7, 0x0102_0304, Verdict::Accept);
        assert_eq!(out.len(), 32);
        assert_eq!(u32::from_ne_bytes([out[0], out[1], out[2], out[3]]), 32);
        assert_eq!(u16::from_ne_bytes([out[4], out[5]]), 0x0301);
        assert_eq!(u16::from_ne_bytes([out[6], out[7]]), NLM_F_REQUEST);
        // nfgenmsg: family, version, queue number big-endian.
        assert_eq!(&out[16..20], &[0, 0, 0, 7]);
        // nlattr: length 12, type NFQA_VERDICT_HDR; then verdict and id big-endian.
        assert_eq!(u16::from_ne_bytes([out[20], out[21]]), 12);
        assert_eq!(u16::from_ne_bytes([out[22], out[23]]), ATTR_VERDICT_HDR);
        assert_eq!(&out[24..32], &[0, 0, 0, 1, 1, 2, 3, 4]);
    }

    #[test]
    fn params_pad_the_five_byte_attribute() {
        let out = params_request(3, 1, 4096);
        // 16 + 4 + (12 params + 8 maxlen + 8 flags + 8 mask).
        assert_eq!(out.len(), 56);
        assert_eq!(u16::from_ne_bytes([out[20], out[21]]), 9);
        assert_eq!(&out[24..29], &[0, 0, 0, 64, COPY_PACKET]);
        assert_eq!(&out[36..40], &4096u32.to_be_bytes());
    }

    /// The first bytes of an IPv4 TCP segment from 10.0.0.1:`port` to 10.0.0.2:5432.
    fn tcp_segment(port: u16) -> Vec<u8> {
        let mut packet = vec![
            0x45, 0, 0, 40, 0, 0, 0, 0, 64, 6, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
        ];
        packet.extend_from_slice(&port.to_be_bytes());
        packet.extend_from_slice(&5432u16.to_be_bytes());
        packet.extend_from_slice(&[0; 16]);
        packet
    }

    /// A packet message as the kernel sends it: a header attribute and a payload attribute.
    fn packet_message(id: u32) -> Vec<u8> {
        let mut attrs = Vec::new();
        // Another attribute first (NFQA_MARK), to check that the parser walks past it.
        push_attr(&mut attrs, 3, &9u32.to_be_bytes());
        let mut header = id.to_be_bytes().to_vec();
        header.extend_from_slice(&[0x08, 0x00, 3]);
        push_attr(&mut attrs, ATTR_PACKET_HDR, &header);
        push_attr(&mut attrs, ATTR_PAYLOAD, &tcp_segment(40000 + id as u16));
        let mut out = Vec::new();
        push_message(&mut out, MSG_PACKET, 0, 0, 1, &attrs);
        out
    }

    fn packet(id: u32) -> Message {
        Message::Packet {
            id,
            flow: flow_of(&tcp_segment(40000 + id as u16)),
        }
    }

    #[test]
    fn a_flow_is_its_addresses_and_ports() {
        let one = flow_of(&tcp_segment(1000)).expect("IPv4 TCP");
        assert_eq!(flow_of(&tcp_segment(1000)), Some(one));
        assert_ne!(flow_of(&tcp_segment(1001)), Some(one));
        assert_eq!(flow_of(&tcp_segment(1000)[..21]), None);
        assert_eq!(flow_of(&[0x15; 40]), None);
    }

    #[test]
    fn packets_and_acks_parse_from_one_datagram() {
        let mut datagram = packet_message(41);
        datagram.extend(packet_message(42));
        let mut error = Vec::new();
        error.extend_from_slice(&36u32.to_ne_bytes());
        error.extend_from_slice(&NLMSG_ERROR.to_ne_bytes());
        error.extend_from_slice(&0u16.to_ne_bytes());
        error.extend_from_slice(&5u32.to_ne_bytes());
        error.extend_from_slice(&0u32.to_ne_bytes());
        error.extend_from_slice(&(-libc::EPERM).to_ne_bytes());
        error.extend_from_slice(&[0u8; 16]);
        datagram.extend(error);
        assert_eq!(
            parse(&datagram),
            vec![
                packet(41),
                packet(42),
                Message::Ack {
                    seq: 5,
                    errno: libc::EPERM
                },
            ]
        );
    }

    #[test]
    fn a_truncated_datagram_ends_the_list() {
        let mut datagram = packet_message(1);
        let full = datagram.len();
        datagram.extend(packet_message(2));
        datagram.truncate(full + 10);
        assert_eq!(parse(&datagram), vec![packet(1)]);
        assert!(parse(&[0xff; 40]).is_empty());
    }
}
