//! Helpers for the engine's unit tests.

use pgtier_pool::{PoolId, PoolKey, PoolLimits, PoolSlice, ServerTarget, StartupProfile};

/// A pool id from a throw-away slice (ids are opaque outside the pool crate).
pub fn pool_id() -> PoolId {
    let mut slice: PoolSlice<u32, u32> = PoolSlice::new(1, 1);
    let key = PoolKey::new(
        "db".into(),
        "user".into(),
        ServerTarget::Primary,
        StartupProfile::default(),
    );
    let limits = PoolLimits::with_budget(std::sync::Arc::new(pgtier_pool::PoolBudget::new(1, 0)));
    match slice.register(&key, &limits, std::time::Instant::now()) {
        Ok(id) => id,
        Err(error) => panic!("registering a test pool: {error}"),
    }
}
