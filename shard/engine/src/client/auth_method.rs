//! Which method authenticates a client: `auth_type`, or with `auth_type = hba` the first
//! matching line of `auth_hba_file`, and the certificate check of the `cert` method (the
//! verified client certificate's common name must be the user name, as PgBouncer requires).
//! Refusals carry PostgreSQL's and PgBouncer's SQLSTATEs and texts.

use bytes::Bytes;
use pgtier_core::config::AuthType;
use pgtier_core::hba::{HbaFile, HbaMethod, HbaRequest};
use pgtier_core::ident::IdentFile;

use crate::messages::{self, sqlstate};

/// The method a login runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    /// No password and no check of the user name (`any`, the console's peer login).
    Unchecked,
    /// No password, but the user must be known (`trust`): listed in the auth file or
    /// found by `auth_query`, as PgBouncer requires.
    Trust,
    /// MD5, or SCRAM for a user whose stored secret is a SCRAM verifier (as PgBouncer).
    Md5,
    ScramSha256,
    /// A cleartext password.
    Plain,
    /// A verified TLS client certificate naming the user (a known user, as for trust).
    Cert,
    /// A Unix-socket peer running as the system user of the user's name (or one the line's
    /// user name map lets in), a known user as for trust.
    Peer,
}

impl Method {
    /// Whether the method asks the client for no password.
    pub fn is_passwordless(self) -> bool {
        matches!(
            self,
            Method::Unchecked | Method::Trust | Method::Cert | Method::Peer
        )
    }

    /// PgBouncer's refusal of a user nobody knows, for a method without a password (the
    /// password methods run their exchange against a decoy secret and fail at the proof).
    pub(crate) fn unknown_user_refusal(self) -> Bytes {
        let text = match self {
            Method::Cert => "certificate authentication failed",
            Method::Peer => PEER_REFUSED,
            _ => "\"trust\" authentication failed",
        };
        messages::fatal(sqlstate::INVALID_AUTHORIZATION_SPECIFICATION, text)
    }
}

/// The method for a client described by `request`; `Err` is the FATAL to close it with.
pub fn choose(
    auth_type: AuthType,
    hba: Option<&HbaFile>,
    request: &HbaRequest<'_>,
) -> Result<Method, Bytes> {
    Ok(match auth_type {
        AuthType::Trust => Method::Trust,
        AuthType::Any => Method::Unchecked,
        AuthType::Md5 => Method::Md5,
        AuthType::ScramSha256 => Method::ScramSha256,
        AuthType::Plain => Method::Plain,
        AuthType::Cert => Method::Cert,
        AuthType::Hba => return from_hba(hba, request),
    })
}

fn from_hba(hba: Option<&HbaFile>, request: &HbaRequest<'_>) -> Result<Method, Bytes> {
    let refused =
        |text: String| messages::fatal(sqlstate::INVALID_AUTHORIZATION_SPECIFICATION, &text);
    // The loader refuses `auth_type = hba` without a file; an engine built without one
    // (a test) has no line to match.
    let Some(rule) = hba.and_then(|hba| hba.rule_for(request)) else {
        return Err(refused(request.no_entry_message()));
    };
    Ok(match rule.method {
        HbaMethod::Trust => Method::Trust,
        HbaMethod::Md5 => Method::Md5,
        HbaMethod::ScramSha256 => Method::ScramSha256,
        HbaMethod::Password => Method::Plain,
        HbaMethod::Cert => Method::Cert,
        HbaMethod::Reject => return Err(refused(request.rejected_message())),
        HbaMethod::Peer => Method::Peer,
    })
}

/// PgBouncer's refusal of a `peer` login.
const PEER_REFUSED: &str = "unix socket login rejected";

/// The `peer` method: `peer_user` is the system user the Unix-socket client's process runs
/// as (`None`: not a Unix socket, or unknown); it must be `user`, or with `map` (the line's
/// `map=` and the ident file's maps) a system user the map lets in as `user`. `Err` is the
/// FATAL.
pub(crate) fn check_peer(
    user: &str,
    peer_user: Option<&str>,
    map: Option<(&str, &IdentFile)>,
) -> Result<(), Bytes> {
    let refused = || messages::fatal(sqlstate::INVALID_AUTHORIZATION_SPECIFICATION, PEER_REFUSED);
    let Some(peer_user) = peer_user else {
        return Err(refused());
    };
    let permitted = match map {
        Some((name, ident)) => {
            let permitted = ident.permits(name, |system| system == peer_user, user);
            if !permitted {
                tracing::error!(user, peer_user, "ident map {name} cannot be matched");
            }
            permitted
        }
        None => peer_user == user,
    };
    if permitted { Ok(()) } else { Err(refused()) }
}

/// The `cert` method: `common_name` is that of the certificate the TLS handshake verified
/// against `client_tls_ca_file` (`None`: the client presented none); it must be the user
/// name, or with `map` (the line's `map=` and the ident file's maps) a name the map lets in
/// as `user`. `Err` is the FATAL.
pub(crate) fn check_certificate(
    user: &str,
    tls: bool,
    common_name: Option<&str>,
    map: Option<(&str, &IdentFile)>,
) -> Result<(), Bytes> {
    let refused = |text: &str| messages::fatal(sqlstate::INVALID_AUTHORIZATION_SPECIFICATION, text);
    if !tls {
        return Err(refused(
            "TLS connection required for certificate authentication",
        ));
    }
    match (common_name, map) {
        (None, _) => Err(refused(
            "a TLS client certificate is required for certificate authentication",
        )),
        (Some(name), Some((map, ident))) => {
            if ident.permits(map, |system| system == name, user) {
                return Ok(());
            }
            tracing::error!(user, "ident map: {map} does not have a match");
            Err(refused("certificate authentication failed"))
        }
        (Some(name), None) if name == user => Ok(()),
        (Some(_), None) => Err(refused(&format!(
            "TLS certificate name mismatch: the certificate's common name is not user \"{user}\""
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::split_messages;
    use bytes::BytesMut;
    use pgtier_core::hba::ClientAddr;
    use std::path::Path;

    fn error_of(bytes: Bytes) -> (String, String) {
        let messages = split_messages(&mut BytesMut::from(&bytes[..]));
        let error = &messages[0];
        (
            error.sqlstate().unwrap_or_default(),
            error.field(b'M').unwrap_or_default(),
        )
    }

    fn request(user: &'static str) -> HbaRequest<'static> {
        HbaRequest {
            addr: ClientAddr::Ip("127.0.0.1".parse().expect("ip")),
            tls: false,
            database: "app",
            user,
            physical_replication: false,
        }
    }

    #[test]
    fn hba_lines_choose_the_method() {
        let text = "host all alice all trust\nhost all bob all md5\nhost all carol all reject\n\
                    host all dave all password\nhost all erin all scram-sha-256\n\
                    host all frank all cert\nlocal all all peer\n";
        let hba = HbaFile::parse(text, Path::new("hba.conf"), &mut |_| Err(String::new()))
            .expect("valid");
        let method = |user| choose(AuthType::Hba, Some(&hba), &request(user));
        assert_eq!(method("alice"), Ok(Method::Trust));
        assert_eq!(method("bob"), Ok(Method::Md5));
        assert_eq!(method("dave"), Ok(Method::Plain));
        assert_eq!(method("erin"), Ok(Method::ScramSha256));
        assert_eq!(method("frank"), Ok(Method::Cert));
        let (code, text) = error_of(method("carol").expect_err("rejected"));
        assert_eq!(code, "28000");
        assert_eq!(
            text,
            "pg_hba.conf rejects connection for host \"127.0.0.1\", user \"carol\", database \"app\", no encryption"
        );
        let (code, text) = error_of(method("zoe").expect_err("no line"));
        assert_eq!(code, "28000");
        assert!(text.starts_with("no pg_hba.conf entry for host"), "{text}");
        let unix = HbaRequest {
            addr: ClientAddr::Unix,
            ..request("alice")
        };
        assert_eq!(choose(AuthType::Hba, Some(&hba), &unix), Ok(Method::Peer));
        assert!(choose(AuthType::Hba, None, &request("alice")).is_err());
    }

    #[test]
    fn global_types_ignore_the_hba_file() {
        for (auth_type, method) in [
            (AuthType::Trust, Method::Trust),
            (AuthType::Any, Method::Unchecked),
            (AuthType::Md5, Method::Md5),
            (AuthType::ScramSha256, Method::ScramSha256),
            (AuthType::Plain, Method::Plain),
            (AuthType::Cert, Method::Cert),
        ] {
            assert_eq!(choose(auth_type, None, &request("x")), Ok(method));
        }
    }

    #[test]
    fn a_certificate_must_name_the_user() {
        assert_eq!(
            check_certificate("alice", true, Some("alice"), None),
            Ok(())
        );
        for (tls, name) in [(false, Some("alice")), (true, None), (true, Some("bob"))] {
            let (code, text) =
                error_of(check_certificate("alice", tls, name, None).expect_err("refused"));
            assert_eq!(code, "28000", "{text}");
        }
    }

    #[test]
    fn a_peer_must_run_as_the_user_or_one_its_map_lets_in() {
        let ident = IdentFile::parse("mymap root postgres\nmymap root someuser\n", Path::new("i"))
            .expect("valid");
        assert_eq!(check_peer("postgres", Some("postgres"), None), Ok(()));
        assert_eq!(
            check_peer("someuser", Some("root"), Some(("mymap", &ident))),
            Ok(())
        );
        for (user, peer, map) in [
            ("postgres", Some("root"), None),
            ("postgres", None, None),
            ("bouncer", Some("root"), Some(("mymap", &ident))),
            ("postgres", Some("other"), Some(("mymap", &ident))),
        ] {
            let (code, text) = error_of(check_peer(user, peer, map).expect_err("refused"));
            assert_eq!(
                (code.as_str(), text.as_str()),
                ("28000", "unix socket login rejected")
            );
        }
    }

    #[test]
    fn a_certificate_map_lets_its_names_in_as_its_users() {
        let ident = IdentFile::parse(
            "test pgbouncer.acme.org someuser\ntest2 bouncer all\n",
            Path::new("i"),
        )
        .expect("valid");
        let check =
            |user, name, map| check_certificate(user, true, Some(name), Some((map, &ident)));
        assert_eq!(check("someuser", "pgbouncer.acme.org", "test"), Ok(()));
        assert_eq!(check("anyone", "bouncer", "test2"), Ok(()));
        let (_, text) = error_of(check("bouncer", "pgbouncer.acme.org", "test").expect_err("no"));
        assert_eq!(text, "certificate authentication failed");
    }
}
