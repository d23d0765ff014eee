//! Why a transaction-mode client keeps its server between transactions, and when it may let
//! go. Session state it creates (`pgtier_wire::session_state`) pins it; the statements that
//! undo that state (`RESET ALL`, `UNLISTEN *`, `DISCARD ALL`...) unpin it once the server
//! confirms they ran: the next ReadyForQuery says idle, with no error since they were sent
//! (a `RESET ALL` in a transaction that rolls back resets nothing).

use std::time::{Duration, Instant};

use pgtier_wire::session_state::Effects;

use crate::tracker::TxStatus;

/// A client's pins.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Pins {
    held: Effects,
    /// Clearing statements sent and not yet confirmed.
    clearing: Effects,
}

/// What each clearing statement undoes. `RESET ALL` leaves role and session authorization
/// (PostgreSQL keeps them out of it) and whatever `set_config` may have set them to;
/// `RESET name`, `UNLISTEN name` and `DEALLOCATE name` leave the rest of their kind, so they
/// undo nothing here.
const UNDOES: [(Effects, Effects); 7] = [
    (Effects::DISCARD_ALL, Effects::PINNING),
    (Effects::RESET_ALL, Effects::SET),
    (Effects::UNLISTEN_ALL, Effects::LISTEN),
    (
        Effects::DEALLOCATE_ALL,
        Effects::PREPARE.union(Effects::NAMED_STATEMENT),
    ),
    (Effects::ADVISORY_UNLOCK_ALL, Effects::ADVISORY_LOCK),
    (Effects::CLOSE_ALL, Effects::HOLD_CURSOR),
    (Effects::DISCARD_TEMP, Effects::TEMP),
];

/// How each pin reads in `SHOW CLIENTS`.
const REASONS: [(Effects, &str); 11] = [
    (Effects::SET, "set"),
    (Effects::SET_ROLE, "set_role"),
    (Effects::SET_CONFIG, "set_config"),
    (Effects::LISTEN, "listen"),
    (Effects::TEMP, "temp_table"),
    (Effects::ADVISORY_LOCK, "advisory_lock"),
    (Effects::HOLD_CURSOR, "hold_cursor"),
    (Effects::PREPARE, "prepare"),
    (Effects::NAMED_STATEMENT, "named_statement"),
    (Effects::LOAD, "load"),
    (Effects::UNCERTAIN, "uncertain"),
];

impl Pins {
    /// A message with these effects was sent: what pins is held from now on, what clears
    /// waits for the server's word.
    ///
    /// A clear counts only when it is sent outside a transaction block (`in_block`: the
    /// server's last ReadyForQuery said otherwise), since whether a block commits or rolls
    /// back is not known from its ReadyForQuery, and only when the same message creates no
    /// state, since `RESET ALL; SET x = 1` must leave a pin. Both keep a pin longer, never
    /// shorter, than the state lives.
    pub fn sent(&mut self, effects: Effects, in_block: bool) {
        let pins = effects.intersection(Effects::PINNING);
        self.held = self.held.union(pins);
        if !in_block && pins.is_empty() {
            self.clearing = self.clearing.union(effects.intersection(undoing()));
        }
    }

    /// Whether a clear waits for the server's word: the ParameterStatus messages it makes
    /// the server send (values back to their defaults) are no new state.
    pub(crate) fn is_clearing(&self) -> bool {
        !self.clearing.is_empty()
    }

    /// A ReadyForQuery came with `status`, after `errors` ErrorResponses in the same walk.
    /// Returns whether the client stopped being pinned just now.
    pub fn on_ready(&mut self, status: TxStatus, errors: u64) -> bool {
        if self.clearing.is_empty() {
            return false;
        }
        if errors > 0 || status == TxStatus::Failed {
            self.clearing = Effects::NONE;
            return false;
        }
        if status != TxStatus::Idle {
            // The text opened a block (`BEGIN; RESET ALL`): whether the clear holds depends
            // on how the block ends, which is not known; the pin stays.
            self.clearing = Effects::NONE;
            return false;
        }
        let was_pinned = self.is_pinned();
        for (clear, undone) in UNDOES {
            if self.clearing.intersects(clear) {
                self.held = self.held.difference(undone);
            }
        }
        self.clearing = Effects::NONE;
        was_pinned && !self.is_pinned()
    }

    pub(crate) fn is_pinned(&self) -> bool {
        self.held.pins()
    }

    /// The pins, for logs.
    pub fn held(&self) -> Effects {
        self.held
    }

    /// The pins as `SHOW CLIENTS` prints them (`listen,set`), empty when none.
    pub fn reasons(&self) -> String {
        let mut out = String::new();
        for (effect, name) in REASONS {
            if self.held.intersects(effect) {
                if !out.is_empty() {
                    out.push(',');
                }
                out.push_str(name);
            }
        }
        out
    }
}

/// Rate limit of the "pool exhausted by pinned clients" check: it walks the shard's
/// clients, so at most once a second; once it warned, not again for a minute.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct PinnedCheck {
    next: Option<Instant>,
}

impl PinnedCheck {
    const RECHECK: Duration = Duration::from_secs(1);
    const REWARN: Duration = Duration::from_secs(60);

    /// Whether a check may run now; if so, the next one waits a second.
    pub fn due(&mut self, now: Instant) -> bool {
        if self.next.is_some_and(|next| now < next) {
            return false;
        }
        self.next = Some(now + Self::RECHECK);
        true
    }

    /// The check warned: quiet for a minute.
    pub(crate) fn warned(&mut self, now: Instant) {
        self.next = Some(now + Self::REWARN);
    }
}

fn undoing() -> Effects {
    UNDOES
        .iter()
        .fold(Effects::NONE, |all, (clear, _)| all.union(*clear))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_confirmed_clear_unpins_and_an_unconfirmed_one_does_not() {
        let mut pins = Pins::default();
        pins.sent(Effects::LISTEN.union(Effects::SET), false);
        assert!(pins.is_pinned());
        assert_eq!(pins.reasons(), "set,listen");
        pins.sent(Effects::UNLISTEN_ALL, false);
        assert!(!pins.on_ready(TxStatus::Idle, 0), "still a SET");
        assert_eq!(pins.reasons(), "set");
        pins.sent(Effects::RESET_ALL, false);
        assert!(!pins.on_ready(TxStatus::Idle, 1), "the RESET ALL failed");
        assert!(pins.is_pinned());
        pins.sent(Effects::RESET_ALL, false);
        assert!(
            !pins.on_ready(TxStatus::InTransaction, 0),
            "BEGIN; RESET ALL: the block may roll back"
        );
        assert!(!pins.on_ready(TxStatus::Idle, 0), "that clear is forgotten");
        pins.sent(Effects::RESET_ALL, true);
        assert!(!pins.on_ready(TxStatus::Idle, 0), "sent inside a block");
        pins.sent(Effects::RESET_ALL.union(Effects::SET), false);
        assert!(
            !pins.on_ready(TxStatus::Idle, 0),
            "RESET ALL; SET x: pinned still"
        );
        pins.sent(Effects::RESET_ALL, false);
        assert!(pins.on_ready(TxStatus::Idle, 0));
        assert!(!pins.is_pinned() && pins.reasons().is_empty());
    }

    #[test]
    fn reset_all_leaves_a_role_and_discard_all_takes_everything() {
        let mut pins = Pins::default();
        pins.sent(
            Effects::SET_ROLE.union(Effects::SET).union(Effects::TEMP),
            false,
        );
        pins.sent(Effects::RESET_ALL, false);
        pins.on_ready(TxStatus::Idle, 0);
        assert_eq!(pins.reasons(), "set_role,temp_table");
        pins.sent(Effects::DISCARD_TEMP, false);
        pins.on_ready(TxStatus::Idle, 0);
        assert_eq!(pins.reasons(), "set_role");
        pins.sent(Effects::DISCARD_ALL, false);
        assert!(pins.on_ready(TxStatus::Idle, 0));
        assert!(!pins.is_pinned());
    }

    #[test]
    fn the_pinned_out_check_runs_once_a_second_and_warns_once_a_minute() {
        let start = Instant::now();
        let mut check = PinnedCheck::default();
        assert!(check.due(start));
        assert!(!check.due(start + Duration::from_millis(500)));
        assert!(check.due(start + Duration::from_secs(1)));
        check.warned(start + Duration::from_secs(1));
        assert!(!check.due(start + Duration::from_secs(30)));
        assert!(check.due(start + Duration::from_secs(61)));
    }

    #[test]
    fn clears_of_one_name_undo_nothing() {
        let mut pins = Pins::default();
        pins.sent(Effects::LISTEN.union(Effects::PREPARE), false);
        pins.sent(
            Effects::UNLISTEN
                .union(Effects::DEALLOCATE)
                .union(Effects::RESET),
            false,
        );
        pins.on_ready(TxStatus::Idle, 0);
        assert_eq!(pins.reasons(), "listen,prepare");
    }
}
