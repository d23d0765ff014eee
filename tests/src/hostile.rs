//! Hostile clients, as a new user would try them against a proxy on the open network: the
//! attacks of `pgtier-hostile` (bench/hostile.sh measures legit load during each) and of the
//! short CI subset (tests/tests/hostile.rs). Each attack runs for a bounded time on one
//! single-threaded runtime (so the attacker's own CPU stays small beside the load it disturbs)
//! and reports what it did and what the proxy answered. Traffic goes to 127.0.0.1 only.

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

use crate::rawwire::{password_message, query_message, startup_message};

/// The attacks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Attack {
    /// Thousands of connections that send their startup packet one byte at a time.
    Slowloris,
    /// Connections that send random bytes.
    Garbage,
    /// Length words of 2 GB: in a startup packet, and in a message after login.
    Oversized,
    /// Connections opened and dropped as fast as the attacker can.
    ConnectFlood,
    /// Logged-in clients that send queries with large answers and never read them.
    NoRead,
    /// Logins with wrong passwords, as fast as they are answered.
    BruteForce,
}

impl Attack {
    pub const ALL: [Attack; 6] = [
        Attack::Slowloris,
        Attack::Garbage,
        Attack::Oversized,
        Attack::ConnectFlood,
        Attack::NoRead,
        Attack::BruteForce,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Attack::Slowloris => "slowloris",
            Attack::Garbage => "garbage",
            Attack::Oversized => "oversized",
            Attack::ConnectFlood => "connect-flood",
            Attack::NoRead => "no-read",
            Attack::BruteForce => "brute-force",
        }
    }

    pub fn parse(name: &str) -> Option<Attack> {
        Attack::ALL.into_iter().find(|attack| attack.name() == name)
    }

    /// Concurrent connections (or tasks) by default.
    pub fn default_width(self) -> usize {
        match self {
            Attack::Slowloris => 3000,
            Attack::Garbage | Attack::Oversized | Attack::BruteForce => 32,
            Attack::ConnectFlood => 16,
            Attack::NoRead => 8,
        }
    }

    /// New connections per second across all its tasks by default (slowloris and no-read
    /// hold theirs, so they are not paced). On one machine an unpaced attacker spends a core of
    /// its own, which measures the machine rather than the proxy; a paced one shows what the
    /// proxy pays per connection.
    pub fn default_rate(self) -> Option<u32> {
        match self {
            Attack::Slowloris | Attack::NoRead => None,
            Attack::Garbage => Some(500),
            Attack::Oversized => Some(200),
            Attack::ConnectFlood => Some(2000),
            Attack::BruteForce => Some(1000),
        }
    }

    /// What it does, for reports.
    pub fn description(self) -> &'static str {
        match self {
            Attack::Slowloris => "connections sending the startup packet one byte at a time",
            Attack::Garbage => "connections sending random bytes",
            Attack::Oversized => "2 GB length words (startup packet and query)",
            Attack::ConnectFlood => "connections opened and dropped in a loop",
            Attack::NoRead => "clients sending large-answer queries, never reading",
            Attack::BruteForce => "logins with wrong passwords in a loop",
        }
    }
}

impl fmt::Display for Attack {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Where the attack goes and who it logs in as when it needs a session.
#[derive(Clone, Debug)]
pub struct Target {
    pub port: u16,
    pub database: String,
    pub user: String,
    /// For md5 or cleartext requests (SCRAM is not spoken: a SASL request ends the login).
    pub password: String,
}

/// What an attack did and what it got.
#[derive(Debug, Default)]
pub struct Report {
    /// Connections opened.
    pub connects: u64,
    /// Connects refused or failed.
    pub connect_errors: u64,
    /// Connections the proxy closed (EOF or reset) while the attacker still used them.
    pub closed_by_proxy: u64,
    /// ErrorResponses received.
    pub errors_received: u64,
    /// Wrong-password answers (28P01) received.
    pub auth_failures: u64,
    /// Logins that got ReadyForQuery (no-read, oversized).
    pub logins: u64,
    pub bytes_sent: u64,
    /// Connections still open at the end.
    pub open_at_end: u64,
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "connects={} connect_errors={} closed_by_proxy={} errors={} auth_failures={} \
             logins={} bytes_sent={} open_at_end={}",
            self.connects,
            self.connect_errors,
            self.closed_by_proxy,
            self.errors_received,
            self.auth_failures,
            self.logins,
            self.bytes_sent,
            self.open_at_end
        )
    }
}

#[derive(Default)]
struct Counters {
    connects: AtomicU64,
    connect_errors: AtomicU64,
    closed_by_proxy: AtomicU64,
    errors_received: AtomicU64,
    auth_failures: AtomicU64,
    logins: AtomicU64,
    bytes_sent: AtomicU64,
    open: AtomicU64,
}

impl Counters {
    fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    fn report(&self) -> Report {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        Report {
            connects: get(&self.connects),
            connect_errors: get(&self.connect_errors),
            closed_by_proxy: get(&self.closed_by_proxy),
            errors_received: get(&self.errors_received),
            auth_failures: get(&self.auth_failures),
            logins: get(&self.logins),
            bytes_sent: get(&self.bytes_sent),
            open_at_end: get(&self.open),
        }
    }
}

/// How hard an attack goes: concurrent connections or tasks, and new connections per second
/// across them (`None`: as fast as they go).
#[derive(Clone, Copy, Debug)]
pub struct Intensity {
    pub width: usize,
    pub rate: Option<u32>,
}

impl Intensity {
    pub fn default_for(attack: Attack) -> Intensity {
        Intensity {
            width: attack.default_width(),
            rate: attack.default_rate(),
        }
    }
}

/// Spaces new connections `1 / rate` apart across every task of an attack.
struct Pacer {
    start: tokio::time::Instant,
    interval: Option<Duration>,
    issued: AtomicU64,
}

impl Pacer {
    async fn wait_turn(&self) {
        let Some(interval) = self.interval else {
            return;
        };
        let n = self.issued.fetch_add(1, Ordering::Relaxed);
        let at = self.start + interval.saturating_mul(u32::try_from(n).unwrap_or(u32::MAX));
        tokio::time::sleep_until(at).await;
    }
}

/// Runs `attack` at `intensity` for `duration`, then returns what it did. Every connection
/// is dropped before it returns.
pub fn run(
    attack: Attack,
    target: &Target,
    intensity: Intensity,
    duration: Duration,
) -> io::Result<Report> {
    let width = intensity.width;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let counters = Arc::new(Counters::default());
    let deadline = Instant::now() + duration;
    let pacer = Arc::new(Pacer {
        start: tokio::time::Instant::now(),
        interval: intensity
            .rate
            .filter(|rate| *rate > 0)
            .map(|rate| Duration::from_secs(1) / rate),
        issued: AtomicU64::new(0),
    });
    runtime.block_on(async {
        let mut tasks = tokio::task::JoinSet::new();
        for index in 0..width.max(1) {
            let job = Job {
                target: Arc::new(target.clone()),
                counters: counters.clone(),
                deadline: tokio::time::Instant::from_std(deadline),
                seed: seed(index),
                index,
                width,
                pacer: pacer.clone(),
            };
            tasks.spawn(job.run(attack));
        }
        // Each task ends at the deadline; a task stuck in the kernel is cut off a little later.
        let hard_stop = tokio::time::Instant::from_std(deadline + Duration::from_secs(2));
        while tokio::time::timeout_at(hard_stop, tasks.join_next())
            .await
            .ok()
            .flatten()
            .is_some()
        {}
        tasks.abort_all();
    });
    Ok(counters.report())
}

fn seed(index: usize) -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    (nanos ^ (index as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)) | 1
}

/// xorshift64*: random enough for garbage, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    fn fill(&mut self, bytes: &mut [u8]) {
        for chunk in bytes.chunks_mut(8) {
            let word = self.next().to_le_bytes();
            chunk.copy_from_slice(&word[..chunk.len()]);
        }
    }
}

/// One task of an attack.
struct Job {
    target: Arc<Target>,
    counters: Arc<Counters>,
    deadline: tokio::time::Instant,
    seed: u64,
    index: usize,
    width: usize,
    pacer: Arc<Pacer>,
}

/// A connection the attack holds, counted as open while it lives.
struct Conn {
    stream: TcpStream,
    counters: Arc<Counters>,
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.counters.open.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Job {
    fn over(&self) -> bool {
        tokio::time::Instant::now() >= self.deadline
    }

    async fn run(self, attack: Attack) {
        match attack {
            Attack::Slowloris => self.slowloris().await,
            Attack::Garbage => self.garbage().await,
            Attack::Oversized => self.oversized().await,
            Attack::ConnectFlood => self.connect_flood().await,
            Attack::NoRead => self.no_read().await,
            Attack::BruteForce => self.brute_force().await,
        }
    }

    async fn connect(&self, receive_buffer: Option<u32>) -> Option<Conn> {
        let address = SocketAddr::from(([127, 0, 0, 1], self.target.port));
        if tokio::time::timeout_at(self.deadline, self.pacer.wait_turn())
            .await
            .is_err()
        {
            return None;
        }
        let connect = async {
            let socket = TcpSocket::new_v4()?;
            if let Some(size) = receive_buffer {
                socket.set_recv_buffer_size(size)?;
            }
            socket.connect(address).await
        };
        match tokio::time::timeout_at(self.deadline, connect).await {
            Ok(Ok(stream)) => {
                Counters::add(&self.counters.connects, 1);
                Counters::add(&self.counters.open, 1);
                Some(Conn {
                    stream,
                    counters: self.counters.clone(),
                })
            }
            Ok(Err(_)) => {
                Counters::add(&self.counters.connect_errors, 1);
                // Refused (a listen backlog full): back off a little.
                tokio::time::sleep(Duration::from_millis(10)).await;
                None
            }
            Err(_) => None,
        }
    }

    async fn send(&self, conn: &mut Conn, bytes: &[u8]) -> bool {
        match tokio::time::timeout_at(self.deadline, conn.stream.write_all(bytes)).await {
            Ok(Ok(())) => {
                Counters::add(&self.counters.bytes_sent, bytes.len() as u64);
                true
            }
            Ok(Err(_)) => {
                Counters::add(&self.counters.closed_by_proxy, 1);
                false
            }
            Err(_) => false,
        }
    }

    /// Reads backend messages until the connection ends or the deadline, counting errors.
    async fn read_to_end(&self, conn: &mut Conn) {
        self.read_to_end_until(conn, self.deadline).await;
    }

    /// As `read_to_end`, giving up at `until`.
    async fn read_to_end_until(&self, conn: &mut Conn, until: tokio::time::Instant) {
        let until = until.min(self.deadline);
        let mut buffer = vec![0u8; 16 * 1024];
        loop {
            match tokio::time::timeout_at(until, conn.stream.read(&mut buffer)).await {
                Ok(Ok(0)) | Ok(Err(_)) => {
                    Counters::add(&self.counters.closed_by_proxy, 1);
                    return;
                }
                Ok(Ok(n)) => {
                    let errors = buffer[..n].iter().filter(|&&b| b == b'E').count();
                    if buffer[0] == b'E' && errors > 0 {
                        Counters::add(&self.counters.errors_received, 1);
                    }
                }
                Err(_) => return,
            }
        }
    }

    /// Slowloris: connections spread over the first second, each sending its startup
    /// packet one byte per `byte_interval`; one the proxy closes is opened again.
    async fn slowloris(self) {
        let stagger = Duration::from_micros(1_000_000 * self.index as u64 / self.width as u64);
        tokio::time::sleep(stagger).await;
        let packet = startup_message(&self.target.user, &self.target.database, &[]);
        let byte_interval = Duration::from_millis(500);
        while !self.over() {
            let Some(mut conn) = self.connect(None).await else {
                continue;
            };
            for byte in &packet {
                if !self.send(&mut conn, std::slice::from_ref(byte)).await {
                    break;
                }
                if tokio::time::timeout_at(self.deadline, tokio::time::sleep(byte_interval))
                    .await
                    .is_err()
                {
                    break;
                }
            }
        }
    }

    /// Garbage: random bytes, sometimes after a plausible length word, then read until the
    /// proxy closes (at most a second: a startup packet still incomplete is left to
    /// `client_login_timeout`, and the next connection tries other bytes).
    async fn garbage(self) {
        let mut rng = Rng(self.seed);
        while !self.over() {
            let Some(mut conn) = self.connect(None).await else {
                continue;
            };
            let mut bytes = vec![0u8; 1 + rng.below(16 * 1024) as usize];
            rng.fill(&mut bytes);
            if rng.below(2) == 0 && bytes.len() >= 8 {
                // A length word a little past what follows: the proxy must not wait forever.
                let length = (bytes.len() as u32).saturating_add(rng.below(64) as u32);
                bytes[..4].copy_from_slice(&length.to_be_bytes());
            }
            if self.send(&mut conn, &bytes).await {
                let until = tokio::time::Instant::now() + Duration::from_secs(1);
                self.read_to_end_until(&mut conn, until).await;
            }
        }
    }

    /// Oversized: a startup packet claiming 2 GB, and a logged-in client's Query claiming
    /// 2 GB, each followed by as many bytes as the proxy takes.
    async fn oversized(self) {
        let filler = vec![b'x'; 16 * 1024];
        let mut round = self.index;
        while !self.over() {
            round += 1;
            let Some(mut conn) = self.connect(None).await else {
                continue;
            };
            let claim = 0x7FFF_FFF0u32;
            let mut head = Vec::new();
            if round.is_multiple_of(2) {
                head.extend_from_slice(&claim.to_be_bytes());
                head.extend_from_slice(&0x0003_0000u32.to_be_bytes());
            } else {
                if !self.login(&mut conn).await {
                    continue;
                }
                head.push(b'Q');
                head.extend_from_slice(&claim.to_be_bytes());
            }
            if !self.send(&mut conn, &head).await {
                continue;
            }
            // A start of the claimed body, then see whether the proxy closed: more would only
            // measure the attacker's own loopback copying.
            let mut sent = 0;
            while sent < 64 << 10 && self.send(&mut conn, &filler).await {
                sent += filler.len();
            }
            self.read_to_end(&mut conn).await;
        }
    }

    /// Connect flood: connect and drop; every other time after sending a startup packet.
    async fn connect_flood(self) {
        let packet = startup_message(&self.target.user, &self.target.database, &[]);
        let mut round = self.index;
        while !self.over() {
            round += 1;
            let Some(mut conn) = self.connect(None).await else {
                continue;
            };
            if round.is_multiple_of(2) {
                self.send(&mut conn, &packet).await;
            }
        }
    }

    /// No-read: log in with a small receive buffer, send queries whose answers are large,
    /// never read, and hold the connection until the deadline.
    async fn no_read(self) {
        let Some(mut conn) = self.connect(Some(4096)).await else {
            return;
        };
        if !self.login(&mut conn).await {
            return;
        }
        let query = query_message("SELECT repeat('x', 8000) FROM generate_series(1, 100000)");
        for _ in 0..16 {
            if !self.send(&mut conn, &query).await {
                return;
            }
        }
        tokio::time::sleep_until(self.deadline).await;
    }

    /// Brute force: log in with a wrong password, read the answer, again.
    async fn brute_force(self) {
        let mut rng = Rng(self.seed);
        while !self.over() {
            let Some(mut conn) = self.connect(None).await else {
                continue;
            };
            let guess = format!("guess-{:x}", rng.next());
            match self.authenticate(&mut conn, &guess).await {
                Login::Refused(code) => {
                    Counters::add(&self.counters.errors_received, 1);
                    if code == "28P01" {
                        Counters::add(&self.counters.auth_failures, 1);
                    }
                }
                Login::Ready => Counters::add(&self.counters.logins, 1),
                Login::Ended => {}
            }
        }
    }

    /// Logs in as the target user with its password.
    async fn login(&self, conn: &mut Conn) -> bool {
        let password = self.target.password.clone();
        matches!(self.authenticate(conn, &password).await, Login::Ready)
    }

    async fn authenticate(&self, conn: &mut Conn, password: &str) -> Login {
        let target = &self.target;
        if !self
            .send(conn, &startup_message(&target.user, &target.database, &[]))
            .await
        {
            return Login::Ended;
        }
        loop {
            let Some((tag, body)) = self.read_message(conn).await else {
                return Login::Ended;
            };
            match tag {
                b'R' => {
                    let code = body
                        .get(..4)
                        .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
                    let answer = match code {
                        Some(0) => continue,
                        Some(3) => password_message(password),
                        Some(5) if body.len() >= 8 => {
                            let salt = [body[4], body[5], body[6], body[7]];
                            md5_answer(&target.user, password, salt)
                        }
                        // SASL (or anything else) is not spoken: a malformed answer, which
                        // fails the login as a wrong password would.
                        _ => password_message(password),
                    };
                    if !self.send(conn, &answer).await {
                        return Login::Ended;
                    }
                }
                b'E' => {
                    let code = error_field(&body, b'C').unwrap_or_default();
                    return Login::Refused(code);
                }
                b'Z' => {
                    Counters::add(&self.counters.logins, 1);
                    return Login::Ready;
                }
                _ => {}
            }
        }
    }

    async fn read_message(&self, conn: &mut Conn) -> Option<(u8, Vec<u8>)> {
        let mut header = [0u8; 5];
        let read = async {
            conn.stream.read_exact(&mut header).await?;
            let length = u32::from_be_bytes([header[1], header[2], header[3], header[4]]);
            let length = (length as usize).clamp(4, 1 << 20) - 4;
            let mut body = vec![0u8; length];
            conn.stream.read_exact(&mut body).await?;
            Ok::<_, io::Error>(body)
        };
        match tokio::time::timeout_at(self.deadline, read).await {
            Ok(Ok(body)) => Some((header[0], body)),
            Ok(Err(_)) => {
                Counters::add(&self.counters.closed_by_proxy, 1);
                None
            }
            Err(_) => None,
        }
    }
}

enum Login {
    Ready,
    /// An ErrorResponse with this SQLSTATE.
    Refused(String),
    /// The connection ended or the deadline passed.
    Ended,
}

fn md5_answer(user: &str, password: &str, salt: [u8; 4]) -> Vec<u8> {
    let stored = pgtier_wire::auth::md5_password_hash(user.as_bytes(), password.as_bytes());
    let answer = pgtier_wire::auth::md5_salted_response(&stored, salt);
    password_message(std::str::from_utf8(&answer).unwrap_or(""))
}

/// A field of an ErrorResponse body.
fn error_field(body: &[u8], code: u8) -> Option<String> {
    body.split(|&b| b == 0)
        .find(|field| field.first() == Some(&code))
        .map(|field| String::from_utf8_lossy(&field[1..]).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attack_names_round_trip() {
        for attack in Attack::ALL {
            assert_eq!(Attack::parse(attack.name()), Some(attack));
        }
        assert_eq!(Attack::parse("nope"), None);
    }

    #[test]
    fn error_fields_are_found() {
        let body = b"SFATAL\0C28P01\0Mpassword authentication failed\0\0";
        assert_eq!(error_field(body, b'C').as_deref(), Some("28P01"));
        assert_eq!(error_field(body, b'X'), None);
    }
}
