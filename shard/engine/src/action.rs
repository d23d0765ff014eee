//! What the engine asks its driver to do. The driver drains [`Action`]s after every
//! `handle_*` call (`Engine::poll_action`) and turns each into ring operations; it never
//! decides anything itself.

use crate::addr::ServerAddr;
use std::collections::VecDeque;

use bytes::Bytes;

use crate::command::Command;
use crate::ids::{ClientId, ServerId};
use crate::server::moved::DetachedSocket;

/// One connection of the engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Conn {
    Client(ClientId),
    Server(ServerId),
}

/// How a connection is torn down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloseHow {
    /// After every byte already queued for it is sent (a final ErrorResponse); the engine
    /// follows with `Now` if that takes longer than its linger deadline.
    Flush,
    /// At once: whatever is queued is dropped.
    Now,
}

/// A request to the driver.
#[derive(Debug)]
pub enum Action {
    /// Queue `bytes` on the connection's socket after what is already queued; report sent
    /// byte counts of client connections with `Engine::handle_client_sent`.
    Send { conn: Conn, bytes: Bytes },
    /// Stop receiving on the connection (its peer is ahead of its other side).
    PauseRecv(Conn),
    /// Receive again.
    ResumeRecv(Conn),
    /// Open a TCP connection to `addr` for this server slot; report the outcome with
    /// `Engine::handle_server_connected`.
    Connect { server: ServerId, addr: ServerAddr },
    /// Tear the connection down; report with `Engine::handle_closed` once the socket is
    /// closed and nothing of it is in flight. A second `Close` (`Now` after `Flush`) only
    /// hurries the first.
    Close { conn: Conn, how: CloseHow },
    /// Open a one-shot connection to `addr`, send `request` (a CancelRequest), and wait for
    /// the server to close it; report with `Engine::handle_cancel_done(server)`.
    SendCancel {
        server: ServerId,
        addr: ServerAddr,
        request: [u8; 16],
    },
    /// Open a one-shot connection to the peer at `addr` (another process of the group,
    /// `[peers]`) and send `request`, a CancelRequest for a key that peer issued; nothing is
    /// reported back.
    ForwardCancel { addr: ServerAddr, request: [u8; 16] },
    /// Deliver `command` to shard `shard`'s mailbox. A `Command::ServerMoved` that cannot be
    /// delivered is given back to this engine (`Engine::handle_command`): the server stays.
    Post { shard: usize, command: Command },
    /// The server moves to another shard: stop receiving on its socket (cancel the receive
    /// in flight), send what is queued, and once the kernel owns none of its buffers take
    /// it out of the connection table without closing it and give the socket to
    /// `Engine::handle_detached`. If a receive completes with bytes, an end of file or an
    /// error first, report that as usual instead (the engine then closes the server).
    Detach(ServerId),
    /// Register `socket` (a connected server socket another shard detached) as this server
    /// slot's connection and receive on it.
    Adopt {
        server: ServerId,
        socket: DetachedSocket,
    },
    /// Close a socket that no connection of this shard owns.
    CloseSocket(DetachedSocket),
}

/// The engine's queue of actions, in the order they were decided.
#[derive(Debug, Default)]
pub(crate) struct Outbox {
    /// Each action, and for a `Send` whether its bytes are already what goes on the wire
    /// (TLS records of a handshake) rather than protocol bytes a TLS connection encrypts.
    actions: VecDeque<(Action, Wire)>,
}

/// Whether a `Send`'s bytes are protocol messages or already on-the-wire bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    /// Protocol bytes: encrypted first on a TLS connection.
    Plain,
    /// Sent as they are (TLS records, or the one-byte answer to an SSLRequest).
    Raw,
}

impl Outbox {
    pub fn send(&mut self, conn: Conn, bytes: Bytes) {
        if !bytes.is_empty() {
            self.actions
                .push_back((Action::Send { conn, bytes }, Wire::Plain));
        }
    }

    /// Bytes that go on the wire as they are.
    pub(crate) fn send_raw(&mut self, conn: Conn, bytes: Bytes) {
        if !bytes.is_empty() {
            self.actions
                .push_back((Action::Send { conn, bytes }, Wire::Raw));
        }
    }

    pub fn push(&mut self, action: Action) {
        self.actions.push_back((action, Wire::Plain));
    }

    /// Puts an action back in front (a Close that waits for a TLS close_notify).
    pub(crate) fn push_front(&mut self, action: Action, wire: Wire) {
        self.actions.push_front((action, wire));
    }

    pub fn pop(&mut self) -> Option<(Action, Wire)> {
        self.actions.pop_front()
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.actions.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::SlotRef;

    fn client() -> Conn {
        Conn::Client(ClientId(SlotRef {
            index: 1,
            generation: 0,
        }))
    }

    #[test]
    fn actions_come_out_in_the_order_decided_and_empty_sends_are_dropped() {
        let mut outbox = Outbox::default();
        outbox.send(client(), Bytes::new());
        assert!(outbox.is_empty(), "nothing to send is no action");
        outbox.send(client(), Bytes::from_static(b"a"));
        outbox.push(Action::PauseRecv(client()));
        assert!(matches!(
            outbox.pop(),
            Some((Action::Send { .. }, Wire::Plain))
        ));
        assert!(matches!(outbox.pop(), Some((Action::PauseRecv(_), _))));
        assert!(outbox.pop().is_none());
    }
}
