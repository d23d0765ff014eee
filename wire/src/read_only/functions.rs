//! The classifier's question about a called function it cannot judge from its allow-list:
//! "may a text that calls this run on a replica?", answered by the caller.
//!
//! The classifier stays pure: it never reads a catalogue. Its caller (pgtier's engine) answers
//! from configured overrides and from a cache of the primary's `pg_proc` that the control
//! plane fills; a name nobody knows yet is a write, so the answer may only turn a write into
//! a read once someone has looked, never the other way round by guessing.

use super::Access;
use super::names::is_known_function;

/// PostgreSQL's NAMEDATALEN: a name is at most one byte shorter. A longer one (which
/// PostgreSQL would truncate) is a write without being asked about.
const NAME_CAP: usize = 64;

/// Where a called name is looked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CalleeSchema {
    /// An unqualified name, resolved by the session's search_path.
    Unqualified,
    /// `pg_catalog.name`.
    PgCatalog,
}

/// One called function, as PostgreSQL would look it up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Callee<'a> {
    /// The name as the catalogue spells it: folded to lower case when written unquoted, as
    /// written between double quotes otherwise. At most 63 bytes (longer names are writes
    /// without being asked about).
    pub name: &'a [u8],
    pub schema: CalleeSchema,
    /// The name is on the classifier's allow-list of built-ins (asked about only when
    /// [`Functions::checks_built_ins`] says so).
    pub built_in: bool,
}

/// Answers for functions beyond the allow-list.
pub trait Functions {
    /// Whether [`Functions::access`] is asked about allow-listed built-ins too (a configured
    /// override names one). Asked once per text, so that the allow-listed path makes no call
    /// when it is false.
    fn checks_built_ins(&self) -> bool;

    /// Where a text calling `callee` may run as far as that call goes: `ReadOnly`, `Write`, or
    /// `None` when it is not known (then a write, unless it is an allow-listed built-in).
    fn access(&self, callee: &Callee<'_>) -> Option<Access>;
}

/// No answers: the allow-list alone decides.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct BuiltInsOnly;

impl Functions for BuiltInsOnly {
    fn checks_built_ins(&self) -> bool {
        false
    }

    fn access(&self, _callee: &Callee<'_>) -> Option<Access> {
        None
    }
}

/// What a scan carries about functions: the answerer and its one per-text question.
#[derive(Clone, Copy)]
pub(super) struct Calls<'f> {
    functions: &'f dyn Functions,
    check_built_ins: bool,
}

impl<'f> Calls<'f> {
    pub(super) fn new(functions: &'f dyn Functions) -> Calls<'f> {
        Calls {
            functions,
            check_built_ins: functions.checks_built_ins(),
        }
    }

    /// An allow-listed built-in that no override can name: read-only without asking.
    pub(super) fn is_plain_built_in(&self, word: &[u8]) -> bool {
        !self.check_built_ins && is_known_function(word)
    }

    /// Whether calling the unquoted name `word` in `schema` leaves the text read-only.
    pub(super) fn allows_word(&self, word: &[u8], schema: CalleeSchema) -> bool {
        let built_in = is_known_function(word);
        if built_in && !self.check_built_ins {
            // The allow-listed path: no fold, no call.
            return true;
        }
        if word.len() >= NAME_CAP {
            return false;
        }
        let mut buf = [0; NAME_CAP];
        let name = &mut buf[..word.len()];
        name.copy_from_slice(word);
        name.make_ascii_lowercase();
        self.allows(&Callee {
            name,
            schema,
            built_in,
        })
    }

    /// Whether calling the quoted name `name` (its bytes between the quotes) in `schema`
    /// leaves the text read-only. A doubled quote inside is not undone: such a name is a
    /// write.
    pub(super) fn allows_quoted(&self, name: &[u8], schema: CalleeSchema) -> bool {
        if name.len() >= NAME_CAP || memchr::memchr(b'"', name).is_some() {
            return false;
        }
        self.allows(&Callee {
            name,
            schema,
            built_in: false,
        })
    }

    fn allows(&self, callee: &Callee<'_>) -> bool {
        match self.functions.access(callee) {
            Some(access) => access == Access::ReadOnly,
            None => callee.built_in,
        }
    }
}
