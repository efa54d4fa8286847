//! Unix time in nanoseconds, the one unit every timestamp of a profile is in.

use std::time::{SystemTime, UNIX_EPOCH};

/// `t` in nanoseconds since the Unix epoch: 0 for a time before it, `u64::MAX` past 2554.
///
/// ```
/// use std::time::{Duration, UNIX_EPOCH};
/// use span_profile_core::internal::unix_ns;
/// assert_eq!(unix_ns(UNIX_EPOCH + Duration::from_millis(1500)), 1_500_000_000);
/// assert_eq!(unix_ns(UNIX_EPOCH - Duration::from_secs(1)), 0);
/// ```
pub fn unix_ns(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// The system clock now, in Unix nanoseconds ([`unix_ns`]).
pub fn now_unix_ns() -> u64 {
    unix_ns(SystemTime::now())
}
