//! Times as the store's users read and write them: RFC 3339 in UTC, to Unix nanoseconds and
//! back (the calendar arithmetic is the one the store's date folders use).

use crate::civil::{civil_from_days, days_from_civil};

const NS_PER_SEC: u64 = 1_000_000_000;

/// An RFC 3339 time (`2024-05-01T12:00:00Z`, `2024-05-01T14:00:00.5+02:00`) in Unix
/// nanoseconds, or `None` if `s` is not one (or is before 1970).
///
/// ```
/// use span_profile_export::store::{format_rfc3339, parse_rfc3339};
/// let t = parse_rfc3339("2024-05-01T14:00:00.25+02:00").unwrap();
/// assert_eq!(t, 1_714_564_800_250_000_000);
/// assert_eq!(format_rfc3339(t), "2024-05-01T12:00:00.250Z");
/// assert_eq!(parse_rfc3339("2024-05-01"), None);
/// ```
pub fn parse_rfc3339(s: &str) -> Option<u64> {
    let b = s.as_bytes();
    if b.len() < 20 || !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<u32> {
        let part = s.get(r)?;
        if !part.bytes().all(|c| c.is_ascii_digit()) {
            return None;
        }
        part.parse().ok()
    };
    if b[4] != b'-' || b[7] != b'-' || b[13] != b':' || b[16] != b':' {
        return None;
    }
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || sec > 60 {
        return None;
    }
    let mut rest = &s[19..];
    let mut frac_ns: u64 = 0;
    if let Some(f) = rest.strip_prefix('.') {
        let n = f.bytes().take_while(u8::is_ascii_digit).count();
        if n == 0 {
            return None;
        }
        for (i, c) in f[..n].bytes().enumerate().take(9) {
            frac_ns += u64::from(c - b'0') * 10u64.pow(8 - i as u32);
        }
        rest = &f[n..];
    }
    let offset_s: i64 = match rest {
        "Z" | "z" => 0,
        o if o.len() == 6 && matches!(&o[..1], "+" | "-") && &o[3..4] == ":" => {
            let oh: i64 = o[1..3].parse().ok()?;
            let om: i64 = o[4..6].parse().ok()?;
            let v = oh * 3600 + om * 60;
            if o.starts_with('-') {
                -v
            } else {
                v
            }
        }
        _ => return None,
    };
    let days = days_from_civil(i64::from(y), mo, d);
    let secs = days * 86_400 + i64::from(h * 3600 + mi * 60 + sec) - offset_s;
    let secs = u64::try_from(secs).ok()?;
    secs.checked_mul(NS_PER_SEC)?.checked_add(frac_ns)
}

/// Unix nanoseconds as RFC 3339 UTC with millisecond precision.
pub fn format_rfc3339(unix_ns: u64) -> String {
    let secs = unix_ns / NS_PER_SEC;
    let (y, m, d) = civil_from_days((secs / 86_400) as i64);
    let sod = secs % 86_400;
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        sod / 3600,
        sod / 60 % 60,
        sod % 60,
        unix_ns % NS_PER_SEC / 1_000_000
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_round_trip_through_the_calendar() {
        let now = 1_714_564_800 * NS_PER_SEC; // 2024-05-01T12:00:00Z
        assert_eq!(parse_rfc3339("2024-05-01T12:00:00Z"), Some(now));
        assert_eq!(format_rfc3339(now + 5_000_000), "2024-05-01T12:00:00.005Z");
        for days in [0i64, 59, 365, 11_016, 19_844, 30_000] {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days);
        }
    }
}
