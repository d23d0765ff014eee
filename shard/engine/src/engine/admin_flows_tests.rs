//! The admin commands through the engine alone (one shard, a scripted PostgreSQL): what
//! PAUSE waits for and what it holds, RESUME, SUSPEND, KILL, DISABLE, RECONNECT,
//! WAIT_CLOSE, and the rights check. The console here maps a few words to ops; its parser is tested in
//! `console/src/operations.rs`.

use bytes::BytesMut;

use crate::ShutdownMode;
use crate::action::Conn;
use crate::gates::{AdminOp, AdminRequest, Scope};
use crate::services::{Console, ConsoleRequest, Refusal, StatementAnswer};
use crate::testing::{Harness, config, query};

const TX: &str = "pool_mode = \"transaction\"\ndefault_pool_size = 1";

/// Maps `VERB [db]` to its op; only admins may run them.
struct WordConsole;

impl Console for WordConsole {
    fn needs_listing(&self, _query: &str) -> bool {
        false
    }

    fn answer(&mut self, _request: &ConsoleRequest<'_>, _out: &mut BytesMut) {}

    fn answer_statement(&mut self, _request: &ConsoleRequest<'_>) -> StatementAnswer {
        StatementAnswer {
            description: None,
            body: BytesMut::new(),
            failed: false,
        }
    }

    fn admin_command(
        &mut self,
        query: &str,
        admin: bool,
        _config: &pgtier_core::config::Config,
    ) -> Option<Result<AdminRequest, Refusal>> {
        let mut words = query.split_whitespace();
        let verb = words.next()?;
        let db = words.next().map(str::to_string);
        let scope = Scope::of(db.as_deref());
        let op = match verb {
            "PAUSE" => AdminOp::Pause(scope),
            "RESUME" => AdminOp::Resume(scope),
            "RECONNECT" => AdminOp::Reconnect(scope),
            "WAIT_CLOSE" => AdminOp::WaitClose(scope),
            "KILL" => AdminOp::Kill(scope),
            "DISABLE" => AdminOp::Disable(db?),
            "ENABLE" => AdminOp::Enable(db?),
            "SHUTDOWN" => AdminOp::Shutdown(ShutdownMode::WaitForClients),
            "SUSPEND" => AdminOp::Suspend,
            _ => return None,
        };
        if !admin {
            return Some(Err(Refusal {
                code: crate::messages::sqlstate::PROTOCOL_VIOLATION,
                message: "admin access needed".to_string(),
            }));
        }
        Some(Ok(AdminRequest::Op(op)))
    }
}

fn harness() -> Harness {
    Harness::with_console(&config(TX), Box::new(WordConsole))
}

/// The command tags and errors a console session got.
fn answers(h: &mut Harness, id: crate::ClientId) -> Vec<String> {
    h.client_output(id)
        .iter()
        .filter_map(|message| match message.tag {
            b'C' => Some(String::from_utf8_lossy(&message.body[..message.body.len() - 1]).into()),
            b'E' => message.field(b'M'),
            _ => None,
        })
        .collect()
}

#[test]
fn pause_waits_for_the_transaction_then_holds_the_next_until_resume() {
    let mut h = harness();
    let (client, _) = h.login("alice", "db");
    let (admin, _) = h.login("admin", "pgtier");
    h.client_sends(client, &query("BEGIN"));
    assert_eq!(h.client_tags(client), "CZ");
    h.client_sends(admin, &query("PAUSE"));
    assert!(
        answers(&mut h, admin).is_empty(),
        "waits for the transaction"
    );
    h.client_sends(client, &query("COMMIT"));
    assert_eq!(h.client_tags(client), "CZ", "the transaction finishes");
    assert!(h.live_servers().is_empty(), "released, then closed");
    assert_eq!(answers(&mut h, admin), vec!["PAUSE".to_string()]);
    let connects = h.connects.len();
    h.client_sends(client, &query("SELECT 1"));
    assert_eq!(h.client_tags(client), "", "the next transaction waits");
    assert_eq!(h.connects.len(), connects, "no server is opened for it");
    assert_eq!(h.engine.list_sessions().clients[0].state, "waiting");
    h.client_sends(admin, &query("PAUSE"));
    assert_eq!(
        answers(&mut h, admin),
        vec!["already suspended/paused".to_string()]
    );
    h.client_sends(admin, &query("RESUME"));
    assert_eq!(answers(&mut h, admin), vec!["RESUME".to_string()]);
    assert_eq!(h.client_tags(client), "TDCZ", "it runs after RESUME");
}

#[test]
fn a_paused_client_is_still_bounded_by_query_wait_timeout() {
    let mut h = Harness::with_console(
        &config(&format!("{TX}\nquery_wait_timeout = 2")),
        Box::new(WordConsole),
    );
    let (client, _) = h.login("alice", "db");
    let (admin, _) = h.login("admin", "pgtier");
    h.client_sends(admin, &query("PAUSE db"));
    assert_eq!(answers(&mut h, admin), vec!["PAUSE".to_string()]);
    h.client_sends(client, &query("SELECT 1"));
    h.advance(std::time::Duration::from_secs(3));
    assert!(h.is_closed(Conn::Client(client)));
}

#[test]
fn kill_closes_the_clients_and_servers_of_the_database_and_pauses_it() {
    let mut h = harness();
    let (client, _) = h.login("alice", "db");
    let (admin, _) = h.login("admin", "pgtier");
    h.client_sends(client, &query("BEGIN"));
    h.client_tags(client);
    h.client_sends(admin, &query("KILL db"));
    assert_eq!(answers(&mut h, admin), vec!["KILL".to_string()]);
    let messages = h.client_output(client);
    assert!(
        messages
            .iter()
            .any(|m| m.field(b'M').as_deref() == Some("database removed")),
        "{messages:?}"
    );
    assert!(h.is_closed(Conn::Client(client)));
    assert!(h.live_servers().is_empty());
    // Its pool went with its clients, so a new client's welcome needs a server: the login
    // itself waits for RESUME, as PgBouncer's new clients of a killed database do.
    let (late, messages) = h.login("alice", "db");
    assert!(messages.iter().all(|m| m.tag != b'Z'), "paused after KILL");
    h.client_sends(late, &query("SELECT 1"));
    h.client_sends(admin, &query("RESUME db"));
    h.complete_connects();
    let tags = h.client_tags(late);
    assert!(tags.starts_with('R') && tags.ends_with("ZTDCZ"), "{tags}");
}

#[test]
fn disable_refuses_logins_until_enable_and_only_admins_may() {
    let mut h = harness();
    let (admin, _) = h.login("admin", "pgtier");
    h.client_sends(admin, &query("DISABLE db"));
    assert_eq!(answers(&mut h, admin), vec!["DISABLE".to_string()]);
    let (refused, messages) = h.login("alice", "db");
    assert!(
        messages
            .iter()
            .any(|m| m.sqlstate().as_deref() == Some("08P01")
                && m.field(b'M').as_deref() == Some("database \"db\" is disabled")),
        "{messages:?}"
    );
    assert!(h.is_closed(Conn::Client(refused)));
    h.client_sends(admin, &query("ENABLE db"));
    assert_eq!(answers(&mut h, admin), vec!["ENABLE".to_string()]);
    let (_, messages) = h.login("alice", "db");
    assert_eq!(messages.last().map(|m| m.tag), Some(b'Z'));
}

#[test]
fn reconnect_closes_each_server_at_release_and_wait_close_waits_for_it() {
    let mut h = harness();
    let (client, _) = h.login("alice", "db");
    let (admin, _) = h.login("admin", "pgtier");
    h.client_sends(client, &query("BEGIN"));
    h.client_tags(client);
    let server = h.live_servers()[0];
    h.client_sends(admin, &query("RECONNECT"));
    assert_eq!(answers(&mut h, admin), vec!["RECONNECT".to_string()]);
    h.client_sends(admin, &query("WAIT_CLOSE"));
    assert!(
        answers(&mut h, admin).is_empty(),
        "the marked server is in use"
    );
    assert_eq!(h.live_servers(), vec![server], "not closed mid-transaction");
    h.client_sends(client, &query("COMMIT"));
    h.client_tags(client);
    assert!(h.live_servers().is_empty(), "closed once released");
    assert_eq!(answers(&mut h, admin), vec!["WAIT_CLOSE".to_string()]);
    h.client_sends(client, &query("SELECT 1"));
    h.complete_connects();
    assert_eq!(h.client_tags(client), "TDCZ", "a new server serves it");
}

/// `server_fast_close`: a session's server that RECONNECT marked closes at the end of the
/// transaction in progress, with its client, told why; without it, at the session's end.
#[test]
fn server_fast_close_ends_a_marked_session_between_transactions() {
    for fast_close in [true, false] {
        let mut h = Harness::with_console(
            &config(&format!(
                "pool_mode = \"session\"\nserver_fast_close = {fast_close}"
            )),
            Box::new(WordConsole),
        );
        let (client, _) = h.login("alice", "db");
        let (admin, _) = h.login("admin", "pgtier");
        h.client_sends(client, &query("BEGIN"));
        h.client_tags(client);
        let server = h.live_servers()[0];
        h.client_sends(admin, &query("RECONNECT"));
        assert_eq!(answers(&mut h, admin), vec!["RECONNECT".to_string()]);
        h.advance(std::time::Duration::from_millis(500));
        assert_eq!(h.live_servers(), vec![server], "not closed mid-transaction");
        h.client_sends(client, &query("COMMIT"));
        assert_eq!(h.client_tags(client), "CZ");
        h.advance(std::time::Duration::from_millis(500));
        if fast_close {
            assert!(h.live_servers().is_empty(), "closed between transactions");
            assert!(h.is_closed(Conn::Client(client)));
            assert_eq!(
                answers(&mut h, client),
                vec!["database configuration changed".to_string()]
            );
        } else {
            assert_eq!(h.live_servers(), vec![server], "kept for the session");
            assert!(!h.is_closed(Conn::Client(client)));
        }
    }
}

#[test]
fn commands_are_for_admins_and_queries_after_a_waiting_command_wait_behind_it() {
    let mut h = Harness::with_console(
        &config(&format!("{TX}\nstats_users = [\"watcher\"]")),
        Box::new(WordConsole),
    );
    let (watcher, _) = h.login("watcher", "pgtier");
    h.client_sends(watcher, &query("PAUSE"));
    assert_eq!(
        answers(&mut h, watcher),
        vec!["admin access needed".to_string()]
    );
    let (client, _) = h.login("alice", "db");
    let (admin, _) = h.login("admin", "pgtier");
    h.client_sends(client, &query("BEGIN"));
    h.client_tags(client);
    let mut pipelined = query("PAUSE");
    pipelined.extend(query("RESUME"));
    h.client_sends(admin, &pipelined);
    assert!(answers(&mut h, admin).is_empty());
    h.client_sends(client, &query("COMMIT"));
    assert_eq!(
        answers(&mut h, admin),
        vec!["PAUSE".to_string(), "RESUME".to_string()],
        "in order, each once"
    );
}

#[test]
fn a_client_that_arrives_during_wait_for_clients_is_served() {
    let mut h = harness();
    let (admin, _) = h.login("admin", "pgtier");
    h.client_sends(admin, &query("SHUTDOWN"));
    assert_eq!(answers(&mut h, admin), vec!["SHUTDOWN".to_string()]);
    // One that was in the listener's queue when it closed.
    let (late, messages) = h.login("alice", "db");
    assert_eq!(messages.last().map(|m| m.tag), Some(b'Z'));
    h.client_sends(late, &query("SELECT 1"));
    assert_eq!(h.client_tags(late), "TDCZ");
}

#[test]
fn shutdown_wait_for_servers_answers_before_it_closes_the_session() {
    struct Servers;
    impl Console for Servers {
        fn needs_listing(&self, _query: &str) -> bool {
            false
        }
        fn answer(&mut self, _request: &ConsoleRequest<'_>, _out: &mut BytesMut) {}

        fn answer_statement(&mut self, _request: &ConsoleRequest<'_>) -> StatementAnswer {
            StatementAnswer {
                description: None,
                body: BytesMut::new(),
                failed: false,
            }
        }
        fn admin_command(
            &mut self,
            _query: &str,
            _admin: bool,
            _config: &pgtier_core::config::Config,
        ) -> Option<Result<AdminRequest, Refusal>> {
            Some(Ok(AdminRequest::Op(AdminOp::Shutdown(
                ShutdownMode::WaitForTransactions,
            ))))
        }
    }
    let mut h = Harness::with_console(&config(TX), Box::new(Servers));
    let (admin, _) = h.login("admin", "pgtier");
    h.client_sends(admin, &query("SHUTDOWN WAIT_FOR_SERVERS"));
    let messages = h.client_output(admin);
    let tags: String = messages.iter().map(|m| m.tag as char).collect();
    assert_eq!(tags, "CZE", "SHUTDOWN, then the shutdown's 57P01");
    assert!(h.is_closed(Conn::Client(admin)));
    assert!(h.engine.is_shutting_down());
}

#[test]
fn suspend_stops_reading_waits_for_unsent_bytes_and_resume_reads_again() {
    let mut h = harness();
    let (client, _) = h.login("alice", "db");
    let (admin, _) = h.login("admin", "pgtier");
    h.client_sends(client, &query("SELECT 1"));
    assert_eq!(h.client_tags(client), "TDCZ");
    // The client stops reading: its next answer stays queued in the driver.
    h.clients_read = false;
    h.client_sends(client, &query("SELECT 1"));
    h.client_sends(admin, &query("SUSPEND"));
    assert!(
        h.paused.contains(&Conn::Client(client)),
        "a client is no longer read"
    );
    assert!(
        !h.paused.contains(&Conn::Client(admin)),
        "the console session is"
    );
    assert!(
        h.live_servers()
            .iter()
            .all(|server| h.paused.contains(&Conn::Server(*server))),
        "nor is any pooled server"
    );
    assert!(
        answers(&mut h, admin).is_empty(),
        "SUSPEND waits for the queued answer"
    );
    h.clients_read = true;
    let queued = h.client_output(client);
    assert_eq!(queued.len(), 4, "the answer was queued");
    // The driver reports the queue sent; housekeeping then answers.
    h.engine.handle_client_sent(h.now, client, 4096);
    h.advance(std::time::Duration::from_secs(1));
    assert_eq!(answers(&mut h, admin), vec!["SUSPEND".to_string()]);
    h.client_sends(admin, &query("SUSPEND"));
    assert_eq!(
        answers(&mut h, admin),
        vec!["already suspended/paused".to_string()]
    );
    // A client that connects meanwhile logs in, and its transaction waits.
    let (late, _) = h.login("alice", "db");
    h.client_sends(late, &query("SELECT 1"));
    assert_eq!(h.client_tags(late), "", "held until RESUME");
    h.client_sends(admin, &query("RESUME"));
    assert_eq!(answers(&mut h, admin), vec!["RESUME".to_string()]);
    assert!(
        !h.paused.contains(&Conn::Client(client)),
        "read again after RESUME"
    );
    assert_eq!(h.client_tags(late), "TDCZ", "it runs after RESUME");
}

/// Hands RELOAD and `SET key value` to a process that is the test itself.
struct ReconfiguringConsole {
    orders: std::rc::Rc<std::cell::RefCell<Vec<crate::reconfigure::Order>>>,
}

impl Console for ReconfiguringConsole {
    fn needs_listing(&self, _query: &str) -> bool {
        false
    }

    fn answer(&mut self, _request: &ConsoleRequest<'_>, _out: &mut BytesMut) {}

    fn answer_statement(&mut self, _request: &ConsoleRequest<'_>) -> StatementAnswer {
        StatementAnswer::default()
    }

    fn admin_command(
        &mut self,
        query: &str,
        _admin: bool,
        _config: &pgtier_core::config::Config,
    ) -> Option<Result<AdminRequest, Refusal>> {
        use crate::reconfigure::Change;
        let words: Vec<&str> = query.split_whitespace().collect();
        let change = match words.as_slice() {
            ["RELOAD"] => Change::Reload,
            ["SET", key, value] => Change::Set {
                key: key.to_string(),
                value: value.to_string(),
            },
            _ => return None,
        };
        Some(Ok(AdminRequest::Reconfigure(change)))
    }

    fn reconfigure(&mut self, order: crate::reconfigure::Order) -> Result<(), Refusal> {
        self.orders.borrow_mut().push(order);
        Ok(())
    }
}

#[test]
fn reload_and_set_are_answered_once_the_new_configuration_is_applied() {
    let orders = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
    let console = ReconfiguringConsole {
        orders: orders.clone(),
    };
    let mut h = Harness::with_console(&config(TX), Box::new(console));
    let (admin, _) = h.login("admin", "pgtier");
    h.client_sends(admin, &query("SET default_pool_size 2"));
    h.client_sends(admin, &query("RELOAD"));
    assert!(answers(&mut h, admin).is_empty(), "the process has it");
    let order = orders.borrow_mut().remove(0);
    assert!(
        orders.borrow().is_empty(),
        "the RELOAD waits behind the SET"
    );
    let bigger = pgtier_core::config::Config::from_str(
        &config("pool_mode = \"transaction\"\ndefault_pool_size = 2"),
        "pgtier.toml",
    )
    .expect("config");
    h.engine.handle_command(
        h.now,
        crate::command::Command::Reload {
            config: std::sync::Arc::new(bigger),
            users: std::sync::Arc::new(crate::userlist::UserList::new()),
            tls: Default::default(),
            pending: Some(crate::reconfigure::Pending::new(&order, 1)),
        },
    );
    h.pump();
    assert_eq!(answers(&mut h, admin), vec!["SET default_pool_size=2"]);
    assert_eq!(h.engine.env.config().pgtier.default_pool_size, 2);
    // The pipelined RELOAD went to the process once the SET was answered; it fails.
    let reload = orders.borrow_mut().remove(0);
    assert_eq!(reload.change, crate::reconfigure::Change::Reload);
    h.engine.handle_command(
        h.now,
        crate::command::Command::AdminDone {
            request_id: reload.request_id,
            error: Some(Refusal {
                code: pgtier_wire::SqlState::new(b"F0000"),
                message: "RELOAD failed, see logs for additional details".to_string(),
            }),
        },
    );
    h.pump();
    let output = h.client_output(admin);
    let error = output.iter().find(|message| message.tag == b'E');
    assert_eq!(
        error.and_then(|message| message.field(b'C')).as_deref(),
        Some("F0000")
    );
}

#[test]
fn a_disabled_database_is_refused_only_after_authentication() {
    let users = crate::userlist::UserList::from_file(
        pgtier_core::auth_file::AuthFile::parse("\"alice\" \"\"\n\"admin\" \"\"\n", "userlist.txt")
            .expect("valid"),
    );
    let text = config(TX).replace(
        "auth_type = \"trust\"",
        "auth_type = \"trust\"\nauth_file = \"/dev/null\"",
    );
    let mut h = Harness::with_console_and_users(&text, users, Box::new(WordConsole));
    let (admin, _) = h.login("admin", "pgtier");
    h.client_sends(admin, &query("DISABLE db"));
    assert_eq!(answers(&mut h, admin), vec!["DISABLE".to_string()]);
    // Who cannot log in learns nothing about the database (PgBouncer's order).
    let (_, messages) = h.login("nobody", "db");
    assert_eq!(
        messages.iter().find_map(|m| m.field(b'M')).as_deref(),
        Some("\"trust\" authentication failed")
    );
    let (_, messages) = h.login("alice", "db");
    assert_eq!(
        messages.iter().find_map(|m| m.field(b'M')).as_deref(),
        Some("database \"db\" is disabled")
    );
}

#[test]
fn a_failed_login_fails_the_waiters_when_only_reconnect_marked_servers_are_left() {
    let text = config("pool_mode = \"transaction\"\ndefault_pool_size = 2");
    let mut h = Harness::with_console(&text, Box::new(WordConsole));
    let (holder, _) = h.login("alice", "db");
    h.client_sends(holder, &query("BEGIN"));
    h.client_output(holder);
    let (admin, _) = h.login("admin", "pgtier");
    h.client_sends(admin, &query("RECONNECT"));
    assert_eq!(answers(&mut h, admin), vec!["RECONNECT".to_string()]);
    // The next client needs a second server, whose login the server refuses: the holder's
    // server closes at its release, so nothing will serve the waiter (PgBouncer's
    // kill_pool_logins).
    h.auto_backend = false;
    let (waiter, _) = h.login("alice", "db");
    h.client_sends(waiter, &query("SELECT 1"));
    let server = h.connecting.last().expect("a second server").0;
    h.complete_connects_without_backend();
    let error = crate::messages::fatal(
        crate::messages::sqlstate::INVALID_PASSWORD,
        "password authentication failed for user \"alice\"",
    );
    h.server_sends(server, &error);
    let messages = h.client_output(waiter);
    assert_eq!(
        messages.iter().find_map(|m| m.field(b'M')).as_deref(),
        Some("password authentication failed for user \"alice\"")
    );
    assert!(h.is_closed(Conn::Client(waiter)));
    assert!(
        !h.is_closed(Conn::Client(holder)),
        "the holder keeps its server"
    );
}
