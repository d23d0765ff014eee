//! `auth_query`: the secret of a user the auth file does not list, read from the server as
//! PgBouncer does. This file holds the pure parts: the request (Parse/Bind/Execute/Sync with
//! the user name as `$1`), the reader of the server's answer, and the shard's cache of the
//! secrets found. Every login of a user the auth file does not list asks the server again,
//! as PgBouncer does (a password changed or a role expired takes effect at once); the
//! cache serves the user's server logins and the checks that follow the lookup. The flow that runs it on a server of the `auth_user` pool is
//! `engine/client_login.rs` and `engine/linker/joining.rs`.

use std::collections::HashMap;
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use pgtier_wire::auth::KEY_LEN;
use pgtier_wire::messages::Message;
use pgtier_wire::messages::backend::{DataRow, ErrorResponse};
use pgtier_wire::messages::frontend::{Bind, Execute, Parse, Sync};
use pgtier_wire::{FrameLimits, framing};

/// Users whose secrets one shard keeps; past it the oldest entry goes. Only users the
/// server knows are kept, so guessed names cannot fill it.
pub(crate) const MAX_LOOKED_UP_USERS: usize = 4096;

/// Longest answer message accepted from a lookup (a secret is a few hundred bytes).
const MAX_ANSWER_MESSAGE_BYTES: u32 = 64 * 1024;

/// The messages that run `query` with `user` as its one parameter.
pub fn request(query: &str, user: &str) -> Bytes {
    let mut out = BytesMut::with_capacity(query.len() + user.len() + 64);
    Parse::encode_parts(&mut out, b"", query.as_bytes(), &[]);
    Bind::encode_parts(&mut out, b"", b"", &[], &[Some(user.as_bytes())], &[]);
    Execute {
        portal: b"",
        max_rows: 0,
    }
    .encode(&mut out);
    Sync.encode(&mut out);
    out.freeze()
}

/// What the lookup found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Found {
    /// The user's stored secret (md5 hash or SCRAM verifier, or a plaintext).
    Secret(String),
    /// A row with a NULL or empty password: the user exists but no password matches it
    /// (a passwordless method still lets it in, as PgBouncer does).
    NoPassword,
    /// No row: PgBouncer's "no such user", which its clients see (it runs no decoy
    /// exchange after `auth_query`).
    NoUser,
}

/// Where reading the answer stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// ReadyForQuery has not arrived yet.
    NeedMore,
    /// The answer is complete and the server is idle again.
    Done(Result<Found, String>),
    /// The server broke the protocol: it must be closed.
    Malformed,
}

/// Reads a lookup's answer as it arrives.
#[derive(Debug, Default)]
pub struct AnswerReader {
    found: Option<Found>,
    rows: usize,
    error: Option<String>,
}

impl AnswerReader {
    /// Consumes the complete messages of `input`.
    pub fn read(&mut self, input: &mut BytesMut) -> Answer {
        let limits = FrameLimits {
            max_message_len: MAX_ANSWER_MESSAGE_BYTES,
            ..FrameLimits::default()
        };
        loop {
            let frame = match framing::split_message(input, &limits) {
                Ok(Some(frame)) => frame.bytes,
                Ok(None) => return Answer::NeedMore,
                Err(_) => return Answer::Malformed,
            };
            match frame[0] {
                b'D' => {
                    let Ok(row) = DataRow::decode_frame(&frame) else {
                        return Answer::Malformed;
                    };
                    self.rows += 1;
                    self.found = Some(secret_of(row));
                }
                b'E' => {
                    let Ok(error) = ErrorResponse::decode_frame(&frame) else {
                        return Answer::Malformed;
                    };
                    let text = error.fields.message().unwrap_or_default();
                    self.error = Some(String::from_utf8_lossy(text).into_owned());
                }
                b'Z' => return Answer::Done(self.result()),
                // ParseComplete, BindComplete, RowDescription, CommandComplete, notices and
                // parameter changes say nothing about the secret.
                b'1' | b'2' | b'T' | b'C' | b'N' | b'S' | b'n' | b'A' => {}
                _ => return Answer::Malformed,
            }
        }
    }

    fn result(&mut self) -> Result<Found, String> {
        if let Some(error) = self.error.take() {
            return Err(error);
        }
        if self.rows > 1 {
            return Err(format!(
                "auth_query returned {} rows for one user",
                self.rows
            ));
        }
        match self.found.take() {
            Some(Found::Secret(secret)) if secret.is_empty() => Ok(Found::NoPassword),
            Some(found) => Ok(found),
            None => Ok(Found::NoUser),
        }
    }
}

/// PgBouncer's query returns (user name, password): the secret is the second column (the
/// only one, if there is one column).
fn secret_of(row: DataRow<'_>) -> Found {
    let values: Vec<Option<&[u8]>> = row.values.iter().collect();
    let value = match values.as_slice() {
        [only] => *only,
        [_, password, ..] => *password,
        [] => None,
    };
    match value.map(|value| String::from_utf8_lossy(value).into_owned()) {
        Some(secret) => Found::Secret(secret),
        None => Found::NoPassword,
    }
}

/// A secret found, and the SCRAM ClientKey its user last proved (what a server login needs
/// when the secret is a SCRAM verifier).
#[derive(Clone, Debug)]
struct Entry {
    /// `None`: a row without a usable password.
    secret: Option<String>,
    found_at: Instant,
    client_key: Option<[u8; KEY_LEN]>,
}

/// The secrets found, per (database, user): the query runs in each database, which may
/// be a different cluster. Cleared on reload.
#[derive(Debug, Default)]
pub(crate) struct LookupCache {
    entries: HashMap<(String, String), Entry>,
}

impl LookupCache {
    /// The secret found for `user` in `database`, however old.
    pub fn secret(&self, database: &str, user: &str) -> Option<&str> {
        self.entry(database, user)
            .and_then(|entry| entry.secret.as_deref())
    }

    /// Whether a lookup found `user` in `database` (with or without a usable password).
    pub fn found(&self, database: &str, user: &str) -> bool {
        self.entry(database, user).is_some()
    }

    pub fn client_key(&self, database: &str, user: &str) -> Option<[u8; KEY_LEN]> {
        self.entry(database, user)
            .and_then(|entry| entry.client_key)
    }

    /// Records what a lookup found (a user that does not exist forgets its entry).
    pub fn store(&mut self, database: &str, user: &str, found: Found, now: Instant) {
        let key = (database.to_string(), user.to_string());
        let secret = match found {
            Found::Secret(secret) => Some(secret),
            Found::NoPassword => None,
            Found::NoUser => {
                self.entries.remove(&key);
                return;
            }
        };
        if let Some(entry) = self.entries.get_mut(&key) {
            // The same secret keeps the ClientKey proved against it.
            if entry.secret != secret {
                entry.client_key = None;
            }
            entry.secret = secret;
            entry.found_at = now;
            return;
        }
        if self.entries.len() >= MAX_LOOKED_UP_USERS {
            let oldest = self
                .entries
                .iter()
                .min_by_key(|(_, entry)| entry.found_at)
                .map(|(key, _)| key.clone());
            if let Some(oldest) = oldest {
                self.entries.remove(&oldest);
            }
        }
        self.entries.insert(
            key,
            Entry {
                secret,
                found_at: now,
                client_key: None,
            },
        );
    }

    pub(crate) fn remember_client_key(&mut self, database: &str, user: &str, key: [u8; KEY_LEN]) {
        if let Some(entry) = self
            .entries
            .get_mut(&(database.to_string(), user.to_string()))
        {
            entry.client_key = Some(key);
        }
    }

    pub fn clear(&mut self) {
        self.entries.clear();
    }

    fn entry(&self, database: &str, user: &str) -> Option<&Entry> {
        self.entries.get(&(database.to_string(), user.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{error, frame};

    fn row(values: &[Option<&[u8]>]) -> Vec<u8> {
        let mut out = BytesMut::new();
        DataRow::encode_parts(&mut out, values);
        out.to_vec()
    }

    fn answer(parts: &[Vec<u8>]) -> Answer {
        let mut input = BytesMut::new();
        for part in parts {
            input.extend_from_slice(part);
        }
        AnswerReader::default().read(&mut input)
    }

    #[test]
    fn the_request_binds_the_user_name() {
        let bytes = request(
            "SELECT usename, passwd FROM pg_shadow WHERE usename=$1",
            "bob",
        );
        let tags: Vec<u8> = crate::testing::split_messages(&mut BytesMut::from(&bytes[..]))
            .iter()
            .map(|m| m.tag)
            .collect();
        assert_eq!(tags, b"PBES");
        assert!(bytes.windows(3).any(|w| w == b"bob"));
    }

    #[test]
    fn answers_are_read_to_ready_for_query() {
        let ok = [frame(b'1', b""), frame(b'2', b"")];
        let ready = frame(b'Z', b"I");
        let secret = row(&[Some(b"bob"), Some(b"md5abc")]);
        let complete = frame(b'C', b"SELECT 1\0");
        assert_eq!(
            answer(&[
                ok[0].clone(),
                ok[1].clone(),
                secret.clone(),
                complete.clone(),
                ready.clone()
            ]),
            Answer::Done(Ok(Found::Secret("md5abc".to_string())))
        );
        assert_eq!(
            answer(&[ok[0].clone(), secret.clone(), complete.clone()]),
            Answer::NeedMore
        );
        assert_eq!(
            answer(&[complete.clone(), ready.clone()]),
            Answer::Done(Ok(Found::NoUser))
        );
        for no_password in [
            vec![row(&[Some(b"bob"), None]), ready.clone()],
            vec![row(&[Some(b"bob"), Some(b"")]), ready.clone()],
        ] {
            assert_eq!(answer(&no_password), Answer::Done(Ok(Found::NoPassword)));
        }
        let Answer::Done(Err(text)) = answer(&[
            error("ERROR", "42501", "permission denied for view pg_shadow"),
            ready.clone(),
        ]) else {
            panic!("an error");
        };
        assert!(text.contains("permission denied"));
        assert!(matches!(
            answer(&[secret.clone(), secret, ready.clone()]),
            Answer::Done(Err(_))
        ));
        assert_eq!(answer(&[frame(b'G', b"\0\0\0"), ready]), Answer::Malformed);
    }

    #[test]
    fn the_cache_keeps_known_users_per_database_and_ages() {
        let now = Instant::now();
        let mut cache = LookupCache::default();
        cache.store("db", "bob", Found::Secret("md5x".into()), now);
        assert_eq!(cache.secret("db", "bob"), Some("md5x"));
        assert_eq!(cache.secret("other", "bob"), None);
        cache.remember_client_key("db", "bob", [1; KEY_LEN]);
        cache.store("db", "bob", Found::Secret("md5x".into()), now);
        assert_eq!(cache.client_key("db", "bob"), Some([1; KEY_LEN]));
        cache.store("db", "bob", Found::Secret("md5y".into()), now);
        assert_eq!(
            cache.client_key("db", "bob"),
            None,
            "a new secret, a new key"
        );
        cache.store("db", "bob", Found::NoPassword, now);
        assert_eq!(cache.secret("db", "bob"), None);
        assert!(cache.found("db", "bob"), "a user without a password exists");
        cache.store("db", "bob", Found::NoUser, now);
        assert!(!cache.found("db", "bob"));
        for i in 0..=MAX_LOOKED_UP_USERS {
            let at = now + std::time::Duration::from_millis(i as u64);
            cache.store("db", &format!("u{i}"), Found::Secret("s".into()), at);
        }
        assert_eq!(cache.entries.len(), MAX_LOOKED_UP_USERS);
        assert_eq!(cache.secret("db", "u0"), None, "the oldest went");
    }
}
