//! Terminate: the client is closing the connection.

use crate::codes::frontend::TERMINATE;
use crate::messages::empty_message;

empty_message!(
    /// Terminate ('X').
    Terminate, TERMINATE, "Terminate"
);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages::Message;
    use crate::messages::testing::round_trip;
    use bytes::BytesMut;

    #[test]
    fn round_trips_and_rejects_a_body() {
        let mut out = BytesMut::new();
        round_trip(&Terminate, &mut out);
        assert_eq!(&out[..], b"X\0\0\0\x04");
        assert!(Terminate::decode_frame(b"X\0\0\0\x05x").is_err());
    }
}
