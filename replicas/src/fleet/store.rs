//! The fleet's store: the SQL one member runs over its own [`PgLink`] to a PostgreSQL the
//! hosts share. Two tables, created if missing: the members' reports, UNLOGGED (every row is
//! rewritten each interval, so WAL would buy nothing and a crash loses only what the next
//! interval rewrites), and the published table, logged (one row, written only when it
//! changes, so its version survives a crash of the store and never starts over); a
//! session-level advisory lock for the leader; `NOTIFY pgtier_fleet` when a version is
//! published. Every call has a deadline; any error means the caller drops the link.

use std::net::{SocketAddr, ToSocketAddrs};
use std::time::{Duration, Instant};

use crate::pg_link::{PgLink, Row};
use crate::probe::ProbeLogin;

/// The channel followers LISTEN on; the payload is the fleet's name.
pub const CHANNEL: &str = "pgtier_fleet";

/// First key of the leader's two-key advisory lock ("pgtf"); the second is the fleet name's
/// `hashtext`, computed by the store so every host derives the same one.
const LOCK_CLASS: i32 = 0x7067_7466;

/// Where the store is and how to log in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoreTarget {
    /// Host name or address.
    pub host: String,
    /// Port.
    pub port: u16,
    /// The login (user, password, database).
    pub login: ProbeLogin,
}

impl StoreTarget {
    /// A target from `fleet_store`'s pairs; the user and database default to `fallback`'s.
    pub fn from_pairs(
        pairs: &[(String, String)],
        fallback: Option<&ProbeLogin>,
    ) -> Result<StoreTarget, String> {
        let get = |key: &str| {
            pairs
                .iter()
                .rev()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.clone())
        };
        let host = get("host").ok_or("fleet_store needs host=")?;
        let port = match get("port") {
            Some(port) => port
                .parse()
                .map_err(|_| format!("fleet_store: bad port {port}"))?,
            None => 5432,
        };
        let user = get("user")
            .or_else(|| fallback.map(|login| login.user.clone()))
            .ok_or("fleet_store needs user= (no entry login to borrow)")?;
        let dbname = get("dbname")
            .or_else(|| fallback.map(|login| login.dbname.clone()))
            .unwrap_or_else(|| user.clone());
        let password = get("password").or_else(|| fallback.and_then(|l| l.password.clone()));
        Ok(StoreTarget {
            host,
            port,
            login: ProbeLogin {
                user,
                password,
                dbname,
            },
        })
    }

    /// The store's address (resolved now: the fleet runs on its own thread).
    fn addr(&self) -> Result<SocketAddr, String> {
        (self.host.as_str(), self.port)
            .to_socket_addrs()
            .map_err(|e| format!("resolve {}: {e}", self.host))?
            .next()
            .ok_or_else(|| format!("resolve {}: no address", self.host))
    }
}

/// One member's row as read back.
#[derive(Clone, Debug, PartialEq)]
pub struct MemberRow {
    /// The member's host id.
    pub host: String,
    /// Its last report time, as the store prints it.
    pub reported_at: String,
    /// Age on the store's clock.
    pub age: Duration,
    /// The report text.
    pub report: String,
}

/// The published table row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableRow {
    /// Its version.
    pub version: u64,
    /// The host that wrote it.
    pub leader: String,
    /// The tables' text.
    pub tables: String,
}

/// One member's connection to the store.
#[derive(Debug)]
pub struct Store {
    link: PgLink,
    fleet: String,
    timeout: Duration,
}

impl Store {
    /// Connects, logs in, creates the tables if missing and LISTENs. `dead_after` bounds how
    /// long the store takes to notice this connection is gone on a silent partition (TCP
    /// keepalives and user timeout, set for this session), which is when a leader's lock frees.
    pub fn open(
        target: &StoreTarget,
        fleet: &str,
        host: &str,
        timeout: Duration,
        dead_after: Duration,
    ) -> Result<Store, String> {
        let deadline = Instant::now() + timeout;
        // The host id in application_name lets a follower end exactly a silent leader's
        // backend (see `depose`), never a new leader's.
        let link = PgLink::open(
            target.addr()?,
            &target.login,
            &application_name(host),
            deadline,
            deadline,
        )?;
        let mut store = Store {
            link,
            fleet: fleet.to_string(),
            timeout,
        };
        // Keepalives every second after `dead_after` of silence, 3 probes; unacknowledged data
        // for as long fails the connection too. Any role may set these for its own session.
        let idle = dead_after.as_secs().max(1);
        let user_timeout_ms = (dead_after + Duration::from_secs(3)).as_millis();
        store.run(&format!(
            "SET tcp_keepalives_idle = {idle}; SET tcp_keepalives_interval = 1; \
             SET tcp_keepalives_count = 3; SET tcp_user_timeout = {user_timeout_ms}"
        ))?;
        // Creation is serialized by a transaction-level lock, so hosts starting together do
        // not race on the catalog.
        store.run(&format!(
            "BEGIN; SELECT pg_advisory_xact_lock({LOCK_CLASS}, 0); \
             CREATE UNLOGGED TABLE IF NOT EXISTS pgtier_fleet_members (\
               fleet text NOT NULL, host text NOT NULL, reported_at timestamptz NOT NULL, \
               report text NOT NULL, PRIMARY KEY (fleet, host)); \
             CREATE TABLE IF NOT EXISTS pgtier_fleet_tables (\
               fleet text PRIMARY KEY, version bigint NOT NULL, leader text NOT NULL, \
               published_at timestamptz NOT NULL, tables text NOT NULL); \
             COMMIT; LISTEN {CHANNEL}"
        ))?;
        Ok(store)
    }

    fn run(&mut self, sql: &str) -> Result<Vec<Row>, String> {
        let deadline = Instant::now() + self.timeout;
        self.link.query_rows(sql, 1024, deadline)
    }

    /// Writes this host's report, stamped with the store's clock.
    pub fn report(&mut self, host: &str, report: &str) -> Result<(), String> {
        let (fleet, host, report) = (quote(&self.fleet)?, quote(host)?, quote(report)?);
        self.run(&format!(
            "INSERT INTO pgtier_fleet_members VALUES ({fleet}, {host}, now(), {report}) \
             ON CONFLICT (fleet, host) DO UPDATE SET reported_at = now(), report = EXCLUDED.report"
        ))
        .map(drop)
    }

    /// Tries to take the leader's lock; true when this link holds it (it stays held until
    /// the link closes).
    pub fn try_lead(&mut self) -> Result<bool, String> {
        let fleet = quote(&self.fleet)?;
        let rows = self.run(&format!(
            "SELECT pg_try_advisory_lock({LOCK_CLASS}, hashtext({fleet}))"
        ))?;
        Ok(first_text(&rows, 0).as_deref() == Some("t"))
    }

    /// Ends the store's backend holding the leader's lock, for a leader whose own reports
    /// stopped (a stuck host, or a partition the store has not noticed yet): its lock frees
    /// and the next round elects another. Needs the right to signal that backend (the same
    /// role, or `pg_signal_backend`). Returns whether a backend was ended.
    pub fn depose(&mut self, leader: &str) -> Result<bool, String> {
        let fleet = quote(&self.fleet)?;
        let name = quote(&application_name(leader))?;
        let rows = self.run(&format!(
            "SELECT pg_terminate_backend(l.pid) FROM pg_locks l \
               JOIN pg_stat_activity a ON a.pid = l.pid \
             WHERE l.locktype = 'advisory' AND l.granted AND l.classid = {LOCK_CLASS} \
               AND l.objid = hashtext({fleet})::oid AND l.objsubid = 2 \
               AND l.pid <> pg_backend_pid() AND a.application_name = left({name}, 63)"
        ))?;
        Ok(rows.iter().any(|row| text(row, 0).as_deref() == Some("t")))
    }

    /// Every member's row, newest report first.
    pub fn members(&mut self) -> Result<Vec<MemberRow>, String> {
        let fleet = quote(&self.fleet)?;
        let rows = self.run(&format!(
            "SELECT host, reported_at::text, \
               greatest(0, extract(epoch FROM clock_timestamp() - reported_at))::float8::text, \
               report \
             FROM pgtier_fleet_members WHERE fleet = {fleet} ORDER BY reported_at DESC"
        ))?;
        Ok(rows
            .iter()
            .filter_map(|row| {
                let age: f64 = text(row, 2)?.parse().ok()?;
                Some(MemberRow {
                    host: text(row, 0)?,
                    reported_at: text(row, 1)?,
                    age: Duration::try_from_secs_f64(age).unwrap_or_default(),
                    report: text(row, 3)?,
                })
            })
            .collect())
    }

    /// The published table, if any.
    pub fn table(&mut self) -> Result<Option<TableRow>, String> {
        let fleet = quote(&self.fleet)?;
        let rows = self.run(&format!(
            "SELECT version::text, leader, tables FROM pgtier_fleet_tables WHERE fleet = {fleet}"
        ))?;
        Ok(rows.first().and_then(|row| {
            Some(TableRow {
                version: text(row, 0)?.parse().ok()?,
                leader: text(row, 1)?,
                tables: text(row, 2)?,
            })
        }))
    }

    /// Publishes `version` (only over an older one: a leader that lost its lock without
    /// knowing cannot roll the table back), notifies, and forgets members silent for
    /// `forget_after`. Call only while holding the lock.
    pub fn publish(
        &mut self,
        version: u64,
        leader: &str,
        tables: &str,
        forget_after: Duration,
    ) -> Result<(), String> {
        let (fleet, leader, tables) = (quote(&self.fleet)?, quote(leader)?, quote(tables)?);
        let forget_ms = forget_after.as_millis();
        self.run(&format!(
            "INSERT INTO pgtier_fleet_tables AS t VALUES ({fleet}, {version}, {leader}, now(), {tables}) \
             ON CONFLICT (fleet) DO UPDATE SET version = EXCLUDED.version, leader = EXCLUDED.leader, \
               published_at = EXCLUDED.published_at, tables = EXCLUDED.tables \
             WHERE t.version < EXCLUDED.version; \
             DELETE FROM pgtier_fleet_members WHERE fleet = {fleet} \
               AND reported_at < now() - interval '{forget_ms} milliseconds'; \
             SELECT pg_notify('{CHANNEL}', {fleet})"
        ))
        .map(drop)
    }

    /// Waits until `until` for a notification (or anything the server sends): true when one
    /// came, so the caller reads the table at once. An error means the link is gone.
    pub fn wait_for_notification(&mut self, until: Instant) -> Result<bool, String> {
        let arrived = self.link.wait_for_bytes(until)?;
        self.link.discard_unprompted();
        Ok(arrived)
    }
}

/// The application_name of `host`'s fleet connection (PostgreSQL keeps 63 bytes of it).
fn application_name(host: &str) -> String {
    format!("pgtier fleet {host}")
}

/// A text value as an SQL literal (standard strings: only `'` is special). A NUL cannot be
/// sent in a query at all.
fn quote(value: &str) -> Result<String, String> {
    if value.contains('\0') {
        return Err("a fleet value contains a NUL byte".to_string());
    }
    Ok(format!("'{}'", value.replace('\'', "''")))
}

fn text(row: &Row, column: usize) -> Option<String> {
    let bytes = row.get(column)?.as_ref()?;
    String::from_utf8(bytes.clone()).ok()
}

fn first_text(rows: &[Row], column: usize) -> Option<String> {
    text(rows.first()?, column)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_double_quotes_and_refuse_nul() {
        assert_eq!(quote("it's").as_deref(), Ok("'it''s'"));
        assert_eq!(quote("a\tb\nc").as_deref(), Ok("'a\tb\nc'"));
        assert!(quote("a\0b").is_err());
    }

    #[test]
    fn a_target_borrows_what_it_lacks_from_the_entry_login() {
        let pairs = vec![
            ("host".to_string(), "db1".to_string()),
            ("port".to_string(), "6000".to_string()),
        ];
        let entry = ProbeLogin {
            user: "app".to_string(),
            password: Some("pw".to_string()),
            dbname: "appdb".to_string(),
        };
        let target = StoreTarget::from_pairs(&pairs, Some(&entry)).expect("target");
        assert_eq!(target.port, 6000);
        assert_eq!(target.login, entry);
        assert!(StoreTarget::from_pairs(&pairs, None).is_err());
        let bad_port = vec![
            ("host".to_string(), "db1".to_string()),
            ("port".to_string(), "x".to_string()),
            ("user".to_string(), "u".to_string()),
        ];
        assert!(StoreTarget::from_pairs(&bad_port, None).is_err());
    }
}
