//! PgBouncer's host lists (`host=a,b` in a `[databases]` entry) run against a real
//! PostgreSQL: equivalent hosts, each new server connection taking one as
//! `load_balance_hosts` says (round-robin, or stay until a connection fails), names and
//! repeats allowed, and clients waiting through a failed host instead of getting its error.
//! The hosts here are the server's TCP address, its Unix socket directory (which PostgreSQL
//! tells apart: `inet_server_addr()` is NULL over a socket), a loopback address nobody
//! listens on, and a name that does not resolve.

use std::path::{Path, PathBuf};

use pgtier_core::localpg::LocalPg;
use pgtier_tests::fixtures::server;
use pgtier_tests::{Pgtier, free_port};

/// A pgbouncer.ini in session mode whose `hosts` entry has `host_list`.
fn ini(dir: &Path, listen_port: u16, host_list: &str, pg: &LocalPg) -> String {
    format!(
        "\
[databases]
hosts = host={host_list} port={port} dbname=postgres

[pgbouncer]
logfile = {dir}/pgbouncer.log
pidfile = {dir}/pgbouncer.pid
listen_addr = 127.0.0.1
listen_port = {listen_port}
unix_socket_dir = {dir}
auth_type = trust
auth_file = userlist.txt
admin_users = postgres
pool_mode = session
default_pool_size = 4
server_login_retry = 0
",
        dir = dir.display(),
        port = pg.port(),
    )
}

fn start(pg: &LocalPg, host_list: &str) -> Pgtier {
    let listen_port = free_port().expect("port");
    let started = Pgtier::start_file(listen_port, |dir| {
        std::fs::write(dir.join("userlist.txt"), "\"postgres\" \"\"\n")?;
        let path: PathBuf = dir.join("pgbouncer.ini");
        std::fs::write(&path, ini(dir, listen_port, host_list, pg))?;
        Ok(path)
    });
    match started {
        Ok(proxy) => proxy,
        Err(error) => panic!("starting pgtier with host={host_list}: {error}"),
    }
}

/// A session through pgtier, held open so that the next one needs a new server.
fn session(proxy: &Pgtier) -> postgres::Client {
    match postgres::Client::connect(&proxy.conninfo("hosts", "postgres"), postgres::NoTls) {
        Ok(client) => client,
        Err(error) => panic!("connecting through pgtier: {error}"),
    }
}

/// How the session's server was reached: "tcp" or "socket".
fn reached_by(client: &mut postgres::Client) -> &'static str {
    let row = client
        .query_one("SELECT inet_server_addr()::text", &[])
        .expect("query");
    match row.get::<_, Option<String>>(0) {
        Some(_) => "tcp",
        None => "socket",
    }
}

/// How each of `count` sessions opened one after the other, all held open (so each needs
/// a server of its own), reached its server.
fn reached_by_held_sessions(proxy: &Pgtier, count: usize) -> Vec<&'static str> {
    let mut sessions: Vec<postgres::Client> = (0..count).map(|_| session(proxy)).collect();
    sessions.iter_mut().map(reached_by).collect()
}

#[test]
fn round_robin_takes_the_next_host_for_every_new_server() {
    let pg = server();
    let socket_dir = pg.data_dir().display().to_string();
    // The turn is the pool's, shared by every worker; one worker keeps the sessions' order
    // of arrival, and so of their picks, the order below.
    let listen_port = free_port().expect("port");
    let started = Pgtier::start_file(listen_port, |dir| {
        std::fs::write(dir.join("userlist.txt"), "\"postgres\" \"\"\n")?;
        let path = dir.join("pgtier.toml");
        let toml = format!(
            "[pgtier]\nlisten_addr = \"127.0.0.1\"\nlisten_port = {listen_port}\nworkers = 1\n\
             auth_type = \"trust\"\nauth_file = \"{userlist}\"\npool_mode = \"session\"\n\n\
             [databases.hosts]\nhost = \"127.0.0.1,{socket_dir}\"\nport = {port}\n\
             dbname = \"postgres\"\nload_balance_hosts = \"round-robin\"\n",
            userlist = dir.join("userlist.txt").display(),
            port = pg.port(),
        );
        std::fs::write(&path, toml)?;
        Ok(path)
    });
    let proxy = match started {
        Ok(proxy) => proxy,
        Err(error) => panic!("starting pgtier: {error}"),
    };
    assert_eq!(
        reached_by_held_sessions(&proxy, 3),
        ["tcp", "socket", "tcp"]
    );
}

#[test]
fn disable_stays_on_a_host_and_moves_on_only_after_a_failure() {
    let pg = server();
    let socket_dir = pg.data_dir().display().to_string();
    // Nothing listens on 127.0.0.3: the first server's connect is refused, its client waits
    // for the retry, which goes to the socket, where every later server goes too.
    let proxy = start(
        &pg,
        &format!("127.0.0.3,{socket_dir},127.0.0.1 load_balance_hosts=disable"),
    );
    assert_eq!(
        reached_by_held_sessions(&proxy, 3),
        ["socket", "socket", "socket"]
    );
}

#[test]
fn a_name_that_does_not_resolve_is_passed_over_and_repeats_are_allowed() {
    let pg = server();
    let proxy = start(
        &pg,
        "pgtier-no-such-host.invalid,127.0.0.1,127.0.0.1 load_balance_hosts=disable",
    );
    assert_eq!(reached_by_held_sessions(&proxy, 2), ["tcp", "tcp"]);
}
