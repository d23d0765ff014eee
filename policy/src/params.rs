//! PLB's control parameters (000 §III-C, §IV-B), their defaults and their validation: the one
//! declaration the policy, the configuration (`pgtier-core`) and the router share.
//!
//! Parameters are per rank ([`Tier`]; rank 0 is the most important). The paper's two classes
//! are two ranks: premium is rank 0, freemium rank 1, and the paper's names map to entries:
//! `θ_P = theta[0]`, `θ_F = theta[1]`, `α_P = alpha[0]`, `α_F = alpha[1]`,
//! `κ_F = floor[1]`, `K_P = target[0]`, `K_F = target[1]`. Each rank has both pool guards,
//! because with more than two ranks a middle rank is "premium" to the ranks below it and
//! "freemium" to the ranks above it:
//! - `floor` (κ_t) protects rank t from ranks that outrank it, as κ_F protects freemium;
//! - `target` (K_t) protects rank t from ranks it outranks, as K_P protects premium, and is
//!   where returned replicas go first, as K_P and K_F are.
//!
//! Validation exists so that an impossible configuration is refused with a message naming the
//! parameter at startup, instead of silently producing a policy that never borrows or returns.
//! [`ParamError`] names the paper's two-class parameters, [`TierParamError`] ranks.

use core::fmt;

use crate::replica::ServiceClass;
use crate::tiers::{MAX_TIERS, Tier, TierTable};

/// `θ` when the configuration does not set it.
const DEFAULT_THETA: u32 = 10;
/// `α` of rank 0 (`α_P`) when the configuration does not set it.
const DEFAULT_ALPHA_TOP: f64 = 0.6;
/// `α` of every other rank (`α_F`) when the configuration does not set it.
const DEFAULT_ALPHA: f64 = 0.8;
/// `κ` of every rank below the top (`κ_F`) when the configuration does not set it, capped by
/// the rank's initial pool.
const DEFAULT_FLOOR: u32 = 1;

/// The control signals of PLB, one entry per rank. The initial split is not here: it is the
/// table the policy starts from, and it doubles as the failure-repair reference split
/// (001 §III). Entries past `tiers` are unused.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PlbParams {
    /// Number of ranks, 2..=[`MAX_TIERS`] (2: the paper's premium and freemium).
    pub tiers: u8,
    /// θ_t: a replica has headroom for rank t while its rank-t load is below this.
    pub theta: [u32; MAX_TIERS],
    /// α_t in (0, 1]: return watermark τ_t = ⌊α_t·θ_t⌋.
    pub alpha: [f64; MAX_TIERS],
    /// κ_t: a rank that outranks t may take a replica of `R_t` only while `|R_t| − 1 ≥ κ_t`.
    /// Unused for rank 0, which nothing outranks.
    pub floor: [u32; MAX_TIERS],
    /// K_t: a rank that t outranks may take a replica of `R_t` only while `|R_t| − 1 ≥ K_t`;
    /// a returned replica goes to the most important pool below its target.
    pub target: [u32; MAX_TIERS],
    /// Beyond the paper: once Mixed is empty, a saturated rank may take back a replica that a
    /// rank it outranks borrowed from Mixed (see `tiers::admit`). Off in the two-rank
    /// defaults, so two ranks stay exactly the paper's PLB.
    pub reclaim: bool,
}

impl PlbParams {
    /// The five-replica configuration of 000 §IV-B: θ = 10, α = 0.6/0.8, κ_F = 1, K_P = K_F = 2.
    pub const PAPER: PlbParams = PlbParams {
        tiers: 2,
        theta: [DEFAULT_THETA; MAX_TIERS],
        alpha: [
            DEFAULT_ALPHA_TOP,
            DEFAULT_ALPHA,
            DEFAULT_ALPHA,
            DEFAULT_ALPHA,
        ],
        floor: [0, DEFAULT_FLOOR, DEFAULT_FLOOR, DEFAULT_FLOOR],
        target: [2, 2, 0, 0],
        reclaim: false,
    };

    /// The defaults for initial pools of the given sizes, most important first: θ and α as
    /// in [`PlbParams::PAPER`], κ_t = min(1, |R_t|) below the top, K_t = |R_t|, and reclaim
    /// on from three ranks (two ranks are the paper's PLB). At most [`MAX_TIERS`] pools count.
    pub fn defaults(pools: &[usize]) -> PlbParams {
        let mut params = PlbParams {
            tiers: pools.len().min(MAX_TIERS) as u8,
            target: [0; MAX_TIERS],
            reclaim: pools.len() > 2,
            ..PlbParams::PAPER
        };
        for (rank, &pool) in pools.iter().enumerate().take(MAX_TIERS) {
            let pool = u32::try_from(pool).unwrap_or(u32::MAX);
            params.target[rank] = pool;
            if rank > 0 {
                params.floor[rank] = DEFAULT_FLOOR.min(pool);
            }
        }
        params
    }

    /// `tiers` ranks sharing one θ and α, κ = 1 for every rank below the top and K_t = 1
    /// each, reclaim on: the paper's values carried to more classes, for tests and the
    /// simulator.
    pub const fn uniform(tiers: u8, theta: u32, alpha: f64) -> PlbParams {
        PlbParams {
            tiers,
            theta: [theta; MAX_TIERS],
            alpha: [alpha; MAX_TIERS],
            floor: [1; MAX_TIERS],
            target: [1; MAX_TIERS],
            reclaim: true,
        }
    }

    /// The same parameters with θ of `rank` set to `theta`.
    #[must_use]
    pub fn with_theta(mut self, rank: impl Into<Tier>, theta: u32) -> PlbParams {
        set(&mut self.theta, rank.into(), theta);
        self
    }

    /// The same parameters with α of `rank` set to `alpha`.
    #[must_use]
    pub fn with_alpha(mut self, rank: impl Into<Tier>, alpha: f64) -> PlbParams {
        set(&mut self.alpha, rank.into(), alpha);
        self
    }

    /// The same parameters with κ of `rank` set to `floor`.
    #[must_use]
    pub fn with_floor(mut self, rank: impl Into<Tier>, floor: u32) -> PlbParams {
        set(&mut self.floor, rank.into(), floor);
        self
    }

    /// The same parameters with K of `rank` set to `target`.
    #[must_use]
    pub fn with_target(mut self, rank: impl Into<Tier>, target: u32) -> PlbParams {
        set(&mut self.target, rank.into(), target);
        self
    }

    /// The ranks `0..tiers`, most important first.
    pub fn all(&self) -> impl DoubleEndedIterator<Item = Tier> + Clone {
        Tier::all(self.tiers)
    }

    /// θ_t (0 outside `0..MAX_TIERS`).
    pub fn theta(&self, rank: impl Into<Tier>) -> u32 {
        get(&self.theta, rank.into()).unwrap_or(0)
    }

    /// α_t (0 outside `0..MAX_TIERS`).
    pub fn alpha(&self, rank: impl Into<Tier>) -> f64 {
        get(&self.alpha, rank.into()).unwrap_or(0.0)
    }

    /// κ_t.
    pub fn floor(&self, rank: impl Into<Tier>) -> u32 {
        get(&self.floor, rank.into()).unwrap_or(0)
    }

    /// K_t.
    pub fn target(&self, rank: impl Into<Tier>) -> u32 {
        get(&self.target, rank.into()).unwrap_or(0)
    }

    /// The guard a borrow by `by` out of `pool`'s pool must leave it: κ of the pool when `by`
    /// outranks it, K when the pool outranks `by`.
    pub(crate) fn guard(&self, pool: Tier, by: Tier) -> u32 {
        if by.outranks(pool) {
            self.floor(pool)
        } else {
            self.target(pool)
        }
    }

    /// `τ_t = ⌊α_t·θ_t⌋`. A tiny tolerance keeps decimal inputs such as 0.29 × 100 from
    /// flooring one below the intended integer because of binary rounding.
    pub fn return_watermark(&self, rank: impl Into<Tier>) -> u32 {
        let rank = rank.into();
        let product = self.alpha(rank) * f64::from(self.theta(rank));
        // The cast saturates; validation keeps alpha in (0, 1] so product <= theta.
        (product + 1e-9).floor() as u32
    }

    /// Checks every parameter against the two-class initial layout `initial` (the configured
    /// split), naming the paper's parameters on error.
    pub fn validate(&self, initial: impl Into<TierTable>) -> Result<(), ParamError> {
        self.validate_tiers(&initial.into())
            .map_err(|error| ParamError::from_tiers(error, self))
    }

    /// Checks every parameter against the initial table.
    pub fn validate_tiers(&self, initial: &TierTable) -> Result<(), TierParamError> {
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
        for tier in self.all() {
            let alpha = self.alpha(tier);
            if self.theta(tier) == 0 {
                return Err(TierParamError::ThetaZero(tier));
            }
            if !(alpha > 0.0 && alpha <= 1.0) {
                return Err(TierParamError::AlphaOutOfRange { tier, alpha });
            }
            if self.return_watermark(tier) == 0 {
                return Err(TierParamError::WatermarkZero(tier));
            }
        }
        for tier in self.all().skip(1) {
            let pool = initial.owned(tier);
            if self.floor(tier) as usize > pool {
                return Err(TierParamError::FloorLargerThanPool {
                    tier,
                    floor: self.floor(tier),
                    pool,
                });
            }
        }
        let replicas = initial.len();
        let mut targets = 0usize;
        for tier in self.all() {
            let target = self.target(tier);
            if target as usize > replicas {
                return Err(TierParamError::TargetLargerThanBudget {
                    tier,
                    target,
                    replicas,
                });
            }
            targets += target as usize;
        }
        if targets > replicas {
            return Err(TierParamError::TargetsExceedBudget { targets, replicas });
        }
        Ok(())
    }
}

fn get<T: Copy>(values: &[T; MAX_TIERS], rank: Tier) -> Option<T> {
    values.get(rank.index()).copied()
}

fn set<T>(values: &mut [T; MAX_TIERS], rank: Tier, value: T) {
    if let Some(slot) = values.get_mut(rank.index()) {
        *slot = value;
    }
}

/// Why a parameter set was refused, by rank.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum TierParamError {
    /// Fewer than 2 or more than [`MAX_TIERS`] ranks.
    TierCount(u8),
    /// The parameters and the initial table disagree on the number of ranks.
    TableTiers {
        /// Ranks in the parameters.
        params: u8,
        /// Ranks in the table.
        table: u8,
    },
    /// θ_t = 0 would make every replica saturated forever.
    ThetaZero(Tier),
    /// α_t outside (0, 1] (NaN included).
    AlphaOutOfRange {
        /// Offending rank.
        tier: Tier,
        /// Configured value.
        alpha: f64,
    },
    /// ⌊α_t·θ_t⌋ = 0: borrowed replicas would never return.
    WatermarkZero(Tier),
    /// κ_t larger than the initial pool of rank t.
    FloorLargerThanPool {
        /// Offending rank.
        tier: Tier,
        /// Configured κ_t.
        floor: u32,
        /// Initial `|R_t|`.
        pool: usize,
    },
    /// K_t larger than the replica budget.
    TargetLargerThanBudget {
        /// Offending rank.
        tier: Tier,
        /// Configured K_t.
        target: u32,
        /// Replica budget K.
        replicas: usize,
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
            TierParamError::TargetLargerThanBudget {
                tier,
                target,
                replicas,
            } => write!(
                f,
                "the target of {tier} ({target}) is larger than the replica budget ({replicas})"
            ),
            TierParamError::TargetsExceedBudget { targets, replicas } => write!(
                f,
                "the pool targets add up to {targets}, more than the replica budget ({replicas})"
            ),
        }
    }
}

impl std::error::Error for TierParamError {}

/// Why a two-class parameter set was refused, in the paper's names ([`TierParamError`] on
/// ranks 0 = premium and 1 = freemium).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ParamError {
    /// `θ_c = 0` would make every replica saturated forever.
    ThetaZero {
        /// Offending class.
        class: ServiceClass,
    },
    /// `α_c` outside (0, 1] (NaN included).
    AlphaOutOfRange {
        /// Offending class.
        class: ServiceClass,
        /// Configured value.
        alpha: f64,
    },
    /// `⌊α_c·θ_c⌋ = 0`: no load is below the watermark, so borrowed replicas would never return.
    WatermarkZero {
        /// Offending class.
        class: ServiceClass,
        /// Configured `α_c`.
        alpha: f64,
        /// Configured `θ_c`.
        theta: u32,
    },
    /// `κ_F` larger than the configured Freemium pool.
    FloorLargerThanPool {
        /// Configured `κ_F`.
        floor: u32,
        /// Size of the initial Freemium pool.
        pool: usize,
    },
    /// A pool target larger than the replica budget.
    TargetLargerThanBudget {
        /// Class of the target.
        class: ServiceClass,
        /// Configured target.
        target: u32,
        /// Replica budget `K`.
        replicas: usize,
    },
    /// `K_P + K_F > K`: both targets can never hold at once.
    TargetsExceedBudget {
        /// Configured `K_P`.
        premium: u32,
        /// Configured `K_F`.
        freemium: u32,
        /// Replica budget `K`.
        replicas: usize,
    },
    /// Not a two-rank parameter set.
    Ranks(TierParamError),
}

impl ParamError {
    fn from_tiers(error: TierParamError, params: &PlbParams) -> ParamError {
        match error {
            TierParamError::ThetaZero(tier) => ParamError::ThetaZero {
                class: tier.two_class(),
            },
            TierParamError::AlphaOutOfRange { tier, alpha } => ParamError::AlphaOutOfRange {
                class: tier.two_class(),
                alpha,
            },
            TierParamError::WatermarkZero(tier) => ParamError::WatermarkZero {
                class: tier.two_class(),
                alpha: params.alpha(tier),
                theta: params.theta(tier),
            },
            TierParamError::FloorLargerThanPool { floor, pool, .. } => {
                ParamError::FloorLargerThanPool { floor, pool }
            }
            TierParamError::TargetLargerThanBudget {
                tier,
                target,
                replicas,
            } => ParamError::TargetLargerThanBudget {
                class: tier.two_class(),
                target,
                replicas,
            },
            TierParamError::TargetsExceedBudget { replicas, .. } => {
                ParamError::TargetsExceedBudget {
                    premium: params.target(ServiceClass::Premium),
                    freemium: params.target(ServiceClass::Freemium),
                    replicas,
                }
            }
            TierParamError::TierCount(_) | TierParamError::TableTiers { .. } => {
                ParamError::Ranks(error)
            }
        }
    }
}

impl fmt::Display for ParamError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ParamError::ThetaZero { class } => {
                write!(f, "theta_{class} must be at least 1")
            }
            ParamError::AlphaOutOfRange { class, alpha } => {
                write!(f, "alpha_{class} = {alpha} is outside (0, 1]")
            }
            ParamError::WatermarkZero {
                class,
                alpha,
                theta,
            } => write!(
                f,
                "return watermark floor(alpha_{class} * theta_{class}) = floor({alpha} * {theta}) \
                 is 0, so borrowed replicas could never return; raise alpha_{class} or theta_{class}"
            ),
            ParamError::FloorLargerThanPool { floor, pool } => write!(
                f,
                "freemium_floor = {floor} is larger than the initial freemium pool ({pool} replicas)"
            ),
            ParamError::TargetLargerThanBudget {
                class,
                target,
                replicas,
            } => write!(
                f,
                "{class}_target = {target} is larger than the replica budget ({replicas})"
            ),
            ParamError::TargetsExceedBudget {
                premium,
                freemium,
                replicas,
            } => write!(
                f,
                "premium_target + freemium_target = {premium} + {freemium} exceeds the replica \
                 budget ({replicas})"
            ),
            ParamError::Ranks(error) => write!(f, "{error}"),
        }
    }
}

impl std::error::Error for ParamError {}
