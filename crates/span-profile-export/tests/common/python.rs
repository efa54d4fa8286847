//! Python venvs for the tests that use a real Python package as an independent party.
//!
//! `venv("otlp", &["opentelemetry-proto==1.45.2"], "opentelemetry.proto")` makes
//! `target/venvs/otlp` once (under a lock, since tests run in parallel processes) and returns
//! its interpreter. If pip cannot install the package: with `CI` set the test fails; without
//! it, the test is skipped with a note on stderr.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

pub fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("workspace root")
}

pub fn script(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/python")
        .join(name)
}

fn imports(python: &PathBuf, module: &str) -> bool {
    Command::new(python)
        .args(["-c", &format!("import {module}")])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

pub fn venv(name: &str, packages: &[&str], module: &str) -> Option<PathBuf> {
    let dir = workspace_root().join("target/venvs").join(name);
    let python = dir.join("bin/python");
    if imports(&python, module) {
        return Some(python);
    }
    let lock = workspace_root().join(format!("target/venvs/.{name}.lock"));
    std::fs::create_dir_all(workspace_root().join("target/venvs")).ok();
    let start = Instant::now();
    while std::fs::create_dir(&lock).is_err() {
        if start.elapsed() > Duration::from_secs(300) {
            let _ = std::fs::remove_dir(&lock);
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let result = (|| {
        if imports(&python, module) {
            return Ok(());
        }
        let base = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
        let st = Command::new(&base).args(["-m", "venv"]).arg(&dir).status();
        if !matches!(st, Ok(s) if s.success()) {
            return Err(format!("{base} -m venv {} failed", dir.display()));
        }
        let out = Command::new(dir.join("bin/pip"))
            .args(["install", "-q", "--disable-pip-version-check"])
            .args(packages)
            .output()
            .map_err(|e| format!("pip: {e}"))?;
        if !out.status.success() || !imports(&python, module) {
            return Err(format!(
                "pip install {} failed: {}",
                packages.join(" "),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(())
    })();
    let _ = std::fs::remove_dir(&lock);
    match result {
        Ok(()) => Some(python),
        Err(e) if std::env::var_os("CI").is_some() => panic!("CI needs {name}: {e}"),
        Err(e) => {
            eprintln!("SKIPPED: {e} (set CI=1 to make this a failure)");
            None
        }
    }
}
