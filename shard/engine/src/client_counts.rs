//! The client connections of each database entry and of each user, counted across every
//! shard, behind PgBouncer 1.19's `max_db_client_connections` and
//! `max_user_client_connections`. A client is counted from its StartupMessage to its close
//! by a [`Counted`] that the client table holds beside it: removing the client (however it
//! ends) drops it and gives the count back, so no close path can forget it.
//!
//! Only names with a limit are counted: with both settings off (the default) a login takes
//! no lock here. A name whose count falls to zero is forgotten, so unauthenticated logins
//! with made-up user names cannot grow the map.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

/// Which limit a count is held against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    Database,
    User,
}

impl Scope {
    /// PgBouncer's message for the client past the limit (sent as FATAL 08P01).
    pub fn exceeded_message(self) -> &'static str {
        match self {
            Scope::Database => "client connections exceeded (max_db_client_connections)",
            Scope::User => "client connections exceeded (max_user_client_connections)",
        }
    }
}

type CountMap = Mutex<HashMap<Arc<str>, Arc<AtomicU32>>>;

/// The counts of every shard, by database entry and by user.
#[derive(Debug, Default)]
pub struct ClientCounts {
    databases: CountMap,
    users: CountMap,
}

impl ClientCounts {
    fn map(&self, scope: Scope) -> &CountMap {
        match scope {
            Scope::Database => &self.databases,
            Scope::User => &self.users,
        }
    }

    /// Counts one more client of `name` against `limit` (0 = unlimited: not counted).
    /// `Err(scope)` when it is one too many; the count is given back at once then.
    pub(crate) fn admit(
        self: &Arc<Self>,
        scope: Scope,
        name: &Arc<str>,
        limit: u32,
        counted: &mut Counted,
    ) -> Result<(), Scope> {
        if limit == 0 {
            return Ok(());
        }
        let count = {
            let mut map = self
                .map(scope)
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let count = map.entry(name.clone()).or_default().clone();
            // Counted under the lock, so `release` never forgets a count just taken.
            count.fetch_add(1, Ordering::AcqRel);
            count
        };
        let held = Hold {
            counts: self.clone(),
            scope,
            name: name.clone(),
            count,
        };
        // PgBouncer counts the client first, then refuses it when the count is past the limit.
        let over = held.count.load(Ordering::Acquire) > limit;
        if over {
            return Err(scope);
        }
        counted.holds.push(held);
        Ok(())
    }

    /// The clients of `name` counted now (0 when none, or when no limit counts them).
    pub fn count(&self, scope: Scope, name: &str) -> u32 {
        let map = self
            .map(scope)
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        map.get(name)
            .map_or(0, |count| count.load(Ordering::Acquire))
    }

    fn release(&self, scope: Scope, name: &Arc<str>, count: &Arc<AtomicU32>) {
        let mut map = self
            .map(scope)
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if count.fetch_sub(1, Ordering::AcqRel) == 1 {
            map.remove(name);
        }
    }
}

/// One client's place in the counts; given back when dropped.
#[derive(Debug)]
struct Hold {
    counts: Arc<ClientCounts>,
    scope: Scope,
    name: Arc<str>,
    count: Arc<AtomicU32>,
}

impl Drop for Hold {
    fn drop(&mut self) {
        self.counts.release(self.scope, &self.name, &self.count);
    }
}

/// The counts one client holds (none when no limit applies to it).
#[derive(Debug, Default)]
pub struct Counted {
    holds: Vec<Hold>,
}

impl Counted {
    /// Whether no limit counts this client.
    pub fn is_empty(&self) -> bool {
        self.holds.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_client_past_the_limit_is_refused_and_counts_come_back() {
        let counts = Arc::new(ClientCounts::default());
        let app: Arc<str> = "app".into();
        let mut first = Counted::default();
        let mut second = Counted::default();
        let mut third = Counted::default();
        assert!(counts.admit(Scope::Database, &app, 2, &mut first).is_ok());
        assert!(counts.admit(Scope::Database, &app, 2, &mut second).is_ok());
        assert_eq!(
            counts.admit(Scope::Database, &app, 2, &mut third),
            Err(Scope::Database)
        );
        assert_eq!(counts.count(Scope::Database, "app"), 2);
        drop(first);
        assert!(counts.admit(Scope::Database, &app, 2, &mut third).is_ok());
        drop((second, third));
        assert_eq!(counts.count(Scope::Database, "app"), 0);
        assert!(counts.databases.lock().expect("map").is_empty());
    }

    #[test]
    fn no_limit_counts_nothing() {
        let counts = Arc::new(ClientCounts::default());
        let mut counted = Counted::default();
        let bob: Arc<str> = "bob".into();
        assert!(counts.admit(Scope::User, &bob, 0, &mut counted).is_ok());
        assert!(counted.holds.is_empty());
        assert_eq!(counts.count(Scope::User, "bob"), 0);
    }
}
