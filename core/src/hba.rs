//! The rules of `auth_hba_file` (pg_hba.conf syntax) that choose a client's authentication
//! method when `auth_type = hba`: parsing and first-match lookup, both pure (the file and its
//! `@file` includes are read by [`HbaFile::load`] only).
//!
//! Supported, as PgBouncer does: `local`, `host`, `hostssl`, `hostnossl` lines; databases
//! `all`, `sameuser`, names and `@file`; users `all`, names and `@file`; addresses in CIDR
//! form, as an address plus a mask, or `all`; methods trust, reject, md5, scram-sha-256,
//! password, cert and peer, the last two with an optional `map=NAME` (a user name map of
//! `auth_ident_file`, `crate::ident`). `replication` matches physical replication
//! connections, which match nothing else, as in PostgreSQL (a logical one matches as any
//! connection to its database). Lists may have blanks around their commas, as PgBouncer
//! reads them. Everything else (host names, `samehost`, `samenet`, `+group`, `samerole`,
//! regular expressions, `include`, other options such as `clientcert=`) is refused
//! when the file is loaded, naming the line, rather than being ignored: a rule read
//! differently from PostgreSQL's reading could let in a client PostgreSQL would refuse.

use std::fmt;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

/// Longest `@file` include chain (an include naming itself would otherwise never end).
const MAX_INCLUDE_DEPTH: usize = 8;

/// Where a line applies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConnectionType {
    /// Unix-domain socket clients.
    Local,
    /// TCP clients, with or without TLS.
    Host,
    /// TCP clients over TLS.
    HostSsl,
    /// TCP clients without TLS.
    HostNoSsl,
}

/// The method a line names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HbaMethod {
    Trust,
    Reject,
    Md5,
    ScramSha256,
    /// A cleartext password (`auth_type = plain`).
    Password,
    Cert,
    /// The Unix user of the peer process must be the user name (local lines only).
    Peer,
}

impl HbaMethod {
    pub const fn as_str(self) -> &'static str {
        match self {
            HbaMethod::Trust => "trust",
            HbaMethod::Reject => "reject",
            HbaMethod::Md5 => "md5",
            HbaMethod::ScramSha256 => "scram-sha-256",
            HbaMethod::Password => "password",
            HbaMethod::Cert => "cert",
            HbaMethod::Peer => "peer",
        }
    }
}

/// One item of a database or user list.
#[derive(Clone, Debug, PartialEq, Eq)]
enum NameMatch {
    All,
    /// Database field only: the database named like the user.
    SameUser,
    /// Database field only: physical replication connections (and only them).
    Replication,
    Name(String),
}

/// A line's address field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum AddressMatch {
    /// `local` lines, and `all`.
    Any,
    /// The client's address masked by `prefix_bits` equals `network`'s.
    Net { network: IpAddr, prefix_bits: u8 },
}

/// One line of the file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HbaRule {
    /// 1-based line in its file, for logs.
    pub line: usize,
    pub connection: ConnectionType,
    databases: Vec<NameMatch>,
    users: Vec<NameMatch>,
    address: AddressMatch,
    pub method: HbaMethod,
    /// `map=NAME` (`peer` and `cert` lines): the `auth_ident_file` map that says which
    /// system (or certificate) names may log in as which users.
    pub ident_map: Option<String>,
}

/// How a client reached pgtier.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientAddr {
    /// Over the Unix-domain socket.
    Unix,
    /// Over TCP from this address.
    Ip(IpAddr),
}

/// What a rule is matched against.
#[derive(Clone, Copy, Debug)]
pub struct HbaRequest<'a> {
    pub addr: ClientAddr,
    /// The connection is TLS-encrypted.
    pub tls: bool,
    pub database: &'a str,
    pub user: &'a str,
    /// A physical replication connection (`replication=true`): only `replication` lines
    /// match its database field.
    pub physical_replication: bool,
}

impl HbaRequest<'_> {
    /// PostgreSQL's description of the connection in its refusals.
    fn describe(&self) -> String {
        let host = match self.addr {
            ClientAddr::Unix => "[local]".to_string(),
            ClientAddr::Ip(ip) => ip.to_canonical().to_string(),
        };
        let encryption = if self.tls {
            "SSL encryption"
        } else {
            "no encryption"
        };
        format!(
            "host \"{host}\", user \"{}\", database \"{}\", {encryption}",
            self.user, self.database
        )
    }

    /// PostgreSQL's text (SQLSTATE 28000) when no line matches.
    pub fn no_entry_message(&self) -> String {
        format!("no pg_hba.conf entry for {}", self.describe())
    }

    /// PostgreSQL's text (SQLSTATE 28000) when the matching line says `reject`.
    pub fn rejected_message(&self) -> String {
        format!("pg_hba.conf rejects connection for {}", self.describe())
    }
}

/// A file that could not be used: the file, the line and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HbaError {
    pub file: PathBuf,
    pub line: Option<usize>,
    pub reason: String,
}

impl fmt::Display for HbaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "{}:{line}: {}", self.file.display(), self.reason),
            None => write!(f, "{}: {}", self.file.display(), self.reason),
        }
    }
}

impl std::error::Error for HbaError {}

/// The rules of an HBA file, in file order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HbaFile {
    rules: Vec<HbaRule>,
}

/// Reads an `@file` include: its path (resolved against the including file's directory)
/// to its text.
pub(crate) type IncludeReader<'a> = dyn FnMut(&Path) -> Result<String, String> + 'a;

impl HbaFile {
    /// Reads and parses the file at `path`, with its `@file` includes.
    pub fn load(path: impl AsRef<Path>) -> Result<HbaFile, HbaError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|error| HbaError {
            file: path.to_path_buf(),
            line: None,
            reason: format!("cannot read the file: {error}"),
        })?;
        let mut read = |include: &Path| {
            std::fs::read_to_string(include)
                .map_err(|error| format!("cannot read {}: {error}", include.display()))
        };
        HbaFile::parse(&text, path, &mut read)
    }

    /// Parses `text`, the contents of `file`; `read` supplies `@file` includes.
    pub fn parse(
        text: &str,
        file: &Path,
        read: &mut IncludeReader<'_>,
    ) -> Result<HbaFile, HbaError> {
        let mut rules = Vec::new();
        for (index, raw) in logical_lines(text) {
            let line = index + 1;
            let error = |reason: String| HbaError {
                file: file.to_path_buf(),
                line: Some(line),
                reason,
            };
            let fields = tokenize(&raw).map_err(error)?;
            if fields.is_empty() {
                continue;
            }
            let rule = parse_rule(line, fields, file, read).map_err(error)?;
            rules.push(rule);
        }
        Ok(HbaFile { rules })
    }

    pub fn rules(&self) -> &[HbaRule] {
        &self.rules
    }

    /// The first line matching `request` (PostgreSQL's rule); `None`: refuse the client.
    pub fn rule_for(&self, request: &HbaRequest<'_>) -> Option<&HbaRule> {
        self.rules.iter().find(|rule| rule.matches(request))
    }
}

impl HbaRule {
    fn matches(&self, request: &HbaRequest<'_>) -> bool {
        let connection = match (self.connection, request.addr) {
            (ConnectionType::Local, ClientAddr::Unix) => true,
            (ConnectionType::Host, ClientAddr::Ip(_)) => true,
            (ConnectionType::HostSsl, ClientAddr::Ip(_)) => request.tls,
            (ConnectionType::HostNoSsl, ClientAddr::Ip(_)) => !request.tls,
            _ => false,
        };
        connection
            && self.address_matches(request.addr)
            && self.databases.iter().any(|name| match name {
                NameMatch::Replication => request.physical_replication,
                _ if request.physical_replication => false,
                NameMatch::All => true,
                NameMatch::SameUser => request.database == request.user,
                NameMatch::Name(name) => name == request.database,
            })
            && self.users.iter().any(|name| match name {
                NameMatch::All => true,
                NameMatch::Name(name) => name == request.user,
                NameMatch::SameUser | NameMatch::Replication => false,
            })
    }

    fn address_matches(&self, addr: ClientAddr) -> bool {
        let (network, prefix_bits) = match self.address {
            AddressMatch::Any => return true,
            AddressMatch::Net {
                network,
                prefix_bits,
            } => (network, prefix_bits),
        };
        let ClientAddr::Ip(client) = addr else {
            return false;
        };
        // A client on an IPv6 socket may arrive as ::ffff:a.b.c.d; it is an IPv4 client.
        match (network, client.to_canonical()) {
            (IpAddr::V4(network), IpAddr::V4(client)) => {
                masked(&network.octets(), prefix_bits) == masked(&client.octets(), prefix_bits)
            }
            (IpAddr::V6(network), IpAddr::V6(client)) => {
                masked(&network.octets(), prefix_bits) == masked(&client.octets(), prefix_bits)
            }
            _ => false,
        }
    }
}

fn masked<const N: usize>(octets: &[u8; N], prefix_bits: u8) -> [u8; N] {
    let mut out = *octets;
    for (i, byte) in out.iter_mut().enumerate() {
        let bits = (usize::from(prefix_bits)).saturating_sub(i * 8).min(8);
        *byte &= if bits == 0 { 0 } else { 0xffu8 << (8 - bits) };
    }
    out
}

/// Lines with their 0-based number; a line ending in `\` continues on the next (PostgreSQL
/// 16), and the joined line keeps the number of its first part.
pub(crate) fn logical_lines(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut pending: Option<(usize, String)> = None;
    for (index, line) in text.lines().enumerate() {
        let (start, mut joined) = pending.take().unwrap_or((index, String::new()));
        match line.strip_suffix('\\') {
            Some(head) => {
                joined.push_str(head);
                pending = Some((start, joined));
            }
            None => {
                joined.push_str(line);
                out.push((start, joined));
            }
        }
    }
    out.extend(pending);
    out
}

/// One token: its text and whether any of it was quoted (a quoted `all` is a name).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Token {
    pub(crate) text: String,
    pub(crate) quoted: bool,
}

/// The whitespace-separated fields of a line, each a comma-separated list of tokens;
/// `#` outside quotes starts a comment.
pub(crate) fn tokenize(line: &str) -> Result<Vec<Vec<Token>>, String> {
    let mut fields: Vec<Vec<Token>> = Vec::new();
    let mut chars = line.chars().peekable();
    let mut continues_list = false;
    loop {
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        match chars.peek() {
            None | Some('#') => break,
            _ => {}
        }
        let mut token = Token {
            text: String::new(),
            quoted: false,
        };
        let mut in_quotes = false;
        let mut ended_by_comma = false;
        while let Some(&c) = chars.peek() {
            if !in_quotes && (c.is_whitespace() || c == '#') {
                break;
            }
            chars.next();
            match c {
                '"' => {
                    in_quotes = !in_quotes;
                    token.quoted = true;
                }
                ',' if !in_quotes => {
                    ended_by_comma = true;
                    break;
                }
                c => token.text.push(c),
            }
        }
        if in_quotes {
            return Err("unterminated quoted string".to_string());
        }
        match fields.last_mut() {
            Some(field) if continues_list => field.push(token),
            _ => fields.push(vec![token]),
        }
        // PgBouncer also reads `a , b` as one list: a comma after blanks continues it.
        if !ended_by_comma {
            while chars.peek().is_some_and(|c| c.is_whitespace()) {
                chars.next();
            }
            if chars.peek() == Some(&',') {
                chars.next();
                ended_by_comma = true;
            }
        }
        continues_list = ended_by_comma;
    }
    if continues_list {
        return Err("a list ends with a comma".to_string());
    }
    Ok(fields)
}

fn parse_rule(
    line: usize,
    fields: Vec<Vec<Token>>,
    file: &Path,
    read: &mut IncludeReader<'_>,
) -> Result<HbaRule, String> {
    let mut fields = fields.into_iter();
    let mut next = |what: &str| {
        fields
            .next()
            .ok_or_else(|| format!("end of line before the {what} field"))
    };
    let kind = single(next("connection type")?, "connection type")?;
    let connection = match kind.as_str() {
        "local" => ConnectionType::Local,
        "host" => ConnectionType::Host,
        "hostssl" => ConnectionType::HostSsl,
        "hostnossl" => ConnectionType::HostNoSsl,
        "hostgssenc" | "hostnogssenc" => {
            return Err(format!("connection type \"{kind}\" is not supported"));
        }
        "include" | "include_if_exists" | "include_dir" => {
            return Err(format!("\"{kind}\" is not supported; use @file lists"));
        }
        other => return Err(format!("invalid connection type \"{other}\"")),
    };
    let databases = names(next("database")?, true, file, read)?;
    let users = names(next("user")?, false, file, read)?;
    let address = match connection {
        ConnectionType::Local => AddressMatch::Any,
        _ => {
            let field = single(next("address")?, "address")?;
            parse_address(&field, &mut next)?
        }
    };
    let method = parse_method(&single(next("authentication method")?, "method")?)?;
    let mut ident_map = None;
    while let Ok(option) = next("option") {
        let option = single(option, "option")?;
        match option.split_once('=') {
            // The user name map of `auth_ident_file` that `peer` and `cert` consult.
            Some(("map", name)) if matches!(method, HbaMethod::Peer | HbaMethod::Cert) => {
                ident_map = Some(name.to_string());
            }
            _ => {
                return Err(format!(
                    "authentication option \"{option}\" is not supported"
                ));
            }
        }
    }
    if method == HbaMethod::Peer && connection != ConnectionType::Local {
        return Err("peer authentication is only valid on local lines".to_string());
    }
    Ok(HbaRule {
        line,
        connection,
        databases,
        users,
        address,
        method,
        ident_map,
    })
}

/// A field that must hold one token.
fn single(field: Vec<Token>, what: &str) -> Result<String, String> {
    match <[Token; 1]>::try_from(field) {
        Ok([token]) => Ok(token.text),
        Err(_) => Err(format!("the {what} field cannot be a list")),
    }
}

fn names(
    field: Vec<Token>,
    database: bool,
    file: &Path,
    read: &mut IncludeReader<'_>,
) -> Result<Vec<NameMatch>, String> {
    let mut out = Vec::new();
    expand_names(field, database, file, read, 0, &mut out)?;
    Ok(out)
}

fn expand_names(
    field: Vec<Token>,
    database: bool,
    file: &Path,
    read: &mut IncludeReader<'_>,
    depth: usize,
    out: &mut Vec<NameMatch>,
) -> Result<(), String> {
    for token in field {
        if token.quoted {
            out.push(NameMatch::Name(token.text));
            continue;
        }
        let text = token.text;
        let keyword = match text.as_str() {
            "all" => Some(NameMatch::All),
            "sameuser" if database => Some(NameMatch::SameUser),
            "replication" if database => Some(NameMatch::Replication),
            "samerole" | "samegroup" if database => {
                return Err(format!("\"{text}\" is not supported"));
            }
            _ => None,
        };
        if let Some(keyword) = keyword {
            out.push(keyword);
            continue;
        }
        if let Some(include) = text.strip_prefix('@') {
            if depth >= MAX_INCLUDE_DEPTH {
                return Err(format!("@{include}: includes nest too deeply"));
            }
            let path = match Path::new(include).is_absolute() {
                true => PathBuf::from(include),
                false => file.parent().unwrap_or(Path::new("")).join(include),
            };
            let text = read(&path)?;
            let mut tokens = Vec::new();
            for (_, line) in logical_lines(&text) {
                tokens.extend(tokenize(&line)?.into_iter().flatten());
            }
            expand_names(tokens, database, &path, read, depth + 1, out)?;
            continue;
        }
        if text.starts_with('+') {
            return Err(format!("group membership \"{text}\" is not supported"));
        }
        if text.starts_with('/') {
            return Err(format!("regular expression \"{text}\" is not supported"));
        }
        out.push(NameMatch::Name(text));
    }
    Ok(())
}

fn parse_address(
    field: &str,
    next: &mut dyn FnMut(&str) -> Result<Vec<Token>, String>,
) -> Result<AddressMatch, String> {
    match field {
        "all" => return Ok(AddressMatch::Any),
        "samehost" | "samenet" => return Err(format!("\"{field}\" is not supported")),
        _ => {}
    }
    if let Some((addr, bits)) = field.split_once('/') {
        let network = parse_ip(addr)?;
        let max = max_bits(network);
        let prefix_bits = bits
            .parse::<u8>()
            .ok()
            .filter(|bits| *bits <= max)
            .ok_or_else(|| format!("invalid CIDR mask in address \"{field}\""))?;
        return Ok(AddressMatch::Net {
            network,
            prefix_bits,
        });
    }
    let network = parse_ip(field)?;
    let mask = single(next("IP mask")?, "IP mask")?;
    let mask_ip = mask
        .parse::<IpAddr>()
        .map_err(|_| format!("invalid IP mask \"{mask}\""))?;
    let prefix_bits = prefix_of_mask(mask_ip)
        .filter(|_| mask_ip.is_ipv4() == network.is_ipv4())
        .ok_or_else(|| format!("invalid IP mask \"{mask}\""))?;
    Ok(AddressMatch::Net {
        network,
        prefix_bits,
    })
}

fn parse_ip(text: &str) -> Result<IpAddr, String> {
    text.parse::<IpAddr>().map_err(|_| {
        format!("invalid IP address \"{text}\" (host names and domains are not supported)")
    })
}

fn max_bits(ip: IpAddr) -> u8 {
    if ip.is_ipv4() { 32 } else { 128 }
}

/// The prefix length of a contiguous mask such as 255.255.0.0.
fn prefix_of_mask(mask: IpAddr) -> Option<u8> {
    let bits: u128 = match mask {
        IpAddr::V4(v4) => u128::from(u32::from(v4)) << 96,
        IpAddr::V6(v6) => u128::from(v6),
    };
    let ones = bits.leading_ones();
    (bits.checked_shl(ones).unwrap_or(0) == 0).then_some(ones.min(max_bits(mask).into()) as u8)
}

fn parse_method(text: &str) -> Result<HbaMethod, String> {
    Ok(match text {
        "trust" => HbaMethod::Trust,
        "reject" => HbaMethod::Reject,
        "md5" => HbaMethod::Md5,
        "scram-sha-256" => HbaMethod::ScramSha256,
        "password" => HbaMethod::Password,
        "cert" => HbaMethod::Cert,
        "peer" => HbaMethod::Peer,
        other => {
            return Err(format!(
                "authentication method \"{other}\" is not supported"
            ));
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn parse_with(text: &str, includes: &[(&str, &str)]) -> Result<HbaFile, HbaError> {
        let includes: HashMap<PathBuf, String> = includes
            .iter()
            .map(|(path, text)| (PathBuf::from(path), text.to_string()))
            .collect();
        let mut read = |path: &Path| {
            includes
                .get(path)
                .cloned()
                .ok_or_else(|| format!("cannot read {}", path.display()))
        };
        HbaFile::parse(text, Path::new("/etc/pgtier/hba.conf"), &mut read)
    }

    fn parse(text: &str) -> HbaFile {
        parse_with(text, &[]).expect("valid")
    }

    fn tcp(ip: &str, tls: bool, database: &'static str, user: &'static str) -> HbaRequest<'static> {
        HbaRequest {
            addr: ClientAddr::Ip(ip.parse().expect("ip")),
            tls,
            database,
            user,
            physical_replication: false,
        }
    }

    fn method(file: &HbaFile, request: HbaRequest<'_>) -> Option<HbaMethod> {
        file.rule_for(&request).map(|rule| rule.method)
    }

    #[test]
    fn the_first_matching_line_wins() {
        let file = parse(
            "# comment\n\
             local   all        all                    peer\n\
             host    app        alice   127.0.0.1/32   trust\n\
             host    app        bob     127.0.0.1/32   md5   # trailing comment\n\
             host    all        carol   0.0.0.0/0      reject\n\
             hostssl all        all     10.0.0.0 255.0.0.0  cert\n\
             hostnossl all      all     ::1/128        scram-sha-256\n\
             host    all        all     all            password\n",
        );
        assert_eq!(file.rules().len(), 7);
        assert_eq!(
            method(&file, tcp("127.0.0.1", false, "app", "alice")),
            Some(HbaMethod::Trust)
        );
        assert_eq!(
            method(&file, tcp("127.0.0.1", false, "app", "bob")),
            Some(HbaMethod::Md5)
        );
        assert_eq!(
            method(&file, tcp("127.0.0.1", false, "app", "carol")),
            Some(HbaMethod::Reject)
        );
        assert_eq!(
            method(&file, tcp("10.1.2.3", true, "x", "dave")),
            Some(HbaMethod::Cert)
        );
        assert_eq!(
            method(&file, tcp("10.1.2.3", false, "x", "dave")),
            Some(HbaMethod::Password)
        );
        assert_eq!(
            method(&file, tcp("::1", false, "x", "dave")),
            Some(HbaMethod::ScramSha256)
        );
        assert_eq!(
            method(&file, tcp("::1", true, "x", "dave")),
            Some(HbaMethod::Password)
        );
        let unix = HbaRequest {
            addr: ClientAddr::Unix,
            tls: false,
            database: "app",
            user: "alice",
            physical_replication: false,
        };
        assert_eq!(method(&file, unix), Some(HbaMethod::Peer));
    }

    #[test]
    fn no_line_matching_is_refused_with_postgresql_s_text() {
        let file = parse("host app alice 127.0.0.0/8 trust\n");
        let request = tcp("192.168.1.1", false, "app", "alice");
        assert_eq!(file.rule_for(&request), None);
        assert_eq!(
            request.no_entry_message(),
            "no pg_hba.conf entry for host \"192.168.1.1\", user \"alice\", database \"app\", no encryption"
        );
        let unix = HbaRequest {
            addr: ClientAddr::Unix,
            tls: false,
            database: "app",
            user: "alice",
            physical_replication: false,
        };
        assert_eq!(file.rule_for(&unix), None);
        assert_eq!(
            tcp("::ffff:127.0.0.1", true, "d", "u").rejected_message(),
            "pg_hba.conf rejects connection for host \"127.0.0.1\", user \"u\", database \"d\", SSL encryption"
        );
    }

    #[test]
    fn lists_keywords_quotes_and_includes() {
        let file = parse_with(
            "host \"all\",sameuser all 127.0.0.1/32 trust\n\
             host app, other @admins 127.0.0.1/32 md5\n\
             host replication all all trust\n",
            &[(
                "/etc/pgtier/admins",
                "root # the operator\nops, \"dba team\"\n",
            )],
        )
        .expect("valid");
        // A quoted "all" is a database named all.
        assert_eq!(
            method(&file, tcp("127.0.0.1", false, "all", "x")),
            Some(HbaMethod::Trust)
        );
        assert_eq!(
            method(&file, tcp("127.0.0.1", false, "alice", "alice")),
            Some(HbaMethod::Trust)
        );
        for user in ["root", "ops", "dba team"] {
            assert_eq!(
                method(&file, tcp("127.0.0.1", false, "other", user)),
                Some(HbaMethod::Md5),
                "{user}"
            );
        }
        // `replication` lines (as in PostgreSQL's own sample) match physical replication
        // connections, which no other line matches.
        assert_eq!(method(&file, tcp("127.0.0.1", false, "app", "x")), None);
        let physical = HbaRequest {
            physical_replication: true,
            ..tcp("127.0.0.1", false, "all", "alice")
        };
        assert_eq!(method(&file, physical), Some(HbaMethod::Trust));
        let physical_root = HbaRequest {
            physical_replication: true,
            ..tcp("127.0.0.1", false, "other", "root")
        };
        assert_eq!(method(&file, physical_root), Some(HbaMethod::Trust));
        let only_all = parse("host all all 127.0.0.1/32 trust\n");
        let physical = HbaRequest {
            physical_replication: true,
            ..tcp("127.0.0.1", false, "app", "x")
        };
        assert_eq!(method(&only_all, physical), None);
    }

    #[test]
    fn masks_and_address_families() {
        let file = parse(
            "host all all 192.168.0.0/16 trust\n\
             host all all fe80::/10 md5\n\
             host all all 172.16.0.0 255.240.0.0 reject\n",
        );
        assert_eq!(
            method(&file, tcp("192.168.200.7", false, "d", "u")),
            Some(HbaMethod::Trust)
        );
        assert_eq!(
            method(&file, tcp("::ffff:192.168.1.1", false, "d", "u")),
            Some(HbaMethod::Trust)
        );
        assert_eq!(method(&file, tcp("192.169.0.1", false, "d", "u")), None);
        assert_eq!(
            method(&file, tcp("fe80::1", false, "d", "u")),
            Some(HbaMethod::Md5)
        );
        assert_eq!(
            method(&file, tcp("172.31.255.255", false, "d", "u")),
            Some(HbaMethod::Reject)
        );
        assert_eq!(method(&file, tcp("172.32.0.0", false, "d", "u")), None);
    }

    #[test]
    fn continued_lines_join() {
        let file = parse("host all \\\n  all 127.0.0.1/32 trust\nhost all all ::1/128 md5\n");
        assert_eq!(file.rules().len(), 2);
        assert_eq!(file.rules()[0].line, 1);
        assert_eq!(file.rules()[1].line, 3);
    }

    #[test]
    fn what_is_not_supported_is_refused_with_its_line() {
        for (text, reason) in [
            ("host all all localhost trust", "host names"),
            ("host all all samenet trust", "\"samenet\" is not supported"),
            ("host all +admins all trust", "group membership"),
            (
                "host samerole all all trust",
                "\"samerole\" is not supported",
            ),
            (
                "host all all all ident",
                "method \"ident\" is not supported",
            ),
            ("host all all all md5 clientcert=verify-ca", "option"),
            ("host all all all peer", "only valid on local"),
            ("hostgssenc all all all trust", "not supported"),
            ("include other.conf", "not supported"),
            ("host all all 10.0.0.0/33 trust", "CIDR mask"),
            ("host all all 10.0.0.0 255.0.255.0 trust", "IP mask"),
            ("host all all 10.0.0.0 trust", "IP mask"),
            ("host all all", "address"),
            ("host \"all all all trust", "unterminated"),
            ("host all, all all trust", "invalid IP address"),
            ("host all @missing all trust", "cannot read"),
            ("bogus all all trust", "invalid connection type"),
        ] {
            let error = parse_with(&format!("# header\n{text}\n"), &[]).expect_err(text);
            assert_eq!(error.line, Some(2), "{text}");
            assert!(error.reason.contains(reason), "{text}: {}", error.reason);
            assert!(error.to_string().starts_with("/etc/pgtier/hba.conf:2: "));
        }
    }

    #[test]
    fn an_include_cycle_ends() {
        let error =
            parse_with("host all @a all trust\n", &[("/etc/pgtier/a", "@a\n")]).expect_err("cycle");
        assert!(error.reason.contains("nest too deeply"), "{}", error.reason);
    }

    #[test]
    fn lists_may_have_blanks_around_commas_and_cert_and_peer_take_a_map() {
        let file = parse(
            "host tmp1,all user1,user2 , user3 16.0.0.0/8 md5\n\
             hostssl p0x all 0.0.0.0/0 cert map=test\n\
             local all all peer map=mymap\n",
        );
        let request = |user| tcp("16.1.1.1", false, "tmp1", user);
        for user in ["user1", "user2", "user3"] {
            assert_eq!(method(&file, request(user)), Some(HbaMethod::Md5), "{user}");
        }
        let maps: Vec<Option<&str>> = file
            .rules()
            .iter()
            .map(|rule| rule.ident_map.as_deref())
            .collect();
        assert_eq!(maps, vec![None, Some("test"), Some("mymap")]);
        let error = HbaFile::parse(
            "host all all all md5 map=x\n",
            Path::new("hba.conf"),
            &mut |_| Err(String::new()),
        )
        .expect_err("md5 takes no map");
        assert!(error.reason.contains("map=x"), "{error}");
    }
}
