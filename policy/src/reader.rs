//! Choosing the replica for one read transaction of a reader entry (a primary plus replicas,
//! seed 003): weighted power of two choices on in-flight reads per unit of weight (with two
//! replicas, a smooth weighted alternation proposes and the in-flight counts may overrule
//! it), and the LSN target deciding which replicas qualify at all.
//!
//! Pure: the caller passes each replica's standing (Down, past the lag cap, behind the read's
//! target, ready), its weight, a closure reading one in-flight counter, the shard-local
//! [`Alternation`] and a random source. Only the two sampled counters are read (the counters
//! are shared by every shard, so each read costs two cache-line loads, not K).
//!
//! Rules, in order:
//! 1. A replica that is Down, excluded (past the lag cap) or weighs 0 never serves the read.
//!    When no replica is left, the read goes to the primary ([`ReadChoice::Primary`]).
//! 2. The replicas that replayed the read's target (all of them for a read without one) are
//!    the candidates. When none has yet, [`ReadChoice::NotYet`]: the caller asks again (a
//!    replica that is behind will catch up; one that is Down will not, hence rule 1 first).
//! 3. One candidate: that one. Two: [`Alternation`] proposes one (strict alternation for
//!    equal weights, the weight ratio exactly over every cycle of `w_a + w_b` reads
//!    otherwise), and the other takes the read instead when its `in_flight / weight` is
//!    strictly lower: idle or evenly loaded replicas alternate exactly, but a replica that
//!    answers slowly (a delayed link, a hung backend) piles up reads in flight and stops
//!    getting new ones, where a blind alternation would send it every other read and hold
//!    every closed-loop client to its pace. Three or more: two distinct candidates drawn in
//!    proportion to their weights, the lower `in_flight / weight` wins, a tie goes to the
//!    first drawn (so with idle replicas the spread is the weight ratio).

use crate::replica::ReplicaId;
use crate::rng::SplitMix64;

/// How one replica stands for one read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadStanding {
    /// Failed (health checks or a reported connection failure).
    Down,
    /// Past the entry's replication lag cap: no new reads until it is back under it.
    Excluded,
    /// Usable, but has not replayed the read's target yet (or its position is unknown).
    Behind,
    /// Usable and has replayed the read's target (or the read has none).
    Ready,
}

/// One replica of the entry as a read sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadCandidate {
    pub replica: ReplicaId,
    /// Relative capacity; 0 takes the replica out of rotation.
    pub weight: u32,
    pub standing: ReadStanding,
}

impl ReadCandidate {
    fn usable(&self) -> bool {
        self.weight > 0 && matches!(self.standing, ReadStanding::Behind | ReadStanding::Ready)
    }

    fn ready(&self) -> bool {
        self.weight > 0 && self.standing == ReadStanding::Ready
    }
}

/// Where one read goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadChoice {
    Replica(ReplicaId),
    /// No replica may serve the read now or later: run it on the primary.
    Primary,
    /// A usable replica may serve it once it replays the target: ask again.
    NotYet,
}

/// Shard-local state of the two-replica alternation (smooth weighted round robin over one
/// pair). It is reset whenever the pair or their weights differ from the previous call, so a
/// pair that changes (a replica Down, a target only two replicas reached) starts a fresh cycle.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Alternation {
    /// The pair and weights the credits belong to.
    pair: Option<[(ReplicaId, u32); 2]>,
    /// Smooth weighted round robin credit of each member of `pair`.
    credit: [i64; 2],
}

impl Alternation {
    /// A fresh alternation.
    pub const fn new() -> Alternation {
        Alternation {
            pair: None,
            credit: [0, 0],
        }
    }

    /// The next of `a` and `b` (each with its weight, both above zero). Over every cycle of
    /// `w_a + w_b` calls on the same pair, `a` is chosen exactly `w_a` times, spread evenly.
    pub fn next(&mut self, a: (ReplicaId, u32), b: (ReplicaId, u32)) -> ReplicaId {
        let pair = if a.0 <= b.0 { [a, b] } else { [b, a] };
        if self.pair != Some(pair) {
            *self = Alternation {
                pair: Some(pair),
                credit: [0, 0],
            };
        }
        let total = i64::from(pair[0].1) + i64::from(pair[1].1);
        self.credit[0] += i64::from(pair[0].1);
        self.credit[1] += i64::from(pair[1].1);
        let pick = usize::from(self.credit[1] > self.credit[0]);
        self.credit[pick] -= total;
        pair[pick].0
    }
}

/// Chooses where one read runs (see the module rules). `in_flight` reads one replica's
/// in-flight counter; it is called at most twice, never for fewer than two candidates.
pub fn choose_read(
    candidates: &[ReadCandidate],
    alternation: &mut Alternation,
    random: &mut SplitMix64,
    mut in_flight: impl FnMut(ReplicaId) -> u32,
) -> ReadChoice {
    if !candidates.iter().any(ReadCandidate::usable) {
        return ReadChoice::Primary;
    }
    let ready = || candidates.iter().filter(|c| c.ready());
    let (count, total_weight) =
        ready().fold((0usize, 0u64), |(n, w), c| (n + 1, w + u64::from(c.weight)));
    let mut firsts = ready();
    let (Some(first), second) = (firsts.next(), firsts.next()) else {
        return ReadChoice::NotYet;
    };
    let Some(second) = second else {
        return ReadChoice::Replica(first.replica);
    };
    if count == 2 {
        let proposed = alternation.next(
            (first.replica, first.weight),
            (second.replica, second.weight),
        );
        let (p, o) = if proposed == first.replica {
            (first, second)
        } else {
            (second, first)
        };
        // p/wp > o/wo ⇔ p·wo > o·wp: exact, no floats; equal loads keep the alternation.
        let load_p = u64::from(in_flight(p.replica)) * u64::from(o.weight);
        let load_o = u64::from(in_flight(o.replica)) * u64::from(p.weight);
        return ReadChoice::Replica(if load_o < load_p {
            o.replica
        } else {
            p.replica
        });
    }
    // Both draws find a candidate when the weights add up; the fallbacks only avoid a panic.
    let Some(a) = weighted_pick(ready(), total_weight, None, random) else {
        return ReadChoice::Replica(first.replica);
    };
    let rest = total_weight - u64::from(a.weight);
    let Some(b) = weighted_pick(ready(), rest, Some(a.replica), random) else {
        return ReadChoice::Replica(a.replica);
    };
    // a/wa ≤ b/wb ⇔ a·wb ≤ b·wa: exact, no floats; ties keep the first drawn.
    let load_a = u64::from(in_flight(a.replica)) * u64::from(b.weight);
    let load_b = u64::from(in_flight(b.replica)) * u64::from(a.weight);
    ReadChoice::Replica(if load_b < load_a {
        b.replica
    } else {
        a.replica
    })
}

/// One candidate drawn with probability `weight / total`, skipping `skip` (whose weight is
/// not in `total`). `total` is the sum of the weights of the others.
fn weighted_pick<'a>(
    ready: impl Iterator<Item = &'a ReadCandidate>,
    total: u64,
    skip: Option<ReplicaId>,
    random: &mut SplitMix64,
) -> Option<&'a ReadCandidate> {
    let mut point = random.below(total);
    for candidate in ready.filter(|c| Some(c.replica) != skip) {
        let weight = u64::from(candidate.weight);
        if point < weight {
            return Some(candidate);
        }
        point -= weight;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    fn candidate(index: u8, weight: u32, standing: ReadStanding) -> ReadCandidate {
        ReadCandidate {
            replica: ReplicaId(index),
            weight,
            standing,
        }
    }

    fn ready(weights: &[u32]) -> Vec<ReadCandidate> {
        weights
            .iter()
            .enumerate()
            .map(|(i, &w)| candidate(i as u8, w, ReadStanding::Ready))
            .collect()
    }

    fn no_counters(_: ReplicaId) -> u32 {
        panic!("no counter may be read here")
    }

    fn idle_counters(_: ReplicaId) -> u32 {
        0
    }

    #[test]
    fn no_usable_replica_means_the_primary() {
        use ReadStanding::*;
        let mut state = Alternation::new();
        let mut rng = SplitMix64::new(1);
        for set in [
            vec![],
            vec![candidate(0, 1, Down), candidate(1, 1, Excluded)],
            vec![
                candidate(0, 1, Down),
                candidate(1, 1, Down),
                candidate(2, 1, Down),
            ],
            vec![candidate(0, 0, Ready), candidate(1, 0, Behind)],
        ] {
            assert_eq!(
                choose_read(&set, &mut state, &mut rng, no_counters),
                ReadChoice::Primary
            );
        }
    }

    #[test]
    fn behind_replicas_mean_not_yet() {
        use ReadStanding::*;
        let mut state = Alternation::new();
        let mut rng = SplitMix64::new(1);
        let set = [
            candidate(0, 1, Down),
            candidate(1, 1, Behind),
            candidate(2, 1, Excluded),
        ];
        assert_eq!(
            choose_read(&set, &mut state, &mut rng, no_counters),
            ReadChoice::NotYet
        );
    }

    #[test]
    fn a_single_ready_replica_takes_every_read() {
        use ReadStanding::*;
        let mut state = Alternation::new();
        let mut rng = SplitMix64::new(1);
        let set = [
            candidate(0, 5, Behind),
            candidate(1, 1, Ready),
            candidate(2, 9, Excluded),
            candidate(3, 9, Down),
        ];
        for _ in 0..100 {
            assert_eq!(
                choose_read(&set, &mut state, &mut rng, no_counters),
                ReadChoice::Replica(ReplicaId(1))
            );
        }
    }

    #[test]
    fn never_picks_a_down_excluded_behind_or_weightless_replica() {
        use ReadStanding::*;
        let standings = [Down, Excluded, Behind, Ready];
        let mut rng = SplitMix64::new(42);
        for round in 0..2000u64 {
            let mut layout = SplitMix64::new(round);
            let count = 1 + layout.below(8) as u8;
            let set: Vec<_> = (0..count)
                .map(|i| {
                    let standing = standings[layout.below(4) as usize];
                    candidate(i, layout.below(4) as u32, standing)
                })
                .collect();
            let mut state = Alternation::new();
            for _ in 0..8 {
                let loads = |r: ReplicaId| (r.0 as u32 * 7 + round as u32) % 5;
                match choose_read(&set, &mut state, &mut rng, loads) {
                    ReadChoice::Replica(r) => {
                        let chosen = set[r.index()];
                        assert!(chosen.ready(), "{chosen:?} chosen from {set:?}");
                    }
                    ReadChoice::NotYet => {
                        assert!(set.iter().any(|c| c.usable()) && !set.iter().any(|c| c.ready()));
                    }
                    ReadChoice::Primary => assert!(!set.iter().any(|c| c.usable())),
                }
            }
        }
    }

    fn alternation_counts(weights: [u32; 2], reads: usize) -> Vec<ReplicaId> {
        let set = ready(&weights);
        let mut state = Alternation::new();
        let mut rng = SplitMix64::new(7);
        (0..reads)
            .map(
                |_| match choose_read(&set, &mut state, &mut rng, idle_counters) {
                    ReadChoice::Replica(r) => r,
                    other => panic!("{other:?}"),
                },
            )
            .collect()
    }

    #[test]
    fn two_equal_replicas_alternate_strictly() {
        let picks = alternation_counts([1, 1], 100);
        for pair in picks.windows(2) {
            assert_ne!(pair[0], pair[1], "{picks:?}");
        }
    }

    #[test]
    fn two_replicas_alternate_in_the_exact_weight_ratio() {
        for weights in [[1, 1], [1, 2], [3, 5], [5, 3], [2, 4]] {
            let cycle = (weights[0] + weights[1]) as usize;
            let picks = alternation_counts(weights, cycle * 20);
            for (n, chunk) in picks.chunks(cycle).enumerate() {
                let first = chunk.iter().filter(|&&r| r == ReplicaId(0)).count();
                assert_eq!(
                    first, weights[0] as usize,
                    "weights {weights:?}, cycle {n}: {chunk:?}"
                );
            }
        }
    }

    #[test]
    fn alternation_spreads_the_heavier_replica_evenly() {
        // 1:2 is b, a, b, ... never a twice in a row.
        let picks = alternation_counts([1, 2], 30);
        for pair in picks.windows(2) {
            assert!(
                !(pair[0] == ReplicaId(0) && pair[1] == ReplicaId(0)),
                "{picks:?}"
            );
        }
    }

    #[test]
    fn two_ready_of_three_alternate_while_idle() {
        use ReadStanding::*;
        let set = [
            candidate(0, 1, Ready),
            candidate(1, 1, Behind),
            candidate(2, 1, Ready),
        ];
        let mut state = Alternation::new();
        let mut rng = SplitMix64::new(3);
        let picks: Vec<_> = (0..6)
            .map(|_| choose_read(&set, &mut state, &mut rng, idle_counters))
            .collect();
        let zero = ReadChoice::Replica(ReplicaId(0));
        let two = ReadChoice::Replica(ReplicaId(2));
        assert_eq!(picks, vec![zero, two, zero, two, zero, two]);
    }

    #[test]
    fn of_two_replicas_a_slow_one_stops_getting_reads() {
        // Replica 1 answers slowly: its reads stay in flight. Every read goes to replica
        // 0 while it has fewer in flight per weight, whatever the alternation proposes.
        let set = ready(&[1, 1]);
        let mut state = Alternation::new();
        let mut rng = SplitMix64::new(5);
        let mut in_flight = [0u32, 3];
        for _ in 0..10 {
            let choice = choose_read(&set, &mut state, &mut rng, |r| in_flight[r.index()]);
            assert_eq!(choice, ReadChoice::Replica(ReplicaId(0)));
            // Replica 0 answers at once.
            in_flight[0] = 0;
        }
        // Loads equal again: the alternation goes on.
        in_flight = [1, 1];
        let picks: Vec<_> = (0..4)
            .map(|_| choose_read(&set, &mut state, &mut rng, |r| in_flight[r.index()]))
            .collect();
        assert!(
            picks.contains(&ReadChoice::Replica(ReplicaId(1))),
            "{picks:?}"
        );
    }

    #[test]
    fn of_two_weighted_replicas_the_load_is_compared_per_weight() {
        // Weights 1 and 3: 2 reads in flight on replica 1 weigh less than 1 on replica 0.
        let set = ready(&[1, 3]);
        let mut state = Alternation::new();
        let mut rng = SplitMix64::new(5);
        let in_flight = [1u32, 2];
        for _ in 0..8 {
            let choice = choose_read(&set, &mut state, &mut rng, |r| in_flight[r.index()]);
            assert_eq!(choice, ReadChoice::Replica(ReplicaId(1)));
        }
    }

    #[test]
    fn a_new_pair_starts_a_fresh_cycle() {
        let mut state = Alternation::new();
        let (a, b, c) = ((ReplicaId(0), 1), (ReplicaId(1), 3), (ReplicaId(2), 1));
        assert_eq!(state.next(a, b), ReplicaId(1));
        assert_eq!(state.next(a, c), ReplicaId(0));
        assert_eq!(state.next(a, c), ReplicaId(2));
        // Argument order does not matter.
        assert_eq!(state.next(c, a), ReplicaId(0));
    }

    #[test]
    fn power_of_two_reads_exactly_two_distinct_counters() {
        let set = ready(&[1, 2, 3, 4]);
        let mut state = Alternation::new();
        let mut rng = SplitMix64::new(9);
        for _ in 0..1000 {
            let read = Cell::new(Vec::new());
            let choice = choose_read(&set, &mut state, &mut rng, |r| {
                let mut seen = read.take();
                seen.push(r);
                read.set(seen);
                r.0 as u32
            });
            let seen = read.take();
            assert_eq!(seen.len(), 2);
            assert_ne!(seen[0], seen[1]);
            let ReadChoice::Replica(chosen) = choice else {
                panic!("{choice:?}");
            };
            assert!(seen.contains(&chosen));
        }
    }

    fn spread(weights: &[u32], draws: usize, accumulate: bool) -> Vec<usize> {
        let set = ready(weights);
        let mut state = Alternation::new();
        let mut rng = SplitMix64::new(2026);
        let mut in_flight = vec![0u32; weights.len()];
        let mut picks = vec![0usize; weights.len()];
        for _ in 0..draws {
            let ReadChoice::Replica(r) =
                choose_read(&set, &mut state, &mut rng, |r| in_flight[r.index()])
            else {
                panic!("all are ready");
            };
            picks[r.index()] += 1;
            if accumulate {
                in_flight[r.index()] += 1;
            }
        }
        picks
    }

    fn assert_proportional(picks: &[usize], weights: &[u32], tolerance: f64) {
        let total: usize = picks.iter().sum();
        let weight_sum: u32 = weights.iter().sum();
        for (pick, weight) in picks.iter().zip(weights) {
            let share = *pick as f64 / total as f64;
            let expected = f64::from(*weight) / f64::from(weight_sum);
            assert!(
                (share - expected).abs() <= tolerance,
                "picks {picks:?} for weights {weights:?}"
            );
        }
    }

    #[test]
    fn idle_replicas_share_reads_by_weight() {
        for weights in [
            vec![1, 1, 1],
            vec![1, 2, 3],
            vec![5, 1, 1, 1],
            vec![1, 1, 1, 1, 4],
        ] {
            let picks = spread(&weights, 60_000, false);
            assert_proportional(&picks, &weights, 0.01);
        }
    }

    #[test]
    fn loaded_replicas_converge_to_the_weight_ratio() {
        // Every read stays in flight: the lighter per unit of weight keeps winning, so the
        // in-flight counts track the weights closely.
        for weights in [vec![1, 1, 1], vec![1, 2, 3], vec![3, 1, 4, 1, 5]] {
            let picks = spread(&weights, 30_000, true);
            assert_proportional(&picks, &weights, 0.01);
        }
    }

    #[test]
    fn the_heaviest_replica_per_weight_is_never_chosen() {
        let set = ready(&[1, 1, 1, 2]);
        let loads = [3u32, 3, 50, 6];
        let mut state = Alternation::new();
        let mut rng = SplitMix64::new(5);
        for _ in 0..5000 {
            let choice = choose_read(&set, &mut state, &mut rng, |r| loads[r.index()]);
            assert_ne!(choice, ReadChoice::Replica(ReplicaId(2)));
        }
    }

    #[test]
    fn ties_go_to_the_first_drawn() {
        // All idle and equal: every replica is chosen, none systematically favoured.
        let picks = spread(&[1, 1, 1, 1], 40_000, false);
        assert!(picks.iter().all(|&n| n > 9_000), "{picks:?}");
    }
}
