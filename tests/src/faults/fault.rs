//! The faults the harness injects: their names on the command line, their rows in
//! docs/reliability.md, and what each one hits.

/// One fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    ReplicaPartition,
    PrimaryPartition,
    Delay,
    Loss,
    HungReplica,
    KilledReplica,
    Switchover,
    Failover,
}

impl Fault {
    pub const ALL: [Fault; 8] = [
        Fault::ReplicaPartition,
        Fault::PrimaryPartition,
        Fault::Delay,
        Fault::Loss,
        Fault::HungReplica,
        Fault::KilledReplica,
        Fault::Switchover,
        Fault::Failover,
    ];

    /// The name on the command line (`--only`).
    pub fn name(self) -> &'static str {
        match self {
            Fault::ReplicaPartition => "replica-partition",
            Fault::PrimaryPartition => "primary-partition",
            Fault::Delay => "delay-200ms",
            Fault::Loss => "loss-5pct",
            Fault::HungReplica => "hung-replica",
            Fault::KilledReplica => "killed-replica",
            Fault::Switchover => "switchover",
            Fault::Failover => "failover",
        }
    }

    /// The row title in docs/reliability.md.
    pub fn title(self) -> &'static str {
        match self {
            Fault::ReplicaPartition => "replica partition (nft drop, both ways)",
            Fault::PrimaryPartition => "primary partition (nft drop, both ways)",
            Fault::Delay => "200 ms delay to one replica (relay)",
            Fault::Loss => "5 % loss on every server link (nft numgen)",
            Fault::HungReplica => "hung replica (SIGSTOP)",
            Fault::KilledReplica => "killed replica (SIGKILL, restarted)",
            Fault::Switchover => "primary switchover (stop -m fast, promote)",
            Fault::Failover => "primary failover (SIGKILL, promote)",
        }
    }

    pub fn from_name(name: &str) -> Option<Fault> {
        Fault::ALL.into_iter().find(|fault| fault.name() == name)
    }

    /// Whether the scenario changes which node is the primary (a fresh cluster after it).
    pub fn promotes(self) -> bool {
        matches!(self, Fault::Switchover | Fault::Failover)
    }

    /// The replica the fault hits, if it hits one.
    pub fn replica(self) -> Option<usize> {
        match self {
            Fault::ReplicaPartition | Fault::Delay | Fault::HungReplica | Fault::KilledReplica => {
                Some(1)
            }
            _ => None,
        }
    }
}
