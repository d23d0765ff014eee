//! The pgtier binary as the end-to-end tests run it: the same one line as shard's `pgtier`
//! main, built by cargo for this package so tests can find it (see `pgtier_tests::proxy`).
fn main() -> std::process::ExitCode {
    pgtier::cli::main()
}
