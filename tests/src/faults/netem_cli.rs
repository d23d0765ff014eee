//! `pgtier-faults --netem ...`: the harness's packet-level netem on its own, for trying a
//! fault by hand (a benchmark with a jittery replica, a demo): every packet of one link of
//! a namespace, both ways, held or dropped as asked, until SIGINT or SIGTERM; then the rules
//! are deleted, the held packets accepted, and the counts printed.
//!
//! `--netem --netns NS --link DEV [--delay-ms N] [--jitter-ms N] [--late-percent P
//! --late-ms N] [--loss-percent P] [--queue N]`; without `--netns`, the caller's namespace.

use std::io;
use std::time::Duration;

use super::netem::{Netem, NetemSpec, NetemStats, QueueRules};

/// What `--netem` was asked to do.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NetemOptions {
    pub netns: Option<String>,
    pub link: String,
    pub queue: u16,
    pub spec: NetemSpec,
}

impl NetemOptions {
    /// Parses the arguments after `--netem`.
    pub fn parse(args: &[String]) -> Result<NetemOptions, String> {
        let mut options = NetemOptions::default();
        let mut args = args.iter();
        while let Some(arg) = args.next() {
            let mut value = || {
                args.next()
                    .cloned()
                    .ok_or_else(|| format!("{arg} needs a value"))
            };
            let ms = |text: String| {
                text.parse::<u64>()
                    .map(Duration::from_millis)
                    .map_err(|_| format!("{arg}: {text:?} is not a whole number of ms"))
            };
            let percent = |text: String| match text.parse::<u32>() {
                Ok(p) if p <= 100 => Ok(p),
                _ => Err(format!("{arg}: {text:?} is not a percentage")),
            };
            match arg.as_str() {
                "--netns" => options.netns = Some(value()?),
                "--link" => options.link = value()?,
                "--queue" => {
                    let text = value()?;
                    options.queue = text
                        .parse()
                        .map_err(|_| format!("--queue: {text:?} is not a queue number"))?;
                }
                "--delay-ms" => options.spec.delay = ms(value()?)?,
                "--jitter-ms" => options.spec.jitter = ms(value()?)?,
                "--late-ms" => options.spec.late_by = ms(value()?)?,
                "--late-percent" => options.spec.late_percent = percent(value()?)?,
                "--loss-percent" => options.spec.loss_percent = percent(value()?)?,
                other => return Err(format!("--netem: unknown argument {other}")),
            }
        }
        if options.link.is_empty() {
            return Err("--netem needs --link DEV (the interface whose packets to hold)".into());
        }
        Ok(options)
    }
}

/// Runs the netem until `until` returns (the caller waits for a signal), then tears it
/// down: rules first, so nothing new is queued, then the netem, which accepts what it holds.
pub fn run(options: &NetemOptions, until: impl FnOnce()) -> io::Result<NetemStats> {
    let netem = Netem::start(
        options.netns.clone(),
        options.queue,
        options.spec,
        u64::from(std::process::id()),
    )?;
    let mut rules = QueueRules::new(options.netns.clone());
    let link = options.link.as_str();
    rules.add("INPUT", &["-i", link], options.queue)?;
    rules.add("OUTPUT", &["-o", link], options.queue)?;
    until();
    rules.clear()?;
    netem.stop()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(text: &str) -> Vec<String> {
        text.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn a_jitter_on_a_namespaces_link_parses() {
        let options = NetemOptions::parse(&args(
            "--netns lab-pg1 --link eth0 --delay-ms 50 --jitter-ms 40",
        ))
        .expect("parse");
        assert_eq!(options.netns.as_deref(), Some("lab-pg1"));
        assert_eq!(options.link, "eth0");
        assert_eq!(
            options.spec,
            NetemSpec::jitter(Duration::from_millis(50), Duration::from_millis(40))
        );
    }

    #[test]
    fn a_missing_link_or_a_bad_percentage_is_refused() {
        assert!(NetemOptions::parse(&args("--delay-ms 5")).is_err());
        assert!(NetemOptions::parse(&args("--link eth0 --loss-percent 101")).is_err());
        assert!(NetemOptions::parse(&args("--link eth0 --delay-ms")).is_err());
        assert!(NetemOptions::parse(&args("--link eth0 --bogus 1")).is_err());
    }
}
