//! The session parameters pgtier keeps in step between a client and whichever server it is
//! given (PgBouncer's tracked set), re-exported from the pool crate, which keeps each pool's
//! welcome and spellings in the same terms.

pub use pgtier_pool::{Spellings, TrackedParams, tracked_index};
