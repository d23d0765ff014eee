//! The classes of a live run as the command line gives them: `--class NAME:USER:RATE` for
//! any rank, and the two-class flags (`--user-premium`, `--rate-premium`, `--user-freemium`,
//! `--rate-freemium`) for ranks 0 and 1. Owns the rule that a run's classes are ranks
//! 0..n-1 with 2 <= n <= [`Class::MAX`], each defined exactly once.

use crate::sim::workload::Class;

/// One class of a run: who its sessions log in as and how often they arrive.
#[derive(Debug, Clone, PartialEq)]
pub struct ClassSpec {
    /// The class (its rank).
    pub class: Class,
    /// Login user: the proxy tells the classes apart by user.
    pub user: String,
    /// Session arrivals per second (Poisson); 0 means none arrive.
    pub rate_per_s: f64,
}

/// The names `--class` accepts, in rank order, for messages.
fn class_names() -> String {
    Class::ranks(Class::MAX)
        .map(Class::name)
        .collect::<Vec<_>>()
        .join(", ")
}

impl ClassSpec {
    /// Parses `NAME:USER:RATE`. The user is everything between the first and the last `:`,
    /// so a user name may itself contain `:`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let shape = || format!("--class {text:?} is not NAME:USER:RATE");
        let (name, rest) = text.split_once(':').ok_or_else(shape)?;
        let (user, rate) = rest.rsplit_once(':').ok_or_else(shape)?;
        let class = Class::from_name(name).ok_or_else(|| {
            format!(
                "--class {text:?}: unknown class {name:?} (one of {})",
                class_names()
            )
        })?;
        if user.is_empty() {
            return Err(format!("--class {text:?}: the user is empty"));
        }
        let rate_per_s = rate
            .parse::<f64>()
            .ok()
            .filter(|r| r.is_finite() && *r >= 0.0)
            .ok_or_else(|| {
                format!("--class {text:?}: rate {rate:?} is not a non-negative number")
            })?;
        Ok(Self {
            class,
            user: user.to_string(),
            rate_per_s,
        })
    }
}

/// `(user flag, rate flag, user, rate)` of one class's two-class flags.
type LegacyFlags<'a> = (&'static str, &'static str, Option<&'a String>, Option<f64>);

/// The class flags of `run` as given, in any order; checked by [`ClassFlags::finish`].
#[derive(Debug, Default)]
pub struct ClassFlags {
    /// `--user-premium`.
    pub user_premium: Option<String>,
    /// `--rate-premium`.
    pub rate_premium: Option<f64>,
    /// `--user-freemium`.
    pub user_freemium: Option<String>,
    /// `--rate-freemium`.
    pub rate_freemium: Option<f64>,
    /// `--class`, by rank.
    given: [Option<ClassSpec>; Class::MAX],
}

impl ClassFlags {
    /// Takes one `--class NAME:USER:RATE`; a class named twice is refused.
    pub fn add(&mut self, text: &str) -> Result<(), String> {
        let spec = ClassSpec::parse(text)?;
        let slot = self
            .given
            .get_mut(spec.class.index())
            .ok_or_else(|| format!("--class {text:?}: no such rank"))?;
        if slot.is_some() {
            return Err(format!("--class {} is given twice", spec.class.name()));
        }
        *slot = Some(spec);
        Ok(())
    }

    /// The two-class flags of rank 0 or 1 as (user flag, rate flag, user, rate); None for
    /// the ranks they cannot define.
    fn legacy(&self, class: Class) -> Option<LegacyFlags<'_>> {
        match class.index() {
            0 => Some((
                "--user-premium",
                "--rate-premium",
                self.user_premium.as_ref(),
                self.rate_premium,
            )),
            1 => Some((
                "--user-freemium",
                "--rate-freemium",
                self.user_freemium.as_ref(),
                self.rate_freemium,
            )),
            _ => None,
        }
    }

    /// The class of `class`'s rank, if the flags define it.
    fn spec(&self, class: Class) -> Result<Option<ClassSpec>, String> {
        let given = self.given.get(class.index()).cloned().flatten();
        match (given, self.legacy(class)) {
            (Some(_), Some((user_flag, rate_flag, user, rate)))
                if user.is_some() || rate.is_some() =>
            {
                Err(format!(
                    "{name} is defined by both --class {name}:... and {user_flag}/{rate_flag}: \
                     use one or the other",
                    name = class.name()
                ))
            }
            (Some(spec), _) => Ok(Some(spec)),
            (None, Some((_, _, Some(user), Some(rate_per_s)))) => Ok(Some(ClassSpec {
                class,
                user: user.clone(),
                rate_per_s,
            })),
            // Both two-class flags are required once either is given, as they always were.
            (None, Some((user_flag, _, None, Some(_)))) => Err(format!("{user_flag} is required")),
            (None, Some((_, rate_flag, Some(_), None))) => Err(format!("{rate_flag} is required")),
            (None, _) => Ok(None),
        }
    }

    /// The classes of the run in rank order: ranks 0..n-1, 2 <= n <= [`Class::MAX`], each
    /// from `--class` or (ranks 0 and 1) from the two-class flags, never both.
    pub fn finish(self) -> Result<Vec<ClassSpec>, String> {
        let defined = Class::ranks(Class::MAX)
            .map(|class| self.spec(class))
            .collect::<Result<Vec<_>, _>>()?;
        let count = defined.iter().take_while(|spec| spec.is_some()).count();
        if let Some(missing) = Class::ranks(2).nth(count) {
            let name = missing.name();
            return Err(format!(
                "{name} is not defined: give --class {name}:USER:RATE \
                 (or --user-{name} U and --rate-{name} R)"
            ));
        }
        if let Some(beyond) = defined.iter().skip(count).flatten().next() {
            let gap = Class::ranks(Class::MAX).nth(count).map_or("?", Class::name);
            return Err(format!(
                "--class {} needs --class {gap} too: the classes of a run are the first n of \
                 {} in rank order, without gaps",
                beyond.class.name(),
                class_names()
            ));
        }
        Ok(defined.into_iter().flatten().collect())
    }
}
