//! The unnamed statement in transaction mode: whose a server holds, and the client's own.
//!
//! PostgreSQL keeps a session's unnamed statement until the next unnamed Parse, a simple
//! Query or a Close of it, across transactions. A pooled server outlives its clients, so
//! the unnamed statement one client left on it would be there for the next one: a Bind or a
//! Describe of the unnamed statement would run, or describe, another client's query. And a
//! client whose transaction moves to another server (asyncpg without a statement cache
//! sends Parse/Describe/Sync, then Bind/Execute/Sync) would find someone else's statement
//! there, or none. So each client's last unnamed Parse is kept (a copy of its body, since it
//! must outlive the receive buffer) with a token, and each server knows whose unnamed
//! statement it holds. Before a Bind or a Describe of the unnamed statement reaches a server
//! that does not hold the client's, the rewriter puts the client's Parse in front of it (its
//! ParseComplete swallowed), or a Close of the unnamed statement when the client has none,
//! so the server answers 26000 as PostgreSQL would.

use std::sync::Arc;

/// What a server holds as its unnamed statement, as far as pgtier knows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum ServerUnnamed {
    /// Anything, maybe another client's (a server that moved between workers, a Parse that
    /// failed or was skipped).
    #[default]
    Unknown,
    /// None: a simple Query or a Close of it ran last.
    Empty,
    /// The client Parse with this token made it.
    Of(u64),
}

/// A client's unnamed statement: the token servers know it by, and its Parse body (name,
/// text, parameter types) to prepare it on another server, unless it was too long to keep.
/// The body is shared, not copied, with the ledger's record of the Parse that made it (and
/// of the next one, which may have to put it back), and with the next unnamed Parse of the
/// same body: a driver that runs every query unnamed sends the same few texts again and
/// again.
#[derive(Debug, Clone)]
pub struct ClientUnnamed {
    pub token: u64,
    pub parse_body: Option<Arc<[u8]>>,
}

/// An unnamed Parse sent to a server, for the ledger: what its failure or skipping means.
#[derive(Debug)]
pub(crate) enum UnnamedParse {
    /// The client's own, which made `token` its unnamed statement; `previous` was its
    /// unnamed statement before. If it fails, PostgreSQL has dropped the old one and made
    /// none; if it is skipped (after an error earlier in the pipeline), the old one stays.
    Client {
        token: u64,
        previous: Option<ClientUnnamed>,
    },
    /// pgtier's own (the client's statement prepared again), or one it could not read.
    Other,
}
