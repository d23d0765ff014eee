//! Sync: ends an extended-query sequence; the server answers with exactly one ReadyForQuery.

use crate::codes::frontend::SYNC;
use crate::messages::empty_message;

empty_message!(
    /// Sync ('S').
    Sync, SYNC, "Sync"
);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages::testing::round_trip;
    use bytes::BytesMut;

    #[test]
    fn round_trips_to_fixed_bytes() {
        let mut out = BytesMut::new();
        round_trip(&Sync, &mut out);
        assert_eq!(&out[..], b"S\0\0\0\x04");
    }
}
