//! libpq-style connection strings, as `[databases]` and `[users]` values are written:
//! `host=db1 port=5432 password='a b'`. Values may be single-quoted, with `\'` or `''` for a
//! quote and `\\` for a backslash; white space may surround `=`.

/// The `key=value` pairs in order; keys are lowercased (PgBouncer compares them without case).
pub(super) fn parse(text: &str) -> Result<Vec<(String, String)>, String> {
    let mut pairs = Vec::new();
    let mut rest = text.trim_start();
    while !rest.is_empty() {
        let key_end = rest
            .find(|ch: char| ch == '=' || ch.is_whitespace())
            .unwrap_or(rest.len());
        let key = rest[..key_end].to_ascii_lowercase();
        rest = rest[key_end..].trim_start();
        let Some(after) = rest.strip_prefix('=') else {
            return Err(format!("expected key=value, found \"{key}\" without ="));
        };
        if key.is_empty() {
            return Err("a value without a key (= at the start)".to_string());
        }
        rest = after.trim_start();
        let (value, after) = value(rest).map_err(|reason| format!("{key}: {reason}"))?;
        pairs.push((key, value));
        rest = after.trim_start();
    }
    Ok(pairs)
}

/// One value (quoted or bare) and what follows it.
fn value(text: &str) -> Result<(String, &str), String> {
    let Some(quoted) = text.strip_prefix('\'') else {
        let end = text.find(char::is_whitespace).unwrap_or(text.len());
        return Ok((text[..end].to_string(), &text[end..]));
    };
    let mut value = String::new();
    let mut chars = quoted.char_indices().peekable();
    while let Some((index, ch)) = chars.next() {
        match ch {
            '\\' => match chars.next() {
                Some((_, escaped)) => value.push(escaped),
                None => break,
            },
            '\'' if chars.peek().is_some_and(|(_, next)| *next == '\'') => {
                chars.next();
                value.push('\'');
            }
            '\'' => {
                let after = &quoted[index + 1..];
                if after
                    .chars()
                    .next()
                    .is_some_and(|next| !next.is_whitespace())
                {
                    return Err("a quoted value must be followed by a space".to_string());
                }
                return Ok((value, after));
            }
            other => value.push(other),
        }
    }
    Err("the quoted value is not closed with '".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(text: &str) -> Vec<(String, String)> {
        parse(text).unwrap_or_else(|error| panic!("{text}: {error}"))
    }

    #[test]
    fn bare_and_quoted_values() {
        assert_eq!(
            pairs("host=db1  port = 5433 password='a b' dbname='it''s' user='x\\'y'"),
            vec![
                ("host".into(), "db1".into()),
                ("port".into(), "5433".into()),
                ("password".into(), "a b".into()),
                ("dbname".into(), "it's".into()),
                ("user".into(), "x'y".into()),
            ]
        );
        assert_eq!(
            pairs("HOST=x password=''"),
            vec![
                ("host".into(), "x".into()),
                ("password".into(), String::new())
            ]
        );
        assert!(pairs("").is_empty());
    }

    #[test]
    fn malformed_strings_are_errors() {
        assert!(parse("host").is_err());
        assert!(parse("=x").is_err());
        assert!(parse("password='open").is_err());
        assert!(parse("password='a'b").is_err());
    }
}
