//! Names that match nothing: an empty selection (exit 3) that names a service, version,
//! environment, instance or route the store does not have says so, with the names that do
//! exist, nearest first (`no service "chekout"; services in the store: checkout (closest),
//! billing`). How near a name is, is `store::inventory`'s ([`nearest`], [`closest`]).

use span_profile_export::store::inventory::{self, closest, nearest, Label};
use span_profile_export::store::query::Filter;
use span_profile_export::store::Store;

use crate::select::WindowArgs;
use crate::text::Shown;
use crate::Empty;

/// How many existing names a message lists.
const LISTED: usize = 10;

/// `services in the store: checkout (closest), billing`: `names` nearest `want` first, the
/// first marked when it is the one [`closest`] picks, at most [`LISTED`] of them.
pub(crate) fn listed<'a>(
    what: &str,
    want: &str,
    names: impl IntoIterator<Item = &'a str>,
) -> String {
    let names: Vec<&str> = names.into_iter().collect();
    let mark = closest(want, names.iter().copied());
    let names = nearest(want, names);
    if names.is_empty() {
        return format!("there are no {what}");
    }
    let mut shown: Vec<String> = names
        .iter()
        .take(LISTED)
        .map(|n| Shown(n).to_string())
        .collect();
    if mark == Some(names[0]) {
        shown[0].push_str(" (closest)");
    }
    if names.len() > LISTED {
        shown.push(format!("… and {} more", names.len() - LISTED));
    }
    format!("{what}: {}", shown.join(", "))
}

/// What a selection names, to be checked against the store.
#[derive(Debug, Default)]
pub(crate) struct Named<'a> {
    /// The window selectors.
    pub(crate) windows: Option<&'a WindowArgs>,
    /// A route.
    pub(crate) route: Option<&'a str>,
}

/// On an empty selection, the names the selection asked for that the store does not have, each
/// on its line with the names that exist nearest it, after the command's message; anything else
/// passes through. The store is read again for its names (window summaries' route names, see
/// `store::inventory`), only on this path.
pub(crate) fn explain_empty<T>(
    store: &Store,
    r: anyhow::Result<T>,
    named: &Named<'_>,
) -> anyhow::Result<T> {
    let e = match r {
        Err(e) if e.is::<Empty>() => e,
        r => return r,
    };
    match unknown_names(store, named) {
        // The command's own message first (what it read, what it did not write), then what
        // the store has instead.
        Ok(lines) if !lines.is_empty() => Err(Empty(format!("{e}\n{}", lines.join("\n"))).into()),
        _ => Err(e),
    }
}

/// One line per name the store does not have.
fn unknown_names(store: &Store, named: &Named<'_>) -> anyhow::Result<Vec<String>> {
    let w = named.windows;
    let window = |f: fn(&WindowArgs) -> Option<&String>| w.and_then(f).map(String::as_str);
    let mut wanted: Vec<(Label, Option<&str>, &str, &str)> = vec![
        (
            Label::Service,
            window(|w| w.service.as_ref()),
            "service",
            "services",
        ),
        (
            Label::Version,
            window(|w| w.version.as_ref()),
            "version",
            "versions",
        ),
    ];
    wanted.extend([
        (
            Label::Environment,
            window(|w| w.environment.as_ref()),
            "environment",
            "environments",
        ),
        (
            Label::Instance,
            window(|w| w.instance.as_ref()),
            "instance",
            "instances",
        ),
        (Label::Route, named.route, "route", "routes"),
    ]);
    let wanted: Vec<(Label, &str, &str, &str)> = wanted
        .into_iter()
        .filter_map(|(label, v, one, many)| Some((label, v?, one, many)))
        .collect();
    if wanted.is_empty() {
        return Ok(Vec::new());
    }
    // A store of its own, so that what it skips is not reported twice.
    let names_store = Store::new(store.dir()).with_threads(store.threads());
    let inv = inventory::inventory(&names_store, &Filter::default())?;
    let service = w.and_then(|w| w.service.as_deref());
    let known_service = service.filter(|s| inv.services.iter().any(|x| x.service == *s));
    let mut lines = Vec::new();
    for (label, want, one, many) in wanted {
        let scope = match label {
            Label::Service => None,
            _ => known_service,
        };
        let names = inv.names(label, scope);
        if names.contains(&want) {
            continue;
        }
        let of = scope
            .map(|s| format!(" of service {}", Shown(s)))
            .unwrap_or_default();
        lines.push(format!(
            "no {one} \"{}\"{of}; {}",
            Shown(want),
            listed(&format!("{many}{of} in the store"), want, names)
        ));
    }
    Ok(lines)
}
