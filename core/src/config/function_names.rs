//! `read_only_functions` and `write_functions`: names of functions whose calls the read-only
//! classifier of a reader entry takes as read-only, or as writes, whatever the allow-list or
//! the primary's catalogue say (Pgpool-II's `read_only_function_list` and
//! `write_function_list`, with exact names instead of regular expressions).
//!
//! A name is written as in SQL: unquoted it is folded to lower case, as PostgreSQL folds an
//! identifier; in double quotes it is taken as written. It is matched against calls of that
//! name unqualified or qualified by `pg_catalog` (a call in another schema is always a
//! write).

/// PostgreSQL's NAMEDATALEN: longer names do not exist in a catalogue.
const MAX_NAME_BYTES: usize = 63;

/// A sorted set of catalogue spellings.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FunctionNames(Box<[Box<[u8]>]>);

impl FunctionNames {
    /// The set of `names` as written in the file; the error says which name is not one.
    pub fn parse(names: &[String]) -> Result<FunctionNames, String> {
        let mut spelled = names
            .iter()
            .map(|name| catalogue_spelling(name).ok_or_else(|| format!("{name:?} is not a function name: write an identifier, or a name in double quotes")))
            .collect::<Result<Vec<_>, _>>()?;
        spelled.sort();
        spelled.dedup();
        Ok(FunctionNames(spelled.into_boxed_slice()))
    }

    pub fn contains(&self, name: &[u8]) -> bool {
        self.0.binary_search_by(|n| (**n).cmp(name)).is_ok()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The names as the catalogue spells them, sorted.
    pub fn iter(&self) -> impl Iterator<Item = &[u8]> {
        self.0.iter().map(|name| &**name)
    }
}

/// The two override lists of an entry.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FunctionOverrides {
    /// `read_only_functions`.
    pub read_only: FunctionNames,
    /// `write_functions` (wins over `read_only`).
    pub write: FunctionNames,
}

impl FunctionOverrides {
    /// What the lists say about a call of `name` (catalogue spelling): `Some(true)` read-only,
    /// `Some(false)` a write, `None` nothing.
    pub fn read_only(&self, name: &[u8]) -> Option<bool> {
        if self.write.contains(name) {
            Some(false)
        } else if self.read_only.contains(name) {
            Some(true)
        } else {
            None
        }
    }
}

/// `name` as the catalogue spells it: `"Exact"` unquoted, an identifier folded to lower case.
fn catalogue_spelling(name: &str) -> Option<Box<[u8]>> {
    let spelled: Vec<u8> = match name.strip_prefix('"').and_then(|n| n.strip_suffix('"')) {
        Some(exact) if !exact.is_empty() && !exact.contains('"') => exact.as_bytes().to_vec(),
        Some(_) => return None,
        None => {
            let mut bytes = name.bytes();
            let first_ok = bytes
                .next()
                .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_' || b >= 0x80);
            let rest_ok =
                bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'$' || b >= 0x80);
            if !first_ok || !rest_ok {
                return None;
            }
            name.to_ascii_lowercase().into_bytes()
        }
    };
    (spelled.len() <= MAX_NAME_BYTES).then(|| spelled.into_boxed_slice())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Result<FunctionNames, String> {
        FunctionNames::parse(&list.iter().map(|n| n.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn names_fold_unless_quoted() {
        let Ok(set) = names(&["My_Fn", "\"Exact\"", "my_fn"]) else {
            panic!("valid names refused");
        };
        assert!(set.contains(b"my_fn") && set.contains(b"Exact"));
        assert!(!set.contains(b"My_Fn") && !set.contains(b"exact"));
        assert_eq!(set.iter().count(), 2);
    }

    #[test]
    fn what_is_not_a_name_is_refused() {
        for bad in ["", "a.b", "f()", "1f", "\"\"", "\"a\"b\"", &"f".repeat(64)] {
            assert!(names(&[bad]).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn write_functions_win() {
        let (Ok(read_only), Ok(write)) = (names(&["a", "b"]), names(&["b"])) else {
            panic!("valid names refused");
        };
        let overrides = FunctionOverrides { read_only, write };
        assert_eq!(overrides.read_only(b"a"), Some(true));
        assert_eq!(overrides.read_only(b"b"), Some(false));
        assert_eq!(overrides.read_only(b"c"), None);
    }
}
