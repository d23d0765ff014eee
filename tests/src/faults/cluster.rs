//! The lab's PostgreSQL cluster: a primary with the ledger and accounts tables and two
//! caught-up streaming replicas, which node is the primary now, and the promotion an
//! operator would do (the standby that has received the most WAL).

use std::collections::HashMap;
use std::io;
use std::path::Path;
use std::time::Duration;

use super::ledger;
use super::netns::{Host, Lab};
use super::nodes::Node;

/// The lab's PostgreSQL cluster.
pub struct Cluster {
    nodes: Vec<Node>,
    /// Index in `nodes` of the current primary.
    primary: usize,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("primary", &self.primary)
            .finish()
    }
}

impl Cluster {
    /// A primary with the ledger and accounts tables, and two caught-up replicas.
    pub fn start(lab: &Lab, root: &Path) -> io::Result<Cluster> {
        let primary = Node::start_primary(lab, Host::Node(0), root)?;
        primary.psql(&format!(
            "CREATE TABLE ledger(id bigint NOT NULL, writer int NOT NULL, \
               at timestamptz NOT NULL DEFAULT clock_timestamp()); \
             CREATE INDEX ledger_id ON ledger(id); \
             CREATE TABLE accounts(aid int PRIMARY KEY, abalance int NOT NULL DEFAULT 0); \
             INSERT INTO accounts(aid) SELECT g FROM generate_series(1, {}) g",
            super::load::ACCOUNTS
        ))?;
        primary.psql("VACUUM ANALYZE accounts")?;
        let mut nodes = vec![primary];
        for n in 1..=2 {
            let replica = Node::start_replica(lab, Host::Node(n), &nodes[0], root)?;
            nodes.push(replica);
        }
        let cluster = Cluster { nodes, primary: 0 };
        cluster.caught_up(Duration::from_secs(60))?;
        cluster.nodes[0].require_one_standby()?;
        Ok(cluster)
    }

    pub fn caught_up(&self, timeout: Duration) -> io::Result<()> {
        let primary = &self.nodes[self.primary];
        for (index, node) in self.nodes.iter().enumerate() {
            if index != self.primary {
                node.wait_caught_up(primary, timeout)?;
            }
        }
        Ok(())
    }

    /// The index of the current primary (0 until a promotion).
    pub fn primary_index(&self) -> usize {
        self.primary
    }

    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    pub fn primary(&self) -> &Node {
        &self.nodes[self.primary]
    }

    /// The id counts of the ledger table on the primary, for ids in `range`.
    pub fn ledger_counts(&self, low: i64, high: i64) -> io::Result<HashMap<i64, u64>> {
        let text = self.primary().psql(&format!(
            "SELECT id, count(*) FROM ledger WHERE id > {low} AND id <= {high} GROUP BY id"
        ))?;
        ledger::parse_counts(&text).map_err(io::Error::other)
    }

    /// Promotes the standby that has received the most WAL, as an operator would.
    pub fn promote_most_advanced(&mut self) -> io::Result<usize> {
        let mut best: Option<(f64, usize)> = None;
        for (index, node) in self.nodes.iter().enumerate() {
            if index == self.primary {
                continue;
            }
            let Ok(position) = node.wal_position() else {
                continue;
            };
            let position: f64 = position.parse().unwrap_or(0.0);
            if best.is_none_or(|(top, _)| position > top) {
                best = Some((position, index));
            }
        }
        let (_, index) = best.ok_or_else(|| io::Error::other("no standby to promote"))?;
        self.nodes[index].promote()?;
        self.primary = index;
        Ok(index)
    }
}
