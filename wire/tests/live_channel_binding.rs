//! Live tests of SCRAM-SHA-256-PLUS against the reference implementations, over real TLS:
//! `ClientAuth` logging in to PostgreSQL 15 with `ssl = on`, and psql (libpq) logging in to a
//! `ScramServer` behind a rustls server. Both TLS servers present
//! `tests/fixtures/certs/live_server.crt` (ecdsa-with-SHA384), so a bound login proves that
//! our end-point hash is the one OpenSSL gives PostgreSQL and libpq, and the failures check
//! that we reproduce PostgreSQL's SQLSTATEs and messages.
//!
//! The TLS layer lives only here: pgtier-wire itself is pure and only sees the certificate.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::process::{Command, Output};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use bytes::BytesMut;
use pgtier_core::localpg::{HbaAuth, LocalPg, PgOptions};
use pgtier_wire::FrameLimits;
use pgtier_wire::auth::{
    AuthError, AuthProgress, ChannelBinding, ChannelBindingPolicy, ClientAuth, SCRAM_SHA_256,
    ScramSecret, ScramServer, ScramVerified, tls_server_end_point,
};
use pgtier_wire::error_fields::{ErrorNotice, Severity};
use pgtier_wire::framing::{split_message, split_startup};
use pgtier_wire::messages::backend::*;
use pgtier_wire::messages::frontend::*;
use pgtier_wire::messages::{FrontendMessage, Message};
use pgtier_wire::negotiate;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName, UnixTime};
use rustls::{ClientConnection, DigitallySignedStruct, ServerConnection, SignatureScheme};

const CERT_PEM: &str = include_str!("fixtures/certs/live_server.crt");
const KEY_PEM: &str = include_str!("fixtures/certs/live_server.key");
/// Another certificate: what a client behind a TLS-terminating man in the middle would see.
const OTHER_CERT: &[u8] = include_bytes!("fixtures/certs/rsa_sha384.der");

/// The DER inside a one-object PEM file.
fn pem_der(pem: &str) -> Vec<u8> {
    let body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
    STANDARD.decode(body).unwrap()
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A byte stream that may or may not be TLS.
trait Stream: Read + Write + Send {}
impl<T: Read + Write + Send> Stream for T {}

/// Frames over a stream, as in `common::Conn` but generic over TLS.
struct Wire {
    stream: Box<dyn Stream>,
    buf: BytesMut,
}

impl Wire {
    fn new(stream: Box<dyn Stream>) -> Self {
        Self {
            stream,
            buf: BytesMut::new(),
        }
    }

    fn send(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.stream.write_all(bytes)?;
        self.stream.flush()
    }

    fn read_more(&mut self) -> std::io::Result<()> {
        let mut chunk = [0u8; 8192];
        let n = loop {
            match self.stream.read(&mut chunk) {
                // EINTR after a stop and continue: not an error of the peer.
                Err(error) if error.kind() == std::io::ErrorKind::Interrupted => continue,
                other => break other?,
            }
        };
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        self.buf.extend_from_slice(&chunk[..n]);
        Ok(())
    }

    /// The next frame, code byte and length word included.
    fn read_frame(&mut self) -> std::io::Result<BytesMut> {
        loop {
            if let Some(frame) = split_message(&mut self.buf, &FrameLimits::default()).unwrap() {
                return Ok(BytesMut::from(&frame.bytes[..]));
            }
            self.read_more()?;
        }
    }
}

fn tcp(port: u16) -> TcpStream {
    let stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    stream
}

/// Accepts whatever certificate the server presents: the test wants to see it, not trust it.
#[derive(Debug)]
struct AnyCertificate(Arc<CryptoProvider>);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// SSLRequest, 'S', the TLS handshake; returns the stream and the server's leaf certificate.
fn connect_tls(port: u16) -> Option<(Wire, Vec<u8>)> {
    let mut stream = tcp(port);
    let mut request = BytesMut::new();
    SslRequest.encode(&mut request);
    stream.write_all(&request).unwrap();
    let mut answer = [0u8; 1];
    stream.read_exact(&mut answer).unwrap();
    if answer[0] != b'S' {
        return None;
    }
    let config = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider())))
        .with_no_client_auth();
    let name = ServerName::try_from("localhost").unwrap();
    let mut conn = ClientConnection::new(Arc::new(config), name).unwrap();
    while conn.is_handshaking() {
        conn.complete_io(&mut stream).unwrap();
    }
    let leaf = conn.peer_certificates().unwrap()[0].to_vec();
    let tls = rustls::StreamOwned::new(conn, stream);
    Some((Wire::new(Box::new(tls)), leaf))
}

/// Starts PostgreSQL with SCRAM logins, then turns TLS on with the live certificate.
fn start_tls_postgres() -> LocalPg {
    let pg = LocalPg::start_primary(&PgOptions {
        auth: HbaAuth::Scram,
        password_encryption: "scram-sha-256",
        ..PgOptions::default()
    })
    .expect("start PostgreSQL");
    pg.create_user("alice", "s3cret pw").unwrap();
    // The default ssl_cert_file and ssl_key_file, in the data directory. PostgreSQL wants the
    // key owned by the server's user (the data directory's owner) and private.
    let dir = pg.data_dir();
    let owner = std::fs::metadata(dir).unwrap();
    for (name, content, mode) in [
        ("server.crt", CERT_PEM, 0o644),
        ("server.key", KEY_PEM, 0o600),
    ] {
        let path = dir.join(name);
        std::fs::write(&path, content).unwrap();
        std::os::unix::fs::chown(&path, Some(owner.uid()), Some(owner.gid())).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    pg.psql("postgres", "ALTER SYSTEM SET ssl = on").unwrap();
    pg.psql("postgres", "SELECT pg_reload_conf()").unwrap();
    // The reload is asynchronous: wait until the postmaster answers SSLRequest with 'S'.
    for _ in 0..200 {
        if connect_tls(pg.port()).is_some() {
            return pg;
        }
        thread::sleep(Duration::from_millis(25));
    }
    panic!("PostgreSQL did not turn TLS on; see {:?}", pg.log_path());
}

/// Logs in as alice; `strip_plus` removes SCRAM-SHA-256-PLUS from the server's offer on the
/// way, as an attacker would. Returns the server's "SQLSTATE message" or our error text.
fn login(wire: &mut Wire, auth: &mut ClientAuth, strip_plus: bool) -> Result<(), String> {
    let mut out = BytesMut::new();
    StartupMessage::encode_parts(
        &mut out,
        ProtocolVersion::V3_0,
        &[("user", "alice"), ("database", "postgres")],
    );
    wire.send(&out).unwrap();
    loop {
        let mut frame = wire.read_frame().unwrap();
        match frame[0] {
            b'R' => {
                let sasl = matches!(
                    Authentication::decode_frame(&frame),
                    Ok(Authentication::Sasl { .. })
                );
                if strip_plus && sasl {
                    frame.clear();
                    Authentication::encode_sasl(&mut frame, &[SCRAM_SHA_256]);
                }
                let mut reply = BytesMut::new();
                let progress = auth
                    .handle_frame(&frame, &mut reply)
                    .map_err(|e: AuthError| format!("client: {e}"))?;
                wire.send(&reply).unwrap();
                if progress == AuthProgress::Authenticated {
                    break;
                }
            }
            b'E' => {
                let error = ErrorResponse::decode_frame(&frame).unwrap();
                let code = error.fields.code().unwrap();
                let message = String::from_utf8_lossy(error.fields.message().unwrap());
                return Err(format!("{} {message}", code.as_str()));
            }
            b'v' => {}
            other => panic!("unexpected {:?} during authentication", other as char),
        }
    }
    while wire.read_frame().unwrap()[0] != b'Z' {}
    Ok(())
}

fn client(binding: Option<ChannelBinding>, policy: ChannelBindingPolicy) -> ClientAuth {
    ClientAuth::new(b"alice", b"s3cret pw", [5; 18]).with_channel_binding(binding, policy)
}

#[test]
fn client_auth_against_postgres_over_tls() {
    use ChannelBindingPolicy::{Disable, Prefer, Require};
    let pg = start_tls_postgres();
    let live_hash = tls_server_end_point(&pem_der(CERT_PEM)).unwrap();
    assert_eq!(live_hash.len(), 48, "ecdsa-with-SHA384 binds with SHA-384");

    // Bound: PostgreSQL computed the same hash of its certificate as we did.
    let (mut wire, leaf) = connect_tls(pg.port()).unwrap();
    assert_eq!(tls_server_end_point(&leaf).unwrap(), live_hash);
    let binding = ChannelBinding::from_certificate(&leaf).unwrap();
    let mut auth = client(Some(binding), Require);
    login(&mut wire, &mut auth, false).unwrap();
    assert!(auth.is_authenticated() && auth.is_channel_bound());

    // The hash of another certificate: PostgreSQL's own check fails, with our text.
    let (mut wire, _) = connect_tls(pg.port()).unwrap();
    let other = ChannelBinding::from_certificate(OTHER_CERT).unwrap();
    assert_eq!(
        login(&mut wire, &mut client(Some(other), Prefer), false),
        Err(format!("28000 {}", AuthError::ChannelBindingMismatch))
    );

    // -PLUS removed from the offer: we say 'y' and PostgreSQL sees the downgrade.
    let (mut wire, _) = connect_tls(pg.port()).unwrap();
    assert_eq!(
        login(&mut wire, &mut client(Some(binding), Prefer), true),
        Err(format!("28000 {}", AuthError::ChannelBindingNegotiation))
    );
    // Under require the same downgrade stops us before we answer.
    let (mut wire, _) = connect_tls(pg.port()).unwrap();
    let err = login(&mut wire, &mut client(Some(binding), Require), true).unwrap_err();
    assert!(
        err.starts_with("client: channel binding is required"),
        "{err}"
    );

    // Not binding at all over TLS is fine ('n').
    let (mut wire, _) = connect_tls(pg.port()).unwrap();
    let mut auth = client(Some(binding), Disable);
    login(&mut wire, &mut auth, false).unwrap();
    assert!(auth.is_authenticated() && !auth.is_channel_bound());

    // Over plain TCP PostgreSQL offers SCRAM-SHA-256 only, and accepts 'y' there.
    let mut wire = Wire::new(Box::new(tcp(pg.port())));
    let mut auth = client(Some(binding), Prefer);
    login(&mut wire, &mut auth, false).unwrap();
    assert!(auth.is_authenticated() && !auth.is_channel_bound());
    let mut wire = Wire::new(Box::new(tcp(pg.port())));
    let err = login(&mut wire, &mut client(None, Require), false).unwrap_err();
    assert!(err.starts_with("client: channel binding required"), "{err}");
}

/// What the harness does for psql.
#[derive(Clone, Copy)]
struct Setup {
    /// Answer SSLRequest with 'S' and run TLS with the live certificate.
    tls: bool,
    /// Offer SCRAM-SHA-256-PLUS (with the live certificate's hash as binding data) even
    /// without TLS: a misconfiguration libpq must refuse.
    plus: bool,
}

/// Serves one psql connection; returns how authentication went (or why the client left).
fn serve_one(listener: TcpListener, setup: Setup) -> thread::JoinHandle<Result<bool, String>> {
    thread::spawn(move || {
        let (stream, _) = listener.accept().unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        let mut wire = Wire::new(Box::new(stream.try_clone().unwrap()));
        let (mut wire, user) = startup(&mut wire, stream, setup)?;
        let binding = setup
            .plus
            .then(|| ChannelBinding::from_certificate(&pem_der(CERT_PEM)).unwrap());
        match authenticate(&mut wire, binding) {
            Ok(verified) => {
                welcome(&mut wire);
                serve_queries(&mut wire);
                Ok(verified.channel_bound)
            }
            Err(Ok(error)) => {
                let mut out = BytesMut::new();
                let message = format!("{error} (user {user})");
                ErrorNotice::new(Severity::Fatal, error.sqlstate(), &message)
                    .encode_error(&mut out);
                let _ = wire.send(&out);
                Err(error.to_string())
            }
            Err(Err(io)) => Err(format!("client left: {io}")),
        }
    })
}

/// Reads startup packets (switching to TLS on SSLRequest when `setup.tls`) up to the
/// StartupMessage; returns the stream to go on with and the user name.
fn startup(plain: &mut Wire, socket: TcpStream, setup: Setup) -> Result<(Wire, String), String> {
    let mut current: Option<Wire> = None;
    loop {
        let switched = current.is_some();
        let wire = current.as_mut().unwrap_or(&mut *plain);
        let Some(packet) = split_startup(&mut wire.buf, &FrameLimits::default()).unwrap() else {
            wire.read_more().map_err(|e| format!("client left: {e}"))?;
            continue;
        };
        match StartupPacket::decode(&packet).unwrap() {
            StartupPacket::SslRequest if setup.tls && !switched => {
                wire.send(b"S").unwrap();
                let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(pem_der(KEY_PEM)));
                let cert = CertificateDer::from(pem_der(CERT_PEM));
                let config = rustls::ServerConfig::builder_with_provider(provider())
                    .with_safe_default_protocol_versions()
                    .unwrap()
                    .with_no_client_auth()
                    .with_single_cert(vec![cert], key)
                    .unwrap();
                let conn = ServerConnection::new(Arc::new(config)).unwrap();
                let socket = socket.try_clone().unwrap();
                current = Some(Wire::new(Box::new(rustls::StreamOwned::new(conn, socket))));
            }
            StartupPacket::SslRequest | StartupPacket::GssEncRequest => {
                wire.send(b"N").unwrap();
            }
            StartupPacket::Startup(startup) => {
                let mut out = BytesMut::new();
                negotiate::encode_negotiation(&mut out, &startup);
                let user = startup.user().unwrap().to_owned();
                wire.send(&out).unwrap();
                let wire = match current {
                    Some(tls) => tls,
                    None => Wire::new(Box::new(socket)),
                };
                return Ok((wire, user));
            }
            StartupPacket::Cancel(_) => panic!("unexpected cancel"),
        }
    }
}

/// The SASL exchange; `Err(Ok(_))` is our refusal, `Err(Err(_))` the client leaving.
fn authenticate(
    wire: &mut Wire,
    binding: Option<ChannelBinding>,
) -> Result<ScramVerified, Result<AuthError, std::io::Error>> {
    let secret = ScramSecret::from_password(b"correct horse", b"pgtier-test-salt", 4096).unwrap();
    let mut server = ScramServer::with_os_rng(secret)
        .unwrap()
        .with_channel_binding(binding);
    let mut out = BytesMut::new();
    ScramServer::encode_request_with(&mut out, binding.is_some());
    wire.send(&out).map_err(Err)?;
    let frame = wire.read_frame().map_err(Err)?;
    let mut out = BytesMut::new();
    server
        .handle_initial_response(&frame[5..], &mut out)
        .map_err(Ok)?;
    wire.send(&out).map_err(Err)?;
    let frame = wire.read_frame().map_err(Err)?;
    let mut out = BytesMut::new();
    let verified = server.handle_response(&frame[5..], &mut out).map_err(Ok)?;
    wire.send(&out).map_err(Err)?;
    Ok(verified)
}

fn welcome(wire: &mut Wire) {
    let mut out = BytesMut::new();
    Authentication::Ok.encode(&mut out);
    for (name, value) in [
        ("server_version", "15.0 (pgtier test)"),
        ("client_encoding", "UTF8"),
        ("server_encoding", "UTF8"),
        ("DateStyle", "ISO, MDY"),
        ("integer_datetimes", "on"),
        ("standard_conforming_strings", "on"),
    ] {
        ParameterStatus {
            name: name.as_bytes(),
            value: value.as_bytes(),
        }
        .encode(&mut out);
    }
    BackendKeyData {
        process_id: 4242,
        secret_key: &[1, 2, 3, 4],
    }
    .encode(&mut out);
    ReadyForQuery {
        status: TransactionStatus::Idle,
    }
    .encode(&mut out);
    wire.send(&out).unwrap();
}

/// Answers every Query with an empty result set until Terminate.
fn serve_queries(wire: &mut Wire) {
    loop {
        let Ok(frame) = wire.read_frame() else {
            return;
        };
        match FrontendMessage::decode_body(frame[0], &frame[5..]).unwrap() {
            FrontendMessage::Query(_) => {
                let mut out = BytesMut::new();
                RowDescription::encode_parts(
                    &mut out,
                    &[Field {
                        name: b"x",
                        table_oid: 0,
                        column_id: 0,
                        type_oid: 23,
                        type_size: 4,
                        type_modifier: -1,
                        format: 0,
                    }],
                );
                CommandComplete { tag: b"SELECT 0" }.encode(&mut out);
                ReadyForQuery {
                    status: TransactionStatus::Idle,
                }
                .encode(&mut out);
                wire.send(&out).unwrap();
            }
            FrontendMessage::Terminate(_) => return,
            other => panic!("unexpected {other:?}"),
        }
    }
}

/// Runs psql with `conninfo` options against a harness set up as `setup`.
fn psql(setup: Setup, options: &str) -> (Output, Result<bool, String>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = serve_one(listener, setup);
    let conninfo = format!("host=127.0.0.1 port={port} user=alice dbname=app {options}");
    let output = Command::new("/usr/bin/psql")
        .args(["-X", "-v", "ON_ERROR_STOP=1", "-c", "SELECT 1", &conninfo])
        .env("PGPASSWORD", "correct horse")
        .env("PGCONNECT_TIMEOUT", "10")
        .output()
        .expect("run psql");
    (output, server.join().unwrap())
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn psql_against_scram_server_over_tls() {
    let tls_plus = Setup {
        tls: true,
        plus: true,
    };
    // libpq binds and checks our end-point hash against the one of the certificate it got.
    let (output, bound) = psql(tls_plus, "sslmode=require channel_binding=require");
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(bound, Ok(true));
    // channel_binding=disable over TLS: 'n' and SCRAM-SHA-256.
    let (output, bound) = psql(tls_plus, "sslmode=require channel_binding=disable");
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(bound, Ok(false));
    // TLS without binding data (say an Ed25519 certificate): only SCRAM-SHA-256 is offered,
    // libpq says 'y' and we accept it.
    let tls_only = Setup {
        tls: true,
        plus: false,
    };
    let (output, bound) = psql(tls_only, "sslmode=require channel_binding=prefer");
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(bound, Ok(false));
    let (output, bound) = psql(tls_only, "sslmode=require channel_binding=require");
    assert!(!output.status.success());
    assert!(
        stderr(&output).contains("channel binding is required"),
        "{}",
        stderr(&output)
    );
    assert!(bound.is_err());
}

#[test]
fn psql_refuses_plus_offered_without_tls() {
    // A -PLUS offer over plain TCP: libpq suspects stripped TLS and leaves.
    let setup = Setup {
        tls: false,
        plus: true,
    };
    let (output, outcome) = psql(setup, "sslmode=disable channel_binding=prefer");
    assert!(!output.status.success());
    assert!(
        stderr(&output).contains("SCRAM-SHA-256-PLUS authentication over a non-SSL connection"),
        "{}",
        stderr(&output)
    );
    assert!(outcome.unwrap_err().starts_with("client left"));
    // Plain TCP with channel_binding=require: libpq refuses before answering.
    let plain = Setup {
        tls: false,
        plus: false,
    };
    let (output, outcome) = psql(plain, "sslmode=disable channel_binding=require");
    assert!(!output.status.success());
    assert!(
        stderr(&output).contains("channel binding required, but SSL not in use"),
        "{}",
        stderr(&output)
    );
    assert!(outcome.is_err());
}
