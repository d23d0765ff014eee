//! Finding the NUL that ends a string in a client's message. Statement and portal names are
//! usually empty (a driver that runs its queries unnamed sends empty names in every Parse,
//! Bind and Describe), and memchr's vector set-up costs tens of instructions on any
//! string, so the first byte is looked at first.

/// The index of the first NUL in `bytes`.
#[inline]
pub(crate) fn nul_at(bytes: &[u8]) -> Option<usize> {
    match bytes.first() {
        Some(0) => Some(0),
        Some(_) => memchr::memchr(0, bytes),
        None => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_nul_is_found_at_the_start_or_further_on() {
        assert_eq!(nul_at(b"\0s1\0"), Some(0));
        assert_eq!(nul_at(b"s1\0\0"), Some(2));
        assert_eq!(nul_at(b"s1"), None);
        assert_eq!(nul_at(b""), None);
    }
}
