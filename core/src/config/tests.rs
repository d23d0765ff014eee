//! Configuration examples, valid and invalid, with the exact messages an operator sees.

use super::database::DEFAULT_SERVER_PORT;
use super::*;
use crate::class::ClassSetting;
use std::net::SocketAddr;
use std::time::Duration;

use pgtier_policy::ServiceClass;

const P: ServiceClass = ServiceClass::Premium;
const F: ServiceClass = ServiceClass::Freemium;

const ISSUE_EXAMPLE: &str = r#"
[pgtier]
listen_addr = "127.0.0.1"
listen_port = 6432
workers = 1
auth_type = "trust"
auth_file = "userlist.txt"
pool_mode = "transaction"
default_pool_size = 20
admin_users = ["admin"]
[databases.postgres]
host = "127.0.0.1"
port = 5432
dbname = "postgres"
[databases.analytics]
dbname = "postgres"
replicas = ["127.0.0.1:15431", "127.0.0.1:15432", "127.0.0.1:15433", "127.0.0.1:15434", "127.0.0.1:15435"]
routing = "plb"
class = "freemium"
[databases.analytics.plb]
premium = ["127.0.0.1:15431", "127.0.0.1:15432"]
freemium = ["127.0.0.1:15433", "127.0.0.1:15434"]
theta_premium = 10
theta_freemium = 10
alpha_premium = 0.6
alpha_freemium = 0.8
freemium_floor = 1
premium_target = 2
freemium_target = 2
[users.alice]
class = "premium"
"#;

fn load(text: &str) -> Result<Config, ConfigError> {
    Config::from_str(text, "/etc/pgtier/pgtier.toml")
}

/// `text` with `auth_type = "trust"`, so it needs no auth file.
fn trusting(text: &str) -> String {
    match text.strip_prefix("[pgtier]\n") {
        Some(rest) => format!("[pgtier]\nauth_type = \"trust\"\n{rest}"),
        None => format!("[pgtier]\nauth_type = \"trust\"\n{text}"),
    }
}

fn load_trusting(text: &str) -> Result<Config, ConfigError> {
    load(&trusting(text))
}

fn error(text: &str) -> String {
    match load(text) {
        Ok(_) => panic!("config should be rejected:\n{text}"),
        Err(error) => error.to_string(),
    }
}

/// A replica database with the five replicas of the example and `extra` appended.
fn replicas_with(extra: &str) -> String {
    format!(
        "[databases.analytics]\nreplicas = [\"127.0.0.1:15431\", \"127.0.0.1:15432\", \"127.0.0.1:15433\", \"127.0.0.1:15434\", \"127.0.0.1:15435\"]\n{extra}"
    )
}

fn plb_with(lines: &str) -> String {
    replicas_with(&format!(
        "routing = \"plb\"\n[databases.analytics.plb]\npremium = [\"127.0.0.1:15431\", \"127.0.0.1:15432\"]\nfreemium = [\"127.0.0.1:15433\", \"127.0.0.1:15434\"]\n{lines}"
    ))
}

fn tiers_with(lines: &str) -> String {
    replicas_with(&format!(
        "routing = \"plb\"\n[databases.analytics.plb]\ntiers = [[\"127.0.0.1:15431\"], [\"127.0.0.1:15432\"], [\"127.0.0.1:15433\", \"127.0.0.1:15434\"]]\n{lines}"
    ))
}

#[test]
fn plb_tiers_take_ranked_pools_with_two_class_defaults_carried_on() {
    let config = load_trusting(&tiers_with("theta_premium = 4\n")).expect("valid");
    let ServerSet::Replicas(set) = &config.database("analytics").expect("entry").servers else {
        panic!("replicas expected");
    };
    let Routing::Plb(plb) = &set.routing else {
        panic!("plb expected");
    };
    let tiers = plb.tiers.as_ref().expect("tiers");
    assert_eq!(tiers.pools, [vec![0], vec![1], vec![2, 3]]);
    let params = &plb.params;
    assert_eq!(params.tiers, 3);
    assert_eq!(params.theta[..3], [4, 10, 10]);
    assert_eq!(params.alpha[..3], [0.6, 0.8, 0.8]);
    assert_eq!(params.floor[..3], [0, 1, 1]);
    assert_eq!(params.target[..3], [1, 1, 2]);
    assert!(params.reclaim);
    let set_lists = load_trusting(&tiers_with(
        "tier_theta = [2, 3, 4]\ntier_target = [1, 1, 1]\nreclaim = false\n",
    ))
    .expect("valid");
    let ServerSet::Replicas(set) = &set_lists.database("analytics").expect("entry").servers else {
        panic!("replicas expected");
    };
    let Routing::Plb(plb) = &set.routing else {
        panic!("plb expected");
    };
    assert!(plb.tiers.is_some());
    let params = &plb.params;
    assert_eq!(
        (&params.theta[..3], &params.target[..3]),
        (&[2, 3, 4][..], &[1, 1, 1][..])
    );
    assert!(!params.reclaim);
}

#[test]
fn plb_tiers_refuse_what_they_cannot_honour_naming_the_key() {
    let refused = |lines: &str| {
        load_trusting(&tiers_with(lines))
            .expect_err(lines)
            .to_string()
    };
    assert!(refused("tier_theta = [1, 2]\n").contains("analytics.plb.tier_theta: 2 entries"));
    assert!(refused("premium = []\n").contains("analytics.plb.tiers: tiers replaces premium"));
    assert!(refused("load_signal = \"in_flight\"\n").contains("load_signal is not supported"));
    assert!(refused("tier_alpha = [0.5, 0.5, 1.5]\n").contains("tier_alpha[2]"));
    assert!(refused("tier_target = [2, 2, 2]\n").contains("add up to 6"));
    let two = replicas_with(
        "routing = \"plb\"\n[databases.analytics.plb]\ntiers = [[\"127.0.0.1:15431\"], [\"127.0.0.1:15432\"]]\n",
    );
    let message = load_trusting(&two).expect_err("two ranks").to_string();
    assert!(message.contains("3 or 4"), "{message}");
    let overlap = replicas_with(
        "routing = \"plb\"\n[databases.analytics.plb]\ntiers = [[\"127.0.0.1:15431\"], [\"127.0.0.1:15431\"], [\"127.0.0.1:15433\"]]\n",
    );
    let message = load_trusting(&overlap).expect_err("overlap").to_string();
    assert!(message.contains("plb.tiers[1][0]"), "{message}");
    let stray = load_trusting(&plb_with("reclaim = true\n")).expect_err("reclaim without tiers");
    assert!(stray.to_string().contains("reclaim needs tiers"), "{stray}");
}

#[test]
fn plb_load_signal_and_recovery_drain_default_to_the_paper_and_can_be_set() {
    let plb_of = |config: &Config| match &config.database("analytics").expect("entry").servers {
        ServerSet::Replicas(set) => match &set.routing {
            Routing::Plb(plb) => plb.clone(),
            other => panic!("plb expected, got {other:?}"),
        },
        other => panic!("replicas expected, got {other:?}"),
    };
    let paper = plb_of(&load_trusting(&plb_with("")).expect("valid"));
    assert_eq!(paper.load_signal, PlbLoadSignal::Sessions);
    assert!(!paper.recovery_drain);
    let set = plb_of(
        &load_trusting(&plb_with(
            "load_signal = \"in_flight\"\nrecovery_drain = true\n",
        ))
        .expect("valid"),
    );
    assert_eq!(set.load_signal, PlbLoadSignal::InFlight);
    assert_eq!(set.load_signal.as_str(), "in_flight");
    assert!(set.recovery_drain);
    let refused = load_trusting(&plb_with("load_signal = \"queries\"\n"))
        .expect_err("an unknown signal is refused")
        .to_string();
    assert!(
        refused.contains("databases.analytics.plb.load_signal: unknown variant `queries`"),
        "{refused}"
    );
}

#[test]
fn issue_example_is_valid() {
    let config = load(ISSUE_EXAMPLE).expect("the issue's example is valid");
    assert_eq!(config.pgtier.worker_count(), 1);
    assert_eq!(config.pgtier.auth_type, AuthType::Trust);
    assert_eq!(config.pgtier.pool_mode, PoolMode::Transaction);
    assert_eq!(
        config.pgtier.auth_file.as_deref(),
        Some(std::path::Path::new("/etc/pgtier/userlist.txt"))
    );
    assert!(config.pgtier.is_admin("admin"));
    let postgres = config.database("postgres").expect("postgres entry");
    assert_eq!(
        postgres.servers,
        ServerSet::Single(HostPort {
            host: "127.0.0.1".into(),
            port: 5432
        })
    );
    assert_eq!(postgres.pool_size, 20);
    let analytics = config.database("analytics").expect("analytics entry");
    let ServerSet::Replicas(set) = &analytics.servers else {
        panic!("analytics has replicas");
    };
    assert_eq!(set.replicas.len(), 5);
    assert_eq!(
        set.replicas[4],
        "127.0.0.1:15435".parse::<SocketAddr>().expect("addr")
    );
    let Routing::Plb(plb) = &set.routing else {
        panic!("analytics routes with plb");
    };
    assert_eq!(plb.premium, [0, 1]);
    assert_eq!(plb.freemium, [2, 3]);
    let p = &plb.params;
    assert_eq!((p.theta(P), p.theta(F)), (10, 10));
    assert_eq!((p.alpha(P), p.alpha(F)), (0.6, 0.8));
    assert_eq!((p.floor(F), p.target(P), p.target(F)), (1, 2, 2));
    assert_eq!(config.class(analytics, "alice"), ClassSetting::PREMIUM);
    assert_eq!(config.class(analytics, "bob"), ClassSetting::FREEMIUM);
}

#[test]
fn default_md5_auth_needs_an_auth_file() {
    assert_eq!(
        error(""),
        "/etc/pgtier/pgtier.toml: pgtier.auth_file: auth_type = \"md5\" needs an auth_file with the users' passwords"
    );
}

#[test]
fn defaults_equal_pgbouncer() {
    let settings = load("[pgtier]\nauth_file = \"users.txt\"\n")
        .expect("valid")
        .pgtier;
    let expected = Settings {
        auth_file: Some("/etc/pgtier/users.txt".into()),
        ..Settings::default()
    };
    assert_eq!(settings, expected);
    assert_eq!(settings.listen_port, 6432);
    assert_eq!(settings.auth_type, AuthType::Md5);
    assert_eq!(settings.pool_mode, PoolMode::Session);
    assert_eq!(settings.max_client_conn, 100);
    assert_eq!(settings.default_pool_size, 20);
    assert_eq!(settings.min_pool_size, 0);
    assert_eq!(settings.reserve_pool_size, 0);
    assert_eq!(settings.reserve_pool_timeout, Seconds::from_secs(5));
    assert_eq!(settings.max_db_connections, 0);
    assert_eq!(settings.max_user_connections, 0);
    assert_eq!(settings.server_connect_timeout, Seconds::from_secs(15));
    assert_eq!(settings.server_login_retry, Seconds::from_secs(15));
    assert_eq!(settings.server_idle_timeout, Seconds::from_secs(600));
    assert_eq!(settings.server_lifetime, Seconds::from_secs(3600));
    assert_eq!(settings.query_wait_timeout, Seconds::from_secs(120));
    assert_eq!(settings.client_idle_timeout.enabled(), None);
    assert_eq!(settings.idle_transaction_timeout.enabled(), None);
    assert_eq!(settings.query_timeout.enabled(), None);
    assert_eq!(settings.client_login_timeout, Seconds::from_secs(60));
    assert_eq!(settings.server_reset_query, "DISCARD ALL");
    assert!(!settings.server_reset_query_always);
    assert_eq!(settings.server_check_delay, Seconds::from_secs(30));
    assert_eq!(settings.server_check_query, "<empty>");
    assert_eq!(settings.stats_period, Seconds::from_secs(60));
    assert!(settings.admin_users.is_empty() && settings.ignore_startup_parameters.is_empty());
}

#[test]
fn pgtier_limits_have_documented_defaults() {
    let settings = Settings::default();
    assert_eq!(settings.max_client_message_bytes, 256 << 20);
    assert_eq!(settings.max_server_message_bytes, 1 << 30);
    assert_eq!(settings.send_batch_max_chunks, 64);
    assert_eq!(settings.send_budget_bytes, 256 << 10);
    assert_eq!(settings.client_buffer_limit_bytes, 4 << 20);
    assert_eq!(settings.recv_buffer_bytes, 4 << 10);
    assert_eq!(settings.server_recv_buffer_bytes, 64 << 10);
    assert_eq!(settings.recv_buffer_count, 64);
    assert_eq!(settings.max_spellings_per_pool, 256);
    assert_eq!(settings.ring_entries, 4096);
    assert_eq!(settings.counter_flush_queries, 64);
    assert_eq!(settings.counter_flush_bytes, 64 << 10);
    assert_eq!(
        settings.health_check_interval.duration(),
        Duration::from_millis(250)
    );
    assert_eq!(
        settings.health_check_timeout.duration(),
        Duration::from_millis(500)
    );
    assert_eq!(
        (
            settings.health_check_failures,
            settings.health_check_successes
        ),
        (2, 3)
    );
    assert!(settings.repin_idle_sessions && settings.cancel_on_client_disconnect);
    assert_eq!(settings.role_events_capacity, 1024);
}

#[test]
fn killed_replica_is_detected_within_about_one_second_by_default() {
    let settings = Settings::default();
    let worst_case = settings.health_check_interval.duration() * settings.health_check_failures
        + settings.health_check_timeout.duration();
    assert!(worst_case <= Duration::from_secs(1), "{worst_case:?}");
}

#[test]
fn fractional_and_integer_seconds() {
    let config = load_trusting("[pgtier]\nquery_wait_timeout = 2.5\nserver_idle_timeout = 0\n")
        .expect("valid");
    assert_eq!(
        config.pgtier.query_wait_timeout.duration(),
        Duration::from_millis(2500)
    );
    assert_eq!(config.pgtier.server_idle_timeout.enabled(), None);
}

#[test]
fn database_defaults_inherit_global_settings() {
    let config = load_trusting("[pgtier]\ndefault_pool_size = 7\nmin_pool_size = 2\npool_mode = \"transaction\"\n[databases.app]\n")
        .expect("valid");
    let app = config.database("app").expect("app");
    assert_eq!(app.dbname, "app");
    assert_eq!((app.pool_size, app.min_pool_size), (7, 2));
    assert_eq!(app.pool_mode, PoolMode::Transaction);
    assert_eq!(app.class, ClassSetting::FREEMIUM);
    assert_eq!(
        app.servers,
        ServerSet::Single(HostPort {
            host: "127.0.0.1".into(),
            port: DEFAULT_SERVER_PORT
        })
    );
}

#[test]
fn user_pool_mode_wins_over_database_and_global() {
    let config = load_trusting(
        "[pgtier]\npool_mode = \"session\"\n[databases.app]\npool_mode = \"transaction\"\n[users.batch]\npool_mode = \"session\"\nmax_user_connections = 3\n",
    )
    .expect("valid");
    let app = config.database("app").expect("app");
    assert_eq!(config.pool_mode(app, "web"), PoolMode::Transaction);
    assert_eq!(config.pool_mode(app, "batch"), PoolMode::Session);
    assert_eq!(config.max_user_connections("batch"), 3);
    assert_eq!(config.max_user_connections("web"), 0);
}

#[test]
fn statement_pooling_is_a_pool_mode_at_every_level() {
    let config = load_trusting(
        "[pgtier]\npool_mode = \"statement\"\n[databases.app]\n[databases.tx]\npool_mode = \"transaction\"\n[databases.st]\npool_mode = \"statement\"\n[users.batch]\npool_mode = \"statement\"\n",
    )
    .expect("valid");
    assert_eq!(config.pgtier.pool_mode, PoolMode::Statement);
    let (app, tx, st) = (
        config.database("app").expect("app"),
        config.database("tx").expect("tx"),
        config.database("st").expect("st"),
    );
    assert_eq!(config.pool_mode(app, "web"), PoolMode::Statement);
    assert_eq!(config.pool_mode(tx, "web"), PoolMode::Transaction);
    assert_eq!(config.pool_mode(st, "web"), PoolMode::Statement);
    assert_eq!(config.pool_mode(tx, "batch"), PoolMode::Statement);
    assert_eq!(PoolMode::Statement.to_string(), "statement");
}

#[test]
fn pool_modes_say_when_a_server_is_released_and_what_is_refused() {
    // (mode, released at an idle ReadyForQuery, transaction blocks refused)
    let table = [
        (PoolMode::Session, false, false),
        (PoolMode::Transaction, true, false),
        (PoolMode::Statement, true, true),
    ];
    for (mode, released, refused) in table {
        assert_eq!(mode.releases_at_idle_ready(), released, "{mode}");
        assert_eq!(mode.refuses_transaction_blocks(), refused, "{mode}");
    }
}

#[test]
fn alias_entry_sets_premium_class() {
    let config = load_trusting(&replicas_with("class = \"premium\"\n")).expect("valid");
    let analytics = config.database("analytics").expect("entry");
    assert_eq!(config.class(analytics, "anyone"), ClassSetting::PREMIUM);
}

#[test]
fn plb_parameters_the_policy_refuses_are_refused_at_load() {
    let refused = load_trusting(&plb_with("theta_freemium = 1\n"))
        .expect_err("a return watermark of 0")
        .to_string();
    assert!(
        refused.contains(
            "databases.analytics.plb: return watermark floor(alpha_freemium * theta_freemium)"
        ),
        "{refused}"
    );
}

#[test]
fn plb_parameters_default_to_the_paper() {
    let config = load_trusting(&plb_with("")).expect("valid");
    let ServerSet::Replicas(set) = &config.databases["analytics"].servers else {
        panic!("replicas");
    };
    let Routing::Plb(plb) = &set.routing else {
        panic!("plb");
    };
    let p = &plb.params;
    assert_eq!((p.theta(P), p.alpha(P), p.alpha(F)), (10, 0.6, 0.8));
    assert_eq!((p.floor(F), p.target(P), p.target(F)), (1, 2, 2));
}

#[test]
fn other_routings_parse() {
    for (routing, kind) in [
        ("round_robin", RoutingKind::RoundRobin),
        ("least_sessions", RoutingKind::LeastSessions),
        ("p2c", RoutingKind::P2c),
    ] {
        let config =
            load_trusting(&replicas_with(&format!("routing = \"{routing}\"\n"))).expect("valid");
        let ServerSet::Replicas(set) = &config.databases["analytics"].servers else {
            panic!("replicas");
        };
        assert_eq!(set.routing.kind(), kind);
    }
    let config = load_trusting(&replicas_with(
        "routing = \"p2c\"\nweights = [1, 2, 3, 4, 5]\n",
    ))
    .expect("valid");
    let ServerSet::Replicas(set) = &config.databases["analytics"].servers else {
        panic!("replicas");
    };
    assert_eq!(
        set.routing,
        Routing::P2c {
            weights: vec![1, 2, 3, 4, 5]
        }
    );
    let dedicated = "routing = \"dedicated\"\n[databases.analytics.dedicated]\npremium = [\"127.0.0.1:15431\", \"127.0.0.1:15432\", \"127.0.0.1:15433\", \"127.0.0.1:15434\"]\nfreemium = [\"127.0.0.1:15435\"]\n";
    let config = load_trusting(&replicas_with(dedicated)).expect("valid");
    let ServerSet::Replicas(set) = &config.databases["analytics"].servers else {
        panic!("replicas");
    };
    assert_eq!(
        set.routing,
        Routing::Dedicated(DedicatedSplit {
            premium: vec![0, 1, 2, 3],
            freemium: vec![4]
        })
    );
}

#[test]
fn unknown_keys_are_rejected_with_their_path() {
    let message = error("[pgtier]\nlisten_prot = 6432\n");
    assert!(
        message.starts_with("/etc/pgtier/pgtier.toml:2: pgtier.listen_prot: unknown field `listen_prot`, expected one of"),
        "{message}"
    );
    let message = error(&plb_with("kappa = 1\n"));
    assert!(
        message.starts_with(
            "/etc/pgtier/pgtier.toml:7: databases.analytics.plb.kappa: unknown field `kappa`"
        ),
        "{message}"
    );
    let message = error("[databse.x]\n");
    assert!(
        message.starts_with("/etc/pgtier/pgtier.toml:1: databse: unknown field `databse`"),
        "{message}"
    );
}

#[test]
fn wrong_types_and_enum_values_name_the_key() {
    assert_eq!(
        error("[pgtier]\npool_mode = \"sometimes\"\n"),
        "/etc/pgtier/pgtier.toml:2: pgtier.pool_mode: unknown variant `sometimes`, expected one of `session`, `transaction`, `statement`"
    );
    assert_eq!(
        error("[pgtier]\nlisten_port = \"6432\"\n"),
        "/etc/pgtier/pgtier.toml:2: pgtier.listen_port: invalid type: string \"6432\", expected u16"
    );
    assert_eq!(
        error("[pgtier]\nserver_idle_timeout = -1\n"),
        "/etc/pgtier/pgtier.toml:2: pgtier.server_idle_timeout: -1 is not a duration: expected seconds >= 0"
    );
    assert_eq!(
        error("[users.alice]\nclass = \"gold\"\n"),
        "/etc/pgtier/pgtier.toml:2: users.alice.class: unknown class \"gold\"; expected premium, freemium, tier2 or tier3"
    );
}

#[test]
fn bad_listen_addr_names_the_key() {
    assert_eq!(
        error("[pgtier]\nlisten_addr = \"localhost:6432\"\n"),
        "/etc/pgtier/pgtier.toml:2: pgtier.listen_addr: invalid IP address syntax: \"localhost:6432\""
    );
}

#[test]
fn toml_syntax_error_names_the_line() {
    let message = error("[pgtier]\nlisten_port = \n");
    assert!(
        message.starts_with("/etc/pgtier/pgtier.toml:2: "),
        "{message}"
    );
}

#[test]
fn invalid_settings_are_rejected() {
    let cases = [
        (
            "[pgtier]\nauth_type = \"md5\"\n",
            ": pgtier.auth_file: auth_type = \"md5\" needs an auth_file with the users' passwords",
        ),
        (
            "[pgtier]\nauth_type = \"trust\"\nworkers = 0\n",
            ":3: pgtier.workers: 0 is too small: must be at least 1",
        ),
        (
            "[pgtier]\nauth_type = \"trust\"\nmin_pool_size = 30\n",
            ":3: pgtier.min_pool_size: 30 is larger than default_pool_size (20)",
        ),
        (
            "[pgtier]\nauth_type = \"trust\"\nsend_batch_max_chunks = 2000\n",
            ":3: pgtier.send_batch_max_chunks: 2000 is too large: must be at most 1024",
        ),
        (
            "[pgtier]\nauth_type = \"trust\"\nrecv_buffer_count = 1000\n",
            ":3: pgtier.recv_buffer_count: 1000 is not a power of two",
        ),
        (
            "[pgtier]\nauth_type = \"trust\"\nring_entries = 1000\n",
            ":3: pgtier.ring_entries: 1000 is not a power of two",
        ),
        (
            "[pgtier]\nauth_type = \"trust\"\nring_entries = 4\n",
            ":3: pgtier.ring_entries: 4 is too small: must be at least 8",
        ),
        (
            "[pgtier]\nauth_type = \"trust\"\nhealth_check_interval = 0\n",
            ":3: pgtier.health_check_interval: must be greater than 0",
        ),
        (
            "[pgtier]\nauth_type = \"trust\"\nclient_buffer_limit_bytes = 1024\n",
            ":3: pgtier.client_buffer_limit_bytes: 1024 is smaller than send_budget_bytes (262144)",
        ),
        (
            "[pgtier]\nauth_type = \"trust\"\nmax_client_message_bytes = 100\n",
            ":3: pgtier.max_client_message_bytes: 100 is too small: must be at least 16384",
        ),
    ];
    for (text, expected) in cases {
        assert_eq!(
            error(text),
            format!("/etc/pgtier/pgtier.toml{expected}"),
            "{text}"
        );
    }
}

#[test]
fn invalid_databases_are_rejected() {
    let cases = [
        (
            "[databases.pgtier]\n".to_string(),
            ":3: databases.pgtier: the name \"pgtier\" is reserved for the admin console",
        ),
        (
            replicas_with("host = \"10.0.0.1\"\n"),
            ":5: databases.analytics.host: host cannot be used together with replicas: name the primary with primary = \"IP:port\" and list the standbys in replicas",
        ),
        (
            "[databases.a]\nreplicas = []\n".to_string(),
            ":4: databases.a.replicas: needs at least one replica",
        ),
        (
            "[databases.a]\nreplicas = [\"127.0.0.1:1\", \"db.example:5432\"]\n".to_string(),
            ":4: databases.a.replicas[1]: \"db.example:5432\" is not a replica address: expected IP:port such as 127.0.0.1:5432",
        ),
        (
            "[databases.a]\nreplicas = [\"127.0.0.1:1\", \"127.0.0.1:1\"]\n".to_string(),
            ":4: databases.a.replicas[1]: 127.0.0.1:1 is listed twice",
        ),
        (
            "[databases.a]\nrouting = \"plb\"\n".to_string(),
            ":4: databases.a.routing: routing needs a replicas list",
        ),
        (
            replicas_with("routing = \"plb\"\n"),
            ": databases.analytics.plb: routing = \"plb\" needs a [databases.analytics.plb] table",
        ),
        (
            replicas_with("[databases.analytics.plb]\npremium = []\nfreemium = []\n"),
            ":5: databases.analytics.plb: plb is not used by routing = \"round_robin\"",
        ),
        (
            replicas_with("routing = \"p2c\"\nweights = [1, 2]\n"),
            ":6: databases.analytics.weights: has 2 weights for 5 replicas: give one per replica",
        ),
        (
            replicas_with("routing = \"p2c\"\nweights = [1, 1, 0, 1, 1]\n"),
            ":6: databases.analytics.weights[2]: weights must be at least 1",
        ),
        (
            replicas_with("weights = [1, 1, 1, 1, 1]\n"),
            ":5: databases.analytics.weights: weights is not used by routing = \"round_robin\"",
        ),
        (
            "[databases.a]\npool_size = 2\nmin_pool_size = 3\n".to_string(),
            ":5: databases.a.min_pool_size: 3 is larger than the pool size (2)",
        ),
        (
            replicas_with(
                "routing = \"dedicated\"\n[databases.analytics.dedicated]\npremium = [\"127.0.0.1:15431\"]\nfreemium = [\"127.0.0.1:15432\"]\n",
            ),
            ":6: databases.analytics.dedicated: replica 127.0.0.1:15433 is in neither premium nor freemium",
        ),
        (
            replicas_with("primary = \"127.0.0.1:15431\"\n"),
            ":5: databases.analytics.primary: 127.0.0.1:15431 is also listed in replicas",
        ),
        (
            replicas_with("read_your_writes = false\n"),
            ":5: databases.analytics.read_your_writes: read_your_writes needs a primary: reads are routed per transaction only when the entry also names primary = \"IP:port\"",
        ),
        (
            replicas_with("primary = \"127.0.0.1:5432\"\nplb_per_transaction = true\n"),
            ":6: databases.analytics.plb_per_transaction: plb_per_transaction needs routing = \"plb\"",
        ),
    ];
    for (text, expected) in cases {
        let text = format!("[pgtier]\nauth_type = \"trust\"\n{text}");
        assert_eq!(
            error(&text),
            format!("/etc/pgtier/pgtier.toml{expected}"),
            "{text}"
        );
    }
}

#[test]
fn invalid_plb_tables_are_rejected() {
    let cases = [
        (
            plb_with("freemium_floor = 3\n"),
            ":9: databases.analytics.plb.freemium_floor: 3 is larger than the freemium pool (2 replicas)",
        ),
        (
            plb_with("alpha_premium = 1.5\n"),
            ":9: databases.analytics.plb.alpha_premium: 1.5 is outside (0, 1]",
        ),
        (
            plb_with("alpha_freemium = 0.0\n"),
            ":9: databases.analytics.plb.alpha_freemium: 0 is outside (0, 1]",
        ),
        (
            plb_with("premium_target = 6\n"),
            ":9: databases.analytics.plb.premium_target: 6 is larger than the number of replicas (5)",
        ),
        (
            plb_with("premium_target = 3\nfreemium_target = 3\n"),
            ":10: databases.analytics.plb.freemium_target: premium_target + freemium_target = 6 is larger than the number of replicas (5)",
        ),
        (
            plb_with("theta_premium = 0\n"),
            ":9: databases.analytics.plb.theta_premium: 0 is too small: must be at least 1",
        ),
        (
            plb_with("freemium_target = 0\n"),
            ":9: databases.analytics.plb.freemium_target: 0 is smaller than freemium_floor (1)",
        ),
        (
            replicas_with(
                "routing = \"plb\"\n[databases.analytics.plb]\npremium = [\"127.0.0.1:9999\"]\nfreemium = []\n",
            ),
            ":7: databases.analytics.plb.premium[0]: 127.0.0.1:9999 is not one of databases.analytics.replicas",
        ),
        (
            replicas_with(
                "routing = \"plb\"\n[databases.analytics.plb]\npremium = [\"127.0.0.1:15431\"]\nfreemium = [\"127.0.0.1:15432\", \"127.0.0.1:15431\"]\n",
            ),
            ":8: databases.analytics.plb.freemium[1]: 127.0.0.1:15431 is also in databases.analytics.plb.premium: a replica starts in at most one pool",
        ),
        (
            replicas_with(
                "routing = \"plb\"\n[databases.analytics.plb]\npremium = [\"127.0.0.1:15431\", \"127.0.0.1:15431\"]\nfreemium = []\n",
            ),
            ":7: databases.analytics.plb.premium[1]: 127.0.0.1:15431 is listed twice",
        ),
    ];
    for (text, expected) in cases {
        let text = format!("[pgtier]\nauth_type = \"trust\"\n{text}");
        assert_eq!(
            error(&text),
            format!("/etc/pgtier/pgtier.toml{expected}"),
            "{text}"
        );
    }
}

#[test]
fn missing_plb_list_names_the_table() {
    let text = replicas_with("routing = \"plb\"\n[databases.analytics.plb]\npremium = []\n");
    let message = error(&format!("[pgtier]\nauth_type = \"trust\"\n{text}"));
    assert!(
        message.contains("databases.analytics.plb: missing field `freemium`"),
        "{message}"
    );
}

#[test]
fn tls_defaults_equal_pgbouncer() {
    let settings = Settings::default();
    assert_eq!(settings.client_tls_sslmode, SslMode::Disable);
    assert_eq!(settings.server_tls_sslmode, SslMode::Prefer);
    assert_eq!(settings.client_tls_protocols, TlsProtocols::SECURE);
    assert_eq!(settings.server_tls_protocols.to_string(), "tlsv1.2,tlsv1.3");
    assert_eq!(settings.client_tls_ciphers.as_str(), "default");
    assert_eq!(settings.server_tls_ciphers.suites(), CipherSuite::ALL);
    assert!(settings.client_tls_key_file.is_none() && settings.server_tls_ca_file.is_none());
}

#[test]
fn tls_settings_parse_and_resolve_relative_paths() {
    let config = load_trusting(
        "[pgtier]\n\
         client_tls_sslmode = \"verify-full\"\n\
         client_tls_key_file = \"tls/server.key\"\n\
         client_tls_cert_file = \"/etc/ssl/server.crt\"\n\
         client_tls_ca_file = \"ca.pem\"\n\
         client_tls_protocols = \"tlsv1.3\"\n\
         client_tls_ciphers = \"TLS_AES_128_GCM_SHA256:ECDHE-RSA-AES128-GCM-SHA256\"\n\
         server_tls_sslmode = \"verify-ca\"\n\
         server_tls_ca_file = \"server-ca.pem\"\n\
         server_tls_key_file = \"pgtier.key\"\n\
         server_tls_cert_file = \"pgtier.crt\"\n\
         server_tls_protocols = \"legacy\"\n\
         server_tls_ciphers = \"fast\"\n",
    )
    .expect("valid TLS settings");
    let settings = &config.pgtier;
    assert_eq!(settings.client_tls_sslmode, SslMode::VerifyFull);
    let path = |text: &str| Some(std::path::PathBuf::from(text));
    assert_eq!(
        settings.client_tls_key_file,
        path("/etc/pgtier/tls/server.key")
    );
    assert_eq!(settings.client_tls_cert_file, path("/etc/ssl/server.crt"));
    assert_eq!(settings.client_tls_ca_file, path("/etc/pgtier/ca.pem"));
    assert_eq!(
        settings.server_tls_ca_file,
        path("/etc/pgtier/server-ca.pem")
    );
    assert_eq!(settings.server_tls_key_file, path("/etc/pgtier/pgtier.key"));
    assert_eq!(
        settings.server_tls_cert_file,
        path("/etc/pgtier/pgtier.crt")
    );
    let protocols = settings.client_tls_protocols;
    assert!(protocols.tls13() && !protocols.tls12());
    assert!(settings.server_tls_protocols.ignored_legacy());
    assert_eq!(
        settings.client_tls_ciphers.suites()[..2],
        [
            CipherSuite::Tls13Aes128GcmSha256,
            CipherSuite::EcdheRsaAes128GcmSha256
        ]
    );
    assert_eq!(settings.server_tls_ciphers.as_str(), "fast");
    assert_eq!(settings.server_tls_sslmode.as_str(), "verify-ca");
}

#[test]
fn every_sslmode_spelling_parses() {
    for mode in [
        "disable",
        "allow",
        "prefer",
        "require",
        "verify-ca",
        "verify-full",
    ] {
        let config = load_trusting(&format!(
            "[pgtier]\nserver_tls_sslmode = \"{mode}\"\nserver_tls_ca_file = \"ca.pem\"\n"
        ))
        .unwrap_or_else(|error| panic!("{mode}: {error}"));
        assert_eq!(config.pgtier.server_tls_sslmode.as_str(), mode);
    }
}

#[test]
fn server_tls_settings_may_be_half_set_between_two_sets() {
    // PgBouncer's users (and its test suite) SET server_tls_sslmode before
    // server_tls_ca_file, and the key before the certificate.
    for text in [
        "server_tls_sslmode = \"verify-full\"\n",
        "server_tls_key_file = \"k.pem\"\n",
        "server_tls_cert_file = \"c.pem\"\n",
    ] {
        load_trusting(&format!("[pgtier]\n{text}"))
            .unwrap_or_else(|error| panic!("{text}: {error}"));
    }
}

#[test]
fn invalid_tls_settings_name_the_key() {
    let client_files = "client_tls_key_file = \"k.pem\"\nclient_tls_cert_file = \"c.pem\"\n";
    let cases = [
        (
            "client_tls_sslmode = \"require\"\n".to_string(),
            ": pgtier.client_tls_key_file: client_tls_sslmode = \"require\" needs client_tls_key_file and client_tls_cert_file: the key and certificate pgtier presents to clients",
        ),
        (
            "client_tls_sslmode = \"allow\"\nclient_tls_key_file = \"k.pem\"\n".to_string(),
            ": pgtier.client_tls_cert_file: client_tls_sslmode = \"allow\" needs client_tls_key_file and client_tls_cert_file: the key and certificate pgtier presents to clients",
        ),
        (
            format!("client_tls_sslmode = \"verify-ca\"\n{client_files}"),
            ": pgtier.client_tls_ca_file: client_tls_sslmode = \"verify-ca\" needs client_tls_ca_file: the CA that client certificates must be signed by",
        ),
        (
            format!("client_tls_sslmode = \"verify-full\"\n{client_files}"),
            ": pgtier.client_tls_ca_file: client_tls_sslmode = \"verify-full\" needs client_tls_ca_file: the CA that client certificates must be signed by",
        ),
        (
            "client_tls_sslmode = \"verify\"\n".to_string(),
            ":3: pgtier.client_tls_sslmode: unknown variant `verify`, expected one of `disable`, `allow`, `prefer`, `require`, `verify-ca`, `verify-full`",
        ),
        (
            "client_tls_protocols = \"tlsv1.2,sslv3\"\n".to_string(),
            ":3: pgtier.client_tls_protocols: unknown TLS protocol `sslv3`: expected tlsv1.0, tlsv1.1, tlsv1.2, tlsv1.3, all, secure, default or legacy",
        ),
    ];
    for (lines, expected) in cases {
        let text = format!("[pgtier]\nauth_type = \"trust\"\n{lines}");
        assert_eq!(
            error(&text),
            format!("/etc/pgtier/pgtier.toml{expected}"),
            "{text}"
        );
    }
    let message = error(
        "[pgtier]\nauth_type = \"trust\"\nclient_tls_ciphers = \"ECDHE-RSA-AES128-GCM-SHA256:RC4-MD5\"\n",
    );
    assert!(
        message.starts_with("/etc/pgtier/pgtier.toml:3: pgtier.client_tls_ciphers: unknown or unsupported cipher suite `RC4-MD5`: pgtier's TLS library (rustls) implements TLS_AES_256_GCM_SHA384,"),
        "{message}"
    );
}

#[test]
fn a_disabled_side_needs_no_files() {
    let config = load_trusting(
        "[pgtier]\nclient_tls_ca_file = \"ca.pem\"\nserver_tls_sslmode = \"disable\"\n",
    )
    .expect("valid");
    assert!(!config.pgtier.client_tls_sslmode.is_enabled());
    assert!(!config.pgtier.server_tls_sslmode.is_enabled());
}

#[test]
fn load_reads_files_and_reports_missing_ones() {
    let directory = std::env::temp_dir().join(format!("pgtier-config-test-{}", std::process::id()));
    std::fs::create_dir_all(&directory).expect("temp dir");
    let path = directory.join("pgtier.toml");
    std::fs::write(&path, ISSUE_EXAMPLE).expect("write config");
    let config = Config::load(&path).expect("valid file");
    assert_eq!(
        config.pgtier.auth_file,
        Some(directory.join("userlist.txt"))
    );
    std::fs::remove_dir_all(&directory).expect("cleanup");
    let message = Config::load(&path).expect_err("file is gone").to_string();
    assert!(
        message.starts_with(&format!("{}: cannot read the file", path.display())),
        "{message}"
    );
}

#[test]
fn summary_lists_databases_and_users() {
    let config = load(ISSUE_EXAMPLE).expect("valid");
    let summary = config.to_string();
    assert!(
        summary
            .contains("listen 127.0.0.1:6432, 1 worker(s), auth_type trust, pool_mode transaction"),
        "{summary}"
    );
    assert!(
        summary.contains(
            "database analytics -> 5 replicas, routing plb (premium 2, freemium 2, mixed 1)"
        ),
        "{summary}"
    );
    assert!(
        summary.contains("database postgres -> 127.0.0.1:5432, dbname postgres"),
        "{summary}"
    );
    assert!(summary.contains("user alice: class premium"), "{summary}");
}

const REFERENCE: &str = include_str!("../../../docs/config.md");

#[test]
fn reference_example_is_valid() {
    let example = REFERENCE
        .split("```toml\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("docs/config.md starts with a toml example");
    load(example).expect("the reference's example is valid");
}

/// The keys serde accepts in a table, read from its unknown-field message.
fn accepted_keys(text: &str) -> Vec<String> {
    let message = error(text);
    let (_, list) = message.split_once("expected ").expect("field list");
    let list = list.strip_prefix("one of ").unwrap_or(list);
    list.split(", ")
        .flat_map(|part| part.split(" or "))
        .map(|key| key.trim_matches('`').to_string())
        .collect()
}

#[test]
fn reference_documents_every_key() {
    let tables = [
        "[pgtier]\nnot_a_key = 1\n",
        "[databases.a]\nnot_a_key = 1\n",
        "[databases.a.plb]\nnot_a_key = 1\n",
        "[databases.a.dedicated]\nnot_a_key = 1\n",
        "[users.a]\nnot_a_key = 1\n",
    ];
    for table in tables {
        for key in accepted_keys(table) {
            assert!(
                REFERENCE.contains(&format!("| `{key}` |")),
                "docs/config.md does not document `{key}` ({table})"
            );
        }
    }
}

mod robustness {
    //! Whatever the file holds, loading returns a value or an error, never a panic.

    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn arbitrary_text_never_panics(text in "\\PC*") {
            let _ = load(&text);
        }

        #[test]
        fn truncated_and_mutated_example_never_panics(
            cut in 0..ISSUE_EXAMPLE.len(),
            position in 0..ISSUE_EXAMPLE.len(),
            byte in proptest::sample::select(b"[]=\"., 0-9az\n#".to_vec()),
        ) {
            let mut bytes = ISSUE_EXAMPLE.as_bytes()[..cut].to_vec();
            if position < bytes.len() {
                bytes[position] = byte;
            }
            let text = String::from_utf8_lossy(&bytes);
            if let Err(error) = load(&text) {
                prop_assert!(error.to_string().starts_with("/etc/pgtier/pgtier.toml"));
            }
        }
    }
}

#[test]
fn a_reader_entry_has_its_primary_and_read_settings() {
    let text = "[pgtier]\nauth_type = \"trust\"\n[databases.app]\nprimary = \"127.0.0.1:5432\"\n\
                replicas = [\"127.0.0.1:5433\", \"127.0.0.1:5434\"]\nread_your_writes_timeout = 0.25\n\
                read_your_writes_scope = \"user\"\nmax_replica_lag_bytes = 1048576\n\
                max_replica_lag_seconds = 5\n";
    let config = match Config::from_str(text, "/etc/pgtier/pgtier.toml") {
        Ok(config) => config,
        Err(error) => panic!("{error}"),
    };
    let Some(db) = config.database("app") else {
        panic!("no entry");
    };
    let ServerSet::Replicas(set) = &db.servers else {
        panic!("not a replica set");
    };
    assert!(set.is_reader_entry());
    assert_eq!(set.primary, "127.0.0.1:5432".parse().ok());
    assert!(set.reads.read_your_writes, "on by default");
    assert_eq!(
        set.reads.read_your_writes_timeout,
        std::time::Duration::from_millis(250)
    );
    assert_eq!(set.reads.read_your_writes_scope, RywScope::User);
    assert_eq!(set.reads.max_replica_lag_bytes, 1 << 20);
    assert_eq!(set.reads.max_replica_lag, std::time::Duration::from_secs(5));
}

#[test]
fn function_overrides_come_from_the_entry_else_the_global_lists() {
    let text = "[pgtier]\nauth_type = \"trust\"\nread_only_functions = [\"My_Stable\"]\n\
                write_functions = [\"current_setting\"]\n\
                [databases.app]\nprimary = \"127.0.0.1:5432\"\nreplicas = [\"127.0.0.1:5433\"]\n\
                [databases.own]\nprimary = \"127.0.0.1:5442\"\nreplicas = [\"127.0.0.1:5443\"]\n\
                read_only_functions = [\"\\\"Exact\\\"\"]\nwrite_functions = []\n";
    let config = match Config::from_str(text, "/etc/pgtier/pgtier.toml") {
        Ok(config) => config,
        Err(error) => panic!("{error}"),
    };
    let reads = |name: &str| match config.database(name).map(|db| &db.servers) {
        Some(ServerSet::Replicas(set)) => set.reads.functions.clone(),
        _ => panic!("no reader entry {name}"),
    };
    let app = reads("app");
    assert_eq!(app.read_only(b"my_stable"), Some(true));
    assert_eq!(app.read_only(b"current_setting"), Some(false));
    let own = reads("own");
    assert_eq!(own.read_only(b"Exact"), Some(true));
    assert_eq!(
        own.read_only(b"my_stable"),
        None,
        "the entry's list replaces the global one"
    );
    assert_eq!(own.read_only(b"current_setting"), None);
}

#[test]
fn function_overrides_need_a_primary_and_names() {
    let single = "[pgtier]\nauth_type = \"trust\"\n[databases.app]\nreplicas = [\"127.0.0.1:5433\"]\n\
                  write_functions = [\"f\"]\n";
    let Err(error) = Config::from_str(single, "/etc/pgtier/pgtier.toml") else {
        panic!("write_functions accepted without a primary");
    };
    assert!(error.to_string().contains("needs a primary"), "{error}");
    let bad = "[pgtier]\nauth_type = \"trust\"\nread_only_functions = [\"s.f\"]\n";
    let Err(error) = Config::from_str(bad, "/etc/pgtier/pgtier.toml") else {
        panic!("a qualified name accepted");
    };
    assert!(error.to_string().contains("read_only_functions"), "{error}");
}

#[test]
fn an_ini_path_found_only_in_the_working_directory_is_taken_from_there() {
    // As PgBouncer opens it; cargo runs this with the crate's directory as the working one.
    let cwd = std::env::current_dir().expect("cwd");
    let config = Config::from_ini_str(
        "[pgbouncer]\nauth_type = trust\nauth_file = Cargo.toml\nauth_hba_file = no-such.conf\n",
        "/nonexistent-pgtier-dir/pgbouncer.ini",
    )
    .expect("valid");
    assert_eq!(config.pgtier.auth_file, Some(cwd.join("Cargo.toml")));
    assert_eq!(
        config.pgtier.auth_hba_file,
        Some(PathBuf::from("/nonexistent-pgtier-dir/no-such.conf")),
        "beside the file when found in neither"
    );
}

#[test]
fn target_session_attrs_takes_libpqs_values_on_a_host_list_only() {
    use crate::config::{ServerSet, TargetSessionAttrs};
    let list = |value: &str| {
        load_trusting(&format!(
            "[pgtier]\nhealth_check_user = \"mon\"\n[databases.app]\nhost = \"10.0.0.1,10.0.0.2\"\n\
             target_session_attrs = \"{value}\"\n"
        ))
    };
    let no_login = error(&trusting(
        "[databases.app]\nhost = \"10.0.0.1,10.0.0.2\"\ntarget_session_attrs = \"read-write\"\n",
    ));
    assert!(no_login.contains("health_check_user"), "{no_login}");
    for (value, expected) in [
        ("any", TargetSessionAttrs::Any),
        ("read-write", TargetSessionAttrs::ReadWrite),
        ("primary", TargetSessionAttrs::Primary),
    ] {
        let config = list(value).expect(value);
        match &config.database("app").expect("app").servers {
            ServerSet::Hosts(hosts) => assert_eq!(hosts.target, expected),
            other => panic!("a host list: {other:?}"),
        }
    }
    let plain = load_trusting("[databases.app]\nhost = \"10.0.0.1,10.0.0.2\"\n").expect("plain");
    match &plain.database("app").expect("app").servers {
        ServerSet::Hosts(hosts) => assert_eq!(hosts.target, TargetSessionAttrs::Any),
        other => panic!("a host list: {other:?}"),
    }
    assert!(list("standby").is_err(), "not a value pgtier serves");
    let single = error(&trusting(
        "[databases.app]\nhost = \"10.0.0.1\"\ntarget_session_attrs = \"read-write\"\n",
    ));
    assert!(single.contains("needs a host list"), "{single}");
    let reader = error(&trusting(
        "[databases.app]\nprimary = \"10.0.0.1:5432\"\nreplicas = [\"10.0.0.2:5432\"]\n\
         target_session_attrs = \"read-write\"\n",
    ));
    assert!(reader.contains("follows a promotion"), "{reader}");
}

#[test]
fn fleet_settings_default_to_no_fleet_and_check_the_store() {
    let config = load_trusting("[pgtier]\n").expect("defaults");
    assert!(config.pgtier.fleet_name.is_empty());
    assert_eq!(
        config.pgtier.fleet_member_timeout(),
        std::time::Duration::from_secs(3)
    );
    let config = load_trusting(
        "[pgtier]\nfleet_name = \"east\"\nfleet_report_interval = 0.5\n\
         fleet_store = \"host=db port=5433 dbname=fleet user=pgtier password='a b'\"\n",
    )
    .expect("a fleet");
    assert_eq!(
        config.pgtier.fleet_member_timeout(),
        std::time::Duration::from_millis(1500)
    );
    let pairs = super::fleet_store_pairs(&config.pgtier.fleet_store).expect("pairs");
    assert!(pairs.contains(&("password".to_string(), "a b".to_string())));
    let typo = error(&trusting("[pgtier]\nfleet_store = \"host=db prot=5433\"\n"));
    assert!(
        typo.contains("fleet_store") && typo.contains("prot"),
        "{typo}"
    );
    let no_host = error(&trusting("[pgtier]\nfleet_store = \"port=5433\"\n"));
    assert!(no_host.contains("host"), "{no_host}");
    let zero = error(&trusting("[pgtier]\nfleet_report_interval = 0\n"));
    assert!(zero.contains("fleet_report_interval"), "{zero}");
}
