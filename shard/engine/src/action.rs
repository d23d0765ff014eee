//! What the engine asks its driver to do. The driver drains [`Action`]s after every
//! `handle_*` call (`Engine::poll_action`) and turns each into ring operations; it never
//! decides anything itself.

use std::collections::VecDeque;
use std::net::SocketAddr;

use bytes::Bytes;

use crate::command::Command;
use crate::ids::{ClientId, ServerId};

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
    Connect { server: ServerId, addr: SocketAddr },
    /// Tear the connection down; report with `Engine::handle_closed` once the socket is
    /// closed and nothing of it is in flight. A second `Close` (`Now` after `Flush`) only
    /// hurries the first.
    Close { conn: Conn, how: CloseHow },
    /// Open a one-shot connection to `addr`, send `request` (a CancelRequest), and wait for
    /// the server to close it; report with `Engine::handle_cancel_done(server)`.
    SendCancel {
        server: ServerId,
        addr: SocketAddr,
        request: [u8; 16],
    },
    /// Deliver `command` to shard `shard`'s mailbox.
    Post { shard: usize, command: Command },
}

/// The engine's queue of actions, in the order they were decided.
#[derive(Debug, Default)]
pub struct Outbox {
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
    pub fn send_raw(&mut self, conn: Conn, bytes: Bytes) {
        if !bytes.is_empty() {
            self.actions
                .push_back((Action::Send { conn, bytes }, Wire::Raw));
        }
    }

    pub fn push(&mut self, action: Action) {
        self.actions.push_back((action, Wire::Plain));
    }

    /// Puts an action back in front (a Close that waits for a TLS close_notify).
    pub fn push_front(&mut self, action: Action, wire: Wire) {
        self.actions.push_front((action, wire));
    }

    pub fn pop(&mut self) -> Option<(Action, Wire)> {
        self.actions.pop_front()
    }

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
