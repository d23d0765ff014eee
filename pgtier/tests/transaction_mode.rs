//! Transaction pooling against a real PostgreSQL with trust auth.

mod common;

use common::*;

#[test]
fn psql_select_through_pgtier() {
    let pg = start_pg(HbaAuth::Trust);
    let proxy = start_proxy(&config_text(
        pg.port(),
        "auth_type = \"trust\"",
        "transaction",
        4,
    ));
    let port = proxy.local_addr().port();
    let (ok, out, err) = psql(port, "postgres", "postgres", "SELECT 1", None);
    assert!(ok, "psql failed: {err}");
    assert_eq!(out, "1");
    let (ok, out, err) = psql(port, "postgres", "postgres", "SELECT 1; SELECT 2", None);
    assert!(ok, "{err}");
    assert_eq!(out, "1\n2");
    proxy.shutdown(pgtier::ShutdownMode::Immediate);
    proxy.join().expect("clean exit");
}

#[test]
fn pgbench_select_only_simple_and_extended() {
    let pg = start_pg(HbaAuth::Trust);
    let (ok, out) = pgbench(pg.port(), &["-i", "-s", "1", "-q"]);
    assert!(ok, "pgbench -i: {out}");
    let proxy = start_proxy(&config_text(
        pg.port(),
        "auth_type = \"trust\"",
        "transaction",
        4,
    ));
    let port = proxy.local_addr().port();
    for mode in ["simple", "extended"] {
        let (ok, out) = pgbench(
            port,
            &["-S", "-n", "-c", "8", "-j", "2", "-t", "300", "-M", mode],
        );
        assert!(ok, "pgbench -M {mode}: {out}");
        assert!(
            out.contains("number of transactions actually processed: 2400/2400"),
            "{out}"
        );
    }
    let folded = wait_until(std::time::Duration::from_secs(2), || {
        proxy.stats().traffic.total_transactions() >= 4800
    });
    let stats = proxy.stats();
    proxy.shutdown(pgtier::ShutdownMode::Immediate);
    proxy.join().expect("clean exit");
    assert!(folded, "{stats:?}");
    assert!(stats.traffic.total_transactions() >= 4800, "{stats:?}");
    assert!(stats.traffic.total_queries() >= 4800, "{stats:?}");
}

#[test]
fn thousand_clients_wait_fifo_over_a_pool_of_ten() {
    let pg = start_pg(HbaAuth::Trust);
    let (ok, out) = pgbench(pg.port(), &["-i", "-s", "1", "-q"]);
    assert!(ok, "pgbench -i: {out}");
    let proxy = start_proxy(&config_text(
        pg.port(),
        "auth_type = \"trust\"",
        "transaction",
        10,
    ));
    let port = proxy.local_addr().port();
    let (ok, out) = pgbench(port, &["-S", "-n", "-c", "1000", "-j", "4", "-t", "5"]);
    assert!(ok, "pgbench: {out}");
    assert!(
        out.contains("number of transactions actually processed: 5000/5000"),
        "{out}"
    );
    let backends = pg.psql("postgres", "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' AND usename = 'postgres' AND pid <> pg_backend_pid()").expect("psql");
    assert!(
        backends.trim().parse::<u32>().unwrap_or(99) <= 10,
        "pool size exceeded: {backends}"
    );
    proxy.shutdown(pgtier::ShutdownMode::Immediate);
    proxy.join().expect("clean exit");
}

#[test]
fn copy_100mb_both_ways_a_50mb_row_notices_and_errors() {
    use common::raw::RawClient;
    let pg = start_pg(HbaAuth::Trust);
    pg.psql("postgres", "CREATE TABLE big(i int, t text)")
        .expect("table");
    let proxy = start_proxy(&config_text(
        pg.port(),
        "auth_type = \"trust\"",
        "transaction",
        2,
    ));
    let port = proxy.local_addr().port();
    let dir = std::env::temp_dir().join(format!("pgtier-copy-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let file = dir.join("rows.tsv");
    let copy_out = format!(
        "\\copy (SELECT i, repeat('x', 1000) FROM generate_series(1, 100000) i) TO '{}'",
        file.display()
    );
    let (ok, _, err) = psql(port, "postgres", "postgres", &copy_out, None);
    assert!(ok, "copy out: {err}");
    let size = std::fs::metadata(&file).expect("file").len();
    assert!(size > 100_000_000, "copied {size} bytes");
    let copy_in = format!("\\copy big FROM '{}'", file.display());
    let (ok, _, err) = psql(port, "postgres", "postgres", &copy_in, None);
    assert!(ok, "copy in: {err}");
    let (ok, out, err) = psql(
        port,
        "postgres",
        "postgres",
        "SELECT count(*) FROM big",
        None,
    );
    assert!(ok, "{err}");
    assert_eq!(out, "100000");
    let _ = std::fs::remove_dir_all(&dir);

    let mut client = RawClient::connect(port, "postgres", "postgres", &[]).expect("login");
    let row = client
        .query("SELECT repeat('y', 50 * 1024 * 1024)")
        .expect("50 MB row");
    assert_eq!(row[0].len(), 50 * 1024 * 1024);

    let (ok, _, err) = psql(
        port,
        "postgres",
        "postgres",
        "DO $$ BEGIN RAISE NOTICE 'hello from plpgsql'; END $$",
        None,
    );
    assert!(ok);
    assert!(err.contains("NOTICE:  hello from plpgsql"), "{err}");

    client.query("BEGIN").expect("begin");
    assert_eq!(client.query("SELECT 1/0").expect_err("error").0, "22012");
    assert_eq!(client.query("SELECT 1").expect_err("aborted").0, "25P02");
    client.query("ROLLBACK").expect("rollback");
    assert_eq!(client.query_one("SELECT 11"), "11");
    proxy.shutdown(pgtier::ShutdownMode::Immediate);
    proxy.join().expect("clean exit");
}

#[test]
fn session_mode_pgbench_prepared() {
    let pg = start_pg(HbaAuth::Trust);
    let (ok, out) = pgbench(pg.port(), &["-i", "-s", "1", "-q"]);
    assert!(ok, "pgbench -i: {out}");
    let proxy = start_proxy(&config_text(
        pg.port(),
        "auth_type = \"trust\"",
        "session",
        8,
    ));
    let port = proxy.local_addr().port();
    let (ok, out) = pgbench(
        port,
        &[
            "-S", "-n", "-c", "4", "-j", "2", "-t", "300", "-M", "prepared",
        ],
    );
    assert!(ok, "pgbench -M prepared: {out}");
    assert!(
        out.contains("number of transactions actually processed: 1200/1200"),
        "{out}"
    );
    proxy.shutdown(pgtier::ShutdownMode::Immediate);
    proxy.join().expect("clean exit");
}

#[test]
fn md5_server_login_with_database_password() {
    let pg = LocalPg::start_primary(&PgOptions {
        auth: HbaAuth::Md5,
        password_encryption: "md5",
        ..PgOptions::default()
    })
    .expect("postgres");
    pg.create_user("bob", "hunter2").expect("user");
    let text = config_text(pg.port(), "auth_type = \"trust\"", "transaction", 2).replace(
        "dbname = \"postgres\"\n\n[databases.nosuchdb]",
        "dbname = \"postgres\"\nuser = \"bob\"\npassword = \"hunter2\"\n\n[databases.nosuchdb]",
    );
    let proxy = start_proxy(&text);
    let port = proxy.local_addr().port();
    let (ok, out, err) = psql(port, "anyone", "postgres", "SELECT current_user", None);
    assert!(ok, "{err}");
    assert_eq!(out, "bob");
    proxy.shutdown(pgtier::ShutdownMode::Immediate);
    proxy.join().expect("clean exit");
}
