//! Password exchanges: MD5 and SCRAM-SHA-256, as the server side (checking a client against
//! the auth file) and as the client side (logging in to PostgreSQL). Pure state machines; the
//! shard moves their messages.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use hmac::{Hmac, Mac};
use md5::{Digest as _, Md5};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

const SCRAM_ITERATIONS: u32 = 4096;

pub fn random_bytes<const N: usize>() -> [u8; N] {
    let mut out = [0u8; N];
    // Without an entropy source, fall back to a clock-derived value rather than fail a login.
    if getrandom::fill(&mut out).is_err() {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        for (i, byte) in out.iter_mut().enumerate() {
            *byte = (nanos >> ((i % 16) * 8)) as u8 ^ (i as u8).wrapping_mul(31);
        }
    }
    out
}

fn md5_hex(parts: &[&[u8]]) -> String {
    let mut hasher = Md5::new();
    for part in parts {
        hasher.update(part);
    }
    let digest = hasher.finalize();
    let mut out = String::with_capacity(32);
    for byte in digest {
        out.push_str(&format!("{byte:02x}"));
    }
    out
}

/// The md5 "inner" hash PostgreSQL stores: `md5` + md5(password + user).
pub fn md5_stored(password: &str, user: &str) -> String {
    format!("md5{}", md5_hex(&[password.as_bytes(), user.as_bytes()]))
}

/// What a client must answer to an MD5 challenge with `salt`, given the stored form.
fn md5_answer_from_stored(stored_md5: &str, salt: [u8; 4]) -> String {
    let inner = stored_md5.trim_start_matches("md5");
    format!("md5{}", md5_hex(&[inner.as_bytes(), &salt]))
}

/// The PasswordMessage payload for a server's MD5 challenge.
pub fn md5_client_answer(password: &str, user: &str, salt: [u8; 4]) -> String {
    let stored = if is_md5_hash(password) {
        password.to_string()
    } else {
        md5_stored(password, user)
    };
    md5_answer_from_stored(&stored, salt)
}

fn is_md5_hash(password: &str) -> bool {
    password.len() == 35 && password.starts_with("md5")
}

/// Checks a client's MD5 answer against the auth file's entry.
pub fn md5_verify(stored: &str, user: &str, salt: [u8; 4], answer: &str) -> bool {
    let expected = if is_md5_hash(stored) {
        md5_answer_from_stored(stored, salt)
    } else if stored.starts_with("SCRAM-SHA-256$") {
        return false;
    } else {
        md5_answer_from_stored(&md5_stored(stored, user), salt)
    };
    constant_time_eq(expected.as_bytes(), answer.as_bytes())
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn hmac(key: &[u8], data: &[u8]) -> [u8; 32] {
    let mut mac = match HmacSha256::new_from_slice(key) {
        Ok(mac) => mac,
        Err(_) => unreachable_hmac(),
    };
    mac.update(data);
    mac.finalize().into_bytes().into()
}

#[cold]
fn unreachable_hmac() -> ! {
    // HMAC accepts keys of any length; this cannot happen.
    std::process::abort()
}

fn sha256(data: &[u8]) -> [u8; 32] {
    use sha2::Digest;
    Sha256::digest(data).into()
}

/// SCRAM keys derived from a password or read from a stored secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScramSecret {
    pub iterations: u32,
    pub salt: Vec<u8>,
    pub stored_key: [u8; 32],
    pub server_key: [u8; 32],
}

impl ScramSecret {
    pub fn from_password(password: &str, salt: &[u8], iterations: u32) -> ScramSecret {
        let salted = salted_password(password, salt, iterations);
        let client_key = hmac(&salted, b"Client Key");
        ScramSecret {
            iterations,
            salt: salt.to_vec(),
            stored_key: sha256(&client_key),
            server_key: hmac(&salted, b"Server Key"),
        }
    }

    /// Parses `SCRAM-SHA-256$<iter>:<salt>$<StoredKey>:<ServerKey>`.
    pub fn parse(text: &str) -> Option<ScramSecret> {
        let rest = text.strip_prefix("SCRAM-SHA-256$")?;
        let (iter_salt, keys) = rest.split_once('$')?;
        let (iterations, salt) = iter_salt.split_once(':')?;
        let (stored, server) = keys.split_once(':')?;
        Some(ScramSecret {
            iterations: iterations.parse().ok()?,
            salt: B64.decode(salt).ok()?,
            stored_key: B64.decode(stored).ok()?.try_into().ok()?,
            server_key: B64.decode(server).ok()?.try_into().ok()?,
        })
    }

    /// The secret for an auth-file entry; `None` for an md5 hash (SCRAM cannot use it).
    pub fn for_stored(stored: &str) -> Option<ScramSecret> {
        if stored.starts_with("SCRAM-SHA-256$") {
            return ScramSecret::parse(stored);
        }
        if is_md5_hash(stored) {
            return None;
        }
        Some(ScramSecret::from_password(
            stored,
            &random_bytes::<16>(),
            SCRAM_ITERATIONS,
        ))
    }
}

fn salted_password(password: &str, salt: &[u8], iterations: u32) -> [u8; 32] {
    let mut out = [0u8; 32];
    pbkdf2::pbkdf2_hmac::<Sha256>(password.as_bytes(), salt, iterations, &mut out);
    out
}

fn attribute(message: &str, name: char) -> Option<&str> {
    message.split(',').find_map(|part| {
        let mut chars = part.chars();
        (chars.next() == Some(name) && chars.next() == Some('=')).then(|| &part[2..])
    })
}

/// Server side of SCRAM-SHA-256 (checking a client).
#[derive(Debug)]
pub struct ScramServer {
    secret: ScramSecret,
    client_first_bare: String,
    server_first: String,
    nonce: String,
}

/// Why a SCRAM exchange failed.
#[derive(Debug, PartialEq, Eq)]
pub enum ScramError {
    Malformed(&'static str),
    WrongPassword,
}

impl ScramServer {
    /// Handles the SASLInitialResponse data; returns the server-first message.
    pub fn start(
        secret: ScramSecret,
        client_first: &str,
    ) -> Result<(ScramServer, String), ScramError> {
        let bare = client_first
            .strip_prefix("n,,")
            .or_else(|| client_first.strip_prefix("y,,"))
            .ok_or(ScramError::Malformed("channel binding is not supported"))?;
        let client_nonce = attribute(bare, 'r').ok_or(ScramError::Malformed("missing nonce"))?;
        let server_nonce = B64.encode(random_bytes::<18>());
        let nonce = format!("{client_nonce}{server_nonce}");
        let server_first = format!(
            "r={nonce},s={},i={}",
            B64.encode(&secret.salt),
            secret.iterations
        );
        let state = ScramServer {
            secret,
            client_first_bare: bare.to_string(),
            server_first: server_first.clone(),
            nonce,
        };
        Ok((state, server_first))
    }

    /// Handles the SASLResponse; returns the server-final message on success.
    pub fn finish(&self, client_final: &str) -> Result<String, ScramError> {
        let (without_proof, proof) = client_final
            .rsplit_once(",p=")
            .ok_or(ScramError::Malformed("missing proof"))?;
        if attribute(without_proof, 'r') != Some(self.nonce.as_str()) {
            return Err(ScramError::Malformed("nonce mismatch"));
        }
        let proof: [u8; 32] = B64
            .decode(proof)
            .ok()
            .and_then(|p| p.try_into().ok())
            .ok_or(ScramError::Malformed("bad proof"))?;
        let auth_message = format!(
            "{},{},{}",
            self.client_first_bare, self.server_first, without_proof
        );
        let signature = hmac(&self.secret.stored_key, auth_message.as_bytes());
        let mut client_key = [0u8; 32];
        for i in 0..32 {
            client_key[i] = proof[i] ^ signature[i];
        }
        if !constant_time_eq(&sha256(&client_key), &self.secret.stored_key) {
            return Err(ScramError::WrongPassword);
        }
        let server_signature = hmac(&self.secret.server_key, auth_message.as_bytes());
        Ok(format!("v={}", B64.encode(server_signature)))
    }
}

/// Client side of SCRAM-SHA-256 (logging in to a server).
#[derive(Debug)]
pub struct ScramClient {
    password: String,
    client_first_bare: String,
    client_nonce: String,
    expected_server_signature: Option<[u8; 32]>,
}

impl ScramClient {
    /// Returns the state and the client-first message to send.
    pub fn start(password: &str) -> (ScramClient, String) {
        let client_nonce = B64.encode(random_bytes::<18>());
        let client_first_bare = format!("n=,r={client_nonce}");
        let message = format!("n,,{client_first_bare}");
        let state = ScramClient {
            password: password.to_string(),
            client_first_bare,
            client_nonce,
            expected_server_signature: None,
        };
        (state, message)
    }

    /// Handles server-first; returns client-final.
    pub fn on_server_first(&mut self, server_first: &str) -> Result<String, ScramError> {
        let nonce = attribute(server_first, 'r').ok_or(ScramError::Malformed("missing nonce"))?;
        if !nonce.starts_with(&self.client_nonce) {
            return Err(ScramError::Malformed("server nonce does not extend ours"));
        }
        let salt = attribute(server_first, 's')
            .and_then(|s| B64.decode(s).ok())
            .ok_or(ScramError::Malformed("bad salt"))?;
        let iterations: u32 = attribute(server_first, 'i')
            .and_then(|i| i.parse().ok())
            .filter(|i| (1..=10_000_000).contains(i))
            .ok_or(ScramError::Malformed("bad iteration count"))?;
        let salted = salted_password(&self.password, &salt, iterations);
        let client_key = hmac(&salted, b"Client Key");
        let stored_key = sha256(&client_key);
        let without_proof = format!("c=biws,r={nonce}");
        let auth_message = format!(
            "{},{},{}",
            self.client_first_bare, server_first, without_proof
        );
        let signature = hmac(&stored_key, auth_message.as_bytes());
        let mut proof = [0u8; 32];
        for i in 0..32 {
            proof[i] = client_key[i] ^ signature[i];
        }
        let server_key = hmac(&salted, b"Server Key");
        self.expected_server_signature = Some(hmac(&server_key, auth_message.as_bytes()));
        Ok(format!("{without_proof},p={}", B64.encode(proof)))
    }

    /// Checks server-final.
    pub fn on_server_final(&self, server_final: &str) -> Result<(), ScramError> {
        let signature = attribute(server_final, 'v')
            .and_then(|v| B64.decode(v).ok())
            .ok_or(ScramError::Malformed("bad server signature"))?;
        match self.expected_server_signature {
            Some(expected) if constant_time_eq(&expected, &signature) => Ok(()),
            _ => Err(ScramError::WrongPassword),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn md5_matches_postgres() {
        // md5 of "secret" + "alice" as PostgreSQL stores it.
        let stored = md5_stored("secret", "alice");
        assert_eq!(stored.len(), 35);
        let salt = [1, 2, 3, 4];
        let answer = md5_client_answer("secret", "alice", salt);
        assert!(md5_verify("secret", "alice", salt, &answer));
        assert!(md5_verify(&stored, "alice", salt, &answer));
        assert!(!md5_verify("other", "alice", salt, &answer));
    }

    #[test]
    fn scram_client_and_server_agree() {
        let secret = ScramSecret::for_stored("pencil").expect("plain");
        let (mut client, first) = ScramClient::start("pencil");
        let (server, server_first) = ScramServer::start(secret.clone(), &first).expect("start");
        let client_final = client.on_server_first(&server_first).expect("final");
        let server_final = server.finish(&client_final).expect("verified");
        assert_eq!(client.on_server_final(&server_final), Ok(()));

        let (mut wrong, first) = ScramClient::start("wrong");
        let (server, server_first) = ScramServer::start(secret, &first).expect("start");
        let client_final = wrong.on_server_first(&server_first).expect("final");
        assert_eq!(server.finish(&client_final), Err(ScramError::WrongPassword));
    }

    #[test]
    fn stored_secret_parses() {
        let secret = ScramSecret::from_password("pw", b"saltsalt", 4096);
        let text = format!(
            "SCRAM-SHA-256${}:{}${}:{}",
            secret.iterations,
            B64.encode(&secret.salt),
            B64.encode(secret.stored_key),
            B64.encode(secret.server_key)
        );
        assert_eq!(ScramSecret::parse(&text), Some(secret));
    }
}
