//! Logging in to PostgreSQL: answers each Authentication request with the configured password
//! (cleartext, MD5, SCRAM-SHA-256 or SCRAM-SHA-256-PLUS) until AuthenticationOk.
//!
//! The SCRAM mechanism is chosen from the server's AuthenticationSASL list as libpq does:
//! `SCRAM-SHA-256-PLUS` when offered, we have binding data and the policy allows it, else
//! `SCRAM-SHA-256`. Under [`ChannelBindingPolicy::Require`] the checks of libpq's
//! `check_expected_areq` apply: no answer to a non-SASL request (the password could leak to
//! a server we have not authenticated), and AuthenticationOk only after a bound exchange.
//!
//! One difference from libpq: libpq refuses a `-PLUS` offer over a connection without TLS
//! (a sign that something between it and the server terminates TLS). Here "no binding data"
//! also covers TLS to a server whose certificate has no end-point hash (Ed25519, Ed448), where
//! PostgreSQL still offers `-PLUS`; so without binding data a `-PLUS` offer is simply not
//! taken and `SCRAM-SHA-256` with 'n' is used (or the login fails under `Require`).

use bytes::BytesMut;

use super::md5::{Md5Secret, md5_password_hash, md5_salted_response};
use super::scram_client::{DEFAULT_MAX_ITERATIONS, REQUIRE_WITHOUT_DATA};
use super::{
    AuthError, ChannelBinding, ChannelBindingPolicy, KEY_LEN, NONCE_RANDOM_LEN, SCRAM_SHA_256,
    SCRAM_SHA_256_PLUS, ScramClient,
};
use crate::messages::Message;
use crate::messages::backend::Authentication;
use crate::messages::frontend::PasswordMessage;

/// What the caller does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthProgress {
    /// A reply was appended (or none was needed); send it and wait for the next message.
    Continue,
    /// AuthenticationOk arrived: ParameterStatus, BackendKeyData and ReadyForQuery follow.
    Authenticated,
}

#[derive(Debug)]
enum State {
    AwaitingRequest,
    /// Boxed: the exchange's state is large next to the other states.
    Scram(Box<ScramClient>),
    /// SASLFinal verified; only AuthenticationOk may follow.
    AwaitingOk {
        channel_bound: bool,
    },
    Authenticated {
        channel_bound: bool,
    },
    Failed,
}

/// libpq's message when `channel_binding=require` meets AuthenticationOk without a bound
/// exchange (trust, or a server that skipped -PLUS).
const REQUIRE_UNBOUND_OK: &str =
    "channel binding required, but server authenticated client without channel binding";

/// libpq's message when `channel_binding=require` meets a non-SASL request.
const REQUIRE_NOT_SASL: &str =
    "channel binding required but not supported by server's authentication request";

/// What the proxy proves itself with.
enum Credential {
    Password(Vec<u8>),
    /// ClientKey/ServerKey recovered from a client's SCRAM exchange ([`super::ScramVerified`])
    /// when the proxy stores only a SCRAM secret: SCRAM logins only.
    ScramKeys {
        client_key: [u8; KEY_LEN],
        server_key: [u8; KEY_LEN],
    },
    /// PostgreSQL's stored `md5` + md5(password + user) hash (a hashed userlist entry): the
    /// MD5 response needs only that hash, so MD5 logins only.
    Md5Hash(Md5Secret),
}

/// Sans-I/O login state machine for one server connection.
pub struct ClientAuth {
    user: Vec<u8>,
    credential: Credential,
    nonce_random: [u8; NONCE_RANDOM_LEN],
    max_scram_iterations: u32,
    channel_binding: Option<ChannelBinding>,
    policy: ChannelBindingPolicy,
    state: State,
    key_cache: Option<std::sync::Arc<super::ScramKeyCache>>,
}

impl core::fmt::Debug for ClientAuth {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("ClientAuth")
            .field("user", &String::from_utf8_lossy(&self.user))
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

impl ClientAuth {
    /// `nonce_random` is used if the server picks SCRAM; it must come from a CSPRNG.
    pub fn new(user: &[u8], password: &[u8], nonce_random: [u8; NONCE_RANDOM_LEN]) -> Self {
        Self {
            user: user.to_vec(),
            credential: Credential::Password(password.to_vec()),
            nonce_random,
            max_scram_iterations: DEFAULT_MAX_ITERATIONS,
            channel_binding: None,
            policy: ChannelBindingPolicy::default(),
            state: State::AwaitingRequest,
            key_cache: None,
        }
    }

    /// Logs in with SCRAM keys instead of a password: `client_key` from
    /// [`super::ScramVerified`] after a client proved itself against `secret`, `server_key`
    /// from that secret. The server must store the same secret; MD5 and cleartext requests
    /// fail with [`AuthError::UnsupportedMethod`].
    pub fn with_scram_keys(
        user: &[u8],
        client_key: [u8; KEY_LEN],
        server_key: [u8; KEY_LEN],
        nonce_random: [u8; NONCE_RANDOM_LEN],
    ) -> Self {
        Self {
            user: user.to_vec(),
            credential: Credential::ScramKeys {
                client_key,
                server_key,
            },
            nonce_random,
            max_scram_iterations: DEFAULT_MAX_ITERATIONS,
            channel_binding: None,
            policy: ChannelBindingPolicy::default(),
            state: State::AwaitingRequest,
            key_cache: None,
        }
    }

    /// Logs in with a stored MD5 hash instead of a password, as PgBouncer does for an `md5`
    /// userlist entry: the MD5 response is computed from the hash alone. Cleartext and SCRAM
    /// requests fail with [`AuthError::UnsupportedMethod`].
    pub fn with_md5_hash(user: &[u8], secret: Md5Secret) -> Self {
        Self {
            user: user.to_vec(),
            credential: Credential::Md5Hash(secret),
            nonce_random: [0; NONCE_RANDOM_LEN],
            max_scram_iterations: DEFAULT_MAX_ITERATIONS,
            channel_binding: None,
            policy: ChannelBindingPolicy::default(),
            state: State::AwaitingRequest,
            key_cache: None,
        }
    }

    /// Sets the binding data of the connection (`Some` over TLS when the server's
    /// certificate has an end-point hash, [`ChannelBinding::from_certificate`]) and libpq's
    /// `channel_binding` policy. The default is no data and [`ChannelBindingPolicy::Prefer`].
    pub fn with_channel_binding(
        mut self,
        binding: Option<ChannelBinding>,
        policy: ChannelBindingPolicy,
    ) -> Self {
        self.channel_binding = binding;
        self.policy = policy;
        self
    }

    /// Shares SCRAM key derivations with every login that uses `cache` (see
    /// [`super::ScramKeyCache`]).
    pub fn with_key_cache(mut self, cache: Option<std::sync::Arc<super::ScramKeyCache>>) -> Self {
        self.key_cache = cache;
        self
    }

    /// Sets the largest SCRAM iteration count accepted from the server (CPU bound per login).
    pub fn max_scram_iterations(mut self, max_iterations: u32) -> Self {
        self.max_scram_iterations = max_iterations;
        self
    }

    /// Handles one Authentication message, appending any reply to `out`.
    pub fn handle(
        &mut self,
        message: Authentication<'_>,
        out: &mut BytesMut,
    ) -> Result<AuthProgress, AuthError> {
        let state = core::mem::replace(&mut self.state, State::Failed);
        let (next, progress) = self.step(state, message, out)?;
        self.state = next;
        Ok(progress)
    }

    /// Decodes and handles a whole 'R' frame.
    pub fn handle_frame(
        &mut self,
        frame: &[u8],
        out: &mut BytesMut,
    ) -> Result<AuthProgress, AuthError> {
        self.handle(Authentication::decode_frame(frame)?, out)
    }

    pub fn is_authenticated(&self) -> bool {
        matches!(self.state, State::Authenticated { .. })
    }

    /// Whether the login was a SCRAM-SHA-256-PLUS exchange bound to the TLS channel.
    pub fn is_channel_bound(&self) -> bool {
        matches!(
            self.state,
            State::Authenticated {
                channel_bound: true
            }
        )
    }

    /// The password, for methods that need one.
    fn password(&self) -> Result<&[u8], AuthError> {
        match &self.credential {
            Credential::Password(password) => Ok(password),
            Credential::ScramKeys { .. } | Credential::Md5Hash(_) => {
                Err(AuthError::UnsupportedMethod)
            }
        }
    }

    /// The stored MD5 hash, from the password and user or as configured.
    fn md5_hash(&self) -> Result<[u8; super::md5::MD5_HASH_LEN], AuthError> {
        match &self.credential {
            Credential::Md5Hash(secret) => Ok(*secret.hash()),
            _ => Ok(md5_password_hash(&self.user, self.password()?)),
        }
    }

    fn step(
        &self,
        state: State,
        message: Authentication<'_>,
        out: &mut BytesMut,
    ) -> Result<(State, AuthProgress), AuthError> {
        use Authentication as A;
        let require = self.policy == ChannelBindingPolicy::Require;
        if require
            && !matches!(
                message,
                A::Ok | A::Sasl { .. } | A::SaslContinue { .. } | A::SaslFinal { .. }
            )
        {
            return Err(AuthError::ChannelBindingRequired {
                reason: REQUIRE_NOT_SASL,
            });
        }
        match (state, message) {
            (State::AwaitingRequest, A::Ok) => self.accept_ok(false),
            (State::AwaitingOk { channel_bound }, A::Ok) => self.accept_ok(channel_bound),
            (State::AwaitingRequest, A::CleartextPassword) => {
                PasswordMessage {
                    password: self.password()?,
                }
                .encode(out);
                Ok((State::AwaitingRequest, AuthProgress::Continue))
            }
            (State::AwaitingRequest, A::Md5Password { salt }) => {
                let hash = self.md5_hash()?;
                PasswordMessage {
                    password: &md5_salted_response(&hash, salt),
                }
                .encode(out);
                Ok((State::AwaitingRequest, AuthProgress::Continue))
            }
            (State::AwaitingRequest, A::Sasl { mechanisms }) => {
                let plus_offered = mechanisms.contains(SCRAM_SHA_256_PLUS);
                let binds = plus_offered
                    && self.channel_binding.is_some()
                    && self.policy != ChannelBindingPolicy::Disable;
                if !binds && !mechanisms.contains(SCRAM_SHA_256) {
                    // libpq checks for binding data before reading the list.
                    if require && self.channel_binding.is_none() {
                        return Err(AuthError::ChannelBindingRequired {
                            reason: REQUIRE_WITHOUT_DATA,
                        });
                    }
                    return Err(AuthError::UnsupportedMethod);
                }
                let scram = match &self.credential {
                    Credential::Password(password) => ScramClient::new(password, self.nonce_random)
                        .with_key_cache(self.key_cache.clone()),
                    Credential::ScramKeys {
                        client_key,
                        server_key,
                    } => ScramClient::from_keys(*client_key, *server_key, self.nonce_random),
                    Credential::Md5Hash(_) => return Err(AuthError::UnsupportedMethod),
                };
                let mut scram = scram
                    .max_iterations(self.max_scram_iterations)
                    .with_channel_binding(self.channel_binding, self.policy);
                scram.encode_initial_response_with(out, plus_offered)?;
                Ok((State::Scram(Box::new(scram)), AuthProgress::Continue))
            }
            (State::Scram(mut scram), A::SaslContinue { data }) => {
                scram.handle_server_first(data, out)?;
                Ok((State::Scram(scram), AuthProgress::Continue))
            }
            (State::Scram(mut scram), A::SaslFinal { data }) => {
                scram.handle_server_final(data)?;
                let channel_bound = scram.is_channel_bound();
                Ok((State::AwaitingOk { channel_bound }, AuthProgress::Continue))
            }
            (State::AwaitingRequest, A::KerberosV5 | A::Gss | A::GssContinue { .. } | A::Sspi) => {
                Err(AuthError::UnsupportedMethod)
            }
            _ => Err(AuthError::UnexpectedMessage),
        }
    }

    /// AuthenticationOk, after a SCRAM exchange (`channel_bound` says whether it was bound)
    /// or none at all.
    fn accept_ok(&self, channel_bound: bool) -> Result<(State, AuthProgress), AuthError> {
        if self.policy == ChannelBindingPolicy::Require && !channel_bound {
            return Err(AuthError::ChannelBindingRequired {
                reason: REQUIRE_UNBOUND_OK,
            });
        }
        Ok((
            State::Authenticated { channel_bound },
            AuthProgress::Authenticated,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::{Md5Secret, Md5Server, ScramSecret, ScramServer};
    use crate::messages::backend::Authentication;

    #[test]
    fn md5_login_against_md5_server() {
        let server = Md5Server::new(Md5Secret::from_stored(b"bob", b"pw"), [9, 8, 7, 6]);
        let mut request = BytesMut::new();
        server.encode_request(&mut request);
        let mut client = ClientAuth::new(b"bob", b"pw", [0; 18]);
        let mut reply = BytesMut::new();
        assert_eq!(
            client.handle_frame(&request, &mut reply),
            Ok(AuthProgress::Continue)
        );
        assert_eq!(server.handle_password(&reply[5..]), Ok(()));
        assert_eq!(
            client.handle(Authentication::Ok, &mut reply),
            Ok(AuthProgress::Authenticated)
        );
    }

    #[test]
    fn scram_login_requires_server_final_before_ok() {
        let secret = ScramSecret::from_password(b"pw", b"0123456789abcdef", 4096).unwrap();
        let mut server = ScramServer::new(secret, [3; 18]);
        let mut request = BytesMut::new();
        ScramServer::encode_request(&mut request);
        let mut client = ClientAuth::new(b"bob", b"pw", [4; 18]);
        let mut reply = BytesMut::new();
        client.handle_frame(&request, &mut reply).unwrap();
        let mut challenge = BytesMut::new();
        server
            .handle_initial_response(&reply[5..], &mut challenge)
            .unwrap();
        let mut reply = BytesMut::new();
        client.handle_frame(&challenge, &mut reply).unwrap();
        // A server skipping SASLFinal must not be trusted.
        let mut early = ClientAuth::new(b"bob", b"pw", [4; 18]);
        early.handle_frame(&request, &mut BytesMut::new()).unwrap();
        assert_eq!(
            early.handle(Authentication::Ok, &mut BytesMut::new()),
            Err(AuthError::UnexpectedMessage)
        );
        let mut fin = BytesMut::new();
        server.handle_response(&reply[5..], &mut fin).unwrap();
        assert_eq!(
            client.handle_frame(&fin, &mut BytesMut::new()),
            Ok(AuthProgress::Continue)
        );
        assert_eq!(
            client.handle(Authentication::Ok, &mut BytesMut::new()),
            Ok(AuthProgress::Authenticated)
        );
        assert!(client.is_authenticated());
    }

    #[test]
    fn scram_keys_pass_through_to_a_server_with_the_same_secret() {
        let secret = ScramSecret::from_password(b"pw", b"0123456789abcdef", 4096).unwrap();
        // A client proves itself to the proxy...
        let mut front = ScramServer::new(secret.clone(), [1; 18]);
        let mut client = ClientAuth::new(b"bob", b"pw", [2; 18]);
        let verified = login(&mut client, &mut front).unwrap();
        // ...and the proxy logs in to the server with the recovered key, no password.
        let mut back = ScramServer::new(secret.clone(), [3; 18]);
        let mut proxy =
            ClientAuth::with_scram_keys(b"bob", verified.client_key, secret.server_key, [4; 18]);
        login(&mut proxy, &mut back).unwrap();
        assert!(proxy.is_authenticated());
        assert!(!format!("{proxy:?}").contains("client_key"));
        let mut md5 =
            ClientAuth::with_scram_keys(b"bob", verified.client_key, secret.server_key, [4; 18]);
        let request = Authentication::Md5Password { salt: [0; 4] };
        assert_eq!(
            md5.handle(request, &mut BytesMut::new()),
            Err(AuthError::UnsupportedMethod)
        );
    }

    #[test]
    fn md5_hash_logs_in_without_the_password() {
        let hash = md5_password_hash(b"bob", b"pw");
        let server = Md5Server::new(Md5Secret::from_stored(b"bob", b"pw"), [5, 6, 7, 8]);
        let mut request = BytesMut::new();
        server.encode_request(&mut request);
        let mut client = ClientAuth::with_md5_hash(b"bob", Md5Secret::from_stored(b"bob", &hash));
        let mut reply = BytesMut::new();
        assert_eq!(
            client.handle_frame(&request, &mut reply),
            Ok(AuthProgress::Continue)
        );
        assert_eq!(server.handle_password(&reply[5..]), Ok(()));
        assert!(!format!("{client:?}").contains("md5"));
        let mut cleartext =
            ClientAuth::with_md5_hash(b"bob", Md5Secret::from_stored(b"bob", &hash));
        assert_eq!(
            cleartext.handle(Authentication::CleartextPassword, &mut BytesMut::new()),
            Err(AuthError::UnsupportedMethod)
        );
        let mut sasl = BytesMut::new();
        ScramServer::encode_request(&mut sasl);
        let mut scram = ClientAuth::with_md5_hash(b"bob", Md5Secret::from_stored(b"bob", &hash));
        assert_eq!(
            scram.handle_frame(&sasl, &mut BytesMut::new()),
            Err(AuthError::UnsupportedMethod)
        );
    }

    fn login(
        client: &mut ClientAuth,
        server: &mut ScramServer,
    ) -> Result<crate::auth::ScramVerified, AuthError> {
        let mut request = BytesMut::new();
        ScramServer::encode_request(&mut request);
        let mut reply = BytesMut::new();
        client.handle_frame(&request, &mut reply)?;
        let mut challenge = BytesMut::new();
        server.handle_initial_response(&reply[5..], &mut challenge)?;
        let mut reply = BytesMut::new();
        client.handle_frame(&challenge, &mut reply)?;
        let mut fin = BytesMut::new();
        let verified = server.handle_response(&reply[5..], &mut fin)?;
        client.handle_frame(&fin, &mut BytesMut::new())?;
        client.handle(Authentication::Ok, &mut BytesMut::new())?;
        Ok(verified)
    }

    fn binding(seed: u8) -> ChannelBinding {
        ChannelBinding::from_end_point_hash(&[seed; 32]).unwrap()
    }

    fn cheap_secret() -> ScramSecret {
        ScramSecret::from_password(b"pw", b"0123456789abcdef", 16).unwrap()
    }

    /// Logs in against `server` after an AuthenticationSASL listing `mechanisms`.
    fn login_offering(
        client: &mut ClientAuth,
        server: &mut ScramServer,
        mechanisms: &[&[u8]],
    ) -> Result<AuthProgress, AuthError> {
        let mut request = BytesMut::new();
        Authentication::encode_sasl(&mut request, mechanisms);
        let mut reply = BytesMut::new();
        client.handle_frame(&request, &mut reply)?;
        let mut challenge = BytesMut::new();
        server.handle_initial_response(&reply[5..], &mut challenge)?;
        let mut reply = BytesMut::new();
        client.handle_frame(&challenge, &mut reply)?;
        let mut fin = BytesMut::new();
        server.handle_response(&reply[5..], &mut fin)?;
        client.handle_frame(&fin, &mut BytesMut::new())?;
        client.handle(Authentication::Ok, &mut BytesMut::new())
    }

    /// The mechanism the client picks from `mechanisms`.
    fn chosen(client: &mut ClientAuth, mechanisms: &[&[u8]]) -> Result<Vec<u8>, AuthError> {
        let mut request = BytesMut::new();
        Authentication::encode_sasl(&mut request, mechanisms);
        let mut reply = BytesMut::new();
        client.handle_frame(&request, &mut reply)?;
        let initial = crate::messages::frontend::SaslInitialResponse::decode_frame(&reply)?;
        Ok(initial.mechanism.to_vec())
    }

    const BOTH: &[&[u8]] = &[SCRAM_SHA_256_PLUS, SCRAM_SHA_256];

    #[test]
    fn the_mechanism_comes_from_the_servers_list() {
        use ChannelBindingPolicy::{Disable, Prefer, Require};
        let client = |data, policy| {
            ClientAuth::new(b"bob", b"pw", [4; 18]).with_channel_binding(data, policy)
        };
        let plus = Ok(SCRAM_SHA_256_PLUS.to_vec());
        let plain = Ok(SCRAM_SHA_256.to_vec());
        assert_eq!(chosen(&mut client(Some(binding(1)), Prefer), BOTH), plus);
        // -PLUS offered but no binding data (no TLS, or a certificate without a hash).
        assert_eq!(chosen(&mut client(None, Prefer), BOTH), plain);
        assert_eq!(chosen(&mut client(Some(binding(1)), Disable), BOTH), plain);
        // A server offering only -PLUS.
        let only_plus: &[&[u8]] = &[SCRAM_SHA_256_PLUS];
        assert_eq!(
            chosen(&mut client(Some(binding(1)), Prefer), only_plus),
            plus
        );
        assert_eq!(
            chosen(&mut client(None, Prefer), only_plus),
            Err(AuthError::UnsupportedMethod)
        );
        assert_eq!(
            chosen(&mut client(Some(binding(1)), Disable), only_plus),
            Err(AuthError::UnsupportedMethod)
        );
        assert_eq!(
            chosen(&mut client(None, Require), only_plus),
            Err(AuthError::ChannelBindingRequired {
                reason: REQUIRE_WITHOUT_DATA
            })
        );
        assert_eq!(
            chosen(&mut client(Some(binding(1)), Require), &[SCRAM_SHA_256]),
            Err(AuthError::ChannelBindingRequired {
                reason: super::super::scram_client::REQUIRE_NOT_OFFERED
            })
        );
        assert_eq!(
            chosen(&mut client(None, Prefer), &[b"OAUTHBEARER"]),
            Err(AuthError::UnsupportedMethod)
        );
    }

    #[test]
    fn bound_login() {
        let mut server =
            ScramServer::new(cheap_secret(), [3; 18]).with_channel_binding(Some(binding(1)));
        let mut client = ClientAuth::new(b"bob", b"pw", [4; 18])
            .with_channel_binding(Some(binding(1)), ChannelBindingPolicy::Require);
        assert_eq!(
            login_offering(&mut client, &mut server, BOTH),
            Ok(AuthProgress::Authenticated)
        );
        assert!(client.is_authenticated() && client.is_channel_bound());
        assert!(server.is_channel_bound());
        // Prefer, over a connection where the server cannot bind.
        let mut server = ScramServer::new(cheap_secret(), [3; 18]);
        let mut client = ClientAuth::new(b"bob", b"pw", [4; 18])
            .with_channel_binding(Some(binding(1)), ChannelBindingPolicy::Prefer);
        login_offering(&mut client, &mut server, &[SCRAM_SHA_256]).unwrap();
        assert!(client.is_authenticated() && !client.is_channel_bound());
    }

    #[test]
    fn require_refuses_everything_that_does_not_bind() {
        let require = || {
            ClientAuth::new(b"bob", b"pw", [4; 18])
                .with_channel_binding(Some(binding(1)), ChannelBindingPolicy::Require)
        };
        let not_sasl = Err(AuthError::ChannelBindingRequired {
            reason: REQUIRE_NOT_SASL,
        });
        for request in [
            Authentication::CleartextPassword,
            Authentication::Md5Password { salt: [1; 4] },
            Authentication::Gss,
            Authentication::Sspi,
            Authentication::KerberosV5,
        ] {
            let mut reply = BytesMut::new();
            assert_eq!(
                require().handle(request, &mut reply),
                not_sasl,
                "{request:?}"
            );
            // The password never leaves.
            assert!(reply.is_empty());
        }
        // Trust: AuthenticationOk with no exchange at all.
        let err = require().handle(Authentication::Ok, &mut BytesMut::new());
        assert_eq!(
            err,
            Err(AuthError::ChannelBindingRequired {
                reason: REQUIRE_UNBOUND_OK
            })
        );
        assert_eq!(
            err.unwrap_err().to_string(),
            "channel binding required, but server authenticated client without channel binding"
        );
    }

    #[test]
    fn cleartext_and_unsupported_methods() {
        let mut client = ClientAuth::new(b"bob", b"pw", [0; 18]);
        let mut reply = BytesMut::new();
        client
            .handle(Authentication::CleartextPassword, &mut reply)
            .unwrap();
        assert_eq!(&reply[..], b"p\0\0\0\x07pw\0");
        let mut client = ClientAuth::new(b"bob", b"pw", [0; 18]);
        assert_eq!(
            client.handle(Authentication::Gss, &mut reply),
            Err(AuthError::UnsupportedMethod)
        );
    }
}
