//! A fleet: several pgtier hosts in front of the same replicas share one load view and one
//! PLB role table, through a PostgreSQL they already have (docs/fleet.md).
//!
//! The pure rules are tested alone: [`report`] (what a host reports, the sum the leader
//! decides on), [`roles`] (the published tables as text), [`leader`] (the next table, by the
//! same PLB code a single proxy runs), [`mode`] (fleet or local mode, versions, budget
//! shares). The I/O is [`store`] (the SQL over the control plane's own PostgreSQL link) and
//! [`run`] (the fleet thread); [`status`] is what the console and the metrics read.

pub mod leader;
pub mod mode;
pub mod report;
pub mod roles;
pub mod run;
pub mod status;
pub mod store;

pub use run::FleetConfig;
pub use status::{FleetCounters, FleetStatus, FleetView, MemberView};
