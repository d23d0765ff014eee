//! Randomness as an input. SCRAM nonces, MD5 salts and cancel keys must be unpredictable, so
//! the engine draws them from a [`Random`] its driver provides (the OS generator in the
//! proxy, a seeded one in tests and fuzzing). A generator that fails is a refused login,
//! never a weaker value: there is no clock-based fallback.

/// The generator could not produce bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RandomUnavailable;

impl std::fmt::Display for RandomUnavailable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("no random bytes are available")
    }
}

/// A source of unpredictable bytes.
pub trait Random {
    /// Fills `out` entirely, or fails without using a partial result.
    fn fill(&mut self, out: &mut [u8]) -> Result<(), RandomUnavailable>;
}

/// `N` bytes from `random`.
pub fn bytes<const N: usize>(random: &mut dyn Random) -> Result<[u8; N], RandomUnavailable> {
    let mut out = [0u8; N];
    random.fill(&mut out)?;
    Ok(out)
}

/// A deterministic generator (xorshift64*) for tests and fuzzing. Never for production.
#[derive(Debug, Clone)]
pub struct SeededRandom {
    state: u64,
}

impl SeededRandom {
    pub fn new(seed: u64) -> SeededRandom {
        SeededRandom { state: seed | 1 }
    }
}

impl Random for SeededRandom {
    fn fill(&mut self, out: &mut [u8]) -> Result<(), RandomUnavailable> {
        for chunk in out.chunks_mut(8) {
            self.state ^= self.state >> 12;
            self.state ^= self.state << 25;
            self.state ^= self.state >> 27;
            let word = self.state.wrapping_mul(0x2545_f491_4f6c_dd1d).to_le_bytes();
            chunk.copy_from_slice(&word[..chunk.len()]);
        }
        Ok(())
    }
}

/// A generator that always fails, to test that the engine fails closed.
#[cfg(test)]
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct NoRandom;

#[cfg(test)]
impl Random for NoRandom {
    fn fill(&mut self, _out: &mut [u8]) -> Result<(), RandomUnavailable> {
        Err(RandomUnavailable)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeded_output_is_repeatable_and_fills_odd_lengths() {
        let (mut a, mut b) = (SeededRandom::new(7), SeededRandom::new(7));
        let (mut x, mut y) = ([0u8; 13], [0u8; 13]);
        a.fill(&mut x).expect("fill");
        b.fill(&mut y).expect("fill");
        assert_eq!(x, y);
        assert!(x.iter().any(|&byte| byte != 0));
    }

    #[test]
    fn a_failing_generator_gives_no_bytes() {
        assert_eq!(bytes::<4>(&mut NoRandom), Err(RandomUnavailable));
    }
}
