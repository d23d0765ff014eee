//! The raw-protocol differential harness: a `Script` of byte-level steps over several named
//! client connections, run once directly against PostgreSQL and once through pgtier, and the
//! comparison, message by message and connection by connection, of what each client received.
//!
//! PostgreSQL is the oracle, so a script needs no expected output and cannot be wrong about
//! it: whatever the direct run shows is what a pooled client is owed. Only what cannot be
//! equal between a direct backend and a pooled one is normalised away (see `normalise`):
//! BackendKeyData, the sender's pid in a NotificationResponse, ParameterStatus messages the
//! script did not ask about, and the source-location fields of errors and notices. Statement
//! names are never normalised: PostgreSQL names them in its messages (`prepared statement
//! "s1" does not exist`) and a pooled client must see its own names there.
//!
//! Every wait is bounded by the script's timeout, and a timeout is not an assertion: it ends
//! the run as "hung", and the transcript says at which step and shows what had arrived.

use std::fmt::Write as _;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use crate::rawwire::{self, Message};
use crate::{LocalPg, Pgtier};

/// How long one step may wait for a message before the run is declared hung.
pub const DEFAULT_STEP_TIMEOUT: Duration = Duration::from_secs(20);
/// Largest backend message a script accepts.
const MAX_MESSAGE_BYTES: usize = 64 << 20;
/// Pause between the chunks of a split send, so that they reach the peer in separate reads.
const CHUNK_PAUSE: Duration = Duration::from_millis(1);
/// How long to read after a failed send, to collect what the peer said before it closed.
const DRAIN_AFTER_SEND_FAILURE: Duration = Duration::from_secs(2);

/// Where a script runs: a PostgreSQL server or a pooler, logged in with trust auth.
#[derive(Clone, Debug)]
pub struct Target {
    /// Names the target in reports ("direct", "pgtier transaction mode").
    pub label: String,
    pub host: String,
    pub port: u16,
    pub dbname: String,
    pub user: String,
    /// Log in over TLS (SSLRequest first) with this configuration, for server `localhost`.
    pub tls: Option<std::sync::Arc<rustls::ClientConfig>>,
}

impl Target {
    /// Database and user `postgres` on 127.0.0.1:`port`.
    pub fn new(label: &str, port: u16) -> Target {
        Target {
            label: label.to_string(),
            host: "127.0.0.1".to_string(),
            port,
            dbname: "postgres".to_string(),
            user: "postgres".to_string(),
            tls: None,
        }
    }

    /// The server itself.
    pub fn direct(pg: &LocalPg) -> Target {
        Target::new("direct PostgreSQL", pg.port())
    }

    /// Through `proxy`, labelled with its pool mode.
    pub fn through(proxy: &Pgtier) -> Target {
        let label = format!("pgtier {} mode", proxy.config().pool_mode);
        Target::new(&label, proxy.port())
    }
}

/// Frontend messages, built in the order they will be sent.
#[derive(Clone, Debug, Default)]
pub struct Frontend {
    bytes: Vec<u8>,
}

impl Frontend {
    pub fn new() -> Frontend {
        Frontend::default()
    }

    /// Parse of `sql` as statement `name` ("" = unnamed), parameter types inferred.
    pub fn parse(self, name: &str, sql: &str) -> Frontend {
        self.raw(&rawwire::parse_message(name, sql))
    }

    /// Parse with explicit parameter type OIDs.
    pub fn parse_typed(self, name: &str, sql: &str, parameter_types: &[u32]) -> Frontend {
        self.raw(&rawwire::parse_typed_message(name, sql, parameter_types))
    }

    /// Bind of `statement` to the unnamed portal with text parameters.
    pub fn bind(self, statement: &str, params: &[&str]) -> Frontend {
        let params: Vec<Option<&str>> = params.iter().map(|p| Some(*p)).collect();
        self.bind_portal("", statement, &params)
    }

    /// Bind of `statement` to `portal`; `None` is SQL NULL.
    pub fn bind_portal(self, portal: &str, statement: &str, params: &[Option<&str>]) -> Frontend {
        self.raw(&rawwire::bind_portal_message(portal, statement, params))
    }

    pub fn describe_statement(self, name: &str) -> Frontend {
        self.raw(&rawwire::describe_statement_message(name))
    }

    pub fn describe_portal(self, name: &str) -> Frontend {
        self.raw(&rawwire::describe_named_portal_message(name))
    }

    /// Execute of the unnamed portal, all rows.
    pub fn execute(self) -> Frontend {
        self.execute_portal("", 0)
    }

    /// Execute of `portal`, at most `max_rows` rows (0 = all).
    pub fn execute_portal(self, portal: &str, max_rows: u32) -> Frontend {
        self.raw(&rawwire::execute_portal_message(portal, max_rows))
    }

    pub fn close_statement(self, name: &str) -> Frontend {
        self.raw(&rawwire::close_statement_message(name))
    }

    pub fn close_portal(self, name: &str) -> Frontend {
        self.raw(&rawwire::close_portal_message(name))
    }

    pub fn sync(self) -> Frontend {
        self.raw(&rawwire::sync_message())
    }

    pub fn flush(self) -> Frontend {
        self.raw(&rawwire::flush_message())
    }

    /// Simple Query.
    pub fn query(self, sql: &str) -> Frontend {
        self.raw(&rawwire::query_message(sql))
    }

    /// `more`'s messages after these.
    pub fn then(self, more: Frontend) -> Frontend {
        self.raw(&more.bytes)
    }

    /// Any bytes, as they are.
    pub fn raw(mut self, bytes: &[u8]) -> Frontend {
        self.bytes.extend_from_slice(bytes);
        self
    }

    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }
}

/// What a step does on its connection.
#[derive(Clone, Debug)]
pub enum Action {
    /// Log in now (a connection otherwise logs in at its first step).
    Connect,
    /// Write these bytes; with `chunks`, in writes of those sizes (cycled), each followed by
    /// a short pause so that the peer reads them separately.
    Send { bytes: Vec<u8>, chunks: Vec<usize> },
    /// Read until this many more ReadyForQuery messages have arrived.
    AwaitReady(usize),
    /// Read until a message with this type byte arrives.
    AwaitTag(u8),
    /// Read until a message with one of these type bytes arrives; a ReadyForQuery read
    /// counts for the next `AwaitReady`.
    AwaitAnyTag(Vec<u8>),
    /// Send Terminate and close the connection.
    Terminate,
    /// Read whatever arrives within this time (a client that waits a while without knowing
    /// what to expect, e.g. after a Flush); never fails for lack of messages. The
    /// ReadyForQuery messages it reads count for the next `AwaitReady`.
    Settle(Duration),
    /// After this delay, send a CancelRequest with the key the connection was given, from a
    /// connection of its own, as a driver's cancel does.
    Cancel(Duration),
}

/// One step: an action on one of the script's connections.
#[derive(Clone, Debug)]
pub struct Step {
    /// Index into the script's connection names.
    pub conn: usize,
    pub action: Action,
}

/// A byte-level conversation of several clients with a server, in a fixed order.
///
/// After the last step, every connection still open gets a fence, a Sync and one
/// ReadyForQuery, so that anything a target sent beyond what the steps waited for is caught
/// in the comparison; then each sends Terminate.
#[derive(Clone, Debug)]
pub struct Script {
    names: Vec<String>,
    steps: Vec<Step>,
    parameters: Vec<String>,
    step_timeout: Duration,
}

impl Script {
    /// A script over the connections named `names` ("a", "b", ...).
    pub fn new(names: &[&str]) -> Script {
        Script {
            names: names.iter().map(|name| name.to_string()).collect(),
            steps: Vec::new(),
            parameters: Vec::new(),
            step_timeout: DEFAULT_STEP_TIMEOUT,
        }
    }

    /// Number of client connections the script opens.
    pub fn connection_count(&self) -> usize {
        self.names.len()
    }

    pub fn steps(&self) -> &[Step] {
        &self.steps
    }

    /// Keep ParameterStatus messages of these parameters in the comparison (all others are
    /// dropped: a pooler's welcome lists what its server reported at some earlier login).
    pub fn report_parameters(mut self, names: &[&str]) -> Script {
        self.parameters = names.iter().map(|name| name.to_string()).collect();
        self
    }

    /// How long one step may wait before the run is declared hung.
    pub fn step_timeout(mut self, timeout: Duration) -> Script {
        self.step_timeout = timeout;
        self
    }

    pub fn connect(self, conn: &str) -> Script {
        self.step(conn, Action::Connect)
    }

    pub fn send(self, conn: &str, messages: Frontend) -> Script {
        let action = Action::Send {
            bytes: messages.bytes,
            chunks: Vec::new(),
        };
        self.step(conn, action)
    }

    /// Sends in writes of `chunks` bytes (cycled), e.g. `&[1, 7, 3]`.
    pub fn send_chunked(self, conn: &str, messages: Frontend, chunks: &[usize]) -> Script {
        assert!(
            chunks.iter().all(|&size| size > 0),
            "chunk sizes must be positive: {chunks:?}"
        );
        let action = Action::Send {
            bytes: messages.bytes,
            chunks: chunks.to_vec(),
        };
        self.step(conn, action)
    }

    pub fn await_ready(self, conn: &str, count: usize) -> Script {
        self.step(conn, Action::AwaitReady(count))
    }

    pub fn await_tag(self, conn: &str, tag: u8) -> Script {
        self.step(conn, Action::AwaitTag(tag))
    }

    /// Sends `messages` and waits for `ready` ReadyForQuery messages.
    pub fn exchange(self, conn: &str, messages: Frontend, ready: usize) -> Script {
        self.send(conn, messages).await_ready(conn, ready)
    }

    /// A simple Query and its ReadyForQuery.
    pub fn query(self, conn: &str, sql: &str) -> Script {
        self.exchange(conn, Frontend::new().query(sql), 1)
    }

    pub fn terminate(self, conn: &str) -> Script {
        self.step(conn, Action::Terminate)
    }

    /// Reads on `conn` until a message of one of `tags` arrives.
    pub fn await_any_tag(self, conn: &str, tags: &[u8]) -> Script {
        self.step(conn, Action::AwaitAnyTag(tags.to_vec()))
    }

    /// Reads what arrives on `conn` within `time`.
    pub fn settle(self, conn: &str, time: Duration) -> Script {
        self.step(conn, Action::Settle(time))
    }

    /// After `delay`, a CancelRequest for `conn`'s key.
    pub fn cancel(self, conn: &str, delay: Duration) -> Script {
        self.step(conn, Action::Cancel(delay))
    }

    fn step(mut self, conn: &str, action: Action) -> Script {
        let Some(index) = self.names.iter().position(|name| name == conn) else {
            panic!(
                "script step on connection {conn:?}, which is not one of {:?}",
                self.names
            );
        };
        self.steps.push(Step {
            conn: index,
            action,
        });
        self
    }

    /// Runs the script against `target`.
    pub fn run(&self, target: &Target) -> Transcript {
        Run::new(self, target).play()
    }
}

/// How the proxy of a scenario pools.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PoolMode {
    Session,
    Transaction,
}

impl PoolMode {
    pub fn name(self) -> &'static str {
        match self {
            PoolMode::Session => "session",
            PoolMode::Transaction => "transaction",
        }
    }
}

/// How long a pooled client waits for a server before it gets an error, unless a scenario
/// says otherwise. Short, so that a client kept from its server (by another client's pin)
/// fails within seconds rather than at the step timeout; long for anything else, since a
/// script's transactions take milliseconds.
pub const QUERY_WAIT_TIMEOUT_SECS: &str = "3";

/// A script and the pool it runs through: its size in transaction mode (session mode gives
/// every connection of the script a server of its own, so it is at least their number) and
/// further `[pgtier]` settings.
#[derive(Clone, Debug)]
pub struct Scenario {
    pub script: Script,
    pub pool_size: u32,
    pub settings: Vec<(String, String)>,
}

impl Scenario {
    pub fn new(script: Script, pool_size: u32) -> Scenario {
        Scenario {
            script,
            pool_size,
            settings: vec![(
                "query_wait_timeout".to_string(),
                QUERY_WAIT_TIMEOUT_SECS.to_string(),
            )],
        }
    }

    /// A `[pgtier]` setting (value in TOML syntax); replaces an earlier one of that key.
    pub fn setting(mut self, key: &str, value: &str) -> Scenario {
        self.settings.retain(|(existing, _)| existing != key);
        self.settings.push((key.to_string(), value.to_string()));
        self
    }

    /// The proxy configuration in front of the server on `server_port`.
    pub fn proxy_config(&self, server_port: u16, mode: PoolMode) -> crate::ProxyConfig {
        let pool_size = match mode {
            PoolMode::Session => {
                let connections = u32::try_from(self.script.connection_count()).unwrap_or(1);
                self.pool_size.max(connections)
            }
            PoolMode::Transaction => self.pool_size,
        };
        let mut config = crate::ProxyConfig::new(server_port)
            .pool_mode(mode.name())
            .pool_size(pool_size);
        for (key, value) in &self.settings {
            config = config.setting(key, value);
        }
        config
    }
}

/// Starts pgtier in `mode` in front of the test binary's shared PostgreSQL server
/// (`shared_server`), and runs the scenario's script against both (`assert_same`).
pub fn check(scenario: &Scenario, mode: PoolMode) -> Transcript {
    let pg = crate::shared_server::shared_server();
    let proxy = crate::fixtures::start_proxy(scenario.proxy_config(pg.port(), mode));
    assert_same(
        &scenario.script,
        &Target::direct(pg),
        &Target::through(&proxy),
    )
}

/// One module per scenario function, holding its two tests: `session` and `transaction`,
/// each `check`ing the scenario through pgtier in that mode. An attribute after `=>` (an
/// `#[ignore = "..."]`) applies to the transaction-mode test only.
///
/// ```ignore
/// differential_tests! {
///     two_clients_each_with_their_own_s1;
///     an_error_after_a_flush => #[ignore = "known limitation: <one line>"];
///     an_error_mid_pipeline_skips_to_sync;
/// }
/// ```
#[macro_export]
macro_rules! differential_tests {
    ($($name:ident $(=> #[$attr:meta])?;)*) => {
        $(
            mod $name {
                use $crate::differential::{PoolMode, check};

                #[test]
                fn session() {
                    check(&super::$name(), PoolMode::Session);
                }

                #[test]
                $(#[$attr])?
                fn transaction() {
                    check(&super::$name(), PoolMode::Transaction);
                }
            }
        )*
    };
}

/// Why a run stopped before its end.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Cause {
    /// The step's wait reached the timeout.
    Hung,
    /// The peer closed the connection.
    Closed,
    /// Login failed (an ErrorResponse, a password request, or a broken connection).
    Login(String),
    /// A send or receive failed, or the peer sent something that is not a backend message.
    Io(String),
}

impl Cause {
    /// Whether two causes are the same outcome for the comparison (I/O details may differ).
    fn same_kind(&self, other: &Cause) -> bool {
        std::mem::discriminant(self) == std::mem::discriminant(other)
    }
}

/// How a run ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum End {
    Completed,
    /// Step `step` (an index into the script's steps; the steps' count for the final fence)
    /// on connection `conn` could not complete.
    Stopped {
        step: usize,
        conn: String,
        cause: Cause,
    },
}

/// What one connection received, normalised.
#[derive(Clone, Debug)]
pub struct Received {
    pub name: String,
    pub messages: Vec<Message>,
    /// Bytes of an incomplete message left when the run ended.
    pub partial_bytes: usize,
}

/// The outcome of one run of a script against one target.
#[derive(Clone, Debug)]
pub struct Transcript {
    pub target: String,
    pub connections: Vec<Received>,
    pub end: End,
}

impl Transcript {
    /// The messages connection `name` received.
    pub fn messages(&self, name: &str) -> &[Message] {
        self.connections
            .iter()
            .find(|received| received.name == name)
            .map_or(&[], |received| received.messages.as_slice())
    }

    /// Every connection's stream, decoded, and the end of the run.
    pub fn render(&self) -> String {
        let mut text = format!("{}: {}\n", self.target, render_end(&self.end));
        for received in &self.connections {
            let _ = writeln!(text, "  connection {}:", received.name);
            for (index, message) in received.messages.iter().enumerate() {
                let _ = writeln!(text, "    {index:3} {}", describe(message));
            }
            if received.partial_bytes > 0 {
                let _ = writeln!(
                    text,
                    "    ... and {} bytes of an incomplete message",
                    received.partial_bytes
                );
            }
        }
        text
    }
}

/// `None` when `actual` received exactly what `expected` did and ended the same way;
/// otherwise a report with both streams of every connection that differs.
pub fn differences(expected: &Transcript, actual: &Transcript) -> Option<String> {
    let mut report = String::new();
    if !same_end(&expected.end, &actual.end) {
        let _ = writeln!(
            report,
            "the runs ended differently:\n  {}: {}\n  {}: {}",
            expected.target,
            render_end(&expected.end),
            actual.target,
            render_end(&actual.end)
        );
    }
    for (want, got) in expected.connections.iter().zip(&actual.connections) {
        if let Some(diff) = connection_differences(want, got, &expected.target, &actual.target) {
            report.push_str(&diff);
        }
    }
    (!report.is_empty()).then_some(report)
}

/// Set (to anything) to print the direct run's transcript of every script, to read what
/// PostgreSQL does.
pub const SHOW_ENV: &str = "PGTIER_DIFF_SHOW";

/// Runs `script` against `expected` (PostgreSQL) and `actual` (the pooler) and panics with a
/// readable report unless the clients received the same. A direct run that hangs or fails
/// to log in is a wrong script, reported as such (one where the server closes a connection
/// on purpose is fine). Returns the actual run's transcript.
pub fn assert_same(script: &Script, expected: &Target, actual: &Target) -> Transcript {
    let oracle = script.run(expected);
    if let End::Stopped {
        cause: Cause::Hung | Cause::Login(_) | Cause::Io(_),
        ..
    } = &oracle.end
    {
        panic!(
            "the script does not run against PostgreSQL itself (a wrong script):\n{}",
            oracle.render()
        );
    }
    if std::env::var_os(SHOW_ENV).is_some() {
        eprintln!("{}", oracle.render());
    }
    let run = script.run(actual);
    if let Some(report) = differences(&oracle, &run) {
        panic!(
            "{} differs from {}\n{report}\nfull transcripts:\n{}{}",
            actual.label,
            expected.label,
            oracle.render(),
            run.render()
        );
    }
    run
}

fn same_end(a: &End, b: &End) -> bool {
    match (a, b) {
        (End::Completed, End::Completed) => true,
        (
            End::Stopped {
                step: step_a,
                conn: conn_a,
                cause: cause_a,
            },
            End::Stopped {
                step: step_b,
                conn: conn_b,
                cause: cause_b,
            },
        ) => step_a == step_b && conn_a == conn_b && cause_a.same_kind(cause_b),
        _ => false,
    }
}

fn render_end(end: &End) -> String {
    match end {
        End::Completed => "completed".to_string(),
        End::Stopped { step, conn, cause } => {
            let why = match cause {
                Cause::Hung => "hung (timed out waiting)".to_string(),
                Cause::Closed => "the peer closed the connection".to_string(),
                Cause::Login(reason) => format!("login failed: {reason}"),
                Cause::Io(reason) => format!("I/O failure: {reason}"),
            };
            format!("stopped at step {step} on connection {conn}: {why}")
        }
    }
}

fn connection_differences(
    want: &Received,
    got: &Received,
    want_label: &str,
    got_label: &str,
) -> Option<String> {
    let first = want
        .messages
        .iter()
        .zip(&got.messages)
        .position(|(a, b)| a.tag != b.tag || a.body != b.body)
        .or_else(|| {
            (want.messages.len() != got.messages.len())
                .then(|| want.messages.len().min(got.messages.len()))
        })?;
    let mut text = format!(
        "connection {}: first difference at message {first}\n",
        want.name
    );
    for (label, received, other) in [(want_label, want, got), (got_label, got, want)] {
        let _ = writeln!(text, "  {label} ({} messages):", received.messages.len());
        for (index, message) in received.messages.iter().enumerate() {
            let differs = other
                .messages
                .get(index)
                .is_none_or(|o| o.tag != message.tag || o.body != message.body);
            let mark = if differs { '>' } else { ' ' };
            let _ = writeln!(text, "  {mark} {index:3} {}", describe(message));
        }
    }
    Some(text)
}

/// One execution of a script against one target.
struct Run<'a> {
    script: &'a Script,
    target: &'a Target,
    conns: Vec<Conn>,
}

/// A client's socket, in the clear or in TLS.
enum Stream {
    Plain(TcpStream),
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, TcpStream>>),
}

impl Stream {
    fn tcp(&self) -> &TcpStream {
        match self {
            Stream::Plain(stream) => stream,
            Stream::Tls(stream) => &stream.sock,
        }
    }

    fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.tcp().set_read_timeout(timeout)
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(stream) => stream.read(buf),
            Stream::Tls(stream) => stream.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(stream) => stream.write(buf),
            Stream::Tls(stream) => stream.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Plain(stream) => stream.flush(),
            Stream::Tls(stream) => stream.flush(),
        }
    }
}

/// SSLRequest, then the TLS handshake over `stream`.
fn start_tls(
    mut stream: TcpStream,
    config: &std::sync::Arc<rustls::ClientConfig>,
) -> Result<Stream, String> {
    let mut request = 8u32.to_be_bytes().to_vec();
    request.extend_from_slice(&80_877_103u32.to_be_bytes());
    stream
        .write_all(&request)
        .map_err(|error| format!("SSLRequest: {error}"))?;
    let mut answer = [0u8; 1];
    stream
        .read_exact(&mut answer)
        .map_err(|error| format!("SSLRequest answer: {error}"))?;
    if answer[0] != b'S' {
        return Err(format!("SSLRequest answered {:?}", answer[0] as char));
    }
    let name = rustls::pki_types::ServerName::try_from("localhost")
        .map_err(|error| format!("server name: {error}"))?;
    let connection = rustls::ClientConnection::new(config.clone(), name)
        .map_err(|error| format!("TLS: {error}"))?;
    let mut tls = rustls::StreamOwned::new(connection, stream);
    while tls.conn.is_handshaking() {
        tls.conn
            .complete_io(&mut tls.sock)
            .map_err(|error| format!("TLS handshake: {error}"))?;
    }
    Ok(Stream::Tls(Box::new(tls)))
}

/// A client connection of a run.
struct Conn {
    name: String,
    stream: Option<Stream>,
    /// Received bytes not yet split into messages.
    pending: Vec<u8>,
    received: Vec<Message>,
    terminated: bool,
    /// BackendKeyData (process id, secret) from the login, for a CancelRequest.
    key: Option<(i32, i32)>,
    /// ReadyForQuery messages a `Settle` read, which the next `AwaitReady` counts.
    settled_ready: usize,
}

impl<'a> Run<'a> {
    fn new(script: &'a Script, target: &'a Target) -> Run<'a> {
        let conns = script
            .names
            .iter()
            .map(|name| Conn {
                name: name.clone(),
                stream: None,
                pending: Vec::new(),
                received: Vec::new(),
                terminated: false,
                key: None,
                settled_ready: 0,
            })
            .collect();
        Run {
            script,
            target,
            conns,
        }
    }

    fn play(mut self) -> Transcript {
        let mut end = End::Completed;
        for (index, step) in self.script.steps.iter().enumerate() {
            if let Err(cause) = self.perform(step) {
                end = self.stopped(index, step.conn, cause);
                break;
            }
        }
        if end == End::Completed {
            end = self.fence();
        }
        for conn in &mut self.conns {
            if let Some(mut stream) = conn.stream.take() {
                let _ = stream.write_all(&rawwire::terminate_message());
            }
        }
        self.transcript(end)
    }

    fn stopped(&self, step: usize, conn: usize, cause: Cause) -> End {
        End::Stopped {
            step,
            conn: self.conns[conn].name.clone(),
            cause,
        }
    }

    /// A Sync and its ReadyForQuery on every connection still open.
    fn fence(&mut self) -> End {
        let fence_step = self.script.steps.len();
        for index in 0..self.conns.len() {
            if self.conns[index].stream.is_none() {
                continue;
            }
            let sync = Action::Send {
                bytes: rawwire::sync_message(),
                chunks: Vec::new(),
            };
            for action in [sync, Action::AwaitReady(1)] {
                let step = Step {
                    conn: index,
                    action,
                };
                if let Err(cause) = self.perform(&step) {
                    return self.stopped(fence_step, index, cause);
                }
            }
        }
        End::Completed
    }

    fn transcript(self, end: End) -> Transcript {
        Transcript {
            target: self.target.label.clone(),
            connections: self
                .conns
                .into_iter()
                .map(|conn| Received {
                    name: conn.name,
                    messages: conn.received,
                    partial_bytes: conn.pending.len(),
                })
                .collect(),
            end,
        }
    }

    fn perform(&mut self, step: &Step) -> Result<(), Cause> {
        let timeout = self.script.step_timeout;
        let parameters = &self.script.parameters;
        let conn = &mut self.conns[step.conn];
        if conn.terminated {
            return Err(Cause::Io(format!(
                "step on connection {} after its Terminate (a wrong script)",
                conn.name
            )));
        }
        if conn.stream.is_none() {
            conn.login(self.target, parameters, timeout)?;
        }
        match &step.action {
            Action::Connect => Ok(()),
            Action::Send { bytes, chunks } => conn.send(bytes, chunks, parameters),
            Action::AwaitReady(count) => {
                let credit = conn.settled_ready.min(*count);
                conn.settled_ready -= credit;
                let mut left = *count - credit;
                if left == 0 {
                    return Ok(());
                }
                conn.read_until(timeout, parameters, |message| {
                    if message.tag == b'Z' {
                        left -= 1;
                    }
                    left == 0
                })
            }
            Action::AwaitTag(tag) => {
                conn.read_until(timeout, parameters, |message| message.tag == *tag)
            }
            Action::AwaitAnyTag(tags) => {
                let mut ready = 0;
                let outcome = conn.read_until(timeout, parameters, |message| {
                    ready += usize::from(message.tag == b'Z');
                    tags.contains(&message.tag)
                });
                conn.settled_ready += ready;
                outcome
            }
            Action::Terminate => {
                if let Some(mut stream) = conn.stream.take() {
                    let _ = stream.write_all(&rawwire::terminate_message());
                }
                conn.terminated = true;
                Ok(())
            }
            Action::Settle(time) => {
                let mut ready = 0;
                let outcome = conn.read_until(*time, parameters, |message| {
                    ready += usize::from(message.tag == b'Z');
                    false
                });
                conn.settled_ready += ready;
                match outcome {
                    Err(Cause::Hung) | Ok(()) => Ok(()),
                    Err(cause) => Err(cause),
                }
            }
            Action::Cancel(delay) => {
                std::thread::sleep(*delay);
                conn.cancel(self.target, timeout);
                Ok(())
            }
        }
    }
}

impl Conn {
    /// Connects, sends the StartupMessage and reads to the first ReadyForQuery.
    fn login(
        &mut self,
        target: &Target,
        parameters: &[String],
        timeout: Duration,
    ) -> Result<(), Cause> {
        let address: SocketAddr = format!("{}:{}", target.host, target.port)
            .parse()
            .map_err(|error| Cause::Login(format!("address {}: {error}", target.host)))?;
        let stream = TcpStream::connect_timeout(&address, timeout)
            .map_err(|error| Cause::Login(format!("connect: {error}")))?;
        stream
            .set_nodelay(true)
            .and_then(|()| stream.set_write_timeout(Some(timeout)))
            .and_then(|()| stream.set_read_timeout(Some(timeout)))
            .map_err(|error| Cause::Login(format!("socket options: {error}")))?;
        let mut stream = match &target.tls {
            Some(config) => start_tls(stream, config).map_err(Cause::Login)?,
            None => Stream::Plain(stream),
        };
        stream
            .write_all(&rawwire::startup_message(&target.user, &target.dbname, &[]))
            .map_err(|error| Cause::Login(format!("sending the startup packet: {error}")))?;
        self.stream = Some(stream);
        let mut refusal = None;
        let mut key = None;
        let outcome = self.read_until(timeout, parameters, |message| match message.tag {
            b'R' if message.body.get(..4) != Some(&[0, 0, 0, 0]) => {
                refusal = Some("the target asked for a password (trust expected)".to_string());
                true
            }
            b'K' => {
                let pid = be_i32(&message.body, 0);
                let secret = be_i32(&message.body, 4);
                key = pid.zip(secret);
                false
            }
            b'E' => {
                refusal = Some(format!(
                    "{} {}",
                    message.sqlstate().unwrap_or_default(),
                    message.field(b'M').unwrap_or_default()
                ));
                true
            }
            tag => tag == b'Z',
        });
        self.key = key;
        match (outcome, refusal) {
            (_, Some(reason)) => Err(Cause::Login(reason)),
            (Err(cause), None) => Err(Cause::Login(format!("{cause:?}"))),
            (Ok(()), None) => Ok(()),
        }
    }

    fn send(&mut self, bytes: &[u8], chunks: &[usize], parameters: &[String]) -> Result<(), Cause> {
        let Some(stream) = self.stream.as_mut() else {
            return Err(Cause::Io("send on a closed connection".to_string()));
        };
        let result = if chunks.is_empty() {
            stream.write_all(bytes)
        } else {
            write_in_chunks(stream, bytes, chunks)
        };
        match result {
            Ok(()) => Ok(()),
            Err(error) => {
                // The peer may have said why before it closed (a FATAL error): keep that.
                self.drain(DRAIN_AFTER_SEND_FAILURE, parameters);
                Err(Cause::Io(format!("send failed: {error}")))
            }
        }
    }

    /// Sends a CancelRequest for this connection's key on a new connection. What happens to
    /// it is seen on this connection (an error, or nothing), so its own failures are ignored.
    fn cancel(&self, target: &Target, timeout: Duration) {
        let Some((pid, secret)) = self.key else {
            return;
        };
        let Ok(address) = format!("{}:{}", target.host, target.port).parse::<SocketAddr>() else {
            return;
        };
        if let Ok(mut stream) = TcpStream::connect_timeout(&address, timeout) {
            let _ = stream.write_all(&rawwire::cancel_message(pid, secret));
            // The server closes it once the cancel is handled: wait for that, bounded.
            let _ = stream.set_read_timeout(Some(timeout));
            let mut byte = [0u8; 1];
            let _ = stream.read(&mut byte);
        }
    }

    /// Reads whatever arrives within `time`, until the peer closes.
    fn drain(&mut self, time: Duration, parameters: &[String]) {
        let _ = self.read_until(time, parameters, |_| false);
    }

    /// Reads messages (recording each, normalised) until `done` says so of one of them — it
    /// sees every message, kept or not — or the timeout passes.
    fn read_until(
        &mut self,
        timeout: Duration,
        parameters: &[String],
        mut done: impl FnMut(&Message) -> bool,
    ) -> Result<(), Cause> {
        let deadline = Instant::now() + timeout;
        loop {
            while let Some(message) = self.next_buffered()? {
                let finished = done(&message);
                if let Some(kept) = normalise(message, parameters) {
                    self.received.push(kept);
                }
                if finished {
                    return Ok(());
                }
            }
            self.fill(deadline)?;
        }
    }

    /// Splits one complete message off the received bytes, if there is one.
    fn next_buffered(&mut self) -> Result<Option<Message>, Cause> {
        let Some(header) = self.pending.get(..5) else {
            return Ok(None);
        };
        let length = u32::from_be_bytes([header[1], header[2], header[3], header[4]]) as usize;
        if !(4..=MAX_MESSAGE_BYTES).contains(&length) {
            return Err(Cause::Io(format!(
                "backend message {:?} with length {length}",
                header[0] as char
            )));
        }
        if self.pending.len() < length + 1 {
            return Ok(None);
        }
        let tag = self.pending[0];
        let body = self.pending[5..length + 1].to_vec();
        self.pending.drain(..length + 1);
        Ok(Some(Message { tag, body }))
    }

    /// Reads more bytes, waiting at most until `deadline`.
    fn fill(&mut self, deadline: Instant) -> Result<(), Cause> {
        let Some(stream) = self.stream.as_mut() else {
            return Err(Cause::Closed);
        };
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(Cause::Hung);
        }
        stream
            .set_read_timeout(Some(left))
            .map_err(|error| Cause::Io(format!("set_read_timeout: {error}")))?;
        let mut buffer = [0u8; 16 * 1024];
        match stream.read(&mut buffer) {
            Ok(0) => {
                self.stream = None;
                Err(Cause::Closed)
            }
            Ok(n) => {
                self.pending.extend_from_slice(&buffer[..n]);
                Ok(())
            }
            Err(error)
                if matches!(
                    error.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                Err(Cause::Hung)
            }
            Err(error) if error.kind() == io::ErrorKind::Interrupted => Ok(()),
            Err(error)
                if matches!(
                    error.kind(),
                    io::ErrorKind::ConnectionReset | io::ErrorKind::ConnectionAborted
                ) =>
            {
                self.stream = None;
                Err(Cause::Closed)
            }
            Err(error) => Err(Cause::Io(format!("receive: {error}"))),
        }
    }
}

fn write_in_chunks(stream: &mut Stream, bytes: &[u8], chunks: &[usize]) -> io::Result<()> {
    let mut rest = bytes;
    for &size in chunks.iter().cycle() {
        if rest.is_empty() {
            break;
        }
        let (chunk, tail) = rest.split_at(size.min(rest.len()));
        stream.write_all(chunk)?;
        stream.flush()?;
        rest = tail;
        if !rest.is_empty() {
            std::thread::sleep(CHUNK_PAUSE);
        }
    }
    Ok(())
}

/// What of a backend message takes part in the comparison: `None` drops it.
///
/// - BackendKeyData: dropped (a pooler hands out keys of its own).
/// - ParameterStatus: kept only for the parameters the script names.
/// - NotificationResponse: the sender's pid zeroed (a pooled client cannot know it).
/// - ErrorResponse and NoticeResponse: the fields naming PostgreSQL's source location (`F`
///   file, `L` line, `R` routine) dropped; all others kept in their order.
pub fn normalise(message: Message, parameters: &[String]) -> Option<Message> {
    match message.tag {
        b'K' => None,
        b'S' => {
            let name = cstrings(&message.body)
                .into_iter()
                .next()
                .unwrap_or_default();
            parameters
                .iter()
                .any(|wanted| wanted.as_bytes() == name)
                .then_some(message)
        }
        b'A' => {
            let mut body = message.body;
            if let Some(pid) = body.get_mut(..4) {
                pid.fill(0);
            }
            Some(Message { tag: b'A', body })
        }
        b'E' | b'N' => Some(Message {
            tag: message.tag,
            body: without_location_fields(&message.body),
        }),
        _ => Some(message),
    }
}

/// An ErrorResponse/NoticeResponse body without its `F`, `L` and `R` fields. A malformed
/// body is kept as it is, so that it shows up in the comparison.
fn without_location_fields(body: &[u8]) -> Vec<u8> {
    let Some(fields) = error_fields(body) else {
        return body.to_vec();
    };
    let mut out = Vec::with_capacity(body.len());
    for (code, value) in fields {
        if matches!(code, b'F' | b'L' | b'R') {
            continue;
        }
        out.push(code);
        out.extend_from_slice(value);
        out.push(0);
    }
    out.push(0);
    out
}

/// The (code, value) fields of an ErrorResponse/NoticeResponse body, or `None` if malformed.
fn error_fields(body: &[u8]) -> Option<Vec<(u8, &[u8])>> {
    let mut fields = Vec::new();
    let mut rest = body;
    loop {
        let (&code, tail) = rest.split_first()?;
        if code == 0 {
            return Some(fields);
        }
        let end = tail.iter().position(|&b| b == 0)?;
        fields.push((code, &tail[..end]));
        rest = &tail[end + 1..];
    }
}

/// The NUL-terminated strings at the start of `body` (a trailing unterminated part is kept).
fn cstrings(body: &[u8]) -> Vec<&[u8]> {
    let mut strings: Vec<&[u8]> = body.split(|&b| b == 0).collect();
    if strings.last().is_some_and(|last| last.is_empty()) {
        strings.pop();
    }
    strings
}

/// One message, decoded for a reader: its name and what identifies it.
pub fn describe(message: &Message) -> String {
    let body = message.body.as_slice();
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    match message.tag {
        b'R' => format!("AuthenticationRequest {}", be_i32(body, 0).unwrap_or(-1)),
        b'S' => {
            let parts = cstrings(body);
            format!(
                "ParameterStatus {}={}",
                text(parts.first().copied().unwrap_or_default()),
                text(parts.get(1).copied().unwrap_or_default())
            )
        }
        b'K' => "BackendKeyData".to_string(),
        b'Z' => format!(
            "ReadyForQuery {}",
            body.first().map_or('?', |&status| status as char)
        ),
        b'E' | b'N' => {
            let kind = if message.tag == b'E' {
                "ErrorResponse"
            } else {
                "NoticeResponse"
            };
            match error_fields(body) {
                Some(fields) => {
                    let fields: Vec<String> = fields
                        .iter()
                        .map(|(code, value)| format!("{}={}", *code as char, text(value)))
                        .collect();
                    format!("{kind} {}", fields.join(" | "))
                }
                None => format!("{kind} (malformed) {body:?}"),
            }
        }
        b'T' => format!("RowDescription [{}]", describe_columns(body)),
        b'D' => format!("DataRow [{}]", describe_values(body)),
        b'C' => format!(
            "CommandComplete {}",
            text(cstrings(body).first().copied().unwrap_or_default())
        ),
        b't' => format!("ParameterDescription {}", describe_parameter_types(body)),
        b'A' => {
            let parts = cstrings(body.get(4..).unwrap_or_default());
            format!(
                "NotificationResponse pid={} channel={} payload={}",
                be_i32(body, 0).unwrap_or(-1),
                text(parts.first().copied().unwrap_or_default()),
                text(parts.get(1).copied().unwrap_or_default())
            )
        }
        b'1' => "ParseComplete".to_string(),
        b'2' => "BindComplete".to_string(),
        b'3' => "CloseComplete".to_string(),
        b'n' => "NoData".to_string(),
        b's' => "PortalSuspended".to_string(),
        b'I' => "EmptyQueryResponse".to_string(),
        b'G' => "CopyInResponse".to_string(),
        b'H' => "CopyOutResponse".to_string(),
        b'd' => format!("CopyData ({} bytes)", body.len()),
        b'c' => "CopyDone".to_string(),
        tag => format!(
            "message {:?} ({} bytes) {:02x?}",
            tag as char,
            body.len(),
            &body[..body.len().min(32)]
        ),
    }
}

fn describe_columns(body: &[u8]) -> String {
    let Some(count) = be_i16(body, 0) else {
        return format!("malformed {body:?}");
    };
    let mut columns = Vec::new();
    let mut rest = body.get(2..).unwrap_or_default();
    for _ in 0..count {
        let Some(end) = rest.iter().position(|&b| b == 0) else {
            columns.push("malformed".to_string());
            break;
        };
        let name = String::from_utf8_lossy(&rest[..end]);
        let fixed = rest.get(end + 1..end + 19).unwrap_or_default();
        let table = be_u32(fixed, 0).unwrap_or(0);
        let type_oid = be_u32(fixed, 6).unwrap_or(0);
        let format = be_i16(fixed, 16).unwrap_or(-1);
        columns.push(format!(
            "{name} type={type_oid} table={table} format={format}"
        ));
        rest = rest.get(end + 19..).unwrap_or_default();
    }
    columns.join(", ")
}

fn describe_values(body: &[u8]) -> String {
    let Some(count) = be_i16(body, 0) else {
        return format!("malformed {body:?}");
    };
    let mut values = Vec::new();
    let mut offset = 2;
    for _ in 0..count {
        let Some(length) = be_i32(body, offset) else {
            values.push("malformed".to_string());
            break;
        };
        offset += 4;
        let Ok(length) = usize::try_from(length) else {
            values.push("NULL".to_string());
            continue;
        };
        let value = body.get(offset..offset + length).unwrap_or_default();
        let mut shown = String::from_utf8_lossy(value).into_owned();
        if shown.chars().count() > 60 {
            shown = shown.chars().take(60).collect::<String>() + "...";
        }
        values.push(format!("{shown:?}"));
        offset += length;
    }
    values.join(", ")
}

fn describe_parameter_types(body: &[u8]) -> String {
    let count = be_i16(body, 0).unwrap_or(0);
    let types: Vec<String> = (0..usize::try_from(count).unwrap_or(0))
        .map(|index| be_u32(body, 2 + 4 * index).map_or("?".to_string(), |oid| oid.to_string()))
        .collect();
    format!("[{}]", types.join(", "))
}

fn be_i16(bytes: &[u8], at: usize) -> Option<i16> {
    let raw = bytes.get(at..at + 2)?;
    Some(i16::from_be_bytes([raw[0], raw[1]]))
}

fn be_i32(bytes: &[u8], at: usize) -> Option<i32> {
    let raw = bytes.get(at..at + 4)?;
    Some(i32::from_be_bytes([raw[0], raw[1], raw[2], raw[3]]))
}

fn be_u32(bytes: &[u8], at: usize) -> Option<u32> {
    let raw = bytes.get(at..at + 4)?;
    Some(u32::from_be_bytes([raw[0], raw[1], raw[2], raw[3]]))
}

/// The value of the first column of every DataRow of `messages`, as text (`None` = NULL).
pub fn first_column(messages: &[Message]) -> Vec<Option<String>> {
    messages
        .iter()
        .filter(|message| message.tag == b'D')
        .map(|row| {
            let length = be_i32(&row.body, 2)?;
            let length = usize::try_from(length).ok()?;
            let value = row.body.get(6..6 + length)?;
            Some(String::from_utf8_lossy(value).into_owned())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(fields: &[(u8, &str)]) -> Message {
        let mut body = Vec::new();
        for (code, value) in fields {
            body.push(*code);
            body.extend_from_slice(value.as_bytes());
            body.push(0);
        }
        body.push(0);
        Message { tag: b'E', body }
    }

    #[test]
    fn errors_lose_only_their_source_location() {
        let raw = error(&[
            (b'S', "ERROR"),
            (b'V', "ERROR"),
            (b'C', "26000"),
            (b'M', "prepared statement \"s1\" does not exist"),
            (b'F', "prepare.c"),
            (b'L', "1"),
            (b'R', "FetchPreparedStatement"),
        ]);
        let kept = normalise(raw, &[]).expect("errors are kept");
        let expected = error(&[
            (b'S', "ERROR"),
            (b'V', "ERROR"),
            (b'C', "26000"),
            (b'M', "prepared statement \"s1\" does not exist"),
        ]);
        assert_eq!(kept.body, expected.body);
    }

    #[test]
    fn key_data_is_dropped_and_parameters_filtered() {
        let key = Message {
            tag: b'K',
            body: vec![0; 8],
        };
        assert!(normalise(key, &[]).is_none());
        let status = |name: &str| Message {
            tag: b'S',
            body: format!("{name}\0value\0").into_bytes(),
        };
        let wanted = vec!["application_name".to_string()];
        assert!(normalise(status("application_name"), &wanted).is_some());
        assert!(normalise(status("server_version"), &wanted).is_none());
    }

    #[test]
    fn notification_pids_are_zeroed() {
        let mut body = 4242i32.to_be_bytes().to_vec();
        body.extend_from_slice(b"ch\0payload\0");
        let kept = normalise(Message { tag: b'A', body }, &[]).expect("kept");
        assert_eq!(&kept.body[..4], &[0, 0, 0, 0]);
        assert!(describe(&kept).contains("channel=ch payload=payload"));
    }

    #[test]
    fn a_malformed_error_body_is_kept_as_it_is() {
        let raw = Message {
            tag: b'E',
            body: b"Sno terminator".to_vec(),
        };
        let kept = normalise(raw.clone(), &[]).expect("kept");
        assert_eq!(kept.body, raw.body);
    }

    fn transcript(messages: Vec<Message>) -> Transcript {
        Transcript {
            target: "t".to_string(),
            connections: vec![Received {
                name: "a".to_string(),
                messages,
                partial_bytes: 0,
            }],
            end: End::Completed,
        }
    }

    #[test]
    fn differences_name_the_first_differing_message() {
        let ready = Message {
            tag: b'Z',
            body: b"I".to_vec(),
        };
        let parsed = Message {
            tag: b'1',
            body: Vec::new(),
        };
        let same = transcript(vec![parsed.clone(), ready.clone()]);
        assert!(differences(&same, &same.clone()).is_none());
        let shorter = transcript(vec![parsed]);
        let report = differences(&same, &shorter).expect("a difference");
        assert!(report.contains("first difference at message 1"), "{report}");
        assert!(report.contains("ReadyForQuery I"), "{report}");
    }
}
