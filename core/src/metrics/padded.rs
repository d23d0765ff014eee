//! A value alone on its cache line(s). 128 bytes covers the adjacent-line prefetcher of x86 and
//! the 128-byte lines of some ARM cores, so counters written by different workers never share a
//! line (false sharing would turn every increment into a cross-core transfer).

use std::ops::Deref;

/// `T` aligned (and so padded) to 128 bytes.
#[repr(align(128))]
#[derive(Debug, Default)]
pub(crate) struct CachePadded<T>(pub T);

impl<T> Deref for CachePadded<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.0
    }
}
