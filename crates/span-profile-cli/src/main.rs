//! `span-profile`: questions asked of a span-profile file store.
//!
//! Exit codes: 0 answered; 1 `diff` found a regression; 2 bad arguments; 3 the selection is
//! empty; 4 the store or an output could not be read or written.
#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod args;
mod select;
mod store;
mod top;

/// Exit code when `diff` finds a regression.
const EXIT_REGRESSION: u8 = 1;
/// Exit code for bad arguments (clap uses it too).
const EXIT_USAGE: u8 = 2;
/// Exit code when the selection holds no samples or spans.
const EXIT_EMPTY: u8 = 3;
/// Exit code when the store or an output cannot be read or written.
const EXIT_FAILURE: u8 = 4;

/// An empty selection: reported, and the exit code is 3.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct Empty(pub(crate) String);

/// Bad arguments found after parsing: reported, and the exit code is 2.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct Usage(pub(crate) String);

/// Query span-linked profiles in a span-profile file store.
#[derive(Debug, Parser)]
#[command(name = "span-profile", version, about)]
struct Cli {
    /// Print JSON instead of text.
    #[arg(long, global = true)]
    json: bool,
    /// Threads that decode stored windows (default: the available CPUs).
    #[arg(long, global = true, value_name = "N")]
    threads: Option<usize>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Samples and top frames of a span, a trace, a route or a service; with --service alone,
    /// the service's CPU by top-level frame.
    Top {
        /// The store directory.
        dir: PathBuf,
        #[command(flatten)]
        args: top::TopArgs,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let threads = cli.threads.unwrap_or_else(|| {
        std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
    });
    let result = match &cli.command {
        Command::Top { dir, args } => with_store(dir, threads, |s| top::run(s, args, cli.json)),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            let code = if e.is::<Empty>() {
                EXIT_EMPTY
            } else if e.is::<Usage>() {
                EXIT_USAGE
            } else {
                EXIT_FAILURE
            };
            eprintln!("error: {e:#}");
            ExitCode::from(code)
        }
    }
}

/// Runs a command over the store at `dir`, then warns about the files it had to skip.
fn with_store(
    dir: &std::path::Path,
    threads: usize,
    f: impl FnOnce(&store::Store<'_>) -> anyhow::Result<()>,
) -> anyhow::Result<u8> {
    let s = store::Store::new(dir, threads);
    let r = f(&s);
    s.warn_skipped();
    r.map(|()| 0)
}
