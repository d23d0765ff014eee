//! `pgtier-hostile`: runs one hostile load against a proxy on 127.0.0.1 for a bounded time
//! and prints what it did (`tests/src/hostile.rs`); bench/hostile.sh runs each while pgbench
//! runs legit load.
//!
//! Usage: pgtier-hostile ATTACK --port P [--seconds 10] [--width N] [--user postgres]
//!        [--rate CONNECTS_PER_S, 0 = unpaced] [--password ""] [--db postgres]
//! ATTACK: slowloris, garbage, oversized, connect-flood, no-read, brute-force

use std::process::ExitCode;
use std::time::Duration;

use pgtier_tests::hostile::{self, Attack, Intensity, Target};

struct Options {
    attack: Attack,
    target: Target,
    seconds: u64,
    intensity: Intensity,
}

fn parse() -> Result<Options, String> {
    let mut args = std::env::args().skip(1);
    let name = args.next().ok_or("an attack is needed")?;
    let attack = Attack::parse(&name).ok_or_else(|| format!("unknown attack {name}"))?;
    let mut options = Options {
        attack,
        target: Target {
            port: 0,
            database: "postgres".into(),
            user: "postgres".into(),
            password: String::new(),
        },
        seconds: 10,
        intensity: Intensity::default_for(attack),
    };
    let rest: Vec<String> = args.collect();
    for pair in rest.chunks(2) {
        let [flag, value] = pair else {
            return Err(format!("{} needs a value", pair[0]));
        };
        let number = || {
            value
                .parse::<u64>()
                .map_err(|_| format!("{flag}: bad number {value}"))
        };
        match flag.as_str() {
            "--port" => {
                options.target.port =
                    u16::try_from(number()?).map_err(|_| format!("bad port {value}"))?;
            }
            "--seconds" => options.seconds = number()?,
            "--width" => options.intensity.width = number()? as usize,
            "--rate" => {
                let rate = u32::try_from(number()?).map_err(|_| format!("bad rate {value}"))?;
                options.intensity.rate = (rate > 0).then_some(rate);
            }
            "--user" => options.target.user = value.clone(),
            "--password" => options.target.password = value.clone(),
            "--db" => options.target.database = value.clone(),
            other => return Err(format!("unknown flag {other}")),
        }
    }
    if options.target.port == 0 {
        return Err("--port is needed".into());
    }
    Ok(options)
}

fn main() -> ExitCode {
    let options = match parse() {
        Ok(options) => options,
        Err(error) => {
            eprintln!("pgtier-hostile: {error}");
            return ExitCode::from(2);
        }
    };
    let Intensity { width, rate } = options.intensity;
    let duration = Duration::from_secs(options.seconds);
    match hostile::run(options.attack, &options.target, options.intensity, duration) {
        Ok(report) => {
            let rate = rate.map_or("unpaced".to_string(), |r| format!("{r}/s"));
            println!(
                "{} width={width} rate={rate} {report} attacker_cpu_s={:.1}",
                options.attack,
                own_cpu_seconds()
            );
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("pgtier-hostile: {error}");
            ExitCode::FAILURE
        }
    }
}

/// This process's user and system CPU time so far: the attacker's own cost, which on one
/// machine is taken from the load it disturbs.
fn own_cpu_seconds() -> f64 {
    // SAFETY: getrusage writes one `rusage` into the zeroed value it is given.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        if libc::getrusage(libc::RUSAGE_SELF, &mut usage) != 0 {
            return 0.0;
        }
        usage
    };
    let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    seconds(usage.ru_utime) + seconds(usage.ru_stime)
}
