//! What clients send and get back through pgtier: psql, pgbench in every protocol, multi-
//! statement queries, errors inside transactions, large COPY and rows, notices, startup
//! parameters, and login errors — each compared with what PostgreSQL itself does.

use std::io::{Read, Write};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pgtier_tests::fixtures::{
    admin, pgbench_init, pgbench_processed, pgbench_select_only, psql_through, server_and_proxy,
    sqlstate,
};
use pgtier_tests::wait;
use postgres::SimpleQueryMessage;

fn simple_rows(messages: &[SimpleQueryMessage]) -> Vec<String> {
    messages
        .iter()
        .filter_map(|message| match message {
            SimpleQueryMessage::Row(row) => row.get(0).map(str::to_string),
            _ => None,
        })
        .collect()
}

#[test]
fn psql_runs_queries() {
    let (_pg, proxy) = server_and_proxy(|config| config);
    let finished = psql_through(
        &proxy,
        "postgres",
        "SELECT 1; SELECT current_database(); CREATE TEMP TABLE t(v int); SELECT count(*) FROM t",
    );
    assert!(finished.success(), "{finished:?}");
    assert_eq!(
        finished.stdout.lines().collect::<Vec<_>>(),
        ["1", "postgres", "0"]
    );
}

fn pgbench_through(pool_mode: &str, protocol: &str) {
    let (clients, transactions) = (8, 200);
    // Transaction mode shares 4 servers among 8 clients. Session mode gives each client its
    // own server at login (the client sees the server's real pid), and pgbench logs in all
    // clients before running any, so the pool must hold them all.
    let pool_size = if pool_mode == "session" {
        clients
    } else {
        clients / 2
    };
    let (pg, proxy) = server_and_proxy(|config| config.pool_mode(pool_mode).pool_size(pool_size));
    pgbench_init(&pg, 1);
    let finished = pgbench_select_only(&proxy, protocol, clients, transactions);
    assert!(finished.success(), "{finished:?}");
    assert_eq!(
        pgbench_processed(&finished.stdout),
        Some(u64::from(clients * transactions)),
        "{}",
        finished.stdout
    );
}

#[test]
fn pgbench_select_only_simple_protocol_transaction_mode() {
    pgbench_through("transaction", "simple");
}

#[test]
fn pgbench_select_only_extended_protocol_transaction_mode() {
    pgbench_through("transaction", "extended");
}

#[test]
fn pgbench_select_only_prepared_protocol_session_mode() {
    pgbench_through("session", "prepared");
}

#[test]
fn multi_statement_query_returns_every_result_and_is_one_implicit_transaction() {
    let (_pg, proxy) = server_and_proxy(|config| config);
    let mut client = proxy.connect("postgres", "postgres").expect("connect");
    let messages = client
        .simple_query("SELECT 1; SELECT 2; SELECT 3")
        .expect("multi-statement");
    assert_eq!(simple_rows(&messages), ["1", "2", "3"]);

    client
        .batch_execute("CREATE TABLE multi(v int)")
        .expect("create");
    let failed = client.simple_query("INSERT INTO multi VALUES (1); SELECT 1/0");
    assert_eq!(
        sqlstate(&failed.expect_err("division by zero")).as_deref(),
        Some("22012")
    );
    let count = client
        .query_typed_one("SELECT count(*) FROM multi", &[])
        .expect("count");
    assert_eq!(
        count.get::<_, i64>(0),
        0,
        "the failed batch must roll back as one transaction"
    );
}

#[test]
fn errors_inside_a_transaction_abort_it_until_rollback() {
    let (_pg, proxy) = server_and_proxy(|config| config.pool_size(1));
    let mut client = proxy.connect("postgres", "postgres").expect("connect");
    client.batch_execute("BEGIN").expect("begin");
    let error = client
        .batch_execute("SELECT 1/0")
        .expect_err("division by zero");
    assert_eq!(sqlstate(&error).as_deref(), Some("22012"));
    let error = client
        .batch_execute("SELECT 1")
        .expect_err("aborted transaction");
    assert_eq!(sqlstate(&error).as_deref(), Some("25P02"));
    client.batch_execute("ROLLBACK").expect("rollback");
    assert_eq!(
        client
            .query_typed_one("SELECT 1", &[])
            .expect("after rollback")
            .get::<_, i32>(0),
        1
    );

    // The same server (pool_size 1) serves another client normally afterwards.
    let mut other = proxy
        .connect("postgres", "postgres")
        .expect("second client");
    let row = other
        .query_typed_one("SELECT pg_current_xact_id_if_assigned() IS NULL", &[])
        .expect("query");
    assert!(row.get::<_, bool>(0));

    // An error in the extended protocol inside a transaction, then recovery.
    client.batch_execute("BEGIN").expect("begin");
    let error = client
        .query("SELECT 1/$1::int", &[&0i32])
        .expect_err("division by zero");
    assert_eq!(sqlstate(&error).as_deref(), Some("22012"));
    client.batch_execute("ROLLBACK").expect("rollback");
    assert_eq!(
        client
            .query_one("SELECT $1::int", &[&7i32])
            .expect("q")
            .get::<_, i32>(0),
        7
    );
}

/// Row text for COPY: `id \t payload \n`, payload 1 KiB of a per-row letter.
fn copy_row(id: usize) -> Vec<u8> {
    let letter = b'a' + (id % 26) as u8;
    let mut row = format!("{id}\t").into_bytes();
    row.extend(std::iter::repeat_n(letter, 1000));
    row.push(b'\n');
    row
}

#[test]
fn copy_in_and_out_of_100_mb() {
    const ROWS: usize = 100 * 1024;
    // pool_size 1: rust-postgres prepares COPY as a named statement in its own transaction.
    let (pg, proxy) = server_and_proxy(|config| config.pool_size(1));
    let mut client = proxy.connect("postgres", "postgres").expect("connect");
    client
        .batch_execute("CREATE TABLE bulk(id int, payload text)")
        .expect("create");

    let started = Instant::now();
    let mut writer = client.copy_in("COPY bulk FROM STDIN").expect("copy in");
    let mut sent = 0usize;
    for id in 0..ROWS {
        let row = copy_row(id);
        sent += row.len();
        writer.write_all(&row).expect("copy data");
    }
    let copied = writer.finish().expect("copy done");
    assert_eq!(copied, ROWS as u64);
    assert!(sent > 100 * 1000 * 1000);
    eprintln!("COPY in of {sent} bytes: {:?}", started.elapsed());
    assert_eq!(
        admin(&pg, "SELECT count(*), sum(length(payload)) FROM bulk"),
        format!("{ROWS}|{}", ROWS * 1000)
    );

    let started = Instant::now();
    let mut reader = client
        .copy_out("COPY (SELECT * FROM bulk ORDER BY id) TO STDOUT")
        .expect("copy out");
    let mut received = Vec::with_capacity(sent);
    reader.read_to_end(&mut received).expect("copy out data");
    drop(reader);
    eprintln!(
        "COPY out of {} bytes: {:?}",
        received.len(),
        started.elapsed()
    );
    assert_eq!(received.len(), sent);
    let expected_first = copy_row(0);
    assert_eq!(&received[..expected_first.len()], &expected_first[..]);
    let expected_last = copy_row(ROWS - 1);
    assert_eq!(
        &received[received.len() - expected_last.len()..],
        &expected_last[..]
    );

    // The session is usable after both directions.
    assert_eq!(
        client
            .query_typed_one("SELECT 1", &[])
            .expect("after copy")
            .get::<_, i32>(0),
        1
    );
}

#[test]
fn copy_in_error_is_reported_and_the_session_recovers() {
    let (_pg, proxy) = server_and_proxy(|config| config.pool_size(1));
    let mut client = proxy.connect("postgres", "postgres").expect("connect");
    client
        .batch_execute("CREATE TABLE typed(v int)")
        .expect("create");
    let mut writer = client.copy_in("COPY typed FROM STDIN").expect("copy in");
    writer.write_all(b"1\nnot a number\n").expect("copy data");
    let error = writer.finish().expect_err("bad COPY data");
    assert_eq!(sqlstate(&error).as_deref(), Some("22P02"));
    assert_eq!(
        client
            .query_typed_one("SELECT count(*) FROM typed", &[])
            .expect("count")
            .get::<_, i64>(0),
        0
    );
}

#[test]
fn a_50_mb_row_goes_both_ways() {
    const SIZE: usize = 50 * 1024 * 1024;
    // pool_size 1: named statements must find the server they were prepared on.
    let (_pg, proxy) = server_and_proxy(|config| config.pool_size(1));
    let mut client = proxy.connect("postgres", "postgres").expect("connect");
    client
        .batch_execute("CREATE TABLE big(v text)")
        .expect("create");

    // Client → server: a 50 MB Bind parameter.
    let value: String = "x".repeat(SIZE - 1) + "y";
    let inserted = client
        .execute("INSERT INTO big VALUES ($1)", &[&value])
        .expect("insert 50 MB");
    assert_eq!(inserted, 1);

    // Server → client: a 50 MB DataRow, in the extended and the simple protocol.
    let row = client
        .query_typed_one("SELECT v FROM big", &[])
        .expect("select 50 MB");
    let back: &str = row.get(0);
    assert_eq!(back.len(), SIZE);
    assert!(back.ends_with('y'));
    let messages = client
        .simple_query("SELECT v FROM big")
        .expect("simple select");
    let rows = simple_rows(&messages);
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].len(), SIZE);

    let length = client
        .query_typed_one("SELECT length(v) FROM big", &[])
        .expect("length");
    assert_eq!(length.get::<_, i32>(0), SIZE as i32);
}

#[test]
fn notices_reach_the_client() {
    let (_pg, proxy) = server_and_proxy(|config| config.pool_size(1));
    let notices = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&notices);
    let mut config = proxy.pg_config("postgres", "postgres");
    config.notice_callback(move |notice| {
        if let Ok(mut notices) = sink.lock() {
            notices.push((notice.severity().to_string(), notice.message().to_string()));
        }
    });
    let mut client = config.connect(postgres::NoTls).expect("connect");
    client
        .batch_execute("DO $$ BEGIN RAISE NOTICE 'hello %', 42; RAISE WARNING 'careful'; END $$")
        .expect("raise");
    client
        .query("SELECT 1 FROM (SELECT 1) s WHERE $1::int = 1", &[&1i32])
        .expect("extended after notices");
    client.batch_execute("BEGIN").expect("begin");
    client
        .batch_execute("BEGIN")
        .expect("begin twice: a WARNING, not an error");
    client.batch_execute("ROLLBACK").expect("rollback");
    let notices = notices.lock().expect("notices").clone();
    assert_eq!(notices[0], ("NOTICE".to_string(), "hello 42".to_string()));
    assert_eq!(notices[1], ("WARNING".to_string(), "careful".to_string()));
    assert_eq!(notices[2].1, "there is already a transaction in progress");
}

#[test]
fn startup_options_reach_the_server() {
    for pool_mode in ["session", "transaction"] {
        let (_pg, proxy) = server_and_proxy(|config| {
            config
                .pool_mode(pool_mode)
                .setting("forward_startup_options", "true")
        });
        let mut config = proxy.pg_config("postgres", "postgres");
        config
            .options("-c statement_timeout=1234 -c search_path=pg_catalog")
            .application_name("e2e-options");
        let mut client = config
            .connect(postgres::NoTls)
            .expect("connect with options");
        for _ in 0..3 {
            let shown = client.simple_query("SHOW statement_timeout").expect("show");
            assert_eq!(simple_rows(&shown), ["1234ms"], "{pool_mode}");
        }
        let shown = client.simple_query("SHOW search_path").expect("show");
        assert_eq!(simple_rows(&shown), ["pg_catalog"], "{pool_mode}");
        let shown = client.simple_query("SHOW application_name").expect("show");
        assert_eq!(simple_rows(&shown), ["e2e-options"], "{pool_mode}");
        // The timeout is really in force on the server.
        let error = client
            .batch_execute("SELECT pg_sleep(5)")
            .expect_err("statement timeout");
        assert_eq!(sqlstate(&error).as_deref(), Some("57014"), "{pool_mode}");

        // A client without options does not inherit them from a shared server.
        let mut plain = proxy.connect("postgres", "postgres").expect("plain client");
        let shown = plain.simple_query("SHOW statement_timeout").expect("show");
        assert_eq!(simple_rows(&shown), ["0"], "{pool_mode}");
    }
}

/// By default `options` is read as PgBouncer reads it: tracked settings are applied like
/// top-level parameters, ignored ones dropped, `track_extra_parameters` accepted, others
/// and non-settings refused.
#[test]
fn startup_options_are_read_as_pgbouncer_reads_them() {
    let (_pg, proxy) = server_and_proxy(|config| {
        config
            .pool_mode("transaction")
            .setting("ignore_startup_parameters", "[\"extra_float_digits\"]")
            .setting("track_extra_parameters", "[\"search_path\"]")
    });
    let connect = |options: &str| {
        let mut config = proxy.pg_config("postgres", "postgres");
        config.options(options);
        config.connect(postgres::NoTls)
    };
    let show = |client: &mut postgres::Client, name: &str| {
        let shown = client.simple_query(&format!("SHOW {name}")).expect("show");
        simple_rows(&shown)
    };
    let mut client = connect("-c timezone=Europe/Lisbon  -c    datestyle=German,\\ YMD")
        .expect("tracked settings");
    assert_eq!(show(&mut client, "timezone"), ["Europe/Lisbon"]);
    assert_eq!(show(&mut client, "datestyle"), ["German, YMD"]);
    let long = "1".repeat(5000);
    let mut client = connect(&format!("-c extra_float_digits={long}")).expect("ignored");
    assert_eq!(show(&mut client, "extra_float_digits"), ["1"]);
    let mut client = connect("-c search_path=pg_catalog").expect("track_extra_parameters");
    assert_eq!(show(&mut client, "search_path"), ["pg_catalog"]);
    let refusal = |options: &str| {
        let error = connect(options).err().expect("refused");
        error
            .as_db_error()
            .map(|e| e.message().to_string())
            .unwrap_or_else(|| format!("{error:?}"))
    };
    assert_eq!(
        refusal("-c enable_seqscan=off"),
        "unsupported startup parameter in options: enable_seqscan"
    );
    for options in ["-d", "-c timezone"] {
        assert_eq!(
            refusal(options),
            "unsupported options startup parameter: only '-c config=val' and '--config=val' are allowed",
            "{options}"
        );
    }
}

#[test]
fn parameter_status_is_the_servers_own() {
    for pool_mode in ["session", "transaction"] {
        let (_pg, proxy) = server_and_proxy(|config| config.pool_mode(pool_mode));
        // A first client warms the pool, so a proxy that caches parameters would use them.
        pgtier_tests::rawwire::login(
            proxy.port(),
            "postgres",
            "postgres",
            Duration::from_secs(10),
        )
        .expect("first login");
        // The client spells its settings loosely; it must see the server's canonical spelling.
        let session = pgtier_tests::rawwire::login_with(
            proxy.port(),
            "postgres",
            "postgres",
            &[
                ("client_encoding", "utf8"),
                ("DateStyle", "iso, dmy"),
                ("application_name", "e2e-params"),
            ],
            Duration::from_secs(10),
        )
        .expect("login");
        let parameter = |name: &str| {
            session
                .parameters
                .iter()
                .find(|(key, _)| key == name)
                .map(|(_, value)| value.clone())
        };
        let context = format!("{pool_mode}: {:?}", session.parameters);
        assert_eq!(
            parameter("server_encoding").as_deref(),
            Some("UTF8"),
            "{context}"
        );
        assert_eq!(
            parameter("client_encoding").as_deref(),
            Some("UTF8"),
            "{context}"
        );
        assert_eq!(
            parameter("DateStyle").as_deref(),
            Some("ISO, DMY"),
            "{context}"
        );
        assert_eq!(
            parameter("application_name").as_deref(),
            Some("e2e-params"),
            "{context}"
        );
        assert_eq!(
            parameter("integer_datetimes").as_deref(),
            Some("on"),
            "{context}"
        );
        assert!(
            parameter("server_version").is_some_and(|version| version.starts_with("15")),
            "{context}"
        );
    }
}

#[test]
fn unknown_database_fails_promptly_with_3d000() {
    let (pg, proxy) = server_and_proxy(|config| config.database("ghost", 1, "ghost"));
    // Not in the config at all.
    let started = Instant::now();
    let error = proxy.connect_error("no_such_db", "postgres");
    assert_eq!(sqlstate(&error).as_deref(), Some("3D000"), "{error}");
    // PgBouncer's words for it, which its own suite and operators' tools match on.
    let message = error.as_db_error().map(|db| db.message().to_string());
    assert_eq!(
        message.as_deref(),
        Some("no such database: no_such_db"),
        "{error:?}"
    );
    // ...and PgBouncer's log line for it.
    let logged = wait::until(Duration::from_secs(10), Duration::from_millis(20), || {
        proxy
            .log()
            .contains("closing because: no such database: no_such_db")
            .then_some(())
    });
    assert!(logged.is_some(), "{}", proxy.log());
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    drop(pg);
    drop(proxy);

    // In the config, but the server has no such database: the server's own error, promptly.
    let (_pg, proxy) = server_and_proxy(|config| {
        let port = config.databases[0].port;
        config.database("missing", port, "missing_on_server")
    });
    let started = Instant::now();
    let error = proxy.connect_error("missing", "postgres");
    assert_eq!(sqlstate(&error).as_deref(), Some("3D000"), "{error}");
    assert!(
        error.to_string().contains("missing_on_server")
            || format!("{error:?}").contains("missing_on_server"),
        "{error:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn unknown_role_fails_with_the_servers_error() {
    let (_pg, proxy) = server_and_proxy(|config| config.user("nobody", ""));
    let error = proxy.connect_error("postgres", "nobody");
    assert_eq!(sqlstate(&error).as_deref(), Some("28000"), "{error:?}");
}

#[test]
fn too_many_clients_get_53300() {
    let (_pg, proxy) = server_and_proxy(|config| {
        let mut config = config;
        config.max_client_conn = 2;
        config
    });
    let _first = proxy.connect("postgres", "postgres").expect("first");
    let _second = proxy.connect("postgres", "postgres").expect("second");
    let error = proxy.connect_error("postgres", "postgres");
    assert_eq!(sqlstate(&error).as_deref(), Some("53300"), "{error:?}");
}
