//! Session state in transaction mode, judged against PostgreSQL itself: a client that creates
//! state living past its transaction (`LISTEN`, a temp table, a plain `SET`, a session
//! advisory lock, `SET ROLE`, a `WITH HOLD` cursor, a setting the server reports) keeps its
//! server until the state is undone (`RESET ALL`, `UNLISTEN *`, `DISCARD ALL`,
//! `pg_advisory_unlock_all()`, `CLOSE ALL`) or it leaves (docs/compatibility.md). Every
//! scenario is a byte-level script over several clients, run directly against PostgreSQL and
//! through pgtier (session and transaction mode), and what each client receives must be the
//! same (`pgtier_tests::differential`).
//!
//! How a script proves a pin without looking inside pgtier: the pool is small, so that a
//! client that was *not* kept on its server would hand its state to the next client of that
//! server (who then sees a `SET` it never made, a temp table of another session, a lock it
//! already holds), or would itself land on a server without its state. How it proves that a
//! pin *ended*: a pool of one server, and a second client that needs it; were the first
//! client still pinned, the second would wait `query_wait_timeout` (3 s) and get 08P01,
//! which PostgreSQL never says.

use std::sync::Once;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use pgtier_tests::differential::{Frontend, Scenario, Script};
use pgtier_tests::differential_tests;
use pgtier_tests::fixtures::admin;
use pgtier_tests::shared_server::shared_server;

fn f() -> Frontend {
    Frontend::new()
}

/// A number no other scenario of this process uses. Channels and advisory locks belong to
/// the whole (shared) server, and a test's session and transaction runs go on concurrently:
/// each script names its own, so that no script hears or blocks another.
fn unique() -> u32 {
    static NEXT: AtomicU32 = AtomicU32::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

differential_tests! {
    listen_on_one_client_and_notify_from_another;
    a_temp_table_lives_across_transactions_while_others_use_the_pool;
    a_plain_set_holds_for_its_client_and_no_other;
    a_set_inside_a_committed_block_holds_too;
    set_local_does_not_pin;
    reset_all_ends_the_pin;
    unlisten_all_ends_the_pin;
    discard_all_ends_the_pin;
    a_rolled_back_reset_all_does_not_end_the_pin;
    a_rolled_back_unlisten_all_keeps_listening;
    a_clear_and_a_new_set_in_one_query_keep_the_pin;
    a_session_advisory_lock_pins_until_unlocked;
    transaction_advisory_locks_do_not_pin;
    set_role_pins;
    discard_all_after_set_role_ends_the_pin;
    reset_all_of_a_reported_setting_ends_the_pin;
    a_cursor_with_hold_pins_until_closed;
    a_setting_the_server_reports_pins;
    a_pinned_clients_state_is_gone_when_it_leaves;
}

/// Pool of `size` servers in transaction mode (session mode: one per client).
fn pool(size: u32, script: Script) -> Scenario {
    Scenario::new(script, size)
}

/// `BEGIN` on `conn`: it holds a server until its `commit`.
fn begin(script: Script, conn: &str) -> Script {
    script.query(conn, "BEGIN")
}

fn commit(script: Script, conn: &str) -> Script {
    script.query(conn, "COMMIT")
}

/// A LISTENs; B NOTIFYs on the other server of the pool. A gets the notification while idle
/// between its transactions, after its own transactions, and (deferred by PostgreSQL) at the
/// end of a transaction block it was in when B notified.
fn listen_on_one_client_and_notify_from_another() -> Scenario {
    let channel = format!("pin_channel_{}", unique());
    let notify = |payload: &str| format!("NOTIFY {channel}, '{payload}'");
    let script = Script::new(&["a", "b"])
        .query("a", &format!("LISTEN {channel}"))
        .query("b", &notify("while idle"))
        .await_tag("a", b'A')
        .query("a", "SELECT 'a between notifications'")
        .query("b", "BEGIN; SELECT 1; COMMIT")
        .query(
            "b",
            &format!("SELECT pg_notify('{channel}', 'by function')"),
        )
        .await_tag("a", b'A')
        .query("a", "BEGIN")
        .query("b", &notify("while a is in a block"))
        .query("a", "SELECT 'a inside its block'")
        .query("a", "COMMIT")
        .exchange(
            "a",
            f().parse("", "SELECT 'a extended'")
                .bind("", &[])
                .execute()
                .sync(),
            1,
        )
        .query("b", &notify("last"))
        .await_tag("a", b'A');
    pool(2, script)
}

/// A's temp table is there in every later transaction of A (simple and extended, explicit
/// blocks too), while B and C run transactions on the pool of two; neither sees it.
fn a_temp_table_lives_across_transactions_while_others_use_the_pool() -> Scenario {
    let others = |script: Script| {
        script
            .query(
                "b",
                "BEGIN; SELECT to_regclass('pin_temp') IS NULL AS b_sees_none; COMMIT",
            )
            .query("c", "SELECT to_regclass('pin_temp') IS NULL AS c_sees_none")
    };
    let mut script = Script::new(&["a", "b", "c"])
        .query("a", "CREATE TEMP TABLE pin_temp (n int)")
        .query("a", "INSERT INTO pin_temp VALUES (1)");
    script = others(script);
    script = script
        .query("a", "BEGIN; INSERT INTO pin_temp VALUES (2); COMMIT")
        .exchange(
            "a",
            f().parse("", "INSERT INTO pin_temp VALUES ($1::int)")
                .bind("", &["3"])
                .execute()
                .sync(),
            1,
        );
    script = others(script);
    script = script.query("a", "SELECT sum(n), count(*) FROM pin_temp");
    pool(2, script)
}

/// A's `SET work_mem` outside a transaction holds in A's later transactions; B, on the other
/// server (and on any server it gets later), sees the default. Were A not pinned, B would
/// get A's server (the most recently used) and see A's value.
fn a_plain_set_holds_for_its_client_and_no_other() -> Scenario {
    let mut script = Script::new(&["a", "b"]).query("a", "SET work_mem = '1234kB'");
    script = begin(script, "b").query("b", "SHOW work_mem");
    script = script.query("a", "SHOW work_mem");
    script = commit(script, "b");
    for _ in 0..3 {
        script = script
            .query("b", "SHOW work_mem")
            .query("a", "BEGIN; SHOW work_mem; COMMIT");
    }
    pool(2, script)
}

/// A `SET` inside a transaction block outlives the block once it commits.
fn a_set_inside_a_committed_block_holds_too() -> Scenario {
    let mut script = Script::new(&["a", "b"]).query("a", "BEGIN; SET work_mem = '2345kB'; COMMIT");
    script = begin(script, "b").query("b", "SHOW work_mem");
    script = commit(script.query("a", "SHOW work_mem"), "b");
    pool(2, script)
}

/// `SET LOCAL` ends with its transaction: with one server, another client gets it next.
fn set_local_does_not_pin() -> Scenario {
    let script = Script::new(&["a", "b"])
        .query(
            "a",
            "BEGIN; SET LOCAL work_mem = '3456kB'; SHOW work_mem; COMMIT",
        )
        .query("b", "SHOW work_mem")
        .query("a", "SHOW work_mem");
    pool(1, script)
}

/// After `RESET ALL` a client no longer needs its server: with one server, another client
/// gets it (and sees the default).
fn reset_all_ends_the_pin() -> Scenario {
    let script = Script::new(&["a", "b"])
        .query("a", "SET work_mem = '1234kB'")
        .query("a", "SET statement_timeout = '50s'")
        .query("a", "SHOW work_mem")
        .query("a", "RESET ALL")
        .query("b", "SHOW work_mem")
        .query("b", "SHOW statement_timeout")
        .query("a", "SHOW work_mem");
    pool(1, script)
}

/// After `UNLISTEN *` (and only then: `UNLISTEN one` leaves the other channel) the pin ends.
fn unlisten_all_ends_the_pin() -> Scenario {
    let n = unique();
    let script = Script::new(&["a", "b"])
        .query("a", &format!("LISTEN pin_one_{n}"))
        .query("a", &format!("LISTEN pin_two_{n}"))
        .query("a", &format!("UNLISTEN pin_one_{n}"))
        .query("a", "SELECT pg_listening_channels()")
        .query("a", "UNLISTEN *")
        .query("b", "SELECT count(*) FROM pg_listening_channels()")
        .query("a", "SELECT 'a again'");
    pool(1, script)
}

/// `DISCARD ALL` undoes everything at once: a temp table, a `SET`, a `LISTEN`, a session
/// advisory lock.
fn discard_all_ends_the_pin() -> Scenario {
    let n = unique();
    let script = Script::new(&["a", "b"])
        .query("a", "CREATE TEMP TABLE pin_discarded (n int)")
        .query("a", "SET work_mem = '1234kB'")
        .query("a", &format!("LISTEN pin_discard_{n}"))
        .query("a", &format!("SELECT pg_advisory_lock({n})"))
        .query("a", "DISCARD ALL")
        .query("b", "SELECT to_regclass('pin_discarded') IS NULL AS gone")
        .query("b", "SHOW work_mem")
        // Two queries: a lock and an unlock in one text would keep b pinned (a pin and a
        // clear in one message: the pin wins, since the classifier keeps no order).
        .query("b", &format!("SELECT pg_try_advisory_lock({n})"))
        .query("b", "SELECT pg_advisory_unlock_all()")
        .query("a", "SELECT to_regclass('pin_discarded') IS NULL AS gone");
    pool(1, script)
}

/// `RESET ALL` in a block that rolls back resets nothing, and neither does one in a Query
/// that fails: A keeps its `SET` (and its server), and B does not see it.
fn a_rolled_back_reset_all_does_not_end_the_pin() -> Scenario {
    let mut script = Script::new(&["a", "b"])
        .query("a", "SET work_mem = '1234kB'")
        .query("a", "BEGIN")
        .query("a", "RESET ALL")
        .query("a", "ROLLBACK")
        .query("a", "SET statement_timeout = '40s'; RESET ALL; SELECT 1/0");
    script = begin(script, "b").query("b", "SHOW work_mem");
    script = commit(script.query("a", "SHOW work_mem"), "b");
    script = script.query("a", "SHOW statement_timeout");
    pool(2, script)
}

/// The same with `UNLISTEN *`: A still listens after the block rolls back, and still gets
/// its notifications.
fn a_rolled_back_unlisten_all_keeps_listening() -> Scenario {
    let channel = format!("pin_kept_{}", unique());
    let script = Script::new(&["a", "b"])
        .query("a", &format!("LISTEN {channel}"))
        .query("a", "BEGIN")
        .query("a", "UNLISTEN *")
        .query("a", "ROLLBACK")
        .query("a", "SELECT pg_listening_channels()")
        .query("b", &format!("NOTIFY {channel}, 'still heard'"))
        .await_tag("a", b'A');
    pool(2, script.step_timeout(Duration::from_secs(5)))
}

/// `RESET ALL; SET work_mem = ...` in one Query leaves a `SET` behind: the pin must hold
/// (the scanner cannot order a clear and a pin within one message, and says so:
/// `pgtier_wire::session_state` asks callers to let the pin win).
fn a_clear_and_a_new_set_in_one_query_keep_the_pin() -> Scenario {
    let mut script = Script::new(&["a", "b"])
        .query("a", "SET statement_timeout = '40s'")
        .query("a", "RESET ALL; SET work_mem = '1234kB'");
    script = begin(script, "b").query("b", "SHOW work_mem");
    script = commit(script.query("a", "SHOW work_mem"), "b");
    pool(2, script)
}

/// A's session advisory lock stays A's: B, on the other server, cannot take it, and A's
/// unlock finds it. `pg_advisory_unlock(key)` leaves A pinned (other locks may remain; the
/// pooler does not count them); `pg_advisory_unlock_all()` ends the pin, proved by C getting
/// a server while B holds the other one.
fn a_session_advisory_lock_pins_until_unlocked() -> Scenario {
    let (one, two) = (u64::from(unique()) * 2, u64::from(unique()) * 2 + 1);
    let mut script = Script::new(&["a", "b", "c"])
        .query("a", &format!("SELECT pg_advisory_lock({one})"))
        .query("b", &format!("SELECT pg_try_advisory_lock({one})"))
        .query("a", &format!("SELECT pg_try_advisory_lock({two})"))
        .query(
            "b",
            &format!("BEGIN; SELECT pg_try_advisory_lock({two}); COMMIT"),
        )
        .query("a", &format!("SELECT pg_advisory_unlock({two})"))
        .query("b", &format!("SELECT pg_try_advisory_lock({one})"))
        .query("a", "SELECT pg_advisory_unlock_all()");
    script = begin(script, "b").query("b", &format!("SELECT pg_try_advisory_lock({one})"));
    script = script.query("c", "SELECT 'c got the other server'");
    script = commit(script, "b").query("b", "SELECT pg_advisory_unlock_all()");
    pool(2, script)
}

/// Transaction-scoped advisory locks end with their transaction: no pin (one server,
/// another client gets it next).
fn transaction_advisory_locks_do_not_pin() -> Scenario {
    let (one, two) = (unique(), unique());
    let script = Script::new(&["a", "b"])
        .query(
            "a",
            &format!("BEGIN; SELECT pg_advisory_xact_lock({one}); COMMIT"),
        )
        .query("a", &format!("SELECT pg_try_advisory_xact_lock({two})"))
        .query(
            "b",
            &format!("SELECT pg_try_advisory_lock({one}), pg_try_advisory_lock({two})"),
        )
        .query("b", "SELECT pg_advisory_unlock_all()");
    pool(1, script)
}

const PIN_ROLE: &str = "pgtier_pin_role";

/// Creates `PIN_ROLE` once on the shared server (roles belong to the whole cluster).
fn ensure_pin_role() {
    static CREATED: Once = Once::new();
    CREATED.call_once(|| {
        admin(
            shared_server(),
            &format!(
                "DO $$ BEGIN CREATE ROLE {PIN_ROLE}; EXCEPTION WHEN duplicate_object THEN \
                 NULL; END $$; GRANT {PIN_ROLE} TO postgres"
            ),
        );
    });
}

/// `SET ROLE` pins (and `RESET ALL` leaves the role, as in PostgreSQL, so the pin stays):
/// A is that role in every later transaction, B never is.
fn set_role_pins() -> Scenario {
    ensure_pin_role();
    let mut script = Script::new(&["a", "b"]).query("a", &format!("SET ROLE {PIN_ROLE}"));
    script = begin(script, "b").query("b", "SELECT current_user");
    script = commit(script.query("a", "SELECT current_user"), "b");
    script = script
        .query("a", "RESET ALL")
        .query("a", "SELECT current_user");
    script = begin(script, "b").query("b", "SELECT current_user");
    script = commit(script.query("a", "BEGIN; SELECT current_user; COMMIT"), "b");
    pool(2, script)
}

/// `DISCARD ALL` after `SET ROLE` ends the pin: with one server, B gets it (as itself).
/// The server reports `is_superuser` going back to `on` at that `DISCARD ALL`.
fn discard_all_after_set_role_ends_the_pin() -> Scenario {
    ensure_pin_role();
    let script = Script::new(&["a", "b"])
        .report_parameters(&["is_superuser"])
        .query("a", &format!("SET ROLE {PIN_ROLE}"))
        .query("a", "DISCARD ALL")
        .query("b", "SELECT current_user")
        .query("a", "SELECT current_user");
    pool(1, script)
}

/// `RESET ALL` of a setting the server reports (`default_transaction_read_only`) ends the
/// pin: with one server, B gets it, and its transactions are not read-only.
fn reset_all_of_a_reported_setting_ends_the_pin() -> Scenario {
    let script = Script::new(&["a", "b"])
        .report_parameters(&["default_transaction_read_only"])
        .query("a", "SET default_transaction_read_only = on")
        .query("a", "RESET ALL")
        .query("b", "SHOW transaction_read_only")
        .query("a", "SHOW transaction_read_only");
    pool(1, script)
}

/// A `WITH HOLD` cursor declared outside a block is fetched from in A's later transactions;
/// B, on the other server, has no such cursor. `CLOSE ALL` ends the pin (one server left for
/// C once B holds the other).
fn a_cursor_with_hold_pins_until_closed() -> Scenario {
    let mut script = Script::new(&["a", "b", "c"])
        .query(
            "a",
            "DECLARE pin_cursor CURSOR WITH HOLD FOR SELECT generate_series(1, 6) AS n",
        )
        .query("a", "FETCH 2 FROM pin_cursor");
    script = begin(script, "b").query("b", "FETCH 1 FROM pin_cursor");
    script = script
        .query("b", "ROLLBACK")
        .query("a", "BEGIN; FETCH 2 FROM pin_cursor; COMMIT")
        .exchange(
            "a",
            f().parse("", "FETCH 1 FROM pin_cursor")
                .bind("", &[])
                .execute()
                .sync(),
            1,
        )
        .query("a", "CLOSE ALL");
    script = begin(script, "b").query("b", "SELECT 'b holds a server'");
    script = commit(script.query("c", "SELECT 'c got the other'"), "b");
    pool(2, script)
}

/// A setting changed where no statement scan sees it (dynamic SQL in a `DO` block) and
/// reported by the server (ParameterStatus `default_transaction_read_only`) pins: A's later
/// transactions are read-only, B's are not.
fn a_setting_the_server_reports_pins() -> Scenario {
    let mut script = Script::new(&["a", "b"])
        .report_parameters(&["default_transaction_read_only"])
        .query(
            "a",
            "DO $$ BEGIN EXECUTE 'SET default_transaction_read_only = on'; END $$",
        );
    script = begin(script, "b").query("b", "SHOW default_transaction_read_only");
    script = commit(script.query("a", "SHOW transaction_read_only"), "b");
    script = script.query("b", "SHOW transaction_read_only");
    pool(2, script)
}

/// A pinned client that leaves takes its state with it: the one server is reset before B
/// gets it. (B waits for the advisory lock rather than trying it: directly, A's backend
/// releases it when it has exited, a moment after A's Terminate.)
fn a_pinned_clients_state_is_gone_when_it_leaves() -> Scenario {
    let n = unique();
    let script = Script::new(&["a", "b"])
        .query("a", "SET work_mem = '1234kB'")
        .query("a", "CREATE TEMP TABLE pin_left (n int)")
        .query("a", &format!("LISTEN pin_left_{n}"))
        .query("a", &format!("SELECT pg_advisory_lock({n})"))
        .query("a", "DECLARE pin_left_cursor CURSOR WITH HOLD FOR SELECT 1")
        .query("a", "PREPARE pin_left_statement AS SELECT 1")
        .terminate("a")
        .query("b", "SHOW work_mem")
        .query(
            "b",
            "SELECT to_regclass('pin_left') IS NULL AS no_temp_table",
        )
        .query(
            "b",
            "SELECT (SELECT count(*) FROM pg_listening_channels()), \
             (SELECT count(*) FROM pg_cursors), (SELECT count(*) FROM pg_prepared_statements)",
        )
        .query(
            "b",
            &format!(
                "BEGIN; SET LOCAL lock_timeout = '5s'; SELECT pg_advisory_lock({n}); \
                 SELECT pg_advisory_unlock_all(); COMMIT"
            ),
        );
    pool(1, script)
}

/// A pool held entirely by a pinned client: the waiting client gets its timeout, the log
/// says why, and `SHOW CLIENTS` names the pin.
#[test]
fn a_pool_exhausted_by_pinned_clients_is_logged() {
    let pg = shared_server();
    let config = pgtier_tests::ProxyConfig::new(pg.port())
        .pool_mode("transaction")
        .pool_size(1)
        .setting("admin_users", "[\"postgres\"]")
        .setting("query_wait_timeout", "2");
    let proxy = pgtier_tests::fixtures::start_proxy(config);
    let mut listener = proxy.connect("postgres", "postgres").expect("a connects");
    listener
        .batch_execute(&format!("LISTEN pinned_out_{}", unique()))
        .expect("LISTEN");
    let mut waiter = proxy.connect("postgres", "postgres").expect("b connects");
    // query_wait_timeout: a FATAL 08P01 and a close (rust-postgres may report only the
    // close, depending on which it reads first).
    let error = waiter
        .simple_query("SELECT 1")
        .expect_err("no server is free");
    let code = pgtier_tests::fixtures::sqlstate(&error);
    assert!(
        code.is_none() || code.as_deref() == Some("08P01"),
        "{error}"
    );
    let mut console = proxy.connect("pgtier", "postgres").expect("console");
    let rows = console.simple_query("SHOW CLIENTS").expect("SHOW CLIENTS");
    let pinned: Vec<String> = rows
        .iter()
        .filter_map(|message| match message {
            postgres::SimpleQueryMessage::Row(row) => row.get("pinned").map(str::to_string),
            _ => None,
        })
        .collect();
    assert_eq!(pinned, ["listen"], "SHOW CLIENTS says who and why");
    assert!(
        proxy.log().contains("pool exhausted by pinned clients"),
        "{}",
        proxy.log()
    );
}
