//! Running a program: every client on its own thread, once directly against PostgreSQL and
//! once through pgtier, each time on freshly reset schemas, and the comparison of each
//! client's whole message stream (normalised as `differential::normalise` says).

use std::collections::HashMap;
use std::time::Duration;

use super::grammar::setup_sql;
use super::program::Program;
use crate::differential::{Cause, End, PoolMode, Target, Transcript, differences};
use crate::pki::TestPki;
use crate::{LocalPg, Pgtier, ProxyConfig, TempDir};

/// The proxy a program runs through.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Variation {
    pub mode: PoolMode,
    /// `default_pool_size`; session mode raises it to the number of clients.
    pub pool_size: u32,
    pub workers: usize,
    /// Clients log in to pgtier over TLS (`client_tls_sslmode = "prefer"`).
    pub tls: bool,
}

impl Variation {
    pub fn describe(&self) -> String {
        format!(
            "mode: {}\npool_size: {}\nworkers: {}\ntls: {}",
            self.mode.name(),
            self.pool_size,
            self.workers,
            if self.tls { "on" } else { "off" }
        )
    }

    /// Reads `describe`'s lines (and ignores any other `key: value`).
    pub fn parse(text: &str) -> Result<Variation, String> {
        let mut variation = Variation {
            mode: PoolMode::Transaction,
            pool_size: 1,
            workers: 1,
            tls: false,
        };
        for line in text.lines() {
            let line = line.trim_start_matches('#').trim();
            let Some((key, value)) = line.split_once(':') else {
                continue;
            };
            let value = value.trim();
            match key.trim() {
                "mode" => {
                    variation.mode = match value {
                        "session" => PoolMode::Session,
                        "transaction" => PoolMode::Transaction,
                        other => return Err(format!("mode {other:?}")),
                    }
                }
                "pool_size" => {
                    variation.pool_size = value.parse().map_err(|_| "pool_size".to_string())?
                }
                "workers" => {
                    variation.workers = value.parse().map_err(|_| "workers".to_string())?
                }
                "tls" => variation.tls = value == "on",
                _ => {}
            }
        }
        Ok(variation)
    }
}

/// What a run of one program showed.
#[derive(Debug)]
pub enum Outcome {
    /// Every client received what PostgreSQL sent it.
    Same,
    /// The program does not run against PostgreSQL itself (a generator mistake): no verdict.
    Invalid(String),
    /// At least one client received something else; the report shows both streams.
    Diverged(String),
}

impl Outcome {
    pub fn diverged(&self) -> bool {
        matches!(self, Outcome::Diverged(_))
    }
}

/// How long one step of a fuzz program may wait: an uncancelled `pg_sleep(10)`, and a wait for
/// a pooled server that other clients hold for whole programs (with one server for four
/// clients, and two workers, a login on the worker that has not seen the server's welcome
/// yet waits for that server too).
pub const FUZZ_STEP_TIMEOUT: Duration = Duration::from_secs(60);

/// The server, the proxies (one per variation, started when first needed) and the
/// connection that resets the clients' schemas, all in one database of the bench's own (so
/// that benches in one test process do not share schemas).
pub struct Bench<'a> {
    pg: &'a LocalPg,
    dbname: String,
    proxies: HashMap<Variation, Pgtier>,
    admin: postgres::Client,
    /// How long the proxies may live (the watchdog).
    lifetime: Duration,
    /// The certificates of the proxies' client TLS, and the clients' trust in them.
    pki: TestPki,
    tls_client: std::sync::Arc<rustls::ClientConfig>,
    _pki_dir: TempDir,
    pub step_timeout: Duration,
}

impl<'a> Bench<'a> {
    /// A bench on database `dbname` of `pg`, created if missing.
    pub fn new(pg: &'a LocalPg, dbname: &str, lifetime: Duration) -> Result<Bench<'a>, String> {
        let connect = |db: &str| {
            postgres::Config::new()
                .host("127.0.0.1")
                .port(pg.port())
                .user("postgres")
                .dbname(db)
                .connect(postgres::NoTls)
                .map_err(|error| format!("admin connection to {db}: {error}"))
        };
        let mut postgres = connect("postgres")?;
        let exists = postgres
            .query_opt("SELECT 1 FROM pg_database WHERE datname = $1", &[&dbname])
            .map_err(|error| format!("looking for database {dbname}: {error}"))?
            .is_some();
        if !exists {
            postgres
                .batch_execute(&format!("CREATE DATABASE \"{dbname}\""))
                .map_err(|error| format!("creating database {dbname}: {error}"))?;
        }
        drop(postgres);
        let mut admin = connect(dbname)?;
        // A schema that cannot be dropped is held by a leaked lock or transaction: fail
        // instead of waiting for ever.
        admin
            .batch_execute("SET lock_timeout = '5s'; SET client_min_messages = warning")
            .map_err(|error| format!("admin settings: {error}"))?;
        let pki_dir = TempDir::new("protofuzz-pki").map_err(|error| format!("pki: {error}"))?;
        let pki =
            TestPki::write(pki_dir.path(), "postgres").map_err(|error| format!("pki: {error}"))?;
        let tls_client = pki
            .rustls_client()
            .map_err(|error| format!("pki: {error}"))?;
        Ok(Bench {
            pki,
            tls_client,
            _pki_dir: pki_dir,
            pg,
            dbname: dbname.to_string(),
            proxies: HashMap::new(),
            admin,
            lifetime,
            step_timeout: FUZZ_STEP_TIMEOUT,
        })
    }

    pub fn direct(&self) -> Target {
        let mut target = Target::direct(self.pg);
        target.dbname = self.dbname.clone();
        target
    }

    /// The proxy of `variation`, started on first use.
    pub fn proxy(&mut self, variation: Variation) -> Result<Target, String> {
        if !self.proxies.contains_key(&variation) {
            let mut config = proxy_config(self.pg.port(), &self.dbname, variation);
            if variation.tls {
                let path = |path: &std::path::Path| format!("\"{}\"", path.display());
                config = config
                    .setting("client_tls_sslmode", "\"prefer\"")
                    .setting("client_tls_cert_file", &path(&self.pki.server.cert))
                    .setting("client_tls_key_file", &path(&self.pki.server.key));
            }
            let proxy = Pgtier::start_with_watchdog(config, self.lifetime)
                .map_err(|error| format!("starting pgtier: {error}"))?;
            self.proxies.insert(variation, proxy);
        }
        let proxy = &self.proxies[&variation];
        let mut target = Target::through(proxy);
        target.dbname = self.dbname.clone();
        if variation.tls {
            target.tls = Some(self.tls_client.clone());
            target.label.push_str(" over TLS");
        }
        Ok(target)
    }

    /// The last lines of a proxy's log, for a report.
    pub fn proxy_log(&self, variation: Variation) -> String {
        let log = self
            .proxies
            .get(&variation)
            .map(Pgtier::log)
            .unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    /// Puts every client's schema back to its starting state: at least the default shape's
    /// four, since a shrunk program keeps the schema names of the clients it came from.
    fn reset(&mut self, clients: usize) -> Result<(), String> {
        let schemas = clients.max(super::Shape::default().max_clients);
        let sql: String = (0..schemas).map(setup_sql).collect();
        self.admin.batch_execute(&sql).map_err(|error| {
            format!(
                "resetting the clients' schemas: {error} ({:?})",
                error
                    .as_db_error()
                    .map(|db| (db.code().code().to_string(), db.message().to_string()))
            )
        })
    }

    /// Runs `program` directly and through the proxy of `variation`, and compares.
    pub fn check(&mut self, program: &Program, variation: Variation) -> Outcome {
        let clients = program.clients.len();
        let direct = self.direct();
        if let Err(error) = self.reset(clients) {
            return Outcome::Invalid(error);
        }
        let expected = run_clients(program, &direct, self.step_timeout);
        for transcript in &expected {
            if let End::Stopped {
                cause: cause @ (Cause::Hung | Cause::Login(_) | Cause::Io(_)),
                ..
            } = &transcript.end
            {
                return Outcome::Invalid(format!(
                    "the program does not run against PostgreSQL itself ({cause:?}):\n{}",
                    transcript.render()
                ));
            }
        }
        let through = match self.proxy(variation) {
            Ok(target) => target,
            Err(error) => return Outcome::Diverged(error),
        };
        if let Err(error) = self.reset(clients) {
            // Through the pooler, something still holds the schemas: a leaked transaction
            // or lock on a pooled server.
            return Outcome::Diverged(format!("after the direct run: {error}"));
        }
        let actual = run_clients(program, &through, self.step_timeout);
        let expected: Vec<Transcript> = expected.into_iter().map(without_table_oids).collect();
        let actual: Vec<Transcript> = actual.into_iter().map(without_table_oids).collect();
        let mut report = String::new();
        for (index, (want, got)) in expected.iter().zip(&actual).enumerate() {
            if let Some(diff) = differences(want, got) {
                report.push_str(&format!(
                    "client {index}:\n{diff}\nfull transcripts:\n{}{}\n",
                    want.render(),
                    got.render()
                ));
            }
        }
        if let Err(error) = self.reset(clients) {
            report.push_str(&format!(
                "after the run through pgtier, the schemas cannot be reset: {error}\n"
            ));
        }
        if report.is_empty() {
            Outcome::Same
        } else {
            Outcome::Diverged(report)
        }
    }
}

/// pgtier in front of `server_port` as `variation` says.
pub fn proxy_config(server_port: u16, dbname: &str, variation: Variation) -> ProxyConfig {
    let mut config = ProxyConfig::new(server_port);
    if dbname != "postgres" {
        config = config.database(dbname, server_port, dbname);
    }
    config = config
        .pool_mode(variation.mode.name())
        .pool_size(match variation.mode {
            // Every client's connections hold a server of their own, and the client that
            // hangs up may still hold one while it logs in again.
            PoolMode::Session => variation.pool_size.max(16),
            PoolMode::Transaction => variation.pool_size,
        })
        .setting("query_wait_timeout", "60")
        // A client queued for a server is told so after 5 s by default (PgBouncer's
        // query_wait_notify): a pooling notice the server never sends, so off here, where
        // a loaded machine may keep a client waiting that long.
        .setting("query_wait_notify", "0");
    config.workers = variation.workers;
    config
}

/// Every client's script on its own thread against `target`; transcripts in client order.
pub fn run_clients(program: &Program, target: &Target, step_timeout: Duration) -> Vec<Transcript> {
    std::thread::scope(|scope| {
        let handles: Vec<_> = program
            .clients
            .iter()
            .map(|client| {
                let script = client.script(step_timeout);
                scope.spawn(move || script.run(target))
            })
            .collect();
        handles
            .into_iter()
            .map(|handle| match handle.join() {
                Ok(transcript) => transcript,
                Err(_) => Transcript {
                    target: target.label.clone(),
                    connections: Vec::new(),
                    end: End::Stopped {
                        step: 0,
                        conn: "?".to_string(),
                        cause: Cause::Io("the client thread panicked".to_string()),
                    },
                },
            })
            .collect()
    })
}

/// RowDescription with every column's table OID zeroed: a temporary table gets a new OID
/// each time it is created, so the direct run and the one through pgtier cannot share it.
fn without_table_oids(mut transcript: Transcript) -> Transcript {
    for received in &mut transcript.connections {
        for message in &mut received.messages {
            if message.tag == b'T' {
                zero_table_oids(&mut message.body);
            }
        }
    }
    transcript
}

fn zero_table_oids(body: &mut [u8]) {
    let Some(count) = body
        .get(..2)
        .map(|raw| i16::from_be_bytes([raw[0], raw[1]]))
    else {
        return;
    };
    let mut offset = 2;
    for _ in 0..count.max(0) {
        let Some(end) = body
            .get(offset..)
            .and_then(|rest| rest.iter().position(|&b| b == 0))
        else {
            return;
        };
        let oid = offset + end + 1;
        let Some(field) = body.get_mut(oid..oid + 4) else {
            return;
        };
        field.fill(0);
        offset = oid + 18;
    }
}
