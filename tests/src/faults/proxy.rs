//! pgtier inside its own namespace, in front of the lab's nodes: one reader entry `app`
//! (`primary` and `replicas`), the admin console, health probes as `postgres`.

use std::io;
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use super::netns::{Host, Lab};

/// The port pgtier listens on in its namespace.
pub const PGTIER_PORT: u16 = 6432;

/// Further configuration lines, values in TOML syntax: `global` go to `[pgtier]`, `entry` to
/// the reader entry `[databases.app]` (how the lead re-runs the scenarios with settings
/// another branch adds, e.g. `target_session_attrs`).
#[derive(Clone, Debug, Default)]
pub struct Settings {
    pub global: Vec<(String, String)>,
    pub entry: Vec<(String, String)>,
}

impl Settings {
    /// Parses `KEY=VALUE` (the value in TOML syntax).
    pub fn parse_line(line: &str) -> Result<(String, String), String> {
        let (key, value) = line
            .split_once('=')
            .ok_or_else(|| format!("{line:?} is not KEY=VALUE"))?;
        Ok((key.trim().to_string(), value.trim().to_string()))
    }
}

/// A pgtier process in the lab; killed on drop.
#[derive(Debug)]
pub struct LabPgtier {
    child: Child,
    addr: SocketAddr,
    log: PathBuf,
}

impl LabPgtier {
    /// Writes the configuration into `dir` and starts pgtier with it in the pgtier host's
    /// namespace; returns once it accepts connections from the clients' namespace.
    /// `settings` adds configuration lines.
    pub fn start(
        lab: &Lab,
        dir: &Path,
        primary: &str,
        replicas: &[String],
        settings: &Settings,
    ) -> io::Result<LabPgtier> {
        std::fs::create_dir_all(dir)?;
        let userlist = dir.join("userlist.txt");
        std::fs::write(&userlist, "\"postgres\" \"\"\n")?;
        let listen = lab.addr(Host::Pgtier);
        let mut toml = format!(
            "[pgtier]\nlisten_addr = \"{listen}\"\nlisten_port = {PGTIER_PORT}\nworkers = 2\n\
             auth_type = \"trust\"\nauth_file = \"{}\"\npool_mode = \"transaction\"\n\
             default_pool_size = 20\nmax_client_conn = 500\nadmin_users = [\"postgres\"]\n\
             health_check_user = \"postgres\"\n",
            userlist.display()
        );
        for (key, value) in &settings.global {
            toml.push_str(&format!("{key} = {value}\n"));
        }
        let list: Vec<String> = replicas.iter().map(|r| format!("\"{r}\"")).collect();
        toml.push_str(&format!(
            "\n[databases.app]\nprimary = \"{primary}\"\nreplicas = [{}]\ndbname = \"postgres\"\n",
            list.join(", ")
        ));
        for (key, value) in &settings.entry {
            toml.push_str(&format!("{key} = {value}\n"));
        }
        let config = dir.join("pgtier.toml");
        std::fs::write(&config, toml)?;
        let log = dir.join("pgtier.log");
        let out = std::fs::File::create(&log)?;
        let child = lab
            .command(Host::Pgtier, crate::proxy::proxy_binary()?)
            .arg("--config")
            .arg(&config)
            .env(
                "PGTIER_LOG",
                std::env::var("PGTIER_LOG").unwrap_or_else(|_| "info".into()),
            )
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()?;
        let addr = SocketAddr::new(
            listen
                .parse()
                .map_err(|_| io::Error::other("bad pgtier address"))?,
            PGTIER_PORT,
        );
        let mut proxy = LabPgtier { child, addr, log };
        proxy.wait_listening(lab)?;
        Ok(proxy)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The last `lines` lines of pgtier's log.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    fn wait_listening(&mut self, lab: &Lab) -> io::Result<()> {
        let ns = lab.ns(Host::Clients);
        let addr = self.addr;
        let deadline = Instant::now() + Duration::from_secs(20);
        let probe = std::thread::spawn(move || -> io::Result<()> {
            super::netns::enter_named(&ns)?;
            loop {
                if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                    return Ok(());
                }
                if Instant::now() > deadline {
                    return Err(io::Error::other(format!("pgtier did not listen on {addr}")));
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        let result = probe
            .join()
            .map_err(|_| io::Error::other("listen probe panicked"))?;
        if let Err(error) = result {
            let status = self.child.try_wait().ok().flatten();
            return Err(io::Error::other(format!(
                "{error} (exit status {status:?}); log:\n{}",
                self.log_tail(40)
            )));
        }
        Ok(())
    }
}

impl Drop for LabPgtier {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
