//! Parsing the four SCRAM messages (RFC 5802 section 7) carried inside SASL messages.
//!
//! All parsers borrow from the input and report a [`AuthError::MalformedScram`] naming the
//! rule that failed; none allocates.

use super::AuthError;

fn malformed(reason: &'static str) -> AuthError {
    AuthError::MalformedScram { reason }
}

/// A nonce is printable ASCII except ','.
pub(crate) fn is_valid_nonce(nonce: &str) -> bool {
    !nonce.is_empty()
        && nonce
            .bytes()
            .all(|b| (0x21..=0x7e).contains(&b) && b != b',')
}

/// Reads `<name>=<value>` and returns the value.
fn attribute<'a>(
    part: Option<&'a str>,
    name: char,
    reason: &'static str,
) -> Result<&'a str, AuthError> {
    let part = part.ok_or(malformed(reason))?;
    let mut chars = part.chars();
    if chars.next() != Some(name) || chars.next() != Some('=') {
        return Err(malformed(reason));
    }
    Ok(&part[2..])
}

/// The GS2 channel-binding flag of a client-first-message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ChannelBindingFlag<'a> {
    /// 'n': the client does not support channel binding.
    NotSupported,
    /// 'y': the client supports it but thinks the server does not.
    SupportedNotUsed,
    /// 'p=<name>': the client binds to channel-binding type `name`.
    Used { name: &'a str },
}

/// `gs2-header client-first-message-bare`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ClientFirst<'a> {
    pub flag: ChannelBindingFlag<'a>,
    /// The GS2 header including its final ',', as the client must echo it in `c=`.
    pub gs2_header: &'a str,
    pub bare: &'a str,
    pub nonce: &'a str,
}

/// Parses a client-first-message. `check_flag` judges the channel-binding flag as soon as it
/// is read, before the rest, so that errors come in PostgreSQL's order (a flag that does not
/// fit the chosen mechanism is reported even if later attributes are wrong too).
pub(crate) fn parse_client_first<'a>(
    data: &'a [u8],
    check_flag: impl FnOnce(ChannelBindingFlag<'a>) -> Result<(), AuthError>,
) -> Result<ClientFirst<'a>, AuthError> {
    let text =
        core::str::from_utf8(data).map_err(|_| malformed("client-first-message is not UTF-8"))?;
    let (flag, rest) = match text.as_bytes().first() {
        Some(b'n') => (ChannelBindingFlag::NotSupported, &text[1..]),
        Some(b'y') => (ChannelBindingFlag::SupportedNotUsed, &text[1..]),
        Some(b'p') => {
            let after = text[1..]
                .strip_prefix('=')
                .ok_or(malformed("expected '=' after channel-binding flag 'p'"))?;
            let end = after.find(',').unwrap_or(after.len());
            let name = &after[..end];
            (ChannelBindingFlag::Used { name }, &after[end..])
        }
        _ => return Err(malformed("invalid channel-binding flag")),
    };
    check_flag(flag)?;
    let rest = rest
        .strip_prefix(',')
        .ok_or(malformed("expected ',' after channel-binding flag"))?;
    let rest = match rest.strip_prefix(',') {
        Some(rest) => rest,
        None if rest.starts_with("a=") => return Err(AuthError::AuthzidNotSupported),
        None => return Err(malformed("expected ',' after authzid")),
    };
    let gs2_header = &text[..text.len() - rest.len()];
    let bare = rest;
    if bare.starts_with("m=") {
        return Err(malformed("mandatory extensions are not supported"));
    }
    let mut parts = bare.split(',');
    attribute(parts.next(), 'n', "expected username attribute")?;
    let nonce = attribute(parts.next(), 'r', "expected nonce attribute")?;
    if !is_valid_nonce(nonce) {
        return Err(malformed("invalid client nonce"));
    }
    Ok(ClientFirst {
        flag,
        gs2_header,
        bare,
        nonce,
    })
}

/// `server-first-message`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ServerFirst<'a> {
    pub nonce: &'a str,
    pub salt_b64: &'a str,
    pub iterations: u32,
}

pub(crate) fn parse_server_first(text: &str) -> Result<ServerFirst<'_>, AuthError> {
    if text.starts_with("m=") {
        return Err(malformed("mandatory extensions are not supported"));
    }
    let mut parts = text.split(',');
    let nonce = attribute(parts.next(), 'r', "expected nonce attribute")?;
    let salt_b64 = attribute(parts.next(), 's', "expected salt attribute")?;
    let iterations = attribute(parts.next(), 'i', "expected iteration attribute")?
        .parse()
        .map_err(|_| malformed("invalid iteration count"))?;
    if !is_valid_nonce(nonce) {
        return Err(malformed("invalid server nonce"));
    }
    Ok(ServerFirst {
        nonce,
        salt_b64,
        iterations,
    })
}

/// `client-final-message`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ClientFinal<'a> {
    pub channel_binding_b64: &'a str,
    pub nonce: &'a str,
    pub without_proof: &'a str,
    pub proof_b64: &'a str,
}

pub(crate) fn parse_client_final(data: &[u8]) -> Result<ClientFinal<'_>, AuthError> {
    let text =
        core::str::from_utf8(data).map_err(|_| malformed("client-final-message is not UTF-8"))?;
    let (without_proof, proof) = text
        .rsplit_once(",p=")
        .ok_or(malformed("expected proof attribute"))?;
    let mut parts = without_proof.split(',');
    let channel_binding_b64 = attribute(parts.next(), 'c', "expected channel-binding attribute")?;
    let nonce = attribute(parts.next(), 'r', "expected nonce attribute")?;
    Ok(ClientFinal {
        channel_binding_b64,
        nonce,
        without_proof,
        proof_b64: proof,
    })
}

/// `server-final-message`: a verifier or an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ServerFinal<'a> {
    Verifier { signature_b64: &'a str },
    Error { reason: &'a str },
}

pub(crate) fn parse_server_final(text: &str) -> Result<ServerFinal<'_>, AuthError> {
    let first = text.split(',').next();
    if let Ok(reason) = attribute(first, 'e', "") {
        return Ok(ServerFinal::Error { reason });
    }
    let signature_b64 = attribute(first, 'v', "expected verifier attribute")?;
    Ok(ServerFinal::Verifier { signature_b64 })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(data: &[u8]) -> Result<ClientFirst<'_>, AuthError> {
        parse_client_first(data, |_| Ok(()))
    }

    #[test]
    fn client_first_flags() {
        let first = parse(b"n,,n=user,r=abc").unwrap();
        assert_eq!(first.gs2_header, "n,,");
        assert_eq!(first.bare, "n=user,r=abc");
        assert_eq!(first.nonce, "abc");
        let first = parse(b"y,,n=,r=abc,x=ext").unwrap();
        assert_eq!(first.flag, ChannelBindingFlag::SupportedNotUsed);
        assert_eq!(first.gs2_header, "y,,");
        let first = parse(b"p=tls-server-end-point,,n=,r=abc").unwrap();
        assert_eq!(
            first.flag,
            ChannelBindingFlag::Used {
                name: "tls-server-end-point"
            }
        );
        assert_eq!(first.gs2_header, "p=tls-server-end-point,,");
        assert_eq!(first.bare, "n=,r=abc");
        let first = parse(b"p=,,n=,r=abc").unwrap();
        assert_eq!(first.flag, ChannelBindingFlag::Used { name: "" });
        assert_eq!(
            parse(b"n,a=bob,n=,r=abc"),
            Err(AuthError::AuthzidNotSupported)
        );
        for bad in [
            &b""[..],
            b"n",
            b"n,",
            b"n,,",
            b"n,,r=abc",
            b"n,,n=u",
            b"n,,n=u,r=",
            b"x,,n=,r=a",
            b"n,,m=x,n=,r=a",
            b"p",
            b"p,,n=,r=a",
            b"p=tls-server-end-point",
            b"p=tls-server-end-point,",
        ] {
            assert!(parse(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn the_flag_is_checked_before_the_rest() {
        let refuse = |flag: ChannelBindingFlag<'_>| match flag {
            ChannelBindingFlag::Used { .. } => Err(AuthError::UnsupportedMechanism),
            _ => Ok(()),
        };
        // The authzid and the missing nonce are wrong too, but the flag is reported.
        assert_eq!(
            parse_client_first(b"p=tls-server-end-point,a=x,n=", refuse),
            Err(AuthError::UnsupportedMechanism)
        );
        assert!(parse_client_first(b"n,,n=,r=a", refuse).is_ok());
    }

    #[test]
    fn final_messages() {
        let fin = parse_client_final(b"c=biws,r=abc,p=cHJvb2Y=").unwrap();
        assert_eq!(fin.without_proof, "c=biws,r=abc");
        assert_eq!(fin.proof_b64, "cHJvb2Y=");
        assert!(parse_client_final(b"c=biws,r=abc").is_err());
        assert!(parse_client_final(b"r=abc,c=biws,p=x").is_err());
        assert_eq!(
            parse_server_final("e=invalid-proof"),
            Ok(ServerFinal::Error {
                reason: "invalid-proof"
            })
        );
        assert_eq!(
            parse_server_final("v=abc"),
            Ok(ServerFinal::Verifier {
                signature_b64: "abc"
            })
        );
        assert!(parse_server_final("x=abc").is_err());
        assert!(parse_server_first("r=a,s=b,i=x").is_err());
        assert!(parse_server_first("r=a,s=b").is_err());
    }
}
