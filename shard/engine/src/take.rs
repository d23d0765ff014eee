//! Taking the front of an input buffer as `Bytes` to send on, without the allocation a split
//! costs when the front is the whole buffer.
//!
//! A fresh receive buffer is a plain vector inside `BytesMut`; `split_to` on it first moves
//! the vector behind a shared, counted header (one allocation, and one more free when the
//! last piece is sent). A transaction's query and its answer usually arrive as one receive
//! each and leave whole, so the common case takes the buffer itself and freezes it, which
//! keeps the plain vector.

use bytes::{Bytes, BytesMut};

/// The first `len` bytes of `input`, which keeps the rest. `len` must not exceed
/// `input.len()` (as for `BytesMut::split_to`).
pub(crate) fn take_front(input: &mut BytesMut, len: usize) -> Bytes {
    if len == input.len() {
        std::mem::take(input).freeze()
    } else {
        input.split_to(len).freeze()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_whole_buffer_leaves_and_the_input_is_empty() {
        let mut input = BytesMut::from(&b"Q\0\0\0\x0dSELECT 1\0"[..]);
        let len = input.len();
        let taken = take_front(&mut input, len);
        assert_eq!(&taken[..], b"Q\0\0\0\x0dSELECT 1\0");
        assert!(input.is_empty());
        input.extend_from_slice(b"next");
        assert_eq!(&input[..], b"next");
        assert_eq!(
            &taken[..],
            b"Q\0\0\0\x0dSELECT 1\0",
            "the taken bytes are untouched"
        );
    }

    #[test]
    fn a_front_leaves_and_the_rest_stays() {
        let mut input = BytesMut::from(&b"abcdef"[..]);
        let front = take_front(&mut input, 2);
        assert_eq!(&front[..], b"ab");
        assert_eq!(&input[..], b"cdef");
        let rest = take_front(&mut input, 4);
        assert_eq!(&rest[..], b"cdef");
        assert!(input.is_empty());
        assert_eq!(&take_front(&mut input, 0)[..], b"");
    }
}
