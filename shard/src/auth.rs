//! Which `pgtier_wire::auth` exchange the shard runs for an auth-file entry, in PostgreSQL's
//! text form (plain, `md5<hex>`, `SCRAM-SHA-256$...`): the verifier a client is checked
//! against, and the credential a server login proves itself with. The exchanges themselves
//! (MD5, SCRAM-SHA-256, both sides) live in the wire crate.

use pgtier_wire::auth::{
    ClientAuth, DEFAULT_ITERATIONS, KEY_LEN, Md5Secret, Md5Server, NONCE_RANDOM_LEN, SALT_LEN,
    ScramSecret, os_random,
};

const SCRAM_PREFIX: &str = "SCRAM-SHA-256$";

/// Random bytes from the OS; without an entropy source, a clock-derived value rather than a
/// failed login.
pub fn random_bytes<const N: usize>() -> [u8; N] {
    let mut out = [0u8; N];
    if os_random(&mut out).is_err() {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        for (i, byte) in out.iter_mut().enumerate() {
            *byte = (nanos >> ((i % 16) * 8)) as u8 ^ (i as u8).wrapping_mul(31);
        }
    }
    out
}

fn is_scram_secret(stored: &str) -> bool {
    stored.starts_with(SCRAM_PREFIX)
}

fn is_md5_hash(stored: &str) -> bool {
    stored.len() == 35 && stored.starts_with("md5")
}

/// A user's SCRAM verifier, cached per shard because deriving one from a plaintext is
/// deliberately slow, and the ClientKey its last verified client proved (what a server login
/// needs when the auth file holds only the SCRAM secret).
#[derive(Debug, Clone)]
pub struct UserScram {
    pub secret: ScramSecret,
    pub client_key: Option<[u8; KEY_LEN]>,
}

/// The SCRAM secret an auth-file entry verifies against; `None` for an md5 hash (SCRAM
/// cannot use it) or an unreadable secret.
pub fn scram_secret_for(stored: &str) -> Option<ScramSecret> {
    if is_scram_secret(stored) {
        return ScramSecret::parse(stored).ok();
    }
    if is_md5_hash(stored) {
        return None;
    }
    ScramSecret::from_password(
        stored.as_bytes(),
        &random_bytes::<SALT_LEN>(),
        DEFAULT_ITERATIONS,
    )
    .ok()
}

/// A secret no password matches, so an unknown user's exchange fails at the proof, as
/// PostgreSQL's does, instead of revealing that the user does not exist.
pub fn decoy_scram_secret() -> ScramSecret {
    ScramSecret::unmatchable(random_bytes(), random_bytes())
}

/// The MD5 verifier for `user`'s entry with a fresh salt. An unknown user or a SCRAM secret
/// (MD5 cannot use it) gets a random secret, so the answer is refused like a wrong password.
pub fn md5_server_for(user: &str, stored: Option<&str>) -> Md5Server {
    let secret = match stored {
        Some(stored) if !is_scram_secret(stored) => {
            Md5Secret::from_stored(user.as_bytes(), stored.as_bytes())
        }
        _ => Md5Secret::from_stored(user.as_bytes(), &random_bytes::<32>()),
    };
    Md5Server::new(secret, random_bytes())
}

/// The login state machine for a server connection of `user` with the configured `password`:
/// an md5 hash logs in with MD5 only; a SCRAM secret with SCRAM only, reusing the ClientKey a
/// client proved to us (`client_key`); a plaintext with whatever the server asks for.
pub fn server_login(user: &str, password: &str, client_key: Option<[u8; KEY_LEN]>) -> ClientAuth {
    let nonce = random_bytes::<NONCE_RANDOM_LEN>();
    if is_md5_hash(password) {
        let secret = Md5Secret::from_stored(user.as_bytes(), password.as_bytes());
        return ClientAuth::with_md5_hash(user.as_bytes(), secret);
    }
    if is_scram_secret(password)
        && let (Ok(secret), Some(client_key)) = (ScramSecret::parse(password), client_key)
    {
        return ClientAuth::with_scram_keys(user.as_bytes(), client_key, secret.server_key, nonce);
    }
    ClientAuth::new(user.as_bytes(), password.as_bytes(), nonce)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use pgtier_wire::auth::{AuthProgress, ScramServer, md5_password_hash};

    #[test]
    fn md5_verifier_accepts_plain_and_hashed_entries_only() {
        let hash = md5_password_hash(b"alice", b"secret");
        let hash = std::str::from_utf8(&hash).expect("ascii");
        for stored in [Some("secret"), Some(hash)] {
            let server = md5_server_for("alice", stored);
            let mut request = BytesMut::new();
            server.encode_request(&mut request);
            let mut reply = BytesMut::new();
            let mut login = server_login("alice", hash, None);
            login.handle_frame(&request, &mut reply).expect("answered");
            assert_eq!(server.handle_password(&reply[5..]), Ok(()));
        }
        let scram = decoy_scram_secret().to_text();
        for stored in [None, Some("other"), Some(scram.as_str())] {
            let server = md5_server_for("alice", stored);
            let mut request = BytesMut::new();
            server.encode_request(&mut request);
            let mut reply = BytesMut::new();
            let mut login = server_login("alice", "secret", None);
            login.handle_frame(&request, &mut reply).expect("answered");
            assert!(server.handle_password(&reply[5..]).is_err());
        }
    }

    #[test]
    fn scram_secret_entry_logs_in_with_the_recovered_client_key() {
        let secret = scram_secret_for("pencil").expect("plaintext derives");
        let text = secret.to_text();
        assert_eq!(scram_secret_for(&text), Some(secret.clone()));
        assert_eq!(
            scram_secret_for("md50123456789abcdef0123456789abcdef"),
            None
        );
        // A client proves the password to the proxy...
        let mut front = ScramServer::new(secret.clone(), random_bytes());
        let verified = scram_login(&mut server_login("bob", "pencil", None), &mut front);
        // ...and the proxy logs in to a server holding the same secret without it.
        let mut back = ScramServer::new(secret.clone(), random_bytes());
        let mut login = server_login("bob", &text, Some(verified.client_key));
        scram_login(&mut login, &mut back);
        assert!(login.is_authenticated());
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
        crate::proto::auth_ok(&mut ok);
        assert_eq!(
            login.handle_frame(&ok, &mut BytesMut::new()),
            Ok(AuthProgress::Authenticated)
        );
        verified
    }
}
