//! A minimal DER reader for the parts of X.509 pgtier reads itself ([`super::x509`],
//! [`super::certificate`]). Input may come from an unauthenticated peer: every read is
//! bounds-checked and malformed input gives `None`, never a panic.

/// DER tags used when reading certificates.
pub(super) const BOOLEAN: u8 = 0x01;
pub(super) const INTEGER: u8 = 0x02;
pub(super) const BIT_STRING: u8 = 0x03;
pub(super) const OCTET_STRING: u8 = 0x04;
pub(super) const OID: u8 = 0x06;
pub(super) const UTF8_STRING: u8 = 0x0c;
pub(super) const PRINTABLE_STRING: u8 = 0x13;
pub(super) const T61_STRING: u8 = 0x14;
pub(super) const IA5_STRING: u8 = 0x16;
pub(super) const UTC_TIME: u8 = 0x17;
pub(super) const GENERALIZED_TIME: u8 = 0x18;
pub(super) const BMP_STRING: u8 = 0x1e;
pub(super) const SEQUENCE: u8 = 0x30;
pub(super) const SET: u8 = 0x31;

/// One DER element: its tag, its contents, and the whole encoding (tag, length, contents).
#[derive(Clone, Copy, Debug)]
pub(super) struct Element<'a> {
    pub(super) tag: u8,
    pub(super) contents: &'a [u8],
    pub(super) encoded: &'a [u8],
}

/// Reads the element at the start of `input`; returns it and what follows.
pub(super) fn element(input: &[u8]) -> Option<(Element<'_>, &[u8])> {
    let (&tag, rest) = input.split_first()?;
    if tag & 0x1f == 0x1f {
        return None; // multi-byte tags do not occur in the parts read here
    }
    let (&first, rest) = rest.split_first()?;
    let (length, rest) = match first {
        0..=0x7f => (usize::from(first), rest),
        0x81..=0x84 => {
            let count = usize::from(first & 0x7f);
            let bytes = rest.get(..count)?;
            let length = bytes
                .iter()
                .fold(0usize, |length, byte| (length << 8) | usize::from(*byte));
            (length, rest.get(count..)?)
        }
        _ => return None, // indefinite or absurd lengths
    };
    let contents = rest.get(..length)?;
    let header_bytes = input.len() - rest.len();
    let encoded = input.get(..header_bytes + length)?;
    let element = Element {
        tag,
        contents,
        encoded,
    };
    Some((element, rest.get(length..)?))
}

/// The element at the start of `input` if it has `tag`, and what follows.
pub(super) fn expect(input: &[u8], tag: u8) -> Option<(Element<'_>, &[u8])> {
    let (found, rest) = element(input)?;
    (found.tag == tag).then_some((found, rest))
}

/// The element at the start of `input` if it has `tag`; otherwise `None` and `input` as it was
/// (for OPTIONAL and DEFAULT fields).
pub(super) fn optional(input: &[u8], tag: u8) -> (Option<Element<'_>>, &[u8]) {
    match expect(input, tag) {
        Some((found, rest)) => (Some(found), rest),
        None => (None, input),
    }
}

/// The contents of a BIT STRING with no unused bits (keys and signatures).
pub(super) fn whole_bytes<'a>(bit_string: &Element<'a>) -> Option<&'a [u8]> {
    if bit_string.tag != BIT_STRING {
        return None;
    }
    match bit_string.contents.split_first()? {
        (0, bytes) => Some(bytes),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_lengths_and_truncation() {
        let (found, rest) = element(&[0x04, 0x81, 0x02, 1, 2, 9]).unwrap();
        assert_eq!(found.contents, &[1, 2]);
        assert_eq!(found.encoded, &[0x04, 0x81, 0x02, 1, 2]);
        assert_eq!(rest, &[9]);
        assert!(element(&[0x04, 0x81, 0x03, 1, 2]).is_none());
        assert!(element(&[0x04, 0x80, 0x00]).is_none());
        assert!(element(&[0x04, 0x85, 1, 1, 1, 1, 1]).is_none());
        assert!(element(&[0x1f, 0x01, 0x00]).is_none());
        assert!(element(&[]).is_none());
    }

    #[test]
    fn optional_fields_leave_the_input_alone() {
        let input = [0x02, 0x01, 0x05];
        let (absent, rest) = optional(&input, BOOLEAN);
        assert!(absent.is_none());
        assert_eq!(rest, &input);
        let (present, rest) = optional(&input, INTEGER);
        assert_eq!(present.map(|found| found.contents), Some(&[0x05][..]));
        assert!(rest.is_empty());
    }

    #[test]
    fn bit_strings_must_be_whole_bytes() {
        let (bits, _) = element(&[0x03, 0x03, 0x00, 0xab, 0xcd]).unwrap();
        assert_eq!(whole_bytes(&bits), Some(&[0xab, 0xcd][..]));
        let (partial, _) = element(&[0x03, 0x02, 0x04, 0xf0]).unwrap();
        assert_eq!(whole_bytes(&partial), None);
        let (empty, _) = element(&[0x03, 0x00]).unwrap();
        assert_eq!(whole_bytes(&empty), None);
    }
}
