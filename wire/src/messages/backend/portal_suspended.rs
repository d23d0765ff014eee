//! PortalSuspended: Execute reached its row limit; the portal can be resumed.

use crate::codes::backend::PORTAL_SUSPENDED;
use crate::messages::empty_message;

empty_message!(
    /// PortalSuspended ('s').
    PortalSuspended, PORTAL_SUSPENDED, "PortalSuspended"
);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages::testing::round_trip;
    use bytes::BytesMut;

    #[test]
    fn round_trips_to_fixed_bytes() {
        let mut out = BytesMut::new();
        round_trip(&PortalSuspended, &mut out);
        assert_eq!(&out[..], b"s\0\0\0\x04");
    }
}
