//! pgtier-bench: the load generator, benchmark helpers and the PLB simulator.
//!
//! The simulator (`sim`) is a deterministic discrete-event model of a read-only replica
//! cluster that drives the very same routing code as the proxy (`pgtier_policy`), so the
//! paper's figures can be reproduced without a cluster.
pub mod sim;
