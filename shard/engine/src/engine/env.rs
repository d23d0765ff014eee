//! What every part of the shard's engine reads and none changes between reloads: the
//! shard's index, the configuration and user list, the limits derived from them, the
//! state shared with the other shards, and the time the engine was made.

use std::sync::Arc;
use std::time::{Instant, SystemTime};

use pgtier_core::config::Config;

use crate::settings::Limits;
use crate::shared::Shared;
use crate::userlist::UserList;

/// The shard's settings and shared state.
pub(crate) struct Env {
    /// This shard's index; cancel secrets carry it.
    pub(super) shard: usize,
    pub(super) config: Arc<Config>,
    pub(super) users: Arc<UserList>,
    pub(super) limits: Limits,
    pub(super) shared: Arc<Shared>,
    /// The time of creation, monotonic and wall clock (for the console's timestamps).
    pub(super) started: (Instant, SystemTime),
}

impl Env {
    /// The wall-clock time of monotonic `now` (derived from the time of creation, so the
    /// engine reads no clock).
    pub(super) fn wall_time(&self, now: Instant) -> SystemTime {
        let since = now.saturating_duration_since(self.started.0);
        self.started.1 + since
    }
}
