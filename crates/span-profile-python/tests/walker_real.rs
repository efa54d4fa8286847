//! The walker against real CPython 3.9–3.13 interpreters (pyenv), checked against known frames
//! and against `py-spy dump --json --nonblocking` as an independent oracle.
//!
//! A test binary cannot read its own interpreter (it has none), so each test spawns
//! `tests/py/walker_target.py` under one interpreter and reads the child with
//! `ProcessVmReader::for_pid`. A missing interpreter or py-spy skips (with a note) unless `CI`
//! is set, in which case it fails.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::Duration;

use span_profile::walker::testing::Collected;
use span_profile::walker::{
    CpuTimeSource, ProcessVmReader, PythonVersion, PythonWalker, Target, TypeAddresses,
    WalkerConfig,
};
use span_profile_core::{Frame, StackWalker};

fn py_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py")
}

fn in_ci() -> bool {
    std::env::var_os("CI").is_some()
}

/// Skips (returns `None`) or, in CI, fails.
fn missing(what: &str) -> Option<()> {
    assert!(!in_ci(), "{what} is required in CI");
    eprintln!("note: skipping: {what} not found");
    None
}

fn interpreter(full_version: &str) -> Option<PathBuf> {
    let p = span_profile_test::pyenv_versions().join(format!("{full_version}/bin/python"));
    if p.exists() {
        Some(p)
    } else {
        missing(&format!("python {full_version} ({})", p.display()))?;
        None
    }
}

/// py-spy: `$PY_SPY`, a pyenv-installed binary, or `which py-spy`.
fn py_spy() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("PY_SPY") {
        return Some(PathBuf::from(p));
    }
    if let Ok(dir) = std::fs::read_dir(span_profile_test::pyenv_versions()) {
        let mut found: Vec<PathBuf> = dir
            .filter_map(|e| e.ok())
            .map(|e| e.path().join("bin/py-spy"))
            .filter(|p| p.exists())
            .collect();
        found.sort();
        if let Some(p) = found.pop() {
            return Some(p);
        }
    }
    let out = Command::new("which").arg("py-spy").output().ok()?;
    let path = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    if out.status.success() && !path.is_empty() {
        return Some(PathBuf::from(path));
    }
    missing("py-spy")?;
    None
}

/// The child interpreter; killed and reaped on drop.
struct Spawned {
    child: Child,
    stdin: Option<ChildStdin>,
    runtime: u64,
    types: TypeAddresses,
    version: PythonVersion,
    /// name -> (ident, native id)
    threads: HashMap<String, (u64, u32)>,
}

impl Drop for Spawned {
    fn drop(&mut self) {
        drop(self.stdin.take()); // EOF on stdin stops the script
        std::thread::sleep(Duration::from_millis(50));
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn spawn(python: &Path) -> Spawned {
    let mut child = Command::new(python)
        .arg(py_dir().join("walker_target.py"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn python");
    let stdin = child.stdin.take();
    let stdout = child.stdout.take().expect("piped stdout");
    let mut t = Spawned {
        child,
        stdin,
        runtime: 0,
        types: TypeAddresses::default(),
        version: PythonVersion::new(0, 0),
        threads: HashMap::new(),
    };
    let num = |s: Option<&str>| -> u64 { s.and_then(|s| s.parse().ok()).expect("number") };
    for line in BufReader::new(stdout).lines() {
        let line = line.expect("child stdout");
        let mut w = line.split_whitespace();
        match w.next() {
            Some("runtime") => t.runtime = num(w.next()),
            Some("types") => {
                t.types = TypeAddresses {
                    code: num(w.next()),
                    unicode: num(w.next()),
                    bytes: num(w.next()),
                    frame: num(w.next()),
                }
            }
            Some("version") => {
                t.version = PythonVersion::new(num(w.next()) as u8, num(w.next()) as u8)
            }
            Some("thread") => {
                let name = w.next().expect("name").to_owned();
                let ident = num(w.next());
                t.threads.insert(name, (ident, num(w.next()) as u32));
            }
            Some("ready") => return t,
            _ => {}
        }
    }
    panic!("the target exited before it was ready");
}

/// Line numbers of `# MARK:<name>` comments in the target script.
fn marks() -> HashMap<String, u32> {
    let src = std::fs::read_to_string(py_dir().join("walker_target.py")).expect("script");
    src.lines()
        .enumerate()
        .filter_map(|(i, l)| {
            let m = l.split("# MARK:").nth(1)?;
            Some((m.trim().to_owned(), i as u32 + 1))
        })
        .collect()
}

fn stack_of<'c>(
    walker: &mut PythonWalker<ProcessVmReader>,
    c: &'c Collected,
    ident: u64,
) -> (Vec<Frame>, &'c str, bool) {
    let s = c
        .samples
        .iter()
        .find(|s| s.thread == ident)
        .unwrap_or_else(|| panic!("no sample for thread {ident}: {:?}", c.samples));
    assert!(!s.truncated);
    let frames = s.frames.iter().map(|&r| walker.symbolize(r)).collect();
    (frames, s.name.as_str(), s.cpu_ns > 0)
}

/// `py-spy dump --json` stacks by thread id, as (name, file, line), leaf first.
fn py_spy_stacks(py_spy: &Path, python: &Path, pid: u32) -> HashMap<u64, Vec<Frame>> {
    let dump = Command::new(py_spy)
        .args(["dump", "--pid", &pid.to_string(), "--json", "--nonblocking"])
        .output()
        .expect("run py-spy");
    assert!(
        dump.status.success(),
        "py-spy failed: {}",
        String::from_utf8_lossy(&dump.stderr)
    );
    let mut conv = Command::new(python)
        .arg(py_dir().join("walker_pyspy.py"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn converter");
    conv.stdin
        .take()
        .expect("stdin")
        .write_all(&dump.stdout)
        .expect("feed converter");
    let out = conv.wait_with_output().expect("converter output");
    let mut stacks: HashMap<u64, Vec<Frame>> = HashMap::new();
    let mut current = 0u64;
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        if let Some(t) = line.strip_prefix("T ") {
            current = t.trim().parse().expect("thread id");
            stacks.entry(current).or_default();
        } else if let Some(f) = line.strip_prefix("F ") {
            let mut parts = f.split('\t');
            let (name, file, line) = (parts.next(), parts.next(), parts.next());
            let line = line.and_then(|l| l.parse().ok()).unwrap_or(0);
            stacks.entry(current).or_default().push(Frame::new(
                name.unwrap_or(""),
                file.unwrap_or(""),
                line,
            ));
        }
    }
    stacks
}

fn names(frames: &[Frame]) -> Vec<&str> {
    frames.iter().map(|f| f.function.as_str()).collect()
}

fn run(full_version: &str) {
    let Some(python) = interpreter(full_version) else {
        return;
    };
    let target = spawn(&python);
    let pid = target.child.id();
    let m = marks();
    let v = target.version;
    let reader = ProcessVmReader::for_pid(pid).expect("process_vm_readv on the child");
    let config = WalkerConfig::default().with_cpu_time(CpuTimeSource::ProcFs { pid });
    let mut walker = PythonWalker::new(
        reader,
        Target {
            version: v,
            runtime: target.runtime,
            interpreter: 0,
            types: target.types,
        },
        config,
    )
    .expect("walker setup (layout and debug offsets accepted)");
    for (name, &(ident, native)) in &target.threads {
        walker.registry().set_thread_name(ident, name);
        walker.registry().set_native_id(ident, native);
    }
    let (alpha_id, _) = target.threads["alpha-thread"];
    let (burn_id, _) = target.threads["burn-thread"];
    let (main_id, _) = target.threads["MainThread"];

    // "ready" is printed just before the main thread parks: walk until it has.
    let mut first = Collected::default();
    for _ in 0..200 {
        first = Collected::default();
        walker.walk(&mut first);
        let parked = first.samples.iter().any(|s| {
            s.thread == main_id
                && s.frames.iter().any(|&r| {
                    let f = walker.symbolize(r);
                    f.function == "main" && f.line == m["main"]
                })
        });
        if parked {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(first.errors.is_empty(), "{v}: errors {:?}", first.errors);
    // threads: alpha, burn, stdin-watch, main.
    assert_eq!(first.samples.len(), 4, "{v}: {:?}", first.samples);

    // Known frames of the parked thread.
    let (alpha, alpha_name, _) = stack_of(&mut walker, &first, alpha_id);
    assert_eq!(alpha_name, "alpha-thread");
    let q =
        |plain: &str, qual: &str| -> String { if v.minor >= 11 { qual } else { plain }.to_owned() };
    let leaf = &alpha[0];
    assert_eq!(leaf.function, q("wait", "Condition.wait"), "{v}: {alpha:?}");
    assert!(leaf.file.ends_with("threading.py"));
    let at = alpha
        .iter()
        .position(|f| f.function == "gamma")
        .unwrap_or_else(|| panic!("{v}: no gamma in {:?}", names(&alpha)));
    let script = py_dir().join("walker_target.py");
    let script = script.to_str().expect("utf-8 path");
    assert_eq!(alpha[at], Frame::new("gamma", script, m["gamma"]), "{v}");
    assert_eq!(alpha[at + 1], Frame::new("beta", script, m["beta"]), "{v}");
    assert_eq!(
        alpha[at + 2],
        Frame::new("alpha", script, m["alpha"]),
        "{v}"
    );
    assert_eq!(alpha[at - 1].function, q("wait", "Event.wait"), "{v}");
    assert_eq!(
        alpha.last().map(|f| f.function.clone()),
        Some(q("_bootstrap", "Thread._bootstrap"))
    );

    let (main, _, _) = stack_of(&mut walker, &first, main_id);
    let n = main.len();
    assert!(n >= 4, "{v}: {main:?}");
    assert_eq!(
        main[n - 1],
        Frame::new("<module>", script, m["module"]),
        "{v}"
    );
    assert_eq!(main[n - 2], Frame::new("main", script, m["main"]), "{v}");

    let (burn, _, _) = stack_of(&mut walker, &first, burn_id);
    let b = burn
        .iter()
        .find(|f| f.function == "burn")
        .unwrap_or_else(|| panic!("{v}: no burn in {burn:?}"));
    assert!(
        [m["burn_while"], m["burn_body"]].contains(&b.line),
        "{v}: burn at line {}",
        b.line
    );

    // A second tick: burn advanced its CPU clock, the parked thread did not; no new code
    // objects for the parked stacks.
    std::thread::sleep(Duration::from_millis(100));
    let mut second = Collected::default();
    walker.walk(&mut second);
    assert!(second.errors.is_empty(), "{v}: {:?}", second.errors);
    let (_, _, burn_on_cpu) = stack_of(&mut walker, &second, burn_id);
    let (_, _, alpha_on_cpu) = stack_of(&mut walker, &second, alpha_id);
    assert!(burn_on_cpu, "{v}: burn should be on CPU");
    assert!(!alpha_on_cpu, "{v}: the parked thread should be off CPU");
    let stats = walker.counters().snapshot();
    assert!(stats.ticks >= 2);
    assert_eq!(stats.invalid_reads, 0);

    // The oracle: py-spy's view of the parked threads must equal ours, frame for frame.
    let Some(py_spy) = py_spy() else {
        return;
    };
    let theirs = py_spy_stacks(&py_spy, &python, pid);
    let mut now = Collected::default();
    walker.walk(&mut now);
    for ident in [alpha_id, main_id] {
        let (ours, _, _) = stack_of(&mut walker, &now, ident);
        let expected = theirs
            .get(&ident)
            .unwrap_or_else(|| panic!("{v}: py-spy has no thread {ident}: {theirs:?}"));
        assert_eq!(&ours, expected, "{v}: walker vs py-spy for thread {ident}");
    }
    assert!(theirs
        .get(&burn_id)
        .is_some_and(|s| s.iter().any(|f| f.function == "burn")));
    eprintln!("{v}: walker matches py-spy");
}

#[test]
fn cpython_3_9() {
    run("3.9.18");
}

#[test]
fn cpython_3_10() {
    run("3.10.13");
}

#[test]
fn cpython_3_11() {
    run("3.11.7");
}

#[test]
fn cpython_3_12() {
    run("3.12.1");
}

#[test]
fn cpython_3_13() {
    run("3.13.0");
}
