//! The engine's randomness from the operating system (`getrandom`). It fails closed: a
//! system without an entropy source refuses logins instead of using predictable nonces.

use pgtier_engine::{Random, RandomUnavailable};

#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct OsRandom;

impl Random for OsRandom {
    fn fill(&mut self, out: &mut [u8]) -> Result<(), RandomUnavailable> {
        pgtier_wire::auth::os_random(out).map_err(|_| RandomUnavailable)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fills_the_whole_buffer() {
        let mut out = [0u8; 32];
        OsRandom.fill(&mut out).expect("entropy");
        assert!(out.iter().any(|&byte| byte != 0));
    }
}
