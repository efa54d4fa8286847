//! `span-profile run [--output DIR|URL] [--service S] [--rate HZ] -- python app.py ARGS`: starts
//! a program with the agent (ADR 0029).
//!
//! The flags become the agent's own variables (`SPAN_PROFILE_OUTPUT`, `SPAN_PROFILE_SERVICE`,
//! `SPAN_PROFILE_SAMPLE_RATE_HZ`); every other `SPAN_PROFILE_*` and `OTEL_*` variable passes
//! through as it is. The directory of `span_profile`'s `sitecustomize.py` goes first on
//! `PYTHONPATH`, so every Python process the program starts runs it before its own code: it
//! starts the agent, joins the app's TracerProvider and then runs the user's own
//! `sitecustomize`. The program then replaces this process (`exec`), so its exit status, death
//! by a signal included, is this command's.

use std::ffi::{OsStr, OsString};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::Usage;

/// The variable the `--output` flag sets.
pub(crate) const OUTPUT_VAR: &str = "SPAN_PROFILE_OUTPUT";
/// The variable the `--service` flag sets.
pub(crate) const SERVICE_VAR: &str = "SPAN_PROFILE_SERVICE";
/// The variable the `--rate` flag sets.
pub(crate) const RATE_VAR: &str = "SPAN_PROFILE_SAMPLE_RATE_HZ";

/// `span-profile run`'s arguments.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Every SPAN_PROFILE_* and OTEL_* variable is honoured (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES, SPAN_PROFILE_WINDOW_S, ...); a flag wins over its variable. The exit status is the program's."
)]
pub(crate) struct RunArgs {
    /// Where profiles go: a directory, file:///abs/path, otlp+http(s)://host:4318 or
    /// pyroscope+http(s)://host:4040 (sets SPAN_PROFILE_OUTPUT; default ./profiles).
    #[arg(long, value_name = "DIR|URL")]
    output: Option<OsString>,
    /// The service name (sets SPAN_PROFILE_SERVICE; default OTEL_SERVICE_NAME).
    #[arg(long, value_name = "NAME")]
    service: Option<String>,
    /// Samples per second of each thread, 1 to 10000 (sets SPAN_PROFILE_SAMPLE_RATE_HZ;
    /// default 100).
    #[arg(long, value_name = "HZ", value_parser = clap::value_parser!(u32).range(1..=10_000))]
    rate: Option<u32>,
    /// The directory of span_profile's sitecustomize.py (default: found with the program's
    /// Python). Set by the Python package's `span-profile` script.
    #[arg(long, hide = true, value_name = "DIR")]
    bootstrap: Option<PathBuf>,
    /// An interpreter to put before the command (`python -m span_profile run app.py`).
    #[arg(long, hide = true, value_name = "PYTHON")]
    python: Option<OsString>,
    /// The program to run and its arguments, e.g. `python app.py --port 8000`.
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "COMMAND"
    )]
    command: Vec<OsString>,
}

/// Runs the command; returns only if it could not be started.
pub(crate) fn run(args: &RunArgs) -> anyhow::Result<u8> {
    let mut argv: Vec<OsString> = args.python.iter().cloned().collect();
    argv.extend(args.command.iter().cloned());
    let Some((program, rest)) = argv.split_first() else {
        return Err(Usage(
            "span-profile run needs a program to run, e.g. span-profile run -- python app.py"
                .to_string(),
        )
        .into());
    };
    let bootstrap = match &args.bootstrap {
        Some(dir) => dir.clone(),
        None => find_bootstrap(program)?,
    };
    let mut cmd = Command::new(program);
    cmd.args(rest);
    cmd.env(
        "PYTHONPATH",
        python_path(&bootstrap, std::env::var_os("PYTHONPATH"))?,
    );
    if let Some(output) = &args.output {
        cmd.env(OUTPUT_VAR, output);
    }
    if let Some(service) = &args.service {
        cmd.env(SERVICE_VAR, service);
    }
    if let Some(rate) = args.rate {
        cmd.env(RATE_VAR, rate.to_string());
    }
    {
        use std::io::Write as _;
        let _ = std::io::stdout().flush();
    }
    // Returns only on failure.
    let e = cmd.exec();
    let hint = if e.kind() == std::io::ErrorKind::NotFound {
        "; is it installed and on PATH?"
    } else {
        ""
    };
    Err(anyhow::anyhow!(
        "could not start {}: {e}{hint}",
        Path::new(program).display()
    ))
}

/// `PYTHONPATH` with `bootstrap` first (once).
fn python_path(bootstrap: &Path, old: Option<OsString>) -> anyhow::Result<OsString> {
    let mut dirs = vec![bootstrap.to_path_buf()];
    if let Some(old) = old.filter(|o| !o.is_empty()) {
        dirs.extend(std::env::split_paths(&old).filter(|d| d != bootstrap));
    }
    std::env::join_paths(dirs).map_err(|e| {
        anyhow::anyhow!(
            "{} cannot go on PYTHONPATH ({e}); install span_profile in a directory whose path has no ':'",
            bootstrap.display()
        )
    })
}

/// The interpreter that will run the program: the program itself when it is a Python
/// (`python`, `python3.12`, a venv's `bin/python`), else `python3` from PATH.
fn interpreter_of(program: &OsStr) -> &OsStr {
    let name = Path::new(program)
        .file_name()
        .and_then(OsStr::to_str)
        .unwrap_or("");
    if name.starts_with("python") {
        program
    } else {
        OsStr::new("python3")
    }
}

/// Asks the program's Python where the `span_profile` package is, without importing it.
fn find_bootstrap(program: &OsStr) -> anyhow::Result<PathBuf> {
    let python = interpreter_of(program);
    let probe = "import importlib.util as u; s = u.find_spec('span_profile'); \
                 print(s.submodule_search_locations[0] if s else '')";
    let not_found = |why: String| {
        Usage(format!(
            "span_profile is not installed for {} ({why}); pip install span-profile into the environment that runs the app, or run the span-profile script that pip installed there",
            Path::new(python).display()
        ))
    };
    let out = Command::new(python)
        .args(["-c", probe])
        .output()
        .map_err(|e| not_found(e.to_string()))?;
    let dir = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if !out.status.success() || dir.is_empty() {
        return Err(not_found("the module was not found".to_string()).into());
    }
    let bootstrap = Path::new(&dir).join("_bootstrap");
    if !bootstrap.join("sitecustomize.py").is_file() {
        return Err(not_found(format!("{} has no sitecustomize.py", bootstrap.display())).into());
    }
    Ok(bootstrap)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bootstrap_goes_first_on_python_path_once() {
        let b = Path::new("/opt/sp/_bootstrap");
        assert_eq!(
            python_path(b, None).unwrap(),
            OsString::from("/opt/sp/_bootstrap")
        );
        assert_eq!(
            python_path(b, Some("/a:/opt/sp/_bootstrap:/b".into())).unwrap(),
            OsString::from("/opt/sp/_bootstrap:/a:/b")
        );
        assert!(python_path(Path::new("/x:y"), None).is_err());
    }

    #[test]
    fn the_interpreter_is_the_program_when_it_is_a_python() {
        assert_eq!(
            interpreter_of(OsStr::new("/v/bin/python3.12")),
            "/v/bin/python3.12"
        );
        assert_eq!(interpreter_of(OsStr::new("gunicorn")), "python3");
    }
}
