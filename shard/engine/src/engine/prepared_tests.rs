//! Table tests of named statements in transaction mode (`crate::prepared`), through the
//! kernel-less harness: statements follow their client to any server, are prepared there on
//! demand, answer with the client's names, and pipelines with errors in them behave as on
//! PostgreSQL; and of pins that end when the state they stand for is gone.

use crate::testing::{
    self, Harness, Msg, bind, close, config, describe, execute, parse, query, sync,
};

/// Two servers at most, rewriting on (the default `max_prepared_statements`).
const TX: &str = "pool_mode = \"transaction\"\ndefault_pool_size = 1";

fn tags(messages: &[Msg]) -> String {
    messages.iter().map(|m| m.tag as char).collect()
}

fn errors(messages: &[Msg]) -> Vec<(String, String)> {
    messages
        .iter()
        .filter(|m| m.tag == b'E')
        .map(|m| {
            (
                m.sqlstate().unwrap_or_default(),
                m.field(b'M').unwrap_or_default(),
            )
        })
        .collect()
}

fn pipeline(parts: &[Vec<u8>]) -> Vec<u8> {
    parts.concat()
}

#[test]
fn two_clients_share_one_server_each_with_its_own_s1() {
    let mut h = Harness::new(&config(TX));
    let (a, _) = h.login("alice", "db");
    let (b, _) = h.login("alice", "db");
    h.client_sends(a, &pipeline(&[parse("s1", "SELECT 1"), sync()]));
    assert_eq!(h.client_tags(a), "1Z");
    h.client_sends(b, &pipeline(&[parse("s1", "SELECT 2"), sync()]));
    assert_eq!(
        h.client_tags(b),
        "1Z",
        "no 'already exists': b's s1 is its own"
    );
    assert_eq!(h.live_servers().len(), 1, "both ran on the one server");
    let server = h.live_servers()[0];
    assert_eq!(h.backend(server).statements, ["pgtier_1", "pgtier_2"]);
    for client in [a, b] {
        h.client_sends(client, &pipeline(&[bind("s1"), execute(), sync()]));
        assert_eq!(h.client_tags(client), "2CZ");
    }
    assert!(
        !h.backend(server).seen.iter().any(|sql| sql.is_empty()),
        "nothing but the two Parses reached the server"
    );
}

#[test]
fn the_same_text_is_one_statement_on_the_server() {
    let mut h = Harness::new(&config(TX));
    let (a, _) = h.login("alice", "db");
    let (b, _) = h.login("alice", "db");
    for client in [a, b] {
        h.client_sends(client, &pipeline(&[parse("mine", "SELECT 1"), sync()]));
        assert_eq!(h.client_tags(client), "1Z");
    }
    let server = h.live_servers()[0];
    assert_eq!(
        h.backend(server).statements,
        ["pgtier_1"],
        "b's Parse of the same text re-prepared it (Close, Parse) rather than making a second"
    );
    let closes = h
        .output_to(server)
        .windows(10)
        .filter(|w| w == b"Spgtier_1\0")
        .count();
    assert_eq!(closes, 1, "one Close before b's Parse");
}

#[test]
fn a_statement_is_prepared_again_on_every_new_server() {
    let mut h = Harness::new(&config(&format!("{TX}\nserver_lifetime = 0")));
    let (a, _) = h.login("alice", "db");
    h.client_sends(a, &pipeline(&[parse("s1", "SELECT 1"), sync()]));
    assert_eq!(h.client_tags(a), "1Z");
    for round in 0..3 {
        h.client_sends(a, &pipeline(&[bind("s1"), execute(), sync()]));
        assert_eq!(
            h.client_tags(a),
            "2CZ",
            "round {round}: the injected Parse is not seen"
        );
        assert!(
            h.live_servers().is_empty(),
            "round {round}: its server was used once"
        );
    }
}

#[test]
fn errors_carry_the_clients_names() {
    let mut h = Harness::new(&config(TX));
    let (a, _) = h.login("alice", "db");
    h.client_sends(a, &pipeline(&[parse("s1", "SELECT 1"), sync()]));
    assert_eq!(h.client_tags(a), "1Z");
    h.client_sends(a, &pipeline(&[parse("s1", "SELECT 2"), sync()]));
    let out = h.client_output(a);
    assert_eq!(tags(&out), "EZ");
    assert_eq!(
        errors(&out),
        [(
            "42P05".into(),
            "prepared statement \"s1\" already exists".into()
        )]
    );
    h.client_sends(a, &pipeline(&[bind("nope"), execute(), sync()]));
    let out = h.client_output(a);
    assert_eq!(
        errors(&out),
        [(
            "26000".into(),
            "prepared statement \"nope\" does not exist".into()
        )],
        "an unknown name reaches the server as the client wrote it"
    );
    h.client_sends(
        a,
        &pipeline(&[describe(b'S', "s1"), close(b'S', "other"), sync()]),
    );
    assert_eq!(h.client_tags(a), "tn3Z");
}

#[test]
fn an_error_in_a_pipeline_skips_to_the_sync_and_what_was_skipped_does_not_exist() {
    let mut h = Harness::new(&config(TX));
    let (a, _) = h.login("alice", "db");
    h.client_sends(
        a,
        &pipeline(&[
            parse("s1", "SELECT 1"),
            bind("s1"),
            execute(),
            parse("s2", "FAIL here"),
            bind("s2"),
            execute(),
            parse("s3", "SELECT 3"),
            close(b'S', "s1"),
            sync(),
            bind("s1"),
            execute(),
            sync(),
            bind("s3"),
            sync(),
        ]),
    );
    let out = h.client_output(a);
    assert_eq!(tags(&out), "12CEZ2CZEZ", "as PostgreSQL answers it");
    let errs = errors(&out);
    assert_eq!(errs[0].0, "42601");
    assert_eq!(
        errs[1],
        (
            "26000".into(),
            "prepared statement \"s3\" does not exist".into()
        ),
        "the skipped Parse made nothing, and the skipped Close closed nothing"
    );
}

#[test]
fn a_close_forgets_the_name_and_keeps_the_statement_for_others() {
    let mut h = Harness::new(&config(TX));
    let (a, _) = h.login("alice", "db");
    let (b, _) = h.login("alice", "db");
    h.client_sends(b, &pipeline(&[parse("theirs", "SELECT 1"), sync()]));
    assert_eq!(h.client_tags(b), "1Z");
    h.client_sends(
        a,
        &pipeline(&[parse("s1", "SELECT 1"), close(b'S', "s1"), sync()]),
    );
    assert_eq!(h.client_tags(a), "13Z");
    h.client_sends(a, &pipeline(&[bind("s1"), sync()]));
    assert_eq!(errors(&h.client_output(a))[0].0, "26000");
    let server = h.live_servers()[0];
    assert_eq!(
        h.backend(server).statements,
        ["pgtier_1"],
        "b still holds the text"
    );
    h.client_sends(a, &pipeline(&[parse("s1", "SELECT 2"), bind("s1"), sync()]));
    assert_eq!(h.client_tags(a), "12Z", "the name is free again");
}

#[test]
fn a_full_cache_evicts_the_least_recently_used() {
    let mut h = Harness::new(&config(&format!("{TX}\nmax_prepared_statements = 2")));
    let (a, _) = h.login("alice", "db");
    for (name, sql) in [("a", "SELECT 1"), ("b", "SELECT 2"), ("c", "SELECT 3")] {
        h.client_sends(a, &pipeline(&[parse(name, sql), sync()]));
        assert_eq!(h.client_tags(a), "1Z");
    }
    let server = h.live_servers()[0];
    assert_eq!(h.backend(server).statements, ["pgtier_2", "pgtier_3"]);
    h.client_sends(a, &pipeline(&[bind("a"), execute(), sync()]));
    assert_eq!(h.client_tags(a), "2CZ", "a is prepared again, out of sight");
    assert_eq!(h.backend(server).statements, ["pgtier_3", "pgtier_1"]);
}

#[test]
fn in_an_aborted_transaction_the_server_gives_its_own_errors() {
    let mut h = Harness::new(&config(TX));
    let (a, _) = h.login("alice", "db");
    h.client_sends(a, &pipeline(&[parse("s1", "SELECT 1"), sync()]));
    assert_eq!(h.client_tags(a), "1Z");
    h.client_sends(a, &query("BEGIN; FAIL"));
    assert_eq!(h.client_tags(a), "CEZ");
    h.client_sends(
        a,
        &pipeline(&[parse("s2", "SELECT 2"), sync(), bind("s1"), sync()]),
    );
    let out = h.client_output(a);
    assert_eq!(tags(&out), "EZEZ");
    assert!(
        errors(&out).iter().all(|(code, _)| code == "25P02"),
        "{:?}",
        errors(&out)
    );
    h.client_sends(a, &query("ROLLBACK"));
    assert_eq!(h.client_tags(a), "CZ");
    h.client_sends(a, &pipeline(&[bind("s2"), sync()]));
    assert_eq!(
        errors(&h.client_output(a))[0].0,
        "26000",
        "the refused Parse made nothing"
    );
}

#[test]
fn sql_deallocate_of_a_protocol_statement_is_renamed() {
    let mut h = Harness::new(&config(TX));
    let (a, _) = h.login("alice", "db");
    h.client_sends(a, &pipeline(&[parse("_pg3_0", "SELECT 1"), sync()]));
    assert_eq!(h.client_tags(a), "1Z");
    h.client_sends(a, &query("DEALLOCATE _pg3_0"));
    assert_eq!(h.client_tags(a), "CZ", "as from PostgreSQL");
    h.client_sends(a, &pipeline(&[bind("_pg3_0"), sync()]));
    assert_eq!(errors(&h.client_output(a))[0].0, "26000", "it is gone");
    h.client_sends(a, &query("DEALLOCATE _pg3_0"));
    assert_eq!(
        errors(&h.client_output(a)),
        [(
            "26000".into(),
            "prepared statement \"_pg3_0\" does not exist".into()
        )]
    );
}

#[test]
fn sql_deallocate_on_a_server_that_never_had_it_prepares_it_first() {
    let mut h = Harness::new(&config(&format!("{TX}\nserver_lifetime = 0")));
    let (a, _) = h.login("alice", "db");
    h.client_sends(a, &pipeline(&[parse("s1", "SELECT 1"), sync()]));
    assert_eq!(h.client_tags(a), "1Z");
    h.client_sends(a, &query("DEALLOCATE s1"));
    assert_eq!(
        h.client_tags(a),
        "CZ",
        "the injected Parse and Sync are not seen"
    );
}

#[test]
fn deallocate_all_forgets_every_name_once_it_succeeds() {
    let mut h = Harness::new(&config(TX));
    let (a, _) = h.login("alice", "db");
    h.client_sends(a, &pipeline(&[parse("s1", "SELECT 1"), sync()]));
    assert_eq!(h.client_tags(a), "1Z");
    h.client_sends(a, &query("DEALLOCATE ALL"));
    assert_eq!(h.client_tags(a), "CZ");
    h.client_sends(a, &pipeline(&[bind("s1"), sync()]));
    assert_eq!(errors(&h.client_output(a))[0].0, "26000");
    h.client_sends(a, &pipeline(&[parse("s1", "SELECT 1"), bind("s1"), sync()]));
    assert_eq!(
        h.client_tags(a),
        "12Z",
        "prepared again (Close, Parse: the cache did not trust it)"
    );
}

#[test]
fn a_named_deallocate_all_forgets_every_name_at_its_execute() {
    let mut h = Harness::new(&config(
        "pool_mode = \"transaction\"\ndefault_pool_size = 2",
    ));
    let (a, _) = h.login("alice", "db");
    let (b, _) = h.login("alice", "db");
    h.client_sends(
        a,
        &pipeline(&[
            parse("s1", "SELECT 1"),
            parse("s2", "DEALLOCATE ALL"),
            sync(),
        ]),
    );
    assert_eq!(h.client_tags(a), "11Z");
    h.client_sends(a, &pipeline(&[bind("s2"), execute(), sync()]));
    assert_eq!(h.client_tags(a), "2CZ");
    // b holds the first server, so a's next transaction runs on a second one.
    h.client_sends(b, &query("BEGIN"));
    assert_eq!(h.client_tags(b), "CZ");
    h.client_sends(a, &pipeline(&[parse("s1", "SELECT 2"), sync()]));
    assert_eq!(
        h.client_tags(a),
        "1Z",
        "s1 is gone, as on PostgreSQL: a new Parse of it succeeds (no 42P05)"
    );
    assert_eq!(h.live_servers().len(), 2);
}

#[test]
fn the_unnamed_statement_follows_its_client_and_never_reaches_another() {
    let mut h = Harness::new(&config(
        "pool_mode = \"transaction\"\ndefault_pool_size = 2",
    ));
    let (a, _) = h.login("alice", "db");
    let (b, _) = h.login("alice", "db");
    // asyncpg without a statement cache: Parse/Describe/Sync, then Bind/Execute/Sync.
    h.client_sends(
        a,
        &pipeline(&[parse("", "SELECT 1"), describe(b'S', ""), sync()]),
    );
    assert_eq!(h.client_tags(a), "1tnZ");
    let first = h.live_servers()[0];
    // b holds that server, so a's next transaction runs on a second one.
    h.client_sends(b, &query("BEGIN"));
    assert_eq!(h.client_tags(b), "CZ");
    h.client_sends(a, &pipeline(&[bind(""), execute(), sync()]));
    assert_eq!(
        h.client_tags(a),
        "2CZ",
        "the client's unnamed statement was prepared on the second server first"
    );
    let second = *h
        .live_servers()
        .iter()
        .find(|&&server| server != first)
        .expect("a second server");
    assert_eq!(h.backend(second).unnamed.as_deref(), Some("SELECT 1"));
    // The first server still holds a's unnamed statement; b never parsed one.
    h.client_sends(b, &query("COMMIT"));
    assert_eq!(h.client_tags(b), "CZ");
    h.client_sends(b, &pipeline(&[bind(""), execute(), sync()]));
    let out = h.client_output(b);
    assert_eq!(tags(&out), "EZ", "b must not run a's statement");
    assert_eq!(errors(&out)[0].0, "26000");
    h.client_sends(b, &pipeline(&[describe(b'S', ""), sync()]));
    assert_eq!(errors(&h.client_output(b))[0].0, "26000");
    // A simple Query drops the client's own, as on PostgreSQL.
    h.client_sends(a, &query("SELECT 2"));
    h.client_tags(a);
    h.client_sends(a, &pipeline(&[bind(""), execute(), sync()]));
    assert_eq!(errors(&h.client_output(a))[0].0, "26000");
}

#[test]
fn a_client_over_its_statement_bytes_is_closed_with_53200() {
    let mut h = Harness::new(&config(&format!("{TX}\nmax_client_prepared_bytes = 40")));
    let (a, _) = h.login("alice", "db");
    h.client_sends(a, &pipeline(&[parse("s1", "SELECT 1"), sync()]));
    assert_eq!(h.client_tags(a), "1Z");
    h.client_sends(
        a,
        &pipeline(&[parse("s2", "SELECT 'a much longer text'"), sync()]),
    );
    let out = h.client_output(a);
    assert_eq!(errors(&out)[0].0, "53200");
    assert!(h.is_closed(crate::action::Conn::Client(a)));
}

#[test]
fn unlisten_all_ends_the_pin_and_the_server_goes_back() {
    let mut h = Harness::new(&config(TX));
    let (a, _) = h.login("alice", "db");
    let (b, _) = h.login("alice", "db");
    h.client_sends(a, &query("LISTEN things"));
    assert_eq!(h.client_tags(a), "CZ");
    h.client_sends(b, &query("SELECT 1"));
    assert_eq!(h.client_tags(b), "", "a holds the one server");
    h.client_sends(a, &query("UNLISTEN *"));
    assert_eq!(h.client_tags(a), "CZ");
    assert_eq!(h.client_tags(b), "TDCZ", "a let go: b got the server");
}

#[test]
fn a_clear_that_fails_keeps_the_pin() {
    let mut h = Harness::new(&config(TX));
    let (a, _) = h.login("alice", "db");
    let (b, _) = h.login("alice", "db");
    h.client_sends(a, &query("SET work_mem = '1MB'"));
    assert_eq!(h.client_tags(a), "CZ");
    h.client_sends(a, &query("BEGIN; RESET ALL; FAIL"));
    assert_eq!(h.client_tags(a), "CCEZ");
    h.client_sends(a, &query("ROLLBACK"));
    assert_eq!(h.client_tags(a), "CZ");
    h.client_sends(b, &query("SELECT 1"));
    assert_eq!(
        h.client_tags(b),
        "",
        "the rolled-back RESET ALL reset nothing"
    );
    h.client_sends(a, &query("RESET ALL"));
    assert_eq!(h.client_tags(a), "CZ");
    assert_eq!(h.client_tags(b), "TDCZ");
    let server = h.live_servers()[0];
    assert!(
        h.backend(server)
            .seen
            .iter()
            .any(|sql| sql == "DISCARD ALL"),
        "its server was reset before b got it"
    );
}

#[test]
fn pgbench_prepared_pattern_over_a_shared_server() {
    let mut h = Harness::new(&config(TX));
    let (a, _) = h.login("alice", "db");
    let (b, _) = h.login("alice", "db");
    for client in [a, b] {
        h.client_sends(client, &pipeline(&[parse("P0_0", "BEGIN"), sync()]));
        assert_eq!(h.client_tags(client), "1Z");
    }
    h.client_sends(a, &pipeline(&[bind("P0_0"), execute(), sync()]));
    assert_eq!(h.client_tags(a), "2CZ");
    h.client_sends(a, &pipeline(&[parse("P0_1", "SELECT 1"), sync()]));
    assert_eq!(h.client_tags(a), "1Z", "a Parse inside a's transaction");
    h.client_sends(a, &pipeline(&[bind("P0_1"), execute(), sync()]));
    assert_eq!(h.client_tags(a), "2CZ");
    h.client_sends(b, &pipeline(&[bind("P0_0"), execute(), sync()]));
    h.client_sends(a, &pipeline(&[parse("P0_2", "COMMIT"), sync()]));
    assert_eq!(h.client_tags(a), "1Z");
    h.client_sends(a, &pipeline(&[bind("P0_2"), execute(), sync()]));
    assert_eq!(h.client_tags(a), "2CZ");
    assert_eq!(h.client_tags(b), "2CZ", "b got the server after a's COMMIT");
}

#[test]
fn show_clients_says_why_a_client_is_pinned_and_counts_its_statements() {
    let mut h = Harness::new(&config(TX));
    let (a, _) = h.login("alice", "db");
    let (b, _) = h.login("alice", "db");
    h.client_sends(a, &query("LISTEN things"));
    h.client_sends(a, &query("SET work_mem = '1MB'"));
    h.client_sends(b, &pipeline(&[parse("s1", "SELECT 1"), sync()]));
    assert_eq!(h.client_tags(a), "CZCZ");
    assert_eq!(h.client_tags(b), "", "b waits: a pinned the one server");
    let rows = h.engine.list_sessions().clients;
    let row = |pinned: &str| rows.iter().find(|row| row.pinned == pinned).cloned();
    assert!(row("set,listen").is_some(), "{rows:?}");
    h.client_sends(a, &query("DISCARD ALL"));
    assert_eq!(h.client_tags(a), "CZ");
    assert_eq!(h.client_tags(b), "1Z");
    let rows = h.engine.list_sessions().clients;
    assert!(rows.iter().all(|row| row.pinned.is_empty()), "{rows:?}");
    assert_eq!(
        rows.iter()
            .map(|row| row.prepared_statements)
            .sum::<usize>(),
        1
    );
}

/// psycopg's pipeline: unnamed statements, Flush instead of Sync, an error, more sent
/// after it (skipped by the server), then the Sync.
#[test]
fn a_pipeline_aborted_by_an_error_is_restored_by_its_sync() {
    let mut h = Harness::new(&config(TX));
    let (a, _) = h.login("alice", "db");
    let flush = testing::frame(b'H', b"");
    let statement =
        |sql: &str| pipeline(&[parse("", sql), bind(""), describe(b'P', ""), execute()]);
    h.client_sends(a, &statement("SELECT 1"));
    h.client_sends(a, &pipeline(&[statement("FAIL"), flush.clone()]));
    assert_eq!(h.client_tags(a), "12nCE");
    h.client_sends(a, &pipeline(&[statement("SELECT 2"), flush]));
    assert_eq!(h.client_tags(a), "");
    h.client_sends(a, &sync());
    assert_eq!(h.client_tags(a), "Z");
    h.client_sends(a, &pipeline(&[statement("SELECT 3"), sync()]));
    assert_eq!(h.client_tags(a), "12nCZ");
}

/// The client's Sync waited behind a Query whose segment fails before it: the server skips
/// the Query, so the Sync must go once the error is in.
#[test]
fn a_sync_held_behind_a_skipped_query_goes_after_the_error() {
    let mut h = Harness::new(&config(&format!("{TX}\nserver_lifetime = 0")));
    let (a, _) = h.login("alice", "db");
    h.client_sends(a, &pipeline(&[parse("s1", "SELECT 1"), sync()]));
    assert_eq!(h.client_tags(a), "1Z");
    h.client_sends(
        a,
        &pipeline(&[
            parse("", "FAIL"),
            bind(""),
            execute(),
            query("EXECUTE s1"),
            sync(),
        ]),
    );
    assert_eq!(
        h.client_tags(a),
        "EZ",
        "the Query was skipped, the Sync answered"
    );
}

/// A statement no client holds any more is closed on a server the next time that server
/// makes room, so its statements are those of live clients (as `pg_prepared_statements`
/// would show for a server of their own).
#[test]
fn the_statements_of_clients_that_left_are_closed() {
    let mut h = Harness::new(&config(TX));
    let (a, _) = h.login("alice", "db");
    h.client_sends(a, &pipeline(&[parse("s1", "SELECT 1"), sync()]));
    assert_eq!(h.client_tags(a), "1Z");
    h.client_leaves(a);
    let (b, _) = h.login("alice", "db");
    h.client_sends(b, &pipeline(&[parse("s1", "SELECT 2"), sync()]));
    assert_eq!(h.client_tags(b), "1Z");
    let server = h.live_servers()[0];
    assert_eq!(h.backend(server).statements, ["pgtier_2"]);
}

/// The statements of a client that left are closed before the next segment on its server,
/// even when nobody prepares anything there again.
#[test]
fn orphans_are_closed_before_the_next_segment() {
    let mut h = Harness::new(&config(TX));
    let (a, _) = h.login("alice", "db");
    h.client_sends(a, &pipeline(&[parse("s1", "SELECT 1"), sync()]));
    assert_eq!(h.client_tags(a), "1Z");
    h.client_leaves(a);
    let (b, _) = h.login("alice", "db");
    h.client_sends(b, &query("SELECT 1"));
    assert_eq!(
        h.client_tags(b),
        "TDCZ",
        "the Close and its Sync are not seen"
    );
    let server = h.live_servers()[0];
    assert!(h.backend(server).statements.is_empty());
    h.client_sends(b, &query("SELECT 2"));
    assert_eq!(h.client_tags(b), "TDCZ");
}

/// psycopg deallocates an evicted statement with SQL `DEALLOCATE name`: the client's other
/// statements stay prepared on the server (no Close and Parse again on their next use).
#[test]
fn deallocating_one_statement_leaves_the_others_prepared() {
    let mut h = Harness::new(&config(TX));
    let (a, _) = h.login("alice", "db");
    h.client_sends(
        a,
        &pipeline(&[parse("s1", "SELECT 1"), parse("s2", "SELECT 2"), sync()]),
    );
    assert_eq!(h.client_tags(a), "11Z");
    h.client_sends(a, &query("DEALLOCATE s1"));
    assert_eq!(h.client_tags(a), "CZ");
    let server = h.live_servers()[0];
    let parses_before = h.backend(server).seen.len();
    h.client_sends(a, &pipeline(&[bind("s2"), execute(), sync()]));
    assert_eq!(h.client_tags(a), "2CZ");
    assert_eq!(
        h.backend(server).seen.len(),
        parses_before,
        "s2 was not prepared again"
    );
    h.client_sends(a, &query("DEALLOCATE sql_level_name"));
    h.client_sends(a, &pipeline(&[bind("s2"), execute(), sync()]));
    assert!(h.client_tags(a).ends_with("2CZ"));
    assert_eq!(
        h.backend(server).seen.len(),
        parses_before + 1,
        "only the Query"
    );
}

/// A pinned client whose messages waited behind pgtier's own segment (closing statements of
/// clients that left) gets them sent once that segment is answered, though its server then
/// sits idle and stays with it.
#[test]
fn a_pinned_clients_held_messages_go_after_an_idle_ready() {
    let mut h = Harness::new(&config(TX));
    let (gone, _) = h.login("alice", "db");
    h.client_sends(gone, &pipeline(&[parse("s1", "SELECT 1"), sync()]));
    assert_eq!(h.client_tags(gone), "1Z");
    h.client_leaves(gone);
    let (a, _) = h.login("alice", "db");
    h.client_sends(a, &query("SET work_mem = '1MB'"));
    assert_eq!(h.client_tags(a), "CZ");
    h.client_sends(
        a,
        &pipeline(&[parse("s2", "SELECT 2"), describe(b'S', "s2"), sync()]),
    );
    assert_eq!(h.client_tags(a), "1tnZ");
    // A segment that prepares, then one that uses it, in one write: the second waits for
    // the first's ReadyForQuery, after which the pinned server is idle.
    h.client_sends(
        a,
        &pipeline(&[
            parse("s3", "SELECT 3"),
            sync(),
            bind("s3"),
            execute(),
            sync(),
        ]),
    );
    assert_eq!(
        h.client_tags(a),
        "1Z2CZ",
        "the held segment went and was answered"
    );
}

/// Reloads `h` with `config(extra)`.
fn reload(h: &mut Harness, extra: &str) {
    let config =
        pgtier_core::config::Config::from_str(&config(extra), "/tmp/reload.toml").expect("config");
    h.engine.handle_command(
        h.now,
        crate::command::Command::Reload {
            config: std::sync::Arc::new(config),
            users: std::sync::Arc::new(crate::userlist::UserList::new()),
            tls: Default::default(),
            pending: None,
        },
    );
    h.pump();
}

#[test]
fn max_prepared_statements_set_to_zero_pauses_rewriting_on_servers_that_did_it() {
    let mut h = Harness::new(&config(TX));
    let (a, _) = h.login("alice", "db");
    h.client_sends(a, &pipeline(&[parse("s1", "SELECT 1"), sync()]));
    assert_eq!(h.client_tags(a), "1Z");
    let server = h.live_servers()[0];
    reload(&mut h, &format!("{TX}\nmax_prepared_statements = 0"));
    // The client's name goes to the server as it is, which does not know it.
    h.client_sends(a, &pipeline(&[bind("s1"), execute(), sync()]));
    let answer = h.client_output(a);
    assert_eq!(tags(&answer), "EZ");
    assert_eq!(errors(&answer)[0].0, "26000");
    assert_eq!(
        h.backend(server).statements,
        ["pgtier_1"],
        "what the server holds stays"
    );
    // Raised again: the statement is rewritten and prepared again (closed first: while
    // paused, the client could have dropped anything).
    reload(&mut h, TX);
    h.client_sends(a, &pipeline(&[bind("s1"), execute(), sync()]));
    assert_eq!(h.client_tags(a), "2CZ");
    assert_eq!(h.live_servers(), [server]);
}

/// `SHOW STATS`' prepared statement counters, as PgBouncer counts them: a client's named
/// Parse, a Parse pgtier sends for a statement the server lacks (not a re-prepare of one it
/// holds), and a Bind of a named statement.
#[test]
fn named_parses_server_parses_and_binds_are_counted_per_database() {
    let mut h = Harness::new(&config(TX));
    let (a, _) = h.login("alice", "db");
    let (b, _) = h.login("alice", "db");
    h.client_sends(a, &pipeline(&[parse("s1", "SELECT 1"), sync()]));
    assert_eq!(h.client_tags(a), "1Z");
    for _ in 0..2 {
        h.client_sends(a, &pipeline(&[bind("s1"), execute(), sync()]));
        assert_eq!(h.client_tags(a), "2CZ");
    }
    // b prepares the same text on the server that holds it: no new server statement.
    h.client_sends(
        b,
        &pipeline(&[parse("s2", "SELECT 1"), bind("s2"), execute(), sync()]),
    );
    assert_eq!(h.client_tags(b), "12CZ");
    // Unnamed statements are not counted.
    h.client_sends(
        b,
        &pipeline(&[parse("", "SELECT 3"), bind(""), execute(), sync()]),
    );
    assert_eq!(h.client_tags(b), "12CZ");
    h.engine.fold_counters();
    let stats = h.engine.env.shared().databases.stats();
    let db = stats.iter().find(|s| &*s.database == "db").expect("db");
    assert_eq!(db.totals.client_parse_count, 2);
    assert_eq!(db.totals.server_parse_count, 1);
    assert_eq!(db.totals.bind_count, 3);
}

/// A server opened while `max_prepared_statements` was 0 rewrites named statements once it
/// is turned on: a second client's `s1` is its own on that same server.
#[test]
fn a_server_opened_without_rewriting_takes_it_up_once_it_is_on() {
    let mut h = Harness::new(&config(&format!("{TX}\nmax_prepared_statements = 0")));
    let (a, _) = h.login("alice", "db");
    h.client_sends(a, &query("SELECT 1"));
    assert_eq!(h.client_tags(a), "TDCZ");
    let server = h.live_servers()[0];
    let on = pgtier_core::config::Config::from_str(
        &config(&format!("{TX}\nmax_prepared_statements = 10")),
        "/tmp/pgtier-engine-test.toml",
    )
    .expect("config");
    h.engine.handle_command(
        h.now,
        crate::command::Command::Reload {
            config: std::sync::Arc::new(on),
            users: std::sync::Arc::new(crate::userlist::UserList::new()),
            tls: Default::default(),
            pending: None,
        },
    );
    h.pump();
    let (b, _) = h.login("alice", "db");
    h.client_sends(b, &pipeline(&[parse("s1", "SELECT 2"), sync()]));
    assert_eq!(h.client_tags(b), "1Z");
    assert_eq!(h.live_servers(), [server], "the same server");
    assert_eq!(h.backend(server).statements, ["pgtier_1"], "renamed");
}

/// The chunks the engine sends to `server` for `bytes` from `client` (the server answers
/// nothing meanwhile).
fn sends_for(
    h: &mut Harness,
    client: crate::ClientId,
    server: crate::ServerId,
    bytes: &[u8],
) -> Vec<Vec<u8>> {
    h.engine
        .handle_client_data(h.now, client, bytes::BytesMut::from(bytes));
    let mut sends = Vec::new();
    while let Some(action) = h.engine.poll_action() {
        if let crate::Action::Send { conn, bytes } = action
            && conn == crate::Conn::Server(server)
        {
            sends.push(bytes.to_vec());
        }
    }
    sends
}

#[test]
fn an_unnamed_pipeline_reaches_the_server_as_it_came_in_one_piece() {
    let mut h = Harness::new(&config(TX));
    let (a, _) = h.login("alice", "db");
    let server = h.live_servers()[0];
    h.auto_backend = false;
    // What libpq's PQsendQueryParams writes (pgbench -M extended).
    let unnamed = pipeline(&[
        parse("", "SELECT $1"),
        bind(""),
        describe(b'P', ""),
        execute(),
        sync(),
    ]);
    let sent = sends_for(&mut h, a, server, &unnamed);
    assert_eq!(sent, [unnamed]);
    h.server_sends(server, &backend_answer());
    assert_eq!(h.client_tags(a), "12TDCZ");
    // A named statement is rewritten: the client's bytes around it keep their order.
    let named = pipeline(&[
        parse("", "SELECT $1"),
        parse("s1", "SELECT 2"),
        bind(""),
        execute(),
        sync(),
    ]);
    let sends = sends_for(&mut h, a, server, &named);
    let unnamed_parse = parse("", "SELECT $1");
    assert_eq!(
        sends.len(),
        3,
        "before, the rewritten Parse, after: {sends:?}"
    );
    assert_eq!(sends[0], unnamed_parse);
    let renamed = String::from_utf8_lossy(&sends[1]);
    assert!(
        renamed.starts_with('P')
            && renamed.contains("pgtier_")
            && renamed.ends_with("\0SELECT 2\0\0\0"),
        "{renamed:?}"
    );
    assert_eq!(sends[2], pipeline(&[bind(""), execute(), sync()]));
}

/// PostgreSQL's answer to Parse, Bind, Describe portal, Execute, Sync of one row.
fn backend_answer() -> Vec<u8> {
    pipeline(&[
        testing::frame(b'1', b""),
        testing::frame(b'2', b""),
        testing::frame(
            b'T',
            b"\0\x01a\0\0\0\0\0\0\0\0\0\0\x17\0\x04\xff\xff\xff\xff\0\0",
        ),
        testing::frame(b'D', b"\0\x01\0\0\0\x011"),
        testing::frame(b'C', b"SELECT 1\0"),
        testing::frame(b'Z', b"I"),
    ])
}
