//! CopyDone: the sender has no more COPY data, sent by either side.

use crate::codes::frontend::COPY_DONE;
use crate::messages::empty_message;

empty_message!(
    /// CopyDone ('c'), both directions.
    CopyDone, COPY_DONE, "CopyDone"
);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages::testing::round_trip;
    use bytes::BytesMut;

    #[test]
    fn round_trips_to_fixed_bytes() {
        let mut out = BytesMut::new();
        round_trip(&CopyDone, &mut out);
        assert_eq!(&out[..], b"c\0\0\0\x04");
    }
}
