//! Putting the client's statement names back into the server's errors. A renamed Parse,
//! Bind, Describe or SQL text that fails is reported by PostgreSQL with the name pgtier sent
//! (`prepared statement "pgtier_7" already exists`); the client must read its own name there,
//! as from PostgreSQL itself. Only the error answering a renamed message is touched, and only
//! the quoted name it was sent with: any other text (a client's own `RAISE` that mentions
//! `"pgtier_7"`) reaches the client as the server wrote it.

use bytes::{BufMut, Bytes, BytesMut};
use memchr::memmem;

/// The ErrorResponse `frame` (the whole message) with every `"<server>"` replaced by
/// `"<client>"`, or `None` if it has none.
pub(crate) fn restore_client_name(frame: &[u8], server: &[u8], client: &[u8]) -> Option<Bytes> {
    let body = frame.get(5..)?;
    let mut quoted = Vec::with_capacity(server.len() + 2);
    quoted.push(b'"');
    quoted.extend_from_slice(server);
    quoted.push(b'"');
    let finder = memmem::Finder::new(&quoted);
    finder.find(body)?;
    let mut out = BytesMut::with_capacity(frame.len() + client.len() * 2);
    out.put_u8(frame[0]);
    out.put_u32(0);
    let mut rest = body;
    while let Some(at) = finder.find(rest) {
        out.put_slice(&rest[..at + 1]);
        out.put_slice(client);
        out.put_u8(b'"');
        rest = &rest[at + quoted.len()..];
    }
    out.put_slice(rest);
    let len = (out.len() - 1) as u32;
    out[1..5].copy_from_slice(&len.to_be_bytes());
    Some(out.freeze())
}

#[cfg(test)]
mod tests {
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
    fn the_name_sent_becomes_the_clients_in_every_field() {
        let frame = error("prepared statement \"pgtier_1\" already exists");
        let renamed = restore_client_name(&frame, b"pgtier_1", b"_pg3_0").expect("renamed");
        let decoded = ErrorResponse::decode_frame(&renamed).expect("valid");
        assert_eq!(
            decoded.fields.message(),
            Some(&b"prepared statement \"_pg3_0\" already exists"[..])
        );
        assert_eq!(decoded.fields.hint(), Some(&b"see \"_pg3_0\""[..]));
        assert_eq!(decoded.fields.code(), Some(sqlstate::PROTOCOL_VIOLATION));
    }

    #[test]
    fn other_names_and_unquoted_ones_are_kept() {
        for text in [
            "syntax error at or near \"SELEC\"",
            "prepared statement \"pgtier_12\" does not exist",
            "pgtier_1 unquoted",
        ] {
            let mut frame = BytesMut::new();
            ErrorNotice::new(Severity::Error, sqlstate::PROTOCOL_VIOLATION, text)
                .encode_error(&mut frame);
            assert!(
                restore_client_name(&frame, b"pgtier_1", b"s1").is_none(),
                "{text}"
            );
        }
        assert!(restore_client_name(b"E\0\0", b"pgtier_1", b"s1").is_none());
    }
}
