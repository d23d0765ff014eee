//! A read-only view of the shard for what reports on it (the console's listings, the
//! metrics endpoint's pool gauges): the owners it reads, borrowed together, and the time.

use std::time::Instant;

use super::clients::ClientTable;
use super::env::Env;
use super::linker::Linker;
use super::servers::ServerTable;

/// The shard as the reports read it.
pub(crate) struct ShardView<'a> {
    pub(super) env: &'a Env,
    pub(super) clients: &'a ClientTable,
    pub(super) servers: &'a ServerTable,
    pub(super) linker: &'a Linker,
    pub(super) now: Instant,
}
