//! pgtier-bench: the load generator, benchmark helpers and the PLB simulator.
//!
//! The load generator (`load`) runs the same kind of workload live against PostgreSQL
//! (through pgtier), with the whole workload planned from a seed.
//!
//! The simulator (`sim`) is a deterministic discrete-event model of a read-only replica
//! cluster that drives the very same routing code as the proxy (`pgtier_policy`), so the
//! paper's figures can be reproduced without a cluster.
pub mod load;
pub mod sim;
