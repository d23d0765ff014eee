//! Splitting the `options` startup parameter into settings, as PostgreSQL does.
//!
//! libpq sends `PGOPTIONS` verbatim; the server splits it on whitespace with backslash
//! escaping the next character (`pg_split_opts`) and reads `-c name=value`, `-cname=value` and
//! `--name=value` as settings, dashes in the name becoming underscores. pgtier routes on
//! `-c pgtier.class=...`, so it must split exactly the same way.

/// One argument of `options`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartupOption {
    /// `-c name=value` or `--name=value`.
    Setting { name: String, value: String },
    /// Any other command-line switch, kept as written (PostgreSQL maps a few of these).
    Other(String),
}

/// A malformed `options` value; reported as 08P01 like PostgreSQL's own startup errors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OptionsError {
    /// `-c` or `--name` without `name=value`.
    MissingValue { argument: String },
    /// More arguments than the caller's limit.
    TooManyArguments { max: usize },
}

impl core::fmt::Display for OptionsError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::MissingValue { argument } => write!(f, "{argument} requires a value"),
            Self::TooManyArguments { max } => write!(f, "options has more than {max} arguments"),
        }
    }
}

impl std::error::Error for OptionsError {}

/// Splits `options` on unescaped whitespace; a backslash makes the next character literal.
pub(crate) fn split_args(options: &str) -> Vec<String> {
    let mut args = Vec::new();
    let mut chars = options.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_ascii_whitespace()).is_some() {}
        if chars.peek().is_none() {
            return args;
        }
        let mut arg = String::new();
        while let Some(c) = chars.next_if(|c| !c.is_ascii_whitespace()) {
            match c {
                '\\' => arg.extend(chars.next()),
                c => arg.push(c),
            }
        }
        args.push(arg);
    }
}

/// Parses `options` into settings and other switches, at most `max_args` arguments.
pub fn parse_options(options: &str, max_args: usize) -> Result<Vec<StartupOption>, OptionsError> {
    let args = split_args(options);
    if args.len() > max_args {
        return Err(OptionsError::TooManyArguments { max: max_args });
    }
    let mut parsed = Vec::with_capacity(args.len());
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        let setting = if arg == "-c" {
            let Some(next) = args.next() else {
                return Err(OptionsError::MissingValue { argument: arg });
            };
            next
        } else if let Some(rest) = arg.strip_prefix("--").or_else(|| arg.strip_prefix("-c")) {
            rest.to_owned()
        } else {
            parsed.push(StartupOption::Other(arg));
            continue;
        };
        parsed.push(parse_setting(&setting)?);
    }
    Ok(parsed)
}

fn parse_setting(setting: &str) -> Result<StartupOption, OptionsError> {
    let Some((name, value)) = setting.split_once('=') else {
        return Err(OptionsError::MissingValue {
            argument: setting.to_owned(),
        });
    };
    Ok(StartupOption::Setting {
        name: name.replace('-', "_"),
        value: value.to_owned(),
    })
}

/// The value of setting `name` in `options`, the last one winning as in PostgreSQL.
pub fn find_setting(options: &[StartupOption], name: &str) -> Option<String> {
    options.iter().rev().find_map(|option| match option {
        StartupOption::Setting { name: n, value } if n == name => Some(value.clone()),
        _ => None,
    })
}

/// `arg` escaped so that [`parse_options`] (PostgreSQL's split of `options`) reads it back
/// as one argument: a backslash before every backslash and whitespace character.
pub fn escape_option(arg: &str) -> String {
    let mut out = String::with_capacity(arg.len());
    for c in arg.chars() {
        if c == '\\' || c.is_ascii_whitespace() {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_escaped_argument_is_read_back_whole() {
        let value = "search_path=a b\\c";
        let options = format!("-c {}", escape_option(value));
        assert_eq!(
            parse_options(&options, 4).unwrap(),
            vec![setting("search_path", "a b\\c")]
        );
    }

    fn setting(name: &str, value: &str) -> StartupOption {
        StartupOption::Setting {
            name: name.into(),
            value: value.into(),
        }
    }

    #[test]
    fn all_three_spellings() {
        let parsed = parse_options(
            "-c pgtier.class=premium  -cwork_mem=64MB --statement-timeout=5s",
            16,
        )
        .unwrap();
        assert_eq!(
            parsed,
            vec![
                setting("pgtier.class", "premium"),
                setting("work_mem", "64MB"),
                setting("statement_timeout", "5s"),
            ]
        );
        assert_eq!(
            find_setting(&parsed, "pgtier.class").as_deref(),
            Some("premium")
        );
    }

    #[test]
    fn backslash_escapes_spaces_and_backslashes() {
        let parsed = parse_options(r"-c search_path=a\ b,\\c -B 10", 16).unwrap();
        assert_eq!(
            parsed,
            vec![
                setting("search_path", r"a b,\c"),
                StartupOption::Other("-B".into()),
                StartupOption::Other("10".into()),
            ]
        );
    }

    #[test]
    fn errors_are_values() {
        assert!(matches!(
            parse_options("-c", 4),
            Err(OptionsError::MissingValue { .. })
        ));
        assert!(matches!(
            parse_options("-c novalue", 4),
            Err(OptionsError::MissingValue { .. })
        ));
        assert!(matches!(
            parse_options("a b c", 2),
            Err(OptionsError::TooManyArguments { max: 2 })
        ));
        assert_eq!(parse_options("   ", 0), Ok(vec![]));
        assert_eq!(split_args("trailing\\"), vec!["trailing".to_string()]);
    }
}
