//! The short subset of bench/hostile.sh: each hostile load of `pgtier_tests::hostile` runs
//! for a few seconds, at a reduced width, while pgbench runs legit load through pgtier
//! against real PostgreSQL. Every attack leaves pgbench with 0 failed transactions and no
//! aborted client, pgtier alive, its open fds back to where they were (nothing leaks per
//! hostile connection), and a new login working. Tps shares are bench/hostile.sh's (no
//! timing is asserted here).

use std::process::Command;
use std::time::Duration;

use pgtier_tests::fixtures::{pgbench_init, server, start_proxy};
use pgtier_tests::hostile::{self, Attack, Intensity, Target};
use pgtier_tests::process::{Finished, pg_tool, raise_open_file_limit, run};
use pgtier_tests::{Pgtier, ProxyConfig, wait};

const LEGIT_USER: &str = "legit";
const LEGIT_PASSWORD: &str = "legit-secret";
const ATTACK_TIME: Duration = Duration::from_secs(3);

fn fd_count(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |dir| dir.count())
}

/// `pgbench -S` as the legit user for `seconds`.
fn pgbench(proxy: &Pgtier, seconds: u64) -> Finished {
    let mut command: Command = pg_tool("pgbench");
    command
        .args(["-S", "-n", "-c", "4", "-j", "2", "-T", &seconds.to_string()])
        .args(["-h", "127.0.0.1", "-p", &proxy.port().to_string()])
        .args(["-U", LEGIT_USER, "postgres"])
        .env("PGPASSWORD", LEGIT_PASSWORD);
    match run(&mut command, Duration::from_secs(seconds + 60)) {
        Ok(finished) => finished,
        Err(error) => panic!("pgbench: {error}"),
    }
}

fn failed_transactions(output: &str) -> Option<u64> {
    output
        .lines()
        .find_map(|line| line.strip_prefix("number of failed transactions: "))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|count| count.parse().ok())
}

/// A smaller width than the benchmark's, so the subset fits CI's machines.
fn ci_intensity(attack: Attack) -> Intensity {
    let mut intensity = Intensity::default_for(attack);
    intensity.width = match attack {
        Attack::Slowloris => 300,
        Attack::NoRead => 4,
        _ => intensity.width.min(8),
    };
    intensity.rate = intensity.rate.map(|rate| rate.min(300));
    intensity
}

#[test]
fn every_hostile_load_leaves_legit_load_without_errors_and_nothing_leaked() {
    let _ = raise_open_file_limit(8192);
    let pg = server();
    pgbench_init(&pg, 1);
    pg.create_user(LEGIT_USER, LEGIT_PASSWORD)
        .expect("create legit");
    pg.psql("postgres", "GRANT pg_read_all_data TO legit")
        .expect("grant");
    pg.create_user("mallory", "mallory-secret")
        .expect("create mallory");
    let mut config = ProxyConfig::new(pg.port())
        .auth("md5")
        .user(LEGIT_USER, LEGIT_PASSWORD)
        .user("mallory", "mallory-secret")
        .setting("auth_failure_delay", "0.2");
    config.workers = 2;
    config.max_client_conn = 2000;
    let mut proxy = start_proxy(config);
    let pid = proxy.pid();
    let warm = pgbench(&proxy, 1);
    assert!(warm.success(), "{warm:?}");
    let baseline = fd_count(pid);

    for attack in Attack::ALL {
        let (user, password) = match attack {
            Attack::NoRead => ("mallory", "mallory-secret"),
            Attack::Oversized => (LEGIT_USER, LEGIT_PASSWORD),
            _ => (LEGIT_USER, "wrong-on-purpose"),
        };
        let target = Target {
            port: proxy.port(),
            database: "postgres".into(),
            user: user.into(),
            password: password.into(),
        };
        let intensity = ci_intensity(attack);
        let attacker =
            std::thread::spawn(move || hostile::run(attack, &target, intensity, ATTACK_TIME));
        let legit = pgbench(&proxy, ATTACK_TIME.as_secs() + 1);
        let report = attacker.join().expect("attacker").expect("attack ran");
        eprintln!("{attack}: {report}");

        assert!(
            proxy.try_exit_status().is_none(),
            "pgtier died under {attack}: {}",
            proxy.log()
        );
        assert!(legit.success(), "{attack}: pgbench failed: {legit:?}");
        assert_eq!(
            failed_transactions(&legit.stdout),
            Some(0),
            "{attack}: {}",
            legit.stdout
        );
        assert!(
            !legit.stderr.contains("aborted"),
            "{attack}: {}",
            legit.stderr
        );
        assert!(report.connects > 0, "{attack} did not connect: {report}");
        // The attack's connections are gone: pgtier's fds come back to the baseline (a few
        // server connections may have been opened for the load).
        let settled = wait::until(Duration::from_secs(30), Duration::from_millis(100), || {
            (fd_count(pid) <= baseline + 8).then_some(())
        });
        assert!(
            settled.is_some(),
            "{attack}: pgtier holds {} fds, {baseline} before",
            fd_count(pid)
        );
        let after = pgbench(&proxy, 1);
        assert!(
            after.success(),
            "{attack}: a new client after it: {after:?}"
        );
    }
}
