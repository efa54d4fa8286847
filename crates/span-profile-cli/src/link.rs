//! `span-profile link`: the URL (or command) that opens one span's profile.

use std::path::PathBuf;

use span_profile_core::{SpanId, TraceId};
use span_profile_export::store::format_rfc3339;

use crate::args::{parse_span_id, parse_trace_id, parse_unix_ns};
use crate::Usage;

/// Placeholders a custom template may use.
const PLACEHOLDERS: &[&str] = &[
    "trace_id", "span_id", "start_ns", "end_ns", "start_ms", "end_ms", "start", "end", "service",
];

/// Arguments of `link`.
#[derive(Debug, clap::Args)]
pub(crate) struct LinkArgs {
    /// The span's trace (32 hex digits).
    #[arg(long, value_parser = parse_trace_id, value_name = "ID")]
    pub(crate) trace_id: TraceId,
    /// The span (16 hex digits).
    #[arg(long, value_parser = parse_span_id, value_name = "ID")]
    pub(crate) span_id: SpanId,
    /// The span's start, Unix nanoseconds.
    #[arg(long, value_parser = parse_unix_ns, value_name = "NS")]
    pub(crate) start: u64,
    /// The span's end, Unix nanoseconds.
    #[arg(long, value_parser = parse_unix_ns, value_name = "NS")]
    pub(crate) end: u64,
    /// `grafana` (Explore with a Pyroscope data source), `cli` (this tool's `top`), or a URL
    /// with placeholders: {trace_id} {span_id} {start_ns} {end_ns} {start_ms} {end_ms}
    /// {start} {end} (RFC 3339) {service}.
    #[arg(long, default_value = "grafana")]
    pub(crate) template: String,
    /// The service (`service.name`), for the Pyroscope label selector and {service}.
    #[arg(long, default_value = "unknown_service")]
    pub(crate) service: String,
    /// Grafana's base URL.
    #[arg(long, default_value = "http://localhost:3000")]
    pub(crate) grafana_url: String,
    /// The uid of Grafana's Pyroscope data source.
    #[arg(long, default_value = "pyroscope")]
    pub(crate) datasource: String,
    /// The Pyroscope profile type.
    #[arg(long, default_value = "process_cpu:cpu:nanoseconds:cpu:nanoseconds")]
    pub(crate) profile_type: String,
    /// The profiler's window length in seconds (default 60, the profiler's default). Pyroscope
    /// stamps each profile with its window's start, so the `grafana` link's range starts one
    /// window before the span; otherwise the window holding the span's samples falls outside
    /// it (Grafana's own trace-to-profiles links widen the range the same way, by 60 s).
    #[arg(long, default_value_t = 60, value_name = "SECONDS")]
    pub(crate) window_s: u64,
    /// The store directory, for the `cli` template.
    #[arg(long, default_value = "profiles")]
    pub(crate) store: PathBuf,
}

pub(crate) fn run(args: &LinkArgs, json: bool) -> anyhow::Result<()> {
    if args.end < args.start {
        return Err(Usage(format!(
            "--end ({}) is before --start ({}); both are Unix nanoseconds",
            args.end, args.start
        ))
        .into());
    }
    let link = match args.template.as_str() {
        "grafana" => grafana(args),
        "cli" => cli(args),
        t => custom(t, args)?,
    };
    if json {
        outln!(
            "{}",
            serde_json::json!({ "template": args.template, "link": link })
        );
    } else {
        outln!("{link}");
    }
    Ok(())
}

/// Grafana Explore with the Pyroscope data source, filtered to the span (`spanSelector`) from
/// one window before the span's start (where the window holding its first samples is stamped)
/// to its end, in whole milliseconds. With the Pyroscope exporter's default `local_root` span
/// scope, samples carry the local root's id: pass the local root's `--span-id`.
fn grafana(a: &LinkArgs) -> String {
    let from = (a.start / 1_000_000).saturating_sub(a.window_s.saturating_mul(1000));
    let to = a.end.div_ceil(1_000_000);
    let pane = serde_json::json!({
        "span": {
            "datasource": a.datasource,
            "queries": [{
                "refId": "A",
                "datasource": { "type": "grafana-pyroscope-datasource", "uid": a.datasource },
                "queryType": "profile",
                "profileTypeId": a.profile_type,
                "labelSelector": format!("{{service_name=\"{}\"}}", label_value(&a.service)),
                "spanSelector": [a.span_id.to_string()],
                "groupBy": [],
            }],
            "range": { "from": from.to_string(), "to": to.to_string() },
        }
    });
    format!(
        "{}/explore?schemaVersion=1&orgId=1&panes={}",
        a.grafana_url.trim_end_matches('/'),
        percent_encode(&pane.to_string())
    )
}

/// A label value for a selector's double quotes: `\` and `"` escaped with a backslash.
fn label_value(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}

/// This tool's `top` for the span, limited to its time so that few windows are read.
fn cli(a: &LinkArgs) -> String {
    format!(
        "span-profile top {} --span-id {} --since {} --until {}",
        shell_quote(&a.store.to_string_lossy()),
        a.span_id,
        format_rfc3339(a.start),
        format_rfc3339(a.end.saturating_add(1_000_000))
    )
}

fn custom(t: &str, a: &LinkArgs) -> Result<String, Usage> {
    let expected = format!(
        "expected grafana, cli, or a URL with placeholders such as https://example.test/p?span={{span_id}} (placeholders: {})",
        PLACEHOLDERS
            .iter()
            .map(|p| format!("{{{p}}}"))
            .collect::<Vec<_>>()
            .join(" ")
    );
    if !t.contains('{') && !t.contains("://") {
        return Err(Usage(format!("--template {t:?}: {expected}")));
    }
    let mut out = String::new();
    let mut rest = t;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let Some(close) = rest[open..].find('}') else {
            return Err(Usage(format!(
                "--template {t:?} has an unclosed {{; {expected}"
            )));
        };
        let name = &rest[open + 1..open + close];
        let value = match name {
            "trace_id" => a.trace_id.to_string(),
            "span_id" => a.span_id.to_string(),
            "start_ns" => a.start.to_string(),
            "end_ns" => a.end.to_string(),
            "start_ms" => (a.start / 1_000_000).to_string(),
            "end_ms" => a.end.div_ceil(1_000_000).to_string(),
            "start" => format_rfc3339(a.start),
            "end" => format_rfc3339(a.end),
            "service" => percent_encode(&a.service),
            _ => {
                return Err(Usage(format!(
                    "--template has an unknown placeholder {{{name}}}; {expected}"
                )))
            }
        };
        out.push_str(&value);
        rest = &rest[open + close + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// Percent-encodes everything but RFC 3986's unreserved characters.
fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 3);
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Quotes a word for a POSIX shell when it needs it.
fn shell_quote(s: &str) -> String {
    if !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'/' | b'.' | b'_' | b'-'))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}
