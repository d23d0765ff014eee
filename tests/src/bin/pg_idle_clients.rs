//! `pg-idle-clients`: opens N client connections to a PostgreSQL endpoint (a proxy), completes
//! startup on each (trust auth), then holds them idle so the proxy's memory per idle client
//! can be measured. Prints `opened N` once all are up, and exits after `--hold-secs`.
//!
//! Usage: pg-idle-clients --port P [--user postgres] [--db postgres] [--count 10000]
//!        [--hold-secs 60] [--threads 4]

use std::process::ExitCode;
use std::time::Duration;

use pgtier_tests::rawwire;

struct Options {
    port: u16,
    user: String,
    db: String,
    count: usize,
    hold_secs: u64,
    threads: usize,
}

fn parse() -> Result<Options, String> {
    let mut options = Options {
        port: 0,
        user: "postgres".into(),
        db: "postgres".into(),
        count: 10_000,
        hold_secs: 60,
        threads: 4,
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    for pair in args.chunks(2) {
        let [flag, value] = pair else {
            return Err(format!("{} needs a value", pair[0]));
        };
        let number = || {
            value
                .parse::<u64>()
                .map_err(|_| format!("{flag}: bad number {value}"))
        };
        match flag.as_str() {
            "--port" => options.port = u16::try_from(number()?).map_err(|e| e.to_string())?,
            "--user" => options.user = value.clone(),
            "--db" => options.db = value.clone(),
            "--count" => options.count = number()? as usize,
            "--hold-secs" => options.hold_secs = number()?,
            "--threads" => options.threads = (number()? as usize).max(1),
            _ => return Err(format!("unknown option {flag}")),
        }
    }
    if options.port == 0 {
        return Err("--port is required".into());
    }
    Ok(options)
}

fn main() -> ExitCode {
    let options = match parse() {
        Ok(options) => options,
        Err(message) => {
            eprintln!("pg-idle-clients: {message}");
            return ExitCode::from(2);
        }
    };
    let per_thread = options.count.div_ceil(options.threads);
    let workers: Vec<_> = (0..options.threads)
        .map(|index| {
            let count = per_thread.min(options.count.saturating_sub(index * per_thread));
            let (port, user, db) = (options.port, options.user.clone(), options.db.clone());
            std::thread::spawn(move || {
                let mut sessions = Vec::with_capacity(count);
                for _ in 0..count {
                    let session = rawwire::login(port, &user, &db, Duration::from_secs(30))
                        .map_err(|e| format!("connection {}: {e}", sessions.len()))?;
                    sessions.push(session);
                }
                Ok::<_, String>(sessions)
            })
        })
        .collect();
    let mut held = Vec::new();
    for worker in workers {
        match worker.join() {
            Ok(Ok(sessions)) => held.extend(sessions),
            Ok(Err(message)) => {
                eprintln!("pg-idle-clients: {message} (opened {} before)", held.len());
                return ExitCode::FAILURE;
            }
            Err(_) => return ExitCode::FAILURE,
        }
    }
    println!("opened {}", held.len());
    std::thread::sleep(Duration::from_secs(options.hold_secs));
    drop(held);
    ExitCode::SUCCESS
}
