//! The read-only classifier with a function lookup: names beyond the allow-list are asked
//! about (folded as PostgreSQL folds them, with their schema), the answer decides, and a name
//! nobody knows stays a write; allow-listed built-ins are asked about only when the lookup
//! checks built-ins (a configured override names one).

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::cell::RefCell;

use pgtier_wire::read_only::{Access, Callee, CalleeSchema, Functions, classify, classify_using};

/// Answers from a fixed list and records every question.
struct Listed {
    answers: Vec<(&'static str, CalleeSchema, Access)>,
    checks_built_ins: bool,
    asked: RefCell<Vec<(String, CalleeSchema, bool)>>,
}

impl Listed {
    fn new(answers: &[(&'static str, CalleeSchema, Access)]) -> Listed {
        Listed {
            answers: answers.to_vec(),
            checks_built_ins: false,
            asked: RefCell::new(Vec::new()),
        }
    }

    fn classify(&self, text: &str) -> Access {
        self.asked.borrow_mut().clear();
        classify_using(text.as_bytes(), true, self)
    }

    fn asked(&self) -> Vec<(String, CalleeSchema, bool)> {
        self.asked.borrow().clone()
    }
}

impl Functions for Listed {
    fn checks_built_ins(&self) -> bool {
        self.checks_built_ins
    }

    fn access(&self, callee: &Callee<'_>) -> Option<Access> {
        let name = String::from_utf8(callee.name.to_vec()).unwrap();
        self.asked
            .borrow_mut()
            .push((name.clone(), callee.schema, callee.built_in));
        self.answers
            .iter()
            .find(|(n, schema, _)| *n == name && *schema == callee.schema)
            .map(|(_, _, access)| *access)
    }
}

use Access::{ReadOnly, Write};
use CalleeSchema::{PgCatalog, Unqualified};

#[test]
fn a_known_stable_function_is_read_only_and_a_volatile_one_a_write() {
    let lookup = Listed::new(&[
        ("my_stable", Unqualified, ReadOnly),
        ("my_volatile", Unqualified, Write),
        ("inet_server_port", Unqualified, ReadOnly),
    ]);
    assert_eq!(lookup.classify("SELECT my_stable(1)"), ReadOnly);
    assert_eq!(
        lookup.asked(),
        [("my_stable".to_string(), Unqualified, false)]
    );
    assert_eq!(lookup.classify("SELECT inet_server_port()"), ReadOnly);
    assert_eq!(lookup.classify("SELECT my_volatile(1)"), Write);
    assert_eq!(
        lookup.classify("SELECT a FROM t WHERE b = my_stable(a) AND my_volatile(b)"),
        Write
    );
    // Without a lookup, the same texts are writes.
    assert_eq!(classify(b"SELECT my_stable(1)"), Write);
    assert_eq!(classify(b"SELECT inet_server_port()"), Write);
}

#[test]
fn an_unknown_name_is_a_write_and_was_asked_about() {
    let lookup = Listed::new(&[]);
    assert_eq!(lookup.classify("SELECT nextval('s')"), Write);
    assert_eq!(
        lookup.asked(),
        [("nextval".to_string(), Unqualified, false)]
    );
}

#[test]
fn names_are_folded_unless_quoted() {
    let lookup = Listed::new(&[
        ("MyFn", Unqualified, ReadOnly),
        ("myfn", Unqualified, Write),
    ]);
    assert_eq!(lookup.classify("SELECT \"MyFn\"()"), ReadOnly);
    assert_eq!(lookup.classify("SELECT MyFn()"), Write);
    assert_eq!(lookup.asked(), [("myfn".to_string(), Unqualified, false)]);
    // A doubled quote is not undone: a write, not asked.
    assert_eq!(lookup.classify("SELECT \"My\"\"Fn\"()"), Write);
    assert!(lookup.asked().is_empty());
}

#[test]
fn only_pg_catalog_qualifies_a_looked_up_name() {
    let lookup = Listed::new(&[
        ("inet_server_port", PgCatalog, ReadOnly),
        ("f", Unqualified, ReadOnly),
    ]);
    assert_eq!(
        lookup.classify("SELECT pg_catalog.inet_server_port()"),
        ReadOnly
    );
    assert_eq!(
        lookup.asked(),
        [("inet_server_port".to_string(), PgCatalog, false)]
    );
    assert_eq!(
        lookup.classify("SELECT \"pg_catalog\".upper('a'), pg_catalog.lower('A')"),
        ReadOnly
    );
    // A user's schema is not resolved: a write, and nothing asked.
    assert_eq!(lookup.classify("SELECT public.f(1)"), Write);
    assert!(lookup.asked().is_empty());
    // Unqualified answers do not answer for pg_catalog.
    assert_eq!(lookup.classify("SELECT pg_catalog.f(1)"), Write);
}

#[test]
fn built_ins_and_keywords_are_not_asked_about() {
    let lookup = Listed::new(&[]);
    assert_eq!(
        lookup.classify(
            "SELECT lower(b), count(*) OVER (ORDER BY (a)) FROM t GROUP BY ROLLUP (a) \
             ORDER BY (b)"
        ),
        ReadOnly
    );
    assert!(lookup.asked().is_empty());
    // A name PostgreSQL would truncate is a write without a question.
    let long = format!("SELECT {}()", "f".repeat(64));
    assert_eq!(lookup.classify(&long), Write);
    assert!(lookup.asked().is_empty());
}

#[test]
fn a_lookup_that_checks_built_ins_can_make_one_a_write() {
    let mut lookup = Listed::new(&[("lower", Unqualified, Write)]);
    lookup.checks_built_ins = true;
    assert_eq!(lookup.classify("SELECT lower('A')"), Write);
    assert_eq!(lookup.asked(), [("lower".to_string(), Unqualified, true)]);
    // A built-in the lookup does not know stays read-only.
    assert_eq!(lookup.classify("SELECT upper('a')"), ReadOnly);
    assert_eq!(lookup.asked(), [("upper".to_string(), Unqualified, true)]);
    // Without the flag the answer is never asked for.
    lookup.checks_built_ins = false;
    assert_eq!(lookup.classify("SELECT lower('A')"), ReadOnly);
    assert!(lookup.asked().is_empty());
}

#[test]
fn calls_in_every_read_only_form_are_asked_about() {
    let lookup = Listed::new(&[("f", Unqualified, ReadOnly)]);
    for text in [
        "SELECT * FROM f(1)",
        "WITH x AS (SELECT f(1)) SELECT * FROM x",
        "EXPLAIN SELECT f(1)",
        "COPY (SELECT f(1)) TO STDOUT",
        "BEGIN READ ONLY; SELECT f(1); COMMIT",
        "VALUES (f(1))",
    ] {
        assert_eq!(lookup.classify(text), ReadOnly, "{text}");
    }
}
