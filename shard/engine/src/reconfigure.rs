//! A change of configuration asked on the admin console (RELOAD, `SET key = value`): the
//! order the process carries out off the shards (it reads the files, builds and validates the
//! new configuration, then hands it to every shard as a reload), and the count of shards yet
//! to apply it, so that the console is answered only once the new configuration is in effect
//! on every shard.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// What the console asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// RELOAD: read the configuration file again.
    Reload,
    /// `SET key = value`: the running configuration with `key` read as the file line
    /// `key = value` of `[pgbouncer]`.
    Set { key: String, value: String },
}

impl Change {
    /// PgBouncer's CommandComplete tag for the change once done (`SET key=value` repeats
    /// what was set).
    pub fn tag(&self) -> String {
        match self {
            Change::Reload => "RELOAD".to_string(),
            Change::Set { key, value } => format!("SET {key}={value}"),
        }
    }
}

/// A change for the process to carry out, and where its answer goes: the console session
/// waiting for `request_id` on shard `shard`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Order {
    pub shard: usize,
    pub request_id: u64,
    pub change: Change,
}

/// The shards that have yet to apply a reload a console session waits for. Every shard's
/// `Command::Reload` carries the same one; the shard that applies it last answers the console.
#[derive(Debug)]
pub struct Pending {
    remaining: AtomicUsize,
    shard: usize,
    request_id: u64,
}

impl Pending {
    /// `order`'s answer waits for `shards` shards.
    pub fn new(order: &Order, shards: usize) -> Arc<Pending> {
        Arc::new(Pending {
            remaining: AtomicUsize::new(shards),
            shard: order.shard,
            request_id: order.request_id,
        })
    }

    /// One shard applied the reload: when it was the last, the console to answer
    /// (its shard and request id).
    pub(crate) fn applied(&self) -> Option<(usize, u64)> {
        let before = self.remaining.fetch_sub(1, Ordering::AcqRel);
        (before == 1).then_some((self.shard, self.request_id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_shard_to_apply_answers() {
        let order = Order {
            shard: 1,
            request_id: 7,
            change: Change::Reload,
        };
        let pending = Pending::new(&order, 3);
        assert_eq!(pending.applied(), None);
        assert_eq!(pending.applied(), None);
        assert_eq!(pending.applied(), Some((1, 7)));
    }

    #[test]
    fn tags_are_pgbouncers() {
        assert_eq!(Change::Reload.tag(), "RELOAD");
        let set = Change::Set {
            key: "default_pool_size".into(),
            value: "7".into(),
        };
        assert_eq!(set.tag(), "SET default_pool_size=7");
    }
}
