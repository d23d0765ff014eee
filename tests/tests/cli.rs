//! The command line as a user meets it: `check-config` on good and bad files, `--version`,
//! `--help`, usage errors. No server is needed.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use pgtier_tests::process::{Finished, run};
use pgtier_tests::proxy::proxy_binary;
use pgtier_tests::{ProxyConfig, TempDir};

fn pgtier(args: &[&std::ffi::OsStr]) -> Finished {
    let binary = proxy_binary().expect("pgtier binary");
    run(Command::new(binary).args(args), Duration::from_secs(20)).expect("running pgtier")
}

fn check_config(path: &Path) -> Finished {
    pgtier(&["check-config".as_ref(), path.as_os_str()])
}

/// Writes `text` as pgtier.toml (plus an empty userlist) and runs check-config on it.
fn check_text(dir: &TempDir, text: &str) -> Finished {
    std::fs::write(dir.path().join("userlist.txt"), "\"postgres\" \"\"\n").expect("userlist");
    let path = dir.path().join("pgtier.toml");
    std::fs::write(&path, text).expect("config");
    check_config(&path)
}

#[test]
fn check_config_accepts_a_good_file() {
    let dir = TempDir::new("cli-good").expect("tempdir");
    let mut config = ProxyConfig::new(5432).database("other", 5433, "otherdb");
    config.listen_port = 6432;
    let text = config.to_toml(&dir.path().join("userlist.txt"));
    let finished = check_text(&dir, &text);
    assert!(finished.success(), "{finished:?}");
    assert_eq!(finished.stdout.trim(), "OK");
}

#[test]
fn check_config_accepts_the_issue_example() {
    let dir = TempDir::new("cli-example").expect("tempdir");
    let text = "[pgtier]\nlisten_addr = \"127.0.0.1\"\nlisten_port = 6432\nworkers = 1\n\
                auth_type = \"trust\"\nauth_file = \"userlist.txt\"\npool_mode = \"transaction\"\n\
                default_pool_size = 20\n[databases.postgres]\nhost = \"127.0.0.1\"\nport = 5432\n\
                dbname = \"postgres\"\n";
    let finished = check_text(&dir, text);
    assert!(finished.success(), "{finished:?}");
    assert_eq!(finished.stdout.trim(), "OK");
}

/// A bad file: exit status 1, and the message names the file, the key and the reason.
fn assert_rejected(finished: &Finished, file: &Path, key: &str, reason_word: &str) {
    assert_eq!(finished.status.code(), Some(1), "{finished:?}");
    assert!(!finished.stdout.contains("OK"), "{finished:?}");
    let message = &finished.stderr;
    assert!(
        message.contains(&file.display().to_string()),
        "error should name the file {}: {message}",
        file.display()
    );
    assert!(
        message.contains(key),
        "error should name the key {key}: {message}"
    );
    assert!(
        message.to_lowercase().contains(reason_word),
        "error should say why ({reason_word}): {message}"
    );
}

#[test]
fn check_config_names_an_unknown_key() {
    let dir = TempDir::new("cli-unknown-key").expect("tempdir");
    let finished = check_text(&dir, "[pgtier]\nlisten_port = 6432\nno_such_setting = 1\n");
    assert_rejected(
        &finished,
        &dir.path().join("pgtier.toml"),
        "no_such_setting",
        "unknown",
    );
}

#[test]
fn check_config_names_a_bad_value() {
    let dir = TempDir::new("cli-bad-value").expect("tempdir");
    let finished = check_text(&dir, "[pgtier]\npool_mode = \"sometimes\"\n");
    assert_rejected(
        &finished,
        &dir.path().join("pgtier.toml"),
        "pool_mode",
        "sometimes",
    );
}

#[test]
fn check_config_names_a_bad_database_port() {
    let dir = TempDir::new("cli-bad-port").expect("tempdir");
    let finished = check_text(
        &dir,
        "[pgtier]\nauth_type = \"trust\"\n[databases.app]\nhost = \"127.0.0.1\"\nport = 70000\n",
    );
    assert_rejected(&finished, &dir.path().join("pgtier.toml"), "port", "70000");
}

#[test]
fn check_config_rejects_text_that_is_not_toml() {
    let dir = TempDir::new("cli-not-toml").expect("tempdir");
    let finished = check_text(&dir, "[pgtier\nlisten_port = \n");
    assert_eq!(finished.status.code(), Some(1), "{finished:?}");
    assert!(finished.stderr.contains("pgtier.toml"), "{finished:?}");
}

#[test]
fn check_config_reports_a_missing_file() {
    let dir = TempDir::new("cli-missing").expect("tempdir");
    let path = dir.path().join("absent.toml");
    let finished = check_config(&path);
    assert_eq!(finished.status.code(), Some(1), "{finished:?}");
    assert!(finished.stderr.contains("absent.toml"), "{finished:?}");
}

#[test]
fn version_and_help() {
    let version = pgtier(&["--version".as_ref()]);
    assert!(version.success(), "{version:?}");
    assert!(version.stdout.starts_with("pgtier "), "{version:?}");
    let help = pgtier(&["--help".as_ref()]);
    assert!(help.success(), "{help:?}");
    for word in ["--config", "check-config", "demo"] {
        assert!(
            help.stdout.contains(word),
            "help should mention {word}: {}",
            help.stdout
        );
    }
}

#[test]
fn usage_errors_exit_2() {
    for args in [&["--no-such-flag"][..], &[][..], &["check-config"][..]] {
        let args: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_ref()).collect();
        let finished = pgtier(&args);
        assert_eq!(finished.status.code(), Some(2), "{args:?}: {finished:?}");
        assert!(finished.stderr.contains("Usage"), "{finished:?}");
    }
}

#[test]
fn running_with_a_bad_config_fails_fast_with_the_reason() {
    let dir = TempDir::new("cli-run-bad").expect("tempdir");
    let path = dir.path().join("pgtier.toml");
    std::fs::write(&path, "[pgtier]\npool_mode = \"sometimes\"\n").expect("config");
    // `pgtier --config FILE` and PgBouncer's `pgtier FILE` are the same command.
    for args in [
        vec!["--config".as_ref(), path.as_os_str()],
        vec![path.as_os_str()],
    ] {
        let finished = pgtier(&args);
        assert!(
            !finished.status.success() && !finished.timed_out,
            "{finished:?}"
        );
        assert!(finished.stderr.contains("pool_mode"), "{finished:?}");
    }
}

#[cfg(target_arch = "x86_64")]
#[test]
fn without_io_uring_pgtier_says_so_and_what_to_change() {
    let dir = TempDir::new("cli-no-uring").expect("tempdir");
    let mut config = ProxyConfig::new(5432);
    config.listen_port = pgtier_tests::free_port().expect("port");
    let userlist = dir.path().join("userlist.txt");
    std::fs::write(&userlist, config.userlist()).expect("userlist");
    let path = dir.path().join("pgtier.toml");
    std::fs::write(&path, config.to_toml(&userlist)).expect("config");
    let mut command = Command::new(proxy_binary().expect("binary"));
    command.arg("--config").arg(&path);
    pgtier_tests::process::deny_io_uring(&mut command);
    let finished = run(&mut command, Duration::from_secs(20)).expect("run");
    assert!(
        !finished.timed_out && !finished.status.success(),
        "pgtier should exit with an error without io_uring: {finished:?}"
    );
    let message = finished.stderr.to_lowercase();
    assert!(message.contains("io_uring"), "{finished:?}");
    assert!(
        message.contains("io_uring_disabled") || message.contains("seccomp"),
        "the error should say what to change: {finished:?}"
    );
}

/// A reader that closes the pipe before the report is written (`check-config FILE | head -0`)
/// ends nothing but the output: exit status 0, no panic message.
#[test]
fn check_config_into_a_closed_pipe_does_not_panic() {
    use std::process::Stdio;
    let dir = TempDir::new("cli-pipe").expect("tempdir");
    std::fs::write(dir.path().join("userlist.txt"), "\"postgres\" \"\"\n").expect("userlist");
    let ini = dir.path().join("pgbouncer.ini");
    std::fs::write(
        &ini,
        "[databases]\np0 = host=127.0.0.1 port=5432\n[pgbouncer]\nlisten_port = 6432\n\
         auth_file = userlist.txt\nauth_type = trust\n",
    )
    .expect("ini");
    let binary = proxy_binary().expect("pgtier binary");
    let mut child = Command::new(binary)
        .args(["check-config".as_ref(), ini.as_os_str()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    // Close the read end at once: the report's write meets a broken pipe.
    drop(child.stdout.take());
    let output = child.wait_with_output().expect("wait");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "status {:?}: {stderr}",
        output.status
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
}
