//! pgtier's replica control plane: the replica routers, the control shard that applies role
//! changes and health transitions, the health probes and LSN pollers, and [`routing`], the
//! engine's `Routing` service that every data shard calls over them.
//!
//! - [`router`]: one [`ReplicaRouter`] per replica set, shared by every shard. Admission is
//!   decided on the calling shard from a lock-free snapshot and shared counters; only
//!   decisions that change a role go to the control shard.
//! - [`router_state`]: what a router's threads and leases share beneath it (addresses,
//!   policy, snapshot, counters, epochs); [`lease`] holds it, the router is built on it.
//! - [`authority`]: the control shard's side of a router, the one place role changes and
//!   health transitions are applied, logged and published.
//! - [`health`], [`probe`], [`pg_link`]: replica health state machine, probes, and the
//!   blocking connection they (and the LSN poller) use.
//! - [`read_router`], [`read_ticket`], [`lsn`], [`lsn_poll`]: the read side of a reader entry
//!   (`primary` plus replicas): per-transaction replica choice, in-flight reads, the WAL
//!   positions that decide read-your-writes and the lag cap, and the thread that polls them.
//! - [`functions`], [`function_lookup`]: what the entry's primary says of the functions its
//!   reads call (looked up by the same thread), for the read-only classifier.
//! - [`fleet`]: several hosts sharing one PLB view through a PostgreSQL store.
//! - [`plane`]: the control thread, the prober threads, routers built from the config.
//! - `pgtier_engine::class`: the class of a session at login.
//! - [`events`], [`counters`], [`snapshot`], [`route_table`], [`lease`], [`mailbox`]: the
//!   vocabulary.
//! - [`routing`]: the engine's `Routing` service on each data shard ([`ShardRouting`]) over
//!   the routers every shard shares ([`SharedRouting`]).
//!
//! How the proxy uses it:
//! - At start (and on reload): `RouterMap::from_config(&config, default_probe_login)` (or
//!   `old_map.reload(..)`), then `ControlPlane::start(map.routers(),
//!   ControlOptions::from_settings(&config.pgtier))`, then
//!   `plane.start_lsn_pollers(map.readers())`; keep the plane alive, drop it at exit.
//! - Per shard: one `ReplyMailbox::new(wake)` whose `wake` rings the shard (eventfd write);
//!   after each wake, drain it with `poll_reply()` and hand each reply to the session whose
//!   `request_id` it carries (drop it if that client is gone: the lease releases its count).
//! - Login: `session_class(..)`, `map.router(database)`, then
//!   `router.admit_session(class, &mailbox, request_id)`: `Placed(lease)` (connect to
//!   `lease.replica_addr()`), `Pending` (wait for the reply), or `Refused(error)` (answer
//!   `error.sqlstate()`).
//! - Close: drop the [`SessionLease`].
//! - Between transactions: if `lease.router_state().failure_epoch()` moved since the session
//!   last looked and `router.is_down(lease.replica())`, call
//!   `router.repin(lease, &mailbox, request_id)` on the router that granted the lease.
//! - A server connection to a replica refused or reset:
//!   `router.report_server_failure(replica, cause)`.

pub mod admission_error;
pub mod authority;
pub mod counters;
pub mod events;
pub mod fleet;
pub mod function_lookup;
pub mod functions;
pub mod health;
pub mod host_primary;
pub mod lease;
pub mod lsn;
pub mod lsn_poll;
pub mod mailbox;
pub mod pg_link;
pub mod plane;
pub mod primary_election;
pub mod probe;
pub mod read_router;
pub mod read_ticket;
pub mod remote_load;
pub mod route_table;
pub mod router;
pub mod router_config;
pub mod router_state;
pub mod router_stats;
pub mod routing;
pub mod snapshot;

#[cfg(test)]
mod fleet_tests;
#[cfg(test)]
mod read_tests;
#[cfg(test)]
mod routing_tests;
#[cfg(any(test, feature = "testing"))]
pub mod test_support;
#[cfg(test)]
mod tests;

pub use admission_error::AdmissionError;
pub use authority::ReplicaHealth;
pub use events::{ControlEvent, EventKind, HealthTransition};
pub use fleet::{FleetConfig, FleetCounters, FleetStatus, FleetView, MemberView};
pub use health::{HealthConfig, HealthState, LastProbe, ProbeOutcome};
pub use host_primary::{ElectedHost, HostPrimary};
pub use lease::SessionLease;
pub use mailbox::{AdmissionReply, ReplyMailbox, ServerFailureCause};
pub use pgtier_engine::class::{ClassRequestError, session_class};
pub use plane::{ControlOptions, ControlPlane, RouterMap, default_probe_login};
pub use probe::ProbeLogin;
pub use read_router::{ElectedPrimary, ReadAsk, ReadLocal, ReadPlacement, ReadRouter};
pub use read_ticket::InFlightRead;
pub use route_table::{RouteRole, RouteTable};
pub use router::{Admission, ReplicaRouter, StepReport};
pub use router_config::{RouterConfig, RouterError};
pub use router_stats::RouterStats;
pub use routing::{ShardRouting, SharedRouting};
pub use snapshot::RoutingSnapshot;
