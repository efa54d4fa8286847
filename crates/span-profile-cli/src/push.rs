//! `span-profile push DIR URL`: sends what agents left in a spool directory
//! (`SPAN_PROFILE_SPOOL_DIR`) to a receiver, oldest first, once (ADR 0027).
//!
//! It is one more process over the spool: it claims the folders of agents that are gone (a
//! running agent's folder is locked and left to it), sends their entries in order through the
//! same delivery the agents use, and removes each entry once the receiver accepted it.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use span_profile_core::Exporter;
use span_profile_export::delivery::DeliveryStats;
use span_profile_export::otlp::{OtlpConfig, OtlpExporter};
use span_profile_export::pyroscope::{PyroscopeConfig, PyroscopeExporter};
use span_profile_export::{parse_output, redact_url, ExporterEnv, Output as Target};

use crate::Usage;

/// Arguments of `push`.
#[derive(Debug, clap::Args)]
pub(crate) struct PushArgs {
    /// The spool directory (what `SPAN_PROFILE_SPOOL_DIR` was set to).
    pub(crate) dir: PathBuf,
    /// The receiver: `pyroscope+http(s)://host:port` or `otlp+http(s)://host:port`. Headers
    /// and credentials come from the same variables as the agent's.
    pub(crate) url: String,
    /// Give up after this many seconds while the receiver fails.
    #[arg(long, default_value_t = 60, value_name = "SECONDS")]
    pub(crate) timeout: u64,
}

/// What a push did.
#[derive(Debug, serde::Serialize)]
struct Pushed {
    spool: String,
    url: String,
    sent: u64,
    left: u64,
    dropped: u64,
    last_error: Option<String>,
}

/// Runs `push`; exit 0 when the spool is empty afterwards, 4 when entries are left.
pub(crate) fn run(args: &PushArgs, json: bool) -> anyhow::Result<u8> {
    if !args.dir.is_dir() {
        return Err(Usage(format!(
            "{} is not a directory; pass the spool directory the agents used (SPAN_PROFILE_SPOOL_DIR)",
            args.dir.display()
        ))
        .into());
    }
    let dir = args.dir.to_string_lossy().into_owned();
    let env = ExporterEnv::from_process().with("SPAN_PROFILE_SPOOL_DIR", dir.as_str());
    let timeout = Duration::from_secs(args.timeout);
    let shown = redact_url(&args.url);
    let (kind, stats, last_error) = match parse_output(&args.url)? {
        Target::Pyroscope(url) => {
            let e = PyroscopeExporter::new(PyroscopeConfig::from_env(&url, &env)?)?;
            let s = drain(&e, || e.stats().delivery, timeout);
            ("pyroscope", s, e.last_error())
        }
        Target::Otlp(url) => {
            let e = OtlpExporter::new(OtlpConfig::from_env(&url, &env)?)?;
            let s = drain(&e, || e.stats().delivery, timeout);
            ("otlp", s, e.last_error())
        }
        _ => {
            return Err(Usage(format!(
                "push sends a spool to a receiver, not to {shown}; pass pyroscope+http(s)://host:port or otlp+http(s)://host:port"
            ))
            .into())
        }
    };
    let pushed = Pushed {
        spool: args.dir.join(kind).display().to_string(),
        url: shown,
        sent: stats.recovered,
        left: stats.spooled,
        dropped: stats.dropped(),
        last_error: if stats.spooled > 0 || stats.dropped() > 0 {
            last_error
        } else {
            None
        },
    };
    if json {
        outln!("{}", serde_json::to_string(&pushed)?);
    } else {
        outln!(
            "sent {} request(s) from {} to {}; {} left, {} dropped",
            pushed.sent,
            pushed.spool,
            pushed.url,
            pushed.left,
            pushed.dropped
        );
        if let Some(e) = &pushed.last_error {
            outln!("last error: {e}");
        }
    }
    if pushed.left > 0 {
        eprintln!(
            "error: {} request(s) are still in {}; run push again when the receiver answers",
            pushed.left, pushed.spool
        );
        return Ok(crate::EXIT_FAILURE);
    }
    Ok(0)
}

/// Flushes `e` until its spool is empty or `timeout` passed, then shuts it down.
fn drain(e: &dyn Exporter, stats: impl Fn() -> DeliveryStats, timeout: Duration) -> DeliveryStats {
    let deadline = Instant::now() + timeout;
    while stats().spooled > 0 && Instant::now() < deadline {
        // Returns at once while the receiver fails (the worker backs off and retries).
        if e.force_flush().is_err() {
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    let _ = e.shutdown_with_timeout(Duration::from_secs(2));
    stats()
}
