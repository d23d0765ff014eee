//! NoData: the described statement or portal returns no rows.

use crate::codes::backend::NO_DATA;
use crate::messages::empty_message;

empty_message!(
    /// NoData ('n').
    NoData, NO_DATA, "NoData"
);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages::testing::round_trip;
    use bytes::BytesMut;

    #[test]
    fn round_trips_to_fixed_bytes() {
        let mut out = BytesMut::new();
        round_trip(&NoData, &mut out);
        assert_eq!(&out[..], b"n\0\0\0\x04");
    }
}
