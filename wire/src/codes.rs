//! Message type bytes of protocol 3.0, one constant per message and direction, plus
//! [`CodeSet`], a constant-time membership set used to stop a scan before chosen messages.

/// Type bytes of messages a client sends.
pub mod frontend {
    pub const BIND: u8 = b'B';
    pub const CLOSE: u8 = b'C';
    pub const COPY_DATA: u8 = b'd';
    pub const COPY_DONE: u8 = b'c';
    pub const COPY_FAIL: u8 = b'f';
    pub(crate) const DESCRIBE: u8 = b'D';
    pub const EXECUTE: u8 = b'E';
    pub(crate) const FLUSH: u8 = b'H';
    pub(crate) const FUNCTION_CALL: u8 = b'F';
    pub const PARSE: u8 = b'P';
    /// PasswordMessage, SASLInitialResponse, SASLResponse and GSSResponse share this byte.
    pub(crate) const AUTH_RESPONSE: u8 = b'p';
    pub const QUERY: u8 = b'Q';
    pub(crate) const SYNC: u8 = b'S';
    pub const TERMINATE: u8 = b'X';
}

/// Type bytes of messages a server sends.
pub mod backend {
    pub(crate) const AUTHENTICATION: u8 = b'R';
    pub(crate) const BACKEND_KEY_DATA: u8 = b'K';
    pub(crate) const BIND_COMPLETE: u8 = b'2';
    pub(crate) const CLOSE_COMPLETE: u8 = b'3';
    pub(crate) const COMMAND_COMPLETE: u8 = b'C';
    pub const COPY_DATA: u8 = b'd';
    pub const COPY_DONE: u8 = b'c';
    pub(crate) const COPY_IN_RESPONSE: u8 = b'G';
    pub(crate) const COPY_OUT_RESPONSE: u8 = b'H';
    pub(crate) const COPY_BOTH_RESPONSE: u8 = b'W';
    pub(crate) const DATA_ROW: u8 = b'D';
    pub(crate) const EMPTY_QUERY_RESPONSE: u8 = b'I';
    pub(crate) const ERROR_RESPONSE: u8 = b'E';
    pub(crate) const FUNCTION_CALL_RESPONSE: u8 = b'V';
    pub(crate) const NEGOTIATE_PROTOCOL_VERSION: u8 = b'v';
    pub(crate) const NO_DATA: u8 = b'n';
    pub(crate) const NOTICE_RESPONSE: u8 = b'N';
    pub(crate) const NOTIFICATION_RESPONSE: u8 = b'A';
    pub(crate) const PARAMETER_DESCRIPTION: u8 = b't';
    pub(crate) const PARAMETER_STATUS: u8 = b'S';
    pub(crate) const PARSE_COMPLETE: u8 = b'1';
    pub(crate) const PORTAL_SUSPENDED: u8 = b's';
    pub(crate) const READY_FOR_QUERY: u8 = b'Z';
    pub(crate) const ROW_DESCRIPTION: u8 = b'T';
}

/// A set of type bytes, tested in one shift and mask.
#[derive(Clone, Copy, PartialEq, Eq, Default)]
pub struct CodeSet([u64; 4]);

impl CodeSet {
    /// The empty set: a scan that stops at nothing.
    pub const EMPTY: Self = Self([0; 4]);

    /// Builds a set in a `const` context, e.g. `CodeSet::of(b"ZEAN")`.
    pub const fn of(codes: &[u8]) -> Self {
        let mut words = [0u64; 4];
        let mut i = 0;
        while i < codes.len() {
            let code = codes[i] as usize;
            words[code / 64] |= 1 << (code % 64);
            i += 1;
        }
        Self(words)
    }

    pub const fn contains(&self, code: u8) -> bool {
        let code = code as usize;
        self.0[code / 64] & (1 << (code % 64)) != 0
    }

    pub const fn with(mut self, code: u8) -> Self {
        let code = code as usize;
        self.0[code / 64] |= 1 << (code % 64);
        self
    }
}

impl core::fmt::Debug for CodeSet {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_set()
            .entries((0..=255u8).filter(|c| self.contains(*c)).map(|c| c as char))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn code_set_membership() {
        let set = CodeSet::of(b"ZE\xff\x00");
        for code in 0..=255u8 {
            assert_eq!(set.contains(code), b"ZE\xff\x00".contains(&code), "{code}");
        }
        assert!(!CodeSet::EMPTY.contains(b'Z'));
        assert!(CodeSet::EMPTY.with(b'Z').contains(b'Z'));
    }
}
