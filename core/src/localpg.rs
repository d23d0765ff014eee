//! Starts real, throw-away PostgreSQL servers on loopback for the demo and the tests.
//!
//! pgtier is judged against real servers, never mocks, so every end-to-end test and
//! `pgtier demo` needs primaries and streaming replicas it can start, stop and kill.
//! The installed PostgreSQL binaries are found through `pg_config --bindir` (Debian keeps
//! them off PATH). initdb refuses to run as root, so when we are root every server
//! command runs as the `postgres` user through `runuser`.
//!
//! Each server lives in its own temporary directory, listens only on 127.0.0.1 and
//! on a Unix socket inside that directory, and is stopped and deleted on drop. With
//! [`PgOptions::tls`] it also accepts TLS (`ssl = on`) next to plain TCP.

use std::io;
use std::net::TcpListener;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// How non-superuser TCP logins authenticate (the superuser `postgres` is always trusted,
/// so tests can set the server up and inspect it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HbaAuth {
    Trust,
    Md5,
    Scram,
}

impl HbaAuth {
    fn method(self) -> &'static str {
        match self {
            HbaAuth::Trust => "trust",
            HbaAuth::Md5 => "md5",
            HbaAuth::Scram => "scram-sha-256",
        }
    }
}

/// How to set up a new primary.
#[derive(Clone, Debug)]
pub struct PgOptions {
    pub auth: HbaAuth,
    /// `password_encryption`: "scram-sha-256" or "md5".
    pub password_encryption: &'static str,
    /// Extra `postgresql.conf` settings, written after ours so they win.
    pub extra_conf: Vec<(String, String)>,
    /// A fixed port, or `None` for a free one.
    pub port: Option<u16>,
    /// TLS: `None` for a server that answers SSLRequest with `N`.
    pub tls: Option<PgTls>,
}

impl Default for PgOptions {
    fn default() -> Self {
        PgOptions {
            auth: HbaAuth::Trust,
            password_encryption: "scram-sha-256",
            extra_conf: Vec::new(),
            port: None,
            tls: None,
        }
    }
}

/// TLS for a test server. The files are copied into the data directory (the server, which may
/// run as `postgres`, must own its key and refuses one that others can read), and both TLS
/// and plain TCP logins keep working: the `host` lines of pg_hba.conf match either.
#[derive(Clone, Debug)]
pub struct PgTls {
    /// The server's certificate chain (PEM), `ssl_cert_file`.
    pub cert_file: PathBuf,
    /// Its private key (PEM), `ssl_key_file`.
    pub key_file: PathBuf,
    /// CA for client certificates (PEM), `ssl_ca_file`: with it the server asks clients for a
    /// certificate (optional, except for `cert_users`).
    pub ca_file: Option<PathBuf>,
    /// Users who must log in over TLS with a client certificate whose common name is the
    /// user name (pg_hba `hostssl ... cert`; their plain TCP logins are rejected). Needs
    /// `ca_file`.
    pub cert_users: Vec<String>,
}

impl PgTls {
    /// TLS with a server certificate and key, no client certificates.
    pub fn new(cert_file: impl Into<PathBuf>, key_file: impl Into<PathBuf>) -> PgTls {
        PgTls {
            cert_file: cert_file.into(),
            key_file: key_file.into(),
            ca_file: None,
            cert_users: Vec::new(),
        }
    }
}

/// One running PostgreSQL server in a temporary directory.
#[derive(Debug)]
pub struct LocalPg {
    port: u16,
    data_dir: PathBuf,
    bindir: PathBuf,
    as_postgres_user: bool,
}

static NEXT_INSTANCE: AtomicU32 = AtomicU32::new(0);

impl LocalPg {
    /// Creates, configures and starts a new primary (initdb + pg_ctl start).
    pub fn start_primary(options: &PgOptions) -> io::Result<LocalPg> {
        let pg = LocalPg::prepare_dir(options.port)?;
        let data = pg.data_dir_str()?;
        pg.run_server_tool(
            "initdb",
            &[
                "-D",
                data,
                "-U",
                "postgres",
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--locale=C",
                "--no-sync",
            ],
        )?;
        let mut conf = pg.base_conf();
        conf.push(("wal_level".into(), "replica".into()));
        conf.push(("max_wal_senders".into(), "20".into()));
        conf.push(("hot_standby".into(), "on".into()));
        conf.push((
            "password_encryption".into(),
            format!("'{}'", options.password_encryption),
        ));
        if let Some(tls) = &options.tls {
            conf.extend(pg.install_tls(tls)?);
        }
        for (k, v) in &options.extra_conf {
            conf.push((k.clone(), v.clone()));
        }
        pg.append_conf(&conf)?;
        std::fs::write(pg.data_dir.join("pg_hba.conf"), hba(options))?;
        pg.start()?;
        Ok(pg)
    }

    /// Clones `primary` with pg_basebackup and starts it as a read-only streaming replica.
    pub fn start_replica(primary: &LocalPg) -> io::Result<LocalPg> {
        let pg = LocalPg::prepare_dir(None)?;
        // pg_basebackup wants to create the directory contents itself and needs it empty.
        let data = pg.data_dir_str()?;
        let primary_port = primary.port.to_string();
        pg.run_server_tool(
            "pg_basebackup",
            &[
                "-h",
                "127.0.0.1",
                "-p",
                &primary_port,
                "-U",
                "postgres",
                "-D",
                data,
                "-R",
                "-X",
                "stream",
                // Without a fast checkpoint the clone waits for the primary's next one.
                "--checkpoint=fast",
                "--no-sync",
            ],
        )?;
        // The copied postgresql.conf carries the primary's port and socket dir; later lines win.
        pg.append_conf(&pg.base_conf())?;
        pg.start()?;
        Ok(pg)
    }

    /// The TCP port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The data directory (also the Unix socket directory).
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// The server log file.
    pub fn log_path(&self) -> PathBuf {
        self.data_dir.join("server.log")
    }

    /// `host=127.0.0.1 port=N` for libpq-style clients.
    pub fn conninfo(&self, dbname: &str, user: &str) -> String {
        format!(
            "host=127.0.0.1 port={} dbname={} user={}",
            self.port, dbname, user
        )
    }

    /// Starts (or restarts) the server and waits until it accepts connections.
    pub fn start(&self) -> io::Result<()> {
        let data = self.data_dir_str()?;
        let log = self.log_path();
        let log = path_str(&log)?;
        self.run_server_tool(
            "pg_ctl",
            &["-D", data, "-l", log, "-w", "-t", "60", "start"],
        )?;
        Ok(())
    }

    /// Stops the server the way a crash would (`pg_ctl stop -m immediate`).
    pub fn stop_immediate(&self) -> io::Result<()> {
        let data = self.data_dir_str()?;
        self.run_server_tool("pg_ctl", &["-D", data, "-m", "immediate", "-w", "stop"])?;
        Ok(())
    }

    /// Stops the server cleanly (`pg_ctl stop -m fast`).
    pub fn stop(&self) -> io::Result<()> {
        let data = self.data_dir_str()?;
        self.run_server_tool("pg_ctl", &["-D", data, "-m", "fast", "-w", "stop"])?;
        Ok(())
    }

    /// Promotes a standby to a primary (`pg_ctl promote`), waiting until it takes writes.
    pub fn promote(&self) -> io::Result<()> {
        let data = self.data_dir_str()?;
        self.run_server_tool("pg_ctl", &["-D", data, "-w", "-t", "60", "promote"])?;
        Ok(())
    }

    /// The postmaster's process id (the first line of `postmaster.pid`), for tests that
    /// signal it themselves.
    pub fn postmaster_pid(&self) -> io::Result<i32> {
        let text = std::fs::read_to_string(self.data_dir.join("postmaster.pid"))?;
        text.lines()
            .next()
            .and_then(|line| line.trim().parse().ok())
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "no pid in postmaster.pid"))
    }

    /// Runs one SQL string through psql as the superuser and returns trimmed stdout.
    pub fn psql(&self, dbname: &str, sql: &str) -> io::Result<String> {
        let port = self.port.to_string();
        let out = Command::new(self.bindir.join("psql"))
            .args(["-XAtq", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1", "-p"])
            .arg(&port)
            .args(["-U", "postgres", "-d", dbname, "-c", sql])
            .stdin(Stdio::null())
            .output()?;
        ensure_success("psql", &out)?;
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    }

    /// Runs one SQL string through psql with a whole libpq connection string (TLS options,
    /// another user) and returns trimmed stdout; an error carries psql's message.
    pub fn psql_conninfo(&self, conninfo: &str, sql: &str) -> io::Result<String> {
        let out = Command::new(self.bindir.join("psql"))
            .args(["-XAtq", "-v", "ON_ERROR_STOP=1", "-d", conninfo, "-c", sql])
            .stdin(Stdio::null())
            .output()?;
        ensure_success("psql", &out)?;
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    }

    /// Creates a login role with a password, hashed per the server's password_encryption.
    pub fn create_user(&self, name: &str, password: &str) -> io::Result<()> {
        let sql = format!(
            "CREATE ROLE {} LOGIN PASSWORD {}",
            quote_ident(name),
            quote_literal(password)
        );
        self.psql("postgres", &sql).map(|_| ())
    }

    /// Waits until this replica has replayed everything `primary` has written so far.
    pub fn wait_caught_up(&self, primary: &LocalPg, timeout: Duration) -> io::Result<()> {
        // The insert position, not pg_current_wal_lsn(): with synchronous_commit = off a
        // commit just made may not be written yet, and a replica caught up to the write
        // position can still miss it.
        let target = primary.psql("postgres", "SELECT pg_current_wal_insert_lsn()")?;
        let sql = format!("SELECT pg_last_wal_replay_lsn() >= '{target}'::pg_lsn");
        let deadline = Instant::now() + timeout;
        loop {
            if self.psql("postgres", &sql)? == "t" {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("replica on port {} did not reach {target}", self.port),
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn prepare_dir(port: Option<u16>) -> io::Result<LocalPg> {
        let bindir = pg_bindir();
        let instance = NEXT_INSTANCE.fetch_add(1, Ordering::Relaxed);
        let data_dir =
            std::env::temp_dir().join(format!("pgtier-pg-{}-{}", std::process::id(), instance));
        if data_dir.exists() {
            std::fs::remove_dir_all(&data_dir)?;
        }
        std::fs::create_dir_all(&data_dir)?;
        let as_postgres_user = running_as_root()?;
        let pg = LocalPg {
            port: match port {
                Some(p) => p,
                None => free_port()?,
            },
            data_dir,
            bindir,
            as_postgres_user,
        };
        if as_postgres_user {
            let status = Command::new("chown")
                .args(["postgres:postgres"])
                .arg(&pg.data_dir)
                .status()?;
            if !status.success() {
                return Err(io::Error::other("chown postgres of the data dir failed"));
            }
            // The server refuses a data directory readable by others.
            let status = Command::new("chmod")
                .arg("700")
                .arg(&pg.data_dir)
                .status()?;
            if !status.success() {
                return Err(io::Error::other("chmod 700 of the data dir failed"));
            }
        }
        Ok(pg)
    }

    /// Copies the TLS files into the data directory, owned by the server's user, and returns
    /// the settings that turn TLS on. Relative file names resolve against the data directory,
    /// so a replica cloned with pg_basebackup finds its own copies.
    fn install_tls(&self, tls: &PgTls) -> io::Result<Vec<(String, String)>> {
        use std::os::unix::fs::PermissionsExt;
        let mut files = vec![
            (&tls.cert_file, "server.crt", 0o644),
            (&tls.key_file, "server.key", 0o600),
        ];
        if let Some(ca) = &tls.ca_file {
            files.push((ca, "root.crt", 0o644));
        } else if !tls.cert_users.is_empty() {
            return Err(io::Error::other("PgTls::cert_users needs a ca_file"));
        }
        let mut conf = vec![("ssl".to_string(), "on".to_string())];
        for (source, name, mode) in files {
            let target = self.data_dir.join(name);
            std::fs::copy(source, &target)
                .map_err(|e| io::Error::other(format!("cannot copy {}: {e}", source.display())))?;
            std::fs::set_permissions(&target, std::fs::Permissions::from_mode(mode))?;
            if self.as_postgres_user {
                let status = Command::new("chown")
                    .arg("postgres:postgres")
                    .arg(&target)
                    .status()?;
                if !status.success() {
                    return Err(io::Error::other(format!("chown postgres of {name} failed")));
                }
            }
            let setting = match name {
                "server.crt" => "ssl_cert_file",
                "server.key" => "ssl_key_file",
                _ => "ssl_ca_file",
            };
            conf.push((setting.to_string(), format!("'{name}'")));
        }
        Ok(conf)
    }

    fn base_conf(&self) -> Vec<(String, String)> {
        let dir = self.data_dir.display();
        vec![
            ("listen_addresses".into(), "'127.0.0.1'".into()),
            ("port".into(), self.port.to_string()),
            ("unix_socket_directories".into(), format!("'{dir}'")),
            ("max_connections".into(), "300".into()),
            ("fsync".into(), "off".into()),
            ("synchronous_commit".into(), "off".into()),
            ("full_page_writes".into(), "off".into()),
            ("shared_buffers".into(), "64MB".into()),
            ("logging_collector".into(), "off".into()),
        ]
    }

    fn append_conf(&self, settings: &[(String, String)]) -> io::Result<()> {
        use std::io::Write;
        let path = self.data_dir.join("postgresql.conf");
        let mut file = std::fs::OpenOptions::new().append(true).open(path)?;
        writeln!(file, "\n# pgtier localpg")?;
        for (k, v) in settings {
            writeln!(file, "{k} = {v}")?;
        }
        Ok(())
    }

    fn data_dir_str(&self) -> io::Result<&str> {
        path_str(&self.data_dir)
    }

    fn run_server_tool(&self, tool: &str, args: &[&str]) -> io::Result<Output> {
        let exe = self.bindir.join(tool);
        let mut cmd = if self.as_postgres_user {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(&exe);
            c
        } else {
            Command::new(&exe)
        };
        // Server tools must not inherit the test's stdio: pg_ctl's postmaster would keep
        // the test harness's pipes open after the test ends.
        let out = cmd
            .args(args)
            .current_dir(std::env::temp_dir())
            .stdin(Stdio::null())
            .output()?;
        ensure_success(tool, &out)?;
        Ok(out)
    }
}

impl Drop for LocalPg {
    fn drop(&mut self) {
        if let Ok(data) = self.data_dir_str() {
            let data = data.to_string();
            let _ = self.run_server_tool("pg_ctl", &["-D", &data, "-m", "immediate", "-w", "stop"]);
        }
        let _ = std::fs::remove_dir_all(&self.data_dir);
    }
}

/// pg_hba.conf: the superuser and replication are trusted, everyone else uses `options.auth`
/// over TCP with or without TLS, and `cert_users` need TLS and a client certificate.
fn hba(options: &PgOptions) -> String {
    let mut hba = String::from(
        "local all all trust\n\
         host all postgres 127.0.0.1/32 trust\n\
         host replication all 127.0.0.1/32 trust\n",
    );
    let cert_users = options.tls.iter().flat_map(|tls| tls.cert_users.iter());
    for user in cert_users {
        let user = quote_ident(user);
        hba.push_str(&format!("hostssl all {user} 127.0.0.1/32 cert\n"));
        hba.push_str(&format!("host all {user} 127.0.0.1/32 reject\n"));
    }
    hba.push_str(&format!(
        "host all all 127.0.0.1/32 {}\n",
        options.auth.method()
    ));
    hba
}

/// The directory holding initdb, pg_ctl and postgres: `PGTIER_PG_BINDIR`, else
/// `pg_config --bindir`, else Debian's PostgreSQL 15 location.
pub fn pg_bindir() -> PathBuf {
    if let Some(dir) = std::env::var_os("PGTIER_PG_BINDIR") {
        return PathBuf::from(dir);
    }
    if let Ok(out) = Command::new("pg_config").arg("--bindir").output() {
        let dir = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if out.status.success() && Path::new(&dir).join("initdb").exists() {
            return PathBuf::from(dir);
        }
    }
    PathBuf::from("/usr/lib/postgresql/15/bin")
}

/// A port on 127.0.0.1 that was free a moment ago.
pub fn free_port() -> io::Result<u16> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    Ok(listener.local_addr()?.port())
}

fn running_as_root() -> io::Result<bool> {
    Ok(std::fs::metadata("/proc/self")?.uid() == 0)
}

fn path_str(path: &Path) -> io::Result<&str> {
    path.to_str()
        .ok_or_else(|| io::Error::other(format!("path is not UTF-8: {}", path.display())))
}

fn ensure_success(tool: &str, out: &Output) -> io::Result<()> {
    if out.status.success() {
        return Ok(());
    }
    Err(io::Error::other(format!(
        "{tool} failed ({}): {}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    )))
}

fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

fn quote_literal(value: &str) -> String {
    format!("'{}'", value.replace('\'', "''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn primary_and_replica_serve_queries() {
        let primary = LocalPg::start_primary(&PgOptions::default()).unwrap();
        primary
            .psql("postgres", "CREATE TABLE t AS SELECT 42 AS v")
            .unwrap();
        let replica = LocalPg::start_replica(&primary).unwrap();
        replica
            .wait_caught_up(&primary, Duration::from_secs(30))
            .unwrap();
        assert_eq!(replica.psql("postgres", "SELECT v FROM t").unwrap(), "42");
        assert_eq!(
            replica
                .psql("postgres", "SELECT pg_is_in_recovery()")
                .unwrap(),
            "t"
        );
        replica.stop_immediate().unwrap();
        assert!(replica.psql("postgres", "SELECT 1").is_err());
        replica.start().unwrap();
        assert_eq!(replica.psql("postgres", "SELECT 1").unwrap(), "1");
    }

    #[test]
    fn hba_lines_per_tls_setup() {
        let plain = hba(&PgOptions::default());
        assert!(
            plain.ends_with("host all all 127.0.0.1/32 trust\n"),
            "{plain}"
        );
        assert!(!plain.contains("hostssl"));
        let mut tls = PgTls::new("/x/server.crt", "/x/server.key");
        tls.cert_users.push("alice".to_string());
        let options = PgOptions {
            auth: HbaAuth::Scram,
            tls: Some(tls),
            ..PgOptions::default()
        };
        let with_cert = hba(&options);
        let alice_cert = with_cert
            .find("hostssl all \"alice\" 127.0.0.1/32 cert")
            .unwrap();
        let alice_reject = with_cert
            .find("host all \"alice\" 127.0.0.1/32 reject")
            .unwrap();
        let others = with_cert
            .find("host all all 127.0.0.1/32 scram-sha-256")
            .unwrap();
        assert!(
            alice_cert < alice_reject && alice_reject < others,
            "{with_cert}"
        );
    }

    #[test]
    fn scram_users_are_created() {
        let pg = LocalPg::start_primary(&PgOptions {
            auth: HbaAuth::Scram,
            ..PgOptions::default()
        })
        .unwrap();
        pg.create_user("alice", "it's secret").unwrap();
        let hash = pg
            .psql(
                "postgres",
                "SELECT rolpassword FROM pg_authid WHERE rolname = 'alice'",
            )
            .unwrap();
        assert!(hash.starts_with("SCRAM-SHA-256$"), "{hash}");
    }
}
