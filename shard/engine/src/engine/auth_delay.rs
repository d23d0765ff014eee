//! `auth_failure_delay`: PostgreSQL's `auth_delay`, per client address. A client whose
//! authentication failed gets its error only after the delay, and the failures of one address
//! are answered one per delay: a guesser that opens a hundred connections from one address
//! learns no more per second than one that tries them in turn. Clients are held, not the
//! shard: each held failure is a deadline the engine's timer answers, and a correct password
//! (from any address) is never delayed. The addresses remembered are bounded; past the bound,
//! the further addresses share one spacing (a guesser with many addresses slows itself). An
//! address's queue reaches at most `longest_wait` ahead (`client_login_timeout` closes a
//! client held longer anyway), so a long attack does not push its answers ever further out,
//! and a held client that goes away takes its entry with it: what is held is bounded by the
//! clients there are.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::addr::ClientAddr;
use crate::ids::ClientId;

/// How far ahead an address's answers are scheduled at most: `client_login_timeout`, which
/// closes a client held longer; a minute when it is off.
pub(super) fn longest_wait(config: &pgtier_core::config::Config) -> Duration {
    config
        .pgtier
        .client_login_timeout
        .enabled()
        .unwrap_or(Duration::from_secs(60))
}

/// Whose failures are spaced together.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Source {
    Ip(IpAddr),
    /// The Unix socket: its peers are local, they share one spacing.
    Unix,
    /// Every address past `max_addresses`.
    Overflow,
}

/// The failures held and when each address may next be answered.
#[derive(Debug, Default)]
pub(super) struct AuthDelay {
    /// `None`: failures are answered at once.
    delay: Option<Duration>,
    max_addresses: usize,
    /// How far ahead an address's next answer may be scheduled.
    longest_wait: Duration,
    /// When the last failure held for each source is answered.
    last_answer: HashMap<Source, Instant>,
    /// The failures held, by answer time, with the error each is answered with.
    held: BTreeMap<(Instant, ClientId), Bytes>,
}

impl AuthDelay {
    pub(super) fn new(
        delay: Option<Duration>,
        max_addresses: usize,
        longest_wait: Duration,
    ) -> AuthDelay {
        AuthDelay {
            delay,
            max_addresses,
            longest_wait,
            ..AuthDelay::default()
        }
    }

    /// A reload: failures already held keep their time; the next ones follow the new values.
    pub(super) fn configure(
        &mut self,
        delay: Option<Duration>,
        max_addresses: usize,
        longest_wait: Duration,
    ) {
        self.delay = delay;
        self.max_addresses = max_addresses;
        self.longest_wait = longest_wait;
    }

    /// Holds the failure of `id` from `peer`: when its error is due, or `Err(error)` when the
    /// delay is off and it is answered now.
    pub(super) fn hold(
        &mut self,
        id: ClientId,
        peer: Option<ClientAddr>,
        error: Bytes,
        now: Instant,
    ) -> Result<Instant, Bytes> {
        let Some(delay) = self.delay else {
            return Err(error);
        };
        let source = self.source_of(peer);
        let previous = self.last_answer.get(&source).copied();
        let answer_at = (previous.map_or(now, |at| at.max(now)) + delay)
            .min(now + self.longest_wait.max(delay));
        self.last_answer.insert(source, answer_at);
        self.held.insert((answer_at, id), error);
        Ok(answer_at)
    }

    /// The source `peer` counts under: its own while the table has room.
    fn source_of(&self, peer: Option<ClientAddr>) -> Source {
        let source = match peer {
            Some(ClientAddr::Tcp(addr)) => Source::Ip(addr.ip()),
            Some(ClientAddr::Unix { .. }) | None => Source::Unix,
        };
        let known = self.last_answer.contains_key(&source);
        if known || self.last_answer.len() < self.max_addresses {
            source
        } else {
            Source::Overflow
        }
    }

    /// A held client went away (closed by `client_login_timeout`, or it left): its entry goes.
    pub(super) fn forget(&mut self, id: ClientId, answer_at: Instant) {
        self.held.remove(&(answer_at, id));
    }

    /// Failures held (tests).
    #[cfg(test)]
    pub(super) fn held(&self) -> usize {
        self.held.len()
    }

    /// When the earliest held failure is due.
    pub(super) fn next_answer(&self) -> Option<Instant> {
        self.held.keys().next().map(|(at, _)| *at)
    }

    /// The held failures due at `now`, earliest first, with their errors.
    pub(super) fn take_due(&mut self, now: Instant) -> Vec<(ClientId, Bytes)> {
        let mut due = Vec::new();
        while let Some(entry) = self.held.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let ((_, id), error) = entry.remove_entry();
            due.push((id, error));
        }
        due
    }

    /// Forgets the addresses whose last failure was answered (housekeeping), so the table
    /// holds only addresses with a failure pending.
    pub(super) fn forget_answered(&mut self, now: Instant) {
        self.last_answer.retain(|_, at| *at > now);
    }

    /// Addresses remembered (tests).
    #[cfg(test)]
    pub(super) fn addresses(&self) -> usize {
        self.last_answer.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::SlotRef;

    fn client(index: u32) -> ClientId {
        ClientId(SlotRef {
            index,
            generation: 1,
        })
    }

    fn from(ip: &str) -> Option<ClientAddr> {
        Some(ClientAddr::Tcp(format!("{ip}:5000").parse().expect("addr")))
    }

    const DELAY: Duration = Duration::from_millis(500);
    const LONGEST: Duration = Duration::from_secs(60);

    #[test]
    fn off_answers_at_once() {
        let mut delay = AuthDelay::new(None, 10, LONGEST);
        let now = Instant::now();
        let error = Bytes::from_static(b"E");
        assert_eq!(
            delay.hold(client(1), from("10.0.0.1"), error.clone(), now),
            Err(error)
        );
        assert_eq!(delay.next_answer(), None);
    }

    #[test]
    fn failures_of_one_address_are_answered_one_per_delay_others_are_not_queued_behind() {
        let mut delay = AuthDelay::new(Some(DELAY), 10, LONGEST);
        let now = Instant::now();
        let e = Bytes::from_static(b"E");
        let a1 = delay.hold(client(1), from("10.0.0.1"), e.clone(), now);
        let a2 = delay.hold(client(2), from("10.0.0.1"), e.clone(), now);
        let a3 = delay.hold(client(3), from("10.0.0.1"), e.clone(), now);
        let b1 = delay.hold(client(4), from("10.0.0.2"), e.clone(), now);
        assert_eq!(a1, Ok(now + DELAY));
        assert_eq!(a2, Ok(now + 2 * DELAY));
        assert_eq!(a3, Ok(now + 3 * DELAY));
        assert_eq!(
            b1,
            Ok(now + DELAY),
            "another address waits only its own delay"
        );
        assert!(delay.take_due(now + DELAY / 2).is_empty());
        let due: Vec<ClientId> = delay
            .take_due(now + DELAY)
            .into_iter()
            .map(|d| d.0)
            .collect();
        assert_eq!(due, vec![client(1), client(4)]);
        assert_eq!(delay.next_answer(), Some(now + 2 * DELAY));
        // Once everything from an address was answered, a new failure waits one delay again.
        let later = now + 10 * DELAY;
        assert_eq!(delay.take_due(later).len(), 2);
        delay.forget_answered(later);
        assert_eq!(delay.addresses(), 0);
        assert_eq!(
            delay.hold(client(5), from("10.0.0.1"), e, later),
            Ok(later + DELAY)
        );
    }

    #[test]
    fn addresses_past_the_bound_share_one_spacing() {
        let mut delay = AuthDelay::new(Some(DELAY), 2, LONGEST);
        let now = Instant::now();
        let e = Bytes::from_static(b"E");
        for (index, ip) in ["10.0.0.1", "10.0.0.2"].into_iter().enumerate() {
            assert_eq!(
                delay.hold(client(index as u32), from(ip), e.clone(), now),
                Ok(now + DELAY)
            );
        }
        let c = delay.hold(client(7), from("10.0.0.3"), e.clone(), now);
        let d = delay.hold(client(8), from("10.0.0.4"), e.clone(), now);
        assert_eq!(c, Ok(now + DELAY));
        assert_eq!(d, Ok(now + 2 * DELAY), "the overflow is one source");
        assert_eq!(
            delay.addresses(),
            3,
            "the bound plus the shared overflow entry"
        );
        // A known address keeps its own spacing.
        let a = delay.hold(client(9), from("10.0.0.1"), e, now);
        assert_eq!(a, Ok(now + 2 * DELAY));
    }

    #[test]
    fn an_address_queue_reaches_at_most_the_longest_wait_and_a_client_gone_is_forgotten() {
        let mut delay = AuthDelay::new(Some(DELAY), 10, Duration::from_secs(2));
        let now = Instant::now();
        let e = Bytes::from_static(b"E");
        let times: Vec<Instant> = (0..8)
            .map(|n| {
                delay
                    .hold(client(n), from("10.0.0.1"), e.clone(), now)
                    .expect("held")
            })
            .collect();
        assert_eq!(times[3], now + 4 * DELAY);
        assert!(
            times[4..]
                .iter()
                .all(|at| *at == now + Duration::from_secs(2))
        );
        assert_eq!(delay.held(), 8);
        for (n, at) in times.iter().enumerate() {
            delay.forget(client(n as u32), *at);
        }
        assert_eq!(delay.held(), 0);
        assert_eq!(delay.next_answer(), None);
    }
}
