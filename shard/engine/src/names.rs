//! Interned user and database names. Every session of one user and database shares one
//! allocation of each name, so 10,000 clients of one pool do not hold 20,000 small strings.
//!
//! The table is bounded: when it reaches its cap, names no session holds any more are
//! dropped, and a name that still finds no room is handed out uninterned (it works the same,
//! it only is not shared), so varied or hostile login names cannot grow it without end.

use std::collections::HashSet;
use std::sync::Arc;

/// Most names kept.
const MAX_NAMES: usize = 4096;

#[derive(Debug)]
pub struct Names {
    set: HashSet<Arc<str>, ahash::RandomState>,
}

impl Default for Names {
    fn default() -> Self {
        Names {
            set: HashSet::with_hasher(ahash::RandomState::new()),
        }
    }
}

impl Names {
    /// The shared copy of `name`.
    pub(crate) fn intern(&mut self, name: &str) -> Arc<str> {
        if let Some(shared) = self.set.get(name) {
            return shared.clone();
        }
        if self.set.len() >= MAX_NAMES {
            self.set.retain(|held| Arc::strong_count(held) > 1);
        }
        let shared: Arc<str> = name.into();
        if self.set.len() < MAX_NAMES {
            self.set.insert(shared.clone());
        }
        shared
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.set.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_name_is_one_allocation() {
        let mut names = Names::default();
        let a = names.intern("app");
        let b = names.intern("app");
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(&*a, "app");
    }

    #[test]
    fn names_nobody_holds_make_room_and_the_table_stays_bounded() {
        let mut names = Names::default();
        let kept = names.intern("kept");
        for n in 0..3 * MAX_NAMES {
            drop(names.intern(&format!("user{n}")));
        }
        assert!(names.len() <= MAX_NAMES);
        assert!(
            Arc::ptr_eq(&kept, &names.intern("kept")),
            "a held name survives"
        );
        let held: Vec<_> = (0..MAX_NAMES + 10)
            .map(|n| names.intern(&format!("held{n}")))
            .collect();
        assert!(
            names.len() <= MAX_NAMES,
            "full of held names: new ones go uninterned"
        );
        assert_eq!(&*held[MAX_NAMES + 5], format!("held{}", MAX_NAMES + 5));
    }
}
