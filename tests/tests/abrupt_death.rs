//! One of two pgtier processes sharing a port (the rolling restart's `SO_REUSEPORT` group)
//! dies abruptly, SIGKILL or SIGQUIT, while clients connect as fast as they can: every
//! connection that starts after the signal (SIGQUIT) or after the killed process is gone
//! (SIGKILL, which it cannot act on) must log in and query on the survivor, none may be
//! reset.
//!
//! Linux resets what a listener had queued (handshake done, not accepted yet) when it closes,
//! unless `net.ipv4.tcp_migrate_req = 1` hands it to another listener of the group; a killed
//! process cannot accept them first. docs/operations.md ("Abrupt death") recommends the
//! setting. It is per network namespace, so each scenario runs in a namespace of its own
//! with the setting on (the host's is never touched); PostgreSQL, both pgtier processes and
//! the clients all live there, on its loopback. `PGTIER_TEST_TCP_MIGRATE_REQ=0` leaves it
//! off, to measure what a host without it sees (the tests then fail, naming the resets).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use pgtier_tests::fixtures::{server, start_proxy};
use pgtier_tests::{ProxyConfig, netns, rawwire, wait};

/// Connections that must start after the signal, all of them served.
const CONNECTS_AFTER_DEATH: usize = 200;
/// Client threads in the connect loop.
const LOOP_THREADS: usize = 4;
/// How long the loop may take to make those connections (a bound, not a measurement).
const LOOP_PATIENCE: Duration = Duration::from_secs(120);
/// Time limit of one login and query.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// One connection of the loop: when it started, and why it failed, if it did.
struct Attempt {
    started: Instant,
    error: Option<String>,
}

/// What the clients saw around one death.
struct Outcome {
    /// Connections started after the signal, and the failures among them (time after the
    /// signal, error).
    after: usize,
    failed_after: Vec<(Duration, String)>,
    /// Connections in progress when the signal was sent that failed: sessions the dying
    /// process was serving, lost with it (as with any pooler), reported, not judged.
    lost_in_flight: usize,
    /// The dying process had served some of the loop's clients before it died.
    dying_served: bool,
}

#[test]
fn sigkill_of_one_of_two_processes_on_a_port_resets_no_new_connection() {
    one_of_two_dies(libc::SIGKILL);
}

#[test]
fn sigquit_of_one_of_two_processes_on_a_port_resets_no_new_connection() {
    one_of_two_dies(libc::SIGQUIT);
}

fn one_of_two_dies(signal: libc::c_int) {
    let migrate = std::env::var("PGTIER_TEST_TCP_MIGRATE_REQ").map_or(true, |value| value != "0");
    let outcome = netns::run_isolated(migrate, move |isolated| {
        isolated.then(|| connect_through_a_death(signal))
    });
    let Some(outcome) = outcome else {
        eprintln!("skipped: no network namespace of its own (not root?)");
        return;
    };
    eprintln!(
        "signal {signal}: {} connections started after it, {} failed; {} in progress at the \
         signal lost (tcp_migrate_req = {})",
        outcome.after,
        outcome.failed_after.len(),
        outcome.lost_in_flight,
        u8::from(migrate),
    );
    assert!(
        outcome.dying_served,
        "the loop never reached the process that died: the test proved nothing"
    );
    assert!(outcome.after >= CONNECTS_AFTER_DEATH, "{}", outcome.after);
    assert!(
        outcome.failed_after.is_empty(),
        "{} of {} connections started after signal {signal} failed (time after it, error): {:?}",
        outcome.failed_after.len(),
        outcome.after,
        outcome.failed_after
    );
}

/// Two processes on one port, a connect loop, `signal` to one of them: what the loop saw.
fn connect_through_a_death(signal: libc::c_int) -> Outcome {
    let pg = server();
    let config = |port: u16| {
        let mut config = ProxyConfig::new(pg.port()).pool_size(20);
        config.workers = 2;
        config.max_client_conn = 1000;
        config.listen_port = port;
        config
    };
    let mut dying = start_proxy(config(0));
    let port = dying.port();
    let survivor = start_proxy(config(port));

    let attempts = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = (0..LOOP_THREADS)
        .map(|_| {
            let (attempts, stop) = (attempts.clone(), stop.clone());
            std::thread::spawn(move || connect_loop(port, &attempts, &stop))
        })
        .collect();
    // Both processes serve the loop for a while (the kernel spreads it over 4 listeners).
    std::thread::sleep(Duration::from_millis(500));
    let sent = Instant::now();
    dying.signal(signal).expect("signal the dying pgtier");
    // SIGQUIT: pgtier's first act on it is to take its listeners out of the port group, so
    // every connection started from then on must be served. The signal reaches pgtier's
    // signal thread after a scheduling delay (12 ms was seen on a loaded 2-core CI machine);
    // a connection the dying process accepted meanwhile is one it was serving when it quit.
    // pgtier logs the signal once its listeners are out, so that line marks the moment.
    // SIGKILL: nothing runs in pgtier after it, and the process may still accept for some
    // microseconds after kill(2) returns (on the other CPU); a connection it accepted then
    // dies with it, as with any process. So what counts is every connection started once
    // the process has left the group (SIGQUIT) or is gone (SIGKILL, reaped); the window
    // between is counted with the connections in progress at the death.
    if signal == libc::SIGKILL {
        dying.wait_exit(Duration::from_secs(20));
    } else {
        let left = wait::until(Duration::from_secs(20), Duration::from_millis(1), || {
            dying.log().contains("got SIGQUIT").then_some(())
        });
        assert!(left.is_some(), "the dying process never logged the signal");
    }
    let signalled = Instant::now();
    eprintln!(
        "signal {signal}: {:?} from kill(2) until the dying process was out of the group",
        signalled.duration_since(sent)
    );
    let enough = wait::until(LOOP_PATIENCE, Duration::from_millis(20), || {
        (started_after(&lock(&attempts), signalled) >= CONNECTS_AFTER_DEATH).then_some(())
    });
    stop.store(true, Ordering::Release);
    for thread in threads {
        thread.join().expect("a connect thread panicked");
    }
    assert!(enough.is_some(), "the loop stalled after the signal");
    let exited = dying.wait_exit(Duration::from_secs(20));
    if signal == libc::SIGQUIT {
        assert!(
            exited.is_some_and(|status| status.success()),
            "SIGQUIT exits 0: {exited:?}"
        );
    }
    let mut client = rawwire::login(survivor.port(), "postgres", "postgres", CONNECT_TIMEOUT)
        .expect("the survivor serves");
    client
        .simple_query("SELECT 1")
        .expect("query on the survivor");

    let attempts = std::mem::take(&mut *lock(&attempts));
    let failed_after = attempts
        .iter()
        .filter(|attempt| attempt.started >= signalled)
        .filter_map(|attempt| {
            let error = attempt.error.clone()?;
            Some((attempt.started.duration_since(signalled), error))
        })
        .collect();
    Outcome {
        after: started_after(&attempts, signalled),
        failed_after,
        lost_in_flight: attempts
            .iter()
            .filter(|attempt| attempt.started < signalled && attempt.error.is_some())
            .count(),
        dying_served: dying.log().contains("login attempt"),
    }
}

/// How many of `attempts` started after the signal.
fn started_after(attempts: &[Attempt], signalled: Instant) -> usize {
    attempts
        .iter()
        .filter(|attempt| attempt.started >= signalled)
        .count()
}

/// Logs in, runs `SELECT 1` and leaves, over and over until `stop`.
fn connect_loop(port: u16, attempts: &Mutex<Vec<Attempt>>, stop: &AtomicBool) {
    while !stop.load(Ordering::Acquire) {
        let started = Instant::now();
        let outcome = rawwire::login(port, "postgres", "postgres", CONNECT_TIMEOUT)
            .and_then(|mut session| session.simple_query("SELECT 1"));
        let error = match outcome {
            Ok(messages) if messages.iter().any(|m| m.tag == b'E') => {
                Some(format!("SELECT 1 failed: {messages:?}"))
            }
            Ok(_) => None,
            Err(error) => Some(format!("{:?}: {error}", error.kind())),
        };
        lock(attempts).push(Attempt { started, error });
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
