//! Which statements each console user may run, with PgBouncer's rules: `admin_users` run
//! everything; `stats_users` run every `SHOW` except `SHOW FDS` (which would expose
//! connection secrets in PgBouncer), and any admin verb gets "admin access needed".
//! Users in neither list never get a console session (the engine refuses them at login).

use pgtier_engine::ConsoleRights;

use crate::command::{ADMIN_VERBS, AdminCommand, CommandError};

/// `parsed` (what `statement` parsed to), or why `rights` may not run it.
pub(crate) fn authorize(
    statement: &str,
    parsed: Result<AdminCommand, CommandError>,
    rights: ConsoleRights,
) -> Result<AdminCommand, CommandError> {
    if rights == ConsoleRights::Admin {
        return parsed;
    }
    match parsed {
        Ok(AdminCommand::Fds) => Err(CommandError::AdminOnly),
        Ok(command) => Ok(command),
        Err(CommandError::Unsupported(text)) => {
            let verb = statement
                .split_ascii_whitespace()
                .next()
                .unwrap_or_default();
            if ADMIN_VERBS
                .iter()
                .any(|admin| admin.eq_ignore_ascii_case(verb))
            {
                Err(CommandError::AdminOnly)
            } else {
                Err(CommandError::Unsupported(text))
            }
        }
        Err(error) => Err(error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::parse;

    fn check(statement: &str, rights: ConsoleRights) -> Result<AdminCommand, CommandError> {
        authorize(statement, parse(statement), rights)
    }

    #[test]
    fn stats_users_run_every_show_but_fds() {
        for (command, _) in AdminCommand::ALL {
            let statement = format!("SHOW {}", command.name());
            let result = check(&statement, ConsoleRights::Stats);
            if command == AdminCommand::Fds {
                assert_eq!(result, Err(CommandError::AdminOnly));
            } else {
                assert_eq!(result, Ok(command));
            }
            assert_eq!(check(&statement, ConsoleRights::Admin), Ok(command));
        }
    }

    #[test]
    fn stats_users_are_told_admin_verbs_need_admin() {
        assert_eq!(
            check("pause", ConsoleRights::Stats),
            Err(CommandError::AdminOnly)
        );
        assert_eq!(
            check("KILL db", ConsoleRights::Stats),
            Err(CommandError::AdminOnly)
        );
        assert_eq!(
            check("SET verbose = 1", ConsoleRights::Stats),
            Err(CommandError::AdminOnly)
        );
        assert!(matches!(
            check("SELECT 1", ConsoleRights::Stats),
            Err(CommandError::Unsupported(_))
        ));
        assert!(matches!(
            check("PAUSE", ConsoleRights::Admin),
            Err(CommandError::Unsupported(_))
        ));
    }
}
