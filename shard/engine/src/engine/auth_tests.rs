//! Table tests of the authentication methods through the kernel-less harness: plain, hba
//! (per line, no match, Unix clients), any, md5 with a SCRAM secret, and `auth_query`
//! (a secret found, a user the server does not know, a failing query, the cache).

use std::net::SocketAddr;
use std::path::Path;

use pgtier_core::auth_file::AuthFile;
use pgtier_core::hba::HbaFile;
use pgtier_wire::auth::{md5_password_hash, md5_salted_response};

use crate::client::ClientState;
use crate::ids::ClientId;
use crate::testing::{self, Harness, Msg, config, frame, query, startup};
use crate::userlist::UserList;

const TX: &str = "pool_mode = \"transaction\"\ndefault_pool_size = 2";

fn users(text: &str) -> UserList {
    UserList::from_file(AuthFile::parse(text, "userlist.txt").expect("valid"))
}

fn with_auth(auth_type: &str, extra: &str) -> String {
    config(&format!("{TX}\n{extra}")).replace(
        "auth_type = \"trust\"",
        &format!("auth_type = \"{auth_type}\"\nauth_file = \"/dev/null\""),
    )
}

fn tcp() -> Option<SocketAddr> {
    Some("127.0.0.1:50000".parse().expect("addr"))
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

/// The authentication request code of the first message (3 cleartext, 5 md5, 10 SASL).
fn request_code(messages: &[Msg]) -> Option<u32> {
    let request = messages.first().filter(|m| m.tag == b'R')?;
    Some(u32::from_be_bytes(request.body.get(..4)?.try_into().ok()?))
}

fn password(text: &str) -> Vec<u8> {
    let mut body = text.as_bytes().to_vec();
    body.push(0);
    frame(b'p', &body)
}

fn md5_answer(request: &Msg, user: &str, text: &str) -> Vec<u8> {
    let salt = [
        request.body[4],
        request.body[5],
        request.body[6],
        request.body[7],
    ];
    let hash = md5_password_hash(user.as_bytes(), text.as_bytes());
    let mut answer = md5_salted_response(&hash, salt).to_vec();
    answer.push(0);
    frame(b'p', &answer)
}

fn start(h: &mut Harness, peer: Option<SocketAddr>, user: &str) -> (ClientId, Vec<Msg>) {
    let id = h.accept_from(peer);
    h.client_sends(id, &startup(&[("user", user), ("database", "db")]));
    let messages = h.client_output(id);
    (id, messages)
}

fn welcomed(messages: &[Msg]) -> bool {
    messages.last().map(|m| m.tag) == Some(b'Z')
}

#[test]
fn plain_asks_for_the_cleartext_password_and_checks_every_stored_form() {
    let hash = md5_password_hash(b"bob", b"secret");
    let hash = std::str::from_utf8(&hash).expect("ascii");
    let list = users(&format!("\"alice\" \"secret\"\n\"bob\" \"{hash}\"\n"));
    for (user, text, accepted) in [
        ("alice", "secret", true),
        ("bob", "secret", true),
        ("alice", "wrong", false),
        ("bob", hash, false),
        ("nobody", "secret", false),
    ] {
        let mut h = Harness::with_users(&with_auth("plain", ""), list.clone());
        let (id, request) = start(&mut h, tcp(), user);
        assert_eq!(request_code(&request), Some(3), "{user}");
        h.client_sends(id, &password(text));
        let messages = h.client_output(id);
        if accepted {
            assert!(welcomed(&messages), "{user}/{text}: {messages:?}");
        } else {
            let errors = errors(&messages);
            assert_eq!(errors.len(), 1, "{user}/{text}");
            assert_eq!(errors[0].0, "28P01");
            assert_eq!(
                errors[0].1,
                format!("password authentication failed for user \"{user}\"")
            );
        }
    }
}

#[test]
fn md5_runs_scram_for_a_scram_secret() {
    let mut random = crate::random::SeededRandom::new(9);
    let secret = crate::credentials::scram_secret_for("secret", &mut random)
        .expect("random")
        .expect("derived")
        .to_text();
    let list = users(&format!("\"alice\" \"{secret}\"\n\"bob\" \"secret\"\n"));
    let mut h = Harness::with_users(&with_auth("md5", ""), list);
    let (_, request) = start(&mut h, tcp(), "alice");
    assert_eq!(request_code(&request), Some(10));
    let (_, request) = start(&mut h, tcp(), "bob");
    assert_eq!(request_code(&request), Some(5));
}

fn hba_harness() -> Harness {
    let text = "local all all trust\n\
                host all alice 127.0.0.1/32 trust\n\
                host all bob 127.0.0.1/32 md5\n\
                host all carol 127.0.0.1/32 reject\n\
                host all erin 127.0.0.1/32 password\n";
    let hba =
        HbaFile::parse(text, Path::new("hba.conf"), &mut |_| Err(String::new())).expect("valid");
    let list = users(
        "\"alice\" \"\"\n\"bob\" \"secret\"\n\"carol\" \"\"\n\"dave\" \"\"\n\"erin\" \"pw\"\n",
    )
    .with_hba(hba);
    Harness::with_users(&with_auth("hba", ""), list)
}

#[test]
fn hba_chooses_the_method_per_line() {
    let mut h = hba_harness();
    let (_, messages) = start(&mut h, tcp(), "alice");
    assert!(welcomed(&messages), "trust: {messages:?}");

    let (id, request) = start(&mut h, tcp(), "bob");
    assert_eq!(request_code(&request), Some(5));
    h.client_sends(id, &md5_answer(&request[0], "bob", "secret"));
    assert!(welcomed(&h.client_output(id)));

    let (id, request) = start(&mut h, tcp(), "erin");
    assert_eq!(request_code(&request), Some(3));
    h.client_sends(id, &password("pw"));
    assert!(welcomed(&h.client_output(id)));

    let (_, messages) = start(&mut h, tcp(), "carol");
    assert_eq!(
        errors(&messages),
        vec![(
            "28000".to_string(),
            "pg_hba.conf rejects connection for host \"127.0.0.1\", user \"carol\", database \"db\", no encryption".to_string()
        )]
    );
    let (_, messages) = start(&mut h, tcp(), "dave");
    assert_eq!(
        errors(&messages),
        vec![(
            "28000".to_string(),
            "no pg_hba.conf entry for host \"127.0.0.1\", user \"dave\", database \"db\", no encryption".to_string()
        )]
    );
    // A Unix-socket client matches the local line.
    let id = h.accept_unix();
    h.client_sends(id, &startup(&[("user", "dave"), ("database", "db")]));
    let messages = h.client_output(id);
    assert!(welcomed(&messages), "local: {messages:?}");
    // A TCP client whose address is unknown is not taken for a local one.
    let (_, messages) = start(&mut h, None, "dave");
    assert_eq!(errors(&messages)[0].0, "28000", "{messages:?}");
}

#[test]
fn any_ignores_the_user_and_needs_a_forced_user() {
    let text = config(TX).replace("auth_type = \"trust\"", "auth_type = \"any\"")
        + "[databases.forced]\nhost = \"127.0.0.1\"\nport = 5432\ndbname = \"db\"\nuser = \"app\"\n";
    let mut h = Harness::new(&text);
    let id = h.accept_from(tcp());
    h.client_sends(id, &startup(&[("user", "whoever"), ("database", "forced")]));
    assert!(welcomed(&h.client_output(id)));
    h.client_sends(id, &query("SELECT 1"));
    assert_eq!(h.client_tags(id), "TDCZ");

    let (_, messages) = start(&mut h, tcp(), "whoever");
    let errors = errors(&messages);
    assert_eq!(errors.len(), 1);
    assert_eq!(errors[0].0, "28000");
    assert!(errors[0].1.contains("auth_type = any"), "{}", errors[0].1);

    // Any user may open the console.
    let id = h.accept_from(tcp());
    h.client_sends(id, &startup(&[("user", "whoever"), ("database", "pgtier")]));
    assert!(welcomed(&h.client_output(id)));
}

fn lookup_harness(auth_type: &str) -> Harness {
    let text = with_auth(auth_type, "auth_user = \"pgtier_auth\"");
    let mut h = Harness::with_users(&text, users("\"pgtier_auth\" \"authpw\"\n"));
    let hash = md5_password_hash(b"bob", b"secret");
    h.shadow = vec![(
        "bob".to_string(),
        String::from_utf8_lossy(&hash).into_owned(),
    )];
    h
}

#[test]
fn auth_query_finds_a_user_the_auth_file_does_not_list() {
    let mut h = lookup_harness("md5");
    let (id, request) = start(&mut h, tcp(), "bob");
    assert_eq!(request_code(&request), Some(5), "{request:?}");
    let lookups: Vec<String> = h
        .backends
        .values()
        .flat_map(|backend| backend.seen.clone())
        .filter(|sql| testing::is_lookup(sql))
        .collect();
    assert_eq!(lookups.len(), 1, "one lookup ran");
    h.client_sends(id, &md5_answer(&request[0], "bob", "secret"));
    assert!(welcomed(&h.client_output(id)));
    h.client_sends(id, &query("SELECT 1"));
    assert_eq!(h.client_tags(id), "TDCZ");
    h.engine.check_invariants().expect("invariants");

    // A second login asks again (a password changed or a role expired on the server
    // takes effect at once, as in PgBouncer); a wrong password fails.
    let (id, request) = start(&mut h, tcp(), "bob");
    h.client_sends(id, &md5_answer(&request[0], "bob", "wrong"));
    let errors = errors(&h.client_output(id));
    assert_eq!(errors[0].0, "28P01");
    let lookups = h
        .backends
        .values()
        .flat_map(|backend| backend.seen.clone())
        .filter(|sql| testing::is_lookup(sql))
        .count();
    assert_eq!(lookups, 2, "each login looks the user up");
}

#[test]
fn auth_query_without_a_row_is_no_such_user() {
    // PgBouncer's answer after `auth_query` (it runs no decoy exchange then), whatever
    // the method: trust needs the user to exist too.
    for auth_type in ["md5", "trust"] {
        let mut h = lookup_harness(auth_type);
        let (_, messages) = start(&mut h, tcp(), "nobody");
        assert_eq!(
            errors(&messages),
            vec![("28000".to_string(), "no such user".to_string())],
            "{auth_type}"
        );
        h.engine.check_invariants().expect("invariants");
    }
}

#[test]
fn trust_lets_in_a_user_auth_query_finds() {
    let mut h = lookup_harness("trust");
    let (_, messages) = start(&mut h, tcp(), "bob");
    assert!(welcomed(&messages), "{messages:?}");
}

#[test]
fn a_failing_auth_query_refuses_the_login_and_the_server_goes_back() {
    let mut h = lookup_harness("md5");
    h.auto_backend = false;
    let id = h.accept_from(tcp());
    h.client_sends(id, &startup(&[("user", "bob"), ("database", "db")]));
    h.complete_connects_without_backend();
    let server = h.connects[0].0;
    let mut login = frame(b'R', &0u32.to_be_bytes());
    login.extend(frame(b'Z', b"I"));
    h.server_sends(server, &login);
    assert!(
        matches!(
            h.engine.clients.get(id.0).map(|c| c.state()),
            Some(ClientState::LookingUp {
                server: Some(_),
                ..
            })
        ),
        "the query runs"
    );
    let mut answer = frame(b'1', b"");
    answer.extend(testing::error("ERROR", "42501", "permission denied"));
    answer.extend(frame(b'Z', b"I"));
    h.server_sends(server, &answer);
    // PgBouncer's words: the configuration is wrong, not the client's login.
    let errors = errors(&h.client_output(id));
    assert_eq!(
        errors,
        vec![("08P01".to_string(), "bouncer config error".to_string())]
    );
    assert!(!h.is_closed(crate::action::Conn::Server(server)), "pooled");
    h.engine.check_invariants().expect("invariants");
}

#[test]
fn a_client_leaving_during_its_lookup_closes_the_lookup_server() {
    let mut h = lookup_harness("scram-sha-256");
    h.auto_backend = false;
    let id = h.accept_from(tcp());
    h.client_sends(id, &startup(&[("user", "bob"), ("database", "db")]));
    h.complete_connects_without_backend();
    let server = h.connects[0].0;
    let mut login = frame(b'R', &0u32.to_be_bytes());
    login.extend(frame(b'Z', b"I"));
    h.server_sends(server, &login);
    h.client_leaves(id);
    assert!(h.is_closed(crate::action::Conn::Server(server)));
    h.engine.check_invariants().expect("invariants");
}

#[test]
fn a_lookup_that_never_answers_ends_at_server_connect_timeout() {
    let mut h = lookup_harness("md5");
    h.auto_backend = false;
    let id = h.accept_from(tcp());
    h.client_sends(id, &startup(&[("user", "bob"), ("database", "db")]));
    h.complete_connects_without_backend();
    let server = h.connects[0].0;
    let mut login = frame(b'R', &0u32.to_be_bytes());
    login.extend(frame(b'Z', b"I"));
    h.server_sends(server, &login);
    h.advance(std::time::Duration::from_secs(16));
    let errors = errors(&h.client_output(id));
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0].0, "08006");
    assert!(h.is_closed(crate::action::Conn::Server(server)));
    h.engine.check_invariants().expect("invariants");
}

#[test]
fn trust_refuses_a_user_the_auth_file_does_not_list() {
    let mut h = Harness::with_users(&with_auth("trust", ""), users("\"alice\" \"\"\n"));
    let (id, messages) = start(&mut h, tcp(), "nobody");
    assert_eq!(
        errors(&messages),
        vec![(
            "28000".to_string(),
            "\"trust\" authentication failed".to_string()
        )]
    );
    assert!(h.is_closed(crate::action::Conn::Client(id)));
    assert!(h.connects.is_empty(), "no server was asked about the user");
    let (_, messages) = start(&mut h, tcp(), "alice");
    assert!(welcomed(&messages), "{messages:?}");
}

#[test]
fn trust_without_an_auth_file_takes_every_user() {
    // No list to check the name against (pgtier's reading; PgBouncer would let no one in).
    let mut h = Harness::new(&config(TX));
    let (_, messages) = start(&mut h, tcp(), "anyone");
    assert!(welcomed(&messages), "{messages:?}");
}

/// A client of database `database` as `user`.
fn start_in(h: &mut Harness, database: &str, user: &str) -> (ClientId, Vec<Msg>) {
    let id = h.accept_from(tcp());
    h.client_sends(id, &startup(&[("user", user), ("database", database)]));
    let messages = h.client_output(id);
    (id, messages)
}

#[test]
fn an_unknown_database_is_refused_only_after_authentication() {
    let list = users("\"alice\" \"secret\"\n");
    let mut h = Harness::with_users(&with_auth("md5", ""), list.clone());
    // A wrong password (or an unknown user) learns nothing about the database.
    for (user, text) in [("alice", "wrong"), ("nobody", "secret")] {
        let (id, request) = start_in(&mut h, "nosuchdb", user);
        assert_eq!(request_code(&request), Some(5), "{user}");
        h.client_sends(id, &md5_answer(&request[0], user, text));
        let errors = errors(&h.client_output(id));
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].0, "28P01", "{user}");
    }
    let (id, request) = start_in(&mut h, "nosuchdb", "alice");
    h.client_sends(id, &md5_answer(&request[0], "alice", "secret"));
    assert_eq!(
        errors(&h.client_output(id)),
        vec![(
            "3D000".to_string(),
            "no such database: nosuchdb".to_string()
        )]
    );
    // Under trust the unknown user fails as any unknown user does.
    let mut h = Harness::with_users(&with_auth("trust", ""), list);
    let (_, messages) = start_in(&mut h, "nosuchdb", "nobody");
    assert_eq!(errors(&messages)[0].1, "\"trust\" authentication failed");
    let (_, messages) = start_in(&mut h, "nosuchdb", "alice");
    assert_eq!(errors(&messages)[0].1, "no such database: nosuchdb");
    assert!(h.connects.is_empty());
    h.engine.check_invariants().expect("invariants");
}

#[test]
fn peer_lets_in_the_system_users_its_map_names() {
    let hba = HbaFile::parse(
        "local all all peer map=mymap\n",
        Path::new("hba.conf"),
        &mut |_| Err(String::new()),
    )
    .expect("valid");
    let ident = pgtier_core::ident::IdentFile::parse(
        "mymap ops postgres\nmymap ops someuser\n",
        Path::new("ident.conf"),
    )
    .expect("valid");
    let list = users("\"postgres\" \"\"\n\"someuser\" \"\"\n\"bouncer\" \"\"\n")
        .with_hba(hba)
        .with_ident(ident);
    let mut h = Harness::with_users(&with_auth("hba", ""), list);
    let login = |h: &mut Harness, peer: Option<&str>, user: &str| {
        let id = h.accept_unix();
        h.engine.handle_peer_user(id, peer.map(str::to_string));
        h.client_sends(id, &startup(&[("user", user), ("database", "db")]));
        h.client_output(id)
    };
    for user in ["postgres", "someuser"] {
        let messages = login(&mut h, Some("ops"), user);
        assert!(welcomed(&messages), "{user}: {messages:?}");
    }
    let refused = vec![(
        "28000".to_string(),
        "unix socket login rejected".to_string(),
    )];
    // Not in the map, another system user, or one nobody could read.
    assert_eq!(errors(&login(&mut h, Some("ops"), "bouncer")), refused);
    assert_eq!(errors(&login(&mut h, Some("eve"), "postgres")), refused);
    assert_eq!(errors(&login(&mut h, None, "postgres")), refused);
}

#[test]
fn auth_dbname_must_name_a_usable_entry_at_login() {
    // PgBouncer refuses these at login, not at load: each client gets its words.
    let text = with_auth("md5", "auth_user = \"pgtier_auth\"")
        + "[databases.reserved]\nhost = \"127.0.0.1\"\nport = 5432\nauth_dbname = \"pgbouncer\"\n\
           [databases.missing]\nhost = \"127.0.0.1\"\nport = 5432\nauth_dbname = \"nowhere\"\n";
    let list = users("\"pgtier_auth\" \"authpw\"\n\"admin\" \"\"\n");
    let mut h = Harness::with_users(&text, list);
    let config_error = vec![("08P01".to_string(), "bouncer config error".to_string())];
    for database in ["reserved", "missing"] {
        let (_, messages) = start_in(&mut h, database, "bob");
        assert_eq!(errors(&messages), config_error, "{database}");
    }
    // The admin console's users are looked up through the global auth_user, in the global
    // auth_dbname: without one, the console itself would be the auth database.
    let (_, messages) = start_in(&mut h, "pgbouncer", "bob");
    assert_eq!(errors(&messages), config_error, "the console");
    assert!(h.connects.is_empty(), "no lookup ran");
    h.engine.check_invariants().expect("invariants");
}
