//! PLB over ranked service classes, the crate's one implementation of the paper's
//! priority-aware balancing: two ranks are the paper's premium and freemium ([`crate::Plb`]
//! is that configuration), more ranks are the generalisation 000 §VIII names as future work,
//! with the role table generalised to one pool per class plus Mixed.
//!
//! # Generalisation
//!
//! Classes are ranks ([`Tier`]; 0 is the most important). Every two-class rule is read as a
//! rule between an *outranking* and an *outranked* class, so a middle tier follows the
//! premium rules towards the tiers below it and the freemium rules towards the tiers above it:
//!
//! | paper (two classes) | tiered |
//! |---|---|
//! | headroom `load_c(r) < θ_c`, least loaded | same, per tier |
//! | premium borrows Mixed, then Freemium above κ_F, below `m_P` | a tier borrows Mixed, then the pools of the tiers it outranks, least important first, each above its κ_t, below its own best load |
//! | freemium borrows a Premium-empty Premium replica while `|R_P| − 1 ≥ K_P` | a tier borrows from the pools of tiers that outrank it, nearest first, each within its K_t, only replicas with no session of any outranking tier |
//! | `select_M→P` / `select_M→F` | fewest outranking sessions, then no own sessions, then least other load |
//! | (none: Mixed stays with the class that borrowed it) | with `reclaim` (beyond the paper; off for two tiers), once Mixed is empty a tier may take back a Mixed replica held by a tier it outranks |
//! | return below `τ_c`, to the other pool while below target, else Mixed | to the most important other pool below its target, else Mixed |
//! | 001 canonicalization | sessions of one tier → that pool; of several → Mixed; none → return rule |
//! | 001 target for K⁺ = 1, 2, 3 | one Mixed; then one per tier, the rest to the top tier, up to tiers + 1 survivors |
//! | 001 scaled target, floors, Freemium shrinks first | scaled, floors `1` / `max(1, κ_t)`, the least important tier shrinks first |
//!
//! With two tiers ([`crate::PlbParams::PAPER`], [`TierTable::from_roles`]) this is the paper's
//! PLB, and [`crate::Plb`] is exactly that configuration in the two-class vocabulary;
//! `tests/two_rank_traces.rs` pins its outcomes to those of the paper's two-class
//! implementation, which this module replaced.
//!
//! Beyond the papers, as for two classes: the decision signal may be transactions in flight
//! ([`crate::LoadSignal`], [`TieredPlb::admit_loads`]), and the recovery-tail drain
//! ([`TieredPlb::drain_move`]) moves sessions off overloaded survivors after a rejoin.
//!
mod admit;
mod drain;
mod repair;
mod returns;
mod role;
mod table;
mod tier;

pub use admit::{TierAdmission, TierAdmitError, TierChanges, TierRule, TieredPlb};
pub use repair::{FailureError, TierRepairChanges};
pub use role::{TierChange, TierPool, TierReason, TierRole};
pub use table::{TierConflict, TierTable, TierVector, tier_role};
pub use tier::{MAX_TIERS, Tier, TierLoad};
