//! PgBouncer's userlist.txt: one `"user" "password"` pair per line, `""` inside quotes for a
//! literal quote, `;` or `#` starting a comment line, extra fields ignored. A password is kept
//! in the form it was stored: plain text, `md5` + 32 hex digits (md5(password || user)), or a
//! SCRAM-SHA-256 verifier. Errors carry the file and line so a typo is found at once.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};

/// A password as stored in the auth file.
#[derive(Clone, PartialEq, Eq)]
pub enum StoredPassword {
    /// Clear text: works with every auth method.
    Plain(String),
    /// `md5` followed by md5(password || user) in hex; works with md5 auth.
    Md5([u8; 16]),
    /// A SCRAM-SHA-256 verifier; works with scram-sha-256 auth.
    ScramSha256(ScramVerifier),
}

impl fmt::Debug for StoredPassword {
    /// Never prints secrets.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoredPassword::Plain(_) => f.write_str("Plain(..)"),
            StoredPassword::Md5(_) => f.write_str("Md5(..)"),
            StoredPassword::ScramSha256(verifier) => {
                write!(f, "ScramSha256(iterations: {})", verifier.iterations)
            }
        }
    }
}

/// `SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>`, parts still base64 (the wire
/// crate decodes them).
#[derive(Clone, PartialEq, Eq)]
pub struct ScramVerifier {
    pub iterations: u32,
    pub salt_base64: String,
    pub stored_key_base64: String,
    pub server_key_base64: String,
}

/// An auth file that could not be used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuthFileError {
    pub file: PathBuf,
    /// 1-based line, when the problem is on one line.
    pub line: Option<usize>,
    pub reason: String,
}

impl fmt::Display for AuthFileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "{}:{line}: {}", self.file.display(), self.reason),
            None => write!(f, "{}: {}", self.file.display(), self.reason),
        }
    }
}

impl std::error::Error for AuthFileError {}

/// The users and passwords of an auth file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AuthFile {
    passwords: HashMap<String, StoredPassword>,
}

impl AuthFile {
    /// Reads and parses the file at `path`.
    pub fn load(path: impl AsRef<Path>) -> Result<AuthFile, AuthFileError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|error| AuthFileError {
            file: path.to_path_buf(),
            line: None,
            reason: format!("cannot read the file: {error}"),
        })?;
        AuthFile::parse(&text, path)
    }

    /// Parses `text`; `origin` names the file in errors.
    pub fn parse(text: &str, origin: impl AsRef<Path>) -> Result<AuthFile, AuthFileError> {
        let origin = origin.as_ref();
        let mut passwords = HashMap::new();
        let mut first_line: HashMap<String, usize> = HashMap::new();
        for (number, line) in (1..).zip(text.lines()) {
            let fail = |reason: String| AuthFileError {
                file: origin.to_path_buf(),
                line: Some(number),
                reason,
            };
            let Some((user, password)) = parse_line(line).map_err(fail)? else {
                continue;
            };
            if let Some(first) = first_line.get(&user) {
                return Err(fail(format!(
                    "user \"{user}\" is listed again (first on line {first})"
                )));
            }
            let stored = StoredPassword::parse(&password).map_err(fail)?;
            first_line.insert(user.clone(), number);
            passwords.insert(user, stored);
        }
        Ok(AuthFile { passwords })
    }

    /// The stored password of `user`.
    pub fn password(&self, user: &str) -> Option<&StoredPassword> {
        self.passwords.get(user)
    }

    /// Whether `user` is listed.
    pub fn contains(&self, user: &str) -> bool {
        self.passwords.contains_key(user)
    }

    /// Number of users.
    pub fn len(&self) -> usize {
        self.passwords.len()
    }

    /// Whether no user is listed.
    pub fn is_empty(&self) -> bool {
        self.passwords.is_empty()
    }
}

impl StoredPassword {
    /// Recognises the stored form of a password field.
    pub fn parse(password: &str) -> Result<StoredPassword, String> {
        if let Some(hex) = password.strip_prefix("md5") {
            if hex.len() == 32 && hex.bytes().all(|byte| byte.is_ascii_hexdigit()) {
                return Ok(StoredPassword::Md5(decode_hex(hex)));
            }
        }
        if let Some(rest) = password.strip_prefix("SCRAM-SHA-256$") {
            return parse_scram(rest).map(StoredPassword::ScramSha256);
        }
        Ok(StoredPassword::Plain(password.to_string()))
    }
}

/// `<iterations>:<salt>$<StoredKey>:<ServerKey>`.
fn parse_scram(rest: &str) -> Result<ScramVerifier, String> {
    let malformed = || {
        "malformed SCRAM-SHA-256 verifier: expected SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>"
            .to_string()
    };
    let (iterations_salt, keys) = rest.split_once('$').ok_or_else(malformed)?;
    let (iterations, salt) = iterations_salt.split_once(':').ok_or_else(malformed)?;
    let (stored_key, server_key) = keys.split_once(':').ok_or_else(malformed)?;
    let iterations: u32 = iterations.parse().map_err(|_| malformed())?;
    if iterations == 0
        || [salt, stored_key, server_key]
            .iter()
            .any(|part| !is_base64(part))
    {
        return Err(malformed());
    }
    Ok(ScramVerifier {
        iterations,
        salt_base64: salt.to_string(),
        stored_key_base64: stored_key.to_string(),
        server_key_base64: server_key.to_string(),
    })
}

fn is_base64(text: &str) -> bool {
    !text.is_empty()
        && text
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'+' | b'/' | b'='))
}

/// Hex to bytes; the caller checked 32 hex digits.
fn decode_hex(hex: &str) -> [u8; 16] {
    let mut bytes = [0u8; 16];
    for (byte, pair) in bytes.iter_mut().zip(hex.as_bytes().chunks_exact(2)) {
        let high = hex_value(pair[0]);
        let low = hex_value(pair[1]);
        *byte = (high << 4) | low;
    }
    bytes
}

fn hex_value(digit: u8) -> u8 {
    match digit {
        b'0'..=b'9' => digit - b'0',
        b'a'..=b'f' => digit - b'a' + 10,
        b'A'..=b'F' => digit - b'A' + 10,
        _ => 0,
    }
}

/// One line: None for blank and comment lines, else the first two quoted fields.
fn parse_line(line: &str) -> Result<Option<(String, String)>, String> {
    let line = line.trim_start();
    if line.is_empty() || line.starts_with(';') || line.starts_with('#') {
        return Ok(None);
    }
    let (user, rest) = quoted(line).map_err(|reason| format!("user name: {reason}"))?;
    if user.is_empty() {
        return Err("empty user name".to_string());
    }
    let rest = rest.trim_start();
    let (password, _) =
        quoted(rest).map_err(|reason| format!("password of \"{user}\": {reason}"))?;
    Ok(Some((user, password)))
}

/// A `"..."` field at the start of `text` with `""` as an escaped quote; returns the field and
/// what follows it.
fn quoted(text: &str) -> Result<(String, &str), String> {
    let Some(body) = text.strip_prefix('"') else {
        return Err("expected a field in double quotes".to_string());
    };
    let mut field = String::new();
    let mut chars = body.char_indices();
    while let Some((position, character)) = chars.next() {
        if character != '"' {
            field.push(character);
            continue;
        }
        if body[position + 1..].starts_with('"') {
            field.push('"');
            chars.next();
            continue;
        }
        return Ok((field, &body[position + 1..]));
    }
    Err("missing closing double quote".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<AuthFile, AuthFileError> {
        AuthFile::parse(text, "userlist.txt")
    }

    #[test]
    fn plain_md5_and_scram_forms() {
        let file = parse(concat!(
            "\"alice\" \"secret\"\n",
            "\"bob\" \"md5e8a48653851e28c69d0506508fb27fc5\"\n",
            "\"carol\" \"SCRAM-SHA-256$4096:c2FsdA==$c3RvcmVk:c2VydmVy\"\n",
        ))
        .expect("valid file");
        assert_eq!(file.len(), 3);
        assert_eq!(
            file.password("alice"),
            Some(&StoredPassword::Plain("secret".into()))
        );
        let Some(StoredPassword::Md5(digest)) = file.password("bob") else {
            panic!("bob should have an md5 password");
        };
        assert_eq!(digest[0], 0xe8);
        assert_eq!(digest[15], 0xc5);
        let Some(StoredPassword::ScramSha256(verifier)) = file.password("carol") else {
            panic!("carol should have a SCRAM verifier");
        };
        assert_eq!(verifier.iterations, 4096);
        assert_eq!(verifier.salt_base64, "c2FsdA==");
        assert_eq!(verifier.server_key_base64, "c2VydmVy");
    }

    #[test]
    fn doubled_quotes_comments_blank_lines_and_extra_fields() {
        let file = parse(concat!(
            "; PgBouncer comment\n",
            "# another comment\n",
            "\n",
            "  \"we\"\"ird\" \"pa\"\"ss word\" \"ignored extra\"\n",
        ))
        .expect("valid file");
        assert_eq!(
            file.password("we\"ird"),
            Some(&StoredPassword::Plain("pa\"ss word".into()))
        );
    }

    #[test]
    fn md5_lookalike_with_wrong_length_is_plain_text() {
        let file = parse("\"u\" \"md5abc\"\n").expect("valid file");
        assert_eq!(
            file.password("u"),
            Some(&StoredPassword::Plain("md5abc".into()))
        );
    }

    #[test]
    fn errors_name_file_and_line() {
        let error = parse("\"alice\" \"x\"\n\"bob\" \"unterminated\n").expect_err("bad line");
        assert_eq!(
            error.to_string(),
            "userlist.txt:2: password of \"bob\": missing closing double quote"
        );
        let error = parse("alice secret\n").expect_err("unquoted");
        assert_eq!(
            error.to_string(),
            "userlist.txt:1: user name: expected a field in double quotes"
        );
        let error = parse("\"alice\"\n").expect_err("no password");
        assert_eq!(
            error.to_string(),
            "userlist.txt:1: password of \"alice\": expected a field in double quotes"
        );
    }

    #[test]
    fn duplicate_user_is_rejected() {
        let error = parse("\"a\" \"1\"\n\"a\" \"2\"\n").expect_err("duplicate");
        assert_eq!(
            error.to_string(),
            "userlist.txt:2: user \"a\" is listed again (first on line 1)"
        );
    }

    #[test]
    fn malformed_scram_is_rejected() {
        let error = parse("\"a\" \"SCRAM-SHA-256$x:salt$k:k\"\n").expect_err("bad verifier");
        assert!(error.reason.starts_with("malformed SCRAM-SHA-256 verifier"));
    }

    #[test]
    fn debug_never_shows_secrets() {
        let shown = format!("{:?}", StoredPassword::Plain("hunter2".into()));
        assert!(!shown.contains("hunter2"));
    }

    #[test]
    fn load_reports_missing_file() {
        let error = AuthFile::load("/nonexistent/userlist.txt").expect_err("missing");
        assert!(
            error
                .to_string()
                .starts_with("/nonexistent/userlist.txt: cannot read the file")
        );
    }
}

#[cfg(test)]
mod robustness {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn arbitrary_text_never_panics(text in "(\"|[a-z]| |\n|;|#|\\PC){0,200}") {
            let _ = AuthFile::parse(&text, "userlist.txt");
        }

        #[test]
        fn quoted_fields_round_trip(user in "\\PC{1,20}", password in "\\PC{0,20}") {
            let line = format!("\"{}\" \"{}\"\n", user.replace('"', "\"\""), password.replace('"', "\"\""));
            let file = AuthFile::parse(&line, "userlist.txt").expect("well-formed line");
            let stored = file.password(&user).expect("user present");
            if let StoredPassword::Plain(plain) = stored {
                prop_assert_eq!(plain, &password);
            }
        }
    }
}
