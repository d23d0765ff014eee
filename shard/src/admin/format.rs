//! Text renderings used by admin-console rows: UTC timestamps and durations.
//!
//! Hand-written because the console is the only place pgtier prints calendar time and a date
//! crate for one formatter is not worth a dependency.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// `YYYY-MM-DD HH:MM:SS.mmm UTC` (times before 1970 print as the epoch).
pub fn utc_timestamp(at: SystemTime) -> String {
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
    fn millis_have_three_decimals() {
        assert_eq!(millis(Duration::from_micros(1500)), "1.500");
    }
}
