//! The `pgtier` binary: everything lives in the library so tests and benches share it.
fn main() -> std::process::ExitCode {
    pgtier::cli::main()
}
