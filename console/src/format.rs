//! Text renderings used by admin-console rows: UTC timestamps and durations, and the `ptr`
//! ids of client and server connections (formatted here, and parsed back for `KILL_CLIENT`).
//!
//! Hand-written because the console is the only place pgtier prints calendar time and a date
//! crate for one formatter is not worth a dependency.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// `YYYY-MM-DD HH:MM:SS.mmm UTC` (times before 1970 print as the epoch).
pub(crate) fn utc_timestamp(at: SystemTime) -> String {
    let since_epoch = at.duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO);
    let secs = since_epoch.as_secs();
    let (days, day_secs) = (secs / 86_400, secs % 86_400);
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}.{:03} UTC",
        day_secs / 3600,
        day_secs / 60 % 60,
        day_secs % 60,
        since_epoch.subsec_millis()
    )
}

/// `YYYY-MM-DD HH:MM:SS UTC`, PgBouncer's `connect_time`/`request_time` spelling.
pub(crate) fn pgbouncer_time(at: SystemTime) -> String {
    let mut text = utc_timestamp(at);
    // Drop the `.mmm` before ` UTC`.
    text.replace_range(19..23, "");
    text
}

/// A connection kind, for [`ConnPtr`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ConnKind {
    Client,
    Server,
}

/// Bits of a slot generation kept in a `ptr` (the low ones): enough that a reused slot gets
/// another id for 32,767 reuses.
pub(crate) const PTR_GENERATION_BITS: u32 = 15;
const PTR_GENERATION_MASK: u64 = (1 << PTR_GENERATION_BITS) - 1;

/// What a `ptr` names: a connection slot on one shard. Unique across shards and between
/// clients and servers, stable for the connection's life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ConnPtr {
    pub shard: u16,
    pub kind: ConnKind,
    pub index: u32,
    /// The low [`PTR_GENERATION_BITS`] bits of the slot generation.
    pub generation: u32,
}

impl ConnPtr {
    /// The ptr of a slot with its full generation (only the low bits are kept).
    pub fn new(shard: usize, kind: ConnKind, index: u32, generation: u32) -> ConnPtr {
        ConnPtr {
            shard: u16::try_from(shard).unwrap_or(u16::MAX),
            kind,
            index,
            generation: generation & PTR_GENERATION_MASK as u32,
        }
    }

    /// Whether this ptr names the slot (`index`, full `generation`).
    #[cfg(test)]
    pub fn names(&self, index: u32, generation: u32) -> bool {
        self.index == index && self.generation == generation & PTR_GENERATION_MASK as u32
    }

    fn bits(self) -> u64 {
        let kind = match self.kind {
            ConnKind::Client => 0,
            ConnKind::Server => 1u64 << 47,
        };
        (u64::from(self.shard) << 48)
            | kind
            | ((u64::from(self.generation) & PTR_GENERATION_MASK) << 32)
            | u64::from(self.index)
    }
}

/// `0x` and lower-case hex of shard (16 bits) | kind (1 bit: server) | generation (15 bits)
/// | slot index (32 bits), the look of PgBouncer's pointers.
pub(crate) fn format_ptr(ptr: ConnPtr) -> String {
    format!("0x{:x}", ptr.bits())
}

/// Parses what [`format_ptr`] writes (with or without `0x`, any case).
pub(crate) fn parse_ptr(text: &str) -> Option<ConnPtr> {
    let text = text.trim();
    let hex = text
        .strip_prefix("0x")
        .or_else(|| text.strip_prefix("0X"))
        .unwrap_or(text);
    if hex.is_empty() || hex.len() > 16 {
        return None;
    }
    let bits = u64::from_str_radix(hex, 16).ok()?;
    Some(ConnPtr {
        shard: u16::try_from(bits >> 48).ok()?,
        kind: if bits & (1 << 47) != 0 {
            ConnKind::Server
        } else {
            ConnKind::Client
        },
        generation: u32::try_from((bits >> 32) & PTR_GENERATION_MASK).ok()?,
        index: u32::try_from(bits & 0xffff_ffff).ok()?,
    })
}

/// Milliseconds with three decimals.
pub fn millis(duration: Duration) -> String {
    format!("{:.3}", duration.as_secs_f64() * 1000.0)
}

/// Days since 1970-01-01 to (year, month, day) in the proleptic Gregorian calendar
/// (Howard Hinnant's algorithm, on unsigned days since the epoch).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn epoch_and_known_dates() {
        assert_eq!(utc_timestamp(UNIX_EPOCH), "1970-01-01 00:00:00.000 UTC");
        // 2000-02-29 12:34:56.789 (a leap day)
        let at = UNIX_EPOCH + Duration::from_millis(951_827_696_789);
        assert_eq!(utc_timestamp(at), "2000-02-29 12:34:56.789 UTC");
        // 2026-11-30 00:00:00
        let at = UNIX_EPOCH + Duration::from_secs(1_795_996_800);
        assert_eq!(utc_timestamp(at), "2026-11-30 00:00:00.000 UTC");
    }

    #[test]
    fn pgbouncer_times_have_no_fraction() {
        let at = UNIX_EPOCH + Duration::from_millis(951_827_696_789);
        assert_eq!(pgbouncer_time(at), "2000-02-29 12:34:56 UTC");
    }

    #[test]
    fn ptrs_round_trip_and_are_distinct_across_shards_and_kinds() {
        let client = ConnPtr::new(3, ConnKind::Client, 17, 0x12_3456);
        let text = format_ptr(client);
        assert_eq!(parse_ptr(&text), Some(client));
        assert!(client.names(17, 0x12_3456) && !client.names(17, 0x12_3457));
        let server = ConnPtr::new(3, ConnKind::Server, 17, 0x12_3456);
        let other_shard = ConnPtr::new(4, ConnKind::Client, 17, 0x12_3456);
        assert_ne!(format_ptr(server), text);
        assert_ne!(format_ptr(other_shard), text);
        assert_eq!(parse_ptr(&format_ptr(server)), Some(server));
        assert_eq!(
            parse_ptr(&text.to_uppercase().replace("0X", "0x")),
            Some(client)
        );
        assert_eq!(parse_ptr("0x"), None);
        assert_eq!(parse_ptr("zz"), None);
        assert_eq!(parse_ptr("0x11112222333344445"), None);
    }

    #[test]
    fn millis_have_three_decimals() {
        assert_eq!(millis(Duration::from_micros(1500)), "1.500");
    }
}
