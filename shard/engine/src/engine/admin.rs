//! The admin side of the shard: the gates PAUSE, KILL, SUSPEND and DISABLE leave and the
//! admin commands in progress (`gates.rs`), the console that answers statements, the
//! listings its sessions gather from every shard, and the shutdown under way.

use crate::command::ShutdownMode;
use crate::gates::Gates;
use crate::services::Console;

/// The shard's admin state.
pub(crate) struct Admin {
    /// PAUSE/KILL/DISABLE gates and the admin commands in progress (`gates.rs`).
    ops: super::gates::AdminOps,
    listings: super::listings::Listings,
    console: Box<dyn Console>,
    shutdown: Option<ShutdownMode>,
}

impl Admin {
    pub(super) fn new(console: Box<dyn Console>) -> Admin {
        Admin {
            ops: Default::default(),
            listings: Default::default(),
            console,
            shutdown: None,
        }
    }

    /// Shutdown was asked for.
    pub(super) fn is_shutting_down(&self) -> bool {
        self.shutdown.is_some()
    }

    /// The shutdown under way, if any.
    pub(super) fn shutdown(&self) -> Option<ShutdownMode> {
        self.shutdown
    }

    /// A shutdown was asked for: the strictest mode asked so far applies.
    pub(super) fn shut_down(&mut self, mode: ShutdownMode) {
        self.shutdown = Some(self.shutdown.map_or(mode, |current| current.max(mode)));
    }

    /// The gates PAUSE, SUSPEND and DISABLE left.
    pub(super) fn gates(&self) -> &Gates {
        &self.ops.gates
    }

    pub(super) fn gates_mut(&mut self) -> &mut Gates {
        &mut self.ops.gates
    }

    /// The admin commands in progress.
    pub(super) fn ops(&self) -> &super::gates::AdminOps {
        &self.ops
    }

    pub(super) fn ops_mut(&mut self) -> &mut super::gates::AdminOps {
        &mut self.ops
    }

    /// The listings this shard's console sessions are gathering.
    pub(super) fn listings_mut(&mut self) -> &mut super::listings::Listings {
        &mut self.listings
    }

    /// The console service and the gates at once, for a session's statement.
    pub(super) fn console_and_gates(&mut self) -> (&mut dyn Console, &Gates) {
        (self.console.as_mut(), &self.ops.gates)
    }

    pub(super) fn console_mut(&mut self) -> &mut dyn Console {
        self.console.as_mut()
    }
}
