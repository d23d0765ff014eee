//! A client's password exchange against the auth file: MD5, SCRAM-SHA-256 or a cleartext
//! password (trust needs none), and the shard's cache of SCRAM verifiers. A wrong password
//! gets 28P01 ("password authentication failed for user …", or PgBouncer's "SASL
//! authentication failed" for SCRAM); an unknown user fails the same way, at the proof, so
//! the exchange does not reveal which users exist.

use std::collections::HashMap;

use bytes::{Bytes, BytesMut};
use pgtier_wire::auth::{ChannelBinding, KEY_LEN, Md5Server, ScramSecret, ScramServer};
use pgtier_wire::{FrameLimits, framing};

use crate::client::auth_method::Method;
use crate::credentials;
use crate::messages::{self, sqlstate};
use crate::random::{self, Random, RandomUnavailable};
use crate::userlist::UserList;

/// Longest password or SASL message accepted: PgBouncer takes passwords up to 65,530 bytes,
/// so a password message (length field, password, NUL) up to 64 KiB.
const MAX_AUTH_MESSAGE_BYTES: u32 = 65_536;

/// A user's SCRAM verifier, cached per shard because deriving one from a plaintext is
/// deliberately slow (a login storm must not redo it per login), and the ClientKey its last
/// verified client proved (what a server login needs when the auth file holds only the
/// SCRAM secret).
#[derive(Debug, Clone)]
struct UserScram {
    secret: ScramSecret,
    client_key: Option<[u8; KEY_LEN]>,
}

/// SCRAM verifiers by user; `""` is the decoy for users without one. Cleared on reload.
#[derive(Debug, Default)]
pub struct SecretCache {
    by_user: HashMap<String, UserScram>,
}

impl SecretCache {
    /// The verifier `user` is checked against: derived once, then cached.
    fn secret(
        &mut self,
        user: &str,
        users: &UserList,
        random: &mut dyn Random,
    ) -> Result<ScramSecret, RandomUnavailable> {
        if let Some(cached) = self.by_user.get(user) {
            return Ok(cached.secret.clone());
        }
        let derived = match users.get(user) {
            Some(stored) => credentials::scram_secret_for(&stored, random)?,
            None => None,
        };
        let (key, secret) = match derived {
            Some(secret) => (user, secret),
            None => match self.by_user.get("") {
                Some(decoy) => return Ok(decoy.secret.clone()),
                None => ("", credentials::decoy_scram_secret(random)?),
            },
        };
        self.by_user.insert(
            key.to_string(),
            UserScram {
                secret: secret.clone(),
                client_key: None,
            },
        );
        Ok(secret)
    }

    /// The ClientKey `user` last proved (for a server login with a SCRAM-secret entry).
    pub fn client_key(&self, user: &str) -> Option<[u8; KEY_LEN]> {
        self.by_user.get(user).and_then(|cached| cached.client_key)
    }

    fn remember_client_key(&mut self, user: &str, key: [u8; KEY_LEN]) {
        if let Some(cached) = self.by_user.get_mut(user) {
            cached.client_key = Some(key);
        }
    }

    /// Forgets every verifier (the auth file was reloaded).
    pub fn clear(&mut self) {
        self.by_user.clear();
    }
}

/// The exchange in progress.
#[derive(Debug)]
pub enum PasswordCheck {
    /// AuthenticationMD5Password was sent with this verifier's salt.
    Md5(Md5Server),
    /// AuthenticationCleartextPassword was sent.
    Plain,
    /// AuthenticationSASL was sent; the SASLInitialResponse is awaited.
    ScramStart,
    /// SASLContinue was sent; the client-final message is awaited.
    ScramFinal(Box<ScramServer>),
}

/// Where an exchange stands after the client's bytes.
#[derive(Debug)]
pub enum AuthStep {
    /// The next message is not complete yet; the exchange goes on.
    NeedMore(PasswordCheck),
    /// Send this and wait for the client's next message.
    Continue(PasswordCheck, Bytes),
    /// The password is right; send `final_message` (SASLFinal) first, if any. `client_key`:
    /// the SCRAM ClientKey the client proved.
    Passed {
        final_message: Option<Bytes>,
        client_key: Option<[u8; KEY_LEN]>,
    },
    /// Close the client after this error.
    Failed(Bytes),
}

/// Everything an exchange reads.
pub struct AuthContext<'a> {
    pub user: &'a str,
    pub users: &'a UserList,
    /// The secret `auth_query` found, for a user the auth file does not list.
    pub looked_up: Option<&'a str>,
    pub secrets: &'a mut SecretCache,
    pub random: &'a mut dyn Random,
    /// Over TLS: the `tls-server-end-point` binding of pgtier's certificate, so that
    /// SCRAM-SHA-256-PLUS is offered and checked.
    pub channel_binding: Option<ChannelBinding>,
}

/// AuthenticationCleartextPassword.
const CLEARTEXT_REQUEST: &[u8] = &[b'R', 0, 0, 0, 8, 0, 0, 0, 3];

/// Starts authenticating a client: `Ok(None)` for trust, else the exchange and its first
/// request to send. The methods without a password have no exchange: the caller checks
/// that the user is known (and, for `Method::Cert`, the certificate) before it passes them.
pub fn start(
    method: Method,
    context: AuthContext<'_>,
) -> Result<Option<(PasswordCheck, Bytes)>, Bytes> {
    let mut out = BytesMut::with_capacity(64);
    let stored = context.stored();
    // PgBouncer's md5 runs SCRAM for a user whose secret is a SCRAM verifier: MD5 could
    // never match it.
    let scram_secret = stored.as_deref().is_some_and(credentials::is_scram_secret);
    let method = match method {
        Method::Md5 if scram_secret => Method::ScramSha256,
        method => method,
    };
    let check = match method {
        Method::Unchecked | Method::Trust | Method::Cert | Method::Peer => return Ok(None),
        Method::Plain => {
            out.extend_from_slice(CLEARTEXT_REQUEST);
            PasswordCheck::Plain
        }
        Method::Md5 => {
            let server =
                credentials::md5_server_for(context.user, stored.as_deref(), context.random)
                    .map_err(no_randomness)?;
            server.encode_request(&mut out);
            PasswordCheck::Md5(server)
        }
        Method::ScramSha256 => {
            ScramServer::encode_request_with(&mut out, context.channel_binding.is_some());
            PasswordCheck::ScramStart
        }
    };
    Ok(Some((check, out.freeze())))
}

impl PasswordCheck {
    /// Feeds the client's bytes (one message is consumed from `input` when complete).
    pub fn step(self, input: &mut BytesMut, context: AuthContext<'_>) -> AuthStep {
        let limits = FrameLimits {
            max_message_len: MAX_AUTH_MESSAGE_BYTES,
            ..FrameLimits::default()
        };
        let frame = match framing::split_message(input, &limits) {
            Ok(Some(frame)) if frame.bytes[0] == b'p' => frame.bytes,
            Ok(None) => return AuthStep::NeedMore(self),
            Ok(Some(_)) | Err(_) => {
                return AuthStep::Failed(messages::fatal(
                    sqlstate::PROTOCOL_VIOLATION,
                    "expected a password message",
                ));
            }
        };
        let body = &frame[5..];
        match self {
            PasswordCheck::Md5(server) => verdict(server.handle_password(body).is_ok(), &context),
            PasswordCheck::Plain => {
                let password = body.strip_suffix(&[0]).unwrap_or(body);
                let stored = context.stored();
                let ok = credentials::cleartext_matches(context.user, password, stored.as_deref());
                verdict(ok, &context)
            }
            PasswordCheck::ScramStart => initial_response(body, context),
            PasswordCheck::ScramFinal(mut server) => {
                let mut out = BytesMut::with_capacity(128);
                match server.handle_response(body, &mut out) {
                    Ok(verified) => {
                        context
                            .secrets
                            .remember_client_key(context.user, verified.client_key);
                        AuthStep::Passed {
                            final_message: Some(out.freeze()),
                            client_key: Some(verified.client_key),
                        }
                    }
                    // A binding that does not match is PostgreSQL's 28000 with its text; a
                    // wrong proof is a wrong password.
                    Err(error)
                        if error.sqlstate() == sqlstate::INVALID_AUTHORIZATION_SPECIFICATION =>
                    {
                        AuthStep::Failed(messages::fatal(error.sqlstate(), &error.to_string()))
                    }
                    // PgBouncer's words for a SCRAM exchange that failed, whether the
                    // password is wrong or nobody has that name.
                    Err(_) => AuthStep::Failed(sasl_failed()),
                }
            }
        }
    }
}

impl AuthContext<'_> {
    /// The user's stored secret: the auth file's entry, else what `auth_query` found.
    fn stored(&self) -> Option<String> {
        self.users
            .get(self.user)
            .or_else(|| self.looked_up.map(str::to_string))
    }

    /// The SCRAM verifier the client is checked against.
    fn scram_secret(&mut self) -> Result<ScramSecret, RandomUnavailable> {
        let looked_up = match self.looked_up {
            Some(secret) if self.users.get(self.user).is_none() => secret,
            _ => return self.secrets.secret(self.user, self.users, self.random),
        };
        match credentials::scram_secret_for(looked_up, self.random)? {
            Some(secret) => Ok(secret),
            None => credentials::decoy_scram_secret(self.random),
        }
    }
}

fn initial_response(body: &[u8], mut context: AuthContext<'_>) -> AuthStep {
    let secret = match context.scram_secret() {
        Ok(secret) => secret,
        Err(error) => return AuthStep::Failed(no_randomness(error)),
    };
    let nonce = match random::bytes(context.random) {
        Ok(nonce) => nonce,
        Err(error) => return AuthStep::Failed(no_randomness(error)),
    };
    let mut server = ScramServer::new(secret, nonce).with_channel_binding(context.channel_binding);
    let mut out = BytesMut::with_capacity(128);
    match server.handle_initial_response(body, &mut out) {
        Ok(()) => AuthStep::Continue(PasswordCheck::ScramFinal(Box::new(server)), out.freeze()),
        // PostgreSQL's own texts for negotiation errors (a `y` flag where PLUS was offered,
        // an unsupported binding type).
        Err(error) if error.sqlstate() != sqlstate::PROTOCOL_VIOLATION => {
            AuthStep::Failed(messages::fatal(error.sqlstate(), &error.to_string()))
        }
        Err(_) => AuthStep::Failed(messages::fatal(
            sqlstate::PROTOCOL_VIOLATION,
            "malformed SCRAM client-first message",
        )),
    }
}

fn verdict(ok: bool, context: &AuthContext<'_>) -> AuthStep {
    if ok {
        return AuthStep::Passed {
            final_message: None,
            client_key: None,
        };
    }
    let message = format!(
        "password authentication failed for user \"{}\"",
        context.user
    );
    AuthStep::Failed(messages::fatal(sqlstate::INVALID_PASSWORD, &message))
}

/// A SCRAM proof that did not verify: PgBouncer's text, with PostgreSQL's code for a wrong
/// password.
fn sasl_failed() -> Bytes {
    messages::fatal(sqlstate::INVALID_PASSWORD, "SASL authentication failed")
}

/// The login cannot go on safely without randomness (a predictable nonce or salt).
pub(crate) fn no_randomness(_: RandomUnavailable) -> Bytes {
    messages::fatal(
        sqlstate::INTERNAL_ERROR,
        "could not generate random bytes for authentication",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::random::{NoRandom, SeededRandom};
    use pgtier_core::auth_file::AuthFile;
    use pgtier_wire::auth::md5_password_hash;

    fn users() -> UserList {
        UserList::from_file(
            AuthFile::parse("\"alice\" \"secret\"\n", "userlist.txt").expect("valid"),
        )
    }

    fn password_message(password: &[u8]) -> BytesMut {
        let mut out = BytesMut::new();
        out.extend_from_slice(b"p");
        out.extend_from_slice(&(password.len() as u32 + 5).to_be_bytes());
        out.extend_from_slice(password);
        out.extend_from_slice(&[0]);
        out
    }

    fn md5_answer(request: &[u8], user: &str, password: &str) -> BytesMut {
        let salt = [request[9], request[10], request[11], request[12]];
        let inner = md5_password_hash(user.as_bytes(), password.as_bytes());
        let answer = pgtier_wire::auth::md5_salted_response(&inner, salt);
        password_message(&answer)
    }

    fn run_md5(user: &str, password: &str) -> AuthStep {
        let users = users();
        let mut secrets = SecretCache::default();
        let mut random = SeededRandom::new(3);
        let context = AuthContext {
            user,
            users: &users,
            looked_up: None,
            secrets: &mut secrets,
            random: &mut random,
            channel_binding: None,
        };
        let (check, request) = start(Method::Md5, context).expect("ok").expect("md5");
        let mut input = md5_answer(&request, user, password);
        let context = AuthContext {
            user,
            users: &users,
            looked_up: None,
            secrets: &mut secrets,
            random: &mut random,
            channel_binding: None,
        };
        check.step(&mut input, context)
    }

    #[test]
    fn md5_accepts_the_right_password_only() {
        assert!(matches!(
            run_md5("alice", "secret"),
            AuthStep::Passed { .. }
        ));
        let AuthStep::Failed(error) = run_md5("alice", "wrong") else {
            panic!("refused");
        };
        assert!(error.windows(6).any(|w| w == b"C28P01"));
        assert!(matches!(run_md5("nobody", "secret"), AuthStep::Failed(_)));
    }

    /// A SCRAM exchange of `user` with `password`, the client side played by pgtier's own
    /// server-login state machine; what the last step said.
    fn run_scram(user: &str, password: &str) -> AuthStep {
        let users = users();
        let mut secrets = SecretCache::default();
        let mut random = SeededRandom::new(6);
        let (check, request) = start(
            Method::ScramSha256,
            AuthContext {
                user,
                users: &users,
                looked_up: None,
                secrets: &mut secrets,
                random: &mut random,
                channel_binding: None,
            },
        )
        .expect("ok")
        .expect("scram");
        let mut client =
            pgtier_wire::auth::ClientAuth::new(user.as_bytes(), password.as_bytes(), [7; 18]);
        let mut input = BytesMut::new();
        client
            .handle_frame(&request, &mut input)
            .expect("client-first");
        let step = check.step(
            &mut input,
            AuthContext {
                user,
                users: &users,
                looked_up: None,
                secrets: &mut secrets,
                random: &mut random,
                channel_binding: None,
            },
        );
        let AuthStep::Continue(check, reply) = step else {
            return step;
        };
        let mut input = BytesMut::new();
        client
            .handle_frame(&reply, &mut input)
            .expect("client-final");
        check.step(
            &mut input,
            AuthContext {
                user,
                users: &users,
                looked_up: None,
                secrets: &mut secrets,
                random: &mut random,
                channel_binding: None,
            },
        )
    }

    #[test]
    fn scram_failures_say_sasl_authentication_failed_for_known_and_unknown_users() {
        assert!(matches!(
            run_scram("alice", "secret"),
            AuthStep::Passed { .. }
        ));
        for (user, password) in [("alice", "wrong"), ("nobody", "secret")] {
            let AuthStep::Failed(error) = run_scram(user, password) else {
                panic!("{user} refused");
            };
            let messages = crate::testing::split_messages(&mut BytesMut::from(&error[..]));
            assert_eq!(messages[0].sqlstate().as_deref(), Some("28P01"));
            assert_eq!(
                messages[0].field(b'M').as_deref(),
                Some("SASL authentication failed"),
                "{user}: the same words whether or not the user exists"
            );
        }
    }

    #[test]
    fn trust_needs_no_exchange() {
        let users = users();
        let mut secrets = SecretCache::default();
        let context = AuthContext {
            user: "anyone",
            users: &users,
            looked_up: None,
            secrets: &mut secrets,
            random: &mut NoRandom,
            channel_binding: None,
        };
        assert!(matches!(start(Method::Trust, context), Ok(None)));
    }

    #[test]
    fn a_message_other_than_a_password_is_a_protocol_violation() {
        let users = users();
        let mut secrets = SecretCache::default();
        let mut random = SeededRandom::new(4);
        let context = AuthContext {
            user: "alice",
            users: &users,
            looked_up: None,
            secrets: &mut secrets,
            random: &mut random,
            channel_binding: None,
        };
        let (check, _) = start(Method::ScramSha256, context)
            .expect("ok")
            .expect("scram");
        let mut input = BytesMut::from(&b"Q\0\0\0\x05x"[..]);
        let context = AuthContext {
            user: "alice",
            users: &users,
            looked_up: None,
            secrets: &mut secrets,
            random: &mut random,
            channel_binding: None,
        };
        let AuthStep::Failed(error) = check.step(&mut input, context) else {
            panic!("refused");
        };
        assert!(error.windows(6).any(|w| w == b"C08P01"));
    }

    #[test]
    fn a_partial_message_waits() {
        let users = users();
        let mut secrets = SecretCache::default();
        let mut random = SeededRandom::new(5);
        let context = AuthContext {
            user: "alice",
            users: &users,
            looked_up: None,
            secrets: &mut secrets,
            random: &mut random,
            channel_binding: None,
        };
        let (check, _) = start(Method::Md5, context).expect("ok").expect("md5");
        let mut input = BytesMut::from(&b"p\0\0"[..]);
        let context = AuthContext {
            user: "alice",
            users: &users,
            looked_up: None,
            secrets: &mut secrets,
            random: &mut random,
            channel_binding: None,
        };
        assert!(matches!(
            check.step(&mut input, context),
            AuthStep::NeedMore(_)
        ));
        assert_eq!(input.len(), 3);
    }

    #[test]
    fn md5_fails_closed_without_randomness() {
        let users = users();
        let mut secrets = SecretCache::default();
        let context = AuthContext {
            user: "alice",
            users: &users,
            looked_up: None,
            secrets: &mut secrets,
            random: &mut NoRandom,
            channel_binding: None,
        };
        let Err(error) = start(Method::Md5, context) else {
            panic!("refused");
        };
        assert!(error.windows(6).any(|w| w == b"CXX000"));
    }
}
