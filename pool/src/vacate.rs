//! Emptying a pool for a client's statement that needs its database free of other sessions
//! (`DROP DATABASE`, `ALTER DATABASE ... RENAME`, `CREATE DATABASE ... TEMPLATE`): its idle
//! servers are taken out to be closed, and its warmup waits a while, so `min_pool_size` does
//! not connect to the database again while PostgreSQL waits for its sessions to end. Servers
//! checked out stay with their clients, and clients that wait still get servers opened for
//! them: those sessions are real users of the database, and PostgreSQL's answer about them
//! is the true one.

use crate::lease::CloseReason;
use crate::slice::{Closing, PoolId, PoolSlice};
use std::time::Instant;

impl<S, W: Copy> PoolSlice<S, W> {
    /// Takes every idle server of pool `id` out as leaving (into `out`; report each
    /// [`PoolSlice::left`] once its connection is closed, so its slot is given back only
    /// when its backend is gone), and opens no server for warmup before `warmup_after`.
    /// Returns how many servers were taken.
    pub fn vacate(&mut self, id: PoolId, warmup_after: Instant, out: &mut Vec<Closing<S>>) -> u32 {
        let Some(pool) = self.pool_mut(id) else {
            return 0;
        };
        pool.warmup_after = Some(
            pool.warmup_after
                .map_or(warmup_after, |at| at.max(warmup_after)),
        );
        let mut taken = 0;
        while let Some(lease) = pool.idle.pop_front() {
            pool.leave(None);
            taken += 1;
            out.push(Closing {
                pool: id,
                lease,
                reason: CloseReason::DatabaseVacated,
                leaving: true,
            });
        }
        taken
    }
}
