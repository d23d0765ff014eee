//! One-shot cancel-request connections: connect to the server, send the 16-byte
//! CancelRequest with the backend's real key, and wait for the server to close the
//! connection (it has acted on the request then). The engine asks for one with
//! `Action::SendCancel` and hears back with `handle_cancel_done`; until then it does not
//! give the server to anyone else, so a late cancel can never hit another client's query.
//! A CancelRequest forwarded to a peer (`Action::ForwardCancel`) takes the same steps and
//! reports nothing.
//! Only the driver knows these connections: they live in the engine's generational slab
//! type (`pgtier_engine::ids::Slab`) under a [`CancelConnId`] of their own, so a stale
//! completion (for a slot closed and reused since) is recognised and dropped.

use std::os::fd::IntoRawFd;

use pgtier_engine::{ServerAddr, ServerId, SlotRef};
use socket2::SockAddr;

use crate::io::op_key::OpKind;
use crate::io::ring::Op;

/// A one-shot cancel-request connection's slot in the driver's slab.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CancelConnId(pub SlotRef);

/// The stage a cancel connection is in; exactly one op is in flight in each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CancelStage {
    Connecting,
    Sending,
    /// Waiting for the server to close the connection.
    AwaitingClose,
}

pub(crate) struct CancelConn {
    pub fd: i32,
    pub stage: CancelStage,
    /// The server the cancel is for (`None`: a request forwarded to a peer).
    pub server: Option<ServerId>,
    /// Owned by the kernel during `Connecting`.
    addr: Box<SockAddr>,
    /// Owned by the kernel during `Sending`.
    packet: Box<[u8; 16]>,
    /// Owned by the kernel during `AwaitingClose`.
    scratch: Box<[u8; 64]>,
}

impl CancelConn {
    /// A socket for a cancel to `addr`, not yet connected.
    pub fn open(
        server: Option<ServerId>,
        addr: &ServerAddr,
        request: [u8; 16],
    ) -> std::io::Result<CancelConn> {
        let (socket, target) = crate::sockets::server_socket(addr)?;
        Ok(CancelConn {
            fd: socket.into_raw_fd(),
            stage: CancelStage::Connecting,
            server,
            addr: Box::new(target),
            packet: Box::new(request),
            scratch: Box::new([0; 64]),
        })
    }

    /// The first op: the connect.
    pub(crate) fn connect_op(&self) -> (OpKind, Op) {
        (
            OpKind::CancelConnect,
            Op::Connect {
                fd: self.fd,
                addr: self.addr.as_ptr().cast(),
                len: self.addr.len(),
            },
        )
    }

    /// The op that follows a completion of `kind` with `result`, or `None` when the cancel
    /// is done (sent and answered with a close, or failed).
    pub(crate) fn next_op(&mut self, kind: OpKind, result: i32) -> Option<(OpKind, Op)> {
        let recv = |conn: &mut CancelConn| {
            (
                OpKind::CancelRecv,
                Op::Recv {
                    fd: conn.fd,
                    buf: conn.scratch.as_mut_ptr(),
                    len: 64,
                },
            )
        };
        match (kind, self.stage) {
            (OpKind::CancelConnect, CancelStage::Connecting) if result >= 0 => {
                self.stage = CancelStage::Sending;
                Some((
                    OpKind::CancelSend,
                    Op::Send {
                        fd: self.fd,
                        buf: self.packet.as_ptr(),
                        len: 16,
                    },
                ))
            }
            (OpKind::CancelSend, CancelStage::Sending) if result == 16 => {
                self.stage = CancelStage::AwaitingClose;
                Some(recv(self))
            }
            (OpKind::CancelRecv, CancelStage::AwaitingClose) if result > 0 => Some(recv(self)),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pgtier_engine::SlotRef;

    fn conn() -> CancelConn {
        let server = ServerId(SlotRef {
            index: 0,
            generation: 0,
        });
        CancelConn::open(
            Some(server),
            &ServerAddr::Tcp("127.0.0.1:1".parse().expect("addr")),
            [0; 16],
        )
        .expect("socket")
    }

    #[test]
    fn connect_send_then_wait_for_the_close() {
        let mut cancel = conn();
        let (kind, _) = cancel.connect_op();
        assert_eq!(kind, OpKind::CancelConnect);
        let (kind, _) = cancel.next_op(OpKind::CancelConnect, 0).expect("send");
        assert_eq!(kind, OpKind::CancelSend);
        let (kind, _) = cancel.next_op(OpKind::CancelSend, 16).expect("recv");
        assert_eq!(kind, OpKind::CancelRecv);
        assert!(
            cancel.next_op(OpKind::CancelRecv, 0).is_none(),
            "closed: done"
        );
        // SAFETY: closing the test's own socket.
        unsafe { libc::close(cancel.fd) };
    }

    #[test]
    fn a_refused_connect_or_short_send_ends_it() {
        let mut cancel = conn();
        assert!(
            cancel
                .next_op(OpKind::CancelConnect, -libc::ECONNREFUSED)
                .is_none()
        );
        let mut cancel = conn();
        cancel.next_op(OpKind::CancelConnect, 0);
        assert!(cancel.next_op(OpKind::CancelSend, 3).is_none());
        // SAFETY: closing the test's own socket.
        unsafe { libc::close(cancel.fd) };
    }
}
