//! The admin side of the shard: the gates PAUSE, KILL, SUSPEND and DISABLE leave and the
//! admin commands in progress (`gates.rs`), the console that answers statements, the
//! listings its sessions gather from every shard, and the shutdown under way.

use crate::command::ShutdownMode;
use crate::services::Console;

/// The shard's admin state.
pub(crate) struct Admin {
    /// PAUSE/KILL/DISABLE gates and the admin commands in progress (`gates.rs`).
    pub(super) controls: super::gates::Controls,
    pub(super) listings: super::upkeep::Listings,
    pub(super) console: Box<dyn Console>,
    pub(super) shutdown: Option<ShutdownMode>,
}

impl Admin {
    pub(super) fn new(console: Box<dyn Console>) -> Admin {
        Admin {
            controls: Default::default(),
            listings: Default::default(),
            console,
            shutdown: None,
        }
    }

    /// Shutdown was asked for.
    pub(super) fn is_shutting_down(&self) -> bool {
        self.shutdown.is_some()
    }
}
