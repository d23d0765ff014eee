//! Statement pooling (`pool_mode = statement`) against a real PostgreSQL with trust auth:
//! clients take turns on one server statement by statement, a transaction block ends its
//! client with PgBouncer's error and never leaves a server inside it, named statements
//! follow their clients, COPY and cancel work, pgbench's select-only run passes, and a
//! pgbouncer.ini's
//! per-database and per-user `pool_mode=statement` take effect.

mod common;

use std::io::{Read, Write};
use std::time::Duration;

use common::raw::{self, RawClient};
use common::*;

const REFUSED: &str = "transaction blocks not allowed in statement pooling mode";

fn statement_proxy(pg: &LocalPg, pool_size: u32) -> pgtier::ProxyHandle {
    start_proxy(&config_text(
        pg.port(),
        "auth_type = \"trust\"\nadmin_users = [\"admin\"]",
        "statement",
        pool_size,
    ))
}

/// One message of the wire protocol: its type byte and body.
type Message = (u8, Vec<u8>);

fn frame(tag: u8, body: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    out.extend_from_slice(&((body.len() + 4) as u32).to_be_bytes());
    out.extend_from_slice(body);
    out
}

fn cstr(text: &str) -> Vec<u8> {
    let mut out = text.as_bytes().to_vec();
    out.push(0);
    out
}

fn parse(name: &str, sql: &str) -> Vec<u8> {
    let body = [cstr(name), cstr(sql), vec![0, 0]].concat();
    frame(b'P', &body)
}

/// Bind of `statement` to the unnamed portal, no parameters, text results.
fn bind(statement: &str) -> Vec<u8> {
    let body = [cstr(""), cstr(statement), vec![0, 0, 0, 0, 0, 0]].concat();
    frame(b'B', &body)
}

fn execute() -> Vec<u8> {
    frame(b'E', &[0, 0, 0, 0, 0])
}

fn sync() -> Vec<u8> {
    frame(b'S', &[])
}

/// Reads messages until ReadyForQuery or the end of the connection.
fn read_answer(client: &mut RawClient) -> Vec<Message> {
    let mut messages = Vec::new();
    loop {
        let mut header = [0u8; 5];
        if client.stream.read_exact(&mut header).is_err() {
            return messages;
        }
        let len = u32::from_be_bytes([header[1], header[2], header[3], header[4]]) as usize;
        let mut body = vec![0u8; len.saturating_sub(4)];
        if client.stream.read_exact(&mut body).is_err() {
            return messages;
        }
        let done = header[0] == b'Z';
        messages.push((header[0], body));
        if done {
            return messages;
        }
    }
}

/// The value of field `code` of an ErrorResponse body.
fn field(body: &[u8], code: u8) -> String {
    body.split(|b| *b == 0)
        .find_map(|f| f.split_first().filter(|(kind, _)| **kind == code))
        .map(|(_, value)| String::from_utf8_lossy(value).into_owned())
        .unwrap_or_default()
}

/// The first column of every DataRow.
fn rows(messages: &[Message]) -> Vec<String> {
    messages
        .iter()
        .filter(|(tag, _)| *tag == b'D')
        .map(|(_, body)| {
            let len = i32::from_be_bytes([body[2], body[3], body[4], body[5]]) as usize;
            String::from_utf8_lossy(&body[6..6 + len]).into_owned()
        })
        .collect()
}

/// Sends `sql` and asserts the client gets PgBouncer's refusal and then the end of its
/// connection, with no ReadyForQuery.
fn assert_refused(client: &mut RawClient, sql: &str) {
    client.send_query(sql);
    let messages = read_answer(client);
    let tags: String = messages.iter().map(|(tag, _)| *tag as char).collect();
    assert!(!tags.contains('Z'), "{sql}: {tags}");
    let error = messages
        .iter()
        .find(|(tag, _)| *tag == b'E')
        .unwrap_or_else(|| panic!("{sql}: no error in {tags}"));
    assert_eq!(
        (
            field(&error.1, b'S'),
            field(&error.1, b'C'),
            field(&error.1, b'M')
        ),
        (
            "FATAL".to_string(),
            "08P01".to_string(),
            REFUSED.to_string()
        ),
        "{sql}"
    );
    let mut rest = Vec::new();
    let end = client.stream.read_to_end(&mut rest);
    assert!(
        matches!(end, Ok(0)) || end.is_err(),
        "{sql}: the connection ends after the error ({end:?}, {rest:?})"
    );
}

#[test]
fn two_clients_share_one_server_statement_by_statement() {
    let pg = start_pg(HbaAuth::Trust);
    let proxy = statement_proxy(&pg, 1);
    let port = proxy.local_addr().port();
    let mut a = RawClient::connect(port, "postgres", "postgres", &[]).expect("a");
    let mut b = RawClient::connect(port, "postgres", "postgres", &[]).expect("b");
    let pid = a.query_one("SELECT pg_backend_pid()");
    for round in 0..5 {
        for client in [&mut a, &mut b] {
            assert_eq!(client.query_one("SELECT pg_backend_pid()"), pid, "{round}");
        }
    }
    // A multi-statement query is one statement: its transaction ends inside it.
    let answer = b
        .query("BEGIN; SELECT 7; COMMIT")
        .expect("a closed block in one query");
    assert_eq!(answer, ["7"]);
    assert_eq!(a.query_one("SELECT 8"), "8");
    let pools = admin_rows(port, "POOLS");
    assert!(
        pools
            .iter()
            .any(|row| row.starts_with("postgres|postgres|") && row.contains("|statement|")),
        "{pools:?}"
    );
    proxy.shutdown(pgtier::ShutdownMode::Immediate);
    proxy.join().expect("clean exit");
}

#[test]
fn a_transaction_block_ends_its_client_and_leaks_nothing() {
    let pg = start_pg(HbaAuth::Trust);
    let proxy = statement_proxy(&pg, 1);
    let port = proxy.local_addr().port();
    let mut a = RawClient::connect(port, "postgres", "postgres", &[]).expect("a");
    let first_pid = a.query_one("SELECT pg_backend_pid()");
    assert_refused(&mut a, "BEGIN");
    // A block left open by a multi-statement query is refused the same way.
    let mut b = RawClient::connect(port, "postgres", "postgres", &[]).expect("b");
    assert_refused(&mut b, "SELECT 1; BEGIN; CREATE TABLE leaked (x int)");
    // And in the extended protocol, at the Sync that would leave the block open.
    let mut c = RawClient::connect(port, "postgres", "postgres", &[]).expect("c");
    let begin = [parse("", "BEGIN"), bind(""), execute(), sync()].concat();
    c.stream.write_all(&begin).expect("send");
    let messages = read_answer(&mut c);
    assert!(messages.iter().all(|(tag, _)| *tag != b'Z'));
    let error = messages
        .iter()
        .find(|(tag, _)| *tag == b'E')
        .expect("error");
    assert_eq!(field(&error.1, b'M'), REFUSED);

    // The next client runs on a server outside any transaction: its statement began one
    // of its own, and nothing of the refused blocks exists.
    let mut d = RawClient::connect(port, "postgres", "postgres", &[]).expect("d");
    let own = d.query_one(
        "SELECT xact_start = query_start FROM pg_stat_activity WHERE pid = pg_backend_pid()",
    );
    assert_eq!(own, "t", "a fresh transaction, not one left open");
    assert_ne!(d.query_one("SELECT pg_backend_pid()"), first_pid);
    assert_eq!(
        d.query_one("SELECT count(*) FROM pg_class WHERE relname = 'leaked'"),
        "0"
    );
    let open_blocks = || {
        pg.psql(
            "postgres",
            "SELECT count(*) FROM pg_stat_activity WHERE state LIKE 'idle in transaction%'",
        )
        .expect("psql")
            == "0"
    };
    assert!(
        wait_until(Duration::from_secs(10), open_blocks),
        "a refused block's backend ended"
    );
    proxy.shutdown(pgtier::ShutdownMode::Immediate);
    proxy.join().expect("clean exit");
}

#[test]
fn copy_and_cancel_work_in_statement_mode() {
    let pg = start_pg(HbaAuth::Trust);
    let proxy = statement_proxy(&pg, 1);
    let port = proxy.local_addr().port();
    let run = |sql: &str| {
        let (ok, out, err) = psql(port, "postgres", "postgres", sql, None);
        assert!(ok, "{sql}: {err}");
        out
    };
    run("CREATE TABLE copied (x int)");
    let copied = run("COPY (SELECT generate_series(1, 1000)) TO STDOUT");
    assert_eq!(copied.lines().count(), 1000);
    // psql's stdin is empty here: COPY FROM STDIN ends at once, and the server is free.
    run("COPY copied FROM STDIN");
    assert_eq!(run("SELECT count(*) FROM copied"), "0");

    let mut a = RawClient::connect(port, "postgres", "postgres", &[]).expect("a");
    a.send_query("SELECT pg_sleep(60)");
    let running = wait_until(Duration::from_secs(20), || {
        pg.psql(
            "postgres",
            "SELECT count(*) FROM pg_stat_activity WHERE query = 'SELECT pg_sleep(60)' \
             AND state = 'active'",
        )
        .expect("psql")
            == "1"
    });
    assert!(running, "the sleep reached the server");
    raw::send_cancel(port, a.key);
    let (code, _) = a.read_result().expect_err("cancelled");
    assert_eq!(code, "57014");
    assert_eq!(
        a.query_one("SELECT 1"),
        "1",
        "the server went back and serves again"
    );
    proxy.shutdown(pgtier::ShutdownMode::Immediate);
    proxy.join().expect("clean exit");
}

#[test]
fn named_statements_follow_their_clients_on_a_shared_server() {
    let pg = start_pg(HbaAuth::Trust);
    let proxy = statement_proxy(&pg, 1);
    let port = proxy.local_addr().port();
    let mut a = RawClient::connect(port, "postgres", "postgres", &[]).expect("a");
    let mut b = RawClient::connect(port, "postgres", "postgres", &[]).expect("b");
    for (client, sql) in [(&mut a, "SELECT 'a'"), (&mut b, "SELECT 'b'")] {
        client
            .stream
            .write_all(&[parse("s1", sql), sync()].concat())
            .expect("parse");
        let tags: Vec<u8> = read_answer(client).iter().map(|m| m.0).collect();
        assert_eq!(tags, b"1Z", "each client's s1 is its own");
    }
    for round in 0..3 {
        for (client, expected) in [(&mut a, "a"), (&mut b, "b")] {
            let run = [bind("s1"), execute(), sync()].concat();
            client.stream.write_all(&run).expect("run");
            assert_eq!(rows(&read_answer(client)), [expected], "round {round}");
        }
    }
    let pid_a = a.query_one("SELECT pg_backend_pid()");
    assert_eq!(b.query_one("SELECT pg_backend_pid()"), pid_a, "one server");
    proxy.shutdown(pgtier::ShutdownMode::Immediate);
    proxy.join().expect("clean exit");
}

#[test]
fn pgbench_select_only_in_statement_mode() {
    let pg = start_pg(HbaAuth::Trust);
    let (ok, out) = pgbench(pg.port(), &["-i", "-s", "1", "-q"]);
    assert!(ok, "pgbench -i: {out}");
    let proxy = statement_proxy(&pg, 2);
    let port = proxy.local_addr().port();
    for mode in ["simple", "extended", "prepared"] {
        let (ok, out) = pgbench(
            port,
            &["-S", "-n", "-c", "6", "-j", "2", "-t", "200", "-M", mode],
        );
        assert!(ok, "pgbench -M {mode}: {out}");
        assert!(
            out.contains("number of transactions actually processed: 1200/1200"),
            "{out}"
        );
    }
    // A script with a transaction block is refused, as PgBouncer refuses it.
    let (ok, out) = pgbench(port, &["-N", "-n", "-c", "1", "-t", "1"]);
    assert!(!ok, "{out}");
    assert!(out.contains(REFUSED), "{out}");
    proxy.shutdown(pgtier::ShutdownMode::Immediate);
    proxy.join().expect("clean exit");
}

#[test]
fn per_database_and_per_user_statement_mode_from_a_pgbouncer_ini() {
    let pg = start_pg(HbaAuth::Trust);
    pg.psql("postgres", "CREATE ROLE bob LOGIN").expect("bob");
    let dir = std::env::temp_dir().join(format!("pgtier-statement-ini-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let listen_port = localpg::free_port().expect("port");
    let server_port = pg.port();
    let ini = format!(
        "\
[databases]
tx = host=127.0.0.1 port={server_port} dbname=postgres
stmt = host=127.0.0.1 port={server_port} dbname=postgres pool_mode=statement

[users]
bob = pool_mode=statement

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {listen_port}
unix_socket_dir =
auth_type = trust
admin_users = admin
pool_mode = transaction
default_pool_size = 2
"
    );
    let path = dir.join("pgbouncer.ini");
    std::fs::write(&path, ini).expect("write ini");
    let config = pgtier_core::config::Config::load(&path).expect("valid ini");
    let proxy = pgtier::start(config).expect("pgtier starts");
    let port = proxy.local_addr().port();

    // Transaction mode for postgres on tx: its block stays open until it ends.
    let mut tx = RawClient::connect(port, "postgres", "tx", &[]).expect("tx");
    tx.query("BEGIN").expect("begin");
    tx.query("SELECT 1").expect("inside");
    tx.query("COMMIT").expect("commit");
    // The database's pool_mode=statement.
    let mut stmt = RawClient::connect(port, "postgres", "stmt", &[]).expect("stmt");
    assert_eq!(stmt.query_one("SELECT 1"), "1");
    assert_refused(&mut stmt, "BEGIN");
    // The user's pool_mode=statement wins over the database's transaction mode.
    let mut bob = RawClient::connect(port, "bob", "tx", &[]).expect("bob");
    assert_eq!(bob.query_one("SELECT current_user"), "bob");
    assert_refused(&mut bob, "BEGIN");

    let databases = admin_rows(port, "DATABASES");
    let mode_of = |name: &str| {
        databases
            .iter()
            .find(|row| row.starts_with(&format!("{name}|")))
            .map(|row| row.split('|').nth(9).unwrap_or_default().to_string())
    };
    assert_eq!(
        mode_of("stmt").as_deref(),
        Some("statement"),
        "{databases:?}"
    );
    assert_eq!(
        mode_of("tx").as_deref(),
        Some("transaction"),
        "{databases:?}"
    );
    let users = admin_rows(port, "USERS");
    assert!(
        // name, pool_size, reserve_pool_size, pool_mode (PgBouncer 1.25's columns).
        users.iter().any(|row| row.starts_with("bob|||statement|")),
        "{users:?}"
    );
    proxy.shutdown(pgtier::ShutdownMode::Immediate);
    proxy.join().expect("clean exit");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `SHOW <what>` on the admin console, one `|`-separated line per row.
fn admin_rows(port: u16, what: &str) -> Vec<String> {
    let (ok, out, err) = psql(port, "admin", "pgbouncer", &format!("SHOW {what}"), None);
    assert!(ok, "SHOW {what}: {err}");
    out.lines().map(str::to_string).collect()
}
