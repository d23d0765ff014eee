//! Reads that run again (`read_retries`, `crate::client::retry`), the client table's side:
//! whether a session's new transaction may be a read that runs again, which of its bytes are
//! kept as they are forwarded, and putting them back when its server dies before answering.
//! The engine routes the statement again (`Engine::run_read_again`).

use std::net::SocketAddr;
use std::time::Instant;

use super::clients::ClientTable;
use super::env::Env;
use crate::client::Session;
use crate::client::forward::Forwarded;
use crate::client::reads::{ReadTxn, Unit};
use crate::client::retry::{KeptBytes, may_run_again};
use crate::ids::{ClientId, ServerId};
use crate::services::Routing;

/// Whether a session that just got a server for a new transaction may run its statement
/// again should the server die: transaction mode, no session state, and on a replica (a
/// reader session's read placed there, or a replica-set session that may move).
pub(super) fn may_run_reads_again(session: &Session, env: &Env) -> bool {
    let settings = &env.config().pgtier;
    let on_replica = match session.reads() {
        Some(reads) => matches!(reads.txn, ReadTxn::OnReplica { .. }),
        None => session.lease().is_some() && settings.repin_idle_sessions,
    };
    on_replica
        && settings.read_retries > 0
        && session.mode().releases_at_idle_ready()
        && !session.pins_server()
}

/// What a forward does for the session's read that may run again.
#[derive(Clone, Copy, Debug)]
pub(super) enum Keep {
    /// Nothing to keep or watch.
    Nothing,
    /// The transaction's first forward, of a read of this many bytes: keep them.
    Unit(usize),
    /// A statement is kept: anything more forwarded ends that.
    Armed,
}

/// How a forward that may end a session's run-again statement went.
pub(super) struct ForwardSeen<'a> {
    pub keep: Keep,
    pub out: &'a mut Forwarded,
}

/// Where a statement put back goes next.
pub(super) enum Again {
    /// A reader session: its read is routed again.
    Reader,
    /// A replica-set session: it waits on its replica's pool for another server, or moves
    /// once the replica is Down.
    Leased,
}

impl ClientTable {
    /// Before a forward: whether client `id`'s bytes are to be kept (its transaction's first
    /// forward, of a read that may run again) or watched (a statement is kept).
    pub(super) fn read_to_keep(&mut self, id: ClientId, env: &Env, routing: &dyn Routing) -> Keep {
        let Some(client) = self.get_mut(id.0) else {
            return Keep::Nothing;
        };
        let Some(session) = client.session() else {
            return Keep::Nothing;
        };
        if session.retry().is_armed() {
            return Keep::Armed;
        }
        if !session.retry().is_ready() {
            return Keep::Nothing;
        }
        let input = client.input().bytes();
        let len = match session.reads() {
            // The read-only prefix the replica was given (`read_routing.rs`), whole here.
            Some(reads) => match reads.txn {
                ReadTxn::OnReplica {
                    budget: Some(budget),
                    ..
                } => budget,
                _ => 0,
            },
            // All of the input goes: it must all be one read.
            None => match super::read_routing::first_unit(
                env.config(),
                routing,
                session.database(),
                session.statements(),
                input,
            ) {
                Unit::Read { bytes } if bytes == input.len() => bytes,
                _ => 0,
            },
        };
        if len > 0 && input.get(..len).is_some_and(may_run_again) {
            return Keep::Unit(len);
        }
        if let Some(session) = client.session_mut() {
            session.retry_mut().not_a_read();
        }
        Keep::Nothing
    }

    /// After a forward: what it took is kept, or the kept statement is no longer all the
    /// server runs.
    pub(super) fn read_forwarded(&mut self, id: ClientId, seen: ForwardSeen<'_>) {
        let Some(session) = self.get_mut(id.0).and_then(|c| c.session_mut()) else {
            return;
        };
        let ForwardSeen { keep, out } = seen;
        match keep {
            Keep::Nothing => {}
            Keep::Unit(len) => {
                let clean = out.effects.is_empty() && out.end.is_none() && out.vacate.is_empty();
                session
                    .retry_mut()
                    .first_forward(out.kept.take(), len, clean);
            }
            Keep::Armed => {
                if !out.chunks.is_empty() {
                    session.retry_mut().more_forwarded();
                }
            }
        }
    }

    /// Clients linked to a server with a read kept that may still run again (at most `max`
    /// runs): the housekeeping looks at their servers' replicas.
    pub(super) fn reads_that_may_run_again(&self, max: u32) -> Vec<(ClientId, ServerId)> {
        self.iter()
            .filter_map(|(slot, client)| {
                let session = client.session()?;
                if !session.retry().may_run_again_within(max) {
                    return None;
                }
                Some((ClientId(slot), client.server()?))
            })
            .collect()
    }

    /// Client `id`'s server died on `replica` before any of its answer reached it: its kept
    /// statement goes back in front of its input and it waits for another server. `None`
    /// when it may not run again (not kept, or already run again `max` times).
    pub(super) fn put_read_back(
        &mut self,
        id: ClientId,
        max: u32,
        replica: SocketAddr,
        now: Instant,
    ) -> Option<Again> {
        let client = self.get_mut(id.0)?;
        let session = client.session_mut()?;
        let unit: KeptBytes = session.retry_mut().take_to_run_again(max, replica)?;
        session.calls_unanswered();
        let again = match session.reads_mut() {
            Some(reads) => {
                // Its ticket on the dead replica is given back.
                reads.txn = ReadTxn::Between;
                Again::Reader
            }
            None => Again::Leased,
        };
        client.input_mut().put_back(&unit);
        client.queued(now);
        Some(again)
    }
}
