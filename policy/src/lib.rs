//! Replica routing policies for pgtier: PLB (priority-aware load balancing), its failure
//! repair, and the baselines it is compared with.
//!
//! # Contract
//!
//! Pure and deterministic: no I/O, no clocks, no threads, no global state, no allocation on
//! the admission path (outputs are fixed-capacity lists). The caller owns everything that
//! changes over time:
//!
//! - the [`RoleTable`] (roles of the K replicas, `K ≤ MAX_REPLICAS`), owned by one control
//!   shard and published to the others as an immutable snapshot;
//! - per-replica [`ReplicaLoad`]s (active premium/freemium sessions), one slice entry per
//!   replica, updated at session open/close;
//! - time (event order), round-robin tickets and random bits ([`Draw`], [`SplitMix64`]).
//!
//! Inputs are calls: [`Plb::admit`] / [`Strategy::route`] (a session arrives),
//! [`Plb::returns`] (evaluate returns alone), [`Plb::handle_down`] / [`Plb::handle_rejoin`]
//! (health events, in observed order). Outputs are returned values: an [`Admission`] (replica,
//! deciding rule, role changes) or the list of [`RoleChange`]s applied. Every role change names
//! its [`ChangeReason`], which is the event log's cause. Decisions computed on a snapshot are
//! applied by the table owner with [`RoleTable::apply`], which refuses a change whose
//! precondition (the role the decision saw, and the floor a cross-pool borrow relies on) no
//! longer holds, so concurrent decisions are never applied twice and never break `κ_F`/`K_P`.
//! Role changes never move sessions: a session stays pinned to the replica it was admitted to.
//! The load entry of a Down replica is ignored.
//!
//! # Example: one admission, as the proxy and the simulator drive it
//!
//! ```
//! use pgtier_policy::{Plb, PlbParams, ReplicaId, ReplicaLoad, RoleTable, ServiceClass};
//!
//! // The paper's deployment: R_P = {0, 1}, R_F = {2, 3}, R_M = {4}.
//! let mut table = RoleTable::new(5, &[ReplicaId(0), ReplicaId(1)], &[ReplicaId(2), ReplicaId(3)])?;
//! let plb = Plb::new(PlbParams::PAPER, &table)?;
//! let mut loads = vec![ReplicaLoad { premium: 10, freemium: 0 }; 5];
//! loads[2] = ReplicaLoad::default();
//! loads[3] = ReplicaLoad::default();
//! loads[4] = ReplicaLoad::default();
//!
//! // Decide on a snapshot (any shard)...
//! let admission = plb.admit(&table, &loads, ServiceClass::Premium)?;
//! assert_eq!(admission.replica, ReplicaId(4)); // premium saturated: borrows the Mixed replica
//! // ...apply on the owner (the control shard); a stale change is refused, never doubled.
//! for change in admission.role_changes.iter() {
//!     if let Err(conflict) = table.apply(change, plb.params()) {
//!         eprintln!("skipped: {conflict}");
//!     }
//! }
//! loads[admission.replica.index()].admitted(ServiceClass::Premium)?;
//!
//! // A failure: the table is repaired toward the target for 4 survivors.
//! let changes = plb.handle_down(&mut table, ReplicaId(0), &loads)?;
//! assert_eq!(table.vector(), plb.target(4));
//! for change in changes.iter() {
//!     println!("{change}"); // e.g. "replica#0: premium -> down (down)"
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Paper rules → code → tests
//!
//! PLB paper (seed 000), Algorithm 1 and §III-D (tests in `tests/plb_admission.rs`,
//! `tests/plb_returns.rs`, `tests/figure1.rs`):
//!
//! | Rule | Function | Tests |
//! |---|---|---|
//! | headroom `load_c(r) < θ_c`, least loaded, lines 3–5 / 23–25 | `tiers::admit` step 1 via [`Plb::admit`] | `premium_routes_to_least_loaded_premium_replica_with_headroom`, `headroom_uses_class_load_on_owned_replicas`, `freemium_routes_to_least_loaded_freemium_replica_with_headroom`, `premium_does_not_borrow_while_any_premium_replica_has_headroom` |
//! | load convention (`load_c` owned, `load` borrowed) | `tiers::role::tier_load` | `least_loaded_choice_uses_class_load_on_owned_replicas`, `least_loaded_choice_uses_total_load_on_borrowed_replicas`, `borrowed_replica_headroom_counts_total_load` |
//! | borrowed replicas join the borrower's pool | `tiers::role::tier_load` | `borrowed_replica_joins_the_borrowing_class_pool`, `premium_is_never_routed_to_a_replica_borrowed_by_freemium` |
//! | borrow from Mixed first, `select_M→P`, lines 7–10 | `tiers::admit::borrow_mixed` | `premium_borrows_from_mixed_first`, `select_mixed_for_premium_prefers_replicas_without_premium_sessions`, `select_mixed_for_premium_then_smallest_freemium_load` |
//! | `|R_F| − 1 ≥ κ_F`, donors below `m_P`, `select_F→P`, lines 12–19 | `TieredPlb::borrow_lower` | `premium_borrows_from_freemium_when_mixed_is_empty`, `premium_borrow_from_freemium_requires_floor`, `premium_borrow_from_freemium_allowed_exactly_at_floor`, `premium_borrow_from_freemium_requires_donor_below_best_premium_load`, `premium_borrow_from_freemium_compares_donor_total_load`, `select_freemium_for_premium_prefers_donors_below_freemium_watermark`, `select_freemium_for_premium_then_least_loaded` |
//! | fallback, lines 21 / 38 | `tiers::admit::fallback` | `premium_fallback_to_least_loaded_premium_replica`, `freemium_borrow_from_premium_requires_premium_target` |
//! | `select_M→F`, lines 27–30 | `tiers::admit::borrow_mixed` | `freemium_borrows_from_mixed_first`, `select_mixed_for_freemium_prefers_fewest_premium_sessions`, `select_mixed_for_freemium_then_smallest_freemium_load` |
//! | Premium-empty donors, `|R_P| − 1 ≥ K_P`, lines 32–36 | `TieredPlb::borrow_higher` | `freemium_borrows_only_premium_empty_replicas`, `freemium_borrow_from_premium_picks_least_loaded_premium_empty_replica`, `freemium_never_borrows_a_replica_hosting_premium_sessions` |
//! | Return: pressure below `τ_c = ⌊α_c θ_c⌋`, no borrower sessions | `tiers::returns::plan_returns`, [`Plb::returns`] | `return_requires_no_sessions_of_the_borrowing_class`, `return_requires_pressure_eased_below_watermark`, `return_pressure_ignores_the_candidate_itself`, `freemium_return_uses_freemium_watermark`, `returns_are_evaluated_at_admission_before_the_decision` |
//! | Return destination (`|R_F| < K_F` / `|R_P| < K_P`, else Mixed) | `tiers::returns::return_destination` | `return_goes_to_freemium_when_below_target`, `return_goes_to_mixed_when_freemium_target_met`, `return_goes_to_premium_when_below_target`, `return_of_freemium_borrow_goes_to_mixed_when_premium_target_met` |
//! | parameters and `τ_c` | [`PlbParams`], [`PlbParams::return_watermark`], [`PlbParams::validate`] | `return_watermark_is_the_floor_of_alpha_theta`, `params_reject_*` |
//! | role changes only at admission; sessions never moved | [`Admission::role_changes`], [`RoleTable::apply`] | `returned_replica_keeps_its_residual_sessions`, `apply_rejects_a_stale_change`, `apply_rejects_concurrent_borrows_that_would_break_the_freemium_floor` |
//! | O(K) per admission, no allocation | single passes, [`BoundedList`] | `admission_path_does_not_allocate` |
//! | Figure 1b transitions | — | `figure1_borrow_and_return_cycle` |
//!
//! Failure paper (seed 001), §III (tests in `tests/failures.rs`):
//!
//! | Rule | Function | Tests |
//! |---|---|---|
//! | health Up/Down, events in observed order | [`Role::Down`], [`Plb::handle_down`], [`Plb::handle_rejoin`] | `down_event_comes_first_and_names_its_cause`, `duplicate_down_and_rejoin_events_are_no_ops` |
//! | canonicalization of borrowed states | `TieredPlb::canonicalize` | `canonicalize_mixed_sessions_to_mixed`, `canonicalize_premium_only_to_premium`, `canonicalize_freemium_only_to_freemium`, `canonicalize_idle_borrowed_replica_is_returned` |
//! | target role vector `K^I(K⁺)` | [`Plb::target`] | `target_vector_explicit_small_cases`, `target_vector_scales_to_nearest_integer`, `target_vector_budget_shrinks_freemium_first`, `target_vector_respects_floors`, `target_vector_for_every_survivor_count_sums_and_respects_floors` |
//! | repair loop (Mixed donors first, floors, least loaded) | `TieredPlb::repair_to` | `repair_takes_mixed_donors_first`, `repair_crosses_the_premium_freemium_boundary_when_mixed_is_exhausted`, `repair_never_crosses_below_the_freemium_floor`, `repair_picks_the_least_loaded_donor` |
//! | rejoin enters as Mixed, then repair | [`Plb::handle_rejoin`] | `rejoin_enters_as_mixed_then_repairs`, `cascade_then_recovery_returns_to_the_reference_split` |
//! | baselines drop the failed replica | [`Strategy::handle_down`] | `baselines_drop_the_failed_replica` |
//!
//! Beyond the papers (tests in `tests/load_signal.rs`, `tests/drain.rs`):
//!
//! | Option | Function | Tests |
//! |---|---|---|
//! | decide on transactions in flight, guard returns and premium-side borrows on pinned sessions | [`LoadSignal`], [`Loads`], [`Plb::admit_loads`], [`Plb::returns_loads`] | `idle_sessions_do_not_use_up_headroom`, `a_return_still_needs_the_replica_free_of_pinned_borrower_sessions`, `freemium_never_borrows_a_replica_with_idle_premium_sessions` |
//! | recovery-tail drain: which session leaves an overloaded survivor after a rejoin | [`Plb::drain_move`] | `a_session_leaves_a_survivor_past_headroom_for_a_replica_with_room`, `a_mixed_replica_is_a_destination_with_its_total_load`, `a_move_must_leave_the_destination_less_loaded_than_the_source` |
//! | the rejoined replica goes to the class under more pressure | `TieredPlb::repair_order` | `a_rejoined_replica_goes_to_the_class_under_more_pressure` |
//!
//! Invariants over random sequences of admissions (fresh and stale snapshots), releases, Down,
//! Rejoin and drain moves (with the drain on and off) are property tests in
//! `tests/properties.rs`.
//!
//! Reads of a reader entry (seed 003): [`choose_read`] places one read transaction —
//! weighted power of two choices on in-flight reads, a smooth weighted [`Alternation`] for
//! two replicas, LSN-ready replicas first (tests in `reader.rs`).
//!
//! Baselines: [`round_robin`] (KRR), [`Dedicated`] (rRR+fRR), [`P2c`], [`least_sessions`];
//! selected by name through [`StrategyName`] / [`Strategy`] (tests in `tests/baselines.rs`).
//!
//! # Ambiguities resolved
//!
//! - **Routing pool of a class** = its own pool plus replicas currently borrowed for it (000 says
//!   a borrowed donor "is moved into the borrower's pool"; otherwise every session after the
//!   first would borrow again). Headroom, least-loaded choice and fallback all scan this pool,
//!   with the load convention (total load on borrowed replicas, also for the headroom test).
//! - **Pool sizes in floors and targets** (`|R_P|`, `|R_F|` in `κ_F`, `K_P`, `K_F` tests) count
//!   only replicas whose role *is* that pool, not replicas borrowed for the class: the floors
//!   protect the persistent partition, and Freemium donors for premium are only owned Freemium
//!   replicas.
//! - **`m_P` with no premium replica** is unbounded (any eligible Freemium donor qualifies).
//!   `select_F→P` ranks donors by (`load_F ≥ τ_F`, total load); the `< m_P` test uses total load,
//!   the load the donor will be counted with once borrowed.
//! - **Pressure eased** for a return candidate is judged on the *other* replicas of the
//!   borrowing class's routing pool; the candidate itself has no borrower sessions, so counting
//!   it would make the test vacuous. Returns run (in index order, each seeing the previous) before
//!   the admission decision.
//! - **Last resort**: when a class has no replica it may use (only after failures, e.g. one
//!   survivor already borrowed by the other class) the session goes to the least-loaded healthy
//!   replica without a role change ([`AdmissionRule::LastResort`]).
//! - **Canonicalization of an idle borrowed replica** uses the 000 return destination rule.
//! - **Target for `K⁺ ≥ 4`** (001's formulas are not in our copy of the text): `round(K⁺·X/K)`
//!   with halves rounded up for Premium and Freemium, floors Premium ≥ 1 and Freemium ≥
//!   `max(1, κ_F)` (capped at `K⁺ − 1`), then Freemium shrinks first to fit the budget; Mixed
//!   takes the residual. At `K⁺ = K` this is the reference split whenever it meets the floors.
//! - **Repair order**: deficits are filled Premium first, then Freemium, then Mixed; donors are
//!   over-target pools, Mixed first, least total load, ties to the lowest index.
//! - **Duplicate events**: a Down for a Down replica or a Rejoin for an Up one is a no-op.
//!
//! # One implementation, two vocabularies
//!
//! [`tiers`] is PLB over ranked classes with one pool per rank (000's future work), and it is
//! the only implementation: [`Plb`] is its two-rank configuration (premium is rank 0,
//! freemium rank 1) speaking the proxy's two-class vocabulary ([`RoleTable`], [`Role`],
//! [`ChangeReason`], [`ReplicaLoad`]), translated in `plb.rs`. Rule names above that start
//! with `tiers::` or `TieredPlb::` are that implementation; with two ranks each is exactly the
//! paper's rule (`tests/two_rank_traces.rs` pins the outcomes to those of the two-class
//! implementation it replaced, `tests/tiers_equivalence.rs` checks both vocabularies agree).
//! Both are configured by one parameter declaration, [`PlbParams`] (see `params.rs`).
//!
mod admission;
mod baseline;
mod bounded;
mod load_view;
mod params;
mod plb;
mod reader;
mod replica;
mod rng;
mod role;
mod signal;
mod strategy;
mod table;
pub mod tiers;

pub use admission::{Admission, AdmissionChanges, AdmissionRule, AdmitError, RepairChanges};
pub use baseline::{Dedicated, P2c, least_sessions, round_robin};
pub use bounded::BoundedList;
pub use params::{ParamError, PlbParams, TierParamError};
pub use plb::Plb;
pub use reader::{Alternation, ReadCandidate, ReadChoice, ReadStanding, choose_read};
pub use replica::{LoadError, MAX_REPLICAS, ReplicaId, ReplicaLoad, ReplicaSet, ServiceClass};
pub use rng::SplitMix64;
pub use role::{ChangeReason, Pool, Role, RoleChange};
pub use signal::{LoadSignal, Loads};
pub use strategy::{Draw, Strategy, StrategyName, UnknownStrategy};
pub use table::{Conflict, LayoutError, RoleTable, RoleVector};
pub use tiers::FailureError;
