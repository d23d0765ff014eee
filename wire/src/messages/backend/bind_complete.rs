//! BindComplete: the Bind succeeded.

use crate::codes::backend::BIND_COMPLETE;
use crate::messages::empty_message;

empty_message!(
    /// BindComplete ('2').
    BindComplete, BIND_COMPLETE, "BindComplete"
);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages::testing::round_trip;
    use bytes::BytesMut;

    #[test]
    fn round_trips_to_fixed_bytes() {
        let mut out = BytesMut::new();
        round_trip(&BindComplete, &mut out);
        assert_eq!(&out[..], b"2\0\0\0\x04");
    }
}
