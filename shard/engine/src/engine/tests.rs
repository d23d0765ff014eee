//! Table tests of the whole engine, driven with byte sequences through the kernel-less
//! harness (`crate::testing`): logins, each pool mode, release points, pinning, pipelining,
//! COPY, clients and servers vanishing in every state, cancel, timeouts, back-pressure.

use std::time::Duration;

use crate::action::{CloseHow, Conn};
use crate::testing::{self, Harness, config, query, startup, terminate};

const TX: &str = "pool_mode = \"transaction\"\ndefault_pool_size = 2";
const SESSION: &str = "pool_mode = \"session\"\ndefault_pool_size = 2";

fn errors(messages: &[testing::Msg]) -> Vec<String> {
    messages
        .iter()
        .filter(|m| m.tag == b'E')
        .filter_map(|m| m.sqlstate())
        .collect()
}

#[test]
fn a_trust_login_is_welcomed_by_its_first_server_then_from_the_pool_cache() {
    let mut h = Harness::new(&config(TX));
    let (first, messages) = h.login("alice", "db");
    let tags: String = messages.iter().map(|m| m.tag as char).collect();
    assert!(tags.starts_with('R') && tags.ends_with("KZ"), "{tags}");
    assert_eq!(
        h.live_servers().len(),
        1,
        "one server logged in for the welcome"
    );
    let (_second, messages) = h.login("alice", "db");
    assert_eq!(messages.last().map(|m| m.tag), Some(b'Z'));
    assert_eq!(
        h.live_servers().len(),
        1,
        "the second welcome needed no server"
    );
    assert!(!h.is_closed(Conn::Client(first)));
}

#[test]
fn transaction_mode_releases_the_server_at_ready_for_query_idle() {
    let mut h = Harness::new(&config(TX));
    let (a, _) = h.login("alice", "db");
    let (b, _) = h.login("alice", "db");
    h.client_sends(a, &query("SELECT 1"));
    assert_eq!(h.client_tags(a), "TDCZ");
    h.client_sends(b, &query("SELECT 1"));
    assert_eq!(h.client_tags(b), "TDCZ");
    assert_eq!(h.live_servers().len(), 1, "both clients shared one server");
}

#[test]
fn a_transaction_keeps_its_server_until_it_ends() {
    let mut h = Harness::new(&config(
        "pool_mode = \"transaction\"\ndefault_pool_size = 1",
    ));
    let (a, _) = h.login("alice", "db");
    let (b, _) = h.login("alice", "db");
    h.client_sends(a, &query("BEGIN"));
    assert_eq!(h.client_tags(a), "CZ");
    h.client_sends(b, &query("SELECT 1"));
    assert_eq!(
        h.client_tags(b),
        "",
        "b waits: the only server is in a's transaction"
    );
    h.client_sends(a, &query("COMMIT"));
    assert_eq!(h.client_tags(a), "CZ");
    assert_eq!(
        h.client_tags(b),
        "TDCZ",
        "b got the server once a committed"
    );
}

#[test]
fn pipelined_queries_run_in_order_and_release_after_the_last() {
    let mut h = Harness::new(&config(TX));
    let (a, _) = h.login("alice", "db");
    let mut bytes = query("SELECT 1");
    bytes.extend(query("SELECT 2"));
    h.client_sends(a, &bytes);
    assert_eq!(h.client_tags(a), "TDCZTDCZ");
}

#[test]
fn session_mode_gives_the_real_pid_and_resets_between_clients() {
    let mut h = Harness::new(&config(SESSION));
    let (a, messages) = h.login("alice", "db");
    let server = h.live_servers()[0];
    let pid = h.backend(server).pid;
    let key = messages
        .iter()
        .find(|m| m.tag == b'K')
        .expect("BackendKeyData");
    assert_eq!(
        u32::from_be_bytes([key.body[0], key.body[1], key.body[2], key.body[3]]),
        pid
    );
    h.client_sends(a, &query("SET work_mem = '7MB'"));
    h.client_sends(a, &terminate());
    assert!(h.backend(server).seen.iter().any(|q| q == "DISCARD ALL"));
    assert!(h.backend(server).settings.is_empty());
    let (_b, _) = h.login("alice", "db");
    assert_eq!(
        h.live_servers(),
        vec![server],
        "the reset server was reused"
    );
}

#[test]
fn session_state_pins_a_transaction_mode_client_until_it_leaves() {
    let mut h = Harness::new(&config(TX));
    let (a, _) = h.login("alice", "db");
    h.client_sends(a, &query("SET default_transaction_read_only = on"));
    assert_eq!(h.client_tags(a), "CZ");
    let pinned = h.live_servers()[0];
    let (b, _) = h.login("alice", "db");
    h.client_sends(b, &query("SELECT 1"));
    assert_eq!(h.client_tags(b), "TDCZ");
    assert_eq!(
        h.live_servers().len(),
        2,
        "b needed a second server: a keeps its own"
    );
    assert!(h.backend(pinned).settings.len() == 1);
    h.client_sends(a, &terminate());
    assert!(h.backend(pinned).seen.iter().any(|q| q == "DISCARD ALL"));
    assert!(
        h.backend(pinned).settings.is_empty(),
        "reset before anyone else gets it"
    );
}

#[test]
fn a_tracked_parameter_set_does_not_pin() {
    let mut h = Harness::new(&config(
        "pool_mode = \"transaction\"\ndefault_pool_size = 1",
    ));
    let (a, _) = h.login("alice", "db");
    h.client_sends(a, &query("SET application_name = 'x'"));
    let (b, _) = h.login("alice", "db");
    h.client_sends(b, &query("SELECT 1"));
    assert_eq!(h.client_tags(b), "TDCZ", "the one server was free for b");
}

#[test]
fn without_statement_rewriting_a_named_statement_pins() {
    let mut h = Harness::new(&config(&format!("{TX}\nmax_prepared_statements = 0")));
    let (a, _) = h.login("alice", "db");
    let mut bytes = testing::parse("s1", "SELECT 1");
    bytes.extend(testing::sync());
    h.client_sends(a, &bytes);
    assert_eq!(h.client_tags(a), "1Z");
    let server = h.live_servers()[0];
    assert_eq!(h.backend(server).statements, ["s1"], "under its own name");
    let mut bytes = testing::bind("s1");
    bytes.extend(testing::execute());
    bytes.extend(testing::sync());
    h.client_sends(a, &bytes);
    assert_eq!(
        h.client_tags(a),
        "2CZ",
        "the statement's server is still a's"
    );
    h.client_leaves(a);
    assert!(
        h.backend(server).statements.is_empty(),
        "discarded when a left"
    );
}

#[test]
fn a_client_leaving_mid_transaction_is_rolled_back_and_the_server_reused() {
    let mut h = Harness::new(&config(TX));
    let (a, _) = h.login("alice", "db");
    h.client_sends(a, &query("BEGIN"));
    let server = h.live_servers()[0];
    h.client_leaves(a);
    assert!(h.backend(server).seen.iter().any(|q| q == "ROLLBACK"));
    let (b, _) = h.login("alice", "db");
    h.client_sends(b, &query("SELECT 1"));
    assert_eq!(h.live_servers(), vec![server], "rolled back and pooled");
}

#[test]
fn a_session_client_leaving_unclean_closes_its_server() {
    let mut h = Harness::new(&config(SESSION));
    let (a, _) = h.login("alice", "db");
    h.client_sends(a, &query("BEGIN"));
    let server = h.live_servers()[0];
    h.client_leaves(a);
    assert!(
        h.is_closed(Conn::Server(server)),
        "PgBouncer's rule: unclean closes"
    );
}

#[test]
fn a_client_leaving_while_its_query_runs_gets_the_query_cancelled() {
    let mut h = Harness::new(&config(TX));
    let (a, _) = h.login("alice", "db");
    let server = h.live_servers()[0];
    h.backend(server).hold_queries_with = Some("sleep".into());
    h.client_sends(a, &query("SELECT sleep"));
    assert!(h.backend(server).is_running());
    h.client_leaves(a);
    assert_eq!(h.cancels, vec![server]);
    assert!(!h.is_closed(Conn::Server(server)), "drained, not closed");
    let (b, _) = h.login("alice", "db");
    h.client_sends(b, &query("SELECT 1"));
    assert_eq!(h.client_tags(b), "TDCZ");
    assert_eq!(h.live_servers(), vec![server]);
}

#[test]
fn a_client_leaving_mid_copy_in_closes_its_server() {
    let mut h = Harness::new(&config(TX));
    let (a, _) = h.login("alice", "db");
    h.client_sends(a, &query("COPY t FROM STDIN"));
    assert_eq!(h.client_tags(a), "G");
    let server = h.live_servers()[0];
    h.client_leaves(a);
    assert!(h.is_closed(Conn::Server(server)));
}

#[test]
fn a_servers_fatal_reaches_the_client_alone_then_the_close() {
    let mut h = Harness::new(&config(SESSION));
    let (a, _) = h.login("alice", "db");
    h.client_sends(a, &query("FATAL"));
    let messages = h.client_output(a);
    assert_eq!(errors(&messages), vec!["57P01".to_string()]);
    assert!(h.closed.contains(&(Conn::Client(a), CloseHow::Flush)));
}

#[test]
fn a_server_vanishing_mid_query_gives_08006() {
    let mut h = Harness::new(&config(TX));
    let (a, _) = h.login("alice", "db");
    let server = h.live_servers()[0];
    h.backend(server).hold_queries_with = Some("slow".into());
    h.client_sends(a, &query("SELECT slow"));
    h.server_gone(server);
    assert_eq!(errors(&h.client_output(a)), vec!["08006".to_string()]);
    assert!(h.is_closed(Conn::Client(a)));
}

#[test]
fn terminate_before_startup_closes_without_a_reply() {
    let mut h = Harness::new(&config(TX));
    let id = h.accept();
    h.client_sends(id, &terminate());
    assert!(h.client_bytes(id).is_empty());
    assert!(h.closed.contains(&(Conn::Client(id), CloseHow::Now)));
}

#[test]
fn garbage_after_login_gets_08p01_and_never_reaches_a_server() {
    let mut h = Harness::new(&config(TX));
    let (a, _) = h.login("alice", "db");
    let servers_before = h.live_servers();
    h.client_sends(a, &testing::frame(b'@', b"junk"));
    assert_eq!(errors(&h.client_output(a)), vec!["08P01".to_string()]);
    assert!(h.is_closed(Conn::Client(a)));
    assert_eq!(h.live_servers(), servers_before, "nothing reached a server");
}

#[test]
fn a_length_past_the_limit_is_refused_before_it_waits_for_a_server() {
    let mut h = Harness::new(&config(
        "pool_mode = \"transaction\"\ndefault_pool_size = 1",
    ));
    let (holder, _) = h.login("alice", "db");
    let (claimer, _) = h.login("alice", "db");
    h.client_sends(holder, &query("BEGIN"));
    assert_eq!(h.client_tags(holder), "CZ");
    // A Query claiming 2 GB, and the start of its body: refused at once, though the only
    // server is busy (it would otherwise wait for it, then be refused by the forwarder).
    let mut claim = vec![b'Q'];
    claim.extend_from_slice(&0x7FFF_FFF0u32.to_be_bytes());
    claim.extend_from_slice(&[b'x'; 1024]);
    h.client_sends(claimer, &claim);
    assert_eq!(errors(&h.client_output(claimer)), vec!["08P01".to_string()]);
    assert!(h.is_closed(Conn::Client(claimer)));
}

#[test]
fn an_unknown_database_gets_3d000_at_once() {
    let mut h = Harness::new(&config(TX));
    let (id, messages) = h.login("alice", "nowhere");
    assert_eq!(errors(&messages), vec!["3D000".to_string()]);
    assert!(h.is_closed(Conn::Client(id)));
    assert!(h.live_servers().is_empty());
}

#[test]
fn ssl_is_declined_and_startup_goes_on() {
    let mut h = Harness::new(&config(TX));
    let id = h.accept();
    let mut ssl = 8u32.to_be_bytes().to_vec();
    ssl.extend_from_slice(&80_877_103u32.to_be_bytes());
    h.client_sends(id, &ssl);
    assert_eq!(h.client_bytes(id), b"N");
    h.client_sends(id, &startup(&[("user", "alice"), ("database", "db")]));
    assert_eq!(h.client_output(id).last().map(|m| m.tag), Some(b'Z'));
}

#[test]
fn a_waiter_times_out_with_query_wait_timeout() {
    let mut h = Harness::new(&config(
        "pool_mode = \"transaction\"\ndefault_pool_size = 1\nquery_wait_timeout = 1",
    ));
    let (a, _) = h.login("alice", "db");
    let (b, _) = h.login("alice", "db");
    h.client_sends(a, &query("BEGIN"));
    h.client_sends(b, &query("SELECT 1"));
    h.advance(Duration::from_millis(1600));
    assert_eq!(errors(&h.client_output(b)), vec!["08P01".to_string()]);
    assert!(h.is_closed(Conn::Client(b)));
    assert!(!h.is_closed(Conn::Client(a)));
}

#[test]
fn a_slow_client_pauses_its_server_and_resumes_it() {
    let mut h = Harness::new(&config(&format!(
        "{TX}\nclient_buffer_limit_bytes = 4096\nsend_budget_bytes = 4096"
    )));
    let (a, _) = h.login("alice", "db");
    let server = h.live_servers()[0];
    h.clients_read = false;
    let mut row = vec![0, 1, 0, 0, 0, 40];
    row.extend([b'x'; 40]);
    let result: Vec<u8> = (0..200).flat_map(|_| testing::frame(b'D', &row)).collect();
    h.auto_backend = false;
    h.client_sends(a, &query("SELECT big"));
    h.server_sends(server, &result);
    assert!(h.paused.contains(&Conn::Server(server)));
    let queued = h.client_bytes(a).len();
    h.engine.handle_client_sent(h.now, a, queued);
    h.pump();
    assert!(!h.paused.contains(&Conn::Server(server)));
}

#[test]
fn a_server_tls_change_forgets_a_failed_login() {
    let mut h = Harness::new(&config(TX));
    h.auto_backend = false;
    let id = h.accept();
    h.client_sends(id, &startup(&[("user", "alice"), ("database", "db")]));
    let server = h.connecting[0].0;
    h.complete_connects_without_backend();
    let mut error = Vec::new();
    for (kind, value) in [
        (b'S', "FATAL"),
        (b'C', "28000"),
        (b'M', "no pg_hba.conf entry"),
    ] {
        error.push(kind);
        error.extend_from_slice(value.as_bytes());
        error.push(0);
    }
    error.push(0);
    h.server_sends(server, &testing::frame(b'E', &error));
    assert_eq!(errors(&h.client_output(id)), vec!["28000".to_string()]);
    // The failure came under the old server TLS settings: after they change, the next client
    // gets a new login instead of the memo.
    let changed = pgtier_core::config::Config::from_str(
        &config("pool_mode = \"transaction\"\nserver_tls_sslmode = \"disable\""),
        "pgtier.toml",
    )
    .expect("config");
    h.engine.handle_command(
        h.now,
        crate::command::Command::Reload {
            config: std::sync::Arc::new(changed),
            users: std::sync::Arc::new(crate::userlist::UserList::new()),
            tls: Default::default(),
            pending: None,
        },
    );
    h.pump();
    h.auto_backend = true;
    let (_, messages) = h.login("alice", "db");
    assert!(errors(&messages).is_empty(), "{messages:?}");
}

#[test]
fn a_failed_server_login_fails_the_waiters_and_is_remembered() {
    let mut h = Harness::new(&config(TX));
    h.auto_backend = false;
    let id = h.accept();
    h.client_sends(id, &startup(&[("user", "alice"), ("database", "db")]));
    let server = h.connecting[0].0;
    h.complete_connects_without_backend();
    let mut error = Vec::new();
    for (kind, value) in [
        (b'S', "FATAL"),
        (b'C', "28P01"),
        (b'M', "password authentication failed"),
    ] {
        error.push(kind);
        error.extend_from_slice(value.as_bytes());
        error.push(0);
    }
    error.push(0);
    h.server_sends(server, &testing::frame(b'E', &error));
    assert_eq!(errors(&h.client_output(id)), vec!["28P01".to_string()]);
    let (again, messages) = h.login("alice", "db");
    assert_eq!(
        errors(&messages),
        vec!["28P01".to_string()],
        "memoed until server_login_retry"
    );
    assert!(h.is_closed(Conn::Client(again)));
}

/// An ErrorResponse of severity FATAL with `code` and `message`.
fn fatal_error(code: &str, message: &str) -> Vec<u8> {
    let mut error = Vec::new();
    for (kind, value) in [(b'S', "FATAL"), (b'C', code), (b'M', message)] {
        error.push(kind);
        error.extend_from_slice(value.as_bytes());
        error.push(0);
    }
    error.push(0);
    testing::frame(b'E', &error)
}

#[test]
fn a_server_shutting_down_or_starting_up_fails_no_client_and_is_tried_again() {
    let mut h = Harness::new(&config(&format!("{TX}\nserver_login_retry = 1")));
    h.auto_backend = false;
    let id = h.accept();
    h.client_sends(id, &startup(&[("user", "alice"), ("database", "db")]));
    let server = h.connecting[0].0;
    h.complete_connects_without_backend();
    h.server_sends(
        server,
        &fatal_error("57P03", "the database system is shutting down"),
    );
    assert!(
        errors(&h.client_output(id)).is_empty(),
        "the waiting client is not failed"
    );
    assert!(!h.is_closed(Conn::Client(id)));
    let again = h.accept();
    h.client_sends(again, &startup(&[("user", "alice"), ("database", "db")]));
    assert!(
        errors(&h.client_output(again)).is_empty(),
        "nor is a new one"
    );
    assert!(!h.is_closed(Conn::Client(again)));
    assert!(
        h.connecting.is_empty(),
        "no new open before server_login_retry"
    );
    // After server_login_retry the pool opens again, for the clients that wait.
    h.auto_backend = true;
    h.advance(Duration::from_millis(1300));
    assert!(
        h.client_output(id).iter().any(|m| m.tag == b'Z'),
        "the waiting client is welcomed once the server is back"
    );
}

#[test]
fn max_client_conn_refuses_with_53300() {
    let mut h = Harness::new(&config("max_client_conn = 1"));
    let _a = h.accept();
    let b = h.accept();
    // As PgBouncer: the SSLRequest is answered first, so libpq shows the reason (an error
    // in place of the answer shows as "error response during SSL exchange").
    assert!(h.client_output(b).is_empty());
    h.client_sends(b, &[0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f]);
    assert_eq!(h.client_bytes(b), b"N");
    h.client_sends(b, &startup(&[("user", "alice"), ("database", "db")]));
    let out = h.client_output(b);
    assert_eq!(errors(&out), vec!["53300".to_string()]);
    assert_eq!(
        out[0].field(b'M').as_deref(),
        Some("no more connections allowed (max_client_conn)")
    );
    assert!(h.is_closed(Conn::Client(b)));
}

#[test]
fn the_console_stays_reachable_past_max_client_conn() {
    let mut h = Harness::new(&config("max_client_conn = 1"));
    let _a = h.accept();
    let (admin, messages) = h.login("admin", "pgbouncer");
    assert!(errors(&messages).is_empty(), "{messages:?}");
    assert!(!h.is_closed(Conn::Client(admin)));
}

#[test]
fn the_client_login_timeout_closes_a_silent_client() {
    let mut h = Harness::new(&config("client_login_timeout = 1"));
    let id = h.accept();
    h.advance(Duration::from_millis(1600));
    assert!(h.is_closed(Conn::Client(id)));
}

#[test]
fn a_closing_client_that_never_reads_is_cut_off_after_the_linger() {
    let mut h = Harness::new(&config("max_client_conn = 1"));
    let _a = h.accept();
    h.clients_read = false;
    let b = h.accept();
    h.client_sends(b, &startup(&[("user", "alice"), ("database", "db")]));
    assert!(h.closed.contains(&(Conn::Client(b), CloseHow::Flush)));
    h.advance(crate::settings::CLOSE_LINGER + Duration::from_millis(300));
    assert!(h.closed.contains(&(Conn::Client(b), CloseHow::Now)));
}

#[test]
fn every_slot_is_given_back_when_everyone_leaves() {
    let mut h = Harness::new(&config(TX));
    let (a, _) = h.login("alice", "db");
    let (b, _) = h.login("alice", "db");
    h.client_sends(a, &query("BEGIN"));
    h.client_sends(b, &query("SELECT 1"));
    h.client_leaves(a);
    h.client_leaves(b);
    assert_eq!(h.engine.client_count(), 0);
    h.engine.handle_command(
        h.now,
        crate::command::Command::Shutdown(crate::gates::ShutdownMode::Immediate),
    );
    h.pump();
    assert_eq!(h.engine.server_count(), 0);
    assert!(h.engine.is_finished());
}

#[test]
fn md5_authentication_checks_the_password() {
    use pgtier_core::auth_file::AuthFile;
    use pgtier_wire::auth::{md5_password_hash, md5_salted_response};
    let users = crate::userlist::UserList::from_file(
        AuthFile::parse("\"alice\" \"secret\"\n", "userlist.txt").expect("valid"),
    );
    for (password, accepted) in [("secret", true), ("wrong", false)] {
        let text = config(TX).replace(
            "auth_type = \"trust\"",
            "auth_type = \"md5\"\nauth_file = \"/dev/null\"",
        );
        let mut h = Harness::with_users(&text, users.clone());
        let id = h.accept();
        h.client_sends(id, &startup(&[("user", "alice"), ("database", "db")]));
        let request = h.client_output(id);
        assert_eq!(request.len(), 1);
        let salt = [
            request[0].body[4],
            request[0].body[5],
            request[0].body[6],
            request[0].body[7],
        ];
        let hash = md5_password_hash(b"alice", password.as_bytes());
        let mut answer = md5_salted_response(&hash, salt).to_vec();
        answer.push(0);
        h.client_sends(id, &testing::frame(b'p', &answer));
        let messages = h.client_output(id);
        if accepted {
            assert_eq!(messages.last().map(|m| m.tag), Some(b'Z'));
        } else {
            assert_eq!(errors(&messages), vec!["28P01".to_string()]);
        }
    }
}

#[test]
fn a_startup_value_the_server_refuses_refuses_the_login() {
    let mut h = Harness::new(&config(TX));
    let id = h.accept();
    h.client_sends(
        id,
        &startup(&[
            ("user", "alice"),
            ("database", "db"),
            ("application_name", "foo"),
        ]),
    );
    let messages = h.client_output(id);
    let error = messages.iter().find(|m| m.tag == b'E').expect("refused");
    assert_eq!(error.sqlstate().as_deref(), Some("22023"));
    assert_eq!(
        error.field(b'S').as_deref(),
        Some("FATAL"),
        "raised to FATAL as at a login"
    );
}

#[test]
fn a_tracked_startup_value_is_applied_and_the_pool_remembers_its_spelling() {
    let mut h = Harness::new(&config(TX));
    let id = h.accept();
    h.client_sends(
        id,
        &startup(&[
            ("user", "alice"),
            ("database", "db"),
            ("application_name", "app"),
        ]),
    );
    let messages = h.client_output(id);
    let shown = messages
        .iter()
        .any(|m| m.tag == b'S' && m.body == b"application_name\0app\0");
    assert!(shown, "the client is told its own value: {messages:?}");
    let server = h.live_servers()[0];
    assert!(
        h.backend(server)
            .seen
            .iter()
            .any(|q| q.contains("application_name")),
        "applied on the server"
    );
    let before = h.backend(server).seen.len();
    let (_again, _) = {
        let id = h.accept();
        h.client_sends(
            id,
            &startup(&[
                ("user", "alice"),
                ("database", "db"),
                ("application_name", "app"),
            ]),
        );
        (id, h.client_output(id))
    };
    assert_eq!(
        h.backend(server).seen.len(),
        before,
        "welcomed from the pool's cache"
    );
}

#[test]
fn the_console_answers_its_own_queries_without_a_server() {
    let mut h = Harness::new(&config(TX));
    let (id, messages) = h.login("admin", "pgtier");
    assert_eq!(messages.last().map(|m| m.tag), Some(b'Z'));
    h.client_sends(id, &query("SHOW VERSION"));
    assert_eq!(
        h.client_tags(id),
        "EZ",
        "NoConsole refuses, the session goes on"
    );
    assert!(h.live_servers().is_empty());
    let mut extended = testing::parse("", "SHOW VERSION");
    extended.extend(testing::bind(""));
    extended.extend(testing::execute());
    extended.extend(testing::sync());
    h.client_sends(id, &extended);
    assert_eq!(h.client_tags(id), "12EZ", "the extended protocol, answered");
    h.client_sends(id, b"F\0\0\0\x04");
    assert_eq!(errors(&h.client_output(id)), vec!["08P01".to_string()]);
    assert!(h.is_closed(Conn::Client(id)));
}

#[test]
fn the_pgbouncer_database_is_the_console() {
    let mut h = Harness::new(&config(TX));
    let (id, messages) = h.login("admin", "pgbouncer");
    let status: Vec<String> = messages
        .iter()
        .filter(|m| m.tag == b'S')
        .map(|m| {
            String::from_utf8_lossy(&m.body)
                .split('\0')
                .next()
                .unwrap_or("")
                .to_string()
        })
        .collect();
    for name in [
        "server_version",
        "client_encoding",
        "DateStyle",
        "standard_conforming_strings",
        "integer_datetimes",
    ] {
        assert!(status.iter().any(|s| s == name), "{name} in {status:?}");
    }
    assert_eq!(messages.last().map(|m| m.tag), Some(b'Z'));
    assert!(h.live_servers().is_empty());
    assert!(!h.is_closed(Conn::Client(id)));
}

#[test]
fn a_user_not_allowed_on_the_console_is_refused() {
    let mut h = Harness::new(&config(TX));
    let (id, messages) = h.login("mallory", "pgbouncer");
    assert_eq!(
        errors(&messages),
        vec!["08P01".to_string()],
        "PgBouncer's refusal"
    );
    assert!(h.is_closed(Conn::Client(id)));
    let mut h = Harness::new(&config(&format!("{TX}\nstats_users = [\"watcher\"]")));
    let (id, messages) = h.login("watcher", "pgtier");
    assert_eq!(
        messages.last().map(|m| m.tag),
        Some(b'Z'),
        "a stats user logs in"
    );
    assert!(!h.is_closed(Conn::Client(id)));
}

#[test]
fn a_cancel_request_reaches_the_running_query_of_its_client() {
    let mut h = Harness::new(&config(TX));
    let (a, messages) = h.login("alice", "db");
    let key = cancel_key(&messages);
    let server = h.live_servers()[0];
    h.backend(server).hold_queries_with = Some("sleep".into());
    h.client_sends(a, &query("SELECT sleep"));
    let canceller = h.accept();
    let mut cancel = 16u32.to_be_bytes().to_vec();
    cancel.extend_from_slice(&80_877_102u32.to_be_bytes());
    cancel.extend_from_slice(&key);
    h.client_sends(canceller, &cancel);
    assert_eq!(h.cancels, vec![server], "forwarded with the server's key");
    assert!(h.is_closed(Conn::Client(canceller)));
    assert_eq!(errors(&h.client_output(a)), vec!["57014".to_string()]);
}

/// A cancel for a client whose query waits for a server (the only one is in another
/// client's transaction) is held, not dropped: once the query reaches a server, the cancel
/// follows it there and the client gets 57014, as from PostgreSQL. A cancel for a client
/// with nothing running or queued does nothing, and holds nothing for its next query.
#[test]
fn a_cancel_for_a_queued_query_follows_it_to_its_server() {
    let mut h = Harness::new(&config(
        "pool_mode = \"transaction\"\ndefault_pool_size = 1",
    ));
    let (a, _) = h.login("alice", "db");
    let (b, messages) = h.login("alice", "db");
    let key = cancel_key(&messages);
    let server = h.live_servers()[0];
    h.backend(server).hold_queries_with = Some("sleep".into());
    // Idle, b has nothing to cancel: nothing is held for its next query.
    send_cancel(&mut h, &key);
    h.client_sends(a, &query("BEGIN"));
    assert_eq!(h.client_tags(a), "CZ");
    h.client_sends(b, &query("SELECT sleep"));
    assert_eq!(h.client_tags(b), "", "b waits for a's server");
    let canceller = send_cancel(&mut h, &key);
    assert!(h.cancels.is_empty(), "nothing of b's runs yet");
    assert!(h.is_closed(Conn::Client(canceller)));
    h.client_sends(a, &query("COMMIT"));
    assert_eq!(h.client_tags(a), "CZ");
    assert_eq!(
        h.cancels,
        vec![server],
        "the held cancel followed b's query"
    );
    assert_eq!(errors(&h.client_output(b)), vec!["57014".to_string()]);
    // The next query of b's runs to its end: the cancel was spent.
    h.backend(server).hold_queries_with = None;
    h.client_sends(b, &query("SELECT 1"));
    assert_eq!(h.client_tags(b), "TDCZ");
    assert_eq!(h.cancels.len(), 1);
}

#[test]
fn a_cancel_with_a_wrong_key_does_nothing() {
    let mut h = Harness::new(&config(TX));
    let (a, _) = h.login("alice", "db");
    let server = h.live_servers()[0];
    h.backend(server).hold_queries_with = Some("sleep".into());
    h.client_sends(a, &query("SELECT sleep"));
    let canceller = h.accept();
    let mut cancel = 16u32.to_be_bytes().to_vec();
    cancel.extend_from_slice(&80_877_102u32.to_be_bytes());
    cancel.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0]);
    h.client_sends(canceller, &cancel);
    assert!(h.cancels.is_empty());
}

/// The BackendKeyData a client was given at login (its 8 bytes).
fn cancel_key(login: &[testing::Msg]) -> Vec<u8> {
    login
        .iter()
        .find(|m| m.tag == b'K')
        .expect("BackendKeyData")
        .body
        .clone()
}

/// A CancelRequest for `key` (BackendKeyData's 8 bytes) from a new connection.
fn send_cancel(h: &mut Harness, key: &[u8]) -> crate::ClientId {
    let canceller = h.accept();
    let mut cancel = 16u32.to_be_bytes().to_vec();
    cancel.extend_from_slice(&80_877_102u32.to_be_bytes());
    cancel.extend_from_slice(key);
    h.client_sends(canceller, &cancel);
    canceller
}

/// Peering: keys carry this process's `peer_id`; a request for a key of another peer goes
/// to that peer with one forward less left, and one with none left, or for a peer not in
/// `[peers]`, is dropped; a request for our own key that was forwarded to us (TTL below 3)
/// still cancels.
#[test]
fn with_peering_cancel_requests_go_to_the_peer_that_issued_the_key() {
    let peers =
        "peer_id = 1\n[peers.1]\nhost = \"/tmp/me\"\n[peers.2]\nhost = \"10.0.0.2\"\nport = 6500\n";
    let mut h = Harness::new(&config(&format!("{TX}\n{peers}")));
    let (a, messages) = h.login("alice", "db");
    let key = cancel_key(&messages);
    assert_eq!((key[1], key[2]), (1, 0), "our peer id, PgBouncer's bytes");
    assert_eq!(key[7] & 0b11, 0b11, "a full TTL");
    // Another peer's key: forwarded, TTL lowered.
    let mut theirs = key.to_vec();
    theirs[1] = 2;
    let canceller = send_cancel(&mut h, &theirs);
    assert!(h.is_closed(Conn::Client(canceller)));
    assert_eq!(h.forwarded_cancels.len(), 1);
    let (addr, request) = h.forwarded_cancels[0].clone();
    assert_eq!(addr.to_string(), "10.0.0.2:6500");
    assert_eq!(request[8..15], theirs[..7]);
    assert_eq!(request[15], theirs[7] - 1, "one forward less");
    // No forward left, or a peer we do not know: dropped.
    let mut spent = theirs.clone();
    spent[7] &= !0b11;
    send_cancel(&mut h, &spent);
    let mut unknown = theirs.clone();
    unknown[1] = 9;
    send_cancel(&mut h, &unknown);
    assert_eq!(h.forwarded_cancels.len(), 1);
    // Our own key, forwarded here by a peer (TTL 2): it cancels.
    let server = h.live_servers()[0];
    h.backend(server).hold_queries_with = Some("sleep".into());
    h.client_sends(a, &query("SELECT sleep"));
    let mut forwarded = key.to_vec();
    forwarded[7] -= 1;
    send_cancel(&mut h, &forwarded);
    assert_eq!(h.cancels, vec![server]);
    assert_eq!(errors(&h.client_output(a)), vec!["57014".to_string()]);
}

#[test]
fn a_server_idle_past_the_check_delay_is_checked_before_reuse() {
    let mut h = Harness::new(&config(&format!("{TX}\nserver_check_delay = 1")));
    let (a, _) = h.login("alice", "db");
    let server = h.live_servers()[0];
    h.advance(Duration::from_millis(1500));
    h.client_sends(a, &query("SELECT 2"));
    assert_eq!(h.client_tags(a), "TDCZ");
    let seen = &h.backend(server).seen;
    let check = seen.iter().position(String::is_empty).expect("checked");
    let query_at = seen.iter().position(|q| q == "SELECT 2").expect("ran");
    assert!(check < query_at, "the check ran first: {seen:?}");
}

#[test]
fn with_no_check_delay_only_a_server_a_client_used_is_checked() {
    // One server, so the client waits for the one being checked.
    let mut h = Harness::new(&config(
        "pool_mode = \"transaction\"\ndefault_pool_size = 1\n\
         server_check_delay = 0\nserver_check_query = \"select 7\"",
    ));
    let (a, _) = h.login("alice", "db");
    let server = h.live_servers()[0];
    h.advance(Duration::from_millis(300));
    h.client_sends(a, &query("SELECT 1"));
    assert_eq!(h.client_tags(a), "TDCZ");
    let checks = |h: &mut Harness| {
        h.backend(server)
            .seen
            .iter()
            .filter(|q| *q == "select 7")
            .count()
    };
    assert_eq!(checks(&mut h), 0, "fresh from its login: not checked");
    h.advance(Duration::from_millis(300));
    h.client_sends(a, &query("SELECT 2"));
    assert_eq!(h.client_tags(a), "TDCZ");
    assert_eq!(
        checks(&mut h),
        1,
        "a client used it: checked before the next"
    );
    h.advance(Duration::from_millis(10));
    h.client_sends(a, &query("SELECT 3"));
    assert_eq!(h.client_tags(a), "TDCZ");
    assert_eq!(checks(&mut h), 2);
}

#[test]
fn the_empty_check_query_is_an_empty_query() {
    let mut h = Harness::new(&config(&format!(
        "{TX}\nserver_check_delay = 1\nserver_check_query = \"<empty>\""
    )));
    let (a, _) = h.login("alice", "db");
    let server = h.live_servers()[0];
    h.advance(Duration::from_millis(1500));
    h.client_sends(a, &query("SELECT 2"));
    assert_eq!(
        h.client_tags(a),
        "TDCZ",
        "the check's answer is not relayed"
    );
    let seen = &h.backend(server).seen;
    assert_eq!(seen.iter().filter(|q| q.is_empty()).count(), 1, "{seen:?}");
    assert!(!seen.iter().any(|q| q.contains("empty")), "{seen:?}");
}

#[test]
fn server_lifetime_zero_gives_each_server_one_checkout() {
    let mut h = Harness::new(&config(&format!("{TX}\nserver_lifetime = 0")));
    let (a, _) = h.login("alice", "db");
    h.client_sends(a, &query("SELECT 1"));
    assert_eq!(h.client_tags(a), "TDCZ");
    h.client_sends(a, &query("SELECT 1"));
    assert_eq!(h.client_tags(a), "TDCZ");
    let server_closes = h
        .closed
        .iter()
        .filter(|(conn, _)| matches!(conn, Conn::Server(_)))
        .count();
    assert_eq!(
        server_closes, 3,
        "the welcome and each query had a server of their own"
    );
    assert!(h.live_servers().is_empty());
}

#[test]
fn wait_for_servers_lets_transactions_finish_and_starts_no_new_one() {
    let mut h = Harness::new(&config(TX));
    let (a, _) = h.login("alice", "db");
    let (b, _) = h.login("alice", "db");
    let (c, _) = h.login("alice", "db");
    h.client_sends(a, &query("BEGIN"));
    h.client_output(a);
    h.engine.handle_command(
        h.now,
        crate::command::Command::Shutdown(crate::gates::ShutdownMode::WaitForTransactions),
    );
    h.pump();
    assert!(
        !h.is_closed(Conn::Client(b)),
        "an idle client stays until it asks for a server"
    );
    assert!(!h.is_closed(Conn::Client(a)), "the transaction runs on");
    h.client_sends(b, &query("SELECT 1"));
    let refused = h.client_output(b);
    assert!(
        refused
            .iter()
            .any(|m| m.field(b'M').as_deref() == Some("server shutting down")),
        "{refused:?}"
    );
    assert!(h.is_closed(Conn::Client(b)), "a new transaction is refused");
    h.client_sends(a, &query("SELECT 1"));
    assert_eq!(h.client_tags(a), "TDCZ", "the open transaction goes on");
    h.client_sends(a, &query("COMMIT"));
    assert_eq!(h.client_tags(a), "CZ");
    assert!(h.accept_refused_while_shutting_down());
    // No server in use any more: at the next housekeeping whoever is left goes, and at the
    // one after, the shard (every shard) is idle and done.
    h.advance(Duration::from_millis(300));
    assert!(h.is_closed(Conn::Client(a)));
    assert!(h.is_closed(Conn::Client(c)));
    assert!(!h.engine.is_finished(), "not yet counted idle");
    h.advance(Duration::from_millis(300));
    assert!(h.engine.is_finished(), "nothing is left");
}

#[test]
fn wait_for_servers_ends_when_no_shard_has_a_server_in_use() {
    let mut pair = testing::Pair::new(&config(TX));
    let (a, _) = pair.shards[0].login("alice", "db");
    let (c, _) = pair.shards[1].login("alice", "db");
    pair.shards[0].client_sends(a, &query("BEGIN"));
    assert_eq!(pair.shards[0].client_tags(a), "CZ");
    for shard in &mut pair.shards {
        let now = shard.now;
        shard.engine.handle_command(
            now,
            crate::command::Command::Shutdown(crate::gates::ShutdownMode::WaitForTransactions),
        );
        shard.pump();
    }
    pair.advance(Duration::from_millis(300));
    assert!(
        !pair.shards[1].is_closed(Conn::Client(c)),
        "an idle client stays while another shard runs a transaction"
    );
    assert!(pair.shards[1].engine.accepts_on_unix_socket());
    pair.shards[0].client_sends(a, &query("COMMIT"));
    assert_eq!(pair.shards[0].client_tags(a), "CZ");
    pair.advance(Duration::from_millis(300));
    pair.advance(Duration::from_millis(300));
    assert!(pair.shards[1].is_closed(Conn::Client(c)));
    assert!(pair.shards[0].is_closed(Conn::Client(a)));
    for shard in &pair.shards {
        assert!(shard.engine.is_finished());
        assert!(!shard.engine.accepts_on_unix_socket());
    }
}

#[test]
fn wait_for_clients_ends_every_shard_together_once_all_are_idle() {
    let mut pair = testing::Pair::new(&config(TX));
    let (a, _) = pair.shards[0].login("alice", "db");
    for shard in &mut pair.shards {
        let now = shard.now;
        shard.engine.handle_command(
            now,
            crate::command::Command::Shutdown(crate::gates::ShutdownMode::WaitForClients),
        );
        shard.pump();
    }
    pair.advance(Duration::from_millis(300));
    assert!(
        !pair.shards[1].engine.is_finished(),
        "an idle shard waits for the others, so its console and mailbox stay"
    );
    assert!(pair.shards[1].engine.accepts_on_unix_socket());
    pair.shards[0].client_leaves(a);
    pair.advance(Duration::from_millis(300));
    pair.advance(Duration::from_millis(300));
    for shard in &pair.shards {
        assert!(shard.engine.is_finished());
        assert!(!shard.engine.accepts_on_unix_socket());
    }
}

#[test]
fn wait_for_servers_closes_the_clients_waiting_for_a_server_at_once() {
    let mut h = Harness::new(&config(
        "pool_mode = \"transaction\"\ndefault_pool_size = 1",
    ));
    let (a, _) = h.login("alice", "db");
    let (b, _) = h.login("alice", "db");
    h.client_sends(a, &query("BEGIN"));
    h.client_output(a);
    h.client_sends(b, &query("SELECT 1"));
    assert_eq!(h.client_tags(b), "", "b waits for the one server");
    h.engine.handle_command(
        h.now,
        crate::command::Command::Shutdown(crate::gates::ShutdownMode::WaitForTransactions),
    );
    h.pump();
    let told = h.client_output(b);
    assert!(
        told.iter()
            .any(|m| m.field(b'M').as_deref() == Some("server shutting down")),
        "{told:?}"
    );
    assert!(h.is_closed(Conn::Client(b)));
    assert!(!h.is_closed(Conn::Client(a)));
}

#[test]
fn a_graceful_shutdown_lets_the_console_in_on_the_unix_socket_and_refuses_pool_logins() {
    for mode in [
        crate::gates::ShutdownMode::WaitForClients,
        crate::gates::ShutdownMode::WaitForTransactions,
    ] {
        let mut h = Harness::new(&config(TX));
        let (stays, _) = h.login("alice", "db");
        // In a transaction, so that WAIT_FOR_SERVERS is not over at once.
        h.client_sends(stays, &query("BEGIN"));
        h.engine
            .handle_command(h.now, crate::command::Command::Shutdown(mode));
        h.pump();
        assert!(h.engine.accepts_on_unix_socket(), "{mode:?}");
        let pool_client = h.accept_unix();
        h.client_sends(
            pool_client,
            &startup(&[("user", "alice"), ("database", "db")]),
        );
        let refused = h.client_output(pool_client);
        assert!(
            refused
                .iter()
                .any(|m| m.field(b'M').as_deref() == Some("pooler is shutting down")),
            "{mode:?}: {refused:?}"
        );
        assert!(h.is_closed(Conn::Client(pool_client)));
        let console = h.accept_unix();
        h.client_sends(
            console,
            &startup(&[("user", "admin"), ("database", "pgbouncer")]),
        );
        let welcomed = h.client_output(console);
        assert!(
            welcomed.iter().any(|m| m.tag == b'Z'),
            "{mode:?}: the console logs in: {welcomed:?}"
        );
        assert!(!h.is_closed(Conn::Client(console)));
        assert!(!h.is_closed(Conn::Client(stays)));
    }
}

#[test]
fn an_immediate_shutdown_closes_the_unix_socket_too() {
    let mut h = Harness::new(&config(TX));
    h.engine.handle_command(
        h.now,
        crate::command::Command::Shutdown(crate::gates::ShutdownMode::Immediate),
    );
    h.pump();
    assert!(!h.engine.accepts_on_unix_socket());
}

#[test]
fn a_reload_changes_the_pool_size_of_existing_pools() {
    let mut h = Harness::new(&config(
        "pool_mode = \"transaction\"\ndefault_pool_size = 1",
    ));
    let (a, _) = h.login("alice", "db");
    let (b, _) = h.login("alice", "db");
    h.client_sends(a, &query("BEGIN"));
    let bigger = Config::from_str(
        &config("pool_mode = \"transaction\"\ndefault_pool_size = 2"),
        "/tmp/pgtier-engine-test.toml",
    )
    .expect("config");
    h.engine.handle_command(
        h.now,
        crate::command::Command::Reload {
            config: std::sync::Arc::new(bigger),
            users: std::sync::Arc::new(crate::userlist::UserList::new()),
            tls: Default::default(),
            pending: None,
        },
    );
    h.pump();
    h.client_sends(b, &query("SELECT 1"));
    assert_eq!(h.client_tags(b), "TDCZ", "a second server was allowed");
}

#[test]
fn a_reload_that_moves_a_database_closes_its_servers_as_they_are_released() {
    let mut h = Harness::new(&config(TX));
    let (a, _) = h.login("alice", "db");
    let (b, _) = h.login("alice", "db");
    h.client_sends(a, &query("BEGIN"));
    assert_eq!(h.client_tags(a), "CZ");
    h.client_sends(b, &query("SELECT 1"));
    assert_eq!(h.client_tags(b), "TDCZ");
    let servers = h.live_servers();
    assert_eq!(servers.len(), 2, "a's in a transaction, b's idle");
    let moved = config(TX).replace("dbname = \"db\"", "dbname = \"elsewhere\"");
    let moved = Config::from_str(&moved, "/tmp/pgtier-engine-test.toml").expect("config");
    h.engine.handle_command(
        h.now,
        crate::command::Command::Reload {
            config: std::sync::Arc::new(moved),
            users: std::sync::Arc::new(crate::userlist::UserList::new()),
            tls: Default::default(),
            pending: None,
        },
    );
    h.pump();
    assert_eq!(h.live_servers().len(), 1, "the idle server closed at once");
    h.client_sends(a, &query("COMMIT"));
    assert_eq!(h.client_tags(a), "CZ");
    assert!(
        h.live_servers().is_empty(),
        "the busy one closed when released"
    );
    let before = h.connects.len();
    h.client_sends(b, &query("SELECT 1"));
    assert_eq!(h.client_tags(b), "TDCZ");
    assert_eq!(
        h.connects.len(),
        before + 1,
        "a new server, of the new definition"
    );
}

#[test]
fn a_reload_that_changes_only_limits_keeps_the_servers() {
    let mut h = Harness::new(&config(TX));
    let (a, _) = h.login("alice", "db");
    h.client_sends(a, &query("SELECT 1"));
    assert_eq!(h.client_tags(a), "TDCZ");
    let bigger = Config::from_str(
        &config("pool_mode = \"transaction\"\ndefault_pool_size = 7"),
        "/tmp/pgtier-engine-test.toml",
    )
    .expect("config");
    h.engine.handle_command(
        h.now,
        crate::command::Command::Reload {
            config: std::sync::Arc::new(bigger),
            users: std::sync::Arc::new(crate::userlist::UserList::new()),
            tls: Default::default(),
            pending: None,
        },
    );
    h.pump();
    assert_eq!(h.live_servers().len(), 1);
}

#[test]
fn a_notification_reaches_a_pinned_listener_between_transactions() {
    let mut h = Harness::new(&config(TX));
    let (a, _) = h.login("alice", "db");
    h.client_sends(a, &query("LISTEN things"));
    assert_eq!(h.client_tags(a), "CZ");
    let server = h.live_servers()[0];
    let mut body = 42u32.to_be_bytes().to_vec();
    body.extend_from_slice(b"things\0payload\0");
    h.server_sends(server, &testing::frame(b'A', &body));
    assert_eq!(
        h.client_tags(a),
        "A",
        "pinned, the notification is forwarded"
    );
}

use pgtier_core::config::Config;

#[test]
fn distinct_startup_parameters_cannot_lock_out_new_pools() {
    let mut h = Harness::new(&config(&format!(
        "{TX}\nmax_pools_per_worker = 2\nforward_startup_options = true"
    )));
    for n in 0..5 {
        let option = format!("-c work_mem={}MB", n + 1);
        let id = h.accept();
        h.client_sends(
            id,
            &startup(&[("user", "alice"), ("database", "db"), ("options", &option)]),
        );
        let messages = h.client_output(id);
        assert_eq!(
            messages.last().map(|m| m.tag),
            Some(b'Z'),
            "login {n} got a pool: {messages:?}"
        );
        h.client_sends(id, &query("SELECT 1"));
        assert_eq!(h.client_tags(id), "TDCZ");
        h.client_leaves(id);
    }
    assert!(
        h.live_servers().len() <= 2,
        "idle servers of evicted pools were closed"
    );
}

/// The (name, value) pairs of a StartupMessage (length, version, then NUL-terminated pairs).
fn startup_pairs(packet: &[u8]) -> Vec<(String, String)> {
    let body = packet.get(8..).unwrap_or_default();
    let fields: Vec<String> = body
        .split(|byte| *byte == 0)
        .map(|field| String::from_utf8_lossy(field).into_owned())
        .collect();
    fields
        .chunks(2)
        .filter(|pair| pair.len() == 2 && !pair[0].is_empty())
        .map(|pair| (pair[0].clone(), pair[1].clone()))
        .collect()
}

#[test]
fn the_star_entry_serves_unknown_databases_under_their_own_name_with_its_connect_params() {
    let text = "[pgtier]\nauth_type = \"trust\"\n[databases.\"*\"]\nhost = \"127.0.0.1\"\n\
                timezone = \"Asia/Tokyo\"\nclient_encoding = \"LATIN1\"\n";
    let mut h = Harness::new(text);
    let id = h.accept();
    h.client_sends(id, &startup(&[("user", "alice"), ("database", "reports")]));
    h.complete_connects_without_backend();
    let servers = h.live_servers();
    assert_eq!(
        servers.len(),
        1,
        "a server is opened for the fallback's pool"
    );
    let pairs = startup_pairs(&h.output_to(servers[0]));
    let value = |name: &str| {
        pairs
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    };
    assert_eq!(value("database"), Some("reports"));
    // The entry's parameters open every server; a client that sends its own value of these
    // tracked parameters gets it with SET when linked, as any tracked difference.
    assert_eq!(value("TimeZone"), Some("Asia/Tokyo"));
    assert_eq!(value("client_encoding"), Some("LATIN1"));
}

#[test]
fn per_database_statistics_and_pool_gauges_follow_the_traffic() {
    let mut h = Harness::new(&config(TX));
    let (a, _) = h.login("alice", "db");
    for _ in 0..3 {
        h.client_sends(a, &query("SELECT 1"));
        assert_eq!(h.client_tags(a), "TDCZ");
    }
    h.engine.fold_counters();
    let stats = h.engine.env.shared().databases.stats();
    assert_eq!(stats.len(), 1, "{stats:?}");
    let db = &stats[0];
    assert_eq!(&*db.database, "db");
    assert_eq!(db.totals.query_count, 3, "one query per ReadyForQuery");
    assert_eq!(db.totals.xact_count, 3, "each ended idle");
    assert_eq!(db.totals.query_times.total(), 3);
    assert_eq!(db.totals.xact_times.total(), 3);
    assert!(db.totals.received_bytes > 0 && db.totals.sent_bytes > 0);
    assert_eq!(db.totals.client_login_count, 1, "one login");
    assert_eq!(
        db.totals.server_assignment_count, 3,
        "one per transaction (the server of the welcome is not kept)"
    );
    let gauges = h.engine.pool_gauges();
    assert_eq!(gauges.len(), 1);
    let pool = &gauges[0];
    assert_eq!((&*pool.database, &*pool.user), ("db", "alice"));
    assert_eq!((pool.clients_active, pool.clients_waiting), (1, 0));
    assert_eq!((pool.servers_idle, pool.servers_active), (1, 0));
}

/// In session mode the server of the welcome is the client's: one assignment per client,
/// however many transactions it runs.
#[test]
fn a_session_mode_client_is_assigned_its_server_once() {
    let mut h = Harness::new(&config("pool_mode = \"session\""));
    let (a, _) = h.login("alice", "db");
    for _ in 0..3 {
        h.client_sends(a, &query("SELECT 1"));
        assert_eq!(h.client_tags(a), "TDCZ");
    }
    h.engine.fold_counters();
    let stats = h.engine.env.shared().databases.stats();
    let db = stats.iter().find(|s| &*s.database == "db").expect("db");
    assert_eq!(db.totals.server_assignment_count, 1);
    assert_eq!(db.totals.client_login_count, 1);
}

/// `counter_flush_queries`: a full batch reaches the shared totals without waiting for
/// housekeeping or the console.
#[test]
fn a_full_counter_batch_is_folded_at_once() {
    let mut h = Harness::new(&config(&format!("{TX}\ncounter_flush_queries = 2")));
    let (a, _) = h.login("alice", "db");
    h.client_sends(a, &query("SELECT 1"));
    assert_eq!(h.client_tags(a), "TDCZ");
    assert_eq!(h.engine.env.shared().totals.snapshot().total_queries(), 0);
    h.client_sends(a, &query("SELECT 1"));
    assert_eq!(h.client_tags(a), "TDCZ");
    assert_eq!(h.engine.env.shared().totals.snapshot().total_queries(), 2);
}

/// A burst of logins that all wait for the pool's first server: each is welcomed and the
/// server handed to the next at once. That chain runs in a loop, not nested calls (a
/// thousand waiters once overflowed a shard's stack); the small stack here makes a nesting
/// regression fail.
#[test]
fn a_burst_of_logins_waiting_for_the_first_server_is_welcomed_without_nesting() {
    let outcome = std::thread::Builder::new()
        .stack_size(512 * 1024)
        .spawn(|| {
            let mut h = Harness::new(&config(
                "pool_mode = \"transaction\"\ndefault_pool_size = 1\nmax_client_conn = 5000",
            ));
            h.auto_backend = false;
            let clients: Vec<_> = (0..3000)
                .map(|_| {
                    let id = h.accept();
                    h.client_sends(id, &startup(&[("user", "alice"), ("database", "db")]));
                    id
                })
                .collect();
            h.auto_backend = true;
            h.complete_connects();
            h.pump();
            let welcomed = clients
                .iter()
                .filter(|id| h.client_output(**id).last().map(|m| m.tag) == Some(b'Z'))
                .count();
            (welcomed, h.live_servers().len())
        })
        .expect("spawn")
        .join()
        .expect("the burst ran");
    assert_eq!(outcome, (3000, 1), "every client welcomed by one server");
}

#[test]
fn a_refused_replication_login_is_login_failed_for_its_client() {
    // A replication refusal (no REPLICATION role, no pg_hba.conf line for it) says nothing
    // of ordinary logins: the client gets PgBouncer's words, the server's text is logged.
    let mut h = Harness::new(&config(TX));
    h.auto_backend = false;
    let id = h.accept();
    h.client_sends(
        id,
        &startup(&[
            ("user", "alice"),
            ("database", "db"),
            ("replication", "database"),
        ]),
    );
    let server = h.connecting[0].0;
    h.complete_connects_without_backend();
    let error = crate::messages::fatal(
        crate::messages::sqlstate::INVALID_AUTHORIZATION_SPECIFICATION,
        "permission denied to start WAL sender",
    );
    h.server_sends(server, &error);
    let messages = h.client_output(id);
    assert_eq!(
        messages.iter().find_map(|m| m.field(b'M')).as_deref(),
        Some("login failed")
    );
    assert!(h.is_closed(Conn::Client(id)));
}

#[test]
fn an_entrys_connect_query_runs_once_on_each_new_server_before_any_client() {
    let text = "[pgtier]\nauth_type = \"trust\"\npool_mode = \"transaction\"\n\
                [databases.db]\nhost = \"127.0.0.1\"\n\
                connect_query = \"SET enable_seqscan = off\"\n";
    let mut h = Harness::new(text);
    let (a, welcome) = h.login("alice", "db");
    assert_eq!(welcome.last().map(|m| m.tag), Some(b'Z'));
    for _ in 0..2 {
        h.client_sends(a, &query("SELECT 1"));
        assert_eq!(
            h.client_tags(a),
            "TDCZ",
            "the client sees only its own answers"
        );
    }
    let servers = h.live_servers();
    assert_eq!(servers.len(), 1);
    let seen = &h.backend(servers[0]).seen;
    assert_eq!(
        seen.first().map(String::as_str),
        Some("SET enable_seqscan = off")
    );
    assert_eq!(
        seen.iter()
            .filter(|sql| sql.contains("enable_seqscan"))
            .count(),
        1,
        "once per server: {seen:?}"
    );
}

/// An Execute sent with no Sync after it (Parse/Bind/Execute, then the client waits) may be
/// running: PostgreSQL answers nothing until a Sync or Flush. A cancel reaches it, whether
/// it arrives while the Execute runs or while it still waits for a server. Found by the
/// differential fuzzer (seed 46): pgtier dropped such a cancel, as if nothing ran, and the
/// `pg_sleep(10)` ran in full.
#[test]
fn a_cancel_reaches_an_execute_sent_without_a_sync() {
    use crate::testing::{bind, execute, parse, sync};
    let mut h = Harness::new(&config(
        "pool_mode = \"transaction\"\ndefault_pool_size = 1",
    ));
    let (holder, _) = h.login("alice", "db");
    let (b, messages) = h.login("alice", "db");
    let key = cancel_key(&messages);
    let mut unsynced = parse("", "SELECT pg_sleep(10)");
    unsynced.extend(bind(""));
    unsynced.extend(execute());
    // Queued behind the holder's transaction: held, then sent after the Execute.
    h.client_sends(holder, &query("BEGIN"));
    assert_eq!(h.client_tags(holder), "CZ");
    h.client_sends(b, &unsynced);
    send_cancel(&mut h, &key);
    assert!(h.cancels.is_empty(), "nothing of b's runs yet");
    h.client_sends(holder, &query("COMMIT"));
    assert_eq!(h.client_tags(holder), "CZ");
    let server = h.live_servers()[0];
    assert_eq!(
        h.cancels,
        vec![server],
        "the held cancel followed the Execute"
    );
    h.client_sends(b, &sync());
    assert_eq!(h.client_tags(b), "12CZ");
    // Linked, its Execute under way with no Sync: the cancel goes at once.
    h.client_sends(b, &unsynced);
    send_cancel(&mut h, &key);
    assert_eq!(h.cancels, vec![server, server]);
}
