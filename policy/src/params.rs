//! PLB control parameters (000 §III-C, §IV-B) and their validation.
//!
//! Validation exists so that an impossible configuration is refused with a message naming the
//! parameter at startup, instead of silently producing a policy that never borrows or returns.

use core::fmt;

use crate::replica::ServiceClass;
use crate::table::RoleTable;

/// The control signals of PLB. The initial split is not here: it is the [`RoleTable`] the
/// policy starts from, and it doubles as the failure-repair reference split (001 §III).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PlbParams {
    /// `θ_P`: a replica has premium headroom while its premium load is below this.
    pub theta_premium: u32,
    /// `θ_F`: a replica has freemium headroom while its freemium load is below this.
    pub theta_freemium: u32,
    /// `α_P` in (0, 1]: premium return watermark `τ_P = ⌊α_P·θ_P⌋`.
    pub alpha_premium: f64,
    /// `α_F` in (0, 1]: freemium return watermark `τ_F = ⌊α_F·θ_F⌋`.
    pub alpha_freemium: f64,
    /// `κ_F`: premium may take a Freemium replica only while `|R_F| − 1 ≥ κ_F`.
    pub freemium_floor: u32,
    /// `K_P`: freemium may take a Premium replica only while `|R_P| − 1 ≥ K_P`; a returned
    /// borrowed-to-Freemium replica goes to `R_P` while `|R_P| < K_P`.
    pub premium_target: u32,
    /// `K_F`: a returned borrowed-to-Premium replica goes to `R_F` while `|R_F| < K_F`.
    pub freemium_target: u32,
}

impl PlbParams {
    /// The five-replica configuration of 000 §IV-B: θ = 10, α = 0.6/0.8, κ_F = 1, K_P = K_F = 2.
    pub const PAPER: PlbParams = PlbParams {
        theta_premium: 10,
        theta_freemium: 10,
        alpha_premium: 0.6,
        alpha_freemium: 0.8,
        freemium_floor: 1,
        premium_target: 2,
        freemium_target: 2,
    };

    /// `θ_c`.
    pub const fn theta(&self, class: ServiceClass) -> u32 {
        match class {
            ServiceClass::Premium => self.theta_premium,
            ServiceClass::Freemium => self.theta_freemium,
        }
    }

    /// `α_c`.
    pub const fn alpha(&self, class: ServiceClass) -> f64 {
        match class {
            ServiceClass::Premium => self.alpha_premium,
            ServiceClass::Freemium => self.alpha_freemium,
        }
    }

    /// `τ_c = ⌊α_c·θ_c⌋`. A tiny tolerance keeps decimal inputs such as 0.29 × 100 from
    /// flooring one below the intended integer because of binary rounding.
    pub fn return_watermark(&self, class: ServiceClass) -> u32 {
        let product = self.alpha(class) * f64::from(self.theta(class));
        // The cast saturates; validation keeps alpha in (0, 1] so product <= theta.
        (product + 1e-9).floor() as u32
    }

    /// Checks every parameter against the initial layout `initial` (the configured split).
    pub fn validate(&self, initial: &RoleTable) -> Result<(), ParamError> {
        for class in ServiceClass::ALL {
            self.validate_class(class)?;
        }
        let replicas = initial.len();
        let freemium_pool = initial.owned(ServiceClass::Freemium);
        if self.freemium_floor as usize > freemium_pool {
            return Err(ParamError::FloorLargerThanPool {
                floor: self.freemium_floor,
                pool: freemium_pool,
            });
        }
        for (class, target) in [
            (ServiceClass::Premium, self.premium_target),
            (ServiceClass::Freemium, self.freemium_target),
        ] {
            if target as usize > replicas {
                return Err(ParamError::TargetLargerThanBudget {
                    class,
                    target,
                    replicas,
                });
            }
        }
        let targets = self.premium_target as usize + self.freemium_target as usize;
        if targets > replicas {
            return Err(ParamError::TargetsExceedBudget {
                premium: self.premium_target,
                freemium: self.freemium_target,
                replicas,
            });
        }
        Ok(())
    }

    fn validate_class(&self, class: ServiceClass) -> Result<(), ParamError> {
        let theta = self.theta(class);
        let alpha = self.alpha(class);
        if theta == 0 {
            return Err(ParamError::ThetaZero { class });
        }
        if !(alpha > 0.0 && alpha <= 1.0) {
            return Err(ParamError::AlphaOutOfRange { class, alpha });
        }
        if self.return_watermark(class) == 0 {
            return Err(ParamError::WatermarkZero {
                class,
                alpha,
                theta,
            });
        }
        Ok(())
    }
}

/// Why a parameter set was refused.
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
        }
    }
}

impl std::error::Error for ParamError {}
