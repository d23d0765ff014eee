//! The whole workload of a run, fixed before anything runs: which sessions arrive when, in
//! which class, for how long, and which queries they run with what think time.
//!
//! Pure and deterministic: a function of the seed and the parameters only. Every routing
//! strategy run with the same seed therefore faces the same sessions (common random
//! numbers), and the differences between runs are the strategies'. Streams are split so that
//! changing one class's rate leaves the other classes' sessions untouched: each class has its
//! own arrival stream, and each session its own stream keyed by (seed, class, index).
//!
//! A run has two to [`Class::MAX`] classes, ranks 0..n-1. Each rank's streams are derived
//! from its rank alone (the derivation of the two-class planner, extended), so the premium
//! and freemium sessions of a seed are the same whether or not tier2 and tier3 run beside
//! them, and adding a class never moves the sessions of the others.

use crate::sim::rng::SimRng;
use crate::sim::workload::Class;

/// Most sessions one schedule may hold (a limit on everything: rate × duration typos).
pub const MAX_PLANNED_SESSIONS: usize = 1_000_000;

/// What the workload looks like.
#[derive(Debug, Clone, PartialEq)]
pub struct ScheduleParams {
    /// Session arrival rate per class (sessions/s), by rank: premium first, then freemium,
    /// tier2, tier3. Its length is the number of classes (2 to [`Class::MAX`]); 0 means the
    /// class runs but no session of it arrives.
    pub rate_per_s: Vec<f64>,
    /// Arrivals happen in [0, duration_s); sessions may outlive it.
    pub duration_s: f64,
    /// Session lifetimes are uniform in [min, max] (s).
    pub lifetime_s: (f64, f64),
    /// Mean exponential think time between queries (s); 0 means none.
    pub think_mean_s: f64,
    /// Relative weight of each query (index order of the queries file).
    pub query_weights: Vec<f64>,
}

impl ScheduleParams {
    /// Checks the parameters; Err says which one is wrong.
    pub fn validate(&self) -> Result<(), String> {
        let non_negative = |v: f64| v.is_finite() && v >= 0.0;
        if !(2..=Class::MAX).contains(&self.rate_per_s.len()) {
            return Err(format!(
                "a run has 2 to {} classes, not {}",
                Class::MAX,
                self.rate_per_s.len()
            ));
        }
        if !self.rate_per_s.iter().copied().all(non_negative) {
            return Err("rates must be finite and non-negative".into());
        }
        if self.rate_per_s.iter().all(|&r| r == 0.0) {
            return Err("every rate is zero: no sessions would arrive".into());
        }
        if !(self.duration_s.is_finite() && self.duration_s > 0.0) {
            return Err("duration must be positive".into());
        }
        let (min, max) = self.lifetime_s;
        if !(non_negative(min) && max.is_finite() && min <= max && max > 0.0) {
            return Err("lifetime must be MIN:MAX with 0 <= MIN <= MAX and MAX > 0".into());
        }
        if !non_negative(self.think_mean_s) {
            return Err("think time must be finite and non-negative".into());
        }
        QueryPicker::new(&self.query_weights).map(|_| ())
    }

    /// The classes of the run, in rank order.
    pub fn classes(&self) -> impl Iterator<Item = Class> {
        Class::ranks(self.rate_per_s.len())
    }
}

/// Picks a query index with probability proportional to its weight.
#[derive(Debug, Clone, PartialEq)]
pub struct QueryPicker {
    /// Running sums of the weights; the last is the total.
    cumulative: Vec<f64>,
}

impl QueryPicker {
    /// A picker over `weights` (non-negative, finite, not all zero).
    pub fn new(weights: &[f64]) -> Result<Self, String> {
        if weights.iter().any(|w| !w.is_finite() || *w < 0.0) {
            return Err("query weights must be finite and non-negative".into());
        }
        let cumulative: Vec<f64> = weights
            .iter()
            .scan(0.0, |sum, w| {
                *sum += w;
                Some(*sum)
            })
            .collect();
        match cumulative.last() {
            Some(&total) if total > 0.0 => Ok(Self { cumulative }),
            _ => Err("query weights must not all be zero".into()),
        }
    }

    /// The query chosen by a uniform draw `unit` in [0, 1).
    fn pick(&self, unit: f64) -> usize {
        let total = self.cumulative.last().copied().unwrap_or(0.0);
        let target = unit * total;
        // First index whose running sum exceeds the target: zero-weight queries, whose sum
        // equals the previous one, are never chosen.
        let index = self.cumulative.partition_point(|&c| c <= target);
        index.min(self.cumulative.len().saturating_sub(1))
    }
}

/// One step of a session: run a query, then think.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Step {
    /// Index into the queries file.
    pub query: usize,
    /// Think time after the query completes (s).
    pub think_s: f64,
}

/// One session of the workload.
#[derive(Debug, Clone)]
pub struct SessionPlan {
    /// Service class.
    pub class: Class,
    /// Index among the sessions of its class, in arrival order (stable across runs).
    pub index: u64,
    /// Arrival offset from the run start (s).
    pub arrival_s: f64,
    /// How long the session lives from its arrival (s).
    pub lifetime_s: f64,
    /// The session's own stream, positioned after its lifetime draw.
    steps_rng: SimRng,
    /// Mean think time (s).
    think_mean_s: f64,
}

impl SessionPlan {
    /// When the session's lifetime ends, from the run start (s).
    pub fn end_s(&self) -> f64 {
        self.arrival_s + self.lifetime_s
    }

    /// The session's endless sequence of steps; the driver stops at the end of the lifetime.
    pub fn steps<'a>(&self, picker: &'a QueryPicker) -> Steps<'a> {
        Steps {
            rng: self.steps_rng.clone(),
            picker,
            think_mean_s: self.think_mean_s,
        }
    }
}

/// A session's steps, generated lazily from its own stream.
#[derive(Debug, Clone)]
pub struct Steps<'a> {
    rng: SimRng,
    picker: &'a QueryPicker,
    think_mean_s: f64,
}

impl Iterator for Steps<'_> {
    type Item = Step;

    fn next(&mut self) -> Option<Step> {
        let query = self.picker.pick(self.rng.unit());
        let think_s = self.rng.exponential(self.think_mean_s);
        Some(Step { query, think_s })
    }
}

/// The planned workload: sessions in arrival order and the query picker they share.
#[derive(Debug, Clone)]
pub struct Schedule {
    /// How many classes the run has (ranks 0..class_count); a class may have no sessions.
    pub class_count: usize,
    /// Sessions sorted by arrival (lower rank first on a tie).
    pub sessions: Vec<SessionPlan>,
    /// The weighted choice of queries.
    pub picker: QueryPicker,
}

/// Stream tags: distinct purposes must never share a stream. These are the two-class
/// planner's tags; ranks 2 and 3 extend them the same way, so recorded two-class runs replay.
const ARRIVAL_STREAM: u64 = 0xA771_0000;
const SESSION_STREAM: u64 = 0x5E55_0000_0000_0000;

fn arrival_rng(seed: u64, class: Class) -> SimRng {
    SimRng::derive(seed, ARRIVAL_STREAM + class.index() as u64)
}

fn session_rng(seed: u64, class: Class, index: u64) -> SimRng {
    // The class sits above any realistic index (bits 48 and 49 for ranks up to 3, while
    // indices stay below MAX_PLANNED_SESSIONS), so (class, index) pairs map to distinct tags.
    let tag = SESSION_STREAM ^ ((class.index() as u64) << 48) ^ index;
    SimRng::derive(seed, tag)
}

fn class_sessions(
    seed: u64,
    params: &ScheduleParams,
    class: Class,
    sessions: &mut Vec<SessionPlan>,
) -> Result<(), String> {
    let rate = params.rate_per_s[class.index()];
    if rate == 0.0 {
        return Ok(());
    }
    let mut arrivals = arrival_rng(seed, class);
    let (min, max) = params.lifetime_s;
    let mut at_s = 0.0;
    for index in 0u64.. {
        at_s += arrivals.exponential(1.0 / rate);
        if at_s >= params.duration_s {
            break;
        }
        if sessions.len() == MAX_PLANNED_SESSIONS {
            return Err(format!(
                "more than {MAX_PLANNED_SESSIONS} sessions planned: lower the rates or the duration"
            ));
        }
        let mut rng = session_rng(seed, class, index);
        let lifetime_s = rng.uniform(min, max);
        sessions.push(SessionPlan {
            class,
            index,
            arrival_s: at_s,
            lifetime_s,
            steps_rng: rng,
            think_mean_s: params.think_mean_s,
        });
    }
    Ok(())
}

/// Plans the whole workload of a run.
pub fn plan(seed: u64, params: &ScheduleParams) -> Result<Schedule, String> {
    params.validate()?;
    let picker = QueryPicker::new(&params.query_weights)?;
    let mut sessions = Vec::new();
    for class in params.classes() {
        class_sessions(seed, params, class, &mut sessions)?;
    }
    // Sessions went in by rank, so a stable sort keeps the lower rank first on (improbable)
    // equal arrival times, as the two-class planner did.
    sessions.sort_by(|a, b| a.arrival_s.total_cmp(&b.arrival_s));
    Ok(Schedule {
        class_count: params.rate_per_s.len(),
        sessions,
        picker,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params() -> ScheduleParams {
        ScheduleParams {
            rate_per_s: vec![2.0, 4.0],
            duration_s: 100.0,
            lifetime_s: (2.0, 4.0),
            think_mean_s: 0.5,
            query_weights: vec![1.0, 3.0],
        }
    }

    fn fingerprint(schedule: &Schedule, steps: usize) -> Vec<(Class, u64, u64, u64, Vec<Step>)> {
        schedule
            .sessions
            .iter()
            .map(|s| {
                (
                    s.class,
                    s.index,
                    s.arrival_s.to_bits(),
                    s.lifetime_s.to_bits(),
                    s.steps(&schedule.picker).take(steps).collect(),
                )
            })
            .collect()
    }

    #[test]
    fn same_seed_same_plan_and_different_seeds_differ() {
        let a = plan(7, &params()).unwrap();
        let b = plan(7, &params()).unwrap();
        let c = plan(8, &params()).unwrap();
        assert_eq!(fingerprint(&a, 20), fingerprint(&b, 20));
        assert_ne!(fingerprint(&a, 20), fingerprint(&c, 20));
        // Steps are replayable: asking twice gives the same sequence.
        let s = &a.sessions[0];
        let once: Vec<Step> = s.steps(&a.picker).take(5).collect();
        let twice: Vec<Step> = s.steps(&a.picker).take(5).collect();
        assert_eq!(once, twice);
    }

    #[test]
    fn sessions_are_sorted_and_inside_the_parameters() {
        let schedule = plan(3, &params()).unwrap();
        assert!(
            schedule
                .sessions
                .windows(2)
                .all(|w| w[0].arrival_s <= w[1].arrival_s)
        );
        for s in &schedule.sessions {
            assert!((0.0..100.0).contains(&s.arrival_s));
            assert!((2.0..=4.0).contains(&s.lifetime_s));
        }
    }

    #[test]
    fn mean_inter_arrival_is_close_to_one_over_rate() {
        let mut p = params();
        p.duration_s = 20_000.0;
        let schedule = plan(11, &p).unwrap();
        for (class, rate) in [(Class::PREMIUM, 2.0), (Class::FREEMIUM, 4.0)] {
            let arrivals: Vec<f64> = schedule
                .sessions
                .iter()
                .filter(|s| s.class == class)
                .map(|s| s.arrival_s)
                .collect();
            let gaps: Vec<f64> = arrivals.windows(2).map(|w| w[1] - w[0]).collect();
            let mean = gaps.iter().sum::<f64>() / gaps.len() as f64;
            assert!(
                (mean * rate - 1.0).abs() < 0.02,
                "{class:?}: mean gap {mean}"
            );
        }
    }

    #[test]
    fn changing_one_rate_leaves_the_other_class_alone() {
        let a = plan(5, &params()).unwrap();
        let mut p = params();
        p.rate_per_s[1] = 9.0;
        let b = plan(5, &p).unwrap();
        let premium = |s: &Schedule| {
            let mut f = fingerprint(s, 10);
            f.retain(|row| row.0 == Class::PREMIUM);
            f
        };
        assert_eq!(premium(&a), premium(&b));
        // Freemium session i keeps its lifetime and steps; only arrival times move.
        let freemium = |s: &Schedule, i: u64| {
            let f = fingerprint(s, 10);
            f.into_iter()
                .find(|row| row.0 == Class::FREEMIUM && row.1 == i)
                .map(|row| (row.3, row.4))
        };
        assert_eq!(freemium(&a, 3), freemium(&b, 3));
    }

    #[test]
    fn weights_are_respected() {
        let picker = QueryPicker::new(&[1.0, 0.0, 3.0]).unwrap();
        let mut rng = SimRng::new(1);
        let n = 100_000;
        let mut counts = [0usize; 3];
        for _ in 0..n {
            counts[picker.pick(rng.unit())] += 1;
        }
        assert_eq!(counts[1], 0, "a zero weight is never picked");
        let share = counts[2] as f64 / n as f64;
        assert!((share - 0.75).abs() < 0.01, "share {share}");
        assert_eq!(picker.pick(0.0), 0);
        assert_eq!(picker.pick(0.999_999_9), 2);
    }

    #[test]
    fn zero_think_and_bad_parameters() {
        let mut p = params();
        p.think_mean_s = 0.0;
        let schedule = plan(1, &p).unwrap();
        let steps: Vec<Step> = schedule.sessions[0]
            .steps(&schedule.picker)
            .take(10)
            .collect();
        assert!(steps.iter().all(|s| s.think_s == 0.0));
        let bad = [
            ScheduleParams {
                rate_per_s: vec![0.0, 0.0],
                ..params()
            },
            ScheduleParams {
                rate_per_s: vec![0.0, 0.0, 0.0],
                ..params()
            },
            ScheduleParams {
                rate_per_s: vec![-1.0, 1.0],
                ..params()
            },
            ScheduleParams {
                rate_per_s: vec![1.0, 1.0, f64::INFINITY],
                ..params()
            },
            ScheduleParams {
                rate_per_s: vec![1.0],
                ..params()
            },
            ScheduleParams {
                rate_per_s: vec![1.0; Class::MAX + 1],
                ..params()
            },
            ScheduleParams {
                duration_s: 0.0,
                ..params()
            },
            ScheduleParams {
                lifetime_s: (4.0, 2.0),
                ..params()
            },
            ScheduleParams {
                think_mean_s: f64::NAN,
                ..params()
            },
            ScheduleParams {
                query_weights: vec![0.0],
                ..params()
            },
            ScheduleParams {
                query_weights: vec![],
                ..params()
            },
        ];
        for p in bad {
            assert!(plan(1, &p).is_err(), "{p:?}");
        }
        let huge = ScheduleParams {
            rate_per_s: vec![1e6, 0.0],
            duration_s: 10.0,
            ..params()
        };
        assert!(plan(1, &huge).is_err());
    }

    /// The two-class planner as it was before classes were generalised, kept verbatim (only
    /// its rates passed as an array) as the reference that recorded runs were planned with.
    fn two_class_reference(seed: u64, params: &ScheduleParams, rates: [f64; 2]) -> Schedule {
        let mut sessions = Vec::new();
        for class in Class::ALL {
            let rate = rates[class.index()];
            if rate == 0.0 {
                continue;
            }
            let mut arrivals = SimRng::derive(seed, 0xA771_0000 + class.index() as u64);
            let (min, max) = params.lifetime_s;
            let mut at_s = 0.0;
            for index in 0u64.. {
                at_s += arrivals.exponential(1.0 / rate);
                if at_s >= params.duration_s {
                    break;
                }
                let tag = 0x5E55_0000_0000_0000 ^ ((class.index() as u64) << 48) ^ index;
                let mut rng = SimRng::derive(seed, tag);
                let lifetime_s = rng.uniform(min, max);
                sessions.push(SessionPlan {
                    class,
                    index,
                    arrival_s: at_s,
                    lifetime_s,
                    steps_rng: rng,
                    think_mean_s: params.think_mean_s,
                });
            }
        }
        sessions.sort_by(|a, b| a.arrival_s.total_cmp(&b.arrival_s));
        Schedule {
            class_count: 2,
            sessions,
            picker: QueryPicker::new(&params.query_weights).unwrap(),
        }
    }

    /// FNV-1a over a schedule's fingerprint: a compact golden value.
    fn digest(schedule: &Schedule) -> u64 {
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        let mut mix = |value: u64| {
            for byte in value.to_le_bytes() {
                hash ^= u64::from(byte);
                hash = hash.wrapping_mul(0x0100_0000_01b3);
            }
        };
        for (class, index, arrival, lifetime, steps) in fingerprint(schedule, 5) {
            mix(class.index() as u64);
            mix(index);
            mix(arrival);
            mix(lifetime);
            for step in steps {
                mix(step.query as u64);
                mix(step.think_s.to_bits());
            }
        }
        hash
    }

    #[test]
    fn two_class_plans_are_those_of_the_two_class_planner() {
        // Golden values recorded with the two-class planner: (seed, sessions, premium
        // sessions, digest). A change here means recorded runs no longer replay.
        let golden = [
            (1, 618, 215, 0x3de2_0a15_b83c_ee91),
            (7, 625, 224, 0x60a5_f2fb_22ed_77f4),
            (42, 613, 185, 0x1231_c581_e6e6_ba44),
            (0xDEAD_BEEF, 554, 198, 0x8d99_69fe_2800_0471),
        ];
        for (seed, sessions, premium, hash) in golden {
            let schedule = plan(seed, &params()).unwrap();
            let premium_now = schedule
                .sessions
                .iter()
                .filter(|s| s.class == Class::PREMIUM)
                .count();
            assert_eq!(
                (schedule.sessions.len(), premium_now, digest(&schedule)),
                (sessions, premium, hash),
                "seed {seed}"
            );
        }
        // And session by session against the reference, on other parameters too.
        for (seed, rates) in [(3, [2.0, 4.0]), (11, [0.5, 7.0]), (99, [3.0, 0.0])] {
            let p = ScheduleParams {
                rate_per_s: rates.to_vec(),
                ..params()
            };
            let reference = two_class_reference(seed, &p, rates);
            assert_eq!(
                fingerprint(&plan(seed, &p).unwrap(), 20),
                fingerprint(&reference, 20),
                "seed {seed}"
            );
        }
    }

    #[test]
    fn more_classes_leave_the_first_two_alone() {
        let two = plan(21, &params()).unwrap();
        let first_two = |s: &Schedule| {
            let mut f = fingerprint(s, 20);
            f.retain(|row| row.0 < Class(2));
            f
        };
        for rates in [vec![2.0, 4.0, 3.0], vec![2.0, 4.0, 1.0, 5.0]] {
            let more = plan(
                21,
                &ScheduleParams {
                    rate_per_s: rates.clone(),
                    ..params()
                },
            )
            .unwrap();
            assert_eq!(more.class_count, rates.len());
            assert_eq!(first_two(&more), fingerprint(&two, 20), "{rates:?}");
            // Each rank has its own streams: session 0 of every class lives differently.
            let lifetimes: Vec<u64> = Class::ranks(more.class_count)
                .map(|class| {
                    more.sessions
                        .iter()
                        .find(|s| s.class == class && s.index == 0)
                        .map_or(0, |s| s.lifetime_s.to_bits())
                })
                .collect();
            assert!(lifetimes.iter().all(|&bits| bits != 0), "{rates:?}");
            for (i, a) in lifetimes.iter().enumerate() {
                assert!(!lifetimes[i + 1..].contains(a), "{rates:?}: {lifetimes:?}");
            }
        }
        // Adding tier3 to a tier2 run leaves tier2 alone too.
        let three = plan(
            21,
            &ScheduleParams {
                rate_per_s: vec![2.0, 4.0, 3.0],
                ..params()
            },
        )
        .unwrap();
        let four = plan(
            21,
            &ScheduleParams {
                rate_per_s: vec![2.0, 4.0, 3.0, 5.0],
                ..params()
            },
        )
        .unwrap();
        let mut f = fingerprint(&four, 20);
        f.retain(|row| row.0 < Class(3));
        assert_eq!(f, fingerprint(&three, 20));
    }
}
