//! The file store's layout, shared by its writer ([`crate::FileStore`]) and its reader
//! ([`crate::store`]): `<dir>/<service>/<YYYY-MM-DD>/<start_unix_ms>-<instance>-<seq>.pb.gz`,
//! the summary beside each window, the temporary names, and how names are made safe.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::civil::{civil_from_days, days_from_civil};

/// File name suffix of stored windows.
pub const FILE_SUFFIX: &str = ".pb.gz";
/// Suffix added to a window's file name to name its summary: `<name>.pb.gz.summary`.
pub const SUMMARY_SUFFIX: &str = ".summary";
/// Prefix of files being written; readers skip them.
pub const TEMP_PREFIX: &str = ".tmp-";
/// Longest sanitized path component, in bytes.
const MAX_COMPONENT_LEN: usize = 100;
pub(crate) const NS_PER_MS: u64 = 1_000_000;
pub(crate) const NS_PER_DAY: u64 = 86_400 * 1_000_000_000;

/// The summary file of the window file at `window`: the same name with [`SUMMARY_SUFFIX`].
///
/// ```
/// use std::path::Path;
/// let p = span_profile_export::summary_path(Path::new("svc/2024-05-01/1714521600000-a-0.pb.gz"));
/// assert_eq!(p, Path::new("svc/2024-05-01/1714521600000-a-0.pb.gz.summary"));
/// ```
pub fn summary_path(window: &Path) -> PathBuf {
    let mut s = window.as_os_str().to_owned();
    s.push(SUMMARY_SUFFIX);
    PathBuf::from(s)
}

/// Names in a directory that are valid UTF-8 and do not start with `.`.
pub(crate) fn read_dir_names(dir: &Path) -> io::Result<Vec<String>> {
    read_dir_listing(dir, |_| false).map(|(names, _)| names)
}

/// [`read_dir_names`], and the paths of the entries whose names are not UTF-8 and that
/// `report` picks out (those that look like what the store holds at this level).
pub(crate) fn read_dir_listing(
    dir: &Path,
    report: impl Fn(&Path) -> bool,
) -> io::Result<(Vec<String>, Vec<PathBuf>)> {
    let (mut names, mut not_utf8) = (Vec::new(), Vec::new());
    for entry in fs::read_dir(dir)? {
        let raw = entry?.file_name();
        // A lossy copy is enough to tell a hidden name or a window's suffix.
        let lossy = raw.to_string_lossy();
        if lossy.starts_with('.') {
            continue;
        }
        match raw.to_str() {
            Some(name) => names.push(name.to_owned()),
            None => {
                let path = dir.join(&raw);
                if report(&path) {
                    not_utf8.push(path);
                }
            }
        }
    }
    Ok((names, not_utf8))
}

/// Makes `s` safe as one path component: keeps ASCII letters, digits, `-`, `_` and `.`,
/// replaces everything else (including `/`, `\`, control characters and non-ASCII) with
/// `_`, never starts with `.` (no `..`, no hidden or temp names), is never empty, and is at
/// most 100 bytes.
///
/// ```
/// use span_profile_export::sanitize_component;
/// assert_eq!(sanitize_component("checkout"), "checkout");
/// assert_eq!(sanitize_component("../etc/passwd"), "_._etc_passwd");
/// assert_eq!(sanitize_component(""), "_");
/// assert_eq!(sanitize_component("a\nb/c"), "a_b_c");
/// ```
pub fn sanitize_component(s: &str) -> String {
    let mut out: String = s
        .chars()
        .take(MAX_COMPONENT_LEN)
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if out.starts_with('.') {
        out.replace_range(..1, "_");
    }
    if out.is_empty() {
        out.push('_');
    }
    out
}

/// `<start_ms>-<instance>-<seq>.pb.gz` → its parts.
pub(crate) fn parse_file_name(name: &str) -> Option<(u64, &str, u64)> {
    let stem = name.strip_suffix(FILE_SUFFIX)?;
    let (start, rest) = stem.split_once('-')?;
    let (instance, seq) = rest.rsplit_once('-')?;
    if start.is_empty() || !start.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((start.parse().ok()?, instance, seq.parse().ok()?))
}

/// The UTC date of a Unix time, `YYYY-MM-DD`.
pub(crate) fn utc_date(unix_ns: u64) -> String {
    let (y, m, d) = civil_from_days((unix_ns / NS_PER_DAY) as i64);
    format!("{y:04}-{m:02}-{d:02}")
}

/// `YYYY-MM-DD` → days since 1970-01-01, if it is a date on or after 1970-01-01.
pub(crate) fn parse_date(s: &str) -> Option<u64> {
    let mut it = s.splitn(3, '-');
    let y: i64 = it.next()?.parse().ok()?;
    let m: u32 = it.next()?.parse().ok()?;
    let d: u32 = it.next()?.parse().ok()?;
    if s.len() != 10 || !(1..=12).contains(&m) || !(1..=31).contains(&d) {
        return None;
    }
    u64::try_from(days_from_civil(y, m, d)).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_utc_days() {
        assert_eq!(utc_date(0), "1970-01-01");
        // 2024-02-29T23:59:59Z
        assert_eq!(utc_date(1_709_251_199 * 1_000_000_000), "2024-02-29");
        assert_eq!(utc_date(1_709_251_200 * 1_000_000_000), "2024-03-01");
        for days in [0u64, 59, 365, 11_016, 19_782, 30_000] {
            let s = utc_date(days * NS_PER_DAY);
            assert_eq!(parse_date(&s), Some(days), "{s}");
        }
        assert_eq!(parse_date("2024-13-01"), None);
        assert_eq!(parse_date("x"), None);
    }

    #[test]
    fn file_names_parse_back() {
        assert_eq!(
            parse_file_name("1700000000000-host-1-42.pb.gz"),
            Some((1_700_000_000_000, "host-1", 42))
        );
        assert_eq!(parse_file_name(".tmp-1-a-2"), None);
        assert_eq!(parse_file_name("x-a-1.pb.gz"), None);
        assert_eq!(parse_file_name("1-a-1.pb"), None);
    }

    #[test]
    fn components_cannot_escape() {
        for bad in ["..", ".", "/", "a/../b", "\u{0}", "é", ".tmp-x"] {
            let s = sanitize_component(bad);
            assert!(
                !s.contains('/') && !s.starts_with('.') && s.is_ascii(),
                "{s}"
            );
            assert!(!s.chars().any(char::is_control));
        }
        assert_eq!(sanitize_component(&"x".repeat(500)).len(), 100);
    }
}
