//! Messages between data shards and the control shard: admission requests that need a role
//! change, server-failure reports, and the replies that come back to a shard's mailbox.
//!
//! A data shard never waits for the control shard on its loop: it sends a request tagged with
//! its own `request_id` and goes on; the answer lands in its [`ReplyMailbox`], whose wake
//! callback (typically a write to the shard's eventfd) tells the loop to drain it.

use std::sync::Arc;

use crossbeam_queue::SegQueue;
use pgtier_policy::ReplicaId;
use pgtier_policy::tiers::Tier;

use crate::admission_error::AdmissionError;
use crate::lease::SessionLease;

/// The answer to an admission sent to the control shard.
#[derive(Debug)]
pub struct AdmissionReply {
    /// The id the shard chose when it asked.
    pub request_id: u64,
    /// The session's lease, already counted, or why it was refused.
    pub result: Result<SessionLease, AdmissionError>,
}

/// Where the control shard delivers a shard's admission replies.
///
/// Unbounded by design: a shard has at most one admission in flight per client, so its own
/// client limit bounds the queue; a lost reply would strand a client forever.
pub struct ReplyMailbox {
    replies: SegQueue<AdmissionReply>,
    wake: Box<dyn Fn() + Send + Sync>,
}

impl std::fmt::Debug for ReplyMailbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplyMailbox")
            .field("pending", &self.replies.len())
            .finish_non_exhaustive()
    }
}

impl ReplyMailbox {
    /// A mailbox whose `wake` is called after every delivered reply. `wake` must be cheap and
    /// must not block (e.g. an eventfd write, or `Thread::unpark`).
    pub fn new(wake: impl Fn() + Send + Sync + 'static) -> Arc<ReplyMailbox> {
        Arc::new(ReplyMailbox {
            replies: SegQueue::new(),
            wake: Box::new(wake),
        })
    }

    /// The next delivered reply, if any. Call until `None` after each wake.
    pub fn poll_reply(&self) -> Option<AdmissionReply> {
        self.replies.pop()
    }

    /// Replies waiting to be polled.
    pub fn pending(&self) -> usize {
        self.replies.len()
    }

    pub(crate) fn deliver(&self, reply: AdmissionReply) {
        self.replies.push(reply);
        (self.wake)();
    }
}

/// Where to send the answer of one admission.
#[derive(Clone, Debug)]
pub(crate) struct ReplyTo {
    pub(crate) mailbox: Arc<ReplyMailbox>,
    pub(crate) request_id: u64,
}

/// Why a data shard believes a replica failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ServerFailureCause {
    /// `connect` was refused (ECONNREFUSED).
    ConnectionRefused,
    /// An established connection was reset (ECONNRESET, EPIPE) or closed without a goodbye.
    ConnectionReset,
    /// `connect` did not finish within `server_connect_timeout`.
    ConnectTimeout,
    /// The server said it is shutting down (SQLSTATE 57P01..57P03).
    ServerShutdown,
}

impl ServerFailureCause {
    /// Spelling in events and logs.
    pub const fn as_str(self) -> &'static str {
        match self {
            ServerFailureCause::ConnectionRefused => "connection refused (reported by a shard)",
            ServerFailureCause::ConnectionReset => "connection reset (reported by a shard)",
            ServerFailureCause::ConnectTimeout => "connect timeout (reported by a shard)",
            ServerFailureCause::ServerShutdown => "server shutting down (reported by a shard)",
        }
    }
}

/// A request to the control shard of one router.
#[derive(Debug)]
pub(crate) enum ControlRequest {
    /// Admit a session whose decision needs a role change (or lost too many races).
    Admit { class: Tier, reply_to: ReplyTo },
    /// A data shard saw a connection to `replica` fail.
    ServerFailure {
        replica: ReplicaId,
        cause: ServerFailureCause,
    },
}
