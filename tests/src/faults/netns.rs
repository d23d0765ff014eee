//! The fault harness's network: one namespace per host (pgtier, clients, each PostgreSQL
//! node, the delaying relay), each joined by a veth pair to a bridge in a router namespace,
//! on one /24. Traffic never leaves these namespaces, so faults injected with nftables in a
//! host's namespace touch only that host's links.

use std::io;
use std::process::{Command, Output, Stdio};

/// The hosts of the lab network, by role.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Host {
    Clients,
    Pgtier,
    Relay,
    /// PostgreSQL node `n` (0 = the first primary).
    Node(u8),
}

impl Host {
    fn short(self) -> String {
        match self {
            Host::Clients => "cl".into(),
            Host::Pgtier => "px".into(),
            Host::Relay => "dly".into(),
            Host::Node(n) => format!("pg{n}"),
        }
    }

    fn octet(self) -> u8 {
        match self {
            Host::Clients => 10,
            Host::Pgtier => 11,
            Host::Relay => 30,
            Host::Node(n) => 20 + n,
        }
    }
}

/// The lab: its namespaces exist from `create` until `Drop`.
#[derive(Debug)]
pub struct Lab {
    prefix: String,
    /// The first three octets of the lab's /24 ("10.26.10").
    subnet: String,
    hosts: Vec<Host>,
}

impl Lab {
    /// Creates the router namespace with its bridge and one namespace per host. Leftovers of
    /// an earlier run with the same prefix (a killed harness) are removed first.
    pub fn create(prefix: &str, subnet: &str, hosts: &[Host]) -> io::Result<Lab> {
        let lab = Lab {
            prefix: prefix.to_string(),
            subnet: subnet.to_string(),
            hosts: hosts.to_vec(),
        };
        lab.remove_namespaces();
        let router = lab.router_ns();
        ip(&["netns", "add", &router])?;
        ip(&["-n", &router, "link", "set", "lo", "up"])?;
        ip(&["-n", &router, "link", "add", "br0", "type", "bridge"])?;
        ip(&["-n", &router, "link", "set", "br0", "up"])?;
        for &host in hosts {
            lab.add_host(host)?;
        }
        Ok(lab)
    }

    fn add_host(&self, host: Host) -> io::Result<()> {
        let ns = self.ns(host);
        let router = self.router_ns();
        let port = format!("v-{}", host.short());
        ip(&["netns", "add", &ns])?;
        ip(&["-n", &ns, "link", "set", "lo", "up"])?;
        ip(&[
            "-n", &router, "link", "add", &port, "type", "veth", "peer", "name", "eth0", "netns",
            &ns,
        ])?;
        ip(&["-n", &router, "link", "set", &port, "master", "br0"])?;
        ip(&["-n", &router, "link", "set", &port, "up"])?;
        let cidr = format!("{}/24", self.addr(host));
        ip(&["-n", &ns, "addr", "add", &cidr, "dev", "eth0"])?;
        ip(&["-n", &ns, "link", "set", "eth0", "up"])
    }

    /// The namespace name of `host` (`faults-pg1`).
    pub fn ns(&self, host: Host) -> String {
        format!("{}-{}", self.prefix, host.short())
    }

    fn router_ns(&self) -> String {
        format!("{}-r", self.prefix)
    }

    /// The IPv4 address of `host`.
    pub fn addr(&self, host: Host) -> String {
        format!("{}.{}", self.subnet, host.octet())
    }

    /// The lab's subnet in CIDR form, for pg_hba.conf.
    pub fn cidr(&self) -> String {
        format!("{}.0/24", self.subnet)
    }

    /// A command that runs `program` inside `host`'s namespace.
    pub fn command(&self, host: Host, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut command = Command::new("ip");
        command.args(["netns", "exec", &self.ns(host)]).arg(program);
        command
    }

    /// Loads an nftables ruleset (the `faults` table) into `host`'s namespace, replacing the
    /// one there.
    pub fn nft_load(&self, host: Host, ruleset: &str) -> io::Result<()> {
        self.nft_flush(host)?;
        let mut child = self
            .command(host, "nft")
            .args(["-f", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()?;
        if let Some(mut stdin) = child.stdin.take() {
            use std::io::Write;
            stdin.write_all(ruleset.as_bytes())?;
        }
        let out = child.wait_with_output()?;
        ensure(&out, "nft -f")
    }

    /// Removes the `faults` table from `host`'s namespace (no-op when absent).
    pub fn nft_flush(&self, host: Host) -> io::Result<()> {
        let out = self
            .command(host, "nft")
            .args(["list", "tables"])
            .stdin(Stdio::null())
            .output()?;
        ensure(&out, "nft list tables")?;
        if String::from_utf8_lossy(&out.stdout).contains("inet faults") {
            let out = self
                .command(host, "nft")
                .args(["delete", "table", "inet", "faults"])
                .stdin(Stdio::null())
                .output()?;
            ensure(&out, "nft delete table")?;
        }
        Ok(())
    }

    /// Moves the calling thread into `host`'s namespace: every socket it (and any thread it
    /// spawns afterwards) creates lives there.
    pub fn enter(&self, host: Host) -> io::Result<()> {
        enter_named(&self.ns(host))
    }

    fn remove_namespaces(&self) {
        remove_lab(&self.prefix, &self.hosts);
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        self.remove_namespaces();
    }
}

/// Ends every process in the lab's namespaces and deletes them; for `Drop` and for a
/// watchdog that must clean up without the `Lab` at hand.
pub fn remove_lab(prefix: &str, hosts: &[Host]) {
    {
        for &host in hosts {
            let ns = format!("{prefix}-{}", host.short());
            // Whatever still runs in a lab namespace was started by this harness (or by an
            // earlier run of it that was killed): end it, or the namespace outlives its name.
            for pid in namespace_pids(&ns) {
                let _ = crate::process::send_signal(pid, libc::SIGCONT);
                let _ = crate::process::send_signal(pid, libc::SIGKILL);
            }
            let _ = ip(&["netns", "del", &ns]);
        }
        let _ = ip(&["netns", "del", &format!("{prefix}-r")]);
    }
}

/// The nftables ruleset of a silent partition: everything on the host's link is dropped
/// both ways (no reset, as when a cable or a switch port dies); loopback still works.
pub fn partition_ruleset() -> String {
    "table inet faults {\n\
       chain input { type filter hook input priority 0; policy accept; iifname \"eth0\" drop; }\n\
       chain output { type filter hook output priority 0; policy accept; oifname \"eth0\" drop; }\n\
     }\n"
    .to_string()
}

/// The ruleset of random loss: `percent` % of the packets on the host's link are dropped,
/// each way, independently.
pub fn loss_ruleset(percent: u32) -> String {
    format!(
        "table inet faults {{\n\
           chain input {{ type filter hook input priority 0; policy accept; \
             iifname \"eth0\" numgen random mod 100 < {percent} drop; }}\n\
           chain output {{ type filter hook output priority 0; policy accept; \
             oifname \"eth0\" numgen random mod 100 < {percent} drop; }}\n\
         }}\n"
    )
}

/// Moves the calling thread into the namespace called `name`.
pub fn enter_named(name: &str) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let file = std::fs::File::open(format!("/run/netns/{name}"))?;
    // SAFETY: setns takes a valid open descriptor (the file lives to the end of this
    // function) and a namespace type; it changes only the calling thread's namespace.
    let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn namespace_pids(ns: &str) -> Vec<u32> {
    let Ok(out) = Command::new("ip")
        .args(["netns", "pids", ns])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
    else {
        return Vec::new();
    };
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .filter_map(|pid| pid.parse().ok())
        .collect()
}

fn ip(args: &[&str]) -> io::Result<()> {
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()?;
    ensure(&out, &format!("ip {}", args.join(" ")))
}

fn ensure(out: &Output, what: &str) -> io::Result<()> {
    if out.status.success() {
        return Ok(());
    }
    Err(io::Error::other(format!(
        "{what} failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr).trim()
    )))
}
