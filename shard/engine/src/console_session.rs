//! One admin-console session's protocol: simple queries, and the extended protocol that
//! drivers (psycopg 3, JDBC, node-postgres, rust-postgres) use even for a plain `SHOW`.
//!
//! The session keeps what the extended protocol names across messages: prepared statements
//! (query texts; the console takes no parameters) and portals (a statement bound with its
//! result formats, and its answer once run). A statement runs once, at the first Describe or
//! Execute of its portal, so Describe and Execute see the same rows. After an error every
//! message up to Sync is skipped, as PostgreSQL does. The answers themselves come from an
//! [`Answerer`] (the console service); this module only sequences the messages.

use bytes::BytesMut;
use pgtier_wire::SqlState;
use pgtier_wire::error_fields::{ErrorNotice, Severity};
use pgtier_wire::messages::Message;
use pgtier_wire::messages::backend::{
    BindComplete, CloseComplete, NoData, ParameterDescription, ParseComplete,
};
use pgtier_wire::messages::frontend::{Bind, Close, Describe, Execute, Parse, Target};
use pgtier_wire::sqlstate;

use crate::services::{ConsoleRights, StatementAnswer};

/// SQLSTATE of a portal that does not exist (PostgreSQL's invalid_cursor_name).
const INVALID_CURSOR_NAME: SqlState = SqlState::new(b"34000");

/// Answers the session's statements (the admin console).
pub trait Answerer {
    /// A simple-query string: everything but ReadyForQuery.
    fn simple(&mut self, query: &str, out: &mut BytesMut);
    /// One statement with the result formats Bind asked for.
    fn statement(&mut self, query: &str, formats: &[i16]) -> StatementAnswer;
}

/// A statement bound for execution.
#[derive(Debug)]
struct Portal {
    name: String,
    query: String,
    formats: Vec<i16>,
    /// Its answer, once Describe or Execute ran it; Execute sends the body once.
    answer: Option<StatementAnswer>,
    executed: bool,
}

/// What the engine does after a message.
#[derive(Debug, PartialEq, Eq)]
pub enum Handled {
    /// Answered (into the output buffer); go on.
    Done,
    /// A message the console cannot take at all: end the session with this FATAL message.
    Refuse(&'static str),
}

/// The protocol state of one console session.
#[derive(Debug)]
pub struct ConsoleSession {
    rights: ConsoleRights,
    /// Named and unnamed (`""`) statements, by name.
    statements: Vec<(String, String)>,
    portals: Vec<Portal>,
    /// An error happened; skip messages until Sync.
    skipping: bool,
    /// Most named statements and portals kept at once.
    max_named: usize,
}

impl ConsoleSession {
    /// A session with `rights`, keeping at most `max_named` statements and as many portals.
    pub fn new(rights: ConsoleRights, max_named: usize) -> ConsoleSession {
        ConsoleSession {
            rights,
            statements: Vec::new(),
            portals: Vec::new(),
            skipping: false,
            max_named: max_named.max(1),
        }
    }

    pub fn rights(&self) -> ConsoleRights {
        self.rights
    }

    /// The query the message `code`/`body` will run, if it runs one (so the caller can
    /// gather what it needs first).
    pub(crate) fn query_to_run<'a>(&'a self, code: u8, body: &'a [u8]) -> Option<&'a str> {
        match code {
            b'Q' => crate::messages::query_text(body),
            _ if self.skipping => None,
            b'D' => {
                let describe = Describe::decode_body(body).ok()?;
                match describe.target {
                    Target::Portal => self.unrun_portal(describe.name),
                    Target::Statement => None,
                }
            }
            b'E' => self.unrun_portal(Execute::decode_body(body).ok()?.portal),
            _ => None,
        }
    }

    fn unrun_portal(&self, name: &[u8]) -> Option<&str> {
        let portal = self.portal(name)?;
        portal.answer.is_none().then_some(portal.query.as_str())
    }

    fn portal(&self, name: &[u8]) -> Option<&Portal> {
        self.portals.iter().find(|p| p.name.as_bytes() == name)
    }

    /// Handles one whole message (type byte `code`, `body` after the length word).
    pub fn handle(
        &mut self,
        code: u8,
        body: &[u8],
        answerer: &mut dyn Answerer,
        out: &mut BytesMut,
    ) -> Handled {
        match code {
            b'Q' => {
                let query = crate::messages::query_text(body).unwrap_or("");
                answerer.simple(query, out);
                crate::messages::ready_for_query(out, b'I');
                self.skipping = false;
            }
            b'S' => {
                self.skipping = false;
                self.portals.retain(|p| !p.name.is_empty());
                crate::messages::ready_for_query(out, b'I');
            }
            b'H' => {}
            b'P' | b'B' | b'D' | b'E' | b'C' if self.skipping => {}
            b'P' => self.on_parse(body, out),
            b'B' => self.on_bind(body, out),
            b'D' => self.on_describe(body, answerer, out),
            b'E' => self.on_execute(body, answerer, out),
            b'C' => self.on_close(body, out),
            _ => return Handled::Refuse("the admin console takes queries only"),
        }
        Handled::Done
    }

    fn fail(&mut self, code: SqlState, message: &str, out: &mut BytesMut) {
        ErrorNotice::new(Severity::Error, code, message).encode_error(out);
        self.skipping = true;
    }

    fn on_parse(&mut self, body: &[u8], out: &mut BytesMut) {
        let Ok(parse) = Parse::decode_body(body) else {
            return self.fail(sqlstate::PROTOCOL_VIOLATION, "malformed Parse message", out);
        };
        let (Ok(name), Ok(query)) = (
            std::str::from_utf8(parse.statement),
            std::str::from_utf8(parse.sql),
        ) else {
            return self.fail(sqlstate::PROTOCOL_VIOLATION, "Parse is not UTF-8", out);
        };
        if !parse.param_types.is_empty() {
            return self.fail(
                sqlstate::PROTOCOL_VIOLATION,
                "admin console statements take no parameters",
                out,
            );
        }
        if query.split(';').filter(|s| !s.trim().is_empty()).count() > 1 {
            return self.fail(
                sqlstate::SYNTAX_ERROR,
                "cannot insert multiple commands into a prepared statement",
                out,
            );
        }
        let existing = self.statements.iter().position(|(n, _)| n == name);
        match existing {
            Some(_) if !name.is_empty() => {
                let message = format!("prepared statement \"{name}\" already exists");
                return self.fail(sqlstate::DUPLICATE_PREPARED_STATEMENT, &message, out);
            }
            Some(index) => self.statements[index].1 = query.to_string(),
            None if self.statements.len() > self.max_named => {
                return self.fail(
                    sqlstate::PROTOCOL_VIOLATION,
                    "too many prepared statements on this admin session (max_prepared_statements)",
                    out,
                );
            }
            None => self.statements.push((name.to_string(), query.to_string())),
        }
        ParseComplete.encode(out);
    }

    fn on_bind(&mut self, body: &[u8], out: &mut BytesMut) {
        let Ok(bind) = Bind::decode_body(body) else {
            return self.fail(sqlstate::PROTOCOL_VIOLATION, "malformed Bind message", out);
        };
        let Ok(portal) = std::str::from_utf8(bind.portal) else {
            return self.fail(sqlstate::PROTOCOL_VIOLATION, "Bind is not UTF-8", out);
        };
        let Some((_, query)) = self
            .statements
            .iter()
            .find(|(name, _)| name.as_bytes() == bind.statement)
        else {
            let name = String::from_utf8_lossy(bind.statement);
            let message = format!("prepared statement \"{name}\" does not exist");
            return self.fail(sqlstate::INVALID_SQL_STATEMENT_NAME, &message, out);
        };
        if !bind.params.is_empty() {
            let message = format!(
                "bind message supplies {} parameters, but prepared statement \"{}\" requires 0",
                bind.params.len(),
                String::from_utf8_lossy(bind.statement)
            );
            return self.fail(sqlstate::PROTOCOL_VIOLATION, &message, out);
        }
        if bind
            .result_formats
            .iter()
            .any(|format| !(0..=1).contains(&format))
        {
            return self.fail(
                sqlstate::PROTOCOL_VIOLATION,
                "unsupported result format code",
                out,
            );
        }
        let query = query.clone();
        let formats: Vec<i16> = bind.result_formats.iter().collect();
        self.portals.retain(|p| p.name != portal);
        if self.portals.len() >= self.max_named {
            return self.fail(
                sqlstate::PROTOCOL_VIOLATION,
                "too many open portals on this admin session",
                out,
            );
        }
        self.portals.push(Portal {
            name: portal.to_string(),
            query,
            formats,
            answer: None,
            executed: false,
        });
        BindComplete.encode(out);
    }

    fn on_describe(&mut self, body: &[u8], answerer: &mut dyn Answerer, out: &mut BytesMut) {
        let Ok(describe) = Describe::decode_body(body) else {
            return self.fail(
                sqlstate::PROTOCOL_VIOLATION,
                "malformed Describe message",
                out,
            );
        };
        let name = String::from_utf8_lossy(describe.name).into_owned();
        match describe.target {
            Target::Statement => {
                let Some((_, query)) = self.statements.iter().find(|(n, _)| *n == name) else {
                    let message = format!("prepared statement \"{name}\" does not exist");
                    return self.fail(sqlstate::INVALID_SQL_STATEMENT_NAME, &message, out);
                };
                // The columns do not depend on the rows: describe with text formats, send
                // no rows (the statement runs again at Execute).
                let answer = answerer.statement(&query.clone(), &[]);
                if answer.failed {
                    out.extend_from_slice(&answer.body);
                    self.skipping = true;
                    return;
                }
                ParameterDescription::encode_parts(out, &[]);
                write_description(out, answer.description.as_ref());
            }
            Target::Portal => {
                let Some(index) = self.portals.iter().position(|p| p.name == name) else {
                    let message = format!("portal \"{name}\" does not exist");
                    return self.fail(INVALID_CURSOR_NAME, &message, out);
                };
                let answer = self.run_portal(index, answerer);
                if answer.failed {
                    out.extend_from_slice(&answer.body);
                    self.skipping = true;
                    return;
                }
                write_description(out, answer.description.as_ref());
            }
        }
    }

    fn run_portal(&mut self, index: usize, answerer: &mut dyn Answerer) -> &StatementAnswer {
        let portal = &mut self.portals[index];
        portal
            .answer
            .get_or_insert_with(|| answerer.statement(&portal.query, &portal.formats))
    }

    fn on_execute(&mut self, body: &[u8], answerer: &mut dyn Answerer, out: &mut BytesMut) {
        let Ok(execute) = Execute::decode_body(body) else {
            return self.fail(
                sqlstate::PROTOCOL_VIOLATION,
                "malformed Execute message",
                out,
            );
        };
        let Some(index) = self
            .portals
            .iter()
            .position(|p| p.name.as_bytes() == execute.portal)
        else {
            let name = String::from_utf8_lossy(execute.portal);
            let message = format!("portal \"{name}\" does not exist");
            return self.fail(INVALID_CURSOR_NAME, &message, out);
        };
        let answer = self.run_portal(index, answerer);
        let failed = answer.failed;
        let body = answer.body.clone();
        let portal = &mut self.portals[index];
        if portal.executed && !failed {
            // A portal runs to completion once; executing it again returns no more rows.
            pgtier_wire::messages::backend::CommandComplete { tag: b"SHOW" }.encode(out);
            return;
        }
        portal.executed = true;
        out.extend_from_slice(&body);
        if failed {
            self.skipping = true;
        }
    }

    fn on_close(&mut self, body: &[u8], out: &mut BytesMut) {
        let Ok(close) = Close::decode_body(body) else {
            return self.fail(sqlstate::PROTOCOL_VIOLATION, "malformed Close message", out);
        };
        match close.target {
            Target::Statement => self.statements.retain(|(n, _)| n.as_bytes() != close.name),
            Target::Portal => self.portals.retain(|p| p.name.as_bytes() != close.name),
        }
        CloseComplete.encode(out);
    }
}

fn write_description(out: &mut BytesMut, description: Option<&BytesMut>) {
    match description {
        Some(description) => out.extend_from_slice(description),
        None => NoData.encode(out),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Answers `SHOW X` with one text column `x` and one row per call; anything else fails.
    #[derive(Default)]
    struct Fake {
        runs: usize,
        formats: Vec<Vec<i16>>,
    }

    impl Answerer for Fake {
        fn simple(&mut self, query: &str, out: &mut BytesMut) {
            out.extend_from_slice(&self.statement(query, &[]).body);
        }

        fn statement(&mut self, query: &str, formats: &[i16]) -> StatementAnswer {
            self.runs += 1;
            self.formats.push(formats.to_vec());
            let mut answer = StatementAnswer::default();
            if query.trim() == "SHOW X" {
                answer.description = Some(BytesMut::from(&b"T-"[..]));
                answer.body.extend_from_slice(b"D-C-");
            } else {
                answer.body.extend_from_slice(b"E-");
                answer.failed = true;
            }
            answer
        }
    }

    fn cstr(out: &mut Vec<u8>, text: &str) {
        out.extend_from_slice(text.as_bytes());
        out.push(0);
    }

    fn i16s(out: &mut Vec<u8>, values: &[i16]) {
        out.extend_from_slice(&(values.len() as i16).to_be_bytes());
        for value in values {
            out.extend_from_slice(&value.to_be_bytes());
        }
    }

    fn parse(name: &str, sql: &str, params: &[u32]) -> (u8, BytesMut) {
        let mut body = Vec::new();
        cstr(&mut body, name);
        cstr(&mut body, sql);
        body.extend_from_slice(&(params.len() as i16).to_be_bytes());
        for oid in params {
            body.extend_from_slice(&oid.to_be_bytes());
        }
        (b'P', BytesMut::from(&body[..]))
    }

    fn bind(portal: &str, statement: &str, params: &[&[u8]], formats: &[i16]) -> (u8, BytesMut) {
        let mut body = Vec::new();
        cstr(&mut body, portal);
        cstr(&mut body, statement);
        i16s(&mut body, &[]);
        body.extend_from_slice(&(params.len() as i16).to_be_bytes());
        for param in params {
            body.extend_from_slice(&(param.len() as i32).to_be_bytes());
            body.extend_from_slice(param);
        }
        i16s(&mut body, formats);
        (b'B', BytesMut::from(&body[..]))
    }

    fn describe(target: Target, name: &str) -> (u8, BytesMut) {
        let mut body = vec![match target {
            Target::Statement => b'S',
            Target::Portal => b'P',
        }];
        cstr(&mut body, name);
        (b'D', BytesMut::from(&body[..]))
    }

    fn close_statement(name: &str) -> (u8, BytesMut) {
        let mut body = vec![b'S'];
        cstr(&mut body, name);
        (b'C', BytesMut::from(&body[..]))
    }

    fn execute(portal: &str) -> (u8, BytesMut) {
        let mut body = Vec::new();
        cstr(&mut body, portal);
        body.extend_from_slice(&0i32.to_be_bytes());
        (b'E', BytesMut::from(&body[..]))
    }

    fn sync() -> (u8, BytesMut) {
        (b'S', BytesMut::new())
    }

    /// Runs the messages and returns the type bytes of everything sent (the fake's bodies
    /// appear as their letters).
    fn run(session: &mut ConsoleSession, fake: &mut Fake, messages: &[(u8, BytesMut)]) -> String {
        let mut out = BytesMut::new();
        for (code, body) in messages {
            assert_eq!(session.handle(*code, body, fake, &mut out), Handled::Done);
        }
        codes(&out)
    }

    /// The type bytes of real frames, and the fake's `X-` markers as `X`.
    fn codes(mut bytes: &[u8]) -> String {
        let mut codes = String::new();
        while let Some(&code) = bytes.first() {
            if bytes.get(1) == Some(&b'-') {
                codes.push(code as char);
                bytes = &bytes[2..];
                continue;
            }
            let len = u32::from_be_bytes([bytes[1], bytes[2], bytes[3], bytes[4]]) as usize;
            codes.push(code as char);
            bytes = &bytes[1 + len..];
        }
        codes
    }

    #[test]
    fn unnamed_statement_runs_once_for_describe_and_execute() {
        let mut session = ConsoleSession::new(ConsoleRights::Stats, 8);
        let mut fake = Fake::default();
        let sent = run(
            &mut session,
            &mut fake,
            &[
                parse("", "SHOW X", &[]),
                bind("", "", &[], &[1]),
                describe(Target::Portal, ""),
                execute(""),
                sync(),
            ],
        );
        assert_eq!(sent, "12TDCZ");
        assert_eq!(fake.runs, 1);
        assert_eq!(
            fake.formats,
            vec![vec![1]],
            "Bind's formats reach the answer"
        );
    }

    #[test]
    fn named_statement_is_described_then_reused_across_syncs() {
        let mut session = ConsoleSession::new(ConsoleRights::Admin, 8);
        let mut fake = Fake::default();
        let first = run(
            &mut session,
            &mut fake,
            &[
                parse("s0", "SHOW X", &[]),
                describe(Target::Statement, "s0"),
                sync(),
            ],
        );
        assert_eq!(first, "1tTZ");
        let second = run(
            &mut session,
            &mut fake,
            &[bind("", "s0", &[], &[]), execute(""), sync()],
        );
        assert_eq!(second, "2DCZ");
        let close = close_statement("s0");
        let third = run(
            &mut session,
            &mut fake,
            &[close, bind("", "s0", &[], &[]), sync()],
        );
        assert_eq!(third, "3EZ", "closed: Bind fails");
    }

    #[test]
    fn parameters_are_refused_and_the_rest_is_skipped_until_sync() {
        let mut session = ConsoleSession::new(ConsoleRights::Admin, 8);
        let mut fake = Fake::default();
        let sent = run(
            &mut session,
            &mut fake,
            &[
                parse("", "SHOW X", &[23]),
                bind("", "", &[], &[]),
                execute(""),
                sync(),
                parse("", "SHOW X", &[]),
                bind("", "", &[b"1"], &[]),
                execute(""),
                sync(),
            ],
        );
        assert_eq!(sent, "EZ1EZ");
        assert_eq!(fake.runs, 0);
    }

    #[test]
    fn a_failing_statement_errors_at_describe_and_skips_execute() {
        let mut session = ConsoleSession::new(ConsoleRights::Admin, 8);
        let mut fake = Fake::default();
        let sent = run(
            &mut session,
            &mut fake,
            &[
                parse("", "SELECT 1", &[]),
                bind("", "", &[], &[]),
                describe(Target::Portal, ""),
                execute(""),
                sync(),
            ],
        );
        assert_eq!(sent, "12EZ");
        assert_eq!(fake.runs, 1);
    }

    #[test]
    fn several_commands_in_one_parse_are_refused() {
        let mut session = ConsoleSession::new(ConsoleRights::Admin, 8);
        let mut fake = Fake::default();
        let sent = run(
            &mut session,
            &mut fake,
            &[parse("", "SHOW X; SHOW X", &[]), sync()],
        );
        assert_eq!(sent, "EZ");
    }

    #[test]
    fn query_to_run_names_the_statement_of_an_unrun_portal() {
        let mut session = ConsoleSession::new(ConsoleRights::Admin, 8);
        let mut fake = Fake::default();
        run(
            &mut session,
            &mut fake,
            &[parse("", "SHOW X", &[]), bind("", "", &[], &[])],
        );
        let (code, body) = execute("");
        assert_eq!(session.query_to_run(code, &body), Some("SHOW X"));
        let (code, body) = describe(Target::Statement, "");
        assert_eq!(session.query_to_run(code, &body), None);
        let mut query = BytesMut::from(&b"SHOW X\0"[..]);
        assert_eq!(session.query_to_run(b'Q', &query), Some("SHOW X"));
        query.clear();
        let mut out = BytesMut::new();
        assert!(matches!(
            session.handle(b'F', &query, &mut fake, &mut out),
            Handled::Refuse(_)
        ));
    }
}
