//! Putting the client's statement names back into the server's errors. A renamed Parse,
//! Bind or Describe that fails is reported by PostgreSQL with the server-side name
//! (`prepared statement "pgtier_7" already exists`); the client must read its own name there,
//! as from PostgreSQL itself.

use bytes::{BufMut, Bytes, BytesMut};
use memchr::memmem;

use super::client_statements::ClientStatements;
use super::statement::SERVER_NAME_PREFIX;

/// The renamed ErrorResponse (`frame` is the whole message), and the ids of the statements
/// it named, or `None` if it names none of the client's statements.
pub fn restore_client_names(
    frame: &[u8],
    names: &ClientStatements,
    mentioned: &mut Vec<u64>,
) -> Option<Bytes> {
    let body = frame.get(5..)?;
    memmem::find(body, SERVER_NAME_PREFIX)?;
    let mut out = BytesMut::with_capacity(frame.len() + 64);
    out.put_u8(frame[0]);
    out.put_u32(0);
    let mut changed = false;
    let mut fields = body;
    while let [kind, rest @ ..] = fields {
        if *kind == 0 {
            break;
        }
        let end = memchr::memchr(0, rest)?;
        out.put_u8(*kind);
        changed |= rename_in(&rest[..end], names, mentioned, &mut out);
        out.put_u8(0);
        fields = &rest[end + 1..];
    }
    out.put_u8(0);
    if !changed {
        return None;
    }
    let len = (out.len() - 1) as u32;
    out[1..5].copy_from_slice(&len.to_be_bytes());
    Some(out.freeze())
}

/// Copies `text` to `out` with every `"pgtier_<id>"` of a client statement replaced by
/// `"<client name>"`; says whether anything was replaced.
fn rename_in(
    text: &[u8],
    names: &ClientStatements,
    mentioned: &mut Vec<u64>,
    out: &mut BytesMut,
) -> bool {
    let mut changed = false;
    let mut rest = text;
    while let Some(at) = memmem::find(rest, SERVER_NAME_PREFIX) {
        let digits_at = at + SERVER_NAME_PREFIX.len();
        let digits = rest[digits_at..]
            .iter()
            .take_while(|byte| byte.is_ascii_digit())
            .count();
        let quoted = at > 0
            && rest[at - 1] == b'"'
            && rest.get(digits_at + digits) == Some(&b'"')
            && digits > 0;
        let id = quoted
            .then(|| std::str::from_utf8(&rest[digits_at..digits_at + digits]).ok())
            .flatten()
            .and_then(|digits| digits.parse::<u64>().ok());
        let end = digits_at + digits;
        match id {
            Some(id) => {
                mentioned.push(id);
                out.put_slice(&rest[..at]);
                match names.name_of(id) {
                    Some(name) => {
                        out.put_slice(name);
                        changed = true;
                    }
                    None => out.put_slice(&rest[at..end]),
                }
            }
            None => out.put_slice(&rest[..end]),
        }
        rest = &rest[end..];
    }
    out.put_slice(rest);
    changed
}

#[cfg(test)]
mod tests {
    use super::super::statement::Registry;
    use super::*;
    use pgtier_wire::error_fields::{ErrorNotice, Severity};
    use pgtier_wire::messages::Message;
    use pgtier_wire::messages::backend::ErrorResponse;
    use pgtier_wire::sqlstate;

    fn error(message: &str) -> BytesMut {
        let mut out = BytesMut::new();
        ErrorNotice::new(Severity::Error, sqlstate::PROTOCOL_VIOLATION, message)
            .hint("see \"pgtier_1\"")
            .encode_error(&mut out);
        out
    }

    #[test]
    fn server_names_become_the_clients_and_the_rest_is_kept() {
        let mut registry = Registry::default();
        let statement = registry.intern(b"SELECT 1\0\0\0");
        let mut names = ClientStatements::default();
        names.insert(b"_pg3_0", statement.clone());
        let frame = error("prepared statement \"pgtier_1\" already exists");
        let mut mentioned = Vec::new();
        let renamed = restore_client_names(&frame, &names, &mut mentioned).expect("renamed");
        let decoded = ErrorResponse::decode_frame(&renamed).expect("valid");
        assert_eq!(
            decoded.fields.message(),
            Some(&b"prepared statement \"_pg3_0\" already exists"[..])
        );
        assert_eq!(decoded.fields.hint(), Some(&b"see \"_pg3_0\""[..]));
        assert_eq!(decoded.fields.code(), Some(sqlstate::PROTOCOL_VIOLATION));
        assert_eq!(mentioned, [statement.id(), statement.id()]);
    }

    #[test]
    fn other_texts_are_not_rewritten() {
        let names = ClientStatements::default();
        let mut mentioned = Vec::new();
        for text in [
            "syntax error at or near \"SELEC\"",
            "prepared statement \"pgtier_1\" does not exist",
            "pgtier_12 unquoted",
            "\"pgtier_\"",
        ] {
            assert!(restore_client_names(&error(text), &names, &mut mentioned).is_none());
        }
        assert!(restore_client_names(b"E\0\0", &names, &mut mentioned).is_none());
    }
}
