//! EmptyQueryResponse: the query string was empty (takes the place of CommandComplete).

use crate::codes::backend::EMPTY_QUERY_RESPONSE;
use crate::messages::empty_message;

empty_message!(
    /// EmptyQueryResponse ('I').
    EmptyQueryResponse, EMPTY_QUERY_RESPONSE, "EmptyQueryResponse"
);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages::testing::round_trip;
    use bytes::BytesMut;

    #[test]
    fn round_trips_to_fixed_bytes() {
        let mut out = BytesMut::new();
        round_trip(&EmptyQueryResponse, &mut out);
        assert_eq!(&out[..], b"I\0\0\0\x04");
    }
}
