//! The rows of the reliability table that other benches measure: `bench/hostile.sh` writes
//! docs/reliability-hostile.md and `bench/soak.sh` docs/reliability-soak.md, each a generated
//! fragment with its own table. The faults harness reads them back when it writes
//! docs/reliability.md, so the one table has a row per scenario and no row is hand-typed.

use std::path::Path;

/// One table row (with its `|`s) per hostile load, then the soak's row, from the fragments
/// beside `doc`; a fragment that is missing gives a row saying so.
pub fn rows(doc: &Path) -> Vec<String> {
    let dir = doc.parent().unwrap_or_else(|| Path::new("."));
    let mut rows = match std::fs::read_to_string(dir.join("reliability-hostile.md")) {
        Ok(text) => hostile_rows(&text),
        Err(_) => vec![missing("hostile loads", "bench/hostile.sh")],
    };
    rows.push(
        match std::fs::read_to_string(dir.join("reliability-soak.md")) {
            Ok(text) => soak_row(&text).unwrap_or_else(|| missing("soak", "bench/soak.sh")),
            Err(_) => missing("soak", "bench/soak.sh"),
        },
    );
    rows
}

fn missing(what: &str, script: &str) -> String {
    format!("| {what} | not measured yet (`{script}`) | | | | | | |")
}

/// The cells of a markdown table row, trimmed; `None` for other lines and the separator.
fn cells(line: &str) -> Option<Vec<&str>> {
    let inner = line.trim().strip_prefix('|')?.strip_suffix('|')?;
    let cells: Vec<&str> = inner.split('|').map(str::trim).collect();
    if cells
        .iter()
        .all(|c| c.chars().all(|ch| ch == '-' || ch == ' '))
    {
        return None;
    }
    Some(cells)
}

/// Hostile fragment columns: load, legit tps, share, failed tx, aborted clients, new legit
/// logins ok, server logins, peak RSS MB, peak fds, CPU, alive, verdict, attacker's counts.
fn hostile_rows(text: &str) -> Vec<String> {
    let mut rows = Vec::new();
    for line in text.lines() {
        let Some(c) = cells(line) else { continue };
        if c.len() < 12 || c[0] == "load" || c[0] == "undisturbed" {
            continue;
        }
        rows.push(format!(
            "| hostile: {} | {} of undisturbed ({} tps of `pgbench -S`) | failed transactions {}, \
             aborted clients {}, new legit logins ok {}; pgtier alive: {} | n/a (read load) | n/a \
             | n/a | n/a | pgtier peak RSS {} MB, peak fds {}; verdict {} |",
            c[0], c[2], c[1], c[3], c[4], c[5], c[10], c[7], c[8], c[11]
        ));
    }
    if rows.is_empty() {
        rows.push(missing("hostile loads", "bench/hostile.sh"));
    }
    rows
}

/// Soak fragment: "N minutes of mixed load ...", "Served: ...", then a table with columns
/// series, against, first, last, slope, growth, allowed, verdict.
fn soak_row(text: &str) -> Option<String> {
    let minutes = text.lines().find_map(|l| {
        l.split_once(" of mixed load")
            .map(|(m, _)| m.trim().to_string())
    })?;
    let errors = text
        .lines()
        .find_map(|l| l.strip_prefix("Served: "))
        .and_then(|l| {
            l.split(", ")
                .find(|part| part.contains("other client errors"))
        })
        .unwrap_or("client errors not reported")
        .trim_end_matches('.');
    let mut slopes = Vec::new();
    let mut verdicts = Vec::new();
    for line in text.lines() {
        let Some(c) = cells(line) else { continue };
        if c.len() < 8 || c[0] == "series" {
            continue;
        }
        verdicts.push(c[7]);
        if c[1] == "time" && (c[0].starts_with("RSS") || c[0].starts_with("fds")) {
            slopes.push(format!(
                "{} {} → {}, slope {} ({})",
                c[0], c[2], c[3], c[4], c[7]
            ));
        }
    }
    let verdict = if !verdicts.is_empty() && verdicts.iter().all(|v| *v == "flat") {
        "every series flat"
    } else {
        "a series grew (see the soak section)"
    };
    Some(format!(
        "| soak ({minutes}: churn, cancels, errors, reloads, a replica restart) | n/a (mixed \
         load, no undisturbed run) | {errors} | n/a (no ledger) | n/a | n/a | n/a | {}; {verdict} |",
        slopes.join("; ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostile_rows_skip_the_undisturbed_runs() {
        let text = "| load | legit tps | share | failed tx | aborted clients | new legit logins ok | server logins | pgtier peak RSS MB | pgtier peak fds | pgtier CPU % of a core | pgtier alive | verdict | attacker's counts |\n\
                    | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n\
                    | undisturbed | 20793 | 1.00 | 0 | 0 | 24/24 | 9 | 10 | 30 | 49 | yes | ok | - |\n\
                    | slowloris | 20465 | 0.98 | 0 | 0 | 23/23 | 0 | 11 | 3030 | 47 | yes | ok | width=3000 |\n";
        let rows = hostile_rows(text);
        assert_eq!(rows.len(), 1);
        assert!(rows[0].starts_with("| hostile: slowloris | 0.98 of undisturbed"));
        assert!(rows[0].contains("peak fds 3030"));
    }

    #[test]
    fn the_soak_row_names_its_length_errors_and_slopes() {
        let text = "## Soak\n\n2 minutes of mixed load through pgtier\n\nServed: 10 connections, 5 errors made on purpose, 4 other client errors (restart), 3 cancels.\n\n\
                    | series | against | first | last | slope | growth over the window | allowed (noise or floor) | verdict |\n| --- | --- | --- | --- | --- | --- | --- | --- |\n\
                    | RSS (MiB) | time | 11.3 | 11.5 | 0.1 MiB/min | 0.16 | 2.00 | flat |\n\
                    | fds (fds) | time | 43.0 | 45.0 | 1.5 fds/min | 1.77 | 12.00 | flat |\n";
        let row = soak_row(text).expect("a row");
        assert!(row.starts_with("| soak (2 minutes"));
        assert!(row.contains("4 other client errors (restart)"));
        assert!(row.contains("RSS (MiB) 11.3 → 11.5, slope 0.1 MiB/min (flat)"));
        assert!(row.contains("every series flat"));
    }
}
