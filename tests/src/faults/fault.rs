//! The faults the harness injects: their names on the command line, their rows in
//! docs/reliability.md, and what each one hits.

use std::time::Duration;

use super::netem::NetemSpec;

/// One fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    ReplicaPartition,
    PrimaryPartition,
    Delay,
    /// The same 200 ms, per packet through the NFQUEUE netem rather than the relay.
    PacketDelay,
    Jitter,
    Reordering,
    Loss,
    HungReplica,
    KilledReplica,
    Switchover,
    Failover,
}

impl Fault {
    pub const ALL: [Fault; 11] = [
        Fault::ReplicaPartition,
        Fault::PrimaryPartition,
        Fault::Delay,
        Fault::PacketDelay,
        Fault::Jitter,
        Fault::Reordering,
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
            Fault::PacketDelay => "delay-200ms-packets",
            Fault::Jitter => "jitter",
            Fault::Reordering => "reordering",
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
            Fault::PacketDelay => "200 ms delay to one replica (per packet, NFQUEUE)",
            Fault::Jitter => "50 ± 40 ms jitter to one replica (per packet, reorders; NFQUEUE)",
            Fault::Reordering => "reordering: 10 % of one replica's packets 20 ms late (NFQUEUE)",
            Fault::Loss => "5 % loss on every server link (nft numgen)",
            Fault::HungReplica => "hung replica (SIGSTOP)",
            Fault::KilledReplica => "killed replica (SIGKILL, restarted)",
            Fault::Switchover => "primary switchover (stop -m fast, promote)",
            Fault::Failover => "primary failover (SIGKILL, promote)",
        }
    }

    /// What the packet-level netem does to the replica's packets, each way, for the faults
    /// it injects.
    pub fn netem(self) -> Option<NetemSpec> {
        match self {
            Fault::PacketDelay => Some(NetemSpec::jitter(
                Duration::from_millis(200),
                Duration::ZERO,
            )),
            Fault::Jitter => Some(NetemSpec::jitter(
                Duration::from_millis(50),
                Duration::from_millis(40),
            )),
            Fault::Reordering => Some(NetemSpec::reorder(10, Duration::from_millis(20))),
            _ => None,
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
            Fault::ReplicaPartition
            | Fault::Delay
            | Fault::PacketDelay
            | Fault::Jitter
            | Fault::Reordering
            | Fault::HungReplica
            | Fault::KilledReplica => Some(1),
            _ => None,
        }
    }
}
