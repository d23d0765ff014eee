//! Table tests of TLS in the engine (`tls_io.rs`), through the kernel-less harness with a
//! real rustls client on the other side: SSLRequest answered `S` and a login and query over
//! TLS, direct TLS with ALPN, SCRAM-SHA-256-PLUS offered over TLS, plain text refused where
//! TLS is required, a server that answers `N`, and `auth_type = cert`.

use bytes::BytesMut;
use pgtier_core::config::{SslMode, TlsCiphers, TlsProtocols};

use crate::ids::ClientId;
use crate::testing::{Harness, client_tls, config, query, split_messages, startup};
use crate::tls::test_pki::TestPki;
use crate::tls::{ConnectorParams, PemFile, TlsConnector, TlsSession, TlsSides};
use crate::userlist::UserList;

const SSL_REQUEST: &[u8] = &[0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f];

/// A client that verifies pgtier's certificate against the test CA (libpq's verify-full).
fn client_connector(pki: &TestPki) -> TlsConnector {
    let ciphers = TlsCiphers::parse("default").expect("ciphers");
    TlsConnector::new(&ConnectorParams {
        mode: SslMode::VerifyFull,
        protocols: TlsProtocols::parse("secure").expect("protocols"),
        ciphers: &ciphers,
        ca: Some(PemFile::new("ca.crt", pki.ca_cert_pem.as_bytes())),
        client_cert: None,
    })
    .expect("connector")
}

fn harness(mode: SslMode, extra: &str) -> (Harness, &'static TestPki) {
    let pki = TestPki::shared();
    let text = config(&format!(
        "client_tls_sslmode = \"{}\"\nclient_tls_key_file = \"/k\"\nclient_tls_cert_file = \"/c\"\n{extra}",
        mode.as_str()
    ));
    (
        Harness::with_tls(&text, UserList::new(), client_tls(mode)),
        pki,
    )
}

/// A rustls client talking to one harness client slot.
struct TlsClient {
    id: ClientId,
    session: TlsSession,
    plaintext: BytesMut,
}

impl TlsClient {
    fn new(h: &mut Harness, id: ClientId, pki: &TestPki) -> TlsClient {
        TlsClient::with_connector(h, id, &client_connector(pki))
    }

    fn with_connector(h: &mut Harness, id: ClientId, connector: &TlsConnector) -> TlsClient {
        let session = TlsSession::connect(connector, "localhost").expect("session");
        TlsClient {
            id,
            session,
            plaintext: BytesMut::new(),
        }
        .pumped(h)
    }

    /// Moves records both ways until neither side has more to say.
    fn pumped(mut self, h: &mut Harness) -> TlsClient {
        self.pump(h);
        self
    }

    fn pump(&mut self, h: &mut Harness) {
        for _ in 0..16 {
            let mut moved = false;
            while let Some(records) = self.session.take_output() {
                h.client_sends(self.id, &records);
                moved = true;
            }
            let back = h.client_bytes(self.id);
            if !back.is_empty() {
                self.session
                    .receive(&back, &mut self.plaintext)
                    .expect("pgtier's records decrypt");
                moved = true;
            }
            if !moved {
                return;
            }
        }
    }

    fn send(&mut self, h: &mut Harness, plaintext: &[u8]) {
        self.session.send(plaintext).expect("queued");
        self.pump(h);
    }

    fn tags(&mut self) -> String {
        split_messages(&mut self.plaintext)
            .iter()
            .map(|m| m.tag as char)
            .collect()
    }
}

fn login(h: &mut Harness, client: &mut TlsClient) {
    client.send(h, &startup(&[("user", "alice"), ("database", "db")]));
    h.complete_connects();
    client.pump(h);
}

#[test]
fn an_ssl_request_gets_s_and_the_session_runs_over_tls() {
    let (mut h, pki) = harness(SslMode::Require, "");
    let id = h.accept();
    h.client_sends(id, SSL_REQUEST);
    assert_eq!(h.client_bytes(id), b"S");
    let mut client = TlsClient::new(&mut h, id, pki);
    assert!(!client.session.is_handshaking(), "the handshake finished");
    login(&mut h, &mut client);
    assert!(client.tags().ends_with('Z'), "welcomed over TLS");
    client.send(&mut h, &query("SELECT 1"));
    h.complete_connects();
    client.pump(&mut h);
    assert_eq!(client.tags(), "TDCZ");
}

#[test]
fn a_plaintext_login_where_tls_is_required_gets_28000() {
    let (mut h, _) = harness(SslMode::Require, "");
    let id = h.accept();
    h.client_sends(id, &startup(&[("user", "alice"), ("database", "db")]));
    let out = h.client_output(id);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].sqlstate().as_deref(), Some("28000"));
    assert!(
        out[0]
            .field(b'M')
            .is_some_and(|m| m.contains("client_tls_sslmode = require")),
        "{:?}",
        out[0].field(b'M')
    );
    assert!(h.is_closed(crate::action::Conn::Client(id)));
}

#[test]
fn unix_socket_clients_are_neither_offered_nor_required_tls() {
    let (mut h, _) = harness(SslMode::Require, "");
    let id = h.accept_unix();
    h.client_sends(id, SSL_REQUEST);
    assert_eq!(h.client_bytes(id), b"N");
    h.client_sends(id, &startup(&[("user", "alice"), ("database", "db")]));
    h.complete_connects();
    assert!(h.client_tags(id).ends_with('Z'));
}

#[test]
fn with_prefer_a_plaintext_client_is_welcome() {
    let (mut h, _) = harness(SslMode::Prefer, "");
    let (_, welcome) = h.login("alice", "db");
    assert!(welcome.iter().any(|m| m.tag == b'Z'));
}

#[test]
fn without_tls_an_ssl_request_gets_n() {
    let mut h = Harness::new(&config(""));
    let id = h.accept();
    h.client_sends(id, SSL_REQUEST);
    assert_eq!(h.client_bytes(id), b"N");
    h.client_sends(id, &startup(&[("user", "alice"), ("database", "db")]));
    h.complete_connects();
    assert!(h.client_tags(id).ends_with('Z'));
}

#[test]
fn bytes_after_an_ssl_request_are_refused() {
    let (mut h, _) = harness(SslMode::Prefer, "");
    let id = h.accept();
    let mut bytes = SSL_REQUEST.to_vec();
    bytes.extend(startup(&[("user", "alice"), ("database", "db")]));
    h.client_sends(id, &bytes);
    let out = h.client_output(id);
    assert_eq!(out[0].sqlstate().as_deref(), Some("08P01"));
    assert!(h.is_closed(crate::action::Conn::Client(id)));
}

#[test]
fn direct_tls_with_alpn_postgresql_logs_in() {
    let (mut h, pki) = harness(SslMode::Require, "");
    let id = h.accept();
    let mut client = TlsClient::new(&mut h, id, pki);
    assert_eq!(
        client.session.alpn_protocol(),
        Some(crate::tls::ALPN_POSTGRESQL)
    );
    login(&mut h, &mut client);
    assert!(client.tags().ends_with('Z'));
}

#[test]
fn direct_tls_without_tls_configured_is_closed() {
    let mut h = Harness::new(&config(""));
    let id = h.accept();
    let pki = TestPki::shared();
    let mut session = TlsSession::connect(&client_connector(pki), "localhost").expect("session");
    let hello = session.take_output().expect("ClientHello");
    h.client_sends(id, &hello);
    assert!(h.client_bytes(id).is_empty(), "no reply");
    assert!(h.is_closed(crate::action::Conn::Client(id)));
}

#[test]
fn scram_over_tls_offers_the_plus_mechanism() {
    let users = UserList::from_file(
        pgtier_core::auth_file::AuthFile::parse("\"alice\" \"secret\"\n", "userlist.txt")
            .expect("valid"),
    );
    let pki = TestPki::shared();
    let text = config(
        "client_tls_sslmode = \"require\"\nclient_tls_key_file = \"/k\"\nclient_tls_cert_file = \"/c\"",
    )
    .replace(
        "auth_type = \"trust\"",
        "auth_type = \"scram-sha-256\"\nauth_file = \"/dev/null\"",
    );
    let mut h = Harness::with_tls(&text, users, client_tls(SslMode::Require));
    let id = h.accept();
    h.client_sends(id, SSL_REQUEST);
    assert_eq!(h.client_bytes(id), b"S");
    let mut client = TlsClient::new(&mut h, id, pki);
    client.send(&mut h, &startup(&[("user", "alice"), ("database", "db")]));
    let messages = split_messages(&mut client.plaintext);
    let sasl = messages.iter().find(|m| m.tag == b'R').expect("a request");
    let body = String::from_utf8_lossy(&sasl.body);
    assert!(
        body.contains("SCRAM-SHA-256-PLUS") && body.contains("SCRAM-SHA-256\0"),
        "{body:?}"
    );
}

#[test]
fn a_server_answering_n_is_used_in_plain_text_with_prefer() {
    let pki = TestPki::shared();
    let ciphers = TlsCiphers::parse("default").expect("ciphers");
    let connector = TlsConnector::new(&ConnectorParams {
        mode: SslMode::Prefer,
        protocols: TlsProtocols::parse("secure").expect("protocols"),
        ciphers: &ciphers,
        ca: None,
        client_cert: None,
    })
    .expect("connector");
    let _ = pki;
    let tls = TlsSides {
        acceptor: None,
        connector: Some(connector.clone()),
    };
    let mut h = Harness::with_tls(&config(""), UserList::new(), tls);
    let (a, _) = h.login("alice", "db");
    h.client_sends(a, &query("SELECT 1"));
    assert_eq!(h.client_tags(a), "TDCZ");
    let server = h.live_servers()[0];
    assert!(
        h.output_to(server).starts_with(SSL_REQUEST),
        "the server was asked for TLS first"
    );
    // With require, the same answer ends that server; the client keeps waiting for the next
    // attempt (after server_login_retry), as PgBouncer's do.
    let tls = TlsSides {
        acceptor: None,
        connector: Some(connector),
    };
    let mut h = Harness::with_tls(
        &config("server_tls_sslmode = \"require\""),
        UserList::new(),
        tls,
    );
    let id = h.accept();
    h.client_sends(id, &startup(&[("user", "alice"), ("database", "db")]));
    h.complete_connects();
    let out = h.client_output(id);
    assert!(out.is_empty(), "{out:?}");
    assert!(h.live_servers().is_empty());
    assert!(!h.is_closed(crate::action::Conn::Client(id)));
}

/// A plain client's message whose second piece starts with the byte a TLS handshake starts
/// with is just data: it reaches the server whole.
#[test]
fn a_plain_chunk_starting_like_a_handshake_is_data() {
    let (mut h, _) = harness(SslMode::Prefer, "");
    let (a, _) = h.login("alice", "db");
    let mut sql = "SELECT '".to_string();
    sql.push('\u{16}');
    sql.push_str("x'");
    let message = query(&sql);
    let cut = message.iter().position(|&b| b == 0x16).expect("the byte");
    h.client_sends(a, &message[..cut]);
    h.client_sends(a, &message[cut..]);
    assert_eq!(h.client_tags(a), "TDCZ");
}

/// `auth_type = cert`: a verified client certificate logs in the user it names, only.
#[test]
fn cert_auth_matches_the_certificate_to_the_user() {
    use crate::tls::test_pki::CLIENT_COMMON_NAME;
    use crate::tls::{AcceptorParams, TlsAcceptor};
    let pki = TestPki::shared();
    let ciphers = TlsCiphers::parse("default").expect("ciphers");
    let acceptor = TlsAcceptor::new(&AcceptorParams {
        mode: SslMode::VerifyCa,
        protocols: TlsProtocols::parse("secure").expect("protocols"),
        ciphers: &ciphers,
        cert_chain: PemFile::new("server.crt", pki.server_cert_pem.as_bytes()),
        key: PemFile::new("server.key", pki.server_key_pem.as_bytes()),
        ca: Some(PemFile::new("ca.crt", pki.ca_cert_pem.as_bytes())),
    })
    .expect("acceptor");
    let connector = TlsConnector::new(&ConnectorParams {
        mode: SslMode::VerifyFull,
        protocols: TlsProtocols::parse("secure").expect("protocols"),
        ciphers: &ciphers,
        ca: Some(PemFile::new("ca.crt", pki.ca_cert_pem.as_bytes())),
        client_cert: Some((
            PemFile::new("client.crt", pki.client_cert_pem.as_bytes()),
            PemFile::new("client.key", pki.client_key_pem.as_bytes()),
        )),
    })
    .expect("connector");
    let text = config(
        "client_tls_sslmode = \"verify-ca\"\nclient_tls_key_file = \"/k\"\n\
         client_tls_cert_file = \"/c\"\nclient_tls_ca_file = \"/ca\"",
    )
    .replace("auth_type = \"trust\"", "auth_type = \"cert\"");
    let tls = TlsSides {
        acceptor: Some(acceptor),
        connector: None,
    };
    let mut h = Harness::with_tls(&text, UserList::new(), tls);
    for (user, accepted) in [(CLIENT_COMMON_NAME, true), ("bob", false)] {
        let id = h.accept();
        h.client_sends(id, SSL_REQUEST);
        assert_eq!(h.client_bytes(id), b"S");
        let mut client = TlsClient::with_connector(&mut h, id, &connector);
        client.send(&mut h, &startup(&[("user", user), ("database", "db")]));
        h.complete_connects();
        client.pump(&mut h);
        let messages = split_messages(&mut client.plaintext);
        if accepted {
            assert_eq!(messages.last().map(|m| m.tag), Some(b'Z'), "{messages:?}");
        } else {
            assert_eq!(messages.len(), 1, "{messages:?}");
            assert_eq!(messages[0].sqlstate().as_deref(), Some("28000"));
            let text = messages[0].field(b'M').unwrap_or_default();
            assert!(text.contains("certificate name mismatch"), "{text}");
        }
    }
}

/// libpq's rule: sslmode does not apply to a Unix-domain socket. A server whose `host` is a
/// directory is reached over its socket file in plain text, even with `require`.
#[test]
fn a_server_on_a_unix_socket_gets_no_ssl_request() {
    let ciphers = TlsCiphers::parse("default").expect("ciphers");
    let connector = TlsConnector::new(&ConnectorParams {
        mode: SslMode::Require,
        protocols: TlsProtocols::parse("secure").expect("protocols"),
        ciphers: &ciphers,
        ca: None,
        client_cert: None,
    })
    .expect("connector");
    let tls = TlsSides {
        acceptor: None,
        connector: Some(connector),
    };
    let text = "[pgtier]\nlisten_port = 6432\nauth_type = \"trust\"\n\
                server_tls_sslmode = \"require\"\n\
                [databases.db]\nhost = \"/run/postgresql\"\nport = 5433\ndbname = \"db\"\n";
    let mut h = Harness::with_tls(text, UserList::new(), tls);
    let (a, _) = h.login("alice", "db");
    h.client_sends(a, &query("SELECT 1"));
    assert_eq!(h.client_tags(a), "TDCZ");
    let (_, addr) = h.connects[0].clone();
    assert_eq!(
        addr.unix_path(),
        Some(std::path::Path::new("/run/postgresql/.s.PGSQL.5433"))
    );
    let server = h.live_servers()[0];
    assert!(
        !h.output_to(server).starts_with(SSL_REQUEST),
        "no SSLRequest on a Unix socket"
    );
}

fn reload(h: &mut Harness, text: &str) {
    let config =
        pgtier_core::config::Config::from_str(&config(text), "pgtier.toml").expect("config");
    h.engine.handle_command(
        h.now,
        crate::command::Command::Reload {
            config: std::sync::Arc::new(config),
            users: std::sync::Arc::new(UserList::new()),
            tls: Default::default(),
            pending: None,
        },
    );
    h.pump();
}

#[test]
fn a_reload_changing_server_tls_settings_recycles_every_server() {
    let mut h = Harness::new(&config("pool_mode = \"transaction\""));
    let (a, _) = h.login("alice", "db");
    let (b, _) = h.login("bob", "db");
    h.client_sends(a, &query("SELECT 1"));
    assert_eq!(h.client_tags(a), "TDCZ");
    h.client_sends(b, &query("BEGIN"));
    let _ = h.client_tags(b);
    let servers = h.live_servers();
    assert_eq!(servers.len(), 2);

    // Nothing about server TLS changed: servers stay.
    reload(
        &mut h,
        "pool_mode = \"transaction\"\ndefault_pool_size = 30",
    );
    assert_eq!(h.live_servers().len(), 2);

    // server_tls_sslmode changed: the idle server goes now, the busy one once released.
    reload(
        &mut h,
        "pool_mode = \"transaction\"\nserver_tls_sslmode = \"disable\"",
    );
    assert_eq!(h.live_servers().len(), 1);
    h.client_sends(b, &query("COMMIT"));
    let _ = h.client_tags(b);
    assert!(h.live_servers().is_empty());
    // And clients get new ones.
    h.client_sends(a, &query("SELECT 1"));
    h.complete_connects();
    assert_eq!(h.client_tags(a), "TDCZ");
}
