//! pgbouncer.ini examples, valid and invalid, and the `Config` each gives.

use super::super::*;
use super::pgbouncer_keys;
use std::path::PathBuf;
use std::time::Duration;

/// A scratch directory for files that include each other; removed on drop.
struct Dir(PathBuf);

impl Dir {
    fn new(name: &str) -> Dir {
        let path = std::env::temp_dir().join(format!("pgtier-ini-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("temp dir");
        Dir(path)
    }

    fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, text).expect("write");
        path
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const ORIGIN: &str = "/etc/pgbouncer/pgbouncer.ini";

fn ini(text: &str) -> Config {
    Config::from_ini_str(text, ORIGIN).unwrap_or_else(|error| panic!("{error}\n{text}"))
}

fn ini_error(text: &str) -> String {
    match Config::from_ini_str(text, ORIGIN) {
        Ok(config) => panic!("accepted: {config:?}"),
        Err(error) => error.to_string(),
    }
}

const TYPICAL: &str = "\
;; a pgbouncer.ini as PgBouncer 1.18 users write it
[databases]
app = host=127.0.0.1 port=5433 dbname=appdb pool_size=30 reserve_pool=3 pool_mode=session
forcedb = host=localhost port=300 user=baz password='a b' client_encoding=UNICODE datestyle=ISO timezone=UTC
sock = host=/var/run/postgresql
foodb =
* = host=127.0.0.1 port=5433 auth_user=lookup

[users]
alice = pool_mode=transaction max_user_connections=7

[pgbouncer]
listen_addr = 127.0.0.1, ::1
listen_port = 6543
auth_type = md5
auth_file = userlist.txt
pool_mode = transaction
default_pool_size = 15
admin_users = admin, ops
stats_users = stats
server_idle_timeout = 0.5
so_reuseport = yes
syslog = 1
unix_socket_mode = 0700
verbose = 1
ignore_startup_parameters = extra_float_digits
server_round_robin = 1
log_connections = 0
log_disconnections = 0
";

#[test]
fn a_typical_file_maps_to_settings_and_entries() {
    let config = ini(TYPICAL);
    let settings = &config.pgtier;
    assert_eq!(settings.listen_addr.to_string(), "127.0.0.1,::1");
    assert_eq!(settings.listen_port, 6543);
    assert_eq!(settings.auth_type, AuthType::Md5);
    assert_eq!(
        settings.auth_file.as_deref(),
        Some(std::path::Path::new("/etc/pgbouncer/userlist.txt"))
    );
    assert_eq!(settings.pool_mode, PoolMode::Transaction);
    assert_eq!(settings.default_pool_size, 15);
    assert_eq!(settings.admin_users, ["admin", "ops"]);
    assert_eq!(settings.stats_users, ["stats"]);
    assert_eq!(
        settings.server_idle_timeout.duration(),
        Duration::from_millis(500)
    );
    assert!(settings.so_reuseport && settings.syslog);
    assert!(!settings.log_connections);
    assert_eq!(settings.unix_socket_mode, 0o700);
    assert_eq!(settings.log_level, "debug");
    assert_eq!(settings.ignore_startup_parameters, ["extra_float_digits"]);
    // Absent from the file: PgBouncer's default socket directory.
    assert_eq!(
        settings.unix_socket_dir.as_deref(),
        Some(std::path::Path::new("/tmp"))
    );

    let app = config.database("app").expect("app");
    assert_eq!(app.dbname, "appdb");
    assert_eq!(
        app.servers,
        ServerSet::Single(HostPort {
            host: "127.0.0.1".into(),
            port: 5433
        })
    );
    assert_eq!((app.pool_size, app.reserve_pool_size), (30, 3));
    assert_eq!(app.pool_mode, PoolMode::Session);

    let forced = config.database("forcedb").expect("forcedb");
    assert_eq!(forced.user.as_deref(), Some("baz"));
    assert_eq!(forced.password.as_deref(), Some("a b"));
    assert_eq!(forced.pool_mode, PoolMode::Transaction);
    assert_eq!(
        forced.connect_params,
        [
            ("client_encoding".to_string(), "UNICODE".to_string()),
            ("DateStyle".to_string(), "ISO".to_string()),
            ("TimeZone".to_string(), "UTC".to_string()),
        ]
    );

    let socket = config.database("sock").expect("sock");
    let ServerSet::Single(host) = &socket.servers else {
        panic!("{socket:?}")
    };
    assert_eq!(
        host.unix_socket().as_deref(),
        Some(std::path::Path::new("/var/run/postgresql/.s.PGSQL.5432"))
    );
    // No host: the server's socket in unix_socket_dir, as PgBouncer does.
    let foodb = config.database("foodb").expect("foodb");
    assert_eq!(
        foodb.servers,
        ServerSet::Single(HostPort {
            host: "/tmp".into(),
            port: 5432
        })
    );

    let alice = config.user("alice").expect("alice");
    assert_eq!(alice.pool_mode, Some(PoolMode::Transaction));
    assert_eq!(alice.max_user_connections, 7);

    assert_eq!(
        config.unhonoured,
        ["server_round_robin", "log_disconnections"]
    );
}

#[test]
fn the_star_entry_is_the_fallback() {
    let config = ini(TYPICAL);
    assert!(!config.databases.contains_key("*"));
    let fallback = config.fallback.as_ref().expect("fallback");
    assert_eq!(fallback.auth_user.as_deref(), Some("lookup"));
    let other = config
        .database_or_fallback("reports")
        .expect("instantiated");
    assert_eq!(
        (other.name.as_str(), other.dbname.as_str()),
        ("reports", "reports")
    );
    let template = config.database("reports").expect("template");
    assert_eq!(template.server_dbname("reports"), "reports");
    // Named entries win; the admin console is never the fallback's.
    assert_eq!(
        config.database("app").map(|db| db.name.as_str()),
        Some("app")
    );
    assert!(config.database("pgtier").is_none() && config.database("pgbouncer").is_none());
    // Without a `*` entry unknown names stay unknown.
    assert!(
        ini("[databases]\na = host=127.0.0.1\n[pgbouncer]\nauth_type = trust\n")
            .database("b")
            .is_none()
    );
}

#[test]
fn an_ini_and_a_toml_with_the_same_meaning_give_the_same_config() {
    let from_ini = ini("\
[databases]
app = host=127.0.0.1 port=5433 dbname=appdb pool_size=5
[users]
bob = pool_mode=session
[pgbouncer]
listen_addr = 127.0.0.1
unix_socket_dir =
auth_type = trust
pool_mode = transaction
query_wait_timeout = 30
");
    let from_toml = Config::from_str(
        r#"
[pgtier]
listen_addr = "127.0.0.1"
auth_type = "trust"
pool_mode = "transaction"
query_wait_timeout = 30
[databases.app]
host = "127.0.0.1"
port = 5433
dbname = "appdb"
pool_size = 5
[users.bob]
pool_mode = "session"
"#,
        ORIGIN,
    )
    .expect("toml");
    assert_eq!(from_ini, from_toml);
}

#[test]
fn statement_pooling_is_accepted_globally_per_database_and_per_user() {
    let config = ini("\
[databases]
app = host=127.0.0.1 port=5433 dbname=appdb
tx = host=127.0.0.1 port=5433 pool_mode=transaction
st = host=127.0.0.1 port=5433 pool_mode=STATEMENT
[users]
alice = pool_mode=statement
[pgbouncer]
auth_type = trust
pool_mode = Statement
");
    assert_eq!(config.pgtier.pool_mode, PoolMode::Statement);
    let tx = config.database("tx").expect("tx");
    assert_eq!(
        config.database("app").expect("app").pool_mode,
        PoolMode::Statement
    );
    assert_eq!(tx.pool_mode, PoolMode::Transaction);
    assert_eq!(
        config.database("st").expect("st").pool_mode,
        PoolMode::Statement
    );
    assert_eq!(config.pool_mode(tx, "alice"), PoolMode::Statement);
}

#[test]
fn host_lists_are_equivalent_hosts_as_written_not_replica_sets() {
    // PgBouncer's host list: names, addresses and repeats, all on the entry's port; a new
    // connection takes the next one (round-robin) unless load_balance_hosts says otherwise.
    let config = ini(
        "[databases]\nro = host=127.0.0.1,db1.example.com,127.0.0.1,::1 port=6000\n\
         lb = host=127.0.0.1,127.0.0.3 load_balance_hosts=Disable\n\
         [pgbouncer]\nauth_type = trust\n",
    );
    let ro = config.database("ro").expect("ro");
    let ServerSet::Hosts(list) = &ro.servers else {
        panic!("{ro:?}")
    };
    let hosts: Vec<String> = list.hosts.iter().map(ToString::to_string).collect();
    assert_eq!(
        hosts,
        [
            "127.0.0.1:6000",
            "db1.example.com:6000",
            "127.0.0.1:6000",
            "[::1]:6000"
        ]
    );
    assert_eq!(list.balance, LoadBalanceHosts::RoundRobin);
    let ServerSet::Hosts(list) = &config.database("lb").expect("lb").servers else {
        panic!("not a host list")
    };
    assert_eq!(list.balance, LoadBalanceHosts::Disable);
    assert_eq!(list.port(), 5432);
}

#[test]
fn load_balance_hosts_takes_pgbouncers_values_and_needs_a_list() {
    let message = ini_error(
        "[databases]\nro = host=127.0.0.1,127.0.0.2 load_balance_hosts=random\n[pgbouncer]\nauth_type = trust\n",
    );
    assert!(
        message.contains(
            ":2: [databases] ro: load_balance_hosts: invalid load_balance_hosts \"random\""
        ),
        "{message}"
    );
    let message = ini_error(
        "[databases]\nro = host=127.0.0.1 load_balance_hosts=disable\n[pgbouncer]\nauth_type = trust\n",
    );
    assert!(message.contains("needs a host list"), "{message}");
}

#[test]
fn misspelt_keys_name_file_line_and_the_likely_key() {
    assert_eq!(
        ini_error("[pgbouncer]\nauth_type = trust\n\n  defualt_pool_size = 3\n"),
        "/etc/pgbouncer/pgbouncer.ini:4: [pgbouncer] defualt_pool_size: PgBouncer 1.25 has no such \
         setting (did you mean \"default_pool_size\"?)"
    );
    assert_eq!(
        ini_error("[databases]\napp = host=x poolsize=3\n"),
        "/etc/pgbouncer/pgbouncer.ini:2: [databases] app: poolsize: PgBouncer 1.25 has no such \
         connection parameter (did you mean \"pool_size\"?)"
    );
    assert_eq!(
        ini_error("[users]\nbob = pool_mod=session\n"),
        "/etc/pgbouncer/pgbouncer.ini:2: [users] bob: pool_mod: PgBouncer 1.25 has no such user \
         setting (did you mean \"pool_mode\"?)"
    );
    assert_eq!(
        ini_error("[pgbouncr]\n"),
        "/etc/pgbouncer/pgbouncer.ini:1: [pgbouncr]: PgBouncer 1.25 has no such section (did you \
         mean \"pgbouncer\"?)"
    );
    assert!(ini_error("[pgbouncer]\nqwertyuiop = 1\n").ends_with("no such setting"));
}

#[test]
fn bad_values_name_file_line_and_key() {
    let cases = [
        (
            "[pgbouncer]\nlisten_port = http\n",
            ":2: [pgbouncer] listen_port: \"http\" is not a port number",
        ),
        (
            "[pgbouncer]\nauth_type = trust\nso_reuseport = maybe\n",
            ":3: [pgbouncer] so_reuseport: \"maybe\" is not a boolean",
        ),
        (
            "[pgbouncer]\nauth_type = trust\nquery_timeout = -1\n",
            ":3: [pgbouncer] query_timeout: \"-1\" is not a number of seconds",
        ),
        (
            "[pgbouncer]\nauth_type = pam\n",
            ":2: [pgbouncer] auth_type: pgtier has no PAM support",
        ),
        (
            "[pgbouncer]\nauth_type = trust\npool_mode = sometimes\n",
            ":3: [pgbouncer] pool_mode: unknown variant `sometimes`",
        ),
        (
            "[pgbouncer]\nauth_type = trust\nlisten_addr = localhost:6432\n",
            ":3: [pgbouncer] listen_addr: invalid IP address syntax",
        ),
        (
            "[pgbouncer]\nauth_type = trust\ndefault_pool_size = 0\n",
            ":3: [pgbouncer] default_pool_size: 0 is too small",
        ),
        (
            "[databases]\napp = host=127.0.0.1 min_pool_size=30\n[pgbouncer]\nauth_type = trust\n",
            ":2: [databases] app: min_pool_size: 30 is larger than the pool size (20)",
        ),
        (
            "[databases]\napp = host=127.0.0.1 password='open\n",
            ":2: [databases] app: password: the quoted value is not closed",
        ),
        (
            "[databases]\npgbouncer = host=127.0.0.1\n",
            ":2: [databases] pgbouncer: the name \"pgbouncer\" is reserved",
        ),
        (
            "[databases]\napp = host=@abstract\n",
            ":2: [databases] app: host: @abstract is a Unix socket in the abstract namespace",
        ),
        (
            "[databases]\napp =\n[pgbouncer]\nunix_socket_dir =\n",
            ":2: [databases] app: host: no host is set and unix_socket_dir is empty",
        ),
        (
            "listen_port = 1\n",
            ":1: listen_port: this setting comes before any [section] header",
        ),
        (
            "[pgbouncer]\nlisten_port\n",
            ":2: listen_port: expected key = value",
        ),
    ];
    for (text, expected) in cases {
        let message = ini_error(text);
        assert!(
            message.starts_with("/etc/pgbouncer/pgbouncer.ini") && message.contains(expected),
            "{text}\n  got: {message}\n  expected to contain: {expected}"
        );
    }
    // A whole-file rule with no single line names the ini and the key.
    assert_eq!(
        ini_error("[pgbouncer]\nlisten_port = 7000\n"),
        "/etc/pgbouncer/pgbouncer.ini: [pgbouncer] auth_file: auth_type = \"md5\" needs an \
         auth_file with the users' passwords"
    );
}

#[test]
fn comments_quoted_names_case_and_empty_values() {
    let config = ini("\
# comment
; another
[PgBouncer]
AUTH_TYPE = Trust
server_reset_query =
logfile = /var/log/x.log
logfile =
unix_socket_dir = /run/pg
[databases]
\"odd name\"\"s\" = host=127.0.0.1 dbname=x#y
");
    assert_eq!(config.pgtier.auth_type, AuthType::Trust);
    assert_eq!(config.pgtier.server_reset_query, "");
    assert_eq!(config.pgtier.logfile, None);
    assert_eq!(
        config.pgtier.unix_socket_dir.as_deref(),
        Some(std::path::Path::new("/run/pg"))
    );
    // No listen_addr: PgBouncer listens on no TCP address.
    assert!(config.pgtier.listen_addr.addrs().is_empty());
    assert_eq!(config.database("odd name\"s").expect("entry").dbname, "x#y");
    let none = ini("[pgbouncer]\nauth_type = trust\nunix_socket_dir =\n");
    assert_eq!(none.pgtier.unix_socket_dir, None);
}

#[test]
fn paths_are_relative_to_their_file_or_home() {
    let config = ini(
        "[pgbouncer]\nauth_type = trust\nlogfile = log/pgbouncer.log\npidfile = /run/p.pid\nauth_hba_file = ~/hba.conf\n",
    );
    assert_eq!(
        config.pgtier.logfile,
        Some(PathBuf::from("/etc/pgbouncer/log/pgbouncer.log"))
    );
    assert_eq!(config.pgtier.pidfile, Some(PathBuf::from("/run/p.pid")));
    if let Some(home) = std::env::var_os("HOME") {
        assert_eq!(
            config.pgtier.auth_hba_file,
            Some(PathBuf::from(home).join("hba.conf"))
        );
    }
}

#[test]
fn includes_are_followed_relative_to_the_including_file() {
    let dir = Dir::new("include");
    std::fs::create_dir_all(dir.0.join("conf.d")).expect("dir");
    dir.write(
        "conf.d/databases.ini",
        "[databases]\napp = host=127.0.0.1 port=5999\n%include more.ini\n",
    );
    dir.write(
        "conf.d/more.ini",
        "other = host=127.0.0.1\n[pgbouncer]\nlisten_port = 7001\n",
    );
    let main = dir.write(
        "pgbouncer.ini",
        "[pgbouncer]\nauth_type = trust\n%include conf.d/databases.ini\ndefault_pool_size = 4\n",
    );
    let config = Config::load(&main).expect("load");
    assert_eq!(
        config.database("app").map(|db| &db.servers),
        Some(&ServerSet::Single(HostPort {
            host: "127.0.0.1".into(),
            port: 5999
        }))
    );
    assert!(config.database("other").is_some());
    assert_eq!(config.pgtier.listen_port, 7001);
    // The section the include left open goes on in the including file.
    assert_eq!(config.pgtier.default_pool_size, 4);
    assert_eq!(config.file, main);

    // An error in an included file names that file and its line.
    let bad = dir.write(
        "bad.ini",
        "[pgbouncer]\nauth_type = trust\n%include conf.d/typo.ini\n",
    );
    dir.write("conf.d/typo.ini", "\nlisten_prot = 1\n");
    let message = Config::load(&bad).expect_err("typo").to_string();
    assert!(
        message.contains("conf.d/typo.ini:2: [pgbouncer] listen_prot"),
        "{message}"
    );
}

#[test]
fn include_cycles_and_missing_files_are_errors() {
    let dir = Dir::new("cycle");
    let a = dir.write("a.ini", "[pgbouncer]\n%include b.ini\n");
    dir.write("b.ini", "%include a.ini\n");
    let message = Config::load(&a).expect_err("cycle").to_string();
    assert!(
        message.contains("b.ini:1: %include: ") && message.contains("include cycle"),
        "{message}"
    );
    let itself = dir.write("self.ini", "%include self.ini\n");
    assert!(
        Config::load(&itself)
            .expect_err("self")
            .to_string()
            .contains("include cycle")
    );
    let missing = dir.write("missing.ini", "[pgbouncer]\n%include nowhere.ini\n");
    let message = Config::load(&missing).expect_err("missing").to_string();
    assert!(
        message.contains("missing.ini:2: %include: cannot read nowhere.ini"),
        "{message}"
    );
    // A chain deeper than the limit stops (each file includes the next).
    for depth in 0..=super::lexer::MAX_INCLUDE_DEPTH + 1 {
        dir.write(
            &format!("deep{depth}.ini"),
            &format!("%include deep{}.ini\n", depth + 1),
        );
    }
    let deep = dir.0.join("deep0.ini");
    let message = Config::load(&deep).expect_err("deep").to_string();
    assert!(message.contains("nested more than"), "{message}");
}

#[test]
fn unhonoured_keys_are_listed_once_and_never_fatal() {
    let config = ini("\
[databases]
app = host=127.0.0.1 connect_query='SELECT 1'
[pgbouncer]
auth_type = trust
tcp_keepalive = 1
tcp_keepalive = 0
dns_max_ttl = 15
[peers]
1 = host=/tmp/pgbouncer1
");
    assert_eq!(config.unhonoured, ["tcp_keepalive", "dns_max_ttl"]);
}

#[test]
fn peers_are_read_with_pgbouncers_keys_and_defaults() {
    let config = ini("\
[pgbouncer]
auth_type = trust
peer_id = 2
[peers]
1 = host=/tmp/pgbouncer1
3 = host=10.0.0.3 port=6500 pool_size=4
");
    assert_eq!(config.pgtier.peer_id, 2);
    let first = &config.peers[&1];
    assert_eq!(
        (first.addr.host.as_str(), first.addr.port),
        ("/tmp/pgbouncer1", 6432)
    );
    assert_eq!(first.pool_size, None);
    let third = &config.peers[&3];
    assert_eq!(
        (third.addr.host.as_str(), third.addr.port),
        ("10.0.0.3", 6500)
    );
    assert_eq!(third.pool_size, Some(4));
    for (text, expected) in [
        ("0 = host=x", "ids of peers must be a number"),
        ("x = host=x", "ids of peers must be a number"),
        ("1 = port=5", "host was not provided for peer 1"),
        ("1 = host=x dbname=y", "no such peer setting"),
    ] {
        let message = ini_error(&format!(
            "[pgbouncer]\nauth_type = trust\n[peers]\n{text}\n"
        ));
        assert!(message.contains(expected), "{text}: {message}");
    }
}

#[test]
fn a_databases_connect_query_is_read() {
    let config = ini("\
[databases]
app = host=127.0.0.1 connect_query='set enable_seqscan=off; set enable_nestloop=off'
plain = host=127.0.0.1
[pgbouncer]
auth_type = trust
");
    let app = config.database("app").expect("app");
    assert_eq!(
        app.connect_query.as_deref(),
        Some("set enable_seqscan=off; set enable_nestloop=off")
    );
    assert_eq!(config.database("plain").expect("plain").connect_query, None);
}

#[test]
fn the_format_follows_from_the_extension_or_the_content() {
    let dir = Dir::new("format");
    let ini_text = "[pgbouncer]\nauth_type = trust\nlisten_port = 7100\n";
    for name in ["pgbouncer.ini", "pgbouncer.conf", "PGB.INI"] {
        let path = dir.write(name, ini_text);
        assert_eq!(
            Config::load(&path).expect(name).pgtier.listen_port,
            7100,
            "{name}"
        );
    }
    let path = dir.write(
        "users-first",
        "; x\n\n[users]\na = pool_mode=session\n[pgbouncer]\nauth_type = trust\n",
    );
    assert!(Config::load(&path).expect("content").user("a").is_some());
    let toml = dir.write(
        "pgtier.conf",
        "[pgtier]\nauth_type = \"trust\"\nlisten_port = 7200\n",
    );
    assert_eq!(Config::load(&toml).expect("toml").pgtier.listen_port, 7200);
}

#[test]
fn a_toml_file_can_start_from_an_ini_and_extend_it() {
    let dir = Dir::new("overlay");
    dir.write("userlist.txt", "\"a\" \"b\"\n");
    dir.write(
        "pgbouncer.ini",
        "[databases]\napp = host=127.0.0.1 port=5433 pool_size=7\nro = host=127.0.0.1 port=5434\n\
         [users]\nbob = max_user_connections=3\n\
         [pgbouncer]\nauth_type = md5\nauth_file = userlist.txt\nlisten_addr = 127.0.0.1\n\
         default_pool_size = 9\nserver_round_robin = 1\n",
    );
    let toml = dir.write(
        "pgtier.toml",
        r#"
[pgtier]
pgbouncer_ini = "pgbouncer.ini"
default_pool_size = 11
workers = 2
[databases.app]
class = "premium"
[databases.ro]
replicas = ["127.0.0.1:5435", "127.0.0.1:5436"]
[databases.extra]
host = "127.0.0.1"
[users.bob]
class = "premium"
"#,
    );
    let config = Config::load(&toml).expect("overlay");
    assert_eq!(config.file, toml);
    assert_eq!(config.pgtier.default_pool_size, 11);
    assert_eq!(config.pgtier.workers, Some(2));
    assert_eq!(config.pgtier.auth_file, Some(dir.0.join("userlist.txt")));
    assert_eq!(
        config.pgtier.pgbouncer_ini,
        Some(dir.0.join("pgbouncer.ini"))
    );
    let app = config.database("app").expect("app");
    assert_eq!(
        (app.pool_size, app.class),
        (7, crate::class::ClassSetting::PREMIUM)
    );
    let ServerSet::Replicas(set) = &config.database("ro").expect("ro").servers else {
        panic!("replicas replace the ini's host")
    };
    assert_eq!(set.replicas.len(), 2);
    assert!(config.database("extra").is_some());
    let bob = config.user("bob").expect("bob");
    assert_eq!(
        (bob.max_user_connections, bob.class),
        (3, Some(crate::class::ClassSetting::PREMIUM))
    );
    assert_eq!(config.unhonoured, ["server_round_robin"]);

    // The TOML's own mistakes name the TOML file and line; the ini's name the ini.
    let bad = dir.write(
        "bad.toml",
        "[pgtier]\npgbouncer_ini = \"pgbouncer.ini\"\n\nworkers = 0\n",
    );
    let message = Config::load(&bad).expect_err("workers").to_string();
    assert!(
        message.ends_with("bad.toml:4: pgtier.workers: 0 is too small: must be at least 1"),
        "{message}"
    );
    dir.write(
        "typo.ini",
        "[pgbouncer]\nauth_type = trust\nlisten_prot = 1\n",
    );
    let bad = dir.write("typo.toml", "[pgtier]\npgbouncer_ini = \"typo.ini\"\n");
    let message = Config::load(&bad).expect_err("typo").to_string();
    assert!(
        message.contains("typo.ini:3: [pgbouncer] listen_prot"),
        "{message}"
    );
    let bad = dir.write(
        "unknown.toml",
        "[pgtier]\npgbouncer_ini = \"pgbouncer.ini\"\nnot_a_key = 1\n",
    );
    let message = Config::load(&bad).expect_err("unknown").to_string();
    assert!(message.contains("unknown.toml:3: "), "{message}");
}

#[test]
fn arbitrary_ini_text_never_panics() {
    for text in [
        "[",
        "[]",
        "=",
        "\"",
        "\"a",
        "\"a\"",
        "\"a\" x",
        "[databases]\n=\n",
        "[databases]\na = '",
        "[databases]\na = host",
        "[users]\n\"\" = x=1",
        "%include",
        "[pgbouncer]\nverbose = x",
        "[pgbouncer]\nunix_socket_mode = 0999",
        "[databases]\na = port=0",
    ] {
        let _ = Config::from_ini_str(text, ORIGIN);
    }
}

#[test]
fn the_reference_lists_every_pgbouncer_key_as_honoured_or_not() {
    let reference = include_str!("../../../../docs/config.md");
    let section = reference
        .split("## Running a pgbouncer.ini")
        .nth(1)
        .expect("the section on running a pgbouncer.ini");
    let honoured = section
        .split("- **honoured**:")
        .nth(1)
        .and_then(|rest| rest.split("- **read but not honoured**:").next())
        .expect("the honoured list");
    let unhonoured = section
        .split("- **read but not honoured**:")
        .nth(1)
        .and_then(|rest| rest.split("- **anything else**").next())
        .expect("the unhonoured list");
    for (key, is_honoured) in pgbouncer_keys() {
        let list = if is_honoured { honoured } else { unhonoured };
        assert!(
            list.contains(&format!("`{key}`")),
            "docs/config.md does not list `{key}` as {}",
            if is_honoured {
                "honoured"
            } else {
                "not honoured"
            }
        );
    }
}

#[test]
fn pgbouncer_125_database_and_user_keys_map_with_pgbouncers_precedence() {
    let config = ini("\
[databases]
app = host=127.0.0.1 reserve_pool_size=4 server_lifetime=7 max_db_client_connections=9 query_wait_timeout=3 auth_dbname=authdb auth_query='SELECT 1, 2' auth_user=look
authdb = host=127.0.0.1 query_wait_timeout=-1 server_lifetime=0
old = host=127.0.0.1 reserve_pool=2
hosts = host=127.0.0.1,127.0.0.2 load_balance_hosts=Disable
[users]
alice = pool_size=2 reserve_pool_size=1 max_user_client_connections=5 query_timeout=11 idle_transaction_timeout=0 client_idle_timeout=13 query_wait_timeout=0 transaction_timeout=4
[pgbouncer]
auth_type = trust
default_pool_size = 6
server_lifetime = 100
query_wait_timeout = 50
query_timeout = 20
idle_transaction_timeout = 30
max_db_client_connections = 40
max_user_client_connections = 50
auth_dbname = authdb
");
    let app = &config.databases["app"];
    let authdb = &config.databases["authdb"];
    assert_eq!(app.reserve_pool_size, 4);
    assert_eq!(config.databases["old"].reserve_pool_size, 2);
    assert_eq!(app.server_lifetime, Seconds::from_secs(7));
    // 0 in an entry is "not set" for server_lifetime; -1 for query_wait_timeout.
    assert_eq!(authdb.server_lifetime, Seconds::from_secs(100));
    assert_eq!(authdb.query_wait_timeout, None);
    assert_eq!(app.max_db_client_connections, 9);
    assert_eq!(authdb.max_db_client_connections, 40);
    assert_eq!(app.auth_dbname.as_deref(), Some("authdb"));
    assert_eq!(app.auth_query, "SELECT 1, 2");
    assert_eq!(authdb.auth_dbname.as_deref(), Some("authdb"));
    let ServerSet::Hosts(list) = &config.databases["hosts"].servers else {
        panic!("a host list");
    };
    assert_eq!(list.balance, LoadBalanceHosts::Disable);
    // A user's value beats the entry's, which beats the global one.
    assert_eq!(config.pool_size(Some(app), "alice"), 2);
    assert_eq!(config.pool_size(Some(app), "bob"), 6);
    assert_eq!(config.reserve_pool_size(Some(app), "alice"), 1);
    assert_eq!(config.reserve_pool_size(Some(app), "bob"), 4);
    assert_eq!(config.max_user_client_connections("alice"), 5);
    assert_eq!(config.max_user_client_connections("bob"), 50);
    assert_eq!(
        config.query_wait_timeout(Some(app), "alice"),
        Seconds::from_secs(0)
    );
    assert_eq!(
        config.query_wait_timeout(Some(app), "bob"),
        Seconds::from_secs(3)
    );
    assert_eq!(
        config.query_wait_timeout(Some(authdb), "bob"),
        Seconds::from_secs(50)
    );
    let alice = config.client_timeouts("alice");
    assert_eq!(alice.query_timeout, Seconds::from_secs(11));
    // 0 in [users] is "not set" for these: the global value applies.
    assert_eq!(alice.idle_transaction_timeout, Seconds::from_secs(30));
    assert_eq!(alice.client_idle_timeout, Seconds::from_secs(13));
    assert_eq!(
        config.client_timeouts("bob").query_timeout,
        Seconds::from_secs(20)
    );
    assert!(config.has_own_client_timeouts());
    assert_eq!(alice.transaction_timeout, Seconds::from_secs(4));
    assert_eq!(
        config.client_timeouts("bob").transaction_timeout,
        Seconds::ZERO
    );
    assert!(config.unhonoured.is_empty(), "{:?}", config.unhonoured);
}

#[test]
fn pgbouncer_125_values_pgtier_refuses_say_why() {
    let message = ini_error("[databases]\na = host=x load_balance_hosts=random\n");
    assert!(
        message.contains("load_balance_hosts") && message.contains("round-robin or disable"),
        "{message}"
    );
    let message = ini_error("[pgbouncer]\nauth_type = trust\nauth_dbname = pgbouncer\n");
    assert!(
        message.contains("cannot use the reserved \"pgbouncer\" database as an auth_dbname"),
        "{message}"
    );
    let message = ini_error("[users]\nbob = connect_query=x\n");
    assert!(
        message.contains("PgBouncer 1.25 has no such user setting"),
        "{message}"
    );
    // Every key of PgBouncer 1.25 is accepted: none gets "no such setting".
    for key in [
        "track_extra_parameters = a",
        "peer_id = 1",
        "scram_iterations = 4096",
        "auth_ident_file = x",
        "client_tls13_ciphers = x",
        "server_tls13_ciphers = x",
        "query_wait_notify = 5",
        "transaction_timeout = 1",
        "pool_idle_timeout = 1",
        "cancel_wait_timeout = 1",
        "login_notify_message = hi",
        "auth_ldap_options = x",
    ] {
        ini(&format!(
            "[pgbouncer]\nauth_type = trust\n{key}\n[peers]\n1 = host=127.0.0.1\n"
        ));
    }
}

#[test]
fn target_session_attrs_is_pgtiers_and_stays_in_toml() {
    let message = ini_error("[databases]\napp = host=a,b target_session_attrs=read-write\n");
    assert!(
        message.contains("no such connection parameter") && message.contains("pgbouncer_ini"),
        "{message}"
    );
}
