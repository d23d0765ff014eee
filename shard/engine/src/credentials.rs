//! Which `pgtier_wire::auth` exchange the engine runs for an auth-file entry, in PostgreSQL's
//! text form (plain, `md5<hex>`, `SCRAM-SHA-256$...`): the verifier a client is checked
//! against, and the credential a server login proves itself with. The exchanges themselves
//! (MD5, SCRAM-SHA-256, both sides) live in the wire crate; randomness comes from the
//! engine's [`Random`], and its failure fails the login.

use pgtier_wire::auth::{
    ClientAuth, DEFAULT_ITERATIONS, KEY_LEN, Md5Secret, Md5Server, NONCE_RANDOM_LEN, SALT_LEN,
    ScramSecret, md5_password_hash,
};

use crate::random::{self, Random, RandomUnavailable};

const SCRAM_PREFIX: &str = "SCRAM-SHA-256$";

pub(crate) fn is_scram_secret(stored: &str) -> bool {
    stored.starts_with(SCRAM_PREFIX)
}

pub(crate) fn is_md5_hash(stored: &str) -> bool {
    stored.len() == 35 && stored.starts_with("md5")
}

/// The SCRAM secret an auth-file entry verifies against; `Ok(None)` for an md5 hash (SCRAM
/// cannot use it) or an unreadable secret.
pub(crate) fn scram_secret_for(
    stored: &str,
    random: &mut dyn Random,
) -> Result<Option<ScramSecret>, RandomUnavailable> {
    if is_scram_secret(stored) {
        return Ok(ScramSecret::parse(stored).ok());
    }
    if is_md5_hash(stored) {
        return Ok(None);
    }
    let salt = random::bytes::<SALT_LEN>(random)?;
    Ok(ScramSecret::from_password(stored.as_bytes(), &salt, DEFAULT_ITERATIONS).ok())
}

/// A secret no password matches, so an unknown user's exchange fails at the proof, as
/// PostgreSQL's does, instead of revealing that the user does not exist.
pub(crate) fn decoy_scram_secret(
    random: &mut dyn Random,
) -> Result<ScramSecret, RandomUnavailable> {
    Ok(ScramSecret::unmatchable(
        random::bytes(random)?,
        random::bytes(random)?,
    ))
}

/// The MD5 verifier for `user`'s entry with a fresh salt. An unknown user or a SCRAM secret
/// (MD5 cannot use it) gets a random secret, so the answer is refused like a wrong password.
pub(crate) fn md5_server_for(
    user: &str,
    stored: Option<&str>,
    random: &mut dyn Random,
) -> Result<Md5Server, RandomUnavailable> {
    let secret = match stored {
        Some(stored) if !is_scram_secret(stored) => {
            Md5Secret::from_stored(user.as_bytes(), stored.as_bytes())
        }
        _ => Md5Secret::from_stored(user.as_bytes(), &random::bytes::<32>(random)?),
    };
    Ok(Md5Server::new(secret, random::bytes(random)?))
}

/// Whether the cleartext `password` a client sent (`auth_type = plain`) is `user`'s stored
/// entry: compared with a plaintext or md5 entry through its md5 hash, and with a SCRAM
/// secret by deriving the secret from the password with the same salt and iterations.
pub(crate) fn cleartext_matches(user: &str, password: &[u8], stored: Option<&str>) -> bool {
    let Some(stored) = stored else {
        return false;
    };
    if is_scram_secret(stored) {
        let Ok(secret) = ScramSecret::parse(stored) else {
            return false;
        };
        let Ok(derived) = ScramSecret::from_password(password, secret.salt(), secret.iterations)
        else {
            return false;
        };
        return same_bytes(&derived.stored_key, &secret.stored_key)
            & same_bytes(&derived.server_key, &secret.server_key);
    }
    let expected = Md5Secret::from_stored(user.as_bytes(), stored.as_bytes());
    same_bytes(
        &md5_password_hash(user.as_bytes(), password),
        expected.hash(),
    )
}

/// Equality without an early exit, so the time taken does not say how much matched.
fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    let differences = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    a.len() == b.len() && std::hint::black_box(differences) == 0
}

/// The login state machine for a server connection of `user` with the configured `password`:
/// an md5 hash logs in with MD5 only; a SCRAM secret with SCRAM only, reusing the ClientKey a
/// client proved to us (`client_key`); a plaintext with whatever the server asks for.
pub(crate) fn server_login(
    user: &str,
    password: &str,
    client_key: Option<[u8; KEY_LEN]>,
    random: &mut dyn Random,
) -> Result<ClientAuth, RandomUnavailable> {
    let nonce = random::bytes::<NONCE_RANDOM_LEN>(random)?;
    if is_md5_hash(password) {
        let secret = Md5Secret::from_stored(user.as_bytes(), password.as_bytes());
        return Ok(ClientAuth::with_md5_hash(user.as_bytes(), secret));
    }
    if is_scram_secret(password)
        && let (Ok(secret), Some(client_key)) = (ScramSecret::parse(password), client_key)
    {
        return Ok(ClientAuth::with_scram_keys(
            user.as_bytes(),
            client_key,
            secret.server_key,
            nonce,
        ));
    }
    Ok(ClientAuth::new(user.as_bytes(), password.as_bytes(), nonce))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::random::{NoRandom, SeededRandom};
    use bytes::BytesMut;
    use pgtier_wire::auth::{AuthProgress, ScramServer};

    #[test]
    fn a_cleartext_password_matches_every_stored_form() {
        let mut random = SeededRandom::new(7);
        let hash = md5_password_hash(b"alice", b"secret");
        let hash = std::str::from_utf8(&hash).expect("ascii").to_string();
        let scram = scram_secret_for("secret", &mut random)
            .expect("random")
            .expect("derived")
            .to_text();
        for stored in ["secret", hash.as_str(), scram.as_str()] {
            assert!(
                cleartext_matches("alice", b"secret", Some(stored)),
                "{stored}"
            );
            assert!(
                !cleartext_matches("alice", b"wrong", Some(stored)),
                "{stored}"
            );
        }
        // The hash itself is not the password.
        assert!(!cleartext_matches("alice", hash.as_bytes(), Some(&hash)));
        assert!(!cleartext_matches("alice", b"secret", None));
        assert!(!cleartext_matches(
            "alice",
            b"secret",
            Some("SCRAM-SHA-256$bad")
        ));
    }

    #[test]
    fn md5_verifier_accepts_plain_and_hashed_entries_only() {
        let mut random = SeededRandom::new(1);
        let hash = md5_password_hash(b"alice", b"secret");
        let hash = std::str::from_utf8(&hash).expect("ascii");
        for stored in [Some("secret"), Some(hash)] {
            let server = md5_server_for("alice", stored, &mut random).expect("random");
            let mut request = BytesMut::new();
            server.encode_request(&mut request);
            let mut reply = BytesMut::new();
            let mut login = server_login("alice", hash, None, &mut random).expect("random");
            login.handle_frame(&request, &mut reply).expect("answered");
            assert_eq!(server.handle_password(&reply[5..]), Ok(()));
        }
        let scram = decoy_scram_secret(&mut random).expect("random").to_text();
        for stored in [None, Some("other"), Some(scram.as_str())] {
            let server = md5_server_for("alice", stored, &mut random).expect("random");
            let mut request = BytesMut::new();
            server.encode_request(&mut request);
            let mut reply = BytesMut::new();
            let mut login = server_login("alice", "secret", None, &mut random).expect("random");
            login.handle_frame(&request, &mut reply).expect("answered");
            assert!(server.handle_password(&reply[5..]).is_err());
        }
    }

    #[test]
    fn scram_secret_entry_logs_in_with_the_recovered_client_key() {
        let mut random = SeededRandom::new(2);
        let secret = scram_secret_for("pencil", &mut random)
            .expect("random")
            .expect("plaintext derives");
        let text = secret.to_text();
        assert_eq!(
            scram_secret_for(&text, &mut random).expect("random"),
            Some(secret.clone())
        );
        assert_eq!(
            scram_secret_for("md50123456789abcdef0123456789abcdef", &mut random).expect("random"),
            None
        );
        // A client proves the password to the proxy...
        let mut front = ScramServer::new(secret.clone(), random::bytes(&mut random).expect("r"));
        let mut login = server_login("bob", "pencil", None, &mut random).expect("random");
        let verified = scram_login(&mut login, &mut front);
        // ...and the proxy logs in to a server holding the same secret without it.
        let mut back = ScramServer::new(secret, random::bytes(&mut random).expect("r"));
        let mut login =
            server_login("bob", &text, Some(verified.client_key), &mut random).expect("random");
        scram_login(&mut login, &mut back);
        assert!(login.is_authenticated());
    }

    #[test]
    fn every_credential_fails_closed_without_randomness() {
        assert!(scram_secret_for("pencil", &mut NoRandom).is_err());
        assert!(decoy_scram_secret(&mut NoRandom).is_err());
        assert!(md5_server_for("alice", Some("x"), &mut NoRandom).is_err());
        assert!(server_login("alice", "x", None, &mut NoRandom).is_err());
    }

    fn scram_login(
        login: &mut ClientAuth,
        server: &mut ScramServer,
    ) -> pgtier_wire::auth::ScramVerified {
        let mut request = BytesMut::new();
        ScramServer::encode_request(&mut request);
        let mut reply = BytesMut::new();
        login.handle_frame(&request, &mut reply).expect("first");
        let mut challenge = BytesMut::new();
        server
            .handle_initial_response(&reply[5..], &mut challenge)
            .expect("challenge");
        let mut reply = BytesMut::new();
        login.handle_frame(&challenge, &mut reply).expect("final");
        let mut fin = BytesMut::new();
        let verified = server
            .handle_response(&reply[5..], &mut fin)
            .expect("proof");
        login
            .handle_frame(&fin, &mut BytesMut::new())
            .expect("signature");
        let mut ok = BytesMut::new();
        crate::messages::auth_ok(&mut ok);
        assert_eq!(
            login.handle_frame(&ok, &mut BytesMut::new()),
            Ok(AuthProgress::Authenticated)
        );
        verified
    }
}
