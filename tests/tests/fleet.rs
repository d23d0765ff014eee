//! A fleet (docs/fleet.md): three pgtier processes in front of one primary and two streaming
//! replicas share one PLB view through a fourth PostgreSQL, the store.
//!
//! Checked, each with a bounded wait for the condition: all three converge on the same
//! role-table version and agree on the leader; SIGKILL of the leader's process makes another
//! host leader and the version keeps increasing (a new leader publishes stored + 1, never a
//! fork), while the survivors' clients read without an error; a leader that stops reporting but keeps its connection (SIGSTOP) has its backend
//! ended by a follower, which takes over; with the store stopped every survivor reports local
//! mode in `SHOW FLEET` and keeps serving reads; with the store back every survivor is in
//! fleet mode again.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use pgtier_tests::fixtures::start_proxy;
use pgtier_tests::wait;
use pgtier_tests::{LocalPg, PgOptions, Pgtier, ProxyConfig};

/// This host's row of `SHOW FLEET` and the leader's name, as one proxy answers it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct FleetRow {
    member: String,
    mode: String,
    version: u64,
    leader: Option<String>,
    members: usize,
}

fn show_fleet(proxy: &Pgtier) -> Option<FleetRow> {
    let mut admin = proxy.connect("pgtier", "admin").ok()?;
    let messages = admin.simple_query("SHOW FLEET").ok()?;
    let rows: Vec<postgres::SimpleQueryRow> = messages
        .into_iter()
        .filter_map(|message| match message {
            postgres::SimpleQueryMessage::Row(row) => Some(row),
            _ => None,
        })
        .collect();
    let leader = rows
        .iter()
        .find(|row| row.get("is_leader") == Some("t"))
        .and_then(|row| row.get("member"))
        .map(str::to_string);
    let own = rows.iter().find(|row| row.get("is_self") == Some("t"))?;
    Some(FleetRow {
        member: own.get("member")?.to_string(),
        mode: own.get("mode")?.to_string(),
        version: own.get("version")?.parse().ok()?,
        leader,
        members: rows.len(),
    })
}

fn read_once(proxy: &Pgtier) -> bool {
    proxy
        .connect("app", "postgres")
        .and_then(|mut client| client.simple_query("SELECT 1"))
        .is_ok()
}

/// One client per proxy reading in a loop on its own connection until stopped.
struct ReadLoad {
    stop: Arc<AtomicBool>,
    reads: Arc<AtomicU64>,
    failed: Arc<AtomicU64>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl ReadLoad {
    fn start(proxies: &[Pgtier]) -> ReadLoad {
        let stop = Arc::new(AtomicBool::new(false));
        let reads = Arc::new(AtomicU64::new(0));
        let failed = Arc::new(AtomicU64::new(0));
        let threads = proxies
            .iter()
            .map(|proxy| {
                let config = proxy.pg_config("app", "postgres");
                let (stop, reads, failed) = (stop.clone(), reads.clone(), failed.clone());
                std::thread::spawn(move || {
                    let Ok(mut client) = config.connect(postgres::NoTls) else {
                        failed.fetch_add(1, Ordering::Relaxed);
                        return;
                    };
                    while !stop.load(Ordering::Acquire) {
                        match client.simple_query("SELECT 1") {
                            Ok(_) => reads.fetch_add(1, Ordering::Relaxed),
                            Err(_) => failed.fetch_add(1, Ordering::Relaxed),
                        };
                        std::thread::sleep(Duration::from_millis(5));
                    }
                })
            })
            .collect();
        ReadLoad {
            stop,
            reads,
            failed,
            threads,
        }
    }

    /// Stops the clients; (reads answered, reads failed).
    fn stop(self) -> (u64, u64) {
        self.stop.store(true, Ordering::Release);
        for thread in self.threads {
            let _ = thread.join();
        }
        (
            self.reads.load(Ordering::Relaxed),
            self.failed.load(Ordering::Relaxed),
        )
    }
}

fn fleet_proxy(primary: u16, replicas: &[u16], store: u16) -> Pgtier {
    let config = ProxyConfig::new(primary)
        .reader_database("app", primary, replicas, "postgres")
        .database_setting("max_db_connections", "9")
        .user("admin", "")
        .setting("admin_users", "[\"admin\"]")
        .setting("health_check_user", "\"postgres\"")
        .setting("fleet_name", "\"fleet-test\"")
        .setting(
            "fleet_store",
            &format!("\"host=127.0.0.1 port={store} dbname=postgres user=postgres\""),
        )
        .setting("fleet_report_interval", "0.2");
    start_proxy(config)
}

/// Waits until every proxy in `proxies` reports fleet mode with one common version of at
/// least `at_least` and one common leader; returns them.
fn converged(proxies: &[&Pgtier], at_least: u64) -> Option<(u64, String)> {
    wait::until(Duration::from_secs(30), Duration::from_millis(100), || {
        let rows: Vec<FleetRow> = proxies.iter().filter_map(|p| show_fleet(p)).collect();
        if rows.len() != proxies.len() {
            return None;
        }
        let first = rows.first()?;
        let leader = first.leader.clone()?;
        let agreed = rows.iter().all(|row| {
            row.mode == "fleet"
                && row.version == first.version
                && row.version >= at_least
                && row.leader.as_deref() == Some(leader.as_str())
        });
        agreed.then_some((first.version, leader))
    })
}

#[test]
fn three_hosts_share_one_table_survive_a_leader_kill_and_a_store_outage() {
    let primary = LocalPg::start_primary(&PgOptions::default()).expect("primary");
    let replicas: Vec<LocalPg> = (0..2)
        .map(|_| LocalPg::start_replica(&primary).expect("replica"))
        .collect();
    let replica_ports: Vec<u16> = replicas.iter().map(LocalPg::port).collect();
    let store = LocalPg::start_primary(&PgOptions::default()).expect("store");
    let mut proxies: Vec<Pgtier> = (0..3)
        .map(|_| fleet_proxy(primary.port(), &replica_ports, store.port()))
        .collect();

    // All three agree on one version and one leader.
    let all: Vec<&Pgtier> = proxies.iter().collect();
    let (version, leader) = converged(&all, 1).unwrap_or_else(|| {
        let rows: Vec<Option<FleetRow>> = proxies.iter().map(show_fleet).collect();
        panic!("the hosts did not converge: {rows:?}\n{}", proxies[0].log())
    });
    // Each lists the three members once every one has reported.
    let rows = wait::until(Duration::from_secs(30), Duration::from_millis(100), || {
        let rows: Vec<FleetRow> = proxies.iter().filter_map(show_fleet).collect();
        (rows.len() == 3 && rows.iter().all(|row| row.members == 3)).then_some(rows)
    })
    .unwrap_or_else(|| {
        let rows: Vec<Option<FleetRow>> = proxies.iter().map(show_fleet).collect();
        panic!("not every host lists three members: {rows:?}")
    });
    for proxy in &proxies {
        assert!(read_once(proxy), "reads are served in fleet mode");
        // The entry's max_db_connections is divided among the live members.
        let shared = wait::until(Duration::from_secs(10), Duration::from_millis(100), || {
            proxy
                .log()
                .contains("max_db_connections shared by the live members")
                .then_some(())
        });
        assert!(shared.is_some(), "{}", proxy.log());
    }

    // SIGKILL the leader's process: another host takes the lock and publishes a newer
    // version, which every survivor applies.
    let leader_index = rows
        .iter()
        .position(|row| row.member == leader)
        .expect("the leader is one of the three");
    let mut killed = proxies.remove(leader_index);
    // Clients of the survivors read all through the kill and the takeover.
    let load = ReadLoad::start(&proxies);
    let killed_at = Instant::now();
    killed.signal(libc::SIGKILL).expect("SIGKILL the leader");
    let _ = killed.wait_exit(Duration::from_secs(10));
    let survivors: Vec<&Pgtier> = proxies.iter().collect();
    let converged_after_kill = converged(&survivors, version + 1);
    // Printed, not asserted (a loaded machine stretches it): up to the poll step of `converged`.
    eprintln!(
        "leader kill: both survivors on a newer version after {:?} (interval 0.2 s)",
        killed_at.elapsed()
    );
    let (reads, failed) = load.stop();
    let (after_kill, new_leader) = converged_after_kill.unwrap_or_else(|| {
        let rows: Vec<Option<FleetRow>> = proxies.iter().map(show_fleet).collect();
        panic!("no new leader after the kill: {rows:?}")
    });
    assert!(reads > 0, "the survivors' clients read");
    assert_eq!(
        failed, 0,
        "no read failed on a survivor during the takeover"
    );
    assert_ne!(new_leader, leader, "a survivor leads");
    assert!(after_kill > version, "the version kept increasing");

    // The new leader stops (SIGSTOP: its connection stays open and keeps the lock, but its
    // reports stop): the other survivor ends its backend and takes over.
    let stopped_index = proxies
        .iter()
        .position(|proxy| show_fleet(proxy).is_some_and(|row| row.member == new_leader))
        .expect("the new leader is a survivor");
    let running = &proxies[1 - stopped_index];
    let stopped_at = Instant::now();
    proxies[stopped_index]
        .signal(libc::SIGSTOP)
        .expect("SIGSTOP the leader");
    let taken_over = converged(&[running], after_kill + 1);
    eprintln!(
        "stuck leader: taken over after {:?} (member timeout 0.6 s)",
        stopped_at.elapsed()
    );
    proxies[stopped_index]
        .signal(libc::SIGCONT)
        .expect("SIGCONT the old leader");
    let (after_stop, third_leader) = taken_over.unwrap_or_else(|| {
        panic!(
            "no takeover from a silent leader: {:?}\n{}",
            show_fleet(running),
            running.log()
        )
    });
    assert_ne!(third_leader, new_leader);
    assert!(
        running.log().contains("the leader stopped reporting"),
        "{}",
        running.log()
    );
    // The continued host finds its connection ended and follows the new leader.
    let survivors: Vec<&Pgtier> = proxies.iter().collect();
    let (before_outage, _) = converged(&survivors, after_stop).unwrap_or_else(|| {
        let rows: Vec<Option<FleetRow>> = proxies.iter().map(show_fleet).collect();
        panic!("the continued host did not rejoin: {rows:?}")
    });

    // The store goes away: every survivor says local mode and keeps serving reads.
    store.stop_immediate().expect("stop the store");
    for proxy in &proxies {
        let local = wait::until(Duration::from_secs(30), Duration::from_millis(100), || {
            show_fleet(proxy).filter(|row| row.mode == "local")
        });
        assert!(local.is_some(), "local mode: {:?}", show_fleet(proxy));
        // No host can know who leads while the store is away: nobody is shown leading.
        assert_eq!(
            local.and_then(|row| row.leader),
            None,
            "a leader shown in local mode"
        );
        assert!(read_once(proxy), "reads are served in local mode");
    }
    assert!(
        proxies
            .iter()
            .all(|proxy| proxy.log().contains("local PLB until it returns")),
        "the log says so"
    );

    // The store is back: fleet mode again, on a version at least as new.
    store.start().expect("restart the store");
    let (rejoined, _) = converged(&survivors, before_outage).unwrap_or_else(|| {
        let rows: Vec<Option<FleetRow>> = proxies.iter().map(show_fleet).collect();
        panic!("the hosts did not rejoin the fleet: {rows:?}")
    });
    for proxy in &proxies {
        assert!(read_once(proxy), "reads are served after the rejoin");
    }

    // A reload restarts each host's fleet thread over the kept routers: the fleet carries on.
    for proxy in &proxies {
        proxy.reload().expect("SIGHUP");
    }
    converged(&survivors, rejoined).unwrap_or_else(|| {
        let rows: Vec<Option<FleetRow>> = proxies.iter().map(show_fleet).collect();
        panic!("the fleet did not carry on after a reload: {rows:?}")
    });
    for proxy in &proxies {
        assert!(read_once(proxy), "reads are served after the reload");
    }
}

/// The roles `SHOW REPLICAS` gives on one proxy, in replica order.
fn roles(proxy: &Pgtier) -> Option<Vec<String>> {
    let mut admin = proxy.connect("pgtier", "admin").ok()?;
    let rows = admin.simple_query("SHOW REPLICAS").ok()?;
    Some(
        rows.into_iter()
            .filter_map(|message| match message {
                postgres::SimpleQueryMessage::Row(row) => row.get("role").map(str::to_string),
                _ => None,
            })
            .collect(),
    )
}

/// θ_premium = 2 and one premium session on each of three hosts: no host alone is past θ,
/// the fleet is (3 sessions on one premium replica). The fleet borrows the Mixed replica for
/// premium, and every host routes from that table.
#[test]
fn the_fleet_borrows_on_the_summed_load_that_no_host_alone_sees() {
    let primary = LocalPg::start_primary(&PgOptions::default()).expect("primary");
    let replicas: Vec<LocalPg> = (0..3)
        .map(|_| LocalPg::start_replica(&primary).expect("replica"))
        .collect();
    let addresses: Vec<String> = replicas
        .iter()
        .map(|replica| format!("\"127.0.0.1:{}\"", replica.port()))
        .collect();
    let store = LocalPg::start_primary(&PgOptions::default()).expect("store");
    let proxy = |fleet: bool| {
        let mut config = ProxyConfig::new(primary.port())
            .database("ro", 0, "postgres")
            .database_setting("replicas", &format!("[{}]", addresses.join(", ")))
            .database_setting("user", "\"postgres\"")
            .database_setting("routing", "\"plb\"")
            .user("admin", "")
            .user("premium", "")
            .user_setting("premium", "class", "\"premium\"")
            .setting("admin_users", "[\"admin\"]");
        config.raw_tables = format!(
            "\n[databases.ro.plb]\npremium = [{}]\nfreemium = [{}]\ntheta_premium = 2\n",
            addresses[0], addresses[1]
        );
        if fleet {
            config = config
                .setting("fleet_name", "\"summed\"")
                .setting(
                    "fleet_store",
                    &format!(
                        "\"host=127.0.0.1 port={} dbname=postgres user=postgres\"",
                        store.port()
                    ),
                )
                .setting("fleet_report_interval", "0.2");
        }
        start_proxy(config)
    };
    let session = |proxy: &Pgtier| {
        let mut client = proxy.connect("ro", "premium").expect("premium login");
        client.simple_query("SELECT 1").expect("a read");
        client
    };

    // Without a fleet, three hosts each with one premium session borrow nothing.
    let alone: Vec<Pgtier> = (0..3).map(|_| proxy(false)).collect();
    let _held: Vec<postgres::Client> = alone.iter().map(session).collect();
    for host in &alone {
        let roles = roles(host).expect("SHOW REPLICAS");
        assert_eq!(roles, ["premium", "freemium", "mixed"], "one host alone");
    }

    // As a fleet, the same load makes the Mixed replica premium's, on every host.
    let fleet: Vec<Pgtier> = (0..3).map(|_| proxy(true)).collect();
    let _held: Vec<postgres::Client> = fleet.iter().map(session).collect();
    for host in &fleet {
        let borrowed = wait::until(Duration::from_secs(30), Duration::from_millis(100), || {
            roles(host)
                .filter(|roles| roles.get(2).map(String::as_str) == Some("borrowed_to_premium"))
        });
        assert!(
            borrowed.is_some(),
            "the fleet did not borrow: {:?} {:?}\n{}",
            roles(host),
            show_fleet(host),
            host.log()
        );
    }
}
