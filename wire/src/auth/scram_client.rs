//! The client side of SCRAM-SHA-256 and SCRAM-SHA-256-PLUS, used to log in to PostgreSQL.
//!
//! Flow: on AuthenticationSASL call [`ScramClient::encode_initial_response_with`] saying
//! whether the server offered `-PLUS`; on AuthenticationSASLContinue,
//! [`ScramClient::handle_server_first`] (appends SASLResponse); on AuthenticationSASLFinal,
//! [`ScramClient::handle_server_final`] (verifies the server).
//!
//! Channel binding follows libpq (fe-auth.c, fe-auth-scram.c): with binding data (the
//! server certificate's end-point hash) and a `-PLUS` offer the client binds
//! (`p=tls-server-end-point`, `c=` carrying the hash); with binding data and no offer it sends
//! 'y', so a server that did offer `-PLUS` detects that the offer was removed; without binding
//! data it sends 'n'. [`ChannelBindingPolicy::Require`] turns every case that does not bind
//! into an error before anything is sent.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use bytes::BytesMut;
use subtle::ConstantTimeEq;

use super::channel_binding::{ChannelBinding, ChannelBindingPolicy, PLUS_GS2_HEADER};
use super::scram_keys::{
    Key, client_key, hmac, prepare_password, salted_password, server_key, sha256, xor,
};
use super::scram_message::{ServerFinal, is_valid_nonce, parse_server_final, parse_server_first};
use super::{AuthError, NONCE_RANDOM_LEN, SCRAM_SHA_256, SCRAM_SHA_256_PLUS};
use crate::messages::Message;
use crate::messages::frontend::{SaslInitialResponse, SaslResponse};

/// libpq's message when `channel_binding=require` meets a server without `-PLUS`.
pub(crate) const REQUIRE_NOT_OFFERED: &str = "channel binding is required, but server did not \
     offer an authentication method that supports channel binding";

/// `channel_binding=require` without binding data. libpq says "channel binding required, but
/// SSL not in use"; we also get here over TLS when the server certificate has no end-point
/// hash, so the message names both.
pub(crate) const REQUIRE_WITHOUT_DATA: &str = "channel binding required, but SSL not in use \
     or the server certificate has no channel binding hash";

/// How the client-first-message sets up channel binding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Gs2 {
    /// 'n': we do not bind.
    NotSupported,
    /// 'y': we could bind, but the server did not offer `-PLUS`.
    SupportedNotUsed,
    /// 'p=tls-server-end-point' with `SCRAM-SHA-256-PLUS`.
    Bind(ChannelBinding),
}

impl Gs2 {
    fn mechanism(self) -> &'static [u8] {
        match self {
            Self::Bind(_) => SCRAM_SHA_256_PLUS,
            Self::NotSupported | Self::SupportedNotUsed => SCRAM_SHA_256,
        }
    }

    fn header(self) -> &'static str {
        match self {
            Self::NotSupported => "n,,",
            Self::SupportedNotUsed => "y,,",
            Self::Bind(_) => PLUS_GS2_HEADER,
        }
    }

    /// The client-final-message's `c=` value: base64 of the header, plus the binding data.
    fn channel_binding_attribute(self) -> String {
        match self {
            // base64("n,,") and base64("y,,").
            Self::NotSupported => "biws".to_owned(),
            Self::SupportedNotUsed => "eSws".to_owned(),
            Self::Bind(binding) => binding.channel_binding_attribute(PLUS_GS2_HEADER),
        }
    }
}

/// Largest iteration count accepted from a server by default; bounds the CPU a hostile or
/// misconfigured server can make us spend.
pub(crate) const DEFAULT_MAX_ITERATIONS: u32 = 1 << 20;

/// How the client proves itself.
#[derive(Clone)]
enum Credential {
    Password(Vec<u8>),
    /// ClientKey and ServerKey recovered from a client's SCRAM exchange (pass-through).
    Keys {
        client_key: Key,
        server_key: Key,
    },
}

#[derive(Debug)]
enum State {
    Initial,
    AwaitingServerFirst {
        client_first_bare: String,
        gs2: Gs2,
    },
    AwaitingServerFinal {
        server_signature: Key,
        channel_bound: bool,
    },
    Authenticated {
        channel_bound: bool,
    },
    Failed,
}

/// Sans-I/O SCRAM-SHA-256 client for one login.
pub(crate) struct ScramClient {
    credential: Credential,
    client_nonce: String,
    max_iterations: u32,
    /// The server certificate's end-point hash when the connection is TLS and it has one.
    channel_binding: Option<ChannelBinding>,
    policy: ChannelBindingPolicy,
    state: State,
    /// Where derived keys of earlier logins are kept (see [`super::ScramKeyCache`]).
    key_cache: Option<std::sync::Arc<super::ScramKeyCache>>,
}

impl core::fmt::Debug for ScramClient {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("ScramClient")
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

impl ScramClient {
    /// A client logging in with a password; `nonce_random` must come from a CSPRNG.
    pub fn new(password: &[u8], nonce_random: [u8; NONCE_RANDOM_LEN]) -> Self {
        Self::with_nonce(password, STANDARD.encode(nonce_random))
    }

    /// A client with an explicit nonce (test vectors).
    pub fn with_nonce(password: &[u8], client_nonce: String) -> Self {
        debug_assert!(is_valid_nonce(&client_nonce));
        let credential = Credential::Password(prepare_password(password).into_owned());
        Self {
            credential,
            client_nonce,
            max_iterations: DEFAULT_MAX_ITERATIONS,
            channel_binding: None,
            policy: ChannelBindingPolicy::default(),
            state: State::Initial,
            key_cache: None,
        }
    }

    /// A client proving itself with keys recovered by [`super::ScramServer`] instead of a
    /// password; works when the server stores the same SCRAM secret as the proxy.
    pub(crate) fn from_keys(
        client_key: Key,
        server_key: Key,
        nonce_random: [u8; NONCE_RANDOM_LEN],
    ) -> Self {
        Self {
            credential: Credential::Keys {
                client_key,
                server_key,
            },
            client_nonce: STANDARD.encode(nonce_random),
            max_iterations: DEFAULT_MAX_ITERATIONS,
            channel_binding: None,
            policy: ChannelBindingPolicy::default(),
            state: State::Initial,
            key_cache: None,
        }
    }

    /// Derives a password's keys once per (password, salt, iterations) across every login
    /// that shares `cache`.
    pub fn with_key_cache(mut self, cache: Option<std::sync::Arc<super::ScramKeyCache>>) -> Self {
        self.key_cache = cache;
        self
    }

    /// Sets the largest iteration count accepted from the server.
    pub(crate) fn max_iterations(mut self, max_iterations: u32) -> Self {
        self.max_iterations = max_iterations;
        self
    }

    /// Sets the binding data of the connection to the server (`Some` over TLS when the
    /// server certificate has an end-point hash, see [`ChannelBinding::from_certificate`])
    /// and libpq's `channel_binding` policy. The default is no data and
    /// [`ChannelBindingPolicy::Prefer`], which never binds.
    pub fn with_channel_binding(
        mut self,
        binding: Option<ChannelBinding>,
        policy: ChannelBindingPolicy,
    ) -> Self {
        self.channel_binding = binding;
        self.policy = policy;
        self
    }

    /// Appends SASLInitialResponse for a server that offered SCRAM-SHA-256 only.
    #[cfg(test)]
    fn encode_initial_response(&mut self, out: &mut BytesMut) -> Result<(), AuthError> {
        self.encode_initial_response_with(out, false)
    }

    /// Appends SASLInitialResponse with the client-first-message; `plus_offered` says
    /// whether the server's AuthenticationSASL listed `SCRAM-SHA-256-PLUS`. Chooses
    /// `SCRAM-SHA-256-PLUS` when it can bind, else `SCRAM-SHA-256` (see the module doc);
    /// under [`ChannelBindingPolicy::Require`] a choice that does not bind is
    /// [`AuthError::ChannelBindingRequired`] and nothing is appended.
    pub(crate) fn encode_initial_response_with(
        &mut self,
        out: &mut BytesMut,
        plus_offered: bool,
    ) -> Result<(), AuthError> {
        if !matches!(self.state, State::Initial) {
            return Err(AuthError::UnexpectedMessage);
        }
        let gs2 = self.choose_gs2(plus_offered).inspect_err(|_| {
            self.state = State::Failed;
        })?;
        let client_first_bare = format!("n=,r={}", self.client_nonce);
        let client_first = format!("{}{client_first_bare}", gs2.header());
        SaslInitialResponse {
            mechanism: gs2.mechanism(),
            data: Some(client_first.as_bytes()),
        }
        .encode(out);
        self.state = State::AwaitingServerFirst {
            client_first_bare,
            gs2,
        };
        Ok(())
    }

    /// libpq's choice of mechanism and GS2 flag.
    fn choose_gs2(&self, plus_offered: bool) -> Result<Gs2, AuthError> {
        use ChannelBindingPolicy as P;
        let required = |reason| Err(AuthError::ChannelBindingRequired { reason });
        match (self.policy, self.channel_binding, plus_offered) {
            (P::Disable, _, _) => Ok(Gs2::NotSupported),
            (P::Require, None, _) => required(REQUIRE_WITHOUT_DATA),
            (P::Require, Some(_), false) => required(REQUIRE_NOT_OFFERED),
            (P::Prefer | P::Require, Some(binding), true) => Ok(Gs2::Bind(binding)),
            (P::Prefer, Some(_), false) => Ok(Gs2::SupportedNotUsed),
            (P::Prefer, None, _) => Ok(Gs2::NotSupported),
        }
    }

    /// Handles AuthenticationSASLContinue's data and appends SASLResponse with the
    /// client-final-message.
    pub(crate) fn handle_server_first(
        &mut self,
        data: &[u8],
        out: &mut BytesMut,
    ) -> Result<(), AuthError> {
        let state = core::mem::replace(&mut self.state, State::Failed);
        let State::AwaitingServerFirst {
            client_first_bare,
            gs2,
        } = state
        else {
            return Err(AuthError::UnexpectedMessage);
        };
        let text = core::str::from_utf8(data).map_err(|_| AuthError::MalformedScram {
            reason: "server-first-message is not UTF-8",
        })?;
        let first = parse_server_first(text)?;
        if first.nonce.len() <= self.client_nonce.len()
            || !first.nonce.starts_with(&self.client_nonce)
        {
            return Err(AuthError::NonceMismatch);
        }
        if first.iterations == 0 || first.iterations > self.max_iterations {
            return Err(AuthError::IterationsOutOfRange {
                iterations: first.iterations,
            });
        }
        let (client_key, server_key) = self.keys(first.salt_b64, first.iterations)?;
        let without_proof = format!("c={},r={}", gs2.channel_binding_attribute(), first.nonce);
        let auth_message = [
            client_first_bare.as_bytes(),
            b",",
            data,
            b",",
            without_proof.as_bytes(),
        ];
        let client_signature = hmac(&sha256(&client_key), &auth_message);
        let proof = xor(&client_key, &client_signature);
        let client_final = format!("{without_proof},p={}", STANDARD.encode(proof));
        SaslResponse {
            data: client_final.as_bytes(),
        }
        .encode(out);
        self.state = State::AwaitingServerFinal {
            server_signature: hmac(&server_key, &auth_message),
            channel_bound: matches!(gs2, Gs2::Bind(_)),
        };
        Ok(())
    }

    /// Handles AuthenticationSASLFinal's data: the server must prove it knows the secret.
    pub(crate) fn handle_server_final(&mut self, data: &[u8]) -> Result<(), AuthError> {
        let state = core::mem::replace(&mut self.state, State::Failed);
        let State::AwaitingServerFinal {
            server_signature,
            channel_bound,
        } = state
        else {
            return Err(AuthError::UnexpectedMessage);
        };
        let text = core::str::from_utf8(data).map_err(|_| AuthError::MalformedScram {
            reason: "server-final-message is not UTF-8",
        })?;
        let ServerFinal::Verifier { signature_b64 } = parse_server_final(text)? else {
            return Err(AuthError::InvalidPassword);
        };
        let mut received = [0u8; 48];
        let len = STANDARD
            .decode_slice(signature_b64, &mut received)
            .map_err(|_| AuthError::MalformedScram {
                reason: "invalid server signature",
            })?;
        if !bool::from(received[..len].ct_eq(&server_signature)) {
            return Err(AuthError::ServerSignatureMismatch);
        }
        self.state = State::Authenticated { channel_bound };
        Ok(())
    }

    #[cfg(test)]
    fn is_authenticated(&self) -> bool {
        matches!(self.state, State::Authenticated { .. })
    }

    /// Whether the server proved it knows the secret in an exchange bound to the TLS
    /// channel (`SCRAM-SHA-256-PLUS`): only then is the server authenticated as the holder
    /// of the certificate we hashed, not merely of the password.
    pub fn is_channel_bound(&self) -> bool {
        matches!(
            self.state,
            State::Authenticated {
                channel_bound: true
            }
        )
    }

    fn keys(&self, salt_b64: &str, iterations: u32) -> Result<(Key, Key), AuthError> {
        match &self.credential {
            Credential::Keys {
                client_key,
                server_key,
            } => Ok((*client_key, *server_key)),
            Credential::Password(password) => {
                let mut salt = [0u8; 96];
                let len = STANDARD.decode_slice(salt_b64, &mut salt).map_err(|_| {
                    AuthError::MalformedScram {
                        reason: "invalid salt",
                    }
                })?;
                let salt = &salt[..len];
                if let Some(keys) = self
                    .key_cache
                    .as_ref()
                    .and_then(|cache| cache.get(password, salt, iterations))
                {
                    return Ok(keys);
                }
                let salted = salted_password(password, salt, iterations);
                let keys = (client_key(&salted), server_key(&salted));
                if let Some(cache) = &self.key_cache {
                    cache.put(password, salt, iterations, keys);
                }
                Ok(keys)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages::frontend::SaslInitialResponse;

    const SERVER_FIRST: &str =
        "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
    const SERVER_FINAL: &str = "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=";

    /// RFC 7677 section 3 uses `n=user`; PostgreSQL clients send an empty name (the server
    /// uses the startup user), which changes the AuthMessage. So this test checks the
    /// vector's key derivation with our client's bare message, against our server.
    #[test]
    fn rfc_7677_vector_client_side() {
        let mut client = ScramClient::with_nonce(b"pencil", "rOprNGfwEbeRWgbNEkqO".into());
        let mut out = BytesMut::new();
        client.encode_initial_response(&mut out).unwrap();
        let initial = SaslInitialResponse::decode_frame(&out).unwrap();
        assert_eq!(initial.data, Some(&b"n,,n=,r=rOprNGfwEbeRWgbNEkqO"[..]));
        let mut out = BytesMut::new();
        client
            .handle_server_first(SERVER_FIRST.as_bytes(), &mut out)
            .unwrap();
        let response = SaslResponse::decode_frame(&out).unwrap();
        let text = core::str::from_utf8(response.data).unwrap();
        assert!(text.starts_with("c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p="));
        // The RFC's server signature covers `n=user`, so ours must not match it.
        assert_eq!(
            client.handle_server_final(SERVER_FINAL.as_bytes()),
            Err(AuthError::ServerSignatureMismatch)
        );
    }

    /// The client-final-message a login with `cache` sends for the RFC's server-first.
    fn client_final_with(cache: &std::sync::Arc<crate::auth::ScramKeyCache>) -> String {
        let mut client = ScramClient::with_nonce(b"pencil", "rOprNGfwEbeRWgbNEkqO".into())
            .with_key_cache(Some(std::sync::Arc::clone(cache)));
        let mut out = BytesMut::new();
        client.encode_initial_response(&mut out).unwrap();
        let mut out = BytesMut::new();
        client
            .handle_server_first(SERVER_FIRST.as_bytes(), &mut out)
            .unwrap();
        let response = SaslResponse::decode_frame(&out).unwrap();
        String::from_utf8(response.data.to_vec()).unwrap()
    }

    #[test]
    fn a_shared_key_cache_derives_each_password_once_and_proves_the_same() {
        let cache = std::sync::Arc::new(crate::auth::ScramKeyCache::default());
        let first = client_final_with(&cache);
        assert_eq!(cache.len(), 1, "the first login derived and kept the keys");
        let again = client_final_with(&cache);
        assert_eq!(first, again, "the cached keys give the same proof");
        let mut uncached = ScramClient::with_nonce(b"pencil", "rOprNGfwEbeRWgbNEkqO".into());
        let mut out = BytesMut::new();
        uncached.encode_initial_response(&mut out).unwrap();
        let mut out = BytesMut::new();
        uncached
            .handle_server_first(SERVER_FIRST.as_bytes(), &mut out)
            .unwrap();
        let response = SaslResponse::decode_frame(&out).unwrap();
        assert_eq!(
            response.data,
            first.as_bytes(),
            "and the same as without a cache"
        );
        assert_eq!(cache.len(), 1);
    }

    #[test]
    fn rfc_7677_proof_with_rfc_bare_message() {
        // Recompute the RFC's proof from first principles with our key derivation.
        let salt = STANDARD.decode("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap();
        let salted = salted_password(b"pencil", &salt, 4096);
        let auth_message = "n=user,r=rOprNGfwEbeRWgbNEkqO,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096,c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0";
        let ck = client_key(&salted);
        let proof = xor(&ck, &hmac(&sha256(&ck), &[auth_message.as_bytes()]));
        assert_eq!(
            STANDARD.encode(proof),
            "dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
        );
        let signature = hmac(&server_key(&salted), &[auth_message.as_bytes()]);
        assert_eq!(format!("v={}", STANDARD.encode(signature)), SERVER_FINAL);
    }

    #[test]
    fn client_and_server_agree_and_keys_pass_through() {
        let secret =
            crate::auth::ScramSecret::from_password(b"secret", b"saltsaltsaltsalt", 4096).unwrap();
        let mut server = crate::auth::ScramServer::new(secret.clone(), [7; 18]);
        let mut client = ScramClient::new(b"secret", [9; 18]);
        let verified = run(&mut client, &mut server).unwrap();
        assert!(client.is_authenticated());
        let mut server = crate::auth::ScramServer::new(secret.clone(), [8; 18]);
        let mut through = ScramClient::from_keys(verified.client_key, secret.server_key, [1; 18]);
        run(&mut through, &mut server).unwrap();
        let mut server = crate::auth::ScramServer::new(secret, [8; 18]);
        let mut wrong = ScramClient::new(b"Secret", [9; 18]);
        assert_eq!(
            run(&mut wrong, &mut server).unwrap_err(),
            AuthError::InvalidPassword
        );
    }

    #[test]
    fn rejects_hostile_server_first() {
        for bad in [
            "r=other,s=c2FsdA==,i=4096",
            "r=abc,s=c2FsdA==,i=4096",
            "r=abcX,s=c2FsdA==,i=0",
            "r=abcX,s=c2FsdA==,i=99999999",
            "r=abcX,s=!!,i=1",
        ] {
            let mut client = ScramClient::with_nonce(b"pw", "abc".into());
            client
                .encode_initial_response(&mut BytesMut::new())
                .unwrap();
            assert!(
                client
                    .handle_server_first(bad.as_bytes(), &mut BytesMut::new())
                    .is_err(),
                "{bad}"
            );
        }
    }

    fn binding(seed: u8) -> ChannelBinding {
        ChannelBinding::from_end_point_hash(&[seed; 48]).unwrap()
    }

    /// What the client sends first: (mechanism, client-first-message).
    fn initial(
        client: &mut ScramClient,
        plus_offered: bool,
    ) -> Result<(Vec<u8>, String), AuthError> {
        let mut out = BytesMut::new();
        client.encode_initial_response_with(&mut out, plus_offered)?;
        let initial = SaslInitialResponse::decode_frame(&out).unwrap();
        let data = String::from_utf8(initial.data.unwrap().to_vec()).unwrap();
        Ok((initial.mechanism.to_vec(), data))
    }

    #[test]
    fn mechanism_and_flag_follow_libpq() {
        use ChannelBindingPolicy::{Disable, Prefer, Require};
        let plain = Ok((SCRAM_SHA_256, "n,,"));
        let supported = Ok((SCRAM_SHA_256, "y,,"));
        let bound = Ok((SCRAM_SHA_256_PLUS, "p=tls-server-end-point,,"));
        let required = |reason| Err(AuthError::ChannelBindingRequired { reason });
        let cases = [
            (Disable, None, false, plain),
            (Disable, None, true, plain),
            (Disable, Some(binding(1)), false, plain),
            (Disable, Some(binding(1)), true, plain),
            (Prefer, None, false, plain),
            (Prefer, None, true, plain),
            (Prefer, Some(binding(1)), false, supported),
            (Prefer, Some(binding(1)), true, bound),
            (Require, None, false, required(REQUIRE_WITHOUT_DATA)),
            (Require, None, true, required(REQUIRE_WITHOUT_DATA)),
            (
                Require,
                Some(binding(1)),
                false,
                required(REQUIRE_NOT_OFFERED),
            ),
            (Require, Some(binding(1)), true, bound),
        ];
        for (policy, data, plus_offered, expected) in cases {
            let mut client =
                ScramClient::with_nonce(b"pw", "abc".into()).with_channel_binding(data, policy);
            let got = initial(&mut client, plus_offered);
            let want = expected
                .map(|(mechanism, header)| (mechanism.to_vec(), format!("{header}n=,r=abc")));
            assert_eq!(got, want, "{policy:?} {data:?} {plus_offered}");
        }
        assert_eq!(
            AuthError::ChannelBindingRequired {
                reason: REQUIRE_NOT_OFFERED
            }
            .sqlstate(),
            crate::sqlstate::SQLCLIENT_UNABLE_TO_ESTABLISH_SQLCONNECTION
        );
    }

    #[test]
    fn a_refused_choice_sends_nothing_and_fails_the_exchange() {
        let mut client = ScramClient::with_nonce(b"pw", "abc".into())
            .with_channel_binding(None, ChannelBindingPolicy::Require);
        let mut out = BytesMut::new();
        assert!(client.encode_initial_response_with(&mut out, true).is_err());
        assert!(out.is_empty());
        assert_eq!(
            client.encode_initial_response_with(&mut out, true),
            Err(AuthError::UnexpectedMessage)
        );
    }

    #[test]
    fn the_bound_client_final_carries_the_hash() {
        let mut client = ScramClient::with_nonce(b"pencil", "rOprNGfwEbeRWgbNEkqO".into())
            .with_channel_binding(Some(binding(7)), ChannelBindingPolicy::Prefer);
        client
            .encode_initial_response_with(&mut BytesMut::new(), true)
            .unwrap();
        let mut out = BytesMut::new();
        client
            .handle_server_first(SERVER_FIRST.as_bytes(), &mut out)
            .unwrap();
        let response = SaslResponse::decode_frame(&out).unwrap();
        let text = core::str::from_utf8(response.data).unwrap();
        let cbind = STANDARD.encode([b"p=tls-server-end-point,,".as_slice(), &[7; 48]].concat());
        assert!(text.starts_with(&format!("c={cbind},r=")), "{text}");
    }

    fn secret() -> crate::auth::ScramSecret {
        crate::auth::ScramSecret::from_password(b"secret", b"saltsaltsaltsalt", 16).unwrap()
    }

    fn tls_server(data: Option<ChannelBinding>) -> crate::auth::ScramServer {
        crate::auth::ScramServer::new(secret(), [7; 18]).with_channel_binding(data)
    }

    fn prefer(data: Option<ChannelBinding>) -> ScramClient {
        ScramClient::new(b"secret", [9; 18])
            .with_channel_binding(data, ChannelBindingPolicy::Prefer)
    }

    #[test]
    fn bound_round_trip() {
        let mut server = tls_server(Some(binding(1)));
        let mut client = prefer(Some(binding(1)));
        let verified = run_offered(&mut client, &mut server, true).unwrap();
        assert!(verified.channel_bound && server.is_channel_bound());
        assert!(client.is_authenticated() && client.is_channel_bound());
    }

    #[test]
    fn unbound_round_trips() {
        // No TLS on either side.
        let mut client = prefer(None);
        let verified = run_offered(&mut client, &mut tls_server(None), false).unwrap();
        assert!(!verified.channel_bound && !client.is_channel_bound());
        // We could bind, the server cannot (no TLS, or a certificate without a hash): 'y'.
        let mut client = prefer(Some(binding(1)));
        run_offered(&mut client, &mut tls_server(None), false).unwrap();
        assert!(client.is_authenticated() && !client.is_channel_bound());
        // The server could bind, we cannot: 'n'.
        let mut client = prefer(None);
        run_offered(&mut client, &mut tls_server(Some(binding(1))), true).unwrap();
        assert!(!client.is_channel_bound());
        // Binding disabled by policy.
        let mut client = ScramClient::new(b"secret", [9; 18])
            .with_channel_binding(Some(binding(1)), ChannelBindingPolicy::Disable);
        run_offered(&mut client, &mut tls_server(Some(binding(1))), true).unwrap();
        assert!(!client.is_channel_bound());
    }

    #[test]
    fn a_removed_plus_offer_is_detected() {
        // Both sides can bind, but the offer reached the client without -PLUS.
        let mut client = prefer(Some(binding(1)));
        let err = run_offered(&mut client, &mut tls_server(Some(binding(1))), false).unwrap_err();
        assert_eq!(err, AuthError::ChannelBindingNegotiation);
    }

    #[test]
    fn a_different_certificate_fails_the_binding_check() {
        // A man in the middle terminating TLS with its own certificate.
        let mut client = prefer(Some(binding(2)));
        let mut server = tls_server(Some(binding(1)));
        let err = run_offered(&mut client, &mut server, true).unwrap_err();
        assert_eq!(err, AuthError::ChannelBindingMismatch);
        assert!(!server.is_verified() && !client.is_authenticated());
    }

    #[test]
    fn both_sides_hash_the_same_certificate() {
        // The server hashes the certificate it presents, the client the one it received.
        let presented = include_bytes!("../../tests/fixtures/certs/ecdsa_p384_sha384.der");
        let server_side = ChannelBinding::from_certificate(presented).unwrap();
        let client_side = ChannelBinding::from_certificate(presented).unwrap();
        let mut server = tls_server(Some(server_side));
        let verified = run_offered(&mut prefer(Some(client_side)), &mut server, true).unwrap();
        assert!(verified.channel_bound);
        // A man in the middle presents its own certificate (same hash function, same length).
        let other = include_bytes!("../../tests/fixtures/certs/rsa_sha384.der");
        let seen = ChannelBinding::from_certificate(other).unwrap();
        let err = run_offered(
            &mut prefer(Some(seen)),
            &mut tls_server(Some(server_side)),
            true,
        );
        assert_eq!(err.unwrap_err(), AuthError::ChannelBindingMismatch);
    }

    #[test]
    fn bound_keys_pass_through() {
        let mut server = tls_server(Some(binding(1)));
        let verified = run_offered(&mut prefer(Some(binding(1))), &mut server, true).unwrap();
        let mut through = ScramClient::from_keys(verified.client_key, secret().server_key, [1; 18])
            .with_channel_binding(Some(binding(4)), ChannelBindingPolicy::Require);
        run_offered(&mut through, &mut tls_server(Some(binding(4))), true).unwrap();
        assert!(through.is_channel_bound());
    }

    fn run(
        client: &mut ScramClient,
        server: &mut crate::auth::ScramServer,
    ) -> Result<crate::auth::ScramVerified, AuthError> {
        run_offered(client, server, false)
    }

    fn run_offered(
        client: &mut ScramClient,
        server: &mut crate::auth::ScramServer,
        plus_offered: bool,
    ) -> Result<crate::auth::ScramVerified, AuthError> {
        use crate::messages::backend::Authentication;
        let mut c2s = BytesMut::new();
        client.encode_initial_response_with(&mut c2s, plus_offered)?;
        let mut s2c = BytesMut::new();
        server.handle_initial_response(&c2s[5..], &mut s2c)?;
        let Authentication::SaslContinue { data } = Authentication::decode_frame(&s2c)? else {
            panic!()
        };
        let mut c2s = BytesMut::new();
        client.handle_server_first(data, &mut c2s)?;
        let mut s2c = BytesMut::new();
        let verified = server.handle_response(&c2s[5..], &mut s2c)?;
        let Authentication::SaslFinal { data } = Authentication::decode_frame(&s2c)? else {
            panic!()
        };
        client.handle_server_final(data)?;
        Ok(verified)
    }
}
