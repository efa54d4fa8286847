//! `span-profile`: questions asked of a span-profile file store, and `span-profile run`, which
//! starts a Python program with the agent. The command is [`main_with_args`]; the `span-profile`
//! binary and the Python package's `span-profile` script (through `span_profile._native`) both
//! call it (ADR 0029).
//!
//! Exit codes: 0 answered; 1 `diff` found a regression; 2 bad arguments; 3 the selection is
//! empty; 4 the store or an output could not be read or written.
#![forbid(unsafe_code)]

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{Parser, Subcommand};
use span_profile_export::store::Store;

/// `println!` that returns [`Output`] instead of panicking when standard output is closed or
/// full. Only inside a function that returns `anyhow::Result`.
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        writeln!($crate::text::Escaping(std::io::stdout().lock()), $($arg)*)
            .map_err($crate::Output)?
    }};
}

/// `print!` with the same error handling as [`outln!`].
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        write!($crate::text::Escaping(std::io::stdout().lock()), $($arg)*)
            .map_err($crate::Output)?
    }};
}

/// `eprintln!` that never panics: a warning that cannot be written (standard error closed, a
/// reader gone, a full disk) is dropped, as there is no one left to tell. Text from the
/// store must go through [`text::Shown`].
macro_rules! errln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!($crate::text::Escaping(std::io::stderr().lock()), $($arg)*);
    }};
}

mod args;
mod compact;
mod diff;
mod export;
mod flame;
mod link;
mod ls;
mod overhead;
mod push;
mod routes;
mod run;
mod select;
mod span_name;
mod spans;
mod suggest;
mod text;
mod top;

/// The environment variable that turns window summaries off when set to anything but `0`
/// (ADR 0006).
const NO_SUMMARY_VAR: &str = "SPAN_PROFILE_NO_SUMMARY";

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

/// Standard output could not be written: a reader that went away (`span-profile spans | head`)
/// or a full disk. A closed pipe ends the command quietly with exit 0, as `head` expects of
/// the commands before it: the reader has what it wanted. Any other error is reported, and
/// the exit code is 4.
#[derive(Debug, thiserror::Error)]
#[error("could not write the output: {0}")]
pub(crate) struct Output(#[from] pub(crate) std::io::Error);

/// Query span-linked profiles in a span-profile file store.
#[derive(Debug, Parser)]
#[command(
    name = "span-profile",
    version,
    about,
    after_help = "Exit codes: 0 answered; 1 diff found a regression; 2 bad arguments; 3 empty selection; 4 the store or an output could not be read or written."
)]
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
    /// What is in a store: services and, under each, versions, environments, instances and
    /// routes, with their window counts and time ranges.
    Ls {
        /// The store directory.
        dir: PathBuf,
        #[command(flatten)]
        args: ls::LsArgs,
    },
    /// Ended spans, slowest first, with their durations and sample counts (with their
    /// descendants, and their own).
    Spans {
        /// The store directory.
        dir: PathBuf,
        #[command(flatten)]
        args: spans::SpansArgs,
    },
    /// Samples and top frames of a span, a trace, a route or a service; with --service alone,
    /// the service's CPU by top-level frame.
    Top {
        /// The store directory.
        dir: PathBuf,
        #[command(flatten)]
        args: top::TopArgs,
    },
    /// The reverse query: which routes produce a frame's CPU samples.
    Routes {
        /// The store directory.
        dir: PathBuf,
        #[command(flatten)]
        args: routes::RoutesArgs,
    },
    /// The post-deploy check: frames whose self share of CPU grew significantly from one
    /// version to the next (exits 1 if any did), improvements, CPU per request by route. With
    /// --span-id or --slowest: one span against the other spans of its name.
    Diff {
        /// The store directory.
        dir: PathBuf,
        #[command(flatten)]
        args: diff::DiffArgs,
    },
    /// An interactive SVG flame graph of a selection.
    Flame {
        /// The store directory.
        dir: PathBuf,
        #[command(flatten)]
        args: flame::FlameArgs,
    },
    /// A selection's samples as a file for other tools: pprof, collapsed stacks or speedscope.
    Export {
        /// The store directory.
        dir: PathBuf,
        #[command(flatten)]
        args: export::ExportArgs,
    },
    /// The URL (or command) that opens one span's profile.
    Link {
        #[command(flatten)]
        args: link::LinkArgs,
    },
    /// The retention policy: roll old windows up into hourly, then daily windows, and delete
    /// what is past the last horizon.
    Compact {
        /// The store directory.
        dir: PathBuf,
        #[command(flatten)]
        args: compact::CompactArgs,
    },
    /// What the agent costs on your workload: runs `python app.py ARGS` alternately without
    /// and with the agent (and peer profilers); exits 1 if the agent went over budget.
    Overhead {
        #[command(flatten)]
        args: overhead::OverheadArgs,
    },
    /// Sends what agents left in a spool directory (SPAN_PROFILE_SPOOL_DIR) to a receiver,
    /// oldest first, once; exits 4 if entries are left.
    Push {
        #[command(flatten)]
        args: push::PushArgs,
    },
    /// Runs a Python program with the agent started before its code:
    /// `span-profile run --output ./profiles -- python app.py ARGS`.
    Run {
        #[command(flatten)]
        args: run::RunArgs,
    },
}

/// Runs the `span-profile` command on `args` (the program name first, as in
/// [`std::env::args_os`]) and returns its exit code. Prints to standard output and standard
/// error; never exits the process (`run` replaces it with the program it starts).
pub fn main_with_args<I, T>(args: I) -> i32
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            // --help and --version are "errors" that print to stdout and exit 0.
            let _ = e.print();
            return e.exit_code();
        }
    };
    i32::from(run_cli(&cli))
}

fn run_cli(cli: &Cli) -> u8 {
    let threads = cli.threads.unwrap_or_else(|| {
        std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
    });
    let json = cli.json;
    // An empty selection that names something the store lacks says so (suggest.rs).
    let named = |windows, route| suggest::Named {
        windows: Some(windows),
        route,
    };
    let result = match &cli.command {
        Command::Ls { dir, args } => with_store(dir, threads, |s| {
            let r = ls::run(s, args, json);
            suggest::explain_empty(s, r, &named(&args.windows, None))
        }),
        Command::Spans { dir, args } => with_store(dir, threads, |s| {
            let r = spans::run(s, args, json);
            suggest::explain_empty(s, r, &named(&args.windows, None))
        }),
        Command::Top { dir, args } => with_store(dir, threads, |s| {
            let (sel, r) = (&args.select, top::run(s, args, json));
            suggest::explain_empty(s, r, &named(&sel.windows, sel.route.as_deref()))
        }),
        Command::Routes { dir, args } => with_store(dir, threads, |s| {
            let r = routes::run(s, args, json);
            suggest::explain_empty(s, r, &named(&args.windows, None))
        }),
        Command::Diff { dir, args } => with_store(dir, threads, |s| {
            let r = diff::run(s, args, json).map(|grew| if grew { EXIT_REGRESSION } else { 0 });
            // diff lists the versions in the store itself when --old or --new has none.
            suggest::explain_empty(s, r, &named(&args.windows, None))
        }),
        Command::Flame { dir, args } => with_store(dir, threads, |s| {
            let (sel, r) = (&args.select, flame::run(s, args, json));
            suggest::explain_empty(s, r, &named(&sel.windows, sel.route.as_deref()))
        }),
        Command::Export { dir, args } => with_store(dir, threads, |s| {
            let (sel, r) = (&args.select, export::run(s, args, json));
            suggest::explain_empty(s, r, &named(&sel.windows, sel.route.as_deref()))
        }),
        Command::Link { args } => link::run(args, json).map(|()| 0),
        Command::Compact { dir, args } => with_store(dir, threads, |s| compact::run(s, args, json)),
        Command::Overhead { args } => overhead::run(args, json),
        Command::Push { args } => push::run(args, json),
        Command::Run { args } => run::run(args),
    };
    let result = result.and_then(|code| {
        use std::io::Write as _;
        std::io::stdout().flush().map_err(Output)?;
        Ok(code)
    });
    match result {
        Ok(code) => code,
        Err(e) => {
            if let Some(Output(io)) = e.downcast_ref::<Output>() {
                if io.kind() == std::io::ErrorKind::BrokenPipe {
                    return 0;
                }
            }
            let code = if e.is::<Empty>() {
                EXIT_EMPTY
            } else if e.is::<Usage>() {
                EXIT_USAGE
            } else {
                EXIT_FAILURE
            };
            errln!("error: {}", text::Shown(&format!("{e:#}")));
            code
        }
    }
}

/// Runs a command over the store at `dir`, then warns about the files it had to skip.
fn with_store<T: IntoExit>(
    dir: &std::path::Path,
    threads: usize,
    f: impl FnOnce(&Store) -> anyhow::Result<T>,
) -> anyhow::Result<u8> {
    if !dir.is_dir() {
        return Err(Usage(format!(
            "{} is not a directory; expected the file store's root (the directory the file exporter writes to)",
            dir.display()
        ))
        .into());
    }
    let summaries_off = std::env::var_os(NO_SUMMARY_VAR).is_some_and(|v| !v.is_empty() && v != "0");
    let s = Store::new(dir)
        .with_threads(threads)
        .with_summaries(!summaries_off);
    let r = f(&s);
    warn_skipped(&s);
    r.map(IntoExit::code)
}

/// Prints the files the store skipped on stderr, each once with its path and reason, and one
/// note for the summaries that could not be used. Paths and reasons are escaped
/// ([`text::Shown`]): a file name is text from the store too.
fn warn_skipped(store: &Store) {
    let bad = store.take_unusable_summaries();
    if !bad.is_empty() {
        errln!(
            "note: {} window summary file(s) in {} could not be used; those windows were decoded instead (the answer is complete)",
            bad.len(),
            text::Shown(&store.dir().display().to_string())
        );
        for e in bad.iter().take(3) {
            errln!("  {}", text::Shown(&e.to_string()));
        }
    }
    let all = store.take_skipped();
    if all.is_empty() {
        return;
    }
    errln!(
        "warning: skipped {} unreadable file(s) in {}; the answer leaves them out and they are left in place (move or delete them once you have looked at them; compact never rolls them up):",
        all.len(),
        text::Shown(&store.dir().display().to_string())
    );
    for s in &all {
        errln!("  {}", text::Shown(&s.error.to_string()));
    }
}

/// Prints `value` as a command's `--json` answer. An object gets a `skipped` list: each file
/// the store skipped so far, with its `path` and `error` (empty if none), so that a machine
/// sees what the answer leaves out. An array (`spans`) is printed as it is, and the warning
/// on stderr is then the only note of skipped files.
pub(crate) fn json_out(store: &Store, value: &impl serde::Serialize) -> anyhow::Result<()> {
    let mut v = serde_json::to_value(value)?;
    if let Some(obj) = v.as_object_mut() {
        let skipped: Vec<_> = store
            .skipped()
            .into_iter()
            .map(|(path, error)| {
                serde_json::json!({ "path": path.to_string_lossy(), "error": error })
            })
            .collect();
        obj.insert("skipped".into(), skipped.into());
    }
    outln!("{}", serde_json::to_string_pretty(&v)?);
    Ok(())
}

/// What a command returns: nothing (exit 0) or an exit code.
trait IntoExit {
    fn code(self) -> u8;
}
impl IntoExit for () {
    fn code(self) -> u8 {
        0
    }
}
impl IntoExit for u8 {
    fn code(self) -> u8 {
        self
    }
}
