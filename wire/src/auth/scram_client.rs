//! The client side of SCRAM-SHA-256, used to log in to PostgreSQL.
//!
//! Flow: on AuthenticationSASL call [`ScramClient::encode_initial_response`]; on
//! AuthenticationSASLContinue, [`ScramClient::handle_server_first`] (appends SASLResponse);
//! on AuthenticationSASLFinal, [`ScramClient::handle_server_final`] (verifies the server).
//! pgtier connects to servers without TLS channel binding, so the GS2 header is `n,,`.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use bytes::BytesMut;
use subtle::ConstantTimeEq;

use super::scram_keys::{
    Key, client_key, hmac, prepare_password, salted_password, server_key, sha256, xor,
};
use super::scram_message::{ServerFinal, is_valid_nonce, parse_server_final, parse_server_first};
use super::{AuthError, NONCE_RANDOM_LEN, SCRAM_SHA_256, os_random};
use crate::messages::Message;
use crate::messages::frontend::{SaslInitialResponse, SaslResponse};

const GS2_HEADER: &str = "n,,";
/// base64("n,,").
const CHANNEL_BINDING: &str = "biws";

/// Largest iteration count accepted from a server by default; bounds the CPU a hostile or
/// misconfigured server can make us spend.
pub const DEFAULT_MAX_ITERATIONS: u32 = 1 << 20;

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
    AwaitingServerFirst { client_first_bare: String },
    AwaitingServerFinal { server_signature: Key },
    Authenticated,
    Failed,
}

/// Sans-I/O SCRAM-SHA-256 client for one login.
pub struct ScramClient {
    credential: Credential,
    client_nonce: String,
    max_iterations: u32,
    state: State,
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

    /// A client with a nonce from the OS RNG.
    pub fn with_os_rng(password: &[u8]) -> Result<Self, AuthError> {
        let mut random = [0u8; NONCE_RANDOM_LEN];
        os_random(&mut random)?;
        Ok(Self::new(password, random))
    }

    /// A client with an explicit nonce (test vectors).
    pub fn with_nonce(password: &[u8], client_nonce: String) -> Self {
        debug_assert!(is_valid_nonce(&client_nonce));
        let credential = Credential::Password(prepare_password(password).into_owned());
        Self {
            credential,
            client_nonce,
            max_iterations: DEFAULT_MAX_ITERATIONS,
            state: State::Initial,
        }
    }

    /// A client proving itself with keys recovered by [`super::ScramServer`] instead of a
    /// password; works when the server stores the same SCRAM secret as the proxy.
    pub fn from_keys(
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
            state: State::Initial,
        }
    }

    /// Sets the largest iteration count accepted from the server.
    pub fn max_iterations(mut self, max_iterations: u32) -> Self {
        self.max_iterations = max_iterations;
        self
    }

    /// Appends SASLInitialResponse choosing SCRAM-SHA-256 with the client-first-message.
    pub fn encode_initial_response(&mut self, out: &mut BytesMut) -> Result<(), AuthError> {
        if !matches!(self.state, State::Initial) {
            return Err(AuthError::UnexpectedMessage);
        }
        let client_first_bare = format!("n=,r={}", self.client_nonce);
        let client_first = format!("{GS2_HEADER}{client_first_bare}");
        SaslInitialResponse {
            mechanism: SCRAM_SHA_256,
            data: Some(client_first.as_bytes()),
        }
        .encode(out);
        self.state = State::AwaitingServerFirst { client_first_bare };
        Ok(())
    }

    /// Handles AuthenticationSASLContinue's data and appends SASLResponse with the
    /// client-final-message.
    pub fn handle_server_first(
        &mut self,
        data: &[u8],
        out: &mut BytesMut,
    ) -> Result<(), AuthError> {
        let state = core::mem::replace(&mut self.state, State::Failed);
        let State::AwaitingServerFirst { client_first_bare } = state else {
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
        let without_proof = format!("c={CHANNEL_BINDING},r={}", first.nonce);
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
        };
        Ok(())
    }

    /// Handles AuthenticationSASLFinal's data: the server must prove it knows the secret.
    pub fn handle_server_final(&mut self, data: &[u8]) -> Result<(), AuthError> {
        let state = core::mem::replace(&mut self.state, State::Failed);
        let State::AwaitingServerFinal { server_signature } = state else {
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
        self.state = State::Authenticated;
        Ok(())
    }

    pub fn is_authenticated(&self) -> bool {
        matches!(self.state, State::Authenticated)
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
                let salted = salted_password(password, &salt[..len], iterations);
                Ok((client_key(&salted), server_key(&salted)))
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

    fn run(
        client: &mut ScramClient,
        server: &mut crate::auth::ScramServer,
    ) -> Result<crate::auth::ScramVerified, AuthError> {
        use crate::messages::backend::Authentication;
        let mut c2s = BytesMut::new();
        client.encode_initial_response(&mut c2s)?;
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
