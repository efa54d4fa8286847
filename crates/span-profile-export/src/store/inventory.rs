//! What a store holds: its services and, for each, the versions, environments, instances and
//! routes of its windows, each with how many windows it is in and their time range; and
//! [`nearest`] and [`closest`], the names that exist nearest one that matched nothing.
//!
//! The inventory is read from each window's summary (ADR 0006), of which only the route
//! names and the resource are decoded; a window whose summary is missing, unusable, or older
//! than the environment and instance fields is decoded instead.
//!
//! ```
//! use span_profile_export::store::inventory::{inventory, nearest};
//! use span_profile_export::store::query::Filter;
//! use span_profile_export::store::Store;
//!
//! let dir = std::env::temp_dir().join(format!("span-profile-inventory-doc-{}", std::process::id()));
//! std::fs::create_dir_all(&dir).unwrap();
//! let inv = inventory(&Store::new(&dir), &Filter::default()).unwrap();
//! assert!(inv.services.is_empty());
//! assert_eq!(nearest("chekout", ["billing", "checkout"]), ["checkout", "billing"]);
//! # std::fs::remove_dir_all(&dir).unwrap();
//! ```

use std::collections::BTreeMap;

use rustc_hash::FxHashSet;
use serde::Serialize;
use span_profile_core::WindowInfo;

use crate::store::fold::{QueryError, Store, Window};
use crate::store::query::Filter;
use crate::store::summary::SummaryScope;

/// The windows something is in: how many, and from the first one's start to the last one's
/// end.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Seen {
    /// Windows it is in.
    pub windows: u64,
    /// Start of its earliest window, Unix nanoseconds.
    pub first_start_unix_ns: u64,
    /// End of its latest window, Unix nanoseconds.
    pub last_end_unix_ns: u64,
}

impl Seen {
    fn add_window(&mut self, start: u64, end: u64) {
        self.add(&Seen {
            windows: 1,
            first_start_unix_ns: start,
            last_end_unix_ns: end,
        });
    }

    fn add(&mut self, other: &Seen) {
        if other.windows == 0 {
            return;
        }
        if self.windows == 0 {
            *self = *other;
            return;
        }
        self.windows += other.windows;
        self.first_start_unix_ns = self.first_start_unix_ns.min(other.first_start_unix_ns);
        self.last_end_unix_ns = self.last_end_unix_ns.max(other.last_end_unix_ns);
    }
}

/// One value of a label (a version, an environment, an instance or a route) and the windows
/// it is in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Entry {
    /// The value; `None` for windows whose resource does not set it.
    pub name: Option<String>,
    /// Its windows.
    #[serde(flatten)]
    pub seen: Seen,
}

/// One service of a store: its windows, and the values of each label in them, by name (unset
/// first).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ServiceInventory {
    /// `service.name`.
    pub service: String,
    /// The service's windows.
    #[serde(flatten)]
    pub seen: Seen,
    /// `service.version` values.
    pub versions: Vec<Entry>,
    /// `deployment.environment` values.
    pub environments: Vec<Entry>,
    /// Instance labels (`service.instance.id`, or the host).
    pub instances: Vec<Entry>,
    /// Route labels of the windows' samples (`http.route` of the local root, or
    /// `background`); a route is in a window when the window has a sample of it.
    pub routes: Vec<Entry>,
}

/// What a store holds, by service name.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Inventory {
    /// The services, by name.
    pub services: Vec<ServiceInventory>,
}

/// A label of windows that [`Inventory::names`] lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Label {
    /// `service.name`.
    Service,
    /// `service.version`.
    Version,
    /// `deployment.environment`.
    Environment,
    /// The instance label.
    Instance,
    /// The route label.
    Route,
}

impl Inventory {
    /// The distinct values of `label` in the services that pass `service` (all when `None`),
    /// unset values left out, sorted.
    pub fn names(&self, label: Label, service: Option<&str>) -> Vec<&str> {
        let mut out: Vec<&str> = self
            .services
            .iter()
            .filter(|s| service.is_none_or(|want| s.service == want))
            .flat_map(|s| {
                let entries: &[Entry] = match label {
                    Label::Service => return vec![s.service.as_str()],
                    Label::Version => &s.versions,
                    Label::Environment => &s.environments,
                    Label::Instance => &s.instances,
                    Label::Route => &s.routes,
                };
                entries.iter().filter_map(|e| e.name.as_deref()).collect()
            })
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    }
}

/// One service while windows are counted.
#[derive(Debug, Default)]
struct ServiceCounts {
    seen: Seen,
    versions: BTreeMap<Option<String>, Seen>,
    environments: BTreeMap<Option<String>, Seen>,
    instances: BTreeMap<Option<String>, Seen>,
    routes: BTreeMap<Option<String>, Seen>,
}

impl ServiceCounts {
    fn merge(&mut self, other: ServiceCounts) {
        self.seen.add(&other.seen);
        for (into, from) in [
            (&mut self.versions, other.versions),
            (&mut self.environments, other.environments),
            (&mut self.instances, other.instances),
            (&mut self.routes, other.routes),
        ] {
            for (k, v) in from {
                into.entry(k).or_default().add(&v);
            }
        }
    }

    fn finish(self, service: String) -> ServiceInventory {
        let entries = |m: BTreeMap<Option<String>, Seen>| {
            m.into_iter()
                .map(|(name, seen)| Entry { name, seen })
                .collect()
        };
        ServiceInventory {
            service,
            seen: self.seen,
            versions: entries(self.versions),
            environments: entries(self.environments),
            instances: entries(self.instances),
            routes: entries(self.routes),
        }
    }
}

/// The counts of one reading thread.
#[derive(Debug, Default)]
struct Counts(BTreeMap<String, ServiceCounts>);

impl Counts {
    /// Counts one window and the distinct routes of its samples.
    fn add<'a>(&mut self, w: &WindowInfo<'_>, routes: impl Iterator<Item = &'a str>) {
        let (start, end) = (
            w.start_unix_ns,
            w.start_unix_ns.saturating_add(w.duration_ns),
        );
        let s = self.0.entry(w.service.to_owned()).or_default();
        s.seen.add_window(start, end);
        for (map, value) in [
            (&mut s.versions, w.version),
            (&mut s.environments, w.environment),
            (&mut s.instances, w.instance),
        ] {
            map.entry(value.map(str::to_owned))
                .or_default()
                .add_window(start, end);
        }
        let routes: FxHashSet<&str> = routes.collect();
        for r in routes {
            s.routes
                .entry(Some(r.to_owned()))
                .or_default()
                .add_window(start, end);
        }
    }
}

/// What the windows that pass `filter`'s window selectors (service, version, environment,
/// instance, time) hold. Its span, trace and route are not used. Files that cannot be read are
/// skipped and kept in the store ([`Store::take_skipped`]).
pub fn inventory(store: &Store, filter: &Filter) -> Result<Inventory, QueryError> {
    let f = Filter {
        span_id: None,
        with_children: false,
        trace_id: None,
        route: None,
        ..filter.clone()
    };
    let files = store.list(&f)?;
    let parts = store.fold_scoped(
        &files,
        Some((&f, SummaryScope::RouteNames)),
        Counts::default,
        |acc, _, w| {
            let info = w.info();
            match &w {
                // An older summary does not say the environment and instance: decode.
                Window::Summary(s) if s.deployment.is_none() => return false,
                _ if !f.matches(&info) => {}
                Window::Summary(s) => acc.add(&info, s.routes.iter().map(|r| s.string(r.route))),
                Window::Profile(p) => acc.add(&info, p.samples.iter().map(|s| &*s.route)),
            }
            true
        },
    );
    let mut all = Counts::default();
    for part in parts {
        for (service, c) in part.0 {
            all.0.entry(service).or_default().merge(c);
        }
    }
    Ok(Inventory {
        services: all.0.into_iter().map(|(s, c)| c.finish(s)).collect(),
    })
}

/// The distinct `names`, nearest to `want` first: by edit distance ignoring case, then by
/// edit distance, then by name. With [`closest`] and [`is_close`], the one place that judges
/// how close a name is.
pub fn nearest<'a>(want: &str, names: impl IntoIterator<Item = &'a str>) -> Vec<&'a str> {
    ranked(want, names).into_iter().map(|(_, n)| n).collect()
}

/// The name among `names` that `want` most likely meant: [close](is_close) to it and nearer
/// than every other name; `None` when none is close or two are equally near.
///
/// ```
/// use span_profile_export::store::inventory::closest;
/// assert_eq!(closest("chekout", ["billing", "checkout"]), Some("checkout"));
/// assert_eq!(closest("route_5", ["route_1", "route_2"]), None, "a tie");
/// assert_eq!(closest("zzz", ["checkout"]), None, "not close");
/// ```
pub fn closest<'a>(want: &str, names: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let r = ranked(want, names);
    let (first, name) = *r.first()?;
    let unique = r.get(1).is_none_or(|(second, _)| first < *second);
    (unique && is_close(want, name)).then_some(name)
}

/// Distinct names with their distance to `want` (ignoring case, then exact), nearest first.
fn ranked<'a>(
    want: &str,
    names: impl IntoIterator<Item = &'a str>,
) -> Vec<((usize, usize), &'a str)> {
    let want_lower = want.to_lowercase();
    let mut ranked: Vec<((usize, usize), &str)> = names
        .into_iter()
        .collect::<FxHashSet<&str>>()
        .into_iter()
        .map(|n| {
            let d = (
                edit_distance(&want_lower, &n.to_lowercase()),
                edit_distance(want, n),
            );
            (d, n)
        })
        .collect();
    ranked.sort_unstable();
    ranked
}

/// Whether `name` is close enough to `want` to be what was meant: a case-insensitive edit
/// distance of at most a third of `want`'s length (at least 1), or one contains the other.
pub fn is_close(want: &str, name: &str) -> bool {
    let (w, n) = (want.to_lowercase(), name.to_lowercase());
    if !w.is_empty() && !n.is_empty() && (w.contains(&n) || n.contains(&w)) {
        return true;
    }
    edit_distance(&w, &n) <= (w.chars().count() / 3).max(1)
}

/// Levenshtein distance over characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (above + 1)
                .min(row[j] + 1)
                .min(diagonal + usize::from(ca != cb));
            diagonal = above;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distances() {
        assert_eq!(edit_distance("chekout", "checkout"), 1);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("same", "same"), 0);
    }

    #[test]
    fn nearest_first_and_close_ones() {
        assert_eq!(
            nearest(
                "/chekout",
                ["/orders", "/checkout", "background", "/checkout"]
            ),
            ["/checkout", "/orders", "background"]
        );
        assert_eq!(nearest("Prod", ["staging", "prod"]), ["prod", "staging"]);
        assert!(is_close("chekout", "checkout"));
        assert!(is_close("1.4", "1.4.2"));
        assert!(!is_close("billing", "checkout"));
        assert!(!is_close("", "checkout"));
        assert_eq!(closest("Prod", ["staging", "prod", "PROD"]), Some("prod"));
        assert_eq!(closest("x", Vec::<&str>::new()), None);
    }

    #[test]
    fn seen_adds_windows() {
        let mut s = Seen::default();
        s.add_window(10, 20);
        s.add_window(5, 8);
        s.add(&Seen::default());
        assert_eq!(
            s,
            Seen {
                windows: 2,
                first_start_unix_ns: 5,
                last_end_unix_ns: 20
            }
        );
    }
}
