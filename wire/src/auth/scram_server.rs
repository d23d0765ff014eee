//! The server side of SCRAM-SHA-256 and SCRAM-SHA-256-PLUS: verifies a client against a
//! [`ScramSecret`].
//!
//! Flow: send [`ScramServer::encode_request_with`] (AuthenticationSASL offering
//! `SCRAM-SHA-256-PLUS` first when the connection is TLS with a certificate hash, then
//! `SCRAM-SHA-256`), pass the client's SASLInitialResponse body to
//! [`ScramServer::handle_initial_response`] (appends AuthenticationSASLContinue), then its
//! SASLResponse body to [`ScramServer::handle_response`] (appends AuthenticationSASLFinal).
//! The caller then sends AuthenticationOk.
//!
//! Channel binding follows PostgreSQL's rules (auth-scram.c). With binding data set
//! ([`ScramServer::with_channel_binding`]) the server has offered `-PLUS`, so:
//! - `SCRAM-SHA-256-PLUS` must come with `p=tls-server-end-point` and a `c=` carrying our
//!   certificate hash, else "SCRAM channel binding check failed" (28000);
//! - `SCRAM-SHA-256` with 'y' means the client can bind but believes we cannot: someone
//!   removed `-PLUS` from our offer, so it is refused as a negotiation error (28000);
//! - `SCRAM-SHA-256` with 'n' is accepted (the client does not bind).
//!
//! Without binding data `-PLUS` is a mechanism we did not offer (08P01) and 'y' is accepted.
//! Everything malformed is 08P01.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use bytes::BytesMut;
use subtle::ConstantTimeEq;

use super::channel_binding::{ChannelBinding, TLS_SERVER_END_POINT};
use super::error::PeerText;
use super::scram_keys::{Key, hmac, sha256, xor};
use super::scram_message::{
    ChannelBindingFlag, is_valid_nonce, parse_client_final, parse_client_first,
};
use super::{
    AuthError, NONCE_RANDOM_LEN, SCRAM_SHA_256, SCRAM_SHA_256_PLUS, ScramSecret, os_random,
};
use crate::messages::Message;
use crate::messages::backend::Authentication;
use crate::messages::frontend::{SaslInitialResponse, SaslResponse};

/// Where the exchange is.
#[derive(Debug)]
enum State {
    AwaitingClientFirst,
    AwaitingClientFinal {
        client_first_bare: String,
        /// The `c=` value the client must send: base64 of its GS2 header, followed by our
        /// binding data when it chose `-PLUS`.
        channel_binding_b64: String,
        /// Whether the client chose `SCRAM-SHA-256-PLUS`.
        channel_bound: bool,
        server_first: String,
        nonce: String,
    },
    Verified {
        channel_bound: bool,
    },
    Failed,
}

/// What a successful exchange proves. Its Debug output hides the key.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct ScramVerified {
    /// The client's ClientKey, recovered from its proof. With the secret's ServerKey it lets
    /// the proxy log in to a server holding the same secret without knowing the password.
    pub client_key: Key,
    /// Whether the exchange was `SCRAM-SHA-256-PLUS`, bound to our TLS certificate.
    pub channel_bound: bool,
}

impl core::fmt::Debug for ScramVerified {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("ScramVerified")
            .field("channel_bound", &self.channel_bound)
            .finish_non_exhaustive()
    }
}

/// Sans-I/O SCRAM-SHA-256 verifier for one client.
#[derive(Debug)]
pub struct ScramServer {
    secret: ScramSecret,
    server_nonce: String,
    /// Our certificate's end-point hash when the client connection is TLS; its presence
    /// means `SCRAM-SHA-256-PLUS` was offered.
    channel_binding: Option<ChannelBinding>,
    state: State,
}

impl ScramServer {
    /// Starts an exchange; `nonce_random` must come from a CSPRNG.
    pub fn new(secret: ScramSecret, nonce_random: [u8; NONCE_RANDOM_LEN]) -> Self {
        Self::with_nonce(secret, STANDARD.encode(nonce_random))
    }

    /// Starts an exchange with a nonce from the OS RNG.
    pub fn with_os_rng(secret: ScramSecret) -> Result<Self, AuthError> {
        let mut random = [0u8; NONCE_RANDOM_LEN];
        os_random(&mut random)?;
        Ok(Self::new(secret, random))
    }

    /// Starts an exchange with an explicit server nonce (test vectors).
    pub fn with_nonce(secret: ScramSecret, server_nonce: String) -> Self {
        debug_assert!(is_valid_nonce(&server_nonce));
        Self {
            secret,
            server_nonce,
            channel_binding: None,
            state: State::AwaitingClientFirst,
        }
    }

    /// Sets the binding data of the client connection: `Some` over TLS (our certificate's
    /// hash, [`ChannelBinding::from_certificate`]), `None` over plain TCP or when our
    /// certificate has no end-point hash. `Some` must go with an offer made by
    /// [`Self::encode_request_with`]`(out, true)`, since it decides how 'y' is judged.
    pub fn with_channel_binding(mut self, binding: Option<ChannelBinding>) -> Self {
        self.channel_binding = binding;
        self
    }

    /// Appends AuthenticationSASL offering SCRAM-SHA-256 only (a connection without channel
    /// binding).
    pub fn encode_request(out: &mut BytesMut) {
        Self::encode_request_with(out, false);
    }

    /// Appends AuthenticationSASL: `SCRAM-SHA-256-PLUS` then `SCRAM-SHA-256` when
    /// `plus_offered` (TLS with binding data), else `SCRAM-SHA-256` alone. PostgreSQL lists
    /// the binding variant first, in decreasing order of preference.
    pub fn encode_request_with(out: &mut BytesMut, plus_offered: bool) {
        if plus_offered {
            Authentication::encode_sasl(out, &[SCRAM_SHA_256_PLUS, SCRAM_SHA_256]);
        } else {
            Authentication::encode_sasl(out, &[SCRAM_SHA_256]);
        }
    }

    /// Handles the body of the client's SASLInitialResponse ('p') and appends
    /// AuthenticationSASLContinue with the server-first-message.
    pub fn handle_initial_response(
        &mut self,
        body: &[u8],
        out: &mut BytesMut,
    ) -> Result<(), AuthError> {
        if !matches!(self.state, State::AwaitingClientFirst) {
            return Err(self.fail(AuthError::UnexpectedMessage));
        }
        let initial = SaslInitialResponse::decode_body(body).map_err(|e| self.fail(e.into()))?;
        let binding = self.channel_binding;
        // PostgreSQL accepts -PLUS only when it offered it, i.e. when it has binding data.
        let plus = match (initial.mechanism, binding) {
            (SCRAM_SHA_256_PLUS, Some(_)) => true,
            (SCRAM_SHA_256, _) => false,
            _ => return Err(self.fail(AuthError::UnsupportedMechanism)),
        };
        let data = initial.data.ok_or(AuthError::MalformedScram {
            reason: "missing client-first-message",
        });
        let first = data
            .and_then(|data| {
                parse_client_first(data, |flag| check_flag(flag, plus, binding.is_some()))
            })
            .map_err(|e| self.fail(e))?;
        let channel_binding_b64 = match binding {
            Some(binding) if plus => binding.channel_binding_attribute(first.gs2_header),
            _ => STANDARD.encode(first.gs2_header.as_bytes()),
        };
        let nonce = format!("{}{}", first.nonce, self.server_nonce);
        let server_first = format!(
            "r={nonce},s={},i={}",
            STANDARD.encode(self.secret.salt()),
            self.secret.iterations
        );
        Authentication::SaslContinue {
            data: server_first.as_bytes(),
        }
        .encode(out);
        self.state = State::AwaitingClientFinal {
            client_first_bare: first.bare.to_owned(),
            channel_binding_b64,
            channel_bound: plus,
            server_first,
            nonce,
        };
        Ok(())
    }

    /// Handles the body of the client's SASLResponse ('p'); on success appends
    /// AuthenticationSASLFinal with the server signature. A wrong password is
    /// [`AuthError::InvalidPassword`] (28P01) and nothing is appended; so is a `-PLUS`
    /// client whose `c=` does not carry our binding data
    /// ([`AuthError::ChannelBindingMismatch`], 28000).
    pub fn handle_response(
        &mut self,
        body: &[u8],
        out: &mut BytesMut,
    ) -> Result<ScramVerified, AuthError> {
        let state = core::mem::replace(&mut self.state, State::Failed);
        let State::AwaitingClientFinal {
            client_first_bare,
            channel_binding_b64,
            channel_bound,
            server_first,
            nonce,
        } = state
        else {
            return Err(AuthError::UnexpectedMessage);
        };
        let response = SaslResponse::decode_body(body)?;
        let fin = parse_client_final(response.data)?;
        // Compared as text, as PostgreSQL does: the encoding we produce is canonical.
        if fin.channel_binding_b64 != channel_binding_b64 {
            return Err(if channel_bound {
                AuthError::ChannelBindingMismatch
            } else {
                AuthError::UnexpectedChannelBindingAttribute
            });
        }
        if fin.nonce != nonce {
            return Err(AuthError::NonceMismatch);
        }
        let proof = decode_key(fin.proof_b64).ok_or(AuthError::MalformedScram {
            reason: "invalid proof",
        })?;
        let auth_message = [
            client_first_bare.as_bytes(),
            b",",
            server_first.as_bytes(),
            b",",
            fin.without_proof.as_bytes(),
        ];
        let client_signature = hmac(&self.secret.stored_key, &auth_message);
        let client_key = xor(&proof, &client_signature);
        if !bool::from(sha256(&client_key).ct_eq(&self.secret.stored_key)) {
            return Err(AuthError::InvalidPassword);
        }
        let server_signature = hmac(&self.secret.server_key, &auth_message);
        let server_final = format!("v={}", STANDARD.encode(server_signature));
        Authentication::SaslFinal {
            data: server_final.as_bytes(),
        }
        .encode(out);
        self.state = State::Verified { channel_bound };
        Ok(ScramVerified {
            client_key,
            channel_bound,
        })
    }

    /// Whether the client proved it knows the password.
    pub fn is_verified(&self) -> bool {
        matches!(self.state, State::Verified { .. })
    }

    /// Whether the client proved it knows the password in a `SCRAM-SHA-256-PLUS` exchange
    /// bound to our certificate.
    pub fn is_channel_bound(&self) -> bool {
        matches!(
            self.state,
            State::Verified {
                channel_bound: true
            }
        )
    }

    fn fail(&mut self, error: AuthError) -> AuthError {
        self.state = State::Failed;
        error
    }
}

/// PostgreSQL's checks of the GS2 channel-binding flag against the chosen mechanism (`plus`)
/// and whether we offered `-PLUS` (`plus_offered`, i.e. we have binding data).
fn check_flag(
    flag: ChannelBindingFlag<'_>,
    plus: bool,
    plus_offered: bool,
) -> Result<(), AuthError> {
    match flag {
        ChannelBindingFlag::NotSupported | ChannelBindingFlag::SupportedNotUsed if plus => {
            Err(AuthError::MalformedScram {
                reason: "The client selected SCRAM-SHA-256-PLUS, but the SCRAM message does \
                         not include channel binding data.",
            })
        }
        // The client can bind and we offered binding, yet it believes we cannot: our offer
        // was altered on the way (a downgrade).
        ChannelBindingFlag::SupportedNotUsed if plus_offered => {
            Err(AuthError::ChannelBindingNegotiation)
        }
        ChannelBindingFlag::Used { .. } if !plus => Err(AuthError::MalformedScram {
            reason: "The client selected SCRAM-SHA-256 without channel binding, but the SCRAM \
                     message includes channel binding data.",
        }),
        ChannelBindingFlag::Used { name } if name != TLS_SERVER_END_POINT => {
            Err(AuthError::UnsupportedChannelBindingType {
                name: PeerText::new(name.as_bytes()),
            })
        }
        _ => Ok(()),
    }
}

fn decode_key(b64: &str) -> Option<Key> {
    let mut buf = [0u8; 48];
    let len = STANDARD.decode_slice(b64, &mut buf).ok()?;
    buf[..len].try_into().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 7677 section 3.
    const CLIENT_FIRST: &str = "n,,n=user,r=rOprNGfwEbeRWgbNEkqO";
    const SERVER_FIRST: &str =
        "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
    const CLIENT_FINAL: &str = "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=";
    const SERVER_FINAL: &str = "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=";

    fn rfc_server() -> ScramServer {
        let salt = STANDARD.decode("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap();
        let secret = ScramSecret::from_password(b"pencil", &salt, 4096).unwrap();
        ScramServer::with_nonce(secret, "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0".into())
    }

    fn initial_body(data: &str) -> BytesMut {
        let mut out = BytesMut::new();
        SaslInitialResponse {
            mechanism: SCRAM_SHA_256,
            data: Some(data.as_bytes()),
        }
        .encode(&mut out);
        out.split_off(5)
    }

    fn sasl_data(frame: &[u8]) -> Vec<u8> {
        match Authentication::decode_frame(frame).unwrap() {
            Authentication::SaslContinue { data } | Authentication::SaslFinal { data } => {
                data.to_vec()
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn rfc_7677_vector_server_side() {
        let mut server = rfc_server();
        let mut out = BytesMut::new();
        server
            .handle_initial_response(&initial_body(CLIENT_FIRST), &mut out)
            .unwrap();
        assert_eq!(sasl_data(&out), SERVER_FIRST.as_bytes());
        let mut out = BytesMut::new();
        server
            .handle_response(CLIENT_FINAL.as_bytes(), &mut out)
            .unwrap();
        assert_eq!(sasl_data(&out), SERVER_FINAL.as_bytes());
        assert!(server.is_verified());
    }

    #[test]
    fn wrong_proof_is_invalid_password() {
        let mut server = rfc_server();
        let mut out = BytesMut::new();
        server
            .handle_initial_response(&initial_body(CLIENT_FIRST), &mut out)
            .unwrap();
        let bad = CLIENT_FINAL.replace("p=dHzb", "p=dHza");
        let err = server
            .handle_response(bad.as_bytes(), &mut BytesMut::new())
            .unwrap_err();
        assert_eq!(err, AuthError::InvalidPassword);
        assert_eq!(err.sqlstate(), crate::sqlstate::INVALID_PASSWORD);
        assert!(!server.is_verified());
        assert_eq!(
            server.handle_response(CLIENT_FINAL.as_bytes(), &mut out),
            Err(AuthError::UnexpectedMessage)
        );
    }

    #[test]
    fn gs2_flags_without_binding_data() {
        // 'y' is right when we did not offer -PLUS; it must be echoed as eSws.
        let mut server = rfc_server();
        server
            .handle_initial_response(&initial_body("y,,n=,r=abc"), &mut BytesMut::new())
            .unwrap();
        let err = server.handle_response(
            b"c=biws,r=abc%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=AAAA",
            &mut BytesMut::new(),
        );
        assert_eq!(err, Err(AuthError::UnexpectedChannelBindingAttribute));
        assert_eq!(
            AuthError::UnexpectedChannelBindingAttribute.sqlstate(),
            crate::sqlstate::PROTOCOL_VIOLATION
        );
        // 'p' with the plain mechanism is malformed, whatever the type.
        let mut server = rfc_server();
        let err = server
            .handle_initial_response(
                &initial_body("p=tls-server-end-point,,n=,r=abc"),
                &mut BytesMut::new(),
            )
            .unwrap_err();
        assert_eq!(
            err,
            AuthError::MalformedScram {
                reason: "The client selected SCRAM-SHA-256 without channel binding, but the \
                         SCRAM message includes channel binding data."
            }
        );
        assert_eq!(err.sqlstate(), crate::sqlstate::PROTOCOL_VIOLATION);
    }

    #[test]
    fn plus_without_binding_data_was_not_offered() {
        let mut server = rfc_server();
        let body = plus_body("p=tls-server-end-point,,n=,r=a");
        let err = server
            .handle_initial_response(&body, &mut BytesMut::new())
            .unwrap_err();
        assert_eq!(err, AuthError::UnsupportedMechanism);
        assert_eq!(err.sqlstate(), crate::sqlstate::PROTOCOL_VIOLATION);
        assert_eq!(
            err.to_string(),
            "client selected an invalid SASL authentication mechanism"
        );
    }

    #[test]
    fn mechanisms_offered() {
        let names = |plus| {
            let mut out = BytesMut::new();
            ScramServer::encode_request_with(&mut out, plus);
            let Authentication::Sasl { mechanisms } = Authentication::decode_frame(&out).unwrap()
            else {
                panic!()
            };
            mechanisms.iter().map(<[u8]>::to_vec).collect::<Vec<_>>()
        };
        assert_eq!(
            names(true),
            [b"SCRAM-SHA-256-PLUS".to_vec(), b"SCRAM-SHA-256".to_vec()]
        );
        assert_eq!(names(false), [b"SCRAM-SHA-256".to_vec()]);
        let mut plain = BytesMut::new();
        ScramServer::encode_request(&mut plain);
        let mut explicit = BytesMut::new();
        ScramServer::encode_request_with(&mut explicit, false);
        assert_eq!(plain, explicit);
    }

    fn binding(seed: u8) -> ChannelBinding {
        ChannelBinding::from_end_point_hash(&[seed; 32]).unwrap()
    }

    fn plus_body(data: &str) -> BytesMut {
        let mut out = BytesMut::new();
        SaslInitialResponse {
            mechanism: SCRAM_SHA_256_PLUS,
            data: Some(data.as_bytes()),
        }
        .encode(&mut out);
        out.split_off(5)
    }

    /// One iteration: the parsers under test do not depend on the count.
    fn cheap_server() -> ScramServer {
        let secret = ScramSecret::from_password(b"pw", b"salt", 1).unwrap();
        ScramServer::with_nonce(secret, "servernonce".into())
    }

    fn tls_server() -> ScramServer {
        rfc_server().with_channel_binding(Some(binding(1)))
    }

    #[test]
    fn plus_requires_binding_data_in_the_message() {
        for flag in ["n", "y"] {
            let err = tls_server()
                .handle_initial_response(
                    &plus_body(&format!("{flag},,n=,r=a")),
                    &mut BytesMut::new(),
                )
                .unwrap_err();
            assert_eq!(
                err,
                AuthError::MalformedScram {
                    reason: "The client selected SCRAM-SHA-256-PLUS, but the SCRAM message \
                             does not include channel binding data."
                },
                "{flag}"
            );
            assert_eq!(err.sqlstate(), crate::sqlstate::PROTOCOL_VIOLATION);
        }
    }

    #[test]
    fn y_while_plus_is_offered_is_a_downgrade() {
        let err = tls_server()
            .handle_initial_response(&initial_body("y,,n=,r=abc"), &mut BytesMut::new())
            .unwrap_err();
        assert_eq!(err, AuthError::ChannelBindingNegotiation);
        assert_eq!(
            err.sqlstate(),
            crate::sqlstate::INVALID_AUTHORIZATION_SPECIFICATION
        );
        assert_eq!(err.to_string(), "SCRAM channel binding negotiation error");
        // A client that does not bind at all is fine over TLS.
        tls_server()
            .handle_initial_response(&initial_body(CLIENT_FIRST), &mut BytesMut::new())
            .unwrap();
    }

    #[test]
    fn only_tls_server_end_point_is_supported() {
        let err = tls_server()
            .handle_initial_response(&plus_body("p=tls-unique,,n=,r=a"), &mut BytesMut::new())
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "unsupported SCRAM channel-binding type \"tls-unique\""
        );
        assert_eq!(err.sqlstate(), crate::sqlstate::PROTOCOL_VIOLATION);
        let err = tls_server()
            .handle_initial_response(&plus_body("p=\u{7f}x\u{e9},,n=,r=a"), &mut BytesMut::new())
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "unsupported SCRAM channel-binding type \"?x??\""
        );
        assert_eq!(
            tls_server().handle_initial_response(
                &plus_body("p=tls-server-end-point,a=u,n=,r=a"),
                &mut BytesMut::new()
            ),
            Err(AuthError::AuthzidNotSupported)
        );
    }

    /// The RFC 7677 exchange with `-PLUS`: the client-final-message carries the binding.
    fn plus_exchange(
        server: &mut ScramServer,
        channel_binding_b64: &str,
    ) -> Result<ScramVerified, AuthError> {
        let client_first = "p=tls-server-end-point,,n=user,r=rOprNGfwEbeRWgbNEkqO";
        let mut out = BytesMut::new();
        server.handle_initial_response(&plus_body(client_first), &mut out)?;
        // Recompute the proof for this AuthMessage with the RFC's password.
        let server_first = String::from_utf8(sasl_data(&out)).unwrap();
        let without_proof =
            format!("c={channel_binding_b64},r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0");
        let salt = STANDARD.decode("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap();
        let salted = crate::auth::salted_password(b"pencil", &salt, 4096);
        let client_key = super::super::scram_keys::client_key(&salted);
        let auth_message = format!("n=user,r=rOprNGfwEbeRWgbNEkqO,{server_first},{without_proof}");
        let signature = hmac(&sha256(&client_key), &[auth_message.as_bytes()]);
        let proof = STANDARD.encode(xor(&client_key, &signature));
        let client_final = format!("{without_proof},p={proof}");
        server.handle_response(client_final.as_bytes(), &mut BytesMut::new())
    }

    #[test]
    fn plus_checks_the_binding_data() {
        let expected = STANDARD.encode([b"p=tls-server-end-point,,".as_slice(), &[1; 32]].concat());
        let mut server = tls_server();
        let verified = plus_exchange(&mut server, &expected).unwrap();
        assert!(verified.channel_bound);
        assert!(server.is_verified() && server.is_channel_bound());
        assert!(format!("{verified:?}").contains("channel_bound: true"));
        // Another certificate's hash (a man in the middle with its own certificate).
        let other = STANDARD.encode([b"p=tls-server-end-point,,".as_slice(), &[2; 32]].concat());
        let mut server = tls_server();
        let err = plus_exchange(&mut server, &other).unwrap_err();
        assert_eq!(err, AuthError::ChannelBindingMismatch);
        assert_eq!(
            err.sqlstate(),
            crate::sqlstate::INVALID_AUTHORIZATION_SPECIFICATION
        );
        assert!(!server.is_verified());
        // The header alone, or the plain mechanism's value.
        for bad in [
            STANDARD.encode("p=tls-server-end-point,,"),
            "biws".to_owned(),
        ] {
            let err = plus_exchange(&mut tls_server(), &bad).unwrap_err();
            assert_eq!(err, AuthError::ChannelBindingMismatch, "{bad}");
        }
    }

    #[test]
    fn an_unbound_exchange_over_tls_is_not_channel_bound() {
        let mut server = tls_server();
        server
            .handle_initial_response(&initial_body(CLIENT_FIRST), &mut BytesMut::new())
            .unwrap();
        let verified = server
            .handle_response(CLIENT_FINAL.as_bytes(), &mut BytesMut::new())
            .unwrap();
        assert!(!verified.channel_bound);
        assert!(server.is_verified() && !server.is_channel_bound());
    }

    proptest::proptest! {
        #[test]
        fn initial_responses_never_panic(
            data in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..120),
            plus in proptest::prelude::any::<bool>(),
            tls in proptest::prelude::any::<bool>(),
            prefix in proptest::sample::select(vec!["", "n,,", "y,,", "p=tls-server-end-point,,", "p="]),
        ) {
            let mut message = prefix.as_bytes().to_vec();
            message.extend_from_slice(&data);
            let mut body = BytesMut::new();
            SaslInitialResponse {
                mechanism: if plus { SCRAM_SHA_256_PLUS } else { SCRAM_SHA_256 },
                data: Some(&message),
            }
            .encode(&mut body);
            let mut server = cheap_server().with_channel_binding(tls.then(|| binding(3)));
            let mut out = BytesMut::new();
            if server.handle_initial_response(&body[5..], &mut out).is_err() {
                proptest::prop_assert!(out.is_empty());
            }
            // Raw bytes as a whole body, too.
            let _ = cheap_server()
                .with_channel_binding(Some(binding(3)))
                .handle_initial_response(&data, &mut BytesMut::new());
        }
    }

    #[test]
    fn nonce_must_extend_the_exchanged_one() {
        let mut server = rfc_server();
        server
            .handle_initial_response(&initial_body(CLIENT_FIRST), &mut BytesMut::new())
            .unwrap();
        let bad = CLIENT_FINAL.replace("k0,p=", "k1,p=");
        assert_eq!(
            server.handle_response(bad.as_bytes(), &mut BytesMut::new()),
            Err(AuthError::NonceMismatch)
        );
    }
}
