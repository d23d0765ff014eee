//! Runs the proxy from a config file without the command line front end (for benchmarks and
//! profiling): `cargo run --release -p pgtier --example serve -- pgtier.toml`.
fn main() -> std::process::ExitCode {
    let Some(path) = std::env::args_os().nth(1) else {
        eprintln!("usage: serve CONFIG");
        return std::process::ExitCode::from(2);
    };
    match pgtier::run(std::path::Path::new(&path)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("pgtier: {message}");
            std::process::ExitCode::FAILURE
        }
    }
}
