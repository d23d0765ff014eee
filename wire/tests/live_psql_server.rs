//! The server side against libpq: a one-connection harness on a std `TcpListener` runs the
//! startup and authentication with pgtier-wire's state machines, answers a Query with an
//! empty result (or an error), and `psql` must exit 0, or fail with 28P01 for a wrong
//! password.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Output};
use std::thread;
use std::time::Duration;

use bytes::BytesMut;
use pgtier_wire::FrameLimits;
use pgtier_wire::auth::{AuthError, Md5Secret, Md5Server, ScramSecret, ScramServer};
use pgtier_wire::error_fields::{ErrorNotice, Severity};
use pgtier_wire::framing::{split_message, split_startup};
use pgtier_wire::messages::backend::*;
use pgtier_wire::messages::frontend::*;
use pgtier_wire::messages::{FrontendMessage, Message};
use pgtier_wire::{negotiate, sqlstate};

/// How the harness verifies the client.
#[derive(Clone, Copy)]
enum Method {
    ScramFromSecret,
    ScramFromPlaintext,
    Md5FromHash,
}

struct Harness {
    stream: TcpStream,
    buf: BytesMut,
}

impl Harness {
    fn read_more(&mut self) {
        let mut chunk = [0u8; 4096];
        let n = loop {
            match self.stream.read(&mut chunk) {
                // EINTR after a stop and continue: not an error of the peer.
                Err(error) if error.kind() == std::io::ErrorKind::Interrupted => continue,
                other => break other.expect("read"),
            }
        };
        assert!(n > 0, "client closed");
        self.buf.extend_from_slice(&chunk[..n]);
    }

    fn startup(&mut self) -> Vec<u8> {
        loop {
            if let Some(packet) = split_startup(&mut self.buf, &FrameLimits::default()).unwrap() {
                match StartupPacket::decode(&packet).unwrap() {
                    StartupPacket::SslRequest | StartupPacket::GssEncRequest => {
                        self.stream.write_all(b"N").unwrap();
                        continue;
                    }
                    StartupPacket::Startup(startup) => {
                        let mut out = BytesMut::new();
                        negotiate::encode_negotiation(&mut out, &startup);
                        self.stream.write_all(&out).unwrap();
                        return startup.user().unwrap().as_bytes().to_vec();
                    }
                    StartupPacket::Cancel(_) => panic!("unexpected cancel"),
                }
            }
            self.read_more();
        }
    }

    fn next_body(&mut self) -> (u8, Vec<u8>) {
        loop {
            if let Some(frame) = split_message(&mut self.buf, &FrameLimits::default()).unwrap() {
                return (frame.code(), frame.body().to_vec());
            }
            self.read_more();
        }
    }

    fn send(&mut self, out: &BytesMut) {
        self.stream.write_all(out).unwrap();
    }

    fn authenticate(&mut self, user: &[u8], method: Method) -> Result<(), AuthError> {
        let password = b"correct horse";
        match method {
            Method::Md5FromHash => {
                let stored = pgtier_wire::auth::md5_password_hash(user, password);
                let server = Md5Server::with_os_rng(Md5Secret::from_stored(user, &stored))?;
                let mut out = BytesMut::new();
                server.encode_request(&mut out);
                self.send(&out);
                let (_, body) = self.next_body();
                server.handle_password(&body)
            }
            Method::ScramFromSecret | Method::ScramFromPlaintext => {
                let secret = ScramSecret::from_password(password, b"pgtier-test-salt", 4096)?;
                let secret = match method {
                    Method::ScramFromSecret => ScramSecret::parse(&secret.to_text())?,
                    _ => secret,
                };
                let mut server = ScramServer::with_os_rng(secret)?;
                let mut out = BytesMut::new();
                ScramServer::encode_request(&mut out);
                self.send(&out);
                let (_, body) = self.next_body();
                let mut out = BytesMut::new();
                server.handle_initial_response(&body, &mut out)?;
                self.send(&out);
                let (_, body) = self.next_body();
                let mut out = BytesMut::new();
                server.handle_response(&body, &mut out)?;
                self.send(&out);
                Ok(())
            }
        }
    }

    fn welcome(&mut self) {
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
        self.send(&out);
    }

    fn serve_queries(&mut self) {
        loop {
            let (code, body) = self.next_body();
            let mut out = BytesMut::new();
            match FrontendMessage::decode_body(code, &body).unwrap() {
                FrontendMessage::Query(query) if query.sql.starts_with(b"SELECT") => {
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
                }
                FrontendMessage::Query(_) => {
                    ErrorNotice::new(
                        Severity::Error,
                        sqlstate::FEATURE_NOT_SUPPORTED,
                        "only SELECT here",
                    )
                    .encode_error(&mut out);
                }
                FrontendMessage::Terminate(_) => return,
                other => panic!("unexpected {other:?}"),
            }
            ReadyForQuery {
                status: TransactionStatus::Idle,
            }
            .encode(&mut out);
            self.send(&out);
        }
    }
}

/// Serves one connection; returns the authentication outcome.
fn serve_one(listener: TcpListener, method: Method) -> thread::JoinHandle<Result<(), AuthError>> {
    thread::spawn(move || {
        let (stream, _) = listener.accept().unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        let mut harness = Harness {
            stream,
            buf: BytesMut::new(),
        };
        let user = harness.startup();
        if let Err(error) = harness.authenticate(&user, method) {
            let mut out = BytesMut::new();
            let message = format!(
                "password authentication failed for user \"{}\"",
                String::from_utf8_lossy(&user)
            );
            ErrorNotice::new(Severity::Fatal, error.sqlstate(), &message).encode_error(&mut out);
            harness.send(&out);
            return Err(error);
        }
        harness.welcome();
        harness.serve_queries();
        Ok(())
    })
}

fn psql(port: u16, password: &str, sql: &str) -> Output {
    Command::new("/usr/bin/psql")
        .args([
            "-X",
            "-v",
            "ON_ERROR_STOP=1",
            "-h",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "-U",
            "alice",
            "-d",
            "app",
            "-c",
            sql,
        ])
        .env("PGPASSWORD", password)
        .env("PGSSLMODE", "prefer")
        .env("PGCONNECT_TIMEOUT", "10")
        .output()
        .expect("run psql")
}

fn run(method: Method, password: &str, sql: &str) -> (Output, Result<(), AuthError>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = serve_one(listener, method);
    let output = psql(port, password, sql);
    (output, server.join().unwrap())
}

#[test]
fn psql_logs_in_with_scram_against_a_stored_secret() {
    let (output, auth) = run(Method::ScramFromSecret, "correct horse", "SELECT 1");
    assert_eq!(auth, Ok(()));
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(String::from_utf8_lossy(&output.stdout).contains("(0 rows)"));
}

#[test]
fn psql_logs_in_with_scram_against_a_plaintext_password() {
    let (output, auth) = run(Method::ScramFromPlaintext, "correct horse", "SELECT 1");
    assert_eq!(auth, Ok(()));
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn psql_logs_in_with_md5() {
    let (output, auth) = run(Method::Md5FromHash, "correct horse", "SELECT 1");
    assert_eq!(auth, Ok(()));
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn psql_sees_an_error_response() {
    let (output, auth) = run(Method::ScramFromSecret, "correct horse", "VACUUM");
    assert_eq!(auth, Ok(()));
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("only SELECT here"));
}

#[test]
fn psql_with_a_wrong_password_gets_28p01() {
    for method in [Method::ScramFromSecret, Method::Md5FromHash] {
        let (output, auth) = run(method, "wrong horse", "SELECT 1");
        assert_eq!(auth, Err(AuthError::InvalidPassword));
        assert_eq!(auth.unwrap_err().sqlstate(), sqlstate::INVALID_PASSWORD);
        assert!(!output.status.success());
        assert!(String::from_utf8_lossy(&output.stderr).contains("password authentication failed"));
    }
}
