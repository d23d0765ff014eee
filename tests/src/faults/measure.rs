//! What a scenario measured, from the load's report: the share of undisturbed throughput
//! held during the fault, errors by kind, detection and recovery times, the longest time
//! without an acknowledged write. Pure functions of the report and the phase times.

use std::time::Duration;

use super::fault::Fault;
use super::ledger::{LedgerCheck, Outcome};
use super::load::{BUCKET, LoadReport};
use super::netem::NetemStats;

/// What one scenario measured.
#[derive(Clone, Debug)]
pub struct ScenarioResult {
    pub fault: Fault,
    /// Reads and acknowledged writes per second while the fault lasted, as a share of the
    /// undisturbed rate before it.
    pub reads_held: Option<f64>,
    pub writes_held: Option<f64>,
    pub read_errors: Vec<(String, u32)>,
    pub write_errors: Vec<(String, u32)>,
    pub ledger: LedgerCheck,
    /// From the fault until pgtier's SHOW REPLICAS marked the faulty replica down.
    pub detection: Option<Duration>,
    /// From the heal (or the fault, when nothing heals) until reads and writes held 80 % of
    /// the undisturbed rate for a second.
    pub recovery: Option<Duration>,
    /// The longest time without an acknowledged write, from the fault on.
    pub write_gap: Option<Duration>,
    /// Seconds of the phase `recovery` is searched in (for "not within").
    pub window: Duration,
    /// Reads of a session's own acknowledged write, and how many missed it.
    pub ryw_reads: u32,
    pub ryw_stale: u32,
    /// What the packet-level netem did, for the faults it injects.
    pub netem: Option<NetemStats>,
}

/// The moments of a scenario, from the start of its load.
#[derive(Clone, Copy, Debug)]
pub struct Phases {
    pub fault_at: Duration,
    pub heal_at: Duration,
    pub recovery_from: Duration,
    pub end: Duration,
}

/// Undisturbed rates skip the first second (connections opening).
const WARMUP: Duration = Duration::from_secs(1);
/// Recovered: both rates at this share of undisturbed, over `HOLD`.
const RECOVERED_SHARE: f64 = 0.8;
const HOLD: Duration = Duration::from_secs(1);

pub fn measure(
    fault: Fault,
    report: &LoadReport,
    ledger: LedgerCheck,
    phases: Phases,
    target: Option<&str>,
) -> ScenarioResult {
    let base_reads = rate(&report.reads, WARMUP, phases.fault_at);
    let base_writes = rate(&report.writes, WARMUP, phases.fault_at);
    let share = |series: &[u32], base: f64| {
        (base > 0.0).then(|| rate(series, phases.fault_at, phases.heal_at) / base)
    };
    let detection = target.and_then(|target| {
        report
            .states
            .iter()
            .find(|change| {
                change.at >= phases.fault_at && change.replica == target && change.state != "up"
            })
            .map(|change| change.at - phases.fault_at)
    });
    let recovery = recovered_at(report, base_reads, base_writes, phases)
        .map(|at| at.saturating_sub(phases.recovery_from));
    ScenarioResult {
        fault,
        reads_held: share(&report.reads, base_reads),
        writes_held: share(&report.writes, base_writes),
        read_errors: sorted(&report.read_errors),
        write_errors: sorted(&report.write_errors),
        ledger,
        detection,
        recovery,
        write_gap: write_gap(report, phases),
        window: phases.end.saturating_sub(phases.recovery_from),
        ryw_reads: report.ryw_reads,
        ryw_stale: report.ryw_stale,
        netem: None,
    }
}

fn sorted(errors: &std::collections::BTreeMap<String, u32>) -> Vec<(String, u32)> {
    let mut list: Vec<(String, u32)> = errors.iter().map(|(k, v)| (k.clone(), *v)).collect();
    list.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    list
}

fn bucket_of(at: Duration) -> usize {
    usize::try_from(at.as_millis() / BUCKET.as_millis()).unwrap_or(usize::MAX)
}

/// Events per second in `[from, to)`.
fn rate(series: &[u32], from: Duration, to: Duration) -> f64 {
    let (first, last) = (bucket_of(from), bucket_of(to));
    if last <= first {
        return 0.0;
    }
    let total: u64 = (first..last)
        .map(|b| u64::from(series.get(b).copied().unwrap_or(0)))
        .sum();
    total as f64 / ((last - first) as f64 * BUCKET.as_secs_f64())
}

/// The first moment after `recovery_from` from which both rates hold `RECOVERED_SHARE` of
/// undisturbed for `HOLD`.
fn recovered_at(
    report: &LoadReport,
    base_reads: f64,
    base_writes: f64,
    phases: Phases,
) -> Option<Duration> {
    let hold = bucket_of(HOLD);
    let (first, last) = (bucket_of(phases.recovery_from), bucket_of(phases.end));
    (first..last.saturating_sub(hold)).find_map(|b| {
        let from = BUCKET * u32::try_from(b).ok()?;
        let to = from + HOLD;
        let reads_ok = rate(&report.reads, from, to) >= RECOVERED_SHARE * base_reads;
        let writes_ok = rate(&report.writes, from, to) >= RECOVERED_SHARE * base_writes;
        (reads_ok && writes_ok).then_some(from)
    })
}

/// The longest stretch without an acknowledged write from the fault to the end.
fn write_gap(report: &LoadReport, phases: Phases) -> Option<Duration> {
    let mut acks: Vec<Duration> = report
        .ledger
        .iter()
        .filter(|r| r.outcome == Outcome::Acknowledged)
        .map(|r| r.at)
        .collect();
    acks.sort_unstable();
    let mut previous = acks
        .iter()
        .rev()
        .find(|&&at| at < phases.fault_at)
        .copied()?;
    let mut longest = Duration::ZERO;
    for &at in acks.iter().filter(|&&at| at >= phases.fault_at) {
        longest = longest.max(at - previous);
        previous = at;
    }
    Some(longest.max(phases.end.saturating_sub(previous)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::faults::ledger::WriteRecord;
    use crate::faults::load::StateChange;

    fn secs(s: f64) -> Duration {
        Duration::from_secs_f64(s)
    }

    /// 10 s at 100 reads and 50 writes per second, nothing between 4 s and 6 s.
    fn outage_report() -> LoadReport {
        let mut report = LoadReport::default();
        for bucket in 0..100u32 {
            let down = (40..60).contains(&bucket);
            report.reads.push(if down { 0 } else { 10 });
            report.writes.push(if down { 0 } else { 5 });
            if !down {
                for k in 0..5 {
                    report.ledger.push(WriteRecord {
                        id: i64::from(bucket * 5 + k),
                        at: BUCKET * bucket + Duration::from_millis(u64::from(k) * 20),
                        outcome: Outcome::Acknowledged,
                    });
                }
            }
        }
        report.states.push(StateChange {
            at: secs(4.5),
            replica: "10.0.0.1:5432".into(),
            state: "down".into(),
        });
        report
    }

    fn phases() -> Phases {
        Phases {
            fault_at: secs(4.0),
            heal_at: secs(5.0),
            recovery_from: secs(5.0),
            end: secs(10.0),
        }
    }

    #[test]
    fn an_outage_holds_nothing_is_detected_and_recovers_after_it() {
        let result = measure(
            Fault::HungReplica,
            &outage_report(),
            LedgerCheck::default(),
            phases(),
            Some("10.0.0.1:5432"),
        );
        assert_eq!(result.reads_held, Some(0.0));
        assert_eq!(result.writes_held, Some(0.0));
        assert_eq!(result.detection, Some(secs(0.5)));
        // Rates are back at 6 s, one second after the heal; the first one-second window
        // averaging 80 % starts two buckets earlier.
        assert_eq!(result.recovery, Some(secs(0.8)));
        let gap = result.write_gap.expect("writes before the fault");
        assert!(gap >= secs(2.0) && gap < secs(2.2), "{gap:?}");
    }

    #[test]
    fn rates_count_whole_buckets() {
        let series = vec![10; 20];
        assert!((rate(&series, secs(0.0), secs(1.0)) - 100.0).abs() < 1e-9);
        assert_eq!(rate(&series, secs(1.0), secs(1.0)), 0.0);
    }

    #[test]
    fn no_recovery_within_the_run_is_none() {
        let mut report = outage_report();
        report.reads.truncate(40);
        let result = measure(
            Fault::KilledReplica,
            &report,
            LedgerCheck::default(),
            phases(),
            None,
        );
        assert_eq!(result.recovery, None);
        assert_eq!(result.detection, None);
    }
}
