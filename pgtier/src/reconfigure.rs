//! The main thread's side of the console's RELOAD and `SET key = value`: it reads the file
//! or reads the SET against the configuration in effect, hands the result to every shard as a
//! SIGHUP reload does, and has the console answered: with an error at once when nothing can be
//! applied (the configuration in effect stays), else by the last shard to apply it.

use std::path::Path;
use std::sync::Arc;

use pgtier_core::config::{Config, ConfigError, SetOutcome};
use pgtier_engine::reconfigure::{Change, Order, Pending};
use pgtier_engine::services::Refusal;
use pgtier_wire::{SqlState, sqlstate};
use tracing::{error, info, warn};

/// What carrying out an order needs of the running proxy (`proxy.rs`'s handle).
pub(crate) trait Proxy {
    /// The configuration in effect.
    fn current_config(&self) -> Arc<Config>;
    /// Hands `config` to every shard; `pending` is the console waiting for all of them.
    fn reload_with(&self, config: Config, pending: Option<Arc<Pending>>) -> Result<(), String>;
    /// As `reload_with`, for a console SET: TLS files that do not make a configuration
    /// leave the TLS configurations in effect (logged) instead of failing.
    fn set_with(&self, config: Config, pending: Arc<Pending>) -> Result<(), String>;
    /// Answers the console session waiting for `order`.
    fn answer(&self, order: &Order, error: Option<Refusal>);
    /// How many shards run.
    fn shards(&self) -> usize;
}

/// PgBouncer's SQLSTATE for a RELOAD that failed (config_file_error).
const CONFIG_FILE_ERROR: SqlState = SqlState::new(b"F0000");

/// Carries out one console order; `reopen_logs` is what SIGHUP does to the log files first.
pub(crate) fn carry_out(
    handle: &impl Proxy,
    order: Order,
    config_path: &Path,
    reopen_logs: &mut dyn FnMut(),
) {
    let error = match &order.change {
        Change::Reload => {
            info!("RELOAD command issued");
            reopen_logs();
            let pending = Pending::new(&order, handle.shards());
            reload_file(handle, config_path, Some(pending))
                .err()
                .map(|message| {
                    warn!(%message, "config file loading failed");
                    error!("RELOAD failed, see logs for more details");
                    Refusal {
                        code: CONFIG_FILE_ERROR,
                        message: "RELOAD failed, see logs for additional details".to_string(),
                    }
                })
        }
        Change::Set { key, value } => set(handle, &order, key, value).err().map(|message| {
            error!("{message}");
            Refusal {
                code: sqlstate::PROTOCOL_VIOLATION,
                message,
            }
        }),
    };
    // Without an error, the last shard to apply the new configuration answers (or `set`
    // answered already when there was nothing to apply).
    if let Some(error) = error {
        handle.answer(&order, Some(error));
    }
}

/// Rereads the configuration file and hands it to every shard (SIGHUP, RELOAD); on an error
/// the configuration in effect stays.
pub(crate) fn reload_file(
    handle: &impl Proxy,
    config_path: &Path,
    pending: Option<Arc<Pending>>,
) -> Result<(), String> {
    let config = Config::load(config_path).map_err(|error| error.to_string())?;
    handle.reload_with(config, pending)?;
    info!("reloaded {}", config_path.display());
    Ok(())
}

/// `SET key = value`: Ok once the new configuration is handed to the shards (or when there is
/// nothing to change, after answering); Err with the console's message.
fn set(handle: &impl Proxy, order: &Order, key: &str, value: &str) -> Result<(), String> {
    let current = handle.current_config();
    match current.set(key, value) {
        Ok(SetOutcome::Changed(config)) => {
            info!(setting = key, value, "SET from the admin console");
            let pending = Pending::new(order, handle.shards());
            handle
                .set_with(*config, pending)
                .map_err(|message| format!("SET failed: {message}"))
        }
        Ok(SetOutcome::StartOnly) => {
            warn!(
                setting = key,
                "SET not acted on: PgBouncer reads this setting at start only; nothing changed"
            );
            handle.answer(order, None);
            Ok(())
        }
        Ok(SetOutcome::NotActedOn) => {
            warn!(
                setting = key,
                "SET not acted on: pgtier does not act on this PgBouncer setting"
            );
            handle.answer(order, None);
            Ok(())
        }
        Err(error) => Err(format!("SET failed: {}", describe(&error))),
    }
}

/// The key and the reason (the file is the configuration's, not where the SET came from).
fn describe(error: &ConfigError) -> String {
    if error.key.is_empty() {
        error.reason.clone()
    } else {
        format!("{}: {}", error.key, error.reason)
    }
}
