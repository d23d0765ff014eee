//! A minimal PostgreSQL client speaking the wire protocol over a TcpStream (trust auth only),
//! so tests can hold sessions open, read BackendKeyData, and send CancelRequests.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

pub struct RawClient {
    pub stream: TcpStream,
    pub key: (u32, u32),
    pub params: HashMap<String, String>,
}

/// An ErrorResponse: (SQLSTATE, message).
pub type PgError = (String, String);

fn read_message(stream: &mut TcpStream) -> std::io::Result<(u8, Vec<u8>)> {
    let mut header = [0u8; 5];
    stream.read_exact(&mut header)?;
    let len = u32::from_be_bytes([header[1], header[2], header[3], header[4]]) as usize;
    let mut body = vec![0u8; len.saturating_sub(4)];
    stream.read_exact(&mut body)?;
    Ok((header[0], body))
}

fn cstrs(body: &[u8]) -> Vec<String> {
    body.split(|b| *b == 0)
        .map(|s| String::from_utf8_lossy(s).into_owned())
        .collect()
}

pub fn error_fields(body: &[u8]) -> PgError {
    let mut code = String::new();
    let mut message = String::new();
    for field in body.split(|b| *b == 0) {
        if let Some((&kind, value)) = field.split_first() {
            let value = String::from_utf8_lossy(value).into_owned();
            match kind {
                b'C' => code = value,
                b'M' => message = value,
                _ => {}
            }
        }
    }
    (code, message)
}

impl RawClient {
    pub fn connect(
        port: u16,
        user: &str,
        db: &str,
        extra: &[(&str, &str)],
    ) -> Result<RawClient, PgError> {
        let mut stream = TcpStream::connect(("127.0.0.1", port))
            .map_err(|e| ("io".to_string(), e.to_string()))?;
        stream.set_read_timeout(Some(Duration::from_secs(30))).ok();
        let mut body = Vec::new();
        body.extend_from_slice(&196_608u32.to_be_bytes());
        for (name, value) in [("user", user), ("database", db)]
            .iter()
            .chain(extra.iter())
        {
            body.extend_from_slice(name.as_bytes());
            body.push(0);
            body.extend_from_slice(value.as_bytes());
            body.push(0);
        }
        body.push(0);
        let mut packet = ((body.len() + 4) as u32).to_be_bytes().to_vec();
        packet.extend_from_slice(&body);
        stream
            .write_all(&packet)
            .map_err(|e| ("io".to_string(), e.to_string()))?;
        let mut client = RawClient {
            stream,
            key: (0, 0),
            params: HashMap::new(),
        };
        loop {
            let (code, body) =
                read_message(&mut client.stream).map_err(|e| ("io".to_string(), e.to_string()))?;
            match code {
                b'R' => {}
                b'S' => {
                    let fields = cstrs(&body);
                    client.params.insert(fields[0].clone(), fields[1].clone());
                }
                b'K' => {
                    client.key = (
                        u32::from_be_bytes([body[0], body[1], body[2], body[3]]),
                        u32::from_be_bytes([body[4], body[5], body[6], body[7]]),
                    );
                }
                b'E' => return Err(error_fields(&body)),
                b'Z' => return Ok(client),
                _ => {}
            }
        }
    }

    pub fn send_query(&mut self, sql: &str) {
        let mut packet = vec![b'Q'];
        packet.extend_from_slice(&((sql.len() + 5) as u32).to_be_bytes());
        packet.extend_from_slice(sql.as_bytes());
        packet.push(0);
        self.stream.write_all(&packet).expect("send query");
    }

    /// Reads until ReadyForQuery: the rows (first column of each) or the first error.
    pub fn read_result(&mut self) -> Result<Vec<String>, PgError> {
        let mut rows = Vec::new();
        let mut error = None;
        loop {
            let (code, body) = match read_message(&mut self.stream) {
                Ok(message) => message,
                // A FATAL error is followed by the connection closing, not ReadyForQuery.
                Err(e) => return Err(error.unwrap_or(("io".to_string(), e.to_string()))),
            };
            match code {
                b'D' => {
                    let len = i32::from_be_bytes([body[2], body[3], body[4], body[5]]);
                    let value = if len < 0 {
                        "NULL".to_string()
                    } else {
                        String::from_utf8_lossy(&body[6..6 + len as usize]).into_owned()
                    };
                    rows.push(value);
                }
                b'E' => error = Some(error_fields(&body)),
                b'Z' => {
                    return match error {
                        Some(error) => Err(error),
                        None => Ok(rows),
                    };
                }
                _ => {}
            }
        }
    }

    pub fn query(&mut self, sql: &str) -> Result<Vec<String>, PgError> {
        self.send_query(sql);
        self.read_result()
    }

    pub fn query_one(&mut self, sql: &str) -> String {
        self.query(sql)
            .expect("query")
            .into_iter()
            .next()
            .unwrap_or_default()
    }
}

pub fn send_cancel(port: u16, key: (u32, u32)) {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect for cancel");
    let mut packet = Vec::new();
    packet.extend_from_slice(&16u32.to_be_bytes());
    packet.extend_from_slice(&80_877_102u32.to_be_bytes());
    packet.extend_from_slice(&key.0.to_be_bytes());
    packet.extend_from_slice(&key.1.to_be_bytes());
    stream.write_all(&packet).expect("send cancel");
    let mut rest = Vec::new();
    let _ = stream.read_to_end(&mut rest);
}
