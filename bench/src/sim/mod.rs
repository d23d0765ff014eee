//! A discrete-event simulator of PLB and its baselines on a replica cluster (issue 4 item 6,
//! issue 5 item 5), driving the same `pgtier_policy` code as the proxy.
//!
//! Layers, bottom up: `rng` (deterministic randomness), `server` (processor sharing),
//! `pool` (the proxy's bounded server pool per replica and its waiters, in
//! `pgtier_pool::WaitOrder`), `workload` (what clients do), `router` (the engine's view of a
//! strategy), `engine` (the event loop), `strategies` (adapters onto `pgtier_policy`),
//! `tiered` (the adapter onto its tiered policy), `tiers` (the three-class experiment),
//! `waiting` (PLB behind a bounded pool), `stats` and `scenario`
//! (summaries over seeds, the paper's grid and failure scenarios), `report` (CSV), `plot`
//! (PNG), `figures` (which plots the CLI draws), `fleet` (several proxies in front of the same
//! replicas, independent or sharing one view).

pub mod class;
pub mod engine;
pub mod figures;
pub mod fleet;
pub mod plot;
pub mod pool;
pub mod report;
pub mod rng;
pub mod router;
pub mod scenario;
pub mod server;
pub mod stats;
pub mod strategies;
pub mod summary;
pub mod tiered;
pub mod tiers;
pub mod waiting;
pub mod workload;
