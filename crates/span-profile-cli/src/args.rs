//! Parsers for command-line values: times, durations, ids and `key=value` selectors. Every
//! error names the form that is expected.

use span_profile_core::internal::now_unix_ns;
use span_profile_core::{SpanId, TraceId};
use span_profile_export::store::parse_rfc3339;

const NS_PER_SEC: u64 = 1_000_000_000;
const NS_PER_DAY: u64 = 86_400 * NS_PER_SEC;

/// A duration such as `500ms`, `30m`, `2h`, `14d` or `1h30m`, in nanoseconds (more than 0).
pub(crate) fn parse_duration(s: &str) -> Result<u64, String> {
    let expected =
        "expected a duration such as 90s, 30m, 2h, 14d or 1h30m (units: ns, us, ms, s, m, h, d, w)";
    let t = s.trim();
    if t.is_empty() {
        return Err(format!("empty duration; {expected}"));
    }
    let mut total: u64 = 0;
    let mut rest = t;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(format!("{s:?} is not a duration; {expected}"));
        }
        let n: u64 = rest[..digits]
            .parse()
            .map_err(|_| format!("{s:?}: number too large; {expected}"))?;
        rest = &rest[digits..];
        let unit_len = rest.bytes().take_while(u8::is_ascii_alphabetic).count();
        let unit = match &rest[..unit_len] {
            "ns" => 1,
            "us" => 1_000,
            "ms" => 1_000_000,
            "s" => NS_PER_SEC,
            "m" => 60 * NS_PER_SEC,
            "h" => 3_600 * NS_PER_SEC,
            "d" => NS_PER_DAY,
            "w" => 7 * NS_PER_DAY,
            "" => return Err(format!("{s:?} has a number without a unit; {expected}")),
            u => return Err(format!("{s:?} has an unknown unit {u:?}; {expected}")),
        };
        rest = &rest[unit_len..];
        total = n
            .checked_mul(unit)
            .and_then(|v| total.checked_add(v))
            .ok_or_else(|| format!("{s:?} is too long; {expected}"))?;
    }
    if total == 0 {
        return Err(format!("{s:?} is zero; {expected}"));
    }
    Ok(total)
}

/// A point in time: RFC 3339 (`2024-05-01T12:00:00Z`, `2024-05-01T14:00:00.5+02:00`), `now`,
/// or relative to now (`-2h`, `-1d12h`, `+30d`). Unix nanoseconds.
pub(crate) fn parse_time(s: &str) -> Result<u64, String> {
    parse_time_at(s, now_unix_ns())
}

fn parse_time_at(s: &str, now: u64) -> Result<u64, String> {
    let expected = "expected RFC 3339 (2024-05-01T12:00:00Z, 2024-05-01T14:00:00+02:00), now, or a time relative to now (-2h, -30m, -7d, +1d)";
    let t = s.trim();
    if t == "now" {
        return Ok(now);
    }
    if let Some(ago) = t.strip_prefix('-') {
        let d = parse_duration(ago).map_err(|e| format!("{e}; {expected}"))?;
        return Ok(now.saturating_sub(d));
    }
    if let Some(ahead) = t.strip_prefix('+') {
        let d = parse_duration(ahead).map_err(|e| format!("{e}; {expected}"))?;
        return Ok(now.saturating_add(d));
    }
    parse_rfc3339(t).ok_or_else(|| format!("{s:?} is not a time; {expected}"))
}

/// A span id: 16 hex digits.
pub(crate) fn parse_span_id(s: &str) -> Result<SpanId, String> {
    s.parse().map_err(|e| {
        format!("{s:?} is not a span id ({e}); expected 16 hex digits, e.g. 00f067aa0ba902b7")
    })
}

/// A trace id: 32 hex digits.
pub(crate) fn parse_trace_id(s: &str) -> Result<TraceId, String> {
    s.parse().map_err(|e| {
        format!("{s:?} is not a trace id ({e}); expected 32 hex digits, e.g. 4bf92f3577b34da6a3ce929d0e0e4736")
    })
}

/// A non-negative integer of nanoseconds.
pub(crate) fn parse_unix_ns(s: &str) -> Result<u64, String> {
    s.parse().map_err(|_| {
        format!("{s:?} is not a time in Unix nanoseconds; expected an integer such as 1714564800000000000")
    })
}

/// A fraction such as `0.02` (two points of share), between 0 and 1.
pub(crate) fn parse_fraction(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if (0.0..=1.0).contains(&v) => Ok(v),
        _ => Err(format!(
            "{s:?} is not a fraction; expected a number from 0 to 1, e.g. 0.02 for two points"
        )),
    }
}

/// What a `diff` side selects: `version=1.4.2` (the only key so far).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct VersionSelector(pub(crate) String);

pub(crate) fn parse_version_selector(s: &str) -> Result<VersionSelector, String> {
    match s.split_once('=') {
        Some(("version", v)) if !v.is_empty() => Ok(VersionSelector(v.to_string())),
        _ => Err(format!(
            "{s:?} is not a deploy selector; expected version=VALUE, e.g. version=1.4.2"
        )),
    }
}

/// Nanoseconds as a short human duration: `720 ms`, `4.2 ms`, `12.5 s`, `3.0 min`.
pub(crate) fn format_duration_ns(ns: u64) -> String {
    let ms = ns as f64 / 1e6;
    if ms < 10.0 {
        format!("{ms:.1} ms")
    } else if ms < 10_000.0 {
        format!("{ms:.0} ms")
    } else if ms < 600_000.0 {
        format!("{:.1} s", ms / 1e3)
    } else {
        format!("{:.1} min", ms / 60e3)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use span_profile_export::store::format_rfc3339;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30m"), Ok(1_800 * NS_PER_SEC));
        assert_eq!(parse_duration("14d"), Ok(14 * NS_PER_DAY));
        assert_eq!(parse_duration("1h30m"), Ok(5_400 * NS_PER_SEC));
        assert_eq!(parse_duration("500ms"), Ok(500_000_000));
        for bad in ["", "5", "m", "3x", "0s", "-1h", "99999999999999999999d"] {
            let e = parse_duration(bad).unwrap_err();
            assert!(e.contains("expected a duration such as"), "{bad}: {e}");
        }
    }

    #[test]
    fn times() {
        let now = 1_714_564_800 * NS_PER_SEC; // 2024-05-01T12:00:00Z
        assert_eq!(parse_time_at("2024-05-01T12:00:00Z", now), Ok(now));
        assert_eq!(parse_time_at("2024-05-01T14:00:00+02:00", now), Ok(now));
        assert_eq!(
            parse_time_at("2024-05-01T12:00:00.25Z", now),
            Ok(now + 250_000_000)
        );
        assert_eq!(parse_time_at("-2h", now), Ok(now - 7_200 * NS_PER_SEC));
        assert_eq!(parse_time_at("now", now), Ok(now));
        assert_eq!(parse_time_at("+1d", now), Ok(now + NS_PER_DAY));
        for bad in [
            "yesterday",
            "2024-05-01",
            "2024-13-01T00:00:00Z",
            "-2",
            "2h",
        ] {
            let e = parse_time_at(bad, now).unwrap_err();
            assert!(e.contains("expected RFC 3339"), "{bad}: {e}");
        }
        assert_eq!(format_rfc3339(now + 5_000_000), "2024-05-01T12:00:00.005Z");
    }

    #[test]
    fn ids_and_selectors() {
        assert!(parse_span_id("00f067aa0ba902b7").is_ok());
        assert!(parse_span_id("xyz").unwrap_err().contains("16 hex digits"));
        assert!(parse_trace_id("12").unwrap_err().contains("32 hex digits"));
        assert_eq!(
            parse_version_selector("version=2.0"),
            Ok(VersionSelector("2.0".into()))
        );
        assert!(parse_version_selector("2.0")
            .unwrap_err()
            .contains("version=VALUE"));
        assert!(parse_fraction("2").is_err());
        assert_eq!(format_duration_ns(720_000_000), "720 ms");
        assert_eq!(format_duration_ns(4_200_000), "4.2 ms");
    }
}
