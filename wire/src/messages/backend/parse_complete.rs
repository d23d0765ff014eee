//! ParseComplete: the Parse succeeded.

use crate::codes::backend::PARSE_COMPLETE;
use crate::messages::empty_message;

empty_message!(
    /// ParseComplete ('1').
    ParseComplete, PARSE_COMPLETE, "ParseComplete"
);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages::testing::round_trip;
    use bytes::BytesMut;

    #[test]
    fn round_trips_to_fixed_bytes() {
        let mut out = BytesMut::new();
        round_trip(&ParseComplete, &mut out);
        assert_eq!(&out[..], b"1\0\0\0\x04");
    }
}
