//! CloseComplete: the Close succeeded.

use crate::codes::backend::CLOSE_COMPLETE;
use crate::messages::empty_message;

empty_message!(
    /// CloseComplete ('3').
    CloseComplete, CLOSE_COMPLETE, "CloseComplete"
);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages::testing::round_trip;
    use bytes::BytesMut;

    #[test]
    fn round_trips_to_fixed_bytes() {
        let mut out = BytesMut::new();
        round_trip(&CloseComplete, &mut out);
        assert_eq!(&out[..], b"3\0\0\0\x04");
    }
}
