//! Rendering nanosecond timestamps (since the Unix epoch) for people.
//!
//! Times print in UTC, not local time: a trace is often read on another
//! machine than the one that recorded it, and output must not depend on the
//! reader's time zone (tests compare it byte for byte).

/// `HH:MM:SS.nnnnnnnnn` (UTC time of day, nanoseconds).
pub fn time_of_day_ns(ns: u64) -> String {
    let secs = ns / 1_000_000_000;
    let (h, m, s) = hms(secs);
    format!("{h:02}:{m:02}:{s:02}.{:09}", ns % 1_000_000_000)
}

/// `HH:MM:SS.uuuuuu` (UTC time of day, microseconds), strace's `-tt` style.
pub fn time_of_day_us(ns: u64) -> String {
    let secs = ns / 1_000_000_000;
    let (h, m, s) = hms(secs);
    format!("{h:02}:{m:02}:{s:02}.{:06}", (ns % 1_000_000_000) / 1000)
}

fn hms(secs: u64) -> (u64, u64, u64) {
    let day = secs % 86_400;
    (day / 3600, (day % 3600) / 60, day % 60)
}

/// `YYYY-MM-DD HH:MM:SS UTC`.
pub fn date_time(ns: u64) -> String {
    let secs = ns / 1_000_000_000;
    let (y, mo, d) = civil_from_days((secs / 86_400) as i64);
    let (h, m, s) = hms(secs);
    format!("{y:04}-{mo:02}-{d:02} {h:02}:{m:02}:{s:02} UTC")
}

/// Proleptic Gregorian date of a day count since 1970-01-01 (the well-known
/// era/day-of-era decomposition: 400-year eras of 146097 days).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// A duration in seconds with the precision people read: `1.234567 s`.
pub fn seconds(ns: u64) -> String {
    format!(
        "{}.{:06} s",
        ns / 1_000_000_000,
        (ns % 1_000_000_000) / 1000
    )
}

/// A byte count with a binary-unit rendering after it when it is large:
/// `512 B`, `1536 B (1.50 KiB)`.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    format!("{n} B ({v:.2} {})", UNITS[unit])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_known_instants() {
        // 2021-01-01T00:00:00Z is 1609459200 s after the epoch.
        let ns = 1_609_459_200_000_000_000u64 + 3_723_000_456_789;
        assert_eq!(time_of_day_ns(ns), "01:02:03.000456789");
        assert_eq!(time_of_day_us(ns), "01:02:03.000456");
        assert_eq!(date_time(ns), "2021-01-01 01:02:03 UTC");
        assert_eq!(date_time(0), "1970-01-01 00:00:00 UTC");
        // 2000-02-29 (a leap day): 951782400 s.
        assert_eq!(
            date_time(951_782_400 * 1_000_000_000),
            "2000-02-29 00:00:00 UTC"
        );
    }

    #[test]
    fn byte_counts_and_seconds() {
        assert_eq!(bytes(0), "0 B");
        assert_eq!(bytes(1023), "1023 B");
        assert_eq!(bytes(1536), "1536 B (1.50 KiB)");
        assert_eq!(bytes(3 << 20), "3145728 B (3.00 MiB)");
        assert_eq!(seconds(1_500_000_000), "1.500000 s");
        assert_eq!(seconds(999), "0.000000 s");
    }
}
