//! Logging set-up: one `tracing` subscriber for the whole process, filtered by `PGTIER_LOG`
//! (or `RUST_LOG`), so a disabled level costs a single atomic load at each call site.

use tracing_subscriber::EnvFilter;

/// Filter used when neither variable is set.
const DEFAULT_FILTER: &str = "info";

/// Installs the global subscriber writing to stderr. A bad filter falls back to the default
/// and says so, rather than silently logging nothing.
pub fn init() {
    let (filter, complaint) = filter_from_env();
    let installed = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
    if let Err(error) = installed {
        eprintln!("pgtier: logging was already initialised: {error}");
    }
    if let Some(complaint) = complaint {
        eprintln!("pgtier: {complaint}; using \"{DEFAULT_FILTER}\"");
    }
}

fn filter_from_env() -> (EnvFilter, Option<String>) {
    for variable in ["PGTIER_LOG", "RUST_LOG"] {
        let Ok(spec) = std::env::var(variable) else {
            continue;
        };
        return match EnvFilter::try_new(&spec) {
            Ok(filter) => (filter, None),
            Err(error) => (
                EnvFilter::new(DEFAULT_FILTER),
                Some(format!(
                    "{variable}={spec:?} is not a valid filter ({error})"
                )),
            ),
        };
    }
    (EnvFilter::new(DEFAULT_FILTER), None)
}
