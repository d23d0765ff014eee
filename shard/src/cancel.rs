//! Cancel keys and cancel connections.
//!
//! Each client gets a BackendKeyData whose secret carries the shard index in its low byte, so
//! a CancelRequest arriving on any shard is routed to the shard that owns the client. There the
//! key maps to the client; if the client's server is still serving it with a query running,
//! a one-shot connection sends the server's real key. While such a cancel is in flight the
//! server is not given to anyone else, so a late cancel can never hit another client's query.

use std::net::SocketAddr;
use std::os::fd::IntoRawFd;

use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use tracing::debug;

use crate::io::op_key::{OpKey, OpKind};
use crate::io::ring::{Op, Ring};
use crate::io::slab::{CancelConnId, ClientId, ServerId};
use crate::mailbox::Command;
use crate::proto;
use crate::shard::Shard;

/// Bits of the secret that name the shard.
const SHARD_BITS: u32 = 8;

/// The stage a cancel connection is in; exactly one op is in flight in each but `Done`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelStage {
    Connecting,
    Sending,
    /// Waiting for the server to close the connection (it has acted on the request then).
    AwaitingClose,
}

pub struct CancelConn {
    pub fd: i32,
    pub stage: CancelStage,
    /// The server the cancel is for; it stays out of the pool until this finishes.
    pub server: ServerId,
    /// Owned by the kernel during `Connecting`.
    pub addr: Box<SockAddr>,
    /// Owned by the kernel during `Sending`.
    pub packet: Box<[u8; 16]>,
    /// Owned by the kernel during `AwaitingClose`.
    pub scratch: Box<[u8; 64]>,
}

/// The shard that owns a client with this cancel secret.
pub fn shard_of(secret: u32) -> usize {
    (secret & ((1 << SHARD_BITS) - 1)) as usize
}

impl<R: Ring> Shard<R> {
    /// A new BackendKeyData for a client: `pid` is the server's real pid in session mode,
    /// otherwise random; the secret is random with this shard's index in its low byte.
    pub(crate) fn new_cancel_key(&mut self, id: ClientId, pid: Option<u32>) -> (u32, u32) {
        loop {
            let random = crate::auth::random_bytes::<8>();
            let pid = pid.unwrap_or_else(|| {
                u32::from_be_bytes([random[0] & 0x7f, random[1], random[2], random[3]]).max(1)
            });
            let high = u32::from_be_bytes([random[4], random[5], random[6], random[7]]);
            let secret = (high << SHARD_BITS) | self.index as u32;
            if self.cancel_keys.contains_key(&(pid, secret)) {
                continue;
            }
            self.cancel_keys.insert((pid, secret), id);
            if let Some(client) = self.clients.get_mut(id.0) {
                client.cancel_key = Some((pid, secret));
            }
            return (pid, secret);
        }
    }

    /// A CancelRequest arrived here; handle it or pass it to the owning shard.
    pub(crate) fn route_cancel(&mut self, pid: u32, secret: u32) {
        let owner = shard_of(secret);
        if owner == self.index {
            self.handle_cancel(pid, secret);
        } else if let Some(mailbox) = self.shared.mailboxes.get(owner) {
            if mailbox.post(Command::Cancel { pid, secret }).is_err() {
                self.warn_once("cancel dropped: the owning shard's mailbox is full");
            }
        }
    }

    pub(crate) fn handle_cancel(&mut self, pid: u32, secret: u32) {
        let Some(&client_id) = self.cancel_keys.get(&(pid, secret)) else {
            debug!("cancel request with an unknown key");
            return;
        };
        let Some(server_id) = self.clients.get(client_id.0).and_then(|c| c.server()) else {
            return;
        };
        let running = self
            .servers
            .get(server_id.0)
            .is_some_and(|s| s.client() == Some(client_id) && s.tracker.has_outstanding());
        if running {
            self.send_cancel(server_id);
        }
    }

    /// Opens a connection to the server's address and sends its real BackendKeyData.
    pub(crate) fn send_cancel(&mut self, server_id: ServerId) {
        let Some(server) = self.servers.get_mut(server_id.0) else {
            return;
        };
        let (Some((pid, secret)), Some(addr)) = (server.backend_key, server.addr.as_socket())
        else {
            return;
        };
        let Ok(fd) = cancel_socket(addr) else { return };
        server.cancels_pending += 1;
        let conn = CancelConn {
            fd,
            stage: CancelStage::Connecting,
            server: server_id,
            addr: Box::new(SockAddr::from(addr)),
            packet: Box::new(proto::cancel_request(pid, secret)),
            scratch: Box::new([0; 64]),
        };
        let Some(slot) = self.cancels.insert(conn) else {
            // SAFETY: the fd was never submitted; we own it alone.
            unsafe { libc::close(fd) };
            if let Some(server) = self.servers.get_mut(server_id.0) {
                server.cancels_pending -= 1;
            }
            return;
        };
        let id = CancelConnId(slot);
        let Some(conn) = self.cancels.get(slot) else {
            return;
        };
        let op = Op::Connect {
            fd,
            addr: conn.addr.as_ptr().cast(),
            len: conn.addr.len(),
        };
        if !self.submit(cancel_key(OpKind::CancelConnect, id), op) {
            self.finish_cancel(id);
        }
    }

    pub(crate) fn on_cancel_op(&mut self, id: CancelConnId, kind: OpKind, result: i32) {
        let Some(conn) = self.cancels.get_mut(id.0) else {
            return;
        };
        let next = match (kind, conn.stage) {
            (OpKind::CancelConnect, CancelStage::Connecting) if result >= 0 => {
                conn.stage = CancelStage::Sending;
                Some((
                    OpKind::CancelSend,
                    Op::Send {
                        fd: conn.fd,
                        buf: conn.packet.as_ptr(),
                        len: 16,
                    },
                ))
            }
            (OpKind::CancelSend, CancelStage::Sending) if result == 16 => {
                conn.stage = CancelStage::AwaitingClose;
                Some((
                    OpKind::CancelRecv,
                    Op::Recv {
                        fd: conn.fd,
                        buf: conn.scratch.as_mut_ptr(),
                        len: 64,
                    },
                ))
            }
            (OpKind::CancelRecv, CancelStage::AwaitingClose) if result > 0 => Some((
                OpKind::CancelRecv,
                Op::Recv {
                    fd: conn.fd,
                    buf: conn.scratch.as_mut_ptr(),
                    len: 64,
                },
            )),
            _ => None,
        };
        match next {
            Some((kind, op)) => {
                if !self.submit(cancel_key(kind, id), op) {
                    self.finish_cancel(id);
                }
            }
            None => self.finish_cancel(id),
        }
    }

    /// The cancel connection is done (or failed): close it and let its server go back to
    /// the pool if it was only waiting for this.
    fn finish_cancel(&mut self, id: CancelConnId) {
        let Some(conn) = self.cancels.remove(id.0) else {
            return;
        };
        self.submit(OpKey::new(OpKind::Close, 0, 0), Op::Close { fd: conn.fd });
        if let Some(server) = self.servers.get_mut(conn.server.0) {
            server.cancels_pending = server.cancels_pending.saturating_sub(1);
        }
        self.maybe_finish_drain(conn.server);
    }
}

fn cancel_key(kind: OpKind, id: CancelConnId) -> OpKey {
    OpKey::new(kind, id.0.index, id.0.generation)
}

fn cancel_socket(addr: SocketAddr) -> std::io::Result<i32> {
    let socket = Socket::new(
        Domain::for_address(addr),
        Type::STREAM.nonblocking().cloexec(),
        Some(Protocol::TCP),
    )?;
    Ok(socket.into_raw_fd())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_is_in_the_low_byte() {
        assert_eq!(shard_of(0xdead_be03), 3);
        assert_eq!(shard_of(0x0000_0100), 0);
    }
}
