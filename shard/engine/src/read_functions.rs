//! The answers a reader entry gives the read-only classifier about called functions: its
//! `write_functions` and `read_only_functions` first, then what the control plane learnt of
//! the primary's `pg_proc` (through the `Routing` service, which asks for a look-up of a
//! name it does not know yet).
//!
//! It also remembers whether it was asked anything: a verdict that depended on an answer may
//! change (a look-up arrives, a DDL or a reload forgets them, another entry has other
//! overrides), so only a verdict that asked nothing may be kept with a named statement.

use std::cell::Cell;

use pgtier_core::config::FunctionOverrides;
use pgtier_wire::read_only::{Access, Callee, Functions};

use crate::services::Routing;

/// The answers for one database entry's texts.
pub struct EntryFunctions<'a> {
    routing: &'a dyn Routing,
    database: &'a str,
    overrides: Option<&'a FunctionOverrides>,
    asked: Cell<bool>,
}

impl<'a> EntryFunctions<'a> {
    /// Answers for `database`, with its overrides (`None`: an entry without them).
    pub fn new(
        routing: &'a dyn Routing,
        database: &'a str,
        overrides: Option<&'a FunctionOverrides>,
    ) -> EntryFunctions<'a> {
        EntryFunctions {
            routing,
            database,
            overrides,
            asked: Cell::new(false),
        }
    }

    /// Whether a classification since [`EntryFunctions::forget_asked`] depended on an answer.
    pub(crate) fn was_asked(&self) -> bool {
        self.asked.get()
    }

    pub(crate) fn forget_asked(&self) {
        self.asked.set(false);
    }

    /// Whether verdicts of texts that ask nothing hold for this entry as for any other.
    pub fn checks_built_ins(&self) -> bool {
        self.overrides.is_some_and(|o| !o.write.is_empty())
    }
}

impl Functions for EntryFunctions<'_> {
    fn checks_built_ins(&self) -> bool {
        EntryFunctions::checks_built_ins(self)
    }

    fn access(&self, callee: &Callee<'_>) -> Option<Access> {
        self.asked.set(true);
        let overridden = self.overrides.and_then(|o| o.read_only(callee.name));
        let read_only = match overridden {
            Some(read_only) => read_only,
            // Asked only because a write list exists: the allow-list stands.
            None if callee.built_in => return None,
            None => self
                .routing
                .function_read_only(self.database, callee.schema, callee.name)?,
        };
        Some(if read_only {
            Access::ReadOnly
        } else {
            Access::Write
        })
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use pgtier_core::config::FunctionNames;
    use pgtier_wire::read_only::{CalleeSchema, classify_using};

    use super::*;
    use crate::services::{
        Admission, AdmissionReply, FailureCause, NoRouting, ReplicaLease, Routing,
    };

    /// Knows `stable_fn` as read-only and `volatile_fn` as a write; records look-ups.
    #[derive(Default)]
    struct Catalogue {
        asked: RefCell<Vec<String>>,
    }

    impl Routing for Catalogue {
        fn is_routed(&self, database: &str) -> bool {
            NoRouting.is_routed(database)
        }
        fn admit(&self, database: &str, class: pgtier_policy::tiers::Tier, id: u64) -> Admission {
            NoRouting.admit(database, class, id)
        }
        fn repin(&self, lease: Box<dyn ReplicaLease>, id: u64) -> Admission {
            NoRouting.repin(lease, id)
        }
        fn poll_reply(&self) -> Option<AdmissionReply> {
            None
        }
        fn report_failure(&self, _: &str, _: std::net::SocketAddr, _: FailureCause) {}
        fn is_down(&self, _: &str, _: std::net::SocketAddr) -> bool {
            false
        }
        fn function_read_only(
            &self,
            database: &str,
            schema: CalleeSchema,
            name: &[u8],
        ) -> Option<bool> {
            assert_eq!((database, schema), ("app", CalleeSchema::Unqualified));
            let name = String::from_utf8_lossy(name).into_owned();
            self.asked.borrow_mut().push(name.clone());
            match name.as_str() {
                "stable_fn" => Some(true),
                "volatile_fn" => Some(false),
                _ => None,
            }
        }
    }

    fn overrides(read_only: &[&str], write: &[&str]) -> FunctionOverrides {
        let names = |list: &[&str]| {
            FunctionNames::parse(&list.iter().map(|n| n.to_string()).collect::<Vec<_>>())
                .unwrap_or_else(|reason| panic!("{reason}"))
        };
        FunctionOverrides {
            read_only: names(read_only),
            write: names(write),
        }
    }

    fn classify(functions: &EntryFunctions<'_>, text: &str) -> Access {
        functions.forget_asked();
        classify_using(text.as_bytes(), true, functions)
    }

    #[test]
    fn the_catalogue_decides_unless_an_override_does() {
        let catalogue = Catalogue::default();
        let none = EntryFunctions::new(&catalogue, "app", None);
        assert_eq!(classify(&none, "SELECT stable_fn()"), Access::ReadOnly);
        assert!(none.was_asked());
        assert_eq!(classify(&none, "SELECT volatile_fn()"), Access::Write);
        assert_eq!(classify(&none, "SELECT unknown_fn()"), Access::Write);
        assert_eq!(classify(&none, "SELECT lower('A')"), Access::ReadOnly);
        assert!(!none.was_asked(), "the allow-list asks nothing");

        let lists = overrides(&["volatile_fn", "both"], &["stable_fn", "lower", "both"]);
        let with = EntryFunctions::new(&catalogue, "app", Some(&lists));
        catalogue.asked.borrow_mut().clear();
        assert_eq!(classify(&with, "SELECT stable_fn()"), Access::Write);
        assert_eq!(classify(&with, "SELECT volatile_fn()"), Access::ReadOnly);
        assert_eq!(
            classify(&with, "SELECT both()"),
            Access::Write,
            "write wins"
        );
        assert_eq!(classify(&with, "SELECT lower('A')"), Access::Write);
        assert_eq!(classify(&with, "SELECT upper('a')"), Access::ReadOnly);
        assert!(with.was_asked());
        assert!(
            catalogue.asked.borrow().is_empty(),
            "overrides and built-ins need no look-up"
        );
    }
}
