//! The admin console as PgBouncer's users know it: every PgBouncer SHOW command answers with
//! PgBouncer 1.18's column names, order and types (checked against the documentation, and
//! against a live PgBouncer 1.18 when `/usr/sbin/pgbouncer` is installed), the database
//! `pgbouncer` is the console, `stats_users` may only look, and drivers that send the
//! extended protocol for a plain `SHOW` (rust-postgres, psycopg 3) get their rows, as do the
//! simple-protocol ones (psql, psycopg2).

use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use pgtier_tests::fixtures::{PSQL_TIMEOUT, sqlstate, start_proxy};
use pgtier_tests::process::{pg_tool, run};
use pgtier_tests::rawwire::{self, RawSession};
use pgtier_tests::shared_server::shared_server;
use pgtier_tests::{Pgtier, ProxyConfig, TempDir, free_port};
use postgres::Client;

/// Type OIDs PgBouncer declares.
const TEXT: u32 = 25;
const INT4: u32 = 23;
const INT8: u32 = 20;
const BYTEA: u32 = 17;

type Columns = &'static [(&'static str, u32)];

/// `man 1 pgbouncer`, section SHOW CLIENTS / SHOW SERVERS (PgBouncer 1.25, which added
/// `replication`, `prepared_statements` and `id`; types as its RowDescription declares them).
const CONN: Columns = &[
    ("type", TEXT),
    ("user", TEXT),
    ("database", TEXT),
    ("replication", TEXT),
    ("state", TEXT),
    ("addr", TEXT),
    ("port", INT4),
    ("local_addr", TEXT),
    ("local_port", INT4),
    ("connect_time", TEXT),
    ("request_time", TEXT),
    ("wait", INT4),
    ("wait_us", INT4),
    ("close_needed", INT4),
    ("ptr", TEXT),
    ("link", TEXT),
    ("remote_pid", INT4),
    ("tls", TEXT),
    ("application_name", TEXT),
    ("prepared_statements", INT4),
    ("id", INT4),
];

/// `man 1 pgbouncer`, SHOW SOCKETS, SHOW ACTIVE_SOCKETS: SHOW CLIENTS' columns, then these.
const SOCKET_BUFFERS: Columns = &[
    ("recv_pos", INT4),
    ("pkt_pos", INT4),
    ("pkt_remain", INT4),
    ("send_pos", INT4),
    ("send_remain", INT4),
    ("pkt_avail", INT4),
    ("send_avail", INT4),
];

/// `man 1 pgbouncer`, SHOW POOLS (PgBouncer 1.25, which added `load_balance_hosts`).
const POOLS: Columns = &[
    ("database", TEXT),
    ("user", TEXT),
    ("cl_active", INT4),
    ("cl_waiting", INT4),
    ("cl_active_cancel_req", INT4),
    ("cl_waiting_cancel_req", INT4),
    ("sv_active", INT4),
    ("sv_active_cancel", INT4),
    ("sv_being_canceled", INT4),
    ("sv_idle", INT4),
    ("sv_used", INT4),
    ("sv_tested", INT4),
    ("sv_login", INT4),
    ("maxwait", INT4),
    ("maxwait_us", INT4),
    ("pool_mode", TEXT),
    ("load_balance_hosts", TEXT),
];

/// PgBouncer 1.25's SHOW DATABASES (1.18 had `reserve_pool` and no server_lifetime,
/// load_balance_hosts or client counts).
const DATABASES: Columns = &[
    ("name", TEXT),
    ("host", TEXT),
    ("port", INT4),
    ("database", TEXT),
    ("force_user", TEXT),
    ("pool_size", INT4),
    ("min_pool_size", INT4),
    ("reserve_pool_size", INT4),
    ("server_lifetime", INT4),
    ("pool_mode", TEXT),
    ("load_balance_hosts", TEXT),
    ("max_connections", INT4),
    ("current_connections", INT4),
    ("max_client_connections", INT4),
    ("current_client_connections", INT4),
    ("paused", INT4),
    ("disabled", INT4),
];

/// PgBouncer 1.25's SHOW USERS (1.18 had only name and pool_mode).
const USERS: Columns = &[
    ("name", TEXT),
    ("pool_size", TEXT),
    ("reserve_pool_size", TEXT),
    ("pool_mode", TEXT),
    ("max_user_connections", INT4),
    ("current_connections", INT4),
    ("max_user_client_connections", INT4),
    ("current_client_connections", INT4),
];
/// `man 1 pgbouncer`, SHOW LISTS (shown as rows of list and items).
const LISTS: Columns = &[("list", TEXT), ("items", INT4)];
/// `man 1 pgbouncer`, SHOW CONFIG.
const CONFIG: Columns = &[
    ("key", TEXT),
    ("value", TEXT),
    ("default", TEXT),
    ("changeable", TEXT),
];
/// `man 1 pgbouncer`, SHOW MEM.
const MEM: Columns = &[
    ("name", TEXT),
    ("size", INT4),
    ("used", INT4),
    ("free", INT4),
    ("memtotal", INT4),
];
/// `man 1 pgbouncer`, SHOW FDS.
const FDS: Columns = &[
    ("fd", INT4),
    ("task", TEXT),
    ("user", TEXT),
    ("database", TEXT),
    ("addr", TEXT),
    ("port", INT4),
    ("cancel", INT8),
    ("link", INT4),
    ("client_encoding", TEXT),
    ("std_strings", TEXT),
    ("datestyle", TEXT),
    ("timezone", TEXT),
    ("password", TEXT),
    ("scram_client_key", BYTEA),
    ("scram_server_key", BYTEA),
];
/// `man 1 pgbouncer`, SHOW DNS_HOSTS.
const DNS_HOSTS: Columns = &[("hostname", TEXT), ("ttl", INT8), ("addrs", TEXT)];
/// `man 1 pgbouncer`, SHOW DNS_ZONES.
const DNS_ZONES: Columns = &[("zonename", TEXT), ("serial", INT8), ("count", INT4)];
/// `man 1 pgbouncer`, SHOW VERSION.
const VERSION: Columns = &[("version", TEXT)];
/// PgBouncer 1.19's documentation, SHOW STATE (1.18 has no SHOW STATE).
const STATE: Columns = &[("key", TEXT), ("value", TEXT)];

/// A SHOW command, its documented columns, and whether PgBouncer 1.18 has it with them.
type Documented = (&'static str, Vec<(&'static str, u32)>, bool);

/// Every SHOW of this slice with its documented columns.
fn documented() -> Vec<Documented> {
    let sockets: Vec<_> = CONN.iter().chain(SOCKET_BUFFERS).copied().collect();
    vec![
        // 1.25's columns: the live PgBouncer here is 1.18.
        ("POOLS", POOLS.to_vec(), false),
        ("CLIENTS", CONN.to_vec(), false),
        ("SERVERS", CONN.to_vec(), false),
        ("SOCKETS", sockets.clone(), false),
        ("ACTIVE_SOCKETS", sockets, false),
        ("DATABASES", DATABASES.to_vec(), false),
        ("USERS", USERS.to_vec(), false),
        ("LISTS", LISTS.to_vec(), true),
        ("CONFIG", CONFIG.to_vec(), true),
        ("MEM", MEM.to_vec(), true),
        ("FDS", FDS.to_vec(), true),
        ("DNS_HOSTS", DNS_HOSTS.to_vec(), true),
        ("DNS_ZONES", DNS_ZONES.to_vec(), true),
        ("VERSION", VERSION.to_vec(), true),
        ("STATE", STATE.to_vec(), false),
    ]
}

/// A proxy with two shards, an admin, a stats user and a user with no console rights.
fn console_proxy() -> Pgtier {
    let pg = shared_server();
    let mut config = ProxyConfig::new(pg.port())
        .user("admin", "")
        .user("watcher", "")
        .user("nobody", "")
        .setting("admin_users", "[\"admin\"]")
        .setting("stats_users", "[\"watcher\"]");
    config.workers = 2;
    start_proxy(config)
}

/// The server's message text of a database error.
fn message(error: &postgres::Error) -> String {
    error
        .as_db_error()
        .map(|db| db.message().to_string())
        .unwrap_or_else(|| error.to_string())
}

/// (name, type OID) of the columns `client` gets for `query`, through the extended protocol
/// (rust-postgres prepares every query).
fn described(client: &mut Client, query: &str) -> Vec<(String, u32)> {
    let statement = client
        .prepare(query)
        .unwrap_or_else(|e| panic!("{query}: {e}"));
    statement
        .columns()
        .iter()
        .map(|c| (c.name().to_string(), c.type_().oid()))
        .collect()
}

/// (name, type OID) of the RowDescription `session` gets for `query` (simple protocol).
fn described_simple(session: &mut RawSession, query: &str) -> Vec<(String, u32)> {
    let messages = session
        .simple_query(query)
        .unwrap_or_else(|e| panic!("{query}: {e}"));
    if let Some(error) = messages.iter().find(|m| m.tag == b'E') {
        panic!("{query}: {:?}", error.field(b'M'));
    }
    let description = messages
        .iter()
        .find(|m| m.tag == b'T')
        .unwrap_or_else(|| panic!("{query}: no RowDescription"));
    let body = &description.body;
    let count = u16::from_be_bytes([body[0], body[1]]);
    let mut at = 2;
    (0..count)
        .map(|_| {
            let end = at + body[at..].iter().position(|b| *b == 0).expect("name");
            let name = String::from_utf8_lossy(&body[at..end]).into_owned();
            let oid_at = end + 1 + 6;
            let oid = u32::from_be_bytes([
                body[oid_at],
                body[oid_at + 1],
                body[oid_at + 2],
                body[oid_at + 3],
            ]);
            at = end + 1 + 18;
            (name, oid)
        })
        .collect()
}

fn owned(columns: &[(&str, u32)]) -> Vec<(String, u32)> {
    columns
        .iter()
        .map(|(name, oid)| (name.to_string(), *oid))
        .collect()
}

#[test]
fn every_show_has_pgbouncers_columns_in_order_with_its_types() {
    let proxy = console_proxy();
    let mut user = proxy
        .connect("postgres", "postgres")
        .expect("a pooled client");
    user.simple_query("SELECT 1").expect("a server is opened");
    let mut console = proxy.connect("pgbouncer", "admin").expect("the console");
    let mut raw = rawwire::login(proxy.port(), "admin", "pgbouncer", Duration::from_secs(10))
        .expect("raw console session");
    let live = LivePgBouncer::start();
    let mut live_session = live.as_ref().map(LivePgBouncer::connect);
    match &live {
        None => eprintln!("no /usr/sbin/pgbouncer: comparing with the documented columns only"),
        Some(live) => eprintln!("comparing with a live PgBouncer on port {}", live.port),
    }
    for (command, documented, in_118) in documented() {
        let query = format!("SHOW {command}");
        let ours = described(&mut console, &query);
        assert!(
            ours.len() >= documented.len() && ours[..documented.len()] == owned(&documented)[..],
            "{query}: pgtier's columns {ours:?} do not start with PgBouncer's {documented:?}"
        );
        assert_eq!(
            described_simple(&mut raw, &query),
            ours,
            "{query}: the simple protocol describes the same columns"
        );
        if let (Some(live_session), true) = (live_session.as_mut(), in_118) {
            // PgBouncer's console speaks the simple protocol only.
            let theirs = described_simple(live_session, &query);
            assert_eq!(
                ours[..theirs.len()],
                theirs[..],
                "{query}: pgtier's columns differ from the live PgBouncer's"
            );
            assert_eq!(
                theirs.len(),
                documented.len(),
                "{query}: doc and PgBouncer agree"
            );
        }
        // The rows come through the extended protocol too, typed.
        console
            .query(query.as_str(), &[])
            .unwrap_or_else(|e| panic!("{query}: {e}"));
    }
    // One row per (database, user) across both shards, with typed counts.
    let pools = console.query("SHOW POOLS", &[]).expect("SHOW POOLS");
    let postgres_pool: Vec<_> = pools
        .iter()
        .filter(|row| row.get::<_, &str>("database") == "postgres")
        .collect();
    assert_eq!(postgres_pool.len(), 1, "one row for postgres/postgres");
    let row = postgres_pool[0];
    assert_eq!(row.get::<_, &str>("user"), "postgres");
    assert_eq!(row.get::<_, i32>("cl_active"), 1);
    assert_eq!(
        row.get::<_, i32>("sv_idle") + row.get::<_, i32>("sv_used"),
        1,
        "its one server is back"
    );
    assert_eq!(row.get::<_, &str>("pool_mode"), "transaction");
    let servers = console.query("SHOW SERVERS", &[]).expect("SHOW SERVERS");
    assert_eq!(servers.len(), 1);
    assert!(
        servers[0].get::<_, i32>("remote_pid") > 0,
        "the backend pid"
    );
    // psql, as a runbook has it.
    let out = run(
        pg_tool("psql")
            .args(["-XAt", "-F", ",", "-d"])
            .arg(proxy.conninfo("pgbouncer", "admin"))
            .args(["-c", "SHOW POOLS"]),
        PSQL_TIMEOUT,
    )
    .expect("psql");
    assert!(out.success(), "{}", out.stderr);
    assert!(
        out.stdout
            .lines()
            .any(|line| line.starts_with("postgres,postgres,1,0,")),
        "{}",
        out.stdout
    );
}

#[test]
fn stats_users_may_show_and_nothing_more_others_are_refused() {
    let proxy = console_proxy();
    let mut watcher = proxy
        .connect("pgbouncer", "watcher")
        .expect("stats user logs in");
    watcher.simple_query("SHOW POOLS").expect("SHOW POOLS");
    watcher.query("SHOW CLIENTS", &[]).expect("SHOW CLIENTS");
    for statement in ["SHOW FDS", "PAUSE", "RELOAD", "KILL postgres"] {
        let error = watcher
            .simple_query(statement)
            .expect_err("admin access needed");
        assert_eq!(sqlstate(&error).as_deref(), Some("08P01"), "{statement}");
        assert_eq!(message(&error), "admin access needed");
    }
    watcher
        .simple_query("SHOW VERSION")
        .expect("the session goes on");
    let error = proxy.connect_error("pgbouncer", "nobody");
    assert_eq!(sqlstate(&error).as_deref(), Some("08P01"), "{error}");
    assert_eq!(message(&error), "not allowed");
    let mut admin = proxy.connect("pgtier", "admin").expect("admin on pgtier");
    admin.simple_query("SHOW FDS").expect("an admin may");
    let rows = admin.query("SHOW CLIENTS", &[]).expect("SHOW CLIENTS");
    let mut ptrs: Vec<String> = rows.iter().map(|row| row.get::<_, String>("ptr")).collect();
    ptrs.sort();
    ptrs.dedup();
    assert_eq!(ptrs.len(), rows.len(), "ptr is unique");
}

#[test]
fn drivers_using_the_extended_protocol_get_their_rows() {
    let proxy = console_proxy();
    let mut admin = proxy.connect("pgbouncer", "admin").expect("console");
    // A named statement, reused across syncs, then closed.
    let statement = admin.prepare("SHOW LISTS").expect("prepare");
    for _ in 0..2 {
        let rows = admin.query(&statement, &[]).expect("execute");
        let lists: Vec<(String, i32)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
        assert_eq!(lists.len(), 12);
        assert_eq!(lists[0].0, "databases");
    }
    drop(statement);
    // Parameters make no sense on the console: refused, and the rest skipped to the Sync,
    // as PostgreSQL does; an unnamed Parse/Bind/Describe/Execute/Sync gets its rows.
    let mut raw = rawwire::login(proxy.port(), "admin", "pgbouncer", Duration::from_secs(10))
        .expect("raw console session");
    let mut wire = rawwire::parse_typed_message("", "SHOW POOLS", &[23]);
    wire.extend(rawwire::bind_message("", &["1"]));
    wire.extend(rawwire::execute_message());
    wire.extend(rawwire::sync_message());
    wire.extend(rawwire::parse_message("", "SHOW VERSION"));
    wire.extend(rawwire::bind_message("", &["1"]));
    wire.extend(rawwire::sync_message());
    wire.extend(rawwire::parse_message("", "SHOW VERSION"));
    wire.extend(rawwire::bind_message("", &[]));
    wire.extend(rawwire::describe_portal_message());
    wire.extend(rawwire::execute_message());
    wire.extend(rawwire::sync_message());
    raw.stream.write_all(&wire).expect("send");
    let mut tags = String::new();
    let mut codes = Vec::new();
    for _ in 0..3 {
        for message in raw.read_until_ready().expect("answers") {
            tags.push(message.tag as char);
            codes.extend(message.sqlstate());
        }
    }
    assert_eq!(tags, "EZ1EZ12TDCZ");
    assert_eq!(codes, ["08P01", "08P01"]);
    admin
        .simple_query("SHOW VERSION")
        .expect("the session goes on");
    let error = admin
        .query("SELECT 1", &[])
        .expect_err("not a console command");
    assert_eq!(sqlstate(&error).as_deref(), Some("0A000"), "{error}");
    admin.query("SHOW STATE", &[]).expect("and on again");
    python_drivers(&proxy);
}

/// psycopg2 (simple protocol) and psycopg 3 (extended protocol), where installed
/// (`scripts/install-deps.sh` installs both).
fn python_drivers(proxy: &Pgtier) {
    let script = format!(
        r#"
import importlib, sys
port = {port}
done = []
for name in ("psycopg2", "psycopg"):
    try:
        driver = importlib.import_module(name)
    except ImportError:
        print("skip", name, "not installed", file=sys.stderr)
        continue
    conn = driver.connect(host="127.0.0.1", port=port, user="watcher", dbname="pgbouncer")
    conn.autocommit = True
    cur = conn.cursor()
    cur.execute("SHOW POOLS")
    names = [d[0] for d in cur.description]
    assert names[:3] == ["database", "user", "cl_active"], names
    rows = cur.fetchall()
    assert any(r[0] == "pgbouncer" for r in rows), rows
    assert isinstance(rows[0][2], int), rows
    cur.execute("SHOW CONFIG")
    assert len(cur.fetchall()) > 50
    if name == "psycopg":
        # psycopg 3 sends the extended protocol; also as a named statement, in binary.
        for _ in range(2):
            cur.execute("SHOW LISTS", prepare=True)
            assert dict(cur.fetchall())["databases"] >= 2
        cur.execute("SHOW POOLS", binary=True)
        assert isinstance(cur.fetchall()[0][2], int)
    conn.close()
    done.append(name)
print(",".join(done))
"#,
        port = proxy.port()
    );
    let python = if Path::new("/usr/bin/python3").exists() {
        "/usr/bin/python3"
    } else {
        "python3"
    };
    let out = run(Command::new(python).args(["-c", &script]), PSQL_TIMEOUT).expect("python3");
    assert!(
        out.success(),
        "python drivers: {}\n{}",
        out.stdout,
        out.stderr
    );
    eprintln!(
        "python drivers checked: {} {}",
        out.stdout.trim(),
        out.stderr.trim()
    );
}

/// A PgBouncer 1.18 on a free port with a minimal ini, for comparing RowDescriptions.
struct LivePgBouncer {
    child: Child,
    port: u16,
    _dir: TempDir,
}

impl LivePgBouncer {
    const BINARY: &'static str = "/usr/sbin/pgbouncer";

    fn start() -> Option<LivePgBouncer> {
        if !Path::new(Self::BINARY).exists() {
            return None;
        }
        let dir = TempDir::new("pgbouncer").expect("temp dir");
        let port = free_port().expect("a free port");
        let users = dir.path().join("users.txt");
        std::fs::write(&users, "\"admin\" \"\"\n").expect("userlist");
        let ini = dir.path().join("pgbouncer.ini");
        std::fs::write(
            &ini,
            format!(
                "[databases]\ndb = host=127.0.0.1 port=1 dbname=db\n[pgbouncer]\n\
                 listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n\
                 auth_type = trust\nauth_file = {}\nadmin_users = admin\n",
                users.display()
            ),
        )
        .expect("ini");
        // PgBouncer refuses to run as root: run it as `postgres` then. setpriv execs
        // PgBouncer in its own process (runuser would stay its parent), so the kill in
        // `Drop` reaches PgBouncer itself and no PgBouncer outlives the test.
        let root = std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0);
        let mut command = if root {
            let mut command = Command::new("setpriv");
            command.args([
                "--reuid=postgres",
                "--regid=postgres",
                "--init-groups",
                Self::BINARY,
            ]);
            command
        } else {
            Command::new(Self::BINARY)
        };
        let child = command
            .arg(&ini)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting pgbouncer");
        let live = LivePgBouncer {
            child,
            port,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "pgbouncer did not listen");
            std::thread::sleep(Duration::from_millis(50));
        }
        Some(live)
    }

    fn connect(&self) -> RawSession {
        rawwire::login(self.port, "admin", "pgbouncer", Duration::from_secs(10))
            .expect("connecting to pgbouncer")
    }
}

impl Drop for LivePgBouncer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `psql -XAt` to the console as `user` at `host` (a directory: the Unix socket), no password.
fn console_psql(host: &str, port: u16, user: &str, sql: &str) -> pgtier_tests::process::Finished {
    let mut command = pg_tool("psql");
    command
        .env_remove("PGPASSWORD")
        .args(["-XAtqw", "-h", host, "-p"])
        .arg(port.to_string())
        .args(["-U", user, "-d", "pgbouncer", "-c", sql]);
    run(&mut command, PSQL_TIMEOUT).expect("psql")
}

#[test]
fn the_os_user_running_pgtier_reaches_the_console_as_pgbouncer_over_the_socket() {
    // PgBouncer's peer login: `pgbouncer` on the Unix socket, from a process of the same user
    // id, is an admin with no password and no admin_users line; md5 applies to everyone else.
    let port = free_port().expect("port");
    let proxy = Pgtier::start_file(port, |dir| {
        std::fs::write(dir.join("users.txt"), "\"alice\" \"secret\"\n")?;
        let path = dir.join("pgbouncer.ini");
        std::fs::write(
            &path,
            format!(
                "[databases]\ndb = host=127.0.0.1 port=1 dbname=db\n[pgbouncer]\n\
                 listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir = {}\n\
                 auth_type = md5\nauth_file = users.txt\n",
                dir.display()
            ),
        )?;
        Ok(path)
    })
    .expect("pgtier");
    let socket_dir = proxy.dir().display().to_string();
    let peer = console_psql(&socket_dir, port, "pgbouncer", "SHOW VERSION");
    assert!(peer.success(), "{peer:?}");
    assert!(peer.stdout.contains("pgtier"), "{peer:?}");
    let admin = console_psql(&socket_dir, port, "pgbouncer", "SHOW FDS");
    assert!(admin.success(), "an admin may SHOW FDS: {admin:?}");
    // Over TCP the same name is an ordinary user: md5, and it is in no userlist.
    let tcp = console_psql("127.0.0.1", port, "pgbouncer", "SHOW VERSION");
    assert!(!tcp.success(), "{tcp:?}");
    // Another name on the socket gets no such pass.
    let other = console_psql(&socket_dir, port, "alice", "SHOW VERSION");
    assert!(!other.success(), "{other:?}");
}
