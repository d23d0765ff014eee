//! Table tests of the pools kept warm before any client (`engine/linker/warmup.rs`): a forced-user
//! entry's `min_pool_size` servers open at the first housekeeping pass, split between the
//! shards so that they add up to the minimum; a replica's warm pool is drained while the
//! replica is Down and warms again once it is up; a forced user known only by its SCRAM
//! secret waits for a client to prove its key.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::services::{Admission, AdmissionReply, FailureCause, Refusal, ReplicaLease, Routing};
use crate::testing::{Harness, Pair};
use pgtier_policy::tiers::Tier;

const PERIOD: Duration = Duration::from_millis(300);

fn forced_user(min_pool_size: u32) -> String {
    format!(
        "[pgtier]\nlisten_port = 6432\nauth_type = \"trust\"\npool_mode = \"transaction\"\n\
         default_pool_size = 5\n\
         [databases.db]\nhost = \"127.0.0.1\"\nport = 5432\ndbname = \"db\"\nuser = \"app\"\n\
         min_pool_size = {min_pool_size}\n\
         [databases.free]\nhost = \"127.0.0.1\"\nport = 5432\ndbname = \"db\"\n\
         min_pool_size = {min_pool_size}\n"
    )
}

#[test]
fn a_forced_user_entry_opens_its_minimum_before_any_client_split_between_shards() {
    let mut pair = Pair::new(&forced_user(3));
    assert!(
        pair.shards[0].connects.is_empty(),
        "nothing before housekeeping"
    );
    pair.advance(PERIOD);
    let opened: Vec<usize> = pair
        .shards
        .iter()
        .map(|shard| shard.connects.len())
        .collect();
    assert_eq!(opened, [2, 1], "shard 0 opens 2 of 3, shard 1 the last");
    assert_eq!(
        pair.shards[0].live_servers().len() + pair.shards[1].live_servers().len(),
        3,
        "all logged in and idle"
    );
    pair.advance(PERIOD);
    pair.advance(PERIOD);
    let opened: usize = pair.shards.iter().map(|shard| shard.connects.len()).sum();
    assert_eq!(
        opened, 3,
        "the minimum is kept, not grown: the entry without a forced user has no pool yet"
    );
    // A client of the entry is served by a warm server.
    let (client, messages) = pair.shards[1].login("anyone", "db");
    assert_eq!(messages.last().map(|m| m.tag), Some(b'Z'));
    pair.shards[1].client_sends(client, &crate::testing::query("SELECT 1"));
    assert_eq!(pair.shards[1].client_tags(client), "TDCZ");
    assert_eq!(pair.shards[1].connects.len(), 1, "no server opened for it");
}

#[test]
fn a_reload_that_drops_the_minimum_stops_keeping_the_pool() {
    let mut h = Harness::new(&forced_user(2));
    h.advance(PERIOD);
    assert_eq!(h.connects.len(), 2);
    let config =
        pgtier_core::config::Config::from_str(&forced_user(0), "/tmp/reload.toml").expect("config");
    h.engine.handle_command(
        h.now,
        crate::command::Command::Reload {
            config: Arc::new(config),
            users: Arc::new(crate::userlist::UserList::new()),
            tls: Default::default(),
            pending: None,
        },
    );
    h.advance(PERIOD);
    assert_eq!(h.connects.len(), 2, "nothing more is opened");
}

/// Routing whose one replica is Down while the switch is on; no session is admitted.
#[derive(Clone, Default)]
struct DownSwitch(Arc<AtomicBool>);

impl Routing for DownSwitch {
    fn is_routed(&self, _database: &str) -> bool {
        true
    }

    fn admit(&self, _database: &str, _class: Tier, _request_id: u64) -> Admission {
        Admission::Refused(Refusal {
            code: pgtier_wire::sqlstate::CANNOT_CONNECT_NOW,
            message: "no sessions in this test".to_string(),
        })
    }

    fn repin(&self, _lease: Box<dyn ReplicaLease>, request_id: u64) -> Admission {
        self.admit("", Tier(1), request_id)
    }

    fn poll_reply(&self) -> Option<AdmissionReply> {
        None
    }

    fn report_failure(&self, _database: &str, _replica: SocketAddr, _cause: FailureCause) {}

    fn is_down(&self, _database: &str, _replica: SocketAddr) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

#[test]
fn a_replica_back_up_after_being_down_is_warmed_again() {
    let text = "[pgtier]\nlisten_port = 6432\nauth_type = \"trust\"\npool_mode = \"transaction\"\n\
                [databases.ro]\ndbname = \"db\"\nreplicas = [\"127.0.0.1:15431\"]\n\
                user = \"app\"\nmin_pool_size = 2\n";
    let down = DownSwitch::default();
    let mut h = Harness::with_routing(text, Box::new(down.clone()));
    h.advance(PERIOD);
    assert_eq!(h.connects.len(), 2, "warm at start");
    // The replica fails: its servers' connections break and it is Down.
    down.0.store(true, Ordering::Relaxed);
    for server in h.live_servers() {
        h.server_gone(server);
    }
    h.advance(PERIOD);
    h.advance(PERIOD);
    assert_eq!(h.connects.len(), 2, "nothing opened to a Down replica");
    assert!(h.live_servers().is_empty());
    down.0.store(false, Ordering::Relaxed);
    h.advance(PERIOD);
    assert_eq!(h.connects.len(), 4, "warm again once it is up");
    assert_eq!(h.live_servers().len(), 2);
    h.engine.check_invariants().expect("invariants");
}

#[test]
fn a_forced_user_known_only_by_its_scram_secret_is_not_warmed_before_a_client_proves_it() {
    let mut random = crate::random::SeededRandom::new(9);
    let secret = crate::credentials::scram_secret_for("secret", &mut random)
        .expect("random")
        .expect("derived")
        .to_text();
    let file =
        pgtier_core::auth_file::AuthFile::parse(&format!("\"app\" \"{secret}\"\n"), "userlist.txt")
            .expect("valid");
    let mut h = Harness::with_users(&forced_user(2), crate::userlist::UserList::from_file(file));
    h.advance(PERIOD);
    h.advance(PERIOD);
    assert!(
        h.connects.is_empty(),
        "no login is tried that can only fail (and would refuse the first client)"
    );
}
