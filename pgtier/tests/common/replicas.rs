//! A primary with five streaming replicas and a pgtier routing over them: the setting of the
//! replica-routing tests (`routing_*.rs`).

use std::time::{Duration, Instant};

use pgtier::ProxyHandle;
use pgtier_core::localpg::{HbaAuth, LocalPg, PgOptions};

use super::raw::RawClient;

pub struct Cluster {
    // Replicas first so they stop before their primary when dropped.
    pub replicas: Vec<LocalPg>,
    pub primary: LocalPg,
}

impl Cluster {
    pub fn start() -> Cluster {
        let started = Instant::now();
        let options = PgOptions {
            auth: HbaAuth::Trust,
            ..PgOptions::default()
        };
        let primary = LocalPg::start_primary(&options).expect("primary");
        for user in ["alice", "bob", "carol"] {
            primary
                .create_user(user, "unused-with-trust")
                .expect("role");
        }
        let replicas = (0..5)
            .map(|_| LocalPg::start_replica(&primary).expect("replica"))
            .collect();
        println!("1 primary + 5 replicas up in {:?}", started.elapsed());
        Cluster { replicas, primary }
    }

    pub fn addrs(&self) -> Vec<String> {
        self.replicas
            .iter()
            .map(|pg| format!("\"127.0.0.1:{}\"", pg.port()))
            .collect()
    }

    /// Index of the replica listening on `port`.
    pub fn index_of(&self, port: &str) -> usize {
        self.replicas
            .iter()
            .position(|pg| pg.port().to_string() == port)
            .unwrap_or_else(|| panic!("port {port} is no replica"))
    }
}

/// `[databases.NAME]` over the cluster with the paper's PLB layout (premium = replicas 0,1;
/// freemium = 2,3; 4 Mixed) and `theta` for both classes.
pub fn plb_entry(cluster: &Cluster, name: &str, class: &str, theta: u32) -> String {
    let addrs = cluster.addrs();
    format!(
        r#"
[databases.{name}]
dbname = "postgres"
user = "postgres"
class = "{class}"
replicas = [{all}]
routing = "plb"
[databases.{name}.plb]
premium = [{p0}, {p1}]
freemium = [{f0}, {f1}]
theta_premium = {theta}
theta_freemium = {theta}
alpha_premium = 0.6
alpha_freemium = 0.8
freemium_floor = 1
premium_target = 2
freemium_target = 2
"#,
        all = addrs.join(", "),
        p0 = addrs[0],
        p1 = addrs[1],
        f0 = addrs[2],
        f1 = addrs[3],
    )
}

/// pgtier over the cluster: `analytics` (freemium by default), its alias `analytics_premium`,
/// users `alice` (premium) and `bob` (freemium), admin user `admin`.
pub fn config(cluster: &Cluster, mode: &str, theta: u32, extra: &str) -> String {
    let port = pgtier_core::localpg::free_port().expect("free port");
    format!(
        r#"
[pgtier]
listen_addr = "127.0.0.1"
listen_port = {port}
workers = 2
auth_type = "trust"
pool_mode = "{mode}"
default_pool_size = 20
max_client_conn = 500
admin_users = ["admin"]
{extra}
{analytics}
{alias}
[users.alice]
class = "premium"
[users.bob]
class = "freemium"
"#,
        analytics = plb_entry(cluster, "analytics", "freemium", theta),
        alias = plb_entry(cluster, "analytics_premium", "premium", theta),
    )
}

/// A session through pgtier that stays open; `replica` is where its queries run.
pub struct Session {
    pub client: RawClient,
    pub replica: usize,
}

pub fn open(
    proxy: &ProxyHandle,
    cluster: &Cluster,
    user: &str,
    db: &str,
    extra: &[(&str, &str)],
) -> Result<Session, (String, String)> {
    let mut client = RawClient::connect(proxy.local_addr().port(), user, db, extra)?;
    let port = client.query("SELECT inet_server_port()")?;
    let replica = cluster.index_of(&port[0]);
    Ok(Session { client, replica })
}

/// `SHOW <what>` on the admin console, one `|`-separated line per row.
pub fn admin(proxy: &ProxyHandle, what: &str) -> Vec<String> {
    let (ok, out, err) = super::psql(
        proxy.local_addr().port(),
        "admin",
        "pgtier",
        &format!("SHOW {what}"),
        None,
    );
    assert!(ok, "SHOW {what} failed: {err}");
    out.lines().map(str::to_string).collect()
}

/// Roles and session counts of `SHOW REPLICAS`, by replica index: (role, premium, freemium,
/// state).
pub fn layout(proxy: &ProxyHandle, cluster: &Cluster) -> Vec<(String, u32, u32, String)> {
    let mut rows = vec![(String::new(), 0, 0, String::new()); cluster.replicas.len()];
    for line in admin(proxy, "REPLICAS") {
        let cols: Vec<&str> = line.split('|').collect();
        let port = cols[1].rsplit(':').next().unwrap_or_default();
        let index = cluster.index_of(port);
        rows[index] = (
            cols[2].to_string(),
            cols[4].parse().expect("premium sessions"),
            cols[5].parse().expect("freemium sessions"),
            cols[6].to_string(),
        );
    }
    rows
}

pub fn roles(proxy: &ProxyHandle, cluster: &Cluster) -> Vec<String> {
    layout(proxy, cluster).into_iter().map(|r| r.0).collect()
}

/// Polls `condition` every 5 ms; panics after `limit`. Returns how long it took.
pub fn wait_for(what: &str, limit: Duration, mut condition: impl FnMut() -> bool) -> Duration {
    let started = Instant::now();
    while !condition() {
        assert!(
            started.elapsed() < limit,
            "{what} did not happen within {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    started.elapsed()
}

/// The paper's layout by replica index.
pub const PAPER_ROLES: [&str; 5] = ["premium", "premium", "freemium", "freemium", "mixed"];

/// After every session has closed: waits until no replica counts a session and the roles are
/// `expected` (every borrow returned), then stops the proxy.
pub fn expect_released_and_stop(
    proxy: ProxyHandle,
    cluster: &Cluster,
    limit: Duration,
    expected: [&str; 5],
) {
    wait_for("every session released", limit, || {
        layout(&proxy, cluster)
            .iter()
            .all(|row| row.1 == 0 && row.2 == 0)
    });
    wait_for("every borrow returned", limit, || {
        roles(&proxy, cluster) == expected
    });
    proxy.shutdown(pgtier::ShutdownMode::Immediate);
    proxy.join().expect("clean shutdown");
}
