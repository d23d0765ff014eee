//! Parameters of tiered PLB, one entry per tier, and their validation.
//!
//! Each tier has the paper's per-class signals (θ_t, α_t) and both of the paper's pool
//! guards, because with more than two tiers a middle tier is "premium" to the tiers below it
//! and "freemium" to the tiers above it:
//! - `floor` (κ_t) protects tier t from tiers that outrank it, as κ_F protects freemium;
//! - `target` (K_t) protects tier t from tiers it outranks, as K_P protects premium, and is
//!   where returned replicas go first, as K_P and K_F are.

use core::fmt;

use super::table::TierTable;
use super::tier::{MAX_TIERS, Tier};
use crate::params::PlbParams;

/// Validated by [`TierParams::validate`] against the initial table.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TierParams {
    /// Number of tiers, 2..=[`MAX_TIERS`].
    pub tiers: u8,
    /// θ_t: a replica has headroom for tier t while its tier-t load is below this.
    pub theta: [u32; MAX_TIERS],
    /// α_t in (0, 1]: return watermark τ_t = ⌊α_t·θ_t⌋.
    pub alpha: [f64; MAX_TIERS],
    /// κ_t: a tier that outranks t may take a replica of `R_t` only while `|R_t| − 1 ≥ κ_t`.
    /// Unused for tier 0, which nothing outranks.
    pub floor: [u32; MAX_TIERS],
    /// K_t: a tier that t outranks may take a replica of `R_t` only while `|R_t| − 1 ≥ K_t`;
    /// a returned replica goes to the most important pool below its target.
    pub target: [u32; MAX_TIERS],
    /// Beyond the paper: once Mixed is empty, a saturated tier may take back a replica that a
    /// tier it outranks borrowed from Mixed (see `admit`). Off in [`TierParams::from_plb`],
    /// so two tiers stay exactly the paper's PLB.
    pub reclaim: bool,
}

impl TierParams {
    /// The two-class parameters as tiers: premium is tier 0, freemium tier 1. Admission,
    /// returns and repair then decide exactly as [`crate::Plb`] does.
    pub const fn from_plb(p: &PlbParams) -> TierParams {
        TierParams {
            tiers: 2,
            theta: [p.theta_premium, p.theta_freemium, 1, 1],
            alpha: [p.alpha_premium, p.alpha_freemium, 1.0, 1.0],
            floor: [0, p.freemium_floor, 0, 0],
            target: [p.premium_target, p.freemium_target, 0, 0],
            reclaim: false,
        }
    }

    /// `tiers` tiers sharing one θ and α, κ = 1 for every tier below the top and K_t = 1 each,
    /// reclaim on: the paper's values carried to more classes, for tests and the simulator.
    pub const fn uniform(tiers: u8, theta: u32, alpha: f64) -> TierParams {
        TierParams {
            tiers,
            theta: [theta; MAX_TIERS],
            alpha: [alpha; MAX_TIERS],
            floor: [1; MAX_TIERS],
            target: [1; MAX_TIERS],
            reclaim: true,
        }
    }

    /// The tiers `0..tiers`, most important first.
    pub fn all(&self) -> impl DoubleEndedIterator<Item = Tier> + Clone {
        Tier::all(self.tiers)
    }

    /// θ_t (0 outside the configured tiers).
    pub fn theta(&self, tier: Tier) -> u32 {
        self.theta.get(tier.index()).copied().unwrap_or(0)
    }

    /// κ_t.
    pub fn floor(&self, tier: Tier) -> u32 {
        self.floor.get(tier.index()).copied().unwrap_or(0)
    }

    /// K_t.
    pub fn target(&self, tier: Tier) -> u32 {
        self.target.get(tier.index()).copied().unwrap_or(0)
    }

    /// τ_t = ⌊α_t·θ_t⌋, with the same rounding tolerance as [`PlbParams::return_watermark`].
    pub fn return_watermark(&self, tier: Tier) -> u32 {
        let alpha = self.alpha.get(tier.index()).copied().unwrap_or(0.0);
        let product = alpha * f64::from(self.theta(tier));
        // The cast saturates; validation keeps alpha in (0, 1] so product <= theta.
        (product + 1e-9).floor() as u32
    }

    /// Checks every parameter against the initial table.
    pub fn validate(&self, initial: &TierTable) -> Result<(), TierParamError> {
        let tiers = usize::from(self.tiers);
        if !(2..=MAX_TIERS).contains(&tiers) {
            return Err(TierParamError::TierCount(self.tiers));
        }
        if initial.tiers() != self.tiers {
            return Err(TierParamError::TableTiers {
                params: self.tiers,
                table: initial.tiers(),
            });
        }
        let replicas = initial.len();
        let mut targets = 0usize;
        for tier in self.all() {
            let alpha = self.alpha[tier.index()];
            if self.theta(tier) == 0 {
                return Err(TierParamError::ThetaZero(tier));
            }
            if !(alpha > 0.0 && alpha <= 1.0) {
                return Err(TierParamError::AlphaOutOfRange { tier, alpha });
            }
            if self.return_watermark(tier) == 0 {
                return Err(TierParamError::WatermarkZero(tier));
            }
            let pool = initial.owned(tier);
            if tier != Tier::TOP && self.floor(tier) as usize > pool {
                return Err(TierParamError::FloorLargerThanPool {
                    tier,
                    floor: self.floor(tier),
                    pool,
                });
            }
            targets += self.target(tier) as usize;
        }
        if targets > replicas {
            return Err(TierParamError::TargetsExceedBudget { targets, replicas });
        }
        Ok(())
    }
}

/// Why a tiered parameter set was refused.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum TierParamError {
    /// Fewer than 2 or more than [`MAX_TIERS`] tiers.
    TierCount(u8),
    /// The parameters and the initial table disagree on the number of tiers.
    TableTiers {
        /// Tiers in the parameters.
        params: u8,
        /// Tiers in the table.
        table: u8,
    },
    /// θ_t = 0 would make every replica saturated forever.
    ThetaZero(Tier),
    /// α_t outside (0, 1] (NaN included).
    AlphaOutOfRange {
        /// Offending tier.
        tier: Tier,
        /// Configured value.
        alpha: f64,
    },
    /// ⌊α_t·θ_t⌋ = 0: borrowed replicas would never return.
    WatermarkZero(Tier),
    /// κ_t larger than the initial pool of tier t.
    FloorLargerThanPool {
        /// Offending tier.
        tier: Tier,
        /// Configured κ_t.
        floor: u32,
        /// Initial `|R_t|`.
        pool: usize,
    },
    /// Σ K_t > K: the targets can never all hold at once.
    TargetsExceedBudget {
        /// Σ K_t.
        targets: usize,
        /// Replica budget K.
        replicas: usize,
    },
}

impl fmt::Display for TierParamError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            TierParamError::TierCount(n) => {
                write!(f, "{n} tiers: tiered PLB needs 2 to {MAX_TIERS}")
            }
            TierParamError::TableTiers { params, table } => write!(
                f,
                "the parameters have {params} tiers but the role table has {table}"
            ),
            TierParamError::ThetaZero(tier) => write!(f, "theta of {tier} must be at least 1"),
            TierParamError::AlphaOutOfRange { tier, alpha } => {
                write!(f, "alpha of {tier} = {alpha} is outside (0, 1]")
            }
            TierParamError::WatermarkZero(tier) => write!(
                f,
                "the return watermark floor(alpha * theta) of {tier} is 0, so borrowed replicas \
                 could never return"
            ),
            TierParamError::FloorLargerThanPool { tier, floor, pool } => write!(
                f,
                "the floor of {tier} ({floor}) is larger than its initial pool ({pool} replicas)"
            ),
            TierParamError::TargetsExceedBudget { targets, replicas } => write!(
                f,
                "the pool targets add up to {targets}, more than the replica budget ({replicas})"
            ),
        }
    }
}

impl std::error::Error for TierParamError {}
