//! What one host tells its fleet each interval, and the sum the leader decides on.
//!
//! A report is plain text in one `text` column of the store (one line per replica), so an
//! operator can read it with `psql` and no schema change is needed when a field is added:
//! `router<TAB>replica<TAB>s0,s1,s2,s3<TAB>i0,i1,i2,i3<TAB>up|down`, where `s` are the open
//! sessions and `i` the transactions in flight per rank (premium is rank 0). A line that does
//! not parse is skipped, so one bad member cannot stop the leader.

use pgtier_policy::tiers::{MAX_TIERS, TierLoad};

/// One replica as one host sees it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReplicaReport {
    /// Open sessions per rank.
    pub sessions: TierLoad,
    /// Transactions in flight per rank (zero unless PLB decides on them).
    pub in_flight: TierLoad,
    /// The host's own probes (or its servers) found it Down.
    pub down: bool,
}

/// One router's replicas, in the router's order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RouterReport {
    /// The router's label (the database entries it serves); hosts of a fleet share the
    /// configuration, so the label names the same replica set on each.
    pub name: String,
    /// Replica `i` is `replicas[i]`.
    pub replicas: Vec<ReplicaReport>,
}

/// Everything one host reports.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostReport {
    /// One entry per router.
    pub routers: Vec<RouterReport>,
}

/// The fleet's view of one router: every live member's report added up.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Summed {
    /// Open sessions per replica and rank, over the live members.
    pub sessions: Vec<TierLoad>,
    /// Transactions in flight per replica and rank.
    pub in_flight: Vec<TierLoad>,
    /// Down when any live member sees it Down.
    pub down: Vec<bool>,
    /// Live members that reported this router.
    pub reporters: usize,
}

impl HostReport {
    /// The report as text (see the module doc). Router names with a tab or a newline
    /// cannot be written and are left out (configuration names never have them).
    pub fn encode(&self) -> String {
        let mut out = String::new();
        for router in &self.routers {
            if router.name.contains(['\t', '\n']) {
                continue;
            }
            for (index, replica) in router.replicas.iter().enumerate() {
                out.push_str(&format!(
                    "{}\t{index}\t{}\t{}\t{}\n",
                    router.name,
                    ranks(replica.sessions),
                    ranks(replica.in_flight),
                    if replica.down { "down" } else { "up" },
                ));
            }
        }
        out
    }

    /// Reads a report back; lines that do not parse are skipped, and a replica missing from
    /// the text reads as idle and up.
    pub fn decode(text: &str) -> HostReport {
        let mut report = HostReport::default();
        for line in text.lines() {
            let Some((name, index, replica)) = decode_line(line) else {
                continue;
            };
            let position = match report.routers.iter().position(|r| r.name == name) {
                Some(position) => position,
                None => {
                    report.routers.push(RouterReport {
                        name: name.to_string(),
                        replicas: Vec::new(),
                    });
                    report.routers.len() - 1
                }
            };
            let replicas = &mut report.routers[position].replicas;
            if replicas.len() <= index {
                replicas.resize(index + 1, ReplicaReport::default());
            }
            replicas[index] = replica;
        }
        report
    }

    /// This host's report of router `name`.
    pub fn router(&self, name: &str) -> Option<&RouterReport> {
        self.routers.iter().find(|router| router.name == name)
    }
}

/// Most replicas a line may name; more than any router has (`MAX_REPLICAS`).
const MAX_INDEX: usize = 64;

fn decode_line(line: &str) -> Option<(&str, usize, ReplicaReport)> {
    let mut fields = line.split('\t');
    let name = fields.next()?;
    let index: usize = fields.next()?.parse().ok()?;
    let sessions = parse_ranks(fields.next()?)?;
    let in_flight = parse_ranks(fields.next()?)?;
    let down = match fields.next()? {
        "down" => true,
        "up" => false,
        _ => return None,
    };
    (index < MAX_INDEX && fields.next().is_none()).then_some((
        name,
        index,
        ReplicaReport {
            sessions,
            in_flight,
            down,
        },
    ))
}

fn ranks(load: TierLoad) -> String {
    let parts: Vec<String> = load.sessions.iter().map(u32::to_string).collect();
    parts.join(",")
}

fn parse_ranks(text: &str) -> Option<TierLoad> {
    let mut load = TierLoad::default();
    let mut count = 0;
    for (slot, part) in load.sessions.iter_mut().zip(text.split(',')) {
        *slot = part.parse().ok()?;
        count += 1;
    }
    (count == MAX_TIERS && text.split(',').count() == MAX_TIERS).then_some(load)
}

/// Adds up router `name`'s `replica_count` replicas over `reports` (the live members'). A
/// member that reports more replicas than `replica_count` (another configuration) has the
/// extra ones ignored; counts saturate rather than wrap.
pub fn sum<'a>(
    reports: impl IntoIterator<Item = &'a HostReport>,
    name: &str,
    replica_count: usize,
) -> Summed {
    let mut summed = Summed {
        sessions: vec![TierLoad::default(); replica_count],
        in_flight: vec![TierLoad::default(); replica_count],
        down: vec![false; replica_count],
        reporters: 0,
    };
    for report in reports {
        let Some(router) = report.router(name) else {
            continue;
        };
        summed.reporters += 1;
        for (index, replica) in router.replicas.iter().enumerate().take(replica_count) {
            add(&mut summed.sessions[index], replica.sessions);
            add(&mut summed.in_flight[index], replica.in_flight);
            summed.down[index] |= replica.down;
        }
    }
    summed
}

fn add(total: &mut TierLoad, more: TierLoad) {
    for (slot, extra) in total.sessions.iter_mut().zip(more.sessions) {
        *slot = slot.saturating_add(extra);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(ranks: [u32; MAX_TIERS]) -> TierLoad {
        TierLoad { sessions: ranks }
    }

    fn report(name: &str, replicas: &[([u32; 4], bool)]) -> HostReport {
        HostReport {
            routers: vec![RouterReport {
                name: name.to_string(),
                replicas: replicas
                    .iter()
                    .map(|&(sessions, down)| ReplicaReport {
                        sessions: load(sessions),
                        in_flight: load([1, 0, 0, 0]),
                        down,
                    })
                    .collect(),
            }],
        }
    }

    #[test]
    fn a_report_reads_back_as_written() {
        let mut written = report("analytics,analytics_premium", &[([3, 4, 0, 0], false)]);
        written.routers.push(RouterReport {
            name: "app".to_string(),
            replicas: vec![
                ReplicaReport::default(),
                ReplicaReport {
                    down: true,
                    ..ReplicaReport::default()
                },
            ],
        });
        assert_eq!(HostReport::decode(&written.encode()), written);
    }

    #[test]
    fn lines_that_do_not_parse_are_skipped() {
        let text = "app\t0\t1,2,0,0\t0,0,0,0\tup\n\
                    app\tx\t1,2,0,0\t0,0,0,0\tup\n\
                    app\t1\t1,2\t0,0,0,0\tup\n\
                    app\t1\t1,2,0,0\t0,0,0,0\tsideways\n\
                    app\t99\t1,2,0,0\t0,0,0,0\tup\n\
                    garbage\n";
        let decoded = HostReport::decode(text);
        assert_eq!(decoded.routers.len(), 1);
        assert_eq!(decoded.routers[0].replicas.len(), 1);
        assert_eq!(decoded.routers[0].replicas[0].sessions, load([1, 2, 0, 0]));
    }

    #[test]
    fn the_sum_adds_sessions_and_any_down_is_down() {
        let a = report("app", &[([3, 1, 0, 0], false), ([0, 5, 0, 0], false)]);
        let b = report("app", &[([2, 0, 0, 0], false), ([0, 1, 0, 0], true)]);
        let other = report("other", &[([100, 100, 0, 0], true)]);
        let summed = sum([&a, &b, &other], "app", 2);
        assert_eq!(summed.reporters, 2);
        assert_eq!(
            summed.sessions,
            vec![load([5, 1, 0, 0]), load([0, 6, 0, 0])]
        );
        assert_eq!(summed.in_flight[0], load([2, 0, 0, 0]));
        assert_eq!(summed.down, vec![false, true]);
    }

    #[test]
    fn a_member_with_more_replicas_does_not_overflow_the_sum() {
        let big = report(
            "app",
            &[([u32::MAX, 0, 0, 0], false), ([1, 1, 0, 0], false)],
        );
        let summed = sum([&big, &big], "app", 1);
        assert_eq!(summed.sessions, vec![load([u32::MAX, 0, 0, 0])]);
        assert_eq!(summed.down, vec![false]);
    }
}
