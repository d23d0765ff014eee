//! The Debian package end to end. `scripts/package.sh` builds it from the binary these tests
//! run (lintian must find no error), and `dpkg -i` installs it for real, maintainer scripts
//! and all, into a throw-away root: a copy-on-write overlay of this machine's root, mounted in
//! a private mount namespace and entered with chroot, so `adduser`, `systemd-tmpfiles` and
//! dpkg's database change only the overlay's upper directory, which the test removes.
//!
//! In that root: the `pgtier` user, the auth file's owner and mode, the log and runtime
//! directories; `systemd-analyze verify` accepts both units (this container runs no systemd,
//! so verify, which loads the units offline, checks the binary and the man pages the units
//! name, is the closest real check); the installed binary, started as the unit starts it (as
//! `pgtier`, `-q`, the installed pgtier.ini with only the two ports changed), answers psql on
//! TCP and on its Unix socket, tells a NOTIFY_SOCKET the test listens on READY=1,
//! RELOADING=1/READY=1 around SIGHUP and STOPPING=1 at shutdown; its log file reopens after
//! SIGHUP (renamed by hand, then by the installed logrotate rule); remove keeps the user and
//! the configuration, purge removes them. The man pages render with `man -l` and list every
//! setting docs/config.md lists.

use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use pgtier_tests::process::{Finished, run, send_signal};
use pgtier_tests::proxy::proxy_binary;
use pgtier_tests::{LocalPg, PgOptions, TempDir, free_port, pg_bindir};

/// Bounded waits: a notification, a process to exit, a log line.
const WAIT: Duration = Duration::from_secs(30);
/// Building the package (lintian included) on a loaded machine.
const BUILD_TIMEOUT: Duration = Duration::from_secs(600);
/// One command in the throw-away root (dpkg, psql).
const COMMAND_TIMEOUT: Duration = Duration::from_secs(120);

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

/// The .deb, built once for the whole file from the binary under test.
fn package() -> PathBuf {
    static BUILT: OnceLock<(TempDir, PathBuf)> = OnceLock::new();
    static BUILDING: Mutex<()> = Mutex::new(());
    let _one_at_a_time = BUILDING.lock().unwrap_or_else(|e| e.into_inner());
    let (_, deb) = BUILT.get_or_init(|| {
        let out = TempDir::new("deb").expect("a directory for the package");
        let binary = proxy_binary().expect("the binary under test");
        let built = run(
            Command::new("bash")
                .arg(repo().join("scripts/package.sh"))
                .arg("--binary")
                .arg(&binary)
                .arg("--out")
                .arg(out.path()),
            BUILD_TIMEOUT,
        )
        .expect("scripts/package.sh runs");
        assert!(
            built.success(),
            "scripts/package.sh (lintian included) failed:\n{}\n{}",
            built.stdout,
            built.stderr
        );
        let deb = PathBuf::from(built.stdout.lines().last().unwrap_or_default().trim());
        assert!(
            deb.is_file(),
            "package.sh printed its .deb: {}",
            built.stdout
        );
        (out, deb)
    });
    deb.clone()
}

/// A copy-on-write view of this machine's root, held open by a process in a private mount
/// namespace; commands enter it with nsenter and chroot. Dropping it ends the namespace (the
/// overlay goes with it) and removes the upper directory.
struct ThrowAwayRoot {
    holder: Child,
    merged: PathBuf,
    upper: PathBuf,
    _dir: TempDir,
}

impl ThrowAwayRoot {
    /// The root, with `files` (a file of this machine, its path inside the root) put there
    /// first: a temp directory on a separate mount (a tmpfs /tmp) would not show through.
    fn new(files: &[(&Path, &str)]) -> ThrowAwayRoot {
        let dir = TempDir::new("root").expect("a directory for the root");
        let (upper, work, merged) = (
            dir.path().join("upper"),
            dir.path().join("work"),
            dir.path().join("merged"),
        );
        for path in [&upper, &work, &merged] {
            std::fs::create_dir_all(path).expect("overlay directories");
        }
        for (file, inside) in files {
            let target = upper.join(inside.trim_start_matches('/'));
            if let Some(parent) = target.parent() {
                std::fs::create_dir_all(parent).expect("a directory in the root");
            }
            std::fs::copy(file, &target).expect("copy into the root");
        }
        let script = format!(
            "set -e
             mount -t overlay overlay -o lowerdir=/,upperdir={upper},workdir={work} {merged}
             mount --bind /proc {merged}/proc
             mount --bind /dev {merged}/dev
             echo mounted
             exec sleep 3600",
            upper = upper.display(),
            work = work.display(),
            merged = merged.display(),
        );
        let mut holder = Command::new("unshare")
            .args(["--mount", "--propagation", "private", "sh", "-c", &script])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("unshare (util-linux) runs");
        let mut line = String::new();
        if let Some(stdout) = holder.stdout.take() {
            use std::io::BufRead;
            let _ = std::io::BufReader::new(stdout).read_line(&mut line);
        }
        assert_eq!(
            line.trim(),
            "mounted",
            "an overlay of / in a private mount namespace (needs root and overlayfs)"
        );
        ThrowAwayRoot {
            holder,
            merged,
            upper,
            _dir: dir,
        }
    }

    /// `sh -c script` as root inside the root.
    fn command(&self, script: &str) -> Command {
        let mut command = Command::new("nsenter");
        command
            .arg(format!("--target={}", self.holder.id()))
            .arg("--mount")
            .arg("chroot")
            .arg(&self.merged)
            .args(["sh", "-c", script]);
        command
    }

    fn run(&self, script: &str) -> Finished {
        run(&mut self.command(script), COMMAND_TIMEOUT).expect("nsenter runs")
    }

    /// Runs `script`, which must succeed; its standard output.
    fn ok(&self, script: &str) -> String {
        let finished = self.run(script);
        assert!(
            finished.success(),
            "`{script}` failed in the throw-away root:\n{}\n{}",
            finished.stdout,
            finished.stderr
        );
        finished.stdout
    }

    /// Whether `path` (absolute, inside the root) was written by the root's processes.
    fn changed(&self, path: &str) -> bool {
        self.upper.join(path.trim_start_matches('/')).exists()
    }
}

impl Drop for ThrowAwayRoot {
    fn drop(&mut self) {
        let _ = self.holder.kill();
        let _ = self.holder.wait();
    }
}

/// The datagram socket a test's NOTIFY_SOCKET names (`@name`, Linux's abstract namespace,
/// which the chroot shares), and what arrived on it.
struct NotifyListener {
    socket: UnixDatagram,
    name: String,
    received: Vec<String>,
}

impl NotifyListener {
    fn bind() -> NotifyListener {
        let name = format!("pgtier-package-test-{}", std::process::id());
        let address = SocketAddr::from_abstract_name(name.as_bytes()).expect("an abstract name");
        let socket = UnixDatagram::bind_addr(&address).expect("bind the notify socket");
        socket
            .set_read_timeout(Some(Duration::from_millis(200)))
            .expect("timeout");
        NotifyListener {
            socket,
            name: format!("@{name}"),
            received: Vec::new(),
        }
    }

    /// Waits (bounded) for a datagram with the line `line`, keeping every datagram.
    fn wait_for(&mut self, line: &str) {
        let deadline = Instant::now() + WAIT;
        let mut buffer = [0u8; 4096];
        while Instant::now() < deadline {
            if let Ok(length) = self.socket.recv(&mut buffer) {
                let message = String::from_utf8_lossy(&buffer[..length]).into_owned();
                let found = message.lines().any(|l| l == line);
                self.received.push(message);
                if found {
                    return;
                }
            }
        }
        panic!("no {line} on NOTIFY_SOCKET; got {:?}", self.received);
    }

    /// The state lines received (READY=1, RELOADING=1, STOPPING=1), in order.
    fn states(&self) -> Vec<String> {
        self.received
            .iter()
            .flat_map(|message| message.lines())
            .filter(|line| line.ends_with("=1"))
            .map(str::to_string)
            .collect()
    }
}

/// pgtier started in the root as pgtier.service starts it; killed if the test ends first.
struct Service {
    child: Child,
}

impl Service {
    fn start(root: &ThrowAwayRoot, notify_socket: &str) -> Service {
        let mut command = Command::new("nsenter");
        command
            .arg(format!("--target={}", root.holder.id()))
            .arg("--mount")
            .arg("chroot")
            .arg(&root.merged)
            // User=pgtier Group=pgtier, ExecStart=/usr/sbin/pgtier -q /etc/pgtier/pgtier.ini
            .args([
                "setpriv",
                "--reuid=pgtier",
                "--regid=pgtier",
                "--clear-groups",
                "/usr/sbin/pgtier",
                "-q",
                "/etc/pgtier/pgtier.ini",
            ])
            .env("NOTIFY_SOCKET", notify_socket)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        Service {
            child: command.spawn().expect("start pgtier in the root"),
        }
    }

    /// The process id of pgtier (nsenter, chroot and setpriv each exec the next).
    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn wait_exit(&mut self) -> std::process::ExitStatus {
        let deadline = Instant::now() + WAIT;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("pgtier did not exit after SIGINT");
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// `psql -c "SELECT ..."` through the installed pgtier, run inside the root.
fn psql_in_root(root: &ThrowAwayRoot, host: &str, port: u16, sql: &str) -> String {
    let psql = pg_bindir().join("psql");
    root.ok(&format!(
        "PGPASSWORD=secret PGCONNECT_TIMEOUT=10 {} -X -At -h {host} -p {port} -U postgres -d postgres -c \"{sql}\"",
        psql.display()
    ))
    .trim()
    .to_string()
}

/// Waits (bounded) until `path` in the root holds `needle`.
fn wait_for_text(root: &ThrowAwayRoot, path: &str, needle: &str) -> String {
    let deadline = Instant::now() + WAIT;
    loop {
        let text = root.run(&format!("cat {path}")).stdout;
        if text.contains(needle) || Instant::now() >= deadline {
            assert!(
                text.contains(needle),
                "{path} never got {needle:?}:\n{text}"
            );
            return text;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn the_package_installs_runs_as_its_unit_would_and_purges() {
    let deb = package();
    let host_had_pgtier = Path::new("/usr/sbin/pgtier").exists();
    let host_had_user = run(Command::new("getent").args(["passwd", "pgtier"]), WAIT)
        .is_ok_and(|found| found.success());
    let root = ThrowAwayRoot::new(&[(&deb, "/root/pgtier.deb")]);

    // dpkg -i, with the real maintainer scripts.
    let installed = root.ok("dpkg -i /root/pgtier.deb 2>&1");
    assert!(installed.contains("Setting up pgtier"), "{installed}");
    assert!(
        root.changed("/usr/sbin/pgtier"),
        "installed into the overlay"
    );
    assert_eq!(
        Path::new("/usr/sbin/pgtier").exists(),
        host_had_pgtier,
        "the machine's own root is untouched"
    );
    assert_eq!(
        run(Command::new("getent").args(["passwd", "pgtier"]), WAIT)
            .is_ok_and(|found| found.success()),
        host_had_user,
        "the machine's own users are untouched"
    );
    assert!(root.ok("getent passwd pgtier").starts_with("pgtier:"));
    assert_eq!(
        root.ok("stat -c '%U:%G %a' /etc/pgtier/userlist.txt /var/log/pgtier /run/pgtier")
            .lines()
            .collect::<Vec<_>>(),
        [
            "pgtier:pgtier 640",
            "pgtier:pgtier 750",
            "pgtier:pgtier 755"
        ]
    );
    let conffiles = root.ok("dpkg-query -W -f='${Conffiles}' pgtier");
    for file in [
        "/etc/pgtier/pgtier.ini",
        "/etc/pgtier/userlist.txt",
        "/etc/logrotate.d/pgtier",
    ] {
        assert!(
            conffiles.contains(file),
            "{file} is a conffile: {conffiles}"
        );
    }

    // The units, verified offline (their binary and man pages must exist), and their
    // hardening scored by systemd itself.
    let verified = root.run(
        "cd /lib/systemd/system && \
         systemd-analyze verify pgtier.service pgtier@main.service 2>&1",
    );
    assert!(
        verified.success() && verified.stdout.trim().is_empty(),
        "systemd-analyze verify:\n{}{}",
        verified.stdout,
        verified.stderr
    );
    for unit in ["pgtier.service", "pgtier@.service"] {
        let security = root.ok(&format!(
            "systemd-analyze security --offline=true /lib/systemd/system/{unit} 2>&1 | tail -n 1"
        ));
        assert!(
            security.contains(" OK ") || security.contains("SAFE"),
            "{unit} is rated OK or better: {security}"
        );
    }

    // The installed default, with only the server's port and the listen port changed (this
    // machine's 5432 and 6432 may be anyone's), and a user in the auth file, as an operator
    // sets one up.
    let pg = LocalPg::start_primary(&PgOptions::default()).expect("PostgreSQL");
    let port = free_port().expect("a free port");
    root.ok(&format!(
        "sed -i -e 's/port=5432/port={pg}/' -e 's/^listen_port = 6432$/listen_port = {port}/' \
         /etc/pgtier/pgtier.ini && echo '\"postgres\" \"secret\"' >> /etc/pgtier/userlist.txt",
        pg = pg.port()
    ));
    let checked = root.ok("pgtier check-config /etc/pgtier/pgtier.ini");
    assert!(checked.starts_with("OK"), "{checked}");

    let mut notify = NotifyListener::bind();
    let mut service = Service::start(&root, &notify.name);
    notify.wait_for("READY=1");
    assert_eq!(
        psql_in_root(&root, "127.0.0.1", port, "SELECT 40 + 2"),
        "42"
    );
    assert_eq!(
        psql_in_root(&root, "/run/pgtier", port, "SELECT current_user"),
        "postgres"
    );
    let pid = root.ok("cat /run/pgtier/pgtier.pid");
    assert_eq!(
        pid.trim(),
        service.pid().to_string(),
        "the pidfile names it"
    );

    // logrotate's move by hand, then SIGHUP (ExecReload): the reload's lines go to a new file.
    root.ok("mv /var/log/pgtier/pgtier.log /var/log/pgtier/pgtier.log.moved");
    send_signal(service.pid(), libc::SIGHUP).expect("SIGHUP");
    notify.wait_for("RELOADING=1");
    notify.wait_for("READY=1");
    let fresh = wait_for_text(&root, "/var/log/pgtier/pgtier.log", "reloaded");
    assert!(!fresh.contains("pgtier listening"), "a new file: {fresh}");
    let moved = root.ok("cat /var/log/pgtier/pgtier.log.moved");
    assert!(moved.contains("pgtier listening"), "{moved}");
    assert!(moved.contains("got SIGHUP"), "{moved}");
    assert!(
        !moved.contains("reloaded"),
        "nothing after the reopen: {moved}"
    );
    assert_eq!(
        root.ok("stat -c '%U %a' /var/log/pgtier/pgtier.log").trim(),
        "pgtier 640"
    );

    // The installed logrotate rule: it moves the file and signals pgtier through the pidfile
    // (no systemd here), and pgtier writes to the file logrotate created.
    root.ok("rm /var/log/pgtier/pgtier.log.moved");
    root.ok("logrotate --force --state /tmp/pgtier-logrotate.state /etc/logrotate.d/pgtier");
    notify.wait_for("RELOADING=1");
    notify.wait_for("READY=1");
    wait_for_text(&root, "/var/log/pgtier/pgtier.log", "reloaded");
    let rotated = root.ok("cat /var/log/pgtier/pgtier.log.1");
    assert!(rotated.contains("got SIGHUP"), "{rotated}");
    assert_eq!(psql_in_root(&root, "127.0.0.1", port, "SELECT 1"), "1");

    // systemctl stop: KillSignal=SIGINT.
    send_signal(service.pid(), libc::SIGINT).expect("SIGINT");
    notify.wait_for("STOPPING=1");
    assert!(service.wait_exit().success(), "pgtier exits 0");
    let states = notify.states();
    assert_eq!(
        states,
        [
            "READY=1",
            "RELOADING=1",
            "READY=1",
            "RELOADING=1",
            "READY=1",
            "STOPPING=1"
        ],
        "the states systemd was told, in order"
    );

    // Remove keeps the user and the configuration; purge removes them.
    root.ok("dpkg -r pgtier");
    assert!(!root.run("test -e /usr/sbin/pgtier").success());
    assert!(root.run("getent passwd pgtier").success(), "kept on remove");
    assert!(root.run("test -f /etc/pgtier/pgtier.ini").success());
    root.ok("dpkg -P pgtier");
    assert!(
        !root.run("getent passwd pgtier").success(),
        "removed on purge"
    );
    assert!(!root.run("getent group pgtier").success());
    assert!(!root.run("test -e /etc/pgtier/pgtier.ini").success());
    assert!(!root.run("test -e /var/log/pgtier").success());
}

/// Rows of docs/config.md's tables as (first header cell, first cell without backticks).
fn documented_rows() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(repo().join("docs/config.md")).expect("docs/config.md");
    let mut rows = Vec::new();
    let mut header: Option<String> = None;
    for line in text.lines() {
        let Some(inner) = line.trim().strip_prefix('|') else {
            header = None;
            continue;
        };
        let first = inner.split('|').next().unwrap_or_default().trim();
        if first.starts_with("---") {
            continue;
        }
        match &header {
            None => header = Some(first.to_string()),
            Some(header) => {
                if let Some(key) = first.strip_prefix('`').and_then(|f| f.strip_suffix('`')) {
                    rows.push((header.clone(), key.to_string()));
                }
            }
        }
    }
    rows
}

/// `man -l` of a page the package installs, as plain text.
fn render(extracted: &Path, page: &str) -> String {
    let rendered = run(
        Command::new("man")
            .arg("-l")
            .arg(extracted.join(page))
            .env("MANWIDTH", "120")
            .env("MAN_KEEP_FORMATTING", "")
            .env("LC_ALL", "C.UTF-8"),
        COMMAND_TIMEOUT,
    )
    .expect("man (man-db) runs");
    assert!(rendered.success(), "man -l {page}: {}", rendered.stderr);
    assert!(
        !rendered.stderr.contains("warning"),
        "man -l {page}: {}",
        rendered.stderr
    );
    rendered.stdout
}

#[test]
fn the_man_pages_render_and_list_every_setting_the_docs_list() {
    let deb = package();
    let extracted = TempDir::new("deb-x").expect("a directory");
    let unpacked = run(
        Command::new("dpkg-deb")
            .arg("-x")
            .arg(&deb)
            .arg(extracted.path()),
        COMMAND_TIMEOUT,
    )
    .expect("dpkg-deb runs");
    assert!(unpacked.success(), "{}", unpacked.stderr);

    let ini = render(extracted.path(), "usr/share/man/man5/pgtier.ini.5.gz");
    let command = render(extracted.path(), "usr/share/man/man1/pgtier.1.gz");
    let words = |text: &str| -> std::collections::BTreeSet<String> {
        text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-'))
            .map(str::to_string)
            .collect()
    };
    let (ini_words, command_words) = (words(&ini), words(&command));
    let rows = documented_rows();
    let keys: Vec<&str> = rows
        .iter()
        .filter(|(header, _)| header == "key")
        .map(|(_, key)| key.as_str())
        .collect();
    assert!(
        keys.len() > 100,
        "docs/config.md's settings: {}",
        keys.len()
    );
    for key in &keys {
        assert!(
            ini_words.contains(*key),
            "pgtier.ini(5) does not list `{key}`"
        );
    }
    for (_, switch) in rows.iter().filter(|(header, _)| header == "switch") {
        for spelling in switch.split("`, `") {
            let spelling = spelling.split([' ', '=']).next().unwrap_or_default();
            assert!(
                command_words.contains(spelling),
                "pgtier(1) does not list `{spelling}`"
            );
        }
    }
    for signal in [
        "SIGHUP", "SIGINT", "SIGTERM", "SIGQUIT", "SIGUSR1", "SIGUSR2",
    ] {
        assert!(command_words.contains(signal), "pgtier(1) lacks {signal}");
    }
    // Shipped with the docs: the operator's dashboard and rules, copyright, changelog.
    for file in [
        "usr/share/doc/pgtier/ops/pgtier-dashboard.json",
        "usr/share/doc/pgtier/ops/pgtier-alerts.yml",
        "usr/share/doc/pgtier/copyright",
        "usr/share/doc/pgtier/changelog.Debian.gz",
        "usr/share/doc/pgtier/config.md",
        "usr/share/doc/pgtier/operations.md",
    ] {
        assert!(extracted.path().join(file).is_file(), "{file} is shipped");
    }
}
