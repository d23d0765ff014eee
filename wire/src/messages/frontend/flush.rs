//! Flush: asks the server to send what it has buffered, without ending the extended sequence.

use crate::codes::frontend::FLUSH;
use crate::messages::empty_message;

empty_message!(
    /// Flush ('H').
    Flush, FLUSH, "Flush"
);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages::testing::round_trip;
    use bytes::BytesMut;

    #[test]
    fn round_trips_to_fixed_bytes() {
        let mut out = BytesMut::new();
        round_trip(&Flush, &mut out);
        assert_eq!(&out[..], b"H\0\0\0\x04");
    }
}
