//! The table of docs/reliability.md: one row per scenario, written by the harness between
//! two markers so the document is regenerated, never hand-typed.

use std::fmt::Write as _;
use std::io;
use std::path::Path;
use std::time::Duration;

use super::fault::Fault;
use super::measure::ScenarioResult;

pub const BEGIN: &str = "<!-- BEGIN faults table: written by bench/faults.sh, do not edit -->";
pub const END: &str = "<!-- END faults table -->";

/// The header line saying where and how the figures were taken.
pub fn header(draft: bool, mode: &str) -> String {
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let load = load
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ");
    let cores = std::thread::available_parallelism().map_or(0, usize::from);
    let mut text = String::new();
    if draft {
        text.push_str(
            "**Draft**: measured on a loaded, shared machine (other builds and tests running); \
             rates are indicative only and are to be regenerated on a quiet machine. ",
        );
    }
    let _ = write!(
        text,
        "Mode `{mode}`, {cores} cores, load average {load} at the start, pgtier built {}.",
        if cfg!(debug_assertions) {
            "debug (unoptimized)"
        } else {
            "release"
        }
    );
    text
}

/// The markdown table.
/// `more` are the rows other benches measured (`super::fragments::rows`).
pub fn table(results: &[ScenarioResult], more: &[String]) -> String {
    let mut text = String::from(
        "| scenario | load held (share of undisturbed) | errors seen by clients, by kind | \
         acknowledged writes lost | writes duplicated | detection time | recovery time | \
         ledger (acknowledged / failed / unknown) |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    for fault in Fault::ALL {
        let Some(result) = results.iter().find(|r| r.fault == fault) else {
            let _ = writeln!(text, "| {} | not run | | | | | | |", fault.title());
            continue;
        };
        let _ = writeln!(text, "{}", row(result));
    }
    for row in more {
        let _ = writeln!(text, "{row}");
    }
    text
}

fn row(result: &ScenarioResult) -> String {
    let held = format!(
        "reads {}, writes {}",
        share(result.reads_held),
        share(result.writes_held)
    );
    let errors = format!(
        "reads: {}; writes: {}",
        kinds(&result.read_errors),
        kinds(&result.write_errors)
    );
    let ledger = &result.ledger;
    let mut ledger_cell = format!(
        "{} / {} / {} ({} committed)",
        ledger.acknowledged, ledger.failed, ledger.unknown, ledger.unknown_committed
    );
    if !ledger.failed_present.is_empty() || !ledger.stray.is_empty() {
        let _ = write!(
            ledger_cell,
            "; **{} failed but present, {} stray**",
            ledger.failed_present.len(),
            ledger.stray.len()
        );
    }
    if !ledger.unexpected_unknown.is_empty() {
        let list: Vec<String> = ledger
            .unexpected_unknown
            .iter()
            .map(|(kind, n)| format!("{kind} ×{n}"))
            .collect();
        let _ = write!(
            ledger_cell,
            "; unknown not as 08006/08003/08007: {}",
            list.join(", ")
        );
    }
    let _ = write!(
        ledger_cell,
        "; read-your-writes: {} reads, {} stale",
        result.ryw_reads, result.ryw_stale
    );
    if let Some(netem) = &result.netem {
        let _ = write!(
            ledger_cell,
            "; netem: {} packets, {} overtaken within their connection, {} dropped",
            netem.packets, netem.reordered, netem.dropped
        );
    }
    let detection = match result.detection {
        Some(at) => format!("{} (SHOW REPLICAS down)", seconds(at)),
        None if result.fault.replica().is_some() => "not marked down".to_string(),
        None => "— (not a replica fault)".to_string(),
    };
    let mut recovery = match result.recovery {
        Some(at) => seconds(at),
        None => format!("not within {}", seconds(result.window)),
    };
    if matches!(
        result.fault,
        Fault::Switchover | Fault::Failover | Fault::PrimaryPartition
    ) {
        match result.write_gap {
            Some(gap) => {
                let _ = write!(recovery, "; longest write gap {}", seconds(gap));
            }
            None => recovery.push_str("; no write before the fault"),
        }
    }
    format!(
        "| {} | {held} | {errors} | {} | {} | {detection} | {recovery} | {ledger_cell} |",
        result.fault.title(),
        ledger.lost.len(),
        ledger.duplicated.len()
    )
}

fn share(value: Option<f64>) -> String {
    value.map_or("—".to_string(), |v| format!("{:.0} %", v * 100.0))
}

fn kinds(list: &[(String, u32)]) -> String {
    if list.is_empty() {
        return "none".to_string();
    }
    list.iter()
        .map(|(kind, n)| format!("{kind} ×{n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn seconds(duration: Duration) -> String {
    format!("{:.1} s", duration.as_secs_f64())
}

/// Replaces the text between the markers of `doc` with `body`.
pub fn rewrite_doc(doc: &Path, body: &str) -> io::Result<()> {
    let text = std::fs::read_to_string(doc)?;
    let (Some(begin), Some(end)) = (text.find(BEGIN), text.find(END)) else {
        return Err(io::Error::other(format!(
            "{} has no faults table markers",
            doc.display()
        )));
    };
    if end < begin {
        return Err(io::Error::other("faults table markers out of order"));
    }
    let mut out = String::with_capacity(text.len() + body.len());
    out.push_str(&text[..begin + BEGIN.len()]);
    out.push('\n');
    out.push_str(body);
    out.push_str(&text[end..]);
    std::fs::write(doc, out)
}
