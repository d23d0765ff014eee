//! The configuration file exactly as serde reads it, before cross-field checks. Fields that
//! inherit a global value or need checks against other fields are `Option`s or strings here;
//! `validate` turns them into the typed structs of `database`.

use super::database::{RoutingKind, RywScope, UserConfig};
use super::seconds::Seconds;
use super::settings::{PoolMode, Settings};
use crate::class::ClassSetting;
use serde::Deserialize;
use std::collections::BTreeMap;

/// The whole file.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(super) struct FileRaw {
    pub pgtier: Settings,
    pub databases: BTreeMap<String, DatabaseRaw>,
    pub users: BTreeMap<String, UserConfig>,
    pub peers: BTreeMap<String, super::peers::PeerRaw>,
}

/// One `[databases.NAME]` table.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct DatabaseRaw {
    pub host: Option<String>,
    pub port: Option<u16>,
    pub load_balance_hosts: Option<super::database::LoadBalanceHosts>,
    pub target_session_attrs: Option<super::database::TargetSessionAttrs>,
    pub dbname: Option<String>,
    pub user: Option<String>,
    pub password: Option<String>,
    pub pool_size: Option<u32>,
    pub min_pool_size: Option<u32>,
    pub reserve_pool_size: Option<u32>,
    pub pool_mode: Option<PoolMode>,
    pub max_db_connections: Option<u32>,
    pub max_db_client_connections: Option<u32>,
    pub server_lifetime: Option<Seconds>,
    pub query_wait_timeout: Option<Seconds>,
    pub auth_user: Option<String>,
    pub auth_query: Option<String>,
    pub auth_dbname: Option<String>,
    pub connect_query: Option<String>,
    pub client_encoding: Option<String>,
    pub datestyle: Option<String>,
    pub timezone: Option<String>,
    pub application_name: Option<String>,
    pub replicas: Option<Vec<String>>,
    pub routing: Option<RoutingKind>,
    pub class: Option<ClassSetting>,
    pub weights: Option<Vec<u32>>,
    pub plb: Option<PlbRaw>,
    pub dedicated: Option<DedicatedRaw>,
    pub primary: Option<String>,
    pub read_your_writes: Option<bool>,
    pub read_your_writes_timeout: Option<Seconds>,
    pub read_your_writes_scope: Option<RywScope>,
    pub max_replica_lag_bytes: Option<u64>,
    pub max_replica_lag_seconds: Option<Seconds>,
    pub plb_per_transaction: Option<bool>,
    pub read_only_functions: Option<Vec<String>>,
    pub write_functions: Option<Vec<String>>,
}

/// `[databases.NAME.plb]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct PlbRaw {
    /// Required unless `tiers` lists the pools (checked in validation, which names the key).
    pub premium: Option<Vec<String>>,
    pub freemium: Option<Vec<String>>,
    pub theta_premium: Option<u32>,
    pub theta_freemium: Option<u32>,
    pub alpha_premium: Option<f64>,
    pub alpha_freemium: Option<f64>,
    pub freemium_floor: Option<u32>,
    pub premium_target: Option<u32>,
    pub freemium_target: Option<u32>,
    pub load_signal: Option<super::database::PlbLoadSignal>,
    pub recovery_drain: Option<bool>,
    /// More than two classes: one initial pool per rank, most important first.
    #[serde(default)]
    pub tiers: Vec<Vec<String>>,
    pub tier_theta: Option<Vec<u32>>,
    pub tier_alpha: Option<Vec<f64>>,
    pub tier_floor: Option<Vec<u32>>,
    pub tier_target: Option<Vec<u32>>,
    pub reclaim: Option<bool>,
}

/// `[databases.NAME.dedicated]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct DedicatedRaw {
    pub premium: Vec<String>,
    pub freemium: Vec<String>,
}
