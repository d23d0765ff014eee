//! The fault-injection harness of issue 26 (`pgtier-faults`, driven by bench/faults.sh):
//! pgtier, its clients and each PostgreSQL node in their own network namespaces, faults
//! injected under load (nftables drops and loss, a delaying relay, a packet-level netem
//! over NFQUEUE for jitter and reordering, SIGSTOP, SIGKILL, switchover and failover), a
//! write ledger checked on the primary after each scenario, and the table of
//! docs/reliability.md. Needs root, `ip`, `nft` and `iptables`.

pub mod cluster;
pub mod fault;
pub mod fragments;
pub mod ledger;
pub mod load;
pub mod measure;
pub mod netem;
pub mod netem_cli;
pub mod netns;
pub mod nfqueue;
pub mod nodes;
pub mod proxy;
pub mod relay;
pub mod report;
pub mod scenarios;
pub mod session;
