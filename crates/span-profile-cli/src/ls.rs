//! `span-profile ls DIR`: what is in a store. Its services and, under each, the versions,
//! environments, instances and routes of its windows, each with its window count and time
//! range (the first window's start to the last one's end). The counting is
//! `store::inventory`'s.

use span_profile_export::store::inventory::{self, Entry, Seen};
use span_profile_export::store::{format_rfc3339, Store};

use crate::select::WindowArgs;
use crate::text::Shown;
use crate::Empty;

/// Arguments of `ls`.
#[derive(Debug, clap::Args)]
pub(crate) struct LsArgs {
    #[command(flatten)]
    pub(crate) windows: WindowArgs,
}

pub(crate) fn run(store: &Store, args: &LsArgs, json: bool) -> anyhow::Result<()> {
    let inv = inventory::inventory(store, &args.windows.filter())?;
    if inv.services.is_empty() {
        return Err(Empty(format!(
            "no windows in {} for the selection",
            store.dir().display()
        ))
        .into());
    }
    if json {
        crate::json_out(store, &inv)?;
        return Ok(());
    }
    let width = inv
        .services
        .iter()
        .flat_map(|s| {
            let entries = [&s.versions, &s.environments, &s.instances, &s.routes];
            entries
                .into_iter()
                .flatten()
                .map(|e| name(e).chars().count() + 4)
                .chain([s.service.chars().count()])
                .collect::<Vec<_>>()
        })
        .max()
        .unwrap_or(0);
    for s in &inv.services {
        outln!("{:<width$}  {}", Shown(&s.service), seen(&s.seen));
        for (label, entries) in [
            ("versions", &s.versions),
            ("environments", &s.environments),
            ("instances", &s.instances),
            ("routes", &s.routes),
        ] {
            outln!("  {label}");
            for e in entries {
                let shown = Shown(name(e)).to_string();
                outln!("    {:<w$}  {}", shown, seen(&e.seen), w = width - 4);
            }
        }
    }
    Ok(())
}

/// An entry's name, `(unset)` for windows that do not set it.
fn name(e: &Entry) -> &str {
    e.name.as_deref().unwrap_or("(unset)")
}

/// `3 windows  2024-05-01T12:00:00Z .. 2024-05-01T12:03:00Z`.
fn seen(s: &Seen) -> String {
    let plural = if s.windows == 1 { "" } else { "s" };
    format!(
        "{:>6} window{plural:<1}  {} .. {}",
        s.windows,
        format_rfc3339(s.first_start_unix_ns),
        format_rfc3339(s.last_end_unix_ns)
    )
}
