//! The server side of SCRAM-SHA-256: verifies a client against a [`ScramSecret`].
//!
//! Flow: send [`ScramServer::encode_request`] (AuthenticationSASL offering SCRAM-SHA-256
//! only), pass the client's SASLInitialResponse body to [`ScramServer::handle_initial_response`]
//! (appends AuthenticationSASLContinue), then its SASLResponse body to
//! [`ScramServer::handle_response`] (appends AuthenticationSASLFinal). The caller then sends
//! AuthenticationOk. Channel binding is never offered: GS2 flags 'n' and 'y' are accepted
//! ('y' is correct since no -PLUS mechanism was advertised), 'p' is refused.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use bytes::BytesMut;
use subtle::ConstantTimeEq;

use super::scram_keys::{Key, hmac, sha256, xor};
use super::scram_message::{is_valid_nonce, parse_client_final, parse_client_first};
use super::{AuthError, NONCE_RANDOM_LEN, SCRAM_SHA_256, ScramSecret, os_random};
use crate::messages::Message;
use crate::messages::backend::Authentication;
use crate::messages::frontend::{SaslInitialResponse, SaslResponse};

/// Where the exchange is.
#[derive(Debug)]
enum State {
    AwaitingClientFirst,
    AwaitingClientFinal {
        client_first_bare: String,
        gs2_header: String,
        server_first: String,
        nonce: String,
    },
    Verified,
    Failed,
}

/// What a successful exchange proves. Its Debug output hides the key.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct ScramVerified {
    /// The client's ClientKey, recovered from its proof. With the secret's ServerKey it lets
    /// the proxy log in to a server holding the same secret without knowing the password.
    pub client_key: Key,
}

impl core::fmt::Debug for ScramVerified {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("ScramVerified { .. }")
    }
}

/// Sans-I/O SCRAM-SHA-256 verifier for one client.
#[derive(Debug)]
pub struct ScramServer {
    secret: ScramSecret,
    server_nonce: String,
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
            state: State::AwaitingClientFirst,
        }
    }

    /// Appends AuthenticationSASL offering SCRAM-SHA-256.
    pub fn encode_request(out: &mut BytesMut) {
        Authentication::encode_sasl(out, &[SCRAM_SHA_256]);
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
        if initial.mechanism != SCRAM_SHA_256 {
            return Err(self.fail(AuthError::UnsupportedMechanism));
        }
        let data = initial.data.ok_or(AuthError::MalformedScram {
            reason: "missing client-first-message",
        });
        let first = data
            .and_then(parse_client_first)
            .map_err(|e| self.fail(e))?;
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
            gs2_header: first.gs2_header.to_owned(),
            server_first,
            nonce,
        };
        Ok(())
    }

    /// Handles the body of the client's SASLResponse ('p'); on success appends
    /// AuthenticationSASLFinal with the server signature. A wrong password is
    /// [`AuthError::InvalidPassword`] (28P01) and nothing is appended.
    pub fn handle_response(
        &mut self,
        body: &[u8],
        out: &mut BytesMut,
    ) -> Result<ScramVerified, AuthError> {
        let state = core::mem::replace(&mut self.state, State::Failed);
        let State::AwaitingClientFinal {
            client_first_bare,
            gs2_header,
            server_first,
            nonce,
        } = state
        else {
            return Err(AuthError::UnexpectedMessage);
        };
        let response = SaslResponse::decode_body(body)?;
        let fin = parse_client_final(response.data)?;
        if fin.channel_binding_b64 != STANDARD.encode(gs2_header.as_bytes()) {
            return Err(AuthError::ChannelBindingMismatch);
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
        self.state = State::Verified;
        Ok(ScramVerified { client_key })
    }

    /// Whether the client proved it knows the password.
    pub fn is_verified(&self) -> bool {
        matches!(self.state, State::Verified)
    }

    fn fail(&mut self, error: AuthError) -> AuthError {
        self.state = State::Failed;
        error
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
    use crate::messages::frontend::SaslInitialResponse;

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
    fn channel_binding_rules() {
        let mut server = rfc_server();
        let err = server
            .handle_initial_response(
                &initial_body("p=tls-server-end-point,,n=,r=abc"),
                &mut BytesMut::new(),
            )
            .unwrap_err();
        assert_eq!(err, AuthError::ChannelBindingNotSupported);
        let mut server = rfc_server();
        server
            .handle_initial_response(&initial_body("y,,n=,r=abc"), &mut BytesMut::new())
            .unwrap();
        let err = server.handle_response(
            b"c=biws,r=abc%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=AAAA",
            &mut BytesMut::new(),
        );
        assert_eq!(err, Err(AuthError::ChannelBindingMismatch));
        let mut plus = BytesMut::new();
        SaslInitialResponse {
            mechanism: super::super::SCRAM_SHA_256_PLUS,
            data: Some(b"p=x,,n=,r=a"),
        }
        .encode(&mut plus);
        let mut server = rfc_server();
        assert_eq!(
            server.handle_initial_response(&plus[5..], &mut BytesMut::new()),
            Err(AuthError::UnsupportedMechanism)
        );
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
