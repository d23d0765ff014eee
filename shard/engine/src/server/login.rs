//! Logging a new server connection in: the StartupMessage, the password exchange the server
//! asks for (answered with the pool's configured credential), then every ParameterStatus and
//! the BackendKeyData until the first ReadyForQuery; then the entry's `connect_query`, if it
//! has one, until the next. A server's own ErrorResponse (a wrong password, a missing
//! database, an error in `connect_query`) is kept whole: every client waiting on the pool
//! gets it.

use bytes::{Bytes, BytesMut};
use pgtier_wire::auth::{AuthError, ChannelBinding, ChannelBindingPolicy, ClientAuth, KEY_LEN};
use pgtier_wire::messages::Message;
use pgtier_wire::messages::backend::{Authentication, BackendKeyData};
use pgtier_wire::{FrameLimits, framing};

use crate::cancel::CancelKey;
use crate::credentials;
use crate::messages::{self, sqlstate};
use crate::params::TrackedParams;
use crate::random::Random;

/// Largest message accepted from a server during login.
const MAX_LOGIN_MESSAGE_BYTES: u32 = 1 << 20;

/// What a login proves itself with.
#[derive(Debug, Clone, Copy)]
pub struct Credentials<'a> {
    pub user: &'a str,
    /// The configured password (plain, md5 hash or SCRAM secret), if any.
    pub password: Option<&'a str>,
    /// The ClientKey a client proved for this user (a SCRAM-secret entry needs it).
    pub client_key: Option<[u8; KEY_LEN]>,
    /// Over TLS: the server certificate's binding, for SCRAM-SHA-256-PLUS when the server
    /// offers it (libpq's `channel_binding=prefer`).
    pub channel_binding: Option<ChannelBinding>,
    /// SCRAM keys derived by earlier logins of this process (PBKDF2 once per password).
    pub key_cache: Option<&'a std::sync::Arc<pgtier_wire::auth::ScramKeyCache>>,
}

/// What a finished login learned about its backend.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Backend {
    /// Every ParameterStatus, in order, later values replacing earlier ones.
    pub params: Vec<(String, String)>,
    /// Their tracked subset.
    pub tracked: TrackedParams,
    /// The backend's own cancel key.
    pub key: Option<CancelKey>,
}

/// Where a login stands.
#[derive(Debug)]
pub enum LoginStep {
    /// Waiting for the server (`reply`, if any, is to be sent first).
    Continue { reply: Option<Bytes> },
    /// ReadyForQuery arrived: the server is ready.
    Done,
    /// The login failed with this error for the pool's clients; `from_server` when it is the
    /// server's own ErrorResponse (a wrong password, a missing database).
    Failed { error: Bytes, from_server: bool },
}

/// One server's login in progress.
#[derive(Debug, Default)]
pub struct ServerLogin {
    /// The password exchange, from the server's first request that needs one.
    auth: Option<Box<ClientAuth>>,
    backend: Backend,
    /// The entry's `connect_query` (a Query message), sent at the login's ReadyForQuery:
    /// the login is done at the ReadyForQuery that answers it.
    connect_query: Option<Bytes>,
}

impl ServerLogin {
    /// A login that runs `connect_query` (SQL) once the server is ready, when there is one.
    pub(crate) fn with_connect_query(connect_query: Option<&str>) -> ServerLogin {
        ServerLogin {
            connect_query: connect_query.map(|sql| {
                let mut out = BytesMut::with_capacity(sql.len() + 6);
                messages::query(&mut out, sql);
                out.freeze()
            }),
            ..ServerLogin::default()
        }
    }

    /// The StartupMessage for a pool's server.
    pub fn startup_message(user: &str, dbname: &str, params: &[(&str, &str)]) -> Bytes {
        let mut all: Vec<(&str, &str)> = Vec::with_capacity(params.len() + 2);
        all.push(("user", user));
        all.push(("database", dbname));
        all.extend_from_slice(params);
        let mut out = BytesMut::with_capacity(128);
        messages::startup_message(&mut out, &all);
        out.freeze()
    }

    /// Reads every complete message in `input`.
    pub fn step(
        &mut self,
        input: &mut BytesMut,
        credentials: Credentials<'_>,
        random: &mut dyn Random,
    ) -> LoginStep {
        let limits = FrameLimits {
            max_message_len: MAX_LOGIN_MESSAGE_BYTES,
            ..FrameLimits::default()
        };
        let mut replies = BytesMut::new();
        loop {
            let frame = match framing::split_message(input, &limits) {
                Ok(Some(frame)) => frame.bytes,
                Ok(None) => break,
                Err(_) => return failed("invalid message from server during login"),
            };
            let body = &frame[5..];
            match frame[0] {
                b'R' => {
                    if let Err(reason) =
                        self.on_auth_request(body, credentials, random, &mut replies)
                    {
                        return LoginStep::Failed {
                            error: messages::fatal(sqlstate::INVALID_PASSWORD, &reason),
                            from_server: false,
                        };
                    }
                }
                b'S' => {
                    if let Some((name, value)) = messages::parse_parameter_status(body) {
                        self.backend.tracked.set(name, value);
                        match self.backend.params.iter_mut().find(|(n, _)| n == name) {
                            Some(entry) => entry.1 = value.to_string(),
                            None => self
                                .backend
                                .params
                                .push((name.to_string(), value.to_string())),
                        }
                    }
                }
                b'K' => {
                    // Protocol 3.0 is asked for, whose cancel keys are four bytes.
                    if let Ok(key) = BackendKeyData::decode_body(body)
                        && let Ok(secret) = <[u8; 4]>::try_from(key.secret_key)
                    {
                        self.backend.key = Some(CancelKey {
                            pid: key.process_id,
                            secret: u32::from_be_bytes(secret),
                        });
                    }
                }
                b'E' => {
                    return LoginStep::Failed {
                        error: frame,
                        from_server: true,
                    };
                }
                b'Z' => match self.connect_query.take() {
                    Some(query) => replies.extend_from_slice(&query),
                    None => return LoginStep::Done,
                },
                _ => {}
            }
        }
        LoginStep::Continue {
            reply: (!replies.is_empty()).then(|| replies.freeze()),
        }
    }

    /// What the login learned (call after `Done`).
    pub(crate) fn into_backend(self) -> Backend {
        self.backend
    }

    /// Answers one Authentication request with the configured credential.
    fn on_auth_request(
        &mut self,
        body: &[u8],
        credentials: Credentials<'_>,
        random: &mut dyn Random,
        out: &mut BytesMut,
    ) -> Result<(), String> {
        let request = Authentication::decode_body(body).map_err(|error| error.to_string())?;
        let login = match &mut self.auth {
            Some(login) => login,
            // A trust login needs no password.
            None if matches!(request, Authentication::Ok) => return Ok(()),
            None => {
                let user = credentials.user;
                let password = credentials.password.ok_or_else(|| {
                    format!("no password configured for server login of user \"{user}\"")
                })?;
                if !can_answer(&request, password, credentials.client_key.is_some()) {
                    tracing::error!(
                        user,
                        "cannot answer the server's authentication request with the stored password's form"
                    );
                    return Err(WRONG_PASSWORD_TYPE.to_string());
                }
                let login =
                    credentials::server_login(user, password, credentials.client_key, random)
                        .map_err(|error| error.to_string())?
                        .with_channel_binding(
                            credentials.channel_binding,
                            ChannelBindingPolicy::Prefer,
                        )
                        .with_key_cache(credentials.key_cache.cloned());
                self.auth.insert(Box::new(login))
            }
        };
        login.handle(request, out).map_err(|error| match error {
            AuthError::UnsupportedMethod => WRONG_PASSWORD_TYPE.to_string(),
            error => error.to_string(),
        })?;
        Ok(())
    }
}

/// PgBouncer's words when the stored password cannot answer the server's method (a SCRAM
/// secret without the ClientKey a SCRAM client proved, an md5 hash asked for SCRAM or a
/// SCRAM secret asked for MD5): the configuration, not a password, is wrong.
const WRONG_PASSWORD_TYPE: &str = "server login failed: wrong password type";

/// Whether `password` in its stored form can answer `request` (`client_key`: a SCRAM
/// client proved the ClientKey of a SCRAM secret).
fn can_answer(request: &Authentication<'_>, password: &str, client_key: bool) -> bool {
    let scram_secret = credentials::is_scram_secret(password);
    match request {
        Authentication::Md5Password { .. } => !scram_secret,
        Authentication::Sasl { .. } => {
            !credentials::is_md5_hash(password) && (!scram_secret || client_key)
        }
        _ => true,
    }
}

fn failed(message: &str) -> LoginStep {
    LoginStep::Failed {
        error: messages::fatal(sqlstate::PROTOCOL_VIOLATION, message),
        from_server: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::random::SeededRandom;

    fn frame(code: u8, body: &[u8]) -> Vec<u8> {
        let mut out = vec![code];
        out.extend_from_slice(&(body.len() as u32 + 4).to_be_bytes());
        out.extend_from_slice(body);
        out
    }

    const TRUST: Credentials<'static> = Credentials {
        user: "alice",
        password: None,
        client_key: None,
        channel_binding: None,
        key_cache: None,
    };

    #[test]
    fn a_trust_login_learns_parameters_and_the_key() {
        let mut input = BytesMut::new();
        input.extend_from_slice(&frame(b'R', &0u32.to_be_bytes()));
        input.extend_from_slice(&frame(b'S', b"TimeZone\0UTC\0"));
        input.extend_from_slice(&frame(b'S', b"server_version\x0015.4\0"));
        input.extend_from_slice(&frame(b'K', &[0, 0, 0, 42, 0, 0, 0, 7]));
        let mut random = SeededRandom::new(1);
        let mut login = ServerLogin::default();
        let mut partial = input.split_to(input.len() - 3);
        assert!(matches!(
            login.step(&mut partial, TRUST, &mut random),
            LoginStep::Continue { reply: None }
        ));
        partial.unsplit(input);
        partial.extend_from_slice(&frame(b'Z', b"I"));
        assert!(matches!(
            login.step(&mut partial, TRUST, &mut random),
            LoginStep::Done
        ));
        let backend = login.into_backend();
        assert_eq!(backend.key, Some(CancelKey { pid: 42, secret: 7 }));
        assert_eq!(backend.params.len(), 2);
        assert_eq!(backend.tracked.get(2), Some("UTC"));
    }

    #[test]
    fn the_servers_error_is_kept_whole() {
        let error = frame(b'E', b"SFATAL\0C3D000\0Mdatabase \"x\" does not exist\0\0");
        let mut input = BytesMut::from(&error[..]);
        let step = ServerLogin::default().step(&mut input, TRUST, &mut SeededRandom::new(2));
        let LoginStep::Failed {
            error: got,
            from_server,
        } = step
        else {
            panic!("failed");
        };
        assert!(from_server);
        assert_eq!(&got[..], &error[..]);
    }

    #[test]
    fn a_password_request_without_a_password_fails_with_28p01() {
        let mut input = BytesMut::from(&frame(b'R', &3u32.to_be_bytes())[..]);
        let step = ServerLogin::default().step(&mut input, TRUST, &mut SeededRandom::new(3));
        let LoginStep::Failed { error, from_server } = step else {
            panic!("failed");
        };
        assert!(!from_server);
        assert!(error.windows(6).any(|w| w == b"C28P01"));
    }

    #[test]
    fn a_cleartext_request_is_answered_with_the_password() {
        let mut input = BytesMut::from(&frame(b'R', &3u32.to_be_bytes())[..]);
        let credentials = Credentials {
            password: Some("secret"),
            ..TRUST
        };
        let step = ServerLogin::default().step(&mut input, credentials, &mut SeededRandom::new(4));
        let LoginStep::Continue { reply: Some(reply) } = step else {
            panic!("answered");
        };
        assert_eq!(&reply[..], &frame(b'p', b"secret\0")[..]);
    }

    #[test]
    fn a_stored_form_that_cannot_answer_the_method_is_the_wrong_password_type() {
        let scram = "SCRAM-SHA-256$4096:c2FsdA==$c3RvcmVk:c2VydmVy";
        let md5 = "md50123456789abcdef0123456789abcdef";
        let mut md5_request = 5u32.to_be_bytes().to_vec();
        md5_request.extend_from_slice(&[1, 2, 3, 4]);
        let mut sasl_request = 10u32.to_be_bytes().to_vec();
        sasl_request.extend_from_slice(b"SCRAM-SHA-256\0\0");
        // A SCRAM secret without the ClientKey a SCRAM client proved, an md5 hash asked
        // for SCRAM, a SCRAM secret asked for MD5: nothing is sent, PgBouncer's words.
        for (password, request) in [
            (scram, &sasl_request),
            (md5, &sasl_request),
            (scram, &md5_request),
        ] {
            let mut input = BytesMut::from(&frame(b'R', request)[..]);
            let credentials = Credentials {
                password: Some(password),
                ..TRUST
            };
            let step =
                ServerLogin::default().step(&mut input, credentials, &mut SeededRandom::new(6));
            let LoginStep::Failed { error, from_server } = step else {
                panic!("{password}: refused");
            };
            assert!(!from_server);
            let text = crate::messages::error_text(&error);
            assert_eq!(
                text, "server login failed: wrong password type",
                "{password}"
            );
        }
        // A SCRAM secret with a proved ClientKey answers SCRAM.
        let mut input = BytesMut::from(&frame(b'R', &sasl_request)[..]);
        let credentials = Credentials {
            password: Some(scram),
            client_key: Some([1; KEY_LEN]),
            ..TRUST
        };
        let step = ServerLogin::default().step(&mut input, credentials, &mut SeededRandom::new(7));
        assert!(matches!(step, LoginStep::Continue { reply: Some(_) }));
    }

    #[test]
    fn garbage_from_a_server_fails_the_login() {
        let mut input = BytesMut::from(&b"R\0\0\0\x01"[..]);
        let step = ServerLogin::default().step(&mut input, TRUST, &mut SeededRandom::new(5));
        assert!(matches!(
            step,
            LoginStep::Failed {
                from_server: false,
                ..
            }
        ));
    }

    #[test]
    fn the_connect_query_runs_before_the_login_is_done() {
        let mut login = ServerLogin::with_connect_query(Some("set timezone = 'Asia/Tokyo'"));
        let mut random = SeededRandom::new(1);
        let mut input = BytesMut::new();
        input.extend_from_slice(&frame(b'R', &0u32.to_be_bytes()));
        input.extend_from_slice(&frame(b'S', b"TimeZone\0UTC\0"));
        input.extend_from_slice(&frame(b'Z', b"I"));
        let LoginStep::Continue { reply: Some(query) } = login.step(&mut input, TRUST, &mut random)
        else {
            panic!("the connect query is sent");
        };
        assert_eq!(
            &query[..],
            &frame(b'Q', b"set timezone = 'Asia/Tokyo'\0")[..]
        );
        input.extend_from_slice(&frame(b'S', b"TimeZone\0Asia/Tokyo\0"));
        input.extend_from_slice(&frame(b'C', b"SET\0"));
        input.extend_from_slice(&frame(b'Z', b"I"));
        assert!(matches!(
            login.step(&mut input, TRUST, &mut random),
            LoginStep::Done
        ));
        assert_eq!(login.into_backend().tracked.get(2), Some("Asia/Tokyo"));
    }

    #[test]
    fn an_error_in_the_connect_query_fails_the_login() {
        let mut login = ServerLogin::with_connect_query(Some("set nonsense = 1"));
        let mut random = SeededRandom::new(1);
        let mut input = BytesMut::new();
        input.extend_from_slice(&frame(b'R', &0u32.to_be_bytes()));
        input.extend_from_slice(&frame(b'Z', b"I"));
        assert!(matches!(
            login.step(&mut input, TRUST, &mut random),
            LoginStep::Continue { reply: Some(_) }
        ));
        input.extend_from_slice(&frame(b'E', b"SERROR\0C42704\0Mno such parameter\0\0"));
        input.extend_from_slice(&frame(b'Z', b"I"));
        assert!(matches!(
            login.step(&mut input, TRUST, &mut random),
            LoginStep::Failed {
                from_server: true,
                ..
            }
        ));
    }
}
