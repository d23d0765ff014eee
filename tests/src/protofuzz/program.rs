//! A fuzz program: what each client of a run sends and when it waits, as data that can be
//! printed, read back (the regression cases in `tests/protofuzz/`), shrunk, and lowered to a
//! differential [`Script`].
//!
//! The text form is one line per item. A line of a frontend message adds it to the client's
//! current send; any other line ends that send first. Fields are separated by one space and
//! escaped (`\s` space, `\\`, `\n`, `\t`, `\r`, `\0` NUL, `\xNN` any other byte, `\e` the
//! empty string, `\N` SQL NULL in a Bind), so a field never holds a space.
//!
//! ```text
//! client
//! Q SELECT\s1
//! P s1 SELECT\s$1::int
//! B \e s1 1
//! E \e 0
//! S
//! > ready 2
//! > settle 30
//! > cancel 200
//! > terminate
//! ```

use std::fmt::Write as _;
use std::time::Duration;

use crate::differential::{Frontend, Script};
use crate::rawwire;

/// Parameters whose ParameterStatus messages take part in the comparison.
pub const REPORTED_PARAMETERS: [&str; 2] = ["application_name", "DateStyle"];

/// One frontend message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Msg {
    Query(String),
    Parse {
        name: String,
        sql: String,
    },
    /// Bind of `statement` to `portal`; `None` is NULL.
    Bind {
        portal: String,
        statement: String,
        params: Vec<Option<String>>,
    },
    DescribeStatement(String),
    DescribePortal(String),
    Execute {
        portal: String,
        max_rows: u32,
    },
    CloseStatement(String),
    ClosePortal(String),
    Sync,
    Flush,
    CopyData(Vec<u8>),
    CopyDone,
    CopyFail(String),
}

/// One step of a client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// Write these messages in one send.
    Send(Vec<Msg>),
    /// Read until this many ReadyForQuery messages arrived.
    Ready(usize),
    /// Read until a message of one of these types arrived (a ReadyForQuery read here counts
    /// for the next `Ready`).
    Tag(Vec<u8>),
    /// Read whatever arrives within this many milliseconds.
    Settle(u64),
    /// After this many milliseconds, a CancelRequest for the connection's key.
    Cancel(u64),
    /// Terminate and close; the client's next op logs in on a new connection.
    Terminate,
}

/// What one client does, in order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClientProgram {
    pub ops: Vec<Op>,
}

/// Every client of a run; each runs on its own connection(s), concurrently with the others.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Program {
    pub clients: Vec<ClientProgram>,
}

impl Msg {
    fn encode(&self) -> Vec<u8> {
        match self {
            Msg::Query(sql) => rawwire::query_message(sql),
            Msg::Parse { name, sql } => rawwire::parse_message(name, sql),
            Msg::Bind {
                portal,
                statement,
                params,
            } => {
                let params: Vec<Option<&str>> = params.iter().map(|p| p.as_deref()).collect();
                rawwire::bind_portal_message(portal, statement, &params)
            }
            Msg::DescribeStatement(name) => rawwire::describe_statement_message(name),
            Msg::DescribePortal(name) => rawwire::describe_named_portal_message(name),
            Msg::Execute { portal, max_rows } => rawwire::execute_portal_message(portal, *max_rows),
            Msg::CloseStatement(name) => rawwire::close_statement_message(name),
            Msg::ClosePortal(name) => rawwire::close_portal_message(name),
            Msg::Sync => rawwire::sync_message(),
            Msg::Flush => rawwire::flush_message(),
            Msg::CopyData(data) => rawwire::copy_data_message(data),
            Msg::CopyDone => rawwire::copy_done_message(),
            Msg::CopyFail(reason) => rawwire::copy_fail_message(reason),
        }
    }

    fn to_line(&self) -> String {
        let e = |text: &str| escape(text.as_bytes());
        match self {
            Msg::Query(sql) => format!("Q {}", e(sql)),
            Msg::Parse { name, sql } => format!("P {} {}", e(name), e(sql)),
            Msg::Bind {
                portal,
                statement,
                params,
            } => {
                let mut line = format!("B {} {}", e(portal), e(statement));
                for param in params {
                    line.push(' ');
                    line.push_str(&param.as_deref().map_or_else(|| "\\N".to_string(), e));
                }
                line
            }
            Msg::DescribeStatement(name) => format!("DS {}", e(name)),
            Msg::DescribePortal(name) => format!("DP {}", e(name)),
            Msg::Execute { portal, max_rows } => format!("E {} {max_rows}", e(portal)),
            Msg::CloseStatement(name) => format!("CS {}", e(name)),
            Msg::ClosePortal(name) => format!("CP {}", e(name)),
            Msg::Sync => "S".to_string(),
            Msg::Flush => "H".to_string(),
            Msg::CopyData(data) => format!("d {}", escape(data)),
            Msg::CopyDone => "c".to_string(),
            Msg::CopyFail(reason) => format!("f {}", e(reason)),
        }
    }

    fn from_fields(fields: &[&str]) -> Result<Msg, String> {
        let text = |index: usize| -> Result<String, String> {
            let field = fields
                .get(index)
                .ok_or_else(|| format!("missing field {index}"))?;
            let bytes = unescape(field)?.ok_or("NULL where a text is needed")?;
            String::from_utf8(bytes).map_err(|_| "not UTF-8".to_string())
        };
        let arity = |count: usize| -> Result<(), String> {
            if fields.len() == count {
                Ok(())
            } else {
                Err(format!("{} takes {} fields", fields[0], count - 1))
            }
        };
        let msg = match fields[0] {
            "Q" => {
                arity(2)?;
                Msg::Query(text(1)?)
            }
            "P" => {
                arity(3)?;
                Msg::Parse {
                    name: text(1)?,
                    sql: text(2)?,
                }
            }
            "B" => {
                if fields.len() < 3 {
                    return Err("B takes a portal and a statement".to_string());
                }
                let mut params = Vec::new();
                for field in &fields[3..] {
                    let value = unescape(field)?
                        .map(String::from_utf8)
                        .transpose()
                        .map_err(|_| "not UTF-8".to_string())?;
                    params.push(value);
                }
                Msg::Bind {
                    portal: text(1)?,
                    statement: text(2)?,
                    params,
                }
            }
            "DS" => {
                arity(2)?;
                Msg::DescribeStatement(text(1)?)
            }
            "DP" => {
                arity(2)?;
                Msg::DescribePortal(text(1)?)
            }
            "E" => {
                arity(3)?;
                let max_rows = fields[2]
                    .parse()
                    .map_err(|_| format!("row limit {:?}", fields[2]))?;
                Msg::Execute {
                    portal: text(1)?,
                    max_rows,
                }
            }
            "CS" => {
                arity(2)?;
                Msg::CloseStatement(text(1)?)
            }
            "CP" => {
                arity(2)?;
                Msg::ClosePortal(text(1)?)
            }
            "S" => {
                arity(1)?;
                Msg::Sync
            }
            "H" => {
                arity(1)?;
                Msg::Flush
            }
            "d" => {
                arity(2)?;
                Msg::CopyData(unescape(fields[1])?.ok_or("NULL copy data")?)
            }
            "c" => {
                arity(1)?;
                Msg::CopyDone
            }
            "f" => {
                arity(2)?;
                Msg::CopyFail(text(1)?)
            }
            other => return Err(format!("unknown message {other:?}")),
        };
        Ok(msg)
    }
}

impl ClientProgram {
    /// How many connections the client opens: one, and one more after each Terminate that
    /// something follows.
    pub fn connection_count(&self) -> usize {
        let mut count = 1;
        for (index, op) in self.ops.iter().enumerate() {
            if *op == Op::Terminate && index + 1 < self.ops.len() {
                count += 1;
            }
        }
        count
    }

    /// The differential script of this client alone: its connections are `c0`, `c1`, ...
    pub fn script(&self, step_timeout: Duration) -> Script {
        let names: Vec<String> = (0..self.connection_count())
            .map(|index| format!("c{index}"))
            .collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        // The parameters the grammar SETs and RESETs: their ParameterStatus messages are
        // compared, where they come included; every other one is left out (see
        // docs/compatibility.md, "The differential protocol fuzzer").
        let mut script = Script::new(&refs)
            .step_timeout(step_timeout)
            .report_parameters(&REPORTED_PARAMETERS);
        let mut conn = 0;
        for op in &self.ops {
            let name = refs[conn.min(refs.len() - 1)];
            script = match op {
                Op::Send(msgs) => {
                    let mut frontend = Frontend::new();
                    for msg in msgs {
                        frontend = frontend.raw(&msg.encode());
                    }
                    script.send(name, frontend)
                }
                Op::Ready(count) => script.await_ready(name, *count),
                Op::Tag(tags) => script.await_any_tag(name, tags),
                Op::Settle(ms) => script.settle(name, Duration::from_millis(*ms)),
                Op::Cancel(ms) => script.cancel(name, Duration::from_millis(*ms)),
                Op::Terminate => {
                    conn += 1;
                    script.terminate(name)
                }
            };
        }
        script
    }
}

impl Program {
    /// The text form (module doc).
    pub fn to_text(&self) -> String {
        let mut text = String::new();
        for client in &self.clients {
            text.push_str("client\n");
            for op in &client.ops {
                match op {
                    Op::Send(msgs) => {
                        for msg in msgs {
                            let _ = writeln!(text, "{}", msg.to_line());
                        }
                        // Two sends in a row stay two sends.
                        text.push_str("> send\n");
                    }
                    Op::Ready(count) => {
                        let _ = writeln!(text, "> ready {count}");
                    }
                    Op::Tag(tags) => {
                        let _ = writeln!(text, "> tag {}", String::from_utf8_lossy(tags));
                    }
                    Op::Settle(ms) => {
                        let _ = writeln!(text, "> settle {ms}");
                    }
                    Op::Cancel(ms) => {
                        let _ = writeln!(text, "> cancel {ms}");
                    }
                    Op::Terminate => text.push_str("> terminate\n"),
                }
            }
        }
        text
    }

    /// Reads the text form; `#` lines are comments.
    pub fn parse(text: &str) -> Result<Program, String> {
        let mut program = Program::default();
        let mut pending: Vec<Msg> = Vec::new();
        for (number, line) in text.lines().enumerate() {
            let fail = |why: String| format!("line {}: {why}: {line:?}", number + 1);
            let line = line.trim_end();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            if line == "client" {
                flush_send(&mut program, &mut pending);
                program.clients.push(ClientProgram::default());
                continue;
            }
            let Some(client) = program.clients.last_mut() else {
                return Err(fail("before the first `client`".to_string()));
            };
            if let Some(rest) = line.strip_prefix("> ") {
                if !pending.is_empty() {
                    client.ops.push(Op::Send(std::mem::take(&mut pending)));
                }
                let words: Vec<&str> = rest.split(' ').collect();
                let number_arg = || -> Result<u64, String> {
                    words
                        .get(1)
                        .and_then(|word| word.parse().ok())
                        .ok_or_else(|| fail("a number is missing".to_string()))
                };
                match words[0] {
                    "send" => {}
                    "ready" => client.ops.push(Op::Ready(number_arg()? as usize)),
                    "settle" => client.ops.push(Op::Settle(number_arg()?)),
                    "cancel" => client.ops.push(Op::Cancel(number_arg()?)),
                    "terminate" => client.ops.push(Op::Terminate),
                    "tag" => {
                        let tags = words
                            .get(1)
                            .filter(|word| !word.is_empty())
                            .ok_or_else(|| fail("a tag is missing".to_string()))?;
                        client.ops.push(Op::Tag(tags.as_bytes().to_vec()));
                    }
                    other => return Err(fail(format!("unknown step {other:?}"))),
                }
                continue;
            }
            let fields: Vec<&str> = line.split(' ').collect();
            pending.push(Msg::from_fields(&fields).map_err(fail)?);
        }
        flush_send(&mut program, &mut pending);
        Ok(program)
    }

    /// Number of ops of every client.
    pub fn size(&self) -> usize {
        self.clients.iter().map(|client| client.ops.len()).sum()
    }
}

fn flush_send(program: &mut Program, pending: &mut Vec<Msg>) {
    if pending.is_empty() {
        return;
    }
    if let Some(client) = program.clients.last_mut() {
        client.ops.push(Op::Send(std::mem::take(pending)));
    }
}

/// One field of the text form (module doc).
pub fn escape(bytes: &[u8]) -> String {
    if bytes.is_empty() {
        return "\\e".to_string();
    }
    let mut out = String::with_capacity(bytes.len());
    for &byte in bytes {
        match byte {
            b' ' => out.push_str("\\s"),
            b'\\' => out.push_str("\\\\"),
            b'\n' => out.push_str("\\n"),
            b'\t' => out.push_str("\\t"),
            b'\r' => out.push_str("\\r"),
            0 => out.push_str("\\0"),
            0x21..=0x7e => out.push(byte as char),
            _ => {
                let _ = write!(out, "\\x{byte:02x}");
            }
        }
    }
    out
}

/// The bytes of one field; `None` for `\N`.
pub fn unescape(field: &str) -> Result<Option<Vec<u8>>, String> {
    match field {
        "\\N" => return Ok(None),
        "\\e" => return Ok(Some(Vec::new())),
        _ => {}
    }
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        let byte = bytes[index];
        index += 1;
        if byte != b'\\' {
            out.push(byte);
            continue;
        }
        let escaped = *bytes.get(index).ok_or("a lone backslash")?;
        index += 1;
        match escaped {
            b's' => out.push(b' '),
            b'\\' => out.push(b'\\'),
            b'n' => out.push(b'\n'),
            b't' => out.push(b'\t'),
            b'r' => out.push(b'\r'),
            b'0' => out.push(0),
            b'x' => {
                let hex = field.get(index..index + 2).ok_or("a short \\x escape")?;
                out.push(u8::from_str_radix(hex, 16).map_err(|_| "a bad \\x escape")?);
                index += 2;
            }
            other => return Err(format!("unknown escape \\{}", other as char)),
        }
    }
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_text_form_round_trips() {
        let program = Program {
            clients: vec![
                ClientProgram {
                    ops: vec![
                        Op::Send(vec![
                            Msg::Query("SELECT 'a b'\n".to_string()),
                            Msg::Parse {
                                name: String::new(),
                                sql: "SELECT $1".to_string(),
                            },
                            Msg::Bind {
                                portal: "p1".to_string(),
                                statement: String::new(),
                                params: vec![Some(String::new()), None, Some("x\\y".to_string())],
                            },
                            Msg::Execute {
                                portal: "p1".to_string(),
                                max_rows: 2,
                            },
                            Msg::CopyData(vec![0, 1, 255, b' ']),
                            Msg::Sync,
                        ]),
                        Op::Send(vec![Msg::Flush]),
                        Op::Ready(2),
                        Op::Tag(b"GZ".to_vec()),
                        Op::Settle(30),
                        Op::Cancel(200),
                        Op::Terminate,
                    ],
                },
                ClientProgram {
                    ops: vec![Op::Send(vec![Msg::CopyFail("why".to_string())])],
                },
            ],
        };
        let text = program.to_text();
        assert_eq!(Program::parse(&text), Ok(program), "{text}");
    }

    #[test]
    fn a_terminate_opens_a_new_connection_for_what_follows() {
        let client = ClientProgram {
            ops: vec![Op::Ready(0), Op::Terminate, Op::Ready(0), Op::Terminate],
        };
        assert_eq!(client.connection_count(), 2);
    }
}
