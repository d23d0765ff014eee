//! The smallest HTTP/1.x a scraper needs: one request per connection, read with a deadline and
//! a size bound, `GET /metrics` (or `HEAD`) answered, anything else refused with a 4xx, the
//! connection closed after the response. Parsing is a pure function over the bytes read, so
//! any input gets an answer and none a panic.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// Longest request head accepted (request line and headers); scrapers send a few hundred bytes.
pub(crate) const MAX_REQUEST_BYTES: usize = 8 * 1024;

/// How long a client has to send its request, and each write of the answer may block.
pub(crate) const IO_TIMEOUT: Duration = Duration::from_secs(5);

/// What a request asked for.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Request {
    /// `GET /metrics` (`head`: `HEAD`, no body), with the `Accept` header if any.
    Metrics { head: bool, accept: Option<String> },
    /// A reply other than the metrics: status line and a one-line body.
    Refuse {
        status: &'static str,
        reason: String,
    },
}

fn refuse(status: &'static str, reason: impl Into<String>) -> Request {
    Request::Refuse {
        status,
        reason: reason.into(),
    }
}

/// Where the request head ends, once it is complete.
fn head_end(bytes: &[u8]) -> Option<usize> {
    bytes
        .windows(4)
        .position(|window| window == b"\r\n\r\n")
        .map(|at| at + 4)
        .or_else(|| {
            // Bare LF line ends, which some tools send.
            bytes
                .windows(2)
                .position(|window| window == b"\n\n")
                .map(|at| at + 2)
        })
}

/// Parses a complete request head.
pub fn parse(head: &[u8]) -> Request {
    let Ok(text) = std::str::from_utf8(head) else {
        return refuse("400 Bad Request", "the request is not UTF-8");
    };
    let mut lines = text.lines();
    let request_line = lines.next().unwrap_or_default();
    let mut parts = request_line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return refuse("400 Bad Request", "malformed request line");
    };
    if !version.starts_with("HTTP/1.") {
        return refuse("400 Bad Request", "only HTTP/1.x is served");
    }
    let head_only = match method {
        "GET" => false,
        "HEAD" => true,
        _ => return refuse("405 Method Not Allowed", "only GET and HEAD are served"),
    };
    let path = target.split('?').next().unwrap_or_default();
    if path != "/metrics" {
        return refuse("404 Not Found", "the metrics are at /metrics");
    }
    let accept = lines
        .filter_map(|line| line.split_once(':'))
        .find(|(name, _)| name.trim().eq_ignore_ascii_case("accept"))
        .map(|(_, value)| value.trim().to_string());
    Request::Metrics {
        head: head_only,
        accept,
    }
}

/// Reads one request head from `stream` within [`IO_TIMEOUT`] and [`MAX_REQUEST_BYTES`].
pub(crate) fn read_request(stream: &mut TcpStream) -> Request {
    let deadline = Instant::now() + IO_TIMEOUT;
    let mut bytes = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    loop {
        if let Some(end) = head_end(&bytes) {
            return parse(&bytes[..end]);
        }
        if bytes.len() >= MAX_REQUEST_BYTES {
            return refuse("431 Request Header Fields Too Large", "request too large");
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || stream.set_read_timeout(Some(left)).is_err() {
            return refuse("408 Request Timeout", "the request did not arrive in time");
        }
        match stream.read(&mut chunk) {
            Ok(0) => return refuse("400 Bad Request", "the request ended early"),
            Ok(read) => bytes.extend_from_slice(&chunk[..read]),
            Err(error) if error.kind() == ErrorKind::Interrupted => {}
            Err(_) => return refuse("408 Request Timeout", "the request did not arrive in time"),
        }
    }
}

/// Writes a whole response and ends the connection.
pub(crate) fn respond(
    stream: &mut TcpStream,
    status: &str,
    content_type: &str,
    body: &[u8],
    head_only: bool,
) -> std::io::Result<()> {
    stream.set_write_timeout(Some(IO_TIMEOUT))?;
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes())?;
    if !head_only {
        stream.write_all(body)?;
    }
    stream.flush()?;
    let _ = stream.shutdown(std::net::Shutdown::Write);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn get_metrics_with_and_without_accept() {
        let request = parse(b"GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: application/openmetrics-text;version=1.0.0\r\n\r\n");
        assert_eq!(
            request,
            Request::Metrics {
                head: false,
                accept: Some("application/openmetrics-text;version=1.0.0".to_string())
            }
        );
        assert_eq!(
            parse(b"HEAD /metrics?x=1 HTTP/1.0\r\n\r\n"),
            Request::Metrics {
                head: true,
                accept: None
            }
        );
    }

    #[test]
    fn anything_else_is_refused_with_a_4xx() {
        let status = |bytes: &[u8]| match parse(bytes) {
            Request::Refuse { status, .. } => status,
            Request::Metrics { .. } => "200",
        };
        assert_eq!(status(b"GET / HTTP/1.1\r\n\r\n"), "404 Not Found");
        assert_eq!(
            status(b"POST /metrics HTTP/1.1\r\n\r\n"),
            "405 Method Not Allowed"
        );
        assert_eq!(status(b"GET /metrics\r\n\r\n"), "400 Bad Request");
        assert_eq!(status(b"GET /metrics SPDY/3\r\n\r\n"), "400 Bad Request");
        assert_eq!(status(b"\xff\xfe\r\n\r\n"), "400 Bad Request");
        assert_eq!(status(b"\r\n\r\n"), "400 Bad Request");
        assert_eq!(status(b"GET  /metrics HTTP/1.1\r\n\r\n"), "400 Bad Request");
    }

    #[test]
    fn the_head_ends_at_the_first_empty_line() {
        assert_eq!(head_end(b"GET / HTTP/1.1\r\n\r\nbody"), Some(18));
        assert_eq!(head_end(b"GET / HTTP/1.1\n\n"), Some(16));
        assert_eq!(head_end(b"GET / HTTP/1.1\r\n"), None);
    }
}
