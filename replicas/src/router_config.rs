//! How a replica router is configured: the routing policy and limits of one replica set, and
//! the translation of `pgtier.toml`'s routing section into the policy crate's strategy and
//! initial role table.

use std::fmt;
use std::net::SocketAddr;

use pgtier_core::config::{
    PlbLoadSignal, ReplicaSet as ConfiguredReplicas, Routing, Settings, TierSettings,
};
use pgtier_policy::tiers::{Tier, TierTable, TieredPlb};
use pgtier_policy::{
    Dedicated, LayoutError, LoadSignal, MAX_REPLICAS, P2c, ParamError, Plb, PlbParams, ReplicaId,
    RoleTable, Strategy, StrategyName, TierParamError,
};

use crate::route_table::RouteTable;

use crate::probe::ProbeLogin;

/// How a router is built; `RouterConfig::from_replicas` fills it from `pgtier.toml`.
#[derive(Clone, Debug)]
pub struct RouterConfig {
    /// Label in events, logs and the admin console: the database entries it serves.
    pub name: String,
    /// Replica addresses in configured order; `ReplicaId(i)` is `replicas[i]`.
    pub replicas: Vec<SocketAddr>,
    /// Routing policy and parameters.
    pub routing: Routing,
    /// Events kept for `SHOW ROLE_EVENTS` / `SHOW EVENTS`.
    pub role_events_capacity: usize,
    /// Requests that may wait for the control shard; beyond it admissions are refused.
    pub control_queue_capacity: usize,
    /// Local admission attempts lost to concurrent shards before asking the control shard.
    pub claim_attempts: u32,
    /// How health probes log in; `None` = handshake-only probes (see `probe`).
    pub probe_login: Option<ProbeLogin>,
}

/// Default [`RouterConfig::control_queue_capacity`].
pub(crate) const DEFAULT_CONTROL_QUEUE_CAPACITY: usize = 4096;
/// Default [`RouterConfig::claim_attempts`].
pub(crate) const DEFAULT_CLAIM_ATTEMPTS: u32 = 8;

impl RouterConfig {
    /// A router for `replicas` as configured, with the `[pgtier]` limits of `settings`.
    pub(crate) fn from_replicas(
        name: &str,
        replicas: &ConfiguredReplicas,
        settings: &Settings,
        probe_login: Option<ProbeLogin>,
    ) -> RouterConfig {
        RouterConfig {
            name: name.to_string(),
            replicas: replicas.replicas.clone(),
            routing: replicas.routing.clone(),
            role_events_capacity: settings.role_events_capacity as usize,
            control_queue_capacity: DEFAULT_CONTROL_QUEUE_CAPACITY,
            claim_attempts: DEFAULT_CLAIM_ATTEMPTS,
            probe_login,
        }
    }
}

/// What a router decides with: a two-class strategy, or PLB over ranked classes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum RouterPolicy {
    /// PLB (000) or a baseline, on the paper's two classes.
    Classes(Strategy),
    /// PLB with one pool per rank (`tiers = [...]`).
    Tiers(TieredPlb),
}

impl RouterPolicy {
    /// The configuration name (`plb` for both PLB forms).
    pub const fn name(&self) -> StrategyName {
        match self {
            RouterPolicy::Classes(strategy) => strategy.name(),
            RouterPolicy::Tiers(_) => StrategyName::Plb,
        }
    }

    /// Number of classes the router tells apart: ranks past the last are served as the last.
    pub const fn classes(&self) -> u8 {
        match self {
            RouterPolicy::Classes(_) => 2,
            RouterPolicy::Tiers(plb) => plb.params().tiers,
        }
    }

    /// `class` fitted to this router's classes: a rank below the bottom one is served as the
    /// bottom one (a `tier2` user on a two-class database is freemium there).
    pub fn fit(&self, class: Tier) -> Tier {
        Tier(class.0.min(self.classes().saturating_sub(1)))
    }
}

/// Why a router could not be built from its configuration.
#[derive(Clone, Debug, PartialEq)]
pub enum RouterError {
    /// Replica list or pools are impossible.
    Layout(LayoutError),
    /// PLB parameters are impossible.
    Params(ParamError),
    /// Tiered PLB parameters are impossible.
    TierParams(TierParamError),
    /// A replica index does not fit a [`ReplicaId`].
    ReplicaIndex(usize),
}

impl fmt::Display for RouterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RouterError::Layout(error) => write!(f, "replica layout: {error}"),
            RouterError::Params(error) => write!(f, "plb parameters: {error}"),
            RouterError::TierParams(error) => write!(f, "plb tiers: {error}"),
            RouterError::ReplicaIndex(index) => write!(
                f,
                "replica index {index} is beyond the supported {MAX_REPLICAS} replicas"
            ),
        }
    }
}

impl std::error::Error for RouterError {}

fn replica_ids(indices: &[usize]) -> Result<Vec<ReplicaId>, RouterError> {
    indices
        .iter()
        .map(|&i| ReplicaId::from_index(i).ok_or(RouterError::ReplicaIndex(i)))
        .collect()
}

/// The policy and initial table for a configured routing.
pub(crate) fn policy_and_table(
    count: usize,
    routing: &Routing,
) -> Result<(RouterPolicy, RouteTable), RouterError> {
    if let Routing::Plb(settings) = routing
        && let Some(tiers) = &settings.tiers
    {
        let (plb, table) = tiered(count, tiers, settings.params)?;
        return Ok((RouterPolicy::Tiers(plb), RouteTable::Tiers(table)));
    }
    let (strategy, table) = strategy_and_table(count, routing)?;
    Ok((RouterPolicy::Classes(strategy), RouteTable::Classes(table)))
}

/// Tiered PLB and its initial table from `tiers = [...]` and the configured parameters.
fn tiered(
    count: usize,
    settings: &TierSettings,
    params: PlbParams,
) -> Result<(TieredPlb, TierTable), RouterError> {
    let pools = settings
        .pools
        .iter()
        .map(|pool| replica_ids(pool))
        .collect::<Result<Vec<_>, _>>()?;
    let pools: Vec<&[ReplicaId]> = pools.iter().map(Vec::as_slice).collect();
    let table = TierTable::new(count, params.tiers, &pools).map_err(RouterError::Layout)?;
    let plb = TieredPlb::new(params, &table).map_err(RouterError::TierParams)?;
    Ok((plb, table))
}

/// The two-class strategy and initial table for a configured routing.
fn strategy_and_table(
    count: usize,
    routing: &Routing,
) -> Result<(Strategy, RoleTable), RouterError> {
    let all_mixed = || RoleTable::all_mixed(count).map_err(RouterError::Layout);
    match routing {
        Routing::Plb(settings) => {
            let premium = replica_ids(&settings.premium)?;
            let freemium = replica_ids(&settings.freemium)?;
            let table = RoleTable::new(count, &premium, &freemium).map_err(RouterError::Layout)?;
            let signal = match settings.load_signal {
                PlbLoadSignal::Sessions => LoadSignal::Sessions,
                PlbLoadSignal::InFlight => LoadSignal::InFlight,
            };
            let plb = Plb::new(settings.params, &table)
                .map_err(RouterError::Params)?
                .with_load_signal(signal)
                .with_recovery_drain(settings.recovery_drain);
            Ok((Strategy::Plb(plb), table))
        }
        Routing::RoundRobin => Ok((Strategy::RoundRobin, all_mixed()?)),
        Routing::Dedicated(split) => {
            let premium = replica_ids(&split.premium)?;
            let freemium = replica_ids(&split.freemium)?;
            let dedicated =
                Dedicated::new(count, &premium, &freemium).map_err(RouterError::Layout)?;
            Ok((Strategy::Dedicated(dedicated), all_mixed()?))
        }
        Routing::P2c { weights } => {
            let p2c = P2c::with_weights(weights).map_err(RouterError::Layout)?;
            Ok((Strategy::P2c(p2c), all_mixed()?))
        }
        Routing::LeastSessions => Ok((Strategy::LeastSessions, all_mixed()?)),
    }
}
