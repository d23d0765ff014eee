//! Close: releases a prepared statement or a portal.

use bytes::BytesMut;

use crate::codes::frontend::CLOSE;
use crate::error::ProtocolError;
use crate::messages::Message;
use crate::messages::frontend::Target;

/// Close ('C').
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Close<'a> {
    pub target: Target,
    pub name: &'a [u8],
}

impl<'a> Message<'a> for Close<'a> {
    const CODE: u8 = CLOSE;
    const NAME: &'static str = "Close";

    fn decode_body(body: &'a [u8]) -> Result<Self, ProtocolError> {
        let (target, name) = Target::decode_named(body, Self::NAME)?;
        Ok(Self { target, name })
    }

    fn encode(&self, out: &mut BytesMut) {
        self.target.encode_named(out, CLOSE, self.name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages::testing::{prefixes_fail, round_trip};
    use proptest::prelude::*;

    #[test]
    fn rejects_unknown_target() {
        assert!(Close::decode_body(b"Xs1\0").is_err());
    }

    proptest! {
        #[test]
        fn round_trip_any(portal: bool, name in proptest::collection::vec(1u8..=255, 0..30)) {
            let target = if portal { Target::Portal } else { Target::Statement };
            let mut out = BytesMut::new();
            round_trip(&Close { target, name: &name }, &mut out);
            prefixes_fail::<Close>(&out);
        }
    }
}
